/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog: one schema row per op (name, argument struct, validator,
 * reference kernel and what it serves), and the typed public entry points,
 * each of which packs its arguments, runs its family's quick checks
 * (validate_fast.h) and dispatches, inlined in one function (dispatch.h
 * fld__call_family()); a call the quick checks doubt goes to the family's
 * full validator. Per-op knowledge lives here and in the
 * validator families of validate.c, nowhere else.
 */
#include <fldispatch/plugin.h>

#include "error.h"
#include "dispatch.h"
#include "ops.h"
#include "reference.h"
#include "validate.h"
#include "validate_fast.h"

/* Reference kernels run on host memory; attention_backend has no tensors. */
#define CPU_ALL_DTYPES FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL

/*
 * The signatures (fld_op_signature(), include/fldispatch/fldispatch.h): the
 * ops' Python and torch form, from which fldispatch's Python lists and
 * torch.ops.fldispatch schemas are derived.
 */
#define SIG_ACTIVATION "(Tensor(a!) out, Tensor x) -> ()"
#define SIG_RMS_NORM                                                                               \
    "(Tensor(a!) out, Tensor x, Tensor? weight=None, Tensor(b!)? residual=None, "                  \
    "float eps=1e-06) -> ()"
#define SIG_ROTARY_EMBEDDING                                                                       \
    "(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache, "  \
    "bool is_neox) -> ()"
#define SIG_ATTENTION_BACKEND "(str device, bool use_mla=False, bool use_sparse=False) -> str"

const struct fld_op_schema fld__catalog[FLD_CAT_COUNT] = {
    [FLD_CAT_SILU_AND_MUL] = {FLD_OP_SILU_AND_MUL, sizeof(fld_silu_and_mul_args),
                              fld__validate_activation, fld__ref_silu_and_mul, CPU_ALL_DTYPES,
                              FLD_ARGS_ACTIVATION, SIG_ACTIVATION},
    [FLD_CAT_MUL_AND_SILU] = {FLD_OP_MUL_AND_SILU, sizeof(fld_mul_and_silu_args),
                              fld__validate_activation, fld__ref_mul_and_silu, CPU_ALL_DTYPES,
                              FLD_ARGS_ACTIVATION, SIG_ACTIVATION},
    [FLD_CAT_GELU_AND_MUL] = {FLD_OP_GELU_AND_MUL, sizeof(fld_gelu_and_mul_args),
                              fld__validate_activation, fld__ref_gelu_and_mul, CPU_ALL_DTYPES,
                              FLD_ARGS_ACTIVATION, SIG_ACTIVATION},
    [FLD_CAT_GELU_TANH_AND_MUL] = {FLD_OP_GELU_TANH_AND_MUL, sizeof(fld_gelu_tanh_and_mul_args),
                                   fld__validate_activation, fld__ref_gelu_tanh_and_mul,
                                   CPU_ALL_DTYPES, FLD_ARGS_ACTIVATION, SIG_ACTIVATION},
    [FLD_CAT_RMS_NORM] = {FLD_OP_RMS_NORM, sizeof(fld_rms_norm_args), fld__validate_rms_norm,
                          fld__ref_rms_norm, CPU_ALL_DTYPES, FLD_ARGS_RMS_NORM, SIG_RMS_NORM},
    [FLD_CAT_GEMMA_RMS_NORM] = {FLD_OP_GEMMA_RMS_NORM, sizeof(fld_gemma_rms_norm_args),
                                fld__validate_rms_norm, fld__ref_gemma_rms_norm, CPU_ALL_DTYPES,
                                FLD_ARGS_RMS_NORM, SIG_RMS_NORM},
    [FLD_CAT_ROTARY_EMBEDDING] = {FLD_OP_ROTARY_EMBEDDING, sizeof(fld_rotary_embedding_args),
                                  fld__validate_rotary, fld__ref_rotary_embedding, CPU_ALL_DTYPES,
                                  FLD_ARGS_ROTARY_EMBEDDING, SIG_ROTARY_EMBEDDING},
    [FLD_CAT_ATTENTION_BACKEND] = {FLD_OP_ATTENTION_BACKEND, sizeof(fld_attention_backend_args),
                                   fld__validate_attention, fld__ref_attention_backend,
                                   FLD_DEVICE_MASK_ALL, FLD_DTYPE_MASK_ALL,
                                   FLD_ARGS_ATTENTION_BACKEND, SIG_ATTENTION_BACKEND},
};

/* One typed call per family: the quick checks, then dispatch or the full validator. */
static inline __attribute__((always_inline)) int call_activation(enum fld_catalog_index idx,
                                                                 const fld_activation_args *a)
{
    struct fld_call_key key = {0, 0};
    const bool ok = fast_activation(a, &key);
    return fld__call_family(idx, ok, fld__slot(key.device, key.dtype), a);
}

static inline __attribute__((always_inline)) int call_rms_norm(enum fld_catalog_index idx,
                                                               const fld_rms_norm_args *a)
{
    struct fld_call_key key = {0, 0};
    const bool ok = fast_rms_norm(a, &key);
    return fld__call_family(idx, ok, fld__slot(key.device, key.dtype), a);
}

static inline __attribute__((always_inline)) int call_rotary(enum fld_catalog_index idx,
                                                             const fld_rotary_embedding_args *a)
{
    struct fld_call_key key = {0, 0};
    const bool ok = fast_rotary(a, &key);
    return fld__call_family(idx, ok, fld__slot(key.device, key.dtype), a);
}

int fld_silu_and_mul(DLTensor *out, const DLTensor *x)
{
    const fld_silu_and_mul_args args = {out, x};
    return call_activation(FLD_CAT_SILU_AND_MUL, &args);
}

int fld_mul_and_silu(DLTensor *out, const DLTensor *x)
{
    const fld_mul_and_silu_args args = {out, x};
    return call_activation(FLD_CAT_MUL_AND_SILU, &args);
}

int fld_gelu_and_mul(DLTensor *out, const DLTensor *x)
{
    const fld_gelu_and_mul_args args = {out, x};
    return call_activation(FLD_CAT_GELU_AND_MUL, &args);
}

int fld_gelu_tanh_and_mul(DLTensor *out, const DLTensor *x)
{
    const fld_gelu_tanh_and_mul_args args = {out, x};
    return call_activation(FLD_CAT_GELU_TANH_AND_MUL, &args);
}

int fld_rms_norm(DLTensor *out, const DLTensor *x, const DLTensor *weight, DLTensor *residual,
                 float eps)
{
    const fld_rms_norm_args args = {out, x, weight, residual, eps};
    return call_rms_norm(FLD_CAT_RMS_NORM, &args);
}

int fld_gemma_rms_norm(DLTensor *out, const DLTensor *x, const DLTensor *weight, DLTensor *residual,
                       float eps)
{
    const fld_gemma_rms_norm_args args = {out, x, weight, residual, eps};
    return call_rms_norm(FLD_CAT_GEMMA_RMS_NORM, &args);
}

int fld_rotary_embedding(const DLTensor *positions, DLTensor *query, DLTensor *key,
                         int64_t head_size, const DLTensor *cos_sin_cache, bool is_neox)
{
    const fld_rotary_embedding_args args = {positions, query,         key,
                                            head_size, cos_sin_cache, is_neox};
    return call_rotary(FLD_CAT_ROTARY_EMBEDDING, &args);
}

int fld_attention_backend(int device_type, bool use_mla, bool use_sparse, const char **name)
{
    const fld_attention_backend_args args = {device_type, use_mla, use_sparse, name};
    return fld__call_catalog(FLD_CAT_ATTENTION_BACKEND, &args);
}

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
