/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The typed public entry points, one per row of <fldispatch/catalog.def>:
 * each packs its arguments, runs its family's quick checks
 * (validate_fast.h) and dispatches, inlined in one function (dispatch.h
 * fld__call_family()); a call the quick checks doubt goes to the family's
 * full validator. A top level: it calls the dispatch, which reads the
 * catalog's table (catalog.c).
 */
#include <fldispatch/plugin.h>

#include "dispatch.h"
#include "ops.h"
#include "validate_fast.h"

/* One typed call per family: the quick checks, then dispatch or the full validator. */
static inline __attribute__((always_inline)) int call_activation(enum fld_catalog_index idx,
                                                                 const fld_activation_args *a)
{
    struct fld_call_key key = {0, 0};
    const bool ok = fast_activation(a, &key);
    return fld__call_family(idx, ok, fld__slot(key.device, key.dtype), a);
}

static inline __attribute__((always_inline)) int call_elementwise(enum fld_catalog_index idx,
                                                                  const fld_activation_args *a)
{
    struct fld_call_key key = {0, 0};
    const bool ok = fast_elementwise(a, &key);
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

static inline __attribute__((always_inline)) int
call_rotary_out(enum fld_catalog_index idx, const fld_rotary_embedding_out_args *a)
{
    struct fld_call_key key = {0, 0};
    const bool ok = fast_rotary_out(a, &key);
    return fld__call_family(idx, ok, fld__slot(key.device, key.dtype), a);
}

/* Each family's packing of the entry point's parameters, and its call. */
#define PACK_GATED                                                                                 \
    {                                                                                              \
        out, x                                                                                     \
    }
#define PACK_ELEMENTWISE                                                                           \
    {                                                                                              \
        out, x                                                                                     \
    }
#define PACK_NORM                                                                                  \
    {                                                                                              \
        out, x, weight, residual, eps                                                              \
    }
#define PACK_ROTARY                                                                                \
    {                                                                                              \
        positions, query, key, head_size, cos_sin_cache, is_neox                                   \
    }
#define PACK_ROTARY_OUT                                                                            \
    {                                                                                              \
        positions, query, key, head_size, cos_sin_cache, is_neox, query_out, key_out               \
    }
#define PACK_ATTENTION                                                                             \
    {                                                                                              \
        device_type, use_mla, use_sparse, name                                                     \
    }

#define CALL_GATED       call_activation
#define CALL_ELEMENTWISE call_elementwise
#define CALL_NORM        call_rms_norm
#define CALL_ROTARY      call_rotary
#define CALL_ROTARY_OUT  call_rotary_out
#define CALL_ATTENTION   fld__call_catalog

#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    int fld_##name FLD_CATALOG_PARAMS_##family                                                     \
    {                                                                                              \
        const fld_##name##_args args = PACK_##family;                                              \
        return CALL_##family(FLD_CAT_##id, &args);                                                 \
    }
#include <fldispatch/catalog.def>
