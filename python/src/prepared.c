/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prepared calls from Python: fldispatch.prepare(op, *args, **kwargs)
 * takes the arguments of the op function (fldispatch.rms_norm(out, x, ...)),
 * prepares the call with fld_prepare() and returns a Prepared object; calling
 * it with new tensors of the same layouts, in the op's tensor order (the
 * scalars are the prepared ones), runs the op on them:
 *
 *     norm = fldispatch.prepare("rms_norm", out, x, w, eps=1e-6)
 *     norm(out2, x2, w)          # out, x, weight[, residual]
 *
 * Each call imports its tensors as an op function does, checks that each has
 * the prepared layout (rank, shape, strides, dtype, device) and hands the
 * data pointers to fld_prepared_call(), which checks only what a pointer can
 * change. Host (CPU) tensors only: a device call also needs the producer's
 * stream, which the op functions set up.
 *
 * Threads: a Prepared may be shared by any number of Python threads (a
 * module-level prepared op). An fld_prepared takes one call at a time (it
 * stores the call's pointers), and a call may run without the GIL or run a
 * Python implementation that lets other threads in, so each Prepared keeps a
 * stack of idle fld_prepared copies: a call pops one (or, when all are busy,
 * prepares another from its own tensors, which have the prepared layouts)
 * and pushes it back after the call. Popping and pushing happen with the GIL
 * held, so they need no lock; the stack grows to the number of calls ever in
 * flight at once on that Prepared.
 */
#include <string.h>

#include "ext.h"

#define MAX_ARGS          4
#define MAX_RANK          8
#define RELEASE_GIL_BYTES (64 * 1024) /* as ops.c: larger CPU calls release the GIL */

/* A tensor's layout as prepared: strides spelled out even when the producer gave none. */
struct layout {
    int32_t ndim;
    DLDataType dtype;
    DLDevice device;
    uint64_t byte_offset;
    int64_t shape[MAX_RANK], strides[MAX_RANK];
};

typedef struct {
    PyObject_HEAD fld_prepared **idle; /* copies no call is using: a stack */
    int n_idle, cap_idle;
    const char *op;
    fld_args_kind kind;
    double eps; /* the prepared scalars, for more copies */
    int64_t head_size;
    bool is_neox;
    int n;                       /* tensor arguments a call takes */
    const char *names[MAX_ARGS]; /* "out", "x", ... */
    bool writes[MAX_ARGS];       /* the op writes it (autograd's version counter) */
    bool has[MAX_ARGS];          /* part of the prepared call (weight, residual, key may not be) */
    bool release_gil;            /* large enough to run without the GIL */
    struct layout layout[MAX_ARGS];
} prepared_object;

static PyObject *prepared_type;

/* The layout of an imported tensor, strides spelled out (contiguous when NULL). */
static int layout_of(const char *op, const char *name, const DLTensor *t, struct layout *l)
{
    if (t->ndim > MAX_RANK) {
        fldpy_raise(FLD_EINVAL,
                    "%s (prepared): tensor '%s' has rank %d; prepared calls take "
                    "ranks up to %d",
                    op, name, (int)t->ndim, MAX_RANK);
        return -1;
    }
    memset(l, 0, sizeof *l);
    l->ndim = t->ndim;
    l->dtype = t->dtype;
    l->device = t->device;
    l->byte_offset = t->byte_offset;
    int64_t step = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        l->shape[i] = t->shape[i];
        l->strides[i] = t->strides ? t->strides[i] : step;
        step *= t->shape[i];
    }
    return 0;
}

static bool same_layout(const struct layout *a, const struct layout *b)
{
    return a->ndim == b->ndim && memcmp(&a->dtype, &b->dtype, sizeof a->dtype) == 0 &&
           a->device.device_type == b->device.device_type &&
           a->device.device_id == b->device.device_id &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0 &&
           memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* ---- prepare(op, *args, **kwargs) ---------------------------------------------- */

static const char *const activation_names[] = {"out", "x"};
static const char *const norm_names[] = {"out", "x", "weight", "residual", "eps"};
static const char *const rotary_names[] = {"positions", "query",         "key",
                                           "head_size", "cos_sin_cache", "is_neox"};

/* Which op: its argument names, how many, the required ones, the tensor slots. */
struct family {
    fld_args_kind kind;
    const char *const *names;
    int n_names, n_required;
    int tensor_arg[MAX_ARGS]; /* the argument index of each tensor, in the struct's order */
    bool writes[MAX_ARGS];
};

static const struct family families[] = {
    {FLD_ARGS_ACTIVATION, activation_names, 2, 2, {0, 1, -1, -1}, {true, false}},
    {FLD_ARGS_RMS_NORM, norm_names, 5, 2, {0, 1, 2, 3}, {true, false, false, true}},
    {FLD_ARGS_ROTARY_EMBEDDING, rotary_names, 6, 6, {0, 1, 2, 4}, {false, true, true, false}},
};

/* fld_foreach_catalog_op()'s callback: the argument struct of the op named in *user. */
struct find {
    const char *op;
    fld_args_kind kind;
};

static int find_op(const fld_catalog_op_info *info, void *user)
{
    struct find *f = user;
    if (strcmp(info->name, f->op) != 0)
        return 0;
    f->kind = info->args;
    return 1;
}

static const struct family *family_of(const char *op)
{
    struct find f = {op, 0};
    fld_foreach_catalog_op(find_op, &f);
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i].kind == f.kind)
            return &families[i];
    return NULL;
}

static void release_all(fldpy_tensor *t, int n)
{
    for (int i = 0; i < n; i++)
        fldpy_tensor_release(&t[i]);
}

union call_args {
    fld_activation_args act;
    fld_rms_norm_args norm;
    fld_rotary_embedding_args rot;
};

/* The template's scalars into po. */
static int read_scalars(prepared_object *po, PyObject *const *a)
{
    if (po->kind == FLD_ARGS_RMS_NORM) {
        po->eps = 1e-6;
        if (a[4] && fldpy_parse_float(po->op, "eps", a[4], &po->eps) < 0)
            return -1;
    } else if (po->kind == FLD_ARGS_ROTARY_EMBEDDING) {
        if (fldpy_parse_int(po->op, "head_size", a[3], &po->head_size) < 0)
            return -1;
        int is_neox = fldpy_parse_bool(a[5]);
        if (is_neox < 0)
            return -1;
        po->is_neox = is_neox;
    }
    return 0;
}

/* The op's argument struct: these tensors and po's scalars. */
static void build_args(const prepared_object *po, DLTensor *dl[MAX_ARGS], union call_args *args)
{
    if (po->kind == FLD_ARGS_ACTIVATION)
        args->act = (fld_activation_args){dl[0], dl[1]};
    else if (po->kind == FLD_ARGS_RMS_NORM)
        args->norm = (fld_rms_norm_args){dl[0], dl[1], dl[2], dl[3], (float)po->eps};
    else
        args->rot =
            (fld_rotary_embedding_args){dl[0], dl[1], dl[2], po->head_size, dl[3], po->is_neox};
}

/* Pushes an idle copy; a copy the stack has no room for is freed. */
static void push_idle(prepared_object *po, fld_prepared *p)
{
    if (po->n_idle == po->cap_idle) {
        int cap = po->cap_idle ? 2 * po->cap_idle : 2;
        fld_prepared **grown = PyMem_Realloc(po->idle, sizeof *grown * (size_t)cap);
        if (!grown) {
            fld_prepared_free(p);
            return;
        }
        po->idle = grown;
        po->cap_idle = cap;
    }
    po->idle[po->n_idle++] = p;
}

static PyObject *py_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    if (nargs < 1)
        return fldpy_raise(FLD_EINVAL, "prepare(op, *args, **kwargs): argument 'op' is missing");
    const char *op = fldpy_str("prepare", "op", args[0]);
    if (!op)
        return NULL;
    const struct family *fam = family_of(op);
    if (!fam) {
        /* the library's own message: unknown op, or one it cannot prepare */
        int rc = fld_prepare(op, NULL, &(fld_prepared *){NULL});
        return fldpy_raise_status(rc ? rc : FLD_EINVAL);
    }
    PyObject *a[6] = {NULL};
    if (fldpy_parse_args(op, args + 1, nargs - 1, kwnames, fam->names, fam->n_names,
                         fam->n_required, a) < 0)
        return NULL;
    if (fldpy_ensure_plugins() < 0)
        return NULL;
    fldpy_tensor t[MAX_ARGS];
    memset(t, 0, sizeof t);
    DLTensor *dl[MAX_ARGS] = {NULL};
    int slot_of[MAX_ARGS] = {-1, -1, -1, -1}; /* tensor i is t[slot_of[i]] */
    int n = 0, ntensors = fam->kind == FLD_ARGS_ACTIVATION ? 2 : 4;
    for (int i = 0; i < ntensors; i++) {
        PyObject *obj = a[fam->tensor_arg[i]];
        if (!obj || obj == Py_None)
            continue;
        const char *name = fam->names[fam->tensor_arg[i]];
        if (fldpy_tensor_import(obj, op, name, fam->writes[i], &t[n]) < 0) {
            release_all(t, n);
            return NULL;
        }
        if (t[n].dl.device.device_type != kDLCPU) {
            release_all(t, n + 1);
            return fldpy_raise(FLD_EINVAL,
                               "%s (prepared): tensor '%s' is not in host memory; prepared calls "
                               "from Python take CPU tensors (call fldispatch.%s for device "
                               "tensors)",
                               op, name, op);
        }
        dl[i] = &t[n].dl;
        slot_of[i] = n++;
    }
    prepared_object *po = PyObject_New(prepared_object, (PyTypeObject *)prepared_type);
    if (!po) {
        release_all(t, n);
        return NULL;
    }
    po->idle = NULL;
    po->n_idle = po->cap_idle = 0;
    po->op = op; /* the catalog's own name once prepared */
    po->kind = fam->kind;
    po->eps = 0;
    po->head_size = 0;
    po->is_neox = false;
    po->n = ntensors;
    po->release_gil = false;
    union call_args call_args;
    if (read_scalars(po, a) < 0) {
        release_all(t, n);
        Py_DECREF(po);
        return NULL;
    }
    build_args(po, dl, &call_args);
    for (int i = 0; i < ntensors; i++) {
        po->names[i] = fam->names[fam->tensor_arg[i]];
        po->writes[i] = fam->writes[i];
        po->has[i] = dl[i] != NULL;
        if (dl[i] && layout_of(op, po->names[i], dl[i], &po->layout[i]) < 0) {
            release_all(t, n);
            Py_DECREF(po);
            return NULL;
        }
    }
    fld_prepared *p = NULL;
    int rc = fld_prepare(op, &call_args, &p);
    if (rc == FLD_OK) {
        /* as the op functions: a large call runs without the GIL */
        const DLTensor *big = dl[1];
        int64_t bytes = big->dtype.bits / 8 > 0 ? big->dtype.bits / 8 : 1;
        po->release_gil = fldpy_tensor_numel(big) >= (RELEASE_GIL_BYTES + bytes - 1) / bytes;
        po->op = fld_prepared_op(p);
        push_idle(po, p);
        if (po->n_idle == 0) {
            release_all(t, n);
            Py_DECREF(po);
            return PyErr_NoMemory();
        }
    }
    release_all(t, n);
    (void)slot_of;
    if (rc != FLD_OK) {
        Py_DECREF(po);
        return fldpy_raise_status(rc);
    }
    return (PyObject *)po;
}

/* ---- calling a Prepared ---------------------------------------------------------- */

/*
 * Another fld_prepared for po, prepared from the tensors of a call (t[], in
 * po's order of present tensors) at the pointers data[]: their layouts are
 * po's, checked, with po's byte_offsets. FLD_* status.
 */
static int prepare_copy(const prepared_object *po, const fldpy_tensor *t, void *const data[],
                        fld_prepared **out)
{
    DLTensor copy[MAX_ARGS];
    DLTensor *dl[MAX_ARGS] = {NULL};
    for (int i = 0, k = 0; i < po->n; i++) {
        if (!po->has[i])
            continue;
        copy[i] = t[k++].dl;
        copy[i].data = data[i];
        copy[i].byte_offset = po->layout[i].byte_offset;
        dl[i] = &copy[i];
    }
    union call_args args;
    build_args(po, dl, &args);
    return fld_prepare(po->op, &args, out);
}

static PyObject *prepared_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    prepared_object *po = (prepared_object *)self;
    if (kwargs && PyDict_Size(kwargs) > 0)
        return fldpy_raise(FLD_EINVAL, "%s (prepared): takes its tensors by position", po->op);
    Py_ssize_t nargs = PyTuple_Size(args);
    if (nargs < 0)
        return NULL;
    /* rms_norm's weight and residual and rotary's key may be left out when absent */
    if (nargs > po->n || nargs < 2)
        return fldpy_raise(FLD_EINVAL, "%s (prepared): takes %d tensors (%s, %s, ...), got %zd",
                           po->op, po->n, po->names[0], po->names[1], nargs);
    PyObject *obj[MAX_ARGS] = {NULL};
    fldpy_arg guarded[MAX_ARGS];
    for (int i = 0; i < po->n; i++) {
        obj[i] = i < nargs ? PyTuple_GetItem(args, i) : Py_None;
        if (obj[i] == Py_None)
            obj[i] = NULL;
        if ((obj[i] != NULL) != po->has[i])
            return fldpy_raise(
                FLD_EINVAL, "%s (prepared): tensor '%s' %s; the call was prepared %s it", po->op,
                po->names[i], obj[i] ? "is given" : "is missing", po->has[i] ? "with" : "without");
        guarded[i] = (fldpy_arg){obj[i], po->names[i], po->writes[i]};
    }
    if (fldpy_autograd_guard(po->op, guarded, po->n) < 0)
        return NULL;
    fldpy_impl_exception_clear();
    if (fldpy_ensure_plugins() < 0)
        return NULL;
    fldpy_tensor t[MAX_ARGS];
    void *data[MAX_ARGS] = {NULL};
    int n = 0;
    for (int i = 0; i < po->n; i++) {
        if (!obj[i])
            continue;
        if (fldpy_tensor_import(obj[i], po->op, po->names[i], po->writes[i], &t[n]) < 0) {
            release_all(t, n);
            return NULL;
        }
        const DLTensor *d = &t[n++].dl;
        struct layout l;
        if (layout_of(po->op, po->names[i], d, &l) < 0) {
            release_all(t, n);
            return NULL;
        }
        if (!same_layout(&l, &po->layout[i])) {
            release_all(t, n);
            return fldpy_raise(FLD_EINVAL,
                               "%s (prepared): tensor '%s' does not have the layout the call was "
                               "prepared with (rank, shape, strides, dtype, device); prepare "
                               "another call for it",
                               po->op, po->names[i]);
        }
        /* the prepared call adds the prepared byte_offset to the pointer */
        data[i] = (void *)((uintptr_t)d->data + (uintptr_t)d->byte_offset -
                           (uintptr_t)po->layout[i].byte_offset);
    }
    /* an idle copy, or another one prepared from this call's tensors */
    fld_prepared *p = po->n_idle ? po->idle[--po->n_idle] : NULL;
    int rc = FLD_OK;
    if (!p)
        rc = prepare_copy(po, t, data, &p);
    if (rc == FLD_OK) {
        if (po->release_gil) {
            PyThreadState *released = fldpy_release_gil();
            rc = fld_prepared_call(p, data);
            fldpy_restore_gil(released);
        } else {
            rc = fld_prepared_call(p, data);
        }
        push_idle(po, p);
    }
    int failed = fldpy_finish_call(rc);
    release_all(t, n);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

static void prepared_dealloc(PyObject *self)
{
    prepared_object *po = (prepared_object *)self;
    for (int i = 0; i < po->n_idle; i++)
        fld_prepared_free(po->idle[i]);
    PyMem_Free(po->idle);
    PyTypeObject *type = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyObject *prepared_repr(PyObject *self)
{
    prepared_object *po = (prepared_object *)self;
    return PyUnicode_FromFormat("<fldispatch.Prepared %s>", po->op ? po->op : "?");
}

static PyType_Slot prepared_slots[] = {
    {Py_tp_doc, "A prepared call of a catalog op (fldispatch.prepare()): call it with new "
                "tensors of the prepared layouts, in the op's tensor order."},
    {Py_tp_call, prepared_call},
    {Py_tp_dealloc, prepared_dealloc},
    {Py_tp_repr, prepared_repr},
    {0, NULL},
};

static PyType_Spec prepared_spec = {
    .name = "fldispatch._C.Prepared",
    .basicsize = sizeof(prepared_object),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = prepared_slots,
};

int fldpy_prepared_init(PyObject *module)
{
    prepared_type = PyType_FromSpec(&prepared_spec);
    if (!prepared_type)
        return -1;
    Py_INCREF(prepared_type);
    if (PyModule_AddObject(module, "Prepared", prepared_type) < 0) {
        Py_DECREF(prepared_type);
        return -1;
    }
    return 0;
}

#define FASTCALL(fn) ((PyCFunction)(void (*)(void))(fn)), METH_FASTCALL | METH_KEYWORDS

PyMethodDef fldpy_prepared_methods[] = {
    {"prepare", FASTCALL(py_prepare),
     "prepare(op, /, *args, **kwargs)\n--\n\n"
     "Prepares a call of a catalog op with the arguments of its function (checked once) and\n"
     "returns a callable that runs it on new CPU tensors of the same layouts, given in the\n"
     "op's tensor order: (out, x); (out, x, weight, residual); (positions, query, key,\n"
     "cos_sin_cache). The scalars (eps, head_size, is_neox) are the prepared ones."},
    {NULL, NULL, 0, NULL},
};
