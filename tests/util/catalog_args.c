/* SPDX-License-Identifier: Apache-2.0 */
/* One small call of every catalog op; see catalog_args.h. */
#include "catalog_args.h"

#include <math.h>
#include <string.h>

const char *const tt_catalog_op_names[TT_CAT_N_OPS] = {
#define FLD_CATALOG_OP(id, name, family, doc) FLD_OP_##id,
#include <fldispatch/catalog.def>
};

enum { ROWS = TT_CAT_ROWS, HALF = TT_CAT_HALF, WIDTH = TT_CAT_WIDTH, HS = TT_CAT_HEAD };
enum { HQ = TT_CAT_QHEADS, HK = TT_CAT_KHEADS, MAXPOS = TT_CAT_MAXPOS };

static DLTensor f32_tensor(void *data, int ndim, int64_t *shape)
{
    return (DLTensor){.data = data,
                      .device = {kDLCPU, 0},
                      .ndim = ndim,
                      .dtype = {kDLFloat, 32, 1},
                      .shape = shape};
}

/* A linear congruential step: small, and the same sequence everywhere. */
static unsigned next(unsigned *seed)
{
    return *seed = *seed * 1103515245u + 12345u;
}

void tt_catalog_args_init(struct tt_catalog_args *a, unsigned seed)
{
    memset(a, 0, sizeof *a);
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < 2 * HALF; i++)
            a->ax[r][i] = (float)((int)(next(&seed) >> 16) % 2001 - 1000) / 300.0f;
        for (int i = 0; i < HALF; i++)
            a->ex[r][i] = a->ax[r][HALF + i] - a->ax[r][i];
        for (int i = 0; i < WIDTH; i++) {
            next(&seed);
            a->nx[r][i] = (float)((int)(seed >> 16) % 2001 - 1000) / 500.0f;
            a->nres0[r][i] = (float)((int)(seed >> 20) % 101 - 50) / 100.0f;
        }
        a->pos[r] = 1 + 2 * r; /* 1, 3 < MAXPOS */
        for (int i = 0; i < HQ * HS; i++)
            a->q0[r][i] = 0.25f * (float)(i % 7) - 0.5f + 0.1f * (float)r;
        for (int i = 0; i < HK * HS; i++)
            a->k0[r][i] = 0.2f * (float)(i % 5) - 0.3f - 0.1f * (float)r;
    }
    for (int i = 0; i < WIDTH; i++)
        a->nw[i] = 0.5f + (float)i / WIDTH;
    for (int p = 0; p < MAXPOS; p++)
        for (int i = 0; i < HS / 2; i++) {
            a->cache[p][i] = cosf(0.3f * (float)(p + 1) * (float)(i + 1));
            a->cache[p][HS / 2 + i] = sinf(0.3f * (float)(p + 1) * (float)(i + 1));
        }
    a->s_ax[0] = ROWS, a->s_ax[1] = 2 * HALF;
    a->s_aout[0] = ROWS, a->s_aout[1] = HALF;
    a->s_n[0] = ROWS, a->s_n[1] = WIDTH;
    a->s_w[0] = WIDTH;
    a->s_pos[0] = ROWS;
    a->s_q[0] = ROWS, a->s_q[1] = HQ * HS;
    a->s_k[0] = ROWS, a->s_k[1] = HK * HS;
    a->s_cache[0] = MAXPOS, a->s_cache[1] = HS;
    a->t_ax = f32_tensor(a->ax, 2, a->s_ax);
    a->t_aout = f32_tensor(a->aout, 2, a->s_aout);
    a->t_ex = f32_tensor(a->ex, 2, a->s_aout);
    a->t_nx = f32_tensor(a->nx, 2, a->s_n);
    a->t_nw = f32_tensor(a->nw, 1, a->s_w);
    a->t_nout = f32_tensor(a->nout, 2, a->s_n);
    a->t_nres = f32_tensor(a->nres, 2, a->s_n);
    a->t_pos = (DLTensor){.data = a->pos,
                          .device = {kDLCPU, 0},
                          .ndim = 1,
                          .dtype = {kDLInt, 64, 1},
                          .shape = a->s_pos};
    a->t_q = f32_tensor(a->q, 2, a->s_q);
    a->t_k = f32_tensor(a->k, 2, a->s_k);
    a->t_cache = f32_tensor(a->cache, 2, a->s_cache);
    a->t_qout = f32_tensor(a->qout, 2, a->s_q);
    a->t_kout = f32_tensor(a->kout, 2, a->s_k);
    a->act = (fld_activation_args){&a->t_aout, &a->t_ax};
    a->elem = (fld_activation_args){&a->t_aout, &a->t_ex};
    a->rms = (fld_rms_norm_args){&a->t_nout, &a->t_nx, &a->t_nw, NULL, 1e-6f};
    a->gemma = (fld_rms_norm_args){&a->t_nout, &a->t_nx, &a->t_nw, &a->t_nres, 1e-5f};
    a->rope = (fld_rotary_embedding_args){&a->t_pos, &a->t_q, &a->t_k, HS, &a->t_cache, true};
    a->rope_out = (fld_rotary_embedding_out_args){&a->t_pos,   &a->t_q, &a->t_k,    HS,
                                                  &a->t_cache, true,    &a->t_qout, &a->t_kout};
    a->attn_args = (fld_attention_backend_args){FLD_DEVICE_CPU, false, false, &a->attn};
    tt_catalog_args_reset(a);
}

void tt_catalog_args_reset(struct tt_catalog_args *a)
{
    memset(a->aout, 0xff, sizeof a->aout);
    memset(a->nout, 0xff, sizeof a->nout);
    memset(a->qout, 0xff, sizeof a->qout);
    memset(a->kout, 0xff, sizeof a->kout);
    memcpy(a->nres, a->nres0, sizeof a->nres);
    memcpy(a->q, a->q0, sizeof a->q);
    memcpy(a->k, a->k0, sizeof a->k);
    a->attn = NULL;
}

/* Each family's argument struct in a, and its typed call (fn its entry point). */
#define ARGS_GATED(a, id)       (&(a)->act)
#define ARGS_ELEMENTWISE(a, id) (&(a)->elem)
#define ARGS_NORM(a, id)        (TT_CAT_##id == TT_CAT_GEMMA_RMS_NORM ? &(a)->gemma : &(a)->rms)
#define ARGS_ROTARY(a, id)      (&(a)->rope)
#define ARGS_ROTARY_OUT(a, id)  (&(a)->rope_out)
#define ARGS_ATTENTION(a, id)   (&(a)->attn_args)

#define CALL_GATED(fn, p)       fn((p)->out, (p)->x)
#define CALL_ELEMENTWISE(fn, p) fn((p)->out, (p)->x)
#define CALL_NORM(fn, p)        fn((p)->out, (p)->x, (p)->weight, (p)->residual, (p)->eps)
#define CALL_ROTARY(fn, p)                                                                         \
    fn((p)->positions, (p)->query, (p)->key, (p)->head_size, (p)->cos_sin_cache, (p)->is_neox)
#define CALL_ROTARY_OUT(fn, p)                                                                     \
    fn((p)->positions, (p)->query, (p)->key, (p)->head_size, (p)->cos_sin_cache, (p)->is_neox,     \
       (p)->query_out, (p)->key_out)
#define CALL_ATTENTION(fn, p) fn((p)->device_type, (p)->use_mla, (p)->use_sparse, (p)->name)

const void *tt_catalog_args_of(struct tt_catalog_args *a, int op)
{
    switch (op) {
#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    case TT_CAT_##id:                                                                              \
        return ARGS_##family(a, id);
#include <fldispatch/catalog.def>
    }
    return NULL;
}

#define WRITES_GATED       TT_WRITES_AOUT
#define WRITES_ELEMENTWISE TT_WRITES_AOUT
#define WRITES_NORM        TT_WRITES_NOUT
#define WRITES_ROTARY      TT_WRITES_QK
#define WRITES_ROTARY_OUT  TT_WRITES_QK_OUT
#define WRITES_ATTENTION   TT_WRITES_ATTN

enum tt_catalog_writes tt_catalog_writes(int op)
{
    static const enum tt_catalog_writes writes[TT_CAT_N_OPS] = {
#define FLD_CATALOG_OP(id, name, family, doc) WRITES_##family,
#include <fldispatch/catalog.def>
    };
    return writes[op];
}

int tt_catalog_call(struct tt_catalog_args *a, int op, enum tt_call_way way, fld_op handle)
{
    if (way == TT_CALL_HANDLE)
        return fld_call(handle, tt_catalog_args_of(a, op));
    if (way == TT_CALL_BY_NAME)
        return fld_call_by_name(tt_catalog_op_names[op], tt_catalog_args_of(a, op));
    switch (op) {
#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    case TT_CAT_##id: {                                                                            \
        const fld_##name##_args *p = ARGS_##family(a, id);                                         \
        return CALL_##family(fld_##name, p);                                                       \
    }
#include <fldispatch/catalog.def>
    }
    return FLD_EINVAL;
}
