# SPDX-License-Identifier: Apache-2.0
"""torch.ops.fldispatch.*: schemas, eager calls, fake implementations,
torch.compile(fullgraph=True) with Inductor, and the policy read at run
time by compiled code."""

import pytest
import torch

import fldispatch
import fldispatch.torch as fld_torch

ops = torch.ops.fldispatch


def test_every_function_has_an_op_with_the_same_arguments():
    import inspect

    for name in fldispatch.OPS:
        schema = getattr(ops, name).default._schema
        params = list(inspect.signature(getattr(fldispatch, name)).parameters)
        assert [a.name for a in schema.arguments] == params, name


def test_outputs_are_declared_mutated():
    schema = ops.rms_norm.default._schema
    mutated = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    assert mutated == ["out", "residual"]
    schema = ops.rotary_embedding.default._schema
    assert [a.name for a in schema.arguments
            if a.alias_info and a.alias_info.is_write] == ["query", "key"]


def test_eager_calls_match_the_functions():
    x = torch.randn(4, 32)
    a, b = torch.empty(4, 16), torch.empty(4, 16)
    for name in ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul"):
        getattr(ops, name)(a, x)
        getattr(fldispatch, name)(b, x)
        assert torch.equal(a, b), name
    w = torch.randn(32)
    r1, r2 = torch.randn(4, 32), None
    r2 = r1.clone()
    o1, o2 = torch.empty(4, 32), torch.empty(4, 32)
    ops.rms_norm(o1, x, w, r1, 1e-5)
    fldispatch.rms_norm(o2, x, w, r2, 1e-5)
    assert torch.equal(o1, o2) and torch.equal(r1, r2)
    ops.gemma_rms_norm(o1, x)  # defaults: no weight, no residual, eps 1e-6
    fldispatch.gemma_rms_norm(o2, x)
    assert torch.equal(o1, o2)
    assert ops.attention_backend("cpu") == fldispatch.attention_backend("cpu")


def test_op_errors_are_fldispatch_errors():
    with pytest.raises(fldispatch.InvalidArgumentError, match="odd"):
        ops.silu_and_mul(torch.empty(2, 3), torch.randn(2, 7))


def test_fake_implementations_run_on_meta_tensors():
    x = torch.empty(4, 32, device="meta")
    out = torch.empty(4, 16, device="meta")
    ops.silu_and_mul(out, x)
    ops.rms_norm(torch.empty(4, 32, device="meta"), x, None, None, 1e-6)
    q = torch.empty(4, 64, device="meta")
    ops.rotary_embedding(torch.empty(4, dtype=torch.long, device="meta"), q, None, 64,
                         torch.empty(16, 64, device="meta"), True)


def test_the_kernels_are_the_c_functions():
    # No Python frame between PyTorch's dispatcher and the extension.
    assert fld_torch.HAS_EXCHANGE_API
    assert "CPU" in fld_torch.TENSOR_KEYS and "CUDA" in fld_torch.TENSOR_KEYS


def every_op(x, w, residual, positions, q, k, cache):
    """A function calling every tensor op, as a model would."""
    d = x.shape[-1] // 2
    acts = []
    for op in (ops.silu_and_mul, ops.mul_and_silu, ops.gelu_and_mul, ops.gelu_tanh_and_mul):
        out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype, device=x.device)
        op(out, x)
        acts.append(out)
    h = acts[0] + acts[1]
    normed = torch.empty_like(h)
    ops.rms_norm(normed, h, w, residual, 1e-6)
    gemma = torch.empty_like(h)
    ops.gemma_rms_norm(gemma, acts[2], w, None, 1e-6)
    ops.rotary_embedding(positions, q, k, 64, cache, True)
    return (*acts, normed, gemma, residual, q, k)


def inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(6, 256, generator=g).to(dtype), torch.randn(128, generator=g).to(dtype),
            torch.randn(6, 128, generator=g).to(dtype), torch.randint(0, 32, (6,), generator=g),
            torch.randn(6, 4 * 64, generator=g).to(dtype),
            torch.randn(6, 2 * 64, generator=g).to(dtype),
            torch.randn(32, 64, generator=g).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compile_fullgraph_matches_eager(dtype):
    torch._dynamo.reset()
    eager_args = inputs(dtype)
    compiled_args = [t.clone() for t in eager_args]
    want = every_op(*eager_args)
    compiled = torch.compile(every_op, fullgraph=True, dynamic=False)
    got = compiled(*compiled_args)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=0, rtol=0)
    # The in-place updates reached the caller's tensors too.
    torch.testing.assert_close(compiled_args[2], eager_args[2], atol=0, rtol=0)
    torch.testing.assert_close(compiled_args[4], eager_args[4], atol=0, rtol=0)


def test_compiled_code_contains_the_ops_without_graph_breaks():
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(every_op)(*inputs())
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    names = {str(n.target) for g in explanation.graphs for n in g.graph.nodes
             if n.op == "call_function"}
    for op in ("silu_and_mul", "rms_norm", "gemma_rms_norm", "rotary_embedding"):
        assert f"fldispatch.{op}" in names, names


def test_compiled_code_follows_the_policy_at_run_time():
    """The compiled graph calls the op; the op reads this thread's policy when
    it runs, so a policy scope around the compiled call applies (no recompile,
    no graph break: the scope is outside the graph)."""
    torch._dynamo.reset()

    def norm(x, w):
        out = torch.empty_like(x)
        ops.rms_norm(out, x, w, None, 1e-6)
        return out

    compiled = torch.compile(norm, fullgraph=True)
    x, w = torch.randn(4, 64), torch.randn(64)
    compiled(x, w)
    # (not strict: a strict scope refuses an order naming no registered impl)
    with fldispatch.policy(per_op={"rms_norm": "impl:no.such_impl"}):
        with pytest.raises(fldispatch.UnavailableError):
            compiled(x, w)
    torch.testing.assert_close(compiled(x, w), norm(x, w))


def test_attention_backend_op_in_eager():
    assert ops.attention_backend("cpu", False, False) == "CPU_ATTN"
