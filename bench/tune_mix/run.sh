#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The tuned choice against every fixed one on a decode+prefill mix (README.md).
#   bench/tune_mix/run.sh [OUTDIR] [ROUNDS]
# Needs the build tree (make). Builds the demonstration plugin and the
# driver into OUTDIR (default /tmp/fld-tune-mix), tunes rms_norm f32 with
# `fldispatch tune`, then times the mix under one manifest per fixed choice
# and under the tuned one, alternated in one process.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-/tmp/fld-tune-mix}
rounds=${2:-15}
mkdir -p "$out"
cc=${CC:-cc}
$cc -O2 -fPIC -shared -I"$root/include" -o "$out/fld-mixdemo.so" "$here/mix_plugin.c" \
    -L"$root/build/lib" -lfldispatch -lm
$cc -O2 -I"$root/include" -o "$out/tune_mix" "$here/tune_mix.c" -L"$root/build/lib" -lfldispatch \
    -Wl,-rpath,"$root/build/lib"
# The candidates: the demonstration plugin's two and the reference. vendor.cpu,
# which picks its own path by size inside one implementation, is left out by
# the policy: with it the tuned manifest is vendor.cpu everywhere.
export VLLM_FL_PLUGIN_MODULES="$out/fld-mixdemo.so" VLLM_FL_DENY_VENDORS=cpu VLLM_FL_PLATFORM=cpu
"$root/build/bin/fldispatch" tune rms_norm --dtype f32 --hidden 4096 \
    --shapes '1-16=1,4,16;17-=512,2048' --out "$out/tuned.yaml"
for impl in reference.c vendor.mix_inline vendor.mix_staged; do
    printf 'version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: f32, impl: %s}\n' "$impl" \
        > "$out/fixed-$impl.yaml"
done
cat "$out/tuned.yaml"
"$out/tune_mix" "$rounds" "$out/fixed-reference.c.yaml" "$out/fixed-vendor.mix_inline.yaml" \
    "$out/fixed-vendor.mix_staged.yaml" "$out/tuned.yaml"
