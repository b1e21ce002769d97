#!/bin/sh
# Runs each Check test program, then prints one summary line.
# Usage: tests/run.sh build/tests/test_a build/tests/test_b ...
# Variables of the caller's environment must not steer the tests; they
# assume a CPU machine unless they say otherwise (test_platform unsets it).
for v in $(env | sed -n 's/^\(VLLM_FL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset USE_FLAGGEMS HWLOC_XMLFILE HWLOC_FORCE_XMLFILE
export VLLM_FL_PLATFORM=cpu
passed=0; failed=0; bad_programs=""
# FLD_TEST_WRAPPER runs each program under a tool (make check-valgrind).
# Sanitizer runs: leaks are errors, and a sanitizer report fails the program.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=${FLD_SRCDIR:-.}/tests/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
for t in "$@"; do
    out=$(${FLD_TEST_WRAPPER:-} "$t" 2>&1); rc=$?
    printf '%s\n' "$out" | sed "s|^|$(basename "$t"): |"
    # A program may run several suites: add up every summary line it prints.
    lines=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks: ')
    if [ -n "$lines" ]; then
        n=$(printf '%s\n' "$lines" | awk '{ sub(/.*Checks: /, ""); s += $0 + 0 } END { print s }')
        f=$(printf '%s\n' "$lines" | awk '{ sub(/.*Failures: /, ""); s += $0 + 0 } END { print s }')
        e=$(printf '%s\n' "$lines" | awk '{ sub(/.*Errors: /, ""); s += $0 + 0 } END { print s }')
        passed=$((passed + n - f - e)); failed=$((failed + f + e))
    else
        failed=$((failed + 1))
    fi
    [ $rc -ne 0 ] && bad_programs="$bad_programs $(basename "$t")"
done
echo
[ -n "$bad_programs" ] && echo "failing test programs:$bad_programs"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ] && [ -z "$bad_programs" ]
