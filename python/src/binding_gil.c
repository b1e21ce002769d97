/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Python implementations' side of the GIL and of interrupts: the thread
 * state ops.c saved when it released the GIL, this thread's last exception
 * raised by an implementation and its pending interrupt, and the two
 * switches Python sets (_interrupts_end_process, _interpreter_exiting).
 * binding_impl.c runs the implementations; the binding's functions that
 * call ops raise what is kept here (fldpy_finish_call()).
 *
 * A BaseException that is not an Exception (KeyboardInterrupt, SystemExit,
 * GeneratorExit) is no failure of the implementation: it is kept as this
 * thread's pending interrupt and the implementation declines the call
 * (FLD_EUNSUPPORTED: no failure memory, no WARNING). While it is pending,
 * every Python implementation on this thread declines at once; the library
 * has no status that stops a chain, so a C kernel later in the chain may
 * still run, and its result is dropped: the binding's function that made
 * the call (fldpy_finish_call()) raises the interrupt instead of any
 * result or error.
 *
 * While `python -m fldispatch` runs the tool in this process
 * (_interrupts_end_process(True)) no Python caller is there to raise the
 * interrupt to: a KeyboardInterrupt ends the process by SIGINT, as Ctrl-C
 * ends the tool program, a SystemExit with its exit status, any other such
 * BaseException with status 1, each after a line on stderr naming the op and
 * the implementation. Declining there would let the tool go on and report
 * (or pin in a manifest) what the interrupt cut short.
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "ext.h"

/* The thread state ops.c saved when it released the GIL on this thread. */
static _Thread_local PyThreadState *tls_released;
static volatile int interpreter_exiting;
static volatile int interrupts_end_process;

PyThreadState *fldpy_release_gil(void)
{
    PyThreadState *s = PyEval_SaveThread();
    tls_released = s;
    return s;
}

void fldpy_restore_gil(PyThreadState *s)
{
    tls_released = NULL;
    PyEval_RestoreThread(s);
}

/* ---- the exception of the last failed implementation ---------------------- */

/* This thread's last exception raised by an implementation outside a frame. */
static _Thread_local PyObject *tls_impl_exception;
/* This thread's pending interrupt: a BaseException that is not an Exception,
 * raised by an implementation during the current call (see the top). */
static _Thread_local PyObject *tls_interrupt;

void fldpy_impl_exception_clear(void)
{
    Py_CLEAR(tls_interrupt);
    if (tls_impl_exception) {
        PyObject *e = tls_impl_exception;
        tls_impl_exception = NULL;
        Py_DECREF(e);
    }
}

void fldpy_chain_cause(PyObject *exc)
{
    if (!exc)
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value)
        PyException_SetCause(value, exc); /* steals exc */
    else
        Py_DECREF(exc);
    PyErr_Restore(type, value, tb);
}

void fldpy_interrupt_clear(void)
{
    Py_CLEAR(tls_interrupt);
}

int fldpy_finish_call(int status)
{
    if (tls_interrupt) {
        PyObject *exc = tls_interrupt;
        tls_interrupt = NULL;
        fldpy_impl_exception_clear();
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
        return -1;
    }
    if (status != FLD_OK) {
        fldpy_raise_impl_status(status);
        return -1;
    }
    return 0;
}

PyObject *fldpy_raise_impl_status(int status)
{
    fldpy_raise_status(status);
    PyObject *exc = tls_impl_exception;
    tls_impl_exception = NULL;
    fldpy_chain_cause(exc);
    return NULL;
}

/* Python's own flush of sys.stdout and sys.stderr, then C's. */
static void flush_all(void)
{
    static const char *const streams[] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        PyObject *stream = PySys_GetObject(streams[i]); /* borrowed */
        PyObject *r =
            stream && stream != Py_None ? PyObject_CallMethod(stream, "flush", NULL) : NULL;
        Py_XDECREF(r);
        PyErr_Clear();
    }
    fflush(NULL);
}

/* An interrupt while the tool runs in this process: ends the process (see the top). */
static void end_process(const char *op, const char *impl_id, PyObject *exc, const char *what)
{
    int status = 1;
    bool sigint = PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_KeyboardInterrupt);
    if (PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_SystemExit)) {
        PyObject *code = PyObject_GetAttrString(exc, "code");
        if (code == Py_None) {
            status = 0;
        } else if (code && PyLong_Check(code)) {
            long v = PyLong_AsLong(code);
            status = v == -1 && PyErr_Occurred() ? 1 : (int)(v & 0xff);
        }
        Py_XDECREF(code);
        PyErr_Clear();
    }
    flush_all();
    if (sigint)
        fprintf(stderr, "fldispatch: %s: Python implementation '%s' raised %s: interrupted\n", op,
                impl_id, what);
    else
        fprintf(stderr, "fldispatch: %s: Python implementation '%s' raised %s: exit status %d\n",
                op, impl_id, what, status);
    fflush(stderr);
    if (sigint) {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        status = 128 + SIGINT; /* only if the signal did not end the process */
    }
    _exit(status);
}

bool fldpy_interpreter_exiting(void)
{
    return interpreter_exiting;
}

PyThreadState *fldpy_released_gil(void)
{
    return tls_released;
}

bool fldpy_interrupt_pending(void)
{
    return tls_interrupt != NULL;
}

void fldpy_keep_interrupt(const char *op, const char *impl_id, PyObject *exc, const char *what)
{
    if (interrupts_end_process)
        end_process(op, impl_id, exc, what);
    Py_XDECREF(tls_interrupt);
    tls_interrupt = exc;
}

void fldpy_keep_impl_exception(PyObject *exc)
{
    Py_XDECREF(tls_impl_exception);
    tls_impl_exception = exc;
}

static PyObject *py_interrupts_end_process(PyObject *self, PyObject *on)
{
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    interrupts_end_process = v;
    Py_RETURN_NONE;
}

static PyObject *py_interpreter_exiting(PyObject *self, PyObject *unused)
{
    interpreter_exiting = 1;
    Py_RETURN_NONE;
}

PyMethodDef fldpy_gil_methods[] = {
    {"_interrupts_end_process", py_interrupts_end_process, METH_O,
     "_interrupts_end_process(on, /)\n--\n\nWhile on (python -m fldispatch running the tool in "
     "this process),\nan interrupt raised by a Python implementation ends the process."},
    {"_interpreter_exiting", py_interpreter_exiting, METH_NOARGS,
     "_interpreter_exiting()\n--\n\nFrom atexit: Python implementations decline from now on."},
    {NULL, NULL, 0, NULL},
};
