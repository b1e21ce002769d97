/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy and streams: the scope type behind `with fldispatch.policy()`
 * (fld_policy_push_fields() / fld_policy_push_file() and
 * fld_policy_pop_to()), the global policy (fld_policy_set_fields(),
 * fld_policy_reset(), fld_policy_load_file()), the failure memory
 * (fld_foreach_failure(), fld_clear_failures()), the log level and
 * fld_set_stream(). fldispatch/__init__.py turns Python values into the
 * library's grammars.
 */
#include <strings.h>

#include "ext.h"

/* ---- scopes ---------------------------------------------------------------- */

/*
 * fldispatch._C.PolicyScope: the base of fldispatch.policy. Its __enter__
 * and __exit__ are C functions, each one call that no Python code runs
 * inside: a signal handler (KeyboardInterrupt) runs before or after them,
 * never between the library's push and the bookkeeping that undoes it.
 *
 * Bookkeeping: __enter__ remembers, in a list in the thread's state dict,
 * (scope, depth before the push); __exit__ finds the scope's latest entry
 * on the calling thread and pops the library's stack back to that depth
 * with fld_policy_pop_to(), so a block is undone exactly whatever happened
 * inside it (an inner block that could not pop, reset_thread_policy()).
 */
typedef struct {
    PyObject_HEAD PyObject *keys; /* tuple of str */
    PyObject *values;             /* tuple of str, as long as keys */
    PyObject *file;               /* str, or NULL: push a policy file */
    unsigned flags;               /* FLD_POLICY_WHOLE */
} scope_object;

static PyObject *str_scopes_key; /* the thread state dict's key */

/* The calling thread's list of (scope, depth) entries; borrowed. */
static PyObject *thread_scopes(void)
{
    PyObject *dict = PyThreadState_GetDict();
    if (!dict) {
        PyErr_SetString(PyExc_RuntimeError, "fldispatch.policy: no thread state dict");
        return NULL;
    }
    PyObject *list = PyDict_GetItemWithError(dict, str_scopes_key);
    if (list || PyErr_Occurred())
        return list;
    list = PyList_New(0);
    if (!list || PyDict_SetItem(dict, str_scopes_key, list) < 0) {
        Py_XDECREF(list);
        return NULL;
    }
    Py_DECREF(list); /* the dict holds it */
    return list;
}

/* Fills keys[] and values[] (UTF-8, valid while the tuples live). */
static int scope_fields(scope_object *self, const char **keys, const char **values, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        keys[i] = fldpy_str("policy", "field", PyTuple_GetItem(self->keys, i));
        values[i] = keys[i] ? fldpy_str("policy", keys[i], PyTuple_GetItem(self->values, i)) : NULL;
        if (!keys[i] || !values[i])
            return -1;
    }
    return 0;
}

#define MAX_FIELDS 32

static PyObject *scope_enter(PyObject *obj, PyObject *unused)
{
    scope_object *self = (scope_object *)obj;
    const char *keys[MAX_FIELDS], *values[MAX_FIELDS];
    const char *file = NULL;
    Py_ssize_t n = self->keys ? PyTuple_Size(self->keys) : 0;
    if (self->file && !(file = fldpy_str("policy", "file", self->file)))
        return NULL;
    if (scope_fields(self, keys, values, n) < 0)
        return NULL;
    PyObject *list = thread_scopes();
    if (!list)
        return NULL;
    /* Recorded first, so that nothing can fail between the push and it. */
    size_t depth = fld_policy_depth();
    PyObject *entry = Py_BuildValue("(On)", obj, (Py_ssize_t)depth);
    if (!entry || PyList_Append(list, entry) < 0) {
        Py_XDECREF(entry);
        return NULL;
    }
    Py_DECREF(entry);
    int rc = file ? fld_policy_push_file(file)
                  : fld_policy_push_fields(self->flags, (size_t)n, keys, values);
    if (rc != FLD_OK) {
        fldpy_raise_status(rc);
        Py_ssize_t last = PyList_Size(list) - 1;
        if (last >= 0)
            PyList_SetSlice(list, last, last + 1, NULL);
        return NULL;
    }
    return Py_NewRef(obj);
}

static PyObject *scope_exit(PyObject *obj, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *list = thread_scopes();
    if (!list)
        return NULL;
    for (Py_ssize_t i = PyList_Size(list) - 1; i >= 0; i--) {
        PyObject *entry = PyList_GetItem(list, i);
        if (PyTuple_GetItem(entry, 0) != obj)
            continue;
        Py_ssize_t depth = PyLong_AsSsize_t(PyTuple_GetItem(entry, 1));
        if (depth < 0 && PyErr_Occurred())
            return NULL;
        fld_policy_pop_to((size_t)depth);
        /* Entries above it are blocks that never left: their overrides
         * are gone with this pop. */
        if (PyList_SetSlice(list, i, PyList_Size(list), NULL) < 0)
            return NULL;
        Py_RETURN_FALSE;
    }
    return fldpy_raise(FLD_ESTATE, "fldispatch.policy: leaving a block on a thread that did not "
                                   "enter it (the override is thread-local)");
}

/* PolicyScope(keys=(), values=(), flags=0, file=None) */
static int scope_init(PyObject *obj, PyObject *args, PyObject *kwargs)
{
    scope_object *self = (scope_object *)obj;
    PyObject *keys = NULL, *values = NULL, *file = Py_None;
    unsigned flags = 0;
    static char *kwlist[] = {"keys", "values", "flags", "file", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O!O!IO:PolicyScope", kwlist, &PyTuple_Type,
                                     &keys, &PyTuple_Type, &values, &flags, &file))
        return -1;
    Py_ssize_t n = keys ? PyTuple_Size(keys) : 0;
    if ((values ? PyTuple_Size(values) : 0) != n || n > MAX_FIELDS) {
        PyErr_Format(PyExc_TypeError,
                     "PolicyScope: keys and values must be tuples of the same "
                     "length (at most %d)",
                     MAX_FIELDS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyUnicode_Check(PyTuple_GetItem(keys, i)) ||
            !PyUnicode_Check(PyTuple_GetItem(values, i))) {
            PyErr_SetString(PyExc_TypeError, "PolicyScope: keys and values must hold str");
            return -1;
        }
    if (file != Py_None && !PyUnicode_Check(file)) {
        PyErr_SetString(PyExc_TypeError, "PolicyScope: file must be a str or None");
        return -1;
    }
    Py_CLEAR(self->keys);
    Py_CLEAR(self->values);
    Py_CLEAR(self->file);
    self->keys = keys ? Py_NewRef(keys) : NULL;
    self->values = values ? Py_NewRef(values) : NULL;
    self->file = file != Py_None ? Py_NewRef(file) : NULL;
    self->flags = flags;
    return 0;
}

static void scope_dealloc(PyObject *obj)
{
    scope_object *self = (scope_object *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->values);
    Py_CLEAR(self->file);
    freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_fn(obj);
    Py_DECREF(type);
}

static PyMethodDef scope_methods[] = {
    {"__enter__", scope_enter, METH_NOARGS,
     "Pushes the override on this thread (one C call: no signal handler runs inside)."},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METH_FASTCALL,
     "Pops this thread's overrides back to where the matching __enter__ found them."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot scope_slots[] = {
    {Py_tp_doc, "The C half of fldispatch.policy: __enter__ and __exit__."},
    {Py_tp_init, scope_init},
    {Py_tp_dealloc, scope_dealloc},
    {Py_tp_methods, scope_methods},
    {0, NULL},
};

static PyType_Spec scope_spec = {
    .name = "fldispatch._C.PolicyScope",
    .basicsize = sizeof(scope_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = scope_slots,
};

int fldpy_policy_init(PyObject *module)
{
    str_scopes_key = PyUnicode_InternFromString("fldispatch.policy_scopes");
    if (!str_scopes_key)
        return -1;
    PyObject *type = PyType_FromSpec(&scope_spec);
    if (!type)
        return -1;
    if (PyModule_AddObject(module, "PolicyScope", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return PyModule_AddIntConstant(module, "POLICY_WHOLE", FLD_POLICY_WHOLE);
}

static PyObject *py_policy_depth(PyObject *self, PyObject *unused)
{
    return PyLong_FromSize_t(fld_policy_depth());
}

static PyObject *py_reset_thread_policy(PyObject *self, PyObject *unused)
{
    fld_policy_pop_to(0);
    Py_RETURN_NONE;
}

/* ---- the global policy ------------------------------------------------------ */

static const char *const set_names[] = {"keys", "values", "flags"};

/* policy_set(keys, values, flags=0): fld_policy_set_fields(). */
static PyObject *py_policy_set(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    PyObject *a[3];
    if (fldpy_parse_args("policy_set", args, nargs, kwnames, set_names, 3, 2, a) < 0)
        return NULL;
    unsigned long flags = a[2] ? PyLong_AsUnsignedLong(a[2]) : 0;
    if (flags == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(a[0]) || !PyTuple_Check(a[1]) || PyTuple_Size(a[0]) != PyTuple_Size(a[1]) ||
        PyTuple_Size(a[0]) > MAX_FIELDS) {
        PyErr_Format(PyExc_TypeError,
                     "policy_set(): keys and values must be tuples of the same "
                     "length (at most %d)",
                     MAX_FIELDS);
        return NULL;
    }
    Py_ssize_t n = PyTuple_Size(a[0]);
    const char *keys[MAX_FIELDS], *values[MAX_FIELDS];
    for (Py_ssize_t i = 0; i < n; i++) {
        keys[i] = fldpy_str("policy_set", "keys", PyTuple_GetItem(a[0], i));
        values[i] = keys[i] ? fldpy_str("policy_set", "values", PyTuple_GetItem(a[1], i)) : NULL;
        if (!values[i])
            return NULL;
    }
    int rc = fld_policy_set_fields((unsigned)flags, (size_t)n, keys, values);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_policy_reset(PyObject *self, PyObject *unused)
{
    int rc = fld_policy_reset();
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_policy_load(PyObject *self, PyObject *arg)
{
    const char *path = fldpy_str("load_policy", "path", arg);
    if (!path)
        return NULL;
    int rc = fld_policy_load_file(path);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

/* ---- the failure memory ------------------------------------------------------ */

static int append_failure(const fld_failure_info *info, void *user)
{
    const char *device = info->device_type ? fld_device_name(info->device_type) : NULL;
    const char *dtype = info->dtype.bits ? fld_dtype_name(info->dtype) : NULL;
    PyObject *row = Py_BuildValue("(ssss)", info->op, device ? device : "any",
                                  dtype ? dtype : "any", info->impl_id);
    if (!row || PyList_Append((PyObject *)user, row) < 0) {
        Py_XDECREF(row);
        return -1;
    }
    Py_DECREF(row);
    return 0;
}

static PyObject *py_failed_impls(PyObject *self, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    int rc = fld_foreach_failure(append_failure, list);
    if (rc == -1 && PyErr_Occurred()) {
        Py_DECREF(list);
        return NULL;
    }
    if (rc != FLD_OK) {
        Py_DECREF(list);
        return fldpy_raise_status(rc);
    }
    return list;
}

static const char *const clear_names[] = {"op"};

static PyObject *py_clear_failed_impls(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames)
{
    PyObject *a[1];
    if (fldpy_parse_args("clear_failed_impls", args, nargs, kwnames, clear_names, 1, 0, a) < 0)
        return NULL;
    const char *op = NULL;
    if (a[0] && a[0] != Py_None && !(op = fldpy_str("clear_failed_impls", "op", a[0])))
        return NULL;
    int rc = fld_clear_failures(op);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

/* ---- the log level ------------------------------------------------------------- */

static const struct {
    const char *name;
    int level;
} log_levels[] = {
    {"debug", FLD_LOG_DEBUG},  {"info", FLD_LOG_INFO},   {"warning", FLD_LOG_WARNING},
    {"warn", FLD_LOG_WARNING}, {"error", FLD_LOG_ERROR}, {"off", FLD_LOG_OFF},
};

#define N_LOG_LEVELS (sizeof log_levels / sizeof log_levels[0])

static PyObject *py_set_log_level(PyObject *self, PyObject *arg)
{
    int level = -1;
    if (PyLong_Check(arg)) {
        long v = PyLong_AsLong(arg);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < 0 || v > FLD_LOG_OFF)
            return fldpy_raise(FLD_EINVAL, "set_log_level(): level %ld is outside 0..%d", v,
                               FLD_LOG_OFF);
        level = (int)v;
    } else {
        const char *name = fldpy_str("set_log_level", "level", arg);
        if (!name)
            return NULL;
        for (size_t i = 0; i < N_LOG_LEVELS && level < 0; i++)
            if (strcasecmp(name, log_levels[i].name) == 0)
                level = log_levels[i].level;
        if (level < 0)
            return fldpy_raise(FLD_EINVAL,
                               "set_log_level(): unknown level '%s' (debug, info, warning, "
                               "error, off, or a number)",
                               name);
    }
    fld_log_set_level(level);
    Py_RETURN_NONE;
}

static PyObject *py_get_log_level(PyObject *self, PyObject *unused)
{
    int level = fld_log_get_level();
    for (size_t i = 0; i < N_LOG_LEVELS; i++)
        if (log_levels[i].level == level)
            return PyUnicode_FromString(log_levels[i].name);
    return PyLong_FromLong(level);
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
    {"policy_set", FASTCALL(py_policy_set),
     "policy_set(keys, values, flags=0)\n--\n\n"
     "fld_policy_set_fields(): several global fields at once. Use fldispatch.set_policy()."},
    {"policy_reset", py_policy_reset, METH_NOARGS,
     "policy_reset()\n--\n\nThe global policy back to what the configuration says."},
    {"policy_load", py_policy_load, METH_O,
     "policy_load(path, /)\n--\n\nA YAML policy file as the whole global policy."},
    {"policy_depth", py_policy_depth, METH_NOARGS,
     "policy_depth()\n--\n\nHow many scoped overrides this thread has pushed."},
    {"reset_thread_policy", py_reset_thread_policy, METH_NOARGS,
     "reset_thread_policy()\n--\n\nDrops every scoped override of this thread."},
    {"failed_impls", py_failed_impls, METH_NOARGS,
     "failed_impls()\n--\n\n[(op, device, dtype, impl_id)] the failure memory skips now."},
    {"clear_failed_impls", FASTCALL(py_clear_failed_impls),
     "clear_failed_impls(op=None)\n--\n\nForgets remembered failures (of op, or of all)."},
    {"set_log_level", py_set_log_level, METH_O,
     "set_log_level(level, /)\n--\n\n'debug', 'info', 'warning', 'error', 'off' or a number."},
    {"get_log_level", py_get_log_level, METH_NOARGS,
     "get_log_level()\n--\n\nThe library's log level, by name."},
    {"policy_describe", py_policy_describe, METH_NOARGS,
     "policy_describe()\n--\n\nThis thread's effective policy as one line."},
    {"set_stream", FASTCALL(py_set_stream),
     "set_stream(device, stream)\n--\n\n"
     "This thread's stream for a device type (an int handle, or None for the default), used\n"
     "for tensors whose framework does not publish its current stream."},
    {"get_stream", py_get_stream, METH_O,
     "get_stream(device, /)\n--\n\nThis thread's stream for a device type (0 = default)."},
    {NULL, NULL, 0, NULL},
};
