/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture plugin "fakedev": a CUDA device made of CPU memory, so that
 * `fldispatch verify --device cuda` and `bench --device cuda` can run here
 * (tests/test_verify.c, tests/test_bench.c). Loaded only through
 * VLLM_FL_PLUGIN_MODULES=$FLD_BUILDDIR/tests/fakedev/fld-fakedev.so.
 *
 * Device hooks for FLD_DEVICE_CUDA: malloc, memcpy, free. Every allocation
 * is recorded, so a copy whose device side is not inside a live allocation
 * fails (a bug of the tool, not of a kernel), a free of an unknown pointer
 * fails, and allocations still live when the plugin is unloaded are
 * reported on stderr ("fakedev: N device allocations not freed").
 *
 * Implementations, CUDA only, every dtype:
 *   vendor.fakedev      silu_and_mul, rms_norm, rotary_embedding: correct
 *                       within vLLM's tolerances (float32 arithmetic rounded
 *                       where vLLM rounds: the activation before its
 *                       product, 16-bit rotary products and sums; rms_norm
 *                       sums in double and takes float32 weights and
 *                       residuals, as reference.c);
 *   vendor.fakedev_bad  only with FLD_FAKEDEV_BAD=1:
 *                       silu_and_mul 5% too large (a wrong result),
 *                       rms_norm right values, but it also writes the
 *                       element just past the end of out's storage (row
 *                       padding included), into verify's guard bytes.
 * FLD_FAKEDEV_UNAVAILABLE=1 makes the device and its implementations
 * unavailable, with a reason naming the variable. FLD_FAKEDEV_FAIL_SYNC=1
 * makes every kernel "fail asynchronously", as a GPU kernel does: the kernel
 * returns FLD_OK and the next synchronize hook reports the error.
 * FLD_FAKEDEV_COUNT_INPUTS=1: at unload, "fakedev: silu_and_mul read N
 * distinct inputs" on stderr (how many tensor sets bench took in turn).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/half.h>
#include <fldispatch/plugin.h>

#define OFF_REASON "fake device switched off by FLD_FAKEDEV_UNAVAILABLE"

/* ---- memory ------------------------------------------------------------------ */

struct block {
    char *p;
    size_t size;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct block *blocks;
static size_t n_blocks, cap_blocks;

static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

static bool device_available(const char **reason)
{
    if (env_on("FLD_FAKEDEV_UNAVAILABLE")) {
        *reason = OFF_REASON;
        return false;
    }
    return true;
}

static int fake_alloc(int device_id, size_t bytes, void **ptr)
{
    if (device_id != 0) {
        fld_set_error("fakedev: no device %d (only device 0)", device_id);
        return FLD_EINVAL;
    }
    char *p = malloc(bytes);
    if (!p) {
        fld_set_error("fakedev: out of memory for %zu bytes", bytes);
        return FLD_ENOMEM;
    }
    pthread_mutex_lock(&lock);
    if (n_blocks == cap_blocks) {
        size_t cap = cap_blocks ? 2 * cap_blocks : 64;
        struct block *v = realloc(blocks, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&lock);
            free(p);
            fld_set_error("fakedev: out of memory for the allocation table");
            return FLD_ENOMEM;
        }
        blocks = v;
        cap_blocks = cap;
    }
    blocks[n_blocks++] = (struct block){p, bytes};
    pthread_mutex_unlock(&lock);
    /* fresh device memory is not zero: garbage shows reads of unwritten bytes */
    memset(p, 0x7f, bytes);
    *ptr = p;
    return FLD_OK;
}

static int fake_free(int device_id, void *ptr)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_blocks; i++) {
        if (blocks[i].p == ptr) {
            blocks[i] = blocks[--n_blocks];
            pthread_mutex_unlock(&lock);
            free(ptr);
            return FLD_OK;
        }
    }
    pthread_mutex_unlock(&lock);
    fld_set_error("fakedev: free of %p, which is not a live device allocation", ptr);
    return FLD_EINVAL;
}

/* Whether [p, p + n) lies inside one live allocation. */
static bool on_device(const void *p, size_t n)
{
    const char *c = p;
    bool inside = false;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_blocks && !inside; i++)
        inside = c >= blocks[i].p && n <= blocks[i].size &&
                 (size_t)(c - blocks[i].p) <= blocks[i].size - n;
    pthread_mutex_unlock(&lock);
    return inside;
}

static int fake_copy(int device_id, void *dst, const void *src, size_t bytes, fld_copy_kind kind)
{
    const bool dst_dev = kind != FLD_COPY_DEVICE_TO_HOST, src_dev = kind != FLD_COPY_HOST_TO_DEVICE;
    if ((dst_dev && !on_device(dst, bytes)) || (src_dev && !on_device(src, bytes))) {
        fld_set_error("fakedev: copy of %zu bytes (kind %d): the %s range at %p is not inside a "
                      "live device allocation",
                      bytes, (int)kind,
                      dst_dev && !on_device(dst, bytes) ? "destination" : "source",
                      dst_dev && !on_device(dst, bytes) ? dst : src);
        return FLD_EINVAL;
    }
    memmove(dst, src, bytes);
    return FLD_OK;
}

/* A kernel error waiting for the next synchronisation (FLD_FAKEDEV_FAIL_SYNC). */
static atomic_bool pending_error;

static void note_launch(void)
{
    if (env_on("FLD_FAKEDEV_FAIL_SYNC"))
        atomic_store(&pending_error, true);
}

static int fake_synchronize(int device_id)
{
    if (atomic_exchange(&pending_error, false)) {
        fld_set_error("fakedev: a kernel failed asynchronously (FLD_FAKEDEV_FAIL_SYNC)");
        return FLD_EIMPL;
    }
    return FLD_OK;
}

__attribute__((destructor)) static void report_leaks(void)
{
    if (n_blocks)
        fprintf(stderr, "fakedev: %zu device allocations not freed\n", n_blocks);
    free(blocks);
    blocks = NULL;
    n_blocks = cap_blocks = 0;
}

/* ---- element access ------------------------------------------------------------- */

static float load(const void *base, int64_t i, int dt)
{
    switch (dt) {
    case 1:
        return fld_f16_to_f32(((const uint16_t *)base)[i]);
    case 2:
        return fld_bf16_to_f32(((const uint16_t *)base)[i]);
    default:
        return ((const float *)base)[i];
    }
}

static void store(void *base, int64_t i, int dt, float v)
{
    switch (dt) {
    case 1:
        ((uint16_t *)base)[i] = fld_f32_to_f16(v);
        break;
    case 2:
        ((uint16_t *)base)[i] = fld_f32_to_bf16(v);
        break;
    default:
        ((float *)base)[i] = v;
        break;
    }
}

static size_t elem_size(int dt)
{
    return dt == 0 ? 4 : 2;
}

/* v rounded to dtype dt (vLLM rounds 16-bit activations and rotary steps). */
static float round_to(int dt, float v)
{
    if (dt == 1)
        return fld_f16_to_f32(fld_f32_to_f16(v));
    if (dt == 2)
        return fld_bf16_to_f32(fld_f32_to_bf16(v));
    return v;
}

/* ---- kernels ------------------------------------------------------------------------ */

/* Distinct silu_and_mul input addresses seen (FLD_FAKEDEV_COUNT_INPUTS). */
enum { MAX_INPUTS = 1024 };
static const void *inputs_seen[MAX_INPUTS];
static size_t n_inputs_seen;

static void note_input(const void *p)
{
    pthread_mutex_lock(&lock);
    bool seen = false;
    for (size_t i = 0; i < n_inputs_seen && !seen; i++)
        seen = inputs_seen[i] == p;
    if (!seen && n_inputs_seen < MAX_INPUTS)
        inputs_seen[n_inputs_seen++] = p;
    pthread_mutex_unlock(&lock);
}

__attribute__((destructor)) static void report_inputs(void)
{
    if (env_on("FLD_FAKEDEV_COUNT_INPUTS"))
        fprintf(stderr, "fakedev: silu_and_mul read %zu distinct inputs\n", n_inputs_seen);
}

static int silu_and_mul_scaled(const void *argp, float scale)
{
    const fld_activation_args *a = argp;
    note_input(a->x->data);
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    const int dt = fld_dtype_index(a->x->dtype);
    const size_t e = elem_size(dt);
    for (int64_t r = 0; r < out.rows; r++) {
        const char *xr = (const char *)x.data + (size_t)(r * x.stride) * e;
        char *o = (char *)out.data + (size_t)(r * out.stride) * e;
        for (int64_t j = 0; j < out.width; j++) {
            float g = load(xr, j, dt), u = load(xr, out.width + j, dt);
            store(o, j, dt, round_to(dt, g / (1.0f + expf(-g))) * u * scale);
        }
    }
    return FLD_OK;
}

static int good_silu_and_mul(const void *args)
{
    note_launch();
    return silu_and_mul_scaled(args, 1.0f);
}

static int bad_silu_and_mul(const void *args)
{
    return silu_and_mul_scaled(args, 1.05f);
}

static int rms_norm(const void *argp)
{
    const fld_rms_norm_args *a = argp;
    note_launch();
    fld_rows x, out, res = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    const int dt = fld_dtype_index(a->x->dtype);
    /* weight and residual may be float32 with a 16-bit x (plugin.h) */
    const int wdt = a->weight ? fld_dtype_index(a->weight->dtype) : dt;
    const int rdt = a->residual ? fld_dtype_index(a->residual->dtype) : dt;
    const size_t e = elem_size(dt);
    const void *w = a->weight ? (const char *)a->weight->data + a->weight->byte_offset : NULL;
    for (int64_t r = 0; r < x.rows && x.width > 0; r++) {
        const char *src = (const char *)x.data + (size_t)(r * x.stride) * e;
        int sdt = dt;
        char *o = (char *)out.data + (size_t)(r * out.stride) * e;
        if (a->residual) {
            char *rr = (char *)res.data + (size_t)(r * res.stride) * elem_size(rdt);
            for (int64_t j = 0; j < x.width; j++)
                store(rr, j, rdt, load(src, j, dt) + load(rr, j, rdt));
            src = rr;
            sdt = rdt;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < x.width; j++) {
            double v = load(src, j, sdt);
            sum += v * v;
        }
        const double inv = 1.0 / sqrt(sum / (double)x.width + (double)a->eps);
        for (int64_t j = 0; j < x.width; j++)
            store(o, j, dt, (float)(load(src, j, sdt) * inv) * (w ? load(w, j, wdt) : 1.0f));
    }
    return FLD_OK;
}

/* Right values, then one element written just past the storage of out (rows x row stride). */
static int overrunning_rms_norm(const void *argp)
{
    const fld_rms_norm_args *a = argp;
    int rc = rms_norm(argp);
    fld_rows out;
    fld_tensor_rows(a->out, &out);
    const int dt = fld_dtype_index(a->out->dtype);
    store(out.data, out.rows * out.stride, dt, 1.0f);
    return rc;
}

static void rotate_heads(char *base, int64_t heads, int64_t head_stride, int dt, const void *row,
                         int cache_dt, int64_t half, bool neox)
{
    const size_t e = elem_size(dt);
    for (int64_t h = 0; h < heads; h++) {
        char *head = base + (size_t)(h * head_stride) * e;
        for (int64_t i = 0; i < half; i++) {
            const float c = round_to(dt, load(row, i, cache_dt)),
                        s = round_to(dt, load(row, half + i, cache_dt));
            const int64_t ix = neox ? i : 2 * i, iy = neox ? i + half : 2 * i + 1;
            const float xv = load(head, ix, dt), yv = load(head, iy, dt);
            store(head, ix, dt, round_to(dt, xv * c) - round_to(dt, yv * s));
            store(head, iy, dt, round_to(dt, yv * c) + round_to(dt, xv * s));
        }
    }
}

static int rotary_embedding(const void *argp)
{
    const fld_rotary_embedding_args *a = argp;
    note_launch();
    fld_rotary_geometry g;
    fld_rotary_geometry_of(a, &g);
    const int dt = fld_dtype_index(a->query->dtype), cache_dt = fld_dtype_index(g.cache_dtype);
    const size_t e = elem_size(dt), ce = elem_size(cache_dt);
    for (int64_t t = 0; t < g.tokens; t++) {
        const int64_t pos = g.positions_int32 ? ((const int32_t *)g.positions)[t]
                                              : ((const int64_t *)g.positions)[t];
        /* the host does not range-check positions on devices; a kernel must not read wild */
        if (pos < 0 || pos >= g.max_pos) {
            fld_set_error("fakedev rotary_embedding: position %lld of token %lld outside [0, %lld)",
                          (long long)pos, (long long)t, (long long)g.max_pos);
            return FLD_EINVAL;
        }
    }
    for (int64_t t = 0; t < g.tokens; t++) {
        const int64_t pos = g.positions_int32 ? ((const int32_t *)g.positions)[t]
                                              : ((const int64_t *)g.positions)[t];
        const char *row = (const char *)g.cache + (size_t)(pos * g.cache_stride) * ce;
        rotate_heads((char *)g.query + (size_t)(t * g.q_token_stride) * e, g.q_heads,
                     g.q_head_stride, dt, row, cache_dt, g.rot_dim / 2, a->is_neox);
        if (g.key)
            rotate_heads((char *)g.key + (size_t)(t * g.k_token_stride) * e, g.k_heads,
                         g.k_head_stride, dt, row, cache_dt, g.rot_dim / 2, a->is_neox);
    }
    return FLD_OK;
}

/* ---- registration --------------------------------------------------------------------- */

static int add(fld_registry *reg, const char *op, const char *id, fld_kernel_fn fn)
{
    const fld_impl impl = {
        .op = op,
        .impl_id = id,
        .kind = FLD_KIND_VENDOR,
        .vendor = "fakedev",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CUDA,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = fn,
        .is_available = device_available,
    };
    return fld_registry_register(reg, &impl);
}

static int register_fakedev(fld_registry *reg)
{
    const fld_device_hooks hooks = {
        .struct_size = sizeof hooks,
        .device_type = FLD_DEVICE_CUDA,
        .is_available = device_available,
        .alloc = fake_alloc,
        .free = fake_free,
        .copy = fake_copy,
        .synchronize = fake_synchronize,
    };
    int rc = fld_registry_set_device_hooks(reg, &hooks);
    if (!rc)
        rc = add(reg, FLD_OP_SILU_AND_MUL, "vendor.fakedev", good_silu_and_mul);
    if (!rc)
        rc = add(reg, FLD_OP_RMS_NORM, "vendor.fakedev", rms_norm);
    if (!rc)
        rc = add(reg, FLD_OP_ROTARY_EMBEDDING, "vendor.fakedev", rotary_embedding);
    if (!rc && env_on("FLD_FAKEDEV_BAD")) {
        rc = add(reg, FLD_OP_SILU_AND_MUL, "vendor.fakedev_bad", bad_silu_and_mul);
        if (!rc)
            rc = add(reg, FLD_OP_RMS_NORM, "vendor.fakedev_bad", overrunning_rms_norm);
    }
    if (!rc)
        rc = fld_registry_set_detail(reg, "CPU memory posing as cuda device 0 (test fixture)");
    return rc;
}

FLD_PLUGIN_DEFINE("fakedev", "1.0", register_fakedev)
