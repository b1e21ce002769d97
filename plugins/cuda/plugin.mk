# The cuda plugin's build, included by the top-level Makefile.
#
# The kernels (cuda_kernels.cu) are compiled by nvcc: $(NVCC) when set, else
# $(CUDA_HOME)/bin/nvcc (CUDA_HOME defaults to /usr/local/cuda), else nvcc in
# PATH. Without nvcc the plugin is skipped with one line from make. Code for
# sm_80 (A100) and sm_90 (H100/H200), plus compute_90 PTX that newer GPUs
# compile at load; CUDA_ARCHS replaces the list of real architectures.
#
# The CUDA runtime is linked statically (libcudart_static.a), so fld-cuda.so
# needs only libcuda.so.1, which the runtime itself dlopens: the plugin
# loads on machines without a driver and says so.

FLD_CUDA_HOME := $(or $(CUDA_HOME),/usr/local/cuda)
ifneq ($(NVCC),)
FLD_NVCC := $(shell command -v '$(NVCC)' 2>/dev/null)
else ifneq ($(wildcard $(FLD_CUDA_HOME)/bin/nvcc),)
FLD_NVCC := $(FLD_CUDA_HOME)/bin/nvcc
else
FLD_NVCC := $(shell command -v nvcc 2>/dev/null)
endif
# The toolkit the chosen nvcc belongs to, unless CUDA_HOME says otherwise.
FLD_CUDA_ROOT := $(if $(CUDA_HOME),$(CUDA_HOME),$(if $(FLD_NVCC),$(abspath $(dir $(realpath $(FLD_NVCC)))..)))
FLD_CUDART_A := $(firstword $(wildcard $(FLD_CUDA_ROOT)/lib64/libcudart_static.a \
                  $(FLD_CUDA_ROOT)/lib/libcudart_static.a \
                  $(FLD_CUDA_ROOT)/targets/*/lib/libcudart_static.a))

ifeq ($(FLD_NVCC),)
PLUGIN_SKIP_cuda := nvcc not found (set NVCC= or install the CUDA toolkit in /usr/local/cuda)
else ifeq ($(FLD_CUDART_A),)
PLUGIN_SKIP_cuda := static CUDA runtime libcudart_static.a not found under $(FLD_CUDA_ROOT) (set CUDA_HOME=)
else ifeq ($(wildcard plugins/cuda/cuda_kernels.cu),)
PLUGIN_SKIP_cuda := plugins/cuda/cuda_kernels.cu is missing from the source tree
else
CUDA_ARCHS ?= 80 90
FLD_NVCC_FLAGS := -O3 -std=c++17 -Iinclude -I$(B)/gen \
  $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
  -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS)) \
  -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra --Werror all-warnings
PLUGIN_OBJS_cuda := $(OBJ)/plugins/cuda/cuda_kernels.o
# -z nodelete: the static runtime inside stays loaded after fld_shutdown()
# dlcloses the plugin; unloading an initialised CUDA runtime is not safe.
PLUGIN_LIBS_cuda := -L$(dir $(FLD_CUDART_A)) -lcudart_static -lstdc++ -lrt -ldl -lpthread \
  -Wl,-z,nodelete

$(OBJ)/plugins/cuda/cuda_kernels.o: plugins/cuda/cuda_kernels.cu $(wildcard plugins/cuda/*.cuh) \
    plugins/cuda/gpu_api.h
	@mkdir -p $(@D)
	$(Q)$(call fld_say,NVCC,$<)$(FLD_NVCC) $(FLD_NVCC_FLAGS) -c $< -o $@
endif
