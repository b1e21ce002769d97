#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fldispatch's CUDA kernels against what a vLLM user on an NVIDIA GPU runs
otherwise, timed as vLLM's CUDA graphs see them.

    python3 bench/gpu_peers.py [--budget-s S] [--ops OP,..] [--impls I,..]
        [--dtypes bf16,f16,f32] [--quick] [--out DIR]

Implementations (those importable run; the others are named once):
  floor       one 1-element fill kernel: the cost of any kernel in a graph
  fldispatch  libfldispatch through ctypes, one C call (FLD_LIB; --label
              names its rows otherwise: another build's library, for a
              before/after, runs in a process of its own, as two copies of
              the library in one process bind each other's symbols)
  fld_torch   torch.ops.fldispatch.*, the path vLLM's IR provider calls: the
              native CUDA kernels (python/native/torch_ops.cpp) where the
              installed package has them for this torch, else the Python-level
              ones; the first line and the JSON head's fld_torch_kernels say
              which ("native" or "python (why)")
  eager       PyTorch eager, vLLM's forward_native formulas
  compile     torch.compile of the same (Inductor, dynamic token count, as
              vLLM compiles: the kernel vLLM runs by default on CUDA)
  vllm_c      vLLM's own CUDA kernels, torch.ops._C (vLLM 0.20-0.26)
  flaggems    FlagGems, called as vllm-plugin-FL's flaggems backend calls it
  liger       Liger-Kernel (Triton); its rope takes cos and sin already
              gathered per token, so its call gathers them from positions
              first (one indexing kernel), as vLLM's rotary op does inside

Per (op, dtype, shape, implementation), two times:
  graph_us    device time per call: the call captured CALLS times in a CUDA
              graph (inputs rotated over two sets where they pass 32 MiB, so
              prefill shapes stream from HBM), the graph replayed, median of
              the replays / CALLS. What a decode step under CUDA graphs pays.
  launch_us   host time per call of back-to-back calls from Python, the
              queue kept short: what eager mode pays on the CPU side.
and err, the largest |result - float32 reference| / max |reference|.
GB/s is the op's bytes over graph_us; "copy" is the share of the same run's
device-to-device copy bandwidth. Output: a table on stdout, one JSON line per
row in DIR/gpu_peers.jsonl (DIR: --out, else $OUT, else .).

Cases run in order of weight (bf16 decode and hidden 4096 first) until the
budget is spent; what was skipped is listed at the end.
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

EPS = 1e-6
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
DECODE = (1, 8, 32, 128)
PREFILL = (512, 4096, 16384)
ACTS = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")
ALL_OPS = ("rms_norm", "fused_add_rms_norm") + ACTS + ("rotary_neox", "rotary_gptj")
ALL_IMPLS = ("floor", "fldispatch", "fld_torch", "eager", "compile", "vllm_c", "flaggems",
             "liger")
dev = "cuda"


# ---- fldispatch through ctypes -------------------------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DLPTR = ctypes.POINTER(DLTensor)
DL_CODES = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16),
            torch.int64: (0, 64), torch.int32: (0, 32)}
CUDA_DEVICE = 2  # kDLCUDA
ACT_SYMBOLS = {"silu_and_mul": "fld_silu_and_mul", "gelu_and_mul": "fld_gelu_and_mul",
               "gelu_tanh_and_mul": "fld_gelu_tanh_and_mul"}


class Fld:
    """libfldispatch loaded from path; calls take DLTensor pointers kept alive here."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.keep = []
        lib = self.lib
        lib.fld_last_error.restype = ctypes.c_char_p
        lib.fld_set_stream.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.fld_rms_norm.argtypes = [DLPTR, DLPTR, DLPTR, DLPTR, ctypes.c_float]
        lib.fld_rotary_embedding.argtypes = [DLPTR, DLPTR, DLPTR, ctypes.c_int64, DLPTR,
                                             ctypes.c_bool]
        for sym in ACT_SYMBOLS.values():
            getattr(lib, sym).argtypes = [DLPTR, DLPTR]

    def dl(self, t):
        shape = (ctypes.c_int64 * t.dim())(*t.shape)
        strides = (ctypes.c_int64 * t.dim())(*t.stride())
        code, bits = DL_CODES[t.dtype]
        d = DLTensor(t.data_ptr(), DLDevice(CUDA_DEVICE, t.device.index or 0), t.dim(),
                     DLDataType(code, bits, 1), shape, strides, 0)
        p = ctypes.pointer(d)
        self.keep.append((shape, strides, t, d, p))
        return p

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: rc {rc}: {self.lib.fld_last_error().decode()}")

    def use_current_stream(self):
        self.check(self.lib.fld_set_stream(
            CUDA_DEVICE, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
            "fld_set_stream")

    def call(self, op, s):
        lib, dl, check = self.lib, self.dl, self.check
        if op == "rms_norm":
            o, x, w = dl(s["out"]), dl(s["x"]), dl(s["w"])
            return lambda: check(lib.fld_rms_norm(o, x, w, None, EPS), op)
        if op == "fused_add_rms_norm":
            x, w, r = dl(s["x"]), dl(s["w"]), dl(s["r"])
            return lambda: check(lib.fld_rms_norm(x, x, w, r, EPS), op)
        if op in ACT_SYMBOLS:
            fn, o, x = getattr(lib, ACT_SYMBOLS[op]), dl(s["out"]), dl(s["x"])
            return lambda: check(fn(o, x), op)
        pos, q, k, c = dl(s["pos"]), dl(s["q"]), dl(s["k"]), dl(s["cache"])
        neox = op == "rotary_neox"
        return lambda: check(lib.fld_rotary_embedding(pos, q, k, 128, c, neox), op)


# ---- peers ---------------------------------------------------------------------------------

def fld_torch_kernels():
    """Which kernels serve torch.ops.fldispatch.* on CUDA tensors, as the
    dispatcher has them: "native", or "python (why the native ones are not in use)"."""
    import fldispatch.torch as fltorch

    dump = torch._C._dispatch_dump("fldispatch::rms_norm").splitlines()
    cuda = next((line for line in dump if line.startswith("CUDA:")), "")
    if "torch_ops.cpp" in cuda:
        return "native"
    return f"python ({fltorch.NATIVE_REASON or 'the CUDA kernel is ' + (cuda or 'absent')})"


def load_peers(wanted, say):
    peers: dict[str, Any] = {}
    env_lib = os.environ.get("FLD_LIB")
    if "fldispatch" in wanted:
        try:
            peers["fldispatch"] = Fld(env_lib)
        except (OSError, TypeError) as e:
            say(f"fldispatch: cannot load FLD_LIB={env_lib!r}: {e}")
    if "fld_torch" in wanted:
        try:
            import fldispatch.torch  # noqa: F401  (defines torch.ops.fldispatch)

            peers["fld_torch"] = torch.ops.fldispatch
        except Exception as e:  # noqa: BLE001
            say(f"fld_torch: fldispatch's package is not importable: {str(e)[:200]}")
    if "vllm_c" in wanted:
        import importlib

        errors = []
        # the extension registering torch.ops._C: its name differs across vLLM releases
        for module in ("vllm._C_stable_libtorch", "vllm._C"):
            try:
                importlib.import_module(module)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{module}: {str(e)[:120]}")
                continue
            if hasattr(torch.ops._C, "rms_norm"):
                peers["vllm_c"] = torch.ops._C
                break
        if "vllm_c" not in peers:
            say("vllm_c: vLLM's CUDA kernels do not load (vLLM 0.20-0.26 on torch 2.11): " +
                "; ".join(errors))
    if "flaggems" in wanted:
        try:
            from flag_gems.modules.activation import gems_silu_and_mul
            from flag_gems.modules.normalization import gems_rms_forward
            from flag_gems.modules.rotary_embedding import gems_rope_forward

            peers["flaggems"] = (gems_rms_forward, gems_silu_and_mul, gems_rope_forward)
        except Exception as e:  # noqa: BLE001
            say(f"flaggems: not importable: {str(e)[:200]}")
    if "liger" in wanted:
        try:
            from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward
            from liger_kernel.ops.geglu import geglu_forward
            from liger_kernel.ops.rms_norm import rms_norm_forward
            from liger_kernel.ops.rope import rope_forward
            from liger_kernel.ops.swiglu import swiglu_forward

            peers["liger"] = dict(rms=rms_norm_forward, add_rms=fused_add_rms_norm_forward,
                                  swiglu=swiglu_forward, geglu=geglu_forward, rope=rope_forward)
        except Exception as e:  # noqa: BLE001
            say(f"liger: not importable: {str(e)[:200]}")
    return peers


# ---- vLLM's forward_native formulas (eager, and what torch.compile compiles) -------------

def native_rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def native_add_rms(x, r, w):
    s = (x.float() + r.float()).to(x.dtype)
    sf = s.float()
    return (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w, s


def native_act(op):
    act = {"silu_and_mul": F.silu, "gelu_and_mul": F.gelu,
           "gelu_tanh_and_mul": lambda v: F.gelu(v, approximate="tanh")}[op]

    def fn(x):
        d = x.shape[-1] // 2
        return act(x[..., :d]) * x[..., d:]

    return fn


def native_rope(neox):
    def fn(positions, q, k, cache):
        cos, sin = cache.index_select(0, positions).chunk(2, dim=-1)

        def rot(v):
            t = v.shape[0]
            v = v.view(t, -1, 128)
            c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
            if neox:
                a, b = v.chunk(2, dim=-1)
            else:
                a, b = v[..., ::2], v[..., 1::2]
            o1, o2 = a * c - b * s, b * c + a * s
            out = torch.cat((o1, o2), -1) if neox else torch.stack((o1, o2), -1).flatten(-2)
            return out.reshape(t, -1)

        return rot(q), rot(k)

    return fn


_compiled: dict[tuple[Any, ...], Any] = {}


def compiled(key, fn):
    if key not in _compiled:
        _compiled[key] = torch.compile(fn, dynamic=None)
    return _compiled[key]


# ---- cases ---------------------------------------------------------------------------------

def make_set(op, dt, T, H, heads, seed):
    g = torch.Generator(device=dev).manual_seed(seed)

    def u(shape, lo, hi, dtype=dt):
        return torch.empty(shape, device=dev, dtype=dtype).uniform_(lo, hi, generator=g)

    if op in ("rms_norm", "fused_add_rms_norm"):
        s = dict(x=u((T, H), -2, 2), w=u((H,), 0.5, 1.5))
        if op == "rms_norm":
            s["out"] = torch.empty_like(s["x"])
        else:
            s["r"] = u((T, H), -2, 2)
        return s
    if op in ACTS:
        x = u((T, 2 * H), -4, 4)
        return dict(x=x, a=x[:, :H].contiguous(), b=x[:, H:].contiguous(),
                    out=torch.empty(T, H, device=dev, dtype=dt))
    qh, kh = heads
    maxpos = 8192
    pos = torch.randint(0, maxpos, (T,), device=dev, dtype=torch.int64, generator=g)
    inv = 10000.0 ** (-torch.arange(0, 128, 2, device=dev, dtype=torch.float64) / 128)
    ang = torch.arange(maxpos, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
    cache = torch.cat((ang.cos(), ang.sin()), dim=-1).to(dt)
    cos, sin = cache[:, :64].contiguous(), cache[:, 64:].contiguous()
    # Liger's rope takes cos and sin gathered per token at full head width;
    # its call gathers them from this (2, maxpos, 128) table (one indexing
    # kernel), as a caller holding vLLM's positions and cache must
    table = torch.stack((torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)))
    return dict(pos=pos, q=u((T, qh * 128), -1, 1), k=u((T, kh * 128), -1, 1), cache=cache,
                cos=cos, sin=sin, table=table)


def op_bytes(op, s):
    es = s["x"].element_size() if "x" in s else s["q"].element_size()
    if op == "rms_norm":
        return es * (2 * s["x"].numel() + s["w"].numel())
    if op == "fused_add_rms_norm":
        return es * (4 * s["x"].numel() + s["w"].numel())
    if op in ACTS:
        return es * (s["x"].numel() + s["out"].numel())
    return es * (2 * (s["q"].numel() + s["k"].numel()) + s["pos"].numel() * 128) + \
        8 * s["pos"].numel()


def make_call(op, impl, s, peer, dt, shape_key=None):
    """fn() doing one call of op on s with impl, and which tensor holds the result
    (a key of s, or None: the return value); None where impl does not serve op."""
    neox = op == "rotary_neox"
    if impl == "floor":
        z = torch.zeros(1, device=dev, dtype=dt)
        return (lambda: z.fill_(1.0)), None
    if impl == "fldispatch":
        return peer.call(op, s), ("out" if op == "rms_norm" or op in ACTS else
                                  "x" if op == "fused_add_rms_norm" else "q")
    if impl == "fld_torch":
        if op == "rms_norm":
            return (lambda: peer.rms_norm(s["out"], s["x"], s["w"], None, EPS)), "out"
        if op == "fused_add_rms_norm":
            return (lambda: peer.rms_norm(s["x"], s["x"], s["w"], s["r"], EPS)), "x"
        if op in ACTS:
            fn = getattr(peer, op)
            return (lambda: fn(s["out"], s["x"])), "out"
        return (lambda: peer.rotary_embedding(s["pos"], s["q"], s["k"], 128, s["cache"],
                                              neox)), "q"
    if impl in ("eager", "compile"):
        key = (op, str(dt), impl, shape_key)  # one compile per hidden size, as vLLM's
        if op == "rms_norm":
            f = native_rms if impl == "eager" else compiled(key, native_rms)
            return (lambda: f(s["x"], s["w"])), None
        if op == "fused_add_rms_norm":
            f = native_add_rms if impl == "eager" else compiled(key, native_add_rms)
            return (lambda: f(s["x"], s["r"], s["w"])), None
        if op in ACTS:
            f = native_act(op) if impl == "eager" else compiled(key, native_act(op))
            return (lambda: f(s["x"])), None
        f = native_rope(neox) if impl == "eager" else compiled(key, native_rope(neox))
        return (lambda: f(s["pos"], s["q"], s["k"], s["cache"])), None
    if impl == "vllm_c":
        if op == "rms_norm":
            return (lambda: peer.rms_norm(s["out"], s["x"], s["w"], EPS)), "out"
        if op == "fused_add_rms_norm":
            return (lambda: peer.fused_add_rms_norm(s["x"], s["r"], s["w"], EPS)), "x"
        if op in ACTS:
            fn = getattr(peer, op)
            return (lambda: fn(s["out"], s["x"])), "out"
        return (lambda: peer.rotary_embedding(s["pos"], s["q"], s["k"], 128, s["cache"],
                                              neox)), "q"
    if impl == "flaggems":
        rms, silu, rope = peer
        if op == "rms_norm":
            return (lambda: rms(s["x"], None, s["w"], EPS)), None
        if op == "fused_add_rms_norm":
            return (lambda: rms(s["x"], s["r"], s["w"], EPS)), "x"
        if op == "silu_and_mul":
            return (lambda: silu(s["a"], s["b"])), None
        if op in ACTS:
            return None
        T = s["q"].shape[0]
        q3, k3 = s["q"].view(T, -1, 128), s["k"].view(T, -1, 128)
        return (lambda: rope(q3, k3, s["cos"], s["sin"], position_ids=s["pos"],
                             rotary_interleaved=not neox, inplace=True)), "q"
    if impl == "liger":
        if op == "rms_norm":
            return (lambda: peer["rms"](s["x"], s["w"], EPS, 0.0, "llama", None)[0]), None
        if op == "fused_add_rms_norm":
            return (lambda: peer["add_rms"](s["x"], s["r"], s["w"], EPS, 0.0, "llama")[0]), None
        if op == "silu_and_mul":
            return (lambda: peer["swiglu"](s["a"], s["b"])[2]), None
        if op == "gelu_tanh_and_mul":
            return (lambda: peer["geglu"](s["a"], s["b"])[2]), None
        if op in ACTS or not neox:
            return None
        T = s["q"].shape[0]
        q4 = s["q"].view(1, T, -1, 128).transpose(1, 2)
        k4 = s["k"].view(1, T, -1, 128).transpose(1, 2)
        def liger_rope():
            cs = s["table"][:, s["pos"]]
            return peer["rope"](q4, k4, cs[0].unsqueeze(0), cs[1].unsqueeze(0))[0].transpose(1, 2)

        return (lambda: liger_rope().reshape(T, -1)), None
    return None


def reference(op, s):
    """The float32 result of op on set s (before any in-place call)."""
    if op == "rms_norm":
        xf = s["x"].float()
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * s["w"].float()
    if op == "fused_add_rms_norm":
        sf = s["x"].float() + s["r"].float()
        return sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + EPS) * s["w"].float()
    if op in ACTS:
        return native_act(op)(s["x"].float())
    q, k = native_rope(op == "rotary_neox")(s["pos"], s["q"].float(), s["k"].float(),
                                            s["cache"].float())
    return q


def rel_error(op, impl, peer, dt, T, H, heads):
    s = make_set(op, dt, T, H, heads, 99)
    ref = reference(op, s)
    made = make_call(op, impl, s, peer, dt, (H, heads))
    if made is None:
        return None
    fn, where = made
    r = fn()
    got = s[where] if where else (r[0] if isinstance(r, tuple) else r)
    torch.cuda.synchronize()
    return float((got.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def device_time(fns, calls, fld_peers, replays=7):
    """(graph_us, launch_us) of the callables (one per input set)."""
    k = len(fns)
    for i in range(3):
        fns[i % k]()
    torch.cuda.synchronize()
    launch = []
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(calls):
            fns[i % k]()
        launch.append((time.perf_counter() - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for p in fld_peers:
            p.use_current_stream()
        for i in range(2):
            fns[i % k]()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for p in fld_peers:
            p.use_current_stream()
        for i in range(calls):
            fns[i % k]()
    for p in fld_peers:
        p.use_current_stream()
    graph.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        e0.record()
        graph.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1000 / calls)
    del graph
    return statistics.median(times), statistics.median(launch)


def copy_gbps():
    a = torch.empty(1 << 28, dtype=torch.float32, device=dev)
    b = torch.empty_like(a)
    graph = torch.cuda.CUDAGraph()
    b.copy_(a)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for _ in range(4):
            b.copy_(a)
    graph.replay()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        e0.record()
        graph.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / 1000 / 4)
    return 2 * a.numel() * 4 / statistics.median(times) / 1e9


def plan(ops, dtypes, quick):
    """(op, dtype, T, H, heads) in order of weight."""
    rows: list[tuple[str, str, int, int, tuple[int, int] | None]] = []
    tokens = (1, 32, 4096) if quick else DECODE + PREFILL
    for dname in dtypes:
        for op in ops:
            if op.startswith("rotary"):
                heads_list = [(32, 8)] if quick or dname == "f32" else [(32, 8), (64, 8)]
                for heads in heads_list:
                    if op == "rotary_gptj" and dname == "f32":
                        continue
                    rows += [(op, dname, T, 128, heads) for T in tokens if T <= 4096]
            elif op in ACTS:
                if op != "silu_and_mul" and (quick or dname == "f32"):
                    continue
                rows += [(op, dname, T, 14336, None) for T in tokens if T <= 4096]
            else:
                hs = (4096,) if quick or dname == "f32" else (4096, 2048, 8192)
                rows += [(op, dname, T, H, None) for H in hs for T in tokens]
    weight = {"bf16": 0, "f16": 1, "f32": 2}

    def key(r):
        op, dname, T, H, heads = r
        return (weight[dname] + (0 if H in (4096, 14336, 128) and heads in (None, (32, 8)) else 2),
                ops.index(op), T)

    return sorted(rows, key=key)


NCU_CASES = [(op, T) for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_neox")
             for T in (1, 4096)]


def profile_calls(peers, impls, label, say):
    """For ncu: each case once per implementation (fldispatch's and the peers' of impls that
    serve it), warmed up outside the profiled range (torch.compile compiles there)."""
    if "fldispatch" in impls and "fldispatch" not in peers:
        say("ncu: fldispatch's library did not load (FLD_LIB)")
        return 1
    if "fldispatch" in peers:
        peers["fldispatch"].use_current_stream()
    for op, T in NCU_CASES:
        H = 14336 if op in ACTS else 128 if op.startswith("rotary") else 4096
        s = make_set(op, torch.bfloat16, T, H, (32, 8), 7)
        for impl in impls:
            made = make_call(op, impl, s, peers.get(impl), torch.bfloat16, (H, (32, 8)))
            if made is None:
                continue
            fn = made[0]
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            say(f"ncu: {op} bf16 T={T} H={H} {label if impl == 'fldispatch' else impl}")
            torch.cuda.profiler.start()
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--ops", default=",".join(ALL_OPS))
    ap.add_argument("--impls", default=",".join(ALL_IMPLS))
    ap.add_argument("--dtypes", default="bf16,f16,f32")
    ap.add_argument("--quick", action="store_true", help="bf16/f16, hidden 4096, T 1, 32, 4096")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--ncu", action="store_true",
                    help="one profiled call of each of --impls (floor aside) per decode and 4096-row "
                    "case, between cudaProfilerStart/Stop (run under ncu --profile-from-start off)")
    ap.add_argument("--label", default="fldispatch",
                    help="the name of fldispatch's rows (another build's: e.g. fld_base)")
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    impls = [i for i in args.impls.split(",") if i]
    for name, given, valid in (("--ops", ops, ALL_OPS), ("--impls", impls, ALL_IMPLS),
                               ("--dtypes", args.dtypes.split(","), tuple(DTYPES))):
        bad = [g for g in given if g not in valid]
        if bad:
            ap.error(f"{name}: unknown {', '.join(bad)} (valid: {', '.join(valid)})")
    if not torch.cuda.is_available():
        print("gpu_peers: no CUDA device", file=sys.stderr)
        return 2
    started = time.time()
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if args.label == "fldispatch" else "-" + args.label
    jsonl = open(os.path.join(args.out, f"gpu_peers{suffix}.jsonl"), "w")

    def say(line):
        print(line, flush=True)

    for attr in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, attr):
            setattr(torch._dynamo.config, attr, 512)
    peers = load_peers(impls, say)
    if args.ncu:
        served = [i for i in impls if i in peers or i in ("eager", "compile")]
        return profile_calls(peers, served, args.label, say)
    fld_peers = [peers["fldispatch"]] if "fldispatch" in peers else []
    for p in fld_peers:
        p.use_current_stream()
    copy = copy_gbps()
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_gbps": copy,
            "impls": [i for i in impls if i in peers or i in ("floor", "eager", "compile")]}
    if "fld_torch" in peers:
        head["fld_torch_kernels"] = fld_torch_kernels()
    jsonl.write(json.dumps(head) + "\n")
    say(f"device {head['device']}, torch {head['torch']}, copy {copy:.0f} GB/s, "
        f"impls {', '.join(head['impls'])}")
    if "fld_torch" in peers:
        say(f"fld_torch: torch.ops.fldispatch.* on CUDA tensors through the "
            f"{head['fld_torch_kernels']} kernels")
    say(f"{'op':<19}{'dt':<5}{'T':>6}{'H':>6} {'impl':<11}{'graph_us':>9}{'launch_us':>10}"
        f"{'GB/s':>7}{'copy':>6}{'err':>10}")
    skipped = []
    rows = plan(ops, [d for d in args.dtypes.split(",") if d], args.quick)
    with torch.no_grad():
        for n, (op, dname, T, H, heads) in enumerate(rows):
            if time.time() - started > args.budget_s:
                skipped = rows[n:]
                break
            dt = DTYPES[dname]
            sets = [make_set(op, dt, T, H, heads, 7)]
            if op_bytes(op, sets[0]) > 32 << 20:
                sets.append(make_set(op, dt, T, H, heads, 8))
            calls = 20 if T >= 4096 else 40
            nbytes = op_bytes(op, sets[0])
            for impl in head["impls"]:
                name = args.label if impl == "fldispatch" else impl
                rec = dict(op=op, dtype=dname, T=T, H=H, heads=heads, impl=name)
                try:
                    made = [make_call(op, impl, s, peers.get(impl), dt, (H, heads)) for s in sets]
                    if made[0] is None:
                        continue
                    g_us, l_us = device_time([m[0] for m in made], calls, fld_peers)
                    err = None
                    if impl != "floor" and T in (8, 4096):
                        err = rel_error(op, impl, peers.get(impl), dt, T, H, heads)
                    gbps = nbytes / (g_us * 1e3)
                    rec.update(graph_us=g_us, launch_us=l_us, gbps=gbps, copy_share=gbps / copy,
                               err=err)
                    say(f"{op:<19}{dname:<5}{T:>6}{H:>6} {name:<11}{g_us:>9.2f}{l_us:>10.2f}"
                        f"{gbps:>7.0f}{gbps / copy:>6.2f}"
                        f"{'' if err is None else f'{err:.2e}':>10}")
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    say(f"{op:<19}{dname:<5}{T:>6}{H:>6} {name:<11} error {rec['error'][:120]}")
                    for p in fld_peers:
                        p.use_current_stream()
                jsonl.write(json.dumps(rec) + "\n")
                jsonl.flush()
            del sets
            torch.cuda.empty_cache()
    if skipped:
        say(f"budget of {args.budget_s:.0f} s reached; {len(skipped)} cases not run, from "
            f"{skipped[0][:4]} on")
    say(f"done in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
