/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Vector math for the activation kernels, written once against the vector
 * layer (include a simd_<isa>.h first). float32 in, float32 out, every
 * function branch-free and always inlined, so each isa_<name>.c compiles
 * its own copy.
 *
 * The loops that use these are long dependency chains of ~25 operations, so
 * the forms below are chosen for short latency as much as for few
 * operations: rounding by a magic-number add (4 cycles, not 12), Estrin
 * instead of Horner for the exp polynomial, the erfc rational evaluated in
 * parallel with its exp.
 *
 * Measured accuracy (make -f act.mk accuracy: act_test --accuracy 97 walks
 * every 97th float of the range, against double-precision libm; x86-64
 * natively, neon under qemu with every 389th). Largest error in ulp of the
 * exact value where |exact| >= 1e-3, and largest absolute error:
 *
 *   function      range          portable     avx2         avx512       neon
 *   vm_exp        [-87.3, 88.7]  1.28 ulp     1.23 ulp     1.23 ulp     1.21 ulp
 *   vm_sigmoid    [-87, 87]      3.7 ulp      4.1 ulp      3.6 ulp      4.0 ulp
 *   vm_silu       [-87, 87]      4.3 ulp      4.5 ulp      4.3 ulp      4.5 ulp
 *   vm_gelu_tanh  [-40, 40]      13.7 ulp     12.7 ulp     12.7 ulp     11.5 ulp
 *   vm_erf        all floats     2.4e-7 abs   2.8e-7 abs   2.3e-7 abs   2.6e-7 abs
 *   vm_gelu       all floats     20.7 ulp     18.8 ulp     19.2 ulp     19.4 ulp
 *
 * The larger gelu_tanh and gelu figures sit at a of about -3 (results
 * ~1e-2) and are conditioning, not approximation: the argument of the exp
 * (2u = a (k0 + k1 a^2), or -t^2 with t = |a| / sqrt2) is rounded to float32 like the
 * reference's, and e^x turns its relative error 2^-24 into |x| 2^-24 in the
 * result (the relative error grows further for results below 1e-3, where
 * the f32 tolerance's atol of 1e-5 is what matters). Against vLLM's f32
 * tolerance (atol 1e-5, rtol 1.3e-6) the gated ops stay below 0.15 of it
 * at |a|, |b| up to 12 (act_test).
 *
 * Special values follow core/reference/reference_activation.c: exp(+inf) = inf,
 * exp(-inf) = 0, a NaN input gives NaN; silu(-inf), gelu(-inf) and
 * gelu_tanh(-inf) are NaN (-inf * 0, as the reference's -inf / inf and
 * -inf * erfc(inf)), their +inf is +inf; large negative inputs give -0 or
 * a tiny negative number where the reference gives -0 or a tiny one (the
 * two flush at slightly different points: below about -88.7 the reference
 * divides by an overflowed exp, these below -103.9 where e^x underflows).
 * Inputs whose exp lands in (0, 2^-126) make denormals, which some CPUs
 * process slowly; only |x| in about (87, 104) (silu; gelu: (13, 14.5))
 * does that.
 */
#ifndef FLD_PLUGIN_CPU_VMATH_H
#define FLD_PLUGIN_CPU_VMATH_H

/* ---- exp ----------------------------------------------------------------
 *
 * e^x = 2^n * e^r with n = round(x / ln2) and r = x - n ln2 (Cody-Waite: ln2
 * split in a high part with 15 significant bits, so n * VM_LN2_HI is exact
 * for |n| <= 2^8, and a low part), |r| <= ln2/2, e^r by a polynomial fitted
 * for minimax relative error (tools/fit.py: degree 6, 3.1e-9; degree 5,
 * 1.05e-7, before rounding), 2^n by v_ldexp. n is rounded to nearest by
 * adding and subtracting 1.5 * 2^23, exact for |x / ln2| < 2^22.
 */
#define VM_LOG2E   1.44269504088896341f
#define VM_LN2_HI  0.693145751953125f        /* 0x3f317200 */
#define VM_LN2_LO  1.428606820309417232e-06f /* ln2 - VM_LN2_HI */
#define VM_ROUNDER 12582912.0f               /* 1.5 * 2^23 */
#define VM_EXP6_C2 0.4999999403953552f
#define VM_EXP6_C3 0.1666652113199234f
#define VM_EXP6_C4 0.04166838899254799f
#define VM_EXP6_C5 0.008368710055947304f
#define VM_EXP6_C6 0.0013814604608342052f
#define VM_EXP5_C2 0.499992311000824f
#define VM_EXP5_C3 0.16667114198207855f
#define VM_EXP5_C4 0.041890110820531845f
#define VM_EXP5_C5 0.008312515914440155f

/* n = round(x / ln2) and the reduced argument r; x within +-150 ln2. */
V_INLINE vf vm_exp_reduce(vf x, vf *r)
{
    vf n = v_sub(v_fma(x, v_set1(VM_LOG2E), v_set1(VM_ROUNDER)), v_set1(VM_ROUNDER));
    vf t = v_fnma(n, v_set1(VM_LN2_HI), x);
    *r = v_fnma(n, v_set1(VM_LN2_LO), t);
    return n;
}

/* e^x for x in [-103.98, 88.76] (or NaN): degree 6, Estrin's scheme. */
V_INLINE vf vm_exp_core6(vf x)
{
    vf r;
    vf n = vm_exp_reduce(x, &r);
    vf r2 = v_mul(r, r);
    vf lo = v_fma(v_set1(VM_EXP6_C3), r, v_set1(VM_EXP6_C2));
    vf hi = v_fma(v_set1(VM_EXP6_C5), r, v_set1(VM_EXP6_C4));
    hi = v_fma(v_set1(VM_EXP6_C6), r2, hi);
    vf p = v_fma(hi, r2, lo);
    p = v_fma(p, r2, v_add(r, v_set1(1.0f)));
    return v_ldexp(p, n);
}

/* The same with degree 5 (about 1 ulp more), for sigmoid's inner loop. */
V_INLINE vf vm_exp_core5(vf x)
{
    vf r;
    vf n = vm_exp_reduce(x, &r);
    vf r2 = v_mul(r, r);
    vf lo = v_fma(v_set1(VM_EXP5_C3), r, v_set1(VM_EXP5_C2));
    vf hi = v_fma(v_set1(VM_EXP5_C5), r, v_set1(VM_EXP5_C4));
    vf p = v_fma(hi, r2, lo);
    p = v_fma(p, r2, v_add(r, v_set1(1.0f)));
    return v_ldexp(p, n);
}

/*
 * e^x. x is clamped to [-103.98, 88.76] first: above 88.7228 (ln FLT_MAX)
 * 2^128 * e^r overflows to inf, below -103.97 the result rounds to 0. The
 * clamp keeps NaN (v_min / v_max with x second).
 */
V_INLINE vf vm_exp(vf x)
{
    return vm_exp_core6(v_min(v_set1(88.76f), v_max(v_set1(-103.98f), x)));
}

/*
 * The activation functions below work on n independent vectors at once
 * (n a compile-time constant after inlining): each step runs over all n
 * before the next, so the n dependency chains interleave instruction by
 * instruction and the out-of-order core overlaps them (measured: 4 chains
 * run about 25% faster than 4 calls one after the other on AVX-512). The
 * single-vector forms wrap them with n = 1.
 */
#define VM_MAXN      8
#define VM_FOR(u, n) _Pragma("GCC unroll 8") for (int u = 0; u < (n); u++)

/* ---- sigmoid and the activations built on it -----------------------------
 *
 * a * sigmoid(h) with e = e^-|h| in [0, 1], so the reciprocal's argument
 * 1 + e stays in [1, 2] and nothing overflows:
 *   h >= 0:  a / (1 + e)
 *   h <  0:  a e / (1 + e)
 * For h -> -inf, e underflows to 0 and the result is a * 0: -0, or NaN for
 * a = -inf (the reference's -inf / inf). e^-|h| uses the degree-5 exp.
 */
V_INLINE void vm_mul_sigmoid_n(vf *res, const vf *a, const vf *h, int n)
{
    vf t[VM_MAXN], k[VM_MAXN], r[VM_MAXN], r2[VM_MAXN], lo[VM_MAXN], hi[VM_MAXN];
    VM_FOR(u, n) t[u] = v_max(v_set1(-103.98f), v_copysign(h[u], v_set1(-1.0f))); /* -|h| */
    VM_FOR(u, n) k[u] = v_fma(t[u], v_set1(VM_LOG2E), v_set1(VM_ROUNDER));
    VM_FOR(u, n) k[u] = v_sub(k[u], v_set1(VM_ROUNDER));
    VM_FOR(u, n) r[u] = v_fnma(k[u], v_set1(VM_LN2_HI), t[u]);
    VM_FOR(u, n) r[u] = v_fnma(k[u], v_set1(VM_LN2_LO), r[u]);
    VM_FOR(u, n) r2[u] = v_mul(r[u], r[u]);
    VM_FOR(u, n) lo[u] = v_fma(v_set1(VM_EXP5_C3), r[u], v_set1(VM_EXP5_C2));
    VM_FOR(u, n) hi[u] = v_fma(v_set1(VM_EXP5_C5), r[u], v_set1(VM_EXP5_C4));
    VM_FOR(u, n) lo[u] = v_fma(hi[u], r2[u], lo[u]);
    VM_FOR(u, n) lo[u] = v_fma(lo[u], r2[u], v_add(r[u], v_set1(1.0f)));
    VM_FOR(u, n) t[u] = v_ldexp(lo[u], k[u]); /* e = e^-|h| */
    VM_FOR(u, n) r[u] = v_rcp(v_add(v_set1(1.0f), t[u]));
    VM_FOR(u, n) hi[u] = v_select(v_lt(h[u], v_zero()), v_mul(a[u], t[u]), a[u]);
    VM_FOR(u, n) res[u] = v_mul(hi[u], r[u]);
}

V_INLINE vf vm_sigmoid(vf h)
{
    vf one = v_set1(1.0f), r;
    vm_mul_sigmoid_n(&r, &one, &h, 1);
    return r;
}

/* silu(a) = a / (1 + e^-a) = a * sigmoid(a). */
V_INLINE void vm_silu_n(vf *res, const vf *a, int n)
{
    vm_mul_sigmoid_n(res, a, a, n);
}

V_INLINE vf vm_silu(vf a)
{
    vf r;
    vm_silu_n(&r, &a, 1);
    return r;
}

/*
 * gelu_tanh(a) = 0.5 a (1 + tanh(u)), u = sqrt(2/pi) (a + 0.044715 a^3),
 * = a * sigmoid(2u): the same function without tanh's cancellation for
 * a < 0 (the reference uses this form too).
 */
#define VM_GT_K0 1.59576912160573071f   /* 2 sqrt(2/pi) */
#define VM_GT_K1 0.0713548162726008338f /* 2 sqrt(2/pi) 0.044715 */

V_INLINE void vm_gelu_tanh_n(vf *res, const vf *a, int n)
{
    vf h[VM_MAXN];
    VM_FOR(u, n) h[u] = v_mul(a[u], v_fma(v_mul(a[u], a[u]), v_set1(VM_GT_K1), v_set1(VM_GT_K0)));
    vm_mul_sigmoid_n(res, a, h, n);
}

V_INLINE vf vm_gelu_tanh(vf a)
{
    vf r;
    vm_gelu_tanh_n(&r, &a, 1);
    return r;
}

/* gelu_quick(a) = a * sigmoid(1.702 a) (vLLM's QuickGELU). */
V_INLINE void vm_gelu_quick_n(vf *res, const vf *a, int n)
{
    vf h[VM_MAXN];
    VM_FOR(u, n) h[u] = v_mul(a[u], v_set1(1.702f));
    vm_mul_sigmoid_n(res, a, h, n);
}

/* ---- erfc, erf and gelu ------------------------------------------------------
 *
 * erfc(t) = e^(-t^2) R(t) for t >= 0, with R(t) = erfc(t) e^(t^2) (the
 * scaled erfc, smooth, from 1 down to ~0.054 at 10.5) as P(t) / Q(t),
 * degrees 4 and 5, fitted for minimax relative error on [0, 10.5]
 * (tools/fit.py: 6.2e-9 before rounding; every coefficient is positive, so
 * the evaluation does not cancel). The polynomials run in parallel with
 * the exp. This keeps erfc's relative accuracy in the tail, where 1 + erf
 * (what gelu needs for a < 0) would cancel.
 *
 * vm_erfc_half_n(h, t, n) gives erfc(t) / 2 (P is stored halved) for
 * t >= 0, t clamped to 10.5 (past it erfc < 2^-150: e^-t^2 is 0 there).
 */
#define VM_ERFC_P0 0.5f
#define VM_ERFC_P1 0.6208240985870361f
#define VM_ERFC_P2 0.36750033497810364f
#define VM_ERFC_P3 0.1154198870062828f
#define VM_ERFC_P4 0.016568733379244804f
#define VM_ERFC_Q1 2.370028018951416f
#define VM_ERFC_Q2 2.409281015396118f
#define VM_ERFC_Q3 1.331709623336792f
#define VM_ERFC_Q4 0.4091776907444f
#define VM_ERFC_Q5 0.0587339848279953f

V_INLINE void vm_erfc_half_n(vf *res, const vf *tin, int n)
{
    vf t[VM_MAXN], x[VM_MAXN], k[VM_MAXN], r[VM_MAXN], r2[VM_MAXN], lo[VM_MAXN], hi[VM_MAXN];
    vf p[VM_MAXN], q[VM_MAXN];
    VM_FOR(u, n) t[u] = v_min(v_set1(10.5f), tin[u]); /* keeps NaN */
    VM_FOR(u, n) x[u] = v_max(v_set1(-103.98f), v_fnma(t[u], t[u], v_zero()));
    /* e^x as vm_exp_core5, interleaved with P(t) and Q(t) */
    VM_FOR(u, n) k[u] = v_fma(x[u], v_set1(VM_LOG2E), v_set1(VM_ROUNDER));
    VM_FOR(u, n) k[u] = v_sub(k[u], v_set1(VM_ROUNDER));
    VM_FOR(u, n) p[u] = v_fma(v_set1(VM_ERFC_P4), t[u], v_set1(VM_ERFC_P3));
    VM_FOR(u, n) q[u] = v_fma(v_set1(VM_ERFC_Q5), t[u], v_set1(VM_ERFC_Q4));
    VM_FOR(u, n) r[u] = v_fnma(k[u], v_set1(VM_LN2_HI), x[u]);
    VM_FOR(u, n) p[u] = v_fma(p[u], t[u], v_set1(VM_ERFC_P2));
    VM_FOR(u, n) q[u] = v_fma(q[u], t[u], v_set1(VM_ERFC_Q3));
    VM_FOR(u, n) r[u] = v_fnma(k[u], v_set1(VM_LN2_LO), r[u]);
    VM_FOR(u, n) p[u] = v_fma(p[u], t[u], v_set1(VM_ERFC_P1));
    VM_FOR(u, n) q[u] = v_fma(q[u], t[u], v_set1(VM_ERFC_Q2));
    VM_FOR(u, n) r2[u] = v_mul(r[u], r[u]);
    VM_FOR(u, n) lo[u] = v_fma(v_set1(VM_EXP5_C3), r[u], v_set1(VM_EXP5_C2));
    VM_FOR(u, n) hi[u] = v_fma(v_set1(VM_EXP5_C5), r[u], v_set1(VM_EXP5_C4));
    VM_FOR(u, n) p[u] = v_fma(p[u], t[u], v_set1(VM_ERFC_P0));
    VM_FOR(u, n) q[u] = v_fma(q[u], t[u], v_set1(VM_ERFC_Q1));
    VM_FOR(u, n) lo[u] = v_fma(hi[u], r2[u], lo[u]);
    VM_FOR(u, n) q[u] = v_fma(q[u], t[u], v_set1(1.0f));
    VM_FOR(u, n) lo[u] = v_fma(lo[u], r2[u], v_add(r[u], v_set1(1.0f)));
    VM_FOR(u, n) q[u] = v_rcp(q[u]);
    VM_FOR(u, n) x[u] = v_ldexp(lo[u], k[u]);
    VM_FOR(u, n) res[u] = v_mul(x[u], v_mul(p[u], q[u]));
}

/* erf(z) = sign(z) (1 - erfc(|z|)): absolute error, not relative near 0. */
V_INLINE vf vm_erf(vf z)
{
    vf h, t = v_abs(z);
    vm_erfc_half_n(&h, &t, 1);
    return v_copysign(v_fnma(v_set1(2.0f), h, v_set1(1.0f)), z);
}

/*
 * gelu(a) = 0.5 a (1 + erf(a / sqrt2)) = a Phi(a), Phi(a) = erfc(-a / sqrt2) / 2
 * (the reference's form): with h = erfc(|a| / sqrt2) / 2, Phi = h for a < 0
 * and 1 - h otherwise.
 */
V_INLINE void vm_gelu_n(vf *res, const vf *a, int n)
{
    vf t[VM_MAXN], h[VM_MAXN];
    VM_FOR(u, n) t[u] = v_mul(v_abs(a[u]), v_set1(0.707106781186547524f));
    vm_erfc_half_n(h, t, n);
    VM_FOR(u, n) t[u] = v_select(v_lt(a[u], v_zero()), h[u], v_sub(v_set1(1.0f), h[u]));
    VM_FOR(u, n) res[u] = v_mul(a[u], t[u]);
}

V_INLINE vf vm_gelu(vf a)
{
    vf r;
    vm_gelu_n(&r, &a, 1);
    return r;
}

#if defined(V_ROUND16_BOUND)
/* ---- forms for results rounded to 16 bits ------------------------------------
 *
 * body_activation.h's computed 16-bit path rounds these to float16 or
 * bfloat16 and looks up every lane whose input lies outside the range
 * where its error bound holds, so they need to be accurate only there and
 * may give anything finite elsewhere: e^x with x clamped to [-87, 87], so
 * 2^n is a normal number, applied by one integer add (v_scale_rounded), and
 * the sigmoid as 1 / (1 + e^-h) without the sign split (1 + e^-h stays
 * below 2^126 for h >= -87). Below h = -87 the result is a / (1 + e^87),
 * not a sigmoid(h), but only gelu_tanh's h gets there (silu's inputs below
 * -80 are looked up), and there its error bound (abs |a|) exceeds the
 * result, so those lanes are looked up too. Same degree-5 exp and refined
 * reciprocal as vm_mul_sigmoid_n, so the accuracy is that of the table at
 * the top of this file; 19 vector operations for silu against 30.
 */
V_INLINE void vm16_mul_sigmoid_n(vf *res, const vf *a, const vf *h, int n)
{
    vf x[VM_MAXN], k[VM_MAXN], m[VM_MAXN], r[VM_MAXN], r2[VM_MAXN], lo[VM_MAXN], hi[VM_MAXN];
    VM_FOR(u, n) x[u] = v_min(v_set1(87.0f), v_max(v_set1(-87.0f), v_neg(h[u]))); /* -h */
    VM_FOR(u, n) k[u] = v_fma(x[u], v_set1(VM_LOG2E), v_set1(VM_ROUNDER));
    VM_FOR(u, n) m[u] = v_sub(k[u], v_set1(VM_ROUNDER));
    VM_FOR(u, n) r[u] = v_fnma(m[u], v_set1(VM_LN2_HI), x[u]);
    VM_FOR(u, n) r[u] = v_fnma(m[u], v_set1(VM_LN2_LO), r[u]);
    VM_FOR(u, n) r2[u] = v_mul(r[u], r[u]);
    VM_FOR(u, n) lo[u] = v_fma(v_set1(VM_EXP5_C3), r[u], v_set1(VM_EXP5_C2));
    VM_FOR(u, n) hi[u] = v_fma(v_set1(VM_EXP5_C5), r[u], v_set1(VM_EXP5_C4));
    VM_FOR(u, n) lo[u] = v_fma(hi[u], r2[u], lo[u]);
    VM_FOR(u, n) lo[u] = v_fma(lo[u], r2[u], v_add(r[u], v_set1(1.0f)));
    VM_FOR(u, n) x[u] = v_add(v_set1(1.0f), v_scale_rounded(lo[u], k[u])); /* 1 + e^-h */
    VM_FOR(u, n) res[u] = v_mul(a[u], v_rcp(x[u]));
}

V_INLINE void vm16_silu_n(vf *res, const vf *a, int n)
{
    vm16_mul_sigmoid_n(res, a, a, n);
}

V_INLINE void vm16_gelu_tanh_n(vf *res, const vf *a, int n)
{
    vf h[VM_MAXN];
    VM_FOR(u, n) h[u] = v_mul(a[u], v_fma(v_mul(a[u], a[u]), v_set1(VM_GT_K1), v_set1(VM_GT_K0)));
    vm16_mul_sigmoid_n(res, a, h, n);
}
#endif

/* ---- PyTorch's CPU forms (VLLM_FL_CPU_ACTIVATIONS=torch) ----------------------
 *
 * What torch 2.x computes for F.silu and F.gelu(approximate="none") on CPU
 * tensors through ATen's vectorised kernels (AVX2, AVX-512), the path of
 * vLLM's forward_native for SiluAndMul, MulAndSilu and GeluAndMul on x86
 * CPUs, reproduced operation for operation so that the results are the same
 * to the bit (checked against torch on 2^22 random inputs and on every
 * 16-bit input, python/tests/test_vllm_kernels.py):
 *
 *   exp(x)   q = rint(x log2e); s = x - q L2U - q L2L (two fused steps);
 *            u = Horner(c5..c0, s) fused; u = 1 + (s*s u + s) (fused, then
 *            added); u 2^q; 0 below -104, inf above 100 (SLEEF's expf_u10,
 *            which ATen's Vectorized<float>::exp calls)
 *   silu(x)  x / (1 + exp(-x)), a true division
 *   erf(z)   Abramowitz-Stegun 7.1.26 as ATen's Vectorized<float>::erf:
 *            t = 1 / (p|z| + 1) (fused), r = Horner(p5..p1, t) fused,
 *            e = -exp(-(z z)), y = (e t) r + 1 (fused), and z's sign bit
 *            flips y's (y may be a hair below 0 at z = 0)
 *   gelu(x)  (x * 0.5) * (1 + erf(x * float(1/sqrt2)))
 *
 * Every multiply-add above is fused (v_fma_fused: one rounding on every
 * ISA, a library call per lane on the portable one). ATen's scalar loop
 * (the last elements of a row that do not fill two vectors, and the default
 * build without AVX2) uses the C library's expf and erff instead, which
 * these do not follow. tanh-GELU: below.
 */
#define VM_T_LOG2E 1.442695040888963407359924681001892137426645954152985934135449406931f
#define VM_T_L2U   0.693145751953125f
#define VM_T_L2L   1.428606765330187045e-06f

V_INLINE vf vm_exp_torch(vf x)
{
    vf q = v_round(v_mul(x, v_set1(VM_T_LOG2E)));
    vf s = v_fma_fused(q, v_set1(-VM_T_L2U), x);
    s = v_fma_fused(q, v_set1(-VM_T_L2L), s);
    vf u = v_set1(0.000198527617612853646278381f);
    u = v_fma_fused(u, s, v_set1(0.00139304355252534151077271f));
    u = v_fma_fused(u, s, v_set1(0.00833336077630519866943359f));
    u = v_fma_fused(u, s, v_set1(0.0416664853692054748535156f));
    u = v_fma_fused(u, s, v_set1(0.166666671633720397949219f));
    u = v_fma_fused(u, s, v_set1(0.5f));
    u = v_add(v_set1(1.0f), v_fma_fused(v_mul(s, s), u, s));
    u = v_ldexp(u, q);
    u = v_select(v_lt(x, v_set1(-104.0f)), v_zero(), u);
    return v_select(v_gt(x, v_set1(100.0f)), v_set1(__builtin_inff()), u);
}

V_INLINE void vm_silu_torch_n(vf *res, const vf *a, int n)
{
    VM_FOR(u, n) res[u] = v_div(a[u], v_add(v_set1(1.0f), vm_exp_torch(v_neg(a[u]))));
}

V_INLINE vf vm_erf_torch(vf z)
{
    vf t = v_div(v_set1(1.0f), v_fma_fused(v_set1(0.3275911f), v_abs(z), v_set1(1.0f)));
    vf r = v_fma_fused(v_set1(1.061405429f), t, v_set1(-1.453152027f));
    r = v_fma_fused(r, t, v_set1(1.421413741f));
    r = v_fma_fused(r, t, v_set1(-0.284496736f));
    r = v_fma_fused(r, t, v_set1(0.254829592f));
    vf e = v_neg(vm_exp_torch(v_neg(v_mul(z, z))));
    vf y = v_fma_fused(v_mul(e, t), r, v_set1(1.0f));
    return v_mul(y, v_copysign(v_set1(1.0f), z)); /* the sign of z flips y's, as ATen's xor */
}

V_INLINE void vm_gelu_torch_n(vf *res, const vf *a, int n)
{
    VM_FOR(u, n)
    res[u] = v_mul(v_mul(a[u], v_set1(0.5f)),
                   v_add(v_set1(1.0f), vm_erf_torch(v_mul(a[u], v_set1(0.707106781186547524f)))));
}

/*
 * tanh as SLEEF's tanhf_u10 (ATen's Vectorized<float>::tanh), in
 * double-float arithmetic (a value as an unevaluated sum hi + lo of two
 * floats): e = e^|x| as hi + lo (SLEEF's expk2f), tanh = (e - 1/e) /
 * (e + 1/e), 1 past |x| > 8.664339742, with x's sign. Each double-float step
 * below is the fused form SLEEF uses where FMA exists.
 */
typedef struct {
    vf hi, lo;
} vm_df;

V_INLINE vm_df vm_df_add_f(vm_df x, vf y) /* |x| >= |y| not assumed */
{
    vf s = v_add(x.hi, y), v = v_sub(s, x.hi);
    vf t = v_add(v_sub(x.hi, v_sub(s, v)), v_sub(y, v));
    return (vm_df){s, v_add(t, x.lo)};
}

V_INLINE vm_df vm_df_add(vm_df x, vm_df y)
{
    vf s = v_add(x.hi, y.hi), v = v_sub(s, x.hi);
    vf t = v_add(v_sub(x.hi, v_sub(s, v)), v_sub(y.hi, v));
    return (vm_df){s, v_add(t, v_add(x.lo, y.lo))};
}

V_INLINE vf vm_fmapn(vf a, vf b, vf c) /* a b - c, one rounding */
{
    return v_fma_fused(a, b, v_neg(c));
}

V_INLINE vf vm_fmanp(vf a, vf b, vf c) /* c - a b, one rounding */
{
    return v_fma_fused(v_neg(a), b, c);
}

V_INLINE vm_df vm_df_mul_f(vm_df x, vf y)
{
    vf s = v_mul(x.hi, y);
    return (vm_df){s, v_fma_fused(x.lo, y, vm_fmapn(x.hi, y, s))};
}

V_INLINE vm_df vm_df_mul(vm_df x, vm_df y)
{
    vf s = v_mul(x.hi, y.hi);
    return (vm_df){s, v_fma_fused(x.hi, y.lo, v_fma_fused(x.lo, y.hi, vm_fmapn(x.hi, y.hi, s)))};
}

V_INLINE vf vm_tanh_torch(vf x)
{
    const vf one = v_set1(1.0f);
    vf y = v_abs(x);
    /* e^y as a double-float (y >= 0, so no underflow handling) */
    vf q = v_round(v_mul(y, v_set1(VM_T_LOG2E)));
    vm_df sd = vm_df_add_f((vm_df){y, v_zero()}, v_mul(q, v_set1(-VM_T_L2U)));
    sd = vm_df_add_f(sd, v_mul(q, v_set1(-VM_T_L2L)));
    vf u = v_set1(0.1980960224e-3f);
    u = v_fma_fused(u, sd.hi, v_set1(0.1394256484e-2f));
    u = v_fma_fused(u, sd.hi, v_set1(0.8333456703e-2f));
    u = v_fma_fused(u, sd.hi, v_set1(0.4166637361e-1f));
    vm_df t = vm_df_add_f(vm_df_mul_f(sd, u), v_set1(0.166666659414234244790680580464e+0f));
    t = vm_df_add_f(vm_df_mul(sd, t), v_set1(0.5f));
    vf sq = v_mul(sd.hi, sd.hi);
    vm_df s2 = {sq, v_fma_fused(v_add(sd.hi, sd.hi), sd.lo, vm_fmapn(sd.hi, sd.hi, sq))};
    t = vm_df_add(sd, vm_df_mul(s2, t));
    vf th = v_add(one, t.hi);
    t = (vm_df){th, v_add(v_add(v_sub(one, th), t.hi), t.lo)};
    vm_df e = {v_ldexp(t.hi, q), v_ldexp(t.lo, q)};
    /* r = 1 / e */
    vf rh = v_div(one, e.hi);
    vm_df r = {rh, v_mul(rh, vm_fmanp(e.lo, rh, vm_fmanp(e.hi, rh, one)))};
    /* (e - r) / (e + r) */
    vm_df n = vm_df_add(e, (vm_df){v_neg(r.hi), v_neg(r.lo)});
    vm_df d = vm_df_add(e, r);
    vf dr = v_div(one, d.hi), qh = v_mul(n.hi, dr);
    vf ql = vm_fmapn(dr, n.hi, qh);
    vf corr = vm_fmanp(d.lo, dr, vm_fmanp(d.hi, dr, one));
    vf res = v_add(qh, v_fma_fused(qh, corr, v_fma_fused(n.lo, dr, ql)));
    res = v_select(v_gt(y, v_set1(8.664339742f)), one, res);
    return v_copysign(res, x);
}

/* gelu_tanh as ATen: inner = beta * (x + kappa x^3), the add fused with the
 * product as torch's build compiles it; (0.5 x) (1 + tanh(inner)). */
V_INLINE void vm_gelu_tanh_torch_n(vf *res, const vf *a, int n)
{
    VM_FOR(u, n)
    {
        vf cube = v_mul(v_mul(a[u], a[u]), a[u]);
        vf inner = v_mul(v_set1(0.797884560802865355f), v_fma_fused(v_set1(0.044715f), cube, a[u]));
        res[u] = v_mul(v_mul(v_set1(0.5f), a[u]), v_add(v_set1(1.0f), vm_tanh_torch(inner)));
    }
}

#endif
