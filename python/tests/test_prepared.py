# SPDX-License-Identifier: Apache-2.0
"""fldispatch.prepare(): a catalog call checked once, then run on new tensors of
the same layouts. Results equal the op function's on the same tensors; a
tensor of another layout, a missing or extra tensor, overlapping outputs and
device-less misuse raise InvalidArgumentError naming the tensor; the policy
in force at each call decides the implementation."""

import pytest
import torch

import fldispatch


def test_rms_norm_matches_the_op_function():
    w = torch.randn(64)
    p = fldispatch.prepare("rms_norm", torch.empty(3, 64), torch.randn(3, 64), w, eps=1e-5)
    for _ in range(3):
        x = torch.randn(3, 64)
        out, ref = torch.empty(3, 64), torch.empty(3, 64)
        p(out, x, w)
        fldispatch.rms_norm(ref, x, w, eps=1e-5)
        assert torch.equal(out, ref)


def test_rms_norm_with_residual_in_place():
    w = torch.randn(32)
    x, res = torch.randn(2, 32), torch.randn(2, 32)
    p = fldispatch.prepare("rms_norm", x, x, w, res)
    x2, r2 = torch.randn(2, 32), torch.randn(2, 32)
    x3, r3 = x2.clone(), r2.clone()
    p(x2, x2, w, r2)
    fldispatch.rms_norm(x3, x3, w, r3)
    assert torch.equal(x2, x3) and torch.equal(r2, r3)


def test_strided_views_keep_their_layout():
    base = torch.randn(4, 96)
    x = base[:, :64]  # row stride 96
    out = torch.empty(4, 32)
    p = fldispatch.prepare("silu_and_mul", out, x)
    base2 = torch.randn(4, 96)
    p(out, base2[:, :64])
    ref = torch.empty(4, 32)
    fldispatch.silu_and_mul(ref, base2[:, :64])
    assert torch.equal(out, ref)
    # same shape, other strides: not the prepared layout
    with pytest.raises(fldispatch.InvalidArgumentError, match="tensor 'x' does not have the layout"):
        p(out, torch.randn(4, 64))


def test_byte_offset_of_a_new_view():
    x = torch.randn(4, 64)
    out = torch.empty(4, 32)
    p = fldispatch.prepare("silu_and_mul", out, x)
    big = torch.randn(8, 64)
    p(out, big[4:])  # same layout, data starting 4 rows in
    ref = torch.empty(4, 32)
    fldispatch.silu_and_mul(ref, big[4:])
    assert torch.equal(out, ref)


def test_rotary_positions_checked_each_call():
    T, H, D, MAXPOS = 3, 2, 16, 8
    pos = torch.arange(T)
    q, k = torch.randn(T, H * D), torch.randn(T, D)
    cache = torch.randn(MAXPOS, D)
    p = fldispatch.prepare("rotary_embedding", pos, q, k, D, cache, True)
    q2, k2 = q.clone(), k.clone()
    p(pos, q, k, cache)
    fldispatch.rotary_embedding(pos, q2, k2, D, cache, True)
    assert torch.equal(q, q2) and torch.equal(k, k2)
    bad = torch.tensor([0, 1, MAXPOS])
    before = q.clone()
    with pytest.raises(fldispatch.InvalidArgumentError, match="positions"):
        p(bad, q, k, cache)
    assert torch.equal(q, before)


def test_bad_calls_name_the_tensor():
    x, out, w = torch.randn(2, 64), torch.empty(2, 64), torch.randn(64)
    p = fldispatch.prepare("rms_norm", out, x, w)
    with pytest.raises(fldispatch.InvalidArgumentError, match="tensor 'x' does not have"):
        p(out, torch.randn(2, 64, dtype=torch.float64), w)
    with pytest.raises(fldispatch.InvalidArgumentError, match="tensor 'weight' is missing"):
        p(out, x)
    with pytest.raises(fldispatch.InvalidArgumentError, match="tensor 'residual' is given"):
        p(out, x, w, torch.randn(2, 64))
    # out sharing memory with weight: the library's overlap message
    buf = torch.empty(2, 64)
    with pytest.raises(fldispatch.InvalidArgumentError, match="overlaps tensor 'weight'"):
        p(buf, x, buf[0])
    with pytest.raises(fldispatch.InvalidArgumentError, match="tensor 'weight'"):
        fldispatch.prepare("rms_norm", out, x, torch.randn(63))
    with pytest.raises(fldispatch.NotFoundError):
        fldispatch.prepare("no_such_op", out, x)
    with pytest.raises(fldispatch.InvalidArgumentError, match="no tensors"):
        fldispatch.prepare("attention_backend", "cpu")


def test_follows_the_policy():
    x, out = torch.randn(1, 64), torch.empty(1, 32)
    p = fldispatch.prepare("silu_and_mul", out, x)
    fldispatch.stats_enable("calls")
    fldispatch.stats_reset()
    try:
        p(out, x)
        with fldispatch.policy(prefer="reference"):
            p(out, x)
            p(out, x)
        rows = {r["impl_id"]: r["calls"] for r in fldispatch.stats() if r["op"] == "silu_and_mul"}
    finally:
        fldispatch.stats_enable("off")
        fldispatch.stats_reset()
    default = fldispatch.resolve("silu_and_mul")
    assert rows.get("reference.c") == 2 + (default == "reference.c")
    if default != "reference.c":
        assert rows.get(default) == 1


def test_requires_grad_refused():
    x = torch.randn(1, 64, requires_grad=True)
    out = torch.empty(1, 32)
    p = fldispatch.prepare("silu_and_mul", out, x.detach())
    with pytest.raises(fldispatch.InvalidArgumentError):
        p(out, x)


# ---- one Prepared shared by threads ---------------------------------------------------


def run_child(code):
    import subprocess
    import sys
    import textwrap
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_shared_prepared_keeps_each_threads_pointers_through_a_fallback():
    """Thread A's call of a shared Prepared is inside a Python implementation
    when thread B calls the same Prepared; A's implementation then fails and
    the fallback runs A's call: it must write A's output, not B's (each call
    has its own pointers). In a child: the Python implementation of rms_norm
    would serve the other tests' calls."""
    out = run_child("""
        import threading
        import torch
        import fldispatch

        both_inside = threading.Barrier(2, timeout=60)

        def slow(out, x, weight, residual, eps):
            both_inside.wait()
            if threading.current_thread().name == "A":
                raise RuntimeError("A fails after B has called")
            out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)

        fldispatch.register_impl("rms_norm", slow, impl_id="vendor.slow", kind="vendor",
                                 vendor="slow", plugin="pytest_slow", dtypes=["float32"])
        w = torch.randn(64)
        p = fldispatch.prepare("rms_norm", torch.empty(4, 64), torch.randn(4, 64), w)
        xs = {"A": torch.randn(4, 64), "B": torch.randn(4, 64)}
        outs = {"A": torch.zeros(4, 64), "B": torch.zeros(4, 64)}
        errors = []

        def run():
            name = threading.current_thread().name
            try:
                with fldispatch.policy(per_op="rms_norm=impl:vendor.slow|reference"):
                    p(outs[name], xs[name], w)
            except BaseException as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=run, name=n) for n in "AB"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in "AB":
            ref = torch.empty(4, 64)
            fldispatch.rms_norm(ref, xs[name], w)
            print(name, "equal" if torch.allclose(outs[name], ref) else "WRONG")
        print("errors", errors)
    """)
    assert "A equal" in out and "B equal" in out and "errors []" in out, out


@pytest.mark.parametrize("rows", [4, 512])  # 512 x 64 f32 = 128 KiB: runs without the GIL
def test_shared_prepared_from_threads_matches_one_thread(rows):
    import threading
    w = torch.randn(64)
    p = fldispatch.prepare("rms_norm", torch.empty(rows, 64), torch.randn(rows, 64), w, eps=1e-5)
    n_threads, n_calls = 4, 150
    xs = [[torch.randn(rows, 64) for _ in range(3)] for _ in range(n_threads)]
    refs: list[list[object]] = []
    for per_thread in xs:
        refs.append([])
        for x in per_thread:
            ref = torch.empty(rows, 64)
            fldispatch.rms_norm(ref, x, w, eps=1e-5)
            refs[-1].append(ref)
    wrong = []
    start = threading.Barrier(n_threads, timeout=60)

    def run(i):
        start.wait()
        out = torch.empty(rows, 64)
        for k in range(n_calls):
            j = k % 3
            out.fill_(float("nan"))
            p(out, xs[i][j], w)
            if not torch.equal(out, refs[i][j]):
                wrong.append((i, k))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, f"{len(wrong)} of {n_threads * n_calls} calls gave another thread's result"
