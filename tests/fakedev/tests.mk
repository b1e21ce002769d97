# SPDX-License-Identifier: Apache-2.0
# The host-memory "cuda" device of test_verify and test_bench (fake_device.c),
# included by the top-level Makefile: $(TESTOUT)/fakedev/fld-fakedev.so.
# Not in tests/plugins/, whose directory other tests scan as a plugin dir.
FAKEDEV_SO := $(TESTOUT)/fakedev/fld-fakedev.so
TEST_EXTRA += $(FAKEDEV_SO)

$(OBJ)/tests/fakedev/%.pic.o: tests/fakedev/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -c $< -o $@

$(FAKEDEV_SO): $(OBJ)/tests/fakedev/fake_device.pic.o $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared -Wl,--no-undefined $(ALLLDFLAGS) -o $@ $< -L$(LIBOUT) -lfldispatch -lm -pthread
