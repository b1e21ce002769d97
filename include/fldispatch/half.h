/* SPDX-License-Identifier: Apache-2.0 */
/*
 * 16-bit float conversions for kernels: IEEE binary16 (float16) and
 * bfloat16 to and from float32. Narrowing rounds to nearest even and keeps
 * NaN a (quiet) NaN. Header-only, no dependencies, MT safe.
 */
#ifndef FLDISPATCH_HALF_H
#define FLDISPATCH_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fld_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fld_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float fld_bf16_to_f32(uint16_t h)
{
    return fld_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t fld_f32_to_bf16(float f)
{
    uint32_t u = fld_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float fld_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) /* inf or NaN */
        return fld_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return fld_f32_from_bits(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return fld_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fld_f32_to_f16(float f)
{
    uint32_t u = fld_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) {   /* below the smallest normal 2^-14: subnormal or zero */
        if (abs < 0x33000000u) /* < 2^-25: rounds to zero */
            return sign;
        uint32_t exp = abs >> 23;
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = man & ((1u << shift) - 1u);
        uint32_t q = man >> shift;
        if (rest > half || (rest == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

#endif /* FLDISPATCH_HALF_H */
