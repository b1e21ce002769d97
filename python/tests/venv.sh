#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the path of a Python that imports what the Python tests need
# (python/requirements-test.txt: pytest, numpy, torch==2.13.0): $PYTHON
# (default python3) itself where it imports pytest, numpy and torch; else
# the python of a virtual environment made from it, which sees its
# packages (--system-site-packages: Debian's python3-jsonschema) and has
# the requirements installed, built first when missing. make check runs it
# (python/python.mk), so that its Python tests run on a machine that has
# only the Debian packages of the test set.
#
# The environment is cached outside the clone, under
#   ${FLD_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}/python-test-venv-<key>
# where <key> hashes requirements-test.txt, this script and the base
# Python's path and version, so that `make clean` and a new clone keep it
# and a change to any of them builds a new one (older ones are removed). A
# build that stopped half-way is started again (the .complete marker is
# written last); a lock keeps two runs from building the same one at once.
# Progress and errors go to stderr; pip's own output to pip.log beside it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
requirements=$here/../requirements-test.txt

if "$python" -c 'import pytest, numpy, torch' >/dev/null 2>&1; then
    echo "$python"
    exit 0
fi
base=$(command -v "$python") || {
    echo "fldispatch: the Python tests need $python, which is not found" >&2
    exit 1
}
key=$({ cat "$requirements" "$here/venv.sh"; echo "$base"; "$python" -c 'import sys; print(sys.version)'; } |
    sha256sum | cut -c1-16)
cache=${FLD_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}
venv=$cache/python-test-venv-$key
mkdir -p "$cache"

if [ ! -f "$venv/.complete" ]; then
    exec 9>"$cache/python-test-venv.lock"
    flock 9
fi
if [ -f "$venv/.complete" ]; then
    echo "$venv/bin/python"
    exit 0
fi
for old in "$cache"/python-test-venv-*; do
    [ -d "$old" ] && [ "$old" != "$venv" ] && rm -rf "$old"
done
rm -rf "$venv"
start=$(date +%s)
echo "fldispatch: $python lacks pytest, numpy or torch: installing python/requirements-test.txt" \
    "into $venv (once; a few minutes)" >&2
if ! "$python" -m venv --system-site-packages "$venv" >"$cache/python-test-venv.log" 2>&1; then
    cat "$cache/python-test-venv.log" >&2
    rm -rf "$venv"
    echo "fldispatch: cannot make a virtual environment with $base (Debian: apt-get install python3-venv)" >&2
    exit 1
fi
if ! "$venv/bin/python" -m pip install -r "$requirements" >"$venv/pip.log" 2>&1; then
    tail -n 20 "$venv/pip.log" >&2
    echo "fldispatch: pip could not install python/requirements-test.txt into $venv (log: $venv/pip.log);" \
        "install them for $python yourself (pip install -r python/requirements-test.txt)" >&2
    exit 1
fi
if ! "$venv/bin/python" -c 'import pytest, numpy, torch' >>"$venv/pip.log" 2>&1; then
    tail -n 5 "$venv/pip.log" >&2
    echo "fldispatch: $venv has python/requirements-test.txt installed but cannot import pytest, numpy and torch" \
        "(log: $venv/pip.log)" >&2
    exit 1
fi
touch "$venv/.complete"
echo "fldispatch: Python test environment built in $(($(date +%s) - start)) s" >&2
echo "$venv/bin/python"
