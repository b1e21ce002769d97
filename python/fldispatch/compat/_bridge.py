"""The compatibility layer's only door into fldispatch's Python API.

Everything the upstream-shaped classes need from the library goes through the
few functions here: registering an OpImpl into the C registry, asking the C
selection which implementations an op resolves to, calling an op through the
C call path (fallback, strictness and failure memory are the core's), and the
policy (global set/reset, scoped overrides, the effective policy as text).
Keeping them in one file keeps the mapping readable, and is where a change in
fldispatch's Python API is absorbed.
"""

from __future__ import annotations

import contextlib

import fldispatch

from .. import iodump

_KIND_TOKEN = {"flagos": "flagos", "vendor": "vendor", "reference": "reference"}
# The C registry wants impl ids of the form '<prefix>.<name>', the prefix
# naming the kind; upstream accepts any string.
_KIND_PREFIX = {"flagos": "default", "vendor": "vendor", "reference": "reference"}
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def c_impl_id(kind: str, impl_id: str) -> str:
    """The id under which an upstream impl_id is registered in C.

    Ids that already read '<kind prefix>.<name>' with the characters C accepts
    are kept; any other gets the kind's prefix and has other characters
    replaced by '_' (the OpImpl keeps its own id).
    """
    prefix = _KIND_PREFIX[kind]
    if impl_id.startswith(prefix + ".") and len(impl_id) > len(prefix) + 1 and \
            all(c in _ID_CHARS for c in impl_id):
        return impl_id
    clean = "".join(c if c in _ID_CHARS else "_" for c in impl_id) or "_"
    return f"{prefix}.{clean}"


def register(op: str, impl_id: str, kind: str, fn, vendor, priority: int, is_available,
             into=None, plugin=None):
    """Register one Python implementation into the C registry.

    into: a registration batch of fldispatch (what a discovered plugin's
    register function fills, committed all-or-nothing), else at once, under
    the plugin record named `plugin`.
    Raises ValueError (with the library's message) when C refuses it.
    """
    kwargs = dict(impl_id=impl_id, kind=_KIND_TOKEN[kind], vendor=vendor,
                  priority=int(priority), is_available=is_available)
    try:
        if into is not None:
            into.register_impl(op, fn, **kwargs)
        else:
            fldispatch.register_impl(op, fn, plugin=plugin, **kwargs)
    except fldispatch.Error as e:
        raise ValueError(str(e)) from e


def impls_of(op: str) -> list:
    """The C registry's records of `op` (fldispatch.impls() rows)."""
    return [m for m in fldispatch.impls() if m["op"] == op]


def all_impls() -> list:
    return fldispatch.impls()


def ensure_plugins() -> None:
    """Load the core's plugins and fldispatch's Python plugins (once)."""
    fldispatch.init()
    reg = getattr(fldispatch, "registry", None)
    ensure = getattr(reg, "_ensure_plugins", None)
    if ensure is not None:
        ensure()


def set_plugin_registry_factory(factory) -> bool:
    """Have upstream-group plugins that fldispatch discovers register through factory(batch)."""
    reg = getattr(fldispatch, "registry", None)
    setter = getattr(reg, "set_upstream_registry_factory", None)
    if setter is None:
        return False
    setter(factory)
    return True


def discovered() -> list:
    """(name, source, ok) of the Python plugins fldispatch discovered."""
    reg = getattr(fldispatch, "registry", None)
    out = []
    for rec in getattr(reg, "discovered_plugins", ()):
        name, source, ok = rec[:3]
        out.append((name, "entry_point" if ":" in source else "env_module", bool(ok)))
    return out


def explain(op: str) -> dict:
    """The C selection for `op` now, on this thread's policy (fldispatch.explain's dict)."""
    return fldispatch.explain(op)


def op_exists(op: str) -> bool:
    try:
        fldispatch.explain(op)
    except fldispatch.NotFoundError:
        return False
    return True


def call(op: str, args, kwargs):
    """Call `op` through the C call path (selection, fallback, failure memory).

    The IO dump's wrapper is stepped over: the manager records the call under
    the op's upstream name itself.
    """
    return iodump._saved.get("call_op", fldispatch.call_op)(op, *args, **kwargs)


# ---- policy ----------------------------------------------------------------

def describe() -> str:
    """This thread's effective policy, as the core prints it."""
    return fldispatch.describe_policy()


def _csv(values):
    return None if values is None else ",".join(values)


def _per_op_spec(per_op):
    return ";".join(f"{op}={'|'.join(tokens)}" for op, tokens in (per_op or {}).items())


def _five(prefer, strict, per_op, allow_vendors, deny_vendors):
    """Upstream's five policy fields as fld_policy_set() keys and values."""
    return [("prefer", prefer), ("strict", "1" if strict else "0"),
            ("per_op", _per_op_spec(per_op)), ("allow_vendors", _csv(allow_vendors) or ""),
            ("deny_vendors", _csv(deny_vendors) or "")]


class _WholeScope:
    """One scoped override of this thread holding a whole policy: upstream's five
    fields as given, the others as in force when entered."""

    def __init__(self, fields):
        self._fields = fields
        self._depths = []

    def __enter__(self):
        from . import _capi

        fields = _capi.other_fields(describe()) + self._fields
        self._depths.append(_capi.push_fields(fields, whole=True))
        return self

    def __exit__(self, *exc):
        from . import _capi

        _capi.pop_to(self._depths.pop())
        return False


def set_global(prefer, strict, per_op, allow_vendors, deny_vendors):
    """Make these five fields the global policy (all checked before any is set)."""
    setter = getattr(fldispatch, "set_policy", None)
    if setter is not None:
        setter(prefer=prefer, strict=strict, per_op=per_op or {}, allow_vendors=allow_vendors,
               deny_vendors=deny_vendors)
        return
    from . import _capi

    fields = _five(prefer, strict, per_op, allow_vendors, deny_vendors)
    if _capi.has_fields():
        _capi.set_fields(fields)
        return
    # Validate the whole set on this thread first: a push checks every value
    # and applies nothing when one is wrong.
    with fldispatch.policy(prefer=prefer, strict=strict, per_op=per_op or None,
                           allow_vendors=_csv(allow_vendors) or None,
                           deny_vendors=_csv(deny_vendors) or None):
        pass
    _capi.policy_set("prefer", prefer)
    _capi.policy_set("strict", "1" if strict else "0")
    _capi.policy_set("per_op", _per_op_spec(per_op))
    _capi.policy_set("allow_vendors", _csv(allow_vendors) or "")
    _capi.policy_set("deny_vendors", _csv(deny_vendors) or "")


def reset_global():
    resetter = getattr(fldispatch, "reset_policy", None)
    if resetter is not None:
        resetter()
        return
    from . import _capi

    _capi.policy_reset()


def scoped_whole(prefer, strict, per_op, allow_vendors, deny_vendors):
    """A context that puts these five fields in force on this thread.

    With fldispatch's whole-policy scope every other field is the built-in
    default; without it the fields are pushed on top of the policy in force
    (so a global deny list or per-op order this policy does not name stays).
    """
    whole = getattr(fldispatch, "policy_scope", None)
    if whole is not None:
        return whole(prefer=prefer, strict=strict, per_op=per_op or {},
                     allow_vendors=allow_vendors, deny_vendors=deny_vendors)
    from . import _capi

    if _capi.has_fields():
        return _WholeScope(_five(prefer, strict, per_op, allow_vendors, deny_vendors))
    return fldispatch.policy(prefer=prefer, strict=strict, per_op=per_op or None,
                             allow_vendors=_csv(allow_vendors) or None,
                             deny_vendors=_csv(deny_vendors) or None)


def describe_file(path):
    """The policy a YAML file gives, as the core describes it; None when the
    library cannot read a file into a scope."""
    from . import _capi

    return _capi.describe_file(path)


def scoped_fields(**fields):
    """A context that changes some fields of this thread's policy."""
    return fldispatch.policy(**fields)


def failed_impls():
    """{op: set(impl_id)} from the core's failure memory."""
    lister = getattr(fldispatch, "failed_impls", None)
    if lister is not None:
        out = {}
        for rec in lister():
            op, impl_id = (rec["op"], rec["impl_id"]) if isinstance(rec, dict) else rec[:2]
            out.setdefault(op, set()).add(impl_id)
        return out
    from . import _capi

    out = {}
    for op, impl_id in _capi.failures() or ():
        out.setdefault(op, set()).add(impl_id)
    return out


def clear_failed(op=None):
    clearer = getattr(fldispatch, "clear_failed_impls", None)
    if clearer is not None:
        clearer(op)
        return
    from . import _capi

    _capi.clear_failures(op)


_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 40}


def set_log_level(level):
    setter = getattr(fldispatch, "set_log_level", None)
    if setter is not None:
        setter(level)
        return
    from . import _capi

    _capi.log_set_level(_LEVELS[str(level).upper()])


nullcontext = contextlib.nullcontext
