# SPDX-License-Identifier: Apache-2.0
# The rocm plugin's build, included by the top-level Makefile.
#
# fld-rocm.so is plain C (rocm_plugin.c and the GPU glue shared with cuda,
# plugins/shared/gpu/gpu_plugin.c; see gpu.mk there) and does not link the
# HIP runtime. The kernels (hip_kernels.hip over
# plugins/shared/gpu/gpu_kernels.cuh) are compiled by hipcc and linked into
# libfld-rocm-hip.so, installed next to it, without the HIP runtime either
# (its HIP symbols stay undefined): fld-rocm.so opens the newest
# libamdhip64.so.N present on first use, then this library. So one build
# loads on ROCm 5, 6 or 7, and a machine without ROCm gets an unavailable
# plugin with the loader's reason.
#
# hipcc is $(HIPCC) when set, else /opt/rocm/bin/hipcc, else hipcc in PATH
# (Debian's package). HIP_PLATFORM=amd is set for every hipcc call: Debian's
# hipcc picks the nvidia platform (and hands the flags to nvcc, which rejects
# --offload-arch) when nvcc is in PATH.
#
# GPU architectures: ROCM_ARCHS when set; else every one of
#   gfx908 (MI100)  gfx90a (MI200)  gfx942 (MI300)  gfx950 (MI350)
#   gfx1030 (RDNA2)  gfx1100 (RDNA3)  gfx1200 (RDNA4)
# that this hipcc can target, asked once per hipcc and remembered in
# $(B)/gen/rocm_archs.mk (Debian's hipcc 5.2: gfx908 gfx90a gfx1030 only; a
# ROCm 6.x hipcc adds gfx942 and gfx1100).

include plugins/shared/gpu/gpu.mk

ifneq ($(HIPCC),)
FLD_HIPCC := $(shell command -v '$(HIPCC)' 2>/dev/null)
else ifneq ($(wildcard /opt/rocm/bin/hipcc),)
FLD_HIPCC := /opt/rocm/bin/hipcc
else
FLD_HIPCC := $(shell command -v hipcc 2>/dev/null)
endif

# Named here whether or not hipcc is found, so that `make uninstall` removes it.
PLUGIN_EXTRA_rocm := $(PLUGOUT)/libfld-rocm-hip.so

ifneq ($(PLUGIN_SKIP_rocm),)
# Given on the command line (python/setup.py: no GPU of this kind here):
# the plugin is skipped with that reason and nothing below is probed.
else ifeq ($(FLD_HIPCC),)
PLUGIN_SKIP_rocm := hipcc not found (set HIPCC= or install ROCm, or Debian's hipcc and libamdhip64-dev)
else ifeq ($(wildcard plugins/rocm/hip_kernels.hip),)
PLUGIN_SKIP_rocm := plugins/rocm/hip_kernels.hip is missing from the source tree
else
FLD_ROCM_CANDIDATES := gfx908 gfx90a gfx942 gfx950 gfx1030 gfx1100 gfx1200
FLD_ROCM_PROBE := $(B)/gen/rocm_archs.mk
FLD_ROCM_AUTO := $(if $(ROCM_ARCHS),,yes)
ifeq ($(FLD_ROCM_AUTO),yes)
ifeq ($(filter clean format lint deps uninstall,$(MAKECMDGOALS)),)
# Regenerated when hipcc changes (its real path is a prerequisite); make
# reads it again after writing it.
-include $(FLD_ROCM_PROBE)
endif
ROCM_ARCHS = $(FLD_ROCM_PROBED_ARCHS)
endif
$(FLD_ROCM_PROBE): $(realpath $(FLD_HIPCC)) plugins/rocm/plugin.mk plugins/rocm/probe_archs.sh
	@mkdir -p $(@D)
	@sh plugins/rocm/probe_archs.sh '$(FLD_HIPCC)' $(FLD_ROCM_CANDIDATES) > $@.tmp && mv -f $@.tmp $@

FLD_HIPCC_FLAGS = -O3 -std=c++17 -fPIC -fvisibility=hidden \
  -Wall -Wextra -Werror $(foreach a,$(ROCM_ARCHS),--offload-arch=$(a))
PLUGIN_OBJS_rocm := $(FLD_GPU_GLUE_OBJ)
PLUGIN_LIBS_rocm := -ldl

# The object depends on hipcc and the architecture list through this stamp;
# it leaves out the include paths, which name the build tree by the spelling
# make was given (the tests use an absolute B=), so that spelling alone never
# recompiles the kernels.
FLD_ROCM_STAMP := $(B)/gen/rocm_build.txt
$(FLD_ROCM_STAMP): FORCE $(if $(FLD_ROCM_AUTO),$(FLD_ROCM_PROBE))
	@mkdir -p $(@D)
	@printf '%s\n' '$(FLD_HIPCC) $(FLD_HIPCC_FLAGS)' > $@.tmp.$$$$; \
	  if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv -f $@.tmp.$$$$ $@; fi

$(OBJ)/plugins/rocm/hip_kernels.o: plugins/rocm/hip_kernels.hip $(FLD_GPU_DEVICE_DEPS) $(FLD_ROCM_STAMP)
	@mkdir -p $(@D)
	@test -n '$(strip $(ROCM_ARCHS))' || { echo "fldispatch: $(FLD_HIPCC) targets none of $(FLD_ROCM_CANDIDATES) (set ROCM_ARCHS=)" >&2; exit 1; }
	$(Q)$(call fld_say,HIPCC,$<)HIP_PLATFORM=amd $(FLD_HIPCC) -Iinclude -I$(B)/gen $(FLD_HIPCC_FLAGS) -c $< -o $@

# No -lamdhip64: the HIP symbols bind to the runtime fld-rocm.so opened.
$(PLUGOUT)/libfld-rocm-hip.so: $(OBJ)/plugins/rocm/hip_kernels.o
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CXX) -shared $(ALLLDFLAGS) -o $@ $< -lstdc++
endif
