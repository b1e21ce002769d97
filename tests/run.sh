#!/bin/sh
# Runs each Check test program, then prints one summary line.
# Usage: tests/run.sh build/tests/test_a build/tests/test_b ...
# Variables of the caller's environment must not steer the tests; they
# assume a CPU machine unless they say otherwise (test_platform unsets it).
for v in $(env | sed -n 's/^\(VLLM_FL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset USE_FLAGGEMS HWLOC_XMLFILE HWLOC_FORCE_XMLFILE
export VLLM_FL_PLATFORM=cpu
passed=0; failed=0; bad_programs=""
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
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
