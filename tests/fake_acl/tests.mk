# SPDX-License-Identifier: Apache-2.0
# The fake CANN installation for tests/test_ascend_plugin.c:
#   $(TESTOUT)/fake_acl/lib64/{libascendcl.so,libnnopbase.so,libopapi.so}
# The tests point ASCEND_HOME_PATH at $(TESTOUT)/fake_acl; nothing else finds it.
FAKE_ACL_DIR  := $(TESTOUT)/fake_acl/lib64
FAKE_ACL_LIBS := $(FAKE_ACL_DIR)/libascendcl.so $(FAKE_ACL_DIR)/libnnopbase.so \
                 $(FAKE_ACL_DIR)/libopapi.so
TEST_EXTRA += $(FAKE_ACL_LIBS)

$(OBJ)/tests/fake_acl/%.o: tests/fake_acl/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(FAKE_ACL_DIR)/libascendcl.so: $(OBJ)/tests/fake_acl/fake_acl.o
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared -Wl,-soname,libascendcl.so $(ALLLDFLAGS) -o $@ $< -lm -pthread

$(FAKE_ACL_DIR)/libnnopbase.so $(FAKE_ACL_DIR)/libopapi.so: $(OBJ)/tests/fake_acl/stub.o \
    $(FAKE_ACL_DIR)/libascendcl.so
	$(Q)$(call fld_say,LD,$@)$(CC) -shared -Wl,-soname,$(@F) $(ALLLDFLAGS) -o $@ $< -L$(FAKE_ACL_DIR) -Wl,--no-as-needed -lascendcl \
	  -Wl,-rpath,'$$ORIGIN' -pthread
