# SPDX-License-Identifier: Apache-2.0
"""fldispatch: libfldispatch's operators for any DLPack tensor.

    import fldispatch, torch
    x = torch.randn(4, 16)
    out = torch.empty(4, 8)
    fldispatch.silu_and_mul(out, x)          # out written in place, no copy
    fldispatch.resolve("silu_and_mul")       # 'vendor.cpu'
    with fldispatch.policy(prefer="reference"):
        fldispatch.silu_and_mul(out, x)      # this thread only

Tensors are any objects with __dlpack__ and __dlpack_device__ (PyTorch,
NumPy, JAX, CuPy ...) or DLPack capsules. `import fldispatch.torch` registers
the same ops as torch.ops.fldispatch.* for torch.compile and CUDA graphs.
Errors are fldispatch.Error subclasses carrying the library's status and
message. See docs/python.md.
"""

from __future__ import annotations

import os as _os
import typing as _typing

if _typing.TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from .json_types import Configuration, Explanation, ImplRecord, PluginRecord

from . import _C, _logbridge
from ._C import (  # noqa: F401  (re-exported)
    ConfigError,
    Error,
    ImplementationError,
    InvalidArgumentError,
    NotFoundError,
    OutOfMemoryError,
    PluginError,
    StateError,
    UnavailableError,
    UnsupportedError,
    get_stream,
    init,
    load_plugin,
    oot_op_enabled,
    prepare,
    set_stream,
    stats,
    stats_enable,
    stats_flush,
    stats_mode,
    stats_reset,
    stats_summary,
)

__version__ = _C.version()

from .registry import (  # noqa: E402,F401  (re-exported)
    declare_op,
    discover_plugins,
    register_impl,
    registering,
)
from ._C import call_op, resolve_op  # noqa: E402,F401  (plugins load on first use, in C)
from .registry import _ensure_plugins  # noqa: E402
from . import flagos as _flagos  # noqa: E402,F401  (adds the flagos tier to discovery)

# ---- introspection, shaped as the tool's --json (docs/json-output.md) -------
# The dicts carry the keys and value types of `fldispatch resolve/list/config
# --json` (schema 1): lists as lists, absent as None, switches as bools.
JSON_SCHEMA = 1

# The library's policy-field table (core/policy/policy_table.h), one dict per field:
# key, env, yaml_key, word, kind, partner, upstream. Every key list below is
# taken from it.
POLICY_FIELDS = _C.policy_fields()
_SWITCH_KINDS = ("flag", "switch")
_LIST_KINDS = ("names", "vendors", "custom")
# config()'s keys (the YAML keys) by the shape of their value
_SWITCHES = tuple(f["yaml_key"] for f in POLICY_FIELDS if f["kind"] in _SWITCH_KINDS)
_LISTS = tuple(f["yaml_key"] for f in POLICY_FIELDS if f["kind"] in _LIST_KINDS)
_ORDERS = tuple(f["yaml_key"] for f in POLICY_FIELDS if f["kind"] == "orders")


def _split(text: str | None, seps: str) -> list[str] | None:
    if text is None:
        return None
    items = [text]
    for sep in seps:
        items = [part for item in items for part in item.split(sep)]
    return [item.strip(" \t") for item in items if item.strip(" \t")]


def _text_or_none(text: str | None) -> str | None:
    return text if text else None


def signatures() -> dict[str, str]:
    """Every op signature, {op: schema}: the catalog's first, then the ops
    declared by plugins (fld_registry_declare_op) and Python (declare_op)."""
    _ensure_plugins()
    return {op: schema for op, schema, _by, _catalog in _C.signatures()}


def resolve(op: str, device: object = "cpu", dtype: object = "float32") -> str:
    """The impl_id a call of `op` on (device, dtype) would use now."""
    _C._ready()
    return _C.resolve(op, device, dtype)


def explain(op: str, device: object = "cpu", dtype: object = "float32") -> Explanation:
    """How `op` resolves on (device, dtype): the keys of `fldispatch resolve --json`."""
    _C._ready()
    d = _C.explain(op, device, dtype)
    d["schema"] = JSON_SCHEMA
    d["order"] = _split(d["order"], "|")
    d["policy_summary"] = d.pop("policy")
    return _typing.cast("Explanation", d)


def plugins() -> list[PluginRecord]:
    """Every plugin the host found, as `fldispatch list --json`'s "plugins"."""
    _ensure_plugins()
    out = []
    for p in _C.plugins():
        p["builtin"] = p["path"] in (None, "(built-in)")
        if p["builtin"]:
            p["path"] = None
        p["impl_count"] = p.pop("n_impls")
        p["reason"] = _text_or_none(p["reason"])
        p["version"] = _text_or_none(p["version"])
        p["detail"] = _text_or_none(p["detail"])
        out.append(_typing.cast("PluginRecord", p))
    return out


def impls() -> list[ImplRecord]:
    """Every registered implementation, as `fldispatch list --json`'s "impls"."""
    _ensure_plugins()
    out = []
    for m in _C.impls():
        m["reason"] = _text_or_none(m.pop("unavailable_reason"))
        out.append(_typing.cast("ImplRecord", m))
    return out


def _config_value(key: str, value: str | None) -> bool | list[str] | str | None:
    if key in _SWITCHES and value in ("true", "false"):
        return value == "true"
    if key.partition(".")[0] in _ORDERS:
        return _split(value, "|")
    if key in _LISTS:
        return _split(value, ",")
    return _text_or_none(value)


def config() -> Configuration:
    """The effective policy with each value's source: `fldispatch config --json`."""
    d = _C.config()
    d["schema"] = JSON_SCHEMA
    d["platform"]["config_path"] = _split(d["platform"]["config_path"] or "", ":")
    for field in d["policy"]:
        field["value"] = _config_value(field["key"], field["value"])
    d["policy_summary"] = d.pop("summary")
    d["plugin_path"] = _split(d["plugin_path"] or "", ":")
    return _typing.cast("Configuration", d)


#: The catalog's ops, in catalog order (the library's table: _C.catalog_ops()),
#: each a function of this module: fldispatch.rms_norm(out, x, weight, residual, eps).
OPS = tuple(_name for _name, _schema in _C.catalog_ops())
globals().update({_name: getattr(_C, _name) for _name in OPS})

if _typing.TYPE_CHECKING:
    # What the line above adds, as a type checker sees it (the stub made from the catalog).
    from ._ops import *  # noqa: F403

# The API besides the catalog's ops, written out so that type checkers read
# it as the module's exports; the ops follow from the catalog.
__all__ = [
    "register_impl", "registering", "declare_op", "signatures", "call_op", "resolve_op",
    "discover_plugins",
    "resolve", "explain", "plugins", "impls", "config", "reload", "init", "load_plugin", "policy",
    "set_policy", "reset_policy", "load_policy", "reset_thread_policy", "failed_impls",
    "clear_failed_impls", "set_log_level", "get_log_level", "describe_policy",
    "set_stream", "get_stream", "oot_op_enabled", "Error", "InvalidArgumentError",
    "NotFoundError", "UnavailableError", "ConfigError", "PluginError", "ImplementationError",
    "OutOfMemoryError", "UnsupportedError", "StateError", "__version__", "stats", "stats_reset",
    "stats_summary", "stats_enable", "stats_mode", "stats_flush", "prepare",
]
__all__ = list(OPS) + __all__


# ---- the policy ----------------------------------------------------------------
# Python values become the grammars of the library's policy keys
# (fld_policy_set() in fldispatch.h); the C calls take them as strings.

POLICY_KEYS = tuple(f["key"] for f in POLICY_FIELDS)
_KIND = {f["key"]: f["kind"] for f in POLICY_FIELDS}


@_typing.overload
def _csv(value: None, name: str, fn: str = ..., separators: str = ...) -> None: ...
@_typing.overload
def _csv(value: str | Iterable[str], name: str, fn: str = ..., separators: str = ...) -> str: ...
def _csv(value: str | Iterable[str] | None, name: str, fn: str = "policy",
         separators: str = ",") -> str | None:
    """A str as given, or a list of str joined by ','; an item holding one of
    the separators would be split by the library: ConfigError naming it."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, dict)):
        raise TypeError(f"{fn}(): {name} must be a str or a list of str, "
                        f"not {type(value).__name__}")
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{fn}(): {name} must be a str or a list of str, "
                        f"not {type(value).__name__}") from None
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{fn}(): {name} must hold str, not {type(item).__name__}")
        if any(sep in item for sep in separators):
            raise _C.ConfigError(f"{fn}(): {name}: {item!r} is not one name (an item of a list "
                                 f"holds no {' or '.join(repr(s) for s in separators)}; give a "
                                 "list of names or one str in the variable's form)")
    return ",".join(items)


@_typing.overload
def _per_op_spec(per_op: None, fn: str = ...) -> None: ...
@_typing.overload
def _per_op_spec(per_op: dict[str, Any] | str, fn: str = ...) -> str: ...
def _per_op_spec(per_op: dict[str, Any] | str | None, fn: str = "policy") -> str | None:
    """{op: "a|b" or [a, b]} -> "op=a|b;..." (VLLM_FL_PER_OP's grammar)."""
    if per_op is None or isinstance(per_op, str):
        return per_op
    if not isinstance(per_op, dict):
        raise TypeError(f"{fn}(): per_op must be a dict {{op: tokens}} or a str "
                        f"'op=a|b;op2=c', not {type(per_op).__name__}")
    parts: list[str] = []
    for op, tokens in per_op.items():
        if not isinstance(op, str):
            raise TypeError(f"{fn}(): per_op keys must be op names (str), not {op!r}")
        if tokens is None:
            raise TypeError(f"{fn}(): per_op[{op!r}] must be a str 'a|b' or a list of tokens, "
                            "not None")
        if not isinstance(tokens, str):
            tokens = "|".join(_typing.cast(str, _csv(tokens, f"per_op[{op!r}]", fn, ",|;=")).split(","))
        parts.append(f"{op}={tokens}")
    return ";".join(parts)


def _policy_fields(fn: str, fields: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """{key: Python value} -> (keys, values) as the library's strings; None is "not given"."""
    keys: list[str] = []
    values: list[str] = []
    for key, value in fields.items():
        if key not in POLICY_KEYS:
            raise TypeError(f"{fn}() got an unexpected keyword argument '{key}' "
                            f"(policy keys: {', '.join(POLICY_KEYS)})")
        if value is None:
            continue
        kind = _KIND[key]
        if kind in _SWITCH_KINDS:
            if not isinstance(value, bool):
                raise TypeError(f"{fn}(): {key} must be a bool, not {type(value).__name__}")
            text = "1" if value else "0"
        elif kind == "prefer":
            if not isinstance(value, str):
                raise TypeError(f"{fn}(): {key} must be a str, not {type(value).__name__}")
            text = value
        elif kind == "orders":
            text = _per_op_spec(value, fn)
        else:
            text = _csv(value, key, fn)
        keys.append(key)
        values.append(text)
    return tuple(keys), tuple(values)


class policy(_C.PolicyScope):
    """A scoped, thread-local override of the dispatch policy.

        with fldispatch.policy(prefer="reference", per_op={"rms_norm": ["vendor", "reference"]},
                               strict=True, allow_vendors=["cpu"], deny_vendors="cuda"):
            ...

    Applies to the calling thread only, on top of the global policy
    (environment, YAML) and of enclosing policy() blocks; leaving the block
    restores what was in force. Values follow the environment variables:
    prefer is flagos | vendor | reference; per_op maps an op to its token
    order (flagos, vendor, vendor:NAME, reference, impl:ID); allow_vendors
    replaces the allow list, deny_vendors adds to the deny list. Any other
    key of fldispatch.POLICY_KEYS may be given too (enabled=False,
    flagos_blacklist=[...]).

    inherit=False makes the block's policy whole: every field not given
    takes its built-in default instead of the value in force. file=PATH
    uses a YAML policy file (the keys of VLLM_FL_CONFIG) as the block's
    whole policy.

    All given fields apply or none: an invalid value, or a name that matches
    nothing registered while the block's policy is strict, raises
    ConfigError when the block is entered (a name that matches nothing is
    otherwise a warning, as in the environment).

    The override belongs to the OS thread, not to a contextvars context:
    leave the block on the thread that entered it (StateError otherwise), and
    do not hold it across an await. Entering and leaving are each one C
    call, so a KeyboardInterrupt cannot fall between the library's push and
    its bookkeeping. reset_thread_policy() drops every override of the
    calling thread.
    """

    __slots__ = ("_given",)

    def __init__(self, prefer: str | None = None, per_op: dict[str, Any] | str | None = None,
                 strict: bool | None = None, allow_vendors: str | Iterable[str] | None = None,
                 deny_vendors: str | Iterable[str] | None = None, *, inherit: bool = True,
                 file: str | _os.PathLike[str] | None = None, **fields: object) -> None:
        fields = dict(prefer=prefer, per_op=per_op, strict=strict, allow_vendors=allow_vendors,
                      deny_vendors=deny_vendors, **fields)
        keys, values = _policy_fields("policy", fields)
        if not isinstance(inherit, bool):
            raise TypeError(f"policy(): inherit must be a bool, not {type(inherit).__name__}")
        if file is not None:
            file = _os.fspath(file)
            if not isinstance(file, str):
                raise TypeError("policy(): file must be a str or a path")
            if keys or not inherit:
                raise TypeError("policy(): file= is a whole policy: give no other field and no "
                                "inherit=")
        super().__init__(keys, values, 0 if inherit else _C.POLICY_WHOLE, file)
        self._given: dict[str, object] = dict(zip(keys, values))
        if file is not None:
            self._given["file"] = file
        if not inherit:
            self._given["inherit"] = False

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self._given.items())
        return f"fldispatch.policy({given})"


def set_policy(prefer: str | None = None, per_op: dict[str, Any] | str | None = None,
               strict: bool | None = None, allow_vendors: str | Iterable[str] | None = None,
               deny_vendors: str | Iterable[str] | None = None, *, inherit: bool = True,
               **fields: object) -> None:
    """Changes the global policy (every thread, under their scoped overrides).

    Keys and values as policy(); fields not given keep their values, or with
    inherit=False take their built-in defaults (a whole policy). Unlike a
    scope, deny_vendors and per_op replace the lists in force; an empty list
    or "" clears a list. All or nothing (ConfigError, nothing changed).
    StateError while a manifest (VLLM_FL_MANIFEST) freezes dispatch.
    reset_policy() goes back to the configuration.
    """
    fields = dict(prefer=prefer, per_op=per_op, strict=strict, allow_vendors=allow_vendors,
                  deny_vendors=deny_vendors, **fields)
    keys, values = _policy_fields("set_policy", fields)
    if not isinstance(inherit, bool):
        raise TypeError(f"set_policy(): inherit must be a bool, not {type(inherit).__name__}")
    _C.policy_set(keys, values, 0 if inherit else _C.POLICY_WHOLE)


def reset_policy() -> None:
    """The global policy back to what the environment and the files say."""
    _C.policy_reset()


def load_policy(path: str | _os.PathLike[str]) -> None:
    """A YAML policy file (VLLM_FL_CONFIG's keys) as the whole global policy."""
    _C.policy_load(_os.fspath(path))


def reset_thread_policy() -> None:
    """Drops every scoped override of the calling thread (policy() blocks
    still open on it leave quietly)."""
    _C.reset_thread_policy()


def failed_impls() -> list[tuple[str, str, str, str]]:
    """What the failure memory of non-strict fallback skips now: a list of
    (op, device, dtype, impl_id) tuples ("any" for an op keyed on no device
    or dtype), the global policy's and then this thread's scope's."""
    return _C.failed_impls()


def clear_failed_impls(op: str | None = None) -> None:
    """Forgets remembered failures, of op or of every op."""
    _C.clear_failed_impls(op)


def set_log_level(level: str | int) -> None:
    """The library's log level: "debug", "info", "warning", "error", "off"
    (any case), or a number (10, 20, 30, 40, 100). Inside vLLM, the lines
    at that level reach vLLM's log whatever VLLM_LOGGING_LEVEL says, as
    with VLLM_FL_LOG_LEVEL (fldispatch.vllm_log)."""
    _C.set_log_level(level)
    _logbridge.choose_level(_C.get_log_level())


def reload() -> None:
    """Re-reads the environment and the configuration files and rescans the
    plugin directories (atomic: on ConfigError nothing changes). A level
    set with set_log_level() ends there: the level is VLLM_FL_LOG_LEVEL's
    again."""
    _C.reload()
    _C.log_flush()  # the reload's own lines, at the level they came at
    _logbridge.choose_level(None)


def get_log_level() -> str | int:
    """The library's log level by name ("warning"), or its number."""
    return _C.get_log_level()


def describe_policy() -> str:
    """This thread's effective policy as one line, e.g. 'prefer=flagos;strict=0'."""
    return _C.policy_describe()


def _io_dump_from_env() -> None:
    """VLLM_FL_IO_DUMP* set: turn the IO dump on (fldispatch.iodump); a bad value is logged."""
    import os

    if not any(name.startswith("VLLM_FL_IO_DUMP") for name in os.environ):
        return
    from . import iodump

    try:
        iodump.init_io_dump_from_env(True)
    except ValueError as e:
        iodump.logger.error("IO dump not enabled: %s", e)


_io_dump_from_env()


class _StatsWorkerFlush:
    """A multiprocessing worker leaves through os._exit(), which runs no C exit
    handler: it writes the counters and the trace from multiprocessing's own
    exit hook instead (a plain process keeps the library's exit handler), as
    that handler would: only if something changed since the last flush (a
    stats_flush() call, or the vLLM plugin's as the engine core's busy loop
    ends), so that each process writes its table once."""

    @staticmethod
    def arm(_: object = None) -> None:
        from multiprocessing import util

        util.Finalize(None, _C._stats_flush_changed, exitpriority=0)


_stats_worker_flush = _StatsWorkerFlush()


def _arm_worker_flush() -> None:
    import os

    if not any(os.environ.get(v) for v in ("VLLM_FL_STATS", "VLLM_FL_STATS_FILE",
                                             "VLLM_FL_TRACE")):
        return
    import multiprocessing
    from multiprocessing import util

    if multiprocessing.parent_process() is not None:  # imported in a worker
        _StatsWorkerFlush.arm()
    # Workers forked later: run in the child once multiprocessing has reset its hooks.
    util.register_after_fork(_stats_worker_flush, _StatsWorkerFlush.arm)


_arm_worker_flush()
