# SPDX-License-Identifier: Apache-2.0
"""The calls of test_torch_native_gpu.py, in a process of their own (the
fake CUDA backend stays registered for the rest of a process, and the library
there loads the fixture plugin fld-fakecuda.so alone):

    python fake_cuda_calls.py FAKE_CUDA_SO FAKECUDA_PLUGIN_SO

with VLLM_FL_PLUGIN_DIR naming FAKECUDA_PLUGIN_SO's directory. Runs
torch.ops.fldispatch.* on fake CUDA tensors (host memory, device cuda:N) and
the same calls on CPU tensors, and prints one JSON object: per case, the
largest difference from the CPU result, and what the fixture plugin recorded
(the stream of its last kernel, the device it ran on), beside the stream
handles torch's current streams had and the library's stream after the call.
"""

import ctypes
import json
import sys

import torch

import fldispatch
import fldispatch.torch as ft


class Record(ctypes.Structure):
    """struct fakecuda_record (tests/gpuplug/fakecuda.h)."""
    _fields_ = [("stream", ctypes.c_void_p), ("variant", ctypes.c_int), ("device", ctypes.c_int),
                ("kernels", ctypes.c_int), ("pushes", ctypes.c_int), ("pops", ctypes.c_int),
                ("contexts", ctypes.c_uint), ("memcpy_kind", ctypes.c_int),
                ("synchronizes", ctypes.c_int), ("device_counts", ctypes.c_int),
                ("captures", ctypes.c_int), ("replays", ctypes.c_int)]


def main(fake_cuda_so, plugin_so):
    torch.ops.load_library(fake_cuda_so)
    fake = torch.ops.fake_cuda
    plugin = ctypes.CDLL(plugin_so)  # the copy the library loaded: one handle
    plugin.fakecuda_record_size.restype = ctypes.c_size_t
    size = plugin.fakecuda_record_size()
    if size != ctypes.sizeof(Record):  # fakecuda_record_get would write past a short copy
        sys.exit(f"Record is {ctypes.sizeof(Record)} bytes, struct fakecuda_record "
                 f"{size}: make the two agree (tests/gpuplug/fakecuda.h)")
    ops = torch.ops.fldispatch
    g = torch.Generator().manual_seed(7)
    previous = 0x1234  # the library's stream for CUDA before each call

    def record():
        r = Record()
        plugin.fakecuda_record_get(ctypes.byref(r))
        return {"stream": r.stream or 0, "device": r.device, "kernels": r.kernels}

    def run(name, device, stream_id, call, cpu_args):
        """call(op args on the device) against call(cpu_args); the outputs are the
        args that the op writes, compared after the call."""
        dev_args = [fake.to_device(a, device) if isinstance(a, torch.Tensor) else a
                    for a in cpu_args]
        fake.set_stream(device, stream_id)
        fldispatch.set_stream("cuda", previous)
        before = record()["kernels"]
        call(*dev_args)
        call(*cpu_args)
        diff = max(float((fake.to_cpu(d).float() - c.float()).abs().max())
                   for d, c in zip(dev_args, cpu_args) if isinstance(c, torch.Tensor))
        r = record()
        return name, {"diff": diff, "seen": r, "kernels": r["kernels"] - before,
                      "torch_stream": fake.stream_handle(device),
                      "after": fldispatch.get_stream("cuda") or 0}

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    results = dict([
        run("silu_and_mul", 0, 3, ops.silu_and_mul, [torch.empty(4, 32), rand(4, 64)]),
        run("gelu_and_mul_bf16", 0, 4, ops.gelu_and_mul,
            [torch.empty(4, 32, dtype=torch.bfloat16), rand(4, 64, dtype=torch.bfloat16)]),
        run("rms_norm_residual", 0, 5, lambda o, x, w, r: ops.rms_norm(o, x, w, r, 1e-5),
            [torch.empty(4, 64), rand(4, 64), rand(64), rand(4, 64)]),
        run("gemma_rms_norm", 0, 6, lambda o, x, w: ops.gemma_rms_norm(o, x, w, None, 1e-6),
            [torch.empty(4, 64), rand(4, 64), rand(64)]),
        run("rotary_embedding", 0, 8, lambda p, q, k, c: ops.rotary_embedding(p, q, k, 32, c, True),
            [torch.tensor([0, 3, 5]), rand(3, 64), rand(3, 32), rand(8, 32)]),
        run("rms_norm_on_device_1", 1, 9, lambda o, x, w: ops.rms_norm(o, x, w, None, 1e-6),
            [torch.empty(2, 64), rand(2, 64), rand(64)]),
    ])

    # A call the library refuses: its error, and the library's stream put back.
    fake.set_stream(0, 11)
    fldispatch.set_stream("cuda", previous)
    try:
        ops.silu_and_mul(fake.to_device(torch.empty(4, 31), 0), fake.to_device(rand(4, 64), 0))
        error = None
    except fldispatch.Error as e:
        error = type(e).__name__
    results["refused"] = {"error": error, "after": fldispatch.get_stream("cuda") or 0}
    # A CPU tensor beside fake CUDA ones: refused by the library, naming the device mix.
    try:
        ops.silu_and_mul(torch.empty(4, 32), fake.to_device(rand(4, 64), 0))
        mixed = None
    except fldispatch.Error as e:
        mixed = str(e)
    results["mixed"] = {"error": mixed, "after": fldispatch.get_stream("cuda") or 0}
    results["native"] = ft.NATIVE
    results["previous"] = previous
    print(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:3])
