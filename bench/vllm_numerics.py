#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare fldispatch's CPU ops with vLLM's PyTorch references, element by element.

Calls the C library through ctypes (build/lib/libfldispatch.so, no Python package
needed) on inputs generated as vLLM's kernel tests generate them, and compares with
the PyTorch expressions of vLLM's forward_native (written out below, from vLLM 0.33's
vllm/model_executor/layers and vllm/ir/ops), on this machine's CPU PyTorch:

  activations  tests/kernels/core/test_activation.py: silu_and_mul, mul_and_silu,
               gelu (erf), gelu_tanh; tokens {7, 83, 2048} x d {512, 13824}; fp16,
               bf16, fp32; x = randn(T, 2d). vLLM compares with atol = rtol = 0: this
               counts the elements that differ. A second line per op and 16-bit dtype
               feeds every one of the 65536 values through the activation (times 1.0)
               and counts the values whose result differs.
  rotary       tests/kernels/core/test_pos_encoding.py: neox and gptj, head {64, 80,
               120, 256}, rot_dim {head, 32}, 17 heads, batch 5, seq 11 (--full adds
               seq 8192), layouts [B,S,H,D], [B,S,H*D] and padded heads, key or not,
               bf16 / fp16 / fp32 with the cache in the query's dtype, plus bf16 with a
               float32 cache (vLLM casts it to the query's dtype first). Counts the
               elements that differ (vLLM's own test uses the default tolerances).
  norms        tests/kernels/core/test_layernorm.py's rms_norm and gemma grids (tokens
               {7, 83, 4096} x hidden {8, 768, 769, 5120, 5125, 8192}, residual or
               not, strided x), vLLM's tolerance 1e-2; GemmaRMSNorm with a float32
               weight and bf16 x (test_gemma_rms_norm_mixed_input_weight_dtype), with
               a float32 residual and fp16 x, and RMSNorm with a float32 weight; rows
               of 1e30 and 1e-30 against their normalised value.

Every case runs under each implementation given (default reference.c and vendor.cpu,
each pinned with a per-op policy in strict mode). VLLM_FL_CPU_ISA picks vendor.cpu's
instruction set as usual (set it before running). With --device cuda (or rocm) the tensors
are PyTorch's on that GPU, the implementations vendor.cuda and reference.cuda, and the
references PyTorch's GPU kernels: there vLLM's CUDA activation formulas and PyTorch's share
CUDA's expf/erff/tanhf, so every 16-bit activation should agree to the bit (GELU included).
Exit status: 0 when every call succeeded and every norm case is within vLLM's tolerance; 1 otherwise; 2 usage;
3 PyTorch or the library missing. Mismatch counts of activations and rotary are
reported, not judged: see docs/cpu-plugin.md ("Rounding") for what they should be.
"""

import argparse
import ctypes
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the C library through ctypes -------------------------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class View:
    """A DLTensor over a torch CPU tensor (kept alive with its shape and strides)."""

    def __init__(self, torch, t):
        codes = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16),
                 torch.int64: (0, 64), torch.int32: (0, 32)}
        code, bits = codes[t.dtype]
        self.t = t
        self.shape = (ctypes.c_int64 * t.dim())(*t.shape)
        self.strides = (ctypes.c_int64 * t.dim())(*t.stride())
        device = DLDevice(1, 0) if t.device.type == "cpu" else DLDevice(GPU_DLPACK_TYPE[0],
                                                                         t.device.index or 0)
        self.dl = DLTensor(t.data_ptr(), device, t.dim(), DLDataType(code, bits, 1),
                           self.shape, self.strides, 0)

    def ptr(self):
        return ctypes.byref(self.dl)


def load_library(path):
    lib = ctypes.CDLL(path)
    P = ctypes.POINTER(DLTensor)
    for name in ("fld_silu_and_mul", "fld_mul_and_silu", "fld_gelu_and_mul",
                 "fld_gelu_tanh_and_mul"):
        getattr(lib, name).argtypes = [P, P]
    for name in ("fld_rms_norm", "fld_gemma_rms_norm"):
        getattr(lib, name).argtypes = [P, P, P, P, ctypes.c_float]
    lib.fld_rotary_embedding.argtypes = [P, P, P, ctypes.c_int64, P, ctypes.c_bool]
    lib.fld_policy_push_per_op.argtypes = [ctypes.c_char_p]
    lib.fld_policy_push_strict.argtypes = [ctypes.c_bool]
    lib.fld_last_error.restype = ctypes.c_char_p
    if lib.fld_init() != 0:
        raise RuntimeError("fld_init: %s" % lib.fld_last_error().decode())
    return lib


class Pinned:
    """with Pinned(lib, op, impl): calls of op run impl only (strict)."""

    def __init__(self, lib, op, impl):
        self.lib, self.spec = lib, ("%s=impl:%s" % (op, impl)).encode()

    def __enter__(self):
        if self.lib.fld_policy_push_per_op(self.spec) != 0:
            raise RuntimeError(self.lib.fld_last_error().decode())
        self.lib.fld_policy_push_strict(True)

    def __exit__(self, *exc):
        self.lib.fld_policy_pop()
        self.lib.fld_policy_pop()


class CallFailed(Exception):
    pass


# kDLCUDA (2) or kDLROCM (10) for --device cuda / rocm; PyTorch calls both devices "cuda".
GPU_DLPACK_TYPE = [2]
SYNC = [None]  # torch.cuda.synchronize on a GPU run


FLD_EUNAVAILABLE = -3  # every candidate declined: the pinned impl does not take this layout


class Declined(CallFailed):
    """The pinned implementation declined the call (e.g. vendor.cuda and a
    row stride its 16-byte accesses cannot take): a case it does not serve."""


def check(lib, rc, what):
    if SYNC[0]:
        SYNC[0]()
    if rc == FLD_EUNAVAILABLE and b"declined" in lib.fld_last_error():
        raise Declined("%s: %s" % (what, lib.fld_last_error().decode()))
    if rc != 0:
        raise CallFailed("%s: status %d: %s" % (what, rc, lib.fld_last_error().decode()))


# ---- vLLM's forward_native, in PyTorch -----------------------------------------------------------

def act_native(torch, op, x):
    F = torch.nn.functional
    d = x.shape[-1] // 2
    if op == "silu_and_mul":
        return F.silu(x[..., :d]) * x[..., d:]
    if op == "mul_and_silu":
        return x[..., :d] * F.silu(x[..., d:])
    if op == "gelu_and_mul":
        return F.gelu(x[..., :d], approximate="none") * x[..., d:]
    return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


def rope_native(torch, positions, q, head, rot, cache, neox):
    """RotaryEmbedding.forward_static with ApplyRotaryEmb.forward_static (vLLM 0.33)."""
    cache = cache.to(q.dtype)  # _match_cos_sin_cache_dtype
    pos = positions.flatten()
    n = pos.shape[0]
    cos, sin = cache.index_select(0, pos).chunk(2, dim=-1)
    shape = q.shape
    x = q.reshape(n, -1, head)
    xr, xp = x[..., :rot], x[..., rot:]
    c, s = cos.unsqueeze(-2).to(xr.dtype), sin.unsqueeze(-2).to(xr.dtype)
    if neox:
        x1, x2 = torch.chunk(xr, 2, dim=-1)
    else:
        x1, x2 = xr[..., ::2], xr[..., 1::2]
    o1 = x1 * c - x2 * s
    o2 = x2 * c + x1 * s
    o = torch.cat((o1, o2), dim=-1) if neox else torch.stack((o1, o2), dim=-1).flatten(-2)
    return torch.cat((o, xp), dim=-1).reshape(shape)


def rms_native(torch, x, w, eps, residual=None, gemma=False):
    """vLLM 0.33: vllm/ir/ops/layernorm.py rms_norm / fused_add_rms_norm; GemmaRMSNorm
    passes weight.float() + 1. Returns (out, residual as vLLM returns it)."""
    orig = x.dtype
    xf = x.to(torch.float32)
    if residual is not None:
        xf = xf + residual.to(torch.float32)
    r = xf.to(orig) if residual is not None else None
    if gemma:
        w = w.float() + 1.0
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    y = xf * torch.rsqrt(var + eps)
    if w is not None:
        y = y.to(w.dtype) * w
    return y.to(orig), r


# ---- comparisons ------------------------------------------------------------------------------

def bits_differ(torch, a, b):
    """Elements whose bits differ (any two NaNs count as equal)."""
    ia = a.contiguous().view({2: torch.int16, 4: torch.int32}[a.element_size()])
    ib = b.contiguous().view({2: torch.int16, 4: torch.int32}[b.element_size()])
    return int(((ia != ib) & ~(torch.isnan(a) & torch.isnan(b))).sum())


def allclose(torch, got, want, atol, rtol):
    g, w = got.double(), want.double()
    bad = ~((g - w).abs() <= atol + rtol * w.abs()) & ~(torch.isnan(g) & torch.isnan(w))
    err = (g - w).abs()
    err = err[~torch.isnan(err)]
    return int(bad.sum()), float(err.max()) if err.numel() else 0.0


DEFAULT_TOL = {"float32": (1e-5, 1.3e-6), "float16": (1e-3, 1e-3), "bfloat16": (1e-3, 1.6e-2)}


def tname(torch, dt):
    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dt]


class Report:
    def __init__(self):
        self.rows = []
        self.failed = False

    def add(self, *cols, bad=False):
        self.rows.append(cols)
        self.failed |= bad
        print("  ".join(str(c) for c in cols), flush=True)


# ---- the families ------------------------------------------------------------------------------

ACT_OPS = ["silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul"]


def run_activations(torch, lib, impls, dtypes, rep, full):
    tokens = [7, 83, 2048]
    ds = [512, 13824]
    for op in ACT_OPS:
        fn = getattr(lib, "fld_" + op)
        for dt in dtypes:
            for impl in impls:
                cases = differ = total = exact_cases = tol_bad = 0
                for t in tokens:
                    for d in ds:
                        if not full and t == 2048 and d == 13824:
                            continue  # 57M elements: --full
                        torch.manual_seed(0)
                        x = torch.randn(t, 2 * d, dtype=dt)
                        want = act_native(torch, op, x)
                        out = torch.empty(t, d, dtype=dt)
                        with Pinned(lib, op, impl):
                            check(lib, fn(View(torch, out).ptr(), View(torch, x).ptr()),
                                  "%s %s %s" % (impl, op, dt))
                        n = bits_differ(torch, out, want)
                        tol_bad += allclose(torch, out, want, *DEFAULT_TOL[tname(torch, dt)])[0]
                        cases += 1
                        exact_cases += n == 0
                        differ += n
                        total += out.numel()
                rep.add("activation", op, tname(torch, dt), impl,
                        "cases %d/%d exact" % (exact_cases, cases),
                        "elements differing %d of %d" % (differ, total),
                        "outside vLLM's default tolerance %d" % tol_bad)
            if dt == torch.float32:
                continue
            # every 16-bit value through the activation, times 1
            for impl in impls:
                codes = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16).view(dt)
                codes = codes[torch.isfinite(codes)]
                n = codes.numel()
                x = torch.empty(1, 2 * n, dtype=dt)
                act, other = (slice(n, 2 * n), slice(0, n)) if op == "mul_and_silu" else (
                    slice(0, n), slice(n, 2 * n))
                x[0, act] = codes
                x[0, other] = 1.0
                want = act_native(torch, op, x)
                out = torch.empty(1, n, dtype=dt)
                with Pinned(lib, op, impl):
                    check(lib, fn(View(torch, out).ptr(), View(torch, x).ptr()), op)
                differ = (out.view(torch.int16) != want.view(torch.int16)) & ~(
                    torch.isnan(out) & torch.isnan(want))
                sample = codes[differ[0]][:4].float().tolist()
                rep.add("activation", op, tname(torch, dt), impl, "all 16-bit inputs",
                        "values differing %d of %d" % (int(differ.sum()), n),
                        ("e.g. %s" % sample) if sample else "")


def rope_cache(torch, rot, max_pos=8192, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float) / rot))
    t = torch.arange(max_pos, dtype=torch.float)
    freqs = torch.einsum("i,j -> ij", t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def run_rotary(torch, lib, impls, dtypes, rep, full):
    heads, batch = 17, 5
    seqs = [11, 8192] if full else [11]
    caches = {}
    for dt in dtypes + [("bf16+f32cache")]:
        qdt = torch.bfloat16 if dt == "bf16+f32cache" else dt
        label = "bfloat16, float32 cache" if dt == "bf16+f32cache" else tname(torch, dt)
        for impl in impls:
            cases = exact = differ = total = tol_bad = 0
            for neox in (True, False):
                for head in (64, 80, 120, 256):
                    for rot in (head, 32):
                        key = (rot, dt == "bf16+f32cache")
                        if key not in caches:
                            c = rope_cache(torch, rot)
                            caches[key] = c if dt == "bf16+f32cache" else c.to(qdt)
                        cache = caches[key] if dt == "bf16+f32cache" else caches[key].to(qdt)
                        for seq in seqs:
                            for layout in ("batch", "flat", "padded"):
                                for use_key in (True, False):
                                    torch.manual_seed(0)
                                    pos = torch.randint(0, 8192, (batch, seq))
                                    shape = {"batch": (batch, seq, heads, head),
                                             "flat": (batch, seq, heads * head),
                                             "padded": (batch, seq, heads, head + 64)}[layout]
                                    q = torch.randn(shape, dtype=qdt)
                                    k: Any = torch.randn_like(q) if use_key else None  # None iff not use_key
                                    if layout == "padded":
                                        q = q[..., :head]
                                        k = k[..., :head] if use_key else None
                                    want_q = rope_native(torch, pos, q, head, rot, cache, neox)
                                    want_k = (rope_native(torch, pos, k, head, rot, cache, neox)
                                              if use_key else None)
                                    vp, vq = View(torch, pos), View(torch, q)
                                    vk = View(torch, k) if use_key else None
                                    with Pinned(lib, "rotary_embedding", impl):
                                        check(lib, lib.fld_rotary_embedding(
                                            vp.ptr(), vq.ptr(), vk.ptr() if vk else None, head,
                                            View(torch, cache).ptr(), neox), "rotary")
                                    n = bits_differ(torch, q, want_q)
                                    nt = q.numel()
                                    atol, rtol = DEFAULT_TOL[tname(torch, qdt)]
                                    tb = allclose(torch, q, want_q, atol, rtol)[0]
                                    if use_key:
                                        n += bits_differ(torch, k, want_k)
                                        nt += k.numel()
                                        tb += allclose(torch, k, want_k, atol, rtol)[0]
                                    cases += 1
                                    exact += n == 0
                                    differ += n
                                    total += nt
                                    tol_bad += tb
            rep.add("rotary", label, impl, "cases %d/%d exact" % (exact, cases),
                    "elements differing %d of %d" % (differ, total),
                    "outside vLLM's tolerance %d" % tol_bad, bad=False)


def norm_call(torch, lib, impl, gemma, out, x, w, res, eps):
    fn = lib.fld_gemma_rms_norm if gemma else lib.fld_rms_norm
    op = "gemma_rms_norm" if gemma else "rms_norm"
    views = [View(torch, t) if t is not None else None for t in (out, x, w, res)]
    with Pinned(lib, op, impl):
        check(lib, fn(*[v.ptr() if v else None for v in views], eps), "%s %s" % (impl, op))


def served(rep, impl, call):
    """Runs call; a decline by the pinned impl (a layout it leaves to another
    candidate) is reported as such and the case skipped."""
    try:
        call()
        return True
    except Declined as e:
        rep.add("norm", "declined", impl, str(e))
        return False


def run_norms(torch, lib, impls, dtypes, rep, full):
    eps = 1e-6
    tokens = [7, 83, 4096] if full else [7, 83]
    hidden = [8, 768, 769, 5120, 5125, 8192]
    for gemma in (False, True):
        op = "gemma_rms_norm" if gemma else "rms_norm"
        for dt in dtypes:
            for impl in impls:
                worst = 0.0
                bad = cases = declined = 0
                for t in tokens:
                    for h in hidden:
                        for add_res in (False, True):
                            for strided in (False, True):
                                torch.manual_seed(0)
                                w = torch.empty(h, dtype=dt).normal_(0.0 if gemma else 1.0, 0.1)
                                scale = 1 / (2 * h)
                                x = torch.randn(t, 2 * h if strided else h, dtype=dt)[..., :h]
                                x *= scale
                                res: Any = torch.empty(t, h, dtype=dt).normal_(std=scale) \
                                    if add_res else None  # None iff not add_res
                                want, want_res = rms_native(torch, x, w, eps, res, gemma)
                                out = torch.empty(t, h, dtype=dt)
                                r = res.clone() if add_res else None
                                try:
                                    norm_call(torch, lib, impl, gemma, out, x, w, r, eps)
                                except Declined:
                                    declined += 1
                                    continue
                                nb, err = allclose(torch, out, want, 1e-2, 1e-2)
                                if add_res:
                                    nb2, err2 = allclose(torch, r, want_res, 1e-2, 1e-2)
                                    nb, err = nb + nb2, max(err, err2)
                                cases += 1
                                bad += nb > 0
                                worst = max(worst, err)
                rep.add("norm", op, tname(torch, dt), impl,
                        "cases %d/%d within 1e-2" % (cases - bad, cases),
                        "max abs error %.3g" % worst,
                        "declined %d" % declined if declined else "", bad=bad > 0)

    # Mixed dtypes, as vLLM's layers call them; a decline by the pinned impl is reported.
    for impl in impls:
        torch.manual_seed(0)
        # test_gemma_rms_norm_mixed_input_weight_dtype: bf16 x, float32 weight
        x = torch.randn(32, 1024, dtype=torch.bfloat16)
        w = torch.empty(1024).normal_(0.0, 0.1)
        want, _ = rms_native(torch, x, w, eps, None, True)
        out = torch.empty_like(x)
        if served(rep, impl, lambda: norm_call(torch, lib, impl, True, out, x, w, None, eps)):
            nb, err = allclose(torch, out, want, 1e-2, 1e-2)
            rep.add("norm", "gemma_rms_norm", "bfloat16 x, float32 weight", impl,
                    "elements differing %d of %d" % (bits_differ(torch, out, want), out.numel()),
                    "max abs error %.3g" % err, bad=nb > 0)
        # GemmaRMSNorm with fp16 x and a float32 residual (forward_static before vLLM's IR
        # kept it float32: residual = x.float() + residual.float())
        for h in (768, 769):  # 16-byte rows (vendor kernels) and odd ones
            x = torch.randn(83, h, dtype=torch.float16) / (2 * h)
            r32 = torch.randn(83, h) / (2 * h)
            w = torch.empty(h).normal_(0.0, 0.1)
            s = x.float() + r32
            want = (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)).to(x.dtype)
            r = r32.clone()
            out = torch.empty_like(x)
            if served(rep, impl, lambda: norm_call(torch, lib, impl, True, out, x, w, r, eps)):
                nb, err = allclose(torch, out, want, 1e-2, 1e-2)
                rdiff = bits_differ(torch, r, s)
                rep.add("norm", "gemma_rms_norm",
                        "float16 x, float32 weight and residual, hidden %d" % h, impl,
                        "out differing %d of %d" % (bits_differ(torch, out, want), out.numel()),
                        "residual differing %d" % rdiff, "max abs error %.3g" % err,
                        bad=nb > 0 or rdiff > 0)
        # RMSNorm with a float32 weight (vLLM IR: x.to(weight.dtype) * weight, then x's dtype)
        x = torch.randn(7, 5120, dtype=torch.bfloat16)
        w = torch.empty(5120).normal_(1.0, 0.1)
        want, _ = rms_native(torch, x, w, eps)
        out = torch.empty_like(x)
        if served(rep, impl, lambda: norm_call(torch, lib, impl, False, out, x, w, None, eps)):
            nb, err = allclose(torch, out, want, 1e-2, 1e-2)
            rep.add("norm", "rms_norm", "bfloat16 x, float32 weight", impl,
                    "elements differing %d of %d" % (bits_differ(torch, out, want), out.numel()),
                    "max abs error %.3g" % err, bad=nb > 0)
        # Extremes: float32 rows of 1e30 and 1e-30 against their normalised value (in double)
        for mag in (1e30, 1e-30, 3e38):
            e = 0.0 if mag < 1 else eps
            x = (torch.randn(3, 4096, dtype=torch.float64) * mag).float()
            xd = x.double()
            want = (xd / (xd.pow(2).mean(-1, keepdim=True) + e).sqrt()).float()
            out = torch.empty_like(x)
            if served(rep, impl, lambda: norm_call(torch, lib, impl, False, out, x, None, None, e)):
                nb, err = allclose(torch, out, want, 1e-5, 1e-5)
                rep.add("norm", "rms_norm",
                        "float32 rows of %g%s" % (mag, ", eps 0" if mag < 1 else ""), impl,
                        "max abs error against the normalised value %.3g" % err, bad=nb > 0)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("families", nargs="*", metavar="FAMILY",
                   help="activation, rotary, norm (default: all)")
    p.add_argument("--lib", default=os.path.join(HERE, "..", "build", "lib", "libfldispatch.so"),
                   help="the library (default: build/lib/libfldispatch.so of this tree)")
    p.add_argument("--impl", default=None,
                   help="comma list of implementations (default reference.c,vendor.cpu; on a GPU "
                        "vendor.<device>,reference.<device>)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "rocm"),
                   help="where the tensors live (cuda, rocm: PyTorch's GPU, device 0)")
    p.add_argument("--dtype", default="f16,bf16,f32", help="comma list of f16, bf16, f32")
    p.add_argument("--full", action="store_true",
                   help="vLLM's largest shapes too (activation 2048 x 13824, rotary seq 8192, "
                        "norms 4096 tokens): several minutes")
    args = p.parse_args(argv)
    families = args.families or ["activation", "rotary", "norm"]
    for f in families:
        if f not in ("activation", "rotary", "norm"):
            p.error("unknown family %r" % f)
    try:
        import torch
    except ImportError as e:
        print("vllm_numerics: PyTorch is not installed (%s)" % e, file=sys.stderr)
        return 3
    names = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    try:
        dtypes = [names[d] for d in args.dtype.split(",") if d]
    except KeyError as e:
        p.error("unknown dtype %s" % e)
    try:
        lib = load_library(os.path.abspath(args.lib))
    except (OSError, RuntimeError) as e:
        print("vllm_numerics: cannot load %s: %s" % (args.lib, e), file=sys.stderr)
        return 3
    torch.set_num_threads(1)
    if args.device != "cpu":
        if not torch.cuda.is_available():
            print("vllm_numerics: PyTorch sees no GPU for --device %s" % args.device, file=sys.stderr)
            return 3
        torch.set_default_device("cuda")
        GPU_DLPACK_TYPE[0] = 2 if args.device == "cuda" else 10
        SYNC[0] = torch.cuda.synchronize
    impl_default = ("reference.c,vendor.cpu" if args.device == "cpu"
                    else "vendor.%s,reference.%s" % (args.device, args.device))
    impls = [i for i in (args.impl or impl_default).split(",") if i]
    print("torch %s, library %s, device %s, VLLM_FL_CPU_ISA=%s" % (
        torch.__version__, os.path.abspath(args.lib), args.device,
        os.environ.get("VLLM_FL_CPU_ISA", "(best)")))
    rep = Report()
    try:
        if "activation" in families:
            run_activations(torch, lib, impls, dtypes, rep, args.full)
        if "rotary" in families:
            run_rotary(torch, lib, impls, dtypes, rep, args.full)
        if "norm" in families:
            run_norms(torch, lib, impls, dtypes, rep, args.full)
    except CallFailed as e:
        print("vllm_numerics: %s" % e, file=sys.stderr)
        return 1
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
