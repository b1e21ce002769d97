# SPDX-License-Identifier: Apache-2.0
# The GPU glue and kernels shared by the cuda and rocm plugins, included by
# plugins/cuda/plugin.mk and plugins/rocm/plugin.mk (each includes it; the
# guard makes the second include a no-op). plugins/shared/ is not a plugin:
# the top-level Makefile builds a plugin only from plugins/<name>/*.c.
#
#   gpu_plugin.c, gpu_plugin.h  the host glue (plain C): availability,
#                               registration, argument unpacking, device hooks
#   gpu_api.h                   the table between the glue and the device code
#   gpu_kernels.cuh             the kernels, one source for nvcc, hipcc and
#                               the host emulator of tests/gpu; it includes
#   gpu_act.cuh, gpu_norm.cuh,  a file for each op family's kernels and
#   gpu_rotary.cuh              launcher,
#   gpu_access.cuh              and how they all read and write elements
#   gpu_compat.cuh              what differs between those three compilers
#   gpu_launch.h                the launch shapes: block, grid, groups per
#                               thread, by regime and SM count
#   gpu_emu.h                   the host emulator's interface, which the kernels
#                               compile against under FLD_GPU_EMULATE (the
#                               emulator's code is the tests', in tests/gpu)
#
# One glue object serves both plugins (and the test fixture of
# tests/gpuplug): each shared object that links it gets its own copy of the
# glue's static state. It is built by the top-level rule for plugin C files.
ifndef FLD_GPU_GLUE_OBJ
FLD_GPU_DIR        := plugins/shared/gpu
FLD_GPU_GLUE_OBJ   := $(OBJ)/plugins/shared/gpu/gpu_plugin.o
# What the device code of either plugin is compiled from, besides its own file:
# every header here (the kernels include gpu_launch.h and gpu_api.h), so
# a change to any of them rebuilds the kernels.
FLD_GPU_DEVICE_DEPS := $(wildcard $(FLD_GPU_DIR)/*.cuh $(FLD_GPU_DIR)/*.h)
endif
