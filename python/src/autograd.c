/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PyTorch's autograd rules for the tensors an op call reads and writes.
 *
 * The ops write their outputs in place behind autograd's back (through
 * DLPack). PyTorch itself, for its out= functions and in-place ops, refuses
 * arguments that require grad while grad mode is on, and bumps the version
 * counter of every tensor it writes, so that a tensor saved for backward
 * and modified afterwards is caught when backward runs. The ops follow the
 * same rules:
 *   - with grad mode on, a torch tensor argument (read or written) that
 *     requires grad is refused, naming it: the ops have no derivative, and
 *     an output computed from it would silently carry no gradient;
 *   - every torch tensor the call writes gets its version bumped, before
 *     the call (one torch._C._increment_version() call for all of them;
 *     inference tensors have no counter and are left alone by it).
 * Objects that are not torch tensors (NumPy, other producers) are not
 * looked at. torch is never imported from here: when it is not imported
 * yet, no argument can be one of its tensors.
 */
#include <string.h>

#include "ext.h"

static PyObject *tensor_type;       /* torch.Tensor, once seen */
static PyObject *is_grad_enabled;   /* torch._C.is_grad_enabled */
static PyObject *increment_version; /* torch._C._increment_version */
static PyObject *str_requires_grad;
static PyObject *str_torch;

/* Finds torch's pieces when torch has been imported; 0 and nothing found
 * otherwise. */
static int find_torch(void)
{
    if (tensor_type)
        return 0;
    if (!str_torch && !(str_torch = PyUnicode_InternFromString("torch")))
        return -1;
    PyObject *torch = PyImport_GetModule(str_torch);
    if (!torch)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    PyObject *type = PyObject_GetAttrString(torch, "Tensor");
    Py_DECREF(torch);
    PyObject *grad = c ? PyObject_GetAttrString(c, "is_grad_enabled") : NULL;
    PyObject *bump = c ? PyObject_GetAttrString(c, "_increment_version") : NULL;
    Py_XDECREF(c);
    str_requires_grad = str_requires_grad ? str_requires_grad
                                          : PyUnicode_InternFromString("requires_grad");
    if (!type || !grad || !bump || !str_requires_grad || !PyType_Check(type)) {
        /* A torch too old or too new for this: its tensors get no checks. */
        Py_XDECREF(type);
        Py_XDECREF(grad);
        Py_XDECREF(bump);
        PyErr_Clear();
        return 0;
    }
    tensor_type = type;
    is_grad_enabled = grad;
    increment_version = bump;
    return 0;
}

static bool is_torch_tensor(PyObject *obj)
{
    return obj && obj != Py_None && tensor_type &&
           PyType_IsSubtype(Py_TYPE(obj), (PyTypeObject *)tensor_type);
}

/* 1 when obj requires grad, 0 when not, -1 with an exception. */
static int requires_grad(PyObject *obj)
{
    PyObject *flag = PyObject_GetAttr(obj, str_requires_grad);
    if (!flag)
        return -1;
    int rc = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return rc;
}

int fldpy_autograd_guard(const char *op, const fldpy_arg *args, int n)
{
    if (find_torch() < 0)
        return -1;
    if (!tensor_type)
        return 0;
    PyObject *written[MAX_GUARDED_ARGS];
    int n_torch = 0, n_written = 0;
    const char *needs_grad = NULL;
    for (int i = 0; i < n && i < MAX_GUARDED_ARGS; i++) {
        if (!is_torch_tensor(args[i].obj))
            continue;
        n_torch++;
        int rg = requires_grad(args[i].obj);
        if (rg < 0)
            return -1;
        if (rg && !needs_grad)
            needs_grad = args[i].name;
        if (args[i].writes)
            written[n_written++] = args[i].obj;
    }
    if (!n_torch)
        return 0;
    if (needs_grad) {
        PyObject *enabled = PyObject_CallNoArgs(is_grad_enabled);
        int on = enabled ? PyObject_IsTrue(enabled) : -1;
        Py_XDECREF(enabled);
        if (on < 0)
            return -1;
        if (on) {
            fldpy_raise(FLD_EINVAL,
                        "%s: argument '%s' requires grad, but fldispatch ops have no derivative "
                        "(they write their outputs in place, as PyTorch's out= functions, which "
                        "refuse it too): call under torch.no_grad() or pass %s.detach()",
                        op, needs_grad, needs_grad);
            return -1;
        }
    }
    if (!n_written)
        return 0;
    PyObject *tuple = PyTuple_New(n_written);
    if (!tuple)
        return -1;
    for (int i = 0; i < n_written; i++)
        PyTuple_SetItem(tuple, i, Py_NewRef(written[i]));
    PyObject *r = PyObject_CallFunctionObjArgs(increment_version, tuple, NULL);
    Py_DECREF(tuple);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}
