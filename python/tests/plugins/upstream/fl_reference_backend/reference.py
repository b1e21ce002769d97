# SPDX-License-Identifier: Apache-2.0
"""PyTorch implementations with upstream's arguments: the calling layer first, results
returned."""

import torch
import torch.nn.functional as F

from vllm_fl.dispatch.backends.base import Backend

CALLS: list[str] = []


class TorchReference(Backend):
    @property
    def name(self):
        return "torch_reference"

    def is_available(self):
        return True

    def silu_and_mul(self, obj, x):
        CALLS.append("silu_and_mul")
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def gelu_and_mul(self, obj, x):
        CALLS.append("gelu_and_mul")
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=obj.approximate) * x[..., d:]

    def rms_norm(self, obj, x, residual=None):
        CALLS.append("rms_norm")
        s = x if residual is None else x + residual
        y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + obj.variance_epsilon)
        if obj.weight is not None:
            y = y * obj.weight
        return y if residual is None else (y, s)

    def rotary_embedding(self, obj, query, key, cos, sin, position_ids,
                         rotary_interleaved=False, inplace=True):
        CALLS.append("rotary_embedding")
        c = cos[position_ids].unsqueeze(1)
        s = sin[position_ids].unsqueeze(1)

        def rotate(x):
            if rotary_interleaved:
                even, odd = x[..., 0::2], x[..., 1::2]
                return torch.stack((even * c - odd * s, odd * c + even * s), -1).flatten(-2)
            half = x.shape[-1] // 2
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)

        return rotate(query), rotate(key)

    def attention_backend(self, use_mla=False, use_sparse=False):
        CALLS.append("attention_backend")
        return "fixture.TorchReferenceAttention" + ("MLA" if use_mla else "")
