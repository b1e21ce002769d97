#!/bin/sh
# Runs each Check test program, then prints one summary line.
# Usage: tests/run.sh build/tests/test_a build/tests/test_b ...
#
# Each program's output goes to $FLD_TEST_LOGDIR/<program>.log (default
# $FLD_BUILDDIR/tests/logs). For a program that passes, only its Check
# summary lines are printed; for one that fails, its whole log: the
# [WARNING]/[ERROR] lines the tests provoke on purpose show only then.
#
# Variables of the caller's environment must not steer the tests; they
# assume a CPU machine unless they say otherwise (test_platform unsets it).
for v in $(env | sed -n 's/^\(VLLM_FL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset USE_FLAGGEMS HWLOC_XMLFILE HWLOC_FORCE_XMLFILE
export VLLM_FL_PLATFORM=cpu
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
for t in "$@"; do
    name=$(basename "$t")
    log="$logdir/$name.log"
    ${FLD_TEST_WRAPPER:-} "$t" >"$log" 2>&1; rc=$?
    # A program may run several suites: add up every summary line it prints.
    lines=$(grep -E '^[0-9]+%: Checks: ' "$log")
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
    else
        printf '%s\n' "$lines" | sed "s|^|$name: |"
    fi
done
echo
[ -n "$bad_programs" ] && echo "failing test programs:$bad_programs"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ] && [ -z "$bad_programs" ]
