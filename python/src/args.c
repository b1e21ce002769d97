/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument parsing for METH_FASTCALL|METH_KEYWORDS functions: positional
 * arguments are read in place and keyword names are compared against a
 * static list, so a call builds no tuple or dict.
 */
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "ext.h"

int fldpy_parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int n_names, int n_required, PyObject **out)
{
    if (nargs > n_names) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, n_names,
                     nargs);
        return -1;
    }
    for (int i = 0; i < n_names; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (kwnames) {
        Py_ssize_t n_kw = PyTuple_Size(kwnames);
        for (Py_ssize_t k = 0; k < n_kw; k++) {
            PyObject *key = PyTuple_GetItem(kwnames, k);
            int slot = -1;
            for (int i = 0; i < n_names && key; i++)
                if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                    slot = i;
                    break;
                }
            if (slot < 0) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%S'", fn,
                             key);
                return -1;
            }
            if (out[slot]) {
                PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn,
                             names[slot]);
                return -1;
            }
            out[slot] = args[nargs + k];
        }
    }
    for (int i = 0; i < n_required; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fn,
                         names[i], i + 1);
            return -1;
        }
    return 0;
}

/*
 * The one way a name (op, impl id, vendor, plugin, policy field) enters the
 * library from Python: a C string ends at its first NUL, so "silu_and_mul\0x"
 * would pass the library's checks as "silu_and_mul". Such a string, or one
 * that has no UTF-8 form (a lone surrogate), is an InvalidArgumentError (a
 * ValueError) naming the function, the argument and the value.
 */
const char *fldpy_str(const char *fn, const char *arg, PyObject *obj)
{
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be str, not %S", fn, arg,
                     (PyObject *)Py_TYPE(obj));
        return NULL;
    }
    Py_ssize_t size = 0;
    const char *text = PyUnicode_AsUTF8AndSize(obj, &size);
    if (!text) {
        PyErr_Clear();
        fldpy_raise(FLD_EINVAL, "%s(): argument '%s' has no UTF-8 form (a lone surrogate?): %R", fn,
                    arg, obj);
        return NULL;
    }
    if ((size_t)size != strlen(text)) {
        fldpy_raise(FLD_EINVAL, "%s(): argument '%s' contains a NUL character: %R", fn, arg, obj);
        return NULL;
    }
    return text;
}

/* str(obj) as UTF-8 into buf, without a "torch." prefix or a ":N" suffix. */
static int name_of(const char *fn, const char *arg, PyObject *obj, char *buf, size_t size,
                   bool strip_index)
{
    PyObject *s = PyUnicode_Check(obj) ? Py_NewRef(obj) : PyObject_Str(obj);
    if (!s)
        return -1;
    const char *text = fldpy_str(fn, arg, s);
    if (!text) {
        Py_DECREF(s);
        return -1;
    }
    if (strncmp(text, "torch.", 6) == 0)
        text += 6;
    PyOS_snprintf(buf, size, "%s", text);
    Py_DECREF(s);
    char *colon = strip_index ? strchr(buf, ':') : NULL;
    if (colon)
        *colon = '\0';
    return 0;
}

/*
 * The devices of the library's table (tool_api.h) for messages: "cpu, cuda,
 * rocm, ascend", or with codes "cpu (1), cuda (2), rocm (10), ascend (12 or 21)".
 */
static const char *device_list(char *buf, size_t size, bool with_codes)
{
    size_t used = 0;
    buf[0] = '\0';
    const struct fld_tool_device *d;
    for (unsigned i = 0; (d = fld__device_row(i)) && used < size; i++) {
        int n = with_codes ? PyOS_snprintf(buf + used, size - used, "%s%s (%s)", i ? ", " : "",
                                           d->name, d->codes)
                           : PyOS_snprintf(buf + used, size - used, "%s%s", i ? ", " : "", d->name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}

/* The dtypes of the library's table (tool_api.h) for messages:
 * "float32/f32, float16/f16, bfloat16/bf16, any". */
static const char *dtype_list(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    const struct fld_tool_dtype *d;
    for (unsigned i = 0; (d = fld__dtype_row(i)) && used < size; i++) {
        int n = PyOS_snprintf(buf + used, size - used, "%s/%s, ", d->long_name, d->name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (used < size)
        PyOS_snprintf(buf + used, size - used, "any");
    return buf;
}

int fldpy_parse_device(const char *fn, PyObject *obj, int *device_type)
{
    char valid[256];
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (!fld_device_name((int)v)) {
            fldpy_raise(FLD_EINVAL, "%s(): device type %ld is not one of %s", fn, v,
                        device_list(valid, sizeof valid, true));
            return -1;
        }
        *device_type = (int)v;
        return 0;
    }
    char name[64];
    if (name_of(fn, "device", obj, name, sizeof name, true) < 0)
        return -1;
    if (fld_device_from_name(name, device_type) != FLD_OK) {
        fldpy_raise(FLD_EINVAL, "%s(): unknown device '%s' (%s)", fn, name,
                    device_list(valid, sizeof valid, false));
        return -1;
    }
    return 0;
}

int fldpy_parse_dtype(const char *fn, PyObject *obj, DLDataType *dtype)
{
    char name[64], valid[256];
    if (name_of(fn, "dtype", obj, name, sizeof name, false) < 0)
        return -1;
    if (strcmp(name, "any") == 0) {
        *dtype = FLD_DTYPE_ANY;
        return 0;
    }
    if (fld_dtype_from_name(name, dtype) != FLD_OK) {
        fldpy_raise(FLD_EINVAL, "%s(): unknown dtype '%s' (%s)", fn, name,
                    dtype_list(valid, sizeof valid));
        return -1;
    }
    return 0;
}

int fldpy_parse_bool(PyObject *obj)
{
    return PyObject_IsTrue(obj);
}

/* Replaces the pending TypeError or OverflowError of a scalar's conversion by
 * one naming the function, the argument and the value. */
static int scalar_error(const char *fn, const char *arg, PyObject *obj, const char *want)
{
    PyObject *type = PyErr_ExceptionMatches(PyExc_OverflowError) ? PyExc_OverflowError
                     : PyErr_ExceptionMatches(PyExc_TypeError)   ? PyExc_TypeError
                                                                 : NULL;
    if (!type)
        return -1; /* anything else (an error of __float__ itself) stays as it is */
    PyErr_Clear();
    if (type == PyExc_OverflowError) {
        PyErr_Format(type, "%s(): argument '%s' = %R does not fit %s", fn, arg, obj, want);
        return -1;
    }
    PyObject *type_name = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__name__");
    if (!type_name)
        return -1;
    PyErr_Format(type, "%s(): argument '%s' must be %s, not %S (%R)", fn, arg, want, type_name,
                 obj);
    Py_DECREF(type_name);
    return -1;
}

int fldpy_parse_float(const char *fn, const char *arg, PyObject *obj, double *out)
{
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred())
        return scalar_error(fn, arg, obj, "a float");
    *out = v;
    return 0;
}

int fldpy_parse_int(const char *fn, const char *arg, PyObject *obj, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred())
        return scalar_error(fn, arg, obj, "an int (int64)");
    *out = (int64_t)v;
    return 0;
}
