# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the parts of vLLM that fldispatch.vllm touches, for
machines without vLLM: CustomOp with register_oot and op_registry_oot, its
choice of forward method by enabled() under the compilation configuration
(vllm.config.get_cached_compilation_config; set_compilation() sets it), and
the six layers with vLLM's constructor arguments, attributes and
forward_native formulas (written here in our words). install() puts it into
sys.modules; remove() takes it out again.
"""

import sys
import types
from typing import Any

import torch
import torch.nn.functional as F

MODULES = ["vllm", "vllm.config", "vllm.model_executor", "vllm.model_executor.custom_op",
           "vllm.model_executor.layers", "vllm.model_executor.layers.layernorm",
           "vllm.model_executor.layers.activation",
           "vllm.model_executor.layers.rotary_embedding"]


class CompilationConfig:
    """The fields of vLLM's CompilationConfig that fldispatch.vllm reads:
    mode (vLLM's CompilationMode numbers: 0 NONE, 2 Dynamo trace once, 3
    VLLM_COMPILE), backend, and custom_ops with its base mode as vLLM fills
    it in ("none" where Inductor compiles, else "all")."""

    def __init__(self, mode=0, backend="inductor", custom_ops=()):
        self.mode, self.backend, self.custom_ops = mode, backend, list(custom_ops)
        if "all" not in self.custom_ops and "none" not in self.custom_ops:
            self.custom_ops.append("none" if mode != 0 and backend == "inductor" else "all")


def set_compilation(**kwargs):
    """Sets the configuration CustomOps read as they are made (eager, vLLM's
    defaults, without arguments)."""
    config: Any = sys.modules["vllm.config"]
    config.current = CompilationConfig(**kwargs)


def build():
    mods: dict[str, Any] = {name: types.ModuleType(name) for name in MODULES}
    config = mods["vllm.config"]
    config.CompilationConfig = CompilationConfig
    config.current = CompilationConfig()
    config.get_cached_compilation_config = lambda: config.current
    custom_op = mods["vllm.model_executor.custom_op"]
    custom_op.op_registry_oot = {}

    class CustomOp(torch.nn.Module):
        """As vLLM's: instantiating a class whose name was registered out of
        tree makes the registered class instead; forward goes to the method
        dispatch_forward chose: forward_cpu (as on a CPU platform) where the
        class's enabled() says so, else forward_native. enabled() as vLLM's,
        by the class's name: "+name" or "-name" in custom_ops, else its base
        mode."""

        def __new__(cls, *args, **kwargs):
            cls = custom_op.op_registry_oot.get(cls.__name__, cls)
            return super().__new__(cls)

        def __init__(self):
            super().__init__()
            self._forward_method = self.dispatch_forward(compile_native=False)

        @classmethod
        def enabled(cls):
            ops = config.get_cached_compilation_config().custom_ops
            name = getattr(cls, "name", None)
            if f"-{name}" in ops:
                return False
            return "all" in ops or f"+{name}" in ops

        def dispatch_forward(self, compile_native):
            return self.forward_cpu if self.enabled() else self.forward_native

        def forward(self, *args, **kwargs):
            return self._forward_method(*args, **kwargs)

        def forward_cpu(self, *args, **kwargs):
            return self.forward_native(*args, **kwargs)

        @classmethod
        def register_oot(cls, _decorated_op_cls=None, name=None):
            assert name not in custom_op.op_registry_oot, f"Duplicate op name: {name}"
            _decorated_op_cls.name = name
            custom_op.op_registry_oot[name] = _decorated_op_cls
            return _decorated_op_cls

    custom_op.CustomOp = CustomOp

    def rms(x, weight, eps, residual, gemma):
        dtype = x.dtype
        xf = x.float()
        if residual is not None:
            xf = xf + residual.float()
            residual = xf.to(dtype)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        if gemma:
            xf = (xf * (1.0 + weight.float())).to(dtype)
        elif weight is not None:
            xf = xf.to(dtype) * weight
        return xf.to(dtype) if residual is None else (xf.to(dtype), residual)

    class RMSNorm(CustomOp):
        name = "rms_norm"

        def __init__(self, hidden_size, eps=1e-6, var_hidden_size=None, has_weight=True,
                     dtype=None):
            super().__init__()
            self.variance_epsilon = eps
            self.variance_size_override = (None if var_hidden_size == hidden_size
                                           else var_hidden_size)
            self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=dtype))
            self.has_weight = self.pass_weight = self.pass_weight_add = has_weight

        def forward_native(self, x, residual=None):
            w = self.weight.data if self.pass_weight else None
            if self.variance_size_override is not None:
                raise NotImplementedError("the stand-in has no var_hidden_size")
            return rms(x, w, self.variance_epsilon, residual, False)

    class GemmaRMSNorm(CustomOp):
        name = "gemma_rms_norm"

        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(hidden_size))
            self.variance_epsilon = eps

        def forward_native(self, x, residual=None):
            return rms(x, self.weight.data, self.variance_epsilon, residual, True)

    layernorm = mods["vllm.model_executor.layers.layernorm"]
    layernorm.RMSNorm, layernorm.GemmaRMSNorm = RMSNorm, GemmaRMSNorm

    class SiluAndMul(CustomOp):
        name = "silu_and_mul"

        def forward_native(self, x):
            d = x.shape[-1] // 2
            return F.silu(x[..., :d]) * x[..., d:]

    class MulAndSilu(CustomOp):
        name = "mul_and_silu"

        def __init__(self):
            super().__init__()
            self._forward_method = self.forward_native  # as vLLM does on CPU

        def forward_native(self, x):
            d = x.shape[-1] // 2
            return x[..., :d] * F.silu(x[..., d:])

    class GeluAndMul(CustomOp):
        name = "gelu_and_mul"

        def __init__(self, approximate="none"):
            super().__init__()
            self.approximate = approximate

        def forward_native(self, x):
            d = x.shape[-1] // 2
            return F.gelu(x[..., :d], approximate=self.approximate) * x[..., d:]

    activation = mods["vllm.model_executor.layers.activation"]
    activation.SiluAndMul, activation.MulAndSilu = SiluAndMul, MulAndSilu
    activation.GeluAndMul = GeluAndMul

    class RotaryEmbedding(CustomOp):
        name = "rotary_embedding"

        def __init__(self, head_size, rotary_dim, max_position_embeddings, base, is_neox_style,
                     dtype):
            super().__init__()
            self.head_size, self.rotary_dim, self.is_neox_style = head_size, rotary_dim, \
                is_neox_style
            inv = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
            f = torch.outer(torch.arange(max_position_embeddings, dtype=torch.float), inv)
            self.cos_sin_cache = torch.cat((f.cos(), f.sin()), -1).to(dtype)

        def _match_cos_sin_cache_dtype(self, query):
            return self.cos_sin_cache.to(query.device, dtype=query.dtype)

        def forward_native(self, positions, query, key=None):
            cache = self._match_cos_sin_cache_dtype(query)
            cos, sin = cache[positions.flatten()].chunk(2, dim=-1)
            cos, sin = cos[:, None, :], sin[:, None, :]

            def rotate(t):
                shape = t.shape
                t = t.reshape(positions.numel(), -1, self.head_size)
                r, rest = t[..., :self.rotary_dim], t[..., self.rotary_dim:]
                if self.is_neox_style:
                    a, b = r.chunk(2, dim=-1)
                    r = torch.cat((a * cos - b * sin, b * cos + a * sin), -1)
                else:
                    a, b = r[..., 0::2], r[..., 1::2]
                    r = torch.stack((a * cos - b * sin, b * cos + a * sin), -1).flatten(-2)
                return torch.cat((r, rest), -1).reshape(shape)

            return rotate(query), (rotate(key) if key is not None else None)

    mods["vllm.model_executor.layers.rotary_embedding"].RotaryEmbedding = RotaryEmbedding
    return mods


def install():
    for name, mod in build().items():
        sys.modules[name] = mod


def remove():
    for name in MODULES:
        sys.modules.pop(name, None)
