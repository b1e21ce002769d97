# SPDX-License-Identifier: Apache-2.0
# The Python package (python/), included by the top-level Makefile.
#
#   make python          build/python/fldispatch: the package, its C extension
#                        (_C.abi3.so) and a link to the library and plugins;
#                        use it with PYTHONPATH=build/python
#   make check-python    the pytest suite (make check runs it; TESTS=python
#                        runs it alone, any other TESTS= leaves it out), with
#                        $(PYTHON) where it imports requirements-test.txt,
#                        else with a virtual environment holding
#                        requirements-test.txt (python/tests/venv.sh builds
#                        it once, in ~/.cache/fldispatch)
#   make python-torch-native
#                        build/python/fldispatch/_torch_ops.so, the
#                        torch.ops.fldispatch.* CPU and CUDA kernels registered
#                        in C++ (python/native/torch_ops.cpp, row_split.h), and
#                        _torch_ops.abi, the torch and Python it is bound to,
#                        and its tests' fake CUDA backend; needs torch importable
#                        by $(PYTHON) and a C++ compiler (about 30 s); make
#                        check-python builds it, since its tests import torch;
#                        fldispatch.torch loads it instead of its Python-level
#                        kernels when the record matches the running torch
#   make check-pip       python/tests/pip: the README's `pip install ./python`
#                        into a new virtual environment that sees $(PYTHON)'s
#                        torch, then the installed package's tool, native torch
#                        kernels and GPU plugins (a full package build: minutes)
#
# The extension is compiled for the python3 in PATH (PYTHON=...) against the
# limited API of Python 3.10 (abi3), with the flags of python/setup.py, which
# builds the same package for `pip install ./python`. The C build and the C
# tests never need Python. Under SANITIZE the Python tests are skipped: the
# extension would need the sanitizer runtime preloaded into python.
#
# From the top-level Makefile this uses B, OBJ, LIBOUT, LIB_SO, ALLCFLAGS,
# ALLLDFLAGS, SANITIZE, TESTS and the targets all, lib, plugins, configs,
# tool and check; python/setup.py runs `make B=DIR lib plugins configs tool
# DIR/python/fldispatch/_tool.so` and takes DIR/lib, DIR/share, DIR/bin and
# _tool.so as the installation layout (it compiles the native torch kernels
# itself, for the torch of the environment it installs into).

PYTHON      ?= python3
PYOUT       := $(B)/python
PYPKG       := $(PYOUT)/fldispatch
PY_SRC      := $(sort $(wildcard python/src/*.c))
PY_OBJ      := $(PY_SRC:python/src/%.c=$(OBJ)/python/%.o)
PY_MODULES  := $(patsubst python/fldispatch/%,$(PYPKG)/%,$(wildcard python/fldispatch/*.py python/fldispatch/compat/*.py python/fldispatch/compat/backends/*.py))
# The package's types (PEP 561): the marker and the extension's stubs.
PY_TYPES    := $(PYPKG)/py.typed $(PYPKG)/_C.pyi $(PYPKG)/_ops.pyi
PY_EXT      := $(PYPKG)/_C.abi3.so
PY_FIXTURES := $(patsubst python/tests/plugins/%.c,$(PYOUT)/tests/fld-%.so,$(wildcard python/tests/plugins/*.c))
# The command-line tool as a shared object (main renamed fld_tool_main), so
# that `python -m fldispatch list|resolve|config|verify` runs in the Python
# process and shows its Python implementations.
PY_TOOL_OBJ := $(TOOL_SRC:tools/%.c=$(OBJ)/python/tool/%.o)
PY_TOOL     := $(PYPKG)/_tool.so
# Evaluated when a rule needs it, so a make without Python pays nothing.
PY_INCLUDE   = $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_CFLAGS    = -DPy_LIMITED_API=0x030A0000 -I$(PY_INCLUDE)
PY_SKIP_MSG  = fldispatch: skipping the Python tests

.PHONY: python python-headers check-python python-torch-native check-pip
python: python-headers lib plugins configs tool $(PY_EXT) $(PY_TOOL) $(PY_MODULES) $(PY_TYPES) $(PYPKG)/lib

python-headers:
	@test -f '$(PY_INCLUDE)/Python.h' || { echo "fldispatch: make python needs Python.h for $(PYTHON) (Debian: apt-get install python3-dev)" >&2; exit 1; }

$(OBJ)/python/%.o: python/src/%.c | python-headers
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) $(PY_CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

# rpath $ORIGIN/lib: the package's lib/ is a link to the build tree's lib/
# (the wheel carries a copy), where the library finds its plugins.
$(PY_EXT): $(PY_OBJ) $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared $(ALLLDFLAGS) -o $@ $(PY_OBJ) -L$(LIBOUT) -lfldispatch -Wl,-rpath,'$$ORIGIN/lib' -pthread

$(OBJ)/python/tool/%.o: tools/%.c
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CC,$<)$(CC) $(ALLCFLAGS) -fPIC -Dmain=fld_tool_main -Wno-missing-prototypes -Wno-missing-declarations -c $< -o $@

$(PY_TOOL): $(PY_TOOL_OBJ) $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) -shared $(ALLLDFLAGS) -o $@ $(PY_TOOL_OBJ) -L$(LIBOUT) -lfldispatch -Wl,-rpath,'$$ORIGIN/lib' -lm -pthread

# The optional native torch kernels: torch's include and library paths come
# from the torch that $(PYTHON) imports (nothing is fetched); without torch the
# target says so and fails, and no other target depends on it.
CXX         ?= g++
PY_TORCH_NATIVE := $(PYPKG)/_torch_ops.so
PY_TORCH_ABI    := $(PYPKG)/_torch_ops.abi
TORCH_FLAGS  = $(shell $(PYTHON) -c 'import os, torch, torch.utils.cpp_extension as c; print(" ".join(["-I" + p for p in c.include_paths()] + ["-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI)]))' 2>/dev/null)
TORCH_LIBDIR = $(shell $(PYTHON) -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
# The fixture of test_torch_native_gpu.py: a stand-in for torch's CUDA backend
# on host memory (python/tests/native/fake_cuda.cpp), built with the kernels.
PY_TORCH_FIXTURE := $(PYOUT)/tests/_fake_cuda.so
python-torch-native: python python-headers $(PY_TORCH_NATIVE) $(PY_TORCH_FIXTURE)

$(PY_TORCH_NATIVE): python/native/torch_ops.cpp python/native/row_split.h python/fldispatch/native_abi.py $(LIB_SO) include/fldispatch/fldispatch.h
	@test -n '$(TORCH_LIBDIR)' || { echo "fldispatch: make python-torch-native needs torch importable by $(PYTHON)" >&2; exit 1; }
	@mkdir -p $(@D)
	@rm -f '$(PY_TORCH_ABI)'
	$(Q)$(call fld_say,CXX,$<)$(CXX) -std=c++20 -O2 -fopenmp -fPIC -shared -fvisibility=hidden -Iinclude -I$(PY_INCLUDE) $(TORCH_FLAGS) $< -o $@ \
	  -L'$(TORCH_LIBDIR)' -lc10 -ltorch_cpu -ltorch_python -L$(LIBOUT) -lfldispatch -Wl,-rpath,'$(TORCH_LIBDIR)' -Wl,-rpath,'$$ORIGIN/lib'
	$(Q)$(PYTHON) -c 'import runpy; runpy.run_path("python/fldispatch/native_abi.py", run_name="__main__")' > '$(PY_TORCH_ABI)'

$(PY_TORCH_FIXTURE): python/tests/native/fake_cuda.cpp
	@test -n '$(TORCH_LIBDIR)' || { echo "fldispatch: $@ needs torch importable by $(PYTHON)" >&2; exit 1; }
	@mkdir -p $(@D)
	$(Q)$(call fld_say,CXX,$<)$(CXX) -std=c++20 -O1 -Wall -Wextra -Werror -fPIC -shared $(TORCH_FLAGS) $< -o $@ \
	  -L'$(TORCH_LIBDIR)' -lc10 -ltorch_cpu -Wl,-rpath,'$(TORCH_LIBDIR)'

$(PYPKG)/%.py: python/fldispatch/%.py
	@mkdir -p $(@D)
	$(Q)cp $< $@

$(PY_TYPES): $(PYPKG)/%: python/fldispatch/%
	@mkdir -p $(@D)
	$(Q)cp $< $@

$(PYPKG)/lib:
	@mkdir -p $(@D)
	$(Q)ln -sfn ../../lib $@

# Fixture plugins of the Python tests (not in tests/plugins/, which C tests scan).
$(PYOUT)/tests/fld-%.so: python/tests/plugins/%.c $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)$(call fld_say,LD,$@)$(CC) $(ALLCFLAGS) -fPIC -shared -Wl,--no-undefined $(ALLLDFLAGS) -o $@ $< -L$(LIBOUT) -lfldispatch -lm -pthread

# pytest's output also goes to $(PY_LOG), its exit status to $(PY_LOG).status.
# Under make check, tests/run.sh (which runs after this) prints and counts
# that summary, so the closing "N passed, M failed" line covers the Python
# tests too and a Python failure fails the run there, after the C tests ran;
# make check-python alone fails with pytest.
PY_LOG := $(B)/tests/logs/python.log
PY_RUN_TESTS := $(if $(TESTS),$(filter python,$(TESTS)),python)
check: FLD_PY_IN_CHECK := yes
check: check-python
check-python: all
	@rm -f '$(PY_LOG)' '$(PY_LOG).status'
ifneq ($(SANITIZE),)
	@echo "$(PY_SKIP_MSG) under SANITIZE=$(SANITIZE) (python would need the sanitizer runtime preloaded)"
else ifneq ($(PY_RUN_TESTS),)
	@if [ ! -f '$(PY_INCLUDE)/Python.h' ]; then \
	  echo "fldispatch: the Python tests need Python.h for $(PYTHON) (Debian: apt-get install python3-dev)" >&2; exit 1; \
	fi; \
	py=$$(PYTHON='$(PYTHON)' sh python/tests/venv.sh) || exit 1; \
	$(MAKE) --no-print-directory PYTHON="$$py" python python-torch-native $(PY_FIXTURES) $(GPUPLUG_FIXTURE) || exit 1; \
	mkdir -p '$(dir $(PY_LOG))'; \
	{ PYTHONPATH='$(abspath $(PYOUT))' FLDPY_EXPECT_NATIVE=1 FLDPY_TEST_FIXTURES='$(abspath $(PYOUT))/tests' \
	    "$$py" -m pytest -q -p no:cacheprovider python/tests 2>&1; \
	  echo $$? > '$(PY_LOG).status'; } | tee '$(PY_LOG)'; \
	st=$$(cat '$(PY_LOG).status'); \
	[ '$(FLD_PY_IN_CHECK)' = yes ] || exit $$st
endif

# The pip install test: the build tree's package is the reference its
# `python -m fldispatch list` is compared with.
check-pip: python
	@if ! $(PYTHON) -c 'import pytest, torch' >/dev/null 2>&1; then \
	  echo "fldispatch: check-pip needs pytest and torch importable by $(PYTHON) (pip install -r python/requirements-test.txt)" >&2; exit 1; fi
	$(Q)env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PYTHONPATH='$(abspath $(PYOUT))' FLDPY_PIP_INSTALL=1 $(PYTHON) -m pytest -q -p no:cacheprovider -rs python/tests/pip
