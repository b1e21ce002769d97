/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: tensor-argument validation of every typed entry point
 * (fld_silu_and_mul ... fld_rotary_embedding, fld_attention_backend), and
 * the kernels behind it on whatever the validator lets through.
 *
 * The input describes one call: the op, a coherent geometry (shapes that
 * agree, so most inputs reach a kernel), then per tensor a layout (strides,
 * padding, offset) and up to three mutations (NULL tensor or shape, rank,
 * a dimension or stride from a list of edge values, dtype, device,
 * byte_offset, NULL data, misalignment), then eps, head_size, values.
 *
 * Every tensor is measured independently of the library: the byte range
 * [lo, hi) its view addresses relative to data (any stride sign, computed
 * in 128 bits), and whether the contract says it must be refused (negative
 * dimension, wrong dtype class, rank, non-empty with NULL or misaligned data,
 * last stride not 1, a stepping dimension with a negative stride, a span
 * past INT64_MAX). Then:
 *   - a call with a tensor that must be refused goes through the public
 *     entry point and must return FLD_EINVAL;
 *   - a call whose tensors all span at most SMALL_BYTES (256 KiB) gets
 *     buffers of exactly that range (data placed so the view starts
 *     inside), padding bytes set to a sentinel, and goes through the public
 *     entry point:
 *     AddressSanitizer catches any access outside a buffer, and afterwards
 *     read-only tensors must be unchanged and written ones unchanged outside
 *     their view;
 *   - a call with a larger valid tensor (which cannot be backed by memory
 *     here) goes to the op's validator only, with every tensor on a CUDA
 *     device so that it reads nothing (rotary reads host positions).
 * Built three times: fuzz_tensors (reference kernels only), fuzz_tensors_cpu
 * (FUZZ_CPU_PLUGIN: the cpu plugin linked in and registered, so its SIMD
 * kernels and thread pool run) and fuzz_tensors_gpu (FUZZ_GPU_PLUGIN: the
 * GPU plugins' glue, plugins/shared/gpu/gpu_plugin.c, registered as the
 * fixture plugin of tests/gpuplug does it, over the GPU emulator of
 * tests/gpu, whose "device" memory is host memory: every tensor starts on
 * CUDA device 0, so the glue's argument checks, its choice of kernel family
 * and launch shape and the kernels themselves run on the fuzzed layouts,
 * each input under a warp of 32 or 64 lanes and one of the emulator's
 * thread orders, both read from the input). Both plugin builds then compare
 * what each call the plugin served wrote with reference.c's result
 * (against_reference).
 */
#include <float.h>
#include <math.h>

#include <fldispatch/plugin.h>

#include "error.h"
#include "ops.h"
#include "reference.h"

#include "fuzz_common.h"

#define SMALL_BYTES    (256u << 10) /* largest buffer a tensor gets */
#define MAX_FUZZ_DIMS  64           /* rank of a mutated tensor, at most */
#define MAX_ENUM_ELEMS (1u << 20)   /* elements walked to mark a view */
#define SENTINEL       0xA5u

#ifdef FUZZ_GPU_PLUGIN
#define FUZZ_DEVICE kDLCUDA
/* The emulator's warp width and thread order (tests/gpu/emu_api.cc). */
void fld_emu_configure(int lanes, int order);
#else
#define FUZZ_DEVICE kDLCPU
#endif

enum { OP_SILU, OP_MUL_SILU, OP_GELU, OP_GELU_TANH, OP_RMS, OP_GEMMA, OP_ROTARY, OP_ATTN, N_OPS };
static const char *const op_names[N_OPS] = {
    FLD_OP_SILU_AND_MUL, FLD_OP_MUL_AND_SILU,   FLD_OP_GELU_AND_MUL,     FLD_OP_GELU_TANH_AND_MUL,
    FLD_OP_RMS_NORM,     FLD_OP_GEMMA_RMS_NORM, FLD_OP_ROTARY_EMBEDDING, FLD_OP_ATTENTION_BACKEND,
};
static const int op_catalog[N_OPS] = {
    FLD_CAT_SILU_AND_MUL,      FLD_CAT_MUL_AND_SILU,      FLD_CAT_GELU_AND_MUL,
    FLD_CAT_GELU_TANH_AND_MUL, FLD_CAT_RMS_NORM,          FLD_CAT_GEMMA_RMS_NORM,
    FLD_CAT_ROTARY_EMBEDDING,  FLD_CAT_ATTENTION_BACKEND,
};
static fld_op op_handles[N_OPS];
static bool trace; /* FUZZ_TRACE set: one line per input on stderr */

enum kind { K_FLOAT, K_INDEX };

/* One tensor of the call, the harness's own view of it, and its memory. */
struct ft {
    const char *name;
    bool present, writable;
    enum kind kind;
    int split; /* trailing dims that are not rows: 1, or 2 for [.., heads, head_size] */
    DLTensor t;
    int64_t *shape, *strides;
    bool shape_null, data_null;
    unsigned misalign;
    /* Model. */
    int elem;
    bool invalid, empty, huge;
    __int128 lo, hi; /* bytes addressed, relative to data */
    /* Memory. */
    unsigned char *buf, *snap, *inview;
    size_t size;
};

/* ------------------------------------------------------------------------ */
/* Decoding                                                                 */
/* ------------------------------------------------------------------------ */

static int64_t edge_dim(struct fuzz_reader *r)
{
    static const int64_t v[] = {0,
                                1,
                                2,
                                3,
                                -1,
                                7,
                                64,
                                (int64_t)1 << 30,
                                ((int64_t)1 << 31) + 1,
                                (int64_t)1 << 32,
                                (int64_t)1 << 62,
                                INT64_MAX,
                                INT64_MIN,
                                -((int64_t)1 << 32)};
    uint8_t b = fuzz_u8(r);
    if (b < sizeof v / sizeof v[0])
        return v[b];
    if (b < 128)
        return b % 24;
    return (int64_t)fuzz_u64(r);
}

static int64_t edge_stride(struct fuzz_reader *r)
{
    static const int64_t v[] = {0,
                                1,
                                -1,
                                2,
                                -2,
                                (int64_t)1 << 30,
                                (int64_t)1 << 31,
                                (int64_t)1 << 40,
                                (int64_t)1 << 61,
                                (int64_t)1 << 62,
                                INT64_MAX,
                                INT64_MIN,
                                INT64_MIN + 1,
                                INT64_MAX / 3};
    uint8_t b = fuzz_u8(r);
    if (b < sizeof v / sizeof v[0])
        return v[b];
    if (b < 128)
        return b % 40;
    return (int64_t)fuzz_u64(r);
}

static int edge_ndim(struct fuzz_reader *r)
{
    uint8_t b = fuzz_u8(r);
    switch (b % 8) {
    case 0:
        return -1;
    case 1:
        return MAX_FUZZ_DIMS;
    case 2:
        return (int)(fuzz_u8(r) % (MAX_FUZZ_DIMS + 1));
    case 3:
        return INT32_MIN;
    default:
        return b % 6;
    }
}

static DLDataType float_dtype(int i)
{
    static const DLDataType t[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
    return t[i % 3];
}

/*
 * Sets t.shape/t.strides from ndim (arrays of exactly max(ndim, 0) entries).
 * A rank of 0 or less still gets a shape array, of no entry, as a caller's
 * scalar tensor has (with AddressSanitizer, malloc(0) is a chunk whose every
 * access is reported): a validator must check the rank before it reads a
 * dimension. A NULL shape is the shape_null mutation's.
 */
static void set_rank(struct ft *f, int ndim, const int64_t *shape)
{
    free(f->shape);
    free(f->strides);
    f->shape = f->strides = NULL;
    f->t.ndim = ndim;
    const size_t n = ndim > 0 ? (size_t)ndim : 0;
    f->shape = malloc(n * sizeof *f->shape);
    FUZZ_CHECK(f->shape != NULL || n == 0, "out of memory");
    for (size_t i = 0; i < n; i++)
        f->shape[i] = shape ? shape[i] : 1;
}

/* Explicit strides: contiguous plus padding after each row and (split 2) head. */
static void set_strides(struct ft *f, int64_t row_pad, int64_t head_pad)
{
    int nd = f->t.ndim;
    if (nd <= 0)
        return;
    f->strides = calloc((size_t)nd, sizeof *f->strides);
    FUZZ_CHECK(f->strides != NULL, "out of memory");
    /* Wrapping arithmetic: a mutated shape may be huge, and then so is the stride. */
    uint64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        f->strides[i] = (int64_t)s;
        uint64_t next = s * (uint64_t)f->shape[i];
        if (i == nd - 1 && f->split == 2 && nd >= 2)
            next += (uint64_t)head_pad;
        if (i == nd - f->split)
            next += (uint64_t)row_pad;
        s = next;
    }
}

/* The coherent tensor, its layout byte, then its mutations. */
static void decode_tensor(struct fuzz_reader *r, struct ft *f, const char *name, enum kind kind,
                          bool writable, int split, int ndim, const int64_t *shape,
                          DLDataType dtype)
{
    memset(f, 0, sizeof *f);
    f->name = name;
    f->kind = kind;
    f->writable = writable;
    f->split = split;
    f->present = true;
    f->t.dtype = dtype;
    f->t.device = (DLDevice){FUZZ_DEVICE, 0};
    set_rank(f, ndim, shape);

    uint8_t layout = fuzz_u8(r);
    int esize = (dtype.bits * dtype.lanes + 7) / 8;
    if (layout & 1)
        set_strides(f, (layout >> 1) & 3, (layout >> 3) & 3);
    if (layout & 0x20)
        f->t.byte_offset = (uint64_t)(fuzz_u8(r) % 8) * (uint64_t)(esize ? esize : 1);

    uint8_t m = fuzz_u8(r);
    for (int k = 0; k < (m >> 6); k++) {
        uint8_t what = fuzz_u8(r) % 10;
        int nd = f->t.ndim;
        switch (what) {
        case 0:
            f->present = false;
            break;
        case 1: {
            int n = edge_ndim(r);
            int64_t keep[MAX_FUZZ_DIMS];
            for (int i = 0; i < MAX_FUZZ_DIMS; i++)
                keep[i] = i < nd ? f->shape[i] : 1 + fuzz_u8(r) % 3;
            bool had_strides = f->strides != NULL;
            set_rank(f, n, keep);
            if (had_strides)
                set_strides(f, 0, 0);
            break;
        }
        case 2:
            if (nd > 0)
                f->shape[fuzz_u8(r) % nd] = edge_dim(r);
            break;
        case 3:
            if (nd > 0) {
                if (!f->strides)
                    set_strides(f, 0, 0);
                f->strides[fuzz_u8(r) % nd] = edge_stride(r);
            }
            break;
        case 4:
            f->t.dtype.code = fuzz_u8(r) % 8;
            f->t.dtype.bits = fuzz_u8(r);
            f->t.dtype.lanes = (uint16_t)(fuzz_u8(r) % 3);
            break;
        case 5: {
            static const int types[] = {kDLCPU, kDLCUDA, kDLROCM, 12, 21, 0, 3, 100};
            f->t.device.device_type = (DLDeviceType)types[fuzz_u8(r) % 8];
            f->t.device.device_id = fuzz_u8(r) % 3;
            break;
        }
        case 6:
            f->t.byte_offset = (fuzz_u8(r) & 1) ? fuzz_u64(r) : fuzz_u8(r);
            break;
        case 7:
            f->data_null = true;
            break;
        case 8:
            f->shape_null = true;
            break;
        default:
            f->misalign = fuzz_u8(r) % 4;
            break;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The model                                                                */
/* ------------------------------------------------------------------------ */

static int kind_elem(const struct ft *f)
{
    DLDataType t = f->t.dtype;
    if (t.lanes != 1)
        return 0;
    if (f->kind == K_FLOAT)
        return fld_dtype_index(t) < 0 ? 0 : t.bits / 8;
    return t.code == kDLInt && (t.bits == 64 || t.bits == 32) ? t.bits / 8 : 0;
}

/* a * b, clamped to +-2^100 so that sums of 64 of them stay far inside 128 bits. */
static __int128 clamp_mul(__int128 a, __int128 b)
{
    const __int128 cap = (__int128)1 << 100;
    __int128 ma = a < 0 ? -a : a, mb = b < 0 ? -b : b;
    if (ma != 0 && mb > cap / ma)
        return (a < 0) != (b < 0) ? -cap : cap;
    return a * b;
}

/* Everything that does not depend on where data points. */
static void measure(struct ft *f)
{
    if (!f->present)
        return;
    const int nd = f->t.ndim;
    f->elem = kind_elem(f);
    if (f->elem == 0 || f->shape_null || nd < f->split) {
        f->invalid = true;
        f->elem = f->elem ? f->elem : 1;
        return;
    }
    bool zero = false;
    for (int i = 0; i < nd; i++) {
        if (f->shape[i] < 0) {
            f->invalid = true;
            return;
        }
        zero |= f->shape[i] == 0;
    }
    f->empty = zero;
    if (zero)
        return;
    __int128 max_off = 0, min_off = 0, s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        __int128 stride = f->strides ? (__int128)f->strides[i] : s;
        __int128 step = clamp_mul(f->shape[i] - 1, stride);
        if (step > 0)
            max_off += step;
        else
            min_off += step;
        s = clamp_mul(s, f->shape[i]);
        /* The last dim must step by one element when it steps at all. */
        if (i == nd - 1 && f->shape[i] > 1 && stride != 1)
            f->invalid = true;
    }
    f->lo = (__int128)f->t.byte_offset + min_off * f->elem;
    f->hi = (__int128)f->t.byte_offset + (max_off + 1) * f->elem;
    if (min_off < 0 || f->hi > (__int128)INT64_MAX)
        f->invalid = true;
    f->huge = f->hi - f->lo > SMALL_BYTES || f->lo < -(__int128)SMALL_BYTES ||
              f->hi > (__int128)SMALL_BYTES * 2;
}

/* Places data: exactly over [lo, hi) when small, else a small buffer. */
static void place(struct ft *f, bool exact)
{
    if (!f->present)
        return;
    if (exact && !f->invalid && !f->empty) {
        f->size = (size_t)(f->hi - f->lo) + f->misalign;
        f->buf = malloc(f->size);
        FUZZ_CHECK(f->buf != NULL, "out of memory");
        f->t.data = f->buf + f->misalign - (ptrdiff_t)f->lo;
    } else {
        /* An empty view gets no usable byte (with ASan, malloc(0) is a
         * chunk whose every access is reported). */
        f->size = exact && f->empty ? f->misalign : 64 + f->misalign;
        f->buf = malloc(f->size);
        FUZZ_CHECK(f->buf != NULL || f->size == 0, "out of memory");
        f->t.data = f->buf + f->misalign;
    }
    if (f->data_null)
        f->t.data = NULL;
    f->t.shape = f->shape_null ? NULL : f->shape;
    f->t.strides = f->strides;
    if (!f->empty && !f->invalid) {
        uintptr_t start = (uintptr_t)f->t.data + (uintptr_t)f->t.byte_offset;
        if (!f->t.data || (start & (uintptr_t)(f->elem - 1)) != 0)
            f->invalid = true;
    }
}

/* Calls fn(f, byte index into buf) for every element of a valid, non-empty view
 * (rank >= 1 then). false when the view has too many elements to walk. */
static bool walk(const struct ft *f, void (*fn)(const struct ft *, size_t, void *), void *user)
{
    const int nd = f->t.ndim;
    uint64_t n = 1;
    for (int i = 0; i < nd; i++) {
        n *= (uint64_t)f->shape[i];
        if (n > MAX_ENUM_ELEMS)
            return false;
    }
    int64_t idx[MAX_FUZZ_DIMS] = {0};
    const size_t base = (size_t)((unsigned char *)f->t.data + f->t.byte_offset - f->buf);
    for (uint64_t e = 0; e < n; e++) {
        int64_t off = 0, s = 1;
        for (int i = nd - 1; i >= 0; i--) {
            off += idx[i] * (f->strides ? f->strides[i] : s);
            s *= f->shape[i];
        }
        fn(f, base + (size_t)(off * f->elem), user);
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < f->shape[i])
                break;
            idx[i] = 0;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

struct fill {
    uint32_t state;
    bool raw;           /* any bit pattern: NaN, infinities, subnormals */
    int64_t max_pos;    /* positions in [0, max_pos) ... */
    uint8_t pos_spread; /* ... plus this much past either end */
};

static uint32_t next_rand(uint32_t *s)
{
    uint32_t x = *s ? *s : 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static void fill_one(const struct ft *f, size_t at, void *user)
{
    struct fill *fl = user;
    uint32_t r = next_rand(&fl->state);
    unsigned char *p = f->buf + at;
    if (f->kind == K_INDEX) {
        int64_t span = fl->max_pos + 2 * (int64_t)fl->pos_spread;
        int64_t v = (int64_t)(r % (uint32_t)(span > 0 ? span : 1)) - fl->pos_spread;
        if (f->elem == 8)
            memcpy(p, &v, 8);
        else {
            int32_t v32 = (int32_t)v;
            memcpy(p, &v32, 4);
        }
        return;
    }
    float v = fl->raw ? fld_f32_from_bits(r) : ((float)(r % 8001u) - 4000.0f) / 1000.0f;
    if (f->elem == 4) {
        memcpy(p, &v, 4);
    } else {
        uint16_t h = f->t.dtype.code == kDLBfloat ? fld_f32_to_bf16(v) : fld_f32_to_f16(v);
        if (fl->raw)
            h = (uint16_t)r;
        memcpy(p, &h, 2);
    }
}

static void mark_one(const struct ft *f, size_t at, void *user)
{
    (void)user;
    memset(f->inview + at, 1, (size_t)f->elem);
}

/* Sentinel outside the view, values inside; a snapshot for the checks after the call. */
static bool prepare_memory(struct ft *f, struct fill *fl)
{
    if (!f->present || !f->buf)
        return true;
    /* An invalid tensor's view may lie outside its buffer: only the sentinel
     * then, and every byte must stay as it is. */
    const bool view = !f->invalid && !f->empty;
    memset(f->buf, SENTINEL, f->size);
    if (view && !walk(f, fill_one, fl))
        return false;
    f->snap = malloc(f->size ? f->size : 1);
    FUZZ_CHECK(f->snap != NULL, "out of memory");
    memcpy(f->snap, f->buf, f->size);
    if (f->writable) {
        f->inview = calloc(f->size ? f->size : 1, 1);
        FUZZ_CHECK(f->inview != NULL, "out of memory");
        if (view && !walk(f, mark_one, NULL))
            return false;
    }
    return true;
}

static void check_memory(const struct ft *f, const char *op, int rc)
{
    if (!f->snap)
        return;
    for (size_t i = 0; i < f->size; i++) {
        if (f->buf[i] == f->snap[i] || (f->writable && f->inview[i]))
            continue;
        FUZZ_CHECK(false,
                   "%s (status %d) changed byte %zu of the buffer of '%s' (%s), which %s "
                   "(0x%02x became 0x%02x)",
                   op, rc, i, f->name, f->writable ? "is written" : "is read-only",
                   f->writable ? "lies outside its view" : "it may not write", f->snap[i],
                   f->buf[i]);
    }
}

static void free_tensor(struct ft *f)
{
    free(f->shape);
    free(f->strides);
    free(f->buf);
    free(f->snap);
    free(f->inview);
}

#if defined(FUZZ_GPU_PLUGIN) || defined(FUZZ_CPU_PLUGIN)
/* ------------------------------------------------------------------------ */
/* The plugin's kernels against reference.c                                 */
/* ------------------------------------------------------------------------ */

#ifdef FUZZ_GPU_PLUGIN
#define PLUGIN_KERNEL "the GPU kernel"
#else
#define PLUGIN_KERNEL "the cpu plugin"
#endif

/* One element of a float tensor at byte at of buf (aligned: the view is valid), widened. */
static double elem_value(const struct ft *f, const unsigned char *buf, size_t at)
{
    return fld__ref_load(buf + at, 0, fld_dtype_index(f->t.dtype));
}

/* A unit in the last place of v in a 16-bit dtype (subnormals included). */
static double ulp16(const struct ft *f, double v)
{
    const int mant = f->t.dtype.code == kDLBfloat ? 7 : 10;
    const int emin = f->t.dtype.code == kDLBfloat ? -126 : -14;
    int e;
    frexp(fabs(v), &e);
    return ldexp(1.0, (e - 1 > emin ? e - 1 : emin) - mant);
}

struct agreement {
    const unsigned char *served; /* the buffer as the plugin's kernel left it */
    bool exact;                  /* to the bit; else within the norms' tolerance */
    const char *op;
    bool failed;
    int64_t compared;
};

static void agree_one(const struct ft *f, size_t at, void *user)
{
    struct agreement *a = user;
    const double g = elem_value(f, a->served, at), w = elem_value(f, f->buf, at);
    a->compared++;
    if (a->failed || g == w || (isnan(g) && isnan(w)))
        return;
    const double tol = a->exact ? 0.0 : f->elem == 4 ? 1e-5 * fabs(w) + 1e-37 : ulp16(f, w);
    if (fabs(g - w) <= tol)
        return;
    a->failed = true;
    FUZZ_CHECK(false, "%s: '%s' at byte %zu: " PLUGIN_KERNEL " gave %.9g, reference.c %.9g", a->op,
               f->name, at, g, w);
}

/*
 * After a call the plugin served: the same call again by reference.c, from
 * the inputs as they were, and each written view compared element by
 * element with what the plugin's kernel wrote, as the kernel tests compare
 * them (tests/gpu/test_gpu_kernels.cc, tests/test_kernels.c): activations,
 * rotary and the fused norm's residual to the bit (NaN to any NaN), the
 * norms' output within one unit in the last place of a 16-bit dtype or
 * 1e-5 relative in float32 (the sum of squares in another order).
 * tensors_gpu runs reference.c by moving every tensor to the CPU, where it
 * is the only implementation; a rotary call the CPU refuses for a position
 * out of range (the GPU kernel, which cannot report one, leaves that token
 * unchanged) is not compared, any other refusal fails. tensors_cpu pins
 * reference.c (a scoped per-op order, strict) and compares 16-bit tensors
 * and float32 norms: the cpu plugin's float32 activations and rotary are
 * held to vLLM's tolerances against exact values (tests/test_kernels.c),
 * not to reference.c's bits.
 */
static void against_reference(int op, struct ft *ts, int nt, const void *args)
{
    unsigned char *served[5] = {NULL};
    for (int i = 0; i < nt; i++) {
        if (!ts[i].present || !ts[i].snap)
            continue;
        if (ts[i].writable) {
            served[i] = malloc(ts[i].size ? ts[i].size : 1);
            FUZZ_CHECK(served[i] != NULL, "out of memory");
            memcpy(served[i], ts[i].buf, ts[i].size);
        }
        memcpy(ts[i].buf, ts[i].snap, ts[i].size);
#ifdef FUZZ_GPU_PLUGIN
        ts[i].t.device = (DLDevice){kDLCPU, 0};
#endif
    }
#ifdef FUZZ_CPU_PLUGIN
    char spec[64];
    snprintf(spec, sizeof spec, "%s=impl:reference.c", op_names[op]);
    FUZZ_CHECK(fld_policy_push_per_op(spec) == FLD_OK && fld_policy_push_strict(true) == FLD_OK,
               "pinning reference.c: %s", fld_last_error());
#endif
    fld__error_clear();
    const int rc = fld_call(op_handles[op], args);
    char message[512];
    snprintf(message, sizeof message, "%s", fld_last_error());
#ifdef FUZZ_CPU_PLUGIN
    FUZZ_CHECK(fld_policy_pop() == FLD_OK && fld_policy_pop() == FLD_OK, "unpinning: %s",
               fld_last_error());
#endif
    FUZZ_CHECK(rc == FLD_OK || (op == OP_ROTARY && rc == FLD_EINVAL &&
                                strstr(message, "tensor 'positions' has value")),
               "%s: the plugin took a call that reference.c refuses (status %d: %s)", op_names[op],
               rc, message);
    const bool norm = op == OP_RMS || op == OP_GEMMA;
    int64_t compared = 0;
    for (int i = 0; rc == FLD_OK && i < nt; i++) {
        if (!served[i] || ts[i].invalid || ts[i].empty)
            continue;
#ifdef FUZZ_CPU_PLUGIN
        if (ts[i].elem == 4 && !norm)
            continue;
#endif
        /* a norm's tensor 3 is the residual */
        struct agreement a = {served[i], !norm || i == 3, op_names[op], false, 0};
        walk(&ts[i], agree_one, &a);
        compared += a.compared;
    }
    if (trace && rc == FLD_OK)
        fprintf(stderr, "fuzz: %s: %lld elements written agree with reference.c\n", op_names[op],
                (long long)compared);
    else if (trace)
        fprintf(stderr, "fuzz: %s: not compared: reference.c refused it: %s\n", op_names[op],
                message);
    for (int i = 0; i < nt; i++)
        free(served[i]);
}

#endif

/* ------------------------------------------------------------------------ */
/* The call                                                                 */
/* ------------------------------------------------------------------------ */

static float decode_eps(struct fuzz_reader *r)
{
    switch (fuzz_u8(r) % 10) {
    case 1:
        return 0.0f;
    case 2:
        return -1e-6f;
    case 3:
        return NAN;
    case 4:
        return INFINITY;
    case 5:
        return FLT_MAX;
    case 6:
        return -0.0f;
    case 7:
        return fld_f32_from_bits(fuzz_u32(r));
    default:
        return 1e-6f;
    }
}

static int64_t decode_leading(struct fuzz_reader *r, int64_t *lead)
{
    int n = fuzz_u8(r) % 4;
    for (int i = 0; i < n; i++)
        lead[i] = fuzz_u8(r) % 6;
    return n;
}

#ifdef FUZZ_CPU_PLUGIN
/*
 * The cpu plugin's kernel-variant files make UBSan's pointer-overflow check
 * a trap instruction (tests/fuzz/fuzz.mk, FUZZ_KERNEL_CFLAGS): AddressSanitizer
 * reports the SIGILL with its stack, file:line of the check included, however
 * the binary is started (libFuzzer alone prints no stack for a signal raised
 * while the pool's threads run). ASAN_OPTIONS still overrides it.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "handle_sigill=1";
}
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_environment();
    trace = getenv("FUZZ_TRACE") != NULL;
#ifdef FUZZ_CPU_PLUGIN
    /* Every call through the pool, split between two threads. */
    setenv("VLLM_FL_CPU_THREADS", "2", 0);
    setenv("VLLM_FL_CPU_PARALLEL_MIN_KB", "0", 0);
#endif
    if (fld_init() != FLD_OK) {
        fprintf(stderr, "fuzz: fld_init: %s\n", fld_last_error());
        abort();
    }
#if defined(FUZZ_CPU_PLUGIN) || defined(FUZZ_GPU_PLUGIN)
    extern const fld_plugin_descriptor fld_plugin_entry;
    if (fld_register_plugin(&fld_plugin_entry) != FLD_OK) {
        fprintf(stderr, "fuzz: registering the %s plugin: %s\n", fld_plugin_entry.name,
                fld_last_error());
        abort();
    }
#endif
#if defined(FUZZ_CPU_PLUGIN)
    const char *expect = "vendor.cpu";
    const int device = FLD_DEVICE_CPU;
#elif defined(FUZZ_GPU_PLUGIN)
    const char *expect = "vendor.cuda";
    const int device = FLD_DEVICE_CUDA;
#else
    const char *expect = "reference.c";
    const int device = FLD_DEVICE_CPU;
#endif
    for (int i = 0; i < N_OPS; i++) {
        op_handles[i] = fld_op_lookup(op_names[i]);
        FUZZ_CHECK(op_handles[i] != NULL, "no op '%s'", op_names[i]);
        const char *impl = NULL;
        if (i != OP_ATTN) {
            int rc = fld_resolve(op_names[i], device, FLD_DTYPE_BF16, &impl);
            FUZZ_CHECK(rc == FLD_OK && strcmp(impl, expect) == 0, "%s resolves to %s, not %s",
                       op_names[i], rc == FLD_OK ? impl : "nothing", expect);
        }
    }
    return 0;
}

/* How the op is called: typed entry point, fld_call, or fld_call_by_name. */
static int call_activation(int op, int how, fld_activation_args *a)
{
    if (how == 1)
        return fld_call(op_handles[op], a);
    if (how == 2)
        return fld_call_by_name(op_names[op], a);
    switch (op) {
    case OP_SILU:
        return fld_silu_and_mul(a->out, a->x);
    case OP_MUL_SILU:
        return fld_mul_and_silu(a->out, a->x);
    case OP_GELU:
        return fld_gelu_and_mul(a->out, a->x);
    default:
        return fld_gelu_tanh_and_mul(a->out, a->x);
    }
}

static int call_norm(int op, int how, fld_rms_norm_args *a)
{
    if (how == 1)
        return fld_call(op_handles[op], a);
    if (how == 2)
        return fld_call_by_name(op_names[op], a);
    if (op == OP_RMS)
        return fld_rms_norm(a->out, a->x, a->weight, a->residual, a->eps);
    return fld_gemma_rms_norm(a->out, a->x, a->weight, a->residual, a->eps);
}

static int call_rotary(int how, fld_rotary_embedding_args *a)
{
    if (how == 1)
        return fld_call(op_handles[OP_ROTARY], a);
    if (how == 2)
        return fld_call_by_name(FLD_OP_ROTARY_EMBEDDING, a);
    return fld_rotary_embedding(a->positions, a->query, a->key, a->head_size, a->cos_sin_cache,
                                a->is_neox);
}

static void attention(struct fuzz_reader *r, int how)
{
    static const int devices[] = {kDLCPU, kDLCUDA, kDLROCM, 12, 21, 0, 7, -1};
    uint8_t b = fuzz_u8(r);
    const char *name = "unset";
    fld_attention_backend_args a = {devices[b & 7], (b >> 3) & 1, (b >> 4) & 1,
                                    (b >> 5) & 1 ? NULL : &name};
    int rc = how == 1   ? fld_call(op_handles[OP_ATTN], &a)
             : how == 2 ? fld_call_by_name(FLD_OP_ATTENTION_BACKEND, &a)
                        : fld_attention_backend(a.device_type, a.use_mla, a.use_sparse, a.name);
    if (a.name == NULL || (a.use_sparse && !a.use_mla) || fld_device_name(a.device_type) == NULL)
        FUZZ_CHECK(rc == FLD_EINVAL, "attention_backend: invalid arguments gave %d", rc);
    if (rc == FLD_OK)
        FUZZ_CHECK(name && strcmp(name, "unset") != 0 && name[0], "no backend name");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_reader rd = {data, size}, *r = &rd;
    const uint8_t head = fuzz_u8(r);
    const int op = head % N_OPS;
    const int how = (head >> 3) % 3;
#ifdef FUZZ_GPU_PLUGIN
    /* head's two top bits: 32 or 64 lanes (CUDA and RDNA, or CDNA's
       wavefront) and the emulator's order of ready threads */
    fld_emu_configure(head >> 7 ? 64 : 32, (head >> 6) & 1 ? 2 : 0);
#endif
    if (op == OP_ATTN) {
        attention(r, how);
        return 0;
    }
    const DLDataType dt = float_dtype(fuzz_u8(r));
    struct ft ts[5];
    int nt = 0;
    bool need[5] = {true, true, true, true, true};
    bool alias = false; /* rms_norm: out is x */
    int64_t lead[8], shape[8];
    int nl = (int)decode_leading(r, lead);
    memcpy(shape, lead, sizeof lead);

    fld_activation_args act;
    fld_rms_norm_args norm;
    fld_rotary_embedding_args rot;
    if (op <= OP_GELU_TANH) {
        int64_t d = fuzz_u8(r) % 17;
        shape[nl] = 2 * d;
        decode_tensor(r, &ts[0], "x", K_FLOAT, false, 1, nl + 1, shape, dt);
        shape[nl] = d;
        decode_tensor(r, &ts[1], "out", K_FLOAT, true, 1, nl + 1, shape, dt);
        nt = 2;
    } else if (op == OP_RMS || op == OP_GEMMA) {
        int64_t h = fuzz_u8(r) % 33;
        uint8_t opt = fuzz_u8(r);
        shape[nl] = h;
        decode_tensor(r, &ts[0], "x", K_FLOAT, (opt & 3) == 3, 1, nl + 1, shape, dt);
        decode_tensor(r, &ts[1], "out", K_FLOAT, true, 1, nl + 1, shape, dt);
        decode_tensor(r, &ts[2], "weight", K_FLOAT, false, 1, 1, &h, dt);
        decode_tensor(r, &ts[3], "residual", K_FLOAT, true, 1, nl + 1, shape, dt);
        need[2] = need[3] = false; /* weight and residual may be NULL */
        if (opt & 4)
            ts[2].present = false;
        if (opt & 8)
            ts[3].present = false;
        alias = (opt & 3) == 3;
        if (alias)
            ts[1].present = false, need[1] = false;
        nt = 4;
    } else {
        uint8_t g = fuzz_u8(r);
        int64_t head_size = 1 + fuzz_u8(r) % 16, rot_dim = 2 * (1 + fuzz_u8(r) % 8);
        int64_t max_pos = fuzz_u8(r) % 9, hq = fuzz_u8(r) % 4, hk = fuzz_u8(r) % 4;
        if (rot_dim > head_size)
            rot_dim = head_size & ~(int64_t)1;
        int pnd = 1 + (g & 1), split = 1 + ((g >> 1) & 1);
        int64_t pshape[2] = {fuzz_u8(r) % 6, fuzz_u8(r) % 4};
        DLDataType pt = (g & 4) ? (DLDataType){kDLInt, 32, 1} : (DLDataType){kDLInt, 64, 1};
        decode_tensor(r, &ts[0], "positions", K_INDEX, false, 1, pnd, pshape, pt);
        int64_t q[4] = {pshape[0], pshape[1], pshape[1], 0};
        q[pnd] = split == 2 ? hq : hq * head_size;
        q[pnd + 1] = head_size;
        decode_tensor(r, &ts[1], "query", K_FLOAT, true, split, pnd + split, q, dt);
        q[pnd] = split == 2 ? hk : hk * head_size;
        decode_tensor(r, &ts[2], "key", K_FLOAT, true, split, pnd + split, q, dt);
        int64_t c[2] = {max_pos, rot_dim};
        DLDataType ct = (g & 8) ? FLD_DTYPE_F32 : dt;
        decode_tensor(r, &ts[3], "cos_sin_cache", K_FLOAT, false, 1, 2, c, ct);
        need[2] = false; /* key may be NULL */
        if (g & 16)
            ts[2].present = false;
        rot.head_size = head_size;
        rot.is_neox = (g >> 5) & 1;
        nt = 4;
    }
    const float eps = decode_eps(r);
    if (op == OP_ROTARY && (fuzz_u8(r) & 7) == 7)
        rot.head_size = edge_dim(r);

    /* Required tensors dropped by a mutation, and what else the contract refuses. */
    bool refuse = false;
    for (int i = 0; i < nt; i++) {
        measure(&ts[i]);
        if (!ts[i].present)
            refuse |= need[i];
    }
    bool any_huge = false;
    for (int i = 0; i < nt; i++)
        any_huge |= ts[i].present && ts[i].huge && !ts[i].invalid && !ts[i].empty;
    for (int i = 0; i < nt; i++)
        place(&ts[i], !any_huge);
    for (int i = 0; i < nt; i++)
        refuse |= ts[i].present && ts[i].invalid;
    if (op == OP_RMS || op == OP_GEMMA) {
        refuse |= !(eps >= 0.0f && eps <= FLT_MAX);
        refuse |= ts[2].present && ts[2].t.ndim != 1;
    }
    if (op == OP_ROTARY) {
        refuse |= rot.head_size <= 0;
        const DLTensor *p = &ts[0].t;
        if (ts[0].present) {
            refuse |= p->ndim != 1 && p->ndim != 2;
            for (int i = 1; i < 3; i++)
                if (ts[i].present)
                    refuse |=
                        (int64_t)ts[i].t.ndim - p->ndim < 1 || (int64_t)ts[i].t.ndim - p->ndim > 2;
        }
        refuse |= ts[3].present && ts[3].t.ndim != 2;
    }

    /* Values, sentinels, snapshots. */
    struct fill fl = {fuzz_u32(r), false, 8, 0};
    uint8_t vb = fuzz_u8(r);
    fl.raw = vb & 1;
    fl.pos_spread = (vb >> 1) & 1 ? (uint8_t)(vb >> 2) : 0;
    if (op == OP_ROTARY && ts[3].present && ts[3].t.ndim == 2 && !ts[3].shape_null &&
        ts[3].shape[0] >= 0)
        fl.max_pos = ts[3].shape[0] < 1000 ? ts[3].shape[0] : 1000;
    bool checkable = !any_huge;
    for (int i = 0; checkable && i < nt; i++)
        checkable = prepare_memory(&ts[i], &fl);

    DLTensor *t[5];
    for (int i = 0; i < nt; i++)
        t[i] = ts[i].present ? &ts[i].t : NULL;
    int rc;
    if (!refuse && any_huge) {
        /* Valid as far as the harness can tell, but too large to back with
         * memory: the validator alone, on a device it does not read. */
        for (int i = 0; i < nt; i++)
            ts[i].t.device = (DLDevice){kDLCUDA, 0};
        struct fld_call_key key;
        const void *args;
        if (op <= OP_GELU_TANH) {
            act = (fld_activation_args){t[1], t[0]};
            args = &act;
        } else if (op == OP_RMS || op == OP_GEMMA) {
            norm = (fld_rms_norm_args){alias ? t[0] : t[1], t[0], t[2], t[3], eps};
            args = &norm;
        } else {
            rot.positions = t[0], rot.query = t[1], rot.key = t[2], rot.cos_sin_cache = t[3];
            args = &rot;
        }
        rc = fld__catalog[op_catalog[op]].validate(op_names[op], args, &key);
        FUZZ_CHECK(rc == FLD_OK || rc == FLD_EINVAL, "%s validator returned %d", op_names[op], rc);
    } else if (!refuse && !checkable) {
        rc = FLD_OK; /* a view too long to walk: not called */
    } else {
        fld__error_clear();
        if (op <= OP_GELU_TANH) {
            act = (fld_activation_args){t[1], t[0]};
            rc = call_activation(op, how, &act);
        } else if (op == OP_RMS || op == OP_GEMMA) {
            norm = (fld_rms_norm_args){alias ? t[0] : t[1], t[0], t[2], t[3], eps};
            rc = call_norm(op, how, &norm);
        } else {
            rot.positions = t[0], rot.query = t[1], rot.key = t[2], rot.cos_sin_cache = t[3];
            rc = call_rotary(how, &rot);
        }
        if (refuse)
            FUZZ_CHECK(rc == FLD_EINVAL, "%s accepted arguments the contract refuses (status %d)",
                       op_names[op], rc);
        if (rc != FLD_OK)
            FUZZ_CHECK(fld_last_error()[0] != '\0', "%s: status %d without a message", op_names[op],
                       rc);
        if (rc == FLD_EINVAL)
            FUZZ_CHECK(strncmp(fld_last_error(), op_names[op], strlen(op_names[op])) == 0,
                       "%s: message does not name the op", op_names[op]);
        for (int i = 0; checkable && i < nt; i++)
            check_memory(&ts[i], op_names[op], rc);
#if defined(FUZZ_GPU_PLUGIN) || defined(FUZZ_CPU_PLUGIN)
        /* served by the plugin: every tensor on its device 0 */
        bool served = rc == FLD_OK && !refuse && checkable;
        for (int i = 0; served && i < nt; i++)
            served = !ts[i].present ||
                     (ts[i].t.device.device_type == FUZZ_DEVICE && ts[i].t.device.device_id == 0);
        if (served)
            against_reference(op, ts, nt,
                              op <= OP_GELU_TANH               ? (const void *)&act
                              : op == OP_RMS || op == OP_GEMMA ? (const void *)&norm
                                                               : (const void *)&rot);
#endif
    }
    if (trace)
        fprintf(stderr, "fuzz: %s: %s -> %d %s\n", op_names[op],
                refuse     ? "refused by the contract"
                : any_huge ? "too large: validator only"
                           : "called",
                rc, rc ? fld_last_error() : "");
    for (int i = 0; i < nt; i++)
        free_tensor(&ts[i]);
    return 0;
}
