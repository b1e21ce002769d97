/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU kernels (plugins/shared/gpu/gpu_kernels.cuh) under the host emulator,
 * against the library's reference.c on the same inputs.
 *
 * No GPU is available here, so this is the only place the device code runs:
 * every op x dtype x family (FLD_GPU_VECTOR on 16-byte aligned rows,
 * FLD_GPU_REFERENCE on odd widths and strides), the fused residual, in-place
 * norms, gemma, weight NULL, rotary neox/gptj with a float32 or same-dtype
 * cache, key NULL, rot_dim < head_size, int32 positions, out-of-range
 * positions, and guard bytes around every view. Each case builds CPU
 * tensors (tests/util/cpu_tensor.h), runs reference.c on one copy through the
 * public API (pinned with a strict per-op order) and fld__gpu_api_emu on
 * another, with the kernel arguments built by fld_tensor_rows() and
 * fld_rotary_geometry_of() as the plugins' glue does.
 *
 * Agreement: activations and rotary use the reference's formulas, rounding
 * steps and libm, so under the emulator they must give the reference's bits
 * (and, checked separately against formulas written here, vLLM's rounding
 * order: the activation rounded before its product, rotary's products and
 * sums rounded in 16-bit dtypes). Norms differ only in the order of the
 * sum of squares: every output within one unit in the last place of a
 * 16-bit dtype, or 1e-5 relative for float32 (vLLM's kernel tests allow
 * 1e-3 / 1.6e-2 / 1e-5); the residual written by the fused norm must be exact.
 * Float32 weights and residuals with 16-bit x, and rows whose float32 sum
 * of squares overflows or underflows, are covered too.
 *
 * The emulator itself is tested too: a kernel with a missing barrier gives a
 * wrong answer (built with ThreadSanitizer, it and three other kinds of race
 * are reported as data races in every schedule, and each made right is
 * not: make check SANITIZE=thread), a divergent barrier fails the launch, shuffles exchange
 * among the lanes of a warp of 32 or 64; and its graph capture: launches on a
 * capturing stream run only when the graph is replayed, in order, giving
 * the bits of the same calls run directly; the calls a capture refuses,
 * a dropped capture, bad arguments, a replay that stops at a launch error.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include <fldispatch/plugin.h>

extern "C" {
#include "util/env.h"
#include "util/harness.h"
#include "../util/cpu_tensor.h"
}

#include "gpu_emu.h"
#include "gpu_kernels.cuh"

extern "C" const struct fld__gpu_api fld__gpu_api_emu;

namespace
{

const struct fld__gpu_api &api = fld__gpu_api_emu;

DLDataType dtype_at(int i)
{
    return i == 0 ? FLD_DTYPE_F32 : i == 1 ? FLD_DTYPE_F16 : FLD_DTYPE_BF16;
}

void *ptr(const tt_tensor *t)
{
    return static_cast<char *>(t->t.data) + t->t.byte_offset;
}

void setup(void)
{
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
}

/* Runs op only through reference.c on this thread. */
void pin(const char *op)
{
    char spec[128];
    snprintf(spec, sizeof spec, "%s=impl:reference.c", op);
    ck_assert_msg(fld_policy_push_per_op(spec) == FLD_OK, "%s: %s", spec, fld_last_error());
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
}

double ulp_of(DLDataType dt, double v)
{
    const int mant = dt.bits == 32 ? 23 : dt.code == kDLBfloat ? 7 : 10;
    const int emin = dt.code == kDLFloat && dt.bits == 16 ? -14 : -126;
    int e = 0;
    if (v != 0)
        frexp(fabs(v), &e);
    int lead = v != 0 ? e - 1 : emin;
    if (lead < emin)
        lead = emin;
    return ldexp(1.0, lead - mant);
}

/*
 * Every element of got within tolerance of want (see the file comment);
 * exact: bit-for-bit equal values. Reports the first mismatch.
 */
void expect_close(const tt_tensor *got, const tt_tensor *want, const char *what, bool exact)
{
    const int64_t n = tt_numel(want);
    ck_assert_int_eq(tt_numel(got), n);
    std::vector<double> g(n), w(n);
    tt_to_double(got, g.data());
    tt_to_double(want, w.data());
    const DLDataType dt = want->t.dtype;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        const double tol = exact           ? 0.0
                           : dt.bits == 32 ? 1e-5 * fabs(w[i]) + 1e-37
                                           : ulp_of(dt, w[i]);
        if (!(fabs(g[i] - w[i]) <= tol) && !(isnan(g[i]) && isnan(w[i]))) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    ck_assert_msg(bad == 0, "%s: %lld of %lld elements differ; first [%lld] got %.9g want %.9g",
                  what, (long long)bad, (long long)n, (long long)first, first >= 0 ? g[first] : 0.0,
                  first >= 0 ? w[first] : 0.0);
    ck_assert_msg(tt_padding_intact(got), "%s: bytes outside the view were written", what);
}

/* Count of elements where a and b differ: an in-place op must change something. */
int64_t differing(const tt_tensor *a, const tt_tensor *b)
{
    const int64_t n = tt_numel(a);
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += tt_get(a, i) != tt_get(b, i);
    return d;
}

const char *const act_names[FLD_GPU_ACT_OPS] = {"silu_and_mul",      "mul_and_silu", "gelu_and_mul",
                                                "gelu_tanh_and_mul", "gelu_quick",   "gelu_new",
                                                "gelu_fast"};

int call_act(int op, DLTensor *out, const DLTensor *x)
{
    switch (op) {
    case FLD_GPU_SILU_AND_MUL:
        return fld_silu_and_mul(out, x);
    case FLD_GPU_MUL_AND_SILU:
        return fld_mul_and_silu(out, x);
    case FLD_GPU_GELU_AND_MUL:
        return fld_gelu_and_mul(out, x);
    case FLD_GPU_GELU_TANH_AND_MUL:
        return fld_gelu_tanh_and_mul(out, x);
    case FLD_GPU_GELU_QUICK:
        return fld_gelu_quick(out, x);
    case FLD_GPU_GELU_NEW:
        return fld_gelu_new(out, x);
    default:
        return fld_gelu_fast(out, x);
    }
}

/* ------------------------------------------------------------------------ */
/* Activations                                                              */
/* ------------------------------------------------------------------------ */

void check_act(int op, int dti, int variant, int64_t rows, int64_t d, int64_t x_pad,
               int64_t out_pad)
{
    setup();
    const DLDataType dt = dtype_at(dti);
    char what[160];
    snprintf(what, sizeof what, "%s %s %s rows=%lld d=%lld", act_names[op], fld_dtype_name(dt),
             variant == FLD_GPU_VECTOR ? "vector" : "reference", (long long)rows, (long long)d);

    const int64_t xd = fld__gpu_act_gated(op) ? 2 * d : d;
    const int64_t xs[2] = {rows, xd}, xst[2] = {xd + x_pad, 1};
    const int64_t os[2] = {rows, d}, ost[2] = {d + out_pad, 1};
    tt_tensor *x = tt_new_strided(dt, 2, xs, xst);
    tt_fill_normal(x, 1000 + (uint64_t)op * 7 + (uint64_t)dti, 0.0, 3.0);
    tt_tensor *want = tt_new_strided(dt, 2, os, ost);
    tt_tensor *got = tt_new_strided(dt, 2, os, ost);

    pin(act_names[op]);
    ck_assert_msg(call_act(op, &want->t, &x->t) == FLD_OK, "%s: reference: %s", what,
                  fld_last_error());

    fld_rows xr, orow;
    fld_tensor_rows(&x->t, &xr);
    fld_tensor_rows(&got->t, &orow);
    struct fld__gpu_act_args a = {op, dti, orow.data, xr.data, rows, d, orow.stride, xr.stride};
    ck_assert_int_eq(xr.width, xd);
    if (variant == FLD_GPU_VECTOR)
        ck_assert_msg(fld__gpu_act_vector_ok(&a), "%s: not vector-aligned", what);
    const int rc = api.act(&a, variant, NULL);
    ck_assert_msg(rc == 0, "%s: emulator: %s", what, api.error_string(rc));
    ck_assert_msg(tt_padding_intact(x), "%s: input written", what);
    expect_close(got, want, what, true);
    tt_free(x);
    tt_free(want);
    tt_free(got);
}

/*
 * The silu family's and QuickGELU's division (fld__gpu_div_rn): where
 * fld__gpu_div_fast_ok lets a pair through, the reciprocal-refining
 * sequence gives the / operator's bits even from a reciprocal up to two
 * units off in its last place (rcp.approx.f32, which starts it on a GPU, is
 * within one), for every 16-bit input (_i 0: bfloat16, 1: float16) against
 * its denominator, 1 + exp(-x) or 1 + exp(-1.702 x), and for pairs drawn
 * across the whole range
 * (_i 2); a group with one pair outside the range divides all of its
 * pairs with the / operator.
 */
START_TEST(silu_division_is_exact)
{
    uint64_t fast = 0, checked = 0;
    auto check_pair = [&](float a, float b) {
        if (!fld__gpu_div_fast_ok(a, b))
            return;
        fast++;
        const float want = a / b, r = 1.0f / b;
        for (int ulps = -2; ulps <= 2; ulps++) {
            const float r0 = fld_f32_from_bits(fld_f32_bits(r) + (uint32_t)ulps);
            const float got = fld__gpu_div_refine(a, b, r0);
            tt_assert_msg(fld_f32_bits(got) == fld_f32_bits(want),
                          "%a / %a from a reciprocal %d units off: %a, want %a", (double)a,
                          (double)b, ulps, (double)got, (double)want);
            checked++;
        }
    };
    if (_i < 2) {
        for (uint32_t h = 0; h < 65536; h++) {
            const float x = _i == 0 ? fld_bf16_to_f32((uint16_t)h) : fld_f16_to_f32((uint16_t)h);
            check_pair(x, fld_gpu::silu_denominator(x));
            check_pair(-x, fld_gpu::silu_denominator(x));
            check_pair(x, fld_gpu::gelu_quick_denominator(x));
        }
        ck_assert_uint_gt(fast, 60000); /* the activations' usual inputs: most of them */
    } else {
        tt_rng r;
        tt_rng_seed(&r, 0x9e3779b97f4a7c15u);
        const auto next = [&r]() { return tt_rng_bits(&r); };
        for (int i = 0; i < 400000; i++) {
            const uint32_t ua = next(), ub = next();
            /* |a| in [2^-64, 2^65), b in [1, 2^33): the range's edges included */
            const float a = fld_f32_from_bits((ua & 0x807fffffu) | ((63u + (ua >> 8) % 130u) << 23));
            const float b = fld_f32_from_bits((ub & 0x007fffffu) | ((127u + (ub >> 8) % 34u) << 23));
            check_pair(a, b);
        }
        check_pair(0x1p-23f, 0x1.fffffep+0f); /* all-ones significand: kept out */
        ck_assert_uint_gt(fast, 300000);
    }
    ck_assert_uint_eq(checked, 5 * fast);
    const float a[4] = {1.5f, -0.25f, 0.0f, 3.0f}, b[4] = {1.25f, 1.75f, 2.0f, 7.0f};
    float q[4];
    fld__gpu_div_rn<4>(a, b, q); /* 0 is outside the range: every pair by / */
    for (int j = 0; j < 4; j++)
        ck_assert_uint_eq(fld_f32_bits(q[j]), fld_f32_bits(a[j] / b[j]));
}
END_TEST

/* the bfloat16 that f rounds to, every NaN as one */
static uint16_t bf16_of(float f)
{
    return isnan(f) ? 0x7fc0 : fld_f32_to_bf16(f);
}

/*
 * bfloat16 divisions by the product with the reciprocal
 * (fld__gpu_div_to_bf16_settled): where it says the product settles the
 * rounding, the product rounds to the bfloat16 of the correctly rounded
 * quotient, from reciprocals up to two units off in their last place (the
 * hardware's is within one), for every bfloat16 input of silu (either
 * sign) and QuickGELU against its denominator (_i 0) and for pairs drawn
 * across the whole range, subnormals, zeros, infinities and NaNs included,
 * with divisors partly outside [1, 2^64] (_i 1). The products settle
 * almost every pair, the window's edges are where the comment says, and a
 * group with one element in the window is not settled.
 */
START_TEST(bf16_division_rounds_as_the_quotient)
{
    uint64_t settled = 0, in_range = 0;
    auto check_pair = [&](float a, float b) {
        const bool ranged = b >= 1.0f && b <= 0x1p64f;
        const float want = a / b;
        for (int ulps = -2; ulps <= 2; ulps++) {
            fld_emu::set_rcp_offset(ulps);
            float t;
            const bool ok = fld__gpu_div_to_bf16_settled<1>(&a, &b, &t);
            tt_assert_msg(ranged || !ok, "%a / %a: settled with the divisor out of range",
                          (double)a, (double)b);
            tt_assert_msg(!ok || bf16_of(t) == bf16_of(want),
                          "%a / %a from a reciprocal %d units off: %a rounds to %04x, the "
                          "quotient %a to %04x",
                          (double)a, (double)b, ulps, (double)t, bf16_of(t), (double)want,
                          bf16_of(want));
            settled += ok && ulps == 0;
        }
        in_range += ranged;
        fld_emu::set_rcp_offset(0);
    };
    tt_rng r;
    tt_rng_seed(&r, 0x9e3779b97f4a7c15u);
    const auto next = [&r]() { return tt_rng_bits(&r); };
    if (_i == 0) {
        for (uint32_t h = 0; h < 65536; h++) {
            const float x = fld_bf16_to_f32((uint16_t)h);
            check_pair(x, fld_gpu::silu_denominator(x));
            check_pair(-x, fld_gpu::silu_denominator(x));
            check_pair(x, fld_gpu::gelu_quick_denominator(x));
        }
    } else {
        for (int i = 0; i < 400000; i++) {
            const uint32_t ua = next(), ub = next();
            /* a: any bits; b: [2^-2, 2^66) mostly, its edges and non-finite values sometimes */
            const float a = fld_f32_from_bits(ua | ((uint32_t)next() << 31));
            float b = fld_f32_from_bits((ub & 0x007fffffu) | ((125u + (ub >> 8) % 68u) << 23));
            if (ub % 97 == 0)
                b = fld_f32_from_bits(((ub >> 7) & 1) ? 0x7f800000u : 0x7fc00000u);
            else if (ub % 89 == 0)
                b = ((ub >> 7) & 1) ? 1.0f : 0x1p64f;
            check_pair(a, b);
        }
    }
    /* every in-range pair but those whose products fall in the window */
    ck_assert_msg(settled > in_range - in_range / 100, "%llu of %llu settled",
                  (unsigned long long)settled, (unsigned long long)in_range);
    /* the window: low halves 0x8000 - 8 .. 0x8000 + 8 are not settled */
    for (int d = -10; d <= 10; d++) {
        const float a = fld_f32_from_bits(0x3f808000u + (uint32_t)d), b = 1.0f;
        float t;
        ck_assert_int_eq(fld__gpu_div_to_bf16_settled<1>(&a, &b, &t), d < -8 || d > 8);
    }
    /* a group: settled where every element is, each product then the quotient's bfloat16; one
       element in the window unsettles it */
    float a[8], b[8], t[8];
    for (int j = 0; j < 8; j++) {
        a[j] = 1.0f + (float)j * 0.37f;
        b[j] = 1.25f + (float)j;
    }
    ck_assert(fld__gpu_div_to_bf16_settled<8>(a, b, t));
    for (int j = 0; j < 8; j++)
        ck_assert_uint_eq(bf16_of(t[j]), bf16_of(a[j] / b[j]));
    a[5] = fld_f32_from_bits(0x3f808003u);
    b[5] = 1.0f;
    ck_assert(!fld__gpu_div_to_bf16_settled<8>(a, b, t));
}
END_TEST

/*
 * The group's range test (fld__gpu_div_all_fast_ok) says what the pair test
 * (fld__gpu_div_fast_ok) says of every pair: over pairs of the values at
 * the range's edges and their neighbours (signed zeros, subnormals, 2^-64,
 * 2^64, 1, 2^32, all-ones significands, infinities, NaNs of either sign),
 * and over groups of 2, 4 and 8 pairs drawn from them.
 */
START_TEST(division_group_test_is_the_pair_test)
{
    std::vector<float> v;
    const uint32_t edges[] = {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x1f800000u,
                              0x3f800000u, 0x3fffffffu, 0x4f800000u, 0x5f800000u, 0x7f7fffffu,
                              0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu};
    for (uint32_t e : edges)
        for (int d = -1; d <= 1; d++)
            for (uint32_t sign : {0u, 0x80000000u})
                v.push_back(fld_f32_from_bits((e + (uint32_t)d) | sign));
    for (float f : {0.25f, 1e-3f, 7.0e9f, 2.0f - 0x1p-23f, 0x1p-23f})
        v.push_back(f);
    const float inside[] = {1.5f, 3.0f, 1.25f, 100.0f}; /* in the range as a and as b */
    for (float f : inside)
        v.push_back(f);
    const size_t n = v.size();
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            const float a = v[i], b = v[j];
            tt_assert_msg(fld__gpu_div_all_fast_ok<1>(&a, &b) == fld__gpu_div_fast_ok(a, b),
                          "a %08x, b %08x: the group test says %d", (unsigned)fld_f32_bits(a),
                          (unsigned)fld_f32_bits(b), (int)fld__gpu_div_all_fast_ok<1>(&a, &b));
        }
    uint64_t state = 0x2545f4914f6cdd1du;
    auto pick = [&]() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        /* mostly values inside the range, so that groups of 8 pass a third of the time */
        return (state >> 60) < 15 ? inside[(state >> 8) % 4] : v[(state >> 8) % n];
    };
    int passed = 0;
    for (int i = 0; i < 30000; i++) {
        float a[8], b[8];
        bool all2 = true, all4 = true, all8 = true;
        for (int j = 0; j < 8; j++) {
            a[j] = pick();
            b[j] = pick();
            const bool ok = fld__gpu_div_fast_ok(a[j], b[j]);
            all2 &= j >= 2 || ok;
            all4 &= j >= 4 || ok;
            all8 &= ok;
        }
        tt_assert_msg(fld__gpu_div_all_fast_ok<2>(a, b) == all2, "group of 2, draw %d", i);
        tt_assert_msg(fld__gpu_div_all_fast_ok<4>(a, b) == all4, "group of 4, draw %d", i);
        tt_assert_msg(fld__gpu_div_all_fast_ok<8>(a, b) == all8, "group of 8, draw %d", i);
        passed += all8;
    }
    ck_assert_int_gt(passed, 3000); /* both answers were asked for */
    ck_assert_int_lt(passed, 27000);
}
END_TEST

/*
 * v rounded once to the 16-bit dtype dti (1 float16, 2 bfloat16), to
 * nearest even, from a double: the quantum of v's binade (the subnormals'
 * below the least normal), rint, and infinity past the largest finite value.
 */
static uint16_t round16_from_double(double v, int dti)
{
    const int p = dti == 1 ? 11 : 8, emin = dti == 1 ? -14 : -126;
    const double a = fabs(v), top = dti == 1 ? 65504.0 : ldexp(2.0 - 0x1p-7, 127);
    double r = 0.0;
    if (a != 0.0) {
        int e;
        frexp(a, &e); /* a in [2^(e-1), 2^e) */
        const int q = (e - 1 > emin ? e - 1 : emin) - (p - 1);
        r = ldexp(rint(ldexp(a, -q)), q);
    }
    const float f = (float)(r > top ? INFINITY : r) * (std::signbit(v) ? -1.0f : 1.0f);
    return dti == 1 ? fld_f32_to_f16(f) : fld_f32_to_bf16(f);
}

/*
 * What the packed 16-bit arithmetic of the CUDA kernels rests on
 * (fld__gpu_mul2, fld__gpu_add2, fld__gpu_sub2):
 * the float32 form of a product, sum or difference of two 16-bit values,
 * rounded to the dtype, is the exact result rounded once. Every finite
 * 16-bit a (_i 0: bfloat16, 1: float16) against 96 b: the edges (zeros,
 * subnormals, the least normal, one, the largest finite) and values drawn
 * across the range; the exact result from double, which holds it to 53
 * bits, enough for one rounding to 8 or 11 bits.
 */
START_TEST(packed_16bit_arithmetic_rounds_once)
{
    const int dti = _i == 0 ? 2 : 1;
    auto widen16 = [&](uint16_t h) { return dti == 1 ? fld_f16_to_f32(h) : fld_bf16_to_f32(h); };
    auto narrow16 = [&](float f) { return dti == 1 ? fld_f32_to_f16(f) : fld_f32_to_bf16(f); };
    std::vector<uint16_t> bs = {0x0000, 0x8000, 0x0001, 0x8001, 0x0003, 0x3c00, 0xbc00};
    if (dti == 2)
        for (uint16_t h : {0x007f, 0x0080, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0x4000, 0x3f81})
            bs.push_back(h);
    else
        for (uint16_t h : {0x03ff, 0x0400, 0x7bff, 0xfbff, 0x4000, 0x3c01})
            bs.push_back(h);
    uint64_t state = 0x853c49e6748fea9bu;
    while (bs.size() < 96) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        const uint16_t h = (uint16_t)(state >> 24);
        if (std::isfinite(widen16(h)))
            bs.push_back(h);
    }
    uint64_t checked = 0;
    for (uint32_t ha = 0; ha < 65536; ha++) {
        const float a = widen16((uint16_t)ha);
        if (!std::isfinite(a))
            continue;
        for (uint16_t hb : bs) {
            const float b = widen16(hb);
            const struct {
                const char *op;
                float single;
                double exact;
            } cases[] = {{"*", a * b, (double)a * b},
                         {"+", a + b, (double)a + b},
                         {"-", a - b, (double)a - b}};
            for (const auto &c : cases) {
                const uint16_t got = narrow16(c.single), want = round16_from_double(c.exact, dti);
                tt_assert_msg(got == want, "%04x %s %04x: float32 then 16 bits %04x, once %04x",
                              (unsigned)ha, c.op, (unsigned)hb, (unsigned)got, (unsigned)want);
                checked++;
            }
        }
    }
    ck_assert_uint_gt(checked, 3 * 60000 * 96);
}
END_TEST

/* _i: op (7) x dtype (3) x family (2). */
START_TEST(act_matches_reference)
{
    const int op = _i % FLD_GPU_ACT_OPS, dti = (_i / FLD_GPU_ACT_OPS) % 3,
              variant = _i / (3 * FLD_GPU_ACT_OPS);
    if (variant == FLD_GPU_VECTOR)
        check_act(op, dti, variant, 7, 64, 16, 8 * (dti ? 1 : 2));
    else
        check_act(op, dti, variant, 7, 37, 3, 5);
}
END_TEST

/* More groups than one block's threads, several blocks per row. */
START_TEST(act_wide_rows)
{
    const int dti = _i % 3, variant = _i / 3;
    const int64_t d = variant == FLD_GPU_VECTOR ? 4096 : 1100;
    check_act(FLD_GPU_SILU_AND_MUL, dti, variant, 3, d, 0, 0);
    check_act(FLD_GPU_GELU_QUICK, dti, variant, 3, d, 0, 0);
}
END_TEST

/* vLLM's elementwise formulas, written here for the check. */
float unary_f32(int op, float f)
{
    if (op == FLD_GPU_GELU_QUICK)
        return f / (1.0f + expf(-1.702f * f));
    if (op == FLD_GPU_GELU_NEW)
        return 0.5f * f * (1.0f + tanhf(0.79788456f * (f + 0.044715f * (f * f * f))));
    return 0.5f * f * (1.0f + tanhf(0.79788456f * f * (1.0f + 0.044715f * f * f)));
}

/* Every 16-bit value through an elementwise activation: out = round(act(x)),
   one rounding, with the emulator's reciprocals exact and two units off
   either way (QuickGELU's division starts from them). */
void check_unary_every_16bit(int dti, int op, int variant)
{
    const DLDataType dt = dtype_at(dti);
    const int64_t n = 65536, shape[2] = {1, n};
    tt_tensor *x = tt_new(dt, 2, shape), *out = tt_new(dt, 2, shape);
    uint16_t *xv = static_cast<uint16_t *>(ptr(x));
    for (int64_t i = 0; i < n; i++)
        xv[i] = (uint16_t)i;
    fld_rows xr, orow;
    fld_tensor_rows(&x->t, &xr);
    fld_tensor_rows(&out->t, &orow);
    struct fld__gpu_act_args a = {op, dti, orow.data, xr.data, 1, n, orow.stride, xr.stride};
    for (int ulps : {0, -2, 2}) { /* QuickGELU's division from reciprocals that far off */
        fld_emu::set_rcp_offset(ulps);
        ck_assert_int_eq(api.act(&a, variant, NULL), 0);
        fld_emu::set_rcp_offset(0);
        for (int64_t i = 0; i < n; i++) {
            const double want = tt_round(dt, unary_f32(op, (float)tt_get(x, i)));
            const double got = tt_get(out, i);
            tt_assert_msg(got == want || (isnan(got) && isnan(want)),
                          "%s %s %s, reciprocals %d units off: input 0x%04llx: got %.9g, want "
                          "%.9g",
                          act_names[op], fld_dtype_name(dt),
                          variant == FLD_GPU_VECTOR ? "vector" : "reference", ulps, (long long)i,
                          got, want);
        }
    }
    tt_free(x);
    tt_free(out);
}

/* _i: dtype (f16, bf16) x op (3) x family (2), the launch table's shape. */
START_TEST(unary_all_16bit)
{
    setup();
    check_unary_every_16bit(1 + _i % 2, FLD_GPU_GELU_QUICK + (_i / 2) % 3, _i / 6);
}
END_TEST

/* vLLM's formulas (csrc/activation_kernels.cu), written here for the check. */
float act_f32(int op, float f)
{
    if (op == FLD_GPU_SILU_AND_MUL || op == FLD_GPU_MUL_AND_SILU)
        return f / (1.0f + expf(-f));
    if (op == FLD_GPU_GELU_AND_MUL)
        return f * 0.5f * (1.0f + erff(f * 0.70710678f));
    const float cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(0.7978846f * (f + 0.044715f * cube)));
}

/*
 * Every 16-bit value through a gated activation, against the rounding
 * order written out here: out = round(round(act(a)) * b), b cycling through
 * values that make the product round (a single rounding of act(a) * b
 * differs from it in 800-1500 of these elements, the check asks > 500),
 * with the emulator's reciprocals ulps units off (fld_emu::set_rcp_offset),
 * which the silu family's divisions start from: the bits must not move.
 */
void check_act_every_16bit(int dti, int op, int variant, int ulps)
{
    const DLDataType dt = dtype_at(dti);
    const int64_t n = 65536;
    const int64_t xs[2] = {1, 2 * n}, os[2] = {1, n};
    tt_tensor *x = tt_new(dt, 2, xs), *out = tt_new(dt, 2, os);
    static const double others[] = {1.0, -3.0, 0.7109375, 5.5, -1.1875, 0.0};
    const bool second = op == FLD_GPU_MUL_AND_SILU; /* silu of the second half */
    uint16_t *xv = static_cast<uint16_t *>(ptr(x));
    for (int64_t i = 0; i < n; i++) {
        xv[second ? n + i : i] = (uint16_t)i;
        tt_set(x, second ? i : n + i, others[i % 6]);
    }
    fld_rows xr, orow;
    fld_tensor_rows(&x->t, &xr);
    fld_tensor_rows(&out->t, &orow);
    struct fld__gpu_act_args a = {op, dti, orow.data, xr.data, 1, n, orow.stride, xr.stride};
    fld_emu::set_rcp_offset(ulps);
    ck_assert_int_eq(api.act(&a, variant, NULL), 0);
    fld_emu::set_rcp_offset(0);
    int64_t bad = -1, single_differs = 0;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        const float g = (float)tt_get(x, second ? n + i : i);
        const float o = (float)others[i % 6];
        const double act = act_f32(op, g);
        const double want = tt_round(dt, tt_round(dt, act) * o);
        const double got = tt_get(out, i);
        if (!(got == want || (isnan(got) && isnan(want))))
            bad = i;
        single_differs += tt_round(dt, act * o) != want && !isnan(want);
    }
    ck_assert_msg(
        bad < 0,
        "%s %s %s, reciprocals %d units off: input 0x%04llx: got %.9g, want round(round(act) * "
        "b) = %.9g",
        act_names[op], fld_dtype_name(dt), variant == FLD_GPU_VECTOR ? "vector" : "reference", ulps,
        (long long)bad, bad >= 0 ? tt_get(out, bad) : 0.0,
        bad >= 0
            ? tt_round(dt, tt_round(dt, act_f32(op, (float)tt_get(x, second ? n + bad : bad))) *
                               others[bad % 6])
            : 0.0);
    ck_assert_msg(single_differs > 500, "the inputs do not tell the orders apart (%lld)",
                  (long long)single_differs);
    tt_free(x);
    tt_free(out);
}

/* _i: dtype (f16, bf16) x op (4) x family (2) x silu's division from
   reciprocals off by 0, -2 or 2 units, the launch table's shape. */
START_TEST(act_rounding_all_16bit)
{
    setup();
    check_act_every_16bit(1 + _i % 2, (_i / 2) % 4, (_i / 8) % 2,
                          (_i / 16 == 0) ? 0 : (_i / 16 == 1 ? -2 : 2));
}
END_TEST

START_TEST(act_vector_refuses_misaligned)
{
    setup();
    std::vector<uint16_t> x(2 * 2 * 24 + 8), out(2 * 24 + 8);
    struct fld__gpu_act_args a = {FLD_GPU_SILU_AND_MUL, 1, out.data(), x.data(), 2, 20, 20, 40};
    /* d = 20 half-floats is 40 bytes: not a whole number of 16-byte vectors. */
    ck_assert(!fld__gpu_act_vector_ok(&a));
    const uint64_t before = fld_emu::launches();
    ck_assert_int_eq(api.act(&a, FLD_GPU_VECTOR, NULL), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.act(&a, 7, NULL), FLD_EMU_ERR_INVALID_VALUE);
    a.dtype = 3;
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, NULL), FLD_EMU_ERR_INVALID_VALUE);
    a.dtype = 1;
    a.rows = 0; /* nothing to do: no launch (a grid of 0 blocks is an error on a GPU) */
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, NULL), 0);
    ck_assert_int_eq(fld_emu::launches(), before);
    a.rows = 2;
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, NULL), 0);
    ck_assert_int_eq(fld_emu::launches(), before + 1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* RMS norm                                                                 */
/* ------------------------------------------------------------------------ */

enum norm_mode {
    PLAIN,
    RESIDUAL,
    NO_WEIGHT,
    GEMMA,
    GEMMA_RESIDUAL,
    IN_PLACE,
    IN_PLACE_RESIDUAL,
    N_MODES
};
const char *const mode_names[N_MODES] = {"plain",          "residual", "no weight",        "gemma",
                                         "gemma+residual", "in place", "in place+residual"};

/* wdti, rdti: the weight's and residual's dtypes (x's, or 0: float32 with a 16-bit x). */
void check_norm_dt(int mode, int dti, int wdti, int rdti, int variant, int64_t rows, int64_t width,
                   int64_t x_pad)
{
    const DLDataType dt = dtype_at(dti), wdt = dtype_at(wdti), rdt = dtype_at(rdti);
    const bool gemma = mode == GEMMA || mode == GEMMA_RESIDUAL;
    const bool res = mode == RESIDUAL || mode == GEMMA_RESIDUAL || mode == IN_PLACE_RESIDUAL;
    const bool in_place = mode == IN_PLACE || mode == IN_PLACE_RESIDUAL;
    char what[192];
    snprintf(what, sizeof what, "%s %s %s (w %s, r %s) %s rows=%lld width=%lld warp=%d",
             gemma ? "gemma" : "rms", mode_names[mode], fld_dtype_name(dt), fld_dtype_name(wdt),
             fld_dtype_name(rdt), variant == FLD_GPU_VECTOR ? "vector" : "reference",
             (long long)rows, (long long)width, fld_emu::warp_size());

    const int64_t shape[2] = {rows, width}, xst[2] = {width + x_pad, 1};
    const int64_t wshape[1] = {width};
    /* Two copies of every written tensor: one for reference.c, one for the kernel. */
    tt_tensor *x0 = tt_new_strided(dt, 2, shape, xst);
    tt_fill_normal(x0, 77 + (uint64_t)dti, 0.0, 1.0);
    tt_tensor *x1 = tt_clone(x0);
    tt_tensor *w = mode == NO_WEIGHT ? NULL : tt_new(wdt, 1, wshape);
    if (w)
        tt_fill_normal(w, 78, gemma ? 0.0 : 1.0, 0.1);
    tt_tensor *r0 = NULL, *r1 = NULL;
    if (res) {
        r0 = tt_new(rdt, 2, shape);
        tt_fill_normal(r0, 79, 0.0, 1.0);
        r1 = tt_clone(r0);
    }
    tt_tensor *o0 = in_place ? x0 : tt_new(dt, 2, shape);
    tt_tensor *o1 = in_place ? x1 : tt_new(dt, 2, shape);
    tt_tensor *orig = tt_clone(x0);

    const float eps = 1e-6f;
    pin(gemma ? "gemma_rms_norm" : "rms_norm");
    const int rc0 =
        gemma ? fld_gemma_rms_norm(&o0->t, &x0->t, w ? &w->t : NULL, r0 ? &r0->t : NULL, eps)
              : fld_rms_norm(&o0->t, &x0->t, w ? &w->t : NULL, r0 ? &r0->t : NULL, eps);
    ck_assert_msg(rc0 == FLD_OK, "%s: reference: %s", what, fld_last_error());

    fld_rows xr, orow, rrow = {};
    fld_tensor_rows(&x1->t, &xr);
    fld_tensor_rows(&o1->t, &orow);
    if (r1)
        fld_tensor_rows(&r1->t, &rrow);
    struct fld__gpu_norm_args a = {};
    a.dtype = dti;
    a.weight_dtype = wdti;
    a.residual_dtype = rdti;
    a.gemma = gemma;
    a.out = orow.data;
    a.x = xr.data;
    a.weight = w ? ptr(w) : NULL;
    a.residual = r1 ? rrow.data : NULL;
    a.rows = rows;
    a.width = width;
    a.out_stride = orow.stride;
    a.x_stride = xr.stride;
    a.residual_stride = r1 ? rrow.stride : 0;
    a.eps = eps;
    if (variant == FLD_GPU_VECTOR)
        ck_assert_msg(fld__gpu_norm_vector_ok(&a), "%s: not vector-aligned", what);
    const int rc = api.norm(&a, variant, NULL);
    ck_assert_msg(rc == 0, "%s: emulator: %s", what, api.error_string(rc));

    expect_close(o1, o0, what, false);
    ck_assert_msg(differing(o1, orig) > 0, "%s: output equals the input", what);
    if (res) {
        char rw[220];
        snprintf(rw, sizeof rw, "%s (residual)", what);
        expect_close(r1, r0, rw, true);
    }
    if (!in_place)
        ck_assert_msg(tt_padding_intact(x1) && differing(x1, orig) == 0, "%s: x written", what);
    if (w)
        ck_assert(tt_padding_intact(w));
    tt_free(orig);
    if (!in_place) {
        tt_free(o0);
        tt_free(o1);
    }
    tt_free(x0);
    tt_free(x1);
    tt_free(w);
    tt_free(r0);
    tt_free(r1);
}

void check_norm(int mode, int dti, int variant, int64_t rows, int64_t width, int64_t x_pad)
{
    check_norm_dt(mode, dti, dti, dti, variant, rows, width, x_pad);
}

/* _i: mode (7) x dtype (3) x family (2). */
START_TEST(norm_matches_reference)
{
    setup();
    const int mode = _i % N_MODES, dti = (_i / N_MODES) % 3, variant = _i / (3 * N_MODES);
    if (variant == FLD_GPU_VECTOR)
        check_norm(mode, dti, variant, 4, 768, 32);
    else
        check_norm(mode, dti, variant, 3, 769, 5);
}
END_TEST

/* HIP's 64-lane wavefronts (CDNA): the same kernels with a warp of 64. */
START_TEST(norm_warp64)
{
    setup();
    fld_emu::set_warp_size(64);
    const int dti = _i % 3, variant = _i / 3;
    check_norm(RESIDUAL, dti, variant, 3, variant == FLD_GPU_VECTOR ? 1024 : 333, 0);
}
END_TEST

/* Other fiber schedules: a race in either direction, or a warp running ahead, shows. */
START_TEST(norm_other_schedules)
{
    setup();
    fld_emu::set_schedule(_i < 3 ? fld_emu::SCHED_REVERSE : fld_emu::SCHED_LOWEST_FIRST);
    _i %= 3;
    check_norm(GEMMA_RESIDUAL, _i, FLD_GPU_VECTOR, 2, 512, 0);
    check_norm(IN_PLACE_RESIDUAL, _i, FLD_GPU_REFERENCE, 2, 300, 1);
}
END_TEST

/* Several groups per thread (1024-thread blocks) and the many-rows launch shape. */
START_TEST(norm_shapes)
{
    setup();
    check_norm(RESIDUAL, 0, FLD_GPU_VECTOR, 2, 8192, 0); /* 2048 groups, 1024 threads */
    check_norm(PLAIN, 2, FLD_GPU_REFERENCE, 1, 5125, 3); /* 5 elements per thread */
    check_norm(RESIDUAL, 1, FLD_GPU_VECTOR, 300, 64, 0); /* 300 rows: 256-thread cap */
    check_norm(PLAIN, 1, FLD_GPU_VECTOR, 2, 8, 0);       /* one group, one warp */
}
END_TEST

/* Rows between the latency and streaming regimes (5-31 on the emulator's 4
   SMs), as the launch table shapes them: the lean kernel where the
   operands allow it, the general one where not (float32 weight). */
START_TEST(norm_between_regimes)
{
    setup();
    check_norm(RESIDUAL, 2, FLD_GPU_VECTOR, 12, 768, 0);
    check_norm(GEMMA_RESIDUAL, 1, FLD_GPU_VECTOR, 20, 1024, 0);
    check_norm(IN_PLACE_RESIDUAL, 0, FLD_GPU_VECTOR, 31, 512, 0);
    check_norm(PLAIN, 2, FLD_GPU_VECTOR, 5, 4096, 0);
    check_norm_dt(GEMMA_RESIDUAL, 2, 0, 2, FLD_GPU_VECTOR, 9, 768, 0);
}
END_TEST

/*
 * 16-bit x with a float32 weight, residual or both (GemmaRMSNorm's), in
 * both families. _i: dtype (f16, bf16) x operands (3) x family (2).
 */
START_TEST(norm_mixed_dtypes)
{
    setup();
    const int dti = 1 + _i % 2, which = (_i / 2) % 3, variant = _i / 6;
    const int wdti = which != 1 ? 0 : dti, rdti = which != 0 ? 0 : dti;
    const int64_t width = variant == FLD_GPU_VECTOR ? 768 : 769, pad = variant ? 32 : 5;
    for (int mode = 0; mode < N_MODES; mode++)
        check_norm_dt(mode, dti, wdti, rdti, variant, 3, width, pad);
    fld_emu::set_warp_size(64);
    check_norm_dt(GEMMA_RESIDUAL, dti, wdti, rdti, variant, 2, 1024, 0);
}
END_TEST

/*
 * Rows whose float32 sum of squares is not usable: 1e30 and 3e38 (squares
 * overflow), 1e-30 with eps 0 (squares underflow), zeros, an inf, a NaN;
 * and 1e17 with eps = FLT_MAX, whose float32 sum is finite but the mean
 * plus eps is not. Finite rows must give their normalised value (checked
 * in double here),
 * the others PyTorch's: zeros give 0 (eps > 0) or NaN (eps 0), a row with
 * an inf gives 0 except NaN at the inf, a NaN makes the row NaN.
 */
/* Rows of huge, tiny, zero, inf and NaN values: the float32 sum's range
   and the rare rows summed again in double. */
static void check_norm_extremes(DLDataType dt, int dti, int variant, int64_t width, bool weighted)
{
    const int64_t rows = 8;
    const int64_t shape[2] = {rows, width}, wshape[1] = {width};
    tt_tensor *x = tt_new(dt, 2, shape), *out = tt_new(dt, 2, shape);
    tt_tensor *w = weighted ? tt_new(dt, 1, wshape) : NULL;
    for (int64_t j = 0; w && j < width; j++)
        tt_set(w, j, 1.0);
    tt_fill_normal(x, 4, 0.0, 1.0);
    const double scale[rows] = {1e30, 3e38, 1e-30, 0.0, 1.0, 1.0, 1e-3, 1e17};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < width; j++) {
            double v = tt_get(x, r * width + j) * scale[r];
            if (dti == 1 && (r < 2 || r == 7))
                v = tt_get(x, r * width + j) * 6e4; /* float16 tops out at 65504 */
            if (r == 4 && j == 7)
                v = INFINITY;
            if (r == 5 && j == 9)
                v = NAN;
            tt_set(x, r * width + j, v);
        }
    for (const float eps : {1e-6f, 0.0f, FLT_MAX}) {
        fld_rows xr, orow;
        fld_tensor_rows(&x->t, &xr);
        fld_tensor_rows(&out->t, &orow);
        struct fld__gpu_norm_args a = {};
        a.dtype = a.weight_dtype = a.residual_dtype = dti;
        a.out = orow.data;
        a.x = xr.data;
        a.weight = w ? ptr(w) : NULL;
        a.rows = rows;
        a.width = width;
        a.out_stride = orow.stride;
        a.x_stride = xr.stride;
        a.eps = eps;
        ck_assert_int_eq(api.norm(&a, variant, NULL), 0);
        for (int64_t r = 0; r < rows; r++) {
            double ss = 0;
            for (int64_t j = 0; j < width; j++)
                ss += tt_get(x, r * width + j) * tt_get(x, r * width + j);
            const double inv = 1.0 / sqrt(ss / (double)width + (double)eps);
            for (int64_t j = 0; j < width; j++) {
                const double v = tt_get(x, r * width + j), got = tt_get(out, r * width + j);
                double want = v * inv;
                if (r == 4) /* PyTorch: rsqrt(inf) = 0, so 0, and inf * 0 = NaN */
                    want = isinf(v) ? NAN : 0.0;
                const bool ok = isnan(want) ? isnan(got)
                                            : fabs(got - want) <=
                                                  2 * ulp_of(dt, want) + (dt.bits == 32 ? 1e-6 : 0);
                tt_assert_msg(ok,
                              "%s %s width %lld%s eps=%g row %lld [%lld]: x %.9g, got %.9g, "
                              "want %.9g",
                              fld_dtype_name(dt), variant ? "vector" : "reference",
                              (long long)width, w ? " weighted" : "", (double)eps, (long long)r,
                              (long long)j, v, got, want);
            }
        }
    }
    tt_free(x);
    tt_free(out);
    tt_free(w);
}

START_TEST(norm_extremes)
{
    setup();
    const int variant = _i % 2, dti = _i / 2; /* f32, f16 (1e30 is inf there), bf16 */
    const DLDataType dt = dtype_at(dti);
    /* without a weight the general kernel runs; with a weight of ones the
       one-row kernel (16-bit: one group a thread at 512, two at 4096) */
    for (const int64_t width : {512, 4096})
        for (int weighted = 0; weighted < 2; weighted++)
            check_norm_extremes(dt, dti, variant, width, weighted);
}
END_TEST

/*
 * The norms scale a row by an approximate 1 / sqrt (fld__gpu_rsqrt_approx:
 * the hardware's rsqrt, within two units in its last place by CUDA's bound
 * for rsqrtf). With the emulator's moved two units either way, every
 * kernel family stays within the tolerance of the reference: the one-row
 * kernel (width 768), the general vector kernel (8192) and the scalar one
 * (769), each with a residual or gemma's weight. _i: offset (-2, 2) x dtype.
 */
START_TEST(norm_from_approximate_rsqrt)
{
    setup();
    const int dti = _i % 3;
    fld_emu::set_rsqrt_offset(_i < 3 ? -2 : 2);
    check_norm(GEMMA_RESIDUAL, dti, FLD_GPU_VECTOR, 4, 768, 32);
    check_norm(RESIDUAL, dti, FLD_GPU_VECTOR, 2, 8192, 0);
    check_norm(PLAIN, dti, FLD_GPU_REFERENCE, 3, 769, 5);
    fld_emu::set_rsqrt_offset(0);
}
END_TEST

START_TEST(norm_vector_refuses_misaligned)
{
    setup();
    std::vector<float> buf(64 * 3 + 4);
    struct fld__gpu_norm_args a = {};
    a.dtype = 0;
    a.out = buf.data();
    a.x = buf.data() + 1; /* 4 bytes past a 16-byte boundary */
    a.rows = 2;
    a.width = 64;
    a.out_stride = 64;
    a.x_stride = 64;
    a.eps = 1e-6f;
    ck_assert(!fld__gpu_norm_vector_ok(&a));
    ck_assert_int_eq(api.norm(&a, FLD_GPU_VECTOR, NULL), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.norm(&a, FLD_GPU_REFERENCE, NULL), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Rotary embedding                                                         */
/* ------------------------------------------------------------------------ */

struct rotary_case {
    int dti;
    bool cache_f32, neox, key, int32_pos;
    int variant;
    int64_t tokens, q_heads, k_heads, head_size, rot_dim;
    int64_t head_pad;  /* > 0: [T, H, D] with head stride D + pad; 0: [T, H * D] */
    int64_t bad_token; /* >= 0: this token's position is out of range (and the next one's -1) */
    int expect_vec;    /* FLD_GPU_VECTOR: 1 the 16-byte kernel must run, 0 it must not, -1 either */
    bool out;          /* rotary_embedding_out: into new heads, padded by out_pad (as head_pad) */
    int64_t out_pad;
};

tt_tensor *new_heads(const rotary_case &c, int64_t heads, int64_t pad)
{
    const DLDataType dt = dtype_at(c.dti);
    if (pad == 0) {
        const int64_t s[2] = {c.tokens, heads * c.head_size};
        return tt_new(dt, 2, s);
    }
    const int64_t hs = c.head_size + pad;
    const int64_t s[3] = {c.tokens, heads, c.head_size}, st[3] = {heads * hs, hs, 1};
    return tt_new_strided(dt, 3, s, st);
}

void check_rotary(const rotary_case &c)
{
    const DLDataType dt = dtype_at(c.dti), cdt = c.cache_f32 ? FLD_DTYPE_F32 : dt;
    char what[224];
    snprintf(what, sizeof what,
             "rotary %s cache=%s %s %s key=%d pos=%s T=%lld Hq=%lld Hk=%lld D=%lld rot=%lld "
             "pad=%lld%s",
             fld_dtype_name(dt), fld_dtype_name(cdt), c.neox ? "neox" : "gptj",
             c.variant == FLD_GPU_VECTOR ? "vector" : "reference", c.key,
             c.int32_pos ? "int32" : "int64", (long long)c.tokens, (long long)c.q_heads,
             (long long)c.k_heads, (long long)c.head_size, (long long)c.rot_dim,
             (long long)c.head_pad, c.out ? " out of place" : "");

    const int64_t max_pos = 64;
    const int64_t cshape[2] = {max_pos, c.rot_dim};
    tt_tensor *cache = tt_new(cdt, 2, cshape);
    /* A real cos/sin table: cos^2 + sin^2 = 1 keeps the values in range. */
    const int64_t half = c.rot_dim / 2;
    for (int64_t p = 0; p < max_pos; p++)
        for (int64_t i = 0; i < half; i++) {
            const double th = (double)p * pow(10000.0, -2.0 * (double)i / (double)c.rot_dim);
            tt_set(cache, p * c.rot_dim + i, cos(th));
            tt_set(cache, p * c.rot_dim + half + i, sin(th));
        }
    const int64_t pshape[1] = {c.tokens};
    tt_tensor *pos = tt_new(c.int32_pos ? TT_INT32 : TT_INT64, 1, pshape);
    tt_tensor *pos_ref = tt_new(c.int32_pos ? TT_INT32 : TT_INT64, 1, pshape);
    for (int64_t t = 0; t < c.tokens; t++) {
        const int64_t p = (t * 13 + 5) % max_pos;
        tt_set(pos_ref, t, (double)p);
        double bad = (double)p;
        if (t == c.bad_token)
            bad = (double)max_pos;
        else if (c.bad_token >= 0 && t == c.bad_token + 1)
            bad = -1.0;
        tt_set(pos, t, bad);
    }

    tt_tensor *q0 = new_heads(c, c.q_heads, c.head_pad),
              *k0 = c.key ? new_heads(c, c.k_heads, c.head_pad) : NULL;
    tt_fill_normal(q0, 300 + (uint64_t)c.dti, 0.0, 1.0);
    if (k0)
        tt_fill_normal(k0, 301, 0.0, 1.0);
    tt_tensor *q1 = tt_clone(q0), *k1 = k0 ? tt_clone(k0) : NULL;
    tt_tensor *q_orig = tt_clone(q0), *k_orig = k0 ? tt_clone(k0) : NULL;

    pin("rotary_embedding");
    ck_assert_msg(fld_rotary_embedding(&pos_ref->t, &q0->t, k0 ? &k0->t : NULL, c.head_size,
                                       &cache->t, c.neox) == FLD_OK,
                  "%s: reference: %s", what, fld_last_error());
    /* Tokens with a bad position are left as they were. */
    if (c.bad_token >= 0) {
        for (int64_t t = c.bad_token; t < c.bad_token + 2 && t < c.tokens; t++) {
            for (int64_t i = 0; i < c.q_heads * c.head_size; i++)
                tt_set(q0, t * c.q_heads * c.head_size + i,
                       tt_get(q_orig, t * c.q_heads * c.head_size + i));
            for (int64_t i = 0; k0 && i < c.k_heads * c.head_size; i++)
                tt_set(k0, t * c.k_heads * c.head_size + i,
                       tt_get(k_orig, t * c.k_heads * c.head_size + i));
        }
    }

    fld_rotary_embedding_args ra = {&pos->t,     &q1->t,    k1 ? &k1->t : NULL,
                                    c.head_size, &cache->t, c.neox};
    fld_rotary_geometry g;
    fld_rotary_geometry_of(&ra, &g);
    ck_assert_int_eq(g.tokens, c.tokens);
    ck_assert_int_eq(g.rot_dim, c.rot_dim);
    struct fld__gpu_rotary_args a = {};
    a.dtype = c.dti;
    a.cache_dtype = fld_dtype_index(g.cache_dtype);
    a.positions = g.positions;
    a.positions_int32 = g.positions_int32;
    a.query = g.query;
    a.key = g.key;
    a.tokens = g.tokens;
    a.head_size = c.head_size;
    a.rot_dim = g.rot_dim;
    a.q_heads = g.q_heads;
    a.q_token_stride = g.q_token_stride;
    a.q_head_stride = g.q_head_stride;
    a.k_heads = g.k_heads;
    a.k_token_stride = g.k_token_stride;
    a.k_head_stride = g.k_head_stride;
    a.cache = g.cache;
    a.cache_stride = g.cache_stride;
    a.max_pos = g.max_pos;
    a.is_neox = c.neox;
    /* Out of place: outputs filled with a poison value, which the tokens of
       bad positions keep (their heads are not written). */
    const bool out_of_place = c.out;
    const double poison = -7.0;
    tt_tensor *qo = NULL, *ko = NULL;
    if (out_of_place) {
        qo = new_heads(c, c.q_heads, c.out_pad);
        ko = k1 ? new_heads(c, c.k_heads, c.out_pad) : NULL;
        for (int64_t i = 0; i < tt_numel(qo); i++)
            tt_set(qo, i, poison);
        for (int64_t i = 0; ko && i < tt_numel(ko); i++)
            tt_set(ko, i, poison);
        const fld_rotary_embedding_out_args oa = {&pos->t,   &q1->t, k1 ? &k1->t : NULL,
                                                  c.head_size, &cache->t, c.neox,
                                                  &qo->t,    ko ? &ko->t : NULL};
        fld_rotary_geometry gin, gout;
        fld_rotary_out_geometry_of(&oa, &gin, &gout);
        a.query_out = gout.query;
        a.key_out = ko ? gout.key : NULL;
        a.qo_token_stride = gout.q_token_stride;
        a.qo_head_stride = gout.q_head_stride;
        a.ko_token_stride = gout.k_token_stride;
        a.ko_head_stride = gout.k_head_stride;
        /* rotary_embedding_out gives rotary_embedding's bits: q0 and k0. */
        for (int64_t t = c.bad_token; c.bad_token >= 0 && t < c.bad_token + 2 && t < c.tokens;
             t++) {
            for (int64_t i = 0; i < c.q_heads * c.head_size; i++)
                tt_set(q0, t * c.q_heads * c.head_size + i, poison);
            for (int64_t i = 0; k0 && i < c.k_heads * c.head_size; i++)
                tt_set(k0, t * c.k_heads * c.head_size + i, poison);
        }
    }
    if (c.variant == FLD_GPU_VECTOR && c.expect_vec >= 0)
        ck_assert_msg(fld_gpu::rotary_vector_ok(&a) == (c.expect_vec == 1), "%s: vector kernel %s",
                      what, c.expect_vec ? "not taken" : "taken");
    const int rc = api.rotary(&a, c.variant, NULL);
    ck_assert_msg(rc == 0, "%s: emulator: %s", what, api.error_string(rc));

    if (out_of_place) {
        char iw[240];
        snprintf(iw, sizeof iw, "%s (inputs)", what);
        expect_close(q1, q_orig, iw, true);
        if (k1)
            expect_close(k1, k_orig, iw, true);
        tt_free(q1);
        tt_free(k1);
        q1 = qo; /* the checks below read the outputs */
        k1 = ko;
    }
    expect_close(q1, q0, what, true);
    ck_assert_msg(differing(q1, q_orig) > 0, "%s: query unchanged", what);
    if (k1) {
        char kw[240];
        snprintf(kw, sizeof kw, "%s (key)", what);
        expect_close(k1, k0, kw, true);
        ck_assert_msg(differing(k1, k_orig) > 0, "%s: key unchanged", what);
    }
    /* Elements past rot_dim are never written in place (out of place, the
       comparison with q0 saw them copied). */
    for (int64_t t = 0; !out_of_place && t < c.tokens; t++)
        for (int64_t h = 0; h < c.q_heads; h++)
            for (int64_t i = c.rot_dim; i < c.head_size; i++) {
                const int64_t at = (t * c.q_heads + h) * c.head_size + i;
                tt_assert_msg(tt_get(q1, at) == tt_get(q_orig, at), "%s: tail written", what);
            }
    tt_free(cache);
    tt_free(pos);
    tt_free(pos_ref);
    tt_free(q0);
    tt_free(q1);
    tt_free(q_orig);
    tt_free(k0);
    tt_free(k1);
    tt_free(k_orig);
}

/* _i: dtype (3) x cache f32/same (2) x neox/gptj (2) x family (2). */
START_TEST(rotary_matches_reference)
{
    setup();
    rotary_case c = {};
    c.dti = _i % 3;
    c.cache_f32 = (_i / 3) % 2;
    c.neox = (_i / 6) % 2;
    c.variant = _i / 12;
    c.key = true;
    c.tokens = 5;
    c.q_heads = 4;
    c.k_heads = 2;
    c.head_size = 64;
    c.rot_dim = c.cache_f32 ? 64 : 32;
    c.head_pad = 8;
    c.bad_token = -1;
    c.expect_vec = 1;
    check_rotary(c);
}
END_TEST

/* key NULL, int32 positions, a [T, H * D] layout, odd sizes, bad positions. */
START_TEST(rotary_variants)
{
    setup();
    rotary_case c = {};
    c.dti = _i % 3;
    c.variant = (_i / 3) % 2;
    c.neox = true;
    c.tokens = 11;
    c.q_heads = 3;
    c.k_heads = 1;
    c.head_size = 80;
    c.rot_dim = 80;
    c.bad_token = -1;
    c.expect_vec = 1;
    check_rotary(c); /* key NULL, 2-D layout */
    c.expect_vec = 1;
    c.key = true;
    c.int32_pos = true;
    c.neox = false;
    c.rot_dim = 32;
    check_rotary(c); /* gptj, int32, rot_dim < head_size */
    c.neox = true;
    c.head_size = 120;
    c.rot_dim = 112;
    c.head_pad = 3; /* odd head stride: the vector family falls back to pairs */
    c.cache_f32 = true;
    c.expect_vec = 0;
    check_rotary(c);
    c.head_pad = 0;
    c.expect_vec = -1;
    c.int32_pos = false;
    c.bad_token = 4;
    check_rotary(c);
    c.int32_pos = true;
    c.neox = false;
    c.bad_token = 9;
    check_rotary(c);
}
END_TEST

/*
 * rotary_embedding_out: the outputs get rotary_embedding's bits, the tail
 * past rot_dim copied, the inputs untouched, the tokens of bad positions not
 * written, the outputs' own layout honoured. _i: dtype (3) x neox/gptj (2) x
 * family (2) x output layout (2: contiguous, or padded heads).
 */
START_TEST(rotary_out_of_place)
{
    setup();
    rotary_case c = {};
    c.dti = _i % 3;
    c.neox = (_i / 3) % 2;
    c.variant = (_i / 6) % 2;
    c.out = true;
    c.out_pad = (_i / 12) ? 8 : 0;
    c.key = true;
    c.cache_f32 = true;
    c.tokens = 7;
    c.q_heads = 4;
    c.k_heads = 2;
    c.head_size = 64;
    c.rot_dim = 64;
    c.head_pad = 8;
    c.bad_token = -1;
    c.expect_vec = 1;
    check_rotary(c);
    c.rot_dim = 32; /* a tail to copy */
    c.cache_f32 = false;
    check_rotary(c);
    c.key = false;
    c.int32_pos = true;
    c.bad_token = 3;
    c.expect_vec = -1;
    check_rotary(c);
    c.key = true;
    c.out_pad = 3; /* odd output head stride: the vector family falls back to pairs */
    c.expect_vec = 0;
    check_rotary(c);
}
END_TEST

/*
 * 16-bit rotary against vLLM's forward_native written out here: cos and sin
 * rounded to the dtype (a float32 cache is cast first), each product and
 * the sum rounded. _i: dtype (f16, bf16) x neox/gptj (2) x family (2).
 */
START_TEST(rotary_rounding_order)
{
    setup();
    const int dti = 1 + _i % 2, variant = _i / 4;
    const bool neox = (_i / 2) % 2;
    const DLDataType dt = dtype_at(dti);
    const int64_t tokens = 9, heads = 3, D = 64, max_pos = 16, half = D / 2;
    const int64_t cs[2] = {max_pos, D}, qs[2] = {tokens, heads * D}, ps[1] = {tokens};
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, cs), *q = tt_new(dt, 2, qs);
    tt_tensor *pos = tt_new(TT_INT64, 1, ps);
    for (int64_t p = 0; p < max_pos; p++)
        for (int64_t i = 0; i < half; i++) {
            const double th = (double)p * pow(10000.0, -2.0 * (double)i / (double)D);
            tt_set(cache, p * D + i, cos(th));
            tt_set(cache, p * D + half + i, sin(th));
        }
    for (int64_t t = 0; t < tokens; t++)
        tt_set(pos, t, (double)((t * 5 + 3) % max_pos));
    tt_fill_normal(q, 17, 0.0, 2.0);
    tt_tensor *before = tt_clone(q);

    fld_rotary_embedding_args ra = {&pos->t, &q->t, NULL, D, &cache->t, neox};
    fld_rotary_geometry g;
    fld_rotary_geometry_of(&ra, &g);
    struct fld__gpu_rotary_args a = {};
    a.dtype = dti;
    a.cache_dtype = 0;
    a.positions = g.positions;
    a.query = g.query;
    a.tokens = tokens;
    a.head_size = D;
    a.rot_dim = D;
    a.q_heads = heads;
    a.q_token_stride = g.q_token_stride;
    a.q_head_stride = g.q_head_stride;
    a.cache = g.cache;
    a.cache_stride = g.cache_stride;
    a.max_pos = max_pos;
    a.is_neox = neox;
    ck_assert_int_eq(api.rotary(&a, variant, NULL), 0);

    int64_t single_differs = 0;
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < half; i++) {
                const int64_t p = (int64_t)tt_get(pos, t), base = (t * heads + h) * D;
                const double c = tt_round(dt, tt_get(cache, p * D + i));
                const double sn = tt_round(dt, tt_get(cache, p * D + half + i));
                const int64_t ix = base + (neox ? i : 2 * i),
                              iy = base + (neox ? i + half : 2 * i + 1);
                const double x = tt_get(before, ix), y = tt_get(before, iy);
                const double wx = tt_round(dt, tt_round(dt, x * c) - tt_round(dt, y * sn));
                const double wy = tt_round(dt, tt_round(dt, y * c) + tt_round(dt, x * sn));
                tt_assert_msg(tt_get(q, ix) == wx && tt_get(q, iy) == wy,
                              "%s %s %s t=%lld h=%lld i=%lld: got (%.9g, %.9g), want (%.9g, %.9g)",
                              fld_dtype_name(dt), neox ? "neox" : "gptj",
                              variant ? "vector" : "reference", (long long)t, (long long)h,
                              (long long)i, tt_get(q, ix), tt_get(q, iy), wx, wy);
                single_differs += tt_round(dt, x * c - y * sn) != wx;
            }
    ck_assert_msg(single_differs > 0, "the inputs do not tell the orders apart");
    tt_free(cache);
    tt_free(q);
    tt_free(pos);
    tt_free(before);
}
END_TEST

START_TEST(rotary_refuses_bad_arguments)
{
    setup();
    struct fld__gpu_rotary_args a = {};
    a.dtype = 1;
    a.cache_dtype = 2; /* neither float32 nor the query's dtype */
    a.tokens = 1;
    a.rot_dim = 2;
    a.q_heads = 1;
    ck_assert_int_eq(api.rotary(&a, FLD_GPU_REFERENCE, NULL), FLD_EMU_ERR_INVALID_VALUE);
    a.cache_dtype = 1;
    a.rot_dim = 3;
    ck_assert_int_eq(api.rotary(&a, FLD_GPU_REFERENCE, NULL), FLD_EMU_ERR_INVALID_VALUE);
    a.rot_dim = 0; /* nothing to rotate */
    ck_assert_int_eq(api.rotary(&a, FLD_GPU_REFERENCE, NULL), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The API table                                                            */
/* ------------------------------------------------------------------------ */

START_TEST(api_memory_and_device)
{
    ck_assert_int_eq(api.version, FLD_GPU_API_VERSION);
    int n = -1, id = -1;
    ck_assert_int_eq(api.device_count(&n), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(api.current_device(&id), 0);
    ck_assert_int_eq(id, 0);
    ck_assert_int_eq(api.push_device(0), 0);
    ck_assert_int_eq(api.pop_device(), 0);
    ck_assert_int_ne(api.push_device(1), 0);
    ck_assert_ptr_eq(api.default_stream, (void *)FLD_EMU_PER_THREAD_STREAM);
    char name[128] = "";
    ck_assert_int_eq(api.device_name(0, name, sizeof name), 0);
    ck_assert(strstr(name, "emulator") != NULL);
    ck_assert_str_eq(api.error_string(FLD_EMU_ERR_BARRIER),
                     "barrier not reached by every thread of the block (emulator)");

    void *d = NULL;
    ck_assert_int_eq(api.malloc(&d, 1000), 0);
    ck_assert(d != NULL && (uintptr_t)d % 256 == 0);
    char host[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (char)(i * 7);
    ck_assert_int_eq(api.memcpy(d, host, sizeof host, 0, NULL), 0);
    memset(back, 0, sizeof back);
    ck_assert_int_eq(api.memcpy(back, d, sizeof back, 1, NULL), 0);
    ck_assert(memcmp(host, back, sizeof host) == 0);
    ck_assert_int_ne(api.memcpy(back, d, sizeof back, 3, NULL), 0);
    ck_assert_int_eq(api.stream_synchronize(NULL), 0);
    ck_assert_int_eq(api.free(d), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The emulator                                                             */
/* ------------------------------------------------------------------------ */

/* Each thread writes its slot, then reads its neighbour's. */
template <bool SYNC> __global__ void neighbour_kernel(int *out)
{
    __shared__ int slot[64];
    const unsigned t = threadIdx.x;
    slot[t] = (int)t + 1;
    if (SYNC)
        __syncthreads();
    out[t] = slot[(t + 1) % blockDim.x];
}

/* ------------------------------------------------------------------------ */
/* Launch shapes                                                            */
/* ------------------------------------------------------------------------ */

/* Every kind of launch shape bench/gpu_sweep.cu may time, and gpu_launch.h
   may then choose, gives the reference's results: one-pass kernels of 1, 2
   and 4 groups per thread with and without the weight loaded with the
   row, the lean latency kernels (a lean shape the call does not fit runs
   the general kernel), the two-pass kernel, activations' 16-, 8- and
   4-byte groups, grids that stride over rows, tokens and groups, and a
   token's units split over blocks. */
extern "C" void fld_emu_force_shape(const struct fld__gpu_shape *shape);

const struct fld__gpu_shape forced_norm_shapes[] = {
    {64, 5, 1, 2, true, 0, false},  {64, 5, 1, 2, false, 0, false},  {128, 5, 1, 1, true, 0, false},
    {64, 5, 1, 4, false, 0, false}, {1024, 5, 1, 1, true, 0, false}, {256, 2, 1, 1, true, 0, false},
    {64, 2, 1, 0, false, 0, false}, {64, 3, 1, 4, false, 0, false},
    {64, 5, 1, 2, true, 0, true},   {128, 5, 1, 1, true, 0, true},   {256, 5, 1, 1, true, 0, true},
};

START_TEST(launch_shapes_norm)
{
    setup();
    fld_emu_force_shape(&forced_norm_shapes[_i]);
    check_norm(RESIDUAL, 2, FLD_GPU_VECTOR, 5, 768, 0);     /* 96 groups of 8 */
    check_norm(GEMMA, 1, FLD_GPU_VECTOR, 5, 768, 0);
    check_norm(IN_PLACE_RESIDUAL, 0, FLD_GPU_VECTOR, 5, 256, 0); /* 64 groups of 4 */
    fld_emu_force_shape(NULL);
}
END_TEST

START_TEST(launch_shape_out_of_range_is_refused)
{
    setup();
    /* 96 groups do not fit 64 threads x 1 group; 4 groups with 1024 threads
       pass the kernel's launch bound; the weight is loaded with the row for
       at most 2 groups; the one-row kernel takes one block per row and the
       weight with the row */
    const struct fld__gpu_shape bad[] = {{64, 5, 1, 1, false, 0, false},
                                         {1024, 5, 1, 4, false, 0, false},
                                         {64, 5, 1, 4, true, 0, false},
                                         {96, 5, 1, 2, false, 0, false},
                                         {128, 4, 1, 1, true, 0, true},
                                         {128, 5, 1, 1, false, 0, true}};
    const int64_t width = 768;
    std::vector<uint16_t> x(5 * width), out(5 * width);
    struct fld__gpu_norm_args a = {};
    a.dtype = a.weight_dtype = a.residual_dtype = 2;
    a.x = x.data();
    a.out = out.data();
    a.rows = 5;
    a.width = width;
    a.x_stride = a.out_stride = width;
    a.eps = 1e-6f;
    for (const fld__gpu_shape &s : bad) {
        fld_emu_force_shape(&s);
        ck_assert_int_eq(api.norm(&a, FLD_GPU_VECTOR, NULL), FLD_EMU_ERR_INVALID_VALUE);
    }
    /* an activation's groups are 16, 8 or 4 bytes; its output stays as it was */
    std::vector<uint16_t> ax(2 * width), aout(width, 0x1234);
    struct fld__gpu_act_args act = {};
    act.op = FLD_GPU_SILU_AND_MUL;
    act.dtype = 2;
    act.x = ax.data();
    act.out = aout.data();
    act.rows = 1;
    act.d = width;
    act.x_stride = 2 * width;
    act.out_stride = width;
    for (int bytes : {2, 12, 32}) {
        const struct fld__gpu_shape s = {64, 2, 1, 0, false, bytes, false};
        fld_emu_force_shape(&s);
        ck_assert_int_eq(api.act(&act, FLD_GPU_VECTOR, NULL), FLD_EMU_ERR_INVALID_VALUE);
    }
    for (uint16_t v : aout)
        ck_assert_uint_eq(v, 0x1234);
    fld_emu_force_shape(NULL);
}
END_TEST

const struct fld__gpu_shape forced_act_shapes[] = {
    {32, 1, 7, 0, false, 0, false},  {32, 3, 1, 0, false, 16, false}, {256, 1, 7, 0, false, 16, false},
    {64, 2, 3, 0, false, 16, false}, {32, 2, 7, 0, false, 8, false},  {64, 5, 3, 0, false, 4, false},
    {32, 1, 7, 0, false, 16, true},  {64, 4, 7, 0, false, 4, true},   {64, 2, 3, 0, false, 16, true},
};

START_TEST(launch_shapes_act)
{
    setup();
    fld_emu_force_shape(&forced_act_shapes[_i]);
    check_act(FLD_GPU_SILU_AND_MUL, 2, FLD_GPU_VECTOR, 7, 256, 0, 0); /* 32 groups of 8 */
    check_act(FLD_GPU_GELU_QUICK, 0, FLD_GPU_VECTOR, 7, 128, 0, 0);
    check_act(FLD_GPU_GELU_AND_MUL, 1, FLD_GPU_REFERENCE, 7, 37, 3, 5);
    fld_emu_force_shape(NULL);
}
END_TEST

/* One row of 65,536 in 16- and 8-byte groups, lean and looping: the groups
   whose bfloat16 division is not settled by the product load their
   elements again (the launch table's one-row shape takes 4-byte groups,
   which do not). */
const struct fld__gpu_shape wide_group_shapes[] = {
    {256, 32, 1, 0, false, 16, true},
    {256, 64, 1, 0, false, 8, true},
    {256, 5, 1, 0, false, 16, false},
    {256, 5, 1, 0, false, 8, false},
};
#define N_WIDE_GROUP_SHAPES (int)(sizeof wide_group_shapes / sizeof wide_group_shapes[0])

/* Every bfloat16 input of silu_and_mul and mul_and_silu through those
   shapes, from reciprocals two units off either way. */
START_TEST(act_rounding_wide_groups)
{
    setup();
    fld_emu_force_shape(&wide_group_shapes[_i % N_WIDE_GROUP_SHAPES]);
    const int op = (_i / N_WIDE_GROUP_SHAPES) % 2 ? FLD_GPU_MUL_AND_SILU : FLD_GPU_SILU_AND_MUL;
    check_act_every_16bit(FLD_GPU_BF16, op, FLD_GPU_VECTOR,
                          _i / (2 * N_WIDE_GROUP_SHAPES) ? 2 : -2);
    fld_emu_force_shape(NULL);
}
END_TEST

/* Every bfloat16 input of QuickGELU through those shapes. */
START_TEST(unary_wide_groups)
{
    setup();
    fld_emu_force_shape(&wide_group_shapes[_i]);
    check_unary_every_16bit(FLD_GPU_BF16, FLD_GPU_GELU_QUICK, FLD_GPU_VECTOR);
    fld_emu_force_shape(NULL);
}
END_TEST

const struct fld__gpu_shape forced_rotary_shapes[] = {
    {64, 5, 1, 0, false, 0, false},
    {64, 5, 3, 0, false, 0, false},
    {64, 2, 2, 0, false, 0, false},
    {512, 5, 1, 0, false, 0, false},
};

START_TEST(launch_shapes_rotary)
{
    setup();
    fld_emu_force_shape(&forced_rotary_shapes[_i / 4]);
    rotary_case c = {};
    c.dti = 2;
    c.cache_f32 = (_i % 4) == 1;
    c.neox = (_i % 2) == 0;
    c.variant = FLD_GPU_VECTOR;
    c.key = true;
    c.tokens = 5;
    c.q_heads = 4;
    c.k_heads = 2;
    c.head_size = 64;
    c.rot_dim = (_i % 4) == 3 ? 32 : 64;
    c.bad_token = 2;
    c.expect_vec = 1;
    c.out = (_i % 4) >= 2;
    c.out_pad = 8;
    check_rotary(c);
    fld_emu_force_shape(NULL);
}
END_TEST

START_TEST(emu_catches_missing_barrier)
{
    int racy[64] = {0}, fine[64] = {0};
    ck_assert_int_eq(fld__gpu_launch(neighbour_kernel<false>, dim3(1), dim3(64), NULL, racy), 0);
    ck_assert_int_eq(fld__gpu_launch(neighbour_kernel<true>, dim3(1), dim3(64), NULL, fine), 0);
    int racy_ok = 0;
    for (int t = 0; t < 64; t++) {
        ck_assert_int_eq(fine[t], (t + 1) % 64 + 1);
        racy_ok += racy[t] == (t + 1) % 64 + 1;
    }
    /* Without the barrier thread t ran before t + 1 wrote its slot. */
    ck_assert_int_lt(racy_ok, 64);
}
END_TEST

__global__ void divergent_kernel(int *out)
{
    if (threadIdx.x < 16)
        __syncthreads(); /* only half the block gets here */
    out[threadIdx.x] = 1;
}

__global__ void early_exit_kernel(int *out)
{
    if (threadIdx.x == 3)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

START_TEST(emu_catches_divergent_barrier)
{
    int out[32] = {0};
    ck_assert_int_eq(fld__gpu_launch(divergent_kernel, dim3(1), dim3(32), NULL, out),
                     FLD_EMU_ERR_BARRIER);
    ck_assert_int_eq(fld__gpu_launch(early_exit_kernel, dim3(1), dim3(32), NULL, out),
                     FLD_EMU_ERR_BARRIER);
    /* The emulator is usable again after a failed launch. */
    ck_assert_int_eq(fld__gpu_launch(neighbour_kernel<true>, dim3(2), dim3(32), NULL, out), 0);
    ck_assert_int_eq(out[31], 1);
    ck_assert_int_eq(fld__gpu_launch(neighbour_kernel<true>, dim3(1), dim3(1025), NULL, out),
                     FLD_EMU_ERR_LAUNCH_CONFIG);
    ck_assert_int_eq(fld__gpu_launch(neighbour_kernel<true>, dim3(0), dim3(32), NULL, out),
                     FLD_EMU_ERR_LAUNCH_CONFIG);
}
END_TEST

/*
 * Races that ThreadSanitizer reports when the emulator is built with it
 * (fld_emu::checks_races), each beside the same kernel made right. Every
 * kind the kernels could have: a shared slot read before its writer
 * reached the barrier, shared slots written again before every warp read
 * them, two threads writing one global element, and lanes of a warp that
 * trust a shuffle to order their shared-memory accesses.
 */
template <bool SYNC> __global__ void partials_reused_kernel(float *out)
{
    /* Each block_sum<AGAIN> has its shared partials (as on a GPU, one array
       per instantiation); block_sum<false> leaves out the barrier after
       they are read. */
    const float a = fld_gpu::block_sum<SYNC>((float)threadIdx.x);
    const float b = fld_gpu::block_sum<SYNC>(1.0f);
    out[threadIdx.x] = a + 1e6f * b;
}

template <bool SYNC> __global__ void one_output_kernel(float *out)
{
    out[SYNC ? threadIdx.x : threadIdx.x / 2] = (float)threadIdx.x;
}

template <bool SYNC> __global__ void shuffle_then_shared_kernel(float *out)
{
    __shared__ float slot[64];
    slot[threadIdx.x] = (float)threadIdx.x;
    const float v = fld__gpu_shfl_xor(1.0f, 1); /* every lane meets here */
    if (SYNC)
        __syncthreads();
    out[threadIdx.x] = slot[threadIdx.x ^ 1u] + v;
}

struct race_case {
    const char *what, *kernel; /* the report names the kernel where it is symbolised */
    int (*launch)(bool racy, void *out);
};

const race_case race_cases[] = {
    {"a shared slot read before the barrier", "neighbour_kernel",
     [](bool racy, void *out) {
         return fld__gpu_launch(racy ? neighbour_kernel<false> : neighbour_kernel<true>, dim3(2),
                                dim3(64), NULL, static_cast<int *>(out));
     }},
    {"shared partials written again before every warp read them", "block_sum",
     [](bool racy, void *out) {
         return fld__gpu_launch(racy ? partials_reused_kernel<false> : partials_reused_kernel<true>,
                                dim3(2), dim3(256), NULL, static_cast<float *>(out));
     }},
    {"two threads writing one output element", "one_output_kernel",
     [](bool racy, void *out) {
         return fld__gpu_launch(racy ? one_output_kernel<false> : one_output_kernel<true>, dim3(2),
                                dim3(64), NULL, static_cast<float *>(out));
     }},
    {"shared memory ordered by a shuffle alone", "shuffle_then_shared_kernel",
     [](bool racy, void *out) {
         return fld__gpu_launch(racy ? shuffle_then_shared_kernel<false>
                                     : shuffle_then_shared_kernel<true>,
                                dim3(2), dim3(64), NULL, static_cast<float *>(out));
     }},
};

/* Launches the case's kernel in every schedule; exits with 0 where TSan
   reports nothing (with TSAN_OPTIONS=halt_on_error=1, as tests/run.sh sets,
   a report ends the process at once with TSan's exit status). */
const race_case *t_race_case;
bool t_race_racy;

void launch_race_case(void)
{
    std::vector<float> out(1024, 0.0f);
    for (fld_emu::schedule order :
         {fld_emu::SCHED_ROUND_ROBIN, fld_emu::SCHED_REVERSE, fld_emu::SCHED_LOWEST_FIRST}) {
        fld_emu::set_schedule(order);
        if (t_race_case->launch(t_race_racy, out.data()) != 0)
            exit(3);
    }
    fld_emu::set_schedule(fld_emu::SCHED_ROUND_ROBIN);
}

/* Runs fn in a child process; returns what the child wrote to stderr, its
   wait status in *status. */
std::string stderr_of_child(void (*fn)(void), int *status)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fld_emu::free_fibers(); /* launches of earlier tests (CK_FORK=no) left some */
    fflush(NULL);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        fn();
        exit(0);
    }
    close(fds[1]);
    std::string err;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0)
        err.append(buf, (size_t)n);
    close(fds[0]);
    ck_assert_int_eq(waitpid(pid, status, 0), pid);
    return err;
}

/* _i: the case x racy or made right. Registered where checks_races(). */
START_TEST(emu_reports_races)
{
    const race_case &c = race_cases[_i / 2];
    t_race_case = &c;
    t_race_racy = _i % 2 == 0;
    int status = 0;
    const std::string err = stderr_of_child(launch_race_case, &status);
    if (!t_race_racy) {
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0 && err.empty(),
                      "%s, made right: status %d, stderr:\n%s", c.what, status, err.c_str());
        return;
    }
    ck_assert_msg(err.find("ThreadSanitizer: data race") != std::string::npos &&
                      !(WIFEXITED(status) && WEXITSTATUS(status) == 0),
                  "%s: no race reported (status %d), stderr:\n%s", c.what, status, err.c_str());
    /* where a symboliser named the frames, the kernel is among them */
    if (err.find("<null>") == std::string::npos)
        ck_assert_msg(err.find(c.kernel) != std::string::npos, "%s: %s not named:\n%s", c.what,
                      c.kernel, err.c_str());
}
END_TEST

/* The build's sanitizer and the emulator's race checking agree. */
START_TEST(emu_checks_races_under_tsan)
{
#if defined(__SANITIZE_THREAD__)
    const bool tsan = true;
#elif defined(__has_feature)
    const bool tsan = __has_feature(thread_sanitizer);
#else
    const bool tsan = false;
#endif
    ck_assert_int_eq(fld_emu::checks_races(), tsan);
}
END_TEST

__global__ void warp_sum_kernel(float *out)
{
    out[blockIdx.x * blockDim.x + threadIdx.x] =
        fld__gpu_warp_sum((float)(blockIdx.x * blockDim.x + threadIdx.x));
}

__global__ void block_sum_kernel(float *out)
{
    /* Two sums in a row: the shared partials are reused safely. */
    const float a = fld_gpu::block_sum((float)threadIdx.x);
    const float b = fld_gpu::block_sum(1.0f);
    out[threadIdx.x] = a + 1e6f * b;
}

/* _i: warp of 32 or 64 lanes x the three schedules. */
START_TEST(emu_warp_and_block_sums)
{
    const int lanes = _i % 2 ? 64 : 32;
    fld_emu::set_warp_size(lanes);
    fld_emu::set_schedule(static_cast<fld_emu::schedule>(_i / 2));
    std::vector<float> out(256);
    ck_assert_int_eq(fld__gpu_launch(warp_sum_kernel, dim3(2), dim3(128), NULL, out.data()), 0);
    for (int t = 0; t < 256; t++) {
        const int first = t / lanes * lanes;
        const float want = (float)(lanes * first + lanes * (lanes - 1) / 2);
        ck_assert_msg(out[t] == want, "warp %d lane %d: %g, want %g", lanes, t, out[t], want);
    }
    std::vector<float> sums(1024);
    ck_assert_int_eq(fld__gpu_launch(block_sum_kernel, dim3(1), dim3(1024), NULL, sums.data()), 0);
    for (int t = 0; t < 1024; t++)
        ck_assert_float_eq(sums[t], 1023.0f * 1024.0f / 2.0f + 1e6f * 1024.0f);
}
END_TEST

/* What one context switch gives for a set of launches: the warp sums of 4
   blocks of 256, two block sums of 1024, a divergent barrier (the launch
   fails, abandoning fibers at the barrier), the warp sums again; the
   results and the number of switches. False where a launch failed or the
   switch is not built. Checks nothing itself, as it runs on other OS
   threads too. */
struct switch_run {
    std::vector<float> warps, blocks;
    int divergent_rc = 0;
    uint64_t switches = 0;
};

static bool run_with_switch(fld_emu::context_switch kind, switch_run *out)
{
    if (!fld_emu::set_context_switch(kind))
        return false;
    const uint64_t before = fld_emu::switches();
    std::vector<float> again(1024);
    int divergent_out[32] = {0};
    out->warps.assign(1024, -1.0f);
    out->blocks.assign(1024, -1.0f);
    const int rc = fld__gpu_launch(warp_sum_kernel, dim3(4), dim3(256), NULL, out->warps.data()) |
                   fld__gpu_launch(block_sum_kernel, dim3(2), dim3(1024), NULL, out->blocks.data());
    out->divergent_rc = fld__gpu_launch(divergent_kernel, dim3(1), dim3(32), NULL, divergent_out);
    const int rc_again = fld__gpu_launch(warp_sum_kernel, dim3(4), dim3(256), NULL, again.data());
    out->switches = fld_emu::switches() - before;
    return rc == 0 && rc_again == 0 && again == out->warps;
}

/*
 * The fibers' two context switches (set_context_switch) give the same
 * results with the same number of switches, alternating over the same
 * pooled fibers, after a launch that abandoned some at a barrier, and on
 * two OS threads at once (each with its own fibers). The direct switch is
 * built on x86-64 Linux and refused elsewhere.
 */
START_TEST(emu_context_switches)
{
#if defined(__x86_64__) && defined(__linux__)
    const bool direct_built = true;
#else
    const bool direct_built = false;
#endif
    ck_assert_int_eq(fld_emu::set_context_switch(fld_emu::SWITCH_DIRECT), direct_built);
    fld_emu::set_warp_size(32); /* as on the other OS threads */
    fld_emu::set_schedule(fld_emu::SCHED_ROUND_ROBIN);
    const fld_emu::context_switch best =
        direct_built ? fld_emu::SWITCH_DIRECT : fld_emu::SWITCH_UCONTEXT;
    switch_run ucontext_run;
    ck_assert(run_with_switch(fld_emu::SWITCH_UCONTEXT, &ucontext_run));
    ck_assert_int_eq(ucontext_run.divergent_rc, FLD_EMU_ERR_BARRIER);
    for (int t = 0; t < 1024; t++)
        tt_assert_msg(ucontext_run.blocks[t] == 1023.0f * 1024.0f / 2.0f + 1e6f * 1024.0f,
                      "thread %d: %g", t, (double)ucontext_run.blocks[t]);
    ck_assert_uint_gt(ucontext_run.switches, 4 * 256 + 2 * 1024);
    const fld_emu::context_switch kinds[] = {fld_emu::SWITCH_DIRECT, fld_emu::SWITCH_UCONTEXT,
                                             fld_emu::SWITCH_DIRECT};
    for (fld_emu::context_switch kind : kinds) {
        if (kind == fld_emu::SWITCH_DIRECT && !direct_built)
            continue;
        switch_run r;
        ck_assert(run_with_switch(kind, &r));
        ck_assert(r.warps == ucontext_run.warps && r.blocks == ucontext_run.blocks);
        ck_assert_int_eq(r.divergent_rc, ucontext_run.divergent_rc);
        ck_assert_uint_eq(r.switches, ucontext_run.switches);
    }
    switch_run on_thread[2];
    bool ok[2] = {false, false};
    std::thread a([&] { ok[0] = run_with_switch(fld_emu::SWITCH_UCONTEXT, &on_thread[0]); });
    std::thread b([&] { ok[1] = run_with_switch(best, &on_thread[1]); });
    a.join();
    b.join();
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(ok[i], "OS thread %d: a launch failed", i);
        ck_assert(on_thread[i].warps == ucontext_run.warps &&
                  on_thread[i].blocks == ucontext_run.blocks);
        ck_assert_uint_eq(on_thread[i].switches, ucontext_run.switches);
    }
    fld_emu::set_context_switch(best);
}
END_TEST

template <int SLOTS> __global__ void block_sum_once_kernel(const float *in, float *out)
{
    out[threadIdx.x] = fld_gpu::block_sum_once<SLOTS>(in[threadIdx.x]);
}

/* A whole warp's butterfly over lanes values (v[l] += v[l ^ m], m from half
   down), as fld__gpu_warp_sum computes it. */
static void host_butterfly(std::vector<float> &v, int lanes)
{
    for (int m = lanes / 2; m > 0; m >>= 1) {
        const std::vector<float> t = v;
        for (int l = 0; l < lanes; l++)
            v[l] = t[l] + t[l ^ m];
    }
}

/*
 * block_sum_once's bits for every block size (a warp of 32 or 64 lanes,
 * _i) and both slot counts, on sums of squares of mixed magnitudes, where
 * the order of the additions shows: each warp's butterfly, then the
 * partials summed by a whole warp's butterfly with zeros past the last,
 * every thread the same value, as block_sum's. The second stage reads 8
 * or 16 slots from shared memory, or runs only the butterfly's steps below
 * the warps' power of two (block_sum<false>, past the slots); this is what
 * says its bits are the butterfly's. The blocks shrink from one launch to
 * the next, so the shared slots past the last warp hold the previous
 * launch's partials unless block_sum_once writes them (on a GPU they hold
 * whatever was there).
 */
START_TEST(block_sum_bits)
{
    const int lanes = _i ? 64 : 32;
    fld_emu::set_warp_size(lanes);
    tt_rng r;
    tt_rng_seed(&r, 11);
    std::vector<float> in(1024), out(1024);
    for (int threads = 1024; threads >= lanes; threads -= lanes) {
        for (int t = 0; t < threads; t++) {
            const double x = tt_rng_uniform(&r) * pow(2.0, (double)(t % 23) - 11.0);
            in[t] = (float)(x * x);
        }
        const int warps = threads / lanes;
        std::vector<float> second(lanes, 0.0f);
        for (int w = 0; w < warps; w++) {
            std::vector<float> v(in.begin() + w * lanes, in.begin() + (w + 1) * lanes);
            host_butterfly(v, lanes);
            second[w] = v[0];
        }
        host_butterfly(second, lanes);
        for (int slots : {8, 16}) {
            std::fill(out.begin(), out.end(), -1.0f);
            ck_assert_int_eq(
                fld__gpu_launch(slots == 8 ? block_sum_once_kernel<8> : block_sum_once_kernel<16>,
                                dim3(1), dim3((unsigned)threads), NULL, (const float *)in.data(),
                                out.data()),
                0);
            for (int t = 0; t < threads; t++)
                ck_assert_msg(fld_f32_bits(out[t]) == fld_f32_bits(second[0]),
                              "%d threads, %d lanes, %d slots, thread %d: %a, want %a", threads,
                              lanes, slots, t, (double)out[t], (double)second[0]);
        }
    }
}
END_TEST

/* The 16-bit conversions of the device code are half.h's, bit for bit. */
START_TEST(conversions_match_half_h)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const float f16 = fld__gpu_f16_to_f32((uint16_t)h), b16 = fld__gpu_bf16_to_f32((uint16_t)h);
        tt_assert_msg(fld_f32_bits(f16) == fld_f32_bits(fld_f16_to_f32((uint16_t)h)),
                      "float16 %04x: %a", (unsigned)h, (double)f16);
        tt_assert_msg(fld_f32_bits(b16) == fld_f32_bits(fld_bf16_to_f32((uint16_t)h)),
                      "bfloat16 %04x: %a", (unsigned)h, (double)b16);
    }
    tt_rng r;
    tt_rng_seed(&r, 5);
    for (int i = 0; i < 200000; i++) {
        const uint32_t u = (uint32_t)(tt_rng_uniform(&r) * 4294967296.0);
        const float f = fld_f32_from_bits(u);
        tt_assert_msg(fld__gpu_f32_to_bf16(f) == fld_f32_to_bf16(f), "%08x to bfloat16: %04x",
                      (unsigned)u, (unsigned)fld__gpu_f32_to_bf16(f));
        tt_assert_msg(fld__gpu_f32_to_f16(f) == fld_f32_to_f16(f), "%08x to float16: %04x",
                      (unsigned)u, (unsigned)fld__gpu_f32_to_f16(f));
    }
}
END_TEST

/*
 * fld__gpu_bf16_words_finite, against isfinite: every bfloat16 in either
 * half of a word beside each of a few others (finite, inf, NaN, subnormal,
 * signed), and a non-finite element in any one word of four.
 */
START_TEST(bf16_words_finite)
{
    const uint16_t others[] = {0x0000, 0x8000, 0x0001, 0x3f80, 0x7f7f, 0xff7f,
                               0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff};
    for (uint32_t h = 0; h < 65536; h++) {
        const bool h_finite = isfinite(fld_bf16_to_f32((uint16_t)h));
        for (uint16_t o : others) {
            const bool both = h_finite && isfinite(fld_bf16_to_f32(o));
            const uint32_t low = h | (uint32_t)o << 16, high = (uint32_t)o | h << 16;
            tt_assert_msg(fld__gpu_bf16_words_finite<1>(&low) == both,
                          "%04x in the low half beside %04x", h, o);
            tt_assert_msg(fld__gpu_bf16_words_finite<1>(&high) == both,
                          "%04x in the high half beside %04x", h, o);
        }
    }
    for (int at = 0; at < 4; at++) {
        uint32_t words[4] = {0x3f803f80u, 0xbf800000u, 0x7f7f0001u, 0x80003f80u};
        ck_assert(fld__gpu_bf16_words_finite<4>(words));
        words[at] = (words[at] & 0xffff0000u) | 0x7f80u;
        ck_assert_msg(!fld__gpu_bf16_words_finite<4>(words), "an inf in word %d", at);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Graph capture                                                            */
/* ------------------------------------------------------------------------ */

/* An activation of x (rows of 2d, or d when not gated) into out. */
struct fld__gpu_act_args act_args_of(int op, int dti, tt_tensor *out, const tt_tensor *x)
{
    fld_rows xr, orow;
    fld_tensor_rows(&x->t, &xr);
    fld_tensor_rows(&out->t, &orow);
    return {op, dti, orow.data, xr.data, xr.rows, orow.width, orow.stride, xr.stride};
}

/* rms_norm of x into out, scaled by w, all of dtype dti. */
struct fld__gpu_norm_args norm_args_of(int dti, tt_tensor *out, const tt_tensor *x,
                                       const tt_tensor *w)
{
    fld_rows xr, orow;
    fld_tensor_rows(&x->t, &xr);
    fld_tensor_rows(&out->t, &orow);
    struct fld__gpu_norm_args a = {};
    a.dtype = a.weight_dtype = a.residual_dtype = dti;
    a.out = orow.data;
    a.x = xr.data;
    a.weight = ptr(w);
    a.rows = xr.rows;
    a.width = xr.width;
    a.out_stride = orow.stride;
    a.x_stride = xr.stride;
    a.eps = 1e-6f;
    return a;
}

/* Whether two contiguous tensors of one shape and dtype hold the same bytes. */
bool same_bits(const tt_tensor *a, const tt_tensor *b)
{
    const size_t n = (size_t)tt_numel(a) * tt_elem_size(a->t.dtype);
    return tt_numel(a) == tt_numel(b) && memcmp(ptr(a), ptr(b), n) == 0;
}

/* dst's elements set to src's (same shape and dtype). */
void copy_values(tt_tensor *dst, const tt_tensor *src)
{
    std::vector<double> v(tt_numel(src));
    tt_to_double(src, v.data());
    tt_from_double(dst, v.data());
}

/*
 * Two activations into one output, then a norm that reads it, captured on
 * one stream: nothing runs until graph_replay (the outputs keep their
 * bits, the emulator counts no launch), while calls on other streams run
 * at once; the replay runs the warm-up and each replay in the order
 * recorded (another order leaves the first activation's values, or norms
 * them) and gives, bit for bit, what the same calls run directly give; a
 * second replay from the outputs' first bits the same again. _i: dtype (3)
 * x family (2).
 */
START_TEST(capture_replays_in_order)
{
    setup();
    const int dti = _i % 3, variant = _i / 3;
    const DLDataType dt = dtype_at(dti);
    const int64_t rows = 5, d = 64;
    const int64_t xs[2] = {rows, 2 * d}, os[2] = {rows, d}, ws[1] = {d};
    tt_tensor *x = tt_new(dt, 2, xs), *w = tt_new(dt, 1, ws);
    tt_fill_normal(x, 31 + (uint64_t)dti, 0.0, 2.0);
    tt_fill_normal(w, 32, 1.0, 0.1);
    /* want_*: the calls run directly; got_*: captured, then replayed, from blank_*'s bits */
    tt_tensor *want_act = tt_new(dt, 2, os), *want_norm = tt_new(dt, 2, os);
    tt_tensor *got_act = tt_new(dt, 2, os), *got_norm = tt_new(dt, 2, os);
    tt_fill_normal(got_act, 33, 0.0, 1.0);
    tt_fill_normal(got_norm, 34, 0.0, 1.0);
    tt_tensor *blank_act = tt_clone(got_act), *blank_norm = tt_clone(got_norm);

    const struct fld__gpu_act_args wa0 = act_args_of(FLD_GPU_GELU_AND_MUL, dti, want_act, x);
    const struct fld__gpu_act_args wa = act_args_of(FLD_GPU_SILU_AND_MUL, dti, want_act, x);
    const struct fld__gpu_norm_args wn = norm_args_of(dti, want_norm, want_act, w);
    const struct fld__gpu_act_args ga0 = act_args_of(FLD_GPU_GELU_AND_MUL, dti, got_act, x);
    const struct fld__gpu_act_args ga = act_args_of(FLD_GPU_SILU_AND_MUL, dti, got_act, x);
    const struct fld__gpu_norm_args gn = norm_args_of(dti, got_norm, got_act, w);
    if (variant == FLD_GPU_VECTOR)
        ck_assert(fld__gpu_act_vector_ok(&ga) && fld__gpu_norm_vector_ok(&gn));

    void *s = NULL, *graph = NULL;
    ck_assert_int_eq(api.capture_begin(&s), 0);
    ck_assert_ptr_nonnull(s);
    const uint64_t before = fld_emu::launches();
    ck_assert_int_eq(api.act(&ga0, variant, s), 0);
    ck_assert_int_eq(api.act(&ga, variant, s), 0);
    ck_assert_int_eq(api.norm(&gn, variant, s), 0);
    ck_assert_uint_eq(fld_emu::launches(), before);
    ck_assert_int_eq(differing(got_act, blank_act), 0);
    ck_assert_int_eq(differing(got_norm, blank_norm), 0);
    /* the default stream, and any value no capture made, run at once */
    ck_assert_int_eq(api.act(&wa0, variant, api.default_stream), 0);
    ck_assert_int_eq(api.act(&wa, variant, NULL), 0);
    ck_assert_int_eq(api.norm(&wn, variant, (void *)0x1234), 0);
    ck_assert_int_eq(api.stream_synchronize(api.default_stream), 0);
    const uint64_t direct = fld_emu::launches() - before;
    ck_assert_uint_ge(direct, 3);
    ck_assert_int_eq(api.capture_end(s, 1, &graph), 0);
    ck_assert_ptr_nonnull(graph);
    ck_assert_int_eq(differing(got_act, blank_act), 0);
    ck_assert_int_eq(differing(got_norm, blank_norm), 0);

    double ns[3] = {-1.0, -1.0, -1.0};
    uint64_t at = fld_emu::launches();
    ck_assert_int_eq(api.graph_replay(graph, 2, ns), 0);
    ck_assert_uint_eq(fld_emu::launches() - at, 3 * direct); /* warm-up and 2 replays */
    ck_assert_msg(same_bits(got_act, want_act), "activation: replay differs from the direct call");
    ck_assert_msg(same_bits(got_norm, want_norm), "norm: replay differs from the direct call");
    for (int i = 0; i < 2; i++)
        ck_assert_msg(isfinite(ns[i]) && ns[i] >= 0.0, "ns[%d] = %g", i, ns[i]);
    ck_assert(ns[2] == -1.0); /* only `replays` times are written */

    copy_values(got_act, blank_act);
    copy_values(got_norm, blank_norm);
    at = fld_emu::launches();
    ck_assert_int_eq(api.graph_replay(graph, 1, ns), 0);
    ck_assert_uint_eq(fld_emu::launches() - at, 2 * direct);
    ck_assert(same_bits(got_act, want_act) && same_bits(got_norm, want_norm));
    ck_assert(isfinite(ns[0]) && ns[0] >= 0.0);
    ck_assert_int_eq(api.graph_free(graph), 0);

    for (tt_tensor *t : {x, w, want_act, want_norm, got_act, got_norm, blank_act, blank_norm})
        tt_free(t);
}
END_TEST

/*
 * stream_synchronize (_i 0) or a copy (_i 1) on a capturing stream is
 * refused with cudaErrorStreamCaptureUnsupported's value and invalidates
 * the capture: a later launch on it, and capture_end, give
 * cudaErrorStreamCaptureInvalidated's, with no graph, and nothing recorded
 * ever runs. Other streams synchronise meanwhile.
 */
START_TEST(capture_refuses_synchronising_calls)
{
    setup();
    const int64_t xs[2] = {2, 128}, os[2] = {2, 64};
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, xs), *out = tt_new(FLD_DTYPE_F32, 2, os);
    tt_fill_normal(x, 41, 0.0, 1.0);
    tt_fill_normal(out, 42, 0.0, 1.0);
    tt_tensor *blank = tt_clone(out);
    const struct fld__gpu_act_args a = act_args_of(FLD_GPU_SILU_AND_MUL, 0, out, x);

    void *s = NULL;
    ck_assert_int_eq(api.capture_begin(&s), 0);
    const uint64_t before = fld_emu::launches();
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, s), 0);
    ck_assert_int_eq(api.stream_synchronize(NULL), 0);
    ck_assert_int_eq(api.stream_synchronize(api.default_stream), 0);
    int rc;
    if (_i == 0) {
        rc = api.stream_synchronize(s);
    } else {
        /* device to device, which a capture could record: refused all the same */
        rc = api.memcpy(ptr(out), ptr(x), 64 * sizeof(float), 2, s);
    }
    ck_assert_int_eq(rc, FLD_EMU_ERR_CAPTURE_UNSUPPORTED);
    ck_assert_int_eq(FLD_EMU_ERR_CAPTURE_UNSUPPORTED, 900);
    ck_assert_str_eq(api.error_string(rc),
                     "operation not permitted when stream is capturing (emulator)");
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, s), FLD_EMU_ERR_CAPTURE_INVALIDATED);

    void *graph = &graph; /* any non-NULL value: capture_end clears it */
    rc = api.capture_end(s, 1, &graph);
    ck_assert_int_eq(rc, FLD_EMU_ERR_CAPTURE_INVALIDATED);
    ck_assert_int_eq(FLD_EMU_ERR_CAPTURE_INVALIDATED, 901);
    ck_assert_str_eq(api.error_string(rc),
                     "operation failed due to a previous error during capture (emulator)");
    ck_assert_ptr_null(graph);
    ck_assert_uint_eq(fld_emu::launches(), before);
    ck_assert_int_eq(differing(out, blank), 0);
    ck_assert(tt_padding_intact(out));
    /* the stream went with the capture: its value is no stream any more */
    ck_assert_int_eq(api.capture_end(s, 0, &graph), FLD_EMU_ERR_INVALID_VALUE);
    tt_free(x);
    tt_free(out);
    tt_free(blank);
}
END_TEST

/* capture_end with keep 0 drops the capture and its stream: no graph, nothing runs. */
START_TEST(capture_dropped)
{
    setup();
    const int64_t xs[2] = {3, 64}, ws[1] = {64};
    tt_tensor *x = tt_new(FLD_DTYPE_BF16, 2, xs), *w = tt_new(FLD_DTYPE_BF16, 1, ws);
    tt_tensor *out = tt_new(FLD_DTYPE_BF16, 2, xs);
    tt_fill_normal(x, 51, 0.0, 1.0);
    tt_fill_normal(w, 52, 1.0, 0.1);
    tt_fill_normal(out, 53, 0.0, 1.0);
    tt_tensor *blank = tt_clone(out);
    const struct fld__gpu_act_args a = act_args_of(FLD_GPU_GELU_QUICK, 2, out, x);
    const struct fld__gpu_norm_args n = norm_args_of(2, out, x, w);

    void *s = NULL, *graph = &graph;
    ck_assert_int_eq(api.capture_begin(&s), 0);
    const uint64_t before = fld_emu::launches();
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, s), 0);
    ck_assert_int_eq(api.norm(&n, FLD_GPU_VECTOR, s), 0);
    ck_assert_int_eq(api.capture_end(s, 0, &graph), 0);
    ck_assert_ptr_null(graph);
    ck_assert_uint_eq(fld_emu::launches(), before);
    ck_assert_int_eq(differing(out, blank), 0);
    /* the stream is gone; a call on its value runs at once */
    ck_assert_int_eq(api.capture_end(s, 1, &graph), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, s), 0);
    ck_assert_uint_gt(fld_emu::launches(), before);
    ck_assert_int_gt(differing(out, blank), 0);
    for (tt_tensor *t : {x, w, out, blank})
        tt_free(t);
}
END_TEST

/* Arguments no call accepts: no replay count below 1, no NULL, no value
   that is not a live stream or graph; none of them runs anything. */
START_TEST(graph_refuses_bad_arguments)
{
    setup();
    const int64_t xs[2] = {2, 32};
    tt_tensor *x = tt_new(FLD_DTYPE_F16, 2, xs), *out = tt_new(FLD_DTYPE_F16, 2, xs);
    tt_fill_normal(x, 61, 0.0, 1.0);
    tt_fill_normal(out, 62, 0.0, 1.0);
    tt_tensor *blank = tt_clone(out);
    const struct fld__gpu_act_args a = act_args_of(FLD_GPU_GELU_NEW, 1, out, x);
    void *const not_ours = (void *)FLD_EMU_PER_THREAD_STREAM;

    void *s = &s, *graph = &graph;
    ck_assert_int_eq(api.capture_begin(NULL), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.capture_end(not_ours, 1, &graph), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_ptr_null(graph);
    ck_assert_int_eq(api.capture_end(NULL, 1, &graph), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.capture_begin(&s), 0);
    ck_assert_int_eq(api.act(&a, FLD_GPU_REFERENCE, s), 0);
    ck_assert_int_eq(api.capture_end(s, 1, &graph), 0);
    /* a graph's stream no longer captures: ending it again is refused */
    void *again = &again;
    ck_assert_int_eq(api.capture_end(s, 1, &again), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_ptr_null(again);

    const uint64_t before = fld_emu::launches();
    double ns[2] = {-1.0, -1.0};
    ck_assert_int_eq(api.graph_replay(graph, 0, ns), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.graph_replay(graph, -1, ns), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.graph_replay(graph, 1, NULL), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.graph_replay(NULL, 1, ns), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.graph_replay(not_ours, 1, ns), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(api.graph_replay(s, 1, ns), FLD_EMU_ERR_INVALID_VALUE); /* a stream */
    ck_assert_int_eq(api.graph_free(not_ours), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_uint_eq(fld_emu::launches(), before);
    ck_assert(ns[0] == -1.0 && ns[1] == -1.0);
    ck_assert_int_eq(differing(out, blank), 0);

    ck_assert_int_eq(api.graph_replay(graph, 1, ns), 0);
    ck_assert_int_gt(differing(out, blank), 0);
    ck_assert_int_eq(api.graph_free(graph), 0);
    ck_assert_int_eq(api.graph_free(NULL), 0);
    /* freed: its value is no graph any more */
    ck_assert_int_eq(api.graph_replay(graph, 1, ns), FLD_EMU_ERR_INVALID_VALUE);
    tt_free(x);
    tt_free(out);
    tt_free(blank);
}
END_TEST

/*
 * A capture records the launch shape forced when the call was made: an
 * activation captured with a shape the kernel refuses fails the replay
 * after the forcing ended, with that launch's error, and the replay stops
 * there (the next recorded launch does not run).
 */
START_TEST(graph_replay_stops_at_launch_error)
{
    setup();
    const int64_t width = 768;
    const int64_t xs[2] = {1, 2 * width}, os[2] = {1, width};
    tt_tensor *x = tt_new(FLD_DTYPE_BF16, 2, xs);
    tt_tensor *out1 = tt_new(FLD_DTYPE_BF16, 2, os), *out2 = tt_new(FLD_DTYPE_BF16, 2, os);
    tt_fill_normal(x, 71, 0.0, 1.0);
    tt_fill_normal(out1, 72, 0.0, 1.0);
    tt_fill_normal(out2, 73, 0.0, 1.0);
    tt_tensor *blank1 = tt_clone(out1), *blank2 = tt_clone(out2);
    const struct fld__gpu_act_args a1 = act_args_of(FLD_GPU_SILU_AND_MUL, 2, out1, x);
    const struct fld__gpu_act_args a2 = act_args_of(FLD_GPU_SILU_AND_MUL, 2, out2, x);
    const struct fld__gpu_shape bad = {64, 2, 1, 0, false, 12, false}; /* 12-byte groups */

    fld_emu_force_shape(&bad);
    ck_assert_int_eq(api.act(&a1, FLD_GPU_VECTOR, NULL), FLD_EMU_ERR_INVALID_VALUE);
    void *s = NULL, *graph = NULL;
    ck_assert_int_eq(api.capture_begin(&s), 0);
    ck_assert_int_eq(api.act(&a1, FLD_GPU_VECTOR, s), 0);
    fld_emu_force_shape(NULL);
    ck_assert_int_eq(api.act(&a2, FLD_GPU_VECTOR, s), 0);
    ck_assert_int_eq(api.capture_end(s, 1, &graph), 0);
    double ns[1] = {-1.0};
    ck_assert_int_eq(api.graph_replay(graph, 1, ns), FLD_EMU_ERR_INVALID_VALUE);
    ck_assert_int_eq(differing(out1, blank1), 0);
    ck_assert_int_eq(differing(out2, blank2), 0);
    ck_assert_int_eq(api.graph_free(graph), 0);
    /* the same calls unforced run */
    ck_assert_int_eq(api.act(&a1, FLD_GPU_VECTOR, NULL), 0);
    ck_assert_int_gt(differing(out1, blank1), 0);
    for (tt_tensor *t : {x, out1, out2, blank1, blank2})
        tt_free(t);
}
END_TEST

Suite *gpu_suite(void)
{
    Suite *s = suite_create("gpu_kernels");
    TCase *tc = tcase_create("emulator");
    tcase_set_timeout(tc, 60); /* under TSan every fiber is a TSan context of its own */
    /* Under TSan a race ends the process: the racy kernels run in children there. */
    if (fld_emu::checks_races())
        tcase_add_loop_test(tc, emu_reports_races, 0,
                            2 * (int)(sizeof race_cases / sizeof race_cases[0]));
    else
        tcase_add_test(tc, emu_catches_missing_barrier);
    tcase_add_test(tc, emu_checks_races_under_tsan);
    tcase_add_test(tc, emu_catches_divergent_barrier);
    tcase_add_loop_test(tc, emu_warp_and_block_sums, 0, 6);
    tcase_add_test(tc, emu_context_switches);
    tcase_add_loop_test(tc, block_sum_bits, 0, 2);
    tcase_add_test(tc, conversions_match_half_h);
    tcase_add_test(tc, bf16_words_finite);
    tcase_add_test(tc, api_memory_and_device);
    suite_add_tcase(s, tc);

    tc = tcase_create("activations");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, act_matches_reference, 0, 6 * FLD_GPU_ACT_OPS);
    tcase_add_loop_test(tc, act_wide_rows, 0, 6);
    tcase_add_loop_test(tc, unary_all_16bit, 0, 12);
    tcase_add_loop_test(tc, act_rounding_all_16bit, 0, 48);
    tcase_add_loop_test(tc, silu_division_is_exact, 0, 3);
    tcase_add_test(tc, division_group_test_is_the_pair_test);
    tcase_add_loop_test(tc, bf16_division_rounds_as_the_quotient, 0, 2);
    tcase_add_loop_test(tc, packed_16bit_arithmetic_rounds_once, 0, 2);
    tcase_add_test(tc, act_vector_refuses_misaligned);
    tcase_add_loop_test(tc, launch_shapes_act, 0,
                        (int)(sizeof forced_act_shapes / sizeof forced_act_shapes[0]));
    tcase_add_loop_test(tc, act_rounding_wide_groups, 0, 4 * N_WIDE_GROUP_SHAPES);
    tcase_add_loop_test(tc, unary_wide_groups, 0, N_WIDE_GROUP_SHAPES);
    suite_add_tcase(s, tc);

    tc = tcase_create("norms");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, norm_matches_reference, 0, 6 * N_MODES);
    tcase_add_loop_test(tc, norm_warp64, 0, 6);
    tcase_add_loop_test(tc, norm_other_schedules, 0, 6);
    tcase_add_test(tc, norm_shapes);
    tcase_add_test(tc, norm_between_regimes);
    tcase_add_loop_test(tc, norm_mixed_dtypes, 0, 12);
    tcase_add_loop_test(tc, norm_extremes, 0, 6);
    tcase_add_loop_test(tc, norm_from_approximate_rsqrt, 0, 6);
    tcase_add_test(tc, norm_vector_refuses_misaligned);
    tcase_add_loop_test(tc, launch_shapes_norm, 0,
                        (int)(sizeof forced_norm_shapes / sizeof forced_norm_shapes[0]));
    tcase_add_test(tc, launch_shape_out_of_range_is_refused);
    suite_add_tcase(s, tc);

    tc = tcase_create("rotary");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, rotary_matches_reference, 0, 24);
    tcase_add_loop_test(tc, rotary_variants, 0, 6);
    tcase_add_loop_test(tc, rotary_out_of_place, 0, 24);
    tcase_add_loop_test(tc, rotary_rounding_order, 0, 8);
    tcase_add_test(tc, rotary_refuses_bad_arguments);
    tcase_add_loop_test(tc, launch_shapes_rotary, 0, 16);
    suite_add_tcase(s, tc);

    tc = tcase_create("graphs");
    tcase_add_loop_test(tc, capture_replays_in_order, 0, 6);
    tcase_add_loop_test(tc, capture_refuses_synchronising_calls, 0, 2);
    tcase_add_test(tc, capture_dropped);
    tcase_add_test(tc, graph_refuses_bad_arguments);
    tcase_add_test(tc, graph_replay_stops_at_launch_error);
    suite_add_tcase(s, tc);
    return s;
}

} // namespace

int main(void)
{
    return tt_run_suite(gpu_suite());
}
