#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints "FLD_ROCM_PROBED_ARCHS := <archs>" for the GPU architectures among
# $2... that hipcc ($1) can compile a kernel for (one device-only compile of
# an empty kernel each, about half a second). Used by plugin.mk, once per hipcc.
hipcc=$1
shift
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
printf '#include <hip/hip_runtime.h>\n__global__ void fld_probe_kernel() {}\n' > "$tmp/probe.hip"
ok=""
for arch in "$@"; do
    if HIP_PLATFORM=amd "$hipcc" --offload-arch="$arch" --cuda-device-only -c "$tmp/probe.hip" \
        -o "$tmp/probe.o" >/dev/null 2>&1; then
        ok="$ok $arch"
    fi
done
echo "# written by plugins/rocm/probe_archs.sh for $hipcc"
echo "FLD_ROCM_PROBED_ARCHS :=$ok"
