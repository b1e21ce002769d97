# SPDX-License-Identifier: Apache-2.0
# The GPU kernels under the host emulator (see plugins/shared/gpu/gpu_emu.h), included by
# the top-level Makefile.
#
#   $(B)/tests/gpu/libfld-gpu-emu.a   the emulator + fld__gpu_api_emu (the kernels of
#                                     plugins/shared/gpu/gpu_kernels.cuh on CPU memory),
#                                     -fPIC so a fixture plugin can link it; link
#                                     users add -lstdc++
#   $(TESTOUT)/test_gpu_kernels       Check program: the kernels against reference.c
#
# C++17 through $(CXX) (g++); no GPU toolchain is needed.
GPU_EMU_LIB := $(B)/tests/gpu/libfld-gpu-emu.a
GPU_EMU_OBJ := $(OBJ)/tests/gpu/emu.o $(OBJ)/tests/gpu/emu_api.o
GPU_EMU_CXXFLAGS = -std=c++17 -O2 -g -fPIC -pthread -Wall -Wextra -Werror -Wshadow \
  -DFLD_GPU_EMULATE -Iinclude -Iplugins/shared/gpu -Itests -MMD -MP $(SANFLAGS)

$(OBJ)/tests/gpu/%.o: tests/gpu/%.cc
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CXX,$<)$(CXX) $(GPU_EMU_CXXFLAGS) $(CHECK_CFLAGS) -c $< -o $@

$(GPU_EMU_LIB): $(GPU_EMU_OBJ)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,AR,$@)rm -f $@ && $(AR) rcs $@ $^

$(TESTOUT)/test_gpu_kernels: $(OBJ)/tests/gpu/test_gpu_kernels.o $(GPU_EMU_LIB) $(TEST_UTIL_OBJ) $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CXX) $(ALLLDFLAGS) -o $@ $< $(GPU_EMU_LIB) $(TEST_UTIL_OBJ) -L$(LIBOUT) -lfldispatch \
	  $(TEST_RPATH) $(CHECK_LIBS) -lstdc++ -lm -pthread

TEST_EXTRA += $(GPU_EMU_LIB)
TEST_BIN += $(TESTOUT)/test_gpu_kernels
