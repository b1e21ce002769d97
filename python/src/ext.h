/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch._C: the CPython extension behind `import fldispatch`.
 *
 * Data flow of one op call, e.g. fldispatch.silu_and_mul(out, x):
 *   ops.c      parses the arguments (vectorcall, no tuple or dict built),
 *   tensors.c  turns each argument into a DLTensor without copying: the
 *              DLPack C exchange API of the tensor's type when it has one
 *              (PyTorch), else __dlpack__() (a versioned 1.x capsule when the
 *              producer offers it, a legacy one otherwise), or a capsule
 *              passed in directly; on CUDA/ROCm it also finds the stream the
 *              producer works on,
 *   ops.c      sets that stream with fld_set_stream(), calls the typed entry
 *              point (fld_silu_and_mul), puts the thread's stream back and
 *              releases what it imported (capsule deleters),
 *   errors.c   turns a failed status into fldispatch.<Status>Error with the
 *              library's fld_last_error() as the message.
 * introspect.c (resolve, explain, plugins, config, reload) and policy.c
 * (scoped overrides, streams) wrap the rest of the C API. The binding_*.c
 * files are the Python side of <fldispatch/binding.h>: Python
 * implementations registered (binding_registration.c) and run
 * (binding_impl.c, with the GIL and interrupts of binding_gil.c), and any
 * op called by name (binding_call.c: call_op, resolve_op).
 *
 * The module keeps its state in static variables (single-phase
 * initialisation): one interpreter per process, as PyTorch itself.
 */
#ifndef FLDPY_EXT_H
#define FLDPY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>

#include <fldispatch/fldispatch.h>

#include "dlpack1.h"

/* ---- errors.c ---------------------------------------------------------- */

/* Creates fldispatch.Error and its subclasses and adds them to the module. */
int fldpy_errors_init(PyObject *module);
/* The exception class for a status (Error for an unknown one). Borrowed. */
PyObject *fldpy_error_type(int status);
/* Raises the exception of a failed library call: message fld_last_error(). */
PyObject *fldpy_raise_status(int status);
/* Raises the exception of status with our own message; returns NULL. */
PyObject *fldpy_raise(int status, const char *format, ...);

/* ---- args.c ------------------------------------------------------------ */

/*
 * Matches positional and keyword arguments of a METH_FASTCALL|METH_KEYWORDS
 * function against names[0..n_names). out[i] receives a borrowed reference or
 * stays NULL when the argument was not given; the first n_required must be
 * given. TypeError (naming fn and the argument) on a missing, unknown or
 * repeated argument.
 */
int fldpy_parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int n_names, int n_required, PyObject **out);
/* "cpu", "cuda", "rocm", "ascend" (a torch.device or "cuda:0" also do). */
int fldpy_parse_device(const char *fn, PyObject *obj, int *device_type);
/* "float32"/"f32", "float16"/"f16", "bfloat16"/"bf16", "any"; torch dtypes. */
int fldpy_parse_dtype(const char *fn, PyObject *obj, DLDataType *dtype);
/* A Python truth value; -1 with an exception set on failure. */
int fldpy_parse_bool(PyObject *obj);
/* A float (anything with __float__ but a str) or an int64 (anything with
 * __index__) argument; -1 with a TypeError or OverflowError naming fn, the
 * argument and the value. */
int fldpy_parse_float(const char *fn, const char *arg, PyObject *obj, double *out);
int fldpy_parse_int(const char *fn, const char *arg, PyObject *obj, int64_t *out);
/* A UTF-8 view of a str argument, valid while obj lives; NULL + TypeError (not a
 * str) or InvalidArgumentError (an embedded NUL, no UTF-8 form): see args.c. */
const char *fldpy_str(const char *fn, const char *arg, PyObject *obj);

/* ---- tensors.c --------------------------------------------------------- */

/* One imported tensor argument. */
typedef struct fldpy_tensor {
    DLTensor dl;                      /* the view the library gets */
    PyObject *capsule;                /* a consumed capsule we hold, or NULL */
    void *managed;                    /* the managed tensor whose deleter we owe, or NULL */
    bool versioned;                   /* managed is a fldpy_dl_managed_versioned */
    const fldpy_dl_exchange_api *api; /* the exchange API it came through */
} fldpy_tensor;

#define FLDPY_TENSOR_INIT                                                                          \
    {                                                                                              \
        .capsule = NULL                                                                            \
    }

/*
 * Imports obj (a DLPack producer or a DLPack capsule) as argument `arg` of
 * op. writable: the op writes the tensor, so a read-only (DLPack 1.x flag)
 * or copied (IS_COPIED) export is refused. A tensor with a negative rank,
 * or a rank without a shape array, is refused before anything reads its
 * shape. A CUDA/ROCm producer without the
 * exchange API is passed this thread's stream (fld_get_stream()) as
 * __dlpack__(stream=...). On failure raises fldispatch.InvalidArgumentError
 * (or the producer's exception) and leaves *t empty.
 */
int fldpy_tensor_import(PyObject *obj, const char *op, const char *arg, bool writable,
                        fldpy_tensor *t);
/* Gives back what fldpy_tensor_import() took (calls the capsule deleter). */
void fldpy_tensor_release(fldpy_tensor *t);
/* Number of elements of t: 0 for a zero-sized tensor or a negative
 * dimension, INT64_MAX when the product overflows. t->shape must be there
 * (fldpy_tensor_import() refuses a tensor whose shape is NULL). */
int64_t fldpy_tensor_numel(const DLTensor *t);

/*
 * The stream the producer of t works on for t's device, when t came through
 * the exchange API (PyTorch's current stream); *found false otherwise.
 */
int fldpy_tensor_stream(const fldpy_tensor *t, void **stream, bool *found);

/* Interned strings and constant tuples; 0 or -1 with an exception. */
int fldpy_tensors_init(void);

/* ---- plugins.c --------------------------------------------------------- */

/* Loads the Python plugins (fldispatch.registry) the first time an op is
 * called or the registry read from Python; 0, or -1 with an exception. */
extern int fldpy_plugins_loaded;
int fldpy_load_plugins(void);
static inline int fldpy_ensure_plugins(void)
{
    return fldpy_plugins_loaded ? 0 : fldpy_load_plugins();
}

/* ---- signatures.c -------------------------------------------------------- */

#define FLDPY_SIG_MAX_ARGS 64

/* The signature of an op outside the catalog, as call_op() uses it. */
typedef struct fldpy_sig {
    bool
        declared; /* false: the op has none (its arguments go to Python implementations as given) */
    fld_signature_info info;
    const char *names[FLDPY_SIG_MAX_ARGS];
    int n_required; /* the leading arguments without a default */
} fldpy_sig;

/* One call's marshalled arguments. */
typedef struct fldpy_sig_call {
    fld_args args;
    fld_arg arg[FLDPY_SIG_MAX_ARGS];
    fldpy_tensor t[FLDPY_SIG_MAX_ARGS];
    int n_tensors;
    size_t bytes; /* of the CPU tensors */
    bool stream_set;
    int stream_device;
    void *previous_stream;
} fldpy_sig_call;

/* Fills *s when op has a declared signature (s->declared); 0, or -1 with an exception. */
int fldpy_sig_prepare(const char *op, fldpy_sig *s);
/*
 * The call's arguments (vector form) as a checked fld_args per the
 * signature: count and names (TypeError naming op and argument), scalar
 * types (TypeError), tensors imported (InvalidArgumentError naming op and
 * argument), PyTorch's autograd rules, the GPU producer's stream set.
 * 0, or -1 with an exception and nothing held.
 */
int fldpy_sig_marshal(const fldpy_sig *s, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, fldpy_sig_call *c);
void fldpy_sig_release(fldpy_sig_call *c);
/* An fld_args as a tuple of Python values; tensors through tensor(). */
PyObject *fldpy_sig_args_tuple(const fld_args *a, PyObject *(*tensor)(const DLTensor *));
extern PyMethodDef fldpy_signature_methods[];

/* ---- binding_gil.c ------------------------------------------------------- */

/*
 * Releases the GIL around a library call that may run a Python
 * implementation: the implementation takes it back on this thread (any
 * other thread without the GIL is refused). Use instead of
 * Py_BEGIN/END_ALLOW_THREADS around op calls.
 */
PyThreadState *fldpy_release_gil(void);
void fldpy_restore_gil(PyThreadState *s);
/* Forgets this thread's last implementation exception and pending interrupt
 * (before an op call). */
void fldpy_impl_exception_clear(void);
void fldpy_interrupt_clear(void);
/* After an op call that returned status: 0 when it succeeded; else -1 with
 * the exception raised: this thread's pending interrupt (a KeyboardInterrupt
 * or SystemExit an implementation raised during the call, whatever the
 * status), or the status's error as fldpy_raise_impl_status(). */
int fldpy_finish_call(int status);
/* fldpy_raise_status(), with the last implementation exception of this
 * thread, if any, as the error's __cause__. Returns NULL. */
PyObject *fldpy_raise_impl_status(int status);
/* Sets the pending exception's __cause__ to exc (a new reference, stolen). */
void fldpy_chain_cause(PyObject *exc);
/* Whether Python is exiting (atexit): Python implementations decline. */
bool fldpy_interpreter_exiting(void);
/* The thread state fldpy_release_gil() saved on this thread, or NULL. */
PyThreadState *fldpy_released_gil(void);
/* Whether this thread has an interrupt pending (see binding_gil.c). */
bool fldpy_interrupt_pending(void);
/* An interrupt (exc, a BaseException that is not an Exception, stolen;
 * what: its description) raised by impl_id of op: kept as this thread's
 * pending interrupt, or the end of the process while the tool runs in it. */
void fldpy_keep_interrupt(const char *op, const char *impl_id, PyObject *exc, const char *what);
/* exc (stolen) as this thread's last implementation exception. */
void fldpy_keep_impl_exception(PyObject *exc);
extern PyMethodDef fldpy_gil_methods[];

/* ---- binding_impl.c ------------------------------------------------------ */

/* The context of one Python implementation; lives until the process ends. */
struct pyimpl {
    PyObject *fn;
    char *op;
    char *impl_id;
    int args_kind; /* fld_args_kind of a catalog op, 0 otherwise */
    struct pyimpl *next;
};

/* The Python-side arguments of one call_op() call. */
struct pyframe {
    /* the arguments: a tuple and a dict (OpCaller), or a vector (call_op) */
    PyObject *args;   /* tuple, or NULL for the vector form */
    PyObject *kwargs; /* dict or NULL */
    PyObject *const *vargs;
    Py_ssize_t nargs;
    PyObject *kwnames;
    const void *native; /* the fld_args of a declared op's call, or NULL */
    PyObject *result;   /* the winner's return value (new reference) */
    PyObject *exc;      /* the last exception an implementation raised */
};

/* The fld_args_kind of a catalog op's argument struct; 0 for an op outside
 * the catalog. */
int fldpy_catalog_args_kind(const char *op);
/* The library's kernel for every Python implementation (binding.h). */
int fldpy_run_impl(void *ctx, const void *args);
/* Calls impl with the GIL held; FLD_* status. */
int fldpy_call_python(struct pyimpl *impl, const void *args);
/* frame as this thread's call_op() frame; returns the one it replaces, for
 * fldpy_frame_leave() after the call. */
struct pyframe *fldpy_frame_enter(struct pyframe *frame);
void fldpy_frame_leave(struct pyframe *outer);
/* fn(*args[0..nargs), **kwnames' values) by PyObject_Vectorcall where the
 * running CPython has it (fldpy_call_vector_init() looks it up), else with a
 * tuple and a dict. */
PyObject *fldpy_call_vector(PyObject *fn, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
void fldpy_call_vector_init(void);

/* ---- binding_registration.c ---------------------------------------------- */

extern PyMethodDef fldpy_binding_methods[];

/* ---- binding_call.c ------------------------------------------------------ */

/* After a declaration of op (NULL: of any op, after a plugin load): its
 * call_op() entry, if any, takes the signature. */
void fldpy_binding_declared(PyObject *name);
/* OpCaller type and module state; 0 or -1 with an exception. */
int fldpy_binding_init(PyObject *module);
extern PyMethodDef fldpy_call_methods[];

/* ---- autograd.c ---------------------------------------------------------- */

/* One tensor argument of an op call, as autograd.c looks at it. */
typedef struct fldpy_arg {
    PyObject *obj;    /* the argument as given; NULL or None when absent */
    const char *name; /* "out", "x", ... */
    bool writes;      /* the op writes it */
} fldpy_arg;

#define MAX_GUARDED_ARGS 8

/*
 * PyTorch's rules for the torch tensors among args[0..n) (others are not
 * looked at): with grad mode on, one that requires grad is refused
 * (InvalidArgumentError naming it); the version counters of those the call
 * writes are bumped, so that autograd sees the in-place write. Call before
 * importing the tensors. 0, or -1 with an exception.
 */
int fldpy_autograd_guard(const char *op, const fldpy_arg *args, int n);

/* ---- policy.c ------------------------------------------------------------ */

/* Adds the PolicyScope type (the C half of fldispatch.policy). */
int fldpy_policy_init(PyObject *module);

/* ---- prepared.c ------------------------------------------------------------ */

/* Adds the Prepared type (fldispatch.prepare()'s callables). */
int fldpy_prepared_init(PyObject *module);

/* ---- logging.c ----------------------------------------------------------- */

/* The library's log lines go to Python's logging (fldispatch._logbridge). */
int fldpy_logging_init(PyObject *module);
extern PyMethodDef fldpy_prepared_methods[];

/* ---- ops.c, introspect.c, policy.c, hooks.c: method tables ------------- */

extern PyMethodDef fldpy_op_methods[];
extern PyMethodDef fldpy_introspect_methods[];
extern PyMethodDef fldpy_table_methods[];
extern PyMethodDef fldpy_policy_methods[];
extern PyMethodDef fldpy_hook_methods[];
extern PyMethodDef fldpy_stats_methods[];

#endif /* FLDPY_EXT_H */
