# SPDX-License-Identifier: Apache-2.0
"""The records of vllm_fl.dispatch.types: implementation kinds, priorities, OpImpl.

An OpImpl describes one implementation the way an upstream backend writes it
in its register_ops.py. Registering it (OpRegistry.register_impl) puts it into
fldispatch's registry, where the C core selects it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Optional, Set

__all__ = ["BackendImplKind", "BackendPriority", "OpImpl", "match_token"]


class BackendImplKind(str, Enum):
    """Kind of an implementation; the value is its policy token."""

    DEFAULT = "flagos"
    REFERENCE = "reference"
    VENDOR = "vendor"

    def __str__(self) -> str:
        return self.value


class BackendPriority:
    """The customary priorities; higher is chosen first within a token."""

    DEFAULT = 150
    VENDOR = 100
    REFERENCE = 50


@dataclass(frozen=True)
class OpImpl:
    """One implementation of one op (upstream's record, field for field)."""

    op_name: str
    impl_id: str
    kind: BackendImplKind
    fn: Callable[..., Any]
    vendor: Optional[str] = None
    priority: int = 0
    supported_dtypes: Optional[Set[str]] = None
    min_arch: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind == BackendImplKind.VENDOR and not self.vendor:
            raise ValueError(f"OpImpl with kind=VENDOR must specify vendor name: {self.impl_id}")

    def is_available(self) -> bool:
        """fn._is_available() when fn carries one (an exception counts as False), else True."""
        probe = getattr(self.fn, "_is_available", None)
        if not callable(probe):
            return True
        try:
            return bool(probe())
        except Exception:
            return False


def match_token(impl: OpImpl, token: str) -> bool:
    """Whether `impl` answers a policy token: flagos, reference, vendor, vendor:NAME, impl:ID."""
    if not token:
        return False
    head, sep, arg = token.partition(":")
    if not sep:
        try:
            return impl.kind == BackendImplKind(token)
        except ValueError:
            return False
    if head == "vendor":
        return impl.kind == BackendImplKind.VENDOR and impl.vendor == arg
    if head == "impl":
        return impl.impl_id == arg
    return False
