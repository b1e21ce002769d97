#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make check-fresh: the README's two commands on a machine that has nothing
# else. Needs root (debootstrap, chroot, mount).
#
# 1. A minimal Debian bookworm root (debootstrap --variant=minbase, plus
#    make, the one package the README asks for before its commands), from
#    the Debian mirror of this machine's apt sources. It is cached outside
#    the clone, in $FRESH_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/fldispatch),
#    and rebuilt when missing, when built by another recipe (suite, mirror,
#    packages) or older than FRESH_MAX_AGE_DAYS (30). FRESH_REBUILD=1 forces it.
# 2. A copy of it gets a clean `git archive HEAD` of the tree in /scratch
#    and runs there, as root through chroot, `make run` then `make check`
#    with an empty environment (PATH, HOME, LANG only). Only /proc, /sys,
#    /dev/pts and a tmpfs /dev/shm are mounted into it (never /usr or any of
#    the host's toolchain), and unmounted on every exit path. make installs
#    the build and test package sets itself; the rocm set is not installed
#    (the rocm plugin is skipped with one line, as the cuda plugin is without
#    nvcc), and neither is libhwloc-plugins (the hwloc test topologies must
#    read without libxml2). make check installs the Python tests' pip
#    requirements (python/requirements-test.txt) into a virtual environment
#    (python/tests/venv.sh) and runs them: their wheels come from a
#    wheelhouse that this machine's pip fills once per version of the
#    requirements for the root's Python ($CACHE/fresh-wheels-<key>), copied
#    into the root with an /etc/pip.conf that names it (no index), as the
#    packages come from this machine's Debian mirror: the same torch
#    2.13.0 wheel every run, no multi-GB download of PyPI's CUDA build.
# 3. A second pristine copy: `make` and `make check` as an unprivileged user
#    must each stop with exactly one line naming the apt-get install to run,
#    and so must `make` as root (only make run and make check install).
#
# The committed tree (HEAD) is what is tested: commit first. Logs go to
# build/check-fresh/ in the clone.
set -eu
cd "$(dirname "$0")/.."
SRC=$(pwd)
SUITE=bookworm
CACHE=${FRESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}
BASE=$CACHE/fresh-$SUITE
STAMP=$BASE.stamp
MAX_AGE_DAYS=${FRESH_MAX_AGE_DAYS:-30}
LOGS=$SRC/build/check-fresh
WORK=""
started=$(date +%s)

say() { echo "check-fresh: $*"; }
die() { echo "check-fresh: FAILED: $*" >&2; exit 1; }
elapsed() { echo $(($(date +%s) - $1)); }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mount): run it as root"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"
git -C "$SRC" rev-parse --verify -q HEAD >/dev/null || die "$SRC is not a git checkout with a commit"

# The Debian mirror this machine's apt uses for $SUITE (one-line .list files
# and deb822 .sources files); deb.debian.org when none names it.
host_mirror() {
    {
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -f "$f" ] || continue
            awk -v suite="$SUITE" '$1 == "deb" {
                i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) print $i }' "$f"
        done
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            awk -v suite="$SUITE" '
                function flush() { if (deb && hit && uri != "") print uri; deb = 0; hit = 0; uri = "" }
                /^[ \t]*$/ { flush(); next }
                /^Types:/ { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
                /^URIs:/ { uri = $2 }
                /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
                END { flush() }' "$f"
        done
    } | head -n 1
}
MIRROR=${FRESH_MIRROR:-$(host_mirror)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
RECIPE="suite=$SUITE variant=minbase include=make mirror=$MIRROR recipe=1"

mkdir -p "$CACHE" "$LOGS"
# One run at a time: the cache is shared.
exec 9>"$CACHE/fresh.lock"
flock -n 9 || { say "another check-fresh holds $CACHE/fresh.lock; waiting"; flock 9; }

# Unmounts everything under $WORK (deepest first), then removes it; leaves
# it in place, and says so, if a mount would not go.
cleanup() {
    [ -n "$WORK" ] && [ -d "$WORK" ] || return 0
    tc=$(date +%s)
    for m in $(awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    if awk -v w="$WORK/" 'index($2, w) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
        echo "check-fresh: mounts remain under $WORK; not removing it" >&2
        return 0
    fi
    rm -rf "$WORK"
    say "work copies removed in $(elapsed "$tc") s; $(elapsed "$started") s in all"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- 1. the cached root ------------------------------------------------------
stale=""
if [ ! -d "$BASE" ] || [ ! -f "$STAMP" ]; then
    stale="missing"
elif [ "$(sed -n 1p "$STAMP")" != "$RECIPE" ]; then
    stale="built by another recipe"
elif [ $(($(date +%s) - $(sed -n 's/^created=//p' "$STAMP"))) -gt $((MAX_AGE_DAYS * 86400)) ]; then
    stale="older than $MAX_AGE_DAYS days"
elif [ "${FRESH_REBUILD:-0}" = 1 ]; then
    stale="FRESH_REBUILD=1"
fi
t=$(date +%s)
if [ -n "$stale" ]; then
    say "building the $SUITE root ($stale) from $MIRROR into $BASE"
    rm -rf "$BASE.new"
    if ! debootstrap --variant=minbase --include=make "$SUITE" "$BASE.new" "$MIRROR" \
        >"$LOGS/debootstrap.log" 2>&1; then
        tail -n 20 "$LOGS/debootstrap.log" >&2
        rm -rf "$BASE.new"
        die "debootstrap failed (log: $LOGS/debootstrap.log)"
    fi
    rm -rf "$BASE" "$STAMP"
    mv "$BASE.new" "$BASE"
    printf '%s\ncreated=%s\n' "$RECIPE" "$(date +%s)" >"$STAMP"
    say "root built in $(elapsed "$t") s"
else
    say "using the cached $SUITE root $BASE (built $(date -d "@$(sed -n 's/^created=//p' "$STAMP")" '+%F %T'))"
fi
cache_s=$(elapsed "$t")

# ---- the Python tests' wheels, for the root's Python -------------------------
ROOT_PY=3.11 # bookworm's python3
wheel_key=$({ cat python/requirements-test.txt; echo "python=$ROOT_PY arch=$(uname -m)"; } |
    sha256sum | cut -c1-16)
WHEELS=$CACHE/fresh-wheels-$wheel_key
t=$(date +%s)
if [ ! -f "$WHEELS/.complete" ]; then
    command -v python3 >/dev/null 2>&1 || die "python3 not found: it fills the wheelhouse of the Python tests"
    for old in "$CACHE"/fresh-wheels-*; do
        [ -d "$old" ] && [ "$old" != "$WHEELS" ] && rm -rf "$old"
    done
    rm -rf "$WHEELS"
    say "filling $WHEELS with python/requirements-test.txt for Python $ROOT_PY"
    if ! python3 -m pip download --only-binary=:all: --implementation cp --python-version "$ROOT_PY" \
        --platform "manylinux_2_28_$(uname -m)" -r python/requirements-test.txt -d "$WHEELS" \
        >"$LOGS/wheels.log" 2>&1; then
        tail -n 20 "$LOGS/wheels.log" >&2
        die "pip download of python/requirements-test.txt failed (log: $LOGS/wheels.log)"
    fi
    touch "$WHEELS/.complete"
    say "wheelhouse filled in $(elapsed "$t") s ($(du -sh "$WHEELS" | cut -f1))"
fi

WORK=$(mktemp -d "$CACHE/fresh-work.XXXXXX")
commit=$(git -C "$SRC" rev-parse --short HEAD)
if [ -n "$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    say "note: uncommitted changes are not tested (HEAD is $commit)"
fi

# A pristine copy of the root with the tree in /scratch/fldispatch.
new_root() {
    cp -a "$BASE" "$1"
    cp /etc/resolv.conf "$1/etc/resolv.conf" # the package downloads need DNS
    mkdir -p "$1/var/cache/fldispatch-wheels"
    cp "$WHEELS"/*.whl "$1/var/cache/fldispatch-wheels/"
    printf '[global]\nno-index = true\nfind-links = /var/cache/fldispatch-wheels\n' >"$1/etc/pip.conf"
    mkdir -p "$1/scratch/fldispatch"
    git -C "$SRC" archive --format=tar HEAD | tar -x -C "$1/scratch/fldispatch"
}

# Mounts the kernel file systems the tests use into root $1.
mount_kernel_fs() {
    mount -t proc proc "$1/proc"
    mount -t sysfs -o ro sysfs "$1/sys"
    mkdir -p "$1/dev/pts" "$1/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$1/dev/pts"
    mount -t tmpfs -o mode=1777 tmpfs "$1/dev/shm"
}

# Runs a command in root $1 as user $2 with an empty environment.
in_root() {
    r=$1 user=$2
    shift 2
    home=/root
    [ "$user" = root ] || home=/home/$user
    chroot --userspec="$user:$user" "$r" /usr/bin/env -i HOME="$home" LANG=C.UTF-8 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/sh -c "cd /scratch/fldispatch && $*"
}

# ---- 3 (first: it is quick). make as a user on the pristine root ----------------
t=$(date +%s)
USER_ROOT=$WORK/user
new_root "$USER_ROOT"
mount_kernel_fs "$USER_ROOT"
chroot "$USER_ROOT" useradd --create-home --user-group fresh
chroot "$USER_ROOT" chown -R fresh:fresh /scratch/fldispatch
for goal in "" check; do
    sets="build"; [ "$goal" = check ] && sets="build test"
    cmd="make${goal:+ $goal}"
    want="fldispatch: missing Debian packages ($sets): run 'sudo apt-get install $(sh .ci/deps.sh --list $sets)'"
    log=$LOGS/user-make${goal:+-$goal}.log
    if in_root "$USER_ROOT" fresh make $goal >"$log" 2>&1; then
        cat "$log" >&2
        die "'$cmd' as a user on a root without the packages succeeded"
    fi
    lines=$(wc -l <"$log")
    if [ "$lines" -ne 1 ] || ! grep -qF "$want" "$log"; then
        cat "$log" >&2
        die "'$cmd' as a user printed $lines lines, not the one line: $want"
    fi
    say "user: '$cmd' stops with: $(cat "$log")"
done
[ ! -e "$USER_ROOT/scratch/fldispatch/build" ] || die "'make' as a user built something before it stopped"
# As root, plain make (not one of the README's two commands) installs nothing either.
want="fldispatch: missing Debian packages (build): run 'apt-get install $(sh .ci/deps.sh --list build)'"
log=$LOGS/root-make.log
if in_root "$USER_ROOT" root make >"$log" 2>&1; then
    cat "$log" >&2
    die "'make' as root on a root without the packages succeeded (it installed them?)"
fi
lines=$(wc -l <"$log")
if [ "$lines" -ne 1 ] || ! grep -qF "$want" "$log"; then
    cat "$log" >&2
    die "'make' as root printed $lines lines, not the one line: $want"
fi
say "root: 'make' stops with: $(cat "$log")"
user_s=$(elapsed "$t")

# ---- 2. the README's two commands as root --------------------------------------
t=$(date +%s)
ROOT=$WORK/root
new_root "$ROOT"
mount_kernel_fs "$ROOT"
say "root: tree $commit in $ROOT/scratch/fldispatch (copies made in $(elapsed "$t") s)"
for cmd in "make run" "make check"; do
    t1=$(date +%s)
    log=$LOGS/$(echo "$cmd" | tr ' ' '-').log
    say "root: $cmd (log: $log)"
    if ! in_root "$ROOT" root "$cmd" >"$log" 2>&1; then
        tail -n 80 "$log" >&2
        die "'$cmd' failed on the fresh root (log: $log)"
    fi
    tail -n 3 "$log" | sed 's/^/    /'
    say "root: $cmd passed in $(elapsed "$t1") s"
done
grep -q '^python/tests: .* passed' "$LOGS/make-check.log" ||
    die "make check did not run the Python tests (no 'python/tests: ... passed' line in $LOGS/make-check.log)"
grep -q "fldispatch: not building plugin 'rocm': hipcc not found" "$LOGS/make-run.log" ||
    die "make run did not say in one line that the rocm plugin is skipped"
grep -q "fldispatch: not building plugin 'cuda': nvcc not found" "$LOGS/make-run.log" ||
    die "make run did not say in one line that the cuda plugin is skipped"
for p in libhwloc-plugins hipcc libamdhip64-dev valgrind clang; do
    if chroot "$ROOT" dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
        die "package $p is installed in the fresh root: make run/check must not need it"
    fi
done
root_s=$(elapsed "$t")

say "passed in $(elapsed "$started") s (root cache $cache_s s, user checks $user_s s, make run + make check $root_s s)"
