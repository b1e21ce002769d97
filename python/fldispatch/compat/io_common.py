"""vllm_fl.dispatch.io_common: the parts of upstream's IO helpers fldispatch has.

Steps, execution order, rank, module context and tensor statistics are
fldispatch.iodump's. Upstream's ATen-level interception (TorchDispatchMode,
TorchFunctionMode), layer-path filters and the `io_dump` section of a
VLLM_FL_CONFIG file are not part of fldispatch's IO dump: the names exist so
code importing them loads, and calling one raises NotImplementedError with
the reason (docs/porting-from-vllm-plugin-fl.md lists them).
"""

from ..iodump import (  # noqa: F401
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


def _absent(name, why):
    def absent(*args, **kwargs):
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
