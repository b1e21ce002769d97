# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.backends.base: Backend, the base of an upstream-style backend."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional

__all__ = ["Backend"]


class Backend(ABC):
    """A set of implementations that are usable together (one device, one library).

    A subclass says whether it can run here (is_available) and names itself;
    its methods are the functions its register_ops.py wraps in OpImpl records.
    """

    @abstractmethod
    def is_available(self) -> bool:
        """Whether this backend can run in this process (its library imports, its device
        is there)."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The backend's name."""

    @property
    def vendor(self) -> Optional[str]:
        """The vendor name for a vendor backend, else None."""
        return None
