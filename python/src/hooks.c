/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hooks for the benchmark and the tests (underscored: not API).
 *   _bench_c_call(out, x, n)  the time of fld_silu_and_mul() alone, called n
 *                             times in a C loop on tensors imported once:
 *                             the floor the Python call is measured against.
 *   _bench_c_op(op, n, *args)  the same for any catalog op with tensors, its
 *                             arguments in the order of its torch schema
 *                             (activations: out, x; norms: out, x, weight,
 *                             residual, eps; rotary_embedding: positions,
 *                             query, key, head_size, cos_sin_cache, is_neox;
 *                             None for an absent optional tensor).
 *   _bench_c_op_evicting(op, n, evict_bytes, *args)  the same with
 *                             evict_bytes of another buffer written before
 *                             each call (their time taken off): the kernel
 *                             as a caller that works between calls sees it.
 *   _producer_stream(tensor)  the stream the exchange API reports for the
 *                             tensor's device (None when it has none): what
 *                             an op call sets with fld_set_stream().
 */
#include <string.h>
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

/* The tensors and scalars of one catalog call, imported once. */
struct bench_call {
    const char *fn; /* the hook's name, for messages */
    int family;     /* 0 activation, 1 norm, 2 rotary */
    int (*act)(DLTensor *, const DLTensor *);
    int (*norm)(DLTensor *, const DLTensor *, const DLTensor *, DLTensor *, float);
    fldpy_tensor t[4];
    bool has[4];
    double eps;
    long long head_size;
    int is_neox;
};

/* Each catalog op with tensors by its family's argument list (catalog.def): 0 (out, x), 1 a norm's,
 * 2 rotary's; -1 none (attention_backend, and rotary_embedding_out, which has no form here). */
#define BENCH_GATED(fn)       0, fn, NULL
#define BENCH_ELEMENTWISE(fn) 0, fn, NULL
#define BENCH_NORM(fn)        1, NULL, fn
#define BENCH_ROTARY(fn)      2, NULL, NULL
#define BENCH_ROTARY_OUT(fn)  -1, NULL, NULL
#define BENCH_ATTENTION(fn)   -1, NULL, NULL
static const struct {
    const char *name;
    int family;
    int (*act)(DLTensor *, const DLTensor *);
    int (*norm)(DLTensor *, const DLTensor *, const DLTensor *, DLTensor *, float);
} bench_ops[] = {
#define FLD_CATALOG_OP(id, name, family, doc) {#name, BENCH_##family(fld_##name)},
#include <fldispatch/catalog.def>
};

static int bench_call_run(struct bench_call *c)
{
    DLTensor *t[4];
    for (int i = 0; i < 4; i++)
        t[i] = c->has[i] ? &c->t[i].dl : NULL;
    switch (c->family) {
    case 0:
        return c->act(t[0], t[1]);
    case 1:
        return c->norm(t[0], t[1], t[2], t[3], (float)c->eps);
    default:
        return fld_rotary_embedding(t[0], t[1], t[2], (int64_t)c->head_size, t[3], c->is_neox != 0);
    }
}

static void bench_call_release(struct bench_call *c)
{
    for (int i = 0; i < 4; i++)
        if (c->has[i])
            fldpy_tensor_release(&c->t[i]);
}

/* Imports args[i] as tensor slot when it is not None (optional says None may stand there). */
static int bench_take(struct bench_call *c, int slot, PyObject *obj, const char *arg, bool writable,
                      bool optional)
{
    if (obj == Py_None && optional)
        return 0;
    if (fldpy_tensor_import(obj, c->fn, arg, writable, &c->t[slot]) < 0)
        return -1;
    c->has[slot] = true;
    return 0;
}

/* Writes one byte of every 64-byte line of buf[0 .. bytes): what runs between two calls of
 * _bench_c_op_evicting. */
static void touch_lines(volatile unsigned char *buf, size_t bytes, unsigned char v)
{
    for (size_t i = 0; i < bytes; i += 64)
        buf[i] = v;
}

/*
 * The loop of _bench_c_op (evict_bytes 0) and _bench_c_op_evicting: args
 * (op, n, *op_args). With evict_bytes > 0, every call follows a write of
 * evict_bytes of another buffer (a stand-in for what the interpreter and the
 * dispatcher touch between two calls from Python), and the time of the same
 * writes alone, in a loop of their own, is taken off.
 */
static PyObject *bench_c_op(const char *fn, PyObject *const *args, Py_ssize_t nargs,
                            size_t evict_bytes)
{
    const char *op = fldpy_str(fn, "op", args[0]);
    if (!op)
        return NULL;
    long n = PyLong_AsLong(args[1]);
    if (n <= 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s: n must be positive", fn);
        return NULL;
    }
    struct bench_call c = {.fn = fn, .family = -1};
    for (size_t i = 0; i < sizeof bench_ops / sizeof bench_ops[0]; i++)
        if (strcmp(op, bench_ops[i].name) == 0) {
            c.family = bench_ops[i].family;
            c.act = bench_ops[i].act;
            c.norm = bench_ops[i].norm;
        }
    static const Py_ssize_t nargs_of[] = {2, 5, 6};
    if (c.family < 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: '%s' is not a catalog op with tensors of the activation, norm or "
                     "in-place rotary families",
                     fn, op);
        return NULL;
    }
    if (nargs - 2 != nargs_of[c.family]) {
        PyErr_Format(PyExc_TypeError, "%s: op '%s' takes %zd arguments after n, got %zd", fn, op,
                     nargs_of[c.family], nargs - 2);
        return NULL;
    }
    PyObject *const *a = args + 2;
    int bad = 0;
    switch (c.family) {
    case 0:
        bad = bench_take(&c, 0, a[0], "out", true, false) ||
              bench_take(&c, 1, a[1], "x", false, false);
        break;
    case 1:
        bad = bench_take(&c, 0, a[0], "out", true, false) ||
              bench_take(&c, 1, a[1], "x", false, false) ||
              bench_take(&c, 2, a[2], "weight", false, true) ||
              bench_take(&c, 3, a[3], "residual", true, true);
        c.eps = bad ? 0 : PyFloat_AsDouble(a[4]);
        break;
    default: /* positions, query, key, cos_sin_cache in slots 0, 1, 2, 3 */
        bad = bench_take(&c, 0, a[0], "positions", false, false) ||
              bench_take(&c, 1, a[1], "query", true, false) ||
              bench_take(&c, 2, a[2], "key", true, true) ||
              bench_take(&c, 3, a[4], "cos_sin_cache", false, false);
        c.head_size = bad ? 0 : PyLong_AsLongLong(a[3]);
        c.is_neox = bad ? 0 : PyObject_IsTrue(a[5]);
        break;
    }
    if (bad || PyErr_Occurred()) {
        bench_call_release(&c);
        return NULL;
    }
    unsigned char *evict = NULL;
    if (evict_bytes > 0 && !(evict = PyMem_Malloc(evict_bytes))) {
        bench_call_release(&c);
        return PyErr_NoMemory();
    }
    int rc = bench_call_run(&c); /* warm: resolves and caches */
    double start = now_ns();
    for (long i = 0; i < n && rc == FLD_OK; i++) {
        if (evict)
            touch_lines(evict, evict_bytes, (unsigned char)i);
        rc = bench_call_run(&c);
    }
    double elapsed = now_ns() - start;
    if (evict) {
        start = now_ns();
        for (long i = 0; i < n; i++)
            touch_lines(evict, evict_bytes, (unsigned char)i);
        elapsed -= now_ns() - start;
        PyMem_Free(evict);
    }
    bench_call_release(&c);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    return PyFloat_FromDouble(elapsed / (double)n);
}

static PyObject *py_bench_c_op(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "_bench_c_op(op, n, *args)");
        return NULL;
    }
    return bench_c_op("_bench_c_op", args, nargs, 0);
}

static PyObject *py_bench_c_op_evicting(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *rest[8]; /* op, n and the longest argument list (rotary's 6) */
    if (nargs < 3 || nargs - 1 > (Py_ssize_t)(sizeof rest / sizeof rest[0])) {
        PyErr_SetString(PyExc_TypeError, "_bench_c_op_evicting(op, n, evict_bytes, *args)");
        return NULL;
    }
    const long long bytes = PyLong_AsLongLong(args[2]);
    if (bytes <= 0 || bytes > (1LL << 30)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError,
                            "_bench_c_op_evicting: evict_bytes must be in 1 .. 2^30");
        return NULL;
    }
    rest[0] = args[0];
    rest[1] = args[1];
    for (Py_ssize_t i = 3; i < nargs; i++)
        rest[i - 1] = args[i];
    return bench_c_op("_bench_c_op_evicting", rest, nargs - 1, (size_t)bytes);
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
     "_bench_c_call(out, x, n, /)\n--\n\nNanoseconds per fld_silu_and_mul() call, timed in C."},
    {"_bench_c_op", (PyCFunction)(void (*)(void))py_bench_c_op, METH_FASTCALL,
     "_bench_c_op(op, n, /, *args)\n--\n\nNanoseconds per call of catalog op's typed entry point, "
     "timed in C."},
    {"_bench_c_op_evicting", (PyCFunction)(void (*)(void))py_bench_c_op_evicting, METH_FASTCALL,
     "_bench_c_op_evicting(op, n, evict_bytes, /, *args)\n--\n\nAs _bench_c_op, each call after "
     "a write of evict_bytes of another buffer, whose own time is taken off."},
    {"_producer_stream", py_producer_stream, METH_O,
     "_producer_stream(tensor, /)\n--\n\nThe stream an op call on this tensor would run on."},
    {NULL, NULL, 0, NULL},
};
