# SPDX-License-Identifier: Apache-2.0
"""A DLPack producer made with ctypes, for what NumPy and a CPU PyTorch
cannot show: tensors that claim another device (host memory labelled CUDA),
DLPack flags, unsupported versions, legacy-only producers, the C exchange
API with a known current stream, and a count of deleter calls.

FakeTensor(array, ...) exports the NumPy array's memory. Every export is
recorded in .exports (the keyword arguments __dlpack__ got) and every
deleter call in .deleted; a capsule dropped unconsumed is deleted by the
capsule destructor, as the protocol says.
"""

import ctypes
import itertools
from typing import Any

import numpy as np

kDLCPU, kDLCUDA, kDLROCM, kDLMetal = 1, 2, 10, 8
READ_ONLY, IS_COPIED = 1, 2

_c_int64_p = ctypes.POINTER(ctypes.c_int64)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", _c_int64_p), ("strides", _c_int64_p),
                ("byte_offset", ctypes.c_uint64)]


class DLVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedVersioned(ctypes.Structure):
    pass


class DLManagedLegacy(ctypes.Structure):
    pass


VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedVersioned))
LEGACY_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedLegacy))
DLManagedVersioned._fields_ = [("version", DLVersion), ("manager_ctx", ctypes.c_void_p),
                               ("deleter", VERSIONED_DELETER), ("flags", ctypes.c_uint64),
                               ("dl_tensor", DLTensor)]
DLManagedLegacy._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", LEGACY_DELETER)]

_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# PyCapsule keeps the name pointer: these bytes must live forever.
VERSIONED_NAME = b"dltensor_versioned"
LEGACY_NAME = b"dltensor"

_DTYPES = {np.dtype(np.float32): (2, 32), np.dtype(np.float16): (2, 16),
           np.dtype(np.int64): (0, 64), np.dtype(np.int32): (0, 32)}

# Exports alive, by the address of their managed struct.
_live: dict[int, dict[str, Any]] = {}
_ids = itertools.count(1)


def _owner_of(address):
    entry = _live.pop(address, None)
    if entry is not None:
        entry["tensor"].deleted += 1


@VERSIONED_DELETER
def _delete_versioned(managed):
    _owner_of(ctypes.addressof(managed.contents))


@LEGACY_DELETER
def _delete_legacy(managed):
    _owner_of(ctypes.addressof(managed.contents))


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # The producer's duty: a capsule nobody consumed frees its tensor.
    for name, kind in ((VERSIONED_NAME, DLManagedVersioned), (LEGACY_NAME, DLManagedLegacy)):
        if _api.PyCapsule_IsValid(capsule, name):
            address = _api.PyCapsule_GetPointer(capsule, name)
            managed = kind.from_address(address)
            managed.deleter(ctypes.pointer(managed))
            return


def _fill(dl, tensor):
    a = tensor.array
    code, bits = _DTYPES[a.dtype]
    shape = (ctypes.c_int64 * a.ndim)(*a.shape)
    strides = (ctypes.c_int64 * a.ndim)(*(s // a.itemsize for s in a.strides))
    dl.data = a.ctypes.data
    dl.device = DLDevice(tensor.device_type, tensor.device_id)
    dl.ndim = a.ndim
    dl.dtype = DLDataType(code, bits, 1)
    dl.shape = ctypes.cast(shape, _c_int64_p)
    dl.strides = ctypes.cast(strides, _c_int64_p)
    dl.byte_offset = 0
    if tensor.edit is not None:
        tensor.edit(dl)
    return shape, strides


class FakeTensor:
    """array: the NumPy array whose memory is exported. version: the
    (major, minor) written into versioned exports. legacy_only: __dlpack__
    refuses max_version with TypeError, as producers before DLPack 1.0.
    edit: called with each exported DLTensor after it is filled, to make
    it malformed (a NULL shape, a wild rank)."""

    def __init__(self, array, device_type=kDLCUDA, device_id=0, flags=0, version=(1, 3),
                 legacy_only=False, edit=None):
        self.array = array
        self.edit = edit
        self.device_type = device_type
        self.device_id = device_id
        self.flags = flags
        self.version = version
        self.legacy_only = legacy_only
        self.exports = []
        self.deleted = 0

    def __dlpack_device__(self):
        return (self.device_type, self.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.legacy_only and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.exports.append({"stream": stream, "max_version": max_version})
        if max_version is not None and max_version[0] >= 1:
            managed: DLManagedVersioned | DLManagedLegacy = DLManagedVersioned()
            managed.version = DLVersion(*self.version)
            managed.flags = self.flags
            managed.deleter = _delete_versioned
            name = VERSIONED_NAME
        else:
            managed = DLManagedLegacy()
            managed.deleter = _delete_legacy
            name = LEGACY_NAME
        keep = _fill(managed.dl_tensor, self)
        _live[ctypes.addressof(managed)] = {"tensor": self, "keep": (managed, keep),
                                            "id": next(_ids)}
        return _api.PyCapsule_New(ctypes.addressof(managed), name, _capsule_destructor)

    def capsule(self, **kwargs):
        return self.__dlpack__(**kwargs)


# ---- the DLPack C exchange API ----------------------------------------------------

_FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
_MANAGED_FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)
_TO_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_ALLOC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p)
_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                           ctypes.POINTER(ctypes.c_void_p))


class _ExchangeHeader(ctypes.Structure):
    _fields_ = [("version", DLVersion), ("prev_api", ctypes.c_void_p)]


class _ExchangeAPI(ctypes.Structure):
    _fields_ = [("header", _ExchangeHeader), ("allocator", _ALLOC),
                ("managed_from_py", _MANAGED_FROM_PY), ("managed_to_py", _TO_PY),
                ("dltensor_from_py", _FROM_PY), ("current_work_stream", _STREAM)]


# The stream the fake framework reports: STREAM_BASE + device id; for device
# FAILING_DEVICE it fails (returns -1; a ctypes callback cannot leave a
# Python exception set for its caller).
STREAM_BASE = 0x5EED0000
FAILING_DEVICE = 7
stream_queries: list[tuple[int, int]] = []
_views: dict[int, tuple[object, object]] = {}


@_FROM_PY
def _dltensor_from_py(obj, out):
    keep = _fill(out.contents, obj)
    _views[id(obj)] = keep  # shape and strides must outlive the call
    return 0


@_STREAM
def _current_work_stream(device_type, device_id, out):
    stream_queries.append((device_type, device_id))
    if device_id == FAILING_DEVICE:
        return -1
    out[0] = STREAM_BASE + device_id
    return 0


@_MANAGED_FROM_PY
def _unused_managed_from_py(obj, out):
    return -1


@_TO_PY
def _unused_to_py(tensor, out):
    return -1


@_ALLOC
def _unused_alloc(prototype, out, ctx, set_error):
    return -1


_exchange = _ExchangeAPI(_ExchangeHeader(DLVersion(1, 3), None), _unused_alloc,
                         _unused_managed_from_py, _unused_to_py, _dltensor_from_py,
                         _current_work_stream)
EXCHANGE_NAME = b"dlpack_exchange_api"
_exchange_capsule = _api.PyCapsule_New(ctypes.addressof(_exchange), EXCHANGE_NAME,
                                       _CAPSULE_DESTRUCTOR())  # no destructor: a static table


class ExchangeTensor(FakeTensor):
    """A FakeTensor whose type publishes the DLPack C exchange API, whose
    current stream on device N is STREAM_BASE + N."""

    __dlpack_c_exchange_api__ = _exchange_capsule
