# SPDX-License-Identifier: Apache-2.0
# libFuzzer targets of tests/fuzz/ (see docs/fuzzing.md). Not part of make
# check, which must not need clang.
#
#   make fuzz          build $(B)/fuzz/fuzz_<target> for every target
#   make fuzz-smoke    build, then run every seed and regression input once
#                      through its fuzzer; fails on any crash, leak or UB
#   make fuzz-run FUZZ_TARGET=yaml [FUZZ_TIME=600] [FUZZ_ARGS=...]
#                      fuzz one target for FUZZ_TIME seconds from a copy of its
#                      seeds in $(B)/fuzz/work/<target>/ (crashes land there)
#
# Every source file is compiled again by clang with coverage and sanitizer
# instrumentation into $(B)/fuzz/obj/ and linked statically, so the hidden
# fld__ functions (the parsers behind the public API) are callable.
# tensors_cpu is fuzz_tensors.c with the cpu plugin linked in and registered
# through fld_register_plugin(); it replays the tensors corpus.
FUZZ_CC       ?= clang
FUZZ_SANITIZE ?= address,undefined
FUZZ_TIME     ?= 600
FUZZ_OUT      := $(B)/fuzz
FUZZ_OBJ      := $(FUZZ_OUT)/obj
FUZZ_TARGETS  := yaml env opconfig tensors tensors_cpu
FUZZ_BINS     := $(FUZZ_TARGETS:%=$(FUZZ_OUT)/fuzz_%)
FUZZ_CORPUS_tensors_cpu := tensors

FUZZ_SANFLAGS = -fsanitize=$(FUZZ_SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
# The library's warning flags, without -Werror: the library is kept clean
# under gcc, and a clang-only warning in it must not stop the fuzzers (they
# print). The harnesses themselves build with -Werror.
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread -O1 -g -Iinclude -I$(B)/gen \
  $(filter-out -Werror,$(WARN)) -Wno-unknown-warning-option -MMD -MP \
  $(FUZZ_SANFLAGS) -fsanitize=fuzzer-no-link
FUZZ_CORE_OBJ := $(CORE_SRC:%.c=$(FUZZ_OBJ)/%.o)
FUZZ_CPU_SRC  := $(sort $(wildcard plugins/cpu/*.c))
FUZZ_CPU_OBJ  := $(FUZZ_CPU_SRC:%.c=$(FUZZ_OBJ)/%.o)

.PHONY: fuzz fuzz-smoke fuzz-run fuzz-toolcheck
fuzz: $(FUZZ_BINS)

# One clear line instead of a page of compiler errors when the toolchain is missing.
fuzz-toolcheck:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "fuzz: '$(FUZZ_CC)' not found: the fuzzers need clang with libFuzzer (Debian: apt-get install clang libclang-rt-14-dev)"; exit 1; }
	@printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' | \
	  $(FUZZ_CC) -fsanitize=fuzzer,$(FUZZ_SANITIZE) -x c - -o /dev/null 2>/dev/null || \
	  { echo "fuzz: '$(FUZZ_CC)' cannot link -fsanitize=fuzzer,$(FUZZ_SANITIZE): install its runtime (Debian: libclang-rt-14-dev)"; exit 1; }

$(FUZZ_OBJ)/core/%.o: core/%.c $(B)/gen/fld_paths.h | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEP_CFLAGS) -fvisibility=hidden -DFLD_BUILDING_LIBRARY -c $< -o $@

$(FUZZ_OBJ)/plugins/cpu/%.o: plugins/cpu/%.c | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -fvisibility=hidden -DFLD_IN_TREE $(PLUGIN_CFLAGS_cpu) -c $< -o $@
# The per-ISA flags of plugins/cpu/plugin.mk, for these objects.
ifneq ($(FLD_CPU_AVX2_FLAGS),)
$(FUZZ_OBJ)/plugins/cpu/isa_avx2.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX2_FLAGS)
$(FUZZ_OBJ)/plugins/cpu/isa_avx512.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX512_FLAGS)
$(FUZZ_OBJ)/plugins/cpu/isa_avx512_bf16.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX512_FLAGS) -mavx512bf16
endif

$(FUZZ_OBJ)/tests/fuzz/%.o: tests/fuzz/%.c tests/fuzz/fuzz_common.h | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -Icore -c $< -o $@
$(FUZZ_OBJ)/tests/fuzz/fuzz_tensors_cpu.o: tests/fuzz/fuzz_tensors.c tests/fuzz/fuzz_common.h | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -Icore -DFUZZ_CPU_PLUGIN -c $< -o $@

FUZZ_LINK = $(FUZZ_CC) -fsanitize=fuzzer,$(FUZZ_SANITIZE) -fno-sanitize-recover=all -o $@ \
  $(filter %.o,$^) $(DEP_LIBS) -ldl -lm -pthread
$(FUZZ_OUT)/fuzz_tensors_cpu: $(FUZZ_OBJ)/tests/fuzz/fuzz_tensors_cpu.o $(FUZZ_CORE_OBJ) $(FUZZ_CPU_OBJ)
	$(Q)$(call fld_say,LD,$@)$(FUZZ_LINK)
$(FUZZ_OUT)/fuzz_%: $(FUZZ_OBJ)/tests/fuzz/fuzz_%.o $(FUZZ_CORE_OBJ)
	$(Q)$(call fld_say,LD,$@)$(FUZZ_LINK)

# Each input is a file argument, which libFuzzer runs once and never writes
# back (a corpus directory argument could gain files).
fuzz-smoke: $(FUZZ_BINS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  case $$t in tensors_cpu) c=tensors;; *) c=$$t;; esac; \
	  files=$$(find tests/fuzz/corpus/$$c tests/fuzz/regressions/$$c -type f 2>/dev/null | sort); \
	  if [ -z "$$files" ]; then echo "fuzz-smoke: no inputs for $$t"; exit 1; fi; \
	  n=$$(echo "$$files" | wc -l); \
	  if $(FUZZ_OUT)/fuzz_$$t $$files > $(FUZZ_OUT)/smoke-$$t.log 2>&1; then \
	    echo "fuzz-smoke: $$t: $$n inputs ok"; \
	  else \
	    tail -n 60 $(FUZZ_OUT)/smoke-$$t.log; echo "fuzz-smoke: $$t FAILED (log: $(FUZZ_OUT)/smoke-$$t.log)"; exit 1; \
	  fi; \
	done

fuzz-run: $(FUZZ_BINS)
	@test -n '$(FUZZ_TARGET)' || { echo "fuzz-run: set FUZZ_TARGET to one of: $(FUZZ_TARGETS)"; exit 1; }
	@set -e; t='$(FUZZ_TARGET)'; case $$t in tensors_cpu) c=tensors;; *) c=$$t;; esac; \
	  w=$(FUZZ_OUT)/work/$$t; mkdir -p $$w/corpus; cp -n tests/fuzz/corpus/$$c/* $$w/corpus/ 2>/dev/null || true; \
	  dict=; test -f tests/fuzz/$$c.dict && dict=-dict=tests/fuzz/$$c.dict; \
	  echo "fuzz-run: $(FUZZ_OUT)/fuzz_$$t $$dict -max_total_time=$(FUZZ_TIME) -artifact_prefix=$$w/ $(FUZZ_ARGS) $$w/corpus"; \
	  $(FUZZ_OUT)/fuzz_$$t $$dict -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
	    -artifact_prefix=$$w/ $(FUZZ_ARGS) $$w/corpus 2>&1 | tee $$w/run.log

-include $(wildcard $(FUZZ_OBJ)/*/*.d $(FUZZ_OBJ)/*/*/*.d $(FUZZ_OBJ)/*/*/*/*.d)
