/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Python implementations into the library's registry: register_impls()
 * hands Python callables to fld_binding_register(), each a binding
 * implementation whose context is a `struct pyimpl` (the callable, its op
 * and id) and whose kernel is fldpy_run_impl() (binding_impl.c); and
 * declare_op(), binding_reject() and _ready(), the rest of what a Python
 * plugin's registration asks of the library.
 */
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>

#include "ext.h"

static struct pyimpl *all_impls;

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
        p->args_kind = fldpy_catalog_args_kind(p->op);
        impls[i] = (fld_binding_impl){
            .op = p->op,
            .impl_id = p->impl_id,
            .kind = (fld_kind)kind,
            .vendor = vendor_name,
            .priority = priority,
            .devices = devices,
            .dtypes = dtypes,
            .fn = fldpy_run_impl,
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

PyMethodDef fldpy_binding_methods[] = {
    {"register_impls", py_register_impls, METH_VARARGS,
     "register_impls(plugin, version, origin, records, /)\n--\n\nRegisters Python implementations "
     "all-or-nothing (use fldispatch.register_impl)."},
    {"declare_op", py_declare_op, METH_VARARGS,
     "declare_op(plugin, version, origin, op, schema, /)\n--\n\nDeclares an op's signature (use "
     "fldispatch.declare_op)."},
    {"binding_reject", py_binding_reject, METH_VARARGS,
     "binding_reject(plugin, version, origin, reason, /)\n--\n\nRecords a Python plugin that "
     "failed."},
    {"_ready", py_ready, METH_NOARGS,
     "_ready()\n--\n\nWhat an op call does first: the Python plugins discovered, then the\n"
     "configuration's names checked against what is registered (once)."},
    {NULL, NULL, 0, NULL},
};
