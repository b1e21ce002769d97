# SPDX-License-Identifier: Apache-2.0
"""Python implementations in libfldispatch's registry, and any op by name.

    import fldispatch

    def my_silu(x):                      # any callable: torch, Triton, an extension op
        ...
    fldispatch.register_impl("my_silu", my_silu, impl_id="vendor.acme", kind="vendor",
                             vendor="acme", devices=["cuda"], dtypes=["float16"])
    y = fldispatch.call_op("my_silu", x)                 # selected under the policy
    f = fldispatch.resolve_op("my_silu"); y = f(x)       # follows policy changes

    with fldispatch.registering("acme_ops", version="1.0"):   # all-or-nothing
        fldispatch.register_impl(...)
        fldispatch.register_impl(...)

The implementations join the registry the C plugins fill: `fldispatch.impls()`,
`explain()`, `resolve()` and `python -m fldispatch list` show them, the policy
(prefer, per-op orders, vendor lists, white/blacklists, manifest) selects them,
and a Python exception is an implementation failure (fallback and failure
memory as for a C kernel; the exception is the __cause__ of the error the
caller gets). Plugins are discovered on first use from the entry-point groups
`fldispatch.plugins` and `vllm_fl.plugin` and from VLLM_FL_PLUGIN_MODULES.
See docs/python.md.
"""

import logging as _logging
import os as _os
import sys as _sys
import threading as _threading
import time as _time
import types as _types
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from . import _C
from . import devices as _devices

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

# The kinds of <fldispatch/plugin.h> (_C.kinds()): each known by its policy
# token and its impl_id prefix ("flagos" and "default" are one kind).
KIND_CODES: dict[str, int] = {name: k["code"] for k in _C.kinds() for name in (k["token"], k["prefix"])}
KIND_PREFIX: dict[int, str] = {k["code"]: k["prefix"] for k in _C.kinds()}
DEFAULT_PRIORITY: dict[int, int] = {k["code"]: k["priority"] for k in _C.kinds()}
# The library keeps a priority as a C int.
PRIORITY_RANGE = (-2**31, 2**31 - 1)
# the library's device table: its names, aliases and PyTorch's device types
DEVICE_BITS = _devices.BITS
# the library's dtype table: both names of each row, and PyTorch's other names
DTYPE_BITS = {name: mask for short, long, mask in _C.dtypes() for name in (short, long)}
DTYPE_BITS.update(half=DTYPE_BITS["float16"], float=DTYPE_BITS["float32"])
ALL_DEVICES = _devices.ALL_BITS
ALL_DTYPES = sum(mask for _, _, mask in _C.dtypes())

#: The entry-point groups read on first use: ours, and vllm-plugin-FL's.
PLUGIN_GROUP = "fldispatch.plugins"
UPSTREAM_PLUGIN_GROUP = "vllm_fl.plugin"
PLUGIN_MODULES_ENV = "VLLM_FL_PLUGIN_MODULES"

_local = _threading.local()
_logger = _logging.getLogger(__name__)


def _kind_code(kind: object, op: str, impl_id: str) -> int:
    value = getattr(kind, "value", kind)
    if isinstance(value, str) and value.lower() in KIND_CODES:
        return KIND_CODES[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and value in KIND_PREFIX:
        return value
    raise ValueError(f"register_impl(): op '{op}', impl '{impl_id}': invalid kind {kind!r} "
                     "(valid: 'flagos' or 'default', 'vendor', 'reference')")


def _mask(values: object, table: Mapping[Any, int], what: str, op: str, impl_id: str, full: int) -> int:
    if values is None:
        return full
    if isinstance(values, str) or not hasattr(values, "__iter__"):
        values = [values]
    mask = 0
    for v in values:
        name = getattr(v, "type", None) if what == "device" and not isinstance(v, str) else v
        if what == "dtype" and not isinstance(v, str):
            name = str(v).rsplit(".", 1)[-1]  # torch.float16 -> "float16"
        if isinstance(name, str):
            name = name.split(":", 1)[0].lower()
        bit = table.get(name)
        if bit is None:
            raise ValueError(f"register_impl(): op '{op}', impl '{impl_id}': unknown {what} "
                             f"{v!r} (valid: {', '.join(sorted(set(table)))})")
        mask |= bit
    if not mask:
        raise ValueError(f"register_impl(): op '{op}', impl '{impl_id}': empty {what} list")
    return mask


def _availability(is_available: Callable[[], object] | None, op: str, impl_id: str) -> str | None:
    """None when available, else the reason: asked once, now, with the GIL held."""
    if is_available is None:
        return None
    # The result's truth value (and a reason's str()) is the predicate's too:
    # an exception from either makes the implementation unavailable.
    try:
        ok = is_available()
        why = None
        if isinstance(ok, tuple):
            ok, why = (ok + (None,))[:2]
        if ok:
            return None
        reason = str(why) if why else "is_available() returned False"
    except Exception as exc:  # noqa: BLE001 - the predicate's failure is the reason
        reason = f"is_available() raised {type(exc).__qualname__}: {_text(exc)}"
    return reason.replace("\0", "\\0")


def _text(exc: BaseException) -> str:
    """str(exc), or a placeholder when that raises too."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return f"<{type(exc).__qualname__} whose str() raised>"


# What the library takes for one implementation (fld_binding_register): op, impl_id, kind
# code, vendor, priority, device mask, dtype mask, the callable and why it is unavailable.
_Record = tuple[str, str, int, str | None, int, int, int, Callable[..., Any], str | None]


def _record(op: str, fn: Callable[..., Any], impl_id: str, kind: str | Enum, vendor: str | None,
            priority: int | None, devices: object, dtypes: object,
            is_available: Callable[[], object] | None) -> _Record:
    if not isinstance(op, str) or not op:
        raise ValueError(f"register_impl(): the op name must be a non-empty str, not {op!r}")
    if not isinstance(impl_id, str) or not impl_id:
        raise ValueError(f"register_impl(): op '{op}': impl_id must be a non-empty str "
                         f"('<kind>.<name>'), not {impl_id!r}")
    code = _kind_code(kind, op, impl_id)
    if not callable(fn):
        raise TypeError(f"register_impl(): op '{op}', impl '{impl_id}': fn is not callable "
                        f"({type(fn).__name__} object)")
    if is_available is not None and not callable(is_available):
        raise TypeError(f"register_impl(): op '{op}', impl '{impl_id}': is_available is not "
                        f"callable ({type(is_available).__name__} object)")
    if priority is None:
        priority = DEFAULT_PRIORITY[code]
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"register_impl(): op '{op}', impl '{impl_id}': priority must be an "
                        f"int, not {type(priority).__name__}")
    if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise ValueError(f"register_impl(): op '{op}', impl '{impl_id}': priority {priority} is "
                         f"out of range ({PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]})")
    if vendor is not None and not isinstance(vendor, str):
        raise TypeError(f"register_impl(): op '{op}', impl '{impl_id}': vendor must be a str")
    if code == 1 and not vendor:
        raise ValueError(f"register_impl(): op '{op}', impl '{impl_id}': kind 'vendor' "
                         "requires vendor=")
    prefix = KIND_PREFIX[code] + "."
    if not impl_id.startswith(prefix) or len(impl_id) == len(prefix):
        raise ValueError(f"register_impl(): op '{op}', impl '{impl_id}': an impl_id of kind "
                         f"'{KIND_PREFIX[code]}' looks like '{prefix}<name>'")
    return (op, impl_id, code, vendor if code == 1 else vendor, priority,
            _mask(devices, DEVICE_BITS, "device", op, impl_id, ALL_DEVICES),
            _mask(dtypes, DTYPE_BITS, "dtype", op, impl_id, ALL_DTYPES),
            fn, _availability(is_available, op, impl_id))


def _default_plugin(fn: object) -> tuple[str, str]:
    module = getattr(fn, "__module__", None) or "python"
    name = module.split(".", 1)[0].replace("<", "").replace(">", "") or "python"
    return name, "python:" + name


def _caller_plugin(depth: int = 2) -> str:
    name = _sys._getframe(depth).f_globals.get("__name__", "python") or "python"
    name = name.split(".", 1)[0].replace("<", "").replace(">", "") or "python"
    return name


#: Called with op after each declaration (fldispatch.torch defines the torch op).
declaration_hooks: list[Callable[[str], object]] = []


def declare_op(op: str, schema: str, *, plugin: str | None = None, version: str = "") -> None:
    """Declares the signature of op, a torch-schema-like string such as
    "(Tensor(a!) out, Tensor x, float alpha=1.0) -> ()" (docs/python.md):
    call_op() then checks and converts its arguments, C plugins' kernels of
    op can serve it, and fldispatch.torch exposes it as torch.ops.fldispatch.<op>
    (torch.compile(fullgraph=True) traces call_op(op, ...) into it). The same
    signature again is fine; another one, from a C plugin or Python, raises
    InvalidArgumentError naming both declarations, as does a malformed string.
    Inside a registering() block it is declared at the block's end, before
    its implementations."""
    if not isinstance(op, str) or not isinstance(schema, str):
        raise TypeError(f"declare_op(): op and schema must be str, not {type(op).__name__} "
                        f"and {type(schema).__name__}")
    _ensure_plugins()
    batch = getattr(_local, "batch", None)
    if batch is not None and plugin in (None, batch.name):
        batch.declarations.append((op, schema))
        return
    name = plugin or _caller_plugin()
    _declare(name, version, "python:" + name, op, schema)


def _declare(name: str, version: str | None, origin: str, op: str, schema: str) -> None:
    # The library's check is the whole check: a signature it refuses leaves
    # nothing recorded, and what follows a declaration it took cannot undo
    # it, so a hook that fails (torch refusing the op) only warns.
    _C.declare_op(name, version or "", origin, op, schema)
    for hook in declaration_hooks:
        try:
            hook(op)
        except Exception as exc:  # noqa: BLE001 - the declaration stands
            _logger.warning("op '%s' (declared by plugin '%s'): %s failed: %s: %s", op, name,
                            getattr(hook, "__qualname__", hook), type(exc).__name__, _text(exc))


def register_impl(op: str, fn: Callable[..., Any], *, impl_id: str, kind: str | Enum,
                  vendor: str | None = None, priority: int | None = None, devices: object = None,
                  dtypes: object = None, is_available: Callable[[], object] | None = None,
                  plugin: str | None = None, version: str = "", schema: str | None = None) -> None:
    """Registers the callable fn as implementation impl_id of op.

    kind: "flagos" (or "default"), "vendor" (needs vendor=) or "reference",
    or an enum whose value is one of them; impl_id: "<default|vendor|reference>.<name>";
    priority: default 150, 100, 50 by kind; devices / dtypes: names
    ("cuda", "float16", torch dtypes) or None for all; is_available: a
    predicate asked once, now (False, an exception, or (False, reason) make
    the implementation unavailable, with the reason shown by list/explain).
    plugin: the plugin record it belongs to (default: the enclosing
    registering() block, else fn's top-level module). schema: the op's
    signature, declared first (declare_op()). Registers at once,
    unless inside a registering() block (then at the block's end, all or
    nothing). Errors: TypeError / ValueError naming op and impl_id, and
    fldispatch.StateError when a manifest freezes the registry.
    """
    _ensure_plugins()
    rec = _record(op, fn, impl_id, kind, vendor, priority, devices, dtypes, is_available)
    batch = getattr(_local, "batch", None)
    if batch is not None and plugin in (None, batch.name):
        if schema is not None:
            batch.declarations.append((op, schema))
        batch.records.append(rec)
        return
    name, origin = (plugin, "python:" + plugin) if plugin else _default_plugin(fn)
    if schema is not None:
        _declare(name, version, origin, op, schema)
    _C.register_impls(name, version or "", origin, [rec])


class registering:
    """Registers everything register_impl() is given inside the block at its
    end, all or nothing, under one plugin record; an exception inside the
    block (or a registration error at its end) registers nothing and records
    the plugin as rejected with the reason (plugins() shows it)."""

    def __init__(self, plugin: str, version: str = "", origin: str | None = None) -> None:
        self.name = plugin
        self.version = version
        self.origin = origin or "python:" + plugin
        self.records: list[_Record] = []
        self.declarations: list[tuple[str, str]] = []
        self._outer: registering | None = None

    def __enter__(self) -> "registering":
        self._outer = getattr(_local, "batch", None)
        _local.batch = self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: _types.TracebackType | None) -> Literal[False]:
        _local.batch = self._outer
        if isinstance(exc, KeyboardInterrupt):
            return False  # the user's interrupt: nothing registered, nothing recorded
        if exc is not None:
            _reject(self.name, self.version, self.origin,
                    f"registration raised {cast(type, exc_type).__qualname__}: {_text(exc)}")
            return False
        for op, schema in self.declarations:
            _declare(self.name, self.version, self.origin, op, schema)
        # on failure fld_binding_register recorded the rejection with its reason
        _C.register_impls(self.name, self.version, self.origin, self.records)
        return False

    # vllm-plugin-FL's OpRegistry calls, so that an upstream register function
    # handed this object works: register_impl(OpImpl) and register_many([...]).
    def register_impl(self, impl: Any, fn: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        if fn is None and hasattr(impl, "op_name"):
            _register_upstream(impl, self.name)
        else:
            kwargs.setdefault("plugin", self.name)
            register_impl(impl, fn, **kwargs)  # type: ignore[arg-type]  # fn None: TypeError there

    def register_many(self, impls: Iterable[Any]) -> None:
        for impl in impls:
            self.register_impl(impl)


def _register_upstream(impl: Any, plugin: str) -> None:
    """An object shaped as vllm-plugin-FL's OpImpl (op_name, impl_id, kind, fn, vendor,
    priority, is_available())."""
    avail = getattr(impl, "is_available", None)
    register_impl(impl.op_name, impl.fn, impl_id=impl.impl_id, kind=impl.kind,
                  vendor=getattr(impl, "vendor", None),
                  priority=getattr(impl, "priority", None),
                  is_available=avail if callable(avail) else None, plugin=plugin)


def _reject(name: str, version: str | None, origin: str, reason: str) -> None:
    try:
        _C.binding_reject(name, version or "", origin, reason)
    except _C.Error:
        pass


# ---- discovery -----------------------------------------------------------------

_discovered = False
# Guards the discovery's state below, held only while it is read or changed
# (never while a plugin's code runs), and taken only by `with`, whose taking
# and releasing no KeyboardInterrupt can come between (a lock's own
# __enter__ is C; a Condition's or an Event's is Python, where one can).
_state = _threading.Lock()
# While discovery runs: the discovering thread (None while none runs), the
# threads alive when it began, and the plugin it is loading, (name, source).
_discoverer: int | None = None
_threads_before: frozenset[int | None] = frozenset()
_loading: tuple[str, str] | None = None
#: (name, source, ok, reason) of every Python plugin looked at, in order.
discovered_plugins: list[tuple[str, str, bool, str | None]] = []

# A thread's first call that waits for a discovery on another thread: when the
# discovering thread joins this thread, or waits for the future this thread
# runs, the wait would never end (StateError); when this thread was born
# during the discovery and the discovering thread waits on some other thread,
# future, queue or event for this long, it may be waiting for this one (a
# WARNING, once).
DEADLOCK_WARN_S = 5.0
_POLL_S = 0.05
_WAIT_MODULES = frozenset(("threading", "queue", "concurrent.futures._base"))


def _ensure_plugins() -> bool:
    """Loads the Python plugins once, on the first registry read from Python.

    Complete or retried: discovery is marked done only once every plugin
    has been looked at. Another thread's first call waits for it (so it
    never sees a registry that is half-filled); the discovering thread's
    own calls (a plugin that calls an op while registering) go on without
    waiting. A plugin that waits for a thread of its own which calls
    fldispatch would deadlock: that thread's call raises StateError naming
    the plugin instead. A KeyboardInterrupt, wherever it comes, propagates
    and leaves discovery not done and no thread its owner: the next call,
    from any thread, resumes with the plugins not yet looked at.
    Returns True when discovery is complete, False on the discovering
    thread during it."""
    global _discovered, _discoverer, _loading
    if _discovered:
        return True
    me = _threading.get_ident()
    if _discoverer == me:
        return False
    try:
        if not _claim_discovery(me):
            return True
        discover_plugins()
        _discovered = True
    finally:
        # the discovery's state is released in this finally, which covers
        # every point after the claim: no lock is held across plugins' code,
        # so an exception between taking a lock and a try cannot leave one
        # taken
        with _state:
            if _discoverer == me:
                _discoverer = None
                _loading = None
    return True


def _claim_discovery(me: int) -> bool:
    """Makes this thread the discoverer (True), or returns False once
    another thread's discovery is done; while one runs, waits for it,
    raising StateError where waiting would never end (see
    DEADLOCK_WARN_S)."""
    global _discoverer, _threads_before
    since = None
    warned = False
    pause = _POLL_S / 64
    while True:
        with _state:
            if _discovered:
                return False
            if _discoverer is None:
                _discoverer = me
                _threads_before = frozenset(t.ident for t in _threading.enumerate())
                return True
            owner = _discoverer
        # polled, pauses growing to _POLL_S: a discovery happens once a process
        _time.sleep(pause)
        pause = min(pause * 2, _POLL_S)
        # what the discoverer waits on is read with the lock released: a
        # warning's log handler may call fldispatch
        waits_on = _waited_on(owner) if owner is not None else None
        if waits_on is not None and _is_this_thread(waits_on):
            raise _C.StateError(_deadlock_message(owner))
        if waits_on is None or me in _threads_before:
            since = None
            continue
        now = _time.monotonic()
        since = since or now
        if not warned and now - since >= DEADLOCK_WARN_S:
            warned = True
            name, source = _loading or ("?", "?")
            _logger.warning("Python plugin '%s' (%s) has been registering on thread '%s' for "
                            "%.0f s, waiting on a thread, a future, a queue or an event, while "
                            "thread '%s', started since, waits for that registration to finish: "
                            "if the plugin waits for that thread, this is a deadlock (a register "
                            "function must not wait for a thread that calls fldispatch)", name,
                            source, _thread_name(owner), now - since,
                            _threading.current_thread().name)


def _waited_on(ident: int) -> list[object] | None:
    """What thread ident waits on, when it is blocked in a wait of threading,
    queue or concurrent.futures: the objects (a Thread, a Future, a Condition)
    whose methods it is in, innermost first; None otherwise."""
    frame = _sys._current_frames().get(ident)
    objects: list[object] = []
    while frame is not None and frame.f_globals.get("__name__") in _WAIT_MODULES:
        objects.append(frame.f_locals.get("self"))
        frame = frame.f_back
    return objects or None


def _is_this_thread(objects: list[object]) -> bool:
    """Whether one of objects is this thread, or the future it runs (a
    ThreadPoolExecutor's work item on this thread's stack)."""
    current = _threading.current_thread()
    if any(o is current for o in objects):
        return True
    frame: _types.FrameType | None = _sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "concurrent.futures.thread" and \
                frame.f_code.co_name == "run":
            future = getattr(frame.f_locals.get("self"), "future", None)
            if future is not None and any(o is future for o in objects):
                return True
        frame = frame.f_back
    return False


def _thread_name(ident: int | None) -> str:
    return next((t.name for t in _threading.enumerate() if t.ident == ident), str(ident))


def _deadlock_message(owner: int | None) -> str:
    name, source = _loading or ("?", "?")
    return (f"fldispatch: Python plugin '{name}' ({source}) is registering on thread "
            f"'{_thread_name(owner)}', which waits for this thread, while this thread waits for "
            f"that registration to finish: a deadlock. A plugin's register function must not "
            f"wait for a thread that calls fldispatch (start it and let it run after the "
            f"registration)")


def _after_fork_in_child() -> None:
    """A child forked while another thread ran discovery has no such thread:
    discovery resumes at the child's first call with the plugins not yet
    looked at. A fork from the discovering thread itself (a plugin's
    register function) goes on with its discovery. Either way the child's
    lock is a new one (the parent's may have been held by a thread the
    child does not have)."""
    global _state, _discoverer, _loading
    _state = _threading.Lock()
    if _discoverer == _threading.get_ident():
        return
    _discoverer = None
    _loading = None


if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)


def _call_plugin(obj: object, registrar: object, source: str) -> bool:
    if callable(obj) and not isinstance(obj, type):
        obj(registrar)
        return True
    for attr in ("fldispatch_register", "vllm_fl_register", "register"):
        fn = getattr(obj, attr, None)
        if callable(fn):
            fn(registrar)
            return True
    raise LookupError(f"{source} has no register function (fldispatch_register, "
                      "vllm_fl_register or register)")


def _plugin_failed(name: str, source: str, what: str, exc: BaseException) -> None:
    reason = f"{type(exc).__qualname__}: {_text(exc)}"
    _reject(name, "", f"python:{source}", f"{what} {reason}")
    discovered_plugins.append((name, source, False, reason))
    _logger.warning("Python plugin '%s' (%s) was rejected: %s %s", name, source, what, reason)


def _load_one(name: str, source: str, load: Callable[[], object], upstream: bool) -> None:
    """Imports and registers one plugin all-or-nothing; records the outcome.

    A plugin's exception is its failure, recorded and never raised, whatever
    its class: SystemExit or any other BaseException from a plugin's import
    or register function rejects that plugin (WARNING naming it), it does
    not end the process or the discovery. KeyboardInterrupt alone is the
    user's: it propagates, and the plugin is not recorded (looked at again
    on the next call)."""
    global _loading
    _loading = (name, source)
    batch = registering(name, origin=f"python:{source}")
    try:
        obj = load()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - recorded, never raised
        _plugin_failed(name, source, "import failed:", exc)
        return
    try:
        registrar: object = batch
        if upstream and _upstream_registry_factory is not None:
            registrar = _upstream_registry_factory(batch)
        with batch:
            _call_plugin(obj, registrar, source)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - a plugin's failure is recorded, never raised
        _plugin_failed(name, source, "registration raised", exc)
        return
    discovered_plugins.append((name, source, True, None))


_upstream_registry_factory: Callable[[registering], object] | None = None


def set_upstream_registry_factory(factory: Callable[[registering], object] | None) -> None:
    """What vllm_fl.plugin entry points receive as their registry: factory(batch)
    returns it (the compatibility module's OpRegistry view); default: the
    registering() batch itself, which accepts OpImpl-shaped objects."""
    global _upstream_registry_factory
    _upstream_registry_factory = factory


def _entry_points(group: str) -> "list[EntryPoint]":
    try:
        from importlib.metadata import entry_points
    except ImportError:  # pragma: no cover
        return []
    try:
        return list(entry_points(group=group))
    except TypeError:  # Python < 3.10 API
        return list(entry_points().get(group, []))


def _python_module_names() -> list[str]:
    """Entries of VLLM_FL_PLUGIN_MODULES that are not plugin files."""
    raw = _os.environ.get(PLUGIN_MODULES_ENV, "")
    if not raw.strip():
        return []
    c_names: set[str]
    try:
        c_names = {p["name"] for p in _C.plugins()}
    except _C.Error:  # the configuration error is the caller's to see, at its own call
        c_names = set()
    out: list[str] = []
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry or "/" in entry or entry.endswith(".so") or entry in c_names:
            continue
        if all(part.isidentifier() for part in entry.split(".")):
            out.append(entry)
    return out


# The package's own plugins (the flagos tier), registered first at discovery in
# the order added: each module adds its own when the package imports it, so
# that this module imports none of them.
_builtin_plugins: list[Callable[[], object]] = []
_Register = TypeVar("_Register", bound=Callable[[], object])


def _add_builtin_plugin(register: _Register) -> _Register:
    """Runs register() at discovery, before the entry points; returns it."""
    _builtin_plugins.append(register)
    return register


def discover_plugins() -> None:
    """Loads the Python plugins: entry points of fldispatch.plugins, then of
    vllm_fl.plugin, then the module names of VLLM_FL_PLUGIN_MODULES. A
    plugin whose import or registration raises is rejected (plugins() shows
    the reason) and registers nothing; the others are not affected."""
    import functools
    import importlib

    global _loading
    for register in tuple(_builtin_plugins):
        _loading = (getattr(register, "__module__", "fldispatch"), "built-in")
        register()
    # after an interrupted discovery: the plugins looked at already stay as they are
    seen = {source for _, source, _, _ in discovered_plugins}
    for group, upstream in ((PLUGIN_GROUP, False), (UPSTREAM_PLUGIN_GROUP, True)):
        for ep in _entry_points(group):
            source = f"{group}:{ep.name}"
            if source not in seen:
                _load_one(ep.name, source, ep.load, upstream)
    for module in _python_module_names():
        if module not in seen:
            _load_one(module, module, functools.partial(importlib.import_module, module), True)


def call_op(name: str, *args: Any, **kwargs: Any) -> Any:
    """Calls op `name` with these arguments; returns what the implementation returns."""
    _ensure_plugins()
    return _C.call_op(name, *args, **kwargs)


def resolve_op(name: str) -> _C.OpCaller:
    """A callable for op `name` that selects under the policy in force at each call."""
    _ensure_plugins()
    return _C.resolve_op(name)
