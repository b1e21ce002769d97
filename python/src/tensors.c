/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DLPack import: a Python object becomes a DLTensor view without a copy.
 *
 * Three ways in, fastest first:
 *   1. The DLPack C exchange API of the object's type
 *      (type(obj).__dlpack_c_exchange_api__, a capsule named
 *      "dlpack_exchange_api"; PyTorch has one). Its
 *      dltensor_from_py_object_no_sync fills a DLTensor on our stack with
 *      shape and strides owned by the tensor: no allocation, no Python call.
 *      The table is looked up once per type and cached. The producer's
 *      current stream comes from its current_work_stream.
 *   2. obj.__dlpack__(max_version=(1, 3)), which gives a versioned capsule
 *      (DLPack 1.x, with READ_ONLY and IS_COPIED flags), or a legacy capsule
 *      from a producer that predates max_version (TypeError: asked again
 *      without it). On CUDA/ROCm the stream the call will run on is passed
 *      as stream=..., so that the producer orders its work before ours.
 *   3. A capsule passed in directly (e.g. torch.utils.dlpack.to_dlpack()).
 *
 * Capsule ownership follows the DLPack Python protocol: the consumer renames
 * a capsule it consumes to "used_dltensor[_versioned]" (so the capsule's own
 * destructor leaves the tensor alone) and calls the managed tensor's deleter
 * when done. A tensor that is refused (read-only output, unknown version)
 * is not consumed: a capsule we created is dropped and its destructor frees
 * the tensor; a capsule the caller passed stays usable.
 */
#include <string.h>

#include "ext.h"

static PyObject *str_dlpack;        /* "__dlpack__" */
static PyObject *str_dlpack_device; /* "__dlpack_device__" */
static PyObject *str_exchange_api;  /* "__dlpack_c_exchange_api__" */
static PyObject *kw_max_version;    /* {"max_version": (1, 3)} */
static PyObject *empty_tuple;

int fldpy_tensors_init(void)
{
    str_dlpack = PyUnicode_InternFromString("__dlpack__");
    str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    str_exchange_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
    empty_tuple = PyTuple_New(0);
    kw_max_version = PyDict_New();
    if (!str_dlpack || !str_dlpack_device || !str_exchange_api || !empty_tuple || !kw_max_version)
        return -1;
    PyObject *version = Py_BuildValue("(ii)", FLDPY_DLPACK_MAJOR, FLDPY_DLPACK_MINOR);
    if (!version || PyDict_SetItemString(kw_max_version, "max_version", version) < 0) {
        Py_XDECREF(version);
        return -1;
    }
    Py_DECREF(version);
    return 0;
}

/* ---- the exchange API, cached per type ---------------------------------- */

#define TYPE_CACHE_SIZE 8

static struct {
    PyTypeObject *type; /* strong reference, so the address is not reused */
    const fldpy_dl_exchange_api *api;
} type_cache[TYPE_CACHE_SIZE];
static int type_cache_used;

/* The first table in the chain whose major version we understand. */
static const fldpy_dl_exchange_api *usable_api(const fldpy_dl_exchange_api *api)
{
    const fldpy_dl_exchange_header *h = api ? &api->header : NULL;
    while (h && h->version.major != FLDPY_DLPACK_MAJOR)
        h = h->prev_api;
    return (const fldpy_dl_exchange_api *)h;
}

/* Looks the table up on the type; NULL (no error) when it has none. */
static int lookup_api(PyTypeObject *type, const fldpy_dl_exchange_api **out)
{
    *out = NULL;
    PyObject *capsule = PyObject_GetAttr((PyObject *)type, str_exchange_api);
    if (!capsule) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    if (PyCapsule_IsValid(capsule, FLDPY_CAPSULE_EXCHANGE_API))
        *out = usable_api(PyCapsule_GetPointer(capsule, FLDPY_CAPSULE_EXCHANGE_API));
    /* The table lives as long as the process (DLPack requires it); the
     * capsule is only its carrier. */
    Py_DECREF(capsule);
    return 0;
}

static inline int exchange_api_of(PyTypeObject *type, const fldpy_dl_exchange_api **out)
{
    for (int i = 0; i < type_cache_used; i++)
        if (type_cache[i].type == type) {
            *out = type_cache[i].api;
            return 0;
        }
    if (lookup_api(type, out) < 0)
        return -1;
    int slot = type_cache_used < TYPE_CACHE_SIZE ? type_cache_used++ : TYPE_CACHE_SIZE - 1;
    Py_XDECREF(type_cache[slot].type);
    type_cache[slot].type = (PyTypeObject *)Py_NewRef((PyObject *)type);
    type_cache[slot].api = *out;
    return 0;
}

/*
 * The exchange API refused obj (PyTorch: a meta, sparse, nested or quantized
 * tensor): InvalidArgumentError naming the argument, with the producer's
 * exception (its first line in the message) chained as the cause.
 */
static void exchange_failed(PyObject *obj, const char *op, const char *arg)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (!type) {
        fldpy_raise(FLD_EINVAL, "%s: argument '%s': the DLPack exchange API of %S failed", op, arg,
                    (PyObject *)Py_TYPE(obj));
        return;
    }
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback && value)
        PyException_SetTraceback(value, traceback);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *detail = text ? PyUnicode_AsUTF8AndSize(text, NULL) : NULL;
    if (!detail)
        PyErr_Clear();
    char first_line[512] = "";
    if (detail)
        PyOS_snprintf(first_line, sizeof first_line, "%.*s", (int)strcspn(detail, "\n"), detail);
    fldpy_raise(FLD_EINVAL, "%s: argument '%s' cannot be passed through DLPack (%S): %s", op, arg,
                (PyObject *)Py_TYPE(obj), first_line);
    Py_XDECREF(text);
    PyObject *etype, *evalue, *etraceback;
    PyErr_Fetch(&etype, &evalue, &etraceback);
    PyErr_NormalizeException(&etype, &evalue, &etraceback);
    if (evalue && value) {
        PyException_SetCause(evalue, Py_NewRef(value)); /* steals */
        PyException_SetContext(evalue, Py_NewRef(value));
    }
    PyErr_Restore(etype, evalue, etraceback);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
}

/* ---- capsules ------------------------------------------------------------ */

/*
 * Drops a reference while an exception may be pending: a capsule's
 * destructor or a tensor's deleter may run Python code, which must not see
 * (or clear) our exception.
 */
static void decref_keeping_error(PyObject *obj)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    Py_DECREF(obj);
    PyErr_Restore(type, value, traceback);
}

/*
 * Takes the tensor out of a DLPack capsule. A refused capsule is left
 * unconsumed. own_capsule: the capsule is ours (a new reference that this
 * function takes over); otherwise the caller's.
 */
static int from_capsule(PyObject *capsule, bool own_capsule, const char *op, const char *arg,
                        bool writable, fldpy_tensor *t)
{
    const char *name = PyCapsule_GetName(capsule);
    if (!name && PyErr_Occurred())
        goto fail;
    if (name && strcmp(name, FLDPY_CAPSULE_VERSIONED) == 0) {
        fldpy_dl_managed_versioned *m = PyCapsule_GetPointer(capsule, name);
        if (!m)
            goto fail;
        if (m->version.major != FLDPY_DLPACK_MAJOR) {
            fldpy_raise(FLD_EINVAL,
                        "%s: argument '%s': DLPack version %u.%u is not supported (major %d "
                        "expected)",
                        op, arg, (unsigned)m->version.major, (unsigned)m->version.minor,
                        FLDPY_DLPACK_MAJOR);
            goto fail;
        }
        if (writable && (m->flags & FLDPY_DLPACK_FLAG_READ_ONLY)) {
            fldpy_raise(FLD_EINVAL,
                        "%s: argument '%s' is read-only (its producer exported it with DLPack's "
                        "READ_ONLY flag) but the op writes it",
                        op, arg);
            goto fail;
        }
        if (writable && (m->flags & FLDPY_DLPACK_FLAG_IS_COPIED)) {
            fldpy_raise(FLD_EINVAL,
                        "%s: argument '%s' was exported as a copy (DLPack IS_COPIED flag), so "
                        "what the op writes would be lost",
                        op, arg);
            goto fail;
        }
        if (PyCapsule_SetName(capsule, FLDPY_CAPSULE_VERSIONED_USED) < 0)
            goto fail;
        t->dl = m->dl_tensor;
        t->managed = m;
        t->versioned = true;
    } else if (name && strcmp(name, FLDPY_CAPSULE_LEGACY) == 0) {
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, name);
        if (!m || PyCapsule_SetName(capsule, FLDPY_CAPSULE_LEGACY_USED) < 0)
            goto fail;
        t->dl = m->dl_tensor;
        t->managed = m;
        t->versioned = false;
    } else if (name && (strcmp(name, FLDPY_CAPSULE_VERSIONED_USED) == 0 ||
                        strcmp(name, FLDPY_CAPSULE_LEGACY_USED) == 0)) {
        fldpy_raise(FLD_EINVAL,
                    "%s: argument '%s' is a DLPack capsule that was already consumed (named "
                    "'%s'); a capsule can be used once, pass the tensor itself",
                    op, arg, name);
        goto fail;
    } else {
        fldpy_raise(FLD_EINVAL, "%s: argument '%s' is a capsule named '%s', not a DLPack tensor",
                    op, arg, name ? name : "(null)");
        goto fail;
    }
    t->capsule = own_capsule ? capsule : Py_NewRef(capsule);
    return 0;

fail:
    if (own_capsule)
        decref_keeping_error(capsule);
    return -1;
}

/* ---- __dlpack__ ---------------------------------------------------------- */

/* (device_type, device_id) from obj.__dlpack_device__(). */
static int dlpack_device(PyObject *obj, const char *op, const char *arg, int *type, int *id)
{
    PyObject *dev = PyObject_CallMethodObjArgs(obj, str_dlpack_device, NULL);
    if (!dev)
        return -1;
    int ok = PyTuple_Check(dev) && PyTuple_Size(dev) == 2;
    long t = ok ? PyLong_AsLong(PyTuple_GetItem(dev, 0)) : -1;
    long i = ok ? PyLong_AsLong(PyTuple_GetItem(dev, 1)) : -1;
    Py_DECREF(dev);
    if (PyErr_Occurred())
        return -1;
    if (!ok) {
        fldpy_raise(FLD_EINVAL,
                    "%s: argument '%s': __dlpack_device__() did not return a (type, id) tuple", op,
                    arg);
        return -1;
    }
    *type = (int)t;
    *id = (int)i;
    return 0;
}

/*
 * The stream value of the Python protocol for the stream this thread's
 * calls on device_type run on: the pointer, or the device's default
 * (1 = CUDA's legacy default stream, 0 = ROCm's default). NULL (None) for
 * devices without streams.
 */
static PyObject *protocol_stream(int device_type)
{
    if (device_type != FLD_DEVICE_CUDA && device_type != FLD_DEVICE_ROCM)
        return NULL;
    void *stream = fld_get_stream(device_type);
    if (stream)
        return PyLong_FromVoidPtr(stream);
    return PyLong_FromLong(device_type == FLD_DEVICE_CUDA ? 1 : 0);
}

static PyObject *call_dlpack(PyObject *method, PyObject *stream, bool versioned)
{
    if (!stream)
        return PyObject_Call(method, empty_tuple, versioned ? kw_max_version : NULL);
    PyObject *kw = versioned ? PyDict_Copy(kw_max_version) : PyDict_New();
    if (!kw || PyDict_SetItemString(kw, "stream", stream) < 0) {
        Py_XDECREF(kw);
        return NULL;
    }
    PyObject *r = PyObject_Call(method, empty_tuple, kw);
    Py_DECREF(kw);
    return r;
}

static int from_producer(PyObject *obj, const char *op, const char *arg, bool writable,
                         fldpy_tensor *t)
{
    PyObject *method = PyObject_GetAttr(obj, str_dlpack);
    if (!method) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            fldpy_raise(FLD_EINVAL,
                        "%s: argument '%s' must be a tensor (an object with __dlpack__ and "
                        "__dlpack_device__, or a DLPack capsule), not %S",
                        op, arg, (PyObject *)Py_TYPE(obj));
        }
        return -1;
    }
    int device_type = FLD_DEVICE_CPU, device_id = 0;
    PyObject *stream = NULL;
    if (dlpack_device(obj, op, arg, &device_type, &device_id) < 0)
        goto fail;
    stream = protocol_stream(device_type);
    if (PyErr_Occurred())
        goto fail;
    PyObject *capsule = call_dlpack(method, stream, true);
    if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {
        /* A producer from before DLPack 1.0 does not know max_version. */
        PyErr_Clear();
        capsule = call_dlpack(method, stream, false);
    }
    if (!capsule)
        goto fail;
    Py_DECREF(method);
    Py_XDECREF(stream);
    if (!PyCapsule_CheckExact(capsule)) {
        fldpy_raise(FLD_EINVAL, "%s: argument '%s': __dlpack__() returned %S, not a capsule", op,
                    arg, (PyObject *)Py_TYPE(capsule));
        decref_keeping_error(capsule);
        return -1;
    }
    return from_capsule(capsule, true, op, arg, writable, t);

fail:
    Py_DECREF(method);
    Py_XDECREF(stream);
    return -1;
}

/* ---- public ---------------------------------------------------------------- */

static int import_any(PyObject *obj, const char *op, const char *arg, bool writable,
                      fldpy_tensor *t)
{
    t->capsule = NULL;
    t->managed = NULL;
    t->api = NULL;
    const fldpy_dl_exchange_api *api;
    if (exchange_api_of(Py_TYPE(obj), &api) < 0)
        return -1;
    if (api && api->dltensor_from_py_object_no_sync) {
        if (api->dltensor_from_py_object_no_sync(obj, &t->dl) != 0) {
            exchange_failed(obj, op, arg);
            return -1;
        }
        t->api = api;
        return 0;
    }
    if (api && api->managed_tensor_from_py_object_no_sync) {
        fldpy_dl_managed_versioned *m = NULL;
        if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0 || !m) {
            exchange_failed(obj, op, arg);
            return -1;
        }
        if (m->version.major != FLDPY_DLPACK_MAJOR ||
            (writable &&
             (m->flags & (FLDPY_DLPACK_FLAG_READ_ONLY | FLDPY_DLPACK_FLAG_IS_COPIED)))) {
            bool version_ok = m->version.major == FLDPY_DLPACK_MAJOR;
            if (m->deleter)
                m->deleter(m);
            if (!version_ok)
                fldpy_raise(FLD_EINVAL, "%s: argument '%s': DLPack major version not supported", op,
                            arg);
            else
                fldpy_raise(FLD_EINVAL,
                            "%s: argument '%s' is read-only or a copy (DLPack flags) but the op "
                            "writes it",
                            op, arg);
            return -1;
        }
        t->dl = m->dl_tensor;
        t->managed = m;
        t->versioned = true;
        t->api = api;
        return 0;
    }
    if (PyCapsule_CheckExact(obj))
        return from_capsule(obj, false, op, arg, writable, t);
    return from_producer(obj, op, arg, writable, t);
}

/*
 * What the extension itself reads of a tensor before the library validates
 * it (the element count that decides whether the GIL is released): the
 * shape array must be there for every dimension. A producer that exports a
 * rank without a shape is refused here, naming the argument, so that nothing
 * reads through the NULL pointer.
 */
static int check_shape(const fldpy_tensor *t, const char *op, const char *arg)
{
    if (t->dl.ndim < 0) {
        fldpy_raise(FLD_EINVAL, "%s: argument '%s': the DLPack tensor has a negative rank (%d)", op,
                    arg, (int)t->dl.ndim);
        return -1;
    }
    if (t->dl.ndim > 0 && !t->dl.shape) {
        fldpy_raise(FLD_EINVAL,
                    "%s: argument '%s': the DLPack tensor has rank %d but its shape is NULL", op,
                    arg, (int)t->dl.ndim);
        return -1;
    }
    return 0;
}

int fldpy_tensor_import(PyObject *obj, const char *op, const char *arg, bool writable,
                        fldpy_tensor *t)
{
    if (import_any(obj, op, arg, writable, t) < 0)
        return -1;
    if (check_shape(t, op, arg) < 0) {
        fldpy_tensor_release(t);
        return -1;
    }
    return 0;
}

void fldpy_tensor_release(fldpy_tensor *t)
{
    t->api = NULL;
    if (!t->managed && !t->capsule)
        return;
    /* Deleters may run Python code (they drop the producer's references). */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (t->managed) {
        if (t->versioned) {
            fldpy_dl_managed_versioned *m = t->managed;
            if (m->deleter)
                m->deleter(m);
        } else {
            DLManagedTensor *m = t->managed;
            if (m->deleter)
                m->deleter(m);
        }
        t->managed = NULL;
    }
    Py_CLEAR(t->capsule);
    PyErr_Restore(type, value, traceback);
}

int64_t fldpy_tensor_numel(const DLTensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] <= 0)
            return 0; /* empty, or negative: the library refuses it */
        if (__builtin_mul_overflow(n, t->shape[i], &n))
            return INT64_MAX;
    }
    return n;
}

int fldpy_tensor_stream(const fldpy_tensor *t, void **stream, bool *found)
{
    *found = false;
    *stream = NULL;
    if (!t->api || !t->api->current_work_stream || t->dl.device.device_type == kDLCPU)
        return 0;
    if (t->api->current_work_stream((int)t->dl.device.device_type, t->dl.device.device_id,
                                    stream) != 0) {
        if (!PyErr_Occurred())
            fldpy_raise(FLD_EINVAL,
                        "the DLPack exchange API gave no current stream for device type %d id "
                        "%d",
                        (int)t->dl.device.device_type, (int)t->dl.device.device_id);
        return -1;
    }
    *found = true;
    return 0;
}
