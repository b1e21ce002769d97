# SPDX-License-Identifier: Apache-2.0
"""Op signatures from Python: the catalog's (fldispatch.OPS, torch.py's schemas),
call_op on a C plugin's declared ops (tests/plugins/sig_ops.c) with no binding
per op, Python declarations (declared twice, malformed), torch.ops.fldispatch
for every signature (torch.library.opcheck), and torch.compile(fullgraph=True)
of call_op with the policy honoured after compiling."""

import itertools
import os

import pytest
import torch

import fldispatch
import fldispatch.torch as fltorch
from conftest import fixture_plugin

_counter = itertools.count()


def fresh_op(stem="sigop"):
    return f"{stem}_{os.getpid()}_{next(_counter)}"


@pytest.fixture(scope="module")
def sig_ops():
    fldispatch.load_plugin(fixture_plugin("sig_ops"))
    fltorch.define_declared()
    return fldispatch.signatures()


AXPY = "(Tensor(a!) out, Tensor x, Tensor y, float alpha=1.0) -> ()"


# ---- the catalog's signatures drive the Python lists ---------------------------------

def test_catalog_lists_come_from_the_library():
    catalog = fldispatch._C.catalog_ops()
    assert fldispatch.OPS == tuple(op for op, _ in catalog)
    assert fltorch.SCHEMAS == dict(catalog)
    for op in fldispatch.OPS:
        assert getattr(fldispatch, op) is getattr(fldispatch._C, op)
        assert op in fldispatch.__all__
    sigs = fldispatch.signatures()
    assert list(sigs)[:len(catalog)] == list(fldispatch.OPS)
    assert sigs["rms_norm"] == fltorch.SCHEMAS["rms_norm"]


# ---- a C plugin's declared ops, called by name -----------------------------------------

def test_call_op_marshals_a_c_plugins_declared_op(sig_ops):
    assert sig_ops["sig_axpy"] == AXPY
    x, y, out = torch.arange(4.0), torch.ones(4), torch.zeros(4)
    assert fldispatch.call_op("sig_axpy", out, x, y, alpha=2.0) is None
    assert out.tolist() == [1.0, 3.0, 5.0, 7.0]
    fldispatch.call_op("sig_axpy", out, x, y)  # alpha's default
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    fldispatch.call_op("sig_fill", out, None, 3, negate=True)
    assert out.tolist() == [-3.0] * 4
    fill = fldispatch.resolve_op("sig_fill")
    fill(out, x, value=1)
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert fldispatch.resolve("sig_fill") == "vendor.sig_ops"


@pytest.mark.parametrize("call, error, fragments", [
    (lambda o, x, y: fldispatch.call_op("sig_axpy", o, x), TypeError, ["sig_axpy", "'y'"]),
    (lambda o, x, y: fldispatch.call_op("sig_axpy", o, x, y, 1.0, 2), TypeError,
     ["sig_axpy", "at most 4"]),
    (lambda o, x, y: fldispatch.call_op("sig_axpy", o, x, y, alpha="a"), TypeError,
     ["sig_axpy", "'alpha'", "float"]),
    (lambda o, x, y: fldispatch.call_op("sig_axpy", o, x, None), TypeError,
     ["sig_axpy", "'y'", "tensor"]),
    (lambda o, x, y: fldispatch.call_op("sig_axpy", o, x, y, beta=1), TypeError,
     ["sig_axpy", "beta"]),
    (lambda o, x, y: fldispatch.call_op("sig_fill", o, None, 1.5), TypeError,
     ["sig_fill", "'value'", "int"]),
    (lambda o, x, y: fldispatch.call_op("sig_fill", o, None, True), TypeError,
     ["sig_fill", "'value'", "int"]),
    (lambda o, x, y: fldispatch.call_op("sig_axpy", o, x, torch.ones(4, device="meta")),
     fldispatch.InvalidArgumentError, ["sig_axpy", "y"]),
    (lambda o, x, y: fldispatch.call_op("sig_axpy", o, x.double(), y),
     fldispatch.UnavailableError, ["sig_axpy"]),
])
def test_bad_calls_name_the_op_and_argument(sig_ops, call, error, fragments):
    x, y, out = torch.arange(4.0), torch.ones(4), torch.full((4,), 9.0)
    with pytest.raises(error) as info:
        call(out, x, y)
    for f in fragments:
        assert f in str(info.value)
    assert out.tolist() == [9.0] * 4


# ---- declarations from Python ---------------------------------------------------------

def test_declared_twice_and_malformed(sig_ops):
    fldispatch.declare_op("sig_axpy", "(Tensor! out, Tensor x, Tensor y, float alpha=1) -> ()")
    with pytest.raises(fldispatch.InvalidArgumentError) as info:
        fldispatch.declare_op("sig_axpy", "(Tensor(a!) out, Tensor x) -> ()", plugin="pydecl")
    msg = str(info.value)
    assert "sig_axpy" in msg and "plugin 'pydecl'" in msg and "plugin 'sig_ops'" in msg
    assert AXPY in msg and "(Tensor(a!) out, Tensor x) -> ()" in msg

    op = fresh_op()
    with pytest.raises(fldispatch.InvalidArgumentError, match="column 14"):
        fldispatch.declare_op(op, "(Tensor out, Tensr x) -> ()")
    assert op not in fldispatch.signatures()

    # all or nothing in a registering() block: the implementation is not registered
    op = fresh_op()
    with pytest.raises(fldispatch.InvalidArgumentError, match="malformed signature"):
        with fldispatch.registering("sigpkg_bad"):
            fldispatch.register_impl(op, lambda out: None, impl_id="vendor.p", kind="vendor",
                                     vendor="p", schema="(Tensor(a!) out -> ()")
    assert op not in fldispatch.signatures()
    assert not [m for m in fldispatch.impls() if m["op"] == op]


def test_python_impl_of_a_declared_op_gets_the_callers_arguments():
    op = fresh_op()
    seen = []

    def impl(out, x, scale=None):
        seen.append(scale)
        out.copy_(x * (scale if scale is not None else 2))

    fldispatch.register_impl(op, impl, impl_id="vendor.pyscale", kind="vendor", vendor="py",
                             schema="(Tensor(a!) out, Tensor x, float scale=2.0) -> ()")
    x, out = torch.arange(3.0), torch.zeros(3)
    fldispatch.call_op(op, out, x, scale=3.0)
    assert out.tolist() == [0.0, 3.0, 6.0] and seen == [3.0]
    getattr(torch.ops.fldispatch, op)(out, x)
    assert out.tolist() == [0.0, 2.0, 4.0]


# ---- torch.ops.fldispatch: opcheck over every schema -----------------------------------

def _catalog_samples():
    x16 = torch.randn(3, 16)
    cache = torch.randn(8, 8)
    return {
        "silu_and_mul": (torch.empty(3, 8), x16),
        "mul_and_silu": (torch.empty(3, 8), x16),
        "gelu_and_mul": (torch.empty(3, 8), x16),
        "gelu_tanh_and_mul": (torch.empty(3, 8), x16),
        "gelu_quick": (torch.empty(3, 16), x16),
        "gelu_new": (torch.empty(3, 16), x16),
        "gelu_fast": (torch.empty(3, 16), x16),
        "rms_norm": (torch.empty(3, 16), x16, torch.randn(16), torch.randn(3, 16), 1e-6),
        "gemma_rms_norm": (torch.empty(3, 16), x16, torch.randn(16), None, 1e-6),
        "rotary_embedding": (torch.tensor([0, 3, 7]), torch.randn(3, 16), torch.randn(3, 8), 8,
                             cache, True),
        "rotary_embedding_out": (torch.tensor([0, 3, 7]), torch.randn(3, 16), torch.randn(3, 8), 8,
                                 cache, True, torch.empty(3, 16), torch.empty(3, 8)),
        "attention_backend": ("cpu", False, False),
    }


def _declared_sample(schema):
    """Arguments for a declared schema: float32 vectors, 1, 0.5, False, "cpu"."""
    inner = schema[1:schema.index(") ->")]
    out = []
    for arg in filter(None, (a.strip() for a in inner.split(","))):
        kind = arg.split()[0]
        out.append({"int": 1, "float": 0.5, "bool": False, "str": "cpu"}.get(
            kind, torch.randn(4)))
    return tuple(out)


def test_opcheck_every_schema(sig_ops):
    samples = _catalog_samples()
    assert set(samples) == set(fldispatch.OPS), "a catalog op without an opcheck sample"
    for op, schema in fldispatch.signatures().items():
        if op not in samples and op not in fltorch.DECLARED:
            continue  # declared by a test with a schema whose sample is not generic
        args = samples.get(op) or _declared_sample(schema)
        if not op.startswith("sig_") and op not in samples:
            continue
        # attention_backend returns a str, which AOT dispatch cannot compare
        utils = ("test_schema", "test_autograd_registration", "test_faketensor") \
            if op == "attention_backend" else None
        kwargs = {"test_utils": utils} if utils else {}
        torch.library.opcheck(getattr(torch.ops.fldispatch, op), args, **kwargs)


# ---- torch.compile ---------------------------------------------------------------------

def test_compile_call_op_of_a_c_plugin_op_fullgraph(sig_ops):
    def f(out, x, y):
        fldispatch.call_op("sig_axpy", out, x, y, alpha=2.0)
        return out * 2

    x, y, out = torch.arange(4.0), torch.ones(4), torch.zeros(4)
    explained = torch._dynamo.explain(f)(out, x, y)
    assert explained.graph_break_count == 0
    assert torch.compile(f, fullgraph=True)(out, x, y).tolist() == [2.0, 6.0, 10.0, 14.0]


def _copy(out, value):
    out.copy_(value)


def test_compile_call_op_of_python_impls_follows_policy_changes():
    from torch._dynamo.testing import CompileCounter

    op = fresh_op()
    schema = "(Tensor(a!) out, Tensor x) -> ()"
    with fldispatch.registering("sigpkg_compile"):
        fldispatch.declare_op(op, schema)
        fldispatch.register_impl(op, lambda out, x: _copy(out, x + 100),
                                 impl_id="vendor.plus100", kind="vendor", vendor="py")
        fldispatch.register_impl(op, lambda out, x: _copy(out, x - 100),
                                 impl_id="reference.minus100", kind="reference")

    def f(out, x):
        fldispatch.call_op(op, out, x)
        return out + 1

    counter = CompileCounter()
    compiled = torch.compile(f, backend=counter, fullgraph=True)
    x, out = torch.zeros(2), torch.zeros(2)
    assert compiled(out, x).tolist() == [101.0, 101.0]
    with fldispatch.policy(prefer="reference"):
        assert compiled(out, x).tolist() == [-99.0, -99.0]
    assert compiled(out, x).tolist() == [101.0, 101.0]
    assert counter.frame_count == 1  # dispatch runs inside the op: no recompilation


def test_a_plugin_loaded_after_call_op_saw_its_op_declares_it(tmp_path):
    # call_op() on an op nobody declared yet caches the op as undeclared; the
    # signature a plugin loaded later declares must still apply to it.
    import subprocess
    import sys
    src = fixture_plugin("sig_ops")
    code = f"""
import torch, fldispatch
fldispatch.register_impl("sig_fill", lambda *a, **k: None, impl_id="reference.noop",
                         kind="reference")
fldispatch.call_op("sig_fill", 1, 2)          # undeclared: any arguments go through
fldispatch.load_plugin({src!r})
out = torch.zeros(2)
fldispatch.call_op("sig_fill", out, None, 4)
assert out.tolist() == [4.0, 4.0], out
try:
    fldispatch.call_op("sig_fill", 1, 2)
except TypeError as e:
    assert "sig_fill" in str(e)
else:
    raise AssertionError("not checked by the signature")
"""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(fldispatch.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr


def test_argument_names_no_binding_can_take_are_refused():
    """The library's rule for argument names is Python's keyword list: each
    keyword is refused (naming it), every other identifier is accepted,
    and every accepted schema is one PyTorch's parser takes."""
    import keyword

    torch_parse = torch._C.parse_schema
    for word in keyword.kwlist:
        op = fresh_op("kw")
        with pytest.raises(fldispatch.InvalidArgumentError, match=f"'{word}' is a Python keyword"):
            fldispatch.declare_op(op, f"(Tensor(a!) out, int {word}) -> ()")
        assert op not in fldispatch.signatures()
    for word in list(keyword.softkwlist) + ["none", "true", "self", "Tensor", "int", "async_"]:
        op = fresh_op("soft")
        fldispatch.declare_op(op, f"(Tensor(a!) out, int {word}=1) -> ()")
        torch_parse(op + fldispatch.signatures()[op])
    for default in ("nan", "-nan", "inf", "+inf", "-inf", "infinity", "-infinity", "1e999",
                    "5e-324"):
        op = fresh_op("fdef")
        with pytest.raises(fldispatch.InvalidArgumentError, match="float default"):
            fldispatch.declare_op(op, f"(Tensor(a!) out, float f={default}) -> ()")
    for default in ("0.0", "-0.0", "1e-300", "1.7976931348623157e308", "+2.5", ".5", "5."):
        op = fresh_op("fdef")
        fldispatch.declare_op(op, f"(Tensor(a!) out, float f={default}) -> ()")
        torch_parse(op + fldispatch.signatures()[op])
