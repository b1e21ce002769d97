/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's kernel for every Python implementation (fldpy_run_impl(),
 * binding.h): each registered implementation's context is a `struct pyimpl`
 * (binding_registration.c makes them); a call_op() call's Python arguments
 * are a `struct pyframe` (binding_call.c).
 *
 * fldpy_run_impl() is called by the library on whatever thread calls the op:
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
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>

#include "ext.h"

#ifdef Py_LIMITED_API
/* Exported by every CPython since 3.4, outside the limited API's headers. */
PyAPI_FUNC(int) PyGILState_Check(void);
#endif

static _Thread_local struct pyframe *tls_frame;

struct pyframe *fldpy_frame_enter(struct pyframe *frame)
{
    struct pyframe *outer = tls_frame;
    tls_frame = frame;
    return outer;
}

void fldpy_frame_leave(struct pyframe *outer)
{
    tls_frame = outer;
}

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

int fldpy_catalog_args_kind(const char *op)
{
    struct catalog_find f = {op, 0};
    fld_foreach_catalog_op(find_catalog, &f);
    return f.kind;
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

PyObject *fldpy_call_vector(PyObject *fn, PyObject *const *args, Py_ssize_t nargs,
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

void fldpy_call_vector_init(void)
{
    vectorcall = (vectorcall_fn)dlsym(RTLD_DEFAULT, "PyObject_Vectorcall");
}

int fldpy_call_python(struct pyimpl *impl, const void *args)
{
    struct pyframe *f = tls_frame;
    bool own = f && (args == (const void *)f || (f->native && args == f->native));
    PyObject *result = NULL;
    if (own) {
        result = f->args ? PyObject_Call(impl->fn, f->args, f->kwargs)
                         : fldpy_call_vector(impl->fn, f->vargs, f->nargs, f->kwnames);
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
            fldpy_keep_interrupt(impl->op, impl->impl_id, value, what);
            fld_set_error("%s: Python implementation '%s' was interrupted by %s", impl->op,
                          impl->impl_id, what);
            return FLD_EUNSUPPORTED;
        }
        fld_set_error("%s: Python implementation '%s' raised %s", impl->op, impl->impl_id, what);
        if (own) {
            Py_XDECREF(f->exc);
            f->exc = value;
        } else {
            fldpy_keep_impl_exception(value);
        }
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

int fldpy_run_impl(void *ctx, const void *args)
{
    struct pyimpl *impl = ctx;
    if (fldpy_interpreter_exiting()) {
        fld_set_error("%s: Python implementation '%s' cannot run: the interpreter is exiting",
                      impl->op, impl->impl_id);
        return FLD_EUNSUPPORTED;
    }
    if (PyGILState_Check())
        return fldpy_interrupt_pending() ? interrupted(impl) : fldpy_call_python(impl, args);
    PyThreadState *saved = fldpy_released_gil();
    if (!saved) {
        fld_set_error("%s: Python implementation '%s' cannot run on this thread: the thread "
                      "does not hold the GIL (a C thread must take it with PyGILState_Ensure() "
                      "before calling an op that a Python implementation may serve)",
                      impl->op, impl->impl_id);
        return FLD_EUNSUPPORTED;
    }
    fldpy_restore_gil(saved);
    int rc = fldpy_interrupt_pending() ? interrupted(impl) : fldpy_call_python(impl, args);
    fldpy_release_gil();
    return rc;
}
