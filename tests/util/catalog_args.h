/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helper: one small call of every catalog op, on float32 CPU tensors
 * that live inside the struct (no allocation, so a forked child or a
 * leak-checked run inherits nothing).
 *
 *   struct tt_catalog_args a;
 *   tt_catalog_args_init(&a, 7);
 *   tt_catalog_args_reset(&a);        // fresh outputs, pristine in-place inputs
 *   int rc = tt_catalog_call(&a, TT_CAT_RMS_NORM, TT_CALL_TYPED, NULL);
 *   ... a.nout holds the result ...
 *
 * Ops are numbered in catalog order, the rows of <fldispatch/catalog.def>,
 * as STRESS_OP_* in tests/stress/stress_fixture.h are.
 * Shapes: gated activations x [ROWS, 2*HALF] -> out [ROWS, HALF];
 * elementwise ones x [ROWS, HALF] (ex) -> out [ROWS, HALF]; norms x, out and
 * residual [ROWS, WIDTH], weight [WIDTH] (rms_norm without residual,
 * gemma_rms_norm with it, eps 1e-6 and 1e-5); rotary (neox) positions
 * [ROWS] in [0, MAXPOS), query [ROWS, QHEADS*HEAD], key [ROWS, KHEADS*HEAD],
 * cache [MAXPOS, HEAD] (rotary_embedding_out reads the same query and key
 * and writes qout and kout); attention_backend on the CPU without MLA.
 */
#ifndef FLD_TESTS_UTIL_CATALOG_ARGS_H
#define FLD_TESTS_UTIL_CATALOG_ARGS_H

#include <stdint.h>

#include <fldispatch/fldispatch.h>

enum {
    TT_CAT_ROWS = 2,
    TT_CAT_HALF = 8,
    TT_CAT_WIDTH = 16,
    TT_CAT_HEAD = 8,
    TT_CAT_QHEADS = 2,
    TT_CAT_KHEADS = 1,
    TT_CAT_MAXPOS = 4
};

/* TT_CAT_<ID> per row of the catalog table. */
enum {
#define FLD_CATALOG_OP(id, name, family, doc) TT_CAT_##id,
#include <fldispatch/catalog.def>
    TT_CAT_N_OPS
};

/* What an op writes: the family of its row in the catalog table. */
enum tt_catalog_writes {
    TT_WRITES_AOUT,   /* GATED, ELEMENTWISE: aout */
    TT_WRITES_NOUT,   /* NORM: nout (and nres with a residual) */
    TT_WRITES_QK,     /* ROTARY: q and k */
    TT_WRITES_QK_OUT, /* ROTARY_OUT: qout and kout */
    TT_WRITES_ATTN    /* ATTENTION: attn */
};
enum tt_catalog_writes tt_catalog_writes(int op);

/* The FLD_OP_* name of each op. */
extern const char *const tt_catalog_op_names[TT_CAT_N_OPS];

/* How tt_catalog_call() calls: the typed entry point, fld_call() on a handle, fld_call_by_name().
 */
enum tt_call_way { TT_CALL_TYPED, TT_CALL_HANDLE, TT_CALL_BY_NAME };

struct tt_catalog_args {
    /* The data: outputs, inputs, and the pristine copies of the in-place ones. */
    float ax[TT_CAT_ROWS][2 * TT_CAT_HALF], aout[TT_CAT_ROWS][TT_CAT_HALF];
    float ex[TT_CAT_ROWS][TT_CAT_HALF];
    float nx[TT_CAT_ROWS][TT_CAT_WIDTH], nw[TT_CAT_WIDTH], nout[TT_CAT_ROWS][TT_CAT_WIDTH];
    float nres[TT_CAT_ROWS][TT_CAT_WIDTH], nres0[TT_CAT_ROWS][TT_CAT_WIDTH];
    int64_t pos[TT_CAT_ROWS];
    float q[TT_CAT_ROWS][TT_CAT_QHEADS * TT_CAT_HEAD], q0[TT_CAT_ROWS][TT_CAT_QHEADS * TT_CAT_HEAD];
    float k[TT_CAT_ROWS][TT_CAT_KHEADS * TT_CAT_HEAD], k0[TT_CAT_ROWS][TT_CAT_KHEADS * TT_CAT_HEAD];
    float cache[TT_CAT_MAXPOS][TT_CAT_HEAD];
    float qout[TT_CAT_ROWS][TT_CAT_QHEADS * TT_CAT_HEAD],
        kout[TT_CAT_ROWS][TT_CAT_KHEADS * TT_CAT_HEAD];
    const char *attn; /* attention_backend's answer */
    /* The views of the data, and the argument structs over them. */
    int64_t s_ax[2], s_aout[2], s_n[2], s_w[1], s_pos[1], s_q[2], s_k[2], s_cache[2];
    DLTensor t_ax, t_aout, t_ex, t_nx, t_nw, t_nout, t_nres, t_pos, t_q, t_k, t_cache, t_qout,
        t_kout;
    fld_activation_args act, elem;
    fld_rms_norm_args rms, gemma;
    fld_rotary_embedding_args rope;
    fld_rotary_embedding_out_args rope_out;
    fld_attention_backend_args attn_args;
};

/* Fills a with inputs drawn from seed (the same seed, the same values) and resets it. */
void tt_catalog_args_init(struct tt_catalog_args *a, unsigned seed);

/* Outputs (qout, kout included) to all-ones bits (NaN), the residual, query and key to their
 * pristine values, attn NULL.
 */
void tt_catalog_args_reset(struct tt_catalog_args *a);

/* The argument struct of op (fld_call(), fld_call_by_name()). */
const void *tt_catalog_args_of(struct tt_catalog_args *a, int op);

/* Calls op one way; handle is op's fld_op for TT_CALL_HANDLE, else unused. The status. */
int tt_catalog_call(struct tt_catalog_args *a, int op, enum tt_call_way way, fld_op handle);

#endif
