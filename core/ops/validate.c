/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument validation of the catalog ops, by family (activation, elementwise,
 * rms_norm, rotary, attention), plus the layout helpers kernels use on validated
 * tensors (fld_tensor_rows, fld_rotary_geometry_of).
 *
 * Every catalog call runs one of these validators, so the success path is
 * straight-line integer checks: no allocation, no formatting, no calls other
 * than fld__device_index(). Everything that builds a message lives in cold,
 * out-of-line fail_* functions.
 *
 * A tensor is seen as up to three levels: rows (the collapsed leading dims),
 * heads (only for the [..., H, D] query/key layout of rotary) and width (the
 * last dim). The same walk (layout_of) computes the layout for validation
 * and for the kernels' helpers, so they cannot disagree.
 *
 * The fast path of each family and the full validator it falls back to
 * must accept exactly the same calls (test_validate_fast compares them on
 * generated calls), and both read the same layout walk: they stay side by
 * side, so a change to one shows next to the other. The cold message
 * builders (fail_*) are the bulk of the lines.
 */
#include <float.h>
#include <stddef.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtypes.h"
#include "error.h"
#include "validate.h"
#include "validate_fast.h"

/* What a family expects of a tensor's dtype. */
enum tensor_kind {
    TK_FLOAT, /* float32, float16 or bfloat16 */
    TK_INDEX  /* int64 or int32 (rotary positions) */
};

/* A validated tensor's geometry, in elements. */
struct tview {
    int64_t rows;  /* product of the collapsed leading dims */
    int64_t heads; /* the dim before the last when split == 2, else 1 */
    int64_t width; /* the last dim */
    int64_t row_stride;
    int64_t head_stride;
    int dtype; /* FLD_DT_* for TK_FLOAT; 0 int64, 1 int32 for TK_INDEX */
    bool empty;
    uintptr_t lo, hi; /* the bytes spanned, [lo, hi); 0, 0 when empty (aliasing checks) */
};

/* ------------------------------------------------------------------------ */
/* Messages (cold path only)                                                */
/* ------------------------------------------------------------------------ */

/*
 * "[7, 768]". Prints at most 8 dims (a wrong ndim must not send us far past
 * the caller's shape array) and says "(null)" for a missing array.
 */
static void format_dims(char *buf, size_t size, int n, const int64_t *v)
{
    if (v == NULL && n > 0) {
        snprintf(buf, size, "(null)");
        return;
    }
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && i < 8 && len < size; i++) {
        int w = snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "[", v[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len < size)
        snprintf(buf + len, size - len, "%s%s", n <= 0 ? "[" : "", n > 8 ? ", ...]" : "]");
    len = strlen(buf);
    if (len + 1 >= size && size > 5)
        memcpy(buf + size - 5, "...]", 5); /* truncated: say so */
}

static const char *dtype_str(DLDataType t, char *buf, size_t size)
{
    const char *name = fld__dtype_long_name(t);
    if (name)
        return name;
    /* Not dispatched on, but named: the likely mistakes. */
    if (t.lanes == 1) {
        if (t.code == kDLFloat && t.bits == 64)
            return "float64";
        if (t.code == kDLInt && t.bits == 64)
            return "int64";
        if (t.code == kDLInt && t.bits == 32)
            return "int32";
    }
    snprintf(buf, size, "(code %u, bits %u, lanes %u)", (unsigned)t.code, (unsigned)t.bits,
             (unsigned)t.lanes);
    return buf;
}

static void device_str(DLDevice d, char *buf, size_t size)
{
    const char *name = fld_device_name((int)d.device_type);
    if (name)
        snprintf(buf, size, "%s:%d", name, (int)d.device_id);
    else
        snprintf(buf, size, "device type %d id %d", (int)d.device_type, (int)d.device_id);
}

#define COLD __attribute__((cold, noinline))

static COLD int fail_null_tensor(const char *op, const char *name)
{
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' is NULL", op, name);
}

static COLD int fail_rank(const char *op, const char *name, const DLTensor *t, const char *expected)
{
    if (t->ndim > 0 && t->shape == NULL)
        return fld__fail(FLD_EINVAL, "%s: tensor '%s' has ndim %d but a NULL shape", op, name,
                         (int)t->ndim);
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' has ndim %d; expected %s", op, name, (int)t->ndim,
                     expected);
}

static COLD int fail_dtype(const char *op, const char *name, DLDataType t, enum tensor_kind kind)
{
    char buf[64];
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' has dtype %s; expected %s", op, name,
                     dtype_str(t, buf, sizeof buf),
                     kind == TK_FLOAT ? "float32, float16 or bfloat16" : "int64 or int32");
}

static COLD int fail_negative(const char *op, const char *name, const DLTensor *t)
{
    char dims[160];
    format_dims(dims, sizeof dims, t->ndim, t->shape);
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' has a negative dimension in shape %s", op, name,
                     dims);
}

static COLD int fail_too_large(const char *op, const char *name, const DLTensor *t)
{
    char dims[160];
    format_dims(dims, sizeof dims, t->ndim, t->shape);
    return fld__fail(FLD_EINVAL,
                     "%s: tensor '%s' is too large: shape %s with its strides and byte_offset "
                     "%" PRIu64 " overflows the address space",
                     op, name, dims, (uint64_t)t->byte_offset);
}

static COLD int fail_last_stride(const char *op, const char *name, const DLTensor *t)
{
    return fld__fail(FLD_EINVAL,
                     "%s: tensor '%s' has stride %" PRId64 " in its last dimension; expected 1", op,
                     name, t->strides[t->ndim - 1]);
}

static COLD int fail_strides(const char *op, const char *name, const DLTensor *t, const char *why)
{
    char dims[160], strides[160];
    format_dims(dims, sizeof dims, t->ndim, t->shape);
    format_dims(strides, sizeof strides, t->ndim, t->strides);
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' with shape %s has strides %s: %s", op, name, dims,
                     strides, why);
}

static COLD int fail_data(const char *op, const char *name, const DLTensor *t, bool null)
{
    char buf[64];
    if (null)
        return fld__fail(FLD_EINVAL, "%s: tensor '%s' has NULL data but is not empty", op, name);
    return fld__fail(FLD_EINVAL,
                     "%s: tensor '%s' has data + byte_offset not aligned to its element type %s",
                     op, name, dtype_str(t->dtype, buf, sizeof buf));
}

static COLD int fail_dtype_mismatch(const char *op, const char *name, const DLTensor *t,
                                    const char *ref_name, const DLTensor *ref)
{
    char a[64], b[64];
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' has dtype %s but '%s' has %s", op, name,
                     dtype_str(t->dtype, a, sizeof a), ref_name,
                     dtype_str(ref->dtype, b, sizeof b));
}

static COLD int fail_device_unsupported(const char *op, const char *name, const DLTensor *t)
{
    return fld__fail(FLD_EINVAL,
                     "%s: tensor '%s' is on device type %d; supported: cpu (1), cuda (2), "
                     "rocm (10), ascend (12 or 21)",
                     op, name, (int)t->device.device_type);
}

static COLD int fail_device_mismatch(const char *op, const char *name, const DLTensor *t,
                                     const char *ref_name, const DLTensor *ref)
{
    char a[64], b[64];
    device_str(t->device, a, sizeof a);
    device_str(ref->device, b, sizeof b);
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' is on %s but '%s' is on %s", op, name, a,
                     ref_name, b);
}

static COLD int fail_shape_mismatch(const char *op, const char *name, const DLTensor *t,
                                    const char *ref_name, const DLTensor *ref)
{
    char a[160], b[160];
    format_dims(a, sizeof a, t->ndim, t->shape);
    format_dims(b, sizeof b, ref->ndim, ref->shape);
    return fld__fail(FLD_EINVAL, "%s: tensor '%s' has shape %s but '%s' has %s", op, name, a,
                     ref_name, b);
}

/* ------------------------------------------------------------------------ */
/* Layout                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The geometry of a tensor that passed check_tensor(). Dims of size 1 never
 * step, so their strides are ignored (as PyTorch does for contiguity); with
 * no stepping leading dim the row stride is the row extent.
 */
static inline void layout_of(const DLTensor *t, int split, struct tview *v)
{
    const int64_t *shape = t->shape, *strides = t->strides;
    const int last = t->ndim - 1;
    v->width = shape[last];
    v->heads = split == 2 ? shape[last - 1] : 1;
    v->head_stride = v->width;
    v->rows = 1;
    v->empty = v->width == 0 || v->heads == 0;
    for (int i = 0; i < t->ndim - split; i++)
        v->empty |= shape[i] == 0;
    /* An empty tensor's other dims were never bounded: their product may overflow. */
    for (int i = 0; !v->empty && i < t->ndim - split; i++)
        v->rows *= shape[i];
    if (v->empty)
        v->rows = 0;
    if (strides && !v->empty && split == 2 && v->heads > 1)
        v->head_stride = strides[last - 1];
    /* Unbounded dims (an empty tensor's, or huge ones the layout check will
     * refuse) must not overflow here: saturate, and let that check decide. */
    int64_t rs;
    if (v->empty || __builtin_mul_overflow(v->heads - 1, v->head_stride, &rs) ||
        __builtin_add_overflow(rs, v->width, &rs))
        rs = v->empty ? v->width : INT64_MAX;
    v->row_stride = rs;
    if (!strides || v->empty)
        return;
    for (int i = t->ndim - split - 1; i >= 0; i--) {
        if (shape[i] != 1) {
            v->row_stride = strides[i];
            return;
        }
    }
}

/*
 * The layout checks of one tensor in full generality: any rank, size-1 dims
 * with arbitrary strides, every product overflow-checked. check_tensor()
 * sends here what its fast path does not cover.
 */
static __attribute__((noinline)) int check_layout(const char *op, const char *name,
                                                  const DLTensor *t, int split, int64_t elem,
                                                  struct tview *v)
{
    const int64_t *shape = t->shape, *strides = t->strides;
    const int ndim = t->ndim, last = ndim - 1;
    bool zero = false, overflow = false;
    int64_t rows = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return fail_negative(op, name, t);
        zero |= shape[i] == 0;
        if (i < ndim - split)
            overflow |= __builtin_mul_overflow(rows, shape[i], &rows);
    }
    v->width = shape[last];
    v->heads = split == 2 ? shape[last - 1] : 1;
    v->empty = zero;
    if (zero) {
        v->rows = 0;
        v->row_stride = v->head_stride = v->width;
        v->lo = v->hi = 0;
        return FLD_OK;
    }
    v->rows = rows;

    int64_t row_extent, row_stride, head_stride = v->width;
    if (strides == NULL) {
        overflow |= __builtin_mul_overflow(v->heads, v->width, &row_extent);
        row_stride = row_extent;
    } else {
        if (v->width > 1 && strides[last] != 1)
            return fail_last_stride(op, name, t);
        if (split == 2 && v->heads > 1) {
            head_stride = strides[last - 1];
            if (head_stride < v->width)
                return fail_strides(op, name, t, "the head stride is smaller than the head width");
        }
        overflow |= __builtin_mul_overflow(v->heads - 1, head_stride, &row_extent) ||
                    __builtin_add_overflow(row_extent, v->width, &row_extent);
        /* Walk the leading dims inward-out: the first that steps sets the
         * row stride, each outer one must step over all the inner ones. */
        row_stride = -1;
        int64_t expect = 0;
        for (int i = ndim - split - 1; i >= 0; i--) {
            if (shape[i] == 1)
                continue;
            if (row_stride < 0) {
                row_stride = strides[i];
                if (row_stride < row_extent)
                    return fail_strides(op, name, t,
                                        row_stride < 0
                                            ? "negative row stride"
                                            : "the row stride is smaller than the row width");
            } else if (strides[i] != expect) {
                return fail_strides(op, name, t,
                                    "the leading dimensions do not collapse into one row stride");
            }
            if (__builtin_mul_overflow(strides[i], shape[i], &expect))
                expect = -1; /* no stride can match; only an outer stepping dim cares */
        }
        if (row_stride < 0)
            row_stride = row_extent;
    }
    v->row_stride = row_stride;
    v->head_stride = head_stride;

    /* Bytes spanned: (rows-1)*row_stride + row_extent elements, plus offset. */
    /* Once rows has overflowed it may be INT64_MIN: rows - 1 only when it has not. */
    int64_t span = 0, bytes = 0;
    overflow = overflow || __builtin_mul_overflow(rows - 1, row_stride, &span) ||
               __builtin_add_overflow(span, row_extent, &span) ||
               __builtin_mul_overflow(span, elem, &bytes) || t->byte_offset > (uint64_t)INT64_MAX ||
               __builtin_add_overflow(bytes, (int64_t)t->byte_offset, &bytes);
    uintptr_t end;
    overflow |= __builtin_add_overflow((uintptr_t)t->data, (uintptr_t)bytes, &end);
    if (overflow)
        return fail_too_large(op, name, t);
    if (t->data == NULL)
        return fail_data(op, name, t, true);
    if ((((uintptr_t)t->data + (uintptr_t)t->byte_offset) & (uintptr_t)(elem - 1)) != 0)
        return fail_data(op, name, t, false);
    v->lo = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    v->hi = end;
    return FLD_OK;
}

/* DLDataType {code, bits, lanes} as one little-endian word, for one compare. */
static inline uint32_t dtype_word(DLDataType t)
{
    uint32_t w;
    memcpy(&w, &t, sizeof w);
    return w;
}

#define DTYPE_WORD(code, bits) ((uint32_t)(code) | (uint32_t)(bits) << 8 | 1u << 16)

/*
 * Checks one tensor on its own: pointer, rank (>= split), shape, dtype
 * class, strides (last 1, head stride >= width, leading dims collapsible,
 * row stride >= row extent), size overflow, data. Fills v. Empty tensors
 * skip the layout and data checks: nothing of them is ever touched.
 *
 * Inlined at every call site so split and kind are constants. The fast path
 * covers tensors with at most one leading dim whose sizes and strides are
 * all below 2^30: then no product can overflow and each rule is one compare.
 * Everything else goes through check_layout().
 */
static inline __attribute__((always_inline)) int check_tensor(const char *op, const char *name,
                                                              const DLTensor *t, int split,
                                                              enum tensor_kind kind,
                                                              struct tview *v)
{
    if (__builtin_expect(t == NULL, 0))
        return fail_null_tensor(op, name);
    const int ndim = t->ndim;
    const int64_t *shape = t->shape;
    if (__builtin_expect(ndim < split || shape == NULL, 0))
        return fail_rank(op, name, t, split == 2 ? ">= 2" : ">= 1");

    const uint32_t dw = dtype_word(t->dtype);
    int shift; /* log2 of the element size */
    if (kind == TK_FLOAT) {
        if (dw == DTYPE_WORD(kDLFloat, 32))
            v->dtype = FLD_DT_F32, shift = 2;
        else if (dw == DTYPE_WORD(kDLFloat, 16))
            v->dtype = FLD_DT_F16, shift = 1;
        else if (__builtin_expect(dw == DTYPE_WORD(kDLBfloat, 16), 1))
            v->dtype = FLD_DT_BF16, shift = 1;
        else
            return fail_dtype(op, name, t->dtype, kind);
    } else {
        if (dw == DTYPE_WORD(kDLInt, 64))
            v->dtype = 0, shift = 3;
        else if (__builtin_expect(dw == DTYPE_WORD(kDLInt, 32), 1))
            v->dtype = 1, shift = 2;
        else
            return fail_dtype(op, name, t->dtype, kind);
    }

    if (__builtin_expect(ndim > split + 1, 0))
        return check_layout(op, name, t, split, (int64_t)1 << shift, v);
    const int64_t *strides = t->strides;
    const int64_t width = shape[ndim - 1];
    const int64_t heads = split == 2 ? shape[ndim - 2] : 1;
    const int64_t rows = ndim > split ? shape[0] : 1;
    /* One test for the fast path's domain: sizes in [1, 2^30) (size - 1
     * wraps to all ones for 0 and is huge for negatives), the strides that
     * step and the offset in [0, 2^30). Then spans stay below 2^62 bytes and
     * no product can overflow, so all arithmetic comes after this test.
     * Empty, huge or negative tensors take check_layout(). */
    uint64_t domain =
        ((uint64_t)rows - 1) | ((uint64_t)heads - 1) | ((uint64_t)width - 1) | t->byte_offset;
    int64_t last = 1, head_stride = width, row_stride = -1; /* -1: rows do not step */
    if (strides) {
        last = strides[ndim - 1];
        if (split == 2 && heads > 1)
            head_stride = strides[ndim - 2];
        if (rows > 1)
            row_stride = strides[0];
        domain |= (uint64_t)head_stride | (rows > 1 ? (uint64_t)row_stride : 0);
    }
    if (__builtin_expect((domain >> 30) != 0, 0))
        return check_layout(op, name, t, split, (int64_t)1 << shift, v);
    if (__builtin_expect(last != 1 && width > 1, 0))
        return fail_last_stride(op, name, t);
    if (__builtin_expect(head_stride < width, 0))
        return fail_strides(op, name, t, "the head stride is smaller than the head width");
    const int64_t row_extent = (heads - 1) * head_stride + width;
    if (row_stride < 0)
        row_stride = row_extent; /* contiguous, or a single row */
    if (__builtin_expect(row_stride < row_extent, 0))
        return fail_strides(op, name, t, "the row stride is smaller than the row width");
    /* NULL data, a span past the end of the address space, misalignment:
     * rare, so one branch here and the general path says which. */
    const uintptr_t data = (uintptr_t)t->data;
    const uintptr_t start = data + (uintptr_t)t->byte_offset;
    const uintptr_t bytes = (uintptr_t)((rows - 1) * row_stride + row_extent) << shift;
    if (__builtin_expect(data == 0 || start < data || start + bytes < start ||
                             (start & (((uintptr_t)1 << shift) - 1)) != 0,
                         0))
        return check_layout(op, name, t, split, (int64_t)1 << shift, v);
    v->rows = rows;
    v->heads = heads;
    v->width = width;
    v->row_stride = row_stride;
    v->head_stride = head_stride;
    v->empty = false;
    v->lo = start;
    v->hi = start + bytes;
    return FLD_OK;
}

/*
 * The common case for a tensor that must match x exactly (rms_norm's out and
 * residual): contiguous, same rank, shape, dtype and device, and x itself
 * contiguous and non-empty. Then x's checks cover the layout and only this
 * tensor's data pointer needs a look. false sends the caller to the full
 * checks, which also produce the message.
 */
static inline bool fast_same_as(const DLTensor *t, const DLTensor *x, const struct tview *xv)
{
    if (!t || !t->shape || t->strides || x->strides || t->ndim != x->ndim || xv->empty ||
        dtype_word(t->dtype) != dtype_word(x->dtype) ||
        t->device.device_type != x->device.device_type ||
        t->device.device_id != x->device.device_id || t->byte_offset >= ((uint64_t)1 << 30))
        return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != x->shape[i])
            return false;
    const unsigned shift = x->dtype.bits == 32 ? 2 : 1;
    const uintptr_t start = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    const uintptr_t bytes = (uintptr_t)(xv->rows * xv->row_stride) << shift;
    return t->data && start >= (uintptr_t)t->data && start + bytes >= start &&
           (start & ((1u << shift) - 1)) == 0;
}

/* The same for a contiguous [H] weight of a contiguous x. */
static inline bool fast_weight(const DLTensor *w, const DLTensor *x, const struct tview *xv)
{
    if (!w->shape || w->strides || w->ndim != 1 || w->shape[0] != xv->width || xv->empty ||
        dtype_word(w->dtype) != dtype_word(x->dtype) ||
        w->device.device_type != x->device.device_type ||
        w->device.device_id != x->device.device_id || w->byte_offset >= ((uint64_t)1 << 30))
        return false;
    const unsigned shift = x->dtype.bits == 32 ? 2 : 1;
    const uintptr_t start = (uintptr_t)w->data + (uintptr_t)w->byte_offset;
    const uintptr_t bytes = (uintptr_t)xv->width << shift;
    return w->data && start >= (uintptr_t)w->data && start + bytes >= start &&
           (start & ((1u << shift) - 1)) == 0;
}

static inline int same_device(const char *op, const char *name, const DLTensor *t,
                              const char *ref_name, const DLTensor *ref)
{
    if (__builtin_expect(t->device.device_type != ref->device.device_type ||
                             t->device.device_id != ref->device.device_id,
                         0))
        return fail_device_mismatch(op, name, t, ref_name, ref);
    return FLD_OK;
}

static inline int same_dtype(const char *op, const char *name, const DLTensor *t,
                             const struct tview *tv, const char *ref_name, const DLTensor *ref,
                             const struct tview *rv)
{
    if (__builtin_expect(tv->dtype != rv->dtype, 0))
        return fail_dtype_mismatch(op, name, t, ref_name, ref);
    return FLD_OK;
}

static inline int same_shape(const char *op, const char *name, const DLTensor *t,
                             const char *ref_name, const DLTensor *ref)
{
    if (__builtin_expect(t->ndim != ref->ndim, 0))
        return fail_shape_mismatch(op, name, t, ref_name, ref);
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_expect(t->shape[i] != ref->shape[i], 0))
            return fail_shape_mismatch(op, name, t, ref_name, ref);
    return FLD_OK;
}

/* The FLD_DEV_* index of the call, from its first tensor. */
static inline int device_key(const char *op, const char *name, const DLTensor *t, int *dev)
{
    *dev = fld__device_index((int)t->device.device_type);
    if (__builtin_expect(*dev < 0, 0))
        return fail_device_unsupported(op, name, t);
    return FLD_OK;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (__builtin_expect(rc_ != FLD_OK, 0))                                                    \
            return rc_;                                                                            \
    } while (0)

static COLD int fail_args_null(const char *op)
{
    return fld__fail(FLD_EINVAL, "%s: argument 'args' is NULL", op);
}

/* ------------------------------------------------------------------------ */
/* Aliasing between the tensors of one call                                 */
/* ------------------------------------------------------------------------ */

/*
 * A kernel that writes a tensor while it reads another that shares memory
 * with it computes from values it has already overwritten; what comes out
 * depends on the implementation and its order of work. So a call whose
 * written tensor shares a byte with another of its tensors is refused,
 * except the full aliasing the public header allows (rms_norm's out == x:
 * same data, byte_offset, shape and strides). Tensors that are only read
 * may share memory.
 *
 * The check runs after the layout checks, on validated tensors. The common
 * case is two compares per pair of byte ranges; only ranges that meet go to
 * shares_memory(), which tells interleaved views of one buffer (query and
 * key as column slices of a fused qkv, rows at the same stride) from real
 * overlap.
 */

/* A validated tensor as rows: row i covers [lo + i * stride, lo + i * stride + run). */
struct extent {
    uintptr_t lo, hi; /* the bytes spanned, [lo, hi); 0, 0 when empty */
    int64_t stride;   /* bytes between rows */
    int64_t run;      /* bytes of one row, padded heads included */
    int64_t rows;
};

static inline struct extent extent_of(const DLTensor *t, int split)
{
    struct extent e = {0, 0, 0, 0, 0};
    struct tview v;
    layout_of(t, split, &v);
    if (v.empty)
        return e;
    const int64_t elem = t->dtype.bits >> 3;
    e.rows = v.rows;
    e.run = ((v.heads - 1) * v.head_stride + v.width) * elem;
    e.stride = v.row_stride * elem;
    e.lo = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    e.hi = e.lo + (uintptr_t)((v.rows - 1) * e.stride + e.run);
    return e;
}

static inline bool ranges_meet(const struct extent *a, const struct extent *b)
{
    return a->lo < b->hi && b->lo < a->hi;
}

/* [a0, a1) and [b0, b1) of row indexes intersect. */
static bool rows_meet(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
    return a0 < b1 && b0 < a1;
}

/*
 * Whether two extents whose byte ranges meet share a byte. Exact when both
 * step by the same row stride (or one has a single row) and each row fits
 * in it: then only the rows' column ranges modulo the stride can meet.
 * Otherwise the meeting ranges count as sharing.
 */
static COLD bool shares_memory(const struct extent *a, const struct extent *b)
{
    const int64_t s = a->rows > 1 ? a->stride : b->stride;
    if (s <= 0 || (a->rows > 1 && a->stride != s) || (b->rows > 1 && b->stride != s) ||
        a->run > s || b->run > s)
        return true;
    /* b's row j starts in a's row q + j, c bytes in. */
    const int64_t d = (int64_t)(b->lo - a->lo);
    int64_t q = d / s, c = d % s;
    if (c < 0) {
        c += s;
        q--;
    }
    if (c < a->run && rows_meet(q, q + b->rows, 0, a->rows))
        return true; /* b's row starts inside a's row q + j */
    return c + b->run > s && rows_meet(q + 1, q + 1 + b->rows, 0, a->rows);
}

static COLD int fail_overlap(const char *op, const char *name, const DLTensor *t,
                             const struct extent *e, const char *other_name, const struct extent *o,
                             const char *allowed)
{
    char dev[64];
    device_str(t->device, dev, sizeof dev);
    return fld__fail(FLD_EINVAL,
                     "%s: tensor '%s' (bytes 0x%" PRIxPTR "..0x%" PRIxPTR
                     ") overlaps tensor '%s' (bytes 0x%" PRIxPTR "..0x%" PRIxPTR ") on %s; %s",
                     op, name, e->lo, e->hi, other_name, o->lo, o->hi, dev, allowed);
}

/* One pair: FLD_OK when they share no byte, else the message. */
static int disjoint(const char *op, const char *name, const DLTensor *t, const struct extent *e,
                    const char *other_name, const struct extent *o)
{
    if (ranges_meet(e, o) && shares_memory(e, o))
        return fail_overlap(
            op, name, t, e, other_name, o,
            "a tensor an op writes must not share memory with another of its tensors");
    return FLD_OK;
}

/* The precise checks, for calls whose byte ranges meet (see the fast filters below). */
static COLD int aliasing_activation(const char *op, const fld_activation_args *a)
{
    const struct extent x = extent_of(a->x, 1), out = extent_of(a->out, 1);
    return disjoint(op, "out", a->out, &out, "x", &x);
}

/*
 * rms_norm: out and residual are written. out may be x itself (the
 * header's in-place form); nothing else may share memory with out or
 * residual. x and weight are only read.
 */
static COLD int aliasing_rms_norm(const char *op, const fld_rms_norm_args *a)
{
    static const struct extent none = {0, 0, 0, 0, 0};
    const struct extent x = extent_of(a->x, 1), out = extent_of(a->out, 1);
    const struct extent w = a->weight ? extent_of(a->weight, 1) : none;
    const struct extent r = a->residual ? extent_of(a->residual, 1) : none;
    const bool out_is_x =
        out.lo == x.lo && (out.stride == x.stride || x.rows <= 1) && out.run == x.run;
    if (!out_is_x && ranges_meet(&out, &x) && shares_memory(&out, &x))
        return fail_overlap(op, "out", a->out, &out, "x", &x,
                            "out may alias x only exactly (same data, byte_offset, shape and "
                            "strides)");
    TRY(disjoint(op, "out", a->out, &out, "weight", &w));
    TRY(disjoint(op, "out", a->out, &out, "residual", &r));
    TRY(disjoint(op, "residual", a->residual, &r, "x", &x));
    return disjoint(op, "residual", a->residual, &r, "weight", &w);
}

/* rotary: query and key are rotated in place; positions and the cache are read. */
static COLD int aliasing_rotary(const char *op, const fld_rotary_embedding_args *a)
{
    const DLTensor *p = a->positions;
    const struct extent pos = extent_of(p, 1), cache = extent_of(a->cos_sin_cache, 1);
    const struct extent q = extent_of(a->query, a->query->ndim - p->ndim);
    TRY(disjoint(op, "query", a->query, &q, "positions", &pos));
    TRY(disjoint(op, "query", a->query, &q, "cos_sin_cache", &cache));
    if (!a->key)
        return FLD_OK;
    const struct extent k = extent_of(a->key, a->key->ndim - p->ndim);
    TRY(disjoint(op, "key", a->key, &k, "query", &q));
    TRY(disjoint(op, "key", a->key, &k, "positions", &pos));
    return disjoint(op, "key", a->key, &k, "cos_sin_cache", &cache);
}

/*
 * rotary_embedding_out: query_out and key_out are written; positions, the
 * cache, query and key are only read (query and key may share memory).
 */
static COLD int aliasing_rotary_out(const char *op, const fld_rotary_embedding_out_args *a)
{
    static const struct extent none = {0, 0, 0, 0, 0};
    const DLTensor *p = a->positions;
    const struct extent pos = extent_of(p, 1), cache = extent_of(a->cos_sin_cache, 1);
    const struct extent q = extent_of(a->query, a->query->ndim - p->ndim);
    const struct extent k = a->key ? extent_of(a->key, a->key->ndim - p->ndim) : none;
    const struct extent qo = extent_of(a->query_out, a->query_out->ndim - p->ndim);
    const struct extent ko = a->key_out ? extent_of(a->key_out, a->key_out->ndim - p->ndim) : none;
    const struct {
        const char *name;
        const DLTensor *t;
        const struct extent *e;
    } outs[] = {{"query_out", a->query_out, &qo}, {"key_out", a->key_out, &ko}},
      ins[] = {{"query", a->query, &q},
               {"key", a->key, &k},
               {"positions", p, &pos},
               {"cos_sin_cache", a->cos_sin_cache, &cache}};
    for (int o = 0; o < 2 && outs[o].t; o++)
        for (int i = 0; i < 4; i++)
            TRY(disjoint(op, outs[o].name, outs[o].t, outs[o].e, ins[i].name, ins[i].e));
    return disjoint(op, "key_out", a->key_out, &ko, "query_out", &qo);
}

/*
 * The fast filters, on the byte ranges validation computed (tview lo, hi):
 * a few compares per pair. Only when two ranges meet does the precise check
 * run (interleaved views of one buffer, or a real overlap).
 */
static inline bool meet(const struct tview *a, const struct tview *b)
{
    return (a->lo < b->hi) & (b->lo < a->hi); /* no branch: both are almost always false */
}

/* The range of t, a tensor validated as having like's layout (rms_norm's fast path). */
static inline void range_like(struct tview *v, const DLTensor *t, const struct tview *like)
{
    v->lo = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    v->hi = v->lo + (like->hi - like->lo);
    v->row_stride = like->row_stride;
}

/* The range of t, a contiguous [width] tensor validated by the fast path. */
static inline void range_row(struct tview *v, const DLTensor *t, int64_t width)
{
    v->lo = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    v->hi = v->lo + (uintptr_t)width * (uintptr_t)(t->dtype.bits >> 3);
}

static inline int check_aliasing_activation(const char *op, const fld_activation_args *a,
                                            const struct tview *x, const struct tview *out)
{
    if (__builtin_expect(meet(out, x), 0))
        return aliasing_activation(op, a);
    return FLD_OK;
}

/* x, out, w, r: the views of x, out, weight and residual (w, r 0, 0 when NULL). */
static inline int check_aliasing_rms_norm(const char *op, const fld_rms_norm_args *a,
                                          const struct tview *x, const struct tview *out,
                                          const struct tview *w, const struct tview *r)
{
    /* out == x as the header allows: same start and row stride (shapes are equal). */
    bool hit = meet(out, x) & ((out->lo != x->lo) | (out->row_stride != x->row_stride));
    if (a->weight)
        hit |= meet(out, w);
    if (a->residual)
        hit |= meet(r, out) | meet(r, x) | meet(r, w);
    if (__builtin_expect(hit, 0))
        return aliasing_rms_norm(op, a);
    return FLD_OK;
}

static inline int check_aliasing_rotary(const char *op, const fld_rotary_embedding_args *a,
                                        const struct tview *pos, const struct tview *q,
                                        const struct tview *k, const struct tview *cache)
{
    bool hit = meet(q, pos) | meet(q, cache);
    if (a->key)
        hit |= meet(k, q) | meet(k, pos) | meet(k, cache);
    if (__builtin_expect(hit, 0))
        return aliasing_rotary(op, a);
    return FLD_OK;
}

/* qo, ko: the outputs' views (ko 0, 0 without key); the inputs may meet each other. */
static inline int check_aliasing_rotary_out(const char *op, const fld_rotary_embedding_out_args *a,
                                            const struct tview *pos, const struct tview *q,
                                            const struct tview *k, const struct tview *cache,
                                            const struct tview *qo, const struct tview *ko)
{
    bool hit = meet(qo, pos) | meet(qo, cache) | meet(qo, q);
    if (a->key)
        hit |= meet(qo, k) | meet(ko, q) | meet(ko, k) | meet(ko, pos) | meet(ko, cache) |
               meet(ko, qo);
    if (__builtin_expect(hit, 0))
        return aliasing_rotary_out(op, a);
    return FLD_OK;
}

/* ------------------------------------------------------------------------ */
/* Families                                                                 */
/* ------------------------------------------------------------------------ */

static COLD int fail_activation_width(const char *op, const DLTensor *out, const DLTensor *x)
{
    char a[160], b[160];
    format_dims(a, sizeof a, out->ndim, out->shape);
    format_dims(b, sizeof b, x->ndim, x->shape);
    if (x->shape[x->ndim - 1] % 2 != 0)
        return fld__fail(FLD_EINVAL, "%s: tensor 'x' has shape %s whose last dimension is odd", op,
                         b);
    /* What out must be: x's shape with the last dimension halved (format_dims() shows 8). */
    int64_t want[8];
    char c[160];
    for (int i = 0; i < x->ndim && i < 8; i++)
        want[i] = x->shape[i];
    if (x->ndim <= 8)
        want[x->ndim - 1] /= 2;
    format_dims(c, sizeof c, x->ndim, want);
    return fld__fail(FLD_EINVAL,
                     "%s: tensor 'out' has shape %s but 'x' has %s; expected out %s (x's shape "
                     "with the last dimension halved)",
                     op, a, b, c);
}

/* The full checks of each family: every rule, every message. */

/* What the (out, x) families share: each a float tensor, x's device and dtype for out too. */
static int check_out_and_x(const char *op, const fld_activation_args *a, struct tview *x,
                           struct tview *out, struct fld_call_key *key)
{
    TRY(check_tensor(op, "x", a->x, 1, TK_FLOAT, x));
    TRY(check_tensor(op, "out", a->out, 1, TK_FLOAT, out));
    TRY(device_key(op, "x", a->x, &key->device));
    TRY(same_device(op, "out", a->out, "x", a->x));
    TRY(same_dtype(op, "out", a->out, out, "x", a->x, x));
    return FLD_OK;
}

static __attribute__((noinline)) int full_activation(const char *op, const fld_activation_args *a,
                                                     struct fld_call_key *key)
{
    struct tview x = {0}, out = {0};
    TRY(check_out_and_x(op, a, &x, &out, key));
    const int nd = a->x->ndim;
    bool ok = (x.width & 1) == 0 && a->out->ndim == nd && out.width == x.width / 2;
    for (int i = 0; ok && i < nd - 1; i++)
        ok = a->out->shape[i] == a->x->shape[i];
    if (__builtin_expect(!ok, 0))
        return fail_activation_width(op, a->out, a->x);
    TRY(check_aliasing_activation(op, a, &x, &out));
    key->dtype = x.dtype;
    return FLD_OK;
}

static COLD int fail_elementwise_shape(const char *op, const DLTensor *out, const DLTensor *x)
{
    char a[160], b[160];
    format_dims(a, sizeof a, out->ndim, out->shape);
    format_dims(b, sizeof b, x->ndim, x->shape);
    return fld__fail(FLD_EINVAL,
                     "%s: tensor 'out' has shape %s but 'x' has %s; expected out of x's shape", op,
                     a, b);
}

/* out of x's shape, dtype and device, sharing no memory with it. */
static __attribute__((noinline)) int full_elementwise(const char *op, const fld_activation_args *a,
                                                      struct fld_call_key *key)
{
    struct tview x = {0}, out = {0};
    TRY(check_out_and_x(op, a, &x, &out, key));
    bool ok = a->out->ndim == a->x->ndim;
    for (int i = 0; ok && i < a->x->ndim; i++)
        ok = a->out->shape[i] == a->x->shape[i];
    if (__builtin_expect(!ok, 0))
        return fail_elementwise_shape(op, a->out, a->x);
    TRY(check_aliasing_activation(op, a, &x, &out));
    key->dtype = x.dtype;
    return FLD_OK;
}

static COLD int fail_weight(const char *op, const DLTensor *w, const DLTensor *x)
{
    char a[160], b[160];
    format_dims(a, sizeof a, w->ndim, w->shape);
    format_dims(b, sizeof b, x->ndim, x->shape);
    return fld__fail(FLD_EINVAL,
                     "%s: tensor 'weight' has shape %s but 'x' has %s; expected [%" PRId64 "]", op,
                     a, b, x->shape[x->ndim - 1]);
}

/*
 * The dtype rules of rms_norm's weight and residual: x's own dtype, or
 * float32 when x is float16 or bfloat16 (vLLM keeps GemmaRMSNorm's weight,
 * and for float16 its residual, in float32). out must match x exactly.
 */
static COLD int fail_norm_operand_dtype(const char *op, const char *name, const DLTensor *t,
                                        const DLTensor *x)
{
    char a[64], b[64];
    if (x->dtype.bits == 32)
        return fail_dtype_mismatch(op, name, t, "x", x);
    const char *xs = dtype_str(x->dtype, b, sizeof b);
    return fld__fail(FLD_EINVAL,
                     "%s: tensor '%s' has dtype %s but 'x' has %s; expected %s or float32", op,
                     name, dtype_str(t->dtype, a, sizeof a), xs, xs);
}

static inline int check_norm_operand_dtype(const char *op, const char *name, const DLTensor *t,
                                           const struct tview *tv, const DLTensor *x,
                                           const struct tview *xv)
{
    if (__builtin_expect(
            tv->dtype != xv->dtype && (tv->dtype != FLD_DT_F32 || xv->dtype == FLD_DT_F32), 0))
        return fail_norm_operand_dtype(op, name, t, x);
    return FLD_OK;
}

static COLD int fail_eps(const char *op, float eps)
{
    return fld__fail(FLD_EINVAL, "%s: argument 'eps' is %g; expected a finite value >= 0", op,
                     (double)eps);
}

static __attribute__((noinline)) int full_rms_norm(const char *op, const fld_rms_norm_args *a,
                                                   struct fld_call_key *key)
{
    /* Filled by the checks; weight's and residual's ranges stay empty when they are NULL. */
    struct tview x, out, w, r;
    w.lo = w.hi = r.lo = r.hi = 0;
    TRY(check_tensor(op, "x", a->x, 1, TK_FLOAT, &x));
    TRY(device_key(op, "x", a->x, &key->device));
    if (!fast_same_as(a->out, a->x, &x)) {
        TRY(check_tensor(op, "out", a->out, 1, TK_FLOAT, &out));
        TRY(same_device(op, "out", a->out, "x", a->x));
        TRY(same_dtype(op, "out", a->out, &out, "x", a->x, &x));
        TRY(same_shape(op, "out", a->out, "x", a->x));
    } else {
        range_like(&out, a->out, &x); /* for the aliasing check */
    }
    if (a->weight && !fast_weight(a->weight, a->x, &x)) {
        TRY(check_tensor(op, "weight", a->weight, 1, TK_FLOAT, &w));
        TRY(same_device(op, "weight", a->weight, "x", a->x));
        TRY(check_norm_operand_dtype(op, "weight", a->weight, &w, a->x, &x));
        if (__builtin_expect(a->weight->ndim != 1 || w.width != x.width, 0))
            return fail_weight(op, a->weight, a->x);
    } else if (a->weight) {
        range_row(&w, a->weight, x.width);
    }
    if (a->residual && !fast_same_as(a->residual, a->x, &x)) {
        TRY(check_tensor(op, "residual", a->residual, 1, TK_FLOAT, &r));
        TRY(same_device(op, "residual", a->residual, "x", a->x));
        TRY(check_norm_operand_dtype(op, "residual", a->residual, &r, a->x, &x));
        TRY(same_shape(op, "residual", a->residual, "x", a->x));
    } else if (a->residual) {
        range_like(&r, a->residual, &x);
    }
    /* isfinite and >= 0 in one test: NaN fails every comparison. */
    if (__builtin_expect(!(a->eps >= 0.0f && a->eps <= FLT_MAX), 0))
        return fail_eps(op, a->eps);
    TRY(check_aliasing_rms_norm(op, a, &x, &out, &w, &r));
    key->dtype = x.dtype;
    return FLD_OK;
}

static COLD int fail_rotary(const char *op, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static COLD int fail_rotary(const char *op, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fld__fail(FLD_EINVAL, "%s: %s", op, msg);
}

static COLD int fail_token_dims(const char *op, const char *name, const DLTensor *t,
                                const DLTensor *pos)
{
    char a[160], b[160];
    format_dims(a, sizeof a, t->ndim, t->shape);
    format_dims(b, sizeof b, pos->ndim, pos->shape);
    return fail_rotary(op,
                       "tensor '%s' has shape %s but 'positions' has %s; expected %s shaped "
                       "[<positions' shape>, heads * head_size] or [<positions' shape>, heads, "
                       "head_size]",
                       name, a, b, name);
}

static COLD int fail_position(const char *op, int64_t index, int64_t value, int64_t max_pos)
{
    return fail_rotary(op,
                       "tensor 'positions' has value %" PRId64 " at index %" PRId64
                       ", outside [0, %" PRId64 ") of 'cos_sin_cache'",
                       value, index, max_pos);
}

/* Checks query or key against positions and head_size; heads out in v->heads. */
static inline int check_heads(const char *op, const char *name, const DLTensor *t,
                              const DLTensor *pos, int64_t head_size, struct tview *v)
{
    if (__builtin_expect(t == NULL, 0))
        return fail_null_tensor(op, name);
    const int64_t split64 = (int64_t)t->ndim - pos->ndim; /* ndim may be INT32_MIN */
    if (__builtin_expect(split64 != 1 && split64 != 2, 0))
        return fail_token_dims(op, name, t, pos);
    const int split = (int)split64;
    TRY(check_tensor(op, name, t, split, TK_FLOAT, v));
    for (int i = 0; i < pos->ndim; i++)
        if (__builtin_expect(t->shape[i] != pos->shape[i], 0))
            return fail_token_dims(op, name, t, pos);
    if (split == 1) {
        if (__builtin_expect(v->width % head_size != 0, 0))
            return fail_rotary(op,
                               "tensor '%s' has last dimension %" PRId64
                               ", not a multiple of head_size %" PRId64,
                               name, v->width, head_size);
    } else if (__builtin_expect(v->width != head_size, 0)) {
        return fail_rotary(op, "tensor '%s' is [..., heads, %" PRId64 "] but head_size is %" PRId64,
                           name, v->width, head_size);
    }
    return FLD_OK;
}

/* The tensors of a rotary call as the validator saw them. */
struct rotary_views {
    struct tview pos, q, k, cache;
};

/*
 * The checks of a rotary call's inputs, shared by both rotary families:
 * everything but the aliasing rules (which depend on what the op writes).
 */
static int rotary_inputs(const char *op, const fld_rotary_embedding_args *a,
                         struct fld_call_key *key, struct rotary_views *v)
{
    memset(v, 0, sizeof *v);
    const DLTensor *p = a->positions;
    if (__builtin_expect(p == NULL, 0))
        return fail_null_tensor(op, "positions");
    if (__builtin_expect(p->ndim != 1 && p->ndim != 2, 0))
        return fail_rank(op, "positions", p, "1 ([T]) or 2 ([B, S])");
    TRY(check_tensor(op, "positions", p, 1, TK_INDEX, &v->pos));
    if (__builtin_expect(!v->pos.empty && v->pos.rows > 1 && v->pos.row_stride != v->pos.width, 0))
        return fail_strides(op, "positions", p, "positions must be contiguous");
    if (__builtin_expect(a->head_size <= 0, 0))
        return fail_rotary(op, "argument 'head_size' is %" PRId64 "; expected > 0", a->head_size);

    TRY(check_heads(op, "query", a->query, p, a->head_size, &v->q));
    TRY(device_key(op, "query", a->query, &key->device));
    TRY(same_device(op, "positions", p, "query", a->query));

    const DLTensor *c = a->cos_sin_cache;
    if (__builtin_expect(c == NULL, 0))
        return fail_null_tensor(op, "cos_sin_cache");
    if (__builtin_expect(c->ndim != 2, 0))
        return fail_rank(op, "cos_sin_cache", c, "2 ([max_pos, rot_dim])");
    TRY(check_tensor(op, "cos_sin_cache", c, 1, TK_FLOAT, &v->cache));
    TRY(same_device(op, "cos_sin_cache", c, "query", a->query));
    if (__builtin_expect(v->cache.dtype != v->q.dtype && v->cache.dtype != FLD_DT_F32, 0)) {
        char b1[64], b2[64];
        return fail_rotary(
            op, "tensor 'cos_sin_cache' has dtype %s; expected %s ('query') or float32",
            dtype_str(c->dtype, b1, sizeof b1), dtype_str(a->query->dtype, b2, sizeof b2));
    }
    const int64_t rot_dim = c->shape[1], max_pos = c->shape[0];
    if (__builtin_expect(rot_dim <= 0 || (rot_dim & 1) || rot_dim > a->head_size, 0))
        return fail_rotary(op,
                           "tensor 'cos_sin_cache' has rot_dim (shape[1]) %" PRId64
                           "; expected even, > 0 and <= head_size %" PRId64,
                           rot_dim, a->head_size);

    if (a->key) {
        TRY(check_heads(op, "key", a->key, p, a->head_size, &v->k));
        TRY(same_device(op, "key", a->key, "query", a->query));
        TRY(same_dtype(op, "key", a->key, &v->k, "query", a->query, &v->q));
    }

    /* Positions index the cache, so an out-of-range value would read past
     * it. Only CPU memory can be read here; for device tensors the range
     * check is the device kernel's business (reading device memory from the
     * CPU would fault or need a synchronising copy). */
    if (key->device == FLD_DEV_CPU && !v->pos.empty) {
        const int64_t n = v->pos.rows * v->pos.width;
        const char *base = (const char *)p->data + p->byte_offset;
        if (v->pos.dtype == 0) {
            const int64_t *vals = (const int64_t *)(const void *)base;
            for (int64_t i = 0; i < n; i++)
                if (__builtin_expect((uint64_t)vals[i] >= (uint64_t)max_pos, 0))
                    return fail_position(op, i, vals[i], max_pos);
        } else {
            const int32_t *vals = (const int32_t *)(const void *)base;
            for (int64_t i = 0; i < n; i++)
                if (__builtin_expect(vals[i] < 0 || (int64_t)vals[i] >= max_pos, 0))
                    return fail_position(op, i, vals[i], max_pos);
        }
    }
    key->dtype = v->q.dtype;
    return FLD_OK;
}

static __attribute__((noinline)) int full_rotary(const char *op, const fld_rotary_embedding_args *a,
                                                 struct fld_call_key *key)
{
    struct rotary_views v;
    TRY(rotary_inputs(op, a, key, &v));
    return check_aliasing_rotary(op, a, &v.pos, &v.q, &v.k, &v.cache);
}

/* An output of rotary_embedding_out: in's rank, shape, dtype and device, its own layout. */
static int rotary_output(const char *op, const char *name, const DLTensor *out, const char *in_name,
                         const DLTensor *in, const struct tview *inv,
                         const fld_rotary_embedding_out_args *a, struct tview *v)
{
    TRY(check_heads(op, name, out, a->positions, a->head_size, v));
    TRY(same_device(op, name, out, in_name, in));
    TRY(same_dtype(op, name, out, v, in_name, in, inv));
    return same_shape(op, name, out, in_name, in);
}

static __attribute__((noinline)) int
full_rotary_out(const char *op, const fld_rotary_embedding_out_args *a, struct fld_call_key *key)
{
    /* The inputs as an in-place call would pass them: only read here. */
    const fld_rotary_embedding_args in = {a->positions, (DLTensor *)a->query, (DLTensor *)a->key,
                                          a->head_size, a->cos_sin_cache,     a->is_neox};
    struct rotary_views v;
    struct tview qo = {0}, ko = {0};
    TRY(rotary_inputs(op, &in, key, &v));
    TRY(rotary_output(op, "query_out", a->query_out, "query", a->query, &v.q, a, &qo));
    if (__builtin_expect(!a->key != !a->key_out, 0))
        return fail_rotary(op,
                           "tensor '%s' is NULL but '%s' is not; key and key_out are both "
                           "NULL or both set",
                           a->key ? "key_out" : "key", a->key ? "key" : "key_out");
    if (a->key)
        TRY(rotary_output(op, "key_out", a->key_out, "key", a->key, &v.k, a, &ko));
    return check_aliasing_rotary_out(op, a, &v.pos, &v.q, &v.k, &v.cache, &qo, &ko);
}

/* Each family's validator: the fast path for the common shapes, else the full checks. */
#define FAMILY_VALIDATOR(family, args_type)                                                        \
    int fld__validate_##family(const char *op, const void *argp, struct fld_call_key *key)         \
    {                                                                                              \
        const args_type *a = argp;                                                                 \
        if (__builtin_expect(a == NULL, 0))                                                        \
            return fail_args_null(op);                                                             \
        if (__builtin_expect(fast_##family(a, key), 1))                                            \
            return FLD_OK;                                                                         \
        return full_##family(op, a, key);                                                          \
    }
FAMILY_VALIDATOR(activation, fld_activation_args)
FAMILY_VALIDATOR(elementwise, fld_activation_args)
FAMILY_VALIDATOR(rms_norm, fld_rms_norm_args)
FAMILY_VALIDATOR(rotary, fld_rotary_embedding_args)
FAMILY_VALIDATOR(rotary_out, fld_rotary_embedding_out_args)
#undef FAMILY_VALIDATOR

int fld__validate_attention(const char *op, const void *argp, struct fld_call_key *key)
{
    const fld_attention_backend_args *a = argp;
    if (__builtin_expect(a == NULL, 0))
        return fail_args_null(op);
    if (__builtin_expect(a->name == NULL, 0))
        return fld__fail(FLD_EINVAL, "%s: argument 'name' is NULL", op);
    key->device = fld__device_index(a->device_type);
    if (__builtin_expect(key->device < 0, 0))
        return fld__fail(
            FLD_EINVAL,
            "%s: argument 'device_type' is %d; supported: cpu (1), cuda (2), rocm (10), "
            "ascend (12 or 21)",
            op, a->device_type);
    if (__builtin_expect(a->use_sparse && !a->use_mla, 0))
        return fld__fail(FLD_EINVAL, "%s: argument 'use_sparse' requires 'use_mla'", op);
    key->dtype = FLD_DT_ANY;
    return FLD_OK;
}

/* ------------------------------------------------------------------------ */
/* Helpers for kernels (validated input)                                    */
/* ------------------------------------------------------------------------ */

/* The first element of a view. An empty view's data and byte_offset are not
 * validated (nothing of it is touched), so no arithmetic is done on them. */
static inline void *view_start(const DLTensor *t, bool empty)
{
    return empty ? t->data : (char *)t->data + t->byte_offset;
}

/* fld_tensor_rows() of any rank, through the validator's own walk. */
static __attribute__((noinline)) void tensor_rows_general(const DLTensor *t, fld_rows *out)
{
    struct tview v;
    layout_of(t, 1, &v);
    out->data = view_start(t, v.empty);
    out->rows = v.rows;
    out->width = v.width;
    out->stride = v.row_stride;
}

/*
 * Every kernel calls this once per tensor, so the ranks the catalog's
 * tensors nearly always have -- [rows, width] and [width], no empty dim --
 * are answered in a few instructions, with layout_of()'s results (a row
 * dim of 1 never steps, so its stride is the width); test_validate_fast
 * checks the two agree. Anything else takes layout_of().
 */
static COLD void tensor_rows_null(const DLTensor *t, fld_rows *out)
{
    fld__fail(FLD_EINVAL, "fld_tensor_rows: argument '%s' is NULL",
              !t     ? "t"
              : !out ? "out"
                     : "t->shape");
    if (out)
        memset(out, 0, sizeof *out);
}

void fld_tensor_rows(const DLTensor *t, fld_rows *out)
{
    if (__builtin_expect(!t || !out || !t->shape, 0)) {
        tensor_rows_null(t, out); /* out of line: no frame on the path every kernel takes */
        return;
    }
    const int64_t *shape = t->shape;
    if (t->ndim == 2 && shape[0] > 0 && shape[1] > 0) {
        out->data = (char *)t->data + t->byte_offset;
        out->rows = shape[0];
        out->width = shape[1];
        out->stride = t->strides && shape[0] != 1 ? t->strides[0] : shape[1];
        return;
    }
    if (t->ndim == 1 && shape[0] > 0) {
        out->data = (char *)t->data + t->byte_offset;
        out->rows = 1;
        out->width = shape[0];
        out->stride = shape[0];
        return;
    }
    tensor_rows_general(t, out);
}

/* The bytes a validated tensor spans from its first element; 0 when empty. */
uint64_t fld__tensor_span(const DLTensor *t, int split)
{
    const struct extent e = extent_of(t, split);
    return (uint64_t)(e.hi - e.lo);
}

void fld_rotary_geometry_of(const fld_rotary_embedding_args *args, fld_rotary_geometry *out)
{
    if (__builtin_expect(!args || !out, 0)) {
        fld__fail(FLD_EINVAL, "fld_rotary_geometry_of: argument '%s' is NULL",
                  args ? "out" : "args");
        if (out)
            memset(out, 0, sizeof *out);
        return;
    }
    const DLTensor *p = args->positions, *c = args->cos_sin_cache;
    struct tview v;
    int64_t tokens = 1;
    for (int i = 0; i < p->ndim; i++)
        tokens *= p->shape[i];
    out->tokens = tokens;
    out->positions = view_start(p, tokens == 0);
    out->positions_int32 = p->dtype.bits == 32;

    layout_of(c, 1, &v);
    out->max_pos = v.rows;
    out->rot_dim = v.width;
    out->cache = view_start(c, v.empty);
    out->cache_stride = v.row_stride;
    out->cache_dtype = c->dtype;

    const DLTensor *q = args->query;
    int split = q->ndim - p->ndim;
    layout_of(q, split, &v);
    out->query = view_start(q, v.empty);
    if (split == 1) {
        out->q_heads = v.width / args->head_size;
        out->q_head_stride = args->head_size;
    } else {
        out->q_heads = v.heads;
        out->q_head_stride = v.head_stride;
    }
    out->q_token_stride = v.row_stride;

    const DLTensor *k = args->key;
    if (k == NULL) {
        out->key = NULL;
        out->k_heads = 0;
        out->k_token_stride = out->k_head_stride = 0;
        return;
    }
    split = k->ndim - p->ndim;
    layout_of(k, split, &v);
    out->key = view_start(k, v.empty);
    if (split == 1) {
        out->k_heads = v.width / args->head_size;
        out->k_head_stride = args->head_size;
    } else {
        out->k_heads = v.heads;
        out->k_head_stride = v.head_stride;
    }
    out->k_token_stride = v.row_stride;
}
