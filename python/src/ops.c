/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog ops as Python functions, one per row of <fldispatch/catalog.def>
 * with its family's arguments: fldispatch.silu_and_mul(out, x), ...
 * Each imports its tensor arguments (tensors.c), runs on the producer's
 * current stream for GPU tensors, calls the library's typed entry point and
 * releases what it imported. Outputs are written in place; the functions
 * return None (attention_backend returns the backend's name).
 */
#include <string.h>

#include "ext.h"

/* CPU calls on at least this many bytes of input release the GIL. */
#define RELEASE_GIL_BYTES (64 * 1024)

#define MAX_TENSORS 6 /* rotary_embedding_out: positions, query, key, cache and two outputs */

/* The tensors of one call, and the stream set for it. */
struct call {
    const char *op;
    fldpy_tensor t[MAX_TENSORS];
    int n;
    bool stream_set;
    int stream_device;
    void *previous_stream;
};

/* Imports obj as argument `arg` into the call; *dl points at its view. */
static int take(struct call *c, PyObject *obj, const char *arg, bool writable, DLTensor **dl)
{
    fldpy_tensor *t = &c->t[c->n];
    if (fldpy_tensor_import(obj, c->op, arg, writable, t) < 0)
        return -1;
    c->n++;
    *dl = &t->dl;
    return 0;
}

static void release(struct call *c)
{
    for (int i = 0; i < c->n; i++)
        fldpy_tensor_release(&c->t[i]);
    c->n = 0;
}

/*
 * For tensors on a GPU, the library must launch on the stream the tensors'
 * framework is working on (PyTorch's current stream, also while a CUDA graph
 * is being captured): the first tensor that came through the exchange API
 * says which. Set with fld_set_stream() for this call only.
 */
static int enter(struct call *c)
{
    fldpy_impl_exception_clear();
    if (fldpy_ensure_plugins() < 0)
        return -1;
    for (int i = 0; i < c->n; i++) {
        const fldpy_tensor *t = &c->t[i];
        if (!t->api || t->dl.device.device_type == kDLCPU)
            continue;
        void *stream;
        bool found;
        int device = (int)t->dl.device.device_type;
        if (fldpy_tensor_stream(t, &stream, &found) < 0) {
            /* CUDA and ROCm must get the framework's stream; for other
             * devices a framework may not report one (then the thread's
             * stream stays in force). */
            if (device == FLD_DEVICE_CUDA || device == FLD_DEVICE_ROCM)
                return -1;
            PyErr_Clear();
            continue;
        }
        if (!found)
            continue;
        void *previous = fld_get_stream(device);
        int rc = fld_set_stream(device, stream);
        if (rc != FLD_OK) {
            fldpy_raise_status(rc);
            return -1;
        }
        c->stream_set = true;
        c->stream_device = device;
        c->previous_stream = previous;
        return 0;
    }
    return 0;
}

static void leave(struct call *c)
{
    if (c->stream_set)
        fld_set_stream(c->stream_device, c->previous_stream);
    c->stream_set = false;
}

static bool release_gil(const DLTensor *x)
{
    if (x->device.device_type != kDLCPU)
        return false;
    int64_t element_bytes = x->dtype.bits >= 8 ? x->dtype.bits / 8 : 1;
    /* numel * element_bytes >= RELEASE_GIL_BYTES, without the overflow. */
    return fldpy_tensor_numel(x) >= (RELEASE_GIL_BYTES + element_bytes - 1) / element_bytes;
}

/* After the library returned rc: raise (before the deleters may run Python
 * code), put the stream back, release the tensors. */
static PyObject *finish(struct call *c, int rc)
{
    int failed = fldpy_finish_call(rc);
    leave(c);
    release(c);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *fail(struct call *c)
{
    leave(c);
    release(c);
    return NULL;
}

/* ---- activations --------------------------------------------------------- */

typedef int (*activation_fn)(DLTensor *out, const DLTensor *x);

static const char *const activation_names[] = {"out", "x"};

static PyObject *activation(const char *op, activation_fn fn, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[2];
    if (!kwnames && nargs == 2) {
        a[0] = args[0];
        a[1] = args[1];
    } else if (fldpy_parse_args(op, args, nargs, kwnames, activation_names, 2, 2, a) < 0) {
        return NULL;
    }
    const fldpy_arg guarded[] = {{a[0], "out", true}, {a[1], "x", false}};
    if (fldpy_autograd_guard(op, guarded, 2) < 0)
        return NULL;
    struct call c = {.op = op};
    DLTensor *out, *x;
    if (take(&c, a[0], "out", true, &out) < 0 || take(&c, a[1], "x", false, &x) < 0 ||
        enter(&c) < 0)
        return fail(&c);
    int rc;
    if (release_gil(x)) {
        PyThreadState *released = fldpy_release_gil();
        rc = fn(out, x);
        fldpy_restore_gil(released);
    } else {
        rc = fn(out, x);
    }
    return finish(&c, rc);
}

/* ---- rms_norm, gemma_rms_norm ---------------------------------------------- */

typedef int (*norm_fn)(DLTensor *out, const DLTensor *x, const DLTensor *weight, DLTensor *residual,
                       float eps);

static const char *const norm_names[] = {"out", "x", "weight", "residual", "eps"};

static PyObject *norm(const char *op, norm_fn fn, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames)
{
    PyObject *a[5];
    if (fldpy_parse_args(op, args, nargs, kwnames, norm_names, 5, 2, a) < 0)
        return NULL;
    double eps = 1e-6;
    if (a[4] && fldpy_parse_float(op, "eps", a[4], &eps) < 0)
        return NULL;
    const fldpy_arg guarded[] = {
        {a[0], "out", true}, {a[1], "x", false}, {a[2], "weight", false}, {a[3], "residual", true}};
    if (fldpy_autograd_guard(op, guarded, 4) < 0)
        return NULL;
    struct call c = {.op = op};
    DLTensor *out, *x, *weight = NULL, *residual = NULL;
    if (take(&c, a[0], "out", true, &out) < 0 || take(&c, a[1], "x", false, &x) < 0)
        return fail(&c);
    if (a[2] && a[2] != Py_None && take(&c, a[2], "weight", false, &weight) < 0)
        return fail(&c);
    if (a[3] && a[3] != Py_None && take(&c, a[3], "residual", true, &residual) < 0)
        return fail(&c);
    if (enter(&c) < 0)
        return fail(&c);
    int rc;
    if (release_gil(x)) {
        PyThreadState *released = fldpy_release_gil();
        rc = fn(out, x, weight, residual, (float)eps);
        fldpy_restore_gil(released);
    } else {
        rc = fn(out, x, weight, residual, (float)eps);
    }
    return finish(&c, rc);
}

/* ---- rotary_embedding -------------------------------------------------------- */

static const char *const rotary_names[] = {"positions", "query",         "key",
                                           "head_size", "cos_sin_cache", "is_neox"};

typedef int (*rotary_fn)(const DLTensor *positions, DLTensor *query, DLTensor *key,
                         int64_t head_size, const DLTensor *cos_sin_cache, bool is_neox);

/* head_size (a[3]) and is_neox (a[5]), the two rotary forms' non-tensor arguments; -1 on error. */
static int rotary_scalars(const char *op, PyObject *const *a, int64_t *head_size, int *is_neox)
{
    if (fldpy_parse_int(op, "head_size", a[3], head_size) < 0)
        return -1;
    *is_neox = fldpy_parse_bool(a[5]);
    return *is_neox < 0 ? -1 : 0;
}

static PyObject *rotary(const char *op, rotary_fn fn, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames)
{
    PyObject *a[6];
    int64_t head_size;
    int is_neox;
    if (fldpy_parse_args(op, args, nargs, kwnames, rotary_names, 6, 6, a) < 0 ||
        rotary_scalars(op, a, &head_size, &is_neox) < 0)
        return NULL;
    const fldpy_arg guarded[] = {{a[0], "positions", false},
                                 {a[1], "query", true},
                                 {a[2], "key", true},
                                 {a[4], "cos_sin_cache", false}};
    if (fldpy_autograd_guard(op, guarded, 4) < 0)
        return NULL;
    struct call c = {.op = op};
    DLTensor *positions, *query, *key = NULL, *cache;
    if (take(&c, a[0], "positions", false, &positions) < 0 ||
        take(&c, a[1], "query", true, &query) < 0)
        return fail(&c);
    if (a[2] != Py_None && take(&c, a[2], "key", true, &key) < 0)
        return fail(&c);
    if (take(&c, a[4], "cos_sin_cache", false, &cache) < 0 || enter(&c) < 0)
        return fail(&c);
    int rc;
    if (release_gil(query)) {
        PyThreadState *released = fldpy_release_gil();
        rc = fn(positions, query, key, (int64_t)head_size, cache, is_neox);
        fldpy_restore_gil(released);
    } else {
        rc = fn(positions, query, key, (int64_t)head_size, cache, is_neox);
    }
    return finish(&c, rc);
}

/* ---- rotary_embedding_out ------------------------------------------------------ */

static const char *const rotary_out_names[] = {"positions",     "query",   "key",       "head_size",
                                               "cos_sin_cache", "is_neox", "query_out", "key_out"};

typedef int (*rotary_out_fn)(const DLTensor *positions, const DLTensor *query, const DLTensor *key,
                             int64_t head_size, const DLTensor *cos_sin_cache, bool is_neox,
                             DLTensor *query_out, DLTensor *key_out);

static PyObject *rotary_out(const char *op, rotary_out_fn fn, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    int64_t head_size;
    int is_neox;
    if (fldpy_parse_args(op, args, nargs, kwnames, rotary_out_names, 8, 8, a) < 0 ||
        rotary_scalars(op, a, &head_size, &is_neox) < 0)
        return NULL;
    const fldpy_arg guarded[] = {{a[0], "positions", false}, {a[1], "query", false},
                                 {a[2], "key", false},       {a[4], "cos_sin_cache", false},
                                 {a[6], "query_out", true},  {a[7], "key_out", true}};
    if (fldpy_autograd_guard(op, guarded, 6) < 0)
        return NULL;
    struct call c = {.op = op};
    DLTensor *positions, *query, *key = NULL, *cache, *query_out, *key_out = NULL;
    if (take(&c, a[0], "positions", false, &positions) < 0 ||
        take(&c, a[1], "query", false, &query) < 0)
        return fail(&c);
    if (a[2] != Py_None && take(&c, a[2], "key", false, &key) < 0)
        return fail(&c);
    if (take(&c, a[4], "cos_sin_cache", false, &cache) < 0 ||
        take(&c, a[6], "query_out", true, &query_out) < 0)
        return fail(&c);
    if (a[7] != Py_None && take(&c, a[7], "key_out", true, &key_out) < 0)
        return fail(&c);
    if (enter(&c) < 0)
        return fail(&c);
    int rc;
    if (release_gil(query)) {
        PyThreadState *released = fldpy_release_gil();
        rc = fn(positions, query, key, (int64_t)head_size, cache, is_neox, query_out, key_out);
        fldpy_restore_gil(released);
    } else {
        rc = fn(positions, query, key, (int64_t)head_size, cache, is_neox, query_out, key_out);
    }
    return finish(&c, rc);
}

/* ---- attention_backend --------------------------------------------------------- */

static const char *const attention_names[] = {"device", "use_mla", "use_sparse"};

typedef int (*attention_fn)(int device_type, bool use_mla, bool use_sparse, const char **name);

static PyObject *attention(const char *op, attention_fn fn, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    PyObject *a[3];
    if (fldpy_parse_args(op, args, nargs, kwnames, attention_names, 3, 1, a) < 0)
        return NULL;
    int device, use_mla = 0, use_sparse = 0;
    if (fldpy_parse_device(op, a[0], &device) < 0)
        return NULL;
    if ((a[1] && (use_mla = fldpy_parse_bool(a[1])) < 0) ||
        (a[2] && (use_sparse = fldpy_parse_bool(a[2])) < 0))
        return NULL;
    const char *name = NULL;
    fldpy_impl_exception_clear();
    if (fldpy_ensure_plugins() < 0)
        return NULL;
    int rc = fn(device, use_mla, use_sparse, &name);
    if (fldpy_finish_call(rc) < 0)
        return NULL;
    return PyUnicode_FromString(name ? name : "");
}

/* ---- the functions: one per row of the catalog table ------------------------- */

/* Each family's function, and its Python arguments (the docstring's first line). */
#define FAMILY_GATED       activation
#define FAMILY_ELEMENTWISE activation
#define FAMILY_NORM        norm
#define FAMILY_ROTARY      rotary
#define FAMILY_ROTARY_OUT  rotary_out
#define FAMILY_ATTENTION   attention

#define PYARGS_GATED       "(out, x)"
#define PYARGS_ELEMENTWISE "(out, x)"
#define PYARGS_NORM        "(out, x, weight=None, residual=None, eps=1e-6)"
#define PYARGS_ROTARY      "(positions, query, key, head_size, cos_sin_cache, is_neox)"
#define PYARGS_ROTARY_OUT                                                                          \
    "(positions, query, key, head_size, cos_sin_cache, is_neox, query_out, key_out)"
#define PYARGS_ATTENTION "(device, use_mla=False, use_sparse=False)"

#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    static PyObject *py_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs,            \
                               PyObject *kwnames)                                                  \
    {                                                                                              \
        (void)self;                                                                                \
        return FAMILY_##family(FLD_OP_##id, fld_##name, args, nargs, kwnames);                     \
    }
#include <fldispatch/catalog.def>

#define FASTCALL(fn) ((PyCFunction)(void (*)(void))(fn)), METH_FASTCALL | METH_KEYWORDS

PyMethodDef fldpy_op_methods[] = {
#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    {FLD_OP_##id, FASTCALL(py_##name), #name PYARGS_##family "\n--\n\n" doc},
#include <fldispatch/catalog.def>
    {NULL, NULL, 0, NULL},
};
