# SPDX-License-Identifier: Apache-2.0
"""What vLLM's own kernel tests check (tests/kernels/core: test_activation's
exact test_act_and_mul, test_layernorm's and test_pos_encoding's tolerances,
opcheck), checked here in our own words:

- always: the CPU plugin's PyTorch forms (VLLM_FL_CPU_ACTIVATIONS=torch,
  which fldispatch.vllm sets) give torch's own F.silu / F.gelu results to
  the bit at vLLM's test shapes and for every 16-bit input, and its own
  forms (reference, the library's default) are within vLLM IR's default
  tolerances (vllm/ir/tolerances.py) of them there; they run in a child
  process, since the plugin reads the variable when it registers;
- with vLLM installed (make check-vllm's environment): vLLM's layer
  classes replaced by fldispatch.vllm, against their forward_native under
  vLLM's configuration in eager mode (where the replaced layers run
  fldispatch's op by default), over the cases of vLLM's tests: the four
  gated activations exact in every dtype; RMSNorm, weightless RMSNorm and
  GemmaRMSNorm with and without residual, odd hidden sizes, rows sliced
  from wider ones; rotary embedding neox and not, head sizes 64 to 256,
  partial rotary dimensions, q and k as (batch, seq, heads, head), flat
  or sliced from a wider last dimension, with and without a key, at
  allclose's default tolerances; and torch.library.opcheck on the ops.
"""

import contextlib
import json
import os
import platform
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# vLLM's test_act_and_mul grid (num_tokens 7, 83, 2048; d 512, 13824), trimmed for two cores.
SHAPES = [(7, 512), (83, 512), (7, 13824)]
EXACT = {"silu_and_mul": lambda x, d: F.silu(x[..., :d]) * x[..., d:],
         "mul_and_silu": lambda x, d: x[..., :d] * F.silu(x[..., d:]),
         "gelu_and_mul": lambda x, d: F.gelu(x[..., :d]) * x[..., d:],
         "gelu_tanh_and_mul": lambda x, d: F.gelu(x[..., :d], approximate="tanh") * x[..., d:]}


# vLLM IR's default tolerances per dtype (vllm/ir/tolerances.py,
# DEFAULT_TOLERANCES: what vLLM's IR op tests allow a provider against the
# op's native form, and what an activation IR op without an override gets)
IR_TOLERANCES = {"float32": (1e-5, 1.3e-6), "float16": (1e-3, 1e-3), "bfloat16": (1e-3, 1.6e-2)}


def child():
    """Run under VLLM_FL_CPU_ACTIVATIONS: prints {case: [elements that differ
    from torch's, elements outside vLLM IR's default tolerance of torch's]}."""
    import fldispatch.torch  # noqa: F401

    ops = torch.ops.fldispatch
    g = torch.Generator().manual_seed(0)
    found = {}
    for name, ref in EXACT.items():
        for dname, dt in DTYPES.items():
            atol, rtol = IR_TOLERANCES[dname]
            cases = [(f"{t}x{d}", torch.randn(t, 2 * d, generator=g).to(dt)) for t, d in SHAPES]
            if dt != torch.float32:  # every 16-bit value as the activated operand
                codes = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dt)
                x = torch.empty(2, 2 * 65536, dtype=dt)
                x[:, :65536] = codes
                x[:, 65536:] = codes
                x[1, 65536:] = 1.0
                cases.append(("every-16-bit", x))
            for label, x in cases:
                d = x.shape[-1] // 2
                out = torch.empty(x.shape[0], d, dtype=dt)
                getattr(ops, name)(out, x)
                want = ref(x, d)
                same = (out == want) | (out.isnan() & want.isnan())
                a, b = out.double(), want.double()
                close = same | ((a - b).abs() <= atol + rtol * b.abs())
                found[f"{name} {dname} {label}"] = [int((~same).sum()), int((~close).sum())]
    print(json.dumps(found))


# The cpu plugin's instruction-set variants besides the best one (its 16-bit
# activations are computed per variant and checked against a bound), the avx2
# one with its 16-bit activations looked up and computed (VLLM_FL_CPU_ACT16).
ISA_CAPS = [(None, None)] + ([("avx2", "table"), ("avx2", "compute"), ("portable", None)]
                             if platform.machine() in ("x86_64", "AMD64") else
                             [("portable", None)])


def activation_results(form, isa, act16):
    env = dict(os.environ, VLLM_FL_CPU_ACTIVATIONS=form)
    if isa:
        env["VLLM_FL_CPU_ISA"] = isa
    if act16:
        env["VLLM_FL_CPU_ACT16"] = act16
    out = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(found) == len(EXACT) * (3 * len(SHAPES) + 2)
    return found


@pytest.mark.parametrize("isa,act16", ISA_CAPS)
def test_torch_forms_match_torch_to_the_bit(isa, act16):
    found = activation_results("torch", isa, act16)
    assert {k: v for k, v in found.items() if v[0]} == {}


@pytest.mark.parametrize("isa,act16", ISA_CAPS)
def test_reference_forms_within_vllm_ir_tolerances(isa, act16):
    """The library's own forms (what the CPU plugin runs outside vLLM) may
    differ from torch's in the last bits, which vLLM's exact
    test_act_and_mul refuses (fldispatch.vllm sets the torch forms in vLLM's
    processes), but stay within the tolerance vLLM's IR allows a provider."""
    found = activation_results("reference", isa, act16)
    assert {k: v for k, v in found.items() if v[1]} == {}


def test_bad_activation_form_rejects_the_plugin():
    env = dict(os.environ, VLLM_FL_CPU_ACTIVATIONS="fast")
    code = ("import fldispatch\n"
            "print([p['status'] + ' ' + p.get('reason', '') for p in fldispatch.plugins()"
            " if p['name'] == 'cpu'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "VLLM_FL_CPU_ACTIVATIONS='fast'" in out.stdout, out.stdout


# ---- vLLM's layers (needs vLLM itself) ---------------------------------------------------


def real_vllm():
    try:
        import vllm
        from vllm.model_executor.layers import activation  # noqa: F401
    except ImportError:
        return None
    return None if getattr(vllm, "__fake__", False) else vllm


needs_vllm = pytest.mark.skipif(real_vllm() is None,
                                reason="vLLM is not installed here (make check-vllm runs these)")


@pytest.fixture(scope="module")
def vllm_layers():
    os.environ.setdefault("VLLM_FL_CPU_ACTIVATIONS", "torch")
    import fldispatch.vllm as fv
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import activation, layernorm, rotary_embedding

    import fldispatch
    fldispatch.plugins()
    if "activations as torch's" not in next(p.get("detail") or "" for p in fldispatch.plugins()
                                            if p["name"] == "cpu"):
        pytest.skip("the library started before VLLM_FL_CPU_ACTIVATIONS=torch was set")
    fv.register()
    from vllm.config import CompilationConfig
    from vllm.config.compilation import CompilationMode

    eager = VllmConfig(compilation_config=CompilationConfig(mode=CompilationMode.NONE))
    with set_current_vllm_config(eager):
        yield activation, layernorm, rotary_embedding


def assert_runs_fldispatch(layer):
    """The replaced layer's forward is fldispatch's, not forward_native."""
    import fldispatch.vllm as fv

    assert type(layer).__module__ == fv.__name__
    assert getattr(layer._forward_method, "__func__", None) is type(layer).forward_fl


@needs_vllm
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("num_tokens, d", SHAPES)
@pytest.mark.parametrize("kind", ["silu_and_mul", "mul_and_silu", "gelu", "gelu_tanh"])
@torch.inference_mode()
def test_act_and_mul_exact(vllm_layers, kind, num_tokens, d, dtype):
    activation = vllm_layers[0]
    layer = {"silu_and_mul": lambda: activation.SiluAndMul(compile_native=False),
             "mul_and_silu": activation.MulAndSilu,
             "gelu": lambda: activation.GeluAndMul(approximate="none"),
             "gelu_tanh": lambda: activation.GeluAndMul(approximate="tanh")}[kind]()
    assert_runs_fldispatch(layer)
    torch.manual_seed(0)
    x = torch.randn(num_tokens, 2 * d, dtype=dtype)
    torch.testing.assert_close(layer(x), layer.forward_native(x), atol=0.0, rtol=0.0)


def ir_route(layer, stack):
    """vllm.ir.ops where the layer is vLLM's and calls vLLM IR ops (the
    priority of those ops set to fldispatch, then native, in stack), None
    where the plugin replaced the layer."""
    if type(layer).__module__ == "fldispatch.vllm":
        return None
    from vllm import ir

    from fldispatch import vllm_ir
    from fldispatch.vllm_state import DECIDED

    for name in DECIDED.ir_providers:
        stack.enter_context(getattr(ir.ops, name).set_priority([vllm_ir.PROVIDER, "native"]))
    return ir.ops


def same_layout(t):
    """A copy of t with t's strides (a slice of wider rows stays one): the
    layers work in place, and clone() makes a sliced tensor contiguous."""
    if t is None:
        return None
    out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
    return out.copy_(t)


@needs_vllm
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("kind", ["rms", "gemma", "weightless"])
@pytest.mark.parametrize("hidden", [8, 769, 5120, 5125])
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@torch.inference_mode()
def test_rms_norm(vllm_layers, dtype, residual, kind, hidden, strided):
    """test_layernorm's cases: odd and even hidden sizes, rows that are a
    slice of wider ones, RMSNorm without a weight, GemmaRMSNorm."""
    layernorm = vllm_layers[1]
    torch.manual_seed(0)
    if kind == "gemma":
        layer = layernorm.GemmaRMSNorm(hidden)
        layer.weight.data.normal_(0.0, 0.1)
    elif kind == "weightless":
        layer = layernorm.RMSNorm(hidden, has_weight=False).to(dtype)
    else:
        layer = layernorm.RMSNorm(hidden).to(dtype)
        layer.weight.data.normal_(1.0, 0.1)
    scale = 1 / (2 * hidden)
    x = (torch.randn(83, 2 * hidden if strided else hidden, dtype=dtype) * scale)[:, :hidden]
    res = torch.randn_like(x) * scale if residual else None

    with contextlib.ExitStack() as stack:
        ir_ops = ir_route(layer, stack)
        if ir_ops is None:  # the plugin's layer
            assert type(layer).__module__ == "fldispatch.vllm"
            want = layer.forward_native(same_layout(x), same_layout(res))
        else:  # vLLM's layer, its IR call served by fldispatch's provider
            weight = layer.weight.data.float() + 1 if kind == "gemma" else \
                None if kind == "weightless" else layer.weight.data
            op = ir_ops.fused_add_rms_norm if residual else ir_ops.rms_norm
            args = (x, res, weight, 1e-6) if residual else (x, weight, 1e-6)
            assert op.dispatch(*args).provider == "fldispatch"
            with op.set_priority(["native"]):
                want = layer.forward_native(same_layout(x), same_layout(res))
        got = layer(same_layout(x), same_layout(res))
    assert same_layout(x).stride() == x.stride()
    # test_layernorm's tolerance
    if residual:
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)
    else:
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)


# test_pos_encoding's layouts of q and k: (batch, seq, heads, head), (batch,
# seq, heads * head), and (batch, seq, heads, head) sliced from a wider last
# dimension
ROPE_LAYOUTS = {"batch": lambda b, s, n, h: (b, s, n, h), "flat": lambda b, s, n, h: (b, s, n * h),
                "padded": lambda b, s, n, h: (b, s, n, h + 64)}
# allclose's defaults for the dtype, which test_pos_encoding uses
ROPE_TOL = {torch.float32: (1e-5, 1.3e-6), torch.float16: (1e-3, 1e-3),
            torch.bfloat16: (1e-3, 1.6e-2)}


@needs_vllm
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_size", [64, 80, 120, 256])
@pytest.mark.parametrize("rotary_dim", [None, 32])
@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("use_key", [True, False])
@torch.inference_mode()
def test_rotary(vllm_layers, dtype, is_neox, head_size, rotary_dim, layout, use_key):
    rotary_embedding = vllm_layers[2]
    torch.manual_seed(0)
    rotary_dim = rotary_dim or head_size
    max_pos = 8192
    rope = rotary_embedding.get_rope(head_size, max_pos, is_neox_style=is_neox,
                                     rope_parameters={"rope_type": "default",
                                                      "rope_theta": 10000,
                                                      "partial_rotary_factor":
                                                          rotary_dim / head_size},
                                     dtype=dtype)
    assert_runs_fldispatch(rope)
    positions = torch.randint(0, max_pos, (5, 11))
    q = torch.randn(ROPE_LAYOUTS[layout](5, 11, 17, head_size), dtype=dtype)
    k = torch.randn_like(q) if use_key else None
    q = q[..., :head_size]
    k = k[..., :head_size] if k is not None else None
    want_q, want_k = rope.forward_native(positions, same_layout(q), same_layout(k))
    got_q, got_k = rope(positions, same_layout(q), same_layout(k))
    atol, rtol = ROPE_TOL[dtype]
    torch.testing.assert_close(got_q, want_q, atol=atol, rtol=rtol)
    if use_key:
        torch.testing.assert_close(got_k, want_k, atol=atol, rtol=rtol)
    else:
        assert got_k is None and want_k is None


@needs_vllm
def test_opcheck(vllm_layers):
    ops = torch.ops.fldispatch
    x = torch.randn(7, 1024)
    out = torch.empty(7, 512)
    for op in (ops.silu_and_mul, ops.mul_and_silu, ops.gelu_and_mul, ops.gelu_tanh_and_mul):
        torch.library.opcheck(op, (out, x))
    h = torch.randn(7, 512)
    torch.library.opcheck(ops.rms_norm, (torch.empty_like(h), h, torch.ones(512), None, 1e-6))
    torch.library.opcheck(ops.rms_norm, (h.clone(), h.clone(), torch.ones(512), h.clone(), 1e-6))
    cache = torch.randn(128, 64)
    torch.library.opcheck(ops.rotary_embedding,
                          (torch.randint(0, 128, (7,)), torch.randn(7, 256), torch.randn(7, 128),
                           64, cache, True))


if __name__ == "__main__":
    child()
