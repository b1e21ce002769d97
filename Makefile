# fldispatch — plain, non-recursive Makefile.
#
#   make                 library, plugins and the fldispatch tool into build/
#   make check           build and run the Check test suite
#   make run             build, then list the plugins and the winner of every op
#   make install         PREFIX=/usr/local DESTDIR= LIBDIR= INCLUDEDIR= DATADIR= BINDIR=
#   make uninstall       remove what install put there
#   make clean           remove build/
#   make format          apply .clang-format to every C file
#   make check SANITIZE=address,undefined   the suite under ASan+UBSan (build-address-undefined/)
#   make check SANITIZE=thread              the suite under ThreadSanitizer (build-thread/)
#   make check-valgrind  the suite under valgrind memcheck (TESTS="test_a test_b" for a subset)
#
# Each plugins/<name>/ directory with C sources becomes build/lib/fldispatch/
# plugins/fld-<name>.so, so a new backend needs no change here.

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR    ?= $(PREFIX)/share
PLUGINDIR   = $(LIBDIR)/fldispatch/plugins
CONFIGDIR   = $(DATADIR)/fldispatch/config
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

CC       ?= cc
CFLAGS   ?= -O2 -g
PKG_CONFIG ?= pkg-config

VERSION  := 0.1.0
SOMAJOR  := 0

.DEFAULT_GOAL := all

# A sanitizer build gets its own tree, so it never mixes with the plain one.
fld_comma := ,
ifneq ($(SANITIZE),)
B        := build-$(subst $(fld_comma),-,$(SANITIZE))
else
B        := build
endif
OBJ      := $(B)/obj
LIBOUT   := $(B)/lib
PLUGOUT  := $(LIBOUT)/fldispatch/plugins
BINOUT   := $(B)/bin
TESTOUT  := $(B)/tests

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter -Wno-format-truncation
BASEFLAGS := -std=c11 -D_GNU_SOURCE -pthread -Iinclude -I$(B)/gen $(WARN) -MMD -MP
SANFLAGS :=
ifneq ($(SANITIZE),)
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
# Undefined behaviour fails the test that hit it instead of printing and going on.
ifneq ($(filter undefined,$(subst $(fld_comma), ,$(SANITIZE))),)
SANFLAGS += -fno-sanitize-recover=undefined
endif
endif
ALLCFLAGS = $(BASEFLAGS) $(SANFLAGS) $(CFLAGS) $(CPPFLAGS)
ALLLDFLAGS = $(SANFLAGS) $(LDFLAGS)

LIB_SO_REAL := $(LIBOUT)/libfldispatch.so.$(VERSION)
LIB_SO_MAJ  := $(LIBOUT)/libfldispatch.so.$(SOMAJOR)
LIB_SO      := $(LIBOUT)/libfldispatch.so
LIB_A       := $(LIBOUT)/libfldispatch.a
DEP_CFLAGS   = $(shell $(PKG_CONFIG) --cflags yaml-0.1 hwloc 2>/dev/null)
DEP_LIBS     = $(shell $(PKG_CONFIG) --libs yaml-0.1 hwloc 2>/dev/null)
LIB_LIBS     = $(DEP_LIBS) -ldl -lm -pthread

CORE_SRC := $(sort $(wildcard core/*.c))
CORE_OBJ := $(CORE_SRC:%.c=$(OBJ)/%.o)

PLUGIN_DIRS  := $(sort $(dir $(wildcard plugins/*/*.c)))
PLUGIN_ALL   := $(patsubst plugins/%/,%,$(PLUGIN_DIRS))

# Plugins: one shared object per plugins/<name>/ directory. A plugin may add
# plugins/<name>/plugin.mk, which may set:
#   PLUGIN_CFLAGS_<name>  flags for its C files      PLUGIN_LIBS_<name>  link libraries
#   PLUGIN_OBJS_<name>    more objects to link in (the .mk gives their rules)
#   PLUGIN_EXTRA_<name>   more files built into the plugin directory and installed there
#   PLUGIN_SKIP_<name>    a reason not to build it here (a missing toolchain); make says it
-include $(wildcard plugins/*/plugin.mk)
PLUGIN_NAMES := $(foreach p,$(PLUGIN_ALL),$(if $(PLUGIN_SKIP_$(p)),,$(p)))
PLUGIN_SO    := $(PLUGIN_NAMES:%=$(PLUGOUT)/fld-%.so)
PLUGIN_EXTRA := $(foreach p,$(PLUGIN_NAMES),$(PLUGIN_EXTRA_$(p)))
ifeq ($(filter clean format deps uninstall,$(MAKECMDGOALS)),)
$(foreach p,$(PLUGIN_ALL),$(if $(PLUGIN_SKIP_$(p)),$(info fldispatch: not building plugin '$(p)': $(PLUGIN_SKIP_$(p)))))
endif

TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(OBJ)/%.o)
TOOL     := $(BINOUT)/fldispatch

TEST_UTIL_SRC := $(sort $(wildcard tests/util/*.c))
TEST_UTIL_OBJ := $(TEST_UTIL_SRC:%.c=$(OBJ)/%.o)
TEST_SRC  := $(sort $(wildcard tests/test_*.c))
TEST_BIN  := $(TEST_SRC:tests/%.c=$(TESTOUT)/%)
FIXTURE_SRC := $(sort $(wildcard tests/plugins/*.c))
FIXTURE_SO  := $(FIXTURE_SRC:tests/plugins/%.c=$(TESTOUT)/plugins/fld-%.so)
# A test directory may add tests/<dir>/tests.mk, which appends programs for
# make check to TEST_BIN and what they need (fixture libraries) to TEST_EXTRA.
TEST_EXTRA :=
-include $(wildcard tests/*/tests.mk)
CHECK_CFLAGS = $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell $(PKG_CONFIG) --libs check 2>/dev/null)

CONFIG_SRC := $(sort $(wildcard config/*.yaml))
CONFIG_OUT := $(CONFIG_SRC:config/%=$(B)/share/fldispatch/config/%)

.PHONY: all lib plugins tool configs tests check check-valgrind run install uninstall clean format deps
all: lib plugins tool configs

lib: $(LIB_SO) $(LIB_A)
plugins: $(PLUGIN_SO) $(PLUGIN_EXTRA)
tool: $(TOOL)
# Platform files, where the library finds them from the build tree
# (<dir of the library>/../share/fldispatch/config).
configs: $(CONFIG_OUT)
$(B)/share/fldispatch/config/%.yaml: config/%.yaml
	@mkdir -p $(@D)
	cp $< $@
tests: $(TEST_BIN) $(FIXTURE_SO) $(TEST_EXTRA)

# Paths compiled into the library; rewritten only when they change.
$(B)/gen/fld_paths.h: FORCE
	@mkdir -p $(@D)
	@printf '#define FLD_INSTALL_PLUGIN_DIR "%s"\n#define FLD_INSTALL_CONFIG_DIR "%s"\n#define FLD_INSTALL_BIN_DIR "%s"\n' \
	  '$(PLUGINDIR)' '$(CONFIGDIR)' '$(BINDIR)' > $@.tmp.$$$$; \
	  if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv -f $@.tmp.$$$$ $@; fi
FORCE:

# Keep intermediate objects (tests, fixtures) so a second make rebuilds nothing.
.SECONDARY:

$(OBJ)/core/%.o: core/%.c $(B)/gen/fld_paths.h
	@mkdir -p $(@D)
	$(CC) $(ALLCFLAGS) $(DEP_CFLAGS) -fPIC -fvisibility=hidden -DFLD_BUILDING_LIBRARY -c $< -o $@

$(LIB_SO_REAL): $(CORE_OBJ)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libfldispatch.so.$(SOMAJOR) -Wl,--no-undefined $(ALLLDFLAGS) \
	  -o $@ $(CORE_OBJ) $(LIB_LIBS)
$(LIB_SO_MAJ): $(LIB_SO_REAL)
	ln -sf $(notdir $<) $@
$(LIB_SO): $(LIB_SO_MAJ)
	ln -sf $(notdir $<) $@
$(LIB_A): $(CORE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $(CORE_OBJ)

define plugin_rules
$(PLUGOUT)/fld-$(1).so: $(patsubst %.c,$(OBJ)/%.o,$(wildcard plugins/$(1)/*.c)) $(PLUGIN_OBJS_$(1)) $(LIB_SO)
	@mkdir -p $$(@D)
	$$(CC) -shared -Wl,--no-undefined $$(ALLLDFLAGS) -o $$@ \
	  $$(filter %.o,$$^) -L$(LIBOUT) -lfldispatch $$(PLUGIN_LIBS_$(1)) -lm -pthread
endef
$(foreach p,$(PLUGIN_NAMES),$(eval $(call plugin_rules,$(p))))

$(OBJ)/plugins/%.o: plugins/%.c
	@mkdir -p $(@D)
	$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -DFLD_IN_TREE $(PLUGIN_CFLAGS_$(firstword $(subst /, ,$*))) -c $< -o $@

# The command-line tool.
$(OBJ)/tools/%.o: tools/%.c
	@mkdir -p $(@D)
	$(CC) $(ALLCFLAGS) -c $< -o $@
$(TOOL): $(TOOL_OBJ) $(LIB_SO)
	@mkdir -p $(@D)
	$(CC) $(ALLLDFLAGS) -o $@ $(TOOL_OBJ) -L$(LIBOUT) -lfldispatch -Wl,-rpath,'$$ORIGIN/../lib' -lm -pthread

# Tests: one Check program per tests/test_<module>.c, fixture plugins from tests/plugins/.
$(OBJ)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(ALLCFLAGS) $(CHECK_CFLAGS) -Itests -c $< -o $@
$(TESTOUT)/test_%: $(OBJ)/tests/test_%.o $(TEST_UTIL_OBJ) $(LIB_SO)
	@mkdir -p $(@D)
	$(CC) $(ALLLDFLAGS) -o $@ $< $(TEST_UTIL_OBJ) -L$(LIBOUT) -lfldispatch \
	  -Wl,-rpath,'$(abspath $(LIBOUT))' $(CHECK_LIBS) -lm -pthread
$(OBJ)/tests/plugins/%.o: tests/plugins/%.c
	@mkdir -p $(@D)
	$(CC) $(ALLCFLAGS) -fPIC -c $< -o $@
$(TESTOUT)/plugins/fld-%.so: $(OBJ)/tests/plugins/%.o $(LIB_SO)
	@mkdir -p $(@D)
	$(CC) -shared $(ALLLDFLAGS) -o $@ $< -L$(LIBOUT) -lfldispatch -lm -pthread

# TESTS="test_a test_b" runs those programs only.
CHECK_BIN = $(if $(TESTS),$(filter $(addprefix $(TESTOUT)/,$(TESTS)),$(TEST_BIN)),$(TEST_BIN))
check: deps all tests
	@FLD_SRCDIR='$(CURDIR)' FLD_BUILDDIR='$(abspath $(B))' FLD_SANITIZE='$(SANITIZE)' \
	  sh tests/run.sh $(CHECK_BIN)

# Every test program (and what it runs: the tool, forked children) under
# valgrind's memcheck: invalid accesses, uses of uninitialised values and
# definite leaks fail the program (tests/run.sh, FLD_TEST_WRAPPER).
VALGRIND ?= valgrind
VALGRIND_FLAGS ?= --quiet --error-exitcode=97 --trace-children=yes --leak-check=full \
  --errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=no --fair-sched=yes \
  --suppressions=$(CURDIR)/tests/valgrind.supp
# Check's per-test timeouts are scaled (valgrind runs code 20-50 times slower).
check-valgrind: deps all tests
	@FLD_SRCDIR='$(CURDIR)' FLD_BUILDDIR='$(abspath $(B))' CK_TIMEOUT_MULTIPLIER=$${CK_TIMEOUT_MULTIPLIER:-10} \
	  FLD_TEST_WRAPPER='$(VALGRIND) $(VALGRIND_FLAGS)' sh tests/run.sh $(CHECK_BIN)

run: deps all
	@echo "== fldispatch config"; $(TOOL) config
	@echo; echo "== fldispatch list"; $(TOOL) list
	@echo; echo "== winner of every op (cpu, f32)"
	@for op in silu_and_mul mul_and_silu gelu_and_mul gelu_tanh_and_mul rms_norm \
	           gemma_rms_norm rotary_embedding attention_backend; do \
	  printf '%-20s ' $$op; $(TOOL) resolve $$op | head -n 1; done

# Installs the Debian packages the build needs when run as root, or says which.
deps:
	@sh .ci/deps.sh

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(BINDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/fldispatch $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(CONFIGDIR)
	install -m 0755 $(LIB_SO_REAL) $(DESTDIR)$(LIBDIR)/
	ln -sf libfldispatch.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfldispatch.so.$(SOMAJOR)
	ln -sf libfldispatch.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libfldispatch.so
	install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 0755 $(PLUGIN_SO) $(PLUGIN_EXTRA) $(DESTDIR)$(PLUGINDIR)/
	install -m 0755 $(TOOL) $(DESTDIR)$(BINDIR)/
	install -m 0644 include/fldispatch/*.h $(DESTDIR)$(INCLUDEDIR)/fldispatch/
	for f in $(wildcard config/*.yaml); do install -m 0644 $$f $(DESTDIR)$(CONFIGDIR)/; done
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@PLUGINDIR@|$(PLUGINDIR)|' \
	    fldispatch.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/fldispatch.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libfldispatch.so $(DESTDIR)$(LIBDIR)/libfldispatch.so.$(SOMAJOR) \
	  $(DESTDIR)$(LIBDIR)/libfldispatch.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfldispatch.a \
	  $(DESTDIR)$(BINDIR)/fldispatch $(DESTDIR)$(PKGCONFIGDIR)/fldispatch.pc
	rm -f $(PLUGIN_ALL:%=$(DESTDIR)$(PLUGINDIR)/fld-%.so) \
	  $(addprefix $(DESTDIR)$(PLUGINDIR)/,$(notdir $(foreach p,$(PLUGIN_ALL),$(PLUGIN_EXTRA_$(p)))))
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/fldispatch/,$(notdir $(wildcard include/fldispatch/*.h)))
	rm -f $(addprefix $(DESTDIR)$(CONFIGDIR)/,$(notdir $(wildcard config/*.yaml)))
	-rmdir $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(LIBDIR)/fldispatch $(DESTDIR)$(CONFIGDIR) \
	  $(DESTDIR)$(DATADIR)/fldispatch $(DESTDIR)$(INCLUDEDIR)/fldispatch 2>/dev/null

clean:
	rm -rf $(B)

format:
	clang-format -i $(wildcard include/fldispatch/*.h core/*.[ch] plugins/*/*.[ch] \
	  plugins/*/*.cu plugins/*/*.cuh plugins/*/*.hip tools/*.[ch] tests/*.[ch] tests/*/*.[ch] \
	  tests/*/*.cc tests/plugins/*.c)

-include python/python.mk

-include $(shell find $(OBJ) -name '*.d' 2>/dev/null)
