# SPDX-License-Identifier: Apache-2.0
"""The compatibility layer's only door into fldispatch's Python API.

Everything the upstream-shaped classes need from the library goes through the
few functions here: registering an OpImpl into the C registry, asking the C
selection which implementations an op resolves to, calling an op through the
C call path (fallback, strictness and failure memory are the core's), and the
policy (global set/reset, scoped overrides, the effective policy as text).
Keeping them in one file keeps the mapping readable, and is where a change in
fldispatch's Python API is absorbed.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Mapping, Sequence

import fldispatch
from fldispatch.json_types import Explanation, ImplRecord

from . import io_dumper as iodump

# The C registry wants impl ids of the form '<prefix>.<name>', the prefix
# naming the kind; upstream accepts any string. Upstream's kinds are the
# library's policy tokens (<fldispatch/plugin.h>, _C.kinds()).
_KIND_PREFIX = {k["token"]: k["prefix"] for k in fldispatch._C.kinds()}
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def c_impl_id(kind: str, impl_id: str) -> str:
    """The id under which an upstream impl_id is registered in C.

    Ids that already read '<kind prefix>.<name>' with the characters C accepts
    are kept; any other gets the kind's prefix and has other characters
    replaced by '_' (the OpImpl keeps its own id).
    """
    prefix = _KIND_PREFIX[kind]
    if impl_id.startswith(prefix + ".") and len(impl_id) > len(prefix) + 1 and \
            all(c in _ID_CHARS for c in impl_id):
        return impl_id
    clean = "".join(c if c in _ID_CHARS else "_" for c in impl_id) or "_"
    return f"{prefix}.{clean}"


def register(op: str, impl_id: str, kind: str, fn: Callable[..., Any], vendor: str | None, priority: int,
             is_available: Callable[[], bool], into: fldispatch.registry.registering | None = None,
             plugin: str | None = None) -> None:
    """Register one Python implementation into the C registry.

    into: a registration batch of fldispatch (what a discovered plugin's
    register function fills, committed all-or-nothing), else at once, under
    the plugin record named `plugin`.
    Raises ValueError (with the library's message) when C refuses it.
    """
    kwargs: dict[str, Any] = dict(impl_id=impl_id, kind=kind, vendor=vendor,
                  priority=int(priority), is_available=is_available)
    try:
        if into is not None:
            into.register_impl(op, fn, **kwargs)
        else:
            fldispatch.register_impl(op, fn, plugin=plugin, **kwargs)
    except fldispatch.Error as e:
        raise ValueError(str(e)) from e


def impls_of(op: str) -> list[ImplRecord]:
    """The C registry's records of `op` (fldispatch.impls() rows)."""
    return [m for m in fldispatch.impls() if m["op"] == op]


def all_impls() -> list[ImplRecord]:
    return fldispatch.impls()


def ensure_plugins() -> None:
    """Load the core's plugins and fldispatch's Python plugins (once)."""
    fldispatch.init()
    reg = getattr(fldispatch, "registry", None)
    ensure = getattr(reg, "_ensure_plugins", None)
    if ensure is not None:
        ensure()


def set_plugin_registry_factory(factory: Callable[[fldispatch.registry.registering], object]) -> bool:
    """Have upstream-group plugins that fldispatch discovers register through factory(batch)."""
    reg = getattr(fldispatch, "registry", None)
    setter = getattr(reg, "set_upstream_registry_factory", None)
    if setter is None:
        return False
    setter(factory)
    return True


def discovered() -> list[tuple[str, str, bool]]:
    """(name, source, ok) of the Python plugins fldispatch discovered."""
    reg = getattr(fldispatch, "registry", None)
    out: list[tuple[str, str, bool]] = []
    for rec in getattr(reg, "discovered_plugins", ()):
        name, source, ok = rec[:3]
        out.append((name, "entry_point" if ":" in source else "env_module", bool(ok)))
    return out


def explain(op: str) -> Explanation:
    """The C selection for `op` now, on this thread's policy (fldispatch.explain's dict)."""
    return fldispatch.explain(op)


def op_exists(op: str) -> bool:
    try:
        fldispatch.explain(op)
    except fldispatch.NotFoundError:
        return False
    return True


def call(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Call `op` through the C call path (selection, fallback, failure memory).

    The IO dump's wrapper is stepped over: the manager records the call under
    the op's upstream name itself.
    """
    return iodump._saved.get("call_op", fldispatch.call_op)(op, *args, **kwargs)


# ---- policy ----------------------------------------------------------------

def describe() -> str:
    """This thread's effective policy, as the core prints it."""
    return fldispatch.describe_policy()


def _five(prefer: str, strict: bool, per_op: Mapping[str, Sequence[str]] | None,
          allow_vendors: Iterable[str] | None, deny_vendors: Iterable[str] | None) -> dict[str, Any]:
    """Upstream's five policy fields as fldispatch.policy()/set_policy() keywords; an
    empty list clears (no allow list, no per-op orders)."""
    return dict(prefer=prefer, strict=bool(strict), per_op=dict(per_op) if per_op else "",
                allow_vendors=sorted(allow_vendors) if allow_vendors is not None else "",
                deny_vendors=sorted(deny_vendors) if deny_vendors else "")


# fldispatch.describe_policy()'s words for the fields beyond upstream's five -> policy
# keys, from the library's policy-field table
_FIVE = ("prefer", "strict", "per_op", "allow_vendors", "deny_vendors")
_DESCRIBED = {f["word"]: f["key"] for f in fldispatch.POLICY_FIELDS if f["key"] not in _FIVE}


def _other_fields(described: str) -> dict[str, str]:
    """The fields of a described policy beyond upstream's five, as policy keywords."""
    out: dict[str, str] = {}
    for part in described.partition(";per=")[0].split(";"):
        word, _, value = part.partition("=")
        if word in _DESCRIBED:
            out[_DESCRIBED[word]] = value
    return out


def set_global(prefer: str, strict: bool, per_op: Mapping[str, Sequence[str]] | None,
               allow_vendors: Iterable[str] | None, deny_vendors: Iterable[str] | None) -> None:
    """Make these five fields the global policy (all or nothing; the others keep their values)."""
    fldispatch.set_policy(**_five(prefer, strict, per_op, allow_vendors, deny_vendors))


def reset_global() -> None:
    fldispatch.reset_policy()


def scoped_whole(prefer: str, strict: bool, per_op: Mapping[str, Sequence[str]] | None,
                 allow_vendors: Iterable[str] | None, deny_vendors: Iterable[str] | None) -> fldispatch.policy:
    """A scope of this thread holding a whole policy: upstream's five fields as
    given (a global deny list or per-op order they do not name is gone), the
    fields upstream keeps outside its SelectionPolicy as in force now."""
    fields: dict[str, Any] = _other_fields(describe())
    fields.update(_five(prefer, strict, per_op, allow_vendors, deny_vendors))
    return fldispatch.policy(inherit=False, **fields)


def describe_file(path: str) -> str:
    """The policy a YAML file gives, read and checked by the core, as it describes it."""
    with fldispatch.policy(file=path):
        return describe()


def scoped_fields(**fields: Any) -> fldispatch.policy:
    """A context that changes some fields of this thread's policy."""
    return fldispatch.policy(**fields)


def failed_impls() -> dict[str, set[str]]:
    """{op: set(impl_id)} from the core's failure memory."""
    out: dict[str, set[str]] = {}
    for rec in fldispatch.failed_impls():
        out.setdefault(rec[0], set()).add(rec[-1])
    return out


def clear_failed(op: str | None = None) -> None:
    fldispatch.clear_failed_impls(op)


def set_log_level(level: str) -> None:
    level = str(level).lower()
    fldispatch.set_log_level("error" if level == "critical" else level)


nullcontext = contextlib.nullcontext
