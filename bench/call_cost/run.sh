#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Instructions per call of each kind of call_cost.c, from callgrind over N and
# 2N calls: (I(2N) - I(N)) / N. Deterministic: the machine's load does not
# change it.
#   bench/call_cost/run.sh [BUILD_DIR] [KIND...]
# BUILD_DIR defaults to build (a `make` of this tree); the cpu plugin is taken
# from BUILD_DIR/plugins. valgrind must be installed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
[ $# -gt 0 ] && shift
kinds=${*:-direct typed prepared run opaque norm norm_res silu rotary rotary_bf16}
root=$(cd "$here/../.." && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cc -O2 -std=c11 -I"$root/include" -I"$build/gen/include" "$here/call_cost.c" \
    -L"$build/lib" -Wl,-rpath,"$(cd "$build/lib" && pwd)" -lfldispatch -o "$bin/call_cost"
n=2000
count() {
    valgrind --tool=callgrind --callgrind-out-file="$bin/out" --toggle-collect="loop_${1%_bf16}" \
        "$bin/call_cost" "$1" "$2" >/dev/null 2>"$bin/log" || { cat "$bin/log" >&2; exit 1; }
    sed -n 's/^summary: //p' "$bin/out"
}
for k in $kinds; do
    a=$(count "$k" $n)
    b=$(count "$k" $((2 * n)))
    echo "$k $(((b - a) / n))"
done
