/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch — operator dispatch for LLM inference engines.
 *
 * This header is the application's manual. An engine calls operators
 * (rms_norm, silu_and_mul, rotary_embedding, ...) on DLPack tensors; the
 * library picks the implementation from the plugins it loaded, under the
 * policy set by VLLM_FL_* environment variables and the programmatic calls
 * below, caches the choice per (op, device, dtype) and runs it.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *   - Functions return FLD_OK (0) or a negative FLD_E* status. After a
 *     failure, fld_last_error() returns a message on the calling thread that
 *     names the variable, file, plugin or tensor at fault.
 *   - Functions are thread-safe ("MT safe"), fld_shutdown() included: it
 *     waits for the calls other threads are making (see there).
 *   - The library never keeps a caller's pointer past the call (tensors,
 *     shape and stride arrays, strings) unless the comment says so.
 *   - Strings the library returns are owned by the library and stay valid
 *     until fld_shutdown() unless the comment says otherwise.
 *   - Any function initialises the library on first use (see fld_init()),
 *     except those marked "No init": they read no library state (names,
 *     statuses, the catalog) or only the calling thread's own (its last
 *     error, its stream), never fail for the configuration, and work
 *     before fld_init() and after fld_shutdown().
 *   - Callbacks (fld_foreach_*, the log callback) run on the calling thread
 *     before the function returns; each function says what they may do.
 *     Where a callback must not call back into the library (the log
 *     callback, fld_foreach_plugin's and fld_foreach_impl's), a call that
 *     needs the library's state (anything that initialises, fld_init,
 *     fld_reload, fld_shutdown, fld_load_plugin, a policy function) returns
 *     FLD_ESTATE naming the function and the callback, and changes nothing;
 *     functions marked "No init", fld_log and fld_set_error still work.
 * Where a function's comment says otherwise, the comment wins.
 */
#ifndef FLDISPATCH_FLDISPATCH_H
#define FLDISPATCH_FLDISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FLD_BUILDING_LIBRARY)
#define FLD_API __attribute__((visibility("default")))
#else
#define FLD_API
#endif

/* Library version (semantic versioning; the soname follows the major). */
#define FLD_VERSION_MAJOR  0
#define FLD_VERSION_MINOR  1
#define FLD_VERSION_PATCH  0
#define FLD_VERSION_STRING "0.1.0"

/* The version of the library actually loaded at run time. No init. */
FLD_API const char *fld_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

enum fld_status {
    FLD_OK = 0,
    FLD_EINVAL = -1,       /* bad argument: null pointer, shape, dtype, stride, range */
    FLD_ENOTFOUND = -2,    /* no such op, implementation, plugin or file */
    FLD_EUNAVAILABLE = -3, /* no implementation is available for this call */
    FLD_ECONFIG = -4,      /* invalid configuration (environment variable, policy value) */
    FLD_EPLUGIN = -5,      /* a plugin could not be loaded or registered */
    FLD_EIMPL = -6,        /* the implementation(s) failed while running */
    FLD_ENOMEM = -7,       /* out of memory */
    FLD_EUNSUPPORTED = -8, /* an implementation declines these arguments (not a failure) */
    FLD_ESTATE = -9,       /* called in the wrong state (e.g. fld_policy_pop with nothing pushed) */
};

/* A short, static description of a status code ("invalid argument", ...). No init. */
FLD_API const char *fld_strerror(int status);

/*
 * The detail of the most recent failure on the calling thread, e.g.
 * "rms_norm: tensor 'weight' has dtype bfloat16 but 'x' has float32".
 * Never NULL (empty when nothing failed yet). The buffer is thread-local and
 * is overwritten by the next failure on the same thread; successful calls do
 * not clear it. MT safe; no init.
 */
FLD_API const char *fld_last_error(void);

/* ------------------------------------------------------------------------ */
/* Devices and dtypes                                                       */
/* ------------------------------------------------------------------------ */

/*
 * Device types are DLPack device types. Ascend NPUs have no code in released
 * DLPack headers; torch_npu exports kDLExtDev, newer DLPack uses 21. Both are
 * accepted and mean Ascend.
 */
enum fld_device_type {
    FLD_DEVICE_CPU = 1,         /* kDLCPU */
    FLD_DEVICE_CUDA = 2,        /* kDLCUDA */
    FLD_DEVICE_ROCM = 10,       /* kDLROCM */
    FLD_DEVICE_ASCEND = 12,     /* kDLExtDev, as exported by torch_npu */
    FLD_DEVICE_ASCEND_DL21 = 21 /* kDLAscend of DLPack after 1.3 */
};

/* Device masks for fld_impl.devices (see plugin.h). */
#define FLD_DEVICE_MASK_CPU    (1u << 0)
#define FLD_DEVICE_MASK_CUDA   (1u << 1)
#define FLD_DEVICE_MASK_ROCM   (1u << 2)
#define FLD_DEVICE_MASK_ASCEND (1u << 3)
#define FLD_DEVICE_MASK_ALL    0xfu

/* Dtype masks for fld_impl.dtypes (see plugin.h). */
#define FLD_DTYPE_MASK_F32  (1u << 0)
#define FLD_DTYPE_MASK_F16  (1u << 1)
#define FLD_DTYPE_MASK_BF16 (1u << 2)
#define FLD_DTYPE_MASK_ALL  0x7u

/* The DLPack dtypes the catalog ops compute in. */
#define FLD_DTYPE_F32  ((DLDataType){kDLFloat, 32, 1})
#define FLD_DTYPE_F16  ((DLDataType){kDLFloat, 16, 1})
#define FLD_DTYPE_BF16 ((DLDataType){kDLBfloat, 16, 1})
/* For ops without tensors (attention_backend) or opaque plugin ops. */
#define FLD_DTYPE_ANY ((DLDataType){0, 0, 0})

/* The four name functions below: no init; the strings are static. */
/* "cpu", "cuda", "rocm", "ascend"; NULL for other device types. */
FLD_API const char *fld_device_name(int device_type);
/* Parses "cpu", "cuda" (or "nvidia"), "rocm", "ascend"; FLD_EINVAL otherwise. */
FLD_API int fld_device_from_name(const char *name, int *device_type);
/* "f32", "f16", "bf16", "any"; NULL for a dtype the catalog does not know. */
FLD_API const char *fld_dtype_name(DLDataType dtype);
/* Parses "f32"/"float32", "f16"/"float16", "bf16"/"bfloat16"; FLD_EINVAL otherwise. */
FLD_API int fld_dtype_from_name(const char *name, DLDataType *dtype);

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */
/* ------------------------------------------------------------------------ */

/*
 * Initialises the library: reads the environment (VLLM_FL_*), registers the
 * built-in reference kernels and loads the plugins of the search path.
 * Idempotent and MT safe; every other function calls it lazily. Returns
 * FLD_ECONFIG when the environment holds an invalid value (the message names
 * the variable and its valid values); the failure is remembered, and every
 * later call returns it, until fld_reload() or fld_shutdown(). A plugin that
 * fails to load does not fail fld_init(): it is recorded with its reason
 * (see fld_foreach_plugin()) and logged.
 */
FLD_API int fld_init(void);

/*
 * Releases everything: caches, registry, policies, plugin handles. Every
 * fld_op handle and every string the library returned becomes invalid; a
 * later call initialises the library afresh.
 *
 * MT safe, in this way: it first stops new calls (from then until it
 * returns, calls on other threads return FLD_ESTATE, "fld_shutdown() is in
 * progress"), then waits for the calls already running on other threads to
 * return, at most VLLM_FL_SHUTDOWN_TIMEOUT seconds (default 10; 0 does not
 * wait), and only then releases anything. When calls are still running at
 * the deadline (a kernel that does not return) it releases nothing, lets
 * calls in again and returns FLD_ESTATE naming how many threads were still
 * inside. Also FLD_ESTATE, releasing nothing: called from inside a call on
 * the same thread (a kernel, a supports() predicate, a callback of
 * fld_foreach_*, a log callback) or from plugin code the host runs while
 * loading it, or while another thread is shutting down. FLD_ECONFIG for an
 * invalid VLLM_FL_SHUTDOWN_TIMEOUT. FLD_OK when it released everything or
 * the library was not initialised. Strings an application kept from
 * before, and threads it lets call afterwards with old handles, are its own
 * affair: the library cannot see them.
 */
FLD_API int fld_shutdown(void);

/*
 * Re-reads the environment and the configuration files, re-detects the
 * platform and rescans the plugin search path, loading plugins not loaded
 * yet (loaded plugins stay). Atomic: on FLD_ECONFIG the policy in force
 * stays and nothing changes (except that, when only the manifest check
 * fails, plugin files found by the rescan stay loaded). Programmatic policy changes
 * (fld_policy_set) are replaced by what the environment says. Calls running
 * on other threads see either the old or the new state, never a mixture.
 */
FLD_API int fld_reload(void);

/* ------------------------------------------------------------------------ */
/* Operators: the catalog                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The catalog's ops are the rows of <fldispatch/catalog.def>: each row's
 * FLD_OP_<ID> name, its family, and what it computes. The families below
 * give each op its argument struct, its typed entry point's parameters and
 * its checks; the typed entry points themselves are declared, one per row,
 * after the families.
 */
#include <fldispatch/catalog.def>

/*
 * Tensor layout rules shared by all ops. The host checks them on every call
 * and returns FLD_EINVAL, without touching tensor memory, when one fails:
 *   - float tensors are float32, float16 or bfloat16, one dtype per call
 *     (except rms_norm's weight and residual, which may be float32 with a
 *     16-bit x, and the rotary cos/sin cache, which may be float32);
 *   - all tensors of a call are on the same device (type and id);
 *   - the last dimension has stride 1 (strides == NULL means contiguous);
 *   - the leading dimensions form rows: each of them may be strided, but
 *     they must collapse into one row stride (dims before the last two are
 *     contiguous over the dims after them), and the row stride is at least
 *     the row width. byte_offset is honoured;
 *   - a tensor the op writes (out, residual, query, key, query_out,
 *     key_out) shares no byte with another tensor of the call, except the
 *     full aliasing an op allows (rms_norm: out may be x itself). Views of one buffer that
 * interleave without sharing bytes are fine (query and key as column slices of a fused qkv tensor,
 * out and x as column halves of one buffer). The message names both tensors and their byte ranges.
 * Zero-sized tensors are valid and make the call a no-op.
 */

/*
 * Activations (families GATED and ELEMENTWISE), argument struct
 * fld_activation_args, entry point int fld_<name>(DLTensor *out,
 * const DLTensor *x).
 * GATED: out[..., d] = act(x[..., :d]) * x[..., d:] for silu_and_mul,
 * gelu_and_mul (erf GELU) and gelu_tanh_and_mul (tanh GELU); mul_and_silu
 * computes x[..., :d] * silu(x[..., d:]). x is [..., 2d] and out is [..., d]
 * with the same leading shape and dtype. Rounding is vLLM's: the
 * activation is computed in float32 (vLLM's CUDA formulas), rounded to the
 * dtype, and the product with the other half is rounded again, i.e.
 * out = round(round(act(a)) * b); for float32 that is one float32 product.
 * ELEMENTWISE: out = act(x) element by element, out of x's shape and dtype,
 * computed in float32 and rounded once (gelu_quick: x * sigmoid(1.702 x),
 * as vLLM's QuickGELU kernel, x / (1 + exp(-1.702 x))). out and x share no
 * memory.
 */
typedef struct fld_activation_args {
    DLTensor *out;
    const DLTensor *x;
} fld_activation_args;

/*
 * RMS normalisation (family NORM: rms_norm, gemma_rms_norm), argument
 * struct fld_rms_norm_args, entry point int fld_<name>(DLTensor *out,
 * const DLTensor *x, const DLTensor *weight, DLTensor *residual, float eps).
 * Over the last dimension H.
 * Without residual: out = x * rsqrt(mean(x^2) + eps) * w.
 * With residual (same shape as x, updated in place): first
 * residual = x + residual (summed in float32, rounded to the residual's
 * dtype), then out = norm(residual) * w, normalising the stored sum.
 * weight is [H] and contiguous, or NULL for no scale. out may alias x
 * (same data and layout); no other pair of its tensors may share memory,
 * except x and weight (both only read). eps must be finite and >= 0.
 * gemma_rms_norm scales by (1 + w) instead of w, with 1 + w formed in
 * float32.
 * Dtypes: out has x's dtype. weight and residual have x's dtype, or float32
 * when x is float16 or bfloat16 (vLLM's GemmaRMSNorm keeps its weight, and
 * with float16 its residual, in float32). Computed in float32, one rounding
 * of each output to x's dtype; the mean of squares is kept from overflowing
 * or underflowing, so any finite row gives its normalised value (rows of
 * 1e30 or of 1e-30 included). A NaN in a row makes it NaN; an inf makes the
 * row's finite elements 0 and the inf ones NaN, as in PyTorch.
 * Implementations that cannot serve a dtype combination decline it (their
 * supports() predicate), and the next candidate serves it.
 */
typedef struct fld_rms_norm_args {
    DLTensor *out;
    const DLTensor *x;
    const DLTensor *weight; /* may be NULL */
    DLTensor *residual;     /* may be NULL */
    float eps;
} fld_rms_norm_args;

/*
 * Rotary position embedding (family ROTARY), in place on query and key;
 * argument struct fld_rotary_embedding_args, entry point
 * int fld_<name>(const DLTensor *positions, DLTensor *query, DLTensor *key,
 *                int64_t head_size, const DLTensor *cos_sin_cache, bool is_neox).
 *   positions      int64 (or int32), [T] or [B, S] (T = B*S), contiguous;
 *                  every value in [0, max_pos).
 *   query          [..., Hq * head_size] or [..., Hq, head_size], whose
 *                  leading dims equal positions' shape; heads may be padded
 *                  (head stride >= head_size in the 4-D-style layout).
 *   key            like query with Hk heads, or NULL.
 *   cos_sin_cache  [max_pos, rot_dim]; each row is cos[rot_dim/2] followed by
 *                  sin[rot_dim/2]; rot_dim even and <= head_size; its dtype
 *                  is the query's or float32.
 * neox pairs element i with i + rot_dim/2; gptj (is_neox = false) pairs 2i
 * with 2i+1; both use frequency i. Elements past rot_dim are unchanged.
 * Rounding is vLLM's forward_native: float32 queries compute x*cos - y*sin
 * and y*cos + x*sin in float32; float16/bfloat16 queries round cos and sin
 * to their dtype (a float32 cache is cast first), then round each product
 * and the sum to it: round(round(x*cos) - round(y*sin)).
 */
typedef struct fld_rotary_embedding_args {
    const DLTensor *positions;
    DLTensor *query;
    DLTensor *key; /* may be NULL */
    int64_t head_size;
    const DLTensor *cos_sin_cache;
    bool is_neox;
} fld_rotary_embedding_args;

/*
 * Rotary position embedding out of place (family ROTARY_OUT); argument
 * struct fld_rotary_embedding_out_args, entry point
 * int fld_<name>(const DLTensor *positions, const DLTensor *query,
 *                const DLTensor *key, int64_t head_size,
 *                const DLTensor *cos_sin_cache, bool is_neox,
 *                DLTensor *query_out, DLTensor *key_out).
 * rotary_embedding's computation (the same pairs, frequencies and rounding,
 * so the same bits), reading query and key and writing the result into
 * query_out and key_out; query and key are not written. The inputs follow
 * rotary_embedding's rules (strided views of one fused qkv tensor
 * included). query_out has query's shape, dtype and device, key_out key's;
 * each has its own strides under the layout rules above (contiguous is the
 * common case: a new tensor), and every element of it is written: the
 * rotated ones and, past rot_dim in each head, a copy of the input's. Bytes
 * between padded heads or rows of an output are not touched. key and
 * key_out are both NULL or both set. An output shares no byte with any
 * other tensor of the call (the inputs, the cache, positions, the other
 * output). On a failure nothing is written.
 */
typedef struct fld_rotary_embedding_out_args {
    const DLTensor *positions;
    const DLTensor *query;
    const DLTensor *key; /* may be NULL, then key_out is NULL too */
    int64_t head_size;
    const DLTensor *cos_sin_cache;
    bool is_neox;
    DLTensor *query_out;
    DLTensor *key_out; /* NULL exactly when key is */
} fld_rotary_embedding_out_args;

/*
 * The attention backend (family ATTENTION), argument struct
 * fld_attention_backend_args, entry point int fld_<name>(int device_type,
 * bool use_mla, bool use_sparse, const char **name): the name of the
 * attention backend to use on a device, as vLLM names them
 * ("FLASH_ATTN", "FLASHMLA", "FLASHMLA_SPARSE", "CPU_ATTN", ...). use_sparse
 * requires use_mla. *name receives a static string.
 */
typedef struct fld_attention_backend_args {
    int device_type;
    bool use_mla;
    bool use_sparse;
    const char **name; /* out */
} fld_attention_backend_args;

/*
 * Per row of <fldispatch/catalog.def>: fld_<name>_args, the family's struct,
 * and the typed entry point fld_<name>() with the family's parameters
 * (fld_silu_and_mul(out, x), fld_rms_norm(out, x, weight, residual, eps),
 * fld_rotary_embedding(positions, query, key, head_size, cos_sin_cache,
 * is_neox), fld_rotary_embedding_out(positions, query, key, head_size,
 * cos_sin_cache, is_neox, query_out, key_out), fld_attention_backend(device_type, use_mla,
 * use_sparse, name),
 * ...). FLD_CATALOG_ARGS_<FAMILY> names a family's struct.
 */
#define FLD_CATALOG_ARGS_GATED       fld_activation_args
#define FLD_CATALOG_ARGS_ELEMENTWISE fld_activation_args
#define FLD_CATALOG_ARGS_NORM        fld_rms_norm_args
#define FLD_CATALOG_ARGS_ROTARY      fld_rotary_embedding_args
#define FLD_CATALOG_ARGS_ROTARY_OUT  fld_rotary_embedding_out_args
#define FLD_CATALOG_ARGS_ATTENTION   fld_attention_backend_args

#define FLD_CATALOG_PARAMS_GATED       (DLTensor * out, const DLTensor *x)
#define FLD_CATALOG_PARAMS_ELEMENTWISE (DLTensor * out, const DLTensor *x)
#define FLD_CATALOG_PARAMS_NORM                                                                    \
    (DLTensor * out, const DLTensor *x, const DLTensor *weight, DLTensor *residual, float eps)
#define FLD_CATALOG_PARAMS_ROTARY                                                                  \
    (const DLTensor *positions, DLTensor *query, DLTensor *key, int64_t head_size,                 \
     const DLTensor *cos_sin_cache, bool is_neox)
#define FLD_CATALOG_PARAMS_ROTARY_OUT                                                              \
    (const DLTensor *positions, const DLTensor *query, const DLTensor *key, int64_t head_size,     \
     const DLTensor *cos_sin_cache, bool is_neox, DLTensor *query_out, DLTensor *key_out)
#define FLD_CATALOG_PARAMS_ATTENTION                                                               \
    (int device_type, bool use_mla, bool use_sparse, const char **name)

#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    typedef FLD_CATALOG_ARGS_##family fld_##name##_args;                                           \
    FLD_API int fld_##name FLD_CATALOG_PARAMS_##family;
#include <fldispatch/catalog.def>

/* ------------------------------------------------------------------------ */
/* Operators: generic calls                                                 */
/* ------------------------------------------------------------------------ */

/* An interned operator. Valid until fld_shutdown(); compare with ==.
 * fld_op_name() needs no init (it reads the handle). */
typedef const struct fld_op_s *fld_op;

/*
 * The handle of an op known to the library: a catalog op or one a loaded
 * plugin registered. NULL (FLD_ENOTFOUND in fld_last_error()) for an unknown
 * name. Look handles up once and keep them: fld_call() is the fastest path.
 */
FLD_API fld_op fld_op_lookup(const char *name);
FLD_API const char *fld_op_name(fld_op op);

/* Which argument struct a catalog op takes (fld_call() and the kernels). */
typedef enum fld_args_kind {
    FLD_ARGS_ACTIVATION = 1,          /* fld_activation_args */
    FLD_ARGS_RMS_NORM = 2,            /* fld_rms_norm_args */
    FLD_ARGS_ROTARY_EMBEDDING = 3,    /* fld_rotary_embedding_args */
    FLD_ARGS_ATTENTION_BACKEND = 4,   /* fld_attention_backend_args: no tensors */
    FLD_ARGS_ROTARY_EMBEDDING_OUT = 5 /* fld_rotary_embedding_out_args */
} fld_args_kind;

/* One op of the catalog. Later versions may add fields at the end. */
typedef struct fld_catalog_op_info {
    const char *name;      /* FLD_OP_*, static */
    fld_args_kind args;    /* its argument struct */
    size_t args_size;      /* sizeof that struct */
    const char *signature; /* its Python and torch form, static ("Op signatures" below) */
} fld_catalog_op_info;

/*
 * Calls fn for every op of the catalog, in the order of the rows of
 * <fldispatch/catalog.def>, and stops early when fn returns non-zero (that
 * value is returned). Ops that plugins register outside the catalog are not listed
 * (fld_foreach_impl() names them). FLD_EINVAL when fn is NULL.
 * Unlike the rest of this header it neither initialises the library nor
 * takes a lock (the catalog is fixed when the library is built): it works
 * under any configuration, before fld_init() and after fld_shutdown(), and
 * fn may call any function of the library. MT safe.
 */
FLD_API int fld_foreach_catalog_op(int (*fn)(const fld_catalog_op_info *op, void *user),
                                   void *user);

/*
 * Calls op with a pointer to its argument struct (fld_rms_norm_args, ...).
 * For catalog ops the host validates the arguments and takes device and
 * dtype from the tensors. Ops outside the catalog are opaque to the host:
 * their args go to the implementation as they are, and selection ignores
 * device and dtype (use fld_call_on() to select by them).
 * Returns the implementation's status, FLD_EUNAVAILABLE when no
 * implementation is available, or FLD_EIMPL when all that ran failed.
 * MT safe; takes no lock once the (op, device, dtype) choice is cached.
 */
FLD_API int fld_call(fld_op op, const void *args);
FLD_API int fld_call_by_name(const char *name, const void *args);
/* As fld_call() for an op outside the catalog, selecting by device and dtype. */
FLD_API int fld_call_on(fld_op op, int device_type, DLDataType dtype, const void *args);

/* ------------------------------------------------------------------------ */
/* Operators: prepared calls                                                */
/* ------------------------------------------------------------------------ */

/*
 * A prepared call: a catalog op's call checked once and repeated with new
 * data pointers, or repeated on the same ones. An engine calls each layer
 * with the same shapes every step; preparing lets the host check shapes,
 * strides, dtypes and devices once and then check, per call, only what the
 * data pointers can change, and nothing at all when they stay the same (as
 * SQLite's prepare, bind and step).
 *
 *   fld_rms_norm_args a = {&out, &x, &w, NULL, 1e-6f};
 *   fld_prepared *p;
 *   if (fld_prepare(FLD_OP_RMS_NORM, &a, &p) != FLD_OK) ... fld_last_error()
 *   for (each step)
 *       fld_prepared_rms_norm(p, out_data, x_data, w_data, NULL);
 *   fld_prepared_free(p);
 *
 * fld_prepare() validates args as a call of op would (the same checks and
 * messages: FLD_EINVAL naming the tensor at fault), without running it, and
 * copies what it needs: the argument struct, every tensor's shape, strides,
 * dtype, device and byte_offset, and the scalars (eps, head_size, is_neox).
 * The caller's tensors, shape and stride arrays may be freed afterwards.
 * op is a catalog op with tensors (FLD_OP_*, not attention_backend, nor
 * rotary_embedding_out, which has no prepared form; an op outside the
 * catalog has arguments the host cannot read): FLD_EINVAL
 * otherwise, FLD_ENOTFOUND for an unknown name. *out is NULL on failure.
 *
 * A call of a prepared op takes one data pointer per tensor of its argument
 * struct, in the struct's order (the tensor's byte_offset is added to it, as
 * for any DLTensor), and checks per call what a new pointer can break: NULL
 * data for a non-empty tensor, alignment to the element size, a span past the
 * end of the address space, memory shared between a tensor the op writes and
 * another (the exact aliasing the op allows, rms_norm's out == x, included),
 * and for rotary on the CPU every position against the cache length (the
 * positions' values can change between calls). Such a call fails as the
 * unprepared call would, with the same status and message, and runs nothing.
 * A tensor that was NULL in the template (rms_norm's weight or residual,
 * rotary's key) stays absent: its pointer is ignored (pass NULL).
 *
 * Bound pointers: the object holds the data pointers of its last accepted
 * call or fld_prepared_bind(), at first the template's (fld_prepare() checked
 * them). A refused call or bind leaves them as they were. fld_prepared_run()
 * runs the op on them and checks nothing of them again, since nothing a check
 * looks at has changed: the caller's part, as for any call, is that the
 * memory behind them is still allocated, of the prepared layout, while the
 * op runs. Rotary on the CPU is the exception: its positions' values are read
 * again at every run (they change between calls), and one out of range fails
 * the run as the typed call would.
 *
 * Selection is not frozen: each call dispatches as the typed entry point
 * does, so a policy or registry change (fld_policy_set, a scoped override on
 * the calling thread, fld_reload, fld_load_plugin) is followed on the next
 * call, with the same fallback and failure memory. The object caches the op
 * it dispatches through with the library's generation counter, which every
 * such change moves: a call compares the two and looks the op up again when
 * they differ.
 *
 * Lifetime: an fld_prepared belongs to the application and is plain memory;
 * it holds no lock and no handle, and the op it caches is used only while
 * the generation it was read in holds (never after a shutdown). It stays
 * valid across fld_reload() and fld_shutdown() (a call after a shutdown
 * initialises the library again, as the typed entry points do; during one it
 * returns FLD_ESTATE) and in a forked child. fld_prepared_free() needs no
 * init and may come before or after fld_shutdown(); NULL is a no-op.
 *
 * Threads: fld_prepare() is MT safe. A call or bind writes the new pointers
 * (and a run its cache) into the prepared object, so one fld_prepared is used
 * by one thread at a time (prepare one per thread, or serialise); distinct
 * prepared objects may be called concurrently, on the same op or not.
 */
typedef struct fld_prepared fld_prepared;

/* The most tensors a catalog op's argument struct holds. */
#define FLD_PREPARED_MAX_TENSORS 4

FLD_API int fld_prepare(const char *op, const void *args, fld_prepared **out);
/* The op's catalog name; the number of data pointers fld_prepared_call() takes. No init. */
FLD_API const char *fld_prepared_op(const fld_prepared *p);
FLD_API int fld_prepared_ntensors(const fld_prepared *p);
FLD_API void fld_prepared_free(fld_prepared *p);

/*
 * Calls the prepared op with data[0 .. ntensors-1], in the argument struct's
 * order: activations (out, x); rms_norm and gemma_rms_norm (out, x, weight,
 * residual); rotary_embedding (positions, query, key, cos_sin_cache).
 * Returns what the typed entry point would for the same tensors.
 */
FLD_API int fld_prepared_call(fld_prepared *p, void *const data[]);
/* The same with the pointers as arguments; FLD_EINVAL when p was prepared for another family. */
FLD_API int fld_prepared_activation(fld_prepared *p, void *out, const void *x);
FLD_API int fld_prepared_rms_norm(fld_prepared *p, void *out, const void *x, const void *weight,
                                  void *residual);
FLD_API int fld_prepared_rotary(fld_prepared *p, const void *positions, void *query, void *key,
                                const void *cos_sin_cache);

/*
 * Binds data[0 .. ntensors-1] (fld_prepared_call()'s order) without running
 * the op: the checks of a call with those pointers, and the unprepared
 * call's status (FLD_EINVAL) and message when they fail; the previous
 * binding stays.
 */
FLD_API int fld_prepared_bind(fld_prepared *p, void *const data[]);
/*
 * Runs the prepared op on the bound pointers ("Bound pointers" above): the
 * fastest call of an op with tensors. Returns what the typed entry point would
 * for those tensors; FLD_EINVAL when p is NULL.
 */
FLD_API int fld_prepared_run(fld_prepared *p);

/* ------------------------------------------------------------------------ */
/* Op signatures: the arguments of ops outside the catalog                  */
/* ------------------------------------------------------------------------ */

/*
 * An op outside the catalog may have a declared signature (a plugin's
 * fld_registry_declare_op(), a binding's fld_binding_declare(); plugin.h and
 * binding.h): a torch-schema-like string such as
 *
 *     "(Tensor(a!) out, Tensor x, Tensor? scale=None, float eps=1e-06, int n=1) -> ()"
 *
 * Argument types: Tensor (read), Tensor! or Tensor(a!) (written: the op's
 * outputs, which it mutates in place), either followed by ? (optional: may
 * be absent, NULL), int (int64_t), float (double), bool, str (const char *).
 * Defaults: None for an optional tensor, a literal for a scalar (True/False
 * for bool; a float's is finite: no inf or nan); an argument with a default
 * must not come before one without. Names: [A-Za-z_][A-Za-z0-9_]*, each
 * once, not a Python keyword (def, None, lambda, ...: no binding could
 * take them). Returns: always "()": the
 * outputs are the written tensors. The catalog ops have signatures too
 * (their Python and torch form; those may return a value).
 *
 * The arguments of a call of a declared op are an fld_args: one tagged
 * fld_arg per declared argument, in declared order. The host checks a call
 * of a declared op before any implementation sees it (FLD_EINVAL naming
 * the op and the argument): the count, each tag, a tensor NULL where the
 * signature does not say optional, tensors on different devices. The call
 * selects by the device of its first tensor and the dtype of its first
 * float32/float16/bfloat16 tensor (fld_call(), fld_call_by_name(); no
 * tensor: any device and dtype) or by what fld_call_on() is given.
 */
typedef enum fld_arg_kind {
    FLD_ARG_TENSOR = 1, /* v.tensor; NULL only when FLD_ARG_OPTIONAL */
    FLD_ARG_INT = 2,    /* v.i */
    FLD_ARG_FLOAT = 3,  /* v.f */
    FLD_ARG_BOOL = 4,   /* v.b */
    FLD_ARG_STR = 5     /* v.s, not NULL */
} fld_arg_kind;

/* fld_arg_decl.flags */
#define FLD_ARG_WRITTEN     (1u << 0) /* Tensor! / Tensor(a!): the op writes it */
#define FLD_ARG_OPTIONAL    (1u << 1) /* Tensor?: may be NULL */
#define FLD_ARG_HAS_DEFAULT (1u << 2) /* fld_arg_decl.default_value holds it */

/* One argument's value. */
typedef union fld_arg_value {
    DLTensor *tensor;
    int64_t i;
    double f;
    bool b;
    const char *s;
} fld_arg_value;

/* One argument of a call: its kind (fld_arg_kind, as declared) and value. 16 bytes. */
typedef struct fld_arg {
    uint32_t kind;
    uint32_t reserved; /* 0 */
    fld_arg_value v;
} fld_arg;

/* What fld_call() of a declared op takes, and its kernels receive as args. */
typedef struct fld_args {
    uint32_t count;     /* the signature's argument count */
    const fld_arg *arg; /* arg[0..count), in declared order */
} fld_args;

/* One declared argument. */
typedef struct fld_arg_decl {
    const char *name;
    fld_arg_kind kind;
    uint32_t flags;              /* FLD_ARG_* */
    fld_arg_value default_value; /* when FLD_ARG_HAS_DEFAULT; None of a tensor: NULL */
} fld_arg_decl;

/* An op's signature. Pointers valid until fld_shutdown() (a declaration never changes). */
typedef struct fld_signature_info {
    const char *op;
    const char *schema;      /* canonical text: "(Tensor(a!) out, Tensor x) -> ()" */
    const char *declared_by; /* "the catalog", "plugin 'acme' (/path/fld-acme.so)", ... */
    bool catalog;            /* a catalog op: its typed struct, not fld_args, is what fn gets */
    size_t n_args;
    const fld_arg_decl *args;
    const char *returns; /* "" for "()", else the return type ("str") */
} fld_signature_info;

/*
 * The signature of op now: FLD_OK and *info, FLD_ENOTFOUND when the op has
 * none (unknown, or registered without a declaration). Initialises; takes
 * the host lock. MT safe.
 */
FLD_API int fld_op_signature(const char *op, fld_signature_info *info);
/* Calls fn for every op with a signature (the catalog's first, then the
 * declared in name order); stops when fn returns non-zero (returned). fn
 * must not call into the library. */
FLD_API int fld_foreach_signature(int (*fn)(const fld_signature_info *info, void *user),
                                  void *user);

/* ------------------------------------------------------------------------ */
/* Selection: what runs, and why                                            */
/* ------------------------------------------------------------------------ */

/*
 * Selection ranks every implementation that passes the policy (token order,
 * then descending priority, ties by ascending impl_id); a chain keeps the
 * first 64 of them. Those ranked lower are never tried: a WARNING says so
 * when such a chain is built, and fld_explain() lists each as rejected.
 *
 * Which implementation a call of op on (device_type, dtype) would use now,
 * under the calling thread's policy, ignoring per-call supports()
 * predicates. *impl_id stays valid until fld_shutdown(). FLD_ENOTFOUND for
 * an unknown op, FLD_EUNAVAILABLE when no implementation qualifies (the
 * message lists the registered ones and why each was dropped).
 */
FLD_API int fld_resolve(const char *op, int device_type, DLDataType dtype, const char **impl_id);

/* One implementation dropped by selection, and why. */
typedef struct fld_rejection {
    const char *impl_id;
    const char *reason; /* e.g. "vendor 'cuda' denied by VLLM_FL_DENY_VENDORS" */
} fld_rejection;

/* The full story of a resolution; free with fld_resolution_free(). */
typedef struct fld_resolution {
    const char *op;
    int device_type;
    DLDataType dtype;
    const char *selected; /* first candidate, or NULL */
    size_t n_candidates;  /* ordered: the winner first, then the fallbacks */
    const char **candidates;
    size_t n_rejected;
    fld_rejection *rejected;
    const char *order;        /* the token order used, e.g. "flagos|vendor|reference" */
    const char *order_source; /* where that order came from, e.g. "VLLM_FL_PER_OP" */
} fld_resolution;

FLD_API int fld_explain(const char *op, int device_type, DLDataType dtype, fld_resolution **out);
/* No init; NULL is a no-op. The op and impl_id strings are the library's, valid until
 * fld_shutdown(). */
FLD_API void fld_resolution_free(fld_resolution *res);

/*
 * Forgets the failures remembered by non-strict fallback (an implementation
 * that failed is skipped for its (op, device, dtype) until the policy or the
 * registry changes, or until this call). op NULL clears every op.
 */
FLD_API int fld_clear_failures(const char *op);

/* One implementation the failure memory skips, for one (op, device, dtype). */
typedef struct fld_failure_info {
    const char *op;
    int device_type;  /* a FLD_DEVICE_*, or 0 for an op keyed on no device */
    DLDataType dtype; /* FLD_DTYPE_ANY for an op keyed on no dtype */
    const char *impl_id;
} fld_failure_info;

/*
 * Calls fn for every implementation the failure memory of non-strict
 * fallback currently skips: those of the global policy's cached choices,
 * then those of the calling thread's scoped override in force (a failure
 * inside a scope is remembered for that scope only). Stops early when fn
 * returns non-zero and returns that value. fn runs with the library's lock
 * held and must not call back into the library; the strings are valid
 * until fld_shutdown().
 */
FLD_API int fld_foreach_failure(int (*fn)(const fld_failure_info *info, void *user), void *user);

/* ------------------------------------------------------------------------ */
/* Policy                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Sets one field of the global policy, with the grammar of its environment
 * variable. Keys (environment variable in brackets):
 *   prefer            flagos | vendor | reference      [VLLM_FL_PREFER]
 *   strict            1 | 0                            [VLLM_FL_STRICT]
 *   enabled           switch: 1, 0, true, false        [VLLM_FL_PREFER_ENABLED]
 *   use_flaggems      switch                           [USE_FLAGGEMS]
 *   allow_vendors     comma-separated vendor names     [VLLM_FL_ALLOW_VENDORS]
 *   deny_vendors      comma-separated vendor names     [VLLM_FL_DENY_VENDORS]
 *   per_op            op1=tok|tok;op2=tok              [VLLM_FL_PER_OP]
 *   flagos_whitelist  comma-separated op names         [VLLM_FL_FLAGOS_WHITELIST]
 *   flagos_blacklist  comma-separated op names         [VLLM_FL_FLAGOS_BLACKLIST]
 *   oot_enabled       switch                           [VLLM_FL_OOT_ENABLED]
 *   oot_whitelist     comma-separated layer names      [VLLM_FL_OOT_WHITELIST]
 *   oot_blacklist     comma-separated layer names      [VLLM_FL_OOT_BLACKLIST]
 *   external_enabled  switch                           [VLLM_FL_EXTERNAL_ENABLED]
 *   external_whitelist comma-separated op names        [VLLM_FL_EXTERNAL_WHITELIST]
 *   external_blacklist comma-separated op names        [VLLM_FL_EXTERNAL_BLACKLIST]
 *   custom_ops        all | none | +op | -op, comma-separated [VLLM_FL_CUSTOM_OPS]
 * Tokens: flagos, vendor, vendor:NAME, reference, impl:ID. Vendor names
 * compare without case. The oot_* fields keep vllm-plugin-FL's meaning (which
 * engine layers an integration replaces, see fld_oot_op_enabled()); the
 * external_* fields filter implementations of plugins built outside this
 * project. value NULL or "" clears a list field (no allow list, no per-op
 * orders). An invalid key or value is FLD_ECONFIG and changes nothing.
 * While a manifest freezes dispatch (VLLM_FL_MANIFEST) the global policy
 * cannot change: FLD_ESTATE. Atomic: calls on other threads see the old or
 * the new policy. Cached choices are invalidated.
 */
FLD_API int fld_policy_set(const char *key, const char *value);

/* fld_policy_set_fields() / fld_policy_push_fields() flag: fields not given
 * take their built-in defaults (a whole policy, as fld_policy_load_file()
 * gives) instead of keeping the values in force. */
#define FLD_POLICY_WHOLE 1u

/*
 * Sets n fields of the global policy at once, with fld_policy_set()'s keys
 * and grammars (a key given twice: the last wins). FLD_POLICY_WHOLE: every
 * field not given takes its built-in default instead of keeping its value.
 * All or nothing, published once: on any error (FLD_ECONFIG naming the key
 * and "field I", its index) the policy in force stays. The names the fields
 * bring are checked against the registry (a WARNING each, FLD_ECONFIG when
 * the resulting policy is strict). FLD_ESTATE while a manifest freezes
 * dispatch.
 */
FLD_API int fld_policy_set_fields(unsigned flags, size_t n, const char *const keys[],
                                  const char *const values[]);

/*
 * Puts the global policy back to what the configuration says: the platform
 * file, the environment, or VLLM_FL_CONFIG (see docs/configuration.md).
 * On error (FLD_ECONFIG naming the variable or file:line) nothing changes.
 */
FLD_API int fld_policy_reset(void);

/*
 * Scoped, thread-local overrides (vllm-plugin-FL's with_* contexts). Each
 * push applies to the calling thread only, on top of the global policy and
 * of earlier pushes, until the matching fld_policy_pop(). An invalid value is
 * FLD_ECONFIG and pushes nothing.
 *   preference: flagos | vendor | reference
 *   allowed_vendors: replaces the allow list (comma-separated)
 *   denied_vendors: adds to the deny list (comma-separated)
 *   per_op: VLLM_FL_PER_OP grammar; replaces the orders of the ops it names
 */
FLD_API int fld_policy_push_preference(const char *kind);
FLD_API int fld_policy_push_strict(bool strict);
FLD_API int fld_policy_push_allowed_vendors(const char *csv);
FLD_API int fld_policy_push_denied_vendors(const char *csv);
FLD_API int fld_policy_push_per_op(const char *spec);
/* Undoes the latest push of this thread; FLD_ESTATE when there is none. */
FLD_API int fld_policy_pop(void);

/*
 * The names a push brings (vendors, ops and impl ids of per-op orders) are
 * checked against the registry as the environment's are: a WARNING for a
 * name that matches nothing ("did you mean ..."), FLD_ECONFIG (pushing
 * nothing) when the thread's policy is strict after the push.
 */

/* How many overrides the calling thread has pushed and not popped. No init. */
FLD_API size_t fld_policy_depth(void);

/*
 * Pops the calling thread's overrides until depth are left (none when it has
 * depth or fewer): fld_policy_pop_to(0) clears the thread's stack, whatever
 * pushed it, back to the global policy. A scope that remembers
 * fld_policy_depth() before its push and pops to it on the way out is
 * undone exactly, even when an inner scope failed to pop. FLD_OK; no init.
 */
FLD_API int fld_policy_pop_to(size_t depth);

/*
 * Pushes n fields as ONE scoped override of the calling thread, undone by one
 * fld_policy_pop(). keys and values are fld_policy_set()'s (a key given twice:
 * the last wins). Without FLD_POLICY_WHOLE the override is built on the
 * thread's effective policy, and as the push_* functions do, deny_vendors adds
 * to the deny list and per_op replaces the orders of the ops it names; every
 * other key replaces its field. With FLD_POLICY_WHOLE every field not given
 * is the built-in default (a manifest in force still applies). All or
 * nothing: FLD_ECONFIG naming the key (and "field I", its index) for an
 * invalid key or value, or for an unknown name when the result is strict.
 */
FLD_API int fld_policy_push_fields(unsigned flags, size_t n, const char *const keys[],
                                   const char *const values[]);

/*
 * Pushes a YAML policy file (fld_policy_load_file()'s keys) as one scoped
 * override of the calling thread: a whole policy, every field from the file
 * or the built-in default. FLD_ECONFIG "path:line:column: ..." and nothing
 * pushed on error.
 */
FLD_API int fld_policy_push_file(const char *path);

/*
 * The effective policy of the calling thread as one line, e.g.
 * "prefer=flagos;strict=0;deny=amd;per=rms_norm=vendor|reference". Writes at
 * most size bytes (NUL-terminated) and returns the full length.
 */
FLD_API size_t fld_policy_describe(char *buf, size_t size);

/*
 * Loads a YAML policy file as the global policy: every field comes from the
 * file or from the built-in default (like VLLM_FL_CONFIG). Atomic: on error
 * (FLD_ECONFIG, message "file:line:column: ...") the policy in force stays.
 * Keys: prefer, strict, allow_vendors, deny_vendors, op_backends,
 * flagos_whitelist, flagos_blacklist, oot_enabled, oot_whitelist,
 * oot_blacklist, external_enabled, external_whitelist, external_blacklist,
 * custom_ops, enabled, use_flaggems (see docs/configuration.md).
 * FLD_ESTATE while a manifest freezes dispatch.
 */
FLD_API int fld_policy_load_file(const char *path);

/*
 * vllm-plugin-FL's VLLM_FL_OOT_* switches, for engine integrations (the vLLM
 * plugin): whether the engine's own layer `op` ("rms_norm", "silu_and_mul",
 * "rotary_embedding", ...) should be replaced by fldispatch's. False when
 * VLLM_FL_PREFER_ENABLED or VLLM_FL_OOT_ENABLED is off, when an OOT
 * whitelist is set without op, or when op is on the OOT blacklist (from the
 * environment or the platform file). Reads the calling thread's effective
 * policy; false (with fld_last_error()) when op is NULL or the library cannot
 * initialise. Selection inside the library does not depend on it.
 */
FLD_API bool fld_oot_op_enabled(const char *op);

/* One field of the effective policy, with where its value came from. */
typedef struct fld_config_field {
    const char *key;    /* "prefer", "strict", ..., "op_backends.rms_norm", "manifest" */
    const char *value;  /* as text, e.g. "vendor", "true", "cuda,amd", "vendor|reference" */
    const char *source; /* "default", "VLLM_FL_PREFER", "config/nvidia.yaml:3", ... */
} fld_config_field;

/*
 * Calls fn for every field of the calling thread's effective policy (one
 * entry per per-op order). Stops early when fn returns non-zero and returns
 * that value. Strings are valid during the callback only.
 */
FLD_API int fld_foreach_config_field(int (*fn)(const fld_config_field *field, void *user),
                                     void *user);

/* The platform in force and how it was decided. */
typedef struct fld_platform_info {
    const char *name;        /* "cpu", "nvidia", "rocm", "ascend" */
    const char *detected_by; /* "VLLM_FL_PLATFORM", "PCI device 10de:2330 (class 0302)", ... */
    const char *config_file; /* the platform file in use, or "" */
    const char *config_path; /* where platform files are looked for, ':'-separated */
} fld_platform_info;

/* Fills *out; the strings stay valid until fld_shutdown(). A reload or
 * fld_policy_reset() may decide another platform: call again to see it. */
FLD_API int fld_platform(fld_platform_info *out);

/* ------------------------------------------------------------------------ */
/* Plugins and the registry, for tools                                      */
/* ------------------------------------------------------------------------ */

typedef enum fld_plugin_status {
    FLD_PLUGIN_LOADED = 0,      /* registered its implementations */
    FLD_PLUGIN_UNAVAILABLE = 1, /* loaded, but none of its implementations can run here */
    FLD_PLUGIN_REJECTED = 2,    /* not loaded: bad file, ABI, permissions, registration error */
    FLD_PLUGIN_SKIPPED = 3      /* not loaded on purpose: duplicate name, privileged process */
} fld_plugin_status;

/* "loaded", "unavailable", "rejected", "skipped"; NULL for another value.
 * MT safe; needs no fld_init(). */
FLD_API const char *fld_plugin_status_name(fld_plugin_status status);

typedef struct fld_plugin_info {
    const char *name;    /* plugin name; the file name when no descriptor was read */
    const char *path;    /* file path, or "(built-in)" */
    const char *version; /* plugin version string, or "" */
    unsigned abi_major, abi_minor;
    bool in_tree; /* built by this project */
    fld_plugin_status status;
    const char *reason;    /* why rejected, skipped or unavailable; "" when loaded */
    size_t n_impls;        /* implementations it registered */
    const char *detail;    /* the plugin's own status line (fld_registry_set_detail), or "" */
    uint32_t hook_devices; /* FLD_DEVICE_MASK_* it registered device hooks for (ABI 1.1) */
} fld_plugin_info;

/*
 * Calls fn for every plugin seen (loaded or not) in load order, then stops
 * early if fn returns non-zero (that value is returned). Availability is
 * evaluated for the status. fn runs with the library's lock held (loads,
 * reloads and registrations on other threads wait for it) and must not
 * call back into the library: such a call returns FLD_ESTATE (see the top
 * of this file).
 */
FLD_API int fld_foreach_plugin(int (*fn)(const fld_plugin_info *info, void *user), void *user);

typedef struct fld_impl_info {
    const char *op;
    const char *impl_id;
    const char *kind;   /* "flagos", "vendor", "reference" */
    const char *vendor; /* NULL unless kind is vendor */
    int priority;
    uint32_t devices; /* FLD_DEVICE_MASK_* */
    uint32_t dtypes;  /* FLD_DTYPE_MASK_* */
    const char *plugin;
    bool in_tree;
    bool available;
    const char *unavailable_reason; /* "" when available */
} fld_impl_info;

/*
 * Calls fn for every registered implementation, by op name then impl_id;
 * stops early as fld_foreach_plugin() does. fn runs with the library's lock
 * held, like fld_foreach_plugin()'s, and must not call back into the
 * library either.
 */
FLD_API int fld_foreach_impl(int (*fn)(const fld_impl_info *info, void *user), void *user);

/*
 * Loads one plugin file now (the checks of the search path apply). FLD_OK
 * when it loaded, FLD_EPLUGIN with the reason otherwise. Its implementations
 * join the registry atomically and cached choices are invalidated.
 */
FLD_API int fld_load_plugin(const char *path);

/* The plugin search path in force, ':'-separated. */
FLD_API const char *fld_plugin_path(void);

/* ------------------------------------------------------------------------ */
/* Logging                                                                  */
/* ------------------------------------------------------------------------ */

enum fld_log_level {
    FLD_LOG_DEBUG = 10,
    FLD_LOG_INFO = 20,
    FLD_LOG_WARNING = 30,
    FLD_LOG_ERROR = 40,
    FLD_LOG_OFF = 100
};

/*
 * Messages at or above the level are emitted. The default is WARNING, or
 * VLLM_FL_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR). Setting it here wins over
 * the environment until fld_reload(). Both: no init; one process-wide
 * level, read and set atomically. The setter returns FLD_OK, or FLD_ESTATE
 * and changes nothing when called from code the library runs (a plugin's
 * code while it is loaded, a device hook, a callback of the application;
 * plugin.h), like fld_log_set_callback(), the fld_stats_* functions that
 * change or write the counters, and fld_set_stream().
 */
FLD_API int fld_log_set_level(int level);
FLD_API int fld_log_get_level(void);

/*
 * Routes log lines to fn instead of stderr (NULL restores stderr). fn gets
 * the level and the message without a trailing newline; it may run on any
 * thread, possibly while the library holds its lock or is half-way through
 * fld_init(), a reload or a plugin's load, so it must not call back into the
 * library: a call that needs the library's state (fld_reload,
 * fld_load_plugin, fld_policy_set, fld_shutdown, fld_resolve, ...) returns
 * FLD_ESTATE ("fld_reload: called from the application's log callback ...")
 * and changes nothing; the plugin being loaded is not blamed. No init. Replacing the callback is
 * atomic, but a line that another thread is logging at that moment may still reach the previous fn:
 * the library keeps the previous (fn, user) callable until fld_shutdown(), and so must the
 * application. FLD_OK; FLD_ENOMEM; FLD_ESTATE from code the library runs
 * (fld_log_set_level()).
 */
typedef void (*fld_log_fn)(int level, const char *message, void *user);
FLD_API int fld_log_set_callback(fld_log_fn fn, void *user);

/* ------------------------------------------------------------------------ */
/* What ran: call counters and the dispatch trace                          */
/* ------------------------------------------------------------------------ */

/*
 * Opt-in counters per (op, implementation, device, dtype): how often each
 * implementation was called, how often it failed, how often it failed and
 * the next candidate ran (a fallback), and with FLD_STATS_TIME the time
 * spent in it (CLOCK_MONOTONIC around the kernel). Switched by
 * VLLM_FL_STATS (unset or 0: off; 1 or "calls"; "time") at fld_init() and
 * fld_reload(), or by fld_stats_enable(), which wins until the next
 * fld_reload().
 *
 * Off, they cost nothing on the direct call path. On, every call goes
 * through the chain path (a cached chain, still no lock) and counts with
 * relaxed atomic adds: about 50 ns per call, 100 ns with the clock
 * (docs/BENCHMARKS.md).
 * Switching on re-resolves cached choices, as a policy change does.
 *
 * At process exit, when on: a summary table on stderr, or, when
 * VLLM_FL_STATS_FILE=PATH is set, a JSON document written to PATH instead
 * ({"pid", "rank", "mode", "entries": [{"op", "impl_id", "device", "dtype",
 * "calls", "fallbacks", "failures", "total_ns"}]}); VLLM_FL_STATS_FILE alone
 * turns counting on. In PATH, "%p" becomes the process id and "%r" the rank
 * (RANK, else LOCAL_RANK, else 0), "%%" a "%", so that several worker
 * processes write separate files. VLLM_FL_TRACE=PATH (same substitutions)
 * records each dispatch decision (a chain built: op, device, dtype, the
 * selected implementation and the candidates in order) and each call, timed,
 * and writes them at exit as Chrome/Perfetto trace JSON (chrome://tracing,
 * ui.perfetto.dev); the buffer holds at most 262144 events (FLD_TRACE_CAP),
 * later ones are counted in otherData.dropped. A process that leaves with
 * _exit() runs no exit handler: call fld_stats_flush() before. The exit
 * handler writes nothing where fld_stats_flush() has written the same
 * counters, trace and settings (nothing counted or traced since): a
 * process that flushes, then exits, writes once. A forked child starts
 * its counts and trace from zero. VLLM_FL_STATS_INTERVAL=SECONDS (0.1 to
 * 86400; it needs one of the two files) also rewrites the files every
 * SECONDS while the process runs, from a thread of the library's own and
 * only when something was counted or traced since the last write, so that
 * a process that is killed loses at most its last interval.
 *
 * Counters survive fld_shutdown(); the strings of a snapshot stay valid
 * until the process ends. All of these: no init, MT safe. Those that
 * return a status return FLD_ESTATE and change and write nothing when
 * called from code the library runs (fld_log_set_level()).
 */
enum fld_stats_mode { FLD_STATS_OFF = 0, FLD_STATS_CALLS = 1, FLD_STATS_TIME = 2 };
#define FLD_TRACE_CAP 262144

/* Switches counting; FLD_EINVAL for an unknown mode. */
FLD_API int fld_stats_enable(int mode);
/* The mode in force (FLD_STATS_*). */
FLD_API int fld_stats_mode(void);

typedef struct fld_stats_entry {
    const char *op;
    const char *impl_id;
    const char *device; /* "cpu", "cuda", "rocm", "ascend"; "any" for ops outside the catalog */
    const char *dtype;  /* "f32", "f16", "bf16"; "any" */
    uint64_t calls;     /* times its kernel ran (declines included) */
    uint64_t fallbacks; /* it failed and the next candidate ran */
    uint64_t failures;  /* it returned an error (not FLD_EUNSUPPORTED) */
    uint64_t total_ns;  /* time inside it, FLD_STATS_TIME only */
} fld_stats_entry;

/*
 * Copies at most cap entries with calls into out (the caller's array),
 * sorted by op, impl_id, device and dtype, and sets *count to how many there
 * are (call with cap 0 to size the array). FLD_EINVAL for a NULL count, or a
 * NULL out with cap > 0.
 */
FLD_API int fld_stats_snapshot(fld_stats_entry *out, size_t cap, size_t *count);
/* Sets every counter to zero and empties the trace. */
FLD_API void fld_stats_reset(void);
/* Writes the summary table to f. */
FLD_API int fld_stats_print(FILE *f);
/* Writes the counters as JSON to path ("%p", "%r" expanded); FLD_EINVAL naming the path. */
FLD_API int fld_stats_write(const char *path);
/* Writes the trace as Chrome/Perfetto JSON to path ("%p", "%r" expanded). */
FLD_API int fld_trace_write(const char *path);
/* What the exit handler does, now: the JSON file or the table, and the trace. */
FLD_API int fld_stats_flush(void);

/*
 * Counts one call made outside the library's call path (implementations
 * that a binding runs itself, e.g. Python ones), into the same table. status
 * is the implementation's (FLD_OK; FLD_EUNSUPPORTED: declined; else a
 * failure), flags FLD_STATS_FELL_BACK when the next candidate ran after it, ns
 * its time or 0. dtype all zero means "any". Does nothing while counting is
 * off. FLD_EINVAL for a NULL or empty op or impl_id, an unknown device type
 * or dtype.
 */
#define FLD_STATS_FELL_BACK 1u
FLD_API int fld_stats_record(const char *op, const char *impl_id, int device_type, DLDataType dtype,
                             int status, unsigned flags, uint64_t ns);

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Sets the calling thread's current stream for a device type (a cudaStream_t,
 * hipStream_t or aclrtStream); the device plugins queue every kernel, copy
 * and synchronize of that thread on it. Thread-local; one stream per device
 * type, so set the stream of the device you call on. No init: the setting
 * belongs to the thread and outlives fld_shutdown(). FLD_EINVAL for an
 * unknown device type; FLD_ESTATE from code the library runs
 * (fld_log_set_level()), where the stream is the caller's to keep.
 *
 * The contract:
 *   - a stream that was set is used as it is, whatever its value: PyTorch's
 *     torch.cuda.current_stream().cuda_stream, a capture stream during CUDA
 *     graph capture, or cudaStreamLegacy ((cudaStream_t)1) for the legacy
 *     NULL stream exactly;
 *   - NULL (never set, or reset) means the per-thread default stream on
 *     CUDA and ROCm (cudaStreamPerThread, hipStreamPerThread), not the legacy
 *     NULL stream: threads that never set a stream do not serialise each
 *     other's kernels, and the work stays ordered with what the caller put on
 *     the legacy stream (the per-thread stream waits for it and it waits for
 *     the per-thread stream, as with any blocking stream). What it does not
 *     do is wait for the caller's own blocking streams, which the legacy
 *     stream would; a caller that uses streams of its own passes the one to
 *     use. On Ascend NULL is the device's default stream.
 *   - during CUDA graph capture the capture stream must be set: work on a
 *     default stream is not captured.
 */
FLD_API int fld_set_stream(int device_type, void *stream);
FLD_API void *fld_get_stream(int device_type);

/* ------------------------------------------------------------------------ */
/* Device memory                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Memory on a device, through the device hooks of the plugin that serves
 * that device type (plugin ABI 1.1; see fld_registry_set_device_hooks() in
 * <fldispatch/plugin.h>). The host serves FLD_DEVICE_CPU itself (malloc,
 * memcpy). Tools such as `fldispatch verify --device cuda` use these; an
 * engine normally owns its tensors and never needs them.
 *
 * The provider of a device type is the first loaded plugin, in load order,
 * whose hooks for it are available. FLD_EUNAVAILABLE, naming the plugin and
 * its reason, when no provider is available; FLD_ENOTFOUND when no plugin
 * registered hooks for the device type; FLD_EUNSUPPORTED when the provider
 * left that hook out; otherwise the hook's own status.
 */
typedef enum fld_copy_kind {
    FLD_COPY_HOST_TO_DEVICE = 0,
    FLD_COPY_DEVICE_TO_HOST = 1,
    FLD_COPY_DEVICE_TO_DEVICE = 2
} fld_copy_kind;

/* Allocates bytes (> 0) on device.device_id; *ptr is set to NULL on failure. */
FLD_API int fld_device_alloc(DLDevice device, size_t bytes, void **ptr);
/* Frees memory from fld_device_alloc(); NULL is a no-op. */
FLD_API int fld_device_free(DLDevice device, void *ptr);
/*
 * Copies bytes, ordered on the calling thread's current stream of the device
 * type (fld_set_stream()). Host-to-device and device-to-host copies have
 * finished when the call returns; a device-to-device copy may still run
 * until fld_device_synchronize().
 */
FLD_API int fld_device_copy(DLDevice device, void *dst, const void *src, size_t bytes,
                            fld_copy_kind kind);
/* Waits until the work queued on the calling thread's current stream is done. */
FLD_API int fld_device_synchronize(DLDevice device);
/*
 * The plugin providing memory for a device type: FLD_OK with its name in
 * *plugin ("(built-in)" for the CPU), or the error fld_device_alloc() would
 * return, with *plugin NULL.
 */
FLD_API int fld_device_provider(int device_type, const char **plugin);

/* ------------------------------------------------------------------------ */
/* Device graphs                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Work recorded once and replayed from a graph (a CUDA graph, a HIP graph),
 * timed by the device: what a call costs an engine that replays its decode
 * step from a graph, without the host's launch cost. `fldispatch tune
 * --device cuda` times implementations this way. Served by the graph hooks
 * of the device type's provider, as device memory is (plugin ABI 1.4; see
 * fld_device_hooks in <fldispatch/plugin.h>): FLD_EUNSUPPORTED naming the
 * plugin when it has none, and for the CPU, which has no graphs.
 *
 * A graph keeps the pointers it was recorded with: the tensors must outlive
 * it. It belongs to the plugin that captured it: once another plugin serves
 * the device type (after fld_reload()), replaying it is FLD_ESTATE and
 * freeing it forgets it.
 */
typedef struct fld_device_graph fld_device_graph;

/*
 * Calls record(user) once on the calling thread while the device's runtime
 * captures it: meanwhile the thread's current stream of device.device_type
 * (fld_get_stream()) is the capture stream, so the calls record issues
 * (fld_call() and the op functions) are captured, not run. The previous
 * stream is put back before returning. On success *graph holds the
 * captured work. When record returns an error, nothing is kept and that
 * status is returned with record's message; when the runtime refused a step
 * of it (a synchronize or a host copy while capturing), the plugin's error
 * names it. *graph is NULL on failure.
 */
FLD_API int fld_device_graph_capture(DLDevice device, int (*record)(void *user), void *user,
                                     fld_device_graph **graph);
/*
 * Replays graph `replays` times (1 to FLD_DEVICE_GRAPH_MAX_REPLAYS) back to
 * back after one warm-up replay, and waits: ns[i] is the device's time of
 * replay i in nanoseconds.
 */
#define FLD_DEVICE_GRAPH_MAX_REPLAYS 1024
FLD_API int fld_device_graph_replay(fld_device_graph *graph, int replays, double *ns);
/* Frees a graph from fld_device_graph_capture(); NULL is a no-op. */
FLD_API int fld_device_graph_free(fld_device_graph *graph);

#ifdef __cplusplus
}
#endif

#endif /* FLDISPATCH_FLDISPATCH_H */
