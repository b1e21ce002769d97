"""The library's public C calls the compatibility layer needs and fldispatch's
Python API does not offer (yet): the global policy's fields, its reset, the
failure memory, the log level. Called through ctypes on the very library the
extension loaded (fldispatch/lib/libfldispatch.so.0), so they act on the same
registry and policy. Where fldispatch's Python API has a function for one of
these, _bridge uses that instead.
"""

from __future__ import annotations

import ctypes
import os

import fldispatch

_lib = None


def lib():
    global _lib
    if _lib is None:
        path = os.path.join(os.path.dirname(fldispatch._C.__file__), "lib", "libfldispatch.so.0")
        if not os.path.exists(path):
            path = "libfldispatch.so.0"
        mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_GLOBAL", 0)
        try:
            handle = ctypes.CDLL(path, mode=mode)
        except OSError:
            handle = ctypes.CDLL(path)
        handle.fld_last_error.restype = ctypes.c_char_p
        handle.fld_policy_set.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        handle.fld_clear_failures.argtypes = [ctypes.c_char_p]
        handle.fld_log_set_level.argtypes = [ctypes.c_int]
        handle.fld_log_set_level.restype = None
        _lib = handle
    return _lib


def _check(rc: int) -> None:
    if rc == 0:
        return
    message = (lib().fld_last_error() or b"").decode("utf-8", "replace")
    if rc == -4:
        raise fldispatch.ConfigError(message)
    if rc == -9:
        raise fldispatch.StateError(message)
    raise fldispatch.Error(message)


def _text(value):
    return None if value is None else str(value).encode()


def policy_set(key: str, value) -> None:
    """fld_policy_set(): one field of the global policy, in its variable's grammar."""
    _check(lib().fld_policy_set(_text(key), _text(value)))


def policy_reset() -> None:
    _check(lib().fld_policy_reset())


def clear_failures(op=None) -> None:
    _check(lib().fld_clear_failures(_text(op)))


def log_set_level(level: int) -> None:
    lib().fld_log_set_level(int(level))


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Failure(ctypes.Structure):
    _fields_ = [("op", ctypes.c_char_p), ("device_type", ctypes.c_int),
                ("dtype", _DLDataType), ("impl_id", ctypes.c_char_p)]


_VISIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Failure), ctypes.c_void_p)


def failures():
    """[(op, impl_id)] the failure memory skips now (empty when the library cannot list them)."""
    fn = getattr(lib(), "fld_foreach_failure", None)
    if fn is None:
        return None
    out = []

    def visit(info, user):
        out.append((info.contents.op.decode(), info.contents.impl_id.decode()))
        return 0

    callback = _VISIT(visit)
    _check(fn(callback, None))
    return out


def describe_file(path: str):
    """fld_policy_push_file() on this thread, the description, fld_policy_pop(): the
    policy a YAML file gives, read by the core; None without fld_policy_push_file."""
    handle = lib()
    push = getattr(handle, "fld_policy_push_file", None)
    if push is None:
        return None
    push.argtypes = [ctypes.c_char_p]
    _check(push(_text(path)))
    try:
        return fldispatch.describe_policy()
    finally:
        handle.fld_policy_pop()


WHOLE = 1  # FLD_POLICY_WHOLE

# fld_policy_describe()'s words for the fields beyond upstream's five -> fld_policy_set() keys
_DESCRIBED = {"enabled": "enabled", "flaggems": "use_flaggems", "oot": "oot_enabled",
              "external": "external_enabled", "flagos_white": "flagos_whitelist",
              "flagos_black": "flagos_blacklist", "oot_white": "oot_whitelist",
              "oot_black": "oot_blacklist", "external_white": "external_whitelist",
              "external_black": "external_blacklist", "custom": "custom_ops"}


def _arrays(fields):
    n = len(fields)
    keys = (ctypes.c_char_p * n)(*[k.encode() for k, _ in fields])
    values = (ctypes.c_char_p * n)(*[_text(v) for _, v in fields])
    return n, keys, values


def has_fields() -> bool:
    return hasattr(lib(), "fld_policy_push_fields") and hasattr(lib(), "fld_policy_set_fields")


def other_fields(described: str):
    """The fields of a described policy beyond upstream's five, as (key, value) pairs."""
    head = described.partition(";per=")[0]
    out = []
    for part in head.split(";"):
        word, _, value = part.partition("=")
        if word in _DESCRIBED:
            out.append((_DESCRIBED[word], value))
    return out


def set_fields(fields, whole: bool = False) -> None:
    """fld_policy_set_fields(): several global fields at once, all or nothing."""
    n, keys, values = _arrays(fields)
    _check(lib().fld_policy_set_fields(ctypes.c_uint(WHOLE if whole else 0), ctypes.c_size_t(n),
                                       keys, values))


def push_fields(fields, whole: bool = False) -> int:
    """fld_policy_push_fields() as one scoped override; returns the depth before it."""
    handle = lib()
    handle.fld_policy_depth.restype = ctypes.c_size_t
    depth = handle.fld_policy_depth()
    n, keys, values = _arrays(fields)
    _check(handle.fld_policy_push_fields(ctypes.c_uint(WHOLE if whole else 0), ctypes.c_size_t(n),
                                         keys, values))
    return depth


def pop_to(depth: int) -> None:
    lib().fld_policy_pop_to(ctypes.c_size_t(depth))
