/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake of Huawei CANN for testing the ascend plugin without hardware:
 * the AscendCL runtime calls, aclnn tensor descriptors and the aclnn
 * operators the plugin uses, with CPU memory playing device memory.
 *
 * The operators compute their real results so the plugin's output can be
 * checked against the library's reference kernels: each computes in float32
 * from its inputs and rounds once to its output's dtype, as PyTorch's and
 * (we assume) CANN's elementwise operators do on 16-bit tensors; Silu and
 * GeluV2 use vLLM's / PyTorch's formulas (x / (1 + e^-x); the erf form
 * 0.5 x (1 + erf(x / sqrt2)) and the tanh form 0.5 x (1 + tanh(u))), so a
 * composition that rounds where vLLM rounds gives core/reference/reference_*.c's bits.
 * The fused operators (SwiGlu, RotaryPositionEmbedding, RmsNorm and its
 * variants) model a fused kernel: float32 throughout, one rounding of each
 * output. The fake checks the protocol a real
 * runtime relies on: aclInit before use, consistent aclCreateTensor
 * arguments, every GetWorkspaceSize executor run exactly once with a
 * workspace at least as large as it asked for, taken from aclrtMalloc, and
 * every descriptor and block released. Violations fail the call and are
 * counted. See fake_acl.h for the environment and the test queries.
 *
 * Built as lib64/libascendcl.so; lib64/libnnopbase.so and lib64/libopapi.so
 * are empty libraries that depend on it, so symbols looked up through any of
 * the three handles resolve here and the state is shared.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/half.h>

#define EXPORT __attribute__((visibility("default")))

typedef void *aclrtStream;

enum { DT_F32 = 0, DT_F16 = 1, DT_I32 = 3, DT_I64 = 9, DT_BF16 = 27 };
enum {
    ERR_UNINIT = 100001,
    ERR_REPEAT_INIT = 100002,
    ERR_PARAM = 100000,
    ERR_NN_NULLPTR = 161001,
    ERR_NN_PARAM = 161002,
    ERR_NN_RUNTIME = 561000,
    ERR_RT_DEVICE = 107001,
    ERR_RT_CONTEXT = 107002,
    ERR_RT_MEMORY = 207001,
    ERR_INJECTED = 500001
};

#define MAXD         8
#define TENSOR_MAGIC 0x54454e53u
#define EXEC_MAGIC   0x45584543u
#define SCALAR_MAGIC 0x5343414cu

typedef struct aclTensor {
    uint32_t magic;
    int ndim;
    int64_t dims[MAXD];
    int64_t strides[MAXD];
    int dtype;
    int64_t offset;
    char *data;
} aclTensor;

typedef struct aclScalar {
    uint32_t magic;
    int dtype;
    double value;
} aclScalar;

typedef struct aclOpExecutor {
    uint32_t magic;
    const char *op; /* run function's name */
    uint64_t ws;
    aclTensor t[8]; /* copies: the plugin may destroy descriptors after launching */
    int nt;
    double eps;
    int64_t iarg;
    double sv[2]; /* scalar arguments' values (alpha, other, fill value) */
} aclOpExecutor;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool inited;
static int n_inits;
static int live_tensors, live_execs, live_scalars, violations;
static char last_violation[512];
static char *log_buf;
static size_t log_len, log_cap;
static struct block {
    char *p;
    size_t size;
} * blocks;
static size_t n_blocks, cap_blocks;
static _Thread_local int cur_device = -1;
/* Each device's default context, as aclrtSetDevice makes it current. */
enum { MAX_FAKE_DEVICES = 64 };
static char device_contexts[MAX_FAKE_DEVICES];
static int n_set_device_calls;
static _Thread_local char err_msg[512];

/* ------------------------------------------------------------------------ */
/* Bookkeeping                                                              */
/* ------------------------------------------------------------------------ */

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    line[n] = '\0';
    pthread_mutex_lock(&lock);
    if (log_len + (size_t)n + 1 > log_cap) {
        size_t cap = (log_cap ? log_cap * 2 : 4096) + (size_t)n;
        char *p = realloc(log_buf, cap);
        if (p) {
            log_buf = p;
            log_cap = cap;
        }
    }
    if (log_len + (size_t)n + 1 <= log_cap) {
        memcpy(log_buf + log_len, line, (size_t)n + 1);
        log_len += (size_t)n;
    }
    pthread_mutex_unlock(&lock);
    const char *path = getenv("FAKE_ACL_LOG");
    if (path && path[0]) {
        FILE *f = fopen(path, "a");
        if (f) {
            fputs(line, f);
            fclose(f);
        }
    }
}

static void set_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
}

/* A protocol violation: counted, remembered and reported as the error. */
static int violation(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int violation(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&lock);
    vsnprintf(last_violation, sizeof last_violation, fmt, ap);
    violations++;
    snprintf(err_msg, sizeof err_msg, "fake_acl: %s", last_violation);
    pthread_mutex_unlock(&lock);
    va_end(ap);
    return code;
}

/* Whether FAKE_ACL_FAIL names fn. */
static bool injected(const char *fn)
{
    const char *list = getenv("FAKE_ACL_FAIL");
    if (!list)
        return false;
    size_t len = strlen(fn);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, fn, n) == 0) {
            set_err("fake_acl: injected failure of %s", fn);
            return true;
        }
        p += n + (end ? 1 : 0);
    }
    return false;
}

static bool is_inited(void)
{
    pthread_mutex_lock(&lock);
    bool v = inited;
    pthread_mutex_unlock(&lock);
    return v;
}

#define NEED_INIT(fn)                                                                              \
    do {                                                                                           \
        if (!is_inited())                                                                          \
            return violation(ERR_UNINIT, "%s called before aclInit", fn);                          \
    } while (0)

/* Index of the block holding [p, p + n), or -1. Caller holds lock. */
static long find_block(const void *p, size_t n)
{
    for (size_t i = 0; i < n_blocks; i++)
        if ((const char *)p >= blocks[i].p && (const char *)p + n <= blocks[i].p + blocks[i].size)
            return (long)i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Test queries                                                             */
/* ------------------------------------------------------------------------ */

#define COUNTER(name, var)                                                                         \
    EXPORT int name(void);                                                                         \
    int name(void)                                                                                 \
    {                                                                                              \
        pthread_mutex_lock(&lock);                                                                 \
        int v = (int)(var);                                                                        \
        pthread_mutex_unlock(&lock);                                                               \
        return v;                                                                                  \
    }
COUNTER(fake_acl_live_tensors, live_tensors)
COUNTER(fake_acl_live_executors, live_execs)
COUNTER(fake_acl_live_scalars, live_scalars)
COUNTER(fake_acl_live_allocs, n_blocks)
COUNTER(fake_acl_violations, violations)
COUNTER(fake_acl_inits, n_inits)

EXPORT const char *fake_acl_last_violation(void);
const char *fake_acl_last_violation(void)
{
    return last_violation;
}

EXPORT const char *fake_acl_log(void);
const char *fake_acl_log(void)
{
    return log_buf ? log_buf : "";
}

EXPORT void fake_acl_log_reset(void);
void fake_acl_log_reset(void)
{
    pthread_mutex_lock(&lock);
    log_len = 0;
    if (log_buf)
        log_buf[0] = '\0';
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------------ */
/* AscendCL runtime                                                         */
/* ------------------------------------------------------------------------ */

EXPORT const char *aclGetRecentErrMsg(void);
const char *aclGetRecentErrMsg(void)
{
    return err_msg;
}

EXPORT int aclInit(const char *config);
int aclInit(const char *config)
{
    logf_("aclInit");
    if (injected("aclInit"))
        return ERR_INJECTED;
    pthread_mutex_lock(&lock);
    int rc = inited ? ERR_REPEAT_INIT : 0;
    inited = true;
    n_inits++;
    pthread_mutex_unlock(&lock);
    return rc;
}

static unsigned device_count(void)
{
    const char *s = getenv("FAKE_ACL_DEVICES");
    return s && s[0] ? (unsigned)strtoul(s, NULL, 10) : 1u;
}

/* Needs no aclInit, like the real runtime's query of the driver. */
EXPORT int aclrtGetDeviceCount(uint32_t *count);
int aclrtGetDeviceCount(uint32_t *count)
{
    logf_("aclrtGetDeviceCount");
    if (injected("aclrtGetDeviceCount"))
        return ERR_INJECTED;
    if (!count)
        return ERR_PARAM;
    *count = device_count();
    return 0;
}

EXPORT int aclrtSetDevice(int32_t id);
int aclrtSetDevice(int32_t id)
{
    NEED_INIT("aclrtSetDevice");
    logf_("aclrtSetDevice device=%d", id);
    if (injected("aclrtSetDevice"))
        return ERR_INJECTED;
    if (id < 0 || (unsigned)id >= device_count() || id >= MAX_FAKE_DEVICES) {
        set_err("fake_acl: no device %d", id);
        return ERR_RT_DEVICE;
    }
    cur_device = id;
    pthread_mutex_lock(&lock);
    n_set_device_calls++;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int aclrtGetDevice(int32_t *id);
int aclrtGetDevice(int32_t *id)
{
    NEED_INIT("aclrtGetDevice");
    if (injected("aclrtGetDevice"))
        return ERR_INJECTED;
    if (cur_device < 0)
        return ERR_RT_CONTEXT;
    *id = cur_device;
    return 0;
}

/* No current context is an error, as in the runtime (ACL_ERROR_RT_CONTEXT_NULL). */
EXPORT int aclrtGetCurrentContext(void **ctx);
int aclrtGetCurrentContext(void **ctx)
{
    NEED_INIT("aclrtGetCurrentContext");
    if (!ctx)
        return ERR_PARAM;
    if (cur_device < 0 || cur_device >= MAX_FAKE_DEVICES)
        return ERR_RT_CONTEXT;
    *ctx = &device_contexts[cur_device];
    return 0;
}

EXPORT int aclrtSetCurrentContext(void *ctx);
int aclrtSetCurrentContext(void *ctx)
{
    NEED_INIT("aclrtSetCurrentContext");
    char *c = ctx;
    if (!c || c < device_contexts || c >= device_contexts + MAX_FAKE_DEVICES)
        return violation(ERR_PARAM, "aclrtSetCurrentContext of %p, not a context", ctx);
    logf_("aclrtSetCurrentContext device=%d", (int)(c - device_contexts));
    cur_device = (int)(c - device_contexts);
    return 0;
}

/* The calling thread's current device (-1: none), and setting it as aclrtSetDevice would. */
EXPORT int fake_acl_current_device(void);
int fake_acl_current_device(void)
{
    return cur_device;
}

EXPORT void fake_acl_set_current_device(int device);
void fake_acl_set_current_device(int device)
{
    cur_device = device;
}

EXPORT int fake_acl_set_device_calls(void);
int fake_acl_set_device_calls(void)
{
    return n_set_device_calls;
}

EXPORT int aclrtMalloc(void **ptr, size_t size, int policy);
int aclrtMalloc(void **ptr, size_t size, int policy)
{
    NEED_INIT("aclrtMalloc");
    logf_("aclrtMalloc size=%zu", size);
    if (injected("aclrtMalloc"))
        return ERR_INJECTED;
    if (!ptr || size == 0)
        return violation(ERR_PARAM, "aclrtMalloc of %zu bytes", size);
    if (cur_device < 0)
        return violation(ERR_RT_CONTEXT, "aclrtMalloc without a current device (aclrtSetDevice)");
    char *p = malloc(size);
    if (!p)
        return ERR_RT_MEMORY;
    /* Device memory starts as garbage: a kernel reading unwritten scratch shows. */
    memset(p, 0xCD, size);
    pthread_mutex_lock(&lock);
    if (n_blocks == cap_blocks) {
        size_t cap = cap_blocks ? cap_blocks * 2 : 64;
        struct block *b = realloc(blocks, cap * sizeof *b);
        if (!b) {
            pthread_mutex_unlock(&lock);
            free(p);
            return ERR_RT_MEMORY;
        }
        blocks = b;
        cap_blocks = cap;
    }
    blocks[n_blocks++] = (struct block){p, size};
    pthread_mutex_unlock(&lock);
    *ptr = p;
    return 0;
}

EXPORT int aclrtFree(void *ptr);
int aclrtFree(void *ptr)
{
    NEED_INIT("aclrtFree");
    logf_("aclrtFree");
    if (injected("aclrtFree"))
        return ERR_INJECTED;
    pthread_mutex_lock(&lock);
    long i = -1;
    for (size_t k = 0; k < n_blocks; k++)
        if (blocks[k].p == ptr)
            i = (long)k;
    if (i >= 0)
        blocks[i] = blocks[--n_blocks];
    pthread_mutex_unlock(&lock);
    if (i < 0)
        return violation(ERR_PARAM, "aclrtFree of %p, not from aclrtMalloc", ptr);
    free(ptr);
    return 0;
}

static int memcpy_common(const char *fn, void *dst, size_t dst_max, const void *src, size_t count,
                         int kind)
{
    if (injected(fn))
        return ERR_INJECTED;
    if (!dst || !src || count > dst_max || kind < 0 || kind > 3)
        return violation(ERR_PARAM, "%s(dst=%p, max=%zu, src=%p, count=%zu, kind=%d)", fn, dst,
                         dst_max, src, count, kind);
    /* The device side of a copy must be device memory. */
    pthread_mutex_lock(&lock);
    bool dst_dev = find_block(dst, count) >= 0, src_dev = find_block(src, count) >= 0;
    pthread_mutex_unlock(&lock);
    bool want_dst = kind == 1 || kind == 3, want_src = kind == 2 || kind == 3;
    if ((want_dst && !dst_dev) || (want_src && !src_dev))
        return violation(ERR_PARAM, "%s kind %d: device pointer not from aclrtMalloc", fn, kind);
    memmove(dst, src, count);
    return 0;
}

EXPORT int aclrtMemcpy(void *dst, size_t dst_max, const void *src, size_t count, int kind);
int aclrtMemcpy(void *dst, size_t dst_max, const void *src, size_t count, int kind)
{
    NEED_INIT("aclrtMemcpy");
    logf_("aclrtMemcpy count=%zu kind=%d", count, kind);
    return memcpy_common("aclrtMemcpy", dst, dst_max, src, count, kind);
}

EXPORT int aclrtMemcpyAsync(void *dst, size_t dst_max, const void *src, size_t count, int kind,
                            aclrtStream stream);
int aclrtMemcpyAsync(void *dst, size_t dst_max, const void *src, size_t count, int kind,
                     aclrtStream stream)
{
    NEED_INIT("aclrtMemcpyAsync");
    logf_("aclrtMemcpyAsync count=%zu kind=%d stream=%p", count, kind, stream);
    return memcpy_common("aclrtMemcpyAsync", dst, dst_max, src, count, kind);
}

EXPORT int aclrtSynchronizeStream(aclrtStream stream);
int aclrtSynchronizeStream(aclrtStream stream)
{
    NEED_INIT("aclrtSynchronizeStream");
    logf_("aclrtSynchronizeStream stream=%p", stream);
    return injected("aclrtSynchronizeStream") ? ERR_INJECTED : 0;
}

/* ------------------------------------------------------------------------ */
/* Tensor descriptors (libnnopbase in CANN)                                 */
/* ------------------------------------------------------------------------ */

static size_t dt_size(int dt)
{
    switch (dt) {
    case DT_F32:
    case DT_I32:
        return 4;
    case DT_F16:
    case DT_BF16:
        return 2;
    case DT_I64:
        return 8;
    default:
        return 0;
    }
}

EXPORT aclTensor *aclCreateTensor(const int64_t *dims, uint64_t ndim, int dtype,
                                  const int64_t *strides, int64_t offset, int format,
                                  const int64_t *storage_dims, uint64_t storage_ndim, void *data);
aclTensor *aclCreateTensor(const int64_t *dims, uint64_t ndim, int dtype, const int64_t *strides,
                           int64_t offset, int format, const int64_t *storage_dims,
                           uint64_t storage_ndim, void *data)
{
    if (injected("aclCreateTensor"))
        return NULL;
    if (ndim > MAXD || (ndim && (!dims || !strides)) || dt_size(dtype) == 0 || format != 2 ||
        offset < 0 || !data || storage_ndim < 1 || storage_ndim > MAXD || !storage_dims) {
        violation(0, "aclCreateTensor: bad arguments (ndim %llu, dtype %d, format %d)",
                  (unsigned long long)ndim, dtype, format);
        return NULL;
    }
    int64_t storage = 1, last = offset;
    for (uint64_t i = 0; i < storage_ndim; i++)
        storage *= storage_dims[i];
    for (uint64_t i = 0; i < ndim; i++) {
        if (dims[i] <= 0 || strides[i] < 0) {
            violation(0, "aclCreateTensor: dim %llu is %lld with stride %lld",
                      (unsigned long long)i, (long long)dims[i], (long long)strides[i]);
            return NULL;
        }
        last += (dims[i] - 1) * strides[i];
    }
    if (last >= storage) {
        violation(0, "aclCreateTensor: view reaches element %lld of a %lld-element storage",
                  (long long)last, (long long)storage);
        return NULL;
    }
    aclTensor *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->magic = TENSOR_MAGIC;
    t->ndim = (int)ndim;
    for (uint64_t i = 0; i < ndim; i++) {
        t->dims[i] = dims[i];
        t->strides[i] = strides[i];
    }
    t->dtype = dtype;
    t->offset = offset;
    t->data = data;
    pthread_mutex_lock(&lock);
    live_tensors++;
    pthread_mutex_unlock(&lock);
    return t;
}

EXPORT int aclDestroyTensor(const aclTensor *t);
int aclDestroyTensor(const aclTensor *t)
{
    if (!t || t->magic != TENSOR_MAGIC)
        return violation(ERR_NN_PARAM, "aclDestroyTensor of a non-tensor %p", (const void *)t);
    ((aclTensor *)t)->magic = 0;
    free((void *)t);
    pthread_mutex_lock(&lock);
    live_tensors--;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int aclDestroyAclOpExecutor(aclOpExecutor *ex);
int aclDestroyAclOpExecutor(aclOpExecutor *ex)
{
    if (!ex || ex->magic != EXEC_MAGIC)
        return violation(ERR_NN_PARAM, "aclDestroyAclOpExecutor of a non-executor");
    ex->magic = 0;
    free(ex);
    pthread_mutex_lock(&lock);
    live_execs--;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Element access                                                           */
/* ------------------------------------------------------------------------ */

static int64_t numel(const aclTensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->dims[i];
    return n;
}

/* Element offset of logical (row-major) index i. */
static int64_t elem_at(const aclTensor *t, int64_t i)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->dims[d]) * t->strides[d];
        i /= t->dims[d];
    }
    return off;
}

static float load(const aclTensor *t, int64_t off)
{
    const char *p = t->data + off * (int64_t)dt_size(t->dtype);
    uint16_t h;
    switch (t->dtype) {
    case DT_F32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case DT_F16:
        memcpy(&h, p, 2);
        return fld_f16_to_f32(h);
    default:
        memcpy(&h, p, 2);
        return fld_bf16_to_f32(h);
    }
}

static float round_to(int dt, float v)
{
    if (dt == DT_F16)
        return fld_f16_to_f32(fld_f32_to_f16(v));
    if (dt == DT_BF16)
        return fld_bf16_to_f32(fld_f32_to_bf16(v));
    return v;
}

static void store(const aclTensor *t, int64_t off, float v)
{
    char *p = t->data + off * (int64_t)dt_size(t->dtype);
    uint16_t h;
    switch (t->dtype) {
    case DT_F32:
        memcpy(p, &v, 4);
        break;
    case DT_F16:
        h = fld_f32_to_f16(v);
        memcpy(p, &h, 2);
        break;
    default:
        h = fld_f32_to_bf16(v);
        memcpy(p, &h, 2);
        break;
    }
}

static int64_t load_index(const aclTensor *t, int64_t off)
{
    if (t->dtype == DT_I32) {
        int32_t v;
        memcpy(&v, t->data + off * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, t->data + off * 8, 8);
    return v;
}

static bool is_float(const aclTensor *t)
{
    return t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16;
}

static bool contiguous(const aclTensor *t)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->dims[d] != 1 && t->strides[d] != s)
            return false;
        s *= t->dims[d];
    }
    return true;
}

static bool same_shape(const aclTensor *a, const aclTensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

/* ------------------------------------------------------------------------ */
/* The two aclnn phases                                                     */
/* ------------------------------------------------------------------------ */

static uint64_t workspace_for(uint64_t default_size)
{
    const char *s = getenv("FAKE_ACL_WORKSPACE");
    return s && s[0] ? strtoull(s, NULL, 10) : default_size;
}

/* Phase one's common part: checks the tensors, makes the executor. */
static int make_exec(const char *gws_name, const char *run_name, uint64_t ws_default,
                     const aclTensor *const *ts, int nt, uint64_t *ws, aclOpExecutor **ex)
{
    if (!is_inited())
        return violation(ERR_UNINIT, "%s called before aclInit", gws_name);
    if (!ws || !ex)
        return ERR_NN_NULLPTR;
    for (int i = 0; i < nt; i++) {
        if (!ts[i])
            return ERR_NN_NULLPTR;
        if (ts[i]->magic != TENSOR_MAGIC)
            return violation(ERR_NN_PARAM, "%s: argument %d is not a live aclTensor", gws_name, i);
    }
    if (injected(gws_name))
        return ERR_NN_PARAM;
    aclOpExecutor *e = calloc(1, sizeof *e);
    if (!e)
        return ERR_NN_RUNTIME;
    e->magic = EXEC_MAGIC;
    e->op = run_name;
    e->ws = workspace_for(ws_default);
    for (int i = 0; i < nt; i++)
        e->t[i] = *ts[i];
    e->nt = nt;
    pthread_mutex_lock(&lock);
    live_execs++;
    pthread_mutex_unlock(&lock);
    *ws = e->ws;
    *ex = e;
    logf_("%s ws=%llu", gws_name, (unsigned long long)e->ws);
    return 0;
}

/* Phase two's common part: checks the executor and workspace. */
static int check_run(const char *run_name, void *ws, uint64_t ws_size, aclOpExecutor *e,
                     aclrtStream stream)
{
    if (!is_inited())
        return violation(ERR_UNINIT, "%s called before aclInit", run_name);
    if (!e || e->magic != EXEC_MAGIC)
        return violation(ERR_NN_PARAM, "%s: executor is not live (already run?)", run_name);
    if (strcmp(e->op, run_name) != 0)
        return violation(ERR_NN_PARAM, "%s: executor belongs to %s", run_name, e->op);
    logf_("%s ws=%llu stream=%p", run_name, (unsigned long long)ws_size, stream);
    if (ws_size < e->ws)
        return violation(ERR_NN_PARAM, "%s: workspace of %llu bytes, %llu required", run_name,
                         (unsigned long long)ws_size, (unsigned long long)e->ws);
    if (e->ws > 0) {
        pthread_mutex_lock(&lock);
        long b = ws ? find_block(ws, (size_t)ws_size) : -1;
        pthread_mutex_unlock(&lock);
        if (b < 0)
            return violation(ERR_NN_PARAM, "%s: workspace %p is not aclrtMalloc memory", run_name,
                             ws);
    }
    return 0;
}

static void end_run(aclOpExecutor *e)
{
    e->magic = 0;
    free(e);
    pthread_mutex_lock(&lock);
    live_execs--;
    pthread_mutex_unlock(&lock);
}

/* Runs compute(e) after the checks; the executor is spent either way. */
static int run_exec(const char *run_name, void *ws, uint64_t ws_size, aclOpExecutor *e,
                    aclrtStream stream, int (*compute)(aclOpExecutor *))
{
    int rc = check_run(run_name, ws, ws_size, e, stream);
    if (rc != 0)
        return rc;
    rc = injected(run_name) ? ERR_NN_RUNTIME : compute(e);
    end_run(e);
    return rc;
}

/* ---- RmsNorm / AddRmsNorm ------------------------------------------------ */

static int rms_check(const char *fn, const aclTensor *x, const aclTensor *g, const aclTensor *y,
                     const aclTensor *rstd)
{
    if (!is_float(x) || x->dtype != g->dtype || x->dtype != y->dtype || rstd->dtype != DT_F32 ||
        !same_shape(x, y) || g->ndim != 1 || x->ndim < 1 || g->dims[0] != x->dims[x->ndim - 1] ||
        numel(rstd) * g->dims[0] != numel(x))
        return violation(ERR_NN_PARAM, "%s: inconsistent tensors", fn);
    if (!contiguous(x) || !contiguous(y))
        return violation(ERR_NN_PARAM, "%s: non-contiguous tensor", fn);
    return 0;
}

/* t[0] x1, t[1] x2 or NULL-equivalent, ... laid out by the callers below. */
static int rms_compute(aclOpExecutor *e, bool add)
{
    const aclTensor *x1 = &e->t[0], *x2 = add ? &e->t[1] : NULL, *g = &e->t[add ? 2 : 1],
                    *y = &e->t[add ? 3 : 2], *rstd = &e->t[add ? 4 : 3],
                    *xo = add ? &e->t[5] : NULL;
    const int64_t H = g->dims[0], rows = numel(x1) / H;
    float *s = malloc((size_t)H * sizeof *s);
    if (!s)
        return ERR_NN_RUNTIME;
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0;
        for (int64_t j = 0; j < H; j++) {
            float v = load(x1, elem_at(x1, r * H + j));
            if (add)
                v = round_to(x1->dtype, v + load(x2, elem_at(x2, r * H + j)));
            s[j] = v;
            sum += (double)v * v;
        }
        float inv = 1.0f / sqrtf((float)(sum / (double)H) + (float)e->eps);
        for (int64_t j = 0; j < H; j++) {
            if (add)
                store(xo, elem_at(xo, r * H + j), s[j]);
            store(y, elem_at(y, r * H + j),
                  s[j] * inv * (load(g, elem_at(g, j)) + (e->iarg == 1 ? 1.0f : 0.0f)));
        }
        store(rstd, elem_at(rstd, r), inv);
    }
    free(s);
    return 0;
}

static int rms_plain(aclOpExecutor *e)
{
    return rms_compute(e, false);
}

static int rms_add(aclOpExecutor *e)
{
    return rms_compute(e, true);
}

EXPORT int aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double eps,
                                        const aclTensor *y, const aclTensor *rstd, uint64_t *ws,
                                        aclOpExecutor **ex);
int aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double eps,
                                 const aclTensor *y, const aclTensor *rstd, uint64_t *ws,
                                 aclOpExecutor **ex)
{
    const aclTensor *ts[] = {x, gamma, y, rstd};
    const char *fn = "aclnnRmsNormGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnRmsNorm", 2048, ts, 4, ws, ex);
    if (rc != 0)
        return rc;
    if ((rc = rms_check(fn, x, gamma, y, rstd)) != 0) {
        end_run(*ex);
        *ex = NULL;
        return rc;
    }
    (*ex)->eps = eps;
    return 0;
}

EXPORT int aclnnRmsNorm(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnRmsNorm(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnRmsNorm", ws, ws_size, e, stream, rms_plain);
}

EXPORT int aclnnAddRmsNormGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2,
                                           const aclTensor *gamma, double eps, const aclTensor *y,
                                           const aclTensor *rstd, const aclTensor *xo, uint64_t *ws,
                                           aclOpExecutor **ex);
int aclnnAddRmsNormGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2,
                                    const aclTensor *gamma, double eps, const aclTensor *y,
                                    const aclTensor *rstd, const aclTensor *xo, uint64_t *ws,
                                    aclOpExecutor **ex)
{
    const aclTensor *ts[] = {x1, x2, gamma, y, rstd, xo};
    const char *fn = "aclnnAddRmsNormGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnAddRmsNorm", 4096, ts, 6, ws, ex);
    if (rc != 0)
        return rc;
    rc = rms_check(fn, x1, gamma, y, rstd);
    if (rc == 0 && (!same_shape(x1, x2) || !same_shape(x1, xo) || x2->dtype != x1->dtype ||
                    xo->dtype != x1->dtype || !contiguous(x2) || !contiguous(xo)))
        rc = violation(ERR_NN_PARAM, "%s: inconsistent x2/xOut", fn);
    if (rc != 0) {
        end_run(*ex);
        *ex = NULL;
        return rc;
    }
    (*ex)->eps = eps;
    return 0;
}

EXPORT int aclnnAddRmsNorm(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnAddRmsNorm(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnAddRmsNorm", ws, ws_size, e, stream, rms_add);
}

/* ---- SwiGlu --------------------------------------------------------------- */

static int swiglu_compute(aclOpExecutor *e)
{
    const aclTensor *x = &e->t[0], *out = &e->t[1];
    const int64_t d = out->dims[out->ndim - 1], rows = numel(out) / d;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++) {
            float a = load(x, elem_at(x, r * 2 * d + j));
            float b = load(x, elem_at(x, r * 2 * d + d + j));
            store(out, elem_at(out, r * d + j), a / (1.0f + expf(-a)) * b);
        }
    return 0;
}

EXPORT int aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, const aclTensor *out,
                                       uint64_t *ws, aclOpExecutor **ex);
int aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, const aclTensor *out, uint64_t *ws,
                                aclOpExecutor **ex)
{
    const aclTensor *ts[] = {x, out};
    const char *fn = "aclnnSwiGluGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnSwiGlu", 0, ts, 2, ws, ex);
    if (rc != 0)
        return rc;
    bool ok = is_float(x) && x->dtype == out->dtype && x->ndim == out->ndim && x->ndim >= 1 &&
              (dim == -1 || dim == x->ndim - 1) && contiguous(x) && contiguous(out);
    for (int i = 0; ok && i < x->ndim; i++)
        ok = out->dims[i] * (i == x->ndim - 1 ? 2 : 1) == x->dims[i];
    if (!ok) {
        end_run(*ex);
        *ex = NULL;
        return violation(ERR_NN_PARAM, "%s: inconsistent tensors or dim %lld", fn, (long long)dim);
    }
    return 0;
}

EXPORT int aclnnSwiGlu(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnSwiGlu(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnSwiGlu", ws, ws_size, e, stream, swiglu_compute);
}

/* ---- IndexSelect (dim 0) -------------------------------------------------- */

static int index_select_compute(aclOpExecutor *e)
{
    const aclTensor *self = &e->t[0], *index = &e->t[1], *out = &e->t[2];
    const int64_t n = index->dims[0], inner = numel(self) / self->dims[0];
    for (int64_t k = 0; k < n; k++) {
        int64_t p = load_index(index, elem_at(index, k));
        if (p < 0 || p >= self->dims[0]) {
            set_err("fake_acl: aclnnIndexSelect: index %lld out of range [0, %lld)", (long long)p,
                    (long long)self->dims[0]);
            return ERR_NN_RUNTIME;
        }
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t p = load_index(index, elem_at(index, k));
        for (int64_t j = 0; j < inner; j++)
            store(out, elem_at(out, k * inner + j), load(self, elem_at(self, p * inner + j)));
    }
    return 0;
}

EXPORT int aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim,
                                            const aclTensor *index, aclTensor *out, uint64_t *ws,
                                            aclOpExecutor **ex);
int aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                     aclTensor *out, uint64_t *ws, aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self, index, out};
    const char *fn = "aclnnIndexSelectGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnIndexSelect", 512, ts, 3, ws, ex);
    if (rc != 0)
        return rc;
    bool ok = dim == 0 && is_float(self) && self->dtype == out->dtype && index->ndim == 1 &&
              (index->dtype == DT_I32 || index->dtype == DT_I64) && out->ndim == self->ndim &&
              out->dims[0] == index->dims[0];
    for (int i = 1; ok && i < self->ndim; i++)
        ok = out->dims[i] == self->dims[i];
    if (!ok) {
        end_run(*ex);
        *ex = NULL;
        return violation(ERR_NN_PARAM, "%s: inconsistent tensors", fn);
    }
    /* The operator makes a non-contiguous self contiguous first: an expanded
     * (zero-stride) view would be copied in full, on every call. */
    for (int i = 0; i < self->ndim; i++)
        if (self->dims[i] > 1 && self->strides[i] == 0) {
            end_run(*ex);
            *ex = NULL;
            return violation(ERR_NN_PARAM,
                             "%s: self has a zero stride in dim %d (an expanded "
                             "view: copied in full by the real operator)",
                             fn, i);
        }
    return 0;
}

EXPORT int aclnnIndexSelect(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnIndexSelect(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnIndexSelect", ws, ws_size, e, stream, index_select_compute);
}

/* ---- RotaryPositionEmbedding ----------------------------------------------- */

/* Offset in a broadcast operand (dims of size 1 repeat) of x's element i. */
static int64_t bcast_at(const aclTensor *x, const aclTensor *c, int64_t i)
{
    int64_t off = c->offset;
    for (int d = x->ndim - 1; d >= 0; d--) {
        int64_t k = i % x->dims[d];
        i /= x->dims[d];
        off += (c->dims[d] == 1 ? 0 : k) * c->strides[d];
    }
    return off;
}

static int rope_compute(aclOpExecutor *e)
{
    const aclTensor *x = &e->t[0], *cs = &e->t[1], *sn = &e->t[2], *out = &e->t[3];
    const int64_t D = x->dims[x->ndim - 1], n = numel(x), half = D / 2;
    const int64_t total = n;
    float *y = malloc((size_t)total * sizeof *y);
    if (!y)
        return ERR_NN_RUNTIME;
    for (int64_t i = 0; i < total; i++) {
        int64_t j = i % D, base = i - j, partner;
        float sign;
        if (e->iarg == 0) {
            partner = j < half ? j + half : j - half;
            sign = j < half ? -1.0f : 1.0f;
        } else {
            partner = (j % 2 == 0) ? j + 1 : j - 1;
            sign = (j % 2 == 0) ? -1.0f : 1.0f;
        }
        float xv = load(x, elem_at(x, i)), pv = load(x, elem_at(x, base + partner));
        y[i] = xv * load(cs, bcast_at(x, cs, i)) + sign * pv * load(sn, bcast_at(x, sn, i));
    }
    for (int64_t i = 0; i < total; i++)
        store(out, elem_at(out, i), y[i]);
    free(y);
    return 0;
}

EXPORT int aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor *x, const aclTensor *cos,
                                                        const aclTensor *sin, int64_t mode,
                                                        aclTensor *out, uint64_t *ws,
                                                        aclOpExecutor **ex);
int aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor *x, const aclTensor *cos,
                                                 const aclTensor *sin, int64_t mode, aclTensor *out,
                                                 uint64_t *ws, aclOpExecutor **ex)
{
    const aclTensor *ts[] = {x, cos, sin, out};
    const char *fn = "aclnnRotaryPositionEmbeddingGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnRotaryPositionEmbedding", 8192, ts, 4, ws, ex);
    if (rc != 0)
        return rc;
    /* The documented limits of the releases the plugin targets: 4-D x (BSND:
     * [B, S, N, D], cos/sin [1 or B, S, 1, D]), D even and < 896, out
     * contiguous. (Some newer releases also take 3-D; the older ones refuse it.) */
    int64_t D = x->dims[x->ndim - 1];
    bool ok = x->ndim == 4 && cos->ndim == 4 && cos->dims[2] == 1 && cos->dims[1] == x->dims[1] &&
              is_float(x) && cos->dtype == x->dtype && sin->dtype == x->dtype &&
              out->dtype == x->dtype && same_shape(x, out) && same_shape(cos, sin) &&
              cos->ndim == x->ndim && D % 2 == 0 && D < 896 && (mode == 0 || mode == 1) &&
              contiguous(out);
    for (int i = 0; ok && i < x->ndim; i++)
        ok = cos->dims[i] == 1 || cos->dims[i] == x->dims[i];
    ok = ok && cos->dims[x->ndim - 1] == D;
    if (!ok) {
        end_run(*ex);
        *ex = NULL;
        return violation(ERR_NN_PARAM, "%s: inconsistent tensors or mode %lld", fn,
                         (long long)mode);
    }
    (*ex)->iarg = mode;
    return 0;
}

EXPORT int aclnnRotaryPositionEmbedding(void *ws, uint64_t ws_size, aclOpExecutor *e,
                                        aclrtStream stream);
int aclnnRotaryPositionEmbedding(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnRotaryPositionEmbedding", ws, ws_size, e, stream, rope_compute);
}

/* ---- RopeWithSinCosCache (Atlas A2/A3; rope mode, no mrope) ----------------- */

static int reject(aclOpExecutor **ex, const char *fn, const char *what);

static int rope_cache_compute(aclOpExecutor *e)
{
    const aclTensor *pos = &e->t[0], *cache = &e->t[3];
    const int64_t hs = e->iarg, rot = cache->dims[1], half = rot / 2, T = pos->dims[0];
    const bool neox = e->eps != 0.0;
    for (int which = 0; which < 2; which++) {
        const aclTensor *in = &e->t[1 + which], *out = &e->t[4 + which];
        const int64_t heads = in->dims[1] / hs;
        for (int64_t t = 0; t < T; t++) {
            int64_t p = load_index(pos, elem_at(pos, t));
            if (p < 0 || p >= cache->dims[0]) {
                set_err("fake_acl: aclnnRopeWithSinCosCache: position %lld out of range",
                        (long long)p);
                return ERR_NN_RUNTIME;
            }
        }
        float *row = malloc((size_t)hs * sizeof *row);
        if (!row)
            return ERR_NN_RUNTIME;
        for (int64_t t = 0; t < T; t++) {
            int64_t p = load_index(pos, elem_at(pos, t));
            for (int64_t hd = 0; hd < heads; hd++) {
                int64_t base = t * in->dims[1] + hd * hs;
                for (int64_t j = 0; j < hs; j++)
                    row[j] = load(in, elem_at(in, base + j));
                for (int64_t i = 0; i < half; i++) {
                    float c = load(cache, elem_at(cache, p * rot + i));
                    float sn = load(cache, elem_at(cache, p * rot + half + i));
                    int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                    float x1 = row[a], x2 = row[b];
                    row[a] = x1 * c - x2 * sn;
                    row[b] = x2 * c + x1 * sn;
                }
                for (int64_t j = 0; j < hs; j++)
                    store(out, elem_at(out, base + j), row[j]);
            }
        }
        free(row);
    }
    return 0;
}

EXPORT int aclnnRopeWithSinCosCacheGetWorkspaceSize(const aclTensor *positions,
                                                    const aclTensor *query_in,
                                                    const aclTensor *key_in, const aclTensor *cache,
                                                    const void *mrope, int64_t head_size, bool neox,
                                                    aclTensor *query_out, aclTensor *key_out,
                                                    uint64_t *ws, aclOpExecutor **ex);
int aclnnRopeWithSinCosCacheGetWorkspaceSize(const aclTensor *positions, const aclTensor *query_in,
                                             const aclTensor *key_in, const aclTensor *cache,
                                             const void *mrope, int64_t head_size, bool neox,
                                             aclTensor *query_out, aclTensor *key_out, uint64_t *ws,
                                             aclOpExecutor **ex)
{
    const aclTensor *ts[] = {positions, query_in, key_in, cache, query_out, key_out};
    const char *fn = "aclnnRopeWithSinCosCacheGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnRopeWithSinCosCache", 1024, ts, 6, ws, ex);
    if (rc != 0)
        return rc;
    /* As the operator checks them: 2-D query/key/cache of one dtype, outputs
     * of the inputs' shapes, a head size dividing the rows; rows of q/k may be
     * strided, elements within a row not. */
    bool ok = !mrope && head_size > 0 && positions->ndim == 1 &&
              (positions->dtype == DT_I32 || positions->dtype == DT_I64) && query_in->ndim == 2 &&
              key_in->ndim == 2 && cache->ndim == 2 && is_float(query_in) &&
              key_in->dtype == query_in->dtype && cache->dtype == query_in->dtype &&
              query_out->dtype == query_in->dtype && key_out->dtype == query_in->dtype &&
              same_shape(query_in, query_out) && same_shape(key_in, key_out) &&
              key_in->dims[0] == query_in->dims[0] && positions->dims[0] == query_in->dims[0] &&
              query_in->dims[1] % head_size == 0 && key_in->dims[1] % head_size == 0 &&
              cache->dims[1] % 2 == 0 && cache->dims[1] <= head_size && query_in->strides[1] == 1 &&
              key_in->strides[1] == 1 && query_out->strides[1] == 1 && key_out->strides[1] == 1;
    if (!ok)
        return reject(ex, fn, "inconsistent tensors");
    (*ex)->iarg = head_size;
    (*ex)->eps = neox ? 1.0 : 0.0;
    return 0;
}

EXPORT int aclnnRopeWithSinCosCache(void *ws, uint64_t ws_size, aclOpExecutor *e,
                                    aclrtStream stream);
int aclnnRopeWithSinCosCache(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnRopeWithSinCosCache", ws, ws_size, e, stream, rope_cache_compute);
}

/* ---- InplaceCopy ----------------------------------------------------------- */

static int copy_compute(aclOpExecutor *e)
{
    const aclTensor *dst = &e->t[0], *src = &e->t[1];
    const int64_t n = numel(dst);
    for (int64_t i = 0; i < n; i++)
        store(dst, elem_at(dst, i), load(src, elem_at(src, i)));
    return 0;
}

EXPORT int aclnnInplaceCopyGetWorkspaceSize(aclTensor *self, const aclTensor *src, uint64_t *ws,
                                            aclOpExecutor **ex);
int aclnnInplaceCopyGetWorkspaceSize(aclTensor *self, const aclTensor *src, uint64_t *ws,
                                     aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self, src};
    const char *fn = "aclnnInplaceCopyGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnInplaceCopy", 0, ts, 2, ws, ex);
    if (rc != 0)
        return rc;
    if (!same_shape(self, src) || !is_float(self) || !is_float(src)) {
        end_run(*ex);
        *ex = NULL;
        return violation(ERR_NN_PARAM, "%s: inconsistent tensors", fn);
    }
    return 0;
}

EXPORT int aclnnInplaceCopy(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnInplaceCopy(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnInplaceCopy", ws, ws_size, e, stream, copy_compute);
}

/* ------------------------------------------------------------------------ */
/* Scalars (libnnopbase in CANN)                                            */
/* ------------------------------------------------------------------------ */

EXPORT aclScalar *aclCreateScalar(void *value, int dtype);
aclScalar *aclCreateScalar(void *value, int dtype)
{
    if (injected("aclCreateScalar"))
        return NULL;
    double v;
    uint16_t h;
    switch (value ? dtype : -1) {
    case DT_F32: {
        float f;
        memcpy(&f, value, 4);
        v = f;
        break;
    }
    case DT_F16:
        memcpy(&h, value, 2);
        v = fld_f16_to_f32(h);
        break;
    case DT_BF16:
        memcpy(&h, value, 2);
        v = fld_bf16_to_f32(h);
        break;
    case DT_I32: {
        int32_t i;
        memcpy(&i, value, 4);
        v = i;
        break;
    }
    case DT_I64: {
        int64_t i;
        memcpy(&i, value, 8);
        v = (double)i;
        break;
    }
    default:
        violation(0, "aclCreateScalar: value %p of dtype %d", value, dtype);
        return NULL;
    }
    aclScalar *sc = calloc(1, sizeof *sc);
    if (!sc)
        return NULL;
    sc->magic = SCALAR_MAGIC;
    sc->dtype = dtype;
    sc->value = v;
    pthread_mutex_lock(&lock);
    live_scalars++;
    pthread_mutex_unlock(&lock);
    return sc;
}

EXPORT int aclDestroyScalar(const aclScalar *sc);
int aclDestroyScalar(const aclScalar *sc)
{
    if (!sc || sc->magic != SCALAR_MAGIC)
        return violation(ERR_NN_PARAM, "aclDestroyScalar of a non-scalar %p", (const void *)sc);
    ((aclScalar *)sc)->magic = 0;
    free((void *)sc);
    pthread_mutex_lock(&lock);
    live_scalars--;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Phase one with scalar arguments: checks them and keeps their values. */
static int make_exec_s(const char *gws_name, const char *run_name, uint64_t ws_default,
                       const aclTensor *const *ts, int nt, const aclScalar *const *ss, int ns,
                       uint64_t *ws, aclOpExecutor **ex)
{
    for (int i = 0; i < ns; i++) {
        if (!ss[i])
            return ERR_NN_NULLPTR;
        if (ss[i]->magic != SCALAR_MAGIC)
            return violation(ERR_NN_PARAM, "%s: scalar %d is not a live aclScalar", gws_name, i);
    }
    int rc = make_exec(gws_name, run_name, ws_default, ts, nt, ws, ex);
    if (rc != 0)
        return rc;
    for (int i = 0; i < ns && i < 2; i++)
        (*ex)->sv[i] = ss[i]->value;
    return 0;
}

/* Rejects the executor made by phase one: a protocol violation by the caller. */
static int reject(aclOpExecutor **ex, const char *fn, const char *what)
{
    end_run(*ex);
    *ex = NULL;
    return violation(ERR_NN_PARAM, "%s: %s", fn, what);
}

/* out has the broadcast shape of a and b (same rank; dims equal or 1). */
static bool broadcasts(const aclTensor *a, const aclTensor *b, const aclTensor *out)
{
    if (a->ndim != out->ndim || b->ndim != out->ndim)
        return false;
    for (int i = 0; i < out->ndim; i++) {
        int64_t want = a->dims[i] == 1 ? b->dims[i] : a->dims[i];
        if ((a->dims[i] != 1 && b->dims[i] != 1 && a->dims[i] != b->dims[i]) ||
            out->dims[i] != want)
            return false;
    }
    return true;
}

/* ---- Cast ------------------------------------------------------------------ */

static int cast_compute(aclOpExecutor *e)
{
    const aclTensor *x = &e->t[0], *out = &e->t[1];
    for (int64_t i = 0, n = numel(out); i < n; i++)
        store(out, elem_at(out, i), load(x, elem_at(x, i)));
    return 0;
}

EXPORT int aclnnCastGetWorkspaceSize(const aclTensor *self, int dtype, aclTensor *out, uint64_t *ws,
                                     aclOpExecutor **ex);
int aclnnCastGetWorkspaceSize(const aclTensor *self, int dtype, aclTensor *out, uint64_t *ws,
                              aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self, out};
    const char *fn = "aclnnCastGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnCast", 0, ts, 2, ws, ex);
    if (rc != 0)
        return rc;
    if (!is_float(self) || !is_float(out) || out->dtype != dtype || !same_shape(self, out))
        return reject(ex, fn, "inconsistent tensors or dtype");
    return 0;
}

EXPORT int aclnnCast(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnCast(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnCast", ws, ws_size, e, stream, cast_compute);
}

/* ---- Silu, GeluV2 ------------------------------------------------------------ */

static int silu_compute(aclOpExecutor *e)
{
    const aclTensor *x = &e->t[0], *out = &e->t[1];
    for (int64_t i = 0, n = numel(out); i < n; i++) {
        float a = load(x, elem_at(x, i));
        store(out, elem_at(out, i), a / (1.0f + expf(-a)));
    }
    return 0;
}

/* PyTorch's GELU forms (vLLM's CUDA kernels compute the same), in float32. */
static int gelu_compute(aclOpExecutor *e)
{
    const aclTensor *x = &e->t[0], *out = &e->t[1];
    for (int64_t i = 0, n = numel(out); i < n; i++) {
        float a = load(x, elem_at(x, i)), v;
        if (e->iarg == 0) {
            v = a * 0.5f * (1.0f + erff(a * (float)M_SQRT1_2));
        } else {
            const float cube = a * a * a;
            v = 0.5f * a *
                (1.0f + tanhf((float)(M_SQRT2 * M_2_SQRTPI * 0.5) * (a + 0.044715f * cube)));
        }
        store(out, elem_at(out, i), v);
    }
    return 0;
}

/* Unary float op: self and out of one dtype and shape (non-contiguous allowed). */
static bool unary_ok(const aclTensor *x, const aclTensor *out)
{
    return is_float(x) && x->dtype == out->dtype && same_shape(x, out);
}

EXPORT int aclnnSiluGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *ws,
                                     aclOpExecutor **ex);
int aclnnSiluGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *ws,
                              aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self, out};
    const char *fn = "aclnnSiluGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnSilu", 0, ts, 2, ws, ex);
    if (rc != 0)
        return rc;
    return unary_ok(self, out) ? 0 : reject(ex, fn, "inconsistent tensors");
}

EXPORT int aclnnSilu(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnSilu(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnSilu", ws, ws_size, e, stream, silu_compute);
}

EXPORT int aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y,
                                       uint64_t *ws, aclOpExecutor **ex);
int aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y, uint64_t *ws,
                                aclOpExecutor **ex)
{
    const aclTensor *ts[] = {x, y};
    const char *fn = "aclnnGeluV2GetWorkspaceSize";
    int rc = make_exec(fn, "aclnnGeluV2", 1024, ts, 2, ws, ex);
    if (rc != 0)
        return rc;
    if (!unary_ok(x, y) || (approximate != 0 && approximate != 1))
        return reject(ex, fn, "inconsistent tensors or approximate");
    (*ex)->iarg = approximate;
    logf_("%s approximate=%lld", fn, (long long)approximate);
    return 0;
}

EXPORT int aclnnGeluV2(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnGeluV2(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnGeluV2", ws, ws_size, e, stream, gelu_compute);
}

/* ---- Mul, Add, Adds, InplaceFillScalar ----------------------------------------- */

static int binary_compute(aclOpExecutor *e, bool add)
{
    const aclTensor *a = &e->t[0], *b = &e->t[1], *out = &e->t[2];
    const float alpha = (float)e->sv[0];
    for (int64_t i = 0, n = numel(out); i < n; i++) {
        float x = load(a, bcast_at(out, a, i)), y = load(b, bcast_at(out, b, i));
        store(out, elem_at(out, i), add ? x + alpha * y : x * y);
    }
    return 0;
}

static int mul_compute(aclOpExecutor *e)
{
    return binary_compute(e, false);
}

static int add_compute(aclOpExecutor *e)
{
    return binary_compute(e, true);
}

EXPORT int aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                    uint64_t *ws, aclOpExecutor **ex);
int aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                             uint64_t *ws, aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self, other, out};
    const char *fn = "aclnnMulGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnMul", 0, ts, 3, ws, ex);
    if (rc != 0)
        return rc;
    if (!is_float(self) || !is_float(other) || !is_float(out) || !broadcasts(self, other, out))
        return reject(ex, fn, "inconsistent tensors (dtypes or broadcast shapes)");
    return 0;
}

EXPORT int aclnnMul(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnMul(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnMul", ws, ws_size, e, stream, mul_compute);
}

EXPORT int aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
                                    const aclScalar *alpha, aclTensor *out, uint64_t *ws,
                                    aclOpExecutor **ex);
int aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha,
                             aclTensor *out, uint64_t *ws, aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self, other, out};
    const aclScalar *ss[] = {alpha};
    const char *fn = "aclnnAddGetWorkspaceSize";
    int rc = make_exec_s(fn, "aclnnAdd", 256, ts, 3, ss, 1, ws, ex);
    if (rc != 0)
        return rc;
    if (!is_float(self) || !is_float(other) || !is_float(out) || !broadcasts(self, other, out))
        return reject(ex, fn, "inconsistent tensors (dtypes or broadcast shapes)");
    return 0;
}

EXPORT int aclnnAdd(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnAdd(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnAdd", ws, ws_size, e, stream, add_compute);
}

static int adds_compute(aclOpExecutor *e)
{
    const aclTensor *x = &e->t[0], *out = &e->t[1];
    const float other = (float)e->sv[0], alpha = (float)e->sv[1];
    for (int64_t i = 0, n = numel(out); i < n; i++)
        store(out, elem_at(out, i), load(x, elem_at(x, i)) + alpha * other);
    return 0;
}

EXPORT int aclnnAddsGetWorkspaceSize(const aclTensor *self, const aclScalar *other,
                                     const aclScalar *alpha, aclTensor *out, uint64_t *ws,
                                     aclOpExecutor **ex);
int aclnnAddsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, const aclScalar *alpha,
                              aclTensor *out, uint64_t *ws, aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self, out};
    const aclScalar *ss[] = {other, alpha};
    const char *fn = "aclnnAddsGetWorkspaceSize";
    int rc = make_exec_s(fn, "aclnnAdds", 0, ts, 2, ss, 2, ws, ex);
    if (rc != 0)
        return rc;
    if (!is_float(self) || !is_float(out) || !same_shape(self, out))
        return reject(ex, fn, "inconsistent tensors");
    return 0;
}

EXPORT int aclnnAdds(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnAdds(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnAdds", ws, ws_size, e, stream, adds_compute);
}

static int fill_compute(aclOpExecutor *e)
{
    const aclTensor *t = &e->t[0];
    for (int64_t i = 0, n = numel(t); i < n; i++)
        store(t, elem_at(t, i), (float)e->sv[0]);
    return 0;
}

EXPORT int aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *self, const aclScalar *value,
                                                  uint64_t *ws, aclOpExecutor **ex);
int aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *self, const aclScalar *value, uint64_t *ws,
                                           aclOpExecutor **ex)
{
    const aclTensor *ts[] = {self};
    const aclScalar *ss[] = {value};
    const char *fn = "aclnnInplaceFillScalarGetWorkspaceSize";
    int rc = make_exec_s(fn, "aclnnInplaceFillScalar", 0, ts, 1, ss, 1, ws, ex);
    if (rc != 0)
        return rc;
    return is_float(self) ? 0 : reject(ex, fn, "not a float tensor");
}

EXPORT int aclnnInplaceFillScalar(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnInplaceFillScalar(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnInplaceFillScalar", ws, ws_size, e, stream, fill_compute);
}

/* ---- GemmaRmsNorm ------------------------------------------------------------ */

EXPORT int aclnnGemmaRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double eps,
                                             const aclTensor *y, const aclTensor *rstd,
                                             uint64_t *ws, aclOpExecutor **ex);
int aclnnGemmaRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double eps,
                                      const aclTensor *y, const aclTensor *rstd, uint64_t *ws,
                                      aclOpExecutor **ex)
{
    const aclTensor *ts[] = {x, gamma, y, rstd};
    const char *fn = "aclnnGemmaRmsNormGetWorkspaceSize";
    int rc = make_exec(fn, "aclnnGemmaRmsNorm", 2048, ts, 4, ws, ex);
    if (rc != 0)
        return rc;
    if ((rc = rms_check(fn, x, gamma, y, rstd)) != 0) {
        end_run(*ex);
        *ex = NULL;
        return rc;
    }
    (*ex)->eps = eps;
    (*ex)->iarg = 1; /* scale by 1 + gamma */
    return 0;
}

EXPORT int aclnnGemmaRmsNorm(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);
int aclnnGemmaRmsNorm(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream)
{
    return run_exec("aclnnGemmaRmsNorm", ws, ws_size, e, stream, rms_plain);
}
