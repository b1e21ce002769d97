/* Owning DLTensors for tests; see tensor.h. */
#include "util/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/half.h>

static void die(const char *what)
{
    fprintf(stderr, "tests/util/tensor: %s\n", what);
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

/* Element offset (in elements from the view start) of logical index idx. */
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

static tt_tensor *make(DLDataType dtype, int ndim, const int64_t *shape, const int64_t *strides)
{
    if (ndim < 0 || ndim > TT_MAX_DIMS)
        die("bad ndim");
    size_t elem = tt_elem_size(dtype);
    tt_tensor *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory");
    int64_t numel = 1, span = 1; /* span: elements from the first to past the last */
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (strides && strides[i] < 0))
            die("negative shape or stride");
        t->shape[i] = shape[i];
        numel *= shape[i];
        if (strides)
            t->strides[i] = strides[i];
    }
    if (numel == 0)
        span = 0;
    else if (strides)
        for (int i = 0; i < ndim; i++)
            span += (shape[i] - 1) * strides[i];
    else
        span = numel;
    size_t bytes = 2 * TT_GUARD + (size_t)span * elem;
    bytes = (bytes + 63) / 64 * 64;
    t->buf = aligned_alloc(64, bytes);
    if (!t->buf)
        die("out of memory");
    t->buf_bytes = bytes;
    memset(t->buf, (int)TT_SENTINEL, bytes);

    t->t.data = t->buf;
    t->t.byte_offset = TT_GUARD;
    t->t.device = (DLDevice){kDLCPU, 0};
    t->t.ndim = ndim;
    t->t.dtype = dtype;
    t->t.shape = t->shape;
    t->t.strides = strides ? t->strides : NULL;
    for (int64_t i = 0; i < numel; i++)
        tt_set(t, i, 0.0);
    return t;
}

tt_tensor *tt_new(DLDataType dtype, int ndim, const int64_t *shape)
{
    return make(dtype, ndim, shape, NULL);
}

tt_tensor *tt_new_strided(DLDataType dtype, int ndim, const int64_t *shape, const int64_t *strides)
{
    return make(dtype, ndim, shape, strides);
}

tt_tensor *tt_clone(const tt_tensor *src)
{
    tt_tensor *t =
        make(src->t.dtype, src->t.ndim, src->shape, src->t.strides ? src->strides : NULL);
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

static void *addr_of(const tt_tensor *t, int64_t idx)
{
    return (char *)t->buf + TT_GUARD + (size_t)offset_of(t, idx) * tt_elem_size(t->t.dtype);
}

double tt_get(const tt_tensor *t, int64_t idx)
{
    const void *p = addr_of(t, idx);
    DLDataType d = t->t.dtype;
    if (d.code == kDLFloat && d.bits == 32)
        return *(const float *)p;
    if (d.code == kDLFloat && d.bits == 16)
        return fld_f16_to_f32(*(const uint16_t *)p);
    if (d.code == kDLBfloat && d.bits == 16)
        return fld_bf16_to_f32(*(const uint16_t *)p);
    if (d.code == kDLFloat && d.bits == 64)
        return *(const double *)p;
    if (d.code == kDLInt && d.bits == 64)
        return (double)*(const int64_t *)p;
    if (d.code == kDLInt && d.bits == 32)
        return *(const int32_t *)p;
    die("tt_get: unsupported dtype");
    return 0;
}

void tt_set(tt_tensor *t, int64_t idx, double v)
{
    void *p = addr_of(t, idx);
    DLDataType d = t->t.dtype;
    if (d.code == kDLFloat && d.bits == 32)
        *(float *)p = (float)v;
    else if (d.code == kDLFloat && d.bits == 16)
        *(uint16_t *)p = fld_f32_to_f16((float)v);
    else if (d.code == kDLBfloat && d.bits == 16)
        *(uint16_t *)p = fld_f32_to_bf16((float)v);
    else if (d.code == kDLFloat && d.bits == 64)
        *(double *)p = v;
    else if (d.code == kDLInt && d.bits == 64)
        *(int64_t *)p = (int64_t)v;
    else if (d.code == kDLInt && d.bits == 32)
        *(int32_t *)p = (int32_t)v;
    else
        die("tt_set: unsupported dtype");
}

void tt_to_double(const tt_tensor *t, double *dst)
{
    int64_t n = tt_numel(t);
    for (int64_t i = 0; i < n; i++)
        dst[i] = tt_get(t, i);
}

void tt_from_double(tt_tensor *t, const double *src)
{
    int64_t n = tt_numel(t);
    for (int64_t i = 0; i < n; i++)
        tt_set(t, i, src[i]);
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

/* splitmix64: tiny, fast, well mixed, identical everywhere. */
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
}

double tt_rng_uniform(tt_rng *r)
{
    return (double)(next_u64(r) >> 11) * 0x1.0p-53;
}

double tt_rng_normal(tt_rng *r)
{
    /* Box-Muller; 1 - u keeps the log argument in (0, 1]. */
    double u = 1.0 - tt_rng_uniform(r), v = tt_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

void tt_fill_normal(tt_tensor *t, uint64_t seed, double mean, double std)
{
    tt_rng r;
    tt_rng_seed(&r, seed);
    int64_t n = tt_numel(t);
    for (int64_t i = 0; i < n; i++)
        tt_set(t, i, mean + std * tt_rng_normal(&r));
}

bool tt_padding_intact(const tt_tensor *t)
{
    size_t elem = tt_elem_size(t->t.dtype);
    unsigned char *in_view = calloc(t->buf_bytes, 1);
    if (!in_view)
        die("out of memory");
    int64_t n = tt_numel(t);
    for (int64_t i = 0; i < n; i++)
        memset(in_view + ((char *)addr_of(t, i) - (char *)t->buf), 1, elem);
    const unsigned char *b = t->buf;
    bool ok = true;
    for (size_t i = 0; i < t->buf_bytes && ok; i++)
        ok = in_view[i] || b[i] == TT_SENTINEL;
    free(in_view);
    return ok;
}
