/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's tables as the Python package reads them, so that it keeps
 * no copy of its own: the device table (_C.devices(), core/devices.h).
 * None needs fld_init(). The dtype and policy-field tables are
 * introspect.c's (_C.dtypes(), _C.policy_fields()).
 */
#include <fldispatch/internal/tool_api.h>

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

PyMethodDef fldpy_table_methods[] = {
    {"devices", py_devices, METH_NOARGS,
     "devices()\n--\n\nThe library's device table: one dict per device (name, alias, type,\n"
     "mask, codes, torch, torch_build), in the order of the FLD_DEVICE_MASK_* bits."},
    {NULL, NULL, 0, NULL},
};
