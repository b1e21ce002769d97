/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The module fldispatch._C: its functions come from the method tables of
 * ops.c, introspect.c, tables.c, policy.c and hooks.c; its exception classes from
 * errors.c. See ext.h for how a call flows through these files.
 */
#include <fldispatch/binding.h>

#include "ext.h"

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fldispatch._C",
    .m_doc = "The C core of fldispatch: libfldispatch's operators, introspection and policy.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__C(void);
PyMODINIT_FUNC PyInit__C(void)
{
    fld_binding_claim_module_names(); /* fldispatch.registry imports them */
    fld_binding_defer_name_check();   /* checked once Python has registered: registry.c */
    PyObject *module = PyModule_Create(&module_def);
    if (!module)
        return NULL;
    if (fldpy_tensors_init() < 0 || fldpy_errors_init(module) < 0 ||
        PyModule_AddFunctions(module, fldpy_op_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_introspect_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_table_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_policy_methods) < 0 || fldpy_policy_init(module) < 0 ||
        PyModule_AddFunctions(module, fldpy_hook_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_binding_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_gil_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_call_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_signature_methods) < 0 ||
        fldpy_binding_init(module) < 0 || PyModule_AddFunctions(module, fldpy_stats_methods) < 0 ||
        PyModule_AddFunctions(module, fldpy_prepared_methods) < 0 ||
        fldpy_prepared_init(module) < 0 || fldpy_logging_init(module) < 0 ||
        PyModule_AddIntConstant(module, "DLPACK_MAJOR", FLDPY_DLPACK_MAJOR) < 0 ||
        PyModule_AddIntConstant(module, "DLPACK_MINOR", FLDPY_DLPACK_MINOR) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
