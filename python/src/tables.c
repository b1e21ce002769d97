/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's tables as the Python package reads them, so that it keeps
 * no copy of its own: the catalog's rows with their families (_C.catalog(),
 * <fldispatch/catalog.def>), the device table (_C.devices(),
 * core/base/devices.h), the implementation kinds with their default priorities
 * (_C.kinds(), <fldispatch/plugin.h>) and the variable table
 * (_C.variables(), core/policy/variables.h). None needs fld_init(). The dtype and policy-field
 * tables are introspect.c's (_C.dtypes(), _C.policy_fields()).
 */
#include <fldispatch/internal/tool_api.h>
#include <fldispatch/plugin.h>

#include "ext.h"

/* A tuple of n rows, row(i) each (a new reference, NULL on error). */
static PyObject *rows_tuple(unsigned n, PyObject *(*row)(unsigned))
{
    PyObject *rows = PyTuple_New((Py_ssize_t)n);
    for (unsigned i = 0; rows && i < n; i++) {
        PyObject *r = row(i);
        if (!r || PyTuple_SetItem(rows, (Py_ssize_t)i, r) < 0) /* steals r */
            Py_CLEAR(rows);
    }
    return rows;
}

/* ---- _C.catalog() ----------------------------------------------------------- */

static const struct {
    const char *name, *family, *doc;
} catalog_rows[] = {
#define FLD_CATALOG_OP(id, name, family, doc) {#name, #family, doc},
#include <fldispatch/catalog.def>
};

static PyObject *catalog_row(unsigned i)
{
    return Py_BuildValue("(sss)", catalog_rows[i].name, catalog_rows[i].family,
                         catalog_rows[i].doc);
}

static PyObject *py_catalog(PyObject *self, PyObject *unused)
{
    return rows_tuple(sizeof catalog_rows / sizeof catalog_rows[0], catalog_row);
}

/* ---- _C.devices() ----------------------------------------------------------- */

static PyObject *device_row(unsigned i)
{
    const struct fld_tool_device *d = fld__device_row(i);
    return Py_BuildValue("{s:s,s:z,s:i,s:I,s:s,s:s,s:z}", "name", d->name, "alias", d->alias,
                         "type", d->type, "mask", (unsigned)d->mask, "codes", d->codes, "torch",
                         d->torch, "torch_build", d->torch_build);
}

static PyObject *py_devices(PyObject *self, PyObject *unused)
{
    unsigned n = 0;
    while (fld__device_row(n))
        n++;
    return rows_tuple(n, device_row);
}

/* ---- _C.kinds() ------------------------------------------------------------- */

/* The kinds of <fldispatch/plugin.h>: the policy's token for each, the
 * prefix of its impl_ids and its default priority. */
static const struct {
    fld_kind code;
    const char *token, *prefix;
    int priority;
} kinds[] = {
    {FLD_KIND_DEFAULT, "flagos", "default", FLD_PRIORITY_DEFAULT},
    {FLD_KIND_VENDOR, "vendor", "vendor", FLD_PRIORITY_VENDOR},
    {FLD_KIND_REFERENCE, "reference", "reference", FLD_PRIORITY_REFERENCE},
};

static PyObject *kind_row(unsigned i)
{
    return Py_BuildValue("{s:i,s:s,s:s,s:i}", "code", (int)kinds[i].code, "token", kinds[i].token,
                         "prefix", kinds[i].prefix, "priority", kinds[i].priority);
}

static PyObject *py_kinds(PyObject *self, PyObject *unused)
{
    return rows_tuple(sizeof kinds / sizeof kinds[0], kind_row);
}

/* ---- _C.variables() --------------------------------------------------------- */

static PyObject *variable_row(unsigned i)
{
    const struct fld_tool_variable *v = fld__variable_row(i);
    return Py_BuildValue("{s:s,s:s,s:s,s:s}", "name", v->name, "reader", v->reader, "use", v->use,
                         "compile", v->compile);
}

static PyObject *py_variables(PyObject *self, PyObject *unused)
{
    unsigned n = 0;
    while (fld__variable_row(n))
        n++;
    return rows_tuple(n, variable_row);
}

PyMethodDef fldpy_table_methods[] = {
    {"catalog", py_catalog, METH_NOARGS,
     "catalog()\n--\n\nThe catalog's rows: (op, family, doc) tuples in catalog order; the\n"
     "families are <fldispatch/catalog.def>'s (GATED, ELEMENTWISE, NORM, ...)."},
    {"devices", py_devices, METH_NOARGS,
     "devices()\n--\n\nThe library's device table: one dict per device (name, alias, type,\n"
     "mask, codes, torch, torch_build), in the order of the FLD_DEVICE_MASK_* bits."},
    {"kinds", py_kinds, METH_NOARGS,
     "kinds()\n--\n\nThe implementation kinds of <fldispatch/plugin.h>: one dict per kind\n"
     "(code, token, prefix, priority), in the order of their codes."},
    {"variables", py_variables, METH_NOARGS,
     "variables()\n--\n\nThe library's variable table: one dict per variable (name, reader, use,\n"
     "compile), the policy fields' aside (policy_fields())."},
    {NULL, NULL, 0, NULL},
};
