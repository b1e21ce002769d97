# SPDX-License-Identifier: Apache-2.0
# The cuda plugin's build, included by the top-level Makefile.
#
# fld-cuda.so is cuda_plugin.c, the GPU glue shared with rocm
# (plugins/shared/gpu/gpu_plugin.c; see gpu.mk there) and the kernels
# (cuda_kernels.cu over plugins/shared/gpu/gpu_kernels.cuh). The kernels are
# compiled by nvcc, chosen in this order:
#   1. $(NVCC) when set;
#   2. $(CUDA_HOME)/bin/nvcc when CUDA_HOME is set;
#   3. the newest CUDA 12 toolkit in /usr/local/cuda-12.* (with nvcc and the
#      static runtime; FLD_CUDA_SEARCH=/usr/local is where it looks): its
#      runtime runs on every driver from CUDA 12's minimum (525) on, where a
#      CUDA 13 runtime needs driver 580 or later;
#   4. /usr/local/cuda/bin/nvcc, else nvcc in PATH.
# `make CUDA_HOME=/usr/local/cuda-13.0` keeps a newer build possible.
# Without nvcc the plugin is skipped with one line from make.
#
# Code for CUDA_ARCHS (default 80 90: sm_80 for A100/A10/L4/L40 and the
# other 8.x GPUs, sm_90 for H100/H200), plus PTX for the last one, which the
# driver compiles for newer GPUs (9.0 and later). The list is compiled into
# the plugin (FLD_GPU_BUILT_ARCHS) so that it can tell a device it cannot
# serve (a V100 is 7.0, a T4 7.5) before any launch: CUDA_ARCHS="75 80 90"
# adds the T4.
#
# The CUDA runtime is linked statically (libcudart_static.a), so fld-cuda.so
# needs only libcuda.so.1, which the runtime itself dlopens: the plugin
# loads on machines without a driver and says so.

include plugins/shared/gpu/gpu.mk

FLD_CUDA_SEARCH ?= /usr/local
# The newest (by version, so 12.10 after 12.9) with nvcc and the static runtime.
FLD_CUDA12_HOME := $(shell for d in $(FLD_CUDA_SEARCH)/cuda-12.*; do [ -x "$$d/bin/nvcc" ] && \
  { [ -f "$$d/lib64/libcudart_static.a" ] || ls "$$d"/targets/*/lib/libcudart_static.a; } \
  >/dev/null 2>&1 && \
  echo "$$d"; done | sort -V | tail -n 1)
ifneq ($(NVCC),)
FLD_NVCC := $(shell command -v '$(NVCC)' 2>/dev/null)
else ifneq ($(CUDA_HOME),)
FLD_NVCC := $(wildcard $(CUDA_HOME)/bin/nvcc)
else ifneq ($(FLD_CUDA12_HOME),)
FLD_NVCC := $(FLD_CUDA12_HOME)/bin/nvcc
else ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
FLD_NVCC := /usr/local/cuda/bin/nvcc
else
FLD_NVCC := $(shell command -v nvcc 2>/dev/null)
endif
# The toolkit the chosen nvcc belongs to, unless CUDA_HOME says otherwise.
FLD_CUDA_ROOT := $(if $(CUDA_HOME),$(CUDA_HOME),$(if $(FLD_NVCC),$(abspath $(dir $(realpath $(FLD_NVCC)))..)))
FLD_CUDART_A := $(firstword $(wildcard $(FLD_CUDA_ROOT)/lib64/libcudart_static.a \
                  $(FLD_CUDA_ROOT)/lib/libcudart_static.a \
                  $(FLD_CUDA_ROOT)/targets/*/lib/libcudart_static.a))

ifneq ($(PLUGIN_SKIP_cuda),)
# Given on the command line (python/setup.py: no GPU of this kind here):
# the plugin is skipped with that reason and nothing below is probed.
else ifeq ($(FLD_NVCC),)
PLUGIN_SKIP_cuda := nvcc not found (set NVCC= or CUDA_HOME=, or install the CUDA toolkit in /usr/local/cuda)
else ifeq ($(FLD_CUDART_A),)
PLUGIN_SKIP_cuda := static CUDA runtime libcudart_static.a not found under $(FLD_CUDA_ROOT) (set CUDA_HOME=)
else ifeq ($(wildcard plugins/cuda/cuda_kernels.cu),)
PLUGIN_SKIP_cuda := plugins/cuda/cuda_kernels.cu is missing from the source tree
else
CUDA_ARCHS ?= 80 90
FLD_CUDA_BUILT := $(strip $(foreach a,$(CUDA_ARCHS),sm_$(a)) compute_$(lastword $(CUDA_ARCHS)))
FLD_NVCC_FLAGS := -O3 -std=c++17 \
  $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
  -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS)) \
  -DFLD_GPU_BUILT_ARCHS='"$(FLD_CUDA_BUILT)"' \
  -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra --Werror all-warnings
PLUGIN_OBJS_cuda := $(OBJ)/plugins/cuda/cuda_kernels.o $(FLD_GPU_GLUE_OBJ)
# -z nodelete: the static runtime inside stays loaded after fld_shutdown()
# dlcloses the plugin; unloading an initialised CUDA runtime is not safe.
PLUGIN_LIBS_cuda := -L$(dir $(FLD_CUDART_A)) -lcudart_static -lstdc++ -lrt -ldl -lpthread \
  -Wl,-z,nodelete

# The object depends on the toolkit and the architecture list through this
# stamp, so `make CUDA_ARCHS=...` or another CUDA_HOME rebuilds it. The stamp
# leaves out the include paths, which name the build tree: the tests run make
# on this tree by its absolute path (B=/.../build), and a plain make after
# them must not see a changed command and recompile the kernels.
FLD_CUDA_STAMP := $(B)/gen/cuda_build.txt
$(FLD_CUDA_STAMP): FORCE
	@mkdir -p $(@D)
	@printf '%s\n' '$(FLD_NVCC) $(FLD_NVCC_FLAGS)' > $@.tmp.$$$$; \
	  if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv -f $@.tmp.$$$$ $@; fi

$(OBJ)/plugins/cuda/cuda_kernels.o: plugins/cuda/cuda_kernels.cu $(FLD_GPU_DEVICE_DEPS) $(FLD_CUDA_STAMP)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,NVCC,$<)$(FLD_NVCC) -Iinclude -I$(B)/gen $(FLD_NVCC_FLAGS) -c $< -o $@

# bench/gpu_sweep.cu: every candidate launch shape of the kernels timed under
# CUDA-graph replay on the GPU it runs on (gpu_launch.h's rows come from it).
# Built on request only: `make gpu-sweep`, then build/bench/gpu_sweep.
.PHONY: gpu-sweep
gpu-sweep: $(B)/bench/gpu_sweep
$(B)/bench/gpu_sweep: bench/gpu_sweep.cu $(FLD_GPU_DEVICE_DEPS) $(FLD_CUDA_STAMP)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,NVCC,$<)$(FLD_NVCC) -Iinclude $(FLD_NVCC_FLAGS) -o $@ $<
endif
