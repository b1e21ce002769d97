/* SPDX-License-Identifier: Apache-2.0 */
/* Owning DLTensors in CPU memory, for the tests; see cpu_tensor.h. */
#include "cpu_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/half.h>

static void die(const char *what)
{
    fprintf(stderr, "cpu_tensor: %s\n", what);
    abort();
}

size_t tt_elem_size(DLDataType dtype)
{
    if (dtype.lanes != 1 || dtype.bits % 8 != 0 || dtype.bits == 0)
        die("unsupported dtype");
    return dtype.bits / 8;
}

int64_t tt_numel(const tt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->t.ndim; i++)
        n *= t->shape[i];
    return n;
}

/* ---- element access ------------------------------------------------------ */

enum kind { K_F32, K_F16, K_BF16, K_F64, K_I64, K_I32 };

/* The storage kind of a dtype; false for one this helper does not support. */
static bool find_kind(DLDataType d, enum kind *k)
{
    static const struct {
        uint8_t code, bits;
        enum kind kind;
    } kinds[] = {{kDLFloat, 32, K_F32}, {kDLFloat, 16, K_F16}, {kDLBfloat, 16, K_BF16},
                 {kDLFloat, 64, K_F64}, {kDLInt, 64, K_I64},   {kDLInt, 32, K_I32}};
    for (size_t i = 0; d.lanes == 1 && i < sizeof kinds / sizeof kinds[0]; i++)
        if (d.code == kinds[i].code && d.bits == kinds[i].bits) {
            *k = kinds[i].kind;
            return true;
        }
    return false;
}

static enum kind kind_of(DLDataType d)
{
    enum kind k = K_F32;
    if (!find_kind(d, &k))
        die("unsupported dtype");
    return k;
}

static void *at_offset(const tt_tensor *t, int64_t off)
{
    return (char *)t->buf + TT_GUARD + off * (int64_t)tt_elem_size(t->t.dtype);
}

static double get_at(enum kind k, const void *p)
{
    switch (k) {
    case K_F32:
        return *(const float *)p;
    case K_F16:
        return fld_f16_to_f32(*(const uint16_t *)p);
    case K_BF16:
        return fld_bf16_to_f32(*(const uint16_t *)p);
    case K_F64:
        return *(const double *)p;
    case K_I64:
        return (double)*(const int64_t *)p;
    default:
        return *(const int32_t *)p;
    }
}

static void set_at(enum kind k, void *p, double v)
{
    switch (k) {
    case K_F32:
        *(float *)p = (float)v;
        break;
    case K_F16:
        *(uint16_t *)p = fld_f32_to_f16((float)v);
        break;
    case K_BF16:
        *(uint16_t *)p = fld_f32_to_bf16((float)v);
        break;
    case K_F64:
        *(double *)p = v;
        break;
    case K_I64:
        *(int64_t *)p = (int64_t)v;
        break;
    default:
        *(int32_t *)p = (int32_t)v;
        break;
    }
}

/* Element offset (from the view start) of logical index idx. */
static int64_t offset_of(const tt_tensor *t, int64_t idx)
{
    int64_t off = 0, stride = 1;
    for (int i = t->t.ndim - 1; i >= 0; i--) {
        int64_t n = t->shape[i];
        int64_t s = t->t.strides ? t->strides[i] : stride;
        off += (idx % n) * s;
        idx /= n;
        stride *= n;
    }
    return off;
}

/*
 * Calls fn once per innermost row: logical elements k0 .. k0+n-1 live at
 * element offsets off, off+step, ... (row-major order, odometer over the
 * outer dims).
 */
typedef void (*row_fn)(const tt_tensor *t, int64_t k0, int64_t off, int64_t n, int64_t step,
                       void *user);

static void walk_rows(const tt_tensor *t, row_fn fn, void *user)
{
    const int nd = t->t.ndim;
    int64_t st[TT_MAX_DIMS], idx[TT_MAX_DIMS] = {0}, c = 1;
    if (tt_numel(t) == 0)
        return;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = t->t.strides ? t->strides[i] : c;
        c *= t->shape[i];
    }
    if (nd == 0) {
        fn(t, 0, 0, 1, 1, user);
        return;
    }
    const int64_t n = t->shape[nd - 1], step = st[nd - 1];
    int64_t off = 0, k = 0;
    for (;;) {
        fn(t, k, off, n, step, user);
        k += n;
        int i = nd - 2;
        for (; i >= 0; i--) {
            off += st[i];
            if (++idx[i] < t->shape[i])
                break;
            off -= st[i] * t->shape[i];
            idx[i] = 0;
        }
        if (i < 0)
            return;
    }
}

static void zero_row(const tt_tensor *t, int64_t k0, int64_t off, int64_t n, int64_t step,
                     void *user)
{
    size_t elem = tt_elem_size(t->t.dtype);
    char *p = at_offset(t, off);
    (void)k0;
    (void)user;
    if (step == 1)
        memset(p, 0, (size_t)n * elem);
    else
        for (int64_t j = 0; j < n; j++)
            memset(p + j * step * (int64_t)elem, 0, elem);
}

static void get_row(const tt_tensor *t, int64_t k0, int64_t off, int64_t n, int64_t step,
                    void *user)
{
    double *dst = (double *)user + k0;
    const enum kind k = kind_of(t->t.dtype);
    const size_t elem = tt_elem_size(t->t.dtype);
    const char *p = at_offset(t, off);
    for (int64_t j = 0; j < n; j++)
        dst[j] = get_at(k, p + j * step * (int64_t)elem);
}

static void set_row(const tt_tensor *t, int64_t k0, int64_t off, int64_t n, int64_t step,
                    void *user)
{
    const double *src = (const double *)user + k0;
    const enum kind k = kind_of(t->t.dtype);
    const size_t elem = tt_elem_size(t->t.dtype);
    char *p = at_offset(t, off);
    for (int64_t j = 0; j < n; j++)
        set_at(k, p + j * step * (int64_t)elem, src[j]);
}

/* ---- creation ------------------------------------------------------------ */

/* NULL for what (a bad argument, no memory); with must, an abort instead. */
static tt_tensor *refuse(bool must, const char *what)
{
    if (must)
        die(what);
    return NULL;
}

static tt_tensor *make(DLDataType dtype, int ndim, const int64_t *shape, const int64_t *strides,
                       bool must)
{
    enum kind k;
    if (!find_kind(dtype, &k))
        return refuse(must, "unsupported dtype");
    if (ndim < 0 || ndim > TT_MAX_DIMS)
        return refuse(must, "bad ndim");
    const size_t elem = dtype.bits / 8;
    /* span: elements from the first of the view to past its last */
    int64_t numel = 1, span = 1;
    bool overflow = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (strides && strides[i] < 0))
            return refuse(must, "negative shape or stride");
        overflow |= __builtin_mul_overflow(numel, shape[i], &numel);
    }
    if (numel == 0) {
        span = 0;
    } else if (strides) {
        for (int i = 0; i < ndim; i++) {
            int64_t extent;
            overflow |= __builtin_mul_overflow(shape[i] - 1, strides[i], &extent);
            overflow |= __builtin_add_overflow(span, extent, &span);
        }
    } else {
        span = numel;
    }
    size_t bytes;
    overflow |= __builtin_mul_overflow((size_t)span, elem, &bytes);
    overflow |= __builtin_add_overflow(bytes, 2 * TT_GUARD + 63, &bytes);
    if (overflow)
        return refuse(must, "size overflows");
    bytes = bytes / 64 * 64;
    tt_tensor *t = calloc(1, sizeof *t);
    void *buf = t ? aligned_alloc(64, bytes) : NULL;
    if (!buf) {
        free(t);
        return refuse(must, "out of memory");
    }
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        if (strides)
            t->strides[i] = strides[i];
    }
    t->buf = buf;
    t->buf_bytes = bytes;
    memset(t->buf, (int)TT_SENTINEL, bytes);

    t->t.data = t->buf;
    t->t.byte_offset = TT_GUARD;
    t->t.device = (DLDevice){kDLCPU, 0};
    t->t.ndim = ndim;
    t->t.dtype = dtype;
    t->t.shape = t->shape;
    t->t.strides = strides ? t->strides : NULL;
    walk_rows(t, zero_row, NULL);
    return t;
}

tt_tensor *tt_new(DLDataType dtype, int ndim, const int64_t *shape)
{
    return make(dtype, ndim, shape, NULL, true);
}

tt_tensor *tt_new_strided(DLDataType dtype, int ndim, const int64_t *shape, const int64_t *strides)
{
    return make(dtype, ndim, shape, strides, true);
}

tt_tensor *tt_try_new(DLDataType dtype, int ndim, const int64_t *shape)
{
    return make(dtype, ndim, shape, NULL, false);
}

tt_tensor *tt_try_new_strided(DLDataType dtype, int ndim, const int64_t *shape,
                              const int64_t *strides)
{
    return make(dtype, ndim, shape, strides, false);
}

tt_tensor *tt_clone(const tt_tensor *src)
{
    tt_tensor *t =
        make(src->t.dtype, src->t.ndim, src->shape, src->t.strides ? src->strides : NULL, true);
    memcpy(t->buf, src->buf, src->buf_bytes < t->buf_bytes ? src->buf_bytes : t->buf_bytes);
    return t;
}

void tt_free(tt_tensor *t)
{
    if (!t)
        return;
    free(t->buf);
    free(t);
}

/* ---- values -------------------------------------------------------------- */

double tt_get(const tt_tensor *t, int64_t idx)
{
    return get_at(kind_of(t->t.dtype), at_offset(t, offset_of(t, idx)));
}

void tt_set(tt_tensor *t, int64_t idx, double v)
{
    set_at(kind_of(t->t.dtype), at_offset(t, offset_of(t, idx)), v);
}

void tt_to_double(const tt_tensor *t, double *dst)
{
    walk_rows(t, get_row, dst);
}

void tt_from_double(tt_tensor *t, const double *src)
{
    walk_rows(t, set_row, (void *)(uintptr_t)src);
}

double tt_round(DLDataType d, double v)
{
    if (d.code == kDLFloat && d.bits == 32)
        return (float)v;
    if (d.code == kDLFloat && d.bits == 16)
        return fld_f16_to_f32(fld_f32_to_f16((float)v));
    if (d.code == kDLBfloat && d.bits == 16)
        return fld_bf16_to_f32(fld_f32_to_bf16((float)v));
    return v;
}

/* ---- random values ------------------------------------------------------- */

/* splitmix64: tiny, well mixed, identical everywhere. */
static uint64_t next_u64(tt_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tt_rng_seed(tt_rng *r, uint64_t seed)
{
    r->state = seed;
    r->has_spare = false;
}

uint32_t tt_rng_bits(tt_rng *r)
{
    return (uint32_t)(next_u64(r) >> 32);
}

double tt_rng_uniform(tt_rng *r)
{
    return (double)(next_u64(r) >> 11) * 0x1.0p-53;
}

double tt_rng_normal(tt_rng *r)
{
    if (r->has_spare) {
        r->has_spare = false;
        return r->spare;
    }
    /* Marsaglia's polar method: two normals per accepted point, no trig. */
    double u, v, s;
    do {
        u = 2.0 * tt_rng_uniform(r) - 1.0;
        v = 2.0 * tt_rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    r->spare = v * f;
    r->has_spare = true;
    return u * f;
}

struct normal_fill {
    double mean, std;
    tt_rng rng;
};

static void normal_row(const tt_tensor *t, int64_t k0, int64_t off, int64_t n, int64_t step,
                       void *user)
{
    struct normal_fill *f = user;
    const enum kind k = kind_of(t->t.dtype);
    const size_t elem = tt_elem_size(t->t.dtype);
    char *p = at_offset(t, off);
    (void)k0;
    for (int64_t j = 0; j < n; j++)
        set_at(k, p + j * step * (int64_t)elem, f->mean + f->std * tt_rng_normal(&f->rng));
}

void tt_fill_normal(tt_tensor *t, uint64_t seed, double mean, double std)
{
    struct normal_fill f = {mean, std, {0, 0, false}};
    tt_rng_seed(&f.rng, seed);
    walk_rows(t, normal_row, &f);
}

/* ---- padding ------------------------------------------------------------- */

static void mark_row(const tt_tensor *t, int64_t k0, int64_t off, int64_t n, int64_t step,
                     void *user)
{
    const size_t elem = tt_elem_size(t->t.dtype);
    unsigned char *m = (unsigned char *)user + TT_GUARD + off * (int64_t)elem;
    (void)k0;
    if (step == 1)
        memset(m, 1, (size_t)n * elem);
    else
        for (int64_t j = 0; j < n; j++)
            memset(m + j * step * (int64_t)elem, 1, elem);
}

bool tt_padding_intact(const tt_tensor *t)
{
    unsigned char *in_view = calloc(t->buf_bytes, 1);
    if (!in_view)
        die("out of memory");
    walk_rows(t, mark_row, in_view);
    const unsigned char *b = t->buf;
    bool ok = true;
    for (size_t i = 0; i < t->buf_bytes && ok; i++)
        ok = in_view[i] || b[i] == TT_SENTINEL;
    free(in_view);
    return ok;
}
