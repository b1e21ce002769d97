#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs each Check test program, then prints one summary line.
# Usage: tests/run.sh build/tests/test_a build/tests/test_b ...
#
# Each program's output goes to $FLD_TEST_LOGDIR/<program>.log (default
# $FLD_BUILDDIR/tests/logs). For a program that passes, only its Check
# summary lines are printed (a program that runs several suites labels each
# line with its suite: "test_kernels [isa avx2]: ..."); for one that fails,
# its whole log: the [WARNING]/[ERROR] lines the tests provoke on purpose
# show only then.
#
# FLD_PYTHON_LOG names the log of the Python tests when make check ran them
# (python/python.mk; <log>.status holds pytest's exit status): their pytest
# summary is printed and counted, so that the closing "N passed, M failed"
# line is the whole run's.
#
# Variables of the caller's environment must not steer the tests; they
# assume a CPU machine unless they say otherwise (test_platform unsets it).
for v in $(env | sed -n 's/^\(VLLM_FL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset USE_FLAGGEMS HWLOC_XMLFILE HWLOC_FORCE_XMLFILE
export VLLM_FL_PLATFORM=cpu
# FLD_CHECK_CPU_ISA (make check CPU_ISA=avx2) caps the cpu plugin's kernel
# variant for the whole run, as VLLM_FL_CPU_ISA would: the suite on a lesser
# instruction set than the host's. Tests that set the variable themselves
# still do.
if [ -n "${FLD_CHECK_CPU_ISA:-}" ]; then
    export VLLM_FL_CPU_ISA="$FLD_CHECK_CPU_ISA"
fi
# The build tree's library first, for everything the tests start (the tool,
# probe helpers), even where LD_LIBRARY_PATH names an installed one. (The
# test programs themselves carry a DT_RPATH to it: see the Makefile.)
if [ -n "${FLD_BUILDDIR:-}" ]; then
    export LD_LIBRARY_PATH="$FLD_BUILDDIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
logdir=${FLD_TEST_LOGDIR:-${FLD_BUILDDIR:-.}/tests/logs}
mkdir -p "$logdir" || exit 1
passed=0; failed=0; bad_programs=""
# FLD_TEST_WRAPPER runs each program under a tool (make check-valgrind).
# Sanitizer runs: leaks are errors, and a sanitizer report fails the program.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=${FLD_SRCDIR:-.}/tests/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
# Check's per-test timeouts guard against hangs, not speed: each program's
# are stretched by the load it starts under, ceil((load + cpus) / cpus)
# (1 on an idle machine, 6 at a load of 10 on 2 CPUs), times the caller's
# CK_TIMEOUT_MULTIPLIER (make check-valgrind sets 10).
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
base_multiplier=${CK_TIMEOUT_MULTIPLIER:-1}
load_multiplier() {
    awk -v c="$cpus" -v m="$base_multiplier" '{ x = ($1 + c) / c; n = int(x); if (n < x) n++;
        print n * m }' /proc/loadavg 2>/dev/null || echo "$base_multiplier"
}
for t in "$@"; do
    name=$(basename "$t")
    log="$logdir/$name.log"
    CK_TIMEOUT_MULTIPLIER=$(load_multiplier)
    export CK_TIMEOUT_MULTIPLIER
    ${FLD_TEST_WRAPPER:-} "$t" >"$log" 2>&1; rc=$?
    # A program may run several suites: add up every summary line it prints.
    # Each summary line, after the name of the suite it closes.
    labelled=$(awk '/^Running suite\(s\): / { suite = substr($0, 19) }
        /^[0-9]+%: Checks: / { print suite "\t" $0 }' "$log")
    lines=$(printf '%s\n' "$labelled" | sed -n 's/^[^\t]*\t//p')
    if [ -n "$lines" ]; then
        n=$(printf '%s\n' "$lines" | awk '{ sub(/.*Checks: /, ""); s += $0 + 0 } END { print s }')
        f=$(printf '%s\n' "$lines" | awk '{ sub(/.*Failures: /, ""); s += $0 + 0 } END { print s }')
        e=$(printf '%s\n' "$lines" | awk '{ sub(/.*Errors: /, ""); s += $0 + 0 } END { print s }')
        f=$((f + e)); passed=$((passed + n - f))
    else
        f=1 # no summary at all: it crashed or is not a Check program
    fi
    failed=$((failed + f))
    if [ $rc -ne 0 ] || [ $f -ne 0 ]; then
        bad_programs="$bad_programs $name"
        sed "s|^|$name: |" "$log"
        echo "$name: FAILED (exit status $rc; log: $log)"
    elif [ "$(printf '%s\n' "$lines" | wc -l)" -gt 1 ]; then
        printf '%s\n' "$labelled" | awk -F '\t' -v n="$name" '{ print n " [" $1 "]: " $2 }'
    else
        printf '%s\n' "$lines" | sed "s|^|$name: |"
    fi
done
if [ -n "${FLD_PYTHON_LOG:-}" ] && [ -f "$FLD_PYTHON_LOG" ]; then
    # pytest's last line: "== 830 passed, 3 skipped in 95.1s ==" (or failed, errors).
    line=$(grep -E '^=*[ ]*[0-9]+ (passed|failed|error|errors|skipped)' "$FLD_PYTHON_LOG" | tail -n 1 |
        sed 's/^=* *//; s/ *=*$//')
    st=$(cat "$FLD_PYTHON_LOG.status" 2>/dev/null || echo 1)
    if [ -n "$line" ]; then
        n=$(printf '%s\n' "$line" | sed -n 's/.*\b\([0-9][0-9]*\) passed.*/\1/p')
        f=$(printf '%s\n' "$line" | sed -n 's/.*\b\([0-9][0-9]*\) failed.*/\1/p')
        e=$(printf '%s\n' "$line" | sed -n 's/.*\b\([0-9][0-9]*\) errors\{0,1\}\b.*/\1/p')
        passed=$((passed + ${n:-0})); failed=$((failed + ${f:-0} + ${e:-0}))
        echo "python/tests: $line"
    else
        failed=$((failed + 1))
        echo "python/tests: no pytest summary (log: $FLD_PYTHON_LOG)"
    fi
    if [ "$st" != 0 ]; then
        [ -n "$line" ] && [ $((${f:-0} + ${e:-0})) -gt 0 ] || failed=$((failed + 1))
        bad_programs="$bad_programs python/tests"
    fi
fi
echo
[ -n "$bad_programs" ] && echo "failing test programs:$bad_programs"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ] && [ -z "$bad_programs" ]
