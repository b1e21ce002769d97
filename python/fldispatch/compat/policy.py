# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.policy: SelectionPolicy and the policy functions, on the C policy.

A SelectionPolicy is a value (upstream's, field for field). Putting one in
force hands it to the C core: set_global_policy() sets the process-wide
policy, policy_context() and the with_*() helpers push a scoped override on
the calling thread, and get_policy() reads back what the core has in force on
this thread. One policy engine serves C callers, fldispatch's own Python API
and this module alike.

reset_global_policy() drops the global policy; the environment and the
platform file are read again on the next use (as upstream, lazily: a test that
patches os.environ after the reset sees its values).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from . import _bridge

__all__ = [
    "PREFER_DEFAULT", "PREFER_VENDOR", "PREFER_REFERENCE", "VALID_PREFER_VALUES",
    "SelectionPolicy", "PolicyManager", "get_policy", "get_policy_epoch", "bump_policy_epoch",
    "set_global_policy", "reset_global_policy", "policy_from_env", "policy_from_config",
    "policy_context", "with_strict_mode", "with_preference", "with_allowed_vendors",
    "with_denied_vendors",
]

PREFER_DEFAULT = "flagos"
PREFER_VENDOR = "vendor"
PREFER_REFERENCE = "reference"
VALID_PREFER_VALUES = frozenset({PREFER_DEFAULT, PREFER_VENDOR, PREFER_REFERENCE})

_ORDERS = {
    PREFER_DEFAULT: ["flagos", "vendor", "reference"],
    PREFER_VENDOR: ["vendor", "flagos", "reference"],
    PREFER_REFERENCE: ["reference", "flagos", "vendor"],
}


@dataclass(frozen=True)
class SelectionPolicy:
    """Which implementation kinds to prefer, strictness, per-op orders, vendor lists."""

    prefer: str = PREFER_DEFAULT
    strict: bool = False
    per_op_order: Tuple[Tuple[str, Tuple[str, ...]], ...] = field(default_factory=tuple)
    deny_vendors: FrozenSet[str] = field(default_factory=frozenset)
    allow_vendors: Optional[FrozenSet[str]] = None

    def __post_init__(self) -> None:
        if self.prefer not in VALID_PREFER_VALUES:
            raise ValueError(f"Invalid prefer value: '{self.prefer}'. Must be one of: "
                             f"{', '.join(sorted(VALID_PREFER_VALUES))}")
        # As upstream's configuration reads them: an order given as one string is
        # 'a|b', a vendor list given as one string is comma-separated.
        per_op = tuple((op, _tokens(op, tokens)) for op, tokens in self.per_op_order)
        object.__setattr__(self, "per_op_order", per_op)
        object.__setattr__(self, "deny_vendors", _vendors("deny_vendors", self.deny_vendors))
        if self.allow_vendors is not None:
            object.__setattr__(self, "allow_vendors",
                               _vendors("allow_vendors", self.allow_vendors))

    @classmethod
    def from_dict(cls, prefer: str = PREFER_DEFAULT, strict: bool = False,
                  per_op_order: Optional[Mapping[str, str | Iterable[str]]] = None,
                  deny_vendors: str | Iterable[str] | None = None,
                  allow_vendors: str | Iterable[str] | None = None) -> "SelectionPolicy":
        per_op = tuple((op, _tokens(op, tokens))
                       for op, tokens in sorted((per_op_order or {}).items()))
        allow = _vendors("allow_vendors", allow_vendors) if allow_vendors else None
        return cls(prefer=prefer.lower(), strict=bool(strict), per_op_order=per_op,
                   deny_vendors=_vendors("deny_vendors", deny_vendors or ()),
                   allow_vendors=allow or None)

    @property
    def per_op_order_dict(self) -> Dict[str, List[str]]:
        return {op: list(tokens) for op, tokens in self.per_op_order}

    def get_per_op_order(self, op_name: str) -> Optional[List[str]]:
        for op, tokens in self.per_op_order:
            if op == op_name:
                return list(tokens)
        return None

    def get_default_order(self) -> List[str]:
        return list(_ORDERS[self.prefer])

    def is_vendor_allowed(self, vendor_name: str) -> bool:
        if vendor_name in self.deny_vendors:
            return False
        return self.allow_vendors is None or vendor_name in self.allow_vendors

    def fingerprint(self) -> str:
        parts = [f"prefer={self.prefer}", f"st={int(self.strict)}"]
        if self.allow_vendors:
            parts.append("allow=" + ",".join(sorted(self.allow_vendors)))
        if self.deny_vendors:
            parts.append("deny=" + ",".join(sorted(self.deny_vendors)))
        if self.per_op_order:
            parts.append("per=" + ";".join(f"{op}={'|'.join(t)}" for op, t in self.per_op_order))
        return ";".join(parts)

    def __hash__(self) -> int:
        return hash((self.prefer, self.strict, self.per_op_order, self.deny_vendors,
                     self.allow_vendors))

    # -- to and from the core ------------------------------------------------
    def _fields(self) -> Tuple[str, bool, Dict[str, List[str]], Optional[List[str]], List[str]]:
        return (self.prefer, self.strict, self.per_op_order_dict,
                sorted(self.allow_vendors) if self.allow_vendors is not None else None,
                sorted(self.deny_vendors))


def _tokens(op: str, tokens: str | Iterable[str]) -> Tuple[str, ...]:
    """A per-op order as a tuple of tokens: a str is 'a|b'; a token holding one
    of the core's separators is refused (the core would split it)."""
    if isinstance(tokens, str):
        return tuple(t.strip() for t in tokens.split("|") if t.strip())
    out = tuple(tokens)
    for token in out:
        if not isinstance(token, str) or any(sep in token for sep in "|;,="):
            raise ValueError(f"SelectionPolicy: per_op_order[{op!r}]: token {token!r} is not one "
                             "token (a str without '|', ';', ',' or '='); give an order as a "
                             "list of tokens or as one string 'a|b'")
    return out


def _vendors(field_name: str, vendors: str | Iterable[str]) -> FrozenSet[str]:
    """A vendor list as a frozenset of names: a str is comma-separated; a name
    holding a ',' is refused (the core would take it for two)."""
    if isinstance(vendors, str):
        return frozenset(v.strip() for v in vendors.split(",") if v.strip())
    out = frozenset(vendors)
    for name in out:
        if not isinstance(name, str) or "," in name:
            raise ValueError(f"SelectionPolicy: {field_name}: vendor name {name!r} is not one "
                             "name (a str without ','); give the vendors as separate names or "
                             "as one comma-separated string")
    return out


def parse_described(text: str) -> SelectionPolicy:
    """A SelectionPolicy from the core's one-line description of a policy.

    The line reads 'prefer=P;strict=0|1[;allow=a,b][;deny=a,b]...[;per=op=t|t;op2=t]'.
    """
    head, _, per = text.partition(";per=")
    fields = dict(part.split("=", 1) for part in head.split(";") if "=" in part)
    per_op = {}
    for item in filter(None, per.split(";")):
        op, _, tokens = item.partition("=")
        per_op[op] = tokens.split("|") if tokens else []
    allow = fields.get("allow")
    return SelectionPolicy.from_dict(
        prefer=fields.get("prefer", PREFER_DEFAULT), strict=fields.get("strict") == "1",
        per_op_order=per_op,
        deny_vendors=set(filter(None, fields.get("deny", "").split(","))),
        allow_vendors=set(allow.split(",")) if allow else None)


class PolicyManager:
    """The process's policy state as upstream shapes it: epochs over the C policy."""

    _instance: Optional["PolicyManager"] = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self._reset_pending = False

    @classmethod
    def get_instance(cls) -> "PolicyManager":
        if cls._instance is None:
            with cls._instance_lock:
                if cls._instance is None:
                    cls._instance = cls()
        return cls._instance

    def get_policy_epoch(self) -> int:
        return self._epoch

    def bump_policy_epoch(self) -> int:
        with self._lock:
            self._epoch += 1
            return self._epoch

    def sync(self) -> None:
        """Apply a pending reset: read the environment and files now."""
        if self._reset_pending:
            with self._lock:
                if self._reset_pending:
                    _bridge.reset_global()
                    self._reset_pending = False

    def get_policy(self) -> SelectionPolicy:
        self.sync()
        return parse_described(_bridge.describe())

    def set_global_policy(self, policy: SelectionPolicy) -> SelectionPolicy:
        self.sync()
        old = parse_described(_bridge.describe())
        _bridge.set_global(*policy._fields())
        self._reset_pending = False
        self.bump_policy_epoch()
        return old

    def reset_global_policy(self) -> None:
        self._reset_pending = True
        self.bump_policy_epoch()

    def create_policy_context(self, policy: SelectionPolicy) -> "_PolicyContext":
        return _PolicyContext(self, policy)


class _PolicyContext:
    """A scoped override putting a whole SelectionPolicy in force on this thread."""

    def __init__(self, manager: PolicyManager, policy: SelectionPolicy) -> None:
        self._manager = manager
        self._policy = policy
        self._scopes = threading.local()

    def __enter__(self) -> "_PolicyContext":
        self._manager.sync()
        scope = _bridge.scoped_whole(*self._policy._fields())
        scope.__enter__()
        stack = getattr(self._scopes, "stack", None)
        if stack is None:
            stack = self._scopes.stack = []
        stack.append(scope)
        self._manager.bump_policy_epoch()
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        stack = getattr(self._scopes, "stack", None)
        if not stack:
            import fldispatch

            raise fldispatch.StateError(
                "policy_context: leaving a block on a thread that did not enter it (the "
                "override is thread-local)")
        stack.pop().__exit__(exc_type, exc, tb)
        self._manager.bump_policy_epoch()


def _mgr() -> PolicyManager:
    return PolicyManager.get_instance()


def get_policy_epoch() -> int:
    return _mgr().get_policy_epoch()


def bump_policy_epoch() -> int:
    return _mgr().bump_policy_epoch()


def get_policy() -> SelectionPolicy:
    """The policy in force on this thread (global, then scoped overrides)."""
    return _mgr().get_policy()


def set_global_policy(policy: SelectionPolicy) -> SelectionPolicy:
    """Make `policy` the process-wide policy; returns the one it replaces."""
    return _mgr().set_global_policy(policy)


def reset_global_policy() -> None:
    """Back to what the environment and the platform file say (read at next use)."""
    _mgr().reset_global_policy()


def policy_from_env() -> SelectionPolicy:
    """The policy the environment and files give, as the core reads them."""
    _bridge.reset_global()
    return parse_described(_bridge.describe())


def policy_from_config(config_path: str) -> SelectionPolicy:
    """The SelectionPolicy a YAML policy file describes (not put in force).

    Read by the core's reader (the file as a scope of this thread, described
    and left), with its checks: an unknown key or a bad value raises
    fldispatch.ConfigError naming file:line:column.
    """
    import os

    if not os.path.exists(config_path):
        raise FileNotFoundError(f"Config file not found: {config_path}")
    return parse_described(_bridge.describe_file(config_path))


def policy_context(policy: SelectionPolicy) -> _PolicyContext:
    return _PolicyContext(_mgr(), policy)


def _derived(**changes: Any) -> SelectionPolicy:
    cur = get_policy()
    fields: Dict[str, Any] = dict(prefer=cur.prefer, strict=cur.strict, per_op_order=cur.per_op_order_dict,
                  deny_vendors=set(cur.deny_vendors),
                  allow_vendors=set(cur.allow_vendors) if cur.allow_vendors else None)
    fields.update(changes)
    return SelectionPolicy.from_dict(**fields)


def with_strict_mode() -> _PolicyContext:
    """The current policy with strict=True, for a block."""
    return policy_context(_derived(strict=True))


def with_preference(prefer: str) -> _PolicyContext:
    """The current policy preferring `prefer` (flagos, vendor, reference), for a block."""
    return policy_context(_derived(prefer=prefer))


def with_allowed_vendors(*vendors: str) -> _PolicyContext:
    """The current policy with its allow list replaced by `vendors`, for a block."""
    return policy_context(_derived(allow_vendors=set(vendors)))


def with_denied_vendors(*vendors: str) -> _PolicyContext:
    """The current policy with `vendors` added to its deny list, for a block."""
    return policy_context(_derived(deny_vendors=set(get_policy().deny_vendors) | set(vendors)))
