/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch.Error and one subclass per FLD_E* status. Each class carries
 * the status as the class attribute `status`; the invalid-argument and
 * configuration errors are also ValueErrors, out-of-memory is also a
 * MemoryError.
 */
#include <stdarg.h>
#include <string.h>

#include "ext.h"

struct error_class {
    int status;
    const char *name;
    const char *doc;
};

static const struct error_class error_classes[] = {
    {FLD_EINVAL, "InvalidArgumentError",
     "Bad argument: a tensor's shape, dtype, device, layout or range, or a read-only output."},
    {FLD_ENOTFOUND, "NotFoundError", "No such op, implementation, plugin or file."},
    {FLD_EUNAVAILABLE, "UnavailableError", "No implementation is available for this call."},
    {FLD_ECONFIG, "ConfigError",
     "Invalid configuration: an environment variable, a policy value or a YAML file."},
    {FLD_EPLUGIN, "PluginError", "A plugin could not be loaded or registered."},
    {FLD_EIMPL, "ImplementationError", "The implementation(s) failed while running."},
    {FLD_ENOMEM, "OutOfMemoryError", "The library ran out of memory."},
    {FLD_EUNSUPPORTED, "UnsupportedError", "An implementation declines these arguments."},
    {FLD_ESTATE, "StateError",
     "Called in the wrong state (e.g. a policy pop with nothing pushed)."},
};
#define N_CLASSES (sizeof error_classes / sizeof error_classes[0])

static PyObject *base_error;
static PyObject *classes[N_CLASSES];

static PyObject *new_class(PyObject *module, const char *name, const char *doc, PyObject *bases,
                           int status)
{
    char qualified[96];
    PyOS_snprintf(qualified, sizeof qualified, "fldispatch.%s", name);
    PyObject *cls = PyErr_NewExceptionWithDoc(qualified, doc, bases, NULL);
    if (!cls)
        return NULL;
    PyObject *code = status ? PyLong_FromLong(status) : Py_NewRef(Py_None);
    if (!code || PyObject_SetAttrString(cls, "status", code) < 0 ||
        PyModule_AddObjectRef(module, name, cls) < 0) {
        Py_XDECREF(code);
        Py_DECREF(cls);
        return NULL;
    }
    Py_DECREF(code);
    return cls;
}

int fldpy_errors_init(PyObject *module)
{
    base_error = new_class(module, "Error",
                           "Base of every fldispatch error; .status is the library's status "
                           "code (a negative FLD_E* value).",
                           NULL, 0);
    if (!base_error)
        return -1;
    for (size_t i = 0; i < N_CLASSES; i++) {
        const struct error_class *c = &error_classes[i];
        PyObject *bases;
        if (c->status == FLD_EINVAL || c->status == FLD_ECONFIG)
            bases = PyTuple_Pack(2, base_error, PyExc_ValueError);
        else if (c->status == FLD_ENOMEM)
            bases = PyTuple_Pack(2, base_error, PyExc_MemoryError);
        else
            bases = PyTuple_Pack(1, base_error);
        if (!bases)
            return -1;
        classes[i] = new_class(module, c->name, c->doc, bases, c->status);
        Py_DECREF(bases);
        if (!classes[i])
            return -1;
    }
    return 0;
}

PyObject *fldpy_error_type(int status)
{
    for (size_t i = 0; i < N_CLASSES; i++)
        if (error_classes[i].status == status)
            return classes[i];
    return base_error;
}

/* Raises type(message); an unknown status also sets .status on the instance. */
static PyObject *raise_with(int status, PyObject *message)
{
    PyObject *type = fldpy_error_type(status);
    if (type != base_error) {
        PyErr_SetObject(type, message);
        return NULL;
    }
    PyObject *exc = PyObject_CallFunctionObjArgs(type, message, NULL);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(status);
    if (code && PyObject_SetAttrString(exc, "status", code) == 0)
        PyErr_SetObject(type, exc);
    Py_XDECREF(code);
    Py_DECREF(exc);
    return NULL;
}

PyObject *fldpy_raise_status(int status)
{
    const char *detail = fld_last_error();
    if (!*detail)
        detail = fld_strerror(status);
    PyObject *message = PyUnicode_DecodeUTF8(detail, (Py_ssize_t)strlen(detail), "replace");
    if (!message)
        return NULL;
    raise_with(status, message);
    Py_DECREF(message);
    return NULL;
}

PyObject *fldpy_raise(int status, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    PyObject *message = PyUnicode_FromFormatV(format, ap);
    va_end(ap);
    if (!message)
        return NULL;
    raise_with(status, message);
    Py_DECREF(message);
    return NULL;
}
