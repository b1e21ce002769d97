# SPDX-License-Identifier: Apache-2.0
"""The native torch kernels (make python-torch-native; make check builds
them): torch.ops.fldispatch.*'s CPU and CUDA kernels are registered from C++ and give
the results of fldispatch's own functions. Outside make check they are skipped
when not built, and test_torch_ops.py and test_autograd_and_gil.py run against
whichever CPU kernels are registered; under make check (FLDPY_EXPECT_NATIVE=1)
their absence fails."""

import json
import os
import subprocess
import sys

import pytest
import torch

import fldispatch
import fldispatch.native_abi
import fldispatch.torch as ft

native = pytest.mark.skipif(not ft.NATIVE and os.environ.get("FLDPY_EXPECT_NATIVE") != "1",
                            reason=f"native torch kernels not in use: {ft.NATIVE_REASON}")


def test_native_kernels_are_in_use_when_built():
    if os.environ.get("FLDPY_EXPECT_NATIVE") != "1" and not ft.NATIVE:
        pytest.skip(f"native torch kernels not in use: {ft.NATIVE_REASON}")
    assert ft.NATIVE, ft.NATIVE_REASON


def _fake_build(tmp_path, record):
    so = tmp_path / "_torch_ops.so"
    so.write_bytes(b"")
    if record is not None:
        (tmp_path / "_torch_ops.abi").write_text(record + "\n")
    return str(so)


def test_a_build_for_another_torch_is_not_loaded(tmp_path, monkeypatch):
    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    so = _fake_build(tmp_path, "torch=1.0.0 python=3.0")
    reason = ft._native_mismatch(so)
    assert reason is not None
    assert "built for torch=1.0.0 python=3.0" in reason
    assert fldispatch.native_abi.record() in reason


def test_a_build_without_its_record_is_not_loaded(tmp_path, monkeypatch):
    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    reason = ft._native_mismatch(_fake_build(tmp_path, None))
    assert reason is not None
    assert "_torch_ops.abi absent" in reason


def test_a_matching_record_is_accepted_and_the_variable_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    so = _fake_build(tmp_path, fldispatch.native_abi.record())
    assert ft._native_mismatch(so) is None
    monkeypatch.setenv("FLDISPATCH_TORCH_NATIVE", "0")
    assert ft._native_mismatch(so) == "FLDISPATCH_TORCH_NATIVE=0"


def test_absent_build_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    reason = ft._native_mismatch(str(tmp_path / "_torch_ops.so"))
    assert reason is not None
    assert "not built" in reason


def _kernels(op):
    """{dispatch key: where its kernel of torch.ops.fldispatch.<op> was registered}."""
    lines = torch._C._dispatch_dump(f"fldispatch::{op}").splitlines()
    return {line.split(":", 1)[0]: line.split(":", 1)[1] for line in lines
            if line.split(":", 1)[0] in ft.TENSOR_KEYS}


@native
@pytest.mark.parametrize("op", ft.NATIVE_OPS)
def test_cpu_and_cuda_kernels_are_the_native_ones(op):
    kernels = _kernels(op)
    for key in ("CPU", "CUDA"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fldispatch::{op}", key)
        assert "torch_ops.cpp" in kernels[key], kernels
    # torch_npu keeps the Python-level kernel (fldispatch/torch.py says why).
    assert "torch.py" in kernels["PrivateUse1"], kernels


@native
def test_no_python_kernel_is_registered_where_a_native_one_serves():
    # A Python kernel registered for the same key before the native one would
    # be overridden, and PyTorch warns when that happens.
    r = subprocess.run([sys.executable, "-W", "always", "-c",
                        "import fldispatch.torch as t; print(t.NATIVE)"],
                       env=dict(os.environ), capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "True"
    assert "Overriding a previously registered kernel" not in r.stderr, r.stderr


def test_native_keys_are_cpu_and_cuda_and_the_old_names_follow():
    assert ft.NATIVE_KEYS == ("CPU", "CUDA")
    assert (ft.NATIVE_CPU, ft.NATIVE_REASON) == (ft.NATIVE, ft.NATIVE_REASON)


_KERNEL_PLACES = """
import json, torch
import fldispatch.torch as ft
lines = torch._C._dispatch_dump("fldispatch::rms_norm").splitlines()
print(json.dumps([ft.NATIVE, ft.NATIVE_REASON,
                  {l.split(":", 1)[0]: l.split(":", 1)[1] for l in lines if l.split(":", 1)[0] in ft.TENSOR_KEYS}]))
"""


def test_without_native_kernels_python_ones_serve_cpu_and_cuda():
    env = dict(os.environ, FLDISPATCH_TORCH_NATIVE="0")
    r = subprocess.run([sys.executable, "-c", _KERNEL_PLACES], env=env, capture_output=True,
                       text=True, check=True)
    native, reason, kernels = json.loads(r.stdout.strip().splitlines()[-1])
    assert (native, reason) == (False, "FLDISPATCH_TORCH_NATIVE=0")
    assert all("torch.py" in kernels[key] for key in ft.TENSOR_KEYS), kernels


@native
@pytest.mark.parametrize("op", ["silu_and_mul", "mul_and_silu", "gelu_and_mul",
                                "gelu_tanh_and_mul"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activations_match(op, dtype):
    x = torch.randn(3, 64).to(dtype)
    out, ref = torch.empty(3, 32, dtype=dtype), torch.empty(3, 32, dtype=dtype)
    getattr(torch.ops.fldispatch, op)(out, x)
    getattr(fldispatch, op)(ref, x)
    assert torch.equal(out, ref)


@native
@pytest.mark.parametrize("op", ["rms_norm", "gemma_rms_norm"])
def test_norms_match_with_a_strided_view_and_residual(op):
    base = torch.randn(4, 96)
    x = base[:, 16:80]  # a view: data_ptr past the storage's start, row stride 96
    w, res = torch.randn(64), torch.randn(4, 64)
    out, ref, res2 = torch.empty(4, 64), torch.empty(4, 64), res.clone()
    getattr(torch.ops.fldispatch, op)(out, x, w, res, 1e-5)
    getattr(fldispatch, op)(ref, x, w, res2, eps=1e-5)
    assert torch.equal(out, ref) and torch.equal(res, res2)


@native
def test_rotary_matches():
    pos = torch.tensor([0, 3, 5])
    q, k, cache = torch.randn(3, 64), torch.randn(3, 32), torch.randn(8, 32)
    q2, k2 = q.clone(), k.clone()
    torch.ops.fldispatch.rotary_embedding(pos, q, k, 32, cache, True)
    fldispatch.rotary_embedding(pos, q2, k2, 32, cache, True)
    assert torch.equal(q, q2) and torch.equal(k, k2)


# A large rotary call runs on torch's intra-op threads in token ranges (row_split.h):
# 64 tokens x 40 heads of 128 are 1.25 MiB (float32) or 640 KiB (bfloat16) read and written,
# above the size where it splits; the result must be the library's own, bit for bit.
@pytest.fixture
def two_torch_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _rotary_inputs(dtype, tokens=64, pos_dtype=torch.int64, padded=False):
    g = torch.Generator().manual_seed(7)
    pos = torch.randint(0, 512, (tokens,), generator=g).to(pos_dtype)
    width = 32 * 128
    qbase = torch.randn(tokens, width + (256 if padded else 0), generator=g).to(dtype)
    q = qbase[:, 128:128 + width] if padded else qbase  # row stride past the row
    k = torch.randn(tokens, 8, 128, generator=g).to(dtype)
    ang = torch.rand(512, 64, generator=g) * 6.2831853
    cache = torch.cat((ang.cos(), ang.sin()), dim=-1).to(dtype)
    return pos, q, k, cache


@native
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("form", ["plain", "int32", "padded", "no_key", "odd_tokens"])
def test_rotary_on_torch_threads_matches(two_torch_threads, dtype, neox, form):
    pos, q, k, cache = _rotary_inputs(dtype, tokens=61 if form == "odd_tokens" else 64,
                                      pos_dtype=torch.int32 if form == "int32" else torch.int64,
                                      padded=form == "padded")
    key = None if form == "no_key" else k
    q2, k2 = q.clone(), k.clone()
    torch.ops.fldispatch.rotary_embedding(pos, q, key, 128, cache, neox)
    fldispatch.rotary_embedding(pos, q2, None if key is None else k2, 128, cache, neox)
    assert torch.equal(q, q2)
    assert torch.equal(k, k2)


@native
def test_rotary_on_torch_threads_writes_nothing_on_error(two_torch_threads):
    pos, q, k, cache = _rotary_inputs(torch.float32)
    pos[-1] = 512  # past the cache: only the last token range holds it
    q0, k0 = q.clone(), k.clone()
    with pytest.raises(fldispatch.InvalidArgumentError, match="rotary_embedding: .*position"):
        torch.ops.fldispatch.rotary_embedding(pos, q, k, 128, cache, True)
    assert torch.equal(q, q0) and torch.equal(k, k0)


# The norms and the activations are cut the same way, by rows of x (out's and
# the residual's rows follow). 64 rows of 4096 are 1 MiB or more read and
# written in every dtype, above the size where a call is cut: with torch's
# team at 2 threads the call runs in ranges, at 1 thread whole, and the result
# is the library's own (fldispatch's functions, one call), bit for bit.
NORMS = ["rms_norm", "gemma_rms_norm"]
GATED = ["silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul"]
ELEMENTWISE = ["gelu_quick", "gelu_new", "gelu_fast"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(params=[2, 1], ids=["2threads", "1thread"])
def torch_threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _rows(shape, dtype, g, pad=0):
    """A [*shape] tensor; pad > 0: a view whose rows sit inside wider rows of a
    larger buffer (data past the storage's start, row stride past the row)."""
    if not pad:
        return torch.randn(*shape, generator=g).to(dtype)
    base = torch.randn(*shape[:-1], shape[-1] + 2 * pad, generator=g).to(dtype)
    return base[..., pad:pad + shape[-1]]


def _norm_inputs(dtype, form, hidden=4096):
    g = torch.Generator().manual_seed(11)
    lead = {"odd_rows": (61,), "batch_seq": (4, 16)}.get(form, (64,))
    pad = 128 if form in ("strided", "batch_seq") else 0
    x = _rows((*lead, hidden), dtype, g, pad)
    wdtype = torch.float32 if form == "f32_weight" else dtype
    w = None if form == "no_weight" else (torch.randn(hidden, generator=g) * 0.1).to(wdtype)
    res = (_rows((*lead, hidden), dtype, g, pad)
           if form in ("residual", "in_place_residual", "strided", "odd_rows", "batch_seq") else None)
    out = x if form.startswith("in_place") else _rows((*lead, hidden), dtype, g, pad)
    return out, x, w, res


def _clone_like(t, x=None, x2=None):
    """A clone of t that keeps its strides (its own buffer); t is x: x2."""
    if t is None:
        return None
    if x is not None and t is x:
        return x2
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(t)


@native
@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", ["plain", "residual", "in_place", "in_place_residual",
                                  "strided", "odd_rows", "batch_seq", "f32_weight",
                                  "no_weight"])
def test_norms_on_torch_threads_match(torch_threads, op, dtype, form):
    out, x, w, res = _norm_inputs(dtype, form)
    x2 = _clone_like(x)
    out2, res2 = _clone_like(out, x, x2), _clone_like(res)
    getattr(torch.ops.fldispatch, op)(out, x, w, res, 1e-6)
    getattr(fldispatch, op)(out2, x2, w, res2, eps=1e-6)
    assert torch.equal(out, out2)
    if res is not None:
        assert torch.equal(res, res2)


def _activation_inputs(op, dtype, form):
    g = torch.Generator().manual_seed(5)
    lead = {"odd_rows": (61,), "batch_seq": (4, 16)}.get(form, (64,))
    width = 4096
    pad = 64 if form in ("strided", "batch_seq") else 0
    x = _rows((*lead, width), dtype, g, pad)
    out_width = width // 2 if op in GATED else width
    out = torch.zeros(*lead, out_width + 2 * pad, dtype=dtype)[..., pad:pad + out_width]
    return out, x


@native
@pytest.mark.parametrize("op", GATED + ELEMENTWISE)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", ["plain", "strided", "odd_rows", "batch_seq"])
def test_activations_on_torch_threads_match(torch_threads, op, dtype, form):
    out, x = _activation_inputs(op, dtype, form)
    out2 = _clone_like(out)
    getattr(torch.ops.fldispatch, op)(out, x)
    getattr(fldispatch, op)(out2, x)
    assert torch.equal(out, out2)


@native
def test_gated_activation_into_the_other_columns_of_its_input(two_torch_threads):
    # out and x as column slices of one buffer: they interleave without sharing
    # a byte, which the library takes, and so does each range.
    buf = torch.randn(64, 4096 + 2048)
    x, out = buf[:, :4096], buf[:, 4096:]
    buf2 = buf.clone()
    torch.ops.fldispatch.silu_and_mul(out, x)
    fldispatch.silu_and_mul(buf2[:, 4096:], buf2[:, :4096])
    assert torch.equal(buf, buf2)


def _unchanged(*tensors):
    before = [t.clone() for t in tensors]
    return lambda: all(torch.equal(t, b) for t, b in zip(tensors, before))


@native
@pytest.mark.parametrize("case", ["weight_size", "residual_rows", "out_rows", "out_overlaps_x",
                                  "residual_is_x", "uncollapsible_rows"])
def test_norm_on_torch_threads_writes_nothing_on_error(two_torch_threads, case):
    out, x, w, res = _norm_inputs(torch.float32, "residual")
    message = {"weight_size": "rms_norm: .*weight", "residual_rows": "rms_norm: .*residual",
               "out_rows": "rms_norm: .*out", "out_overlaps_x": "rms_norm: .*overlaps",
               "residual_is_x": "rms_norm: .*overlaps",
               "uncollapsible_rows": "rms_norm: .*x"}[case]
    if case == "weight_size":
        w = torch.randn(4095)
    elif case == "residual_rows":
        res = torch.randn(63, 4096)
    elif case == "out_rows":
        out = torch.zeros(63, 4096)
    elif case == "out_overlaps_x":
        buf = torch.randn(65, 4096)
        x, out = buf[:64], buf[1:]  # out is x one row on: each range would read rows another wrote
    elif case == "residual_is_x":
        res = x
    else:  # leading dims [8, 8] of a [8, 16, 4096] buffer: no single row stride
        buf = torch.randn(8, 16, 4096)
        x, out, res = buf[:, :8], torch.zeros(8, 8, 4096), torch.randn(8, 8, 4096)
    same = _unchanged(out, x, res)
    with pytest.raises(fldispatch.InvalidArgumentError, match=message):
        torch.ops.fldispatch.rms_norm(out, x, w, res, 1e-6)
    assert same()


@native
@pytest.mark.parametrize("case", ["out_width", "out_rows", "out_overlaps_x", "dtype"])
def test_activation_on_torch_threads_writes_nothing_on_error(two_torch_threads, case):
    out, x = _activation_inputs("silu_and_mul", torch.float32, "plain")
    message = {"out_width": "silu_and_mul: .*out", "out_rows": "silu_and_mul: .*out",
               "out_overlaps_x": "silu_and_mul: .*overlaps",
               "dtype": "silu_and_mul: .*dtype"}[case]
    if case == "out_width":
        out = torch.zeros(64, 2047)
    elif case == "out_rows":
        out = torch.zeros(65, 2048)
    elif case == "out_overlaps_x":
        out = x[:, 2048:]  # the second half of x itself
    else:
        out = torch.zeros(64, 2048, dtype=torch.bfloat16)
    same = _unchanged(out, x)
    with pytest.raises(fldispatch.InvalidArgumentError, match=message):
        torch.ops.fldispatch.silu_and_mul(out, x)
    assert same()


# Whether a call ran in ranges over torch's threads, seen from outside: the
# library's trace (VLLM_FL_TRACE, no counting, so calls are cut) records each
# library call with the thread that made it.
_TRACED_CALLS = r"""
import json, sys
import torch
import fldispatch, fldispatch.torch
torch.set_num_threads(int(sys.argv[1]))
x, res, w = torch.randn(64, 4096), torch.randn(64, 4096), torch.randn(4096)
torch.ops.fldispatch.rms_norm(x, x, w, res, 1e-6)
torch.ops.fldispatch.silu_and_mul(torch.empty(64, 2048), x)
torch.ops.fldispatch.gelu_quick(torch.empty(64, 4096), x)
q, k = torch.randn(64, 4096), torch.randn(64, 1024)
torch.ops.fldispatch.rotary_embedding(torch.arange(64), q, k, 128, torch.randn(512, 128), True)
fldispatch.stats_flush()
"""


@native
@pytest.mark.parametrize("threads", [2, 1])
def test_large_calls_run_in_ranges_on_torch_threads(tmp_path, threads):
    trace = tmp_path / "trace.json"
    env = dict(os.environ, VLLM_FL_TRACE=str(trace))
    for name in ("VLLM_FL_STATS", "VLLM_FL_STATS_FILE", "VLLM_FL_MANIFEST"):
        env.pop(name, None)
    subprocess.run([sys.executable, "-c", _TRACED_CALLS, str(threads)], env=env, check=True,
                   timeout=120)
    calls: dict[str, list[int]] = {}
    for ev in json.loads(trace.read_text())["traceEvents"]:
        if ev.get("cat") == "call":
            calls.setdefault(ev["name"], []).append(ev["tid"])
    for op in ("rms_norm", "silu_and_mul", "gelu_quick", "rotary_embedding"):
        if threads == 1:
            assert len(calls[op]) == 1, (op, calls[op])
        else:
            assert len(calls[op]) > 2 and len(set(calls[op])) == 2, (op, calls[op])


@native
def test_a_manifest_in_force_keeps_calls_whole(tmp_path):
    # A manifest may pin implementations by row count (rows: 1-16 and the
    # like): a range of a cut call would then run what the whole call would not.
    entries = "".join(f"  - {{op: {op}, device: cpu, dtype: f32, impl: {impl}, rows: {rows}}}\n"
                      for op in ("rms_norm", "rotary_embedding")
                      for impl, rows in (("vendor.cpu", "1-16"), ("reference.c", "17-")))
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nentries:\n" + entries)
    trace = tmp_path / "trace.json"
    env = dict(os.environ, VLLM_FL_TRACE=str(trace), VLLM_FL_MANIFEST=str(manifest))
    subprocess.run([sys.executable, "-c", _TRACED_CALLS, "2"], env=env, check=True, timeout=120)
    calls: dict[str, list[str]] = {}
    for ev in json.loads(trace.read_text())["traceEvents"]:
        if ev.get("cat") == "call":
            calls.setdefault(ev["name"], []).append(ev["args"]["impl_id"])
    assert calls["rms_norm"] == ["reference.c"]
    assert calls["rotary_embedding"] == ["reference.c"]


@native
def test_errors_are_fldispatch_errors():
    with pytest.raises(fldispatch.InvalidArgumentError, match="rotary_embedding: .*position"):
        torch.ops.fldispatch.rotary_embedding(torch.tensor([0, 9]), torch.randn(2, 32), None, 32,
                                              torch.randn(8, 32), True)


# The dispatcher's floor (fldispatch.torch.dispatch_floor) and the C-loop timer
# (_C._bench_c_op) that bench/torch_floor.py subtracts from a torch op's time.

def _floor_cases():
    x = torch.randn(3, 16)
    out = torch.zeros(3, 8)
    w = torch.randn(16)
    res = torch.randn(3, 16)
    pos = torch.arange(3)
    q = torch.randn(3, 2 * 8)
    k = torch.randn(3, 2 * 8)
    cache = torch.randn(8, 8)
    return {
        "silu_and_mul": (out, x),
        "gelu_tanh_and_mul": (out, x),
        "gelu_quick": (torch.zeros(3, 16), x),
        "rms_norm": (torch.zeros(3, 16), x, w, res, 1e-6),
        "gemma_rms_norm": (torch.zeros(3, 16), x, w, None, 1e-6),
        "rotary_embedding": (pos, q, k, 8, cache, True),
    }


@native
@pytest.mark.parametrize("op", ["silu_and_mul", "gelu_tanh_and_mul", "rms_norm", "gemma_rms_norm",
                                "rotary_embedding"])
def test_floor_takes_the_ops_schema_and_does_nothing(op):
    args = _floor_cases()[op]
    floor = ft.dispatch_floor(op)
    ours = getattr(torch.ops.fldispatch, op).default
    assert str(floor._schema).split("(", 1)[1] == str(ours._schema).split("(", 1)[1]
    assert ft.dispatch_floor(op) is floor  # defined once
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    assert floor(*args) is None
    for a, b in zip(args, before):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)


def test_floor_refuses_an_op_outside_its_families():
    with pytest.raises(ValueError, match="'attention_backend' has no floor.*rotary_embedding's schema"):
        ft.dispatch_floor("attention_backend")
    with pytest.raises(ValueError, match="'no_such_op' has no floor"):
        ft.dispatch_floor("no_such_op")


@pytest.mark.parametrize("op", ["silu_and_mul", "gelu_quick", "rms_norm", "rotary_embedding"])
def test_bench_c_op_runs_the_typed_entry_point(op):
    args = _floor_cases()[op]
    expected = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    for _ in range(2):  # the timer's warm call and its one timed call
        getattr(fldispatch, op)(*expected)
    assert fldispatch._C._bench_c_op(op, 1, *args) > 0
    for a, b in zip(args, expected):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)


@pytest.mark.parametrize("op", ["silu_and_mul", "rms_norm", "rotary_embedding"])
def test_bench_c_op_evicting_runs_the_typed_entry_point(op):
    args = _floor_cases()[op]
    expected = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    for _ in range(3):  # the warm call and two timed calls
        getattr(fldispatch, op)(*expected)
    assert fldispatch._C._bench_c_op_evicting(op, 2, 64 * 1024, *args) > 0
    for a, b in zip(args, expected):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)


def test_bench_c_op_evicting_errors_name_the_fault():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="_bench_c_op_evicting: evict_bytes must be in 1 .. 2"):
        fldispatch._C._bench_c_op_evicting("silu_and_mul", 1, 0, torch.empty(2, 4), x)
    with pytest.raises(TypeError, match=r"_bench_c_op_evicting\(op, n, evict_bytes, \*args\)"):
        fldispatch._C._bench_c_op_evicting("silu_and_mul", 1)  # type: ignore[call-arg]  # checks the message
    with pytest.raises(TypeError, match="_bench_c_op_evicting: op 'rms_norm' takes 5 arguments"):
        fldispatch._C._bench_c_op_evicting("rms_norm", 1, 64, torch.empty(2, 8), x)
    with pytest.raises(fldispatch.InvalidArgumentError, match="out"):
        fldispatch._C._bench_c_op_evicting("silu_and_mul", 1, 64, torch.empty(2, 5), x)


def test_bench_c_op_errors_name_the_fault():
    x = torch.randn(2, 8)
    with pytest.raises(TypeError, match="'rms_norm' takes 5 arguments after n, got 2"):
        fldispatch._C._bench_c_op("rms_norm", 1, torch.empty(2, 8), x)
    with pytest.raises(ValueError, match="'attention_backend' is not a catalog op with tensors"):
        fldispatch._C._bench_c_op("attention_backend", 1, "cpu")
    with pytest.raises(ValueError, match="n must be positive"):
        fldispatch._C._bench_c_op("silu_and_mul", 0, torch.empty(2, 4), x)
    with pytest.raises(fldispatch.InvalidArgumentError, match="out"):
        fldispatch._C._bench_c_op("silu_and_mul", 1, torch.empty(2, 5), x)
