# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.io_common: the parts of upstream's IO helpers fldispatch has.

Steps, execution order, rank, module context and tensor statistics are
fldispatch.iodump's. Upstream's ATen-level interception (TorchDispatchMode,
TorchFunctionMode), layer-path filters and the `io_dump` section of a
VLLM_FL_CONFIG file are not part of fldispatch's IO dump: the names exist so
code importing them loads, and calling one raises NotImplementedError with
the reason (docs/porting-from-vllm-plugin-fl.md lists them).
"""

import sys
import types
from typing import Any, Callable, NoReturn

# fldispatch.iodump under this package's name (the same module object, see
# fldispatch/compat/__init__.py)
from . import io_dumper as _iodump
from .io_dumper import (  # noqa: F401
    advance_step,
    get_current_module,
    get_exec_order,
    get_rank,
    get_step,
    module_context_matches,
    next_exec_order,
    parse_rank_filter,
    parse_step_range,
    pop_module_context,
    push_module_context,
    register_tensor_stat,
    reset_exec_order,
    reset_rank,
    reset_step,
    tensor_stats,
)

# fldispatch records dispatch-managed ops only; it enters no torch modes.
HAS_TORCH_DISPATCH_MODE = False
HAS_TORCH_FUNC_MODE = False


def _absent(name: str, why: str) -> Callable[..., NoReturn]:
    def absent(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"{name}: not part of fldispatch's IO dump ({why})")

    absent.__name__ = name
    return absent


_LAYERS = "layer filters need vLLM's model paths, which fldispatch does not track"
expand_layer_specs = _absent("expand_layer_specs", _LAYERS)
layer_path_matches = _absent("layer_path_matches", _LAYERS)
list_model_layers = _absent("list_model_layers", _LAYERS)
register_module_paths = _absent("register_module_paths", _LAYERS)
parse_torch_funcs_config = _absent("parse_torch_funcs_config",
                                   "bare torch functions are not recorded")
parse_io_config_from_yaml = _absent("parse_io_config_from_yaml",
                                    "the IO dump is configured by its variables and "
                                    "enable_io_dump(), not by a YAML section")


class _SharedState(types.ModuleType):
    """Reads and writes of the IO dump's state (_step_counter, _rank,
    _TENSOR_STAT_REGISTRY, ...) through this module reach fldispatch.iodump."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_iodump, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("__") and hasattr(_iodump, name) and name not in _OWN:
            setattr(_iodump, name, value)
        else:
            super().__setattr__(name, value)


_OWN = {"HAS_TORCH_DISPATCH_MODE", "HAS_TORCH_FUNC_MODE", "expand_layer_specs",
        "layer_path_matches", "list_model_layers", "register_module_paths",
        "parse_torch_funcs_config", "parse_io_config_from_yaml"}
sys.modules[__name__].__class__ = _SharedState
