/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The row count of a catalog call, which picks its row bucket (manifest.h,
 * ops.h): the product of the leading dims of the input (activations and
 * norms: x), the tokens of a rotary call (the elements of positions).
 * Read only after the validator accepted the call; 0 for an op without
 * tensors or a tensor without rows.
 */
#ifndef FLD_CORE_ROWS_H
#define FLD_CORE_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fldispatch/fldispatch.h>

static inline int64_t fld__leading_rows(const DLTensor *t, int keep)
{
    if (!t)
        return 0;
    if (t->ndim == keep + 1) /* the common case: [rows, width], or rotary's [tokens] */
        return t->shape[0];
    int64_t rows = 1;
    for (int i = 0; i < t->ndim - keep; i++)
        rows *= t->shape[i];
    return rows;
}

/*
 * Where a call's row count comes from, for the dispatch path: the offset in
 * the argument struct of the tensor pointer whose leading dims count, and
 * how many trailing dims to leave out. false for an op without tensors.
 */
static inline bool fld__rows_source(fld_args_kind kind, size_t *offset, int *keep)
{
    switch (kind) {
    case FLD_ARGS_ACTIVATION:
        *offset = offsetof(fld_activation_args, x);
        *keep = 1;
        return true;
    case FLD_ARGS_RMS_NORM:
        *offset = offsetof(fld_rms_norm_args, x);
        *keep = 1;
        return true;
    case FLD_ARGS_ROTARY_EMBEDDING:
        *offset = offsetof(fld_rotary_embedding_args, positions);
        *keep = 0;
        return true;
    case FLD_ARGS_ROTARY_EMBEDDING_OUT:
        *offset = offsetof(fld_rotary_embedding_out_args, positions);
        *keep = 0;
        return true;
    case FLD_ARGS_ATTENTION_BACKEND:
    default:
        return false;
    }
}

/* The row count of a call whose rows come from (offset, keep). */
static inline int64_t fld__rows_at(const void *args, size_t offset, int keep)
{
    return fld__leading_rows(*(const DLTensor *const *)((const char *)args + offset), keep);
}

static inline int64_t fld__call_rows(fld_args_kind kind, const void *args)
{
    switch (kind) {
    case FLD_ARGS_ACTIVATION:
        return fld__leading_rows(((const fld_activation_args *)args)->x, 1);
    case FLD_ARGS_RMS_NORM:
        return fld__leading_rows(((const fld_rms_norm_args *)args)->x, 1);
    case FLD_ARGS_ROTARY_EMBEDDING:
        return fld__leading_rows(((const fld_rotary_embedding_args *)args)->positions, 0);
    case FLD_ARGS_ROTARY_EMBEDDING_OUT:
        return fld__leading_rows(((const fld_rotary_embedding_out_args *)args)->positions, 0);
    case FLD_ARGS_ATTENTION_BACKEND:
    default:
        return 0;
    }
}

#endif
