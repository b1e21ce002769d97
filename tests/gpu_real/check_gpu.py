#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make check-gpu: what only a real NVIDIA GPU can show about fld-cuda.so.

The CUDA plugin's logic is tested without a GPU (tests/gpu runs the kernel
source under a CPU emulator, tests/gpuplug the glue over it); this program
runs the built library on a CUDA device through PyTorch tensors and checks:

  sizes     gated and elementwise activations with more than 65,535 rows
            (the grid's y limit) in every dtype, more than 2^31 elements
            (64-bit indexing), norms with few wide rows and very many narrow
            ones (qk-norm);
  layouts   views 2 bytes off 16-byte alignment (vendor.cuda declines them,
            reference.cuda runs them), the fused residual in place (out is
            x), rotary on q/k views of one fused qkv tensor, int32 and int64
            positions, rot_dim < head_size, an out-of-range position left
            alone, a float32 cache with 16-bit q/k; rotary_embedding_out
            from such views into new tensors gives the in-place op's bits,
            leaves its inputs alone and does not write the token of an
            out-of-range position;
  selection every compute op resolves to vendor.cuda in every dtype;
  streams   with no fld_set_stream() the kernels run on the per-thread
            default stream and stay ordered with PyTorch's legacy-stream
            work; a side stream and cudaStreamLegacy are used as given;
  graphs    the calls captured in a CUDA graph on the capture stream, and
            replayed;
  contexts  a thread that never chose a device still has no current
            context after a call (none is created on device 0 for it);
  speed     L2-cold timings (input sets rotated past the L2) of the plugin,
            PyTorch eager and a device-to-device copy, reported, not judged.

Every output is filled with NaN first and compared with a float32 PyTorch
reference; a run twice gives the same bits. Exit status: 0 all passed (or
skipped: no CUDA device), 1 a check failed, 2 usage.

    python3 tests/gpu_real/check_gpu.py [--lib build/lib/libfldispatch.so]
        [--tool build/bin/fldispatch] [--quick] [--json FILE]

FLD_LIB / FLD_TOOL stand for --lib / --tool. It has run on an NVIDIA H100
and an H200: docs/BENCHMARKS.md ("Device kernels") has the results.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable

CUDA = 2  # kDLCUDA
LEGACY_STREAM = 1  # cudaStreamLegacy


def skip(why):
    print(f"skipped: no CUDA device ({why})")
    sys.exit(0)


def cuda_devices_without_torch():
    """Devices the driver sees, or 0 when there is no driver."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    n = ctypes.c_int(0)
    if cu.cuInit(0) != 0 or cu.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return 0
    return n.value


try:
    import torch
except ImportError as e:
    if cuda_devices_without_torch() > 0:
        print(f"check_gpu: a CUDA device is present but PyTorch is not importable ({e})")
        sys.exit(1)
    skip(f"no PyTorch ({e}) and no CUDA driver device")

if not torch.cuda.is_available():
    skip(f"torch {torch.__version__}: torch.cuda.is_available() is False")


# ------------------------------------------------------------------ binding --
class Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int32),
                ("dtype", DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


TP = ctypes.POINTER(Tensor)
CODES = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16),
         torch.int64: (0, 64), torch.int32: (0, 32)}


class Fld:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.fld_init.restype = ctypes.c_int
        L.fld_last_error.restype = ctypes.c_char_p
        L.fld_set_stream.argtypes = [ctypes.c_int, ctypes.c_void_p]
        L.fld_get_stream.argtypes = [ctypes.c_int]
        L.fld_get_stream.restype = ctypes.c_void_p
        for n in ACTS + UNARY:
            getattr(L, "fld_" + n).argtypes = [TP, TP]
        for n in ("rms_norm", "gemma_rms_norm"):
            getattr(L, "fld_" + n).argtypes = [TP, TP, TP, TP, ctypes.c_float]
        L.fld_rotary_embedding.argtypes = [TP, TP, TP, ctypes.c_int64, TP, ctypes.c_bool]
        L.fld_rotary_embedding_out.argtypes = [TP, TP, TP, ctypes.c_int64, TP, ctypes.c_bool,
                                               TP, TP]
        L.fld_resolve.argtypes = [ctypes.c_char_p, ctypes.c_int, DType,
                                  ctypes.POINTER(ctypes.c_char_p)]
        self.ok(L.fld_init(), "fld_init")

    def ok(self, rc, what):
        if rc != 0:
            raise AssertionError(f"{what}: status {rc}: {self.lib.fld_last_error().decode()}")

    @staticmethod
    def view(t):
        """A DLTensor for a torch tensor (data_ptr() includes the storage offset)."""
        if t is None:
            return None
        shape = (ctypes.c_int64 * t.dim())(*t.shape)
        strides = (ctypes.c_int64 * t.dim())(*t.stride())
        code, bits = CODES[t.dtype]
        d = Tensor(t.data_ptr(), Device(CUDA, t.device.index or 0), t.dim(),
                   DType(code, bits, 1), shape, strides, 0)
        d._keep = (shape, strides, t)
        return ctypes.pointer(d)

    def act(self, op, out, x):
        self.ok(getattr(self.lib, "fld_" + op)(self.view(out), self.view(x)), op)

    def norm(self, out, x, w, res, eps, gemma=False):
        fn = self.lib.fld_gemma_rms_norm if gemma else self.lib.fld_rms_norm
        self.ok(fn(self.view(out), self.view(x), self.view(w), self.view(res), eps), "rms_norm")

    def rotary(self, pos, q, k, head, cache, neox):
        self.ok(self.lib.fld_rotary_embedding(self.view(pos), self.view(q), self.view(k), head,
                                              self.view(cache), neox), "rotary_embedding")

    def rotary_out(self, pos, q, k, head, cache, neox, q_out, k_out):
        self.ok(self.lib.fld_rotary_embedding_out(self.view(pos), self.view(q), self.view(k), head,
                                                  self.view(cache), neox, self.view(q_out),
                                                  self.view(k_out)), "rotary_embedding_out")

    def set_stream(self, handle):
        self.ok(self.lib.fld_set_stream(CUDA, ctypes.c_void_p(handle)), "fld_set_stream")

    def resolve(self, op, dtype):
        code, bits = CODES[dtype]
        impl = ctypes.c_char_p()
        self.ok(self.lib.fld_resolve(op.encode(), CUDA, DType(code, bits, 1), ctypes.byref(impl)),
                f"fld_resolve {op}")
        assert impl.value is not None  # set by a successful fld_resolve
        return impl.value.decode()


# --------------------------------------------------------------- reference --
def tol(dtype, loose=1.0):
    """(atol, rtol): float32 to a few ulps; 16-bit to one rounding step."""
    base = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3),
            torch.bfloat16: (8e-3, 1.6e-2)}[dtype]
    return base[0] * loose, base[1] * loose


def compare(got, want, dtype, what, loose=1.0):
    g, w = got.float(), want.float()
    if torch.isnan(g).any():
        raise AssertionError(f"{what}: NaN left in the output (elements not written)")
    atol, rtol = tol(dtype, loose)
    bad = (g - w).abs() > atol + rtol * w.abs()
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} elements off; first at {list(i)}: "
                             f"{g[i].item()} vs {w[i].item()}")
    return (g - w).abs().max().item()


def act_ref(op, x, d):
    a, b = x[:, :d].float(), x[:, d:2 * d].float()
    if op == "silu_and_mul":
        return torch.nn.functional.silu(a) * b
    if op == "mul_and_silu":
        return a * torch.nn.functional.silu(b)
    if op == "gelu_and_mul":
        return torch.nn.functional.gelu(a) * b
    return torch.nn.functional.gelu(a, approximate="tanh") * b


def unary_ref(op, x):
    """vLLM's QuickGELU, NewGELU and FastGELU in float32."""
    v = x.float()
    if op == "gelu_quick":
        return v * torch.sigmoid(1.702 * v)
    c = 0.79788456
    if op == "gelu_new":
        return 0.5 * v * (1.0 + torch.tanh(c * (v + 0.044715 * v.pow(3))))
    return 0.5 * v * (1.0 + torch.tanh(c * v * (1.0 + 0.044715 * v * v)))


def norm_ref(x, w, res, eps, gemma, dtype):
    v = x.float()
    new_res = None
    if res is not None:
        new_res = (v + res.float()).to(dtype)  # stored rounded, then normalised
        v = new_res.float()
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        v = v * (w.float() + (1.0 if gemma else 0.0))
    return v, new_res


def rotary_ref(x, pos, cache, heads, head, rot, neox):
    """x [T, heads * head] rotated per token; positions outside the cache: unchanged."""
    T = x.shape[0]
    y = x.float().reshape(T, heads, head).clone()
    valid = (pos >= 0) & (pos < cache.shape[0])
    p = pos.long().clamp(0, cache.shape[0] - 1)
    c = cache[p, : rot // 2].float()[:, None, :]
    s = cache[p, rot // 2: rot].float()[:, None, :]
    if neox:
        a, b = y[..., : rot // 2].clone(), y[..., rot // 2: rot].clone()
        y[..., : rot // 2], y[..., rot // 2: rot] = a * c - b * s, b * c + a * s
    else:
        a, b = y[..., 0:rot:2].clone(), y[..., 1:rot:2].clone()
        y[..., 0:rot:2], y[..., 1:rot:2] = a * c - b * s, b * c + a * s
    y[~valid] = x.float().reshape(T, heads, head)[~valid]
    return y.reshape(T, heads * head)


# ------------------------------------------------------------------- cases --
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ACTS = ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul")
UNARY = ("gelu_quick", "gelu_new", "gelu_fast")


def twice(fn):
    """Runs fn twice (it returns the output); the two must agree bit for bit."""
    a = fn()
    torch.cuda.synchronize()
    b = fn()
    torch.cuda.synchronize()
    if not torch.equal(a.view(torch.uint8), b.view(torch.uint8)):
        raise AssertionError("two runs differ (a race?)")
    return a


def case_act(fld, op, dtype, rows, d, misaligned=False, chunk=16384):
    if misaligned:
        store = torch.empty(rows, 2 * d + 8, dtype=dtype, device="cuda").uniform_(-4, 4)
        x = store[:, 1:1 + 2 * d]  # rows 2 or 4 bytes off 16-byte alignment
    else:
        x = torch.empty(rows, 2 * d, dtype=dtype, device="cuda").uniform_(-4, 4)

    def run():
        out = torch.full((rows, d), float("nan"), dtype=dtype, device="cuda")
        fld.act(op, out, x)
        return out

    out = twice(run)
    err = 0.0
    for r in range(0, rows, chunk):
        err = max(err, compare(out[r:r + chunk], act_ref(op, x[r:r + chunk], d), dtype,
                               f"{op} rows {r}+"))
    return f"max err {err:.2e}"


def case_unary(fld, op, dtype, rows, d, misaligned=False):
    if misaligned:
        store = torch.empty(rows, d + 8, dtype=dtype, device="cuda").uniform_(-6, 6)
        x = store[:, 1:1 + d]
    else:
        x = torch.empty(rows, d, dtype=dtype, device="cuda").uniform_(-6, 6)

    def run():
        out = torch.full((rows, d), float("nan"), dtype=dtype, device="cuda")
        fld.act(op, out, x)
        return out

    out = twice(run)
    return f"max err {compare(out, unary_ref(op, x), dtype, op):.2e}"


def case_norm(fld, dtype, rows, width, residual=False, inplace=False, gemma=False, weight=True,
              misaligned=False):
    eps = 1e-6
    if misaligned:
        store = torch.empty(rows, width + 8, dtype=dtype, device="cuda").uniform_(-2, 2)
        x0 = store[:, 1:1 + width]
    else:
        x0 = torch.empty(rows, width, dtype=dtype, device="cuda").uniform_(-2, 2)
    w = torch.empty(width, dtype=dtype, device="cuda").uniform_(0.5, 1.5) if weight else None
    r0 = torch.empty(rows, width, dtype=dtype, device="cuda").uniform_(-2, 2) if residual else None
    want, want_res = norm_ref(x0, w, r0, eps, gemma, dtype)
    results = {}

    def run():
        x = x0.clone() if inplace else x0
        res = r0.clone() if residual else None  # type: ignore[union-attr]  # r0 is a tensor whenever residual is
        out = x if inplace else torch.full((rows, width), float("nan"), dtype=dtype,
                                           device="cuda")
        fld.norm(out, x, w, res, eps, gemma)
        results["res"] = res
        return out

    out = twice(run)
    err = compare(out, want, dtype, "rms_norm", loose=4.0)
    if residual:
        compare(results["res"], want_res, dtype, "residual (x + residual, rounded)")
    return f"max err {err:.2e}"


def case_rotary(fld, dtype, cache_dtype, T, qh, kh, head=128, rot=128, neox=True, pos32=False,
                max_pos=4096):
    """q and k are views into one [T, (qh + 2 kh) * head] qkv tensor, as vLLM has them."""
    qkv0 = torch.empty(T, (qh + 2 * kh) * head, dtype=dtype, device="cuda").uniform_(-1, 1)
    inv = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, device="cuda").float() / rot))
    ang = torch.arange(max_pos, device="cuda").float()[:, None] * inv[None, :]
    cache = torch.cat([ang.cos(), ang.sin()], -1).to(cache_dtype).contiguous()
    pos = torch.randint(0, max_pos, (T,), device="cuda")
    pos[T // 3] = max_pos + 5  # outside the cache: the token stays as it was
    pos = pos.to(torch.int32 if pos32 else torch.int64)
    q_end, k_end = qh * head, (qh + kh) * head

    def run():
        qkv = qkv0.clone()
        fld.rotary(pos, qkv[:, :q_end], qkv[:, q_end:k_end], head, cache, neox)
        return qkv

    qkv = twice(run)
    if not torch.equal(qkv[:, k_end:], qkv0[:, k_end:]):
        raise AssertionError("rotary wrote into v")
    e1 = compare(qkv[:, :q_end], rotary_ref(qkv0[:, :q_end], pos, cache, qh, head, rot, neox),
                 dtype, "rotary q")
    e2 = compare(qkv[:, q_end:k_end],
                 rotary_ref(qkv0[:, q_end:k_end], pos, cache, kh, head, rot, neox), dtype,
                 "rotary k")
    return f"max err {max(e1, e2):.2e}"


def case_rotary_out(fld, dtype, T, qh, kh, head=128, rot=128, neox=True, max_pos=4096):
    """rotary_embedding_out from q/k views of a qkv tensor into new tensors: the same bits as
    rotary_embedding in place, the inputs untouched, the tail past rot copied, and the token of
    an out-of-range position not written (its rows keep their NaN)."""
    qkv0 = torch.empty(T, (qh + 2 * kh) * head, dtype=dtype, device="cuda").uniform_(-1, 1)
    inv = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, device="cuda").float() / rot))
    ang = torch.arange(max_pos, device="cuda").float()[:, None] * inv[None, :]
    cache = torch.cat([ang.cos(), ang.sin()], -1).to(dtype).contiguous()
    pos = torch.randint(0, max_pos, (T,), device="cuda")
    bad = T // 3
    pos[bad] = max_pos + 5
    q_end, k_end = qh * head, (qh + kh) * head
    qkv = qkv0.clone()

    def run():
        q_out = torch.full((T, qh * head), float("nan"), dtype=dtype, device="cuda")
        k_out = torch.full((T, kh * head), float("nan"), dtype=dtype, device="cuda")
        fld.rotary_out(pos, qkv[:, :q_end], qkv[:, q_end:k_end], head, cache, neox, q_out, k_out)
        return torch.cat([q_out, k_out], 1)

    out = twice(run)
    if not torch.equal(qkv.view(torch.uint8), qkv0.view(torch.uint8)):
        raise AssertionError("rotary_embedding_out wrote into its inputs")
    if not torch.isnan(out[bad].float()).all():
        raise AssertionError("the token of an out-of-range position was written")
    inplace = qkv0.clone()
    fld.rotary(pos, inplace[:, :q_end], inplace[:, q_end:k_end], head, cache, neox)
    torch.cuda.synchronize()
    keep = torch.arange(T, device="cuda") != bad
    if not torch.equal(out[keep].view(torch.uint8), inplace[keep, :k_end].view(torch.uint8)):
        raise AssertionError("rotary_embedding_out differs from rotary_embedding in place")
    return "bits equal to rotary_embedding in place"


def case_default_stream_order(fld):
    """No stream set: the per-thread stream, ordered with PyTorch's legacy-stream work."""
    fld.set_stream(0)
    if torch.cuda.current_stream().cuda_stream != 0:
        return "not checked: PyTorch's current stream is not the legacy stream"
    rows, d = 16384, 8192
    src = torch.empty(rows, 2 * d, dtype=torch.bfloat16, device="cuda").uniform_(-4, 4)
    x = torch.zeros_like(src)
    out = torch.full((rows, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    x.copy_(src)  # legacy stream: the kernel must wait for this copy
    fld.act("silu_and_mul", out, x)  # per-thread default stream
    check = out.float().sum()  # legacy stream: must wait for the kernel
    torch.cuda.synchronize()
    compare(out, act_ref("silu_and_mul", src, d), torch.bfloat16, "after a legacy-stream copy")
    if torch.isnan(check):
        raise AssertionError("PyTorch read the output before the kernel wrote it")
    return "ordered both ways"


def case_explicit_streams(fld):
    """A side stream and cudaStreamLegacy are used as given."""
    rows, d = 4096, 4096
    x = torch.empty(rows, 2 * d, dtype=torch.float16, device="cuda").uniform_(-4, 4)
    want = act_ref("gelu_tanh_and_mul", x, d)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = torch.full((rows, d), float("nan"), dtype=torch.float16, device="cuda")
        fld.set_stream(side.cuda_stream)
        fld.act("gelu_tanh_and_mul", out, x)
        total = out.float().sum()  # same stream: ordered
    side.synchronize()
    compare(out, want, torch.float16, "on a side stream")
    if torch.isnan(total):
        raise AssertionError("side stream: work after the call did not see its output")
    out2 = torch.full((rows, d), float("nan"), dtype=torch.float16, device="cuda")
    torch.cuda.synchronize()
    fld.set_stream(LEGACY_STREAM)
    fld.act("gelu_tanh_and_mul", out2, x)
    torch.cuda.synchronize()
    fld.set_stream(0)
    compare(out2, want, torch.float16, "on cudaStreamLegacy")
    return "side stream and cudaStreamLegacy"


def case_graph(fld):
    dtype, T, H = torch.bfloat16, 64, 4096
    x = torch.empty(T, 2 * H, dtype=dtype, device="cuda").uniform_(-4, 4)
    out = torch.empty(T, H, dtype=dtype, device="cuda")
    y = torch.empty(T, H, dtype=dtype, device="cuda").uniform_(-2, 2)
    w = torch.empty(H, dtype=dtype, device="cuda").uniform_(0.5, 1.5)
    yo = torch.empty_like(y)
    qk = torch.empty(T, 2 * H, dtype=dtype, device="cuda").uniform_(-1, 1)
    qk0 = qk.clone()
    cache = torch.empty(512, 128, dtype=dtype, device="cuda").uniform_(-1, 1)
    pos = torch.arange(T, device="cuda")
    # the first calls load the module and resolve the choices, outside the capture
    fld.set_stream(torch.cuda.current_stream().cuda_stream)
    fld.act("silu_and_mul", out, x)
    fld.norm(yo, y, w, None, 1e-6)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fld.set_stream(torch.cuda.current_stream().cuda_stream)
        fld.act("silu_and_mul", out, x)
        fld.norm(yo, y, w, None, 1e-6)
        fld.rotary(pos, qk[:, :H], qk[:, H:], 128, cache, True)
    fld.set_stream(0)
    out.fill_(float("nan"))
    yo.fill_(float("nan"))
    qk.copy_(qk0)
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    compare(out, act_ref("silu_and_mul", x, H), dtype, "replayed silu_and_mul")
    compare(yo, norm_ref(y, w, None, 1e-6, False, dtype)[0], dtype, "replayed rms_norm", loose=4)
    compare(qk[:, :H], rotary_ref(qk0[:, :H], pos, cache, H // 128, 128, 128, True), dtype,
            "replayed rotary")
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(20):
        g.replay()
    t1.record()
    t1.synchronize()
    return f"{t0.elapsed_time(t1) * 1e3 / 60:.2f} us per replayed kernel"


def case_no_context_created(fld):
    """A new thread without a current context ends the call without one."""
    cu = ctypes.CDLL("libcuda.so.1")
    x = torch.empty(64, 256, dtype=torch.float32, device="cuda:0").uniform_(-1, 1)
    devices = torch.cuda.device_count()
    x1 = (torch.empty(64, 256, dtype=torch.float32, device="cuda:1").uniform_(-1, 1)
          if devices > 1 else None)
    torch.cuda.synchronize()
    t = x1 if x1 is not None else x
    out = torch.empty(t.shape[0], t.shape[1] // 2, dtype=t.dtype, device=t.device)
    torch.cuda.synchronize()
    seen: dict[str, Any] = {}

    def worker():  # touches CUDA only through the plugin
        ctx = ctypes.c_void_p()
        cu.cuCtxGetCurrent(ctypes.byref(ctx))
        seen["before"] = ctx.value
        try:
            fld.act("silu_and_mul", out, t)
            seen["ok"] = True
        except Exception as e:  # noqa: BLE001 - reported below
            seen["error"] = str(e)
        ctx = ctypes.c_void_p()
        cu.cuCtxGetCurrent(ctypes.byref(ctx))
        seen["after"] = ctx.value

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    torch.cuda.synchronize()
    if "error" in seen:
        raise AssertionError(seen["error"])
    if seen["before"]:
        return "not checked: the new thread already had a current context"
    if seen["after"]:
        raise AssertionError("the thread has a current context after the call")
    compare(out, act_ref("silu_and_mul", t, t.shape[1] // 2), t.dtype, "call from the thread")
    return f"no context left current ({devices} device(s); call on device {1 if x1 is not None else 0})"


def case_selection(fld, tool):
    """vendor.cuda serves every op; the listing names the runtime, driver floor and code."""
    for op in ACTS + UNARY + ("rms_norm", "gemma_rms_norm", "rotary_embedding",
                              "rotary_embedding_out"):
        for dt in DTYPES:
            got = fld.resolve(op, dt)
            if got != "vendor.cuda":
                raise AssertionError(f"{op} {dt} resolves to {got}, not vendor.cuda")
    if not tool:
        return "resolve only (no --tool)"
    text = subprocess.run([tool, "list", "--verbose"], capture_output=True, text=True,
                          timeout=60).stdout
    line = next((ln for ln in text.splitlines() if "detail:" in ln and "CUDA runtime" in ln), "")
    if "needs NVIDIA driver >=" not in line or "code for sm_" not in line:
        raise AssertionError(f"fldispatch list: cuda detail line is '{line.strip()}'")
    return line.strip()


# ------------------------------------------------------------------- speed --
COLD_BYTES = 512 << 20


def timed(fn, sets, reps=7, inner=30):
    """Median microseconds per call, calls taking the sets in turn."""
    for s in sets:
        fn(s)
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(inner):
            fn(sets[i % len(sets)])
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e3 / inner)
    return statistics.median(samples)


def make_sets(make, set_bytes):
    n = max(1, min(32, -(-COLD_BYTES // set_bytes)))
    return [make() for _ in range(n)]


def speed(fld, quick):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fld.set_stream(stream.cuda_stream)
        try:
            return speed_on_stream(fld, quick)
        finally:
            fld.set_stream(0)


def speed_on_stream(fld, quick):
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = timed(dst.copy_, [src], reps=5, inner=5)
    copy_gbps = 2 * n / copy_us / 1e3
    del src, dst
    torch.cuda.empty_cache()
    rows = []
    shapes = ((4096, 4096),) if quick else ((4096, 4096), (16384, 8192))
    for dt in (torch.float32, torch.bfloat16):
        es = torch.tensor([], dtype=dt).element_size()
        for T, H in shapes:
            def mk_act():
                x = torch.empty(T, 2 * H, dtype=dt, device="cuda").uniform_(-4, 4)
                o = torch.empty(T, H, dtype=dt, device="cuda")
                return x, o, fld.view(o), fld.view(x)

            b = 3 * T * H * es
            sets = make_sets(mk_act, b)
            f = timed(lambda s: fld.ok(fld.lib.fld_silu_and_mul(s[2], s[3]), "silu"), sets)
            t = timed(lambda s: torch.mul(torch.nn.functional.silu(s[0][:, :H]), s[0][:, H:],
                                          out=s[1]), sets)
            rows.append(("silu_and_mul", dt, T, H, f, b / f / 1e3, t))
            del sets

            def mk_norm():
                x = torch.empty(T, H, dtype=dt, device="cuda").uniform_(-2, 2)
                o = torch.empty_like(x)
                w = torch.empty(H, dtype=dt, device="cuda").uniform_(0.5, 1.5)
                r = torch.empty_like(x).uniform_(-0.01, 0.01)
                return (x, o, w, r, fld.view(x), fld.view(o), fld.view(w), fld.view(r))

            b = 2 * T * H * es
            sets = make_sets(mk_norm, b)
            f = timed(lambda s: fld.ok(fld.lib.fld_rms_norm(s[5], s[4], s[6], None, 1e-6),
                                       "rms_norm"), sets)
            t = timed(lambda s: torch.nn.functional.rms_norm(s[0], (H,), s[2], 1e-6), sets)
            rows.append(("rms_norm", dt, T, H, f, b / f / 1e3, t))
            f = timed(lambda s: fld.ok(fld.lib.fld_rms_norm(s[4], s[4], s[6], s[7], 1e-6),
                                       "rms_norm+residual"), sets)
            rows.append(("rms_norm+residual in place", dt, T, H, f, 2 * b / f / 1e3,
                         float("nan")))
            del sets
            torch.cuda.empty_cache()
    return copy_gbps, rows


# -------------------------------------------------------------------- main --
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.environ.get("FLD_LIB", "build/lib/libfldispatch.so"))
    ap.add_argument("--tool", default=os.environ.get("FLD_TOOL"))
    ap.add_argument("--quick", action="store_true", help="no 2^31-element case, fewer timings")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    if not os.path.exists(args.lib):
        print(f"check_gpu: {args.lib} not found (build first, or pass --lib)", file=sys.stderr)
        return 2
    os.environ.setdefault("VLLM_FL_PLATFORM", "cuda")
    fld = Fld(os.path.abspath(args.lib))
    torch.manual_seed(1)
    name = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    print(f"{name} sm_{cap[0]}{cap[1]}, torch {torch.__version__} (CUDA {torch.version.cuda})")

    checks: list[tuple[str, Callable[..., Any]]] = [("selection and listing", lambda: case_selection(fld, args.tool))]
    for dt in DTYPES:
        for op in UNARY:
            checks.append((f"{op} {dt} 70000x2048 (> 65535 rows)",
                           lambda op=op, dt=dt: case_unary(fld, op, dt, 70000, 2048)))
            checks.append((f"{op} {dt} 97x4096 misaligned view",
                           lambda op=op, dt=dt: case_unary(fld, op, dt, 97, 4096, misaligned=True)))
        checks += [
            (f"rotary_embedding_out {dt} neox 1000 tokens 32q/8k of a qkv tensor",
             lambda dt=dt: case_rotary_out(fld, dt, 1000, 32, 8)),
            (f"rotary_embedding_out {dt} gptj rot_dim 64 of head 128",
             lambda dt=dt: case_rotary_out(fld, dt, 333, 8, 2, rot=64, neox=False)),
        ]
        for op in ACTS:
            checks.append((f"{op} {dt} 70000x4096 (> 65535 rows)",
                           lambda op=op, dt=dt: case_act(fld, op, dt, 70000, 4096)))
            checks.append((f"{op} {dt} 97x4096 misaligned view",
                           lambda op=op, dt=dt: case_act(fld, op, dt, 97, 4096, misaligned=True)))
        checks += [
            (f"rms_norm {dt} 3x16384 (few wide rows)", lambda dt=dt: case_norm(fld, dt, 3, 16384)),
            (f"rms_norm {dt} 4096x8192 residual in place",
             lambda dt=dt: case_norm(fld, dt, 4096, 8192, residual=True, inplace=True)),
            (f"rms_norm {dt} 70000x128 (qk-norm)", lambda dt=dt: case_norm(fld, dt, 70000, 128)),
            (f"gemma_rms_norm {dt} 257x5120 residual",
             lambda dt=dt: case_norm(fld, dt, 257, 5120, residual=True, gemma=True)),
            (f"rms_norm {dt} 100x4096 no weight",
             lambda dt=dt: case_norm(fld, dt, 100, 4096, weight=False)),
            (f"rms_norm {dt} 83x4096 misaligned view",
             lambda dt=dt: case_norm(fld, dt, 83, 4096, misaligned=True)),
            (f"rotary {dt} neox 4096 tokens 32q/8k of a qkv tensor",
             lambda dt=dt: case_rotary(fld, dt, dt, 4096, 32, 8)),
            (f"rotary {dt} gptj int32 positions",
             lambda dt=dt: case_rotary(fld, dt, dt, 999, 16, 4, neox=False, pos32=True)),
            (f"rotary {dt} rot_dim 64 of head 128",
             lambda dt=dt: case_rotary(fld, dt, dt, 777, 16, 4, rot=64)),
        ]
        if dt != torch.float32:
            checks.append((f"rotary {dt} float32 cache",
                           lambda dt=dt: case_rotary(fld, dt, torch.float32, 513, 8, 8)))
    if not args.quick:
        checks.append(("silu_and_mul bf16 70000x16384 (> 2^31 elements)",
                       lambda: case_act(fld, "silu_and_mul", torch.bfloat16, 70000, 16384)))
    checks += [
        ("default stream ordered with PyTorch's", lambda: case_default_stream_order(fld)),
        ("side stream and cudaStreamLegacy", lambda: case_explicit_streams(fld)),
        ("CUDA graph capture and replay", lambda: case_graph(fld)),
        ("no context created for a thread without one", lambda: case_no_context_created(fld)),
    ]

    report = {"device": name, "checks": []}
    failed = 0
    t_start = time.time()
    for label, fn in checks:
        try:
            detail = fn()
            print(f"PASS {label}: {detail}")
            report["checks"].append({"check": label, "ok": True, "detail": detail})
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failed += 1
            print(f"FAIL {label}: {e}")
            report["checks"].append({"check": label, "ok": False, "error": str(e)})
        fld.set_stream(0)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    copy_gbps, rows = speed(fld, args.quick)
    report["copy_gbps"] = copy_gbps
    report["timings"] = []
    print(f"\nL2-cold timings (input sets rotated past the L2); device copy {copy_gbps:.0f} GB/s")
    print(f"{'op':28s} {'dtype':9s} {'T':>6s} {'H':>5s} {'fld us':>8s} {'GB/s':>6s} "
          f"{'share':>6s} {'torch us':>9s}")
    for op, dt, T, H, us, gbps, tus in rows:
        dts = str(dt).replace("torch.", "")
        print(f"{op:28s} {dts:9s} {T:6d} {H:5d} {us:8.1f} {gbps:6.0f} {gbps / copy_gbps:6.1%} "
              f"{tus:9.1f}")
        report["timings"].append({"op": op, "dtype": dts, "T": T, "H": H, "us": us,
                                  "gbps": gbps, "share_of_copy": gbps / copy_gbps,
                                  "torch_us": tus})
    passed = len(checks) - failed
    print(f"\n{passed} passed, {failed} failed ({time.time() - t_start:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
