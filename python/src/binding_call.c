/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Any op called by name from Python.
 *
 *   call_op()         an op outside the catalog: the arguments stay Python
 *                     objects in a `struct pyframe`, passed to
 *                     fld_binding_call(), which selects under the thread's
 *                     policy and runs the chain (fallback, failure memory);
 *                     the winner's return value comes back in the frame.
 *                     A catalog op goes to its typed function (ops.c);
 *   OpCaller          what resolve_op() returns: the same call with the op
 *                     looked up once; it follows policy changes because
 *                     every call selects again (the library's cached chain).
 */
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>

#include "ext.h"

/* The direct call of one (device, dtype) of an op: the Python implementation
 * the library runs first, valid while fld_binding_stamp() returns stamp. */
struct fastslot {
    uint64_t stamp;
    uint64_t checked; /* the stamp fld_binding_call() last said fld_binding_direct at */
    struct pyimpl *impl;
};

#define KEY_SLOTS 16 /* 4 device kinds x (3 dtypes + any) */

/* One op known by name: its handle, or the catalog function that calls it. */
struct opentry {
    fld_op op;
    PyObject *typed; /* the catalog op's fldispatch._C function, or NULL */
    struct fastslot fast[KEY_SLOTS];
    uint64_t keyed_stamp; /* the stamp `keyed` was asked at */
    int keyed;            /* whether selection depends on the call's (device, dtype) */
    fldpy_sig sig;        /* its declared signature, if any: calls go through fld_call() */
};

static unsigned key_slot(int device, DLDataType dtype)
{
    unsigned d = device == FLD_DEVICE_CUDA   ? 1
                 : device == FLD_DEVICE_ROCM ? 2
                 : device == FLD_DEVICE_CPU  ? 0
                                             : 3;
    int t = fld_dtype_index(dtype);
    return d * 4 + (unsigned)(t < 0 ? 3 : t);
}

static PyObject *op_cache;   /* name -> capsule of struct opentry */
static PyObject *module_ref; /* fldispatch._C, for the catalog functions */
static PyObject *str_dlpack_device;

static void opentry_free(PyObject *capsule)
{
    struct opentry *e = PyCapsule_GetPointer(capsule, "fldispatch.opentry");
    if (e) {
        Py_XDECREF(e->typed);
        free(e);
    }
}

static struct opentry *op_entry(PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "call_op(): the op name must be a str, not %R",
                     (PyObject *)Py_TYPE(name));
        return NULL;
    }
    PyObject *cap = PyDict_GetItemWithError(op_cache, name);
    if (cap)
        return PyCapsule_GetPointer(cap, "fldispatch.opentry");
    if (PyErr_Occurred() || fldpy_ensure_plugins() < 0)
        return NULL;
    const char *s = fldpy_str("call_op", "op", name);
    if (!s)
        return NULL;
    struct opentry e;
    memset(&e, 0, sizeof e);
    if (fldpy_catalog_args_kind(s)) {
        e.typed = PyObject_GetAttr(module_ref, name);
        if (!e.typed)
            return NULL;
    } else {
        e.op = fld_op_lookup(s);
        if (!e.op) {
            /* fld_resolve()'s message names the closest ops ("did you mean") */
            const char *impl = NULL;
            int rc = fld_resolve(s, FLD_DEVICE_CPU, FLD_DTYPE_ANY, &impl);
            fldpy_raise_status(rc != FLD_OK ? rc : FLD_ENOTFOUND);
            return NULL;
        }
        if (fldpy_sig_prepare(s, &e.sig) < 0)
            return NULL;
    }
    struct opentry *heap = malloc(sizeof *heap);
    if (!heap) {
        Py_XDECREF(e.typed);
        PyErr_NoMemory();
        return NULL;
    }
    *heap = e;
    cap = PyCapsule_New(heap, "fldispatch.opentry", opentry_free);
    if (!cap) {
        Py_XDECREF(heap->typed);
        free(heap);
        return NULL;
    }
    int rc = PyDict_SetItem(op_cache, name, cap);
    Py_DECREF(cap);
    return rc < 0 ? NULL : heap;
}

/* type -> True/False: whether its instances are DLPack producers (cached per type). */
static PyObject *tensor_types;

static int is_tensor_type(PyObject *type)
{
    PyObject *known = PyDict_GetItemWithError(tensor_types, type);
    if (known)
        return known == Py_True;
    if (PyErr_Occurred())
        return -1;
    int has = PyObject_HasAttr(type, str_dlpack_device);
    if (PyDict_SetItem(tensor_types, type, has ? Py_True : Py_False) < 0)
        return -1;
    return has;
}

/* The platform's device type, for a call without tensors: decided once. */
static int platform_device(void)
{
    static int cached;
    if (!cached) {
        fld_platform_info info;
        int type = FLD_DEVICE_CPU;
        if (fld_platform(&info) != FLD_OK || fld_device_from_name(info.name, &type) != FLD_OK)
            type = FLD_DEVICE_CPU;
        cached = type;
    }
    return cached;
}

/*
 * Looks at one argument for the call's key: the device of the first tensor,
 * the dtype of the first tensor with a float32, float16 or bfloat16 dtype.
 * Returns true once both are known.
 */
static bool key_from_arg(PyObject *a, int *device, DLDataType *dtype)
{
    if (a == Py_None || PyLong_Check(a) || PyFloat_Check(a) || PyUnicode_Check(a))
        return false;
    int is = is_tensor_type((PyObject *)Py_TYPE(a));
    if (is <= 0) {
        PyErr_Clear();
        return false;
    }
    fldpy_tensor t = FLDPY_TENSOR_INIT;
    if (fldpy_tensor_import(a, "call_op", "tensor", false, &t) < 0) {
        PyErr_Clear();
        return false;
    }
    if (!*device)
        *device = (int)t.dl.device.device_type;
    bool have_dtype = fld_dtype_index(t.dl.dtype) >= 0;
    if (have_dtype)
        *dtype = t.dl.dtype;
    fldpy_tensor_release(&t);
    return have_dtype;
}

/*
 * The (device, dtype) of a call: the device of its first tensor argument
 * (positional, then keyword), the dtype of its first tensor with a float32,
 * float16 or bfloat16 dtype; no tensor: the platform's device, any dtype.
 */
static void call_key(PyObject *const *args, Py_ssize_t n, PyObject *kwargs, int *device,
                     DLDataType *dtype)
{
    *device = 0;
    *dtype = FLD_DTYPE_ANY;
    for (Py_ssize_t i = 0; i < n; i++)
        if (key_from_arg(args[i], device, dtype))
            return;
    if (kwargs) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kwargs, &pos, &k, &v))
            if (key_from_arg(v, device, dtype))
                return;
    }
    if (!*device)
        *device = platform_device();
}

/* The library's (device, dtype) for a call of e, from its arguments only
 * when the selection depends on it or calls are counted. */
static void entry_key(struct opentry *e, PyObject *const *items, Py_ssize_t n, PyObject *kwargs,
                      uint64_t now, int *device, DLDataType *dtype)
{
    if (!now || e->keyed_stamp != now) {
        uint64_t stamp = 0;
        int keyed = fld_binding_op_keyed(e->op, &stamp);
        e->keyed = keyed != 0;
        e->keyed_stamp = keyed < 0 ? 0 : stamp;
    }
    /* While calls are counted, the table shows each call's own device and
     * dtype (a failure under "f16", not "any"); the chain is the same. */
    if (e->keyed || fld_stats_mode() != FLD_STATS_OFF) {
        call_key(items, n, kwargs, device, dtype);
    } else {
        *device = platform_device();
        *dtype = FLD_DTYPE_ANY;
    }
}

/* What a call of frame that returned rc gives Python: its interrupt, its
 * error (the last exception an implementation raised as __cause__), or the
 * winner's return value. */
static PyObject *frame_result(struct pyframe *frame, int rc)
{
    if (fldpy_interrupt_pending() || rc != FLD_OK) {
        Py_CLEAR(frame->result);
        if (fldpy_interrupt_pending()) {
            Py_CLEAR(frame->exc);
            fldpy_finish_call(rc);
            return NULL;
        }
        fldpy_raise_status(rc);
        fldpy_chain_cause(frame->exc);
        return NULL;
    }
    Py_XDECREF(frame->exc);
    if (!frame->result)
        Py_RETURN_NONE;
    return frame->result;
}

/* Runs a call of e whose frame holds its arguments; items[0..n) are its
 * positional and keyword values, kwargs its dict (tuple form). */
static PyObject *call_entry(struct opentry *e, struct pyframe *frame, PyObject *const *items,
                            Py_ssize_t n, PyObject *kwargs)
{
    uint64_t now = fld_binding_stamp();
    int device;
    DLDataType dtype;
    entry_key(e, items, n, kwargs, now, &device, &dtype);
    struct pyframe *outer = fldpy_frame_enter(frame);
    fldpy_interrupt_clear();
    struct fastslot *fs = &e->fast[key_slot(device, dtype)];
    int rc;
    /* Call sites for the statistics facility count here: one per call_op(). */
    if (fs->impl && now && fs->stamp == now) {
        /* The direct path: the library's choice is unchanged since it was made. */
        struct pyimpl *impl = fs->impl;
        rc = fldpy_call_python(impl, frame);
        if (rc != FLD_OK) {
            fs->impl = NULL;
            fs->checked = 0; /* asked again after the next call that succeeds */
            rc = fld_binding_first_failed(e->op, device, dtype, frame, impl, rc);
        }
    } else {
        /* What to call directly from then on: asked once per stamp. */
        const bool ask = fs->checked != now;
        fld_binding_direct direct;
        rc = fld_binding_call(e->op, device, dtype, frame, ask ? &direct : NULL);
        if (rc == FLD_OK && ask) {
            fs->checked = now;
            fs->impl = NULL;
            if (direct.fn == fldpy_run_impl && direct.stamp == now) {
                fs->impl = direct.ctx;
                fs->stamp = direct.stamp;
            }
        }
    }
    fldpy_frame_leave(outer);
    return frame_result(frame, rc);
}

/* CPU calls of declared ops on at least this many bytes release the GIL (ops.c's threshold). */
#define DECLARED_RELEASE_GIL_BYTES (64 * 1024)

/* A call of an op with a declared signature: marshalled into an fld_args
 * and run by fld_call(), which plugin kernels and Python implementations
 * (with the call's own Python arguments) serve alike. */
static PyObject *call_declared(struct opentry *e, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    fldpy_impl_exception_clear();
    fldpy_sig_call c;
    if (fldpy_sig_marshal(&e->sig, args, nargs, kwnames, &c) < 0)
        return NULL;
    struct pyframe frame = {.vargs = args, .nargs = nargs, .kwnames = kwnames, .native = &c.args};
    struct pyframe *outer = fldpy_frame_enter(&frame);
    fldpy_interrupt_clear();
    int rc;
    if (c.bytes >= DECLARED_RELEASE_GIL_BYTES) {
        PyThreadState *released = fldpy_release_gil();
        rc = fld_call(e->op, &c.args);
        fldpy_restore_gil(released);
    } else {
        rc = fld_call(e->op, &c.args);
    }
    fldpy_frame_leave(outer);
    PyObject *result = frame_result(&frame, rc);
    fldpy_sig_release(&c);
    return result;
}

void fldpy_binding_declared(PyObject *name)
{
    if (!name) {
        PyObject *names = PyDict_Keys(op_cache);
        for (Py_ssize_t i = 0; names && i < PyList_Size(names); i++)
            fldpy_binding_declared(PyList_GetItem(names, i));
        Py_XDECREF(names);
        PyErr_Clear();
        return;
    }
    PyObject *cap = PyDict_GetItemWithError(op_cache, name);
    struct opentry *e = cap ? PyCapsule_GetPointer(cap, "fldispatch.opentry") : NULL;
    const char *s = e && !e->typed ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    if (s && fldpy_sig_prepare(s, &e->sig) < 0)
        PyErr_Clear();
    PyErr_Clear();
}

static PyObject *py_call_op(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "call_op() needs the op name");
        return NULL;
    }
    struct opentry *e = op_entry(args[0]);
    if (!e)
        return NULL;
    if (e->typed)
        return fldpy_call_vector(e->typed, args + 1, nargs - 1, kwnames);
    if (e->sig.declared)
        return call_declared(e, args + 1, nargs - 1, kwnames);
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    struct pyframe frame = {.vargs = args + 1, .nargs = nargs - 1, .kwnames = kwnames};
    return call_entry(e, &frame, args + 1, nargs - 1 + nkw, NULL);
}

/* ---- OpCaller: what resolve_op() returns ------------------------------------- */

typedef struct {
    PyObject_HEAD PyObject *name;
    struct opentry *entry; /* owned by op_cache */
} OpCaller;

static PyObject *opcaller_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    OpCaller *c = (OpCaller *)self;
    if (c->entry->typed)
        return PyObject_Call(c->entry->typed, args, kwargs);
    Py_ssize_t n = PyTuple_Size(args);
    if (c->entry->sig.declared) {
        /* the vector form: positional values, then keyword values named by a tuple */
        Py_ssize_t nkw = kwargs ? PyDict_Size(kwargs) : 0;
        PyObject *items[FLDPY_SIG_MAX_ARGS * 2];
        if (n + nkw > FLDPY_SIG_MAX_ARGS * 2) {
            PyErr_Format(PyExc_TypeError, "%R: too many arguments", c->name);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            items[i] = PyTuple_GetItem(args, i);
        PyObject *kwnames = nkw ? PyTuple_New(nkw) : NULL;
        if (nkw && !kwnames)
            return NULL;
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *value;
        while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
            Py_INCREF(key);
            PyTuple_SetItem(kwnames, k, key);
            items[n + k++] = value;
        }
        PyObject *r = call_declared(c->entry, items, n, kwnames);
        Py_XDECREF(kwnames);
        return r;
    }
    PyObject *items[16];
    Py_ssize_t m = n < 16 ? n : 16;
    for (Py_ssize_t i = 0; i < m; i++)
        items[i] = PyTuple_GetItem(args, i);
    struct pyframe frame = {.args = args, .kwargs = kwargs};
    return call_entry(c->entry, &frame, items, m, kwargs);
}

static void opcaller_dealloc(PyObject *self)
{
    OpCaller *c = (OpCaller *)self;
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(c->name);
    freefunc f = PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *opcaller_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<fldispatch op %R>", ((OpCaller *)self)->name);
}

static PyType_Slot opcaller_slots[] = {
    {Py_tp_call, opcaller_call},
    {Py_tp_dealloc, opcaller_dealloc},
    {Py_tp_repr, opcaller_repr},
    {Py_tp_doc, "An op called by name: selects the implementation under the policy in force at "
                "each call."},
    {0, NULL},
};

static PyType_Spec opcaller_spec = {
    "fldispatch._C.OpCaller", sizeof(OpCaller), 0, Py_TPFLAGS_DEFAULT, opcaller_slots,
};

static PyObject *opcaller_type;

static PyObject *py_resolve_op(PyObject *self, PyObject *name)
{
    struct opentry *e = op_entry(name);
    if (!e)
        return NULL;
    allocfunc alloc = PyType_GetSlot((PyTypeObject *)opcaller_type, Py_tp_alloc);
    OpCaller *c = (OpCaller *)alloc((PyTypeObject *)opcaller_type, 0);
    if (!c)
        return NULL;
    Py_INCREF(name);
    c->name = name;
    c->entry = e;
    return (PyObject *)c;
}

int fldpy_binding_init(PyObject *module)
{
    module_ref = module; /* borrowed: the module outlives these functions */
    fldpy_call_vector_init();
    op_cache = PyDict_New();
    tensor_types = PyDict_New();
    str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    opcaller_type = PyType_FromSpec(&opcaller_spec);
    if (!op_cache || !tensor_types || !str_dlpack_device || !opcaller_type)
        return -1;
    Py_INCREF(opcaller_type);
    return PyModule_AddObject(module, "OpCaller", opcaller_type);
}

PyMethodDef fldpy_call_methods[] = {
    {"call_op", (PyCFunction)(void (*)(void))py_call_op, METH_FASTCALL | METH_KEYWORDS,
     "call_op(name, /, *args, **kwargs)\n--\n\nCalls any op by name; returns what the "
     "implementation returns."},
    {"resolve_op", py_resolve_op, METH_O,
     "resolve_op(name, /)\n--\n\nA callable for the op that follows policy changes."},
    {NULL, NULL, 0, NULL},
};
