# SPDX-License-Identifier: Apache-2.0
"""vllm-plugin-FL's dispatch API (`vllm_fl.dispatch`) on fldispatch's C core.

    from fldispatch.compat import OpImpl, BackendImplKind, BackendPriority, call_op

An upstream backend package (a register_ops.py returning OpImpl records, a
`register(registry)` entry point) loads unmodified: its implementations go
into fldispatch's registry, beside those of the C plugins, and are selected,
called, fallen back from and remembered as failed by the C core under the one
policy that C callers and fldispatch's own Python API share.

The submodules mirror upstream's layout (types, registry, policy, manager,
discovery, logger_manager, io_dumper). `fldispatch.compat.alias.install()`
makes `import vllm_fl.dispatch...` resolve to them when the real vllm_fl is
not installed. See docs/porting-from-vllm-plugin-fl.md.
"""

import sys as _sys
from typing import Any as _Any, Callable as _Callable

from .. import iodump as io_dumper

# io_dumper.py runs once, as fldispatch.iodump (see there): this package's
# name for it is the same module object.
_sys.modules[__name__ + ".io_dumper"] = io_dumper

from .types import BackendImplKind, BackendPriority, OpImpl, match_token
from .registry import OpRegistry, OpRegistrySnapshot
from .policy import (
    PREFER_DEFAULT,
    PREFER_REFERENCE,
    PREFER_VENDOR,
    PolicyManager,
    SelectionPolicy,
    get_policy,
    get_policy_epoch,
    policy_context,
    policy_from_config,
    reset_global_policy,
    set_global_policy,
    with_allowed_vendors,
    with_denied_vendors,
    with_preference,
    with_strict_mode,
)
from . import manager as _manager
from .manager import OpManager, get_default_manager, reset_default_manager
from .discovery import (
    PLUGIN_GROUP,
    PLUGIN_MODULES_ENV,
    clear_discovered_plugins,
    discover_plugins,
    get_discovered_plugins,
)
from .discovery import install_plugin_view as _install_plugin_view
from .logger_manager import get_logger, set_log_level
from .io_dumper import disable_io_dump, enable_io_dump, io_dump_step, is_dump_enabled


# Upstream plugins that fldispatch discovers register through our OpRegistry view.
_install_plugin_view()


def call_op(op_name: str, *args: _Any, **kwargs: _Any) -> _Any:
    """Call `op_name` through the default manager (the C core's call path)."""
    return (_manager._default_manager or get_default_manager()).call(op_name, *args, **kwargs)


def resolve_op(op_name: str) -> _Callable[..., _Any]:
    """The fn the core selects for `op_name` now, under the policy in force."""
    return get_default_manager().resolve(op_name)


def clear_failed_impls(op_name: str | None = None) -> None:
    """Forget the failures the core remembers (of one op, or all)."""
    get_default_manager().clear_failed_impls(op_name)


def get_failed_impls(op_name: str | None = None) -> dict[str, set[str]]:
    """{op: {impl_id}}: implementations skipped after a failure."""
    return get_default_manager().get_failed_impls(op_name)


class CachedOp:
    """A callable for one op that follows policy changes (calls through the core)."""

    __slots__ = ("op_name",)

    def __init__(self, op_name: str) -> None:
        self.op_name = op_name

    def __call__(self, *args: _Any, **kwargs: _Any) -> _Any:
        return get_default_manager().call(self.op_name, *args, **kwargs)

    def __repr__(self) -> str:
        return f"CachedOp({self.op_name!r})"


__all__ = [
    "OpImpl", "BackendImplKind", "BackendPriority", "match_token", "OpRegistry",
    "OpRegistrySnapshot", "SelectionPolicy", "PolicyManager", "get_policy", "get_policy_epoch",
    "set_global_policy", "reset_global_policy", "policy_context", "policy_from_config",
    "with_strict_mode", "with_preference", "with_allowed_vendors", "with_denied_vendors",
    "PREFER_DEFAULT", "PREFER_VENDOR", "PREFER_REFERENCE", "OpManager", "get_default_manager",
    "reset_default_manager", "call_op", "resolve_op", "CachedOp", "clear_failed_impls",
    "get_failed_impls", "discover_plugins", "get_discovered_plugins", "clear_discovered_plugins",
    "PLUGIN_GROUP", "PLUGIN_MODULES_ENV", "get_logger", "set_log_level", "enable_io_dump",
    "disable_io_dump", "io_dump_step", "is_dump_enabled",
]
