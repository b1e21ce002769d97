/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Python side of <fldispatch/binding.h>: Python implementations in the
 * library's registry, and any op called by name from Python.
 *
 *   register_impls()  hands Python callables to fld_binding_register():
 *                     each becomes a binding
 *                     implementation whose context is a `struct pyimpl`
 *                     (the callable, its op and id); run_impl() below is
 *                     the kernel the library calls for all of them;
 *   call_op()         an op outside the catalog: the arguments stay Python
 *                     objects in a `struct pyframe`, passed to
 *                     fld_binding_call(), which selects under the thread's
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
 *
 * A BaseException that is not an Exception (KeyboardInterrupt, SystemExit,
 * GeneratorExit) is no failure of the implementation: it is kept as this
 * thread's pending interrupt and the implementation declines the call
 * (FLD_EUNSUPPORTED: no failure memory, no WARNING). While it is pending,
 * every Python implementation on this thread declines at once; the library
 * has no status that stops a chain, so a C kernel later in the chain may
 * still run, and its result is dropped: the binding's function that made
 * the call (fldpy_finish_call()) raises the interrupt instead of any
 * result or error.
 *
 * While `python -m fldispatch` runs the tool in this process
 * (_interrupts_end_process(True)) no Python caller is there to raise the
 * interrupt to: a KeyboardInterrupt ends the process by SIGINT, as Ctrl-C
 * ends the tool program, a SystemExit with its exit status, any other such
 * BaseException with status 1, each after a line on stderr naming the op and
 * the implementation. Declining there would let the tool go on and report
 * (or pin in a manifest) what the interrupt cut short.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/binding.h>

#include "ext.h"

#ifdef Py_LIMITED_API
/* Exported by every CPython since 3.4, outside the limited API's headers. */
PyAPI_FUNC(int) PyGILState_Check(void);
#endif

/* ---- the GIL ------------------------------------------------------------ */

/* The thread state ops.c saved when it released the GIL on this thread. */
static _Thread_local PyThreadState *tls_released;
static volatile int interpreter_exiting;
static volatile int interrupts_end_process;

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
/* This thread's pending interrupt: a BaseException that is not an Exception,
 * raised by an implementation during the current call (see the top). */
static _Thread_local PyObject *tls_interrupt;

void fldpy_impl_exception_clear(void)
{
    Py_CLEAR(tls_interrupt);
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

void fldpy_interrupt_clear(void)
{
    Py_CLEAR(tls_interrupt);
}

int fldpy_finish_call(int status)
{
    if (tls_interrupt) {
        PyObject *exc = tls_interrupt;
        tls_interrupt = NULL;
        fldpy_impl_exception_clear();
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
        return -1;
    }
    if (status != FLD_OK) {
        fldpy_raise_impl_status(status);
        return -1;
    }
    return 0;
}

PyObject *fldpy_raise_impl_status(int status)
{
    fldpy_raise_status(status);
    PyObject *exc = tls_impl_exception;
    tls_impl_exception = NULL;
    chain_cause(exc);
    return NULL;
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
    /* the arguments: a tuple and a dict (OpCaller), or a vector (call_op) */
    PyObject *args;   /* tuple, or NULL for the vector form */
    PyObject *kwargs; /* dict or NULL */
    PyObject *const *vargs;
    Py_ssize_t nargs;
    PyObject *kwnames;
    const void *native; /* the fld_args of a declared op's call, or NULL */
    PyObject *result;   /* the winner's return value (new reference) */
    PyObject *exc;      /* the last exception an implementation raised */
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
    case FLD_ARGS_ROTARY_EMBEDDING_OUT: {
        const fld_rotary_embedding_out_args *a = args;
        PyObject *v[8] = {tensor_object(a->positions), NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        PyObject *t = NULL;
        if (v[0] && (v[1] = tensor_object(a->query)) && (v[2] = tensor_object(a->key)) &&
            (v[3] = PyLong_FromLongLong(a->head_size)) &&
            (v[4] = tensor_object(a->cos_sin_cache)) && (v[5] = PyBool_FromLong(a->is_neox)) &&
            (v[6] = tensor_object(a->query_out)) && (v[7] = tensor_object(a->key_out)))
            t = PyTuple_Pack(8, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
        for (int i = 0; i < 8; i++)
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

/*
 * PyObject_Vectorcall: exported by CPython 3.9 and later but outside the
 * limited API before 3.12, so looked up at run time; without it the call
 * builds a tuple and a dict.
 */
typedef PyObject *(*vectorcall_fn)(PyObject *callable, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames);
static vectorcall_fn vectorcall;

static PyObject *call_vector(PyObject *fn, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    if (vectorcall)
        return vectorcall(fn, args, (size_t)nargs, kwnames);
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    PyObject *tuple = PyTuple_New(nargs), *kwargs = nkw ? PyDict_New() : NULL;
    PyObject *result = NULL;
    if (!tuple || (nkw && !kwargs))
        goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SetItem(tuple, i, args[i]);
    }
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (PyDict_SetItem(kwargs, PyTuple_GetItem(kwnames, i), args[nargs + i]) < 0)
            goto done;
    result = PyObject_Call(fn, tuple, kwargs);
done:
    Py_XDECREF(tuple);
    Py_XDECREF(kwargs);
    return result;
}

/* Python's own flush of sys.stdout and sys.stderr, then C's. */
static void flush_all(void)
{
    static const char *const streams[] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        PyObject *stream = PySys_GetObject(streams[i]); /* borrowed */
        PyObject *r = stream && stream != Py_None ? PyObject_CallMethod(stream, "flush", NULL)
                                                  : NULL;
        Py_XDECREF(r);
        PyErr_Clear();
    }
    fflush(NULL);
}

/* An interrupt while the tool runs in this process: ends the process (see the top). */
static void end_process(const struct pyimpl *impl, PyObject *exc, const char *what)
{
    int status = 1;
    bool sigint = PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_KeyboardInterrupt);
    if (PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_SystemExit)) {
        PyObject *code = PyObject_GetAttrString(exc, "code");
        if (code == Py_None) {
            status = 0;
        } else if (code && PyLong_Check(code)) {
            long v = PyLong_AsLong(code);
            status = v == -1 && PyErr_Occurred() ? 1 : (int)(v & 0xff);
        }
        Py_XDECREF(code);
        PyErr_Clear();
    }
    flush_all();
    if (sigint)
        fprintf(stderr, "fldispatch: %s: Python implementation '%s' raised %s: interrupted\n",
                impl->op, impl->impl_id, what);
    else
        fprintf(stderr, "fldispatch: %s: Python implementation '%s' raised %s: exit status %d\n",
                impl->op, impl->impl_id, what, status);
    fflush(stderr);
    if (sigint) {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        status = 128 + SIGINT; /* only if the signal did not end the process */
    }
    _exit(status);
}

/* Calls impl with the GIL held; FLD_* status. */
static int call_python(struct pyimpl *impl, const void *args)
{
    struct pyframe *f = tls_frame;
    bool own = f && (args == (const void *)f || (f->native && args == f->native));
    PyObject *result = NULL;
    if (own) {
        result = f->args ? PyObject_Call(impl->fn, f->args, f->kwargs)
                         : call_vector(impl->fn, f->vargs, f->nargs, f->kwnames);
    } else {
        const char *why = NULL;
        fld_signature_info sig;
        PyObject *pargs =
            impl->args_kind == 0 && fld_op_signature(impl->op, &sig) == FLD_OK && !sig.catalog
                ? fldpy_sig_args_tuple(args, tensor_object)
                : catalog_args(impl, args, &why);
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
        if (value && !PyObject_TypeCheck(value, (PyTypeObject *)PyExc_Exception)) {
            /* an interrupt, not a failure: declined, raised by the caller */
            if (interrupts_end_process)
                end_process(impl, value, what);
            Py_XDECREF(tls_interrupt);
            tls_interrupt = value;
            fld_set_error("%s: Python implementation '%s' was interrupted by %s", impl->op,
                          impl->impl_id, what);
            return FLD_EUNSUPPORTED;
        }
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
                      "of a catalog or declared op returns None (it writes its outputs in "
                      "place)",
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

/* A call while this thread's interrupt is pending: declined at once. */
static int interrupted(const struct pyimpl *impl)
{
    fld_set_error("%s: Python implementation '%s' not run: the call was interrupted", impl->op,
                  impl->impl_id);
    return FLD_EUNSUPPORTED;
}

/* The library's kernel for every Python implementation (binding.h). */
static int run_impl(void *ctx, const void *args)
{
    struct pyimpl *impl = ctx;
    if (interpreter_exiting) {
        fld_set_error("%s: Python implementation '%s' cannot run: the interpreter is exiting",
                      impl->op, impl->impl_id);
        return FLD_EUNSUPPORTED;
    }
    if (PyGILState_Check())
        return tls_interrupt ? interrupted(impl) : call_python(impl, args);
    PyThreadState *saved = tls_released;
    if (!saved) {
        fld_set_error("%s: Python implementation '%s' cannot run on this thread: the thread "
                      "does not hold the GIL (a C thread must take it with PyGILState_Ensure() "
                      "before calling an op that a Python implementation may serve)",
                      impl->op, impl->impl_id);
        return FLD_EUNSUPPORTED;
    }
    fldpy_restore_gil(saved);
    int rc = tls_interrupt ? interrupted(impl) : call_python(impl, args);
    fldpy_release_gil();
    return rc;
}

/* ---- register_impls(plugin, version, origin, records) ---------------------- */

/* An optional name: NULL for None (no exception), else as fldpy_str(). */
static const char *name_or_null(const char *fn, const char *arg, PyObject *o)
{
    return o == Py_None ? NULL : fldpy_str(fn, arg, o);
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
    PyObject *plugin_obj, *version_obj, *origin_obj, *records;
    if (!PyArg_ParseTuple(args, "UUUO!:register_impls", &plugin_obj, &version_obj, &origin_obj,
                          &PyList_Type, &records))
        return NULL;
    const char *plugin = fldpy_str("register_impls", "plugin", plugin_obj);
    const char *version = plugin ? fldpy_str("register_impls", "version", version_obj) : NULL;
    const char *origin = version ? fldpy_str("register_impls", "origin", origin_obj) : NULL;
    if (!origin)
        return NULL;
    Py_ssize_t n = PyList_Size(records);
    fld_binding_impl *impls = calloc(n ? (size_t)n : 1, sizeof *impls);
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
        const char *op_name = fldpy_str("register_impl", "op", op);
        const char *impl_name = op_name ? fldpy_str("register_impl", "impl_id", id) : NULL;
        if (!impl_name)
            goto fail;
        p->op = strdup(op_name);
        p->impl_id = strdup(impl_name);
        if (!p->op || !p->impl_id) {
            PyErr_NoMemory();
            goto fail;
        }
        const char *vendor_name = name_or_null("register_impl", "vendor", vendor);
        if (!vendor_name && PyErr_Occurred())
            goto fail;
        struct catalog_find cf = {p->op, 0};
        fld_foreach_catalog_op(find_catalog, &cf);
        p->args_kind = cf.kind;
        impls[i] = (fld_binding_impl){
            .op = p->op,
            .impl_id = p->impl_id,
            .kind = (fld_kind)kind,
            .vendor = vendor_name,
            .priority = priority,
            .devices = devices,
            .dtypes = dtypes,
            .fn = run_impl,
            .ctx = p,
            .unavailable_reason = why == Py_None ? NULL : PyUnicode_AsUTF8AndSize(why, NULL),
        };
        if (PyErr_Occurred())
            goto fail;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = fld_binding_register(plugin, version, origin, impls, (size_t)n);
    Py_END_ALLOW_THREADS if (rc != FLD_OK)
    {
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

static PyObject *py_binding_reject(PyObject *self, PyObject *args)
{
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "UUUU:binding_reject", &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    const char *plugin = fldpy_str("binding_reject", "plugin", o[0]);
    const char *version = plugin ? fldpy_str("binding_reject", "version", o[1]) : NULL;
    const char *origin = version ? fldpy_str("binding_reject", "origin", o[2]) : NULL;
    const char *reason = origin ? fldpy_str("binding_reject", "reason", o[3]) : NULL;
    if (!reason)
        return NULL;
    int rc = fld_binding_reject(plugin, version, origin, reason);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_declare_op(PyObject *self, PyObject *args)
{
    static const char *const arg_names[5] = {"plugin", "version", "origin", "op", "schema"};
    PyObject *o[5];
    const char *v[5] = {NULL};
    if (!PyArg_ParseTuple(args, "UUUUU:declare_op", &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    for (int i = 0; i < 5; i++)
        if (!(v[i] = fldpy_str("declare_op", arg_names[i], o[i])))
            return NULL;
    const char *plugin = v[0], *version = v[1], *origin = v[2], *op = v[3], *schema = v[4];
    int rc = fld_binding_declare(plugin, version, origin, op, schema);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    PyObject *name = PyUnicode_FromString(op);
    if (!name)
        return NULL;
    fldpy_binding_declared(name); /* a call_op() entry made before the declaration */
    Py_DECREF(name);
    Py_RETURN_NONE;
}

static PyObject *py_ready(PyObject *self, PyObject *unused)
{
    if (fldpy_ensure_plugins() < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_interrupts_end_process(PyObject *self, PyObject *on)
{
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    interrupts_end_process = v;
    Py_RETURN_NONE;
}

static PyObject *py_interpreter_exiting(PyObject *self, PyObject *unused)
{
    interpreter_exiting = 1;
    Py_RETURN_NONE;
}

/* ---- call_op ------------------------------------------------------------------ */

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
    struct catalog_find cf = {s, 0};
    fld_foreach_catalog_op(find_catalog, &cf);
    struct opentry e;
    memset(&e, 0, sizeof e);
    if (cf.kind) {
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
    if (tls_interrupt || rc != FLD_OK) {
        Py_CLEAR(frame->result);
        if (tls_interrupt) {
            Py_CLEAR(frame->exc);
            fldpy_finish_call(rc);
            return NULL;
        }
        fldpy_raise_status(rc);
        chain_cause(frame->exc);
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
    struct pyframe *outer = tls_frame;
    tls_frame = frame;
    fldpy_interrupt_clear();
    struct fastslot *fs = &e->fast[key_slot(device, dtype)];
    int rc;
    /* Call sites for the statistics facility count here: one per call_op(). */
    if (fs->impl && now && fs->stamp == now) {
        /* The direct path: the library's choice is unchanged since it was made. */
        struct pyimpl *impl = fs->impl;
        rc = call_python(impl, frame);
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
            if (direct.fn == run_impl && direct.stamp == now) {
                fs->impl = direct.ctx;
                fs->stamp = direct.stamp;
            }
        }
    }
    tls_frame = outer;
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
    struct pyframe *outer = tls_frame;
    tls_frame = &frame;
    fldpy_interrupt_clear();
    int rc;
    if (c.bytes >= DECLARED_RELEASE_GIL_BYTES) {
        PyThreadState *released = fldpy_release_gil();
        rc = fld_call(e->op, &c.args);
        fldpy_restore_gil(released);
    } else {
        rc = fld_call(e->op, &c.args);
    }
    tls_frame = outer;
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
        return call_vector(e->typed, args + 1, nargs - 1, kwnames);
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
    vectorcall = (vectorcall_fn)dlsym(RTLD_DEFAULT, "PyObject_Vectorcall");
    op_cache = PyDict_New();
    tensor_types = PyDict_New();
    str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    opcaller_type = PyType_FromSpec(&opcaller_spec);
    if (!op_cache || !tensor_types || !str_dlpack_device || !opcaller_type)
        return -1;
    Py_INCREF(opcaller_type);
    return PyModule_AddObject(module, "OpCaller", opcaller_type);
}

PyMethodDef fldpy_binding_methods[] = {
    {"register_impls", py_register_impls, METH_VARARGS,
     "register_impls(plugin, version, origin, records)\n--\n\nRegisters Python implementations "
     "all-or-nothing (use fldispatch.register_impl)."},
    {"declare_op", py_declare_op, METH_VARARGS,
     "declare_op(plugin, version, origin, op, schema)\n--\n\nDeclares an op's signature (use "
     "fldispatch.declare_op)."},
    {"binding_reject", py_binding_reject, METH_VARARGS,
     "binding_reject(plugin, version, origin, reason)\n--\n\nRecords a Python plugin that failed."},
    {"call_op", (PyCFunction)(void (*)(void))py_call_op, METH_FASTCALL | METH_KEYWORDS,
     "call_op(name, *args, **kwargs)\n--\n\nCalls any op by name; returns what the "
     "implementation returns."},
    {"resolve_op", py_resolve_op, METH_O,
     "resolve_op(name)\n--\n\nA callable for the op that follows policy changes."},
    {"_ready", py_ready, METH_NOARGS,
     "_ready()\n--\n\nWhat an op call does first: the Python plugins discovered, then the\n"
     "configuration's names checked against what is registered (once)."},
    {"_interrupts_end_process", py_interrupts_end_process, METH_O,
     "_interrupts_end_process(on)\n--\n\nWhile on (python -m fldispatch running the tool in "
     "this process),\nan interrupt raised by a Python implementation ends the process."},
    {"_interpreter_exiting", py_interpreter_exiting, METH_NOARGS,
     "_interpreter_exiting()\n--\n\nFrom atexit: Python implementations decline from now on."},
    {NULL, NULL, 0, NULL},
};
