/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's reference kernels (impl_id "reference.c"): simple loops over
 * validated arguments in float32, rounding to the storage dtype where vLLM
 * rounds (each file says where). They are the executable spec every fast
 * path is checked against.
 */
#ifndef FLD_CORE_REFERENCE_H
#define FLD_CORE_REFERENCE_H

#include <stdint.h>

#include <fldispatch/half.h>

/* Element i of a row of dtype dt (FLD_DT_*: 0 f32, 1 f16, 2 bf16), as float32. */
static inline float fld__ref_load(const void *row, int64_t i, int dt)
{
    if (dt == 0)
        return ((const float *)row)[i];
    uint16_t h = ((const uint16_t *)row)[i];
    return dt == 1 ? fld_f16_to_f32(h) : fld_bf16_to_f32(h);
}

/* Stores v into element i, rounding once to dtype dt. */
static inline void fld__ref_store(void *row, int64_t i, int dt, float v)
{
    if (dt == 0)
        ((float *)row)[i] = v;
    else
        ((uint16_t *)row)[i] = dt == 1 ? fld_f32_to_f16(v) : fld_f32_to_bf16(v);
}

/* v rounded to dtype dt and widened back: what storing and loading it gives. */
static inline float fld__ref_round(int dt, float v)
{
    if (dt == 0)
        return v;
    return dt == 1 ? fld_f16_to_f32(fld_f32_to_f16(v)) : fld_bf16_to_f32(fld_f32_to_bf16(v));
}

/* Each catalog op's reference kernel, fld__ref_<name> (<fldispatch/catalog.def>). */
#define FLD_CATALOG_OP(id, name, family, doc) int fld__ref_##name(const void *args);
#include <fldispatch/catalog.def>

#endif
