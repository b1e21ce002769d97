#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Splits the GPU kit (bench/gpu/pack.sh) and vLLM's chunks (../shared/gpu/pack-vllm.sh, in .gpu-vllm/)
# into parts that each fit one device call beside the working tree, the kit in the first, so that the
# first call can already run the kit's steps while vLLM's bytes are still arriving:
#
#   bench/gpu/split.sh [VLLM_DIR]     # from the project root; VLLM_DIR default .gpu-vllm (may be absent)
#
# Output: .gpu-parts/1 .. .gpu-parts/N (ignored by git), each with stage.sh. On the GPU machine, in
# back-to-back calls (a machine keeps /tmp only while it stays warm): call K carries [".gpu-parts/K"]
# and runs `bash .gpu-parts/K/stage.sh && ...`: part 1 unpacks the kit into /tmp/kit, every part keeps
# its share of vLLM's bytes under /tmp/vllm-parts, and the kit's `vllm` step (bench/gpu/on_device.sh)
# joins them into /tmp/vllm-stage once all have arrived. A call carries at most 64 MiB, the tracked
# files of the working tree included; each part leaves 1 MiB of that free.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
vdir=${1:-.gpu-vllm}
out=.gpu-parts
[ -f .gpu-kit/kit.tgz ] || { echo "split: .gpu-kit/kit.tgz is missing: run bench/gpu/pack.sh first" >&2; exit 1; }
grep -qx "/$out/" .git/info/exclude 2>/dev/null || echo "/$out/" >> .git/info/exclude
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
cap=$((64 * 1048576 - tree - 1048576))
kit=$(stat -c %s .gpu-kit/kit.tgz)
[ "$kit" -lt "$cap" ] || { echo "split: the kit ($kit bytes) does not fit one call ($cap)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out/1"
cp .gpu-kit/kit.tgz "$out/1/"
if [ -d "$vdir" ]; then
    mkdir "$tmp/stage"
    for d in "$vdir"/*/; do cp -r "$d". "$tmp/stage/"; done
    rm -f "$tmp/stage/on-device-vllm.sh"
    tar cf "$tmp/vllm.tar" -C "$tmp/stage" .
    head -c $((cap - kit)) "$tmp/vllm.tar" > "$out/1/v.000"
    tail -c +$((cap - kit + 1)) "$tmp/vllm.tar" | split -b "$cap" -d -a 3 --numeric-suffixes=1 - "$tmp/v."
    for p in "$tmp"/v.*; do
        n=$((10#${p##*.} + 1))
        mkdir -p "$out/$n"
        mv "$p" "$out/$n/"
    done
fi
for d in "$out"/*/; do
    cat > "$d/stage.sh" <<'STAGE'
#!/bin/sh
# Keeps this part on the GPU machine (bench/gpu/split.sh): the kit into /tmp/kit, vLLM's bytes into /tmp/vllm-parts.
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/vllm-parts || exit 1
if [ -f "$here/kit.tgz" ]; then mkdir -p /tmp/kit && tar xzf "$here/kit.tgz" -C /tmp/kit || exit 1; fi
for f in "$here"/v.*; do [ -e "$f" ] && { cp "$f" /tmp/vllm-parts/ || exit 1; }; done
ls /tmp/vllm-parts
STAGE
done
n=$(find "$out" -mindepth 1 -maxdepth 1 -type d | wc -l)
du -sm "$out"/* | sed 's/^/MiB /'
echo "send, back to back: for K in 1..$n: carry [\".gpu-parts/K\"], command 'bash .gpu-parts/K/stage.sh && ...'"
echo "(the kit's steps can run from the first call on: bash /tmp/kit/on_device.sh STEP...; 'vllm' after the last)"
