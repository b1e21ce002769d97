/*
 * Python implementations in the library's registry, and any op called by
 * name from Python.
 *
 *   register_impls()  hands Python callables to fld_host_register()
 *                     (<fldispatch/host_impl.h>): each becomes a host
 *                     implementation whose context is a `struct pyimpl`
 *                     (the callable, its op and id); run_impl() below is
 *                     the kernel the library calls for all of them;
 *   call_op()         an op outside the catalog: the arguments stay Python
 *                     objects in a `struct pyframe`, passed to
 *                     fld_host_call(), which selects under the thread's
 *                     policy and runs the chain (fallback, failure memory);
 *                     the winner's return value comes back in the frame.
 *                     A catalog op goes to its typed function (ops.c);
 *   OpCaller          what resolve_op() returns: the same call with the op
 *                     looked up once; it follows policy changes because
 *                     every call selects again (the library's cached chain).
 *
 * run_impl() is called by the library on whatever thread calls the op:
 *   - a thread that holds the GIL (a Python caller) calls the callable;
 *   - a thread on which ops.c released the GIL around a large catalog call
 *     takes it back for the callable (fldpy_release_gil());
 *   - any other thread (a C thread of the application) declines the call
 *     (FLD_EUNSUPPORTED, the message naming op, implementation and cause):
 *     the next candidate serves it; taking the GIL there could deadlock
 *     against a Python thread that waits for that C thread.
 * The arguments it passes: the frame's objects when the call is the frame's
 * (call_op), else a catalog op's argument struct converted to Python
 * (tensors as torch tensors when torch is imported, else DLPack capsules,
 * in the catalog order of fldispatch.<op>()). An op outside the catalog
 * called from C with its own struct cannot be converted: declined.
 *
 * A Python exception is an implementation failure (FLD_EIMPL, the message
 * naming op, implementation and exception); the exception is kept (frame,
 * or this thread's last one) and becomes the __cause__ of the error the
 * caller gets. An implementation of a catalog op must return None.
 */
#include <stdlib.h>
#include <string.h>

#include <fldispatch/host_impl.h>

#include "ext.h"

#ifdef Py_LIMITED_API
/* Exported by every CPython since 3.4, outside the limited API's headers. */
PyAPI_FUNC(int) PyGILState_Check(void);
#endif

/* ---- the GIL ------------------------------------------------------------ */

/* The thread state ops.c saved when it released the GIL on this thread. */
static _Thread_local PyThreadState *tls_released;
static volatile int interpreter_exiting;

PyThreadState *fldpy_release_gil(void)
{
    PyThreadState *s = PyEval_SaveThread();
    tls_released = s;
    return s;
}

void fldpy_restore_gil(PyThreadState *s)
{
    tls_released = NULL;
    PyEval_RestoreThread(s);
}

/* ---- the exception of the last failed implementation ---------------------- */

/* This thread's last exception raised by an implementation outside a frame. */
static _Thread_local PyObject *tls_impl_exception;

void fldpy_impl_exception_clear(void)
{
    if (tls_impl_exception) {
        PyObject *e = tls_impl_exception;
        tls_impl_exception = NULL;
        Py_DECREF(e);
    }
}

/* Sets the pending exception's __cause__ to exc (a new reference, stolen). */
static void chain_cause(PyObject *exc)
{
    if (!exc)
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value)
        PyException_SetCause(value, exc); /* steals exc */
    else
        Py_DECREF(exc);
    PyErr_Restore(type, value, tb);
}

PyObject *fldpy_raise_impl_status(int status)
{
    fldpy_raise_status(status);
    PyObject *exc = tls_impl_exception;
    tls_impl_exception = NULL;
    chain_cause(exc);
    return NULL;
}

/* ---- Python plugins, loaded on first use ---------------------------------- */

int fldpy_plugins_loaded;

int fldpy_load_plugins(void)
{
    fldpy_plugins_loaded = 1;
    PyObject *m = PyImport_ImportModule("fldispatch.registry");
    PyObject *r = m ? PyObject_CallMethod(m, "_ensure_plugins", NULL) : NULL;
    Py_XDECREF(m);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* ---- registered implementations -------------------------------------------- */

/* The context of one Python implementation; lives until the process ends. */
struct pyimpl {
    PyObject *fn;
    char *op;
    char *impl_id;
    int args_kind; /* fld_args_kind of a catalog op, 0 otherwise */
    struct pyimpl *next;
};

static struct pyimpl *all_impls;

/* The Python-side arguments of one call_op() call. */
struct pyframe {
    PyObject *args;   /* tuple */
    PyObject *kwargs; /* dict or NULL */
    PyObject *result; /* the winner's return value (new reference) */
    PyObject *exc;    /* the last exception an implementation raised */
};

static _Thread_local struct pyframe *tls_frame;

static void describe_exception(PyObject *exc, char *buf, size_t size)
{
    const char *tname = "exception";
    PyObject *type = (PyObject *)Py_TYPE(exc);
    PyObject *name = PyObject_GetAttrString(type, "__qualname__");
    PyObject *text = PyObject_Str(exc);
    const char *n = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    const char *t = text ? PyUnicode_AsUTF8AndSize(text, NULL) : NULL;
    PyErr_Clear();
    snprintf(buf, size, "%s%s%s", n ? n : tname, t && *t ? ": " : "", t ? t : "");
    Py_XDECREF(name);
    Py_XDECREF(text);
}

/* A DLTensor of a C caller as a Python object: a torch tensor when torch is
 * imported, else a DLPack capsule. The shape and strides are copied. */
static void capsule_free(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
        if (m && m->deleter)
            m->deleter(m);
    }
}

static void managed_free(DLManagedTensor *m)
{
    free(m);
}

static PyObject *tensor_object(const DLTensor *t)
{
    if (!t)
        Py_RETURN_NONE;
    int nd = t->ndim > 0 ? t->ndim : 0;
    DLManagedTensor *m = calloc(1, sizeof *m + 2 * (size_t)(nd ? nd : 1) * sizeof(int64_t));
    if (!m)
        return PyErr_NoMemory();
    int64_t *shape = (int64_t *)(m + 1), *strides = shape + nd;
    memcpy(shape, t->shape, (size_t)nd * sizeof *shape);
    if (t->strides) {
        memcpy(strides, t->strides, (size_t)nd * sizeof *strides);
    } else {
        int64_t s = 1;
        for (int i = nd - 1; i >= 0; i--) {
            strides[i] = s;
            s *= shape[i];
        }
    }
    m->dl_tensor = *t;
    m->dl_tensor.shape = shape;
    m->dl_tensor.strides = strides;
    m->deleter = managed_free;
    PyObject *capsule = PyCapsule_New(m, "dltensor", capsule_free);
    if (!capsule) {
        free(m);
        return NULL;
    }
    PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
    PyObject *tmod = modules ? PyDict_GetItemString(modules, "torch") : NULL;
    if (!tmod)
        return capsule;
    PyObject *tensor = PyObject_CallMethod(tmod, "from_dlpack", "O", capsule);
    Py_DECREF(capsule);
    return tensor;
}

/* A catalog op's argument struct as the positional arguments of its
 * fldispatch.<op>() function; NULL with an exception, or NULL and *why for
 * an op this cannot convert. */
static PyObject *catalog_args(const struct pyimpl *impl, const void *args, const char **why)
{
    *why = NULL;
    switch (impl->args_kind) {
    case FLD_ARGS_ACTIVATION: {
        const fld_activation_args *a = args;
        PyObject *out = tensor_object(a->out), *x = out ? tensor_object(a->x) : NULL;
        PyObject *t = x ? PyTuple_Pack(2, out, x) : NULL;
        Py_XDECREF(out);
        Py_XDECREF(x);
        return t;
    }
    case FLD_ARGS_RMS_NORM: {
        const fld_rms_norm_args *a = args;
        PyObject *v[5] = {tensor_object(a->out), NULL, NULL, NULL, NULL};
        PyObject *t = NULL;
        if (v[0] && (v[1] = tensor_object(a->x)) && (v[2] = tensor_object(a->weight)) &&
            (v[3] = tensor_object(a->residual)) && (v[4] = PyFloat_FromDouble(a->eps)))
            t = PyTuple_Pack(5, v[0], v[1], v[2], v[3], v[4]);
        for (int i = 0; i < 5; i++)
            Py_XDECREF(v[i]);
        return t;
    }
    case FLD_ARGS_ROTARY_EMBEDDING: {
        const fld_rotary_embedding_args *a = args;
        PyObject *v[6] = {tensor_object(a->positions), NULL, NULL, NULL, NULL, NULL};
        PyObject *t = NULL;
        if (v[0] && (v[1] = tensor_object(a->query)) && (v[2] = tensor_object(a->key)) &&
            (v[3] = PyLong_FromLongLong(a->head_size)) &&
            (v[4] = tensor_object(a->cos_sin_cache)) && (v[5] = PyBool_FromLong(a->is_neox)))
            t = PyTuple_Pack(6, v[0], v[1], v[2], v[3], v[4], v[5]);
        for (int i = 0; i < 6; i++)
            Py_XDECREF(v[i]);
        return t;
    }
    default:
        *why = impl->args_kind ? "its arguments have no Python form here"
                               : "the op is outside the catalog and was called from C with its "
                                 "own argument struct, which Python cannot read";
        return NULL;
    }
}

/* Calls impl with the GIL held; FLD_* status. */
static int call_python(struct pyimpl *impl, const void *args)
{
    struct pyframe *f = tls_frame;
    bool own = f && args == (const void *)f;
    PyObject *result = NULL;
    if (own) {
        result = PyObject_Call(impl->fn, f->args, f->kwargs);
    } else {
        const char *why;
        PyObject *pargs = catalog_args(impl, args, &why);
        if (!pargs && why) {
            fld_set_error("%s: Python implementation '%s' cannot take this call: %s", impl->op,
                          impl->impl_id, why);
            return FLD_EUNSUPPORTED;
        }
        if (pargs) {
            result = PyObject_Call(impl->fn, pargs, NULL);
            Py_DECREF(pargs);
        }
    }
    if (!result) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value)
            PyException_SetTraceback(value, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        char what[400] = "unknown error";
        if (value)
            describe_exception(value, what, sizeof what);
        fld_set_error("%s: Python implementation '%s' raised %s", impl->op, impl->impl_id, what);
        PyObject **slot = own ? &f->exc : &tls_impl_exception;
        Py_XDECREF(*slot);
        *slot = value;
        return FLD_EIMPL;
    }
    if (!own && result != Py_None) {
        PyObject *tn = PyObject_GetAttrString((PyObject *)Py_TYPE(result), "__name__");
        const char *name = tn ? PyUnicode_AsUTF8AndSize(tn, NULL) : NULL;
        PyErr_Clear();
        fld_set_error("%s: Python implementation '%s' returned a %s object; an implementation "
                      "of a catalog op returns None (it writes its outputs in place)",
                      impl->op, impl->impl_id, name ? name : "non-None");
        Py_XDECREF(tn);
        Py_DECREF(result);
        return FLD_EIMPL;
    }
    if (own) {
        Py_XDECREF(f->result);
        f->result = result;
    } else {
        Py_DECREF(result);
    }
    return FLD_OK;
}

/* The library's kernel for every Python implementation (host_impl.h). */
static int run_impl(void *ctx, const void *args)
{
    struct pyimpl *impl = ctx;
    if (interpreter_exiting) {
        fld_set_error("%s: Python implementation '%s' cannot run: the interpreter is exiting",
                      impl->op, impl->impl_id);
        return FLD_EUNSUPPORTED;
    }
    if (PyGILState_Check())
        return call_python(impl, args);
    PyThreadState *saved = tls_released;
    if (!saved) {
        fld_set_error("%s: Python implementation '%s' cannot run on this thread: the thread "
                      "does not hold the GIL (a C thread must take it with PyGILState_Ensure() "
                      "before calling an op that a Python implementation may serve)",
                      impl->op, impl->impl_id);
        return FLD_EUNSUPPORTED;
    }
    fldpy_restore_gil(saved);
    int rc = call_python(impl, args);
    fldpy_release_gil();
    return rc;
}

/* ---- register_impls(plugin, version, origin, records) ---------------------- */

static const char *str_or_null(PyObject *o)
{
    return o == Py_None ? NULL : PyUnicode_AsUTF8AndSize(o, NULL);
}

static void pyimpl_free(struct pyimpl *p)
{
    if (!p)
        return;
    Py_XDECREF(p->fn);
    free(p->op);
    free(p->impl_id);
    free(p);
}

struct catalog_find {
    const char *name;
    int kind;
};

static int find_catalog(const fld_catalog_op_info *info, void *user)
{
    struct catalog_find *f = user;
    if (strcmp(info->name, f->name) == 0) {
        f->kind = (int)info->args;
        return 1;
    }
    return 0;
}

/*
 * records: a list of tuples (op, impl_id, kind, vendor, priority, devices,
 * dtypes, fn, unavailable_reason), checked by registry.py.
 */
static PyObject *py_register_impls(PyObject *self, PyObject *args)
{
    const char *plugin, *version, *origin;
    PyObject *records;
    if (!PyArg_ParseTuple(args, "sssO!:register_impls", &plugin, &version, &origin, &PyList_Type,
                          &records))
        return NULL;
    Py_ssize_t n = PyList_Size(records);
    fld_host_impl *impls = calloc(n ? (size_t)n : 1, sizeof *impls);
    struct pyimpl **ctx = calloc(n ? (size_t)n : 1, sizeof *ctx);
    if (!impls || !ctx) {
        free(impls);
        free(ctx);
        return PyErr_NoMemory();
    }
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        PyObject *r = PyList_GetItem(records, i);
        PyObject *op, *id, *vendor, *fn, *why;
        int kind, priority;
        unsigned int devices, dtypes;
        if (!PyArg_ParseTuple(r, "UUiOiIIOO:register_impls record", &op, &id, &kind, &vendor,
                              &priority, &devices, &dtypes, &fn, &why))
            goto fail;
        struct pyimpl *p = calloc(1, sizeof *p);
        if (!p) {
            PyErr_NoMemory();
            goto fail;
        }
        ctx[i] = p;
        Py_INCREF(fn);
        p->fn = fn;
        p->op = strdup(PyUnicode_AsUTF8AndSize(op, NULL));
        p->impl_id = strdup(PyUnicode_AsUTF8AndSize(id, NULL));
        if (!p->op || !p->impl_id) {
            PyErr_NoMemory();
            goto fail;
        }
        struct catalog_find cf = {p->op, 0};
        fld_foreach_catalog_op(find_catalog, &cf);
        p->args_kind = cf.kind;
        impls[i] = (fld_host_impl){
            .op = p->op,
            .impl_id = p->impl_id,
            .kind = (fld_kind)kind,
            .vendor = str_or_null(vendor),
            .priority = priority,
            .devices = devices,
            .dtypes = dtypes,
            .fn = run_impl,
            .ctx = p,
            .unavailable_reason = str_or_null(why),
        };
        if (PyErr_Occurred())
            goto fail;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = fld_host_register(plugin, version, origin, impls, (size_t)n);
    Py_END_ALLOW_THREADS
    if (rc != FLD_OK) {
        fldpy_raise_status(rc);
        goto fail;
    }
    for (i = 0; i < n; i++) {
        ctx[i]->next = all_impls;
        all_impls = ctx[i];
    }
    free(impls);
    free(ctx);
    Py_RETURN_NONE;
fail:
    for (Py_ssize_t k = 0; k < n; k++)
        pyimpl_free(ctx[k]);
    free(impls);
    free(ctx);
    return NULL;
}

static PyObject *py_host_reject(PyObject *self, PyObject *args)
{
    const char *plugin, *version, *origin, *reason;
    if (!PyArg_ParseTuple(args, "ssss:host_reject", &plugin, &version, &origin, &reason))
        return NULL;
    int rc = fld_host_reject(plugin, version, origin, reason);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_interpreter_exiting(PyObject *self, PyObject *unused)
{
    interpreter_exiting = 1;
    Py_RETURN_NONE;
}

/* ---- call_op ------------------------------------------------------------------ */

/* One op known by name: its handle, or the catalog function that calls it. */
struct opentry {
    fld_op op;
    PyObject *typed; /* the catalog op's fldispatch._C function, or NULL */
};

static PyObject *op_cache;      /* name -> capsule of struct opentry */
static PyObject *module_ref;    /* fldispatch._C, for the catalog functions */
static PyObject *torch_dtypes;  /* torch.dtype -> DLDataType code, built lazily */
static PyObject *str_dlpack_device, *str_dtype;

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
    const char *s = PyUnicode_AsUTF8AndSize(name, NULL);
    if (!s)
        return NULL;
    struct catalog_find cf = {s, 0};
    fld_foreach_catalog_op(find_catalog, &cf);
    struct opentry e = {0};
    if (cf.kind) {
        e.typed = PyObject_GetAttr(module_ref, name);
        if (!e.typed)
            return NULL;
    } else {
        e.op = fld_op_lookup(s);
        if (!e.op) {
            fldpy_raise_status(FLD_ENOTFOUND);
            return NULL;
        }
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

/* The dtype of a tensor-like object, as a DLDataType; false when it has none
 * of the three float dtypes. */
static bool float_dtype_of(PyObject *obj, DLDataType *dt)
{
    PyObject *d = PyObject_GetAttr(obj, str_dtype);
    if (!d) {
        PyErr_Clear();
        return false;
    }
    bool ok = false;
    PyObject *code = torch_dtypes ? PyDict_GetItemWithError(torch_dtypes, d) : NULL;
    if (code) {
        long v = PyLong_AsLong(code);
        *dt = v == 1 ? FLD_DTYPE_F32 : v == 2 ? FLD_DTYPE_F16 : FLD_DTYPE_BF16;
        ok = true;
    } else {
        PyErr_Clear();
        PyObject *text = PyObject_Str(d);
        const char *t = text ? PyUnicode_AsUTF8AndSize(text, NULL) : NULL;
        if (t) {
            const char *dot = strrchr(t, '.');
            ok = fld_dtype_from_name(dot ? dot + 1 : t, dt) == FLD_OK;
            if (ok && torch_dtypes) {
                PyObject *v = PyLong_FromLong(dt->code == kDLBfloat ? 3 : dt->bits == 16 ? 2 : 1);
                if (v)
                    PyDict_SetItem(torch_dtypes, d, v);
                Py_XDECREF(v);
            }
        }
        PyErr_Clear();
        Py_XDECREF(text);
    }
    Py_DECREF(d);
    return ok;
}

/* Device type of an object with __dlpack_device__, or 0. */
static int device_of(PyObject *obj)
{
    PyObject *meth = PyObject_GetAttr((PyObject *)Py_TYPE(obj), str_dlpack_device);
    if (!meth) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(meth);
    PyObject *r = PyObject_CallMethodObjArgs(obj, str_dlpack_device, NULL);
    int type = 0;
    if (r && PyTuple_Check(r) && PyTuple_Size(r) >= 1) {
        long v = PyLong_AsLong(PyTuple_GetItem(r, 0));
        type = v > 0 ? (int)v : 0;
    }
    Py_XDECREF(r);
    PyErr_Clear();
    return type;
}

/* The platform's device type, for a call without tensors. */
static int platform_device(void)
{
    fld_platform_info info;
    int type = FLD_DEVICE_CPU;
    if (fld_platform(&info) == FLD_OK && fld_device_from_name(info.name, &type) != FLD_OK)
        type = FLD_DEVICE_CPU;
    return type;
}

/*
 * The (device, dtype) of a call: the device of its first tensor argument
 * (positional, then keyword), the dtype of its first tensor with a float32,
 * float16 or bfloat16 dtype; no tensor: the platform's device, any dtype.
 */
static void call_key(PyObject *const *args, Py_ssize_t n, int *device, DLDataType *dtype)
{
    *device = 0;
    *dtype = FLD_DTYPE_ANY;
    bool have_dtype = false;
    for (Py_ssize_t i = 0; i < n && (!*device || !have_dtype); i++) {
        PyObject *a = args[i];
        if (a == Py_None || PyLong_Check(a) || PyFloat_Check(a) || PyUnicode_Check(a) ||
            PyBool_Check(a))
            continue;
        int d = *device ? 0 : device_of(a);
        if (d)
            *device = d;
        if (!have_dtype && (d || *device))
            have_dtype = float_dtype_of(a, dtype);
    }
    if (!*device)
        *device = platform_device();
}

static PyObject *call_entry(struct opentry *e, PyObject *const *vargs, Py_ssize_t nargs,
                            PyObject *tuple, PyObject *kwargs)
{
    if (e->typed)
        return PyObject_Call(e->typed, tuple, kwargs);
    int device;
    DLDataType dtype;
    call_key(vargs, nargs, &device, &dtype);
    if (kwargs && device == platform_device() && dtype.bits == 0) {
        /* the first tensor may be a keyword argument */
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            int d;
            DLDataType t;
            call_key(&v, 1, &d, &t);
            if (t.bits) {
                device = d;
                dtype = t;
                break;
            }
        }
    }
    struct pyframe frame = {.args = tuple, .kwargs = kwargs};
    struct pyframe *outer = tls_frame;
    tls_frame = &frame;
    int rc = fld_host_call(e->op, device, dtype, &frame);
    tls_frame = outer;
    if (rc != FLD_OK) {
        Py_XDECREF(frame.result);
        fldpy_raise_status(rc);
        chain_cause(frame.exc);
        return NULL;
    }
    Py_XDECREF(frame.exc);
    if (!frame.result)
        Py_RETURN_NONE;
    return frame.result;
}

static PyObject *py_call_op(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_Size(args);
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "call_op() needs the op name");
        return NULL;
    }
    struct opentry *e = op_entry(PyTuple_GetItem(args, 0));
    if (!e)
        return NULL;
    PyObject *rest = PyTuple_GetSlice(args, 1, n);
    if (!rest)
        return NULL;
    PyObject *items[16];
    Py_ssize_t m = n - 1 < 16 ? n - 1 : 16;
    for (Py_ssize_t i = 0; i < m; i++)
        items[i] = PyTuple_GetItem(rest, i);
    PyObject *r = call_entry(e, items, m, rest, kwargs);
    Py_DECREF(rest);
    return r;
}

/* ---- OpCaller: what resolve_op() returns ------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *name;
    struct opentry *entry; /* owned by op_cache */
} OpCaller;

static PyObject *opcaller_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    OpCaller *c = (OpCaller *)self;
    Py_ssize_t n = PyTuple_Size(args);
    PyObject *items[16];
    Py_ssize_t m = n < 16 ? n : 16;
    for (Py_ssize_t i = 0; i < m; i++)
        items[i] = PyTuple_GetItem(args, i);
    return call_entry(c->entry, items, m, args, kwargs);
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

int fldpy_registry_init(PyObject *module)
{
    module_ref = module; /* borrowed: the module outlives these functions */
    op_cache = PyDict_New();
    torch_dtypes = PyDict_New();
    str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    str_dtype = PyUnicode_InternFromString("dtype");
    opcaller_type = PyType_FromSpec(&opcaller_spec);
    if (!op_cache || !torch_dtypes || !str_dlpack_device || !str_dtype || !opcaller_type)
        return -1;
    Py_INCREF(opcaller_type);
    return PyModule_AddObject(module, "OpCaller", opcaller_type);
}

PyMethodDef fldpy_registry_methods[] = {
    {"register_impls", py_register_impls, METH_VARARGS,
     "register_impls(plugin, version, origin, records)\n--\n\nRegisters Python implementations "
     "all-or-nothing (use fldispatch.register_impl)."},
    {"host_reject", py_host_reject, METH_VARARGS,
     "host_reject(plugin, version, origin, reason)\n--\n\nRecords a Python plugin that failed."},
    {"call_op", (PyCFunction)(void (*)(void))py_call_op, METH_VARARGS | METH_KEYWORDS,
     "call_op(name, *args, **kwargs)\n--\n\nCalls any op by name; returns what the "
     "implementation returns."},
    {"resolve_op", py_resolve_op, METH_O,
     "resolve_op(name)\n--\n\nA callable for the op that follows policy changes."},
    {"_interpreter_exiting", py_interpreter_exiting, METH_NOARGS,
     "_interpreter_exiting()\n--\n\nFrom atexit: Python implementations decline from now on."},
    {NULL, NULL, 0, NULL},
};
