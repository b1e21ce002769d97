# SPDX-License-Identifier: Apache-2.0
"""fldispatch's log lines in vLLM's log.

vLLM configures Python's logging for its own logger alone: the "vllm"
logger gets vLLM's handler and format (process name, level, time, file),
VLLM_LOGGING_LEVEL, and no propagation; the root logger is left as it is.
fldispatch's loggers ("fldispatch": the library's lines, from
fldispatch._logbridge; "fldispatch.vllm": which path each layer takes;
"fldispatch.prometheus": the counters on /metrics; ...) would be left to
Python's last resort: WARNING and above, bare, on stderr, and nothing at
all in vLLM's API server, where a module its OpenAI server imports
(SageMaker's model_hosting_container_standards) sets the root logger's
level to ERROR.

join() sets the "fldispatch" logger up as vLLM sets up its own: a handler
that hands each line to the "vllm" logger's handlers of the moment, vLLM's
level, no propagation. Every fldispatch line is then in vLLM's log, in
vLLM's format, at vLLM's level, whichever process logs it. The vLLM plugin
calls join() as it registers and after each time vLLM configures its
logging (vllm.logger.configure_logging). It joins only where
- vLLM has configured its logging: the "vllm" logger has handlers and does
  not propagate (VLLM_CONFIGURE_LOGGING=0 leaves it unconfigured);
- nothing handles the root logger: a program that configured logging
  itself (logging.basicConfig, dictConfig, a VLLM_LOGGING_CONFIG_PATH
  file with a root handler) keeps its routing;
- the "fldispatch" logger is as Python made it (no handler, no level,
  propagating) or as join() left it: a program's own setting wins.
Where these no longer hold at a later join(), what join() set is undone.

The library's own level (VLLM_FL_LOG_LEVEL) still decides first which of
its lines exist. Where that variable is set, the operator asked for the
library's lines at that level: they reach vLLM's handlers whatever
VLLM_LOGGING_LEVEL says (as vllm-plugin-FL's own logger, whose level
VLLM_FL_LOG_LEVEL sets); so VLLM_FL_LOG_LEVEL=INFO shows which
implementation serves each op, and with DEBUG, VLLM_FL_DISPATCH_DEBUG=1's
lines. The plugin's Python lines keep vLLM's level.

The path lines (info()) are INFO. vLLM loads its plugins in its driver
before it configures its logging, and nothing would show an INFO line
logged then: info() holds such a line and logs it as vLLM configures its
logging.
"""

import logging
import os
import sys

from . import vllm_patches
from .vllm_state import DECIDED

#: The logger join() sets up: the parent of every fldispatch logger.
PACKAGE_LOGGER = "fldispatch"
#: The logger whose handlers vLLM configures.
VLLM_LOGGER = "vllm"
#: The library's level: where set, its lines show at that level.
LIBRARY_LEVEL_VARIABLE = "VLLM_FL_LOG_LEVEL"

# The path lines: the vLLM plugin's (fldispatch.vllm), where docs/vllm.md
# says operators find them.
logger = logging.getLogger("fldispatch.vllm")


class IntoVllmLog(logging.Handler):
    """Hands each record to the handlers the "vllm" logger has when the
    record comes, as that logger would: at its level, and each handler at
    its own. The library's records (the package logger's own) at
    library_level or above pass both."""

    library_level = None

    def emit(self, record):
        theirs = logging.getLogger(VLLM_LOGGER)
        bar = self.library_level if record.name == PACKAGE_LOGGER else None
        if bar is None and not theirs.isEnabledFor(record.levelno):
            return
        for handler in theirs.handlers:
            if record.levelno >= (handler.level if bar is None else min(handler.level, bar)):
                handler.handle(record)


def library_level():
    """VLLM_FL_LOG_LEVEL's level as logging numbers it, or None where it is
    not set (the library refuses a value it does not know as it starts)."""
    level = logging.getLevelName(os.environ.get(LIBRARY_LEVEL_VARIABLE, "").strip().upper())
    return level if isinstance(level, int) else None


# what join() set on the package logger: (handler, level), or None
_joined = None


def join():
    """Routes fldispatch's loggers into vLLM's log where the module's
    conditions hold, and undoes that where they no longer do. Returns
    whether fldispatch's lines go to vLLM's handlers."""
    global _joined
    ours = logging.getLogger(PACKAGE_LOGGER)
    theirs = logging.getLogger(VLLM_LOGGER)
    if _joined is not None and not _as_joined(ours):
        _joined = None  # the program has set the logger up since: it is the program's
    if _joined is None and (ours.handlers or ours.level != logging.NOTSET or not ours.propagate):
        return False
    if theirs.handlers and not theirs.propagate and not logging.getLogger().handlers:
        handler = _joined[0] if _joined is not None else IntoVllmLog()
        handler.library_level = library_level()
        level = theirs.getEffectiveLevel()
        if handler.library_level is not None:
            level = min(level, handler.library_level)
        if _joined is None:
            ours.addHandler(handler)
            ours.propagate = False
        ours.setLevel(level)
        _joined = (handler, level)
        return True
    if _joined is not None:
        ours.removeHandler(_joined[0])
        ours.setLevel(logging.NOTSET)
        ours.propagate = True
        _joined = None
    return False


def _as_joined(ours):
    handler, level = _joined
    return ours.handlers == [handler] and ours.level == level and not ours.propagate


def follow_vllms_configuration():
    """join() now, and again (with the held lines logged) each time vLLM
    configures its logging; where vLLM's logger module is loaded."""
    vllm_logger = sys.modules.get("vllm.logger")
    if getattr(vllm_logger, "configure_logging", None) is not None:
        vllm_patches.patch_configure_logging(vllm_logger, _after_vllm_configures)
    join()


def _after_vllm_configures():
    join()
    held = list(DECIDED.held)
    DECIDED.held.clear()
    for where, msg, args in held:
        _log(where, msg, args)


def info(msg, *args):
    """Logs a path line at INFO on "fldispatch.vllm", from the caller's file
    and line. Held until vLLM configures its logging where vLLM's logger
    module is loaded, vLLM has not configured it yet, and nothing handles
    the line."""
    caller = sys._getframe(1)
    where = (caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)
    if not logger.hasHandlers() and _hold(where, msg, args):
        return
    _log(where, msg, args)


def _hold(where, msg, args):
    vllm_logger = sys.modules.get("vllm.logger")
    if (getattr(vllm_logger, "configure_logging", None) is None
            or logging.getLogger(VLLM_LOGGER).handlers):
        return False
    vllm_patches.patch_configure_logging(vllm_logger, _after_vllm_configures)
    DECIDED.held.append((where, msg, args))
    return True


def _log(where, msg, args):
    if logger.isEnabledFor(logging.INFO):
        path, line, function = where
        logger.handle(logger.makeRecord(logger.name, logging.INFO, path, line, msg, args, None,
                                        function))
