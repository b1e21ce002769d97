/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reference.ascend: the catalog's compute ops composed of simple aclnn
 * operators on strided views, for any layout the host accepts (vendor.ascend
 * declines non-contiguous rows, a missing weight, gemma with a residual,
 * float32 weights or residuals with 16-bit x, 16-bit rotary...).
 *
 * Each composition copies its strided inputs into contiguous scratch
 * (aclnnCast reads strided views; to the same dtype it is a copy) and
 * rounds where core/reference/reference_*.c rounds, which is where vLLM rounds:
 *   - activations compute in the storage dtype: Silu / GeluV2 into scratch
 *     of the dtype (the activation rounded, as vLLM's ACT_FN returns it),
 *     then Mul (the product rounded): round(round(act(a)) * b);
 *   - rotary computes in the query's dtype: cos/sin cast to it, then each
 *     Mul and the Add (alpha -1 or 1) rounded to it, as vLLM's
 *     forward_native computes on 16-bit tensors (float32 queries: float32
 *     throughout);
 *   - norms compute in float32 (Cast to float32, RmsNorm) and round once
 *     into out; the residual sum x + residual is rounded to the residual's
 *     dtype by aclnnAdd and that stored value is normalised, as the
 *     reference does; the weight (x's dtype or float32) is cast to float32
 *     and gemma's 1 + w formed there.
 * Outputs are written by aclnnInplaceCopy into the caller's strided views.
 *
 *   silu_and_mul        Cast a, Cast b, Silu(a), Mul, InplaceCopy -> out
 *   mul_and_silu        Cast a, Cast b, Silu(b), Mul, InplaceCopy -> out
 *   gelu_and_mul        as silu_and_mul with GeluV2(approximate = none (erf))
 *   gelu_tanh_and_mul   as silu_and_mul with GeluV2(approximate = tanh)
 *   rms_norm,           [Add x + residual -> scratch in the residual's dtype],
 *   gemma_rms_norm      Cast to float32, gamma in float32 scratch (Cast of the
 *                       weight; gemma: Adds 1; no weight: InplaceFillScalar
 *                       1), RmsNorm in float32, [InplaceCopy -> residual],
 *                       InplaceCopy -> out
 *   rotary_embedding    IndexSelect the tokens' cos and sin rows, Cast them
 *                       to the query's dtype, Cast the two halves of every
 *                       head (neox: [0, rot/2) and [rot/2, rot); gptj: even
 *                       and odd elements, a stride-2 view) into scratch,
 *                       x1 c - x2 s and x2 c + x1 s with Mul and Add (alpha
 *                       -1 / 1) broadcasting cos/sin over heads, InplaceCopy
 *                       both halves back
 *
 * The caller's tensors are written only by the final InplaceCopy operators,
 * and every aclnn function a composition uses runs once before the first of
 * them, so a failing function leaves the outputs untouched. (When a call
 * writes two or more views -- residual and out, or the halves of query and
 * key -- a failure of a later write-back after an earlier one cannot be
 * undone; the message says so.)
 *
 * Never run on Ascend hardware: only against the fake CANN of
 * tests/fake_acl, which computes these operators on the CPU.
 */
#include <stdio.h>
#include <string.h>

#include "ascend.h"

#define IMPL "reference.ascend"

static size_t align_up(size_t n)
{
    return (n + 511u) & ~(size_t)511u;
}

static size_t dt_size(int acl_dtype)
{
    return acl_dtype == ACL_DT_FLOAT ? 4u : 2u;
}

/* A strided view; NULL (and *rc set) on failure or when *rc already failed. */
static acl_tensor *view(struct fld_ascend_call *c, int *rc, int ndim, const int64_t *dims,
                        const int64_t *strides, int dt, const void *data)
{
    if (*rc != FLD_OK)
        return NULL;
    acl_tensor *t = fld__ascend_tensor(c, ndim, dims, strides, dt, data);
    if (!t)
        *rc = FLD_EIMPL;
    return t;
}

/* A contiguous (row-major) tensor over scratch. */
static acl_tensor *dense(struct fld_ascend_call *c, int *rc, int ndim, const int64_t *dims, int dt,
                         const void *data)
{
    int64_t strides[FLD_ASCEND_MAX_DIMS];
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
    return view(c, rc, ndim, dims, strides, dt, data);
}

static acl_scalar *scalar(struct fld_ascend_call *c, int *rc, float v)
{
    if (*rc != FLD_OK)
        return NULL;
    acl_scalar *s = fld__ascend_scalar(c, v);
    if (!s)
        *rc = FLD_EIMPL;
    return s;
}

/* Bump allocation from one fld__ascend_buffers() area sized up front. */
struct carve {
    char *base;
    size_t off;
};

static void *take(struct carve *k, size_t bytes)
{
    void *p = k->base + k->off;
    k->off += align_up(bytes);
    return p;
}

/* Both phases of aclnn operator `name`, when nothing failed before. */
#define STEP(c, rc, name, gws_args)                                                                \
    do {                                                                                           \
        if ((rc) == FLD_OK) {                                                                      \
            uint64_t ws_ = 0;                                                                      \
            acl_executor *ex_ = NULL;                                                              \
            int st_ = fld__acl.name##GetWorkspaceSize gws_args;                                    \
            (rc) = st_ ? fld__ascend_fail((c), #name "GetWorkspaceSize", st_)                      \
                       : fld__ascend_launch((c), #name, fld__acl.name, ws_, ex_);                  \
        }                                                                                          \
    } while (0)

/* After a failed write-back that followed a successful one. */
static void note_partial(void)
{
    char msg[768];
    snprintf(msg, sizeof msg, "%s", fld_last_error());
    fld_set_error("%s; earlier outputs of this call were already written", msg);
}

/* ------------------------------------------------------------------------ */
/* Gated activations                                                        */
/* ------------------------------------------------------------------------ */

enum gate { G_SILU_MUL, G_MUL_SILU, G_GELU_MUL, G_GELU_TANH_MUL };

static int gated(const void *argp, enum gate kind, const char *op)
{
    const fld_activation_args *a = argp;
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (x.rows == 0 || out.width == 0)
        return FLD_OK;
    const int dt = fld__ascend_dtype(a->x->dtype);
    const int64_t d = out.width;

    struct fld_ascend_call c;
    int rc = fld__ascend_begin_as(&c, IMPL, op, a->x->device);
    if (rc != FLD_OK)
        return rc;
    /* Scratch in the dtype: a and b copied, the activation, the product. */
    const size_t blk = (size_t)(x.rows * d) * dt_size(dt);
    struct carve k = {fld__ascend_buffers(&c, 4 * align_up(blk)), 0};
    if (!k.base) {
        rc = FLD_EIMPL;
        goto done;
    }
    const int64_t dims[2] = {x.rows, d};
    const int64_t x_strides[2] = {x.stride, 1}, o_strides[2] = {out.stride, 1};
    acl_tensor *ta = view(&c, &rc, 2, dims, x_strides, dt, x.data);
    acl_tensor *tb =
        view(&c, &rc, 2, dims, x_strides, dt, (const char *)x.data + (size_t)d * dt_size(dt));
    acl_tensor *ad = dense(&c, &rc, 2, dims, dt, take(&k, blk));
    acl_tensor *bd = dense(&c, &rc, 2, dims, dt, take(&k, blk));
    acl_tensor *act = dense(&c, &rc, 2, dims, dt, take(&k, blk));
    acl_tensor *prod = dense(&c, &rc, 2, dims, dt, take(&k, blk));
    acl_tensor *to = view(&c, &rc, 2, dims, o_strides, dt, out.data);

    STEP(&c, rc, aclnnCast, (ta, dt, ad, &ws_, &ex_));
    STEP(&c, rc, aclnnCast, (tb, dt, bd, &ws_, &ex_));
    acl_tensor *gate = kind == G_MUL_SILU ? bd : ad, *other = kind == G_MUL_SILU ? ad : bd;
    if (kind == G_SILU_MUL || kind == G_MUL_SILU)
        STEP(&c, rc, aclnnSilu, (gate, act, &ws_, &ex_));
    else
        STEP(&c, rc, aclnnGeluV2,
             (gate, kind == G_GELU_MUL ? ACL_GELU_NONE : ACL_GELU_TANH, act, &ws_, &ex_));
    STEP(&c, rc, aclnnMul, (act, other, prod, &ws_, &ex_));
    STEP(&c, rc, aclnnInplaceCopy, (to, prod, &ws_, &ex_));
done:
    fld__ascend_end(&c);
    return rc;
}

int fld__ascend_ref_silu_and_mul(const void *args)
{
    return gated(args, G_SILU_MUL, FLD_OP_SILU_AND_MUL);
}

int fld__ascend_ref_mul_and_silu(const void *args)
{
    return gated(args, G_MUL_SILU, FLD_OP_MUL_AND_SILU);
}

int fld__ascend_ref_gelu_and_mul(const void *args)
{
    return gated(args, G_GELU_MUL, FLD_OP_GELU_AND_MUL);
}

int fld__ascend_ref_gelu_tanh_and_mul(const void *args)
{
    return gated(args, G_GELU_TANH_MUL, FLD_OP_GELU_TANH_AND_MUL);
}

/* ------------------------------------------------------------------------ */
/* rms_norm, gemma_rms_norm                                                 */
/* ------------------------------------------------------------------------ */

static int rms(const fld_rms_norm_args *a, bool gemma)
{
    fld_rows x, out, res = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    if (x.rows == 0 || x.width == 0)
        return FLD_OK;
    const int dt = fld__ascend_dtype(a->x->dtype);
    /* weight and residual: x's dtype, or float32 with a 16-bit x */
    const int wdt = a->weight ? fld__ascend_dtype(a->weight->dtype) : dt;
    const int rdt = a->residual ? fld__ascend_dtype(a->residual->dtype) : dt;
    const int64_t R = x.rows, H = x.width;
    const size_t row_f32 = (size_t)(R * H) * 4u, w_f32 = (size_t)H * 4u;

    struct fld_ascend_call c;
    int rc = fld__ascend_begin_as(&c, IMPL, gemma ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM,
                                  a->x->device);
    if (rc != FLD_OK)
        return rc;
    /* Scratch: residual sum (its dtype), x in f32, gamma (and 1 + w), y in f32, rstd. */
    const size_t total = align_up((size_t)(R * H) * dt_size(rdt)) + 2 * align_up(row_f32) +
                         2 * align_up(w_f32) + align_up((size_t)R * 4u);
    struct carve k = {fld__ascend_buffers(&c, total), 0};
    if (!k.base) {
        rc = FLD_EIMPL;
        goto done;
    }
    const int64_t dims[2] = {R, H}, w_dims[1] = {H}, unit[1] = {1}, rstd_dims[2] = {R, 1};
    const int64_t x_strides[2] = {x.stride, 1}, o_strides[2] = {out.stride, 1};
    const int64_t r_strides[2] = {res.stride, 1};
    acl_scalar *one = scalar(&c, &rc, 1.0f);
    acl_tensor *tx = view(&c, &rc, 2, dims, x_strides, dt, x.data);
    acl_tensor *tres = NULL, *sum = NULL, *src = tx;
    void *sum_mem = take(&k, (size_t)(R * H) * dt_size(rdt));
    if (a->residual) {
        /* residual = round(x + residual) in its dtype, normalised as stored (as the reference). */
        tres = view(&c, &rc, 2, dims, r_strides, rdt, res.data);
        sum = dense(&c, &rc, 2, dims, rdt, sum_mem);
        STEP(&c, rc, aclnnAdd, (tx, tres, one, sum, &ws_, &ex_));
        src = sum;
    }
    acl_tensor *xf = dense(&c, &rc, 2, dims, ACL_DT_FLOAT, take(&k, row_f32));
    STEP(&c, rc, aclnnCast, (src, ACL_DT_FLOAT, xf, &ws_, &ex_));

    acl_tensor *gamma = dense(&c, &rc, 1, w_dims, ACL_DT_FLOAT, take(&k, w_f32));
    void *g1_mem = take(&k, w_f32);
    if (a->weight) {
        acl_tensor *tw = view(&c, &rc, 1, w_dims, unit, wdt,
                              (const char *)a->weight->data + a->weight->byte_offset);
        STEP(&c, rc, aclnnCast, (tw, ACL_DT_FLOAT, gamma, &ws_, &ex_));
        if (gemma) {
            /* 1 + w in float32, as the reference scales. */
            acl_tensor *g1 = dense(&c, &rc, 1, w_dims, ACL_DT_FLOAT, g1_mem);
            STEP(&c, rc, aclnnAdds, (gamma, one, one, g1, &ws_, &ex_));
            gamma = g1;
        }
    } else {
        /* No weight: scale 1 (gemma too: the reference adds 1 only to a weight). */
        STEP(&c, rc, aclnnInplaceFillScalar, (gamma, one, &ws_, &ex_));
    }
    acl_tensor *yf = dense(&c, &rc, 2, dims, ACL_DT_FLOAT, take(&k, row_f32));
    acl_tensor *rstd = dense(&c, &rc, 2, rstd_dims, ACL_DT_FLOAT, take(&k, (size_t)R * 4u));
    STEP(&c, rc, aclnnRmsNorm, (xf, gamma, (double)a->eps, yf, rstd, &ws_, &ex_));

    acl_tensor *to = view(&c, &rc, 2, dims, o_strides, dt, out.data);
    if (a->residual)
        STEP(&c, rc, aclnnInplaceCopy, (tres, sum, &ws_, &ex_));
    const bool wrote_residual = a->residual && rc == FLD_OK;
    STEP(&c, rc, aclnnInplaceCopy, (to, yf, &ws_, &ex_));
    if (rc != FLD_OK && wrote_residual)
        note_partial();
done:
    fld__ascend_end(&c);
    return rc;
}

int fld__ascend_ref_rms_norm(const void *args)
{
    return rms(args, false);
}

int fld__ascend_ref_gemma_rms_norm(const void *args)
{
    return rms(args, true);
}

/* ------------------------------------------------------------------------ */
/* rotary_embedding                                                         */
/* ------------------------------------------------------------------------ */

int fld__ascend_ref_rotary_embedding(const void *argp)
{
    const fld_rotary_embedding_args *a = argp;
    fld_rotary_geometry g;
    fld_rotary_geometry_of(a, &g);
    if (g.tokens == 0 || g.rot_dim == 0)
        return FLD_OK;
    const int dt = fld__ascend_dtype(a->query->dtype), cdt = fld__ascend_dtype(g.cache_dtype);
    const size_t es = dt_size(dt), ces = dt_size(cdt);
    const int64_t T = g.tokens, h = g.rot_dim / 2;
    const int n = g.key ? 2 : 1;

    struct fld_ascend_call c;
    int rc = fld__ascend_begin_as(&c, IMPL, FLD_OP_ROTARY_EMBEDDING, a->query->device);
    if (rc != FLD_OK)
        return rc;
    /* Scratch: gathered cos/sin (cache dtype, then the query's), 6 blocks per tensor. */
    const size_t tab = (size_t)(T * h);
    const size_t q_blk = (size_t)(T * g.q_heads * h) * es, k_blk = (size_t)(T * g.k_heads * h) * es;
    const size_t total = align_up(2 * tab * ces) + 2 * align_up(tab * es) + 6 * align_up(q_blk) +
                         (g.key ? 6 * align_up(k_blk) : 0);
    struct carve k = {fld__ascend_buffers(&c, total), 0};
    if (!k.base) {
        rc = FLD_EIMPL;
        goto done;
    }
    const int64_t pos_dims[1] = {T}, unit[1] = {1};
    /* One gather of whole cache rows (cos || sin), read as the cache is laid
     * out: IndexSelect makes a non-contiguous self contiguous first, which
     * for a half-row view would copy half the cache on every call. */
    const int64_t src_dims[2] = {g.max_pos, 2 * h}, src_strides[2] = {g.cache_stride, 1};
    const int64_t rows_dims[2] = {T, 2 * h};
    const int64_t tab_dims[2] = {T, h}, half_strides[2] = {2 * h, 1};
    const int64_t b_dims[3] = {T, 1, h}, b_strides[3] = {h, h, 1};
    acl_tensor *pos = view(&c, &rc, 1, pos_dims, unit,
                           g.positions_int32 ? ACL_DT_INT32 : ACL_DT_INT64, g.positions);
    acl_tensor *src = view(&c, &rc, 2, src_dims, src_strides, cdt, g.cache);
    char *rows_mem = take(&k, 2 * tab * ces);
    acl_tensor *rows = dense(&c, &rc, 2, rows_dims, cdt, rows_mem);
    acl_tensor *cos_g = view(&c, &rc, 2, tab_dims, half_strides, cdt, rows_mem);
    acl_tensor *sin_g = view(&c, &rc, 2, tab_dims, half_strides, cdt, rows_mem + (size_t)h * ces);
    /* cos and sin in the query's dtype (vLLM casts a float32 cache to it) */
    void *cos_mem = take(&k, tab * es), *sin_mem = take(&k, tab * es);
    acl_tensor *cos_f = dense(&c, &rc, 2, tab_dims, dt, cos_mem);
    acl_tensor *sin_f = dense(&c, &rc, 2, tab_dims, dt, sin_mem);
    /* [T, 1, rot/2]: broadcast over heads. */
    acl_tensor *cos3 = view(&c, &rc, 3, b_dims, b_strides, dt, cos_mem);
    acl_tensor *sin3 = view(&c, &rc, 3, b_dims, b_strides, dt, sin_mem);
    acl_scalar *one = scalar(&c, &rc, 1.0f), *minus = scalar(&c, &rc, -1.0f);

    STEP(&c, rc, aclnnIndexSelect, (src, 0, pos, rows, &ws_, &ex_));
    STEP(&c, rc, aclnnCast, (cos_g, dt, cos_f, &ws_, &ex_));
    STEP(&c, rc, aclnnCast, (sin_g, dt, sin_f, &ws_, &ex_));

    /* Halves of each head: neox [0, h) and [h, 2h); gptj even and odd elements. */
    const int64_t step = a->is_neox ? 1 : 2, second = a->is_neox ? h : 1;
    acl_tensor *halves[2][2] = {{NULL, NULL}, {NULL, NULL}},
               *rot[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int i = 0; i < n && rc == FLD_OK; i++) {
        char *base = i ? g.key : g.query;
        const int64_t heads = i ? g.k_heads : g.q_heads;
        const int64_t dims[3] = {T, heads, h};
        const int64_t strides[3] = {i ? g.k_token_stride : g.q_token_stride,
                                    i ? g.k_head_stride : g.q_head_stride, step};
        const size_t blk = i ? k_blk : q_blk;
        acl_tensor *x1 = view(&c, &rc, 3, dims, strides, dt, base);
        acl_tensor *x2 = view(&c, &rc, 3, dims, strides, dt, base + (size_t)second * es);
        /* In the query's dtype: each product and sum rounded to it (float32: float32). */
        acl_tensor *x1f = dense(&c, &rc, 3, dims, dt, take(&k, blk));
        acl_tensor *x2f = dense(&c, &rc, 3, dims, dt, take(&k, blk));
        acl_tensor *t1 = dense(&c, &rc, 3, dims, dt, take(&k, blk));
        acl_tensor *t2 = dense(&c, &rc, 3, dims, dt, take(&k, blk));
        acl_tensor *o1 = dense(&c, &rc, 3, dims, dt, take(&k, blk));
        acl_tensor *o2 = dense(&c, &rc, 3, dims, dt, take(&k, blk));
        STEP(&c, rc, aclnnCast, (x1, dt, x1f, &ws_, &ex_));
        STEP(&c, rc, aclnnCast, (x2, dt, x2f, &ws_, &ex_));
        /* o1 = x1 cos - x2 sin; o2 = x2 cos + x1 sin (t1, t2 reused in stream order). */
        STEP(&c, rc, aclnnMul, (x1f, cos3, t1, &ws_, &ex_));
        STEP(&c, rc, aclnnMul, (x2f, sin3, t2, &ws_, &ex_));
        STEP(&c, rc, aclnnAdd, (t1, t2, minus, o1, &ws_, &ex_));
        STEP(&c, rc, aclnnMul, (x2f, cos3, t1, &ws_, &ex_));
        STEP(&c, rc, aclnnMul, (x1f, sin3, t2, &ws_, &ex_));
        STEP(&c, rc, aclnnAdd, (t1, t2, one, o2, &ws_, &ex_));
        halves[i][0] = x1, halves[i][1] = x2;
        rot[i][0] = o1, rot[i][1] = o2;
    }
    /* Only now are query and key written. */
    for (int i = 0; i < n && rc == FLD_OK; i++)
        for (int j = 0; j < 2 && rc == FLD_OK; j++) {
            STEP(&c, rc, aclnnInplaceCopy, (halves[i][j], rot[i][j], &ws_, &ex_));
            if (rc != FLD_OK && (i > 0 || j > 0))
                note_partial();
        }
done:
    fld__ascend_end(&c);
    return rc;
}
