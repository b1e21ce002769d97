/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the library would do and why: resolve, explain, plugins, impls,
 * config, reload, version, oot_op_enabled. The dicts have the keys of the
 * command-line tool's --json output (fldispatch resolve/list/config), so a
 * script can move between the two.
 */
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "ext.h"

/* ---- small dict helpers ---------------------------------------------------- */

/* Steals value; a NULL value means an exception is already set. */
static int put(PyObject *d, const char *key, PyObject *value)
{
    if (!value)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *str_or_none(const char *s)
{
    if (!s)
        return Py_NewRef(Py_None);
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

/* The names of a mask's bits: bit_name(bit), or "bit<N>" when it gives NULL. */
static PyObject *mask_list(uint32_t mask, const char *(*bit_name)(unsigned))
{
    PyObject *list = PyList_New(0);
    for (unsigned bit = 0; list && bit < 32; bit++) {
        if (!(mask & (1u << bit)))
            continue;
        const char *text = bit_name(bit);
        PyObject *name = text ? PyUnicode_FromString(text) : PyUnicode_FromFormat("bit%u", bit);
        if (!name || PyList_Append(list, name) < 0) {
            Py_XDECREF(name);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(name);
    }
    return list;
}

/* FLD_DEVICE_MASK_* bits: rows of the library's device table (tool_api.h). */
static const char *device_bit_name(unsigned bit)
{
    const struct fld_tool_device *d = fld__device_row(bit);
    return d ? d->name : NULL;
}

static const char *dtype_bit_name(unsigned bit)
{
    const struct fld_tool_dtype *d = fld__dtype_row(bit); /* the library's dtype table */
    return d ? d->name : NULL;
}

/* ---- resolve, explain ---------------------------------------------------------- */

static const char *const select_names[] = {"op", "device", "dtype"};

/* Parses (op, device="cpu", dtype=...) ; dtype defaults to "any" for
 * attention_backend, which has no tensors, and to float32 otherwise. */
static int parse_selection(const char *fn, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames, const char **op, int *device, DLDataType *dtype)
{
    PyObject *a[3];
    if (fldpy_parse_args(fn, args, nargs, kwnames, select_names, 3, 1, a) < 0)
        return -1;
    if (!(*op = fldpy_str(fn, "op", a[0])))
        return -1;
    *device = FLD_DEVICE_CPU;
    if (a[1] && fldpy_parse_device(fn, a[1], device) < 0)
        return -1;
    *dtype = strcmp(*op, FLD_OP_ATTENTION_BACKEND) == 0 ? FLD_DTYPE_ANY : FLD_DTYPE_F32;
    if (a[2] && fldpy_parse_dtype(fn, a[2], dtype) < 0)
        return -1;
    return 0;
}

static PyObject *py_resolve(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    const char *op;
    int device;
    DLDataType dtype;
    if (parse_selection("resolve", args, nargs, kwnames, &op, &device, &dtype) < 0)
        return NULL;
    const char *impl_id = NULL;
    int rc = fld_resolve(op, device, dtype, &impl_id);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    return PyUnicode_FromString(impl_id);
}

static PyObject *resolution_dict(const fld_resolution *r, const char *op, int device,
                                 DLDataType dtype)
{
    char policy[2048];
    fld_policy_describe(policy, sizeof policy);
    const char *dtype_name = fld_dtype_name(dtype);
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    PyObject *candidates = PyList_New(0), *rejected = PyList_New(0);
    if (!candidates || !rejected)
        goto fail;
    for (size_t i = 0; i < r->n_candidates; i++) {
        PyObject *s = str_or_none(r->candidates[i]);
        if (!s || PyList_Append(candidates, s) < 0) {
            Py_XDECREF(s);
            goto fail;
        }
        Py_DECREF(s);
    }
    for (size_t i = 0; i < r->n_rejected; i++) {
        PyObject *item = PyDict_New();
        if (!item || put(item, "impl_id", str_or_none(r->rejected[i].impl_id)) < 0 ||
            put(item, "reason", str_or_none(r->rejected[i].reason)) < 0 ||
            PyList_Append(rejected, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    if (put(d, "op", str_or_none(r->op ? r->op : op)) < 0 ||
        put(d, "device", str_or_none(fld_device_name(device))) < 0 ||
        put(d, "dtype", str_or_none(dtype_name ? dtype_name : "?")) < 0 ||
        put(d, "selected", str_or_none(r->selected)) < 0 ||
        put(d, "candidates", Py_NewRef(candidates)) < 0 ||
        put(d, "rejected", Py_NewRef(rejected)) < 0 || put(d, "order", str_or_none(r->order)) < 0 ||
        put(d, "order_source", str_or_none(r->order_source)) < 0 ||
        put(d, "policy", str_or_none(policy)) < 0)
        goto fail;
    Py_DECREF(candidates);
    Py_DECREF(rejected);
    return d;
fail:
    Py_XDECREF(candidates);
    Py_XDECREF(rejected);
    Py_DECREF(d);
    return NULL;
}

static PyObject *py_explain(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    const char *op;
    int device;
    DLDataType dtype;
    if (parse_selection("explain", args, nargs, kwnames, &op, &device, &dtype) < 0)
        return NULL;
    fld_resolution *res = NULL;
    int rc = fld_explain(op, device, dtype, &res);
    if (!res) {
        /* As `fldispatch resolve --json`: nothing available is an answer
         * (selected None); an unknown op or a bad configuration is an error. */
        if (rc != FLD_EUNAVAILABLE && rc != FLD_OK)
            return fldpy_raise_status(rc);
        fld_resolution empty = {.op = op};
        return resolution_dict(&empty, op, device, dtype);
    }
    PyObject *d = resolution_dict(res, op, device, dtype);
    fld_resolution_free(res);
    return d;
}

/* ---- plugins, impls ------------------------------------------------------------- */

static const char *plugin_status_name(fld_plugin_status st)
{
    const char *name = fld_plugin_status_name(st);
    return name ? name : "unknown";
}

/* The walkers stop on a non-zero return; 1 means "a Python exception". */
static int add_plugin(const fld_plugin_info *p, void *user)
{
    PyObject *d = PyDict_New();
    if (!d || put(d, "name", str_or_none(p->name)) < 0 ||
        put(d, "path", str_or_none(p->path)) < 0 ||
        put(d, "version", str_or_none(p->version)) < 0 ||
        put(d, "abi_major", PyLong_FromUnsignedLong(p->abi_major)) < 0 ||
        put(d, "abi_minor", PyLong_FromUnsignedLong(p->abi_minor)) < 0 ||
        put(d, "in_tree", PyBool_FromLong(p->in_tree)) < 0 ||
        put(d, "status", str_or_none(plugin_status_name(p->status))) < 0 ||
        put(d, "reason", str_or_none(p->reason ? p->reason : "")) < 0 ||
        put(d, "n_impls", PyLong_FromSize_t(p->n_impls)) < 0 ||
        put(d, "detail", str_or_none(p->detail ? p->detail : "")) < 0 ||
        put(d, "hook_devices", mask_list(p->hook_devices, device_bit_name)) < 0 ||
        PyList_Append(user, d) < 0) {
        Py_XDECREF(d);
        return 1;
    }
    Py_DECREF(d);
    return 0;
}

static int add_impl(const fld_impl_info *m, void *user)
{
    PyObject *d = PyDict_New();
    if (!d || put(d, "op", str_or_none(m->op)) < 0 ||
        put(d, "impl_id", str_or_none(m->impl_id)) < 0 ||
        put(d, "kind", str_or_none(m->kind)) < 0 || put(d, "vendor", str_or_none(m->vendor)) < 0 ||
        put(d, "priority", PyLong_FromLong(m->priority)) < 0 ||
        put(d, "devices", mask_list(m->devices, device_bit_name)) < 0 ||
        put(d, "dtypes", mask_list(m->dtypes, dtype_bit_name)) < 0 ||
        put(d, "plugin", str_or_none(m->plugin)) < 0 ||
        put(d, "in_tree", PyBool_FromLong(m->in_tree)) < 0 ||
        put(d, "available", PyBool_FromLong(m->available)) < 0 ||
        put(d, "unavailable_reason",
            str_or_none(m->unavailable_reason ? m->unavailable_reason : "")) < 0 ||
        PyList_Append(user, d) < 0) {
        Py_XDECREF(d);
        return 1;
    }
    Py_DECREF(d);
    return 0;
}

/* The list a walker filled, or NULL with the walker's failure raised. */
static PyObject *walked(int rc, PyObject *list)
{
    if (rc == 1 || PyErr_Occurred()) {
        Py_DECREF(list);
        return NULL;
    }
    if (rc != 0) {
        Py_DECREF(list);
        return fldpy_raise_status(rc);
    }
    return list;
}

static PyObject *py_plugins(PyObject *self, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    return list ? walked(fld_foreach_plugin(add_plugin, list), list) : NULL;
}

static PyObject *py_impls(PyObject *self, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    return list ? walked(fld_foreach_impl(add_impl, list), list) : NULL;
}

/* ---- config ------------------------------------------------------------------------ */

static int add_field(const fld_config_field *f, void *user)
{
    PyObject *d = PyDict_New();
    if (!d || put(d, "key", str_or_none(f->key)) < 0 ||
        put(d, "value", str_or_none(f->value)) < 0 ||
        put(d, "source", str_or_none(f->source)) < 0 || PyList_Append(user, d) < 0) {
        Py_XDECREF(d);
        return 1;
    }
    Py_DECREF(d);
    return 0;
}

static PyObject *py_config(PyObject *self, PyObject *unused)
{
    fld_platform_info plat;
    memset(&plat, 0, sizeof plat);
    int rc = fld_platform(&plat);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    PyObject *fields = PyList_New(0);
    if (!fields)
        return NULL;
    if (!walked(fld_foreach_config_field(add_field, fields), fields))
        return NULL;
    char summary[2048];
    fld_policy_describe(summary, sizeof summary);
    PyObject *platform = PyDict_New(), *d = PyDict_New();
    if (!platform || !d || put(platform, "name", str_or_none(plat.name)) < 0 ||
        put(platform, "detected_by", str_or_none(plat.detected_by)) < 0 ||
        put(platform, "config_file",
            str_or_none(plat.config_file && *plat.config_file ? plat.config_file : NULL)) < 0 ||
        put(platform, "config_path", str_or_none(plat.config_path)) < 0 ||
        put(d, "platform", Py_NewRef(platform)) < 0 || put(d, "policy", Py_NewRef(fields)) < 0 ||
        put(d, "summary", str_or_none(summary)) < 0 ||
        put(d, "plugin_path", str_or_none(fld_plugin_path())) < 0) {
        Py_XDECREF(platform);
        Py_XDECREF(d);
        Py_DECREF(fields);
        return NULL;
    }
    Py_DECREF(platform);
    Py_DECREF(fields);
    return d;
}

/* ---- the rest ------------------------------------------------------------------------- */

/* Rescans, initialisation and plugin loads take milliseconds (file system,
 * dlopen, availability probes): other Python threads run meanwhile. */
static PyObject *py_reload(PyObject *self, PyObject *unused)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = fld_reload();
    Py_END_ALLOW_THREADS if (rc != FLD_OK) return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_init(PyObject *self, PyObject *unused)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = fld_init();
    Py_END_ALLOW_THREADS if (rc != FLD_OK) return fldpy_raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *py_version(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(fld_version());
}

static PyObject *py_oot_op_enabled(PyObject *self, PyObject *arg)
{
    const char *op = fldpy_str("oot_op_enabled", "op", arg);
    if (!op)
        return NULL;
    return PyBool_FromLong(fld_oot_op_enabled(op));
}

static PyObject *py_load_plugin(PyObject *self, PyObject *arg)
{
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    int rc;
    const char *file = PyBytes_AsString(path);
    Py_BEGIN_ALLOW_THREADS rc = fld_load_plugin(file);
    Py_END_ALLOW_THREADS Py_DECREF(path);
    if (rc != FLD_OK)
        return fldpy_raise_status(rc);
    fldpy_binding_declared(NULL); /* the plugin may declare ops call_op() has seen */
    Py_RETURN_NONE;
}

/* The library's dtype table (tool_api.h): (name, long_name, mask) per row. */
static PyObject *py_dtypes(PyObject *self, PyObject *unused)
{
    const struct fld_tool_dtype *d;
    unsigned n = 0;
    while (fld__dtype_row(n))
        n++;
    PyObject *rows = PyTuple_New((Py_ssize_t)n);
    for (unsigned i = 0; rows && (d = fld__dtype_row(i)); i++) {
        PyObject *row = Py_BuildValue("(ssI)", d->name, d->long_name, (unsigned)d->mask);
        if (!row || PyTuple_SetItem(rows, (Py_ssize_t)i, row) < 0) { /* steals row */
            Py_CLEAR(rows);
            break;
        }
    }
    return rows;
}

/* The library's policy-field table (tool_api.h), one dict per row. */
static PyObject *py_policy_fields(PyObject *self, PyObject *unused)
{
    const struct fld_tool_policy_field *f;
    unsigned n = 0;
    while (fld__policy_field_row(n))
        n++;
    PyObject *rows = PyTuple_New((Py_ssize_t)n);
    for (unsigned i = 0; rows && (f = fld__policy_field_row(i)); i++) {
        const struct fld_tool_policy_field *partner =
            f->partner >= 0 ? fld__policy_field_row((unsigned)f->partner) : NULL;
        PyObject *row = Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:z,s:O}", "key", f->key, "env", f->env,
                                      "yaml_key", f->yaml, "word", f->word, "kind", f->kind,
                                      "partner", partner ? partner->key : NULL, "upstream",
                                      f->upstream ? Py_True : Py_False);
        if (!row || PyTuple_SetItem(rows, (Py_ssize_t)i, row) < 0) { /* steals row */
            Py_CLEAR(rows);
            break;
        }
    }
    return rows;
}

static PyObject *py_last_error(PyObject *self, PyObject *unused)
{
    return str_or_none(fld_last_error());
}

#define FASTCALL(fn) ((PyCFunction)(void (*)(void))(fn)), METH_FASTCALL | METH_KEYWORDS

PyMethodDef fldpy_introspect_methods[] = {
    {"resolve", FASTCALL(py_resolve),
     "resolve(op, device='cpu', dtype='float32')\n--\n\n"
     "The impl_id a call of op on (device, dtype) would use now, under this thread's policy."},
    {"explain", FASTCALL(py_explain),
     "explain(op, device='cpu', dtype='float32')\n--\n\n"
     "The whole resolution as a dict with the keys of `fldispatch resolve --json`: op, device,\n"
     "dtype, selected, candidates, rejected, order, order_source, policy."},
    {"plugins", py_plugins, METH_NOARGS,
     "plugins()\n--\n\nEvery plugin seen, loaded or not, as dicts (the keys of `fldispatch list "
     "--json`)."},
    {"impls", py_impls, METH_NOARGS,
     "impls()\n--\n\nEvery registered implementation, as dicts (`fldispatch list --json`)."},
    {"config", py_config, METH_NOARGS,
     "config()\n--\n\nThe effective policy with the source of each value (`fldispatch config "
     "--json`)."},
    {"reload", py_reload, METH_NOARGS,
     "reload()\n--\n\nRe-reads the environment and configuration files and rescans plugins."},
    {"init", py_init, METH_NOARGS,
     "init()\n--\n\nInitialises the library now (it does so lazily otherwise)."},
    {"version", py_version, METH_NOARGS, "version()\n--\n\nThe loaded library's version."},
    {"oot_op_enabled", py_oot_op_enabled, METH_O,
     "oot_op_enabled(op, /)\n--\n\nWhether an engine integration should replace its layer `op` "
     "(VLLM_FL_OOT_*)."},
    {"load_plugin", py_load_plugin, METH_O,
     "load_plugin(path, /)\n--\n\nLoads one plugin file now (the checks of the search path "
     "apply)."},
    {"dtypes", py_dtypes, METH_NOARGS,
     "dtypes()\n--\n\nThe library's dtype table: (name, long_name, mask bit) per dtype, in the\n"
     "order of the FLD_DTYPE_MASK_* bits."},
    {"policy_fields", py_policy_fields, METH_NOARGS,
     "policy_fields()\n--\n\nThe library's policy-field table: one dict per field (key, env,\n"
     "yaml_key, word, kind, partner, upstream), in the order of config()'s fields."},
    {"last_error", py_last_error, METH_NOARGS,
     "last_error()\n--\n\nfld_last_error() of this thread."},
    {NULL, NULL, 0, NULL},
};
