# SPDX-License-Identifier: Apache-2.0
# Harness of the activation bodies and the isa_<name>.c files.
# Standalone: no library.
#   make -f act.mk check      build every variant (avx512_bf16 compile-only unless the
#                             CPU has it), run the tests on x86-64 and under qemu (arm64)
#   make -f act.mk accuracy   the vmath accuracy table (every 17th float)
#   make -f act.mk bench      speed table (STREAM triad, 4096 x 4096 GB/s, 1-row us)
# Objects go to $(B) (default act-build).
B        ?= build/act
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
# The per-file flags of plugins/cpu/plugin.mk.
F_portable    :=
F_avx2        := -mavx2 -mfma -mf16c
F_avx512      := -mavx512f -mavx512bw -mavx512vl -mavx512dq $(F_avx2)
F_avx512_bf16 := $(F_avx512) -mavx512bf16
DEPS     := vmath.h body_activation.h body_norm.h body_rotary.h act_harness.h simd_portable.h \
            simd_avx2.h simd_avx512.h simd_neon.h $(MAIN)/plugins/cpu/cpu.h

X86_ISAS := portable avx2 avx512 avx512_bf16
# exact.o: the scalar paths the bodies call (16-bit activation tables, rare norm rows).
X86_OBJS := $(X86_ISAS:%=$(B)/isa_%.o) $(X86_ISAS:%=$(B)/probe_%.o) $(B)/exact.o
ARM_OBJS := $(B)/arm/isa_portable.o $(B)/arm/isa_neon.o $(B)/arm/probe_portable.o \
            $(B)/arm/probe_neon.o $(B)/arm/act_stream.o $(B)/arm/exact.o

.PHONY: all check check-x86 check-arm accuracy bench
all: $(B)/act_test $(B)/arm/act_test

$(B) $(B)/arm $(B)/xinc:
	mkdir -p $@

# The cross compiler does not search /usr/include: give it dlpack only.
$(B)/xinc/dlpack: | $(B)/xinc
	ln -sfn /usr/include/dlpack $@

$(B)/isa_%.o: isa_%.c $(DEPS) | $(B)
	$(CC) $(BASE) -fPIC $(F_$*) -c $< -o $@
$(B)/probe_%.o: act_probe.c $(DEPS) | $(B)
	$(CC) $(BASE) $(F_$*) $(if $(filter avx512_bf16,$*),-DFLD_SIMD_AVX512_BF16) \
	    -DAP_LAYER='"simd_$(if $(filter avx512_bf16,$*),avx512,$*).h"' -DAP_NAME=act_probe_$* \
	    -c $< -o $@
$(B)/exact.o: exact.c $(DEPS) | $(B)
	$(CC) $(BASE) -c $< -o $@
$(B)/act_test.o: act_test.c $(DEPS) | $(B)
	$(CC) $(BASE) -c $< -o $@
# STREAM triad: -O3 with AVX2, which every x86-64 this harness measures has (AVX-512 would stop it
# on an AVX2-only CPU; the triad is bound by memory, not by the vector width).
$(B)/act_stream.o: act_stream.c | $(B)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(INC) -O3 $(F_avx2) -c $< -o $@

$(B)/act_test: $(B)/act_test.o $(B)/act_stream.o $(X86_OBJS)
	$(CC) $^ -o $@ -lm -pthread

XBASE = $(BASE) -isystem $(B)/xinc
$(B)/arm/isa_%.o: isa_%.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -fPIC -c $< -o $@
$(B)/arm/probe_%.o: act_probe.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -DAP_LAYER='"simd_$*.h"' -DAP_NAME=act_probe_$* -c $< -o $@
$(B)/arm/exact.o: exact.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -c $< -o $@
$(B)/arm/act_stream.o: act_stream.c $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -O3 -c $< -o $@
$(B)/arm/act_test.o: act_test.c $(DEPS) $(B)/xinc/dlpack | $(B)/arm
	$(XCC) $(XBASE) -c $< -o $@
$(B)/arm/act_test: $(B)/arm/act_test.o $(ARM_OBJS)
	$(XCC) -static $^ -o $@ -lm -pthread

check: check-x86 check-arm
check-x86: $(B)/act_test
	./$(B)/act_test
check-arm: $(B)/arm/act_test
	$(QEMU) ./$(B)/arm/act_test --quick

accuracy: $(B)/act_test
	./$(B)/act_test --accuracy 17

bench: $(B)/act_test
	./$(B)/act_test --bench
