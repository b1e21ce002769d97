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


# ---- one bad op must not take the others down -------------------------------------------


def run_child(code):
    import os
    import subprocess
    import sys
    import textwrap
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=240, env=dict(os.environ))
    return r


def test_signatures_torch_cannot_define_are_refused_where_they_are_declared():
    """Argument names that are keywords and non-finite float defaults: the
    library refuses the declaration (nothing recorded), so importing
    fldispatch.torch works, before and after such a declaration."""
    r = run_child("""
        import fldispatch
        bad = ["(Tensor! out, int None) -> ()", "(Tensor! out, float def=1.0) -> ()",
               "(Tensor! out, float f=-nan) -> ()", "(Tensor! out, float f=+inf) -> ()",
               "(Tensor! out, float f=-infinity) -> ()"]
        for i, schema in enumerate(bad):
            try:
                fldispatch.declare_op(f"bad_early_{i}", schema)
                print("accepted", schema)
            except ValueError as e:
                print("refused", i, "bad_early" in str(e))
        fldispatch.declare_op("good_early", "(Tensor! out, float f=1.5) -> ()")
        import torch
        import fldispatch.torch
        print("imported", hasattr(torch.ops.fldispatch, "good_early"))
        try:
            fldispatch.declare_op("bad_late", "(Tensor! out, int None) -> ()")
            print("accepted late")
        except ValueError:
            print("refused late")
        print("recorded", sorted(op for op in fldispatch.signatures() if "bad_" in op))
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "accepted" not in r.stdout, r.stdout
    assert r.stdout.count("True") == 6, r.stdout  # five refusals naming the op, one import
    assert "refused late" in r.stdout and "recorded []" in r.stdout, r.stdout


def test_an_op_torch_refuses_is_skipped_with_a_warning_and_import_can_repeat():
    """A schema PyTorch refuses (here: a define() that fails for one op, as a
    PyTorch with a stricter parser would) skips that op alone, with a WARNING
    naming the op and its plugin; an import interrupted halfway can be
    repeated (one torch library per process)."""
    r = run_child("""
        import sys
        import torch
        import fldispatch
        fldispatch.declare_op("refused_op", "(Tensor! out, float f=1.0) -> ()",
                              plugin="pytest_refused")
        fldispatch.declare_op("kept_op", "(Tensor! out) -> ()", plugin="pytest_kept")
        real_define = torch.library.Library.define
        def define(self, schema, *args, **kwargs):
            if schema.startswith("refused_op"):
                raise RuntimeError("schema refused by this torch")
            return real_define(self, schema, *args, **kwargs)
        torch.library.Library.define = define
        # the first import is interrupted halfway through the catalog
        real_fake = torch.library.register_fake
        def interrupted(name, *args, **kwargs):
            if name == "fldispatch::rms_norm":
                torch.library.register_fake = real_fake
                raise KeyboardInterrupt()
            return real_fake(name, *args, **kwargs)
        torch.library.register_fake = interrupted
        try:
            import fldispatch.torch
        except KeyboardInterrupt:
            print("first import interrupted")
        sys.modules.pop("fldispatch.torch", None)
        import fldispatch.torch as ft
        out, x = torch.zeros(2, 4), torch.ones(2, 8)
        torch.ops.fldispatch.silu_and_mul(out, x)
        ref = torch.zeros(2, 4)
        fldispatch.silu_and_mul(ref, x)
        print("silu", torch.equal(out, ref))
        torch.ops.fldispatch.rms_norm(torch.zeros(2, 8), x)
        print("rms_norm ok")
        print("kept", hasattr(torch.ops.fldispatch, "kept_op"))
        print("refused", hasattr(torch.ops.fldispatch, "refused_op"), sorted(ft.SKIPPED))
        torch.library.Library.define = real_define
        fldispatch.declare_op("late_op", "(Tensor! out) -> ()")
        print("late", hasattr(torch.ops.fldispatch, "late_op"))
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "first import interrupted" in out and "silu True" in out and "rms_norm ok" in out, \
        out + r.stderr
    assert "kept True" in out and "refused False ['refused_op']" in out and "late True" in out
    assert "torch.ops.fldispatch.refused_op is not defined" in r.stderr
    assert "pytest_refused" in r.stderr
