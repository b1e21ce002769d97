# SPDX-License-Identifier: Apache-2.0
"""PyTorch's autograd rules for the ops' in-place writes, the errors of
tensors DLPack cannot carry, and the GIL during reloads."""

import sys
import threading
import time

import pytest
import torch

import fldispatch
import fldispatch.torch  # noqa: F401  (torch.ops.fldispatch)

OPS = {
    "fldispatch": lambda: fldispatch,
    "torch.ops": lambda: torch.ops.fldispatch,
}


def args_of(op, **requires):
    """Tensors for op; those named in requires get requires_grad=True."""
    t = {
        "silu_and_mul": {"out": torch.zeros(2, 4), "x": torch.randn(2, 8)},
        "rms_norm": {"out": torch.zeros(2, 8), "x": torch.randn(2, 8), "weight": torch.ones(8),
                     "residual": torch.randn(2, 8)},
        "rotary_embedding": {"positions": torch.arange(2), "query": torch.randn(2, 16),
                             "key": torch.randn(2, 16), "cos_sin_cache": torch.randn(4, 8)},
    }[op]
    for name in requires:
        t[name].requires_grad_(True)
    return t


def call(api, op, t):
    ns = OPS[api]()
    if op == "silu_and_mul":
        ns.silu_and_mul(t["out"], t["x"])
    elif op == "rms_norm":
        ns.rms_norm(t["out"], t["x"], t["weight"], t["residual"], 1e-6)
    else:
        ns.rotary_embedding(t["positions"], t["query"], t["key"], 8, t["cos_sin_cache"], True)


WRITTEN = {"silu_and_mul": ("out",), "rms_norm": ("out", "residual"),
           "rotary_embedding": ("query", "key")}
READ = {"silu_and_mul": ("x",), "rms_norm": ("x", "weight"), "rotary_embedding": ("cos_sin_cache",)}


@pytest.mark.parametrize("api", sorted(OPS))
@pytest.mark.parametrize("op", sorted(WRITTEN))
def test_writes_bump_the_version_counter(api, op):
    t = args_of(op)
    before = {name: t[name]._version for name in WRITTEN[op]}
    call(api, op, t)
    for name in WRITTEN[op]:
        assert t[name]._version > before[name], f"{name} written without a version bump"


@pytest.mark.parametrize("api", sorted(OPS))
def test_writing_a_tensor_saved_for_backward_is_caught_by_backward(api):
    a = torch.randn(2, 4, requires_grad=True)
    t = args_of("silu_and_mul")
    loss = (a * t["out"]).sum()  # saves out for a's gradient
    call(api, "silu_and_mul", t)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("api", sorted(OPS))
@pytest.mark.parametrize("op", sorted(WRITTEN))
def test_arguments_that_require_grad_are_refused_naming_them(api, op):
    for name in WRITTEN[op] + READ[op]:
        t = args_of(op, **{name: True})
        snapshot = {k: v.detach().clone() for k, v in t.items()}
        with pytest.raises(fldispatch.InvalidArgumentError,
                           match=f"{op}: argument '{name}' requires grad"):
            call(api, op, t)
        for k, v in t.items():
            assert torch.equal(v.detach(), snapshot[k]), f"{k} written although refused"
        with torch.no_grad():  # as PyTorch's in-place ops: allowed without grad mode
            call(api, op, t)


def test_inference_tensors_are_fine():
    with torch.inference_mode():
        t = args_of("rms_norm")
        call("fldispatch", "rms_norm", t)
    call("fldispatch", "rms_norm", t)  # inference tensors have no version counter


@pytest.mark.parametrize("kind", ["meta", "sparse", "quantized"])
def test_tensors_dlpack_cannot_carry_name_the_argument(kind):
    bad = {"meta": lambda: torch.empty(2, 8, device="meta"),
           "sparse": lambda: torch.zeros(2, 8).to_sparse(),
           "quantized": lambda: torch.quantize_per_tensor(torch.zeros(2, 8), 0.1, 0,
                                                          torch.quint8)}[kind]()
    with pytest.raises(fldispatch.InvalidArgumentError,
                       match="silu_and_mul: argument 'x' cannot be passed through DLPack") as e:
        fldispatch.silu_and_mul(torch.zeros(2, 4), bad)
    assert isinstance(e.value.__cause__, RuntimeError)  # PyTorch's own error, chained


def test_reload_lets_other_threads_run():
    # The worker sleeps (no GIL), wakes by a timer while the main thread is
    # reloading in a loop, and then needs the GIL to count. With a switch
    # interval far longer than the test, the main thread hands the GIL over
    # only where it releases it itself (the loop has no other such call): the
    # worker can count only inside reload(), and only if reload releases the
    # GIL. Reloads are repeated (each may take a fraction of a millisecond
    # here) until the worker got in, for at most 30 seconds (the loop ends as soon
    # as it did; the bound is for a machine loaded by others).
    ticks = 0
    started = False

    def count():
        nonlocal ticks, started
        started = True
        time.sleep(0.2)
        ticks += 1

    interval = sys.getswitchinterval()
    worker = threading.Thread(target=count)
    worker.start()
    try:
        while not started:
            time.sleep(0.001)
        sys.setswitchinterval(30.0)
        deadline = time.perf_counter() + 30.0
        reloads = 0
        while ticks == 0 and time.perf_counter() < deadline:
            fldispatch.reload()
            reloads += 1
        progressed = ticks
    finally:
        sys.setswitchinterval(interval)
        worker.join()
    assert progressed > 0, f"no other thread ran during {reloads} fldispatch.reload() calls"
