# SPDX-License-Identifier: Apache-2.0
# Fixture plugins of test_stress, test_fork and test_memory (included by the
# top-level Makefile), kept out of tests/plugins/, which other tests scan as a
# plugin directory:
#   $(TESTOUT)/stress/fld-stressa.so  vendor.alpha, vendor.beta, default.stress (every catalog op)
#   $(TESTOUT)/stress/fld-stressb.so  vendor.gamma (every catalog op)
#   $(TESTOUT)/stress/fld-slow.so     slow register_builtins, is_available and kernel
STRESS_FIXTURES := $(TESTOUT)/stress/fld-stressa.so $(TESTOUT)/stress/fld-stressb.so \
  $(TESTOUT)/stress/fld-slow.so
TEST_EXTRA += $(STRESS_FIXTURES)

$(OBJ)/tests/stress/stressa.pic.o: tests/stress/stress_plugin.c tests/stress/stress_fixture.h \
  tests/stress/stress_kernels.h include/fldispatch/catalog.def
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -DSTRESS_VARIANT_A -c $< -o $@
$(OBJ)/tests/stress/stressb.pic.o: tests/stress/stress_plugin.c tests/stress/stress_fixture.h \
  tests/stress/stress_kernels.h include/fldispatch/catalog.def
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -c $< -o $@
$(OBJ)/tests/stress/slow.pic.o: tests/stress/slow_plugin.c tests/stress/stress_fixture.h
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(TESTOUT)/stress/fld-%.so: $(OBJ)/tests/stress/%.pic.o $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared -Wl,--no-undefined $(ALLLDFLAGS) -o $@ $< -L$(LIBOUT) -lfldispatch -lm -pthread
