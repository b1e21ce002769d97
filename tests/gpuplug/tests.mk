# SPDX-License-Identifier: Apache-2.0
# The fixture plugin of test_gpu_plugins (included by the top-level Makefile):
# fld-fakecuda.so = the GPU plugins' glue (the object fld-cuda.so and
# fld-rocm.so link, plugins/shared/gpu/gpu_plugin.c; gpu.mk there) + the
# registration file fakecuda.c + the GPU emulator's api table, which
# tests/gpu/tests.mk builds as $(TESTOUT)/gpu/libfld-gpu-emu.a (position
# independent, so it links into a shared object). Without the emulator's
# sources the fixture is not built and the tests that need it say so.
include plugins/shared/gpu/gpu.mk
ifneq ($(and $(wildcard tests/gpu/emu_api.cc),$(wildcard tests/gpu/tests.mk)),)
GPUPLUG_FIXTURE := $(TESTOUT)/gpuplug/fld-fakecuda.so
TEST_EXTRA += $(GPUPLUG_FIXTURE)

$(OBJ)/tests/gpuplug/fakecuda.o: tests/gpuplug/fakecuda.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -c $< -o $@
$(GPUPLUG_FIXTURE): $(OBJ)/tests/gpuplug/fakecuda.o $(FLD_GPU_GLUE_OBJ) \
    $(TESTOUT)/gpu/libfld-gpu-emu.a $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared -Wl,--no-undefined $(ALLLDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  -L$(LIBOUT) -lfldispatch -lstdc++ -lm -pthread
endif
