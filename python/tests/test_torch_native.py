# SPDX-License-Identifier: Apache-2.0
"""The native torch kernels (make python-torch-native; make check builds
them): torch.ops.fldispatch.*'s CPU kernels are registered from C++ and give
the results of fldispatch's own functions. Outside make check they are skipped
when not built, and test_torch_ops.py and test_autograd_and_gil.py run against
whichever CPU kernels are registered; under make check (FLDPY_EXPECT_NATIVE=1)
their absence fails."""

import os

import pytest
import torch

import fldispatch
import fldispatch.native_abi
import fldispatch.torch as ft

native = pytest.mark.skipif(not ft.NATIVE_CPU and os.environ.get("FLDPY_EXPECT_NATIVE") != "1",
                            reason=f"native torch kernels not in use: {ft.NATIVE_CPU_REASON}")


def test_native_kernels_are_in_use_when_built():
    if os.environ.get("FLDPY_EXPECT_NATIVE") != "1" and not ft.NATIVE_CPU:
        pytest.skip(f"native torch kernels not in use: {ft.NATIVE_CPU_REASON}")
    assert ft.NATIVE_CPU, ft.NATIVE_CPU_REASON


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
    assert "built for torch=1.0.0 python=3.0" in reason
    assert fldispatch.native_abi.record() in reason


def test_a_build_without_its_record_is_not_loaded(tmp_path, monkeypatch):
    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    assert "_torch_ops.abi absent" in ft._native_mismatch(_fake_build(tmp_path, None))


def test_a_matching_record_is_accepted_and_the_variable_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    so = _fake_build(tmp_path, fldispatch.native_abi.record())
    assert ft._native_mismatch(so) is None
    monkeypatch.setenv("FLDISPATCH_TORCH_NATIVE", "0")
    assert ft._native_mismatch(so) == "FLDISPATCH_TORCH_NATIVE=0"


def test_absent_build_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    assert "not built" in ft._native_mismatch(str(tmp_path / "_torch_ops.so"))


@native
@pytest.mark.parametrize("op", ft.NATIVE_OPS)
def test_cpu_kernel_is_the_native_one(op):
    cpu = [line for line in torch._C._dispatch_dump(f"fldispatch::{op}").splitlines()
           if line.startswith("CPU:")]
    assert cpu and "torch_ops.cpp" in cpu[0], cpu


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


# A large rotary call runs on torch's intra-op threads in token ranges (torch_ops.cpp):
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
        fldispatch._C._bench_c_op_evicting("silu_and_mul", 1)
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
