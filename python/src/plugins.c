/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Python plugins (fldispatch.registry's discovery: entry points,
 * VLLM_FL_PLUGIN_MODULES), loaded the first time anything needs the ops
 * they register, then the configuration's names checked once
 * (fld_binding_check_names()).
 */
#include <fldispatch/binding.h>

#include "ext.h"

/* Set once discovery is complete: until then every call asks registry.py,
 * which makes other threads wait for a discovery in progress and lets the
 * discovering thread (a plugin calling an op) through. */
int fldpy_plugins_loaded;

int fldpy_load_plugins(void)
{
    PyObject *m = PyImport_ImportModule("fldispatch.registry");
    PyObject *r = m ? PyObject_CallMethod(m, "_ensure_plugins", NULL) : NULL;
    Py_XDECREF(m);
    if (!r)
        return -1;
    bool complete = r == Py_True;
    Py_DECREF(r);
    if (!complete)
        return 0; /* a plugin calling an op during discovery */
    /* Every source has registered (the plugins; a script registers before
     * its first call): the configuration's names are checked now, once.
     * Under strict mode an unknown name fails every call until it exists. */
    int rc = fld_binding_check_names();
    if (rc != FLD_OK) {
        fldpy_raise_status(rc);
        return -1;
    }
    fldpy_plugins_loaded = 1;
    return 0;
}
