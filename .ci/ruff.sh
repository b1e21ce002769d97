#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make lint's Python step: ruff, at the version python/requirements-lint.txt
# pins, over every Python file git tracks, with the rules of ruff.toml. Prints
# one line (the version and the number of files) when clean; ruff's findings
# and a non-zero status otherwise.
#
# The ruff is the one in PATH when its version is the pinned one; else that of
# a virtual environment with the requirements installed, built when missing
# and cached outside the clone, as python/tests/venv.sh does for the tests:
#   ${FLD_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}/python-lint-venv-<key>
# where <key> hashes requirements-lint.txt, this script and the base Python's
# path and version (older ones are removed). Building it needs python3's venv
# module (Debian: python3-venv, in .ci/deps.sh's lint set) and PyPI.
set -eu
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
requirements=python/requirements-lint.txt
pinned=$(sed -n 's/^ruff==\([^ ]*\).*/\1/p' "$requirements")
[ -n "$pinned" ] || { echo "fldispatch: $requirements pins no ruff version" >&2; exit 1; }

version_of() { "$1" --version 2>/dev/null | sed -n 's/^ruff //p'; }

ruff=""
if command -v ruff >/dev/null 2>&1 && [ "$(version_of ruff)" = "$pinned" ]; then
    ruff=ruff
else
    base=$(command -v "$python") || { echo "fldispatch: the Python lint needs $python, which is not found" >&2; exit 1; }
    key=$({ cat "$requirements" .ci/ruff.sh; echo "$base"; "$python" -c 'import sys; print(sys.version)'; } |
        sha256sum | cut -c1-16)
    cache=${FLD_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}
    venv=$cache/python-lint-venv-$key
    mkdir -p "$cache"
    if [ ! -f "$venv/.complete" ]; then
        exec 9>"$cache/python-lint-venv.lock"
        flock 9
    fi
    if [ ! -f "$venv/.complete" ]; then
        for old in "$cache"/python-lint-venv-*; do
            [ -d "$old" ] && [ "$old" != "$venv" ] && rm -rf "$old"
        done
        rm -rf "$venv"
        echo "fldispatch: installing ruff $pinned ($requirements) into $venv (once)" >&2
        if ! "$python" -m venv "$venv" >"$cache/python-lint-venv.log" 2>&1; then
            cat "$cache/python-lint-venv.log" >&2
            rm -rf "$venv"
            echo "fldispatch: cannot make a virtual environment with $base (Debian: apt-get install python3-venv)" >&2
            exit 1
        fi
        if ! "$venv/bin/python" -m pip install -r "$requirements" >"$venv/pip.log" 2>&1; then
            tail -n 20 "$venv/pip.log" >&2
            echo "fldispatch: pip could not install $requirements into $venv (log: $venv/pip.log)" >&2
            exit 1
        fi
        touch "$venv/.complete"
    fi
    ruff=$venv/bin/ruff
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
