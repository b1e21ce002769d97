# SPDX-License-Identifier: Apache-2.0
"""The catalog's op functions (fldispatch.rms_norm, ...: fldispatch._C's) as
a type checker sees them, made from the catalog's schemas and docs
(<fldispatch/catalog.def>, _C.catalog_ops(), _C.catalog()). Written by
`python3 python/tests/test_stub.py --write` with the built package on
PYTHONPATH; python/tests/test_stub.py holds it to the catalog. A Tensor is
Any: any DLPack producer."""

from typing import Any


def silu_and_mul(out: Any, x: Any) -> None:
    """out = silu(x[..., :d]) * x[..., d:], written in place."""


def mul_and_silu(out: Any, x: Any) -> None:
    """out = x[..., :d] * silu(x[..., d:]), written in place."""


def gelu_and_mul(out: Any, x: Any) -> None:
    """out = gelu(x[..., :d]) * x[..., d:] (erf GELU), in place."""


def gelu_tanh_and_mul(out: Any, x: Any) -> None:
    """out = gelu_tanh(x[..., :d]) * x[..., d:], in place."""


def gelu_quick(out: Any, x: Any) -> None:
    """out = x * sigmoid(1.702 * x) (vLLM's QuickGELU), out the shape of x, in place."""


def gelu_new(out: Any, x: Any) -> None:
    """out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) (vLLM's NewGELU),
    out the shape of x, in place."""


def gelu_fast(out: Any, x: Any) -> None:
    """out = 0.5 * x * (1 + tanh(0.7978845608 * x * (1 + 0.044715 * x^2))) (vLLM's
    FastGELU), out the shape of x, in place."""


def rms_norm(
    out: Any,
    x: Any,
    weight: Any | None = None,
    residual: Any | None = None,
    eps: float = 1e-06,
) -> None:
    """RMS normalisation over the last dimension. With residual: residual = x + residual
    (in place), then out = norm(residual) * weight. out may be x."""


def gemma_rms_norm(
    out: Any,
    x: Any,
    weight: Any | None = None,
    residual: Any | None = None,
    eps: float = 1e-06,
) -> None:
    """As rms_norm, scaling by (1 + weight)."""


def rotary_embedding(
    positions: Any,
    query: Any,
    key: Any | None,
    head_size: int,
    cos_sin_cache: Any,
    is_neox: bool,
) -> None:
    """Rotary position embedding, in place on query and key (key may be None)."""


def rotary_embedding_out(
    positions: Any,
    query: Any,
    key: Any | None,
    head_size: int,
    cos_sin_cache: Any,
    is_neox: bool,
    query_out: Any,
    key_out: Any | None,
) -> None:
    """Rotary position embedding out of place: query and key are read, the rotated
    rows written into query_out and key_out (both None or both tensors)."""


def attention_backend(device: str, use_mla: bool = False, use_sparse: bool = False) -> str:
    """The name of the attention backend to use on a device."""
