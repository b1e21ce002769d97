"""fldispatch: libfldispatch's operators for any DLPack tensor.

    import fldispatch, torch
    x = torch.randn(4, 16)
    out = torch.empty(4, 8)
    fldispatch.silu_and_mul(out, x)          # out written in place, no copy
    fldispatch.resolve("silu_and_mul")       # 'vendor.cpu'
    with fldispatch.policy(prefer="reference"):
        fldispatch.silu_and_mul(out, x)      # this thread only

Tensors are any objects with __dlpack__ and __dlpack_device__ (PyTorch,
NumPy, JAX, CuPy ...) or DLPack capsules. `import fldispatch.torch` registers
the same ops as torch.ops.fldispatch.* for torch.compile and CUDA graphs.
Errors are fldispatch.Error subclasses carrying the library's status and
message. See docs/python.md.
"""

import threading as _threading

from . import _C
from ._C import (  # noqa: F401  (re-exported)
    ConfigError,
    Error,
    ImplementationError,
    InvalidArgumentError,
    NotFoundError,
    OutOfMemoryError,
    PluginError,
    StateError,
    UnavailableError,
    UnsupportedError,
    attention_backend,
    gelu_and_mul,
    gelu_tanh_and_mul,
    gemma_rms_norm,
    get_stream,
    init,
    load_plugin,
    mul_and_silu,
    oot_op_enabled,
    reload,
    resolve,
    rms_norm,
    rotary_embedding,
    set_stream,
    silu_and_mul,
    stats,
    stats_enable,
    stats_flush,
    stats_mode,
    stats_reset,
    stats_summary,
)

__version__ = _C.version()

# ---- introspection, shaped as the tool's --json (docs/json-output.md) -------
# The dicts carry the keys and value types of `fldispatch resolve/list/config
# --json` (schema 1): lists as lists, absent as None, switches as bools.
JSON_SCHEMA = 1
_SWITCHES = ("strict", "enabled", "use_flaggems", "oot_enabled", "external_enabled")


def _split(text, seps):
    if text is None:
        return None
    items = [text]
    for sep in seps:
        items = [part for item in items for part in item.split(sep)]
    return [item.strip(" \t") for item in items if item.strip(" \t")]


def _text_or_none(text):
    return text if text else None


def explain(op, device="cpu", dtype="float32"):
    """How `op` resolves on (device, dtype): the keys of `fldispatch resolve --json`."""
    d = _C.explain(op, device, dtype)
    d["schema"] = JSON_SCHEMA
    d["order"] = _split(d["order"], "|")
    d["policy_summary"] = d.pop("policy")
    return d


def plugins():
    """Every plugin the host found, as `fldispatch list --json`'s "plugins"."""
    out = []
    for p in _C.plugins():
        p["builtin"] = p["path"] in (None, "(built-in)")
        if p["builtin"]:
            p["path"] = None
        p["impl_count"] = p.pop("n_impls")
        p["reason"] = _text_or_none(p["reason"])
        p["detail"] = _text_or_none(p["detail"])
        out.append(p)
    return out


def impls():
    """Every registered implementation, as `fldispatch list --json`'s "impls"."""
    out = []
    for m in _C.impls():
        m["reason"] = _text_or_none(m.pop("unavailable_reason"))
        out.append(m)
    return out


def _config_value(key, value):
    if key in _SWITCHES and value in ("true", "false"):
        return value == "true"
    if key == "op_backends" or key.startswith("op_backends."):
        return _split(value, "|")
    if key.endswith(("_vendors", "_whitelist", "_blacklist")) or key == "custom_ops":
        return _split(value, ",")
    return _text_or_none(value)


def config():
    """The effective policy with each value's source: `fldispatch config --json`."""
    d = _C.config()
    d["schema"] = JSON_SCHEMA
    d["platform"]["config_path"] = _split(d["platform"]["config_path"] or "", ":")
    for field in d["policy"]:
        field["value"] = _config_value(field["key"], field["value"])
    d["policy_summary"] = d.pop("summary")
    d["plugin_path"] = _split(d["plugin_path"] or "", ":")
    return d


OPS = (
    "silu_and_mul",
    "mul_and_silu",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "rms_norm",
    "gemma_rms_norm",
    "rotary_embedding",
    "attention_backend",
)

__all__ = list(OPS) + [
    "resolve", "explain", "plugins", "impls", "config", "reload", "init", "load_plugin", "policy",
    "set_stream", "get_stream", "oot_op_enabled", "Error", "InvalidArgumentError",
    "NotFoundError", "UnavailableError", "ConfigError", "PluginError", "ImplementationError",
    "OutOfMemoryError", "UnsupportedError", "StateError", "__version__", "stats", "stats_reset",
    "stats_summary", "stats_enable", "stats_mode", "stats_flush",
]


def _csv(value, name):
    if value is None or isinstance(value, str):
        return value
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"policy(): {name} must be a str or a list of str, "
                        f"not {type(value).__name__}") from None
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"policy(): {name} must hold str, not {type(item).__name__}")
    return ",".join(items)


def _per_op_spec(per_op):
    """{op: "a|b" or [a, b]} -> "op=a|b;..." (VLLM_FL_PER_OP's grammar)."""
    if per_op is None or isinstance(per_op, str):
        return per_op
    if not isinstance(per_op, dict):
        raise TypeError("policy(): per_op must be a dict {op: tokens} or a str "
                        f"'op=a|b;op2=c', not {type(per_op).__name__}")
    parts = []
    for op, tokens in per_op.items():
        if not isinstance(op, str):
            raise TypeError(f"policy(): per_op keys must be op names (str), not {op!r}")
        if not isinstance(tokens, str):
            tokens = "|".join(_csv(tokens, f"per_op[{op!r}]").split(","))
        parts.append(f"{op}={tokens}")
    return ";".join(parts)


class policy:
    """A scoped, thread-local override of the dispatch policy.

        with fldispatch.policy(prefer="reference", per_op={"rms_norm": ["vendor", "reference"]},
                               strict=True, allow_vendors=["cpu"], deny_vendors="cuda"):
            ...

    Applies to the calling thread only, on top of the global policy
    (environment, YAML) and of enclosing policy() blocks; leaving the block
    restores what was in force. Invalid values raise ConfigError when the
    block is entered, and nothing is applied. Values follow the environment
    variables: prefer is flagos | vendor | reference; per_op maps an op to
    its token order (flagos, vendor, vendor:NAME, reference, impl:ID);
    allow_vendors replaces the allow list, deny_vendors adds to the deny
    list.

    The override belongs to the OS thread, not to a contextvars context:
    leave the block on the thread that entered it (StateError otherwise), and
    do not hold it across an await. The ops read it when they run, so code
    compiled with torch.compile follows the policy in force at each call; a
    CUDA graph replays the kernels chosen when it was captured.
    """

    __slots__ = ("_args", "_local")

    def __init__(self, prefer=None, per_op=None, strict=None, allow_vendors=None,
                 deny_vendors=None):
        if prefer is not None and not isinstance(prefer, str):
            raise TypeError(f"policy(): prefer must be a str, not {type(prefer).__name__}")
        if strict is not None and not isinstance(strict, bool):
            raise TypeError(f"policy(): strict must be a bool, not {type(strict).__name__}")
        self._args = (prefer, _per_op_spec(per_op), strict,
                      _csv(allow_vendors, "allow_vendors"), _csv(deny_vendors, "deny_vendors"))
        self._local = _threading.local()

    def __enter__(self):
        pushed = _C.policy_push(*self._args)
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(pushed)
        return self

    def __exit__(self, exc_type, exc, tb):
        stack = getattr(self._local, "stack", None)
        if not stack:
            raise StateError("fldispatch.policy: leaving a block on a thread that did not "
                             "enter it (the override is thread-local)")
        _C.policy_pop(stack.pop())
        return False

    def __repr__(self):
        names = ("prefer", "per_op", "strict", "allow_vendors", "deny_vendors")
        given = ", ".join(f"{n}={v!r}" for n, v in zip(names, self._args) if v is not None)
        return f"fldispatch.policy({given})"


def describe_policy():
    """This thread's effective policy as one line, e.g. 'prefer=flagos;strict=0'."""
    return _C.policy_describe()


class _StatsWorkerFlush:
    """A multiprocessing worker leaves through os._exit(), which runs no C exit
    handler: it writes the counters and the trace from multiprocessing's own
    exit hook instead (a plain process keeps the library's exit handler)."""

    @staticmethod
    def arm(_=None):
        from multiprocessing import util

        util.Finalize(None, _C.stats_flush, exitpriority=0)


_stats_worker_flush = _StatsWorkerFlush()


def _arm_worker_flush():
    import os

    if not any(os.environ.get(v) for v in ("VLLM_FL_STATS", "VLLM_FL_STATS_FILE",
                                             "VLLM_FL_TRACE")):
        return
    import multiprocessing
    from multiprocessing import util

    if multiprocessing.parent_process() is not None:  # imported in a worker
        _StatsWorkerFlush.arm()
    # Workers forked later: run in the child once multiprocessing has reset its hooks.
    util.register_after_fork(_stats_worker_flush, _StatsWorkerFlush.arm)


_arm_worker_flush()
