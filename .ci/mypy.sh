#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make lint's type check: mypy, at the version python/requirements-lint.txt
# pins, over the Python package (python/fldispatch, with the extension's stub
# fldispatch/_C.pyi) and python/tests/typing (a program's calls into it), with
# the settings of python/pyproject.toml's [tool.mypy]. The package ships its
# types (fldispatch/py.typed), so what it declares is what its users' type
# checkers see. Prints one line (the version and the
# number of files) when clean; mypy's findings and a non-zero status otherwise.
#
# The mypy is the one in PATH when its version is the pinned one; else that of
# .ci/cached-venv.sh's python-lint-venv (as .ci/ruff.sh). Its cache goes to
# MYPY_CACHE_DIR (default: a temporary folder, removed at the end).
set -eu
cd "$(dirname "$0")/.."
requirements=python/requirements-lint.txt
pinned=$(sed -n 's/^mypy==\([^ ]*\).*/\1/p' "$requirements")
[ -n "$pinned" ] || { echo "fldispatch: $requirements pins no mypy version" >&2; exit 1; }

version_of() { "$1" --version 2>/dev/null | sed -n 's/^mypy \([^ ]*\).*/\1/p'; }

mypy=""
if command -v mypy >/dev/null 2>&1 && [ "$(version_of mypy)" = "$pinned" ]; then
    mypy=mypy
else
    venv_python=$(sh .ci/cached-venv.sh python-lint-venv "$requirements" --why "mypy $pinned for make lint")
    mypy=$(dirname "$venv_python")/mypy
fi

cache=${MYPY_CACHE_DIR:-}
if [ -z "$cache" ]; then
    cache=$(mktemp -d)
    trap 'rm -rf "$cache"' EXIT
fi
count=$(find python/fldispatch python/tests/typing -name '*.py' -o -name '*.pyi' | grep -c .)
# From python/: its pyproject.toml holds the settings and names the files.
(cd python && "$mypy" --cache-dir "$cache" --no-error-summary) >&2
echo "python: mypy $pinned over $count files of python/fldispatch and python/tests/typing (python/pyproject.toml), clean"
