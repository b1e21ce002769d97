# SPDX-License-Identifier: Apache-2.0
"""Tensors whose DLPack description is malformed (a rank without a shape
array, a negative rank, dimensions whose product overflows): refused with
an error naming the argument, before anything reads through the shape,
whichever way the tensor comes in (versioned or legacy capsule, the C
exchange API, a capsule passed directly) and whichever argument it is."""

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fakedl
import fldispatch


def null_shape(dl):
    dl.shape = None


def negative_rank(dl):
    dl.ndim = -3


def huge_dims(dl):
    # 2**62 * 2**62 * 16 wraps to 0 in int64 arithmetic.
    shape = (ctypes.c_int64 * 3)(2**62, 2**62, 16)
    huge_dims.keep.append(shape)  # type: ignore[attr-defined]  # an attribute set on the function
    dl.ndim = 3
    dl.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    dl.strides = None


huge_dims.keep = []  # type: ignore[attr-defined]  # the shapes kept alive, on the function
capsules: list[object] = []


def capsule(tensor):
    # Kept alive past the call: fakedl's capsule destructor is a ctypes
    # callback, which must not run while the call's exception is pending.
    capsules.append(tensor.capsule(max_version=(1, 3)))
    return capsules[-1]

PRODUCERS = {
    "versioned": lambda a, edit: fakedl.FakeTensor(a, device_type=fakedl.kDLCPU, edit=edit),
    "legacy": lambda a, edit: fakedl.FakeTensor(a, device_type=fakedl.kDLCPU, edit=edit,
                                                legacy_only=True),
    "capsule": lambda a, edit: capsule(fakedl.FakeTensor(a, device_type=fakedl.kDLCPU, edit=edit)),
    "exchange": lambda a, edit: fakedl.ExchangeTensor(a, device_type=fakedl.kDLCPU, edit=edit),
}


def good(shape):
    return np.ones(shape, np.float32)


def calls(make):
    """(op name, argument name, call) for every tensor argument of every op."""
    yield "silu_and_mul", "out", lambda: fldispatch.silu_and_mul(make(good((4, 8))),
                                                                  good((4, 16)))
    yield "silu_and_mul", "x", lambda: fldispatch.silu_and_mul(good((4, 8)), make(good((4, 16))))
    for arg in ("out", "x", "weight", "residual"):
        def norm(arg=arg):
            a = {n: good((4, 16)) for n in ("out", "x", "residual")}
            a["weight"] = good((16,))
            a[arg] = make(a[arg])
            fldispatch.rms_norm(a["out"], a["x"], a["weight"], a["residual"])
        yield "rms_norm", arg, norm
    for arg in ("positions", "query", "key", "cos_sin_cache"):
        def rotary(arg=arg):
            a = {"positions": np.arange(4, dtype=np.int64), "query": good((4, 32)),
                 "key": good((4, 32)), "cos_sin_cache": good((8, 16))}
            a[arg] = make(a[arg])
            fldispatch.rotary_embedding(a["positions"], a["query"], a["key"], 16,
                                        a["cos_sin_cache"], True)
        yield "rotary_embedding", arg, rotary


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.parametrize("edit", [null_shape, negative_rank], ids=lambda f: f.__name__)
def test_malformed_rank_is_refused_naming_the_argument(producer, edit):
    for op, arg, call in calls(lambda a: PRODUCERS[producer](a, edit)):
        with pytest.raises(fldispatch.InvalidArgumentError, match=f"{op}: argument '{arg}'"):
            call()


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_dimensions_whose_product_overflows_are_refused(producer):
    for _op, _arg, call in calls(lambda a: PRODUCERS[producer](a, huge_dims)):
        with pytest.raises(fldispatch.InvalidArgumentError):
            call()


def test_null_shape_does_not_crash_the_process():
    # In a child: before the shape was checked, a NULL shape on `x` (or
    # `query`) crashed the interpreter in the element count taken to decide
    # whether to release the GIL.
    code = textwrap.dedent("""
        import sys
        sys.path[:0] = %r
        import numpy as np, fakedl, fldispatch
        def null_shape(dl):
            dl.shape = None
        x = fakedl.FakeTensor(np.ones((4, 16), np.float32), device_type=fakedl.kDLCPU,
                              edit=null_shape)
        try:
            fldispatch.silu_and_mul(np.ones((4, 8), np.float32), x)
        except fldispatch.InvalidArgumentError as e:
            print("refused:", e)
    """) % (sys.path,)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "refused: silu_and_mul: argument 'x'" in child.stdout
