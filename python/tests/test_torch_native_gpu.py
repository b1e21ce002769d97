# SPDX-License-Identifier: Apache-2.0
"""The native torch kernels' CUDA path (python/native/torch_ops.cpp), without
a GPU: a stand-in for torch's CUDA backend in a CPU-only torch
(python/tests/native/fake_cuda.cpp: cuda:N tensors in host memory, a device
guard whose streams have recognisable handles) feeds torch.ops.fldispatch.*
CUDA tensors, which the dispatcher hands to the native CUDA kernels, which
hand the library kDLCUDA tensors on torch's current stream, which the fixture
plugin fld-fakecuda.so (tests/gpuplug, the GPU kernels under the host
emulator) runs and records. The calls run in a child process
(native/fake_cuda_calls.py); the results are compared with the same calls on
CPU tensors.

Built by make python-torch-native (_fake_cuda.so) and the C tests' fixtures
(fld-fakecuda.so); skipped when either is absent, when the native kernels are
not in use (except under make check, FLDPY_EXPECT_NATIVE=1) or under a torch
with a GPU backend of its own."""

import json
import os
import subprocess
import sys

import pytest
import torch

import fldispatch.torch as ft

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.environ.get("FLDPY_TEST_FIXTURES", "")


def _fixture(path, what):
    if not FIXTURES or not os.path.exists(path):
        pytest.skip(f"{what} not built (make python-torch-native and the C tests' fixtures; "
                    "set FLDPY_TEST_FIXTURES to build/python/tests)")
    return path


@pytest.fixture(scope="module")
def calls():
    if not ft.NATIVE and os.environ.get("FLDPY_EXPECT_NATIVE") != "1":
        pytest.skip(f"native torch kernels not in use: {ft.NATIVE_REASON}")
    if torch.version.cuda or torch.version.hip or torch.cuda.is_available():
        pytest.skip("this torch has a CUDA or ROCm backend of its own")
    fake_cuda = _fixture(os.path.join(FIXTURES, "_fake_cuda.so"), "_fake_cuda.so")
    plugin = _fixture(os.path.normpath(os.path.join(FIXTURES, "..", "..", "tests", "gpuplug",
                                                    "fld-fakecuda.so")), "fld-fakecuda.so")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    env.update(VLLM_FL_PLATFORM="cpu", VLLM_FL_PLUGIN_DIR=os.path.dirname(plugin),
               VLLM_FL_STRICT="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "native", "fake_cuda_calls.py"),
                        fake_cuda, plugin], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


CASES = ["silu_and_mul", "gelu_and_mul_bf16", "rms_norm_residual", "gemma_rms_norm",
         "rotary_embedding", "rms_norm_on_device_1"]


def test_the_calls_ran_on_the_native_kernels(calls):
    assert calls["native"] is True


@pytest.mark.parametrize("case", CASES)
def test_a_cuda_call_matches_the_cpu(calls, case):
    c = calls[case]
    assert c["kernels"] == 1, c  # one launch on the (fake) device, no CPU fallback
    bf16 = case.endswith("bf16")
    assert c["diff"] <= (1e-2 if bf16 else 1e-5), c


@pytest.mark.parametrize("case", CASES)
def test_a_cuda_call_runs_on_torchs_current_stream_then_puts_the_library_stream_back(calls, case):
    c = calls[case]
    # The handles of fake_cuda.cpp's streams: 0x5eed0000 + the stream id.
    assert c["torch_stream"] & ~0xFFFF == 0x5EED0000, c
    assert c["seen"]["stream"] == c["torch_stream"], c
    assert c["after"] == calls["previous"], c


def test_the_plugin_runs_on_the_tensors_device(calls):
    assert calls["rms_norm_on_device_1"]["seen"]["device"] == 1
    assert calls["silu_and_mul"]["seen"]["device"] == 0


def test_a_refused_call_raises_and_puts_the_stream_back(calls):
    assert calls["refused"] == {"error": "InvalidArgumentError", "after": calls["previous"]}


def test_a_cpu_tensor_beside_cuda_ones_is_refused_naming_both(calls):
    m = calls["mixed"]
    assert "'out' is on cpu:0" in m["error"] and "cuda:0" in m["error"], m
    assert m["after"] == calls["previous"]
