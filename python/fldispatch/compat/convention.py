# SPDX-License-Identifier: Apache-2.0
"""vllm-plugin-FL's calling convention for the catalog ops both sides have.

Upstream's layers call `silu_and_mul(layer, x)`, `gelu_and_mul(layer, x)`,
`rms_norm(layer, x, residual=None)`, `rotary_embedding(layer, q, k, cos, sin,
positions, rotary_interleaved=False, inplace=True)` and
`attention_backend(use_mla=False, use_sparse=False)`, and get the result back;
fldispatch's catalog functions take the outputs as arguments and write them
(`silu_and_mul(out, x)`, ...). Both reach the same C chain:

  - an upstream-style call (the first argument is not a tensor; for
    attention_backend, no positional argument) is turned into the catalog
    call here: the outputs are allocated, the catalog op is called (selection,
    fallback and failure memory are the core's), the results are returned as
    upstream's implementations return them;
  - an upstream-style implementation (it returns its result) registered for
    one of these ops through the compatibility layer is wrapped once, at
    registration, so that the core's catalog call reaches it with upstream's
    arguments and its result is copied into the outputs. A result is copied
    only when it has the output's shape, dtype and device (never broadcast or
    converted), and a pair only where a pair is due: anything else is that
    implementation's failure, naming it and both shapes. The layer the caller
    passed is handed to it when the call came upstream's way; otherwise it
    gets a stand-in carrying the attributes upstream's implementations read
    (`weight`, `variance_epsilon`, `approximate`).

fldispatch's own catalog functions are not touched: nothing here runs on
their path unless an upstream implementation is selected.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Literal, Optional

__all__ = ["UPSTREAM_OPS", "is_upstream_call", "call_upstream", "adapt_upstream_fn"]

#: The catalog ops upstream calls with (layer, ...) and results returned.
UPSTREAM_OPS = frozenset(
    ("silu_and_mul", "gelu_and_mul", "rms_norm", "rotary_embedding", "attention_backend"))

_tls = threading.local()


def _is_tensor(obj: Any) -> bool:
    return hasattr(obj, "__dlpack__")


def is_upstream_call(op: str, args: tuple[Any, ...]) -> bool:
    """Whether a call of catalog op `op` uses upstream's arguments (op in UPSTREAM_OPS)."""
    if op == "attention_backend":
        return not args
    return not args or not _is_tensor(args[0])


class _Layer:
    """Stands for the calling layer when the call came fldispatch's way."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


def _layer(op: str, **attrs: Any) -> Any:
    held = getattr(_tls, "held", None)
    if held is not None and held[0] == op:
        return held[1]
    return _Layer(**attrs)


class _Holding:
    """Hands `layer` to the upstream implementations of `op` while the catalog call runs."""

    __slots__ = ("entry", "saved")

    def __init__(self, op: str, layer: Any) -> None:
        self.entry = (op, layer)

    def __enter__(self) -> None:
        self.saved = getattr(_tls, "held", None)
        _tls.held = self.entry

    def __exit__(self, *exc: object) -> Literal[False]:
        _tls.held = self.saved
        return False


# ---- upstream's call -> the catalog call ------------------------------------------

# (fn, strict) of a candidate: an upstream implementation's fn, or None for one the core runs itself
_Candidate = tuple[Optional[Callable[..., Any]], bool]


def _platform_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _cos_sin_cache(cos: Any, sin: Any) -> Any:
    """cat([cos, sin], -1) without a copy when they are the two halves of one tensor
    (what `cos_sin_cache.chunk(2, -1)` gives)."""
    import torch

    half = cos.shape[-1]
    if (cos.dim() == 2 and cos.shape == sin.shape and cos.dtype == sin.dtype
            and cos.device == sin.device and cos.stride() == sin.stride()
            and cos.stride(-1) == 1 and cos.stride(0) == 2 * half
            and sin.data_ptr() == cos.data_ptr() + half * cos.element_size()):
        return cos.as_strided((cos.shape[0], 2 * half), (2 * half, 1))
    return torch.cat([cos, sin], dim=-1)


def call_upstream(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], call: Callable[..., Any],
                  upstream_fns: Optional[Callable[[str, str], Iterable[_Candidate]]] = None) -> Any:
    """Serve an upstream-style call of `op` through call(op, *catalog_args).

    attention_backend's catalog call cannot reach a Python implementation (its
    result is the library's string): upstream_fns(op, device), when given, lists
    the candidates in the core's order as (fn or None for a C one, strict), and
    upstream implementations ahead of the first C one are called upstream's way."""
    if op == "attention_backend":
        device = kwargs.pop("device", None) or _platform_device()
        flags = dict(use_mla=bool(kwargs.get("use_mla", False)),
                     use_sparse=bool(kwargs.get("use_sparse", False)))
        error = None
        for fn, strict in (upstream_fns(op, device) if upstream_fns else ()):
            if fn is None:
                break
            try:
                return fn(**flags)
            except Exception as e:  # noqa: BLE001 - the next candidate, as the core does
                if strict:
                    raise
                error = e
        try:
            return call(op, device, flags["use_mla"], flags["use_sparse"])
        except Exception as e:
            if error is not None and e.__cause__ is None:
                raise e from error
            raise
    layer, rest = (args[0], args[1:]) if args else (None, ())
    with _Holding(op, layer):
        if op in ("silu_and_mul", "gelu_and_mul"):
            x = rest[0] if rest else kwargs["x"]
            out = x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,))
            name = op
            if op == "gelu_and_mul" and getattr(layer, "approximate", "none") == "tanh":
                name = "gelu_tanh_and_mul"
            call(name, out, x)
            return out
        if op == "rms_norm":
            x = rest[0] if rest else kwargs["x"]
            residual = rest[1] if len(rest) > 1 else kwargs.get("residual")
            weight = getattr(layer, "weight", None)
            if weight is not None and getattr(weight, "requires_grad", False):
                weight = weight.detach()    # a layer's Parameter; the op has no derivative
            eps = float(getattr(layer, "variance_epsilon", 1e-6))
            out = x.new_empty(x.shape)
            if residual is None:
                call(op, out, x, weight, None, eps)
                return out
            # upstream's reference leaves its inputs alone and returns (out, x + residual)
            summed = residual.clone()
            call(op, out, x, weight, summed, eps)
            return out, summed
        if op == "rotary_embedding":
            return _rotary(op, rest, kwargs, call)
    raise ValueError(f"{op}: no upstream calling convention")


def _rotary(op: str, rest: tuple[Any, ...], kwargs: dict[str, Any],
            call: Callable[..., Any]) -> tuple[Any, Any]:
    names = ("query", "key", "cos", "sin", "position_ids", "rotary_interleaved", "inplace")
    given = dict(zip(names, rest))
    given.update(kwargs)
    query, key, cos, sin = given["query"], given["key"], given["cos"], given["sin"]
    positions = given["position_ids"].flatten()
    interleaved = bool(given.get("rotary_interleaved", False))
    if query.dim() != 3 or query.shape[0] != positions.shape[0]:
        raise ValueError(f"{op}: upstream's call needs query [tokens, heads, rotary_dim] with "
                         f"one position per token (query {tuple(query.shape)}, positions "
                         f"{tuple(positions.shape)})")
    rot = query.shape[-1]
    q = query.clone(memory_format=_contiguous()).reshape(query.shape[0], -1)
    k = key.clone(memory_format=_contiguous()).reshape(key.shape[0], -1)
    call(op, positions, q, k, rot, _cos_sin_cache(cos, sin), not interleaved)
    return q.view(query.shape), k.view(key.shape)


def _contiguous() -> Any:
    import torch

    return torch.contiguous_format


# ---- an upstream implementation -> the catalog call ---------------------------------


def _spec(tensor: Any) -> str:
    return f"shape {tuple(tensor.shape)} {str(tensor.dtype).rpartition('.')[2]}"


def _describe(obj: Any) -> str:
    if _is_tensor(obj) and hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return f"a tensor of {_spec(obj)}"
    return f"a {type(obj).__name__}"


class _Result:
    """Checks what upstream implementation `impl_id` of `op` returned."""

    __slots__ = ("op", "impl_id")

    def __init__(self, op: str, impl_id: str) -> None:
        self.op = op
        self.impl_id = impl_id

    def _returned(self, got: Any) -> str:
        return f"upstream implementation '{self.impl_id}' of {self.op} returned {_describe(got)}"

    def tensor(self, got: Any, name: str, want: Any) -> Any:
        """got, when it has the shape, dtype and device of output `name` (want)."""
        if _is_tensor(got) and hasattr(got, "shape") and tuple(got.shape) == tuple(want.shape) \
                and got.dtype == want.dtype and got.device == want.device:
            return got
        where = ""
        if _is_tensor(got) and getattr(got, "device", want.device) != want.device:
            where = f" (on {got.device}, {name} on {want.device})"
        error = ValueError if _is_tensor(got) else TypeError
        raise error(f"{self._returned(got)}{where} for {name}: {_spec(want)} is due "
                    "(a result is copied as it is, never broadcast or converted)")

    def pair(self, got: Any, names: str) -> tuple[Any, ...] | list[Any]:
        """got as a pair, when it is one (a tuple or a list of two)."""
        if isinstance(got, (tuple, list)) and len(got) == 2:
            return got
        raise TypeError(f"{self._returned(got)} where a pair ({names}) is due")


def _serve_activation(op: str, impl_id: str, fn: Callable[..., Any], out: Any, x: Any) -> None:
    approximate = "tanh" if op == "gelu_tanh_and_mul" else "none"
    result = fn(_layer(op, approximate=approximate), x)
    out.copy_(_Result(op, impl_id).tensor(result, "out", out))


def _serve_rms_norm(op: str, impl_id: str, fn: Callable[..., Any], out: Any, x: Any, weight: Any,
                    residual: Any, eps: float) -> None:
    layer = _layer(op, weight=weight, variance_epsilon=eps)
    check = _Result(op, impl_id)
    if residual is None:
        out.copy_(check.tensor(fn(layer, x), "out", out))
        return
    result, summed = check.pair(fn(layer, x, residual), "out, residual")
    check.tensor(result, "out", out)
    if summed is not residual:
        residual.copy_(check.tensor(summed, "residual", residual))
    out.copy_(result)


def _serve_rotary(op: str, impl_id: str, fn: Callable[..., Any], positions: Any, query: Any, key: Any,
                  head_size: int, cos_sin_cache: Any, is_neox: bool) -> None:
    tokens = positions.numel()
    rot = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache.chunk(2, dim=-1)
    q = query.view(tokens, -1, head_size)[..., :rot]
    k = key.view(tokens, -1, head_size)[..., :rot] if key is not None else None
    check = _Result(op, impl_id)
    q_out, k_out = check.pair(fn(_layer(op), q, k, cos, sin, positions.flatten(), not is_neox,
                                 True), "query, key")
    check.tensor(q_out, "query", q)
    if k is not None:
        check.tensor(k_out, "key", k)
    if q_out is not q:
        q.copy_(q_out)
    if k is not None and k_out is not k:
        k.copy_(k_out)


_SERVE: dict[str, Callable[..., None]] = {
    "silu_and_mul": _serve_activation,
    "gelu_and_mul": _serve_activation,
    "rms_norm": _serve_rms_norm,
    "rotary_embedding": _serve_rotary,
}


def adapt_upstream_fn(c_op: str, fn: Optional[Callable[..., Any]],
                      impl_id: str = "?") -> Optional[Callable[..., Any]]:
    """What to register for an upstream implementation `fn` (impl_id) of C op `c_op`:
    fn itself, or, for a catalog op upstream calls its own way, a wrapper that serves
    the core's catalog call (outputs as arguments) by calling fn upstream's way."""
    op = c_op.rpartition(".")[2] if c_op.startswith("compat") else c_op
    serve = _SERVE.get(op)
    if serve is None or not callable(fn):
        return fn

    def catalog_call(*args: Any) -> Any:
        if not args or not _is_tensor(args[0]):
            return fn(*args)
        serve(op, impl_id, fn, *args)

    catalog_call.__wrapped__ = fn  # type: ignore[attr-defined]  # what inspect.unwrap follows
    catalog_call.__name__ = getattr(fn, "__name__", op)
    catalog_call.__qualname__ = getattr(fn, "__qualname__", op)
    catalog_call.__module__ = getattr(fn, "__module__", None)  # type: ignore[assignment]  # None for a fn without one
    return catalog_call
