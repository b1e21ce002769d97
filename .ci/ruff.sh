#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make lint's Python step: ruff, at the version python/requirements-lint.txt
# pins, over every Python file git tracks, with the rules of ruff.toml. Prints
# one line (the version and the number of files) when clean; ruff's findings
# and a non-zero status otherwise.
#
# The ruff is the one in PATH when its version is the pinned one; else that of
# .ci/cached-venv.sh's python-lint-venv, which has the requirements installed
# (built once, cached outside the clone; building it needs python3's venv
# module, Debian: python3-venv, in .ci/deps.sh's lint set, and PyPI).
set -eu
cd "$(dirname "$0")/.."
requirements=python/requirements-lint.txt
pinned=$(sed -n 's/^ruff==\([^ ]*\).*/\1/p' "$requirements")
[ -n "$pinned" ] || { echo "fldispatch: $requirements pins no ruff version" >&2; exit 1; }

version_of() { "$1" --version 2>/dev/null | sed -n 's/^ruff //p'; }

ruff=""
if command -v ruff >/dev/null 2>&1 && [ "$(version_of ruff)" = "$pinned" ]; then
    ruff=ruff
else
    venv_python=$(sh .ci/cached-venv.sh python-lint-venv "$requirements" --why "ruff $pinned for make lint")
    ruff=$(dirname "$venv_python")/ruff
fi

# The tracked files (a tarball without .git: every .py file but build/'s).
if [ -d .git ] || [ -f .git ]; then
    files=$(git ls-files -- '*.py')
else
    files=$(find . -path ./build -prune -o -name '*.py' -print)
fi
count=$(printf '%s\n' "$files" | grep -c .)
# shellcheck disable=SC2086 # the paths have no spaces (git ls-files would quote them)
"$ruff" check --quiet --no-cache --output-format concise $files >&2
echo "python: ruff $pinned over $count files (ruff.toml), clean"
