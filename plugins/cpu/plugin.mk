# SPDX-License-Identifier: Apache-2.0
# The cpu plugin's build flags, included by the top-level Makefile.
# hwloc gives the topology (NUMA nodes, cores, cache sizes); pthreads the pool.
PLUGIN_CFLAGS_cpu = $(shell $(PKG_CONFIG) --cflags hwloc 2>/dev/null)
PLUGIN_LIBS_cpu = $(shell $(PKG_CONFIG) --libs hwloc 2>/dev/null)

# Each instruction-set variant isa_<name>.c is compiled for its own
# instructions, and only it: isa.c runs a variant only where the CPU and the
# OS support it, so no other file may let the compiler use them. These are
# target-specific appends on the variant objects. The files compile to
# nothing on other architectures, where the -m flags are left out.
FLD_CPU_MACHINE := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq ($(filter x86_64-%,$(FLD_CPU_MACHINE)),)
FLD_CPU_AVX2_FLAGS := -mavx2 -mfma -mf16c
FLD_CPU_AVX512_FLAGS := $(FLD_CPU_AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq
$(OBJ)/plugins/cpu/isa_avx2.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX2_FLAGS)
$(OBJ)/plugins/cpu/isa_avx512.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX512_FLAGS)
$(OBJ)/plugins/cpu/isa_avx512_bf16.o: PLUGIN_CFLAGS_cpu += $(FLD_CPU_AVX512_FLAGS) -mavx512bf16
endif
