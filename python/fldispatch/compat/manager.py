# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.manager: OpManager over fldispatch's C selection and call path.

resolve() asks the C core which implementation the op resolves to under the
policy in force on this thread and hands back that OpImpl's fn; call() calls
the op through the core, which runs the chain with fallback, keeps the failure
memory and honours strictness. The manager keeps no selection logic of its
own: its cache only remembers which fn the core named, keyed by the policy's
fingerprint, the manager's epoch and the registry's version.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, List, Optional, Set, Tuple

import fldispatch
from fldispatch.json_types import Explanation

from . import io_dumper as iodump
from . import _bridge
from .convention import UPSTREAM_OPS, call_upstream, is_upstream_call
from .policy import PolicyManager, get_policy
from .registry import OpRegistry, _CImpl
from .types import OpImpl

__all__ = ["OpManager", "get_default_manager", "reset_default_manager"]

# The core's call by name; the manager calls it directly once initialised
# (fldispatch.call_op's own first-use check is ensure_initialized's).
_c_call_op = fldispatch._C.call_op
_policies = PolicyManager.get_instance()
# This process's id, kept by a fork handler rather than asked at every call.
_pid = os.getpid()


def _after_fork() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork)


@dataclass
class _OpManagerState:
    init_pid: int = -1
    initialized: bool = False
    policy_epoch: int = 0


class OpManager:
    """Resolves and calls ops of one registry through the C core."""

    def __init__(self, registry: Optional[OpRegistry] = None) -> None:
        self._registry = registry if registry is not None else OpRegistry()
        self._state = _OpManagerState()
        self._lock = threading.RLock()
        self._dispatch_cache: Dict[Tuple[str, str, int, int], OpImpl] = {}
        # Entries written here by hand are reported by get_failed_impls();
        # the failures the core records are read from the core.
        self._failed_impls: Dict[str, Set[str]] = {}

    @property
    def registry(self) -> OpRegistry:
        return self._registry

    @property
    def policy_epoch(self) -> int:
        return self._state.policy_epoch

    # -- state --------------------------------------------------------------
    def ensure_initialized(self) -> None:
        """Load the core (its plugins, the policy) and fldispatch's Python plugins, once
        per process."""
        state = self._state
        if state.initialized and state.init_pid == _pid:
            return
        with self._lock:
            if state.initialized and state.init_pid == _pid:
                return
            _bridge.ensure_plugins()
            state.initialized = True
            state.init_pid = _pid
            state.policy_epoch += 1

    def bump_policy_epoch(self) -> None:
        """Forget the cache and the failure memory of this registry's ops."""
        with self._lock:
            self._state.policy_epoch += 1
            self._dispatch_cache.clear()
            self._failed_impls.clear()
            self._clear_core_failures(None)

    def _clear_core_failures(self, op_name: Optional[str]) -> None:
        names = [op_name] if op_name is not None else self._registry.list_operators()
        for name in names:
            c_op = self._registry.c_op(name)
            if _bridge.op_exists(c_op):
                _bridge.clear_failed(c_op)

    def clear_failed_impls(self, op_name: Optional[str] = None) -> None:
        with self._lock:
            if op_name is None:
                self._failed_impls.clear()
            else:
                self._failed_impls.pop(op_name, None)
            self._clear_core_failures(op_name)

    def get_failed_impls(self, op_name: Optional[str] = None) -> Dict[str, Set[str]]:
        """{op: {impl_id}}: the implementations the core skips after a failure."""
        out: Dict[str, Set[str]] = {op: set(ids) for op, ids in self._failed_impls.items()}
        for c_op, c_ids in _bridge.failed_impls().items():
            op = self._registry.op_of(c_op)
            if op is None:
                continue
            for c_id in c_ids:
                impl = self._registry.impl_for_c_id(op, c_id)
                out.setdefault(op, set()).add(impl.impl_id if impl else c_id)
        if op_name is not None:
            return {op_name: out[op_name]} if op_name in out else {}
        return out

    # -- selection ----------------------------------------------------------
    def _scope(self, op_name: str) -> ContextManager[object]:
        """Carry a per-op order of the policy over to this registry's name in C."""
        c_op = self._registry.c_op(op_name)
        if c_op == op_name:
            return contextlib.nullcontext()
        order = get_policy().get_per_op_order(op_name)
        if not order:
            return contextlib.nullcontext()
        return _bridge.scoped_fields(per_op={c_op: order})

    def _explain(self, op_name: str) -> Explanation:
        self.ensure_initialized()
        PolicyManager.get_instance().sync()
        c_op = self._registry.c_op(op_name)
        try:
            with self._scope(op_name):
                return _bridge.explain(c_op)
        except fldispatch.NotFoundError:
            raise RuntimeError(f"No available implementation for op='{op_name}'. "
                               f"Registered: []") from None

    def _impl_of(self, op_name: str, c_id: str, info: Explanation) -> OpImpl:
        return self._registry.impl_for_c_id(op_name, c_id)

    def _no_choice(self, op_name: str, info: Explanation) -> RuntimeError:
        rejected = [r["impl_id"] for r in info.get("rejected", [])]
        if not rejected:
            return RuntimeError(f"No available implementation for op='{op_name}'. Registered: []")
        if get_policy().strict:
            return RuntimeError(f"No implementation available for op='{op_name}' under strict "
                                f"policy. Candidates: {rejected}")
        return RuntimeError(f"No implementation selected for op='{op_name}'. Candidates: "
                            f"{rejected}, Order: {info.get('order')}")

    def _resolve_impl(self, op_name: str) -> OpImpl:
        self.ensure_initialized()
        PolicyManager.get_instance().sync()
        key = (op_name, _bridge.describe(), self._state.policy_epoch, self._registry.version)
        impl = self._dispatch_cache.get(key)
        if impl is not None:
            return impl
        info = self._explain(op_name)
        selected = info["selected"]
        if not selected:
            raise self._no_choice(op_name, info)
        impl = self._impl_of(op_name, selected, info)
        with self._lock:
            self._dispatch_cache[key] = impl
        return impl

    def resolve(self, op_name: str) -> Callable[..., Any]:
        """The fn the core selects for `op_name` now."""
        return self._resolve_impl(op_name).fn

    def resolve_candidates(self, op_name: str) -> List[OpImpl]:
        """Every implementation the policy allows, in the order the core tries them."""
        info = self._explain(op_name)
        if not info.get("candidates"):
            raise self._no_choice(op_name, info)
        return [self._impl_of(op_name, c_id, info) for c_id in info["candidates"]]

    def get_selected_impl_id(self, op_name: str) -> str:
        return self._resolve_impl(op_name).impl_id

    def _upstream_fns(self, op_name: str, device: str) -> List[Tuple[Optional[Callable[..., Any]], bool]]:
        """(fn, strict) of op_name's candidates on device in the core's order: the
        upstream implementation's fn, or None for one the core runs itself."""
        c_op = self._registry.c_op(op_name)
        with self._scope(op_name):
            info = fldispatch.explain(c_op, device)
        strict = get_policy().strict
        out: List[Tuple[Optional[Callable[..., Any]], bool]] = []
        for name in info.get("candidates", []):
            impl = self._registry.impl_for_c_id(op_name, name)
            out.append((None if isinstance(impl.fn, _CImpl) else impl.fn, strict))
        return out

    # -- calls --------------------------------------------------------------
    def call(self, op_name: str, *args: Any, **kwargs: Any) -> Any:
        """Call `op_name` through the core: selection, fallback, failure memory."""
        state = self._state
        if not state.initialized or state.init_pid != _pid:
            self.ensure_initialized()
        if _policies._reset_pending:
            _policies.sync()
        if op_name in UPSTREAM_OPS and is_upstream_call(op_name, args):
            return call_upstream(op_name, args, dict(kwargs), self.call, self._upstream_fns)
        prefix = self._registry._prefix
        try:
            if not prefix and not iodump._enabled:
                return _c_call_op(op_name, *args, **kwargs)
            c_op = prefix + op_name
            with self._scope(op_name):
                if iodump._enabled:
                    return iodump.call_recorded(
                        op_name, lambda *a, **k: _bridge.call(c_op, a, k), args, kwargs)
                return _bridge.call(c_op, args, kwargs)
        except fldispatch.NotFoundError as e:
            raise RuntimeError(f"No available implementation for op='{op_name}'. "
                               f"Registered: []") from e
        except fldispatch.InvalidArgumentError as e:
            # The call's own arguments, refused before any implementation ran: the
            # library's message names op and argument; the producer's exception behind it
            # (PyTorch's DLPack export, with its C++ backtrace) adds nothing.
            raise type(e)(str(e)) from None
        except fldispatch.Error as e:
            cause = e.__cause__
            if get_policy().strict and isinstance(cause, Exception):
                # The implementation's own exception, as it raised it (its
                # __cause__ untouched), as upstream's strict mode raises it.
                raise cause  # noqa: B904
            if isinstance(e, fldispatch.UnavailableError):
                raise RuntimeError(f"No available implementation for op='{op_name}': {e}") from e
            raise RuntimeError(f"All implementation(s) failed for op='{op_name}'. "
                               f"Last error: {cause if cause is not None else e}") from e


_default_manager: Optional[OpManager] = None
_default_lock = threading.Lock()
_root_registry: Optional[OpRegistry] = None


def get_default_manager() -> OpManager:
    """The process's manager; its registry is fldispatch's own op names."""
    global _default_manager, _root_registry
    if _default_manager is None:
        with _default_lock:
            if _default_manager is None:
                if _root_registry is None:
                    _root_registry = OpRegistry(_root=True)
                    registry = _root_registry
                else:
                    registry = OpRegistry()
                _default_manager = OpManager(registry)
    return _default_manager


def reset_default_manager() -> None:
    """Drop the default manager; the next one starts with an empty registry."""
    global _default_manager
    with _default_lock:
        _default_manager = None
