# SPDX-License-Identifier: Apache-2.0
# Crash fixtures for test_doctor (tests/crash/*.c), included by the top-level
# Makefile: $(TESTOUT)/crash/fld-<name>.so. Plugins that crash, abort, hang or
# exit in their constructor, register_builtins or availability check, and one
# good plugin. Built without sanitizers: a sanitizer's handler would turn the
# crash into an exit status, and these must die by their signal. Not in
# tests/plugins/, whose directory other tests load whole.
CRASH_SRC := $(sort $(wildcard tests/crash/*.c))
CRASH_SO  := $(CRASH_SRC:tests/crash/%.c=$(TESTOUT)/crash/fld-%.so)
TEST_EXTRA += $(CRASH_SO)

$(OBJ)/tests/crash/%.pic.o: tests/crash/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(BASEFLAGS) $(CFLAGS) $(CPPFLAGS) -fPIC -c $< -o $@

$(TESTOUT)/crash/fld-%.so: $(OBJ)/tests/crash/%.pic.o $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared $(LDFLAGS) -o $@ $< -L$(LIBOUT) -lfldispatch -lm -pthread
