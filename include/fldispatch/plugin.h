/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch plugin interface — the plugin author's manual.
 *
 * A plugin is a shared object named fld-<name>.so that defines itself with
 * FLD_PLUGIN_DEFINE() and registers implementations of operators from its
 * register_builtins callback:
 *
 *     #include <fldispatch/plugin.h>
 *
 *     static int my_silu(const void *args) { ... return FLD_OK; }
 *
 *     static int register_builtins(fld_registry *reg)
 *     {
 *         const fld_impl impl = {
 *             .op = FLD_OP_SILU_AND_MUL, .impl_id = "vendor.acme",
 *             .kind = FLD_KIND_VENDOR, .vendor = "acme",
 *             .priority = FLD_PRIORITY_VENDOR,
 *             .devices = FLD_DEVICE_MASK_CPU, .dtypes = FLD_DTYPE_MASK_ALL,
 *             .fn = my_silu,
 *         };
 *         return fld_registry_register(reg, &impl);
 *     }
 *
 *     FLD_PLUGIN_DEFINE("acme", "1.0.0", register_builtins)
 *
 * Build it with `cc -shared -fPIC $(pkg-config --cflags --libs fldispatch)`
 * and drop it into the plugin directory. See plugins/template/ and
 * docs/plugin-authors.md for the whole story.
 *
 * The host reads the descriptor before it calls anything in the plugin and
 * rejects it when the ABI major differs or the minor is newer than its own.
 * register_builtins runs once per process, with the host's lock held.
 * Registration is all-or-nothing: if it returns an error, or any
 * fld_registry_register() call failed, nothing the plugin registered is kept
 * and the plugin is recorded as rejected with the first error.
 *
 * While the host loads a plugin, its code runs in the middle of the host's
 * own initialisation, reload or load: its static constructors (at dlopen),
 * register_builtins and the is_available() checks. From there a plugin may
 * call the fld_registry_* functions, fld_set_error(), fld_log() and the
 * functions without library state (fld_strerror, fld_last_error,
 * fld_device_name, fld_dtype_index, ...), nothing else: any other call
 * (fld_init, fld_reload, fld_resolve, fld_call, fld_load_plugin,
 * fld_shutdown, a policy function, the process-wide settings:
 * fld_log_set_level, fld_log_set_callback, fld_stats_enable,
 * fld_stats_write, fld_stats_record, fld_set_stream, ...) returns
 * FLD_ESTATE, changes nothing, names the function, the plugin and the
 * stage, and the plugin is rejected
 * ("register_builtins called fld_init(), which plugins must not call while
 * the host loads them"); an is_available() that called in counts as
 * unavailable. fldispatch doctor judges the plugin the same way.
 *
 * The words the host uses:
 *   mask         fld_impl.devices and .dtypes are bit masks, FLD_DEVICE_MASK_*
 *                (CPU, CUDA, ROCM, ASCEND; both Ascend codes are ASCEND) and
 *                FLD_DTYPE_MASK_* (F32, F16, BF16: bit fld_dtype_index()). An
 *                implementation is a candidate for a catalog call when both
 *                masks hold the call's bit. Ops outside the catalog are
 *                chosen by op alone, unless the application calls
 *                fld_call_on().
 *   decline      the implementation will not serve this call, and nothing is
 *                wrong: supports() returned false (asked before the call), or
 *                fn returned FLD_EUNSUPPORTED with the outputs untouched. The
 *                next candidate serves the call; nothing is remembered.
 *   failure      fn returned another error, outputs untouched. Not strict
 *                (the default): logged, the next candidate runs, and the
 *                implementation is skipped for that (op, device, dtype) until
 *                the policy or the registry changes. Strict: the error is the
 *                call's.
 *   unavailable  is_available() said false: the implementation takes no part
 *                in any choice in this process; `fldispatch list` shows the
 *                reason, and a plugin whose implementations are all
 *                unavailable is listed UNAVAILABLE (still loaded).
 *   rejected     the plugin is not loaded (file, descriptor, ABI, an invalid
 *                record, register_builtins failed); nothing it registered
 *                stays.
 *   skipped      not loaded on purpose (a second plugin of the same name, a
 *                privileged process).
 * FLD_EUNSUPPORTED is also what the application gets from fld_device_*()
 * when the providing plugin left that hook NULL.
 *
 * Threads: the plugin's static constructors, register_builtins and every
 * is_available() run with the host's lock held (at load, or the first time
 * a choice involves the implementation): keep them quick. Kernels,
 * supports() and the device hooks (but their is_available) run on the
 * application's threads without the lock, concurrently with themselves.
 */
#ifndef FLDISPATCH_PLUGIN_H
#define FLDISPATCH_PLUGIN_H

#include <fldispatch/fldispatch.h>
#include <fldispatch/half.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* ABI version                                                              */
/* ------------------------------------------------------------------------ */

/*
 * The major changes when a plugin built for the old one cannot work; the
 * minor grows when fields or functions are added at the end. A host loads a
 * plugin whose major equals its own and whose minor is not newer.
 */
#define FLD_PLUGIN_ABI_MAJOR 1
#define FLD_PLUGIN_ABI_MINOR 4
#define FLD_PLUGIN_MAGIC     0x50444c46u /* "FLDP" */

/* ------------------------------------------------------------------------ */
/* Implementations                                                          */
/* ------------------------------------------------------------------------ */

/*
 * The registry a plugin fills; only valid inside register_builtins, on the
 * thread that runs it. A fld_registry_* call through a pointer kept past
 * register_builtins (from a kernel, say), or made on another thread,
 * returns FLD_ESTATE naming the function and the plugin, and changes
 * nothing.
 */
typedef struct fld_registry fld_registry;

/* What kind of backend an implementation is; the policy tokens name them. */
typedef enum fld_kind {
    FLD_KIND_DEFAULT = 0,  /* token "flagos": the portable default backend */
    FLD_KIND_VENDOR = 1,   /* token "vendor" (and "vendor:NAME"): hardware vendor kernels */
    FLD_KIND_REFERENCE = 2 /* token "reference": simple, always-correct kernels */
} fld_kind;

enum fld_priority {
    FLD_PRIORITY_DEFAULT = 150,
    FLD_PRIORITY_VENDOR = 100,
    FLD_PRIORITY_REFERENCE = 50
};

/*
 * Runs the op. args points to the op's argument struct (fld_rms_norm_args,
 * ...), already validated by the host for catalog ops. Returns FLD_OK, or
 * an error, in which case the outputs must be untouched (the host may run the
 * next implementation on the same, possibly in-place, tensors). Return
 * FLD_EUNSUPPORTED to decline a call without it counting as a failure
 * (outputs untouched; the host may ask again, so a decline must be
 * repeatable).
 * Call fld_set_error() to explain a failure. Must be MT safe. A kernel may
 * call ops itself; calls nest at most 64 deep on a thread, and a deeper one
 * returns FLD_ESTATE ("refused, calls of ops nested more than 64 deep"), so
 * a kernel that calls the op it serves without end fails instead of running
 * out of stack.
 */
typedef int (*fld_kernel_fn)(const void *args);

/*
 * Optional per-call predicate: false declines the call, which the host
 * passes to the next candidate (e.g. an alignment or shape the fast path
 * cannot take). Must be cheap, MT safe and must not touch tensor data.
 */
typedef bool (*fld_supports_fn)(const void *args);

/*
 * Optional: whether the implementation can run in this process (driver
 * present, device found). Evaluated at most once per process (again in a
 * forked child), with the host's lock held; on false, set *reason to a
 * static string saying why. It must not call back into the library (see the
 * top of this file).
 */
typedef bool (*fld_available_fn)(const char **reason);

typedef struct fld_impl {
    const char *op;      /* op name, e.g. FLD_OP_RMS_NORM; [A-Za-z0-9_.] */
    const char *impl_id; /* "<kind>.<name>": "default.x", "vendor.x", "reference.x" */
    fld_kind kind;
    const char *vendor;            /* required for FLD_KIND_VENDOR, e.g. "cuda"; else NULL */
    int priority;                  /* FLD_PRIORITY_*; higher runs first within a token */
    uint32_t devices;              /* FLD_DEVICE_MASK_* it accepts; not 0 */
    uint32_t dtypes;               /* FLD_DTYPE_MASK_* it accepts; not 0 (see below) */
    fld_kernel_fn fn;              /* required */
    fld_available_fn is_available; /* optional */
    fld_supports_fn supports;      /* optional */
} fld_impl;

/*
 * The dtype of a call is that of its main tensor (x for activations and
 * norms, query for rotary). Some operands may differ from it, and an
 * implementation that cannot handle such a call must decline it in
 * supports() so the next candidate serves it (the library's reference.c
 * serves every combination on CPU):
 *   rms_norm, gemma_rms_norm  weight and residual may be float32 while x and
 *                             out are float16 or bfloat16 (each on its own);
 *   rotary_embedding,         cos_sin_cache may be float32 with 16-bit
 *   rotary_embedding_out      query and key.
 *
 * rotary_embedding_out (ABI 1.3, family ROTARY_OUT,
 * fld_rotary_embedding_out_args) reaches only the implementations
 * registered for it: a plugin that serves rotary_embedding need not serve
 * it, and its calls then go to the next candidate (on the CPU, the
 * library's reference.c). Its kernels read query and key and write
 * query_out and key_out, whose strides are their own
 * (fld_rotary_out_geometry_of() below); each element of an output is
 * written, those past rot_dim with a copy of the input's.
 */

/*
 * Registers one implementation; the host copies the record and its strings.
 * FLD_EINVAL (with the reason in fld_last_error()) for an invalid record:
 * empty op, impl_id not of the form "<kind>.<name>", duplicate impl_id for
 * the op, VENDOR without vendor, NULL fn, empty device or dtype mask.
 */
FLD_API int fld_registry_register(fld_registry *reg, const fld_impl *impl);

/*
 * Declares the signature of op (ABI 1.2): a torch-schema-like string (see
 * "Op signatures" in fldispatch.h), e.g.
 *
 *     fld_registry_declare_op(reg, "acme_scale",
 *                             "(Tensor(a!) out, Tensor x, float alpha=1.0) -> ()");
 *
 * Then the kernels of op receive a const fld_args * (one tagged fld_arg per
 * declared argument, in declared order, checked by the host), Python calls
 * it by name with tensors and scalars (fldispatch.call_op) and
 * fldispatch.torch exposes it as torch.ops.fldispatch.<op>. Declaring an
 * op is not needed to register implementations of it (it then stays opaque:
 * args reach fn as the caller passed them). Only inside register_builtins,
 * before or after the implementations. The same signature declared again,
 * here or by another plugin or binding, is fine (equal after
 * normalisation: "Tensor!" and "Tensor(b!)" are the same); a different one
 * is FLD_EINVAL with a message naming both declarations and their
 * declarers, as is a malformed string (naming the column) or a catalog op's
 * name with another signature than the catalog's. Like an invalid record,
 * a failed declaration rejects the whole plugin: nothing it registered or
 * declared stays.
 */
FLD_API int fld_registry_declare_op(fld_registry *reg, const char *op, const char *schema);

/*
 * Sets one line the host shows for the plugin (fldispatch list, the detail
 * of fld_plugin_info), e.g. the instruction set or device it chose. Only
 * inside register_builtins; the text is copied, newlines become spaces, and
 * it is kept only if the plugin loads. A second call replaces the first.
 * FLD_EINVAL for a NULL reg or fmt, FLD_ENOMEM.
 */
FLD_API int fld_registry_set_detail(fld_registry *reg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------ */
/* Device hooks (ABI 1.1)                                                   */
/* ------------------------------------------------------------------------ */

/*
 * What a device plugin (CUDA, ROCm, Ascend, ...) lends the host so that
 * tools can move data to and from its device: fld_device_alloc() and friends
 * in <fldispatch/fldispatch.h> call these. Every function is optional (NULL
 * when the plugin cannot do it) and returns FLD_OK or an error explained with
 * fld_set_error(). device_id is DLDevice.device_id. They must be MT safe.
 * Like the code of a plugin being loaded, a hook may call only fld_set_error,
 * fld_log and the functions without library state (fld_get_stream,
 * fld_strerror, ...): any other call returns FLD_ESTATE ("fld_reload: called
 * by plugin 'x' from its 'alloc' device hook").
 *
 * Kernels and hooks run on the calling thread's current stream for their
 * device type, fld_get_stream(device_type); NULL means the runtime's default
 * stream.
 */
typedef struct fld_device_hooks {
    size_t struct_size; /* sizeof(fld_device_hooks) of the plugin's build */
    int device_type;    /* FLD_DEVICE_CUDA, FLD_DEVICE_ROCM, FLD_DEVICE_ASCEND; not CPU */
    /* Whether the device can be used here; evaluated once per process (again
     * after fork), like fld_impl.is_available. NULL: always. */
    fld_available_fn is_available;
    int (*alloc)(int device_id, size_t bytes, void **ptr);
    int (*free)(int device_id, void *ptr);
    /* Host-to-device and device-to-host copies have finished on return;
     * device-to-device copies may be asynchronous on the current stream. */
    int (*copy)(int device_id, void *dst, const void *src, size_t bytes, fld_copy_kind kind);
    /* Waits for the work queued on the current stream. */
    int (*synchronize)(int device_id);
    /*
     * Graphs (ABI 1.4; leave all four NULL when the device has none): how
     * tools time work as the device runs it when an engine replays it from a
     * graph (CUDA graphs, HIP graphs). fld_device_graph_capture() and friends
     * call them; a plugin gives all four or none.
     *
     * capture_begin: a new stream of device_id on which the runtime records
     * work instead of running it, in *stream. The host makes it the calling
     * thread's current stream (fld_get_stream()) while the tool records, then
     * puts the previous one back and calls capture_end.
     */
    int (*capture_begin)(int device_id, void **stream);
    /* Ends the capture on stream. keep non-zero: readies what was recorded
     * for replay in *graph; zero: drops it. Either way the stream is the
     * plugin's again (kept with the graph, or destroyed). */
    int (*capture_end)(int device_id, void *stream, int keep, void **graph);
    /* Replays graph `replays` times back to back, then waits: ns[i] is the
     * device's time for replay i, between events recorded around it. */
    int (*graph_replay)(int device_id, void *graph, int replays, double *ns);
    /* Frees a graph from capture_end (and its stream). */
    int (*graph_free)(int device_id, void *graph);
} fld_device_hooks;

/*
 * Registers the plugin's hooks for hooks->device_type; only inside
 * register_builtins, at most once per device type per plugin. The host copies
 * the record (only the first struct_size bytes a newer host knows of) and
 * keeps it if the plugin loads. FLD_EINVAL for a NULL argument, a struct_size
 * smaller than ABI 1.1's, an unknown or CPU device type, or a second record
 * for the same device type.
 */
FLD_API int fld_registry_set_device_hooks(fld_registry *reg, const fld_device_hooks *hooks);

/* ------------------------------------------------------------------------ */
/* The descriptor                                                           */
/* ------------------------------------------------------------------------ */

#define FLD_PLUGIN_FLAG_IN_TREE (1u << 0) /* built by the fldispatch project */

typedef struct fld_plugin_descriptor {
    uint32_t magic;           /* FLD_PLUGIN_MAGIC */
    uint16_t abi_major;       /* FLD_PLUGIN_ABI_MAJOR the plugin was built with */
    uint16_t abi_minor;       /* FLD_PLUGIN_ABI_MINOR the plugin was built with */
    uint32_t struct_size;     /* sizeof(fld_plugin_descriptor) of that build */
    uint32_t flags;           /* FLD_PLUGIN_FLAG_* */
    const char *name;         /* [a-z0-9_-], e.g. "cpu" */
    const char *version;      /* the plugin's own version */
    const char *host_version; /* FLD_VERSION_STRING of the headers it was built with */
    int (*register_builtins)(fld_registry *reg);
} fld_plugin_descriptor;

/* The exported symbol the host looks for. */
#define FLD_PLUGIN_SYMBOL "fld_plugin_entry"

#ifdef FLD_IN_TREE
#define FLD_PLUGIN_FLAGS_ FLD_PLUGIN_FLAG_IN_TREE
#else
#define FLD_PLUGIN_FLAGS_ 0u
#endif

#ifdef __cplusplus
#define FLD_PLUGIN_LINKAGE_ extern "C"
#else
#define FLD_PLUGIN_LINKAGE_
#endif

/* Defines the plugin's descriptor. Use it once, at file scope. */
#define FLD_PLUGIN_DEFINE(name, version_string, register_fn)                                       \
    FLD_PLUGIN_LINKAGE_ __attribute__((visibility("default")))                                     \
    const fld_plugin_descriptor fld_plugin_entry = {                                               \
        FLD_PLUGIN_MAGIC,     FLD_PLUGIN_ABI_MAJOR,                                                \
        FLD_PLUGIN_ABI_MINOR, sizeof(fld_plugin_descriptor),                                       \
        FLD_PLUGIN_FLAGS_,    (name),                                                              \
        (version_string),     FLD_VERSION_STRING,                                                  \
        (register_fn)};

/*
 * Registers a plugin linked into the application itself (no .so), as if it
 * had been loaded from a file. desc must stay valid until fld_shutdown().
 * FLD_EPLUGIN with the reason if it is rejected.
 */
FLD_API int fld_register_plugin(const fld_plugin_descriptor *desc);

/* ------------------------------------------------------------------------ */
/* Helpers for kernels                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Sets the calling thread's fld_last_error() detail; for failing kernels.
 * Escaped like every message (control characters and invalid UTF-8 become
 * \xNN escapes). No init; MT safe (the message is the thread's own).
 */
FLD_API void fld_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Logs through the host's logger (level FLD_LOG_*). No init; MT safe. */
FLD_API void fld_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A validated tensor seen as rows: rows = product of the leading dims,
 * width = last dim, stride = elements between row starts, data = first
 * element (byte_offset applied). Only for tensors the host validated.
 * This and fld_rotary_geometry_of(): no init, MT safe (they read only their
 * arguments).
 */
typedef struct fld_rows {
    void *data;
    int64_t rows;
    int64_t width;
    int64_t stride;
} fld_rows;
FLD_API void fld_tensor_rows(const DLTensor *t, fld_rows *out);

/* The geometry of a validated rotary_embedding call. Strides in elements. */
typedef struct fld_rotary_geometry {
    int64_t tokens;
    int64_t rot_dim; /* cos_sin_cache width; rot_dim/2 frequencies */
    int64_t max_pos;
    const void *positions; /* int64 or int32 */
    bool positions_int32;
    void *query;
    int64_t q_heads, q_token_stride, q_head_stride;
    void *key; /* NULL when absent; then k_heads is 0 */
    int64_t k_heads, k_token_stride, k_head_stride;
    const void *cache;
    int64_t cache_stride;
    DLDataType cache_dtype;
} fld_rotary_geometry;
FLD_API void fld_rotary_geometry_of(const fld_rotary_embedding_args *args,
                                    fld_rotary_geometry *out);

/*
 * The geometry of a validated rotary_embedding_out call (ABI 1.3): in
 * describes positions, the cache and query and key as read; out the same
 * call with query_out and key_out in their place (its query, key, heads and
 * strides are the outputs'; its other fields equal in's). Heads, tokens
 * and rot_dim agree, since the outputs have the inputs' shapes.
 */
static inline void fld_rotary_out_geometry_of(const fld_rotary_embedding_out_args *args,
                                              fld_rotary_geometry *in, fld_rotary_geometry *out)
{
    fld_rotary_embedding_args a = {NULL, NULL, NULL, 0, NULL, false};
    if (args) {
        a.positions = args->positions;
        a.query = (DLTensor *)args->query; /* only read through a */
        a.key = (DLTensor *)args->key;
        a.head_size = args->head_size;
        a.cos_sin_cache = args->cos_sin_cache;
        a.is_neox = args->is_neox;
    }
    fld_rotary_geometry_of(args ? &a : NULL, in);
    if (args) {
        a.query = args->query_out;
        a.key = args->key_out;
    }
    fld_rotary_geometry_of(args ? &a : NULL, out);
}

/* Index of a DLPack dtype in FLD_DTYPE_MASK_* bit order (0 f32, 1 f16, 2 bf16), or -1. */
static inline int fld_dtype_index(DLDataType t)
{
    if (t.lanes != 1 || t.bits == 0)
        return -1;
    if (t.code == kDLFloat && t.bits == 32)
        return 0;
    if (t.code == kDLFloat && t.bits == 16)
        return 1;
    if (t.code == kDLBfloat && t.bits == 16)
        return 2;
    return -1;
}

#ifdef __cplusplus
}
#endif

#endif /* FLDISPATCH_PLUGIN_H */
