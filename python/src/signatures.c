/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declared op signatures from Python (fldispatch.h "Op signatures"): the
 * list of signatures (_C.signatures(), from which fldispatch.OPS and
 * torch.ops.fldispatch are derived) and the marshalling of a call_op() of a
 * declared op: Python arguments to a checked fld_args, by the signature
 * alone (no wrapper per op), and an fld_args back to Python arguments for a
 * Python implementation called from C. Declarations by Python packages
 * (_C.declare_op) are binding_registration.c's.
 */
#include <string.h>

#include "ext.h"

/* ---- _C.signatures(), _C.catalog_ops() --------------------------------------- */

static int add_signature(const fld_signature_info *info, void *user)
{
    PyObject *t = Py_BuildValue("(sssO)", info->op, info->schema, info->declared_by,
                                info->catalog ? Py_True : Py_False);
    if (!t || PyList_Append(user, t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    return 0;
}

static PyObject *py_signatures(PyObject *self, PyObject *unused)
{
    if (fldpy_ensure_plugins() < 0)
        return NULL;
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    int rc = fld_foreach_signature(add_signature, list);
    if (rc != FLD_OK) {
        Py_DECREF(list);
        return PyErr_Occurred() ? NULL : fldpy_raise_status(rc);
    }
    return list;
}

static int add_catalog_op(const fld_catalog_op_info *op, void *user)
{
    PyObject *t = Py_BuildValue("(ss)", op->name, op->signature);
    if (!t || PyList_Append(user, t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    return 0;
}

static PyObject *py_catalog_ops(PyObject *self, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    if (list && fld_foreach_catalog_op(add_catalog_op, list) != 0)
        Py_CLEAR(list);
    return list;
}

PyMethodDef fldpy_signature_methods[] = {
    {"signatures", py_signatures, METH_NOARGS,
     "signatures()\n--\n\nEvery op signature: (op, schema, declared_by, catalog) tuples, the "
     "catalog's first."},
    {"catalog_ops", py_catalog_ops, METH_NOARGS,
     "catalog_ops()\n--\n\nThe catalog's ops: (op, schema) tuples in catalog order; needs no "
     "initialisation."},
    {NULL, NULL, 0, NULL},
};

/* ---- marshalling ----------------------------------------------------------- */

int fldpy_sig_prepare(const char *op, fldpy_sig *s)
{
    fld_signature_info info;
    int rc = fld_op_signature(op, &info);
    if (rc == FLD_ENOTFOUND || (rc == FLD_OK && info.catalog))
        return 0;
    if (rc != FLD_OK) {
        fldpy_raise_status(rc);
        return -1;
    }
    if (info.n_args > FLDPY_SIG_MAX_ARGS) {
        PyErr_Format(PyExc_ValueError, "op '%s' declares %zu arguments; call_op() takes %d", op,
                     info.n_args, FLDPY_SIG_MAX_ARGS);
        return -1;
    }
    s->info = info;
    s->n_required = 0;
    for (size_t i = 0; i < info.n_args; i++) {
        s->names[i] = info.args[i].name;
        if (!(info.args[i].flags & FLD_ARG_HAS_DEFAULT))
            s->n_required = (int)i + 1;
    }
    s->declared = true;
    return 0;
}

static PyObject *type_name(PyObject *o)
{
    return (PyObject *)Py_TYPE(o);
}

static int scalar(const char *op, const fld_arg_decl *d, PyObject *o, fld_arg *a)
{
    const char *want = NULL;
    switch (d->kind) {
    case FLD_ARG_INT:
        if (!PyLong_Check(o) || PyBool_Check(o)) {
            want = "an int";
            break;
        }
        a->v.i = PyLong_AsLongLong(o);
        if (a->v.i == -1 && PyErr_Occurred()) {
            PyErr_Format(fldpy_error_type(FLD_EINVAL), "%s: argument '%s': %S does not fit int64",
                         op, d->name, o);
            return -1;
        }
        return 0;
    case FLD_ARG_FLOAT:
        if ((!PyFloat_Check(o) && !PyLong_Check(o)) || PyBool_Check(o)) {
            want = "a float";
            break;
        }
        a->v.f = PyFloat_AsDouble(o);
        return a->v.f == -1.0 && PyErr_Occurred() ? -1 : 0;
    case FLD_ARG_BOOL:
        if (!PyBool_Check(o)) {
            want = "a bool";
            break;
        }
        a->v.b = o == Py_True;
        return 0;
    case FLD_ARG_STR:
        if (!PyUnicode_Check(o)) {
            want = "a str";
            break;
        }
        a->v.s = fldpy_str(op, d->name, o); /* a NUL would cut the string short */
        return a->v.s ? 0 : -1;
    default:
        want = "?";
    }
    PyErr_Format(PyExc_TypeError, "%s: argument '%s' must be %s, not %R", op, d->name, want,
                 type_name(o));
    return -1;
}

int fldpy_sig_marshal(const fldpy_sig *s, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, fldpy_sig_call *c)
{
    const fld_signature_info *in = &s->info;
    const char *op = in->op;
    PyObject *given[FLDPY_SIG_MAX_ARGS];
    c->n_tensors = 0;
    c->stream_set = false;
    c->args.count = (uint32_t)in->n_args;
    c->args.arg = c->arg;
    c->bytes = 0;
    if (fldpy_parse_args(op, args, nargs, kwnames, s->names, (int)in->n_args, s->n_required,
                         given) < 0)
        return -1;
    /* PyTorch's rules first (requires grad, version counters), at most what autograd.c takes. */
    fldpy_arg guarded[MAX_GUARDED_ARGS];
    int n_guarded = 0;
    for (size_t i = 0; i < in->n_args && n_guarded < MAX_GUARDED_ARGS; i++)
        if (in->args[i].kind == FLD_ARG_TENSOR && given[i] && given[i] != Py_None)
            guarded[n_guarded++] =
                (fldpy_arg){given[i], in->args[i].name, (in->args[i].flags & FLD_ARG_WRITTEN) != 0};
    if (n_guarded && fldpy_autograd_guard(op, guarded, n_guarded) < 0)
        return -1;
    for (size_t i = 0; i < in->n_args; i++) {
        const fld_arg_decl *d = &in->args[i];
        fld_arg *a = &c->arg[i];
        a->kind = (uint32_t)d->kind;
        a->reserved = 0;
        PyObject *o = given[i];
        if (!o) { /* not given: its default */
            a->v = d->default_value;
            continue;
        }
        if (d->kind != FLD_ARG_TENSOR) {
            if (scalar(op, d, o, a) < 0)
                goto fail;
            continue;
        }
        if (o == Py_None) {
            if (!(d->flags & FLD_ARG_OPTIONAL)) {
                PyErr_Format(PyExc_TypeError, "%s: argument '%s' must be a tensor, not None", op,
                             d->name);
                goto fail;
            }
            a->v.tensor = NULL;
            continue;
        }
        fldpy_tensor *t = &c->t[c->n_tensors];
        *t = (fldpy_tensor)FLDPY_TENSOR_INIT;
        if (fldpy_tensor_import(o, op, d->name, (d->flags & FLD_ARG_WRITTEN) != 0, t) < 0)
            goto fail;
        c->n_tensors++;
        a->v.tensor = &t->dl;
        if (t->dl.device.device_type == kDLCPU && t->dl.dtype.bits >= 8)
            c->bytes += (size_t)fldpy_tensor_numel(&t->dl) * (t->dl.dtype.bits / 8);
    }
    /* GPU tensors: the call runs on their producer's current stream. */
    for (int i = 0; i < c->n_tensors; i++) {
        const fldpy_tensor *t = &c->t[i];
        if (!t->api || t->dl.device.device_type == kDLCPU)
            continue;
        void *stream;
        bool found;
        int device = (int)t->dl.device.device_type;
        if (fldpy_tensor_stream(t, &stream, &found) < 0) {
            if (device == FLD_DEVICE_CUDA || device == FLD_DEVICE_ROCM)
                goto fail;
            PyErr_Clear();
            continue;
        }
        if (!found)
            continue;
        c->previous_stream = fld_get_stream(device);
        int rc = fld_set_stream(device, stream);
        if (rc != FLD_OK) {
            fldpy_raise_status(rc);
            goto fail;
        }
        c->stream_set = true;
        c->stream_device = device;
        break;
    }
    return 0;
fail:
    fldpy_sig_release(c);
    return -1;
}

void fldpy_sig_release(fldpy_sig_call *c)
{
    if (c->stream_set)
        fld_set_stream(c->stream_device, c->previous_stream);
    c->stream_set = false;
    for (int i = 0; i < c->n_tensors; i++)
        fldpy_tensor_release(&c->t[i]);
    c->n_tensors = 0;
}

PyObject *fldpy_sig_args_tuple(const fld_args *a, PyObject *(*tensor)(const DLTensor *))
{
    PyObject *t = PyTuple_New(a->count);
    if (!t)
        return NULL;
    for (uint32_t i = 0; i < a->count; i++) {
        const fld_arg *v = &a->arg[i];
        PyObject *o;
        switch (v->kind) {
        case FLD_ARG_TENSOR:
            o = tensor(v->v.tensor);
            break;
        case FLD_ARG_INT:
            o = PyLong_FromLongLong(v->v.i);
            break;
        case FLD_ARG_FLOAT:
            o = PyFloat_FromDouble(v->v.f);
            break;
        case FLD_ARG_BOOL:
            o = PyBool_FromLong(v->v.b);
            break;
        case FLD_ARG_STR:
            o = PyUnicode_FromString(v->v.s);
            break;
        default:
            o = NULL;
            PyErr_Format(PyExc_ValueError, "argument %u has an unknown kind %u", i, v->kind);
        }
        if (!o) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, i, o);
    }
    return t;
}
