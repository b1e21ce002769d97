# SPDX-License-Identifier: Apache-2.0
"""The fixture's "FlagGems" kernels: plain PyTorch, so that they run on this machine."""

import torch

from vllm_fl.dispatch.backends.base import Backend

CALLS: list[str] = []


class GemsLike(Backend):
    @property
    def name(self):
        return "flaggems"

    def is_available(self):
        return True

    def silu_and_mul(self, obj, x):
        CALLS.append("silu_and_mul")
        d = x.shape[-1] // 2
        return torch.nn.functional.silu(x[..., :d]) * x[..., d:]

    def rms_norm(self, obj, x, residual=None):
        CALLS.append("rms_norm")
        s = x if residual is None else x + residual
        y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + obj.variance_epsilon) * obj.weight
        return y if residual is None else (y, s)
