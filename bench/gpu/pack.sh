#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs what the GPU benchmarks need on a machine with an NVIDIA GPU and no
# package registry into .gpu-kit/ (ignored by git) at the project root:
#
#   lib, bin, share   this tree's build (library, tool, plugins, platform files)
#   base/             the library, cuda plugin and platform files of another
#                     commit (BASE, default HEAD), built in a temporary
#                     worktree: on_device.sh's base step times it in a process
#                     of its own, for before/after figures from one session;
#                     base2/ the same of a second commit (BASE2, optional), so
#                     that one session splits two changes' figures
#   syslib/           libyaml and hwloc, which a bare CUDA image lacks
#   gpu_sweep         bench/gpu_sweep.cu, built for CUDA_ARCHS
#   wheels/           fldispatch's own wheel (with the cuda plugin; no native
#                     torch kernels, which are bound to one torch) and the
#                     peers: Liger-Kernel, FlagGems and what FlagGems imports
#   native/           the native torch kernels' sources (torch_ops.cpp,
#                     row_split.h, the library's headers and dlpack/dlpack.h),
#                     which on_device.sh's install step compiles there for the
#                     GPU machine's torch (torch_native.sh)
#   *.py, on_device.sh  the benchmarks and the script that runs them there
#
#   bench/gpu/pack.sh [BASE [BASE2]]   # from the project root
#
# The kit travels as one file, .gpu-kit/kit.tgz (the CPU plugin left out: the
# GPU machine runs the cuda plugin). On the GPU machine, from the project
# root: mkdir -p /tmp/kit && tar xzf .gpu-kit/kit.tgz -C /tmp/kit, then
# bash /tmp/kit/on_device.sh [STEP...] (see that script). Environment: PEERS_WHEELS=0 skips the peers'
# downloads; FLD_WHEEL=0 skips building fldispatch's wheel (minutes).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
base=${1:-HEAD}
base2=${2:-}
kit=.gpu-kit
grep -qx "/$kit/" .git/info/exclude 2>/dev/null || echo "/$kit/" >> .git/info/exclude
make -j2 >/dev/null
[ -f build/lib/fldispatch/plugins/fld-cuda.so ] || { echo "pack: the cuda plugin was not built (nvcc?)" >&2; exit 1; }
make gpu-sweep >/dev/null
rm -rf "$kit"; mkdir -p "$kit/syslib" "$kit/wheels" "$kit/base"
cp -a build/bin build/lib build/share "$kit/"
rm -f "$kit"/lib/*.a "$kit"/lib/fldispatch/plugins/fld-cpu.so
cp build/bench/gpu_sweep "$kit/"
cp bench/gpu_peers.py bench/gpu/on_device.sh bench/gpu/torch_native.sh "$kit/"
mkdir -p "$kit/native/include/dlpack"
cp python/native/torch_ops.cpp python/native/row_split.h "$kit/native/"
cp -a include/fldispatch "$kit/native/include/"
dlpack=$(printf '#include <dlpack/dlpack.h>\n' | ${CC:-cc} -M -x c - | tr ' \\' '\n\n' | grep 'dlpack/dlpack\.h$' | head -1)
[ -n "$dlpack" ] || { echo "pack: dlpack/dlpack.h not found (install libdlpack-dev)" >&2; exit 1; }
cp "$dlpack" "$kit/native/include/dlpack/"
[ -f bench/vllm_cuda.py ] && cp bench/vllm_cuda.py "$kit/"
cp bench/vllm_numerics.py "$kit/"
[ -f ../shared/gpu/gpu_check.py ] && cp ../shared/gpu/gpu_check.py "$kit/"
cache=$(ldconfig -p)
for so in libyaml-0.so.2 libhwloc.so.15; do
  p=$(awk -v n="$so" '$1==n && /x86-64/ {print $NF; exit}' <<<"$cache")
  [ -n "$p" ] || { echo "pack: $so not found (install libyaml-0-2 and libhwloc15)" >&2; exit 1; }
  cp -L "$p" "$kit/syslib/$so"
done
# A base build (COMMIT into DIR): the library and the cuda plugin alone.
pack_base() {
  local commit=$1 dir=$2 wt
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$commit"
  ( cd "$wt" && make -j2 build/lib/libfldispatch.so build/lib/fldispatch/plugins/fld-cuda.so >/dev/null )
  mkdir -p "$dir/lib/fldispatch/plugins"
  cp -a build/share "$dir/"  # the platform files (VLLM_FL_PLATFORM), found at lib/../share
  cp -a "$wt"/build/lib/libfldispatch.so* "$dir/lib/"
  cp "$wt/build/lib/fldispatch/plugins/fld-cuda.so" "$dir/lib/fldispatch/plugins/"
  git -C "$root" rev-parse --short "$commit" > "$dir/commit"
  git worktree remove --force "$wt"
}
pack_base "$base" "$kit/base"
[ -z "$base2" ] || pack_base "$base2" "$kit/base2"
if [ "${FLD_WHEEL:-1}" != 0 ]; then
  FLDISPATCH_BUILD_GPU=1 FLDISPATCH_TORCH_NATIVE=0 python3 -m pip wheel -q --no-deps \
    --no-build-isolation -w "$kit/wheels" ./python >/dev/null
fi
if [ "${PEERS_WHEELS:-1}" != 0 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$kit/wheels" liger-kernel==0.8.5 flag-gems==5.0.2 sqlalchemy==2.0.48 greenlet==3.2.4 >/dev/null ||
    echo "pack: the peers' wheels could not be downloaded; gpu_peers.py runs without them" >&2
fi
tar czf /tmp/fld-kit.tgz -C "$kit" .
find "$kit" -mindepth 1 -delete
mv /tmp/fld-kit.tgz "$kit/kit.tgz"
echo "packed $kit/kit.tgz ($(du -sm "$kit/kit.tgz" | cut -f1) MiB; base $(git rev-parse --short "$base")${base2:+, base2 $(git rev-parse --short "$base2")})"
