# SPDX-License-Identifier: Apache-2.0
"""The library's log lines on Python's logging.

The C extension hands every line libfldispatch logs (fallbacks, failures,
rejected plugins and implementations, did-you-mean hints, ...) to emit()
here, once, instead of printing it to stderr (python/src/logging.c says
when: on the main thread, between bytecodes; fldispatch._C.log_flush()
delivers at once). Each goes to one logger: "fldispatch", or, once the
vllm_fl alias is installed, upstream's "vllm_fl.dispatch", at the level the
library gave it (the same numbers as logging's: 10 DEBUG ... 40 ERROR),
from the file "libfldispatch.so" (line 0: the library does not say where
in its source), which a format's %(filename)s shows.
The library's own level (VLLM_FL_LOG_LEVEL, fldispatch.set_log_level())
decides first which lines exist; the logger's level and handlers decide
where they go, the standard way:

    logging.getLogger("fldispatch").setLevel(logging.ERROR)     # quieter
    logging.getLogger("fldispatch").addHandler(my_handler)      # elsewhere

With no handler configured anywhere, Python's last-resort handler prints
WARNING and above to stderr, so nothing is lost by default and nothing is
printed twice. Inside vLLM's processes the vLLM plugin hands them to
vLLM's handlers instead (fldispatch.vllm_log).

This module imports nothing of fldispatch: the extension imports it while
the package is still importing.
"""

import atexit
import logging
from typing import Callable

#: The logger the library's lines go to (fldispatch.compat.alias switches it
#: through route_to()).
logger_name = "fldispatch"
#: The library's level as the program set it (fldispatch.set_log_level()),
#: in logging's numbers; None where the program has not set it, or set it
#: to "off", which leaves no line to show.
chosen_level: int | None = None
#: Called, without arguments, each time route_to() switches logger_name or
#: choose_level() records a level (the vLLM plugin's
#: fldispatch.vllm_log.settle(), which sets the loggers up for it).
on_change: list[Callable[[], object]] = []
#: Where the records say the library's lines come from.
SOURCE = "libfldispatch.so"
_loggers: dict[str, logging.Logger] = {}


def emit(level: int, message: str) -> None:
    name = logger_name
    logger = _loggers.get(name)
    if logger is None:
        logger = _loggers[name] = logging.getLogger(name)
    if logger.isEnabledFor(level):
        logger.handle(logger.makeRecord(name, level, SOURCE, 0, "%s", (message,), None,
                                        "(unknown function)"))


def route_to(name: str) -> None:
    """The library's lines go to the logger NAME from now on."""
    global logger_name
    if name == logger_name:
        return
    logger_name = name
    _changed()


def choose_level(level: str | int | None) -> None:
    """Records the level the program set the library to (a name as
    fldispatch.set_log_level() takes it, or a number); None: the library's
    level is the environment's again (fldispatch.reload())."""
    global chosen_level
    number = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    chosen_level = number if isinstance(number, int) and number <= logging.CRITICAL else None
    _changed()


def _changed() -> None:
    for callback in list(on_change):
        callback()


@atexit.register
def _detach() -> None:
    """From exit on, the library's lines go to stderr again (after what is queued)."""
    import sys

    ext = sys.modules.get("fldispatch._C")
    if ext is not None:
        ext._log_detach()
