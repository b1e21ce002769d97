# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.registry: OpRegistry, a view of fldispatch's C registry.

register_impl() puts the implementation into the C registry (the one C
plugins fill), so the C core selects it, lists it (`fldispatch list`,
fldispatch.impls()) and calls it; an impl_id the same registry already has for
the op is refused by the core, one that another plugin registered stays beside
it (the core names each `impl_id@plugin`). What
the registry answers (get_implementations, list_operators, snapshot) is read
back from the core: the OpImpl objects registered through this module come
back as given, and implementations of C plugins appear as OpImpls whose fn
calls the op pinned to that implementation.

The C registry is one per process and has no removal. The registry of the
first default manager registers under the ops' own names; any other
OpRegistry (upstream's tests build many, each expecting to start empty)
registers under a private prefix, `compatN.<op>`, and clear() moves a
registry to a fresh prefix: its earlier records stay in C, out of its sight.
"""

from __future__ import annotations

import itertools
import numbers
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import fldispatch
from fldispatch.json_types import ImplRecord

from . import _bridge
from .convention import UPSTREAM_OPS, adapt_upstream_fn, call_upstream, is_upstream_call
from .types import BackendImplKind, OpImpl

__all__ = ["OpRegistry", "OpRegistrySnapshot"]

_namespaces = itertools.count(1)
_faces_lock = threading.RLock()
# (C op, C impl_id, plugin) -> the OpImpl registered through this module
_faces: Dict[Tuple[str, str, str], OpImpl] = {}
# (C op, C impl_id, plugin) -> OpImpl standing for a C plugin's implementation
_foreign: Dict[Tuple[str, str, str], OpImpl] = {}


@dataclass
class OpRegistrySnapshot:
    """A copy of the registry's records: op name -> [OpImpl]."""

    impls_by_op: Dict[str, List[OpImpl]]


class _CImpl:
    """The fn of an implementation a C plugin registered: calls the op pinned to it."""

    def __init__(self, c_op: str, impl_id: str, plugin: str = "") -> None:
        self.c_op = c_op
        self.impl_id = impl_id
        self.token = f"impl:{impl_id}@{plugin}" if plugin else f"impl:{impl_id}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with _bridge.scoped_fields(per_op={self.c_op: [self.token]}, strict=True):
            op = self.c_op.rpartition(".")[2] if self.c_op.startswith("compat") else self.c_op
            if op in UPSTREAM_OPS and is_upstream_call(op, args):
                return call_upstream(op, args, dict(kwargs),
                                     lambda name, *a: _bridge.call(self._c_name(name), a, {}))
            return _bridge.call(self.c_op, args, kwargs)

    def _c_name(self, op: str) -> str:
        return self.c_op[: len(self.c_op) - len(self.c_op.rpartition(".")[2])] + op \
            if self.c_op.startswith("compat") else op

    def __repr__(self) -> str:
        return f"<fldispatch implementation {self.impl_id} of {self.c_op}>"


def _kind_of(token: str) -> BackendImplKind:
    return BackendImplKind("flagos" if token in ("default", "flagos") else token)


def split_name(name: str) -> Tuple[str, str]:
    """(impl_id, plugin) of a name the core reports: 'impl_id@plugin' when several
    plugins registered that impl_id for the op, else the bare impl_id (plugin '')."""
    c_id, _, plugin = name.partition("@")
    return c_id, plugin


def face(c_op: str, name: str, op_name: str, row: Optional[Mapping[str, Any]] = None) -> OpImpl:
    """The OpImpl that stands for C record (c_op, name); name may be 'impl_id@plugin'."""
    c_id, plugin = split_name(name)
    if row is None and not plugin:
        row = next((m for m in _bridge.impls_of(c_op) if m["impl_id"] == c_id), {})
    elif row is None:
        row = next((m for m in _bridge.impls_of(c_op)
                    if m["impl_id"] == c_id and m.get("plugin") == plugin), {})
    plugin = plugin or row.get("plugin", "")
    key = (c_op, c_id, plugin)
    with _faces_lock:
        impl = _faces.get(key) or _foreign.get(key)
        if impl is None:
            impl = OpImpl(op_name=op_name, impl_id=c_id, kind=_kind_of(row.get("kind", "flagos")),
                          fn=_CImpl(c_op, c_id, plugin), vendor=row.get("vendor") or None,
                          priority=row.get("priority", 0))
            _foreign[key] = impl
        return impl


def register_face(c_op: str, impl: OpImpl, into: Optional[fldispatch.registry.registering] = None,
                  plugin: Optional[str] = None) -> None:
    """Register `impl` in C under op name c_op, into a plugin's batch when given,
    else at once under the plugin record `plugin`."""
    try:
        kind = BackendImplKind(getattr(impl.kind, "value", impl.kind)).value
    except ValueError:
        raise ValueError(f"OpImpl '{impl.impl_id}' for op '{impl.op_name}': invalid kind "
                         f"{impl.kind!r} (valid: BackendImplKind.DEFAULT, VENDOR, REFERENCE)") from None
    priority = impl.priority
    if isinstance(priority, bool) or not isinstance(priority, numbers.Integral):
        raise TypeError(f"OpImpl '{impl.impl_id}' for op '{impl.op_name}': priority must be an "
                        f"int, not {type(priority).__name__} ({priority!r})")
    if isinstance(impl.op_name, str) and "\0" in impl.op_name:
        raise ValueError(f"OpImpl '{impl.impl_id}': op_name {impl.op_name!r} contains a NUL "
                         "character")
    c_id = _bridge.c_impl_id(kind, impl.impl_id)
    fn = adapt_upstream_fn(c_op, impl.fn, impl.impl_id)
    try:
        _bridge.register(c_op, c_id, kind, fn, impl.vendor, impl.priority,
                         impl.is_available, into=into, plugin=plugin)
    except (TypeError, ValueError) as e:
        # the core's message, naming the op as the caller knows it
        text = str(e).replace(f"'{c_op}'", f"'{impl.op_name}'")
        if "duplicate" in text.lower():
            raise ValueError(f"Duplicate impl_id '{impl.impl_id}' for op='{impl.op_name}': "
                             f"{text}") from e
        raise type(e)(text) from e
    owner = into.name if into is not None else plugin
    with _faces_lock:
        _faces[(c_op, c_id, owner or "")] = impl


class OpRegistry:
    """Where OpImpls are registered: fldispatch's registry, seen through a prefix."""

    def __init__(self, _root: bool = False) -> None:
        self._lock = threading.RLock()
        self._prefix = "" if _root else f"compat{next(_namespaces)}."
        self.version = 0

    @property
    def plugin_name(self) -> str:
        """The plugin record (`fldispatch list`) of what is registered through this registry."""
        return self._prefix.rstrip(".") or "vllm_fl_compat"

    # -- names in C ---------------------------------------------------------
    def c_op(self, op_name: str) -> str:
        """The name of `op_name` in the C registry."""
        return self._prefix + op_name

    def op_of(self, c_op: str) -> Optional[str]:
        """The name in this registry of C op `c_op`, or None when it is not in sight."""
        if self._prefix:
            return c_op[len(self._prefix):] if c_op.startswith(self._prefix) else None
        return None if c_op.startswith("compat") and "." in c_op else c_op

    def impl_for_c_id(self, op_name: str, c_id: str) -> OpImpl:
        return face(self.c_op(op_name), c_id, op_name)

    # -- upstream's API -----------------------------------------------------
    def register_impl(self, impl: OpImpl) -> None:
        """Register one implementation; a duplicate (op, impl_id) raises ValueError."""
        with self._lock:
            register_face(self.c_op(impl.op_name), impl, plugin=self.plugin_name)
            self.version += 1

    def register_many(self, impls: Sequence[OpImpl]) -> None:
        for impl in impls:
            self.register_impl(impl)

    def _rows(self) -> Dict[str, List[ImplRecord]]:
        out: Dict[str, List[ImplRecord]] = {}
        for row in _bridge.all_impls():
            op = self.op_of(row["op"])
            if op is not None:
                out.setdefault(op, []).append(row)
        return out

    def snapshot(self) -> OpRegistrySnapshot:
        return OpRegistrySnapshot({op: [face(self.c_op(op), r["impl_id"], op, r) for r in rows]
                                   for op, rows in self._rows().items()})

    def get_implementations(self, op_name: str) -> List[OpImpl]:
        c_op = self.c_op(op_name)
        return [face(c_op, r["impl_id"], op_name, r) for r in _bridge.impls_of(c_op)]

    def get_implementation(self, op_name: str, impl_id: str) -> Optional[OpImpl]:
        for impl in self.get_implementations(op_name):
            if impl.impl_id == impl_id:
                return impl
        return None

    def list_operators(self) -> List[str]:
        return list(self._rows())

    def clear(self) -> None:
        """Forget every record: the registry moves to a fresh prefix in C."""
        with self._lock:
            self._prefix = f"compat{next(_namespaces)}."
            self.version += 1
