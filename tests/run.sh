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
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks: ' | tail -n 1)
    if [ -n "$line" ]; then
        n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
        f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
        e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
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
