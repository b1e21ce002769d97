#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make lint's type check: mypy, at the version python/requirements-lint.txt
# pins (.ci/lint-tool.sh finds it), twice:
#   - over the Python package (python/fldispatch, with the extension's stubs
#     fldispatch/_C.pyi and _ops.pyi) and python/tests/typing (a program's
#     calls into it), with the settings of python/pyproject.toml's [tool.mypy].
#     The package ships its types (fldispatch/py.typed), so what it declares is
#     what its users' type checkers see;
#   - over every other Python file git tracks (the tests, bench/, .ci/,
#     tests/'s scripts, python/setup.py), with mypy.ini's settings: each
#     function body checked, annotated or not.
# Prints one line per run (the version and the number of files) when clean;
# mypy's findings and a non-zero status otherwise. Its cache goes to
# MYPY_CACHE_DIR (default: a temporary folder, removed at the end).
set -eu
cd "$(dirname "$0")/.."
mypy=$(sh .ci/lint-tool.sh mypy)
pinned=$("$mypy" --version | awk '{print $2}')

cache=${MYPY_CACHE_DIR:-}
if [ -z "$cache" ]; then
    cache=$(mktemp -d)
    trap 'rm -rf "$cache"' EXIT
fi
mkdir -p "$cache"
count=$(find python/fldispatch python/tests/typing -name '*.py' -o -name '*.pyi' | grep -c .)
# From python/: its pyproject.toml holds the settings and names the files.
(cd python && "$mypy" --cache-dir "$cache/package" --no-error-summary) >&2
echo "python: mypy $pinned over $count files of python/fldispatch and python/tests/typing (python/pyproject.toml), clean"

# From the root, with mypy.ini's settings, over every other Python file git
# tracks: named here rather than by mypy.ini's folders, so that a script in a
# new folder is checked too.
# (A tarball without .git: every .py file but build/'s.)
if [ -d .git ] || [ -f .git ]; then
    git ls-files -- '*.py'
else
    find . -path ./build -prune -o -name '*.py' -print | sed 's|^\./||'
fi | grep -v -e '^python/fldispatch/' -e '^python/tests/typing/' >"$cache/scripts.txt"
"$mypy" --config-file mypy.ini --cache-dir "$cache/scripts" --no-error-summary @"$cache/scripts.txt" >&2
echo "python: mypy $pinned over the other $(grep -c . "$cache/scripts.txt") Python files (tests, bench/, .ci/, setup.py; mypy.ini), clean"
