/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch binding implementations — the manual of language bindings.
 *
 * A plugin (plugin.h) is a shared object whose kernels are plain C
 * functions. A language runtime that lives in the host process (Python
 * through fldispatch._C, or any other binding) registers implementations it
 * runs itself: each carries a context pointer (the Python callable, ...)
 * that the binding's kernel function receives with the call's arguments.
 *
 * They join the registry the plugins fill, under a plugin record of their
 * own ("python:mypkg.ops" in `fldispatch list`), and are selected, ordered,
 * filtered, listed and explained exactly as plugin implementations are
 * (same policy, same manifest, same failure memory). They count as
 * out-of-tree (VLLM_FL_EXTERNAL_* apply). Registration is all-or-nothing per
 * call, like a plugin's register_builtins.
 *
 *     static int run_py(void *ctx, const void *args) { ... return FLD_OK; }
 *
 *     const fld_binding_impl impl = {
 *         .op = "my_op", .impl_id = "vendor.acme_py", .kind = FLD_KIND_VENDOR,
 *         .vendor = "acme", .priority = FLD_PRIORITY_VENDOR,
 *         .devices = FLD_DEVICE_MASK_ALL, .dtypes = FLD_DTYPE_MASK_ALL,
 *         .fn = run_py, .ctx = callable,
 *     };
 *     fld_binding_register("acme_ops", "1.0", "python:acme_ops", &impl, 1);
 *
 * Two kinds of arguments reach a binding implementation:
 *   - an op's argument struct (fld_rms_norm_args, ...), when the op is
 *     called through fld_call(), fld_call_on() or a typed entry point;
 *   - the binding's own argument record, when it calls the op with
 *     fld_binding_call(): plugin implementations cannot read that record and
 *     decline such a call (it passes to the next candidate), so an op whose
 *     arguments only the binding knows is served only by binding
 *     implementations.
 * The binding tells the two apart itself (e.g. by comparing args with the
 * record it passed).
 *
 * Threads: fn runs on the caller's thread without the host lock, as any
 * kernel. A binding whose runtime needs a lock of its own (the Python GIL)
 * must not wait for it forever: decline (FLD_EUNSUPPORTED with
 * fld_set_error() saying why) when the thread cannot take it. Nothing a binding
 * implementation provides runs under the host lock: availability is decided
 * by the binding before it registers (unavailable_reason).
 *
 * Lifetime: the library keeps ctx (never dereferences it) until
 * fld_shutdown(); the binding owns what it points to and must keep it alive
 * that long. The records survive fork(): the child's registry is the
 * parent's.
 */
#ifndef FLDISPATCH_BINDING_H
#define FLDISPATCH_BINDING_H

#include <fldispatch/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Runs the op for a binding implementation: ctx is fld_binding_impl.ctx, args the
 * call's arguments (see above). Returns as a plugin kernel does (plugin.h
 * fld_kernel_fn): FLD_OK; FLD_EUNSUPPORTED to decline; another error, with
 * fld_set_error() naming the cause, for a failure (fallback and failure
 * memory as for a C kernel). Must be MT safe.
 */
typedef int (*fld_binding_kernel_fn)(void *ctx, const void *args);

/* One implementation a binding registers. Fields as fld_impl's (plugin.h). */
typedef struct fld_binding_impl {
    const char *op;      /* [A-Za-z0-9_.] */
    const char *impl_id; /* "<kind>.<name>": "default.x", "vendor.x", "reference.x" */
    fld_kind kind;
    const char *vendor; /* required for FLD_KIND_VENDOR */
    int priority;
    uint32_t devices;         /* FLD_DEVICE_MASK_*; not 0 */
    uint32_t dtypes;          /* FLD_DTYPE_MASK_*; not 0 */
    fld_binding_kernel_fn fn; /* required */
    void *ctx;                /* passed to fn; may be NULL */
    /* NULL when it can run in this process; else why not (the binding asked
     * its own availability predicate before registering). Shown by
     * `fldispatch list` and fld_explain() as for an unavailable plugin impl. */
    const char *unavailable_reason;
} fld_binding_impl;

/*
 * Registers n implementations under the plugin record `plugin` (created on
 * first use with version and origin, e.g. "python:mypkg.ops", which
 * `fldispatch list` shows as its path; the same name from the same origin
 * adds to it). All-or-nothing: on error nothing of this call stays, and a
 * record this call created is kept REJECTED with the reason. The records are
 * copied; cached choices are invalidated.
 *   FLD_EINVAL   an invalid record (the message names op and impl_id: empty
 *                or malformed impl_id, duplicate impl_id for the op, VENDOR
 *                without vendor, NULL fn, empty masks), a NULL argument, an
 *                invalid plugin name ([A-Za-z0-9_.-]);
 *   FLD_ESTATE   a manifest freezes dispatch (VLLM_FL_MANIFEST): the
 *                registry takes no new implementation; or plugin names a
 *                plugin that is not a binding plugin of that origin;
 *   FLD_ENOMEM.
 * MT safe; not from plugin code the library runs while loading (FLD_ESTATE).
 */
FLD_API int fld_binding_register(const char *plugin, const char *version, const char *origin,
                                 const fld_binding_impl *impls, size_t n);

/*
 * Declares the signature of op (fldispatch.h "Op signatures") under the
 * binding plugin record `plugin` of origin, as a plugin's
 * fld_registry_declare_op() does: the same signature again is fine, a
 * different one (from a plugin or another binding) or a malformed string
 * is FLD_EINVAL naming both declarations (a record this call created is
 * kept REJECTED with the reason). Binding implementations of a declared op
 * receive a const fld_args * when the op is called through fld_call() and
 * its kin, and the binding's own record through fld_binding_call(). MT safe.
 */
FLD_API int fld_binding_declare(const char *plugin, const char *version, const char *origin,
                                const char *op, const char *schema);

/*
 * Records a binding plugin that could not register (its module raised, an
 * import failed): listed REJECTED with reason, as a plugin file that failed
 * to load. Does nothing to a plugin of that name that registered already
 * (FLD_ESTATE). FLD_OK once recorded.
 */
FLD_API int fld_binding_reject(const char *plugin, const char *version, const char *origin,
                               const char *reason);

/*
 * What the binding may call itself, without the library, for the calls of
 * an op on one (device_type, dtype) that follow, while nothing changes: its
 * own direct path, as the library's for plugin kernels.
 *
 * fn and ctx are the binding implementation that a binding call of the op
 * on that key runs first, and stamp the generation they hold for; fn and
 * ctx NULL (and stamp 0) when there is none to call directly (the first
 * candidate is a plugin kernel, has failed, or has not served a call yet;
 * the calling process has scoped overrides). The binding may call fn(ctx,
 * args) itself, with the GIL or lock its runtime needs, as long as
 * fld_binding_stamp() returns stamp (it changes on any registry or policy
 * change, and is 0 while any thread has a scoped override). When that call
 * fails (status, fld_set_error() said why), the binding hands the call to
 * fld_binding_first_failed(), which records the failure as the chain's
 * (failure memory, WARNING, strict mode) and runs the next candidates, as
 * fld_binding_call() would have; then it forgets the stamp.
 */
typedef struct fld_binding_direct {
    fld_binding_kernel_fn fn;
    void *ctx;
    uint64_t stamp;
} fld_binding_direct;

/*
 * Calls op with the binding's own argument record: selection by
 * (device_type, dtype) as fld_call_on(), and only binding implementations
 * serve it (plugin implementations decline). FLD_EINVAL for a catalog op
 * (call its typed entry point or fld_call() with its struct). Returns as
 * fld_call(). Never takes the cached direct path of fld_call(): one
 * reader section per call. When direct is not NULL and the call returns
 * FLD_OK, *direct says what the binding may call itself from then on
 * (above); otherwise it is all NULL and 0.
 */
FLD_API int fld_binding_call(fld_op op, int device_type, DLDataType dtype, const void *binding_args,
                             fld_binding_direct *direct);

/* The stamp of the library's choices (fld_binding_direct); no lock. */
FLD_API uint64_t fld_binding_stamp(void);
/*
 * Whether a call of op selects by its device and dtype now: 1 when an
 * implementation of op declares less than every device or dtype, or a
 * manifest is in force (or op is a catalog op), 0 when every (device, dtype)
 * gets the same choice, so that a binding need not work out a call's key;
 * *stamp as fld_binding_stamp()'s. Takes the host lock. FLD_EINVAL, FLD_ESTATE.
 */
FLD_API int fld_binding_op_keyed(fld_op op, uint64_t *stamp);
FLD_API int fld_binding_first_failed(fld_op op, int device_type, DLDataType dtype,
                                     const void *binding_args, void *ctx, int status);

/*
 * Says that this process's binding imports the module names of
 * VLLM_FL_PLUGIN_MODULES (the Python package does: vllm-plugin-FL's meaning
 * of the variable). An entry that is no plugin file and reads as a module
 * name ("pkg", "pkg.ops") is then left to the binding, silently; without
 * the claim, dotted names are skipped with one WARNING line and a bare name
 * that is no plugin file is rejected as before. Call it before the library
 * initialises (later, it applies from the next fld_reload()). No init; MT
 * safe.
 */
FLD_API void fld_binding_claim_module_names(void);

/*
 * Names in the configuration (per-op orders, vendor lists, impl:ID tokens,
 * VLLM_FL_<PLUGIN>_* variables) are checked against what is registered:
 * a WARNING for one that matches nothing, FLD_ECONFIG under strict mode.
 * A binding that registers implementations of its own (Python entry points,
 * VLLM_FL_PLUGIN_MODULES, register_impl() in a script) calls
 * fld_binding_defer_name_check() before the library initialises: fld_init()
 * and fld_reload() then skip that check, and the binding runs it with
 * fld_binding_check_names() once its sources have registered (the Python
 * package: at its first op call or resolve). fld_binding_check_names() checks
 * the global policy's names and the environment once: FLD_OK (WARNINGs
 * logged) and no later call checks again (fld_reload() checks as usual
 * from then on); FLD_ECONFIG under strict mode, and the next call checks
 * again; FLD_OK at once when nothing is deferred. Both MT safe;
 * fld_binding_check_names() initialises.
 */
FLD_API void fld_binding_defer_name_check(void);
FLD_API int fld_binding_check_names(void);

#ifdef __cplusplus
}
#endif

#endif /* FLDISPATCH_BINDING_H */
