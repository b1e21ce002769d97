# SPDX-License-Identifier: Apache-2.0
# Harness of the norm and rotary bodies. Standalone: no library.
#   make -f normrot.mk check   build every variant, run the tests (x86-64 natively, arm64 under qemu)
#   make -f normrot.mk bench   speed table (STREAM triad, 4096x4096 GB/s, 1x4096 us)
#   make -f normrot.mk check-isa   the same tests on the real isa_<name>.c files (all bodies)
# Objects go to $(B) (default nr-build).
B        ?= build/nr
MAIN     ?= $(abspath ../..)
CC       ?= gcc
XCC      ?= aarch64-linux-gnu-gcc
QEMU     ?= qemu-aarch64
CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# The kernels, the vector layer and cpu.h come from plugins/cpu (vpath).
INC      := -I$(MAIN)/plugins/cpu -I$(MAIN)/include -I.
vpath %.c $(MAIN)/plugins/cpu
vpath %.h $(MAIN)/plugins/cpu
BASE     := -std=c11 -D_GNU_SOURCE $(WARN) $(INC) $(CFLAGS)
F_AVX2   := -mavx2 -mfma -mf16c
F_AVX512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq $(F_AVX2)
F_BF16   := $(F_AVX512) -mavx512bf16
DEPS     := body_norm.h body_rotary.h nr_harness.h simd_portable.h simd_avx2.h simd_avx512.h \
            simd_neon.h $(MAIN)/plugins/cpu/cpu.h

# exact.o: the scalar paths the bodies call (rare norm rows, 16-bit activation tables).
X86_OBJS := $(B)/var_portable.o $(B)/var_avx2.o $(B)/var_avx512.o $(B)/var_avx512_bf16.o $(B)/nr_select.o \
            $(B)/exact.o
ARM_OBJS := $(B)/arm/var_portable.o $(B)/arm/var_neon.o $(B)/arm/nr_select.o $(B)/arm/exact.o

.PHONY: all check check-x86 check-arm check-isa bench clean-nr
all: $(B)/nr_test $(B)/nr_bench $(B)/arm/nr_test

$(B) $(B)/arm $(B)/xinc:
	mkdir -p $@

# The cross compiler does not search /usr/include: give it dlpack only.
$(B)/xinc/dlpack: | $(B)/xinc
	ln -sfn /usr/include/dlpack $@

var = -DNR_LAYER='"simd_$(1).h"' -DNR_NAME=nr_variant_$(2) -DNR_STR='"$(2)"'

$(B)/var_portable.o: nr_variant.c $(DEPS) | $(B)
	$(CC) $(BASE) $(call var,portable,portable) -c $< -o $@
$(B)/var_avx2.o: nr_variant.c $(DEPS) | $(B)
	$(CC) $(BASE) $(F_AVX2) $(call var,avx2,avx2) -c $< -o $@
$(B)/var_avx512.o: nr_variant.c $(DEPS) | $(B)
	$(CC) $(BASE) $(F_AVX512) $(call var,avx512,avx512) -c $< -o $@
$(B)/var_avx512_bf16.o: nr_variant.c $(DEPS) | $(B)
	$(CC) $(BASE) $(F_BF16) -DFLD_SIMD_AVX512_BF16 $(call var,avx512,avx512_bf16) -c $< -o $@
$(B)/nr_select.o: nr_select.c $(DEPS) | $(B)
	$(CC) $(BASE) -c $< -o $@
$(B)/exact.o: exact.c $(DEPS) | $(B)
	$(CC) $(BASE) -c $< -o $@
$(B)/nr_test.o: nr_test.c $(DEPS) | $(B)
	$(CC) $(BASE) -c $< -o $@
$(B)/nr_bench.o: nr_bench.c $(DEPS) | $(B)
	$(CC) $(BASE) -c $< -o $@
# STREAM triad: -O3 with AVX2 (as act.mk's: it runs on AVX2-only CPUs too).
$(B)/nr_stream.o: nr_stream.c | $(B)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O3 $(F_AVX2) -c $< -o $@

$(B)/nr_test: $(B)/nr_test.o $(X86_OBJS)
	$(CC) $^ -o $@ -lm -pthread
$(B)/nr_bench: $(B)/nr_bench.o $(B)/nr_stream.o $(X86_OBJS)
	$(CC) $^ -o $@ -lm -pthread

XBASE = $(BASE) -isystem $(B)/xinc
$(B)/arm/var_portable.o: nr_variant.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) $(call var,portable,portable) -c $< -o $@
$(B)/arm/var_neon.o: nr_variant.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) $(call var,neon,neon) -c $< -o $@
$(B)/arm/nr_select.o: nr_select.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -c $< -o $@
$(B)/arm/exact.o: exact.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -c $< -o $@
$(B)/arm/nr_test.o: nr_test.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -c $< -o $@
$(B)/arm/nr_test: $(B)/arm/nr_test.o $(ARM_OBJS)
	$(XCC) -static $^ -o $@ -lm -pthread

check: check-x86 check-arm
check-x86: $(B)/nr_test
	./$(B)/nr_test
check-arm: $(B)/arm/nr_test
	$(QEMU) ./$(B)/arm/nr_test --quick

# The real variants: isa_<name>.c with the per-file flags of plugins/cpu/plugin.mk.
ISA_DEPS := $(DEPS) vmath.h body_activation.h
F_isa_portable    :=
F_isa_avx2        := $(F_AVX2)
F_isa_avx512      := $(F_AVX512)
F_isa_avx512_bf16 := $(F_BF16)
$(B)/isa $(B)/arm/isa:
	mkdir -p $@
$(B)/isa/%.o: %.c $(ISA_DEPS) | $(B)/isa
	$(CC) $(BASE) $(F_$*) -c $< -o $@
$(B)/isa/nr_select.o: nr_select.c $(DEPS) | $(B)/isa
	$(CC) $(BASE) -DNR_REAL_ISA -c $< -o $@
$(B)/isa/nr_test: $(B)/nr_test.o $(B)/isa/nr_select.o $(B)/isa/isa_portable.o $(B)/isa/isa_avx2.o \
                  $(B)/isa/isa_avx512.o $(B)/isa/isa_avx512_bf16.o $(B)/isa/exact.o
	$(CC) $^ -o $@ -lm -pthread
$(B)/arm/isa/%.o: %.c $(ISA_DEPS) $(B)/xinc/dlpack | $(B)/arm/isa
	$(XCC) $(XBASE) -c $< -o $@
$(B)/arm/isa/nr_select.o: nr_select.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm/isa
	$(XCC) $(XBASE) -DNR_REAL_ISA -c $< -o $@
$(B)/arm/isa/nr_test: $(B)/arm/nr_test.o $(B)/arm/isa/nr_select.o $(B)/arm/isa/isa_portable.o \
                      $(B)/arm/isa/isa_neon.o $(B)/arm/isa/exact.o
	$(XCC) -static $^ -o $@ -lm -pthread
check-isa: $(B)/isa/nr_test $(B)/arm/isa/nr_test
	./$(B)/isa/nr_test --quick
	$(QEMU) ./$(B)/arm/isa/nr_test --quick

bench: $(B)/nr_bench
	./$(B)/nr_bench

clean-nr:
	rm -rf $(B)
