/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog's data: one schema row per row of <fldispatch/catalog.def>
 * (name, argument struct, validator, reference kernel and what it serves,
 * signature), each filled from the op's family, and fld_foreach_catalog_op()
 * over it. The table is a level below the op entries: lifecycle.c hands it
 * to ops.c (fld__ops_init()); the typed entry points that dispatch through
 * it live above the dispatch, in typed_entry.c.
 */
#include <fldispatch/plugin.h>

#include "error.h"
#include "ops.h"
#include "reference.h"
#include "validate.h"

/*
 * Each family's argument kind, validator, the devices and dtypes its
 * reference kernels serve (on CPU memory; attention_backend has no
 * tensors), and its signature (fld_op_signature(), fldispatch.h): the ops'
 * Python and torch form, from which fldispatch's Python lists and
 * torch.ops.fldispatch schemas are derived.
 */
#define KIND_GATED       FLD_ARGS_ACTIVATION
#define KIND_ELEMENTWISE FLD_ARGS_ACTIVATION
#define KIND_NORM        FLD_ARGS_RMS_NORM
#define KIND_ROTARY      FLD_ARGS_ROTARY_EMBEDDING
#define KIND_ROTARY_OUT  FLD_ARGS_ROTARY_EMBEDDING_OUT
#define KIND_ATTENTION   FLD_ARGS_ATTENTION_BACKEND

#define VALIDATE_GATED       fld__validate_activation
#define VALIDATE_ELEMENTWISE fld__validate_elementwise
#define VALIDATE_NORM        fld__validate_rms_norm
#define VALIDATE_ROTARY      fld__validate_rotary
#define VALIDATE_ROTARY_OUT  fld__validate_rotary_out
#define VALIDATE_ATTENTION   fld__validate_attention

#define SERVES_GATED       FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL
#define SERVES_ELEMENTWISE FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL
#define SERVES_NORM        FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL
#define SERVES_ROTARY      FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL
#define SERVES_ROTARY_OUT  FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL
#define SERVES_ATTENTION   FLD_DEVICE_MASK_ALL, FLD_DTYPE_MASK_ALL

#define SIG_GATED       "(Tensor(a!) out, Tensor x) -> ()"
#define SIG_ELEMENTWISE "(Tensor(a!) out, Tensor x) -> ()"
#define SIG_NORM                                                                                   \
    "(Tensor(a!) out, Tensor x, Tensor? weight=None, Tensor(b!)? residual=None, "                  \
    "float eps=1e-06) -> ()"
#define SIG_ROTARY                                                                                 \
    "(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache, "  \
    "bool is_neox) -> ()"
#define SIG_ROTARY_OUT                                                                             \
    "(Tensor positions, Tensor query, Tensor? key, int head_size, Tensor cos_sin_cache, "          \
    "bool is_neox, Tensor(a!) query_out, Tensor(b!)? key_out) -> ()"
#define SIG_ATTENTION "(str device, bool use_mla=False, bool use_sparse=False) -> str"

const struct fld_op_schema fld__catalog[FLD_CAT_COUNT] = {
#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    [FLD_CAT_##id] = {FLD_OP_##id,     sizeof(fld_##name##_args), VALIDATE_##family,               \
                      fld__ref_##name, SERVES_##family,           KIND_##family,                   \
                      SIG_##family},
#include <fldispatch/catalog.def>
};

/* A row's FLD_OP_<ID> is its name (tests/test_catalog.c compares the text). */
#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    _Static_assert(sizeof(FLD_OP_##id) == sizeof(#name), "FLD_OP_" #id " is not \"" #name "\"");
#include <fldispatch/catalog.def>

int fld_foreach_catalog_op(int (*fn)(const fld_catalog_op_info *op, void *user), void *user)
{
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_catalog_op: argument 'fn' is NULL");
    for (int i = 0; i < FLD_CAT_COUNT; i++) {
        const fld_catalog_op_info info = {
            .name = fld__catalog[i].name,
            .args = fld__catalog[i].args_kind,
            .args_size = fld__catalog[i].args_size,
            .signature = fld__catalog[i].signature,
        };
        int rc = fn(&info, user);
        if (rc)
            return rc;
    }
    return FLD_OK;
}
