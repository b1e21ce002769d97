#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs a command while N busy loops keep the CPUs loaded, then stops them.
# Usage: tests/under_load.sh [N] COMMAND [ARG...]   (N: a number, default
# one loop per online CPU). make check-under-load runs make check this way:
# the suite must pass on a machine whose every core is taken by others.
case ${1:-} in
'' | *[!0-9]*) n=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) ;;
*) n=$1; shift ;;
esac
[ $# -gt 0 ] || { echo "usage: tests/under_load.sh [N] COMMAND [ARG...]" >&2; exit 2; }
pids=""
i=0
while [ "$i" -lt "$n" ]; do
    sh -c 'while :; do :; done' &
    pids="$pids $!"
    i=$((i + 1))
done
trap 'kill $pids 2>/dev/null' EXIT INT TERM HUP
echo "fldispatch: $n busy loop(s) beside the command (load $(cut -d' ' -f1-3 /proc/loadavg))"
"$@"
rc=$?
echo "fldispatch: load at the end $(cut -d' ' -f1-3 /proc/loadavg); command exit status $rc"
exit $rc
