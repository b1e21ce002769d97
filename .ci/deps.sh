#!/bin/sh
# Makes sure the Debian packages the build needs are present. As root it
# installs the missing ones; otherwise it prints the exact apt-get line.
PKGS="build-essential pkg-config libyaml-dev check libhwloc-dev libdlpack-dev"
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
