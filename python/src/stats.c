/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch.stats() and friends: the library's call counters (fld_stats_*
 * in fldispatch.h) as Python values, and the entry point through which
 * implementations that Python runs itself count into the same table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "ext.h"

static int put(PyObject *d, const char *key, PyObject *value)
{
    if (!value)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *py_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    fld_stats_entry *e = NULL;
    size_t n = 0;
    for (;;) {
        size_t want;
        if (fld_stats_snapshot(NULL, 0, &want) != FLD_OK)
            return fldpy_raise_status(FLD_EINVAL);
        free(e);
        e = want ? malloc((want + 8) * sizeof *e) : NULL;
        if (want && !e)
            return PyErr_NoMemory();
        fld_stats_snapshot(e, want + 8, &n);
        if (n <= want + 8)
            break;
    }
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *d = PyDict_New();
        if (!d || put(d, "op", PyUnicode_FromString(e[i].op)) < 0 ||
            put(d, "impl_id", PyUnicode_FromString(e[i].impl_id)) < 0 ||
            put(d, "device", PyUnicode_FromString(e[i].device)) < 0 ||
            put(d, "dtype", PyUnicode_FromString(e[i].dtype)) < 0 ||
            put(d, "calls", PyLong_FromUnsignedLongLong(e[i].calls)) < 0 ||
            put(d, "fallbacks", PyLong_FromUnsignedLongLong(e[i].fallbacks)) < 0 ||
            put(d, "failures", PyLong_FromUnsignedLongLong(e[i].failures)) < 0 ||
            put(d, "total_ns", PyLong_FromUnsignedLongLong(e[i].total_ns)) < 0 ||
            PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(d);
    }
    free(e);
    return list;
}

static PyObject *py_stats_reset(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    fld_stats_reset();
    Py_RETURN_NONE;
}

static PyObject *py_stats_summary(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return PyErr_NoMemory();
    int rc = fld_stats_print(f);
    fclose(f);
    PyObject *s = rc == FLD_OK ? PyUnicode_DecodeUTF8(text, (Py_ssize_t)size, "replace")
                               : fldpy_raise_status(rc);
    free(text);
    return s;
}

static const char *const mode_names[] = {"off", "calls", "time"};

static PyObject *py_stats_enable(PyObject *self, PyObject *arg)
{
    (void)self;
    int mode = -1;
    if (arg == Py_None || arg == Py_False)
        mode = FLD_STATS_OFF;
    else if (arg == Py_True)
        mode = FLD_STATS_CALLS;
    else if (PyUnicode_Check(arg)) {
        const char *s = fldpy_str("stats_enable", "mode", arg);
        if (!s)
            return NULL;
        for (int i = 0; i < 3; i++)
            if (strcmp(s, mode_names[i]) == 0)
                mode = i;
    }
    if (mode < 0)
        return fldpy_raise(FLD_EINVAL,
                           "stats_enable: argument 'mode' must be 'off', 'calls', 'time', True, "
                           "False or None, not %R",
                           arg);
    int rc = fld_stats_enable(mode);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_stats_mode(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    int mode = fld_stats_mode();
    return PyUnicode_FromString(mode >= 0 && mode < 3 ? mode_names[mode] : "off");
}

/* Runs one of the library's flushes with the GIL released (it writes files). */
static PyObject *flush_without_gil(int (*flush)(void))
{
    PyThreadState *released = PyEval_SaveThread();
    int rc = flush();
    PyEval_RestoreThread(released);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_stats_flush(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return flush_without_gil(fld_stats_flush);
}

static PyObject *py_stats_flush_changed(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return flush_without_gil(fld__stats_flush_changed);
}

/* _stats_record(op, impl_id, device, dtype, status=0, fell_back=False, ns=0) */
static PyObject *py_stats_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    (void)self;
    static const char *const names[] = {"op",     "impl_id",   "device", "dtype",
                                        "status", "fell_back", "ns"};
    PyObject *a[7] = {0};
    if (fldpy_parse_args("_stats_record", args, nargs, kwnames, names, 7, 4, a) < 0)
        return NULL;
    const char *op = fldpy_str("_stats_record", "op", a[0]);
    const char *impl_id = op ? fldpy_str("_stats_record", "impl_id", a[1]) : NULL;
    if (!impl_id)
        return NULL;
    int device_type;
    DLDataType dtype;
    if (fldpy_parse_device("_stats_record", a[2], &device_type) < 0 ||
        fldpy_parse_dtype("_stats_record", a[3], &dtype) < 0)
        return NULL;
    int status = 0;
    if (a[4]) {
        long v = PyLong_AsLong(a[4]);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        status = (int)v;
    }
    int fell_back = a[5] ? fldpy_parse_bool(a[5]) : 0;
    if (fell_back < 0)
        return NULL;
    unsigned long long ns = a[6] ? PyLong_AsUnsignedLongLong(a[6]) : 0;
    if (PyErr_Occurred())
        return NULL;
    int rc = fld_stats_record(op, impl_id, device_type, dtype, status,
                              fell_back ? FLD_STATS_FELL_BACK : 0, (uint64_t)ns);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

/* The families under construction: a list of [name, type, help, label names, samples]. */
struct families_out {
    PyObject *list;
    PyObject *family, *samples; /* the current family and its samples, borrowed from list */
};

static int families_family(void *ctx, const char *name, const char *type, const char *help)
{
    struct families_out *o = ctx;
    o->samples = PyList_New(0);
    PyObject *family =
        o->samples ? Py_BuildValue("[sssON]", name, type, help, Py_None, o->samples) : NULL;
    if (!family || PyList_Append(o->list, family) < 0) {
        Py_XDECREF(family);
        return FLD_ENOMEM;
    }
    Py_DECREF(family);
    o->family = family;
    return FLD_OK;
}

static PyObject *strings(const char *const *s, size_t n)
{
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    for (size_t i = 0; t && i < n; i++) {
        PyObject *v = PyUnicode_DecodeUTF8(s[i], (Py_ssize_t)strlen(s[i]), "replace");
        if (!v || PyTuple_SetItem(t, (Py_ssize_t)i, v) < 0)
            Py_CLEAR(t);
    }
    return t;
}

static int families_sample(void *ctx, const char *const *names, const char *const *values,
                           size_t nlabels, uint64_t value, bool nanoseconds)
{
    struct families_out *o = ctx;
    if (PyList_GetItem(o->family, 3) == Py_None) { /* the family's first sample names its labels */
        PyObject *label_names = strings(names, nlabels);
        if (!label_names || PyList_SetItem(o->family, 3, label_names) < 0)
            return FLD_ENOMEM;
    }
    PyObject *labels = strings(values, nlabels);
    PyObject *number =
        nanoseconds ? PyFloat_FromDouble((double)value / 1e9) : PyLong_FromUnsignedLongLong(value);
    PyObject *sample = labels && number ? PyTuple_Pack(2, labels, number) : NULL;
    Py_XDECREF(labels);
    Py_XDECREF(number);
    int rc = sample && PyList_Append(o->samples, sample) == 0 ? FLD_OK : FLD_ENOMEM;
    Py_XDECREF(sample);
    return rc;
}

/* _stats_metric_families(paths, by_rank): the files merged, as Prometheus's families. */
static PyObject *py_stats_metric_families(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *seq;
    int by_rank;
    if (!PyArg_ParseTuple(args, "Op:_stats_metric_families", &seq, &by_rank))
        return NULL;
    PyObject *list = PySequence_List(seq);
    if (!list)
        return NULL;
    Py_ssize_t n = PyList_Size(list);
    PyObject **bytes = PyMem_Calloc((size_t)n + 1, sizeof *bytes);
    const char **paths = PyMem_Calloc((size_t)n + 1, sizeof *paths);
    PyObject *result = NULL;
    if (!bytes || !paths) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_FSConverter(PyList_GetItem(list, i), &bytes[i]))
            goto done;
        if (!(paths[i] = PyBytes_AsString(bytes[i])))
            goto done;
    }
    struct fld_stats_merge m;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = fld__stats_merge(paths, (size_t)n, by_rank != 0, &m);
    Py_END_ALLOW_THREADS if (rc != FLD_OK)
    {
        fldpy_raise_status(rc);
        goto done;
    }
    struct families_out out = {PyList_New(0), NULL, NULL};
    const struct fld_stats_visitor visitor = {&out, families_family, families_sample};
    if (out.list && fld__stats_merge_visit(&m, &visitor) == FLD_OK)
        result = out.list;
    else if (!PyErr_Occurred())
        PyErr_NoMemory();
    if (!result)
        Py_XDECREF(out.list);
    fld__stats_merge_free(&m);
done:
    for (Py_ssize_t i = 0; bytes && i < n; i++)
        Py_XDECREF(bytes[i]);
    PyMem_Free(bytes);
    PyMem_Free(paths);
    Py_DECREF(list);
    return result;
}

/* _stats_file_glob(): VLLM_FL_STATS_FILE as a glob of every process's file, or None. */
static PyObject *py_stats_file_glob(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    char buf[8192];
    int rc = fld__stats_file_glob(buf, sizeof buf);
    if (rc == FLD_ENOTFOUND)
        Py_RETURN_NONE;
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    return PyUnicode_DecodeFSDefault(buf);
}

/* _stats_interval(): VLLM_FL_STATS_INTERVAL in force, in seconds (0.0: at exit only). */
static PyObject *py_stats_interval(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyFloat_FromDouble(fld__stats_interval());
}

PyMethodDef fldpy_stats_methods[] = {
    {"stats", py_stats, METH_NOARGS,
     "stats()\n--\n\nThe call counters, one dict per (op, impl_id, device, dtype) that ran: "
     "op,\nimpl_id, device, dtype, calls, fallbacks, failures, total_ns. Empty unless counting "
     "is on\n(VLLM_FL_STATS=1 or time, VLLM_FL_STATS_FILE, or stats_enable())."},
    {"stats_reset", py_stats_reset, METH_NOARGS,
     "stats_reset()\n--\n\nSets every counter to zero and empties the trace."},
    {"stats_summary", py_stats_summary, METH_NOARGS,
     "stats_summary()\n--\n\nThe counters as the table printed at exit."},
    {"stats_enable", py_stats_enable, METH_O,
     "stats_enable(mode, /)\n--\n\nSwitches counting: 'off', 'calls' or 'time' (True: 'calls')."},
    {"stats_mode", py_stats_mode, METH_NOARGS,
     "stats_mode()\n--\n\nThe counting mode in force: 'off', 'calls' or 'time'."},
    {"stats_flush", py_stats_flush, METH_NOARGS,
     "stats_flush()\n--\n\nWrites VLLM_FL_STATS_FILE (or the table on stderr) and VLLM_FL_TRACE "
     "now."},
    {"_stats_flush_changed", py_stats_flush_changed, METH_NOARGS,
     "_stats_flush_changed()\n--\n\nWhat the library's exit handler does: stats_flush() unless "
     "nothing was counted or traced, and no setting changed, since the last flush wrote."},
    {"_stats_record", (PyCFunction)(void (*)(void))py_stats_record, METH_FASTCALL | METH_KEYWORDS,
     "_stats_record(op, impl_id, device, dtype, status=0, fell_back=False, ns=0)\n--\n\n"
     "Counts one call of an implementation run outside the library (fld_stats_record)."},
    {"_stats_metric_families", py_stats_metric_families, METH_VARARGS,
     "_stats_metric_families(paths, by_rank, /)\n--\n\nThe counters files merged as `fldispatch "
     "stats --prometheus` merges them: a list of\n[name, type, help, label names, [(label values, "
     "value), ...]] per metric family."},
    {"_stats_file_glob", py_stats_file_glob, METH_NOARGS,
     "_stats_file_glob()\n--\n\nVLLM_FL_STATS_FILE as a glob pattern that matches every "
     "process's and rank's file;\nNone when it is not set."},
    {"_stats_interval", py_stats_interval, METH_NOARGS,
     "_stats_interval()\n--\n\nVLLM_FL_STATS_INTERVAL in force, in seconds; 0.0 when the "
     "files are written at\nexit only."},
    {NULL, NULL, 0, NULL},
};
