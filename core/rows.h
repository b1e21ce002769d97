/*
 * The row count of a catalog call, which picks its row bucket (manifest.h,
 * ops.h): the product of the leading dims of the input (activations and
 * norms: x), the tokens of a rotary call (the elements of positions).
 * Read only after the validator accepted the call; 0 for an op without
 * tensors or a tensor without rows.
 */
#ifndef FLD_CORE_ROWS_H
#define FLD_CORE_ROWS_H

#include <stdint.h>

#include <fldispatch/fldispatch.h>

static inline int64_t fld__leading_rows(const DLTensor *t, int keep)
{
    if (!t)
        return 0;
    int64_t rows = 1;
    for (int i = 0; i < t->ndim - keep; i++)
        rows *= t->shape[i];
    return rows;
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
    case FLD_ARGS_ATTENTION_BACKEND:
    default:
        return 0;
    }
}

#endif
