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
