/*
 * Scoped policy overrides and streams: thin wrappers of the library's
 * thread-local fld_policy_push_*() / fld_policy_pop() and fld_set_stream().
 * The `with fldispatch.policy(...)` context manager (fldispatch/__init__.py)
 * is built on policy_push/policy_pop.
 */
#include "ext.h"

static const char *const push_names[] = {"prefer", "per_op", "strict", "allow_vendors",
                                         "deny_vendors"};

/* Pops n pushes of this thread; the first failure is returned. */
static int pop_n(long n)
{
    int first = FLD_OK;
    for (long i = 0; i < n; i++) {
        int rc = fld_policy_pop();
        if (rc != FLD_OK && first == FLD_OK)
            first = rc;
    }
    return first;
}

/*
 * policy_push(prefer=None, per_op=None, strict=None, allow_vendors=None,
 * deny_vendors=None) -> int: pushes each given override on this thread's
 * stack and returns how many were pushed. All or nothing: when one value is
 * refused (ConfigError), the ones already pushed are popped.
 */
static PyObject *py_policy_push(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    PyObject *a[5];
    if (fldpy_parse_args("policy_push", args, nargs, kwnames, push_names, 5, 0, a) < 0)
        return NULL;
    long pushed = 0;
    int rc = FLD_OK;
    for (int i = 0; i < 5 && rc == FLD_OK; i++) {
        if (!a[i] || a[i] == Py_None)
            continue;
        if (i == 2) {
            int strict = fldpy_parse_bool(a[i]);
            if (strict < 0)
                goto fail;
            rc = fld_policy_push_strict(strict);
        } else {
            const char *value = fldpy_str("policy_push", push_names[i], a[i]);
            if (!value)
                goto fail;
            if (i == 0)
                rc = fld_policy_push_preference(value);
            else if (i == 1)
                rc = fld_policy_push_per_op(value);
            else if (i == 3)
                rc = fld_policy_push_allowed_vendors(value);
            else
                rc = fld_policy_push_denied_vendors(value);
        }
        if (rc == FLD_OK)
            pushed++;
    }
    if (rc != FLD_OK) {
        fldpy_raise_status(rc);
        goto fail;
    }
    return PyLong_FromLong(pushed);

fail:
    pop_n(pushed);
    return NULL;
}

static PyObject *py_policy_pop(PyObject *self, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    int rc = pop_n(n);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_policy_describe(PyObject *self, PyObject *unused)
{
    char buf[4096];
    fld_policy_describe(buf, sizeof buf);
    return PyUnicode_FromString(buf);
}

static const char *const stream_names[] = {"device", "stream"};

static PyObject *py_set_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    PyObject *a[2];
    int device;
    if (fldpy_parse_args("set_stream", args, nargs, kwnames, stream_names, 2, 2, a) < 0 ||
        fldpy_parse_device("set_stream", a[0], &device) < 0)
        return NULL;
    void *stream = NULL;
    if (a[1] != Py_None && !(stream = PyLong_AsVoidPtr(a[1])) && PyErr_Occurred())
        return NULL;
    int rc = fld_set_stream(device, stream);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_get_stream(PyObject *self, PyObject *arg)
{
    int device;
    if (fldpy_parse_device("get_stream", arg, &device) < 0)
        return NULL;
    return PyLong_FromVoidPtr(fld_get_stream(device));
}

#define FASTCALL(fn) ((PyCFunction)(void (*)(void))(fn)), METH_FASTCALL | METH_KEYWORDS

PyMethodDef fldpy_policy_methods[] = {
    {"policy_push", FASTCALL(py_policy_push),
     "policy_push(prefer=None, per_op=None, strict=None, allow_vendors=None, "
     "deny_vendors=None)\n--\n\n"
     "Pushes thread-local overrides (all or none); returns how many. Use fldispatch.policy()."},
    {"policy_pop", py_policy_pop, METH_O,
     "policy_pop(n)\n--\n\nUndoes the latest n pushes of this thread."},
    {"policy_describe", py_policy_describe, METH_NOARGS,
     "policy_describe()\n--\n\nThis thread's effective policy as one line."},
    {"set_stream", FASTCALL(py_set_stream),
     "set_stream(device, stream)\n--\n\n"
     "This thread's stream for a device type (an int handle, or None for the default), used\n"
     "for tensors whose framework does not publish its current stream."},
    {"get_stream", py_get_stream, METH_O,
     "get_stream(device)\n--\n\nThis thread's stream for a device type (0 = default)."},
    {NULL, NULL, 0, NULL},
};
