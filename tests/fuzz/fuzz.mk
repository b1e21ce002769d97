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
# through fld_register_plugin(); tensors_gpu is fuzz_tensors.c with the GPU
# plugins' glue over the GPU emulator (the fixture plugin of tests/gpuplug,
# its C++ built by clang++). Both replay the tensors corpus.
FUZZ_CC       ?= clang
FUZZ_SANITIZE ?= address,undefined
FUZZ_TIME     ?= 600
FUZZ_OUT      := $(B)/fuzz
FUZZ_OBJ      := $(FUZZ_OUT)/obj
FUZZ_CXX      ?= clang++
FUZZ_TARGETS  := yaml env opconfig signature tensors tensors_cpu tensors_gpu
FUZZ_BINS     := $(FUZZ_TARGETS:%=$(FUZZ_OUT)/fuzz_%)
# The cpu plugin's variants, best first (plugins/cpu/isa.c), for fuzz-smoke.
ifneq ($(filter x86_64-%,$(FLD_CPU_MACHINE)),)
FUZZ_CPU_ISAS ?= avx512_bf16 avx512 avx2 portable
else ifneq ($(filter aarch64-%,$(FLD_CPU_MACHINE)),)
FUZZ_CPU_ISAS ?= neon portable
else
FUZZ_CPU_ISAS ?= portable
endif

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
# tensors_gpu: the glue (C), the fixture plugin's registration (C) and the
# emulator with every kernel of plugins/shared/gpu (C++).
FUZZ_GPU_OBJ  := $(FUZZ_OBJ)/plugins/shared/gpu/gpu_plugin.o $(FUZZ_OBJ)/tests/gpuplug/fakecuda.o \
  $(FUZZ_OBJ)/tests/gpu/emu.o $(FUZZ_OBJ)/tests/gpu/emu_api.o
FUZZ_COVERAGE = -fsanitize=fuzzer-no-link
FUZZ_CXXFLAGS = -std=c++17 -pthread -O1 -g -DFLD_GPU_EMULATE -Iinclude -Iplugins/shared/gpu -Itests \
  -Wall -Wextra -Werror -MMD -MP $(FUZZ_SANFLAGS) $(FUZZ_COVERAGE)
# The emulator's scheduler is the harness, not what is fuzzed: it gives the
# fuzzer no coverage feedback (its traced comparisons were most of a
# thousand-row input's time, and its paths say nothing of the kernels');
# ASan and UBSan still check it. The kernels (emu_api.o) keep theirs.
$(FUZZ_OBJ)/tests/gpu/emu.o: FUZZ_COVERAGE =

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
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) $(CORE_INCLUDES) $(DEP_CFLAGS) -fvisibility=hidden -DFLD_BUILDING_LIBRARY -c $< -o $@

$(FUZZ_OBJ)/plugins/shared/gpu/%.o: plugins/shared/gpu/%.c | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -fvisibility=hidden -DFLD_IN_TREE -c $< -o $@
$(FUZZ_OBJ)/tests/gpuplug/%.o: tests/gpuplug/%.c | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -c $< -o $@
$(FUZZ_OBJ)/tests/gpu/%.o: tests/gpu/%.cc | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CXX,$<)$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -c $< -o $@

$(FUZZ_OBJ)/plugins/cpu/%.o: plugins/cpu/%.c | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -fvisibility=hidden -DFLD_IN_TREE $(PLUGIN_CFLAGS_cpu) -c $< -o $@
# The kernel-variant files (plugins/cpu/isa_*.c: every kernel body, each
# dtype and mode combination always-inlined into a few large functions) are
# nearly all of the fuzz build's time, and UBSan's pointer-overflow check,
# on every element address the bodies compute, was most of theirs: with its
# report as a call to the UBSan runtime, clang -O1 spent over half the time
# of these files in code generation of those calls. FUZZ_KERNEL_CFLAGS makes
# that one check a trap instruction in these files: it is still checked on
# every address, and a violation still stops the fuzzer with the input
# saved, but its report is AddressSanitizer's "ILL" with the stack down to
# the check's file:line (fuzz_tensors.c sets handle_sigill=1) instead of
# UBSan's sentence. Every other check, ASan and
# the fuzzer's coverage are as in every other file. FUZZ_KERNEL_CFLAGS= (empty)
# restores the UBSan report (about twice the build time of these files).
FUZZ_KERNEL_CFLAGS ?= -fsanitize-trap=pointer-overflow
$(FUZZ_OBJ)/plugins/cpu/isa_%.o: FUZZ_CFLAGS += $(FUZZ_KERNEL_CFLAGS)
# The per-ISA flags of plugins/cpu/plugin.mk, for these objects.
ifneq ($(FLD_CPU_AVX2_FLAGS),)
$(FUZZ_OBJ)/plugins/cpu/isa_avx2.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX2_FLAGS)
$(FUZZ_OBJ)/plugins/cpu/isa_avx512.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX512_FLAGS)
$(FUZZ_OBJ)/plugins/cpu/isa_avx512_bf16.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX512_FLAGS) -mavx512bf16
endif

$(FUZZ_OBJ)/tests/fuzz/%.o: tests/fuzz/%.c tests/fuzz/fuzz_common.h | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror $(CORE_INCLUDES) -c $< -o $@
$(FUZZ_OBJ)/tests/fuzz/fuzz_tensors_cpu.o: tests/fuzz/fuzz_tensors.c tests/fuzz/fuzz_common.h | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror $(CORE_INCLUDES) -DFUZZ_CPU_PLUGIN -c $< -o $@
$(FUZZ_OBJ)/tests/fuzz/fuzz_tensors_gpu.o: tests/fuzz/fuzz_tensors.c tests/fuzz/fuzz_common.h | fuzz-toolcheck
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror $(CORE_INCLUDES) -DFUZZ_GPU_PLUGIN -c $< -o $@

# The link, driven by $(1): clang, or clang++ for a target with C++ objects
# (it adds the C++ runtime and UBSan's C++ checks' runtime).
fuzz_link = $(1) -fsanitize=fuzzer,$(FUZZ_SANITIZE) -fno-sanitize-recover=all -o $@ \
  $(filter %.o,$^) $(DEP_LIBS) -ldl -lm -pthread
$(FUZZ_OUT)/fuzz_tensors_cpu: $(FUZZ_OBJ)/tests/fuzz/fuzz_tensors_cpu.o $(FUZZ_CORE_OBJ) $(FUZZ_CPU_OBJ)
	$(Q)$(call fld_say,LD,$@)$(call fuzz_link,$(FUZZ_CC))
$(FUZZ_OUT)/fuzz_tensors_gpu: $(FUZZ_OBJ)/tests/fuzz/fuzz_tensors_gpu.o $(FUZZ_CORE_OBJ) $(FUZZ_GPU_OBJ)
	$(Q)$(call fld_say,LD,$@)$(call fuzz_link,$(FUZZ_CXX))
$(FUZZ_OUT)/fuzz_%: $(FUZZ_OBJ)/tests/fuzz/fuzz_%.o $(FUZZ_CORE_OBJ)
	$(Q)$(call fld_say,LD,$@)$(call fuzz_link,$(FUZZ_CC))

# Each input is a file argument, which libFuzzer runs once and never writes
# back (a corpus directory argument could gain files). tensors_cpu replays
# its inputs once per variant of the cpu plugin (VLLM_FL_CPU_ISA caps the
# choice, so every variant this CPU runs is exercised; a cap above what the
# CPU has runs the best one it does have again). A few seconds each.
fuzz-smoke: $(FUZZ_BINS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  case $$t in tensors_cpu) c=tensors; isas='$(FUZZ_CPU_ISAS)';; tensors_gpu) c=tensors; isas=-;; \
	    *) c=$$t; isas=-;; esac; \
	  files=$$(find tests/fuzz/corpus/$$c tests/fuzz/regressions/$$c -type f 2>/dev/null | sort); \
	  if [ -z "$$files" ]; then echo "fuzz-smoke: no inputs for $$t"; exit 1; fi; \
	  n=$$(echo "$$files" | wc -l); \
	  for isa in $$isas; do \
	    if [ "$$isa" = - ]; then name=$$t; log=$(FUZZ_OUT)/smoke-$$t.log; set -- env; \
	    else name="$$t (VLLM_FL_CPU_ISA=$$isa)"; log=$(FUZZ_OUT)/smoke-$$t-$$isa.log; set -- env VLLM_FL_CPU_ISA=$$isa; fi; \
	    if "$$@" $(FUZZ_OUT)/fuzz_$$t $$files > $$log 2>&1; then \
	      echo "fuzz-smoke: $$name: $$n inputs ok"; \
	    else \
	      tail -n 60 $$log; echo "fuzz-smoke: $$name FAILED (log: $$log)"; exit 1; \
	    fi; \
	  done; \
	done

fuzz-run: $(FUZZ_BINS)
	@test -n '$(FUZZ_TARGET)' || { echo "fuzz-run: set FUZZ_TARGET to one of: $(FUZZ_TARGETS)"; exit 1; }
	@set -e; t='$(FUZZ_TARGET)'; case $$t in tensors_*) c=tensors;; *) c=$$t;; esac; \
	  w=$(FUZZ_OUT)/work/$$t; mkdir -p $$w/corpus; cp -n tests/fuzz/corpus/$$c/* $$w/corpus/ 2>/dev/null || true; \
	  dict=; test -f tests/fuzz/$$c.dict && dict=-dict=tests/fuzz/$$c.dict; \
	  echo "fuzz-run: $(FUZZ_OUT)/fuzz_$$t $$dict -max_total_time=$(FUZZ_TIME) -artifact_prefix=$$w/ $(FUZZ_ARGS) $$w/corpus"; \
	  $(FUZZ_OUT)/fuzz_$$t $$dict -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
	    -artifact_prefix=$$w/ $(FUZZ_ARGS) $$w/corpus 2>&1 | tee $$w/run.log

-include $(wildcard $(FUZZ_OBJ)/*/*.d $(FUZZ_OBJ)/*/*/*.d $(FUZZ_OBJ)/*/*/*/*.d)
