#!/bin/sh
# Makes sure the Debian packages the build needs are present. As root it
# installs the missing ones; otherwise it prints the exact apt-get line.
# The library, tools and tests; then the ROCm toolchain, with which the rocm
# plugin is built (the cuda plugin's nvcc is NVIDIA's, not Debian's: it is
# used when found in /usr/local/cuda or PATH, and skipped otherwise).
PKGS="build-essential pkg-config libyaml-dev check python3-jsonschema libhwloc-dev libdlpack-dev"
PKGS="$PKGS hipcc libamdhip64-dev"
# Checking tools: valgrind (make check-valgrind), clang with its libFuzzer
# and sanitizer runtimes (make fuzz, make fuzz-smoke).
PKGS="$PKGS valgrind clang libclang-rt-14-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "fldispatch: installing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null || {
        echo "fldispatch: apt-get install failed for:$missing" >&2; exit 1; }
else
    echo "fldispatch: missing Debian packages. Run:" >&2
    echo "  sudo apt-get install$missing" >&2
    exit 1
fi
