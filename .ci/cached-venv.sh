#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the python of a virtual environment that has REQUIREMENTS installed,
# building it first when missing. The environment is cached outside the
# clone, so that `make clean` and a new clone keep it:
#   ${FLD_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}/NAME-<key>
# where <key> hashes REQUIREMENTS, this script, the options and the base
# Python's interpreter and version: a change to any of them builds a new one, and
# the older ones of NAME are removed. A build that stopped half-way starts
# again (the .complete marker is written last); a lock keeps two runs from
# building the same one at once. Progress and errors go to stderr, pip's own
# output to pip.log in the environment.
#
#   sh .ci/cached-venv.sh NAME REQUIREMENTS [--system-site-packages]
#                         [--imports 'pytest, numpy'] [--why TEXT]
#
# --imports: modules the environment must import once installed;
# --why: said before a build starts (what is missing, and why it is needed).
# The base Python is $PYTHON (default python3); building needs its venv
# module (Debian: python3-venv) and the package index pip is configured with.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
name=$1 requirements=$2
shift 2
site_packages="" imports="" why=""
while [ $# -gt 0 ]; do
    case $1 in
    --system-site-packages) site_packages=--system-site-packages ;;
    --imports) imports=$2; shift ;;
    --why) why=$2; shift ;;
    *) echo "cached-venv.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
python=${PYTHON:-python3}
base=$(command -v "$python") || {
    echo "fldispatch: $name needs $python, which is not found" >&2
    exit 1
}
# The interpreter itself, not the name that found it (a pyenv shim and the
# python it runs are one base).
key=$({ cat "$requirements" "$here/cached-venv.sh"; echo "$site_packages $imports"
        "$python" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version)'; } |
      sha256sum | cut -c1-16)
cache=${FLD_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}
venv=$cache/$name-$key
mkdir -p "$cache"

if [ ! -f "$venv/.complete" ]; then
    exec 9>"$cache/$name.lock"
    flock 9
fi
if [ -f "$venv/.complete" ]; then
    echo "$venv/bin/python"
    exit 0
fi
for old in "$cache/$name"-*; do
    [ -d "$old" ] && [ "$old" != "$venv" ] && rm -rf "$old"
done
rm -rf "$venv"
start=$(date +%s)
echo "fldispatch: ${why:+$why: }installing $requirements into $venv (once)" >&2
# shellcheck disable=SC2086 # site_packages is one option or none
if ! "$python" -m venv $site_packages "$venv" >"$cache/$name.log" 2>&1; then
    cat "$cache/$name.log" >&2
    rm -rf "$venv"
    echo "fldispatch: cannot make a virtual environment with $base (Debian: apt-get install python3-venv)" >&2
    exit 1
fi
if ! "$venv/bin/python" -m pip install -r "$requirements" >"$venv/pip.log" 2>&1; then
    tail -n 20 "$venv/pip.log" >&2
    echo "fldispatch: pip could not install $requirements into $venv (log: $venv/pip.log);" \
        "install them for $python yourself (pip install -r $requirements)" >&2
    exit 1
fi
if [ -n "$imports" ] && ! "$venv/bin/python" -c "import $imports" >>"$venv/pip.log" 2>&1; then
    tail -n 5 "$venv/pip.log" >&2
    echo "fldispatch: $venv has $requirements installed but cannot import $imports (log: $venv/pip.log)" >&2
    exit 1
fi
touch "$venv/.complete"
echo "fldispatch: $name built in $(($(date +%s) - start)) s" >&2
echo "$venv/bin/python"
