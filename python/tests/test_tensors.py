# SPDX-License-Identifier: Apache-2.0
"""Tensors from any DLPack producer: PyTorch (the C exchange API), NumPy
(versioned capsules), legacy producers, capsules passed directly; zero
copies, capsule ownership, and the errors that leave outputs untouched."""

import gc

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fakedl
import fldispatch
from conftest import fixture_plugin


def silu_mul_np(x):
    d = x.shape[-1] // 2
    a = x[..., :d].astype(np.float64)
    return (a / (1.0 + np.exp(-a)) * x[..., d:]).astype(x.dtype)


def test_torch_goes_through_the_exchange_api():
    assert hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    x = torch.randn(3, 16)
    out = torch.empty(3, 8)
    fldispatch.silu_and_mul(out, x)
    torch.testing.assert_close(out, F.silu(x[:, :8]) * x[:, 8:])
    # The CPU tensor reports no stream: nothing to set.
    assert fldispatch._C._producer_stream(x) is None


def test_outputs_are_written_in_place_zero_copy():
    base = torch.zeros(4, 24)
    out = base[:, 4:12]  # a strided view into base
    x = torch.randn(4, 16)
    fldispatch.silu_and_mul(out, x)
    torch.testing.assert_close(base[:, 4:12], F.silu(x[:, :8]) * x[:, 8:])
    assert torch.count_nonzero(base[:, :4]) == 0 and torch.count_nonzero(base[:, 12:]) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_arrays(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 32)).astype(dtype)
    out = np.zeros((5, 16), dtype)
    fldispatch.silu_and_mul(out, x)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(out, silu_mul_np(x), rtol=tol, atol=tol)


def test_numpy_byte_offset_and_row_strides():
    rng = np.random.default_rng(1)
    big = rng.standard_normal((6, 40)).astype(np.float32)
    x = big[1:5, 4:36]  # starts inside the buffer, rows padded
    out_base = np.zeros((4, 20), np.float32)
    out = out_base[:, 2:18]
    fldispatch.silu_and_mul(out, x)
    np.testing.assert_allclose(out, silu_mul_np(x), rtol=1e-5, atol=1e-6)
    assert not out_base[:, :2].any() and not out_base[:, 18:].any()


def test_numpy_read_only_output_is_refused_and_not_written():
    x = np.ones((2, 8), np.float32)
    out = np.full((2, 4), 7.0, np.float32)
    out.flags.writeable = False
    with pytest.raises(fldispatch.InvalidArgumentError, match="'out' is read-only"):
        fldispatch.silu_and_mul(out, x)
    assert (out == 7.0).all()
    # A read-only input is fine.
    x.flags.writeable = False
    out2 = np.zeros((2, 4), np.float32)
    fldispatch.silu_and_mul(out2, x)
    np.testing.assert_allclose(out2, silu_mul_np(x), rtol=1e-6)


def test_read_only_residual_and_key_are_refused():
    x = np.ones((2, 8), np.float32)
    res = np.zeros((2, 8), np.float32)
    res.flags.writeable = False
    out = np.full((2, 8), 3.0, np.float32)
    with pytest.raises(fldispatch.InvalidArgumentError, match="'residual' is read-only"):
        fldispatch.rms_norm(out, x, None, res, 1e-6)
    assert (out == 3.0).all()
    pos = np.zeros(2, np.int64)
    q = np.ones((2, 16), np.float32)
    k = np.ones((2, 16), np.float32)
    k.flags.writeable = False
    cache = np.ones((4, 8), np.float32)
    with pytest.raises(fldispatch.InvalidArgumentError, match="'key' is read-only"):
        fldispatch.rotary_embedding(pos, q, k, 16, cache, True)
    assert (q == 1.0).all()


def test_versioned_capsule_ownership():
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    x = fakedl.FakeTensor(a, device_type=fakedl.kDLCPU)
    out = np.zeros((2, 4), np.float32)
    fldispatch.silu_and_mul(out, x)
    np.testing.assert_allclose(out, silu_mul_np(a), rtol=1e-6)
    assert x.exports == [{"stream": None, "max_version": (1, 3)}]
    assert x.deleted == 1  # consumed, and the deleter called once


def test_legacy_producer_gets_a_second_call_without_max_version():
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    x = fakedl.FakeTensor(a, device_type=fakedl.kDLCPU, legacy_only=True)
    out = np.zeros((2, 4), np.float32)
    fldispatch.silu_and_mul(out, x)
    np.testing.assert_allclose(out, silu_mul_np(a), rtol=1e-6)
    assert x.exports == [{"stream": None, "max_version": None}]
    assert x.deleted == 1


def test_capsules_passed_directly_are_consumed_once():
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    for kwargs in ({"max_version": (1, 0)}, {}):
        src = fakedl.FakeTensor(a, device_type=fakedl.kDLCPU)
        cap = src.capsule(**kwargs)
        out = np.zeros((2, 4), np.float32)
        fldispatch.silu_and_mul(out, cap)
        np.testing.assert_allclose(out, silu_mul_np(a), rtol=1e-6)
        assert src.deleted == 1
        assert "used_dltensor" in repr(cap)
        out[:] = 5
        with pytest.raises(fldispatch.InvalidArgumentError, match="already consumed"):
            fldispatch.silu_and_mul(out, cap)
        assert (out == 5).all()
        del cap
        gc.collect()
        assert src.deleted == 1  # the renamed capsule does not delete again


def test_torch_capsule_from_to_dlpack():
    x = torch.randn(2, 8)
    cap = torch.utils.dlpack.to_dlpack(x)
    out = torch.empty(2, 4)
    fldispatch.silu_and_mul(out, cap)
    torch.testing.assert_close(out, F.silu(x[:, :4]) * x[:, 4:])
    with pytest.raises(fldispatch.InvalidArgumentError, match="already consumed"):
        fldispatch.silu_and_mul(out, cap)


def test_refused_capsule_is_not_consumed():
    out_src = fakedl.FakeTensor(np.full((2, 4), 2.0, np.float32), device_type=fakedl.kDLCPU,
                                flags=fakedl.READ_ONLY)
    cap = out_src.capsule(max_version=(1, 3))
    with pytest.raises(fldispatch.InvalidArgumentError, match="read-only"):
        fldispatch.silu_and_mul(cap, np.ones((2, 8), np.float32))
    assert "used" not in repr(cap) and out_src.deleted == 0
    del cap
    gc.collect()
    assert out_src.deleted == 1  # the capsule's destructor freed it
    assert (out_src.array == 2.0).all()


def test_copied_export_as_output_is_refused():
    src = fakedl.FakeTensor(np.full((2, 4), 2.0, np.float32), device_type=fakedl.kDLCPU,
                            flags=fakedl.IS_COPIED)
    with pytest.raises(fldispatch.InvalidArgumentError, match="IS_COPIED"):
        fldispatch.silu_and_mul(src, np.ones((2, 8), np.float32))
    assert (src.array == 2.0).all() and src.deleted == 1
    # As an input a copy is fine.
    inp = fakedl.FakeTensor(np.ones((2, 8), np.float32), device_type=fakedl.kDLCPU,
                            flags=fakedl.IS_COPIED)
    out = np.zeros((2, 4), np.float32)
    fldispatch.silu_and_mul(out, inp)
    assert out.any()


def test_unknown_major_version_is_refused_and_freed():
    src = fakedl.FakeTensor(np.ones((2, 8), np.float32), device_type=fakedl.kDLCPU,
                            version=(2, 0))
    out = np.full((2, 4), 9.0, np.float32)
    with pytest.raises(fldispatch.InvalidArgumentError, match="DLPack version 2.0"):
        fldispatch.silu_and_mul(out, src)
    gc.collect()
    assert src.deleted == 1 and (out == 9.0).all()


def test_failure_after_import_releases_every_tensor():
    x = fakedl.FakeTensor(np.ones((2, 8), np.float32), device_type=fakedl.kDLCPU)
    out = fakedl.FakeTensor(np.full((2, 3), 4.0, np.float32), device_type=fakedl.kDLCPU)
    with pytest.raises(fldispatch.InvalidArgumentError, match="out"):
        fldispatch.silu_and_mul(out, x)  # wrong output width: the library refuses
    assert x.deleted == 1 and out.deleted == 1
    assert (out.array == 4.0).all()


def test_a_device_no_plugin_serves():
    for device_type, error in ((fakedl.kDLMetal, fldispatch.InvalidArgumentError),):
        x = fakedl.FakeTensor(np.ones((2, 8), np.float32), device_type=device_type)
        out = fakedl.FakeTensor(np.full((2, 4), 6.0, np.float32), device_type=device_type)
        with pytest.raises(error, match="device type 8"):
            fldispatch.silu_and_mul(out, x)
        assert (out.array == 6.0).all() and x.deleted == 1 and out.deleted == 1


def test_a_gpu_device_without_an_available_plugin():
    from conftest import unserved_device

    device = unserved_device()
    code = {"cuda": fakedl.kDLCUDA, "rocm": fakedl.kDLROCM, "ascend": 12}[device]
    x = fakedl.FakeTensor(np.ones((2, 8), np.float32), device_type=code)
    out = fakedl.FakeTensor(np.full((2, 4), 6.0, np.float32), device_type=code)
    with pytest.raises(fldispatch.UnavailableError, match="silu_and_mul"):
        fldispatch.silu_and_mul(out, x)
    assert (out.array == 6.0).all()


def test_mixed_devices_are_refused():
    x = torch.ones(2, 8)
    out = fakedl.FakeTensor(np.full((2, 4), 6.0, np.float32), device_type=fakedl.kDLCUDA)
    with pytest.raises(fldispatch.InvalidArgumentError, match="'out' is on cuda:0 but 'x' is on cpu"):
        fldispatch.silu_and_mul(out, x)
    assert (out.array == 6.0).all()


def test_not_a_tensor():
    with pytest.raises(fldispatch.InvalidArgumentError, match="'x' must be a tensor"):
        fldispatch.silu_and_mul(torch.empty(2, 4), [1.0, 2.0])
    with pytest.raises(fldispatch.InvalidArgumentError, match="not a DLPack tensor"):
        fldispatch.silu_and_mul(torch.empty(2, 4), torch.Tensor.__dlpack_c_exchange_api__)


def test_producer_errors_propagate():
    class Broken:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            raise BufferError("cannot export")

    out = torch.full((2, 4), 3.0)
    with pytest.raises(BufferError, match="cannot export"):
        fldispatch.silu_and_mul(out, Broken())
    assert (out == 3.0).all()


# ---- streams ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def streamecho():
    fldispatch.load_plugin(fixture_plugin("streamecho"))
    assert fldispatch.resolve("silu_and_mul", "cuda") == "vendor.streamecho"
    return fldispatch


def echoed_stream(out):
    return int(np.frombuffer(out.array.tobytes()[:8], np.uint64)[0])


def test_exchange_api_stream_reaches_the_library(streamecho):
    fakedl.stream_queries.clear()
    x = fakedl.ExchangeTensor(np.ones((2, 8), np.float32), device_id=1)
    out = fakedl.ExchangeTensor(np.zeros((2, 4), np.float32), device_id=1)
    assert fldispatch._C._producer_stream(x) == fakedl.STREAM_BASE + 1
    fldispatch.set_stream("cuda", 0x777)
    try:
        fldispatch.silu_and_mul(out, x)
        assert echoed_stream(out) == fakedl.STREAM_BASE + 1
        # The thread's own stream is put back after the call.
        assert fldispatch.get_stream("cuda") == 0x777
    finally:
        fldispatch.set_stream("cuda", None)
    assert (fakedl.kDLCUDA, 1) in fakedl.stream_queries
    # Asked on every call: the framework's new current stream is used at once.
    old_base = fakedl.STREAM_BASE
    fakedl.STREAM_BASE = 0xABC0000
    try:
        fldispatch.silu_and_mul(out, x)
        assert echoed_stream(out) == 0xABC0001
    finally:
        fakedl.STREAM_BASE = old_base


def test_a_failing_stream_query_fails_the_call_on_cuda(streamecho):
    x = fakedl.ExchangeTensor(np.ones((2, 8), np.float32), device_id=fakedl.FAILING_DEVICE)
    out = fakedl.ExchangeTensor(np.full((2, 4), 5.0, np.float32), device_id=fakedl.FAILING_DEVICE)
    with pytest.raises(fldispatch.InvalidArgumentError, match="no current stream for device "
                       "type 2 id 7"):
        fldispatch.silu_and_mul(out, x)
    assert (out.array == 5.0).all()
    # On a device whose framework may have no streams (here Ascend), the call
    # goes on without one; with no Ascend plugin available it then stops in
    # the library, not on the stream query.
    x.device_type = out.device_type = 12
    with pytest.raises(fldispatch.UnavailableError):
        fldispatch.silu_and_mul(out, x)


def test_protocol_stream_for_producers_without_the_exchange_api(streamecho):
    x = fakedl.FakeTensor(np.ones((2, 8), np.float32))
    out = fakedl.FakeTensor(np.zeros((2, 4), np.float32))
    fldispatch.silu_and_mul(out, x)
    # No stream set on this thread: CUDA's legacy default stream (1) is asked
    # of the producer, and the library runs on the default stream.
    assert x.exports[-1]["stream"] == 1 and out.exports[-1]["stream"] == 1
    assert echoed_stream(out) == 0
    fldispatch.set_stream("cuda", 0x4242)
    try:
        fldispatch.silu_and_mul(out, x)
        assert x.exports[-1]["stream"] == 0x4242
        assert echoed_stream(out) == 0x4242
    finally:
        fldispatch.set_stream("cuda", None)
    assert x.deleted == 2 and out.deleted == 2


def test_rocm_default_stream_is_zero(streamecho):
    x = fakedl.FakeTensor(np.ones((2, 8), np.float32), device_type=fakedl.kDLROCM)
    out = fakedl.FakeTensor(np.zeros((2, 4), np.float32), device_type=fakedl.kDLROCM)
    fldispatch.silu_and_mul(out, x)
    assert x.exports[-1]["stream"] == 0
