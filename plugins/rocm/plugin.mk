# The rocm plugin's build, included by the top-level Makefile.
#
# fld-rocm.so is plain C (rocm_plugin.c and the glue shared with CUDA,
# plugins/cuda/gpu_plugin.c) and does not link the HIP runtime. The kernels
# (hip_kernels.hip) are built by hipcc into libfld-rocm-hip.so, installed
# next to it, which fld-rocm.so dlopens at load: a machine without the ROCm
# runtime gets an unavailable plugin with the loader's reason, not a
# rejected one.
#
# hipcc is $(HIPCC) when set, else /opt/rocm/bin/hipcc, else hipcc in PATH
# (Debian's package). ROCM_ARCHS lists the GPU architectures; the default is
# what Debian's hipcc 5.2 can target (it has no gfx940+). HIP_PLATFORM=amd is
# set for every hipcc call: Debian's hipcc picks the nvidia platform (and
# hands the flags to nvcc, which rejects --offload-arch) when nvcc is in PATH.

ifneq ($(HIPCC),)
FLD_HIPCC := $(shell command -v '$(HIPCC)' 2>/dev/null)
else ifneq ($(wildcard /opt/rocm/bin/hipcc),)
FLD_HIPCC := /opt/rocm/bin/hipcc
else
FLD_HIPCC := $(shell command -v hipcc 2>/dev/null)
endif

# Named here whether or not hipcc is found, so that `make uninstall` removes it.
PLUGIN_EXTRA_rocm := $(PLUGOUT)/libfld-rocm-hip.so

ifeq ($(FLD_HIPCC),)
PLUGIN_SKIP_rocm := hipcc not found (set HIPCC= or install ROCm, or Debian's hipcc and libamdhip64-dev)
else ifeq ($(wildcard plugins/rocm/hip_kernels.hip),)
PLUGIN_SKIP_rocm := plugins/rocm/hip_kernels.hip is missing from the source tree
else
ROCM_ARCHS ?= gfx908 gfx90a gfx1030
FLD_HIPCC_FLAGS := -O3 -std=c++17 -fPIC -fvisibility=hidden -Iinclude -I$(B)/gen -Iplugins/cuda \
  -Wall -Wextra -Werror $(foreach a,$(ROCM_ARCHS),--offload-arch=$(a))
PLUGIN_OBJS_rocm := $(OBJ)/plugins/rocm/gpu_plugin.o
PLUGIN_LIBS_rocm := -ldl
# A ROCm install under /opt/rocm is not on the loader's path by default.
fld_comma := ,
FLD_HIP_LIBDIR := $(abspath $(dir $(realpath $(FLD_HIPCC)))../lib)
FLD_HIP_RPATH := $(if $(filter /usr/lib%,$(FLD_HIP_LIBDIR)),,$(if $(wildcard \
  $(FLD_HIP_LIBDIR)/libamdhip64.so*),-Wl$(fld_comma)-rpath$(fld_comma)$(FLD_HIP_LIBDIR)))

$(OBJ)/plugins/rocm/gpu_plugin.o: plugins/cuda/gpu_plugin.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -DFLD_IN_TREE $(PLUGIN_CFLAGS_rocm) -c $< -o $@

$(PLUGOUT)/libfld-rocm-hip.so: plugins/rocm/hip_kernels.hip $(wildcard plugins/cuda/*.cuh plugins/rocm/*.cuh) \
    plugins/cuda/gpu_api.h
	@mkdir -p $(@D)
	$(Q)$(call fld_say,HIPCC,$<)HIP_PLATFORM=amd $(FLD_HIPCC) $(FLD_HIPCC_FLAGS) -shared -o $@ $< $(FLD_HIP_RPATH)
endif
