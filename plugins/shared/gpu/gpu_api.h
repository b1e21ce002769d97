/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C interface between a GPU plugin's host glue (gpu_plugin.c, plain C,
 * shared by the cuda and rocm plugins) and its device code (gpu_kernels.cuh,
 * compiled by nvcc as cuda_kernels.cu or by hipcc as rocm/hip_kernels.hip).
 *
 * The device code fills one `struct fld__gpu_api` table: the CUDA build
 * exports it as fld__gpu_api_cuda (linked into fld-cuda.so with the static
 * CUDA runtime); the HIP build as fld__gpu_api_hip in a separate object that
 * fld-rocm.so dlopens, so a missing HIP runtime is a reason, not a load error.
 *
 * Conventions: every function returns 0 or the runtime's error code (a
 * cudaError_t / hipError_t value), which error_string() turns into text.
 * Pointers are device pointers unless named host. Strides and sizes are in
 * elements of the tensor's dtype. dtype is fld_dtype_index() (enum
 * fld__gpu_dtype below: 0 float32, 1 float16, 2 bfloat16). `stream` is a
 * cudaStream_t / hipStream_t: the glue passes the caller's fld_set_stream()
 * stream, else default_stream. Kernels are launched asynchronously; a launch
 * error (bad configuration, no device) is returned at once.
 */
#ifndef FLD_PLUGINS_GPU_API_H
#define FLD_PLUGINS_GPU_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The dtype indices, in fld_dtype_index()'s order (include/fldispatch/plugin.h):
   the dtype fields below and the kernels' DT template argument. */
enum fld__gpu_dtype { FLD_GPU_F32 = 0, FLD_GPU_F16 = 1, FLD_GPU_BF16 = 2, FLD_GPU_DTYPES = 3 };

#define FLD_GPU_API_VERSION 4

/* Gated ops read x as [rows, 2d]; elementwise ones (fld__gpu_act_gated() false) as [rows, d]. */
enum fld__gpu_act_op {
    FLD_GPU_SILU_AND_MUL = 0,      /* out = silu(x[:d]) * x[d:] */
    FLD_GPU_MUL_AND_SILU = 1,      /* out = x[:d] * silu(x[d:]) */
    FLD_GPU_GELU_AND_MUL = 2,      /* erf gelu(x[:d]) * x[d:] */
    FLD_GPU_GELU_TANH_AND_MUL = 3, /* tanh gelu(x[:d]) * x[d:] */
    FLD_GPU_GELU_QUICK = 4,        /* out = x * sigmoid(1.702 x) */
    FLD_GPU_GELU_NEW = 5,          /* out = tanh gelu(x), vLLM's NewGELU */
    FLD_GPU_GELU_FAST = 6,         /* out = tanh gelu(x), vLLM's FastGELU */
    FLD_GPU_ACT_OPS = 7
};

static inline bool fld__gpu_act_gated(int op)
{
    return op <= FLD_GPU_GELU_TANH_AND_MUL;
}

/* Which kernel family runs a call. */
enum fld__gpu_variant {
    FLD_GPU_REFERENCE = 0, /* simple kernels: any valid shape, stride and alignment */
    FLD_GPU_VECTOR = 1     /* 128-bit loads and stores: needs fld__gpu_*_vector_ok() */
};

struct fld__gpu_act_args {
    int op;        /* enum fld__gpu_act_op */
    int dtype;     /* out and x share it */
    void *out;     /* [rows, d], row stride out_stride */
    const void *x; /* [rows, 2d] (gated) or [rows, d], row stride x_stride */
    int64_t rows, d, out_stride, x_stride;
};

struct fld__gpu_norm_args {
    int dtype;          /* out and x */
    int weight_dtype;   /* dtype, or 0 (float32) with a 16-bit dtype */
    int residual_dtype; /* likewise */
    bool gemma;         /* scale by (1 + w) instead of w */
    void *out;          /* [rows, width]; may equal x */
    const void *x;
    const void *weight; /* [width], or NULL: no scale */
    void *residual;     /* [rows, width] or NULL; with it: residual = x + residual
                           (rounded to residual_dtype), out = norm(residual) */
    int64_t rows, width, out_stride, x_stride, residual_stride;
    float eps;
};

struct fld__gpu_rotary_args {
    int dtype;             /* query and key */
    int cache_dtype;       /* cos_sin_cache: float32 or the query's dtype */
    const void *positions; /* [tokens] int64 or int32 */
    bool positions_int32;
    void *query; /* read, and written in place unless query_out is set */
    void *key;   /* likewise, or NULL (then k_heads is 0) */
    int64_t tokens, head_size, rot_dim;
    int64_t q_heads, q_token_stride, q_head_stride;
    int64_t k_heads, k_token_stride, k_head_stride;
    const void *cache; /* [max_pos, rot_dim]: cos[rot_dim/2] then sin[rot_dim/2] */
    int64_t cache_stride, max_pos;
    bool is_neox; /* pairs (i, i + rot_dim/2); else (2i, 2i + 1) */
    /* Positions live in device memory, so the host cannot range-check them:
       a token whose position is outside [0, max_pos) is left unchanged
       (out of place: its output heads are not written). */
    /* Out of place (rotary_embedding_out): the results go to query_out and
       key_out, of the inputs' heads with their own strides, and elements
       past rot_dim are copied; query and key are only read. NULL: in place. */
    void *query_out;
    void *key_out; /* set exactly when key and query_out are */
    int64_t qo_token_stride, qo_head_stride;
    int64_t ko_token_stride, ko_head_stride;
};

struct fld__gpu_api {
    int version;         /* FLD_GPU_API_VERSION */
    const char *runtime; /* "CUDA" or "HIP" */
    const char *(*error_string)(int code);
    /* Runtime version as the runtime reports it (e.g. 13000), or 0. */
    int (*runtime_version)(int *version);
    /* Version of the installed driver as the runtime reports it (CUDA:
       12020 for a driver of CUDA 12.2; 0 when there is no driver). Works
       when the driver is too old for the runtime. */
    int (*driver_version)(int *version);
    int (*device_count)(int *count);
    /* Device name and compute capability / gfx arch text for the detail line. */
    int (*device_name)(int device_id, char *buf, size_t size);
    /* Compute capability as 10 * major + minor (sm_90: 90, sm_100: 100), or
       NULL where the runtime itself matches code objects to devices (HIP). */
    int (*device_arch)(int device_id, int *arch);
    /* What the device code holds, as the build named it: "sm_80 sm_90
       compute_90" (sm_XY machine code, compute_XY PTX); NULL with device_arch. */
    const char *built_archs;
    /* The device of the calling thread's current context, or -1 when the
       thread has none. Never creates a context. */
    int (*current_device)(int *device_id);
    /* push_device makes device_id current on the calling thread on top of
       whatever was (creating its primary context if the process had none);
       pop_device puts back exactly what was current before the matching
       push, including "nothing". */
    int (*push_device)(int device_id);
    int (*pop_device)(void);
    /* The stream of a call whose caller set none (fld_set_stream): the
       per-thread default stream (cudaStreamPerThread, hipStreamPerThread). */
    void *default_stream;
    int (*malloc)(void **ptr, size_t bytes);
    int (*free)(void *ptr);
    /* kind: 0 host to device, 1 device to host, 2 device to device (fld_copy_kind).
       Queued on stream; host copies are complete on return, device copies
       may still run. */
    int (*memcpy)(void *dst, const void *src, size_t bytes, int kind, void *stream);
    int (*stream_synchronize)(void *stream);
    int (*act)(const struct fld__gpu_act_args *a, int variant, void *stream);
    int (*norm)(const struct fld__gpu_norm_args *a, int variant, void *stream);
    int (*rotary)(const struct fld__gpu_rotary_args *a, int variant, void *stream);
    /* Graphs (NULL where the runtime has none). capture_begin: a new
       non-blocking stream that records in thread-local capture mode.
       capture_end: ends the capture on stream; keep non-zero readies the
       recorded work for replay in *graph (an object that owns the stream
       and whatever replay needs), zero (or a failure) destroys what was
       captured and the stream. graph_replay: one warm-up launch, then
       `replays` launches back to back on the graph's stream with an event
       recorded before the first and after each, one wait at the end: ns[i]
       is the time between events i and i+1, in nanoseconds. graph_free:
       frees the graph and its stream. */
    int (*capture_begin)(void **stream);
    int (*capture_end)(void *stream, int keep, void **graph);
    int (*graph_replay)(void *graph, int replays, double *ns);
    int (*graph_free)(void *graph);
};

/*
 * Whether a device of compute capability arch (10 * major + minor) can run
 * code built for the list built ("sm_80 sm_90 compute_90"), by CUDA's
 * binary compatibility rules: machine code sm_XY runs on devices of the
 * same major version X with minor >= Y; PTX compute_XY is compiled by the
 * driver for any device >= XY; the architecture-specific forms sm_XYa /
 * compute_XYa run on XY alone, the family forms sm_XYf on X.Y and later
 * minors of X.
 */
static inline bool fld__gpu_arch_runs(const char *built, int arch)
{
    if (!built)
        return false;
    const char *p = built;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        bool ptx = false;
        if (p[0] == 's' && p[1] == 'm' && p[2] == '_')
            p += 3;
        else if (p[0] == 'c' && p[1] == 'o' && p[2] == 'm' && p[3] == 'p' && p[4] == 'u' &&
                 p[5] == 't' && p[6] == 'e' && p[7] == '_')
            p += 8, ptx = true;
        else {
            while (*p && *p != ' ' && *p != ',')
                p++;
            continue;
        }
        int n = 0, digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 4)
            n = n * 10 + (*p++ - '0'), digits++;
        char suffix = (*p == 'a' || *p == 'f') ? *p++ : 0;
        bool ok = false;
        if (digits >= 2 && (*p == 0 || *p == ' ' || *p == ',')) {
            if (suffix == 'a')
                ok = arch == n;
            else if (ptx && suffix == 0)
                ok = arch >= n;
            else
                ok = arch / 10 == n / 10 && arch % 10 >= n % 10;
        }
        if (ok)
            return true;
        while (*p && *p != ' ' && *p != ',')
            p++;
    }
    return false;
}

/* Element size of a dtype index. */
static inline size_t fld__gpu_elem_size(int dtype)
{
    return dtype == FLD_GPU_F32 ? 4 : 2;
}

/* Elements of a dtype index in a 16-byte group (one vector access). */
static inline int fld__gpu_group_size(int dtype)
{
    return 16 / (int)fld__gpu_elem_size(dtype);
}

/* Whether p and every n elements of the given size keep 16-byte alignment. */
static inline bool fld__gpu_aligned16(const void *p, int64_t n, size_t elem)
{
    return ((uintptr_t)p % 16) == 0 && ((uint64_t)n * elem) % 16 == 0;
}

/* Whether FLD_GPU_VECTOR may run these activation / norm arguments. */
static inline bool fld__gpu_act_vector_ok(const struct fld__gpu_act_args *a)
{
    size_t e = fld__gpu_elem_size(a->dtype);
    return fld__gpu_aligned16(a->x, a->d, e) && fld__gpu_aligned16(a->out, a->d, e) &&
           ((uint64_t)a->x_stride * e) % 16 == 0 && ((uint64_t)a->out_stride * e) % 16 == 0;
}
static inline bool fld__gpu_norm_vector_ok(const struct fld__gpu_norm_args *a)
{
    size_t e = fld__gpu_elem_size(a->dtype), we = fld__gpu_elem_size(a->weight_dtype),
           re = fld__gpu_elem_size(a->residual_dtype);
    return fld__gpu_aligned16(a->x, a->width, e) && fld__gpu_aligned16(a->out, a->width, e) &&
           ((uint64_t)a->x_stride * e) % 16 == 0 && ((uint64_t)a->out_stride * e) % 16 == 0 &&
           (!a->weight || fld__gpu_aligned16(a->weight, a->width, we)) &&
           (!a->residual || (fld__gpu_aligned16(a->residual, a->width, re) &&
                             ((uint64_t)a->residual_stride * re) % 16 == 0));
}

#ifdef __cplusplus
}
#endif

#endif
