# SPDX-License-Identifier: Apache-2.0
"""IO dump: the inputs and outputs of dispatch-managed ops, written to disk.

vllm-plugin-FL's io_dumper: fldispatch.iodump, fldispatch.compat.io_dumper
and (through the alias) vllm_fl.dispatch.io_dumper are one module object,
which runs this file once, as fldispatch.iodump.

    VLLM_FL_IO_DUMP=/tmp/dump VLLM_FL_IO_DUMP_WITH_METAS=1 python serve.py

or from Python:

    import fldispatch.iodump as iodump
    iodump.enable_io_dump("/tmp/dump", ops={"rms_norm"}, with_metas=True, with_values=True)
    ...                      # calls of fldispatch's ops are recorded
    iodump.io_dump_step()    # the next step (a forward pass) begins
    iodump.disable_io_dump() # flushes and writes summary.json

What is recorded: every call that goes through fldispatch's Python paths — the
catalog functions (fldispatch.rms_norm, ...), fldispatch.call_op, the
compatibility layer's call_op / OpManager.call, and torch.ops.fldispatch.* —
while the dump is enabled. Nothing is installed while it is off: the ops are
the plain C functions, and the only cost is a module-level flag read by the
compatibility layer's call path.

The layout is vllm-plugin-FL's (rank_0000 stands for a process of rank 0; a
process without a rank writes pid_NNNN instead, see below):

    DIR/rank_0000/summary.json                  {"rank", "flaggems_ops", "non_flaggems_ops"}
    DIR/rank_0000/step_0005/rms_norm/input.json  one JSON line per call: {"call_N": meta}
    DIR/rank_0000/step_0005/rms_norm/output.json
    DIR/rank_0000/step_0005/rms_norm/call_N_input.pt   (with_values)
    DIR/rank_0000/step_0005/rms_norm/call_N_output.pt

meta holds op_name, exec_order, call_num, step, rank, module_tag, op_tag,
impl_id (the implementation that served, where known) and, per tensor, shape,
dtype, device, min, max, mean, std. Keys in the .pt files and in "tensors"
are arg_N / kwarg_NAME for inputs and result / result_N for outputs; the
catalog ops write into their arguments and return nothing, so their output
records hold the written arguments (out, residual, query, key) under their
arg_N names.

Each process writes in a directory of its own: rank_NNNN for its rank
(torch.distributed's when a process group is up, else RANK, else
LOCAL_RANK), or pid_NNNN (its process id) when it has none, so that two
processes without a rank never interleave or overwrite each other's files;
meta's and summary.json's "rank" is then null. vLLM's workers inherit the
configuration through the environment (enable_io_dump() exports it, as
upstream does).

The dump directory is created with mode 0700; one that exists must be a
directory (not a symbolic link) owned by this process's user and not
writable by its group or others, else enable_io_dump() raises ValueError
naming VLLM_FL_IO_DUMP (or the argument) and the path. Everything under it
is private to the user (directories 0700, files 0600); .pt files and
summary.json are written to a temporary file renamed over the target, and
JSON lines are appended without following links. Steps advance only when the program says so
(io_dump_step() / advance_io_step()).

Variables: VLLM_FL_IO_DUMP (a directory, "1" for ./io_dump, "0" off),
VLLM_FL_IO_DUMP_OPS, _MODULES, _MAX_CALLS, _STEP_RANGE ("a-b" inclusive, or
"n"), _RANK ("all", "0", "0,2"), _WITH_METAS, _WITH_VALUES. Upstream's
_LAYERS, _WITH_TORCH_FUNCS and _WITH_PRINT are recognised and refused, and
_BG_WORKERS has no effect (see docs/porting-from-vllm-plugin-fl.md); a bad
value is an error naming the variable. Writes are synchronous, in the calling thread.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import stat
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

logger = logging.getLogger("vllm_fl.dispatch.io_dump")

_UNSET: Any = object()
ENV_PREFIX = "VLLM_FL_IO_DUMP"
SUPPORTED_ENV = ("VLLM_FL_IO_DUMP", "VLLM_FL_IO_DUMP_OPS", "VLLM_FL_IO_DUMP_MODULES",
                 "VLLM_FL_IO_DUMP_MAX_CALLS", "VLLM_FL_IO_DUMP_STEP_RANGE",
                 "VLLM_FL_IO_DUMP_RANK", "VLLM_FL_IO_DUMP_WITH_METAS",
                 "VLLM_FL_IO_DUMP_WITH_VALUES")
REFUSED_ENV = {
    "VLLM_FL_IO_DUMP_LAYERS":
        "layer filters need vLLM's model hooks, which fldispatch does not install",
    "VLLM_FL_IO_DUMP_WITH_TORCH_FUNCS":
        "only dispatch-managed ops are recorded, not bare torch functions",
    "VLLM_FL_IO_DUMP_WITH_PRINT": "console printing of tensors is not implemented",
}
# VLLM_FL_IO_DUMP_BG_WORKERS (and enable_io_dump(bg_workers=)) tune upstream's
# background writers; writes here are synchronous, so it has no effect.

# ---- state (names as upstream's module, which tests and tools read) --------
_lock = threading.RLock()
_enabled = False
_dump_dir = ""
_match_all = False
_op_filter: Set[str] = set()
_module_filter: Set[str] = set()
_max_calls = 0
_step_range: Optional[Tuple[int, int]] = None
_rank_filter: Optional[Set[int]] = None
_with_values = False
_with_metas = False
_call_counters: Dict[str, int] = {}
_op_summary: Dict[str, Dict[str, Any]] = {}
_pairing = threading.local()
_module_context = threading.local()

# ---- rank -------------------------------------------------------------------
_rank: Optional[int] = None


def get_rank() -> int:
    """This process's rank: torch.distributed's, else RANK, else LOCAL_RANK, else 0."""
    global _rank
    if _rank is not None:
        return _rank
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            _rank = dist.get_rank()
            return _rank
    except Exception:
        pass
    for var in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            _rank = int(value)
            return _rank
    return 0  # not cached: a process group may come up later


def rank_known() -> bool:
    """Whether this process has a rank (torch.distributed's, RANK or LOCAL_RANK)."""
    get_rank()
    return _rank is not None


def _process_dir() -> str:
    """This process's own directory under the dump directory: rank_NNNN when it has a rank,
    else pid_NNNN, so that processes without a rank never write into each other's files."""
    if rank_known():
        return os.path.join(_dump_dir, f"rank_{get_rank():04d}")
    return os.path.join(_dump_dir, f"pid_{os.getpid()}")


def reset_rank() -> None:
    global _rank
    _rank = None


def parse_rank_filter(value: str, name: str = "ranks") -> Optional[Set[int]]:
    """'all' or '' -> None (every rank); '0,2' -> {0, 2}."""
    value = value.strip().lower()
    if value in ("", "all"):
        return None
    ranks = set()
    for token in value.split(","):
        token = token.strip()
        if not token.isdigit():
            raise ValueError(f"{name}: '{token}' is not a rank (valid: all, or ranks like 0,2)")
        ranks.add(int(token))
    return ranks


# ---- steps and execution order ---------------------------------------------
_step_counter = 0
_exec_order_counter = 0
_seen_ops: Set[str] = set()


def get_step() -> int:
    return _step_counter


def advance_step() -> int:
    """The next step begins: per-op counters restart, the summary is written and
    the ops the step recorded are logged (INFO)."""
    global _step_counter
    with _lock:
        done = _step_counter
        _step_counter += 1
        step = _step_counter
        _call_counters.clear()
        seen = sorted(_seen_ops)
        _seen_ops.clear()
    reset_exec_order()
    if _enabled:
        _write_summary()
        if seen:
            logger.info("[IO_DUMP][rank=%d][step=%d] Step summary: modules=[], ops=%s",
                        get_rank(), done, seen)
    return step


def reset_step() -> None:
    global _step_counter
    with _lock:
        _step_counter = 0
        _call_counters.clear()
        _seen_ops.clear()


def io_dump_step() -> int:
    """Advance the step (whether or not the dump is on); returns the new step."""
    return advance_step()


def advance_io_step() -> None:
    """Advance the step when the dump is on (safe to call every step)."""
    if _enabled:
        advance_step()


def next_exec_order() -> int:
    global _exec_order_counter
    with _lock:
        _exec_order_counter += 1
        return _exec_order_counter


def reset_exec_order() -> None:
    global _exec_order_counter
    with _lock:
        _exec_order_counter = 0


def get_exec_order() -> int:
    return _exec_order_counter


def parse_step_range(value: Union[str, Tuple[int, int], None],
                     name: str = "step_range") -> Optional[Tuple[int, int]]:
    """'a-b' (inclusive) or 'n' -> the half-open (a, b + 1); None or '' -> None."""
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 2:
        return (int(value[0]), int(value[1]))
    text = str(value).strip()
    if not text:
        return None
    first, sep, last = text.partition("-")
    if first.strip().isdigit() and (not sep or last.strip().isdigit()):
        start = int(first)
        end = int(last) if sep else start
        if end >= start:
            return (start, end + 1)
    raise ValueError(f"{name}: '{text}' is not a step range (valid: 'a-b' with a <= b, or 'n')")


# ---- module context (register_io_module_hooks) -----------------------------
_module_hook_handles: List[Any] = []


def push_module_context(cls_name: str, module: Any = None) -> None:
    stack = getattr(_module_context, "stack", None)
    if stack is None:
        stack = _module_context.stack = []
    stack.append(cls_name)


def pop_module_context() -> None:
    stack = getattr(_module_context, "stack", None)
    if stack:
        stack.pop()


def get_current_module() -> Optional[str]:
    stack = getattr(_module_context, "stack", None)
    return stack[-1] if stack else None


def module_context_matches(names: Set[str]) -> bool:
    return any(name in names for name in getattr(_module_context, "stack", None) or ())


def register_io_module_hooks(model: Any) -> None:
    """Forward hooks on every submodule of `model`, so the modules filter and
    module_tag know which module an op runs in. No-op while the dump is off."""
    if not _enabled:
        return
    _remove_module_hooks()
    for module in model.modules():
        name = type(module).__name__
        _module_hook_handles.append(module.register_forward_pre_hook(
            lambda m, a, name=name: push_module_context(name, m)))
        _module_hook_handles.append(module.register_forward_hook(
            lambda m, a, o: pop_module_context(), always_call=True))


def _remove_module_hooks() -> None:
    for handle in _module_hook_handles:
        handle.remove()
    _module_hook_handles.clear()


# ---- tensor statistics -------------------------------------------------------
_TENSOR_STAT_REGISTRY: List[Tuple[str, Callable[[Any], Any], bool]] = [
    ("min", lambda t: t.min().item(), False),
    ("max", lambda t: t.max().item(), False),
    ("mean", lambda t: t.mean().item(), True),
    ("std", lambda t: t.std().item(), True),
]


def register_tensor_stat(name: str, fn: Callable[[Any], Any], float_only: bool = True) -> None:
    """Add (or replace) a statistic recorded for every tensor."""
    if not name or not name.strip():
        raise ValueError("register_tensor_stat: the name must be a non-empty string")
    with _lock:
        for i, (existing, _, _) in enumerate(_TENSOR_STAT_REGISTRY):
            if existing == name:
                _TENSOR_STAT_REGISTRY[i] = (name, fn, float_only)
                return
        _TENSOR_STAT_REGISTRY.append((name, fn, float_only))


def tensor_stats(t: Any) -> Dict[str, Any]:
    """shape, dtype, device and each registered statistic of a tensor."""
    meta: Dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype),
                            "device": str(t.device)}
    if t.numel() == 0 or t.is_complex():
        return meta
    as_float = None
    for name, fn, float_only in list(_TENSOR_STAT_REGISTRY):
        if float_only and not t.is_floating_point():
            continue
        try:
            if float_only:
                if as_float is None:
                    as_float = t.detach().float()
                meta[name] = fn(as_float)
            else:
                meta[name] = fn(t)
        except Exception:
            pass
    return meta


# ---- what is recorded ----------------------------------------------------------
def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _serialize_value(value: Any) -> Any:
    """A value as it goes into a .pt file: tensors detached on the CPU, modules by name."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, torch.nn.Module):
        return f"<module:{type(value).__name__}>"
    if isinstance(value, dict):
        return {k: _serialize_value(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_serialize_value(v) for v in value)
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    return f"<{type(value).__name__}>"


def _build_data(args: Tuple[Any, ...], kwargs: Dict[str, Any], *, is_output: bool = False) -> Dict[str, Any]:
    """The dict saved in a call's .pt file (keys as in the JSON's "tensors")."""
    data: Dict[str, Any] = {}
    if is_output:
        result = args[0] if args else None
        if isinstance(result, tuple):
            for i, value in enumerate(result):
                data[f"result_{i}"] = _serialize_value(value)
        else:
            data["result"] = _serialize_value(result)
        return data
    for i, value in enumerate(args):
        data[f"arg_{i}"] = _serialize_value(value)
    for key, value in kwargs.items():
        data[f"kwarg_{key}"] = _serialize_value(value)
    return data


def _extract_tensor_refs(args: Tuple[Any, ...], kwargs: Dict[str, Any], *,
                         is_output: bool = False) -> Dict[str, Any]:
    """The tensors among a call's arguments (or its result), by their record keys."""
    refs: Dict[str, Any] = {}
    if is_output:
        result: Any = args[0] if args else None
        if isinstance(result, tuple):
            for i, value in enumerate(result):
                if _is_tensor(value):
                    refs[f"result_{i}"] = value.detach()
        elif _is_tensor(result):
            refs["result"] = result.detach()
        return refs
    for i, value in enumerate(args):
        if _is_tensor(value):
            refs[f"arg_{i}"] = value.detach()
    for key, value in kwargs.items():
        if _is_tensor(value):
            refs[f"kwarg_{key}"] = value.detach()
    return refs


def _rank_ok() -> bool:
    return _rank_filter is None or get_rank() in _rank_filter


def _check_limits(op_name: str) -> bool:
    if _step_range is not None and not (_step_range[0] <= _step_counter < _step_range[1]):
        return False
    if _max_calls > 0 and _call_counters.get(op_name, 0) >= _max_calls:
        return False
    return True


def _module_arg(args: Tuple[Any, ...]) -> Optional[str]:
    """The class name of a torch module passed as the first argument (a layer calling its op)."""
    if not args:
        return None
    import torch

    return type(args[0]).__name__ if isinstance(args[0], torch.nn.Module) else None


def _should_dump(op_name: str, args: Tuple[Any, ...]) -> bool:
    """Whether a call of op_name passes every filter (AND of the filters set)."""
    if not _check_limits(op_name):
        return False
    if _match_all:
        return True
    if _module_filter and not (_module_arg(args) in _module_filter
                               or module_context_matches(_module_filter)):
        return False
    if _op_filter and op_name not in _op_filter:
        return False
    return bool(_op_filter) or bool(_module_filter)


def _should_dump_torch_func(func_name: str) -> bool:
    """Bare torch functions are never recorded here (dispatch-managed ops only)."""
    return False


def _safe_component(name: str) -> str:
    safe = name.replace(os.sep, "_")
    if os.altsep:
        safe = safe.replace(os.altsep, "_")
    return safe.replace("..", "__").strip(". ") or "_unnamed_"


def _op_dir(op_name: str) -> str:
    return os.path.join(_process_dir(), f"step_{_step_counter:04d}", _safe_component(op_name))


# ---- files: in a private directory, never through a planted link -----------
_OPEN_FLAGS = os.O_WRONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


def _check_dump_root(directory: str, source: str) -> None:
    """Create the dump directory (0700) or check the one there: a directory of our own that no
    one else can write into. Raises ValueError naming source (the variable or argument)."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"{source}: '{directory}' is a symbolic link; name the directory "
                         "itself (a link there could be pointed elsewhere by its owner)")
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{source}: '{directory}' is not a directory")
    if st.st_uid != os.geteuid():
        raise ValueError(f"{source}: '{directory}' is owned by uid {st.st_uid}, not by this "
                         f"process's user (uid {os.geteuid()}); use a directory of your own")
    if st.st_mode & 0o022:
        raise ValueError(f"{source}: '{directory}' is writable by "
                         f"{'others' if st.st_mode & 0o002 else 'its group'} (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}); use a directory only you can write "
                         "(chmod go-w)")


def _makedirs(directory: str) -> None:
    """The directories under the (checked) dump directory, each created 0700 (os.makedirs gives
    its mode to the last one only)."""
    if os.path.isdir(directory):
        return
    parent = os.path.dirname(directory)
    if parent and parent != directory:
        _makedirs(parent)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass


def _write_replacing(path: str, write: Callable[[Any], None], binary: bool) -> None:
    """Writes path whole (fldispatch._files.write_replacing)."""
    from fldispatch._files import write_replacing  # this module also runs as fldispatch.iodump

    write_replacing(path, write, binary)


def _record_summary(op_name: str, impl_id: Optional[str]) -> None:
    with _lock:
        _seen_ops.add(op_name)
        entry = _op_summary.setdefault(op_name, {"call_count": 0, "impl_ids": set()})
        entry["call_count"] += 1
        if impl_id:
            entry["impl_ids"].add(impl_id)


# JSON (RFC 8259) has no NaN or infinity: a statistic that is one is written
# as this string, which JSON readers of any language take.
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _json_safe(value: Any) -> Any:
    """value with every non-finite float replaced by "NaN", "Infinity" or
    "-Infinity" (NaN is often why a dump is taken)."""
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE[repr(value)]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _append_line(path: str, key: str, meta: Dict[str, Any]) -> None:
    line = json.dumps({key: _json_safe(meta)}, ensure_ascii=False, allow_nan=False) + "\n"
    with _lock:
        fd = os.open(path, _OPEN_FLAGS | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(line)


def _meta(op_name: str, call_num: int, order: int, module_tag: str, op_tag: str,
          impl_id: Optional[str], refs: Dict[str, Any]) -> Dict[str, Any]:
    tensors = {}
    for key, t in refs.items():
        try:
            tensors[key] = tensor_stats(t)
        except Exception as e:  # a tensor torch cannot reduce (meta device, ...)
            tensors[key] = {"error": str(e)}
    return {"op_name": op_name, "exec_order": order, "call_num": call_num, "step": _step_counter,
            "rank": get_rank() if rank_known() else None, "module_tag": module_tag,
            "op_tag": op_tag,
            "impl_id": impl_id, "tensors": tensors}


def _save_pt(path: str, data: Dict[str, Any]) -> None:
    import torch

    _write_replacing(path, lambda f: torch.save(data, f), binary=True)


def dump_before(op_name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any], exec_order: Optional[int] = None,
                module_tag: Optional[str] = None, op_tag: Optional[str] = None,
                impl_id: Optional[str] = None) -> None:
    """Record a call's inputs (before it runs)."""
    if not _enabled or not _rank_ok() or not _should_dump(op_name, args):
        return
    if not _with_metas:
        _record_summary(op_name, impl_id)
        with _lock:
            _call_counters[op_name] = _call_counters.get(op_name, 0) + 1
        return
    try:
        with _lock:
            call_num = _call_counters.get(op_name, 0) + 1
            _call_counters[op_name] = call_num
        order = exec_order if exec_order is not None else next_exec_order()
        tag = module_tag if module_tag is not None else (get_current_module() or "")
        otag = op_tag or ""
        directory = _op_dir(op_name)
        _makedirs(directory)
        _record_summary(op_name, impl_id)
        stack = getattr(_pairing, "stack", None)
        if stack is None:
            stack = _pairing.stack = {}
        stack.setdefault(op_name, []).append((call_num, order, directory, tag, otag))
        refs = _extract_tensor_refs(args, kwargs)
        _append_line(os.path.join(directory, "input.json"), f"call_{call_num}",
                     _meta(op_name, call_num, order, tag, otag, impl_id, refs))
        if _with_values:
            _save_pt(os.path.join(directory, f"call_{call_num}_input.pt"),
                     _build_data(args, kwargs))
    except Exception as e:
        logger.warning("IO dump (VLLM_FL_IO_DUMP=%s): recording the inputs of '%s' failed: %s",
                       _dump_dir, op_name, e)


def _pop_pairing(op_name: str) -> Optional[Tuple[int, int, str, str, str]]:
    entries = (getattr(_pairing, "stack", None) or {}).get(op_name)
    return entries.pop() if entries else None


def dump_after(op_name: str, args: Tuple[Any, ...], result: Any, impl_id: Optional[str] = None) -> None:
    """Record a call's outputs (after it returned)."""
    if not _enabled or not _with_metas or not _rank_ok():
        return
    pairing = _pop_pairing(op_name)
    if pairing is None:
        return
    call_num, order, directory, tag, otag = pairing
    try:
        refs = _extract_tensor_refs((result,), {}, is_output=True)
        _append_line(os.path.join(directory, "output.json"), f"call_{call_num}",
                     _meta(op_name, call_num, order, tag, otag, impl_id, refs))
        if _with_values:
            _save_pt(os.path.join(directory, f"call_{call_num}_output.pt"),
                     _build_data((result,), {}, is_output=True))
    except Exception as e:
        logger.warning("IO dump (VLLM_FL_IO_DUMP=%s): recording the outputs of '%s' failed: %s",
                       _dump_dir, op_name, e)


def dump_written(op_name: str, args: Tuple[Any, ...], written: Tuple[int, ...],
                 impl_id: Optional[str] = None) -> None:
    """Record the outputs of an op that writes into its arguments (by position)."""
    if not _enabled or not _with_metas or not _rank_ok():
        return
    pairing = _pop_pairing(op_name)
    if pairing is None:
        return
    call_num, order, directory, tag, otag = pairing
    try:
        refs = {f"arg_{i}": args[i].detach() for i in written
                if i < len(args) and _is_tensor(args[i])}
        _append_line(os.path.join(directory, "output.json"), f"call_{call_num}",
                     _meta(op_name, call_num, order, tag, otag, impl_id, refs))
        if _with_values:
            _save_pt(os.path.join(directory, f"call_{call_num}_output.pt"),
                     {key: _serialize_value(t) for key, t in refs.items()})
    except Exception as e:
        logger.warning("IO dump (VLLM_FL_IO_DUMP=%s): recording the outputs of '%s' failed: %s",
                       _dump_dir, op_name, e)


def dump_cleanup(op_name: str) -> None:
    """Drop the pending record of a call that raised."""
    _pop_pairing(op_name)


def _wait_and_flush() -> None:
    """Writes are synchronous: nothing is pending once a call returns."""


def _write_summary() -> None:
    with _lock:
        if not _dump_dir or not _op_summary:
            return
        flagos: List[str] = []
        other: List[str] = []
        for op in sorted(_op_summary):
            entry = _op_summary[op]
            ids = entry.get("impl_ids", ())
            is_flagos = any(i.startswith("default.") for i in ids) or \
                "FlagGems" in entry.get("dispatch_keys", "")
            (flagos if is_flagos else other).append(op)
        directory = _process_dir()
        summary = {"rank": get_rank() if rank_known() else None, "pid": os.getpid(),
                   "flaggems_ops": flagos, "non_flaggems_ops": other,
                   "calls": {op: _op_summary[op].get("call_count", 0)
                             for op in sorted(_op_summary)},
                   "impl_ids": {op: sorted(_op_summary[op].get("impl_ids", ()))
                                for op in sorted(_op_summary)}}
    try:
        _makedirs(directory)
        _write_replacing(os.path.join(directory, "summary.json"),
                         lambda f: json.dump(summary, f, indent=2), binary=False)
    except OSError as e:
        logger.warning("IO dump: cannot write %s/summary.json: %s", directory, e)


# ---- configuration ---------------------------------------------------------------
def is_dump_enabled() -> bool:
    return _enabled


def _env_switch(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise ValueError(f"{name}='{value}': expected 1, true, 0 or false")


def _env_names(name: str) -> Optional[Set[str]]:
    names = {t.strip() for t in os.environ.get(name, "").split(",") if t.strip()}
    return names or None


def _env_config() -> Dict[str, Any]:
    """The configuration the environment asks for (raises ValueError naming a bad variable)."""
    for name, why in REFUSED_ENV.items():
        if os.environ.get(name, "").strip():
            raise ValueError(f"{name} is not supported by fldispatch's IO dump: {why}")
    cfg: Dict[str, Any] = {}
    where = os.environ.get("VLLM_FL_IO_DUMP", "").strip()
    if where and where not in ("0", "1"):
        cfg["dump_dir"] = where
    cfg["ops"] = _env_names("VLLM_FL_IO_DUMP_OPS")
    cfg["modules"] = _env_names("VLLM_FL_IO_DUMP_MODULES")
    max_calls = os.environ.get("VLLM_FL_IO_DUMP_MAX_CALLS", "").strip()
    if max_calls:
        if not max_calls.isdigit():
            raise ValueError(f"VLLM_FL_IO_DUMP_MAX_CALLS='{max_calls}': expected a count "
                             "(0 = unlimited)")
        cfg["max_calls"] = int(max_calls)
    cfg["step_range"] = parse_step_range(os.environ.get("VLLM_FL_IO_DUMP_STEP_RANGE", ""),
                                         "VLLM_FL_IO_DUMP_STEP_RANGE")
    cfg["ranks"] = parse_rank_filter(os.environ.get("VLLM_FL_IO_DUMP_RANK", ""),
                                     "VLLM_FL_IO_DUMP_RANK")
    cfg["with_metas"] = _env_switch("VLLM_FL_IO_DUMP_WITH_METAS")
    cfg["with_values"] = _env_switch("VLLM_FL_IO_DUMP_WITH_VALUES")
    return cfg


def _env_requested() -> bool:
    where = os.environ.get("VLLM_FL_IO_DUMP", "").strip()
    if where == "0":
        return False
    return bool(where) or bool(os.environ.get("VLLM_FL_IO_DUMP_STEP_RANGE", "").strip())


def enable_io_dump(dump_dir: Optional[str] = _UNSET, ops: Optional[Iterable[str]] = _UNSET,
                   modules: Optional[Iterable[str]] = _UNSET, layers: Any = _UNSET,
                   max_calls: Optional[int] = _UNSET,
                   step_range: Union[str, Tuple[int, int], None] = _UNSET,
                   with_torch_funcs: Any = _UNSET, ranks: Optional[Iterable[int]] = _UNSET,
                   with_values: Optional[bool] = _UNSET, with_metas: Optional[bool] = _UNSET,
                   with_print: Any = _UNSET, bg_workers: Optional[int] = _UNSET) -> None:
    """Turn the dump on. Arguments left out take the environment's value, then the default.

    dump_dir (default ./io_dump), ops and modules (name sets; both unset: every
    op), max_calls per op per step (0: unlimited), step_range ('a-b' inclusive
    or a half-open tuple), ranks (a set; None: all), with_metas (input/output
    JSON), with_values (.pt files). layers, with_torch_funcs and with_print are
    upstream's and refused here with the reason; bg_workers has no effect. Invalid values
    raise ValueError and change nothing.
    """
    global _enabled, _dump_dir, _match_all, _op_filter, _module_filter, _max_calls
    global _step_range, _rank_filter, _with_values, _with_metas
    for name, value, env in (("layers", layers, "VLLM_FL_IO_DUMP_LAYERS"),
                             ("with_torch_funcs", with_torch_funcs,
                              "VLLM_FL_IO_DUMP_WITH_TORCH_FUNCS"),
                             ("with_print", with_print, "VLLM_FL_IO_DUMP_WITH_PRINT")):
        if value is not _UNSET and value not in (None, False):
            raise ValueError(f"enable_io_dump({name}=...) is not supported by fldispatch's IO "
                             f"dump: {REFUSED_ENV[env]}")
    cfg = _env_config()
    given = dict(dump_dir=dump_dir, ops=ops, modules=modules, max_calls=max_calls,
                 step_range=step_range, ranks=ranks, with_values=with_values,
                 with_metas=with_metas)
    for key, value in given.items():
        if value is not _UNSET:
            cfg[key] = value
    directory = cfg.get("dump_dir") or os.path.join(os.getcwd(), "io_dump")
    sr = cfg.get("step_range")
    sr = parse_step_range(sr) if isinstance(sr, str) else sr
    count = cfg.get("max_calls") or 0
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"enable_io_dump(max_calls={count!r}): expected a count >= 0")
    ops_set, modules_set = cfg.get("ops"), cfg.get("modules")
    source = "enable_io_dump(dump_dir=...)" if dump_dir is not _UNSET else "VLLM_FL_IO_DUMP"
    try:
        _check_dump_root(directory, source)
    except OSError as e:
        raise ValueError(f"{source}: cannot create '{directory}': {e.strerror or e}") from e
    with _lock:
        _dump_dir = directory
        _match_all = ops_set is None and modules_set is None
        _op_filter = set(ops_set or ())
        _module_filter = set(modules_set or ())
        _max_calls = count
        _step_range = sr
        _rank_filter = set(cfg["ranks"]) if cfg.get("ranks") is not None else None
        _with_values = bool(cfg.get("with_values"))
        _with_metas = bool(cfg.get("with_metas"))
        _enabled = True
    _export_env()
    _install_hooks()
    logger.info("IO dump on: dir=%s rank=%d ops=%s max_calls=%d step_range=%s metas=%s "
                "values=%s", _dump_dir, get_rank(), sorted(_op_filter) or "all", _max_calls,
                _step_range, _with_metas, _with_values)


def _export_env() -> None:
    """Hand the configuration to child processes (vLLM's workers) through the environment."""
    env = os.environ
    env["VLLM_FL_IO_DUMP"] = _dump_dir
    for name, value in (("VLLM_FL_IO_DUMP_OPS", ",".join(sorted(_op_filter))),
                        ("VLLM_FL_IO_DUMP_MODULES", ",".join(sorted(_module_filter))),
                        ("VLLM_FL_IO_DUMP_MAX_CALLS", str(_max_calls) if _max_calls else ""),
                        ("VLLM_FL_IO_DUMP_STEP_RANGE",
                         f"{_step_range[0]}-{_step_range[1] - 1}" if _step_range else ""),
                        ("VLLM_FL_IO_DUMP_RANK",
                         ",".join(map(str, sorted(_rank_filter))) if _rank_filter else ""),
                        ("VLLM_FL_IO_DUMP_WITH_METAS", "1" if _with_metas else ""),
                        ("VLLM_FL_IO_DUMP_WITH_VALUES", "1" if _with_values else "")):
        if value:
            env[name] = value
        else:
            env.pop(name, None)


def disable_io_dump() -> None:
    """Turn the dump off: hooks removed, summary written, state and exported variables cleared."""
    global _enabled, _dump_dir, _match_all, _op_filter, _module_filter, _max_calls
    global _step_range, _rank_filter, _with_values, _with_metas
    was = _enabled
    _enabled = False
    _remove_hooks()
    _remove_module_hooks()
    if was:
        _write_summary()
    with _lock:
        _dump_dir = ""
        _match_all = False
        _op_filter, _module_filter = set(), set()
        _max_calls = 0
        _step_range = None
        _rank_filter = None
        _with_values = _with_metas = False
        _call_counters.clear()
        _op_summary.clear()
    if was:
        for name in SUPPORTED_ENV:
            os.environ.pop(name, None)


def init_io_dump_from_env(eager: bool = True) -> None:
    """Turn the dump on when the environment asks for it (and it is not on yet)."""
    if not eager:
        return
    _init_from_env()


def _init_from_env() -> None:
    if _enabled or not _env_requested():
        return
    enable_io_dump()


# ---- the hooks on fldispatch's call paths ---------------------------------------
def _written_positions(schema: str) -> Tuple[int, ...]:
    """Positions of the arguments a schema marks written: `Tensor(a!)`, `Tensor(b!)?`."""
    params = schema[schema.index("(") + 1:schema.rindex(") ->")]
    return tuple(i for i, param in enumerate(params.split(","))
                 if param.split() and param.split()[0].endswith(("!)", "!)?")))


def _catalog_written() -> Dict[str, Tuple[int, ...]]:
    import fldispatch

    table = {}
    for op, schema in fldispatch._C.catalog_ops():
        positions = _written_positions(schema)
        if positions:
            table[op] = positions
    return table


# Positions of the arguments each catalog op writes, from the catalog's schemas
# (known without starting the library).
WRITTEN = _catalog_written()
# The same for the other ops with a signature (declared by a plugin or by
# Python), read as each is first called: an empty tuple for one that writes
# nothing.
_declared_written: Dict[str, Tuple[int, ...]] = {}


def written_positions(op_name: str) -> Optional[Tuple[int, ...]]:
    """Positions of the arguments op_name writes, from its signature's
    `Tensor(a!)` marks: the catalog's, or the one a plugin or Python declared;
    None for an op that writes none or has no signature (yet)."""
    positions = WRITTEN.get(op_name)
    if positions is not None:
        return positions
    positions = _declared_written.get(op_name)
    if positions is None:
        import fldispatch

        schema = fldispatch.signatures().get(op_name)
        if schema is None:
            return None  # not declared: a later declaration may still give it one
        positions = _declared_written[op_name] = _written_positions(schema)
    return positions or None
_saved: Dict[str, Callable[..., Any]] = {}
_torch_lib: Any = None  # the torch.library.Library of the torch hooks


def _served_by(op_name: str, args: Tuple[Any, ...]) -> Optional[str]:
    """The implementation fldispatch chooses for this call (from its first tensor)."""
    import fldispatch

    t = next((a for a in args if _is_tensor(a)), None)
    try:
        if t is None:
            return fldispatch.resolve(op_name)
        return fldispatch.resolve(op_name, t.device.type, t.dtype)
    except Exception:
        return None


def call_recorded(op_name: str, fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any],
                  written: Optional[Tuple[int, ...]] = None, impl_id: Optional[str] = None) -> Any:
    """Run fn(*args, **kwargs) with its inputs and outputs recorded."""
    if not _enabled:
        return fn(*args, **kwargs)
    if impl_id is None and (written or written_positions(op_name)):
        impl_id = _served_by(op_name, args)
    dump_before(op_name, args, kwargs, impl_id=impl_id)
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        dump_cleanup(op_name)
        raise
    if written:
        dump_written(op_name, args, written, impl_id=impl_id)
    else:
        dump_after(op_name, args, result, impl_id=impl_id)
    return result


def _wrap_catalog(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    written = WRITTEN.get(name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        return call_recorded(name, fn, args, kwargs, written)

    recorded.__name__ = name
    recorded.__doc__ = fn.__doc__
    recorded.__wrapped__ = fn  # type: ignore[attr-defined]  # what inspect.unwrap follows
    return recorded


def _wrap_call_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call_op(name: str, *args: Any, **kwargs: Any) -> Any:
        return call_recorded(name, lambda *a, **k: fn(name, *a, **k), args, kwargs,
                             written_positions(name))

    call_op.__doc__ = fn.__doc__
    call_op.__wrapped__ = fn  # type: ignore[attr-defined]  # what inspect.unwrap follows
    return call_op


def _install_hooks() -> None:
    import fldispatch

    with _lock:
        if not _saved:
            for name in fldispatch.OPS:
                if name != "attention_backend":
                    _saved[name] = getattr(fldispatch, name)
                    setattr(fldispatch, name, _wrap_catalog(name, _saved[name]))
            if hasattr(fldispatch, "call_op"):
                _saved["call_op"] = fldispatch.call_op
                fldispatch.call_op = _wrap_call_op(_saved["call_op"])
    install_torch_hooks()


def install_torch_hooks() -> None:
    """Record torch.ops.fldispatch.* too, when fldispatch.torch is loaded (idempotent)."""
    global _torch_lib
    import sys

    ft = sys.modules.get("fldispatch.torch")
    if not _enabled or ft is None or _torch_lib is not None:
        return
    import warnings

    import torch

    lib = torch.library.Library("fldispatch", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        for name in ft.SCHEMAS:
            if name == "attention_backend":
                continue
            kernel = getattr(ft._C, name)
            recorded = _wrap_catalog(name, kernel)
            for key in ft.TENSOR_KEYS:
                lib.impl(name, recorded, key)
    _torch_lib = lib


def _remove_hooks() -> None:
    global _torch_lib
    import sys

    fl = sys.modules.get("fldispatch")
    with _lock:
        for name, fn in _saved.items():
            if fl is not None:
                setattr(fl, name, fn)
        _saved.clear()
        lib, _torch_lib = _torch_lib, None
    if lib is not None:
        lib._destroy()


@atexit.register
def _at_exit() -> None:
    if _enabled:
        _write_summary()
