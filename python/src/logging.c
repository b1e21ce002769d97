/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's log lines into Python's logging.
 *
 * At import the module installs a log callback (fld_log_set_callback()):
 * from then on the library's lines (fallbacks, failures, rejections,
 * did-you-mean hints, ...) go, instead of to stderr, to
 * fldispatch._logbridge.emit(level, message), which logs them once on the
 * Python logger of the moment ("fldispatch", or upstream's name under the
 * vllm_fl alias). Levels are the same numbers as logging's.
 *
 * The callback never takes the GIL. The library logs from any thread: from
 * C threads, from inside calls that released the GIL and while holding its
 * own lock; taking the GIL there could wait forever on a Python thread that
 * waits for that lock or that thread, and a Python handler may release the
 * GIL (its I/O) and let such a thread in. So the callback copies the line
 * into a bounded queue under a mutex of its own and asks the interpreter to
 * run flush() (Py_AddPendingCall, which needs neither the GIL nor a thread
 * state); flush() runs on the main thread between bytecodes, outside any
 * library call, holding the GIL, and hands the queued lines to Python in
 * order. fldispatch._C.log_flush() does the same at once (tests, a program
 * that wants its lines now). A full queue drops lines and says how many in
 * the next one it delivers.
 *
 * At exit (atexit, before the interpreter finalises) the callback is
 * removed, so lines from then on (shutdown) go to stderr again, and what is
 * queued is delivered. In a forked child the queue's mutex is made anew.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"

#define QUEUE_MAX 1024

struct line {
    int level;
    char *text;
};

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct line queue[QUEUE_MAX];
static size_t queue_head, queue_n, queue_dropped;
static bool flush_scheduled;
static PyObject *emit_fn; /* fldispatch._logbridge.emit; set once, kept */

static int flush_pending(void *unused);

static void sink(int level, const char *message, void *user)
{
    (void)user;
    char *text = strdup(message);
    pthread_mutex_lock(&queue_lock);
    if (!text || queue_n == QUEUE_MAX) {
        queue_dropped++;
        free(text);
    } else {
        queue[(queue_head + queue_n) % QUEUE_MAX] = (struct line){level, text};
        queue_n++;
    }
    bool schedule = !flush_scheduled;
    flush_scheduled = true;
    pthread_mutex_unlock(&queue_lock);
    if (schedule && Py_AddPendingCall(flush_pending, NULL) != 0) {
        /* the interpreter's queue is full: the next line asks again */
        pthread_mutex_lock(&queue_lock);
        flush_scheduled = false;
        pthread_mutex_unlock(&queue_lock);
    }
}

static void emit(int level, const char *text)
{
    PyObject *r = PyObject_CallFunction(emit_fn, "is", level, text);
    if (r)
        Py_DECREF(r);
    else
        PyErr_WriteUnraisable(emit_fn); /* a handler's failure is not the caller's */
}

/* Hands every queued line to Python, in order. GIL held. */
static void flush(void)
{
    for (;;) {
        struct line batch[64];
        size_t n = 0, dropped;
        pthread_mutex_lock(&queue_lock);
        while (n < 64 && queue_n) {
            batch[n++] = queue[queue_head];
            queue_head = (queue_head + 1) % QUEUE_MAX;
            queue_n--;
        }
        dropped = queue_dropped;
        queue_dropped = 0;
        if (!queue_n)
            flush_scheduled = false;
        pthread_mutex_unlock(&queue_lock);
        if (dropped && emit_fn) {
            char note[128];
            snprintf(note, sizeof note,
                     "%zu log line(s) dropped: more than %d were waiting for the Python logger",
                     dropped, QUEUE_MAX);
            emit(FLD_LOG_WARNING, note);
        }
        for (size_t i = 0; i < n; i++) {
            if (emit_fn)
                emit(batch[i].level, batch[i].text);
            free(batch[i].text);
        }
        if (!n)
            return;
    }
}

static int flush_pending(void *unused)
{
    (void)unused;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* whatever the interrupted code was raising */
    flush();
    PyErr_Restore(type, value, tb);
    return 0;
}

static PyObject *py_log_flush(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    flush();
    Py_RETURN_NONE;
}

static PyObject *py_log_detach(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    fld_log_set_callback(NULL, NULL);
    flush();
    Py_RETURN_NONE;
}

static PyObject *py_log_attach(PyObject *self, PyObject *fn)
{
    (void)self;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "_log_attach(): emit must be callable");
    Py_INCREF(fn);
    PyObject *old = emit_fn;
    emit_fn = fn;
    Py_XDECREF(old);
    fld_log_set_callback(sink, NULL);
    Py_RETURN_NONE;
}

static void after_fork_child(void)
{
    pthread_mutex_init(&queue_lock, NULL);
    flush_scheduled = false;
}

static PyMethodDef methods[] = {
    {"log_flush", py_log_flush, METH_NOARGS,
     "log_flush()\n--\n\nHands the library's queued log lines to Python's logging now."},
    {"_log_attach", py_log_attach, METH_O,
     "_log_attach(emit, /)\n--\n\nThe library's log lines go to emit(level, message) from now on."},
    {"_log_detach", py_log_detach, METH_NOARGS,
     "_log_detach()\n--\n\nThe library's log lines go to stderr again (at exit)."},
    {NULL, NULL, 0, NULL},
};

int fldpy_logging_init(PyObject *module)
{
    static bool forked_handler;
    if (!forked_handler) {
        if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "fldispatch: pthread_atfork failed");
            return -1;
        }
        forked_handler = true;
    }
    if (PyModule_AddFunctions(module, methods) < 0)
        return -1;
    /* fldispatch._logbridge imports only the standard library: safe while
     * the package itself is still importing this module. */
    PyObject *bridge = PyImport_ImportModule("fldispatch._logbridge");
    PyObject *fn = bridge ? PyObject_GetAttrString(bridge, "emit") : NULL;
    Py_XDECREF(bridge);
    if (!fn)
        return -1;
    PyObject *r = py_log_attach(module, fn);
    Py_DECREF(fn);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}
