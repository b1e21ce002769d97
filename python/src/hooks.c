/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hooks for the benchmark and the tests (underscored: not API).
 *   _bench_c_call(out, x, n)  the time of fld_silu_and_mul() alone, called n
 *                             times in a C loop on tensors imported once:
 *                             the floor the Python call is measured against.
 *   _producer_stream(tensor)  the stream the exchange API reports for the
 *                             tensor's device (None when it has none): what
 *                             an op call sets with fld_set_stream().
 */
#include <time.h>

#include "ext.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static PyObject *py_bench_c_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_bench_c_call(out, x, n)");
        return NULL;
    }
    long n = PyLong_AsLong(args[2]);
    if (n <= 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "_bench_c_call: n must be positive");
        return NULL;
    }
    fldpy_tensor out, x;
    if (fldpy_tensor_import(args[0], "_bench_c_call", "out", true, &out) < 0)
        return NULL;
    if (fldpy_tensor_import(args[1], "_bench_c_call", "x", false, &x) < 0) {
        fldpy_tensor_release(&out);
        return NULL;
    }
    int rc = fld_silu_and_mul(&out.dl, &x.dl); /* warm: resolves and caches */
    double start = now_ns();
    for (long i = 0; i < n && rc == FLD_OK; i++)
        rc = fld_silu_and_mul(&out.dl, &x.dl);
    double elapsed = now_ns() - start;
    if (rc != FLD_OK)
        fldpy_raise_status(rc);
    fldpy_tensor_release(&x);
    fldpy_tensor_release(&out);
    if (rc != FLD_OK)
        return NULL;
    return PyFloat_FromDouble(elapsed / (double)n);
}

static PyObject *py_producer_stream(PyObject *self, PyObject *obj)
{
    fldpy_tensor t;
    if (fldpy_tensor_import(obj, "_producer_stream", "tensor", false, &t) < 0)
        return NULL;
    void *stream;
    bool found;
    int rc = fldpy_tensor_stream(&t, &stream, &found);
    fldpy_tensor_release(&t);
    if (rc < 0)
        return NULL;
    if (!found)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(stream);
}

PyMethodDef fldpy_hook_methods[] = {
    {"_bench_c_call", (PyCFunction)(void (*)(void))py_bench_c_call, METH_FASTCALL,
     "_bench_c_call(out, x, n)\n--\n\nNanoseconds per fld_silu_and_mul() call, timed in C."},
    {"_producer_stream", py_producer_stream, METH_O,
     "_producer_stream(tensor)\n--\n\nThe stream an op call on this tensor would run on."},
    {NULL, NULL, 0, NULL},
};
