# SPDX-License-Identifier: Apache-2.0
"""The flagos tier: FlagGems (Triton) kernels for the catalog ops, registered as
kind "flagos" (impl_id default.flagos, priority 150) when `flag_gems` imports.

FlagGems needs a GPU and Triton. Where it does not import, the plugin
"flagos" is still listed, UNAVAILABLE, with the import error as its reason
(its implementations are never selected). The kernels are called with the
catalog's arguments (outputs written in place), through FlagGems' functional
API (run on an H100 with FlagGems 5.0.2: docs/python.md says what passed).
"""

from typing import Any, Callable, NoReturn

from . import registry as _registry

PLUGIN = "flagos"

_state: dict[str, Any] = {"done": False, "reason": None}


def _import() -> tuple[Any, str | None]:
    try:
        import flag_gems  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or a driver error at import
        return None, f"flag_gems is not importable: {type(exc).__qualname__}: {exc}"
    return flag_gems, None


def _kernels(fg: Any) -> dict[str, Callable[..., None]]:
    """The catalog ops as calls of FlagGems' functions (writing into out)."""

    def silu_and_mul(out: Any, x: Any) -> None:
        d = x.shape[-1] // 2
        out.copy_(fg.silu_and_mul(x[..., :d], x[..., d:]))

    def gelu_and_mul(out: Any, x: Any) -> None:
        d = x.shape[-1] // 2
        out.copy_(fg.gelu_and_mul(x[..., :d], x[..., d:], "none"))

    def gelu_tanh_and_mul(out: Any, x: Any) -> None:
        d = x.shape[-1] // 2
        out.copy_(fg.gelu_and_mul(x[..., :d], x[..., d:], "tanh"))

    def rms_norm(out: Any, x: Any, weight: Any, residual: Any, eps: float) -> None:
        if weight is None:
            raise NotImplementedError("flag_gems rms_norm needs a weight")
        if residual is not None:
            y, r = fg.fused_add_rms_norm(x, residual, list(weight.shape), weight, eps)
            residual.copy_(r)
            out.copy_(y)
        else:
            out.copy_(fg.rms_norm(x, list(weight.shape), weight, eps))

    def rotary_embedding(positions: Any, query: Any, key: Any, head_size: int, cos_sin_cache: Any,
                         is_neox: bool) -> None:
        if key is None:
            raise NotImplementedError("flag_gems rotary_embedding needs a key")
        rot = cos_sin_cache.shape[-1] // 2
        cos, sin = cos_sin_cache[:, :rot], cos_sin_cache[:, rot:]
        q = query.view(*query.shape[:-1], -1, head_size)
        k = key.view(*key.shape[:-1], -1, head_size)
        qo, ko = fg.apply_rotary_pos_emb(q[..., :2 * rot], k[..., :2 * rot], cos, sin,
                                         positions, rotary_interleaved=not is_neox)
        q[..., :2 * rot].copy_(qo)
        k[..., :2 * rot].copy_(ko)

    return {"silu_and_mul": silu_and_mul, "gelu_and_mul": gelu_and_mul,
            "gelu_tanh_and_mul": gelu_tanh_and_mul, "rms_norm": rms_norm,
            "rotary_embedding": rotary_embedding}


#: The catalog ops FlagGems serves: those _kernels() has a call for (its
#: calls reach FlagGems only when they run).
OPS = tuple(_kernels(None))


@_registry._add_builtin_plugin
def register() -> None:
    """Registers the flagos tier once per process (from plugin discovery)."""
    if _state["done"]:
        return
    _state["done"] = True
    fg, reason = _import()
    _state["reason"] = reason
    kernels = _kernels(fg) if fg is not None else {}

    def unavailable(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError(reason)

    try:
        with _registry.registering(PLUGIN, version=getattr(fg, "__version__", "")):
            for op in OPS:
                _registry.register_impl(
                    op, kernels.get(op, unavailable), impl_id="default.flagos", kind="flagos",
                    devices=["cuda"], dtypes=["float32", "float16", "bfloat16"],
                    is_available=(lambda: (False, reason)) if reason else None, plugin=PLUGIN)
    except Exception:  # noqa: BLE001 - e.g. a manifest freezes the registry: listed rejected
        pass


def unavailable_reason() -> str | None:
    """Why the flagos tier cannot run here, or None."""
    return _state["reason"]
