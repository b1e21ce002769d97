/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog ops of vendor.ascend mapped onto aclnn operators.
 *
 *   rms_norm            aclnnRmsNorm; with residual aclnnAddRmsNorm, which
 *                       writes residual = x + residual and out = norm(that)
 *   gemma_rms_norm      aclnnGemmaRmsNorm (when this CANN has it), without
 *                       residual only: there is no fused add variant
 *   silu_and_mul        float32: aclnnSwiGlu over the last dimension;
 *                       float16/bfloat16: aclnnSilu into scratch of the
 *                       dtype, then aclnnMul by the second half into out --
 *                       vLLM rounds the activation to the dtype before the
 *                       product, which two elementwise operators do and a
 *                       fused SwiGlu (computing in float32) would not
 *   rotary_embedding    float32 only (vLLM rounds every product and sum of
 *                       a 16-bit rotation to the dtype; the fused operators
 *                       rotate in float32). aclnnRopeWithSinCosCache when
 *                       this CANN has it and the
 *                       call fits it (a key, heads packed in each token's row,
 *                       a contiguous cache): one operator that takes the
 *                       positions and the cos/sin cache as vLLM keeps them.
 *                       Otherwise (or when that operator refuses the call, as
 *                       on SoCs it does not support): aclnnIndexSelect gathers
 *                       each token's cache row (cos || sin) into scratch, two
 *                       aclnnInplaceCopy spread it into full-width cos and sin
 *                       tables (each frequency repeated the way the mode pairs
 *                       elements), aclnnRotaryPositionEmbedding in its 4-D
 *                       form ([1, T, N, D], cos/sin [1, T, 1, D], mode half
 *                       for neox, interleave for gptj) rotates the first
 *                       rot_dim elements of every head into scratch, and
 *                       aclnnInplaceCopy writes them back into the strided
 *                       query/key views, leaving elements past rot_dim alone
 *   attention_backend   ASCEND / ASCEND_MLA; sparse MLA is not offered
 *
 * What the aclnn operators cannot take is declined in supports(), so the
 * call passes to the next candidate: RmsNorm/AddRmsNorm and SwiGlu do not
 * accept non-contiguous tensors, rms_norm needs a weight (gamma is required
 * by aclnn) of x's dtype and a residual of x's dtype (the float32 ones of
 * GemmaRMSNorm go to reference.ascend), rotary needs a float32 query with a
 * float32 cache and D < 896, heads < 1000 (the operator's documented
 * limits). reference.ascend serves the rest.
 *
 * Every operator goes through both aclnn phases before the next starts, so
 * an argument error reported by a GetWorkspaceSize phase leaves no executor
 * behind. Outputs are written only by the last operator(s) of a call:
 * earlier ones write scratch memory, so a failure there leaves the caller's
 * tensors untouched. (For rotary with a key, a failure of the key's
 * write-back after the query's has been queued cannot be undone; the error
 * says so.)
 */
#include <stdio.h>
#include <string.h>

#include "ascend.h"

static bool rows_contiguous(const DLTensor *t)
{
    fld_rows r;
    fld_tensor_rows(t, &r);
    return r.rows <= 1 || r.stride == r.width;
}

static size_t elem_size(int acl_dtype)
{
    return acl_dtype == ACL_DT_FLOAT ? 4u : 2u;
}

static size_t align_up(size_t n)
{
    return (n + 511u) & ~(size_t)511u;
}

static const void *data_of(const DLTensor *t)
{
    return (const char *)t->data + t->byte_offset;
}

/* Both phases of one aclnn operator; name is the run function's name. */
#define RUN_OP(c, rc, name, gws_call)                                                              \
    do {                                                                                           \
        uint64_t ws_ = 0;                                                                          \
        acl_executor *ex_ = NULL;                                                                  \
        int st_ = fld__acl.name##GetWorkspaceSize gws_call;                                        \
        (rc) = st_ ? fld__ascend_fail((c), #name "GetWorkspaceSize", st_)                          \
                   : fld__ascend_launch((c), #name, fld__acl.name, ws_, ex_);                      \
    } while (0)

/* ------------------------------------------------------------------------ */
/* rms_norm                                                                 */
/* ------------------------------------------------------------------------ */

static int rms_norm(const fld_rms_norm_args *a, bool gemma);

bool fld__ascend_rms_norm_supports(const void *argp)
{
    const fld_rms_norm_args *a = argp;
    if (!a->weight)
        return false;
    /* float32 weight or residual with a 16-bit x: reference.ascend */
    const int dt = fld_dtype_index(a->x->dtype);
    if (fld_dtype_index(a->weight->dtype) != dt ||
        (a->residual && fld_dtype_index(a->residual->dtype) != dt))
        return false;
    if (!rows_contiguous(a->x) || !rows_contiguous(a->out))
        return false;
    return !a->residual || rows_contiguous(a->residual);
}

bool fld__ascend_gemma_rms_norm_supports(const void *argp)
{
    const fld_rms_norm_args *a = argp;
    return fld__acl.aclnnGemmaRmsNorm && !a->residual && fld__ascend_rms_norm_supports(argp);
}

int fld__ascend_gemma_rms_norm(const void *argp)
{
    const fld_rms_norm_args *a = argp;
    if (!fld__ascend_gemma_rms_norm_supports(argp)) {
        fld_set_error("vendor.ascend: gemma_rms_norm: needs aclnnGemmaRmsNorm (CANN 8.1+), a "
                      "weight of x's dtype, no residual and contiguous rows");
        return FLD_EUNSUPPORTED;
    }
    return rms_norm(a, true);
}

int fld__ascend_rms_norm(const void *argp)
{
    const fld_rms_norm_args *a = argp;
    if (!fld__ascend_rms_norm_supports(argp)) {
        fld_set_error("vendor.ascend: rms_norm: needs a weight and a residual (if any) of x's "
                      "dtype and contiguous rows");
        return FLD_EUNSUPPORTED;
    }
    return rms_norm(a, false);
}

/* aclnnRmsNorm, aclnnAddRmsNorm (residual) or aclnnGemmaRmsNorm (gemma). */
static int rms_norm(const fld_rms_norm_args *a, bool gemma)
{
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (x.rows == 0 || x.width == 0)
        return FLD_OK;
    int dt = fld__ascend_dtype(a->x->dtype);

    struct fld_ascend_call c;
    int rc = fld__ascend_begin(&c, gemma ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM, a->x->device);
    if (rc != FLD_OK)
        return rc;
    const int64_t dims[2] = {x.rows, x.width};
    const int64_t x_strides[2] = {x.stride, 1};
    const int64_t out_strides[2] = {out.stride, 1};
    const int64_t w_dims[1] = {x.width}, w_strides[1] = {1};
    const int64_t rstd_dims[2] = {x.rows, 1}, rstd_strides[2] = {1, 1};

    acl_tensor *tx = fld__ascend_tensor(&c, 2, dims, x_strides, dt, x.data);
    acl_tensor *tw =
        tx ? fld__ascend_tensor(&c, 1, w_dims, w_strides, dt, data_of(a->weight)) : NULL;
    acl_tensor *ty = tw ? fld__ascend_tensor(&c, 2, dims, out_strides, dt, out.data) : NULL;
    /* rstd is an output aclnn requires; we have no use for it. */
    void *rstd = ty ? fld__ascend_buffers(&c, (size_t)x.rows * sizeof(float)) : NULL;
    acl_tensor *tr =
        rstd ? fld__ascend_tensor(&c, 2, rstd_dims, rstd_strides, ACL_DT_FLOAT, rstd) : NULL;
    if (!tr) {
        rc = FLD_EIMPL;
        goto done;
    }

    uint64_t ws = 0;
    acl_executor *ex = NULL;
    if (a->residual) {
        fld_rows res;
        fld_tensor_rows(a->residual, &res);
        const int64_t res_strides[2] = {res.stride, 1};
        acl_tensor *tres = fld__ascend_tensor(&c, 2, dims, res_strides, dt, res.data);
        if (!tres) {
            rc = FLD_EIMPL;
            goto done;
        }
        int st = fld__acl.aclnnAddRmsNormGetWorkspaceSize(tx, tres, tw, (double)a->eps, ty, tr,
                                                          tres, &ws, &ex);
        rc = st ? fld__ascend_fail(&c, "aclnnAddRmsNormGetWorkspaceSize", st)
                : fld__ascend_launch(&c, "aclnnAddRmsNorm", fld__acl.aclnnAddRmsNorm, ws, ex);
    } else if (gemma) {
        int st =
            fld__acl.aclnnGemmaRmsNormGetWorkspaceSize(tx, tw, (double)a->eps, ty, tr, &ws, &ex);
        rc = st ? fld__ascend_fail(&c, "aclnnGemmaRmsNormGetWorkspaceSize", st)
                : fld__ascend_launch(&c, "aclnnGemmaRmsNorm", fld__acl.aclnnGemmaRmsNorm, ws, ex);
    } else {
        int st = fld__acl.aclnnRmsNormGetWorkspaceSize(tx, tw, (double)a->eps, ty, tr, &ws, &ex);
        rc = st ? fld__ascend_fail(&c, "aclnnRmsNormGetWorkspaceSize", st)
                : fld__ascend_launch(&c, "aclnnRmsNorm", fld__acl.aclnnRmsNorm, ws, ex);
    }
done:
    fld__ascend_end(&c);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* silu_and_mul                                                             */
/* ------------------------------------------------------------------------ */

bool fld__ascend_silu_and_mul_supports(const void *argp)
{
    const fld_activation_args *a = argp;
    return rows_contiguous(a->x) && rows_contiguous(a->out);
}

int fld__ascend_silu_and_mul(const void *argp)
{
    const fld_activation_args *a = argp;
    if (!fld__ascend_silu_and_mul_supports(argp)) {
        fld_set_error("vendor.ascend: silu_and_mul: needs contiguous rows");
        return FLD_EUNSUPPORTED;
    }
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (x.rows == 0 || out.width == 0)
        return FLD_OK;
    int dt = fld__ascend_dtype(a->x->dtype);

    struct fld_ascend_call c;
    int rc = fld__ascend_begin(&c, FLD_OP_SILU_AND_MUL, a->x->device);
    if (rc != FLD_OK)
        return rc;
    const int64_t x_dims[2] = {x.rows, x.width}, x_strides[2] = {x.stride, 1};
    const int64_t o_dims[2] = {out.rows, out.width}, o_strides[2] = {out.stride, 1};
    acl_tensor *to = fld__ascend_tensor(&c, 2, o_dims, o_strides, dt, out.data);
    if (!to) {
        rc = FLD_EIMPL;
    } else if (dt == ACL_DT_FLOAT) {
        acl_tensor *tx = fld__ascend_tensor(&c, 2, x_dims, x_strides, dt, x.data);
        rc = tx ? FLD_OK : FLD_EIMPL;
        if (rc == FLD_OK)
            RUN_OP(&c, rc, aclnnSwiGlu, (tx, -1, to, &ws_, &ex_));
    } else {
        /* silu(a) rounded to the dtype in scratch, then out = round(act * b) */
        const size_t es = elem_size(dt);
        const int64_t act_strides[2] = {out.width, 1};
        void *act_mem = fld__ascend_buffers(&c, (size_t)(out.rows * out.width) * es);
        acl_tensor *ta = act_mem ? fld__ascend_tensor(&c, 2, o_dims, x_strides, dt, x.data) : NULL;
        acl_tensor *tb = ta ? fld__ascend_tensor(&c, 2, o_dims, x_strides, dt,
                                                 (const char *)x.data + (size_t)out.width * es)
                            : NULL;
        acl_tensor *act = tb ? fld__ascend_tensor(&c, 2, o_dims, act_strides, dt, act_mem) : NULL;
        rc = act ? FLD_OK : FLD_EIMPL;
        if (rc == FLD_OK)
            RUN_OP(&c, rc, aclnnSilu, (ta, act, &ws_, &ex_));
        if (rc == FLD_OK)
            RUN_OP(&c, rc, aclnnMul, (act, tb, to, &ws_, &ex_));
    }
    fld__ascend_end(&c);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* rotary_embedding                                                         */
/* ------------------------------------------------------------------------ */

enum { ROPE_MAX_D = 896, ROPE_MAX_HEADS = 1000 };

bool fld__ascend_rotary_supports(const void *argp)
{
    const fld_rotary_embedding_args *a = argp;
    fld_rotary_geometry g;
    fld_rotary_geometry_of(a, &g);
    /* float32 only: a 16-bit rotation rounds every product and sum (reference.ascend) */
    if (fld_dtype_index(a->query->dtype) != 0 || fld_dtype_index(g.cache_dtype) != 0)
        return false;
    return g.rot_dim < ROPE_MAX_D && g.q_heads < ROPE_MAX_HEADS && g.k_heads < ROPE_MAX_HEADS;
}

/* Whether aclnnRopeWithSinCosCache can take the call as it is. */
static bool rope_cache_fits(const fld_rotary_embedding_args *a, const fld_rotary_geometry *g)
{
    return fld__acl.aclnnRopeWithSinCosCacheGetWorkspaceSize && fld__acl.aclnnRopeWithSinCosCache &&
           g->key && g->q_heads > 0 && g->k_heads > 0 && g->q_head_stride == a->head_size &&
           g->k_head_stride == a->head_size && g->cache_stride == g->rot_dim;
}

/*
 * aclnnRopeWithSinCosCache in place on the query and key rows. FLD_OK,
 * an error, or FLD_EUNSUPPORTED (nothing queued, no message kept) when its
 * first phase refuses the call: the caller then takes the 4-D path.
 */
static int rotary_rope_cache(struct fld_ascend_call *c, const fld_rotary_embedding_args *a,
                             const fld_rotary_geometry *g, int dt)
{
    const int64_t T = g->tokens;
    const int64_t pos_dims[1] = {T}, pos_strides[1] = {1};
    const int64_t q_dims[2] = {T, g->q_heads * a->head_size}, q_strides[2] = {g->q_token_stride, 1};
    const int64_t k_dims[2] = {T, g->k_heads * a->head_size}, k_strides[2] = {g->k_token_stride, 1};
    const int64_t c_dims[2] = {g->max_pos, g->rot_dim}, c_strides[2] = {g->rot_dim, 1};
    acl_tensor *pos =
        fld__ascend_tensor(c, 1, pos_dims, pos_strides,
                           g->positions_int32 ? ACL_DT_INT32 : ACL_DT_INT64, g->positions);
    acl_tensor *q_in = pos ? fld__ascend_tensor(c, 2, q_dims, q_strides, dt, g->query) : NULL;
    acl_tensor *k_in = q_in ? fld__ascend_tensor(c, 2, k_dims, k_strides, dt, g->key) : NULL;
    acl_tensor *cache = k_in ? fld__ascend_tensor(c, 2, c_dims, c_strides, dt, g->cache) : NULL;
    acl_tensor *q_out = cache ? fld__ascend_tensor(c, 2, q_dims, q_strides, dt, g->query) : NULL;
    acl_tensor *k_out = q_out ? fld__ascend_tensor(c, 2, k_dims, k_strides, dt, g->key) : NULL;
    if (!k_out)
        return FLD_EIMPL;
    uint64_t ws = 0;
    acl_executor *ex = NULL;
    int st = fld__acl.aclnnRopeWithSinCosCacheGetWorkspaceSize(
        pos, q_in, k_in, cache, NULL, a->head_size, a->is_neox, q_out, k_out, &ws, &ex);
    if (st != 0) {
        fld_log(FLD_LOG_DEBUG,
                "vendor.ascend: rotary_embedding: aclnnRopeWithSinCosCacheGetWorkspaceSize "
                "refused the call (error %d); using aclnnRotaryPositionEmbedding",
                st);
        return FLD_EUNSUPPORTED;
    }
    return fld__ascend_launch(c, "aclnnRopeWithSinCosCache", fld__acl.aclnnRopeWithSinCosCache, ws,
                              ex);
}

/*
 * The portable path: gather, spread, rotate (4-D), write back. Nothing but
 * scratch is written before the final copies.
 */
static int rotary_4d(struct fld_ascend_call *c, const fld_rotary_embedding_args *a,
                     const fld_rotary_geometry *g, int dt)
{
    const size_t es = elem_size(dt);
    const int64_t T = g->tokens, rot = g->rot_dim, h = rot / 2;
    const int mode = a->is_neox ? ACL_ROPE_HALF : ACL_ROPE_INTERLEAVE;

    /* Scratch: gathered rows, cos and sin tables, rotated query, rotated key. */
    const size_t table = align_up((size_t)(T * rot) * es);
    const size_t q_bytes = align_up((size_t)(T * g->q_heads * rot) * es);
    const size_t k_bytes = align_up((size_t)(T * g->k_heads * rot) * es);
    char *buf = fld__ascend_buffers(c, 3 * table + q_bytes + k_bytes);
    if (!buf)
        return FLD_EIMPL;
    char *rows = buf, *cos_t = buf + table, *sin_t = buf + 2 * table, *q_out = buf + 3 * table,
         *k_out = q_out + q_bytes;

    /* The gather reads the cache as it is (no expanded view: IndexSelect
     * would make a zero-stride view contiguous, i.e. copy max_pos rows). */
    const int64_t src_dims[2] = {g->max_pos, rot}, src_strides[2] = {g->cache_stride, 1};
    const int64_t rows_dims[2] = {T, rot}, rows_strides[2] = {rot, 1};
    const int64_t pos_dims[1] = {T}, pos_strides[1] = {1};
    /* Frequency i repeated where the mode pairs it: neox [T, 2, h] (i, i + h),
     * gptj [T, h, 2] (2i, 2i + 1); the spread reads T rows of scratch only. */
    const int64_t sp_dims[3] = {T, a->is_neox ? 2 : h, a->is_neox ? h : 2};
    const int64_t sp_src_strides[3] = {rot, a->is_neox ? 0 : 1, a->is_neox ? 1 : 0};
    const int64_t sp_dst_strides[3] = {rot, sp_dims[2], 1};
    /* cos/sin in the 4-D form: [1, T, 1, rot]. */
    const int64_t cs_dims[4] = {1, T, 1, rot}, cs_strides[4] = {T * rot, rot, rot, 1};

    acl_tensor *pos =
        fld__ascend_tensor(c, 1, pos_dims, pos_strides,
                           g->positions_int32 ? ACL_DT_INT32 : ACL_DT_INT64, g->positions);
    acl_tensor *src = pos ? fld__ascend_tensor(c, 2, src_dims, src_strides, dt, g->cache) : NULL;
    acl_tensor *gat = src ? fld__ascend_tensor(c, 2, rows_dims, rows_strides, dt, rows) : NULL;
    acl_tensor *cos_src = gat ? fld__ascend_tensor(c, 3, sp_dims, sp_src_strides, dt, rows) : NULL;
    acl_tensor *sin_src =
        cos_src ? fld__ascend_tensor(c, 3, sp_dims, sp_src_strides, dt, rows + (size_t)h * es)
                : NULL;
    acl_tensor *cos_dst =
        sin_src ? fld__ascend_tensor(c, 3, sp_dims, sp_dst_strides, dt, cos_t) : NULL;
    acl_tensor *sin_dst =
        cos_dst ? fld__ascend_tensor(c, 3, sp_dims, sp_dst_strides, dt, sin_t) : NULL;
    acl_tensor *cos4 = sin_dst ? fld__ascend_tensor(c, 4, cs_dims, cs_strides, dt, cos_t) : NULL;
    acl_tensor *sin4 = cos4 ? fld__ascend_tensor(c, 4, cs_dims, cs_strides, dt, sin_t) : NULL;
    if (!sin4)
        return FLD_EIMPL;
    int rc;
    RUN_OP(c, rc, aclnnIndexSelect, (src, 0, pos, gat, &ws_, &ex_));
    if (rc == FLD_OK)
        RUN_OP(c, rc, aclnnInplaceCopy, (cos_dst, cos_src, &ws_, &ex_));
    if (rc == FLD_OK)
        RUN_OP(c, rc, aclnnInplaceCopy, (sin_dst, sin_src, &ws_, &ex_));
    if (rc != FLD_OK)
        return rc;

    /* Rotate query and key into scratch, then write both back. */
    acl_tensor *views[2] = {NULL, NULL}, *outs[2] = {NULL, NULL};
    const int n = g->key ? 2 : 1;
    for (int i = 0; i < n; i++) {
        void *data = i ? g->key : g->query;
        const int64_t heads = i ? g->k_heads : g->q_heads;
        const int64_t tok = i ? g->k_token_stride : g->q_token_stride;
        const int64_t dims[4] = {1, T, heads, rot};
        const int64_t v_strides[4] = {T * tok, tok, i ? g->k_head_stride : g->q_head_stride, 1};
        const int64_t o_strides[4] = {T * heads * rot, heads * rot, rot, 1};
        views[i] = fld__ascend_tensor(c, 4, dims, v_strides, dt, data);
        outs[i] =
            views[i] ? fld__ascend_tensor(c, 4, dims, o_strides, dt, i ? k_out : q_out) : NULL;
        if (!outs[i])
            return FLD_EIMPL;
        RUN_OP(c, rc, aclnnRotaryPositionEmbedding,
               (views[i], cos4, sin4, mode, outs[i], &ws_, &ex_));
        if (rc != FLD_OK)
            return rc;
    }
    for (int i = 0; i < n; i++) {
        RUN_OP(c, rc, aclnnInplaceCopy, (views[i], outs[i], &ws_, &ex_));
        if (rc != FLD_OK) {
            if (i > 0) {
                char msg[768];
                snprintf(msg, sizeof msg, "%s", fld_last_error());
                fld_set_error("%s; the query was already rotated, the key was not", msg);
            }
            return rc;
        }
    }
    return FLD_OK;
}

int fld__ascend_rotary_embedding(const void *argp)
{
    const fld_rotary_embedding_args *a = argp;
    if (!fld__ascend_rotary_supports(argp)) {
        fld_set_error("vendor.ascend: rotary_embedding: needs a float32 query and cache, "
                      "rot_dim < %d and fewer than %d heads",
                      ROPE_MAX_D, ROPE_MAX_HEADS);
        return FLD_EUNSUPPORTED;
    }
    fld_rotary_geometry g;
    fld_rotary_geometry_of(a, &g);
    if (g.tokens == 0 || g.rot_dim == 0)
        return FLD_OK;
    const int dt = fld__ascend_dtype(a->query->dtype);

    struct fld_ascend_call c;
    int rc = fld__ascend_begin(&c, FLD_OP_ROTARY_EMBEDDING, a->query->device);
    if (rc != FLD_OK)
        return rc;
    rc = FLD_EUNSUPPORTED;
    if (rope_cache_fits(a, &g)) {
        rc = rotary_rope_cache(&c, a, &g, dt);
        if (rc == FLD_EUNSUPPORTED) {
            /* Descriptors of the refused attempt go before the next ones. */
            fld__ascend_end(&c);
            rc = fld__ascend_begin(&c, FLD_OP_ROTARY_EMBEDDING, a->query->device);
            if (rc != FLD_OK)
                return rc;
            rc = FLD_EUNSUPPORTED;
        }
    }
    if (rc == FLD_EUNSUPPORTED)
        rc = rotary_4d(&c, a, &g, dt);
    fld__ascend_end(&c);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* attention_backend                                                        */
/* ------------------------------------------------------------------------ */

int fld__ascend_attention_backend(const void *argp)
{
    const fld_attention_backend_args *a = argp;
    if (a->use_sparse) {
        fld_set_error("vendor.ascend: attention_backend: no sparse MLA attention backend on "
                      "Ascend (use_mla=true, use_sparse=true)");
        return FLD_EUNSUPPORTED;
    }
    *a->name = a->use_mla ? "ASCEND_MLA" : "ASCEND";
    return FLD_OK;
}
