#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds fldispatch's native torch kernels (python/native/torch_ops.cpp: the
# CPU and CUDA kernels of torch.ops.fldispatch.*) into an installed
# fldispatch package, for the torch that python3 imports there: the GPU kit's
# wheel is built without them (on a machine whose torch is not the GPU
# machine's, and the kernels are bound to one torch), so on_device.sh's
# install step runs this on the GPU machine.
#
#   bash torch_native.sh SITE SRC
#
# SITE: the directory the wheel was installed into (SITE/fldispatch);
# SRC: the kit's native/ folder (torch_ops.cpp, row_split.h and include/,
# the library's headers with dlpack/dlpack.h). Writes
# SITE/fldispatch/_torch_ops.so and _torch_ops.abi (the record fldispatch.torch
# checks), or, when it cannot (no C++ compiler, no Python.h, the compile
# fails), _torch_ops.why with the reason, which fldispatch.torch reports
# (NATIVE_REASON) while its Python-level kernels serve. Exit status 0 in both
# cases; gpu_peers.py's fld_torch_kernels says which kernels ran.
set -uo pipefail
site=$1 src=$2
pkg=$site/fldispatch
why() {
  echo "$1" > "$pkg/_torch_ops.why"
  echo "torch_native: not built: $1"
  exit 0
}
[ -d "$pkg" ] || { echo "torch_native: $pkg: no installed fldispatch package" >&2; exit 1; }
rm -f "$pkg/_torch_ops.so" "$pkg/_torch_ops.abi" "$pkg/_torch_ops.why"
cxx=${CXX:-g++}
command -v "$cxx" >/dev/null || why "no C++ compiler ($cxx) on this machine"
# What the compile needs from the torch and the Python that will run it.
probe=$(PYTHONPATH=$site python3 -c '
import os, sysconfig, torch, torch.utils.cpp_extension as c
print(sysconfig.get_paths()["include"])
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(" ".join("-I" + p for p in c.include_paths()))
') || why "torch is not importable by python3"
{ read -r py_include; read -r torch_lib; read -r cxx11_abi; read -r torch_includes; } <<<"$probe"
[ -f "$py_include/Python.h" ] || why "no Python.h for python3 ($py_include)"
# shellcheck disable=SC2086  # torch_includes is a list of -I flags
if ! "$cxx" -std=c++20 -O2 -fopenmp -fPIC -shared -fvisibility=hidden -I"$src/include" \
    -I"$py_include" $torch_includes -D_GLIBCXX_USE_CXX11_ABI="$cxx11_abi" \
    "$src/torch_ops.cpp" -o "$pkg/_torch_ops.so" \
    -L"$torch_lib" -lc10 -ltorch_cpu -ltorch_python -L"$pkg/lib" -l:libfldispatch.so.0 \
    -Wl,-rpath,"$torch_lib" -Wl,-rpath,'$ORIGIN/lib'; then
  rm -f "$pkg/_torch_ops.so"
  why "the compile of native/torch_ops.cpp failed (its output is above, in install_native.txt)"
fi
PYTHONPATH=$site python3 -c 'import fldispatch.native_abi as a; print(a.record())' \
  > "$pkg/_torch_ops.abi" || { rm -f "$pkg/_torch_ops.so" "$pkg/_torch_ops.abi"; why "no ABI record"; }
echo "torch_native: built for $(cat "$pkg/_torch_ops.abi")"
PYTHONPATH=$site python3 -c '
import fldispatch.torch as t
print("torch_native: fldispatch.torch.NATIVE =", t.NATIVE, t.NATIVE_REASON or "")'
