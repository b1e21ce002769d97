# SPDX-License-Identifier: Apache-2.0
"""The optional native torch kernels (make python-torch-native): when built,
torch.ops.fldispatch.*'s CPU kernels are registered from C++ and give the
results of fldispatch's own functions. Skipped when they are not built (make
check does not build them); test_torch_ops.py and test_autograd_and_gil.py then
run against whichever CPU kernels are registered."""

import pytest
import torch

import fldispatch
import fldispatch.torch as ft

pytestmark = pytest.mark.skipif(not ft.NATIVE_CPU, reason="native torch kernels not built "
                                "(make python-torch-native)")


@pytest.mark.parametrize("op", ft.NATIVE_OPS)
def test_cpu_kernel_is_the_native_one(op):
    cpu = [line for line in torch._C._dispatch_dump(f"fldispatch::{op}").splitlines()
           if line.startswith("CPU:")]
    assert cpu and "torch_ops.cpp" in cpu[0], cpu


@pytest.mark.parametrize("op", ["silu_and_mul", "mul_and_silu", "gelu_and_mul",
                                "gelu_tanh_and_mul"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activations_match(op, dtype):
    x = torch.randn(3, 64).to(dtype)
    out, ref = torch.empty(3, 32, dtype=dtype), torch.empty(3, 32, dtype=dtype)
    getattr(torch.ops.fldispatch, op)(out, x)
    getattr(fldispatch, op)(ref, x)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("op", ["rms_norm", "gemma_rms_norm"])
def test_norms_match_with_a_strided_view_and_residual(op):
    base = torch.randn(4, 96)
    x = base[:, 16:80]  # a view: data_ptr past the storage's start, row stride 96
    w, res = torch.randn(64), torch.randn(4, 64)
    out, ref, res2 = torch.empty(4, 64), torch.empty(4, 64), res.clone()
    getattr(torch.ops.fldispatch, op)(out, x, w, res, 1e-5)
    getattr(fldispatch, op)(ref, x, w, res2, eps=1e-5)
    assert torch.equal(out, ref) and torch.equal(res, res2)


def test_rotary_matches():
    pos = torch.tensor([0, 3, 5])
    q, k, cache = torch.randn(3, 64), torch.randn(3, 32), torch.randn(8, 32)
    q2, k2 = q.clone(), k.clone()
    torch.ops.fldispatch.rotary_embedding(pos, q, k, 32, cache, True)
    fldispatch.rotary_embedding(pos, q2, k2, 32, cache, True)
    assert torch.equal(q, q2) and torch.equal(k, k2)


def test_errors_are_fldispatch_errors():
    with pytest.raises(fldispatch.InvalidArgumentError, match="rotary_embedding: .*position"):
        torch.ops.fldispatch.rotary_embedding(torch.tensor([0, 9]), torch.randn(2, 32), None, 32,
                                              torch.randn(8, 32), True)
