#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The Debian packages fldispatch needs, in sets by purpose. Each make goal
# asks for its sets only (see the Makefile). The README's two commands, make
# run and make check, pass --install: run as root, they install the missing
# packages and say so in one line. Every other goal, and any goal run as
# another user, stops with one line naming the apt-get command to run.
#
#   build     make, make run, make install: the compiler, pkg-config, libyaml,
#             hwloc and dlpack headers
#   test      make check: the Check framework, python3-jsonschema for
#             the JSON-schema tests, and Python's headers and venv module
#             for the Python tests (make check installs their pip
#             requirements into a virtual environment: python/tests/venv.sh)
#   rocm      the rocm plugin (Debian's hipcc); without it make builds the
#             rest and says in one line that the plugin is skipped
#   fuzz      make fuzz, fuzz-smoke, fuzz-run: clang with libFuzzer
#   valgrind  make check-valgrind
#   fresh     make check-fresh: debootstrap
#   lint      make lint: cppcheck, python3 for the include- and import-graph
#             checks, and its venv module for the pinned tools of
#             python/requirements-lint.txt (ruff; cuobjdump and nvdisasm),
#             which .ci/cached-venv.sh installs with pip, once
#   all       every set (what .ci/run installs)
#
# Usage: sh .ci/deps.sh [--make] [--install] SET...   check SETs (--install: as root, install them)
#        sh .ci/deps.sh --list SET...                   print the packages of SETs
# --make: the message for a missing package goes to stdout, for make to stop
# with it. FLD_DEPS_DRY_RUN=1: say what would be installed, run no apt-get
# (tests/test_build.c checks the two paths with it).
# The cuda plugin's nvcc is NVIDIA's, not Debian's: it is used when found in
# /usr/local/cuda or PATH, and skipped otherwise (no set installs it).

set_packages() {
    case $1 in
    build) echo "build-essential pkg-config libyaml-dev libhwloc-dev libdlpack-dev" ;;
    test) echo "check python3-jsonschema python3-dev python3-venv" ;;
    rocm) echo "hipcc libamdhip64-dev" ;;
    fuzz) echo "clang libclang-rt-14-dev" ;;
    valgrind) echo "valgrind" ;;
    fresh) echo "debootstrap" ;;
    lint) echo "cppcheck python3 python3-venv" ;;
    all) for s in build test rocm fuzz valgrind fresh lint; do set_packages $s; done ;;
    *) return 1 ;;
    esac
}

mode=check
install=no
case ${1:-} in
--make) mode=make; shift ;;
--list) mode=list; shift ;;
esac
[ "${1:-}" = --install ] && { install=yes; shift; }
[ $# -gt 0 ] || set -- build test

pkgs=""
for s in "$@"; do
    p=$(set_packages "$s") || {
        echo "fldispatch: deps.sh: unknown package set '$s' (build, test, rocm, fuzz, valgrind, fresh, lint, all)" >&2
        exit 2
    }
    for q in $p; do
        case " $pkgs " in *" $q "*) ;; *) pkgs="${pkgs:+$pkgs }$q" ;; esac
    done
done
if [ $mode = list ]; then
    echo "$pkgs"
    exit 0
fi

# Not Debian (no dpkg-query): nothing to check; the compiler will say what is missing.
command -v dpkg-query >/dev/null 2>&1 || exit 0

# One dpkg-query for all: it prints a line for each package it knows.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $pkgs 2>/dev/null |
    awk '$2 ~ /^ii/ { print $1 }')
missing=""
for p in $pkgs; do
    printf '%s\n' "$installed" | grep -qx "$p" || missing="${missing:+$missing }$p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && [ $install = yes ]; then
    if [ "${FLD_DEPS_DRY_RUN:-}" = 1 ]; then
        echo "fldispatch: would install Debian packages ($*), as root: $missing (dry run)" >&2
        exit 0
    fi
    echo "fldispatch: installing Debian packages ($*), as root: $missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null; }; then
        line="fldispatch: apt-get install failed for: $missing"
        if [ $mode = make ]; then echo "$line"; else echo "$line" >&2; fi
        exit 1
    fi
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    line="fldispatch: missing Debian packages ($*): run 'apt-get install $missing' (make run and make check install them)"
else
    line="fldispatch: missing Debian packages ($*): run 'sudo apt-get install $missing' (as root, make run and make check install them)"
fi
if [ $mode = make ]; then echo "$line"; else echo "$line" >&2; fi
exit 1
