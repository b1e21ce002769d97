# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.logger_manager: the dispatch loggers and their level.

The compatibility layer logs through Python's `logging` under the name
`vllm_fl.dispatch` (and children); the C core logs through its own log, whose
level VLLM_FL_LOG_LEVEL sets. set_log_level() sets both.
"""

from __future__ import annotations

import logging
from typing import Dict, Optional

from . import _bridge

__all__ = ["get_logger", "set_log_level"]

_loggers: Dict[str, logging.Logger] = {}


def get_logger(name: str = "vllm_fl.dispatch") -> logging.Logger:
    logger = _loggers.get(name)
    if logger is None:
        logger = _loggers[name] = logging.getLogger(name)
    return logger


def set_log_level(level: str, name: Optional[str] = None) -> None:
    """Set the level (DEBUG, INFO, WARNING, ERROR) of one logger, or of all and of the core."""
    value = getattr(logging, str(level).upper(), None)
    if not isinstance(value, int):
        raise ValueError(f"set_log_level: unknown level {level!r} "
                         "(valid: DEBUG, INFO, WARNING, ERROR, CRITICAL)")
    if name is not None:
        get_logger(name).setLevel(value)
        return
    get_logger().setLevel(value)
    for logger in _loggers.values():
        logger.setLevel(value)
    _bridge.set_log_level(str(level).upper())
