# SPDX-License-Identifier: Apache-2.0
# Re-entry fixtures for test_reentry (tests/reentry/*.c), included by the
# top-level Makefile: $(TESTOUT)/reentry/fld-<name>.so. Plugins whose
# constructor, register_builtins or is_available call back into the library
# (fld_init, fld_reload, fld_resolve, fld_load_plugin, fld_shutdown), one that
# logs from register_builtins and one whose device hook calls back in. Built
# with the sanitizers of the run, like tests/plugins/. Not in tests/plugins/,
# whose directory other tests load whole.
REENTRY_SRC := $(sort $(wildcard tests/reentry/*.c))
REENTRY_SO  := $(REENTRY_SRC:tests/reentry/%.c=$(TESTOUT)/reentry/fld-%.so)
TEST_EXTRA += $(REENTRY_SO)

$(OBJ)/tests/reentry/%.pic.o: tests/reentry/%.c tests/reentry/reentry.h
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -c $< -o $@

$(TESTOUT)/reentry/fld-%.so: $(OBJ)/tests/reentry/%.pic.o $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared $(ALLLDFLAGS) -o $@ $< -L$(LIBOUT) -lfldispatch -lm -pthread
