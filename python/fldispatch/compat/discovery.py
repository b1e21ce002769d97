# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.discovery: Python backend packages found by entry point or module name.

A backend package exposes `register(registry)` or `vllm_fl_register(registry)`
(or is itself that callable), as upstream's plugins do. It is found through
the entry point group `vllm_fl.plugin` and through the module names listed
in VLLM_FL_PLUGIN_MODULES (entries that are paths, `.so` files, are the C
core's to load and are passed over here).

Loading is all-or-nothing per package: its register function fills a staging
list, and only when it returns are the records registered; one that raises
leaves nothing behind and is recorded as failed, with the reason logged. A
package that fldispatch discovers on first use and that offers one bad
implementation (an invalid name, a non-callable fn, an impl_id twice) loses
that implementation alone, with its reason logged (rejected_impls()).
"""

from __future__ import annotations

import importlib
import os
import re
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Set, Tuple, cast

import fldispatch

from .logger_manager import get_logger
from . import _bridge
from .registry import OpRegistry, register_face
from .types import OpImpl

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["PLUGIN_GROUP", "PLUGIN_MODULES_ENV", "discover_plugins", "discover_from_entry_points",
           "discover_from_env_modules", "get_discovered_plugins", "clear_discovered_plugins",
           "rejected_impls"]

PLUGIN_GROUP = "vllm_fl.plugin"
PLUGIN_MODULES_ENV = "VLLM_FL_PLUGIN_MODULES"

log = get_logger("vllm_fl.dispatch.discovery")
_discovered_plugins: List[Tuple[str, str, bool]] = []


def _get_entry_points() -> List[EntryPoint]:
    from importlib.metadata import entry_points

    try:
        return list(entry_points(group=PLUGIN_GROUP))
    except Exception as e:  # a broken distribution's metadata
        log.warning("cannot read entry points of group %s: %s", PLUGIN_GROUP, e)
        return []


def _call_register_function(obj: Any, registry: Any, source_name: str) -> bool:
    """Run a plugin's register function on `registry`; False (logged) when it fails or
    is missing."""
    if callable(obj) and not isinstance(obj, type):
        fn = obj
    else:
        fn = getattr(obj, "vllm_fl_register", None) or getattr(obj, "register", None)
        if not callable(fn):
            log.debug("%s has no register() or vllm_fl_register()", source_name)
            return False
    try:
        fn(registry)
    except Exception as e:
        log.error("plugin %s: registration raised %s: %s", source_name, type(e).__name__, e)
        return False
    log.info("registered plugin %s", source_name)
    return True


class _Staging:
    """What a plugin's register function sees: records are kept until it returns."""

    def __init__(self, target: OpRegistry) -> None:
        self._target = target
        self.impls: List[OpImpl] = []

    def register_impl(self, impl: OpImpl) -> None:
        self.impls.append(impl)

    def register_many(self, impls: Iterable[OpImpl]) -> None:
        self.impls.extend(impls)

    def __getattr__(self, name: str) -> Any:  # reading methods answer from the real registry
        return getattr(self._target, name)


def _load(obj: Any, registry: Any, source_name: str) -> bool:
    if not isinstance(registry, OpRegistry):
        return _call_register_function(obj, registry, source_name)
    staging = _Staging(registry)
    if not _call_register_function(obj, staging, source_name):
        return False
    seen = set()
    for impl in staging.impls:
        key = (impl.op_name, impl.impl_id)
        if key in seen or registry.get_implementation(*key) is not None:
            log.error("plugin %s rejected: duplicate impl_id '%s' for op='%s'", source_name,
                      impl.impl_id, impl.op_name)
            return False
        seen.add(key)
    try:
        registry.register_many(staging.impls)
    except Exception as e:
        log.error("plugin %s: registering its implementations failed: %s", source_name, e)
        return False
    return True


def discover_from_entry_points(registry: Any) -> int:
    loaded = 0
    for ep in _get_entry_points():
        name = getattr(ep, "name", str(ep))
        try:
            ok = _load(ep.load(), registry, f"entry_point:{name}")
        except Exception as e:
            log.error("plugin entry point %s cannot be loaded: %s: %s", name, type(e).__name__, e)
            ok = False
        _discovered_plugins.append((name, "entry_point", ok))
        loaded += ok
    return loaded


def _is_path(entry: str) -> bool:
    return "/" in entry or entry.endswith(".so")


def discover_from_env_modules(registry: Any) -> int:
    names = [m.strip() for m in os.environ.get(PLUGIN_MODULES_ENV, "").split(",")]
    loaded = 0
    for name in names:
        if not name or _is_path(name):
            continue
        try:
            ok = _load(importlib.import_module(name), registry, f"env_module:{name}")
        except Exception as e:
            log.error("plugin module %s (%s) cannot be imported: %s: %s", name, PLUGIN_MODULES_ENV,
                      type(e).__name__, e)
            ok = False
        _discovered_plugins.append((name, "env_module", ok))
        loaded += ok
    return loaded


def discover_plugins(registry: Any) -> int:
    """Load every plugin of the entry point group and of VLLM_FL_PLUGIN_MODULES into `registry`."""
    if registry is None:
        log.warning("no registry given: plugin discovery skipped")
        return 0
    return discover_from_entry_points(registry) + discover_from_env_modules(registry)


def get_discovered_plugins() -> List[Tuple[str, str, bool]]:
    """(name, source, loaded) for each plugin tried: those fldispatch found on first
    use (entry points, VLLM_FL_PLUGIN_MODULES), then those discover_plugins() loaded."""
    return _bridge.discovered() + list(_discovered_plugins)


def clear_discovered_plugins() -> None:
    """Forget what discover_plugins() recorded (fldispatch's own record stays)."""
    _discovered_plugins.clear()


class _PluginView:
    """The registry an upstream plugin found by fldispatch registers into.

    fldispatch loads the vllm_fl.plugin entry points and the modules of
    VLLM_FL_PLUGIN_MODULES itself, on first use, each in an all-or-nothing
    batch. This view hands the plugin's OpImpl records to that batch (ids
    made acceptable to the core as for OpRegistry) and remembers the OpImpl
    objects, so the default manager's resolve() returns their own fn.
    """

    def __init__(self, batch: fldispatch.registry.registering) -> None:
        self._batch = batch
        self._seen: Set[Tuple[object, object]] = set()

    def register_impl(self, impl: OpImpl) -> None:
        """Stage one implementation; a bad one is rejected alone, with its reason
        logged and kept (rejected_impls()), and the package's others stay."""
        op = getattr(impl, "op_name", None)
        impl_id = getattr(impl, "impl_id", None)
        plugin = getattr(self._batch, "name", "?")
        try:
            why = _record_problem(impl)
            if why is None and (op, impl_id) in self._seen:
                why = (f"duplicate impl_id '{impl_id}' for op '{op}' (registered twice by "
                       f"plugin '{plugin}')")
            if why is None:
                register_face(cast(str, op), impl, into=self._batch)  # a str: _record_problem checked it
        except (TypeError, ValueError, AttributeError) as e:
            why = str(e)
        if why is not None:
            log.error("plugin %s: implementation '%s' of op '%s' rejected: %s", plugin, impl_id,
                      op, why)
            _rejected_impls.append((plugin, op, impl_id, why))
            return
        self._seen.add((op, impl_id))

    def register_many(self, impls: Iterable[OpImpl]) -> None:
        for impl in impls:
            self.register_impl(impl)

    def __getattr__(self, name: str) -> Any:  # the reading methods: the default registry's
        from .manager import get_default_manager

        return getattr(get_default_manager().registry, name)


_NAME = re.compile(r"[A-Za-z0-9_.]+\Z")
_VENDOR = re.compile(r"[A-Za-z0-9_.-]+\Z")
_rejected_impls: List[Tuple[str, Any, Any, str]] = []


def _record_problem(impl: object) -> Optional[str]:
    """What the core would refuse in this record (which would reject the whole
    package at commit), or None."""
    op = getattr(impl, "op_name", None)
    if not isinstance(op, str) or not _NAME.match(op) or len(op) > 96:
        return f"invalid op name {op!r} (letters, digits, '_' and '.')"
    vendor = getattr(impl, "vendor", None)
    if vendor is not None and (not isinstance(vendor, str) or not _VENDOR.match(vendor)):
        return f"invalid vendor name {vendor!r} (letters, digits, '_', '.' and '-')"
    if not callable(getattr(impl, "fn", None)):
        return "fn is not callable"
    return None


def rejected_impls() -> List[Tuple[str, Any, Any, str]]:
    """(plugin, op, impl_id, reason) of each implementation a discovered package
    offered and that was rejected alone (the package's others are registered);
    op and impl_id are what the record held, not always a str."""
    return list(_rejected_impls)


def install_plugin_view() -> bool:
    return _bridge.set_plugin_registry_factory(_PluginView)
