# The fixture plugin of test_gpu_plugins (included by the top-level Makefile):
# fld-fakecuda.so = the GPU plugins' glue (plugins/cuda/gpu_plugin.c) + the
# registration file fakecuda.c + the GPU emulator's api table, which
# tests/gpu/tests.mk builds as $(TESTOUT)/gpu/libfld-gpu-emu.a (position
# independent, so it links into a shared object). Without the emulator's
# sources the fixture is not built and the tests that need it say so.
ifneq ($(and $(wildcard tests/gpu/emu_api.cc),$(wildcard tests/gpu/tests.mk)),)
GPUPLUG_FIXTURE := $(TESTOUT)/gpuplug/fld-fakecuda.so
TEST_EXTRA += $(GPUPLUG_FIXTURE)

$(OBJ)/tests/gpuplug/fakecuda.o: tests/gpuplug/fakecuda.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -c $< -o $@
$(OBJ)/tests/gpuplug/gpu_plugin.o: plugins/cuda/gpu_plugin.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -c $< -o $@
$(GPUPLUG_FIXTURE): $(OBJ)/tests/gpuplug/fakecuda.o $(OBJ)/tests/gpuplug/gpu_plugin.o \
    $(TESTOUT)/gpu/libfld-gpu-emu.a $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared -Wl,--no-undefined $(ALLLDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  -L$(LIBOUT) -lfldispatch -lstdc++ -lm -pthread
endif
