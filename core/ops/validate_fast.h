/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog families' quick checks (validate.c is their full validator):
 * inlined into the typed entry points (typed_entry.c), so that a typed call in
 * the common layouts runs its checks and dispatch in one function, and
 * tried first by validate.c's validators.
 */
#ifndef FLD_CORE_VALIDATE_FAST_H
#define FLD_CORE_VALIDATE_FAST_H

#include <float.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "call_key.h"
#include "devices.h"
#include "dtypes.h"

/* ------------------------------------------------------------------------ */
/* Fast paths: the common shapes in a few compares                          */
/* ------------------------------------------------------------------------ */

/*
 * Every typed call tries these first. Each covers the layouts a model
 * passes nearly always -- rank-2 tensors ([rows, width], row stride >=
 * width, last stride 1 or strides NULL), sizes, strides and byte_offset
 * below 2^30, the operands of one call on one device -- and checks them
 * with loads and compares folded into one "bad" word (few branches, which
 * the CPU predicts per call site). It returns true only for a call the
 * full validator (validate.c) accepts with the same key; anything else (a rare
 * layout, an error, byte ranges that meet) returns false and the full
 * validator decides and writes the message. So the rules, the messages and
 * the overlap refusals are the full validator's, and these are only a
 * shortcut to its answer for the calls it surely accepts. Overlap: the
 * shortcut needs the byte ranges of a written tensor and every other
 * tensor of the call to be disjoint (or out == x exactly, rms_norm's
 * in-place form); ranges that meet go to the full check, which tells
 * interleaved views from real overlap.
 *
 * tests/test_validation.c runs every case of the full validator's tests
 * and checks the shortcut's verdict against it, besides the behaviour.
 */

/* A tensor's ndim and dtype (adjacent in every DLPack version) as one word. */
_Static_assert(offsetof(DLTensor, dtype) == offsetof(DLTensor, ndim) + 4, "ndim, dtype adjacent");
_Static_assert(sizeof(DLDataType) == 4 && sizeof(DLDevice) == 8, "DLPack layout");

static inline uint64_t ndim_dtype_word(const DLTensor *t)
{
    uint64_t w;
    memcpy(&w, (const char *)t + offsetof(DLTensor, ndim), sizeof w);
    return w;
}

/* The word of an ndim and a dtype {code, bits, 1}; constant-folded, any byte order. */
static inline uint64_t nd_word(int32_t ndim, uint8_t code, uint8_t bits)
{
    struct {
        int32_t ndim;
        DLDataType dtype;
    } v = {ndim, {code, bits, 1}};
    uint64_t w;
    memcpy(&w, &v, sizeof w);
    return w;
}

static inline uint64_t device_word(const DLTensor *t)
{
    uint64_t w;
    memcpy(&w, &t->device, sizeof w);
    return w;
}

/* The fast paths' bounds: sizes, strides and byte offsets below 2^30, data below 2^62. */
#define FAST_SHIFT 30

/* Leaves the fast path (the full validator decides) unless cond holds. */
#define FAST_NEED(cond)                                                                            \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0))                                                          \
            return false;                                                                          \
    } while (0)

/* A fast-path tensor: its bytes [lo, hi) and its row stride in elements. */
struct fast_view {
    uintptr_t lo, hi;
    int64_t stride;
};

/*
 * t as rows x width elements of 1 << shift bytes (rank 2; the caller has
 * checked its shape, with rows and width in [1, 2^30)): last stride 1 or
 * strides NULL, a row stride in [width, width + 2^30) (ignored for one
 * row, as everywhere), byte_offset below 2^30, data non-NULL, below 2^62
 * and aligned to the element. Then no span can overflow or wrap: spans stay
 * below 2^63 bytes.
 */
static inline bool fast_rows(const DLTensor *t, int64_t rows, int64_t width, unsigned shift,
                             struct fast_view *v)
{
    const int64_t *st = t->strides;
    int64_t stride = width;
    if (st) {
        FAST_NEED(st[1] == 1);
        if (rows > 1)
            stride = st[0];
    }
    /* In unsigned arithmetic: a stride near INT64_MIN must not overflow. */
    FAST_NEED(((uint64_t)stride - (uint64_t)width) >> FAST_SHIFT == 0);
    const uintptr_t data = (uintptr_t)t->data, lo = data + (uintptr_t)t->byte_offset;
    FAST_NEED(((data - 1) >> 62 | t->byte_offset >> FAST_SHIFT | (lo & ((1u << shift) - 1))) == 0);
    v->lo = lo;
    v->hi = lo + ((uintptr_t)((rows - 1) * stride + width) << shift);
    v->stride = stride;
    return true;
}

/* The same for a rank-1 [width] tensor (width in [1, 2^30)). */
static inline bool fast_row(const DLTensor *t, int64_t width, unsigned shift, struct fast_view *v)
{
    FAST_NEED(!t->strides || t->strides[0] == 1);
    const uintptr_t data = (uintptr_t)t->data, lo = data + (uintptr_t)t->byte_offset;
    FAST_NEED(((data - 1) >> 62 | t->byte_offset >> FAST_SHIFT | (lo & ((1u << shift) - 1))) == 0);
    v->lo = lo;
    v->hi = lo + ((uintptr_t)width << shift);
    v->stride = width;
    return true;
}

/* Sizes in [1, 2^30) (size - 1 wraps to all ones for 0 and is huge for negatives). */
static inline bool fast_sizes(int64_t a, int64_t b)
{
    return (((uint64_t)a - 1) | ((uint64_t)b - 1)) >> FAST_SHIFT == 0;
}

static inline bool fast_apart(const struct fast_view *a, const struct fast_view *b)
{
    return a->lo >= b->hi || b->lo >= a->hi;
}

/* FLD_DT_* and log2 of the element size of a rank-2 float word; false for anything else. */
static inline bool fast_float2(uint64_t w, int *dt, unsigned *shift)
{
    if (w == nd_word(2, kDLFloat, 32))
        *dt = FLD_DT_F32, *shift = 2;
    else if (w == nd_word(2, kDLBfloat, 16))
        *dt = FLD_DT_BF16, *shift = 1;
    else if (w == nd_word(2, kDLFloat, 16))
        *dt = FLD_DT_F16, *shift = 1;
    else
        return false;
    return true;
}

/* The first tensor of a call: rank 2, a float dtype, a known device. */
static inline bool fast_first(const DLTensor *t, int *dt, unsigned *shift, int *dev)
{
    FAST_NEED(t && t->shape && fast_float2(ndim_dtype_word(t), dt, shift));
    *dev = fld__device_index((int)t->device.device_type);
    return *dev >= 0;
}

/* t has x's rank, dtype and device (words equal) and the shape [rows, width]. */
static inline bool fast_like(const DLTensor *t, const DLTensor *x, int64_t rows, int64_t width)
{
    FAST_NEED(t && t->shape);
    FAST_NEED(ndim_dtype_word(t) == ndim_dtype_word(x) && device_word(t) == device_word(x));
    return t->shape[0] == rows && t->shape[1] == width;
}

/* out [rows, d] of x [rows, 2d], same dtype and device, out disjoint from x. */
static inline __attribute__((always_inline)) bool fast_activation(const fld_activation_args *a,
                                                                  struct fld_call_key *key)
{
    const DLTensor *x = a->x, *out = a->out;
    int dt, dev;
    unsigned shift;
    FAST_NEED(fast_first(x, &dt, &shift, &dev));
    const int64_t rows = x->shape[0], width = x->shape[1];
    FAST_NEED(fast_sizes(rows, width) && (width & 1) == 0);
    FAST_NEED(fast_like(out, x, rows, width >> 1));
    struct fast_view xv, ov;
    FAST_NEED(fast_rows(x, rows, width, shift, &xv) &&
              fast_rows(out, rows, width >> 1, shift, &ov));
    FAST_NEED(fast_apart(&ov, &xv));
    key->device = dev;
    key->dtype = dt;
    return true;
}

/* out [rows, width] of x [rows, width], same dtype and device, out disjoint from x. */
static inline __attribute__((always_inline)) bool fast_elementwise(const fld_activation_args *a,
                                                                   struct fld_call_key *key)
{
    const DLTensor *x = a->x, *out = a->out;
    int dt, dev;
    unsigned shift;
    FAST_NEED(fast_first(x, &dt, &shift, &dev));
    const int64_t rows = x->shape[0], width = x->shape[1];
    FAST_NEED(fast_sizes(rows, width));
    FAST_NEED(fast_like(out, x, rows, width));
    struct fast_view xv, ov;
    FAST_NEED(fast_rows(x, rows, width, shift, &xv) && fast_rows(out, rows, width, shift, &ov));
    FAST_NEED(fast_apart(&ov, &xv));
    key->device = dev;
    key->dtype = dt;
    return true;
}

/*
 * rms_norm with x of one dtype (its rank-2 and rank-1 words xw and w1, dt,
 * log2 of its element size): one copy per dtype, so that the words and
 * shifts are constants. Each operand's rank (in its ndim and dtype word) is
 * checked before its shape is read: the caller's shape array has ndim
 * entries only.
 */
static inline __attribute__((always_inline)) bool
fast_rms_norm_as(const fld_rms_norm_args *a, struct fld_call_key *key, const uint64_t xw,
                 const uint64_t w1, const int dt, const unsigned shift)
{
    const DLTensor *x = a->x, *out = a->out, *w = a->weight, *r = a->residual;
    const int dev = fld__device_index((int)x->device.device_type);
    FAST_NEED(dev >= 0);
    const int64_t rows = x->shape[0], width = x->shape[1];
    FAST_NEED(fast_sizes(rows, width));
    FAST_NEED(fast_like(out, x, rows, width));
    struct fast_view xv, ov, wv = {0, 0, 0};
    FAST_NEED(fast_rows(x, rows, width, shift, &xv) && fast_rows(out, rows, width, shift, &ov));
    FAST_NEED((ov.lo == xv.lo && ov.stride == xv.stride) || fast_apart(&ov, &xv));
    FAST_NEED(a->eps >= 0.0f && a->eps <= FLT_MAX);
    if (w) {
        FAST_NEED(w->shape && device_word(w) == device_word(x));
        const uint64_t ww = ndim_dtype_word(w);
        unsigned wshift = shift;
        if (ww != w1) {
            /* float32 with a 16-bit x */
            FAST_NEED(dt != FLD_DT_F32 && ww == nd_word(1, kDLFloat, 32));
            wshift = 2;
        }
        FAST_NEED(w->shape[0] == width);
        FAST_NEED(fast_row(w, width, wshift, &wv) && fast_apart(&ov, &wv));
    }
    if (r) {
        FAST_NEED(r->shape && device_word(r) == device_word(x));
        const uint64_t rw = ndim_dtype_word(r);
        unsigned rshift = shift;
        if (rw != xw) {
            /* float32 with a 16-bit x */
            FAST_NEED(dt != FLD_DT_F32 && rw == nd_word(2, kDLFloat, 32));
            rshift = 2;
        }
        FAST_NEED(r->shape[0] == rows && r->shape[1] == width);
        struct fast_view rv;
        FAST_NEED(fast_rows(r, rows, width, rshift, &rv));
        FAST_NEED(fast_apart(&rv, &ov) && fast_apart(&rv, &xv) && (!w || fast_apart(&rv, &wv)));
    }
    key->device = dev;
    key->dtype = dt;
    return true;
}

/*
 * rms_norm: x [rows, h]; out as x, and out == x exactly or disjoint from
 * it; weight [h] of x's dtype (or float32 with a 16-bit x), disjoint from
 * out; residual as x (or float32 with a 16-bit x), disjoint from the
 * others; eps finite and >= 0.
 */
static inline __attribute__((always_inline)) bool fast_rms_norm(const fld_rms_norm_args *a,
                                                                struct fld_call_key *key)
{
    const DLTensor *x = a->x;
    FAST_NEED(x && x->shape);
    const uint64_t xw = ndim_dtype_word(x);
    if (xw == nd_word(2, kDLFloat, 32))
        return fast_rms_norm_as(a, key, nd_word(2, kDLFloat, 32), nd_word(1, kDLFloat, 32),
                                FLD_DT_F32, 2);
    if (xw == nd_word(2, kDLBfloat, 16))
        return fast_rms_norm_as(a, key, nd_word(2, kDLBfloat, 16), nd_word(1, kDLBfloat, 16),
                                FLD_DT_BF16, 1);
    if (xw == nd_word(2, kDLFloat, 16))
        return fast_rms_norm_as(a, key, nd_word(2, kDLFloat, 16), nd_word(1, kDLFloat, 16),
                                FLD_DT_F16, 1);
    return false;
}

/* Positions [T] (int64 or int32, contiguous, CPU memory), each in [0, max_pos). */
static inline bool fast_positions(const DLTensor *p, int64_t tokens, int64_t max_pos,
                                  struct fast_view *v)
{
    const uint64_t pw = ndim_dtype_word(p);
    const bool i32 = pw == nd_word(1, kDLInt, 32);
    FAST_NEED((i32 || pw == nd_word(1, kDLInt, 64)) && p->shape[0] == tokens);
    FAST_NEED(fast_row(p, tokens, i32 ? 2 : 3, v));
    bool bad = false;
    if (i32) {
        const int32_t *pos = (const int32_t *)v->lo;
        for (int64_t i = 0; i < tokens; i++)
            bad |= (uint64_t)(uint32_t)pos[i] >= (uint64_t)max_pos;
    } else {
        const int64_t *pos = (const int64_t *)v->lo;
        for (int64_t i = 0; i < tokens; i++)
            bad |= (uint64_t)pos[i] >= (uint64_t)max_pos;
    }
    return !bad;
}

/* The views of a rotary call's tensors that passed fast_rotary_inputs(). */
struct fast_rotary_views {
    struct fast_view pos, q, k, cache;
    unsigned shift;
};

/*
 * rotary on the CPU: positions [T]; query [T, Hq * head_size] and key (or
 * NULL) [T, Hk * head_size] of one float dtype; cos_sin_cache [max_pos,
 * rot_dim] of that dtype or float32, rot_dim even and <= head_size; every
 * position in range; query and key disjoint from each other and from
 * positions and the cache. Other devices take the full path (their
 * positions are not read here). The checks both rotary families share;
 * written says whether query and key are written: only then must they be
 * apart from each other and from positions and the cache.
 */
static inline __attribute__((always_inline)) bool
fast_rotary_inputs(const DLTensor *p, const DLTensor *q, const DLTensor *k, int64_t hs,
                   const DLTensor *c, const bool written, struct fld_call_key *key,
                   struct fast_rotary_views *v)
{
    int dt, dev;
    unsigned shift;
    FAST_NEED(fast_first(q, &dt, &shift, &dev) && dev == FLD_DEV_CPU);
    FAST_NEED(p && p->shape && c && c->shape && device_word(p) == device_word(q) &&
              device_word(c) == device_word(q));
    /* Ranks (in the ndim and dtype words) before shapes, as for rms_norm. */
    const uint64_t cw = ndim_dtype_word(c);
    const bool c32 = cw == nd_word(2, kDLFloat, 32);
    FAST_NEED(c32 || cw == ndim_dtype_word(q));
    const int64_t tokens = q->shape[0], width = q->shape[1];
    const int64_t max_pos = c->shape[0], rot_dim = c->shape[1];
    FAST_NEED(fast_sizes(tokens, width) && fast_sizes(max_pos, rot_dim) && fast_sizes(hs, 1));
    FAST_NEED((rot_dim & 1) == 0 && rot_dim <= hs && (uint32_t)width % (uint32_t)hs == 0);
    v->k = (struct fast_view){0, 0, 0};
    FAST_NEED(fast_rows(q, tokens, width, shift, &v->q) &&
              fast_rows(c, max_pos, rot_dim, c32 ? 2 : shift, &v->cache));
    FAST_NEED(!written || fast_apart(&v->q, &v->cache));
    if (k) {
        FAST_NEED(k->shape && ndim_dtype_word(k) == ndim_dtype_word(q) &&
                  device_word(k) == device_word(q));
        FAST_NEED(k->shape[0] == tokens);
        const int64_t kwidth = k->shape[1];
        FAST_NEED(fast_sizes(kwidth, 1) && (uint32_t)kwidth % (uint32_t)hs == 0);
        FAST_NEED(fast_rows(k, tokens, kwidth, shift, &v->k));
        FAST_NEED(!written || (fast_apart(&v->k, &v->q) && fast_apart(&v->k, &v->cache)));
    }
    FAST_NEED(fast_positions(p, tokens, max_pos, &v->pos));
    FAST_NEED(!written || (fast_apart(&v->q, &v->pos) && (!k || fast_apart(&v->k, &v->pos))));
    v->shift = shift;
    key->device = FLD_DEV_CPU;
    key->dtype = dt;
    return true;
}

static inline __attribute__((always_inline)) bool fast_rotary(const fld_rotary_embedding_args *a,
                                                              struct fld_call_key *key)
{
    struct fast_rotary_views v;
    return fast_rotary_inputs(a->positions, a->query, a->key, a->head_size, a->cos_sin_cache, true,
                              key, &v);
}

/* An output of rotary_embedding_out: like its input in, apart from every other tensor. */
static inline bool fast_rotary_output(const DLTensor *out, const DLTensor *in,
                                      const struct fast_rotary_views *v, struct fast_view *ov)
{
    FAST_NEED(fast_like(out, in, in->shape[0], in->shape[1]));
    FAST_NEED(fast_rows(out, in->shape[0], in->shape[1], v->shift, ov));
    FAST_NEED(fast_apart(ov, &v->q) && fast_apart(ov, &v->cache) && fast_apart(ov, &v->pos));
    return true;
}

/*
 * rotary_embedding_out on the CPU: the inputs as fast_rotary_inputs()
 * takes them, query and key only read (so they may share memory: column
 * slices of one fused qkv, as vLLM passes them), query_out and key_out of
 * the shapes, dtype and device of query and key, each apart from every
 * other tensor of the call.
 */
static inline __attribute__((always_inline)) bool
fast_rotary_out(const fld_rotary_embedding_out_args *a, struct fld_call_key *key)
{
    struct fast_rotary_views v;
    FAST_NEED(fast_rotary_inputs(a->positions, a->query, a->key, a->head_size, a->cos_sin_cache,
                                 false, key, &v));
    struct fast_view qo, ko;
    FAST_NEED(fast_rotary_output(a->query_out, a->query, &v, &qo));
    FAST_NEED((a->key == NULL) == (a->key_out == NULL));
    if (a->key) {
        FAST_NEED(fast_rotary_output(a->key_out, a->key, &v, &ko));
        FAST_NEED(fast_apart(&ko, &v.k) && fast_apart(&qo, &v.k) && fast_apart(&ko, &qo));
    }
    return true;
}

#endif
