#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the path of TOOL (ruff, mypy, ...) at the version that
# python/requirements-lint.txt pins: the one in PATH when its version is the
# pinned one; else that of .ci/cached-venv.sh's python-lint-venv, which has
# the requirements installed (built once, cached outside the clone; building
# it needs python3's venv module, Debian: python3-venv, in .ci/deps.sh's lint
# set, and PyPI). Run from the project root; make lint's .ci/ruff.sh and
# .ci/mypy.sh use it.
#
#   sh .ci/lint-tool.sh TOOL
set -eu
tool=$1
requirements=python/requirements-lint.txt
pinned=$(sed -n "s/^$tool==\([^ ]*\).*/\1/p" "$requirements")
[ -n "$pinned" ] || { echo "fldispatch: $requirements pins no $tool version" >&2; exit 1; }

# "ruff 0.17.5", "mypy 2.4.1 (compiled: yes)": the second word
if command -v "$tool" >/dev/null 2>&1 && [ "$("$tool" --version 2>/dev/null | awk '{print $2}')" = "$pinned" ]; then
    command -v "$tool"
else
    venv_python=$(sh .ci/cached-venv.sh python-lint-venv "$requirements" --why "$tool $pinned for make lint")
    echo "$(dirname "$venv_python")/$tool"
fi
