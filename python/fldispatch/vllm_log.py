# SPDX-License-Identifier: Apache-2.0
"""fldispatch's log lines in vLLM's log.

vLLM configures Python's logging for its own logger alone: the "vllm"
logger gets vLLM's handler and format (process name, level, time, file),
VLLM_LOGGING_LEVEL, and no propagation; the root logger is left as it is.
fldispatch's loggers ("fldispatch": the library's lines, from
fldispatch._logbridge; "fldispatch.vllm": which path each layer takes;
"fldispatch.prometheus": the counters on /metrics; ...) would be left to
Python's last resort: WARNING and above, bare, on stderr, and nothing at
all in vLLM's API server once its server module is imported, since a
module it imports (SageMaker's model_hosting_container_standards) sets the
root logger's level to ERROR.

settle() sets the "fldispatch" logger up as vLLM sets up its own: a
handler that hands each line to the "vllm" logger's handlers of the
moment, vLLM's level, no propagation (JOINED). Every fldispatch line is
then in vLLM's log, in vLLM's format, at vLLM's level, whichever process
logs it. The vLLM plugin calls settle() as it registers and after each
time vLLM configures its logging (vllm.logger.configure_logging). It
joins only where
- vLLM has configured its logging: the "vllm" logger has handlers and does
  not propagate (VLLM_CONFIGURE_LOGGING=0 leaves it unconfigured);
- nothing handles the root logger: a program that configured logging
  itself (logging.basicConfig, dictConfig, a VLLM_LOGGING_CONFIG_PATH
  file with a root handler) keeps its routing;
- the "fldispatch" logger is as Python made it (no handler, no level,
  propagating) or as settle() left it: a program's own setting wins.
vLLM loads its plugins in its driver before it configures its logging.
There, while vLLM has not configured it and the rest holds, the logger
HOLDS the lines nothing would show (below WARNING: the layers' path
lines, the library's INFO lines) until vLLM configures it, and passes the
others to Python's last resort at once, as Python would (and as vLLM's
own lines of then are printed). Where none of this holds, a later
settle() undoes what an earlier one set.

With fldispatch.compat.alias installed, the library's lines go to
upstream's "vllm_fl.dispatch" logger instead, to which upstream's code
would have given a handler of its own: settle() sets that logger up the
same way, whether the alias came before the plugin registered (from a
sitecustomize, say) or after (settle() runs again as the alias switches
the library's logger), and leaves it as Python made it again once the
alias is gone.

The library's own level (VLLM_FL_LOG_LEVEL, fldispatch.set_log_level())
still decides first which of its lines exist. Where the variable is set, or
the program set the level, the library's lines at that level were asked
for: they reach vLLM's handlers whatever VLLM_LOGGING_LEVEL says (as
vllm-plugin-FL's own logger, whose level VLLM_FL_LOG_LEVEL sets); so
VLLM_FL_LOG_LEVEL=INFO shows which implementation serves each op, and with
DEBUG, VLLM_FL_DISPATCH_DEBUG=1's lines. The plugin's Python lines keep
vLLM's level.
"""

import logging
import os
import sys
from . import _logbridge, vllm_patches

#: The logger settle() sets up: the parent of every fldispatch logger.
PACKAGE_LOGGER = "fldispatch"
#: The logger whose handlers vLLM configures.
VLLM_LOGGER = "vllm"
#: The library's level: where set, its lines show at that level.
LIBRARY_LEVEL_VARIABLE = "VLLM_FL_LOG_LEVEL"
#: The most lines held until vLLM configures its logging (the rest dropped,
#: as Python's last resort drops them).
HELD_MAX = 1000

class IntoVllmLog(logging.Handler):
    """JOINED: hands each record to the handlers the "vllm" logger has when
    the record comes, as that logger would: at its level, and each handler
    at its own. The library's records (on _logbridge.logger_name itself) at
    library_level or above pass both."""

    library_level: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        theirs = logging.getLogger(VLLM_LOGGER)
        bar = self.library_level if record.name == _logbridge.logger_name else None
        if bar is None and not theirs.isEnabledFor(record.levelno):
            return
        for handler in theirs.handlers:
            if record.levelno >= (handler.level if bar is None else min(handler.level, bar)):
                handler.handle(record)


class HoldUntilVllmConfigures(logging.Handler):
    """HOLDS: keeps the records Python's last resort would drop (at most
    HELD_MAX) and hands it the others, as Python would."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        last = logging.lastResort
        if last is not None and record.levelno >= last.level:
            last.handle(record)
        elif len(self.records) < HELD_MAX:
            self.records.append(record)


def library_level() -> int | None:
    """The library's level as the program set it (fldispatch.set_log_level())
    or, where it has not, as VLLM_FL_LOG_LEVEL sets it, in logging's
    numbers; None where neither is set (the library refuses a value it does
    not know as it starts)."""
    if _logbridge.chosen_level is not None:
        return _logbridge.chosen_level
    level = logging.getLevelName(os.environ.get(LIBRARY_LEVEL_VARIABLE, "").strip().upper())
    return level if isinstance(level, int) else None


# what settle() set on each logger it set up: name -> (handler, level)
_set: dict[str, tuple[logging.Handler, int]] = {}


def joined_loggers() -> list[str]:
    """The loggers settle() sets up: the package logger, and, while
    fldispatch.compat.alias sends the library's lines to upstream's
    "vllm_fl.dispatch" (which upstream's own code would have set up), that
    one too."""
    names = [PACKAGE_LOGGER]
    library = _logbridge.logger_name
    if library != PACKAGE_LOGGER and not library.startswith(PACKAGE_LOGGER + "."):
        names.append(library)
    return names


def settle() -> str | None:
    """Sets the loggers of joined_loggers() up for the state of logging now
    (JOINED, HOLDS, or as Python made them), logging the held lines where
    it stops holding, and leaves a logger it set up before and no longer
    joins as Python made it. Returns "joined", "holds", or None where it
    leaves the package logger as it is (the program's, or Python's)."""
    hooked = _hook_vllms_configuration()
    if settle not in _logbridge.on_change:
        _logbridge.on_change.append(settle)  # the alias or the library's level, changed later
    theirs = logging.getLogger(VLLM_LOGGER)
    kind: type[IntoVllmLog] | type[HoldUntilVllmConfigures] | None = None
    if not logging.getLogger().handlers:
        if theirs.handlers and not theirs.propagate:
            kind = IntoVllmLog
        elif not theirs.handlers and hooked:
            kind = HoldUntilVllmConfigures
    wanted = joined_loggers()
    settled = {name: _settle_one(name, kind if name in wanted else None, theirs)
               for name in wanted + [name for name in _set if name not in wanted]}
    names: dict[type[logging.Handler] | None, str] = {IntoVllmLog: "joined",
                                                      HoldUntilVllmConfigures: "holds"}
    return names.get(kind) if settled[PACKAGE_LOGGER] else None


def _settle_one(name: str,
                kind: type[IntoVllmLog] | type[HoldUntilVllmConfigures] | None,
                theirs: logging.Logger) -> bool:
    """Sets one logger up as settle() decided (kind None: as Python made
    it); False where the logger is the program's, which it leaves as it is."""
    ours = logging.getLogger(name)
    mine = _set.get(name)
    if mine is not None and not (ours.handlers == [mine[0]] and ours.level == mine[1]
                                 and not ours.propagate):
        del _set[name]  # the program has set the logger up since: it is the program's
        mine = None
    if mine is None and (ours.handlers or ours.level != logging.NOTSET or not ours.propagate):
        return False
    before = mine[0] if mine is not None else None
    handler = before if type(before) is kind else (kind() if kind else None)
    if before is not None and before is not handler:
        ours.removeHandler(before)
    if handler is None:
        ours.setLevel(logging.NOTSET)
        ours.propagate = True
        _set.pop(name, None)
    else:
        floor = library_level()
        level = logging.INFO  # HOLDS: what vLLM's level will be, as a rule
        if isinstance(handler, IntoVllmLog):
            handler.library_level = floor
            level = theirs.getEffectiveLevel()
        if floor is not None:
            level = min(level, floor)
        if before is not handler:
            ours.addHandler(handler)
        ours.setLevel(level)
        ours.propagate = False
        _set[name] = (handler, level)
    if isinstance(before, HoldUntilVllmConfigures) and before is not handler:
        _log_held(before.records)
    return True


def _hook_vllms_configuration() -> bool:
    """Has settle() run each time vLLM configures its logging; False where
    vLLM's logger module is not loaded or has no configure_logging."""
    vllm_logger = sys.modules.get("vllm.logger")
    if getattr(vllm_logger, "configure_logging", None) is None:
        return False
    vllm_patches.patch_configure_logging(vllm_logger, settle)
    return True


def _log_held(records: list[logging.LogRecord]) -> None:
    """The held records, logged again where the package logger's state
    sends them now (made anew, as vLLM's record factory adds what its
    format shows, with their first time)."""
    for old in records:
        target = logging.getLogger(old.name)
        if not target.isEnabledFor(old.levelno):
            continue
        record = target.makeRecord(old.name, old.levelno, old.pathname, old.lineno,
                                   old.getMessage(), (), old.exc_info, old.funcName, None,
                                   old.stack_info)
        record.created, record.msecs, record.relativeCreated = \
            old.created, old.msecs, old.relativeCreated
        target.handle(record)

