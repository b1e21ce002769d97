/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two ways to compute bfloat16 silu_and_mul to the bit of the reference
 * (round(round(silu(a)) * b), silu(a) = a / (1 + expf(-a)) in float32),
 * timed against each other on rows that stay in L1, and checked over all
 * 65,536 inputs:
 *
 *   table       round(silu(a)) looked up in a 65,536-entry table with one
 *               16-lane gather (what the cpu plugin does);
 *   f32+check   silu in float32 (the plugin's degree-5 exp and a refined
 *               reciprocal, four chains), rounded to bfloat16 directly,
 *               except for the lanes whose float32 result lies within 64
 *               float32 ulps of a rounding midpoint or whose input is
 *               below -80 or NaN (where the reference's expf overflows):
 *               those are gathered from the table, one rare branch per
 *               vector.
 *
 * Build and run (AVX-512F/BW/DQ machines): make -C bench/kernels exact16
 * Output: cycles per 16-element vector at the clock given by --ghz
 * (default 3.0), best of 50 batches, three rounds, and the number of the
 * 65,536 inputs on which f32+check differs from the table (must be 0).
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROW    4096
#define CHAINS 4

static uint16_t table[65536];
static uint16_t x[2 * ROW], out[ROW];

static uint16_t bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline __m512 widen(const uint16_t *p)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

static inline void store_rounded(uint16_t *p, __m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
}

static inline __m512 lookup(const uint16_t *p, __m512 fallback, __mmask16 lanes)
{
    __m512i idx = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes, idx, table, 2);
    return _mm512_mask_mov_ps(fallback, lanes, _mm512_castsi512_ps(_mm512_slli_epi32(g, 16)));
}

__attribute__((noinline)) static void row_table(void)
{
    for (int j = 0; j < ROW; j += 16)
        store_rounded(
            out + j, _mm512_mul_ps(lookup(x + j, _mm512_setzero_ps(), 0xffff), widen(x + ROW + j)));
}

__attribute__((noinline)) static void row_f32_check(void)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int j = 0; j < ROW; j += 16 * CHAINS) {
        __m512 a[CHAINS], e[CHAINS], r[CHAINS], v[CHAINS];
        __mmask16 near[CHAINS];
        for (int u = 0; u < CHAINS; u++) {
            a[u] = widen(x + j + 16 * u);
            /* e = e^-|a|: n = round(-|a| log2e), r = -|a| - n ln2, degree-5 polynomial */
            __m512 t =
                _mm512_max_ps(_mm512_set1_ps(-103.0f), _mm512_or_ps(a[u], _mm512_set1_ps(-0.0f)));
            __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504f)), 0);
            r[u] = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), t);
            r[u] = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.4286068e-06f), r[u]);
            __m512 p =
                _mm512_fmadd_ps(_mm512_set1_ps(0.0083125159f), r[u], _mm512_set1_ps(0.041890111f));
            p = _mm512_fmadd_ps(p, r[u], _mm512_set1_ps(0.16667114f));
            p = _mm512_fmadd_ps(p, r[u], _mm512_set1_ps(0.49999231f));
            p = _mm512_fmadd_ps(p, r[u], one);
            p = _mm512_fmadd_ps(p, r[u], one);
            e[u] = _mm512_scalef_ps(p, n);
        }
        for (int u = 0; u < CHAINS; u++) {
            /* a / (1 + e) for a >= 0, a e / (1 + e) below */
            __m512 d = _mm512_add_ps(one, e[u]);
            __m512 rc = _mm512_rcp14_ps(d);
            rc = _mm512_fmadd_ps(rc, _mm512_fnmadd_ps(d, rc, one), rc);
            __mmask16 neg = _mm512_cmplt_ps_mask(a[u], _mm512_setzero_ps());
            v[u] = _mm512_mul_ps(_mm512_mask_mul_ps(a[u], neg, a[u], e[u]), rc);
            /* rounded to bfloat16 by adding half an ulp; lanes within 64 float32 ulps of the
             * midpoint, or a below -80 or NaN, go to the table */
            __m512i half = _mm512_add_epi32(_mm512_castps_si512(v[u]), _mm512_set1_epi32(0x8000));
            __m512i off = _mm512_and_si512(_mm512_add_epi32(half, _mm512_set1_epi32(64)),
                                           _mm512_set1_epi32(0xffff));
            near[u] = _mm512_cmple_epu32_mask(off, _mm512_set1_epi32(128)) |
                      _mm512_cmp_ps_mask(a[u], _mm512_set1_ps(-80.0f), _CMP_NGE_UQ);
            v[u] = _mm512_castsi512_ps(_mm512_and_si512(half, _mm512_set1_epi32(-65536)));
        }
        for (int u = 0; u < CHAINS; u++) {
            if (__builtin_expect(near[u] != 0, 0))
                v[u] = lookup(x + j + 16 * u, v[u], near[u]);
            store_rounded(out + j + 16 * u, _mm512_mul_ps(v[u], widen(x + ROW + j + 16 * u)));
        }
    }
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double ghz = 3.0;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--ghz") == 0)
            ghz = atof(argv[i + 1]);
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq")) {
        printf("exact16: skipped (needs AVX-512F, BW and DQ)\n");
        return 0;
    }
    for (uint32_t c = 0; c < 65536; c++) {
        float a = bf16_widen((uint16_t)c);
        table[c] = bf16_round(a / (1.0f + expf(-a)));
    }
    /* Exactness: every input once, b = 1 (the product is then the rounded activation). */
    long differ = 0;
    for (uint32_t base = 0; base < 65536; base += ROW) {
        for (int i = 0; i < ROW; i++) {
            x[i] = (uint16_t)(base + (uint32_t)i);
            x[ROW + i] = 0x3f80; /* 1.0 */
        }
        row_f32_check();
        for (int i = 0; i < ROW; i++) {
            uint16_t want = table[base + (uint32_t)i];
            bool both_nan = (want & 0x7fff) > 0x7f80 && (out[i] & 0x7fff) > 0x7f80;
            differ += out[i] != want && !both_nan;
        }
    }
    /* Timing: uniform inputs in [-4, 4) as fldispatch bench uses. */
    uint64_t s = 1;
    for (int i = 0; i < 2 * ROW; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = bf16_round((float)(s >> 40) / (float)(1 << 24) * 8.0f - 4.0f);
    }
    void (*const rows[2])(void) = {row_table, row_f32_check};
    const char *names[2] = {"table", "f32+check"};
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 2; k++) {
            double best = 1e9;
            for (int rep = 0; rep < 50; rep++) {
                double t0 = seconds();
                for (int i = 0; i < 200; i++)
                    rows[k]();
                double t = (seconds() - t0) / 200;
                best = t < best ? t : best;
            }
            printf("%-10s %7.3f us per 1 x %d row   %5.1f cycles per vector at %.2f GHz\n",
                   names[k], best * 1e6, ROW, best * ghz * 1e9 / (ROW / 16), ghz);
        }
    printf("f32+check differs from the table on %ld of 65536 inputs\n", differ);
    return differ != 0;
}
