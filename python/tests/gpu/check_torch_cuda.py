#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fldispatch on CUDA tensors from PyTorch: what the CPU-only test machine
cannot check. Run on a machine with an NVIDIA GPU, after `make python`
(which builds fld-cuda.so when nvcc is there):

    python3 python/tests/gpu/check_torch_cuda.py [--json REPORT]

It finds fldispatch as installed, else in FLDISPATCH_PYTHONPATH, else in the
build tree next to this file (build/python). Checks, each printed PASS or FAIL:
  1. the CUDA plugin serves the ops (resolve), and every tensor op on CUDA
     tensors matches the PyTorch formula, in float32, float16 and bfloat16,
     through fldispatch.* and through torch.ops.fldispatch.*;
  2. the stream: the extension reports torch's current stream for a tensor,
     and an op called under torch.cuda.stream(side) is ordered on `side`
     (the input is written on `side` behind a long sleep kernel: an op on
     any other stream would read the old values);
  3. CUDA graph capture of the torch ops, replayed on new inputs;
  4. torch.compile(fullgraph=True) of a function calling every op, against
     eager (also with mode="reduce-overhead", i.e. CUDA graphs).
Exit status 0 when all pass, 1 otherwise, 2 when there is no GPU or no
fldispatch. Takes well under two minutes (the compiles dominate).
"""
import argparse
import json
import os
import sys
import time
import traceback
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def import_fldispatch():
    try:
        import fldispatch  # noqa: F401
        return
    except ImportError:
        pass
    for path in (os.environ.get("FLDISPATCH_PYTHONPATH"),
                 os.path.join(HERE, "..", "..", "..", "build", "python")):
        if path and os.path.isdir(os.path.join(path, "fldispatch")):
            sys.path.insert(0, os.path.abspath(path))
            return
    sys.exit("check_torch_cuda: fldispatch not found: pip install ./python, or make python "
             "(build/python), or set FLDISPATCH_PYTHONPATH")


import_fldispatch()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fldispatch  # noqa: E402
import fldispatch.torch as fld_torch  # noqa: E402

ops = torch.ops.fldispatch
DEV = "cuda"
TOL = {torch.float32: (1e-5, 1.3e-6), torch.float16: (1e-3, 1e-3),
       torch.bfloat16: (1e-3, 1.6e-2)}
CHECKS: list[tuple[str, Callable[[], Any]]] = []


def check(name):
    """Registers a check; main() runs them in order."""
    def register(fn):
        CHECKS.append((name, fn))
        return fn

    return register


def run_checks():
    results = []
    for name, fn in CHECKS:
        start = time.time()
        try:
            detail = fn()
            results.append({"check": name, "ok": True, "seconds": round(time.time() - start, 2),
                            "detail": detail})
            print(f"PASS {name}" + (f": {detail}" if detail else ""), flush=True)
        except Exception as e:  # every failure is reported, the rest still run
            results.append({"check": name, "ok": False, "seconds": round(time.time() - start, 2),
                            "error": f"{type(e).__name__}: {e}",
                            "traceback": traceback.format_exc()})
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    return results


# ---- formulas --------------------------------------------------------------------------


def act_ref(name, x):
    d = x.shape[-1] // 2
    a, b = x[..., :d], x[..., d:]
    return {"silu_and_mul": lambda: F.silu(a) * b,
            "mul_and_silu": lambda: a * F.silu(b),
            "gelu_and_mul": lambda: F.gelu(a) * b,
            "gelu_tanh_and_mul": lambda: F.gelu(a, approximate="tanh") * b}[name]()


def rms_ref(x, w, eps, residual=None, gemma=False):
    xf = x.float()
    new_res = None
    if residual is not None:
        xf = xf + residual.float()
        new_res = xf.to(x.dtype)
    n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    out = (n * (1 + w.float())).to(x.dtype) if gemma else n.to(x.dtype) * w
    return out, new_res


def rope_ref(positions, x, head_size, cache, is_neox):
    rot = cache.shape[-1]
    cs = cache[positions.flatten()].float()
    cos, sin = cs[:, None, :rot // 2], cs[:, None, rot // 2:]
    h = x.reshape(positions.numel(), -1, head_size).float()
    r, rest = h[..., :rot], h[..., rot:]
    a, b = (r[..., :rot // 2], r[..., rot // 2:]) if is_neox else (r[..., 0::2], r[..., 1::2])
    ra, rb = a * cos - b * sin, b * cos + a * sin
    r = torch.cat((ra, rb), -1) if is_neox else torch.stack((ra, rb), -1).flatten(-2)
    return torch.cat((r, rest), -1).to(x.dtype).reshape(x.shape)


def close(got, want, tol):
    torch.testing.assert_close(got, want, atol=tol[0], rtol=tol[1])


NORM_TOL = (1e-2, 1e-2)  # vLLM's layernorm tolerance, every dtype
# Rotary in 16 bits: vLLM rounds each product in the dtype, a kernel may not;
# where products cancel that is more than vLLM's default tolerance. The CPU
# grid (python/tests/test_kernels.py) checks the exact semantics; here a
# wrong stream or layout, not the last bit, is what is looked for.
ROPE16_TOL = (2e-2, 2e-2)


# ---- 1. the ops ------------------------------------------------------------------------


def all_ops_once(api, dtype, g):
    """Runs every tensor op through api (fldispatch or torch.ops.fldispatch)
    on fresh CUDA tensors and compares with the formulas."""
    x = torch.randn(83, 2 * 1024, device=DEV, generator=g).to(dtype)
    for name in ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul"):
        out = torch.empty(83, 1024, device=DEV, dtype=dtype)
        getattr(api, name)(out, x)
        # 16-bit: vLLM rounds the activation first, the C kernels may round once.
        close(out, act_ref(name, x), TOL[dtype])
    h = torch.randn(83, 4096, device=DEV, generator=g).to(dtype) / 64
    w = (torch.randn(4096, device=DEV, generator=g) * 0.1 + 1).to(dtype)
    for gemma in (False, True):
        op = api.gemma_rms_norm if gemma else api.rms_norm
        res = (torch.randn(83, 4096, device=DEV, generator=g) / 64).to(dtype)
        want, want_res = rms_ref(h, w, 1e-6, res, gemma)
        out = torch.empty_like(h)
        res_in = res.clone()
        op(out, h, w, res_in, 1e-6)
        close(out, want, NORM_TOL)
        close(res_in, want_res, NORM_TOL)
        out = torch.empty_like(h)
        op(out, h, w, None, 1e-6)
        close(out, rms_ref(h, w, 1e-6, None, gemma)[0], NORM_TOL)
    for is_neox in (True, False):
        positions = torch.randint(0, 4096, (5, 11), device=DEV, generator=g)
        q = torch.randn(5, 11, 17 * 128, device=DEV, generator=g).to(dtype)
        k = torch.randn(5, 11, 4 * 128, device=DEV, generator=g).to(dtype)
        inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, device=DEV).float() / 64))
        f = torch.outer(torch.arange(4096, device=DEV).float(), inv)
        cache = torch.cat((f.cos(), f.sin()), -1).to(dtype)
        want_q, want_k = rope_ref(positions, q, 128, cache, is_neox), \
            rope_ref(positions, k, 128, cache, is_neox)
        api.rotary_embedding(positions, q, k, 128, cache, is_neox)
        tol = TOL[dtype] if dtype == torch.float32 else ROPE16_TOL
        close(q, want_q, tol)
        close(k, want_k, tol)


@check("cuda plugin selected")
def _():
    got = {op: fldispatch.resolve(op, "cuda", "bf16") for op in
           ("silu_and_mul", "rms_norm", "rotary_embedding")}
    assert all(v.endswith(".cuda") for v in got.values()), got
    return f"{got}; torch {torch.__version__}, exchange API {fld_torch.HAS_EXCHANGE_API}"


for _dtype in (torch.float32, torch.float16, torch.bfloat16):
    for _api_name, _api in (("fldispatch", fldispatch), ("torch.ops.fldispatch", ops)):
        @check(f"{_api_name} ops match PyTorch, {str(_dtype)[6:]}")
        def _(api=_api, dtype=_dtype):
            all_ops_once(api, dtype, torch.Generator(device=DEV).manual_seed(0))
            torch.cuda.synchronize()


# ---- 2. streams ----------------------------------------------------------------------------


@check("extension reports torch's current stream")
def _():
    x = torch.empty(4, device=DEV)
    default = fldispatch._C._producer_stream(x)
    assert default == torch.cuda.current_stream().cuda_stream, default
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got = fldispatch._C._producer_stream(x)
    assert got == side.cuda_stream != 0, (got, side.cuda_stream)
    return f"side stream {hex(got)}"


def ordered_on(side, call):
    """Writes x on `side` behind a ~50 ms sleep, calls the op under
    torch.cuda.stream(side) and returns (out, expected): if the op ran on any
    stream other than side it read x before the write."""
    src = torch.randn(64, 2048, device=DEV)
    x = torch.zeros_like(src)
    out = torch.empty(64, 1024, device=DEV)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        x.copy_(src)
        call(out, x)
        done = torch.cuda.Event()
        done.record(side)
    done.synchronize()
    return out, act_ref("silu_and_mul", src)


@check("op ordered on a side stream (fldispatch.silu_and_mul)")
def _():
    out, want = ordered_on(torch.cuda.Stream(), fldispatch.silu_and_mul)
    torch.testing.assert_close(out, want)


@check("op ordered on a side stream (torch.ops.fldispatch.silu_and_mul)")
def _():
    out, want = ordered_on(torch.cuda.Stream(), ops.silu_and_mul)
    torch.testing.assert_close(out, want)


@check("thread's fldispatch stream restored after the call")
def _():
    before = fldispatch.get_stream("cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        ops.silu_and_mul(torch.empty(2, 4, device=DEV), torch.randn(2, 8, device=DEV))
    torch.cuda.synchronize()
    assert fldispatch.get_stream("cuda") == before


# ---- 3. CUDA graphs --------------------------------------------------------------------------


@check("CUDA graph capture and replay of the torch ops")
def _():
    g = torch.Generator(device=DEV).manual_seed(1)
    x = torch.randn(32, 2048, device=DEV, generator=g)
    w = torch.randn(1024, device=DEV, generator=g)
    positions = torch.randint(0, 512, (32,), device=DEV, generator=g)
    q = torch.randn(32, 8 * 128, device=DEV, generator=g)
    inv = 1.0 / (10000 ** (torch.arange(0, 128, 2, device=DEV).float() / 128))
    f = torch.outer(torch.arange(512, device=DEV).float(), inv)
    cache = torch.cat((f.cos(), f.sin()), -1)
    act = torch.empty(32, 1024, device=DEV)
    normed = torch.empty(32, 1024, device=DEV)

    def step():
        ops.silu_and_mul(act, x)
        ops.rms_norm(normed, act, w, None, 1e-6)
        ops.rotary_embedding(positions, q, None, 128, cache, True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch advises
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):  # new inputs each replay
        x.copy_(torch.randn(32, 2048, device=DEV, generator=g))
        q_in = torch.randn(32, 8 * 128, device=DEV, generator=g)
        q.copy_(q_in)
        graph.replay()
        torch.cuda.synchronize()
        want_act = act_ref("silu_and_mul", x)
        torch.testing.assert_close(act, want_act, atol=1e-5, rtol=1.3e-6)
        torch.testing.assert_close(normed, rms_ref(want_act, w, 1e-6)[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(q, rope_ref(positions, q_in, 128, cache, True), atol=1e-5,
                                   rtol=1e-5)
    return "3 replays"


# ---- 4. torch.compile ------------------------------------------------------------------------


def every_op(x, w, residual, positions, q, k, cache):
    d = x.shape[-1] // 2
    acts = []
    for op in (ops.silu_and_mul, ops.mul_and_silu, ops.gelu_and_mul, ops.gelu_tanh_and_mul):
        out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype, device=x.device)
        op(out, x)
        acts.append(out)
    normed = torch.empty_like(acts[0])
    ops.rms_norm(normed, acts[0], w, residual, 1e-6)
    gemma = torch.empty_like(acts[0])
    ops.gemma_rms_norm(gemma, acts[1], w, None, 1e-6)
    ops.rotary_embedding(positions, q, k, 128, cache, True)
    return (*acts, normed, gemma, residual, q, k)


def compile_inputs(dtype):
    g = torch.Generator(device=DEV).manual_seed(2)
    inv = 1.0 / (10000 ** (torch.arange(0, 128, 2, device=DEV).float() / 128))
    f = torch.outer(torch.arange(256, device=DEV).float(), inv)
    return (torch.randn(16, 2048, device=DEV, generator=g).to(dtype),
            torch.randn(1024, device=DEV, generator=g).to(dtype),
            torch.randn(16, 1024, device=DEV, generator=g).to(dtype),
            torch.randint(0, 256, (16,), device=DEV, generator=g),
            torch.randn(16, 8 * 128, device=DEV, generator=g).to(dtype),
            torch.randn(16, 2 * 128, device=DEV, generator=g).to(dtype),
            torch.cat((f.cos(), f.sin()), -1).to(dtype))


for _mode in (None, "reduce-overhead"):
    @check(f"torch.compile(fullgraph=True{', mode=' + repr(_mode) if _mode else ''}) "
           "matches eager")
    def _(mode=_mode):
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(every_op)(*compile_inputs(torch.bfloat16))
        assert explanation.graph_break_count == 0, explanation.break_reasons
        want = every_op(*compile_inputs(torch.bfloat16))
        fn = torch.compile(every_op, fullgraph=True, mode=mode)
        for _ in range(3):  # reduce-overhead records on the first calls, replays after
            got = fn(*compile_inputs(torch.bfloat16))  # the same values each time
            torch.cuda.synchronize()
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, atol=0, rtol=0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("check_torch_cuda: no CUDA device visible to torch "
              f"{torch.__version__}", file=sys.stderr)
        sys.exit(2)
    print(f"fldispatch {fldispatch.__version__} from {os.path.dirname(fldispatch.__file__)}; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    started = time.time()
    results = run_checks()
    ok = all(r["ok"] for r in results)
    print(f"\n{sum(r['ok'] for r in results)} of {len(results)} checks passed in "
          f"{time.time() - started:.0f} s ({torch.cuda.get_device_name()}, "
          f"torch {torch.__version__})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "fldispatch": fldispatch.__version__, "results": results}, f, indent=2)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
