# SPDX-License-Identifier: Apache-2.0
"""The fixture's "CUDA" kernels: plain PyTorch, so that they run on this machine."""

import torch.nn.functional as F

from vllm_fl.dispatch.backends.base import Backend

CALLS: list[str] = []


class CudaLike(Backend):
    @property
    def name(self):
        return "cuda"

    @property
    def vendor(self):
        return "cuda"

    def is_available(self):
        return True

    def silu_and_mul(self, obj, x):
        CALLS.append("silu_and_mul")
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def vendor_only_op(self, x):
        CALLS.append("vendor_only_op")
        return x + 1
