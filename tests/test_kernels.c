/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Numerics of the catalog kernels: every CPU implementation registered for
 * an op (the library's reference.c and whatever plugins the build tree
 * loads, e.g. vendor.cpu) against a double-precision computation written
 * here, at vLLM's kernel-test shapes and tolerances (the tolerances are
 * those of `fldispatch verify --help`).
 *
 * Each implementation is pinned with a scoped per-op order "op=impl:<id>"
 * plus strict mode, so the call can only run that implementation and its
 * own status comes back. A non-reference implementation may decline a call
 * (FLD_EUNAVAILABLE through the manager); its outputs must then be
 * untouched. The reference must accept everything.
 *
 * Besides the allclose tolerances, vLLM's rounding order is checked to the
 * bit against formulas written here (not the code under test): for 16-bit
 * dtypes every implementation's activations must equal
 * round(round(act(a)) * b) with act vLLM's float32 formula, for every one of
 * the 65536 inputs, and its rotary round(round(x c) - round(y s)) with cos
 * and sin rounded to the dtype; reference.c's float32 activations equal the
 * float32 formula. Norms are checked with float32 weights and residuals on
 * 16-bit x, and on rows whose float32 sum of squares overflows or
 * underflows against their normalised value computed in double here.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fldispatch/half.h>
#include <fldispatch/plugin.h>

#include "util/harness.h"
#include "util/cpu_tensor.h"

/* ------------------------------------------------------------------------ */
/* Implementations under test                                               */
/* ------------------------------------------------------------------------ */

#define MAX_IMPLS 16
#define REF_ID    "reference.c"

struct impl_list {
    const char *op;
    int n;
    char ids[MAX_IMPLS][96];
};

static int collect_impl(const fld_impl_info *info, void *user)
{
    struct impl_list *l = user;
    if (strcmp(info->op, l->op) != 0 || !(info->devices & FLD_DEVICE_MASK_CPU) ||
        !info->available || l->n == MAX_IMPLS)
        return 0;
    snprintf(l->ids[l->n++], sizeof l->ids[0], "%s", info->impl_id);
    return 0;
}

/*
 * When set (a variant run, see main), only this implementation is tested:
 * the run exists to exercise one instruction-set variant of vendor.cpu.
 */
static const char *only_impl;

/* The available CPU implementations of op; reference.c must be one of them. */
static void cpu_impls(const char *op, struct impl_list *l)
{
    memset(l, 0, sizeof *l);
    l->op = op;
    ck_assert_int_eq(fld_foreach_impl(collect_impl, l), 0);
    bool has_ref = false;
    for (int i = 0; i < l->n; i++)
        has_ref |= strcmp(l->ids[i], REF_ID) == 0;
    ck_assert_msg(has_ref, "op %s: %s is not registered for cpu (%d impls)", op, REF_ID, l->n);
    if (!only_impl)
        return;
    int kept = 0;
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->ids[i], only_impl) == 0)
            memmove(l->ids[kept++], l->ids[i], sizeof l->ids[0]);
    ck_assert_msg(kept == 1, "op %s: %s is not available", op, only_impl);
    l->n = kept;
}

/* Makes impl the only candidate of op on this thread, strictly. */
static void pin(const char *op, const char *impl, DLDataType dt)
{
    char spec[160];
    snprintf(spec, sizeof spec, "%s=impl:%s", op, impl);
    ck_assert_msg(fld_policy_push_per_op(spec) == FLD_OK, "%s: %s", spec, fld_last_error());
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    const char *selected = NULL;
    ck_assert_msg(fld_resolve(op, FLD_DEVICE_CPU, dt, &selected) == FLD_OK, "resolve %s: %s", op,
                  fld_last_error());
    ck_assert_str_eq(selected, impl);
}

static void unpin(void)
{
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
}

static bool declined(int rc)
{
    return rc == FLD_EUNAVAILABLE || rc == FLD_EUNSUPPORTED;
}

/* ------------------------------------------------------------------------ */
/* Comparison                                                               */
/* ------------------------------------------------------------------------ */

static DLDataType dtype_at(int i)
{
    return i == 0 ? FLD_DTYPE_F32 : i == 1 ? FLD_DTYPE_F16 : FLD_DTYPE_BF16;
}

static const char *dtype_label(DLDataType dt)
{
    return fld_dtype_name(dt);
}

/* One unit in the last place of dtype at magnitude |v| (the larger binade). */
static double ulp_of(DLDataType dt, double v)
{
    int mant = dt.bits == 32 ? 23 : dt.code == kDLBfloat ? 7 : 10;
    int emin = dt.code == kDLFloat && dt.bits == 16 ? -14 : -126;
    int e = 0;
    double a = fabs(v);
    if (a > 0)
        frexp(a, &e); /* a = m 2^e, m in [0.5, 1): leading bit 2^(e-1) */
    int lead = a > 0 ? e - 1 : emin;
    if (lead < emin)
        lead = emin;
    return ldexp(1.0, lead - mant);
}

struct cmp {
    const char *label; /* "impl op dtype shape" */
    DLDataType dt;
    double atol, rtol; /* allclose: |got - want| <= atol + rtol |want| */
    double rel;        /* > 0: also |got - want| <= rel |want| (where |want| > 1e-30) */
    bool ulp;          /* also within 1 ulp of dt, plus float32 slack */
    int64_t n, bad;
    int64_t first_i;
    double first_got, first_want;
    const char *first_rule;
};

static void cmp_init(struct cmp *c, const char *label, DLDataType dt, double atol, double rtol)
{
    memset(c, 0, sizeof *c);
    c->label = label;
    c->dt = dt;
    c->atol = atol;
    c->rtol = rtol;
}

/* The vLLM default tolerances of a dtype (allclose_default.py). */
static void cmp_default(struct cmp *c, const char *label, DLDataType dt)
{
    if (dt.bits == 32)
        cmp_init(c, label, dt, 1e-5, 1.3e-6);
    else if (dt.code == kDLFloat)
        cmp_init(c, label, dt, 1e-3, 1e-3);
    else
        cmp_init(c, label, dt, 1e-3, 1.6e-2);
}

/* mag: sum of |terms| of the float32 computation, to bound its own error. */
static void cmp_one(struct cmp *c, int64_t i, double got, double want, double mag)
{
    double err = fabs(got - want);
    const char *rule = NULL;
    c->n++;
    if (!(err <= c->atol + c->rtol * fabs(want)))
        rule = "allclose";
    else if (c->rel > 0 && fabs(want) > 1e-30 && !(err <= c->rel * fabs(want)))
        rule = "relative";
    else if (c->ulp && !(err <= ulp_of(c->dt, fmax(fabs(got), fabs(want))) + 0x1p-22 * mag))
        rule = "1 ulp";
    if (!rule)
        return;
    if (c->bad++ == 0) {
        c->first_i = i;
        c->first_got = got;
        c->first_want = want;
        c->first_rule = rule;
    }
}

static void cmp_done(const struct cmp *c)
{
    ck_assert_msg(c->bad == 0,
                  "%s: %lld of %lld values off; first at %lld: got %.10g, want %.10g (%s, atol %g "
                  "rtol %g)",
                  c->label, (long long)c->bad, (long long)c->n, (long long)c->first_i, c->first_got,
                  c->first_want, c->first_rule, c->atol, c->rtol);
}

static double *values_of(const tt_tensor *t)
{
    int64_t n = tt_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ck_assert_ptr_nonnull(v);
    tt_to_double(t, v);
    return v;
}

/*
 * Asserts t still holds want (bit-exact, as doubles) and its padding is
 * intact. (Check records every passing ck_assert through a pipe, so loops
 * over elements find the first mismatch first and assert once.)
 */
static void assert_unchanged(const char *label, const char *name, const tt_tensor *t,
                             const double *want)
{
    double *now = values_of(t);
    int64_t n = tt_numel(t), i = 0;
    while (i < n && (now[i] == want[i] || (isnan(now[i]) && isnan(want[i]))))
        i++;
    ck_assert_msg(i == n, "%s: '%s' changed at %lld: %.9g -> %.9g", label, name, (long long)i,
                  i < n ? want[i] : 0.0, i < n ? now[i] : 0.0);
    free(now);
    ck_assert_msg(tt_padding_intact(t), "%s: bytes outside the view of '%s' were written", label,
                  name);
}

/* ------------------------------------------------------------------------ */
/* Activations                                                              */
/* ------------------------------------------------------------------------ */

static const char *const act_ops[4] = {FLD_OP_SILU_AND_MUL, FLD_OP_MUL_AND_SILU,
                                       FLD_OP_GELU_AND_MUL, FLD_OP_GELU_TANH_AND_MUL};

static int call_act(int op, DLTensor *out, const DLTensor *x)
{
    switch (op) {
    case 0:
        return fld_silu_and_mul(out, x);
    case 1:
        return fld_mul_and_silu(out, x);
    case 2:
        return fld_gelu_and_mul(out, x);
    default:
        return fld_gelu_tanh_and_mul(out, x);
    }
}

static double silu_d(double a)
{
    return a / (1.0 + exp(-a));
}

/*
 * vLLM's activations as its CUDA kernels compute them (activation_kernels.cu),
 * in float32: what the implementations must round to the dtype. Written
 * here from vLLM's source, independently of the code under test.
 */
static float act_vllm(int op, float f)
{
    if (op <= 1)
        return f / (1.0f + expf(-f));
    if (op == 2)
        return f * 0.5f * (1.0f + erff(f * 0.70710678f));
    const float cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(0.7978846f * (f + 0.044715f * cube)));
}

/* out = round(round(act(a)) * b), the activation taken of a (or of b for mul_and_silu). */
static double act_rounded(int op, DLDataType dt, double a, double b)
{
    if (op == 1)
        return tt_round(dt, a * tt_round(dt, act_vllm(op, (float)b)));
    return tt_round(dt, tt_round(dt, act_vllm(op, (float)a)) * b);
}

/*
 * The activations in double, in forms that keep their relative precision in
 * the tails (1 + erf(z) and 1 + tanh(u) cancel to 0 even in double far
 * enough out): 0.5 a (1 + erf(a/sqrt2)) = 0.5 a erfc(-a/sqrt2) and
 * 0.5 a (1 + tanh(u)) = a / (1 + exp(-2u)).
 */
static double act_ref(int op, double a, double b)
{
    switch (op) {
    case 0:
        return silu_d(a) * b;
    case 1:
        return a * silu_d(b);
    case 2:
        return 0.5 * a * erfc(-a / sqrt(2.0)) * b;
    default:
        return a / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a))) * b;
    }
}

/*
 * x [lead..., 2d] -> out [lead..., d]; nlead 1 or 2; pad > 0 strides the
 * rows. The inputs and the expected values are built once; every
 * implementation then runs on them.
 */
static void run_activation(int op, const struct impl_list *impls, DLDataType dt, int nlead,
                           const int64_t *lead, int64_t d, int64_t pad)
{
    int64_t xs[3], os[3], xst[3], ost[3];
    int nd = nlead + 1;
    int64_t rows = 1;
    for (int i = 0; i < nlead; i++) {
        xs[i] = os[i] = lead[i];
        rows *= lead[i];
    }
    xs[nlead] = 2 * d;
    os[nlead] = d;
    xst[nlead] = ost[nlead] = 1;
    xst[nlead - 1] = 2 * d + pad;
    ost[nlead - 1] = d + pad;
    if (nlead == 2) {
        xst[0] = xst[1] * xs[1];
        ost[0] = ost[1] * os[1];
    }
    tt_tensor *x = pad ? tt_new_strided(dt, nd, xs, xst) : tt_new(dt, nd, xs);
    tt_fill_normal(x, 1000 + (uint64_t)(op * 7 + d + rows), 0.0, 1.0);
    double *xv = values_of(x);
    double *want = malloc(sizeof(double) * (size_t)(rows * d + 1));
    ck_assert_ptr_nonnull(want);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++)
            want[r * d + j] = act_ref(op, xv[r * 2 * d + j], xv[r * 2 * d + d + j]);

    for (int k = 0; k < impls->n; k++) {
        const char *impl = impls->ids[k];
        const bool is_ref = strcmp(impl, REF_ID) == 0;
        tt_tensor *out = pad ? tt_new_strided(dt, nd, os, ost) : tt_new(dt, nd, os);
        double *before = values_of(out);
        char label[192];
        snprintf(label, sizeof label, "%s %s %s rows=%lld d=%lld pad=%lld", impl, act_ops[op],
                 dtype_label(dt), (long long)rows, (long long)d, (long long)pad);
        pin(act_ops[op], impl, dt);
        int rc = call_act(op, &out->t, &x->t);
        unpin();
        if (!is_ref && declined(rc)) {
            assert_unchanged(label, "out", out, before);
        } else {
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", label, rc, fld_last_error());
            double *ov = values_of(out);
            struct cmp c;
            cmp_default(&c, label, dt);
            for (int64_t i = 0; i < rows * d; i++)
                cmp_one(&c, i, ov[i], want[i], fabs(want[i]));
            cmp_done(&c);
            /* vLLM's rounding order, to the bit (float32: reference.c only) */
            int64_t bad = -1;
            for (int64_t r = 0; r < rows && bad < 0 && (dt.bits == 16 || is_ref); r++)
                for (int64_t j = 0; j < d && bad < 0; j++) {
                    const double a = xv[r * 2 * d + j], b = xv[r * 2 * d + d + j];
                    const double w = dt.bits == 16
                                         ? act_rounded(op, dt, a, b)
                                         : (op == 1 ? (double)((float)a * act_vllm(op, (float)b))
                                                    : (double)(act_vllm(op, (float)a) * (float)b));
                    if (ov[r * d + j] != w && !(isnan(w) && isnan(ov[r * d + j])))
                        bad = r * d + j;
                }
            ck_assert_msg(bad < 0, "%s: element %lld is %.9g, vLLM's rounding gives %.9g", label,
                          (long long)bad, bad >= 0 ? ov[bad] : 0.0,
                          bad >= 0 ? act_rounded(op, dt, xv[bad / d * 2 * d + bad % d],
                                                 xv[bad / d * 2 * d + d + bad % d])
                                   : 0.0);
            ck_assert_msg(tt_padding_intact(out), "%s: bytes outside 'out' were written", label);
            free(ov);
        }
        assert_unchanged(label, "x", x, xv);
        free(before);
        tt_free(out);
    }
    free(xv);
    free(want);
    tt_free(x);
}

/* _i = op * 3 + dtype index */
START_TEST(test_activation)
{
    const int op = _i / 3;
    const DLDataType dt = dtype_at(_i % 3);
    static const int64_t tokens[] = {7, 83};
    static const int64_t ds[] = {512, 13824};
    struct impl_list impls;
    cpu_impls(act_ops[op], &impls);
    for (int ti = 0; ti < 2; ti++)
        for (int di = 0; di < 2; di++) {
            /* The largest shape in one dtype per op is plenty, and keeps the run short. */
            if (ti == 1 && di == 1 && _i % 3 != 0)
                continue;
            run_activation(op, &impls, dt, 1, &tokens[ti], ds[di], 0);
        }
    run_activation(op, &impls, dt, 2, (int64_t[]){2, 3}, 64, 0); /* [B, S, 2d] */
    run_activation(op, &impls, dt, 1, (int64_t[]){5}, 40, 24);   /* strided rows */
    run_activation(op, &impls, dt, 2, (int64_t[]){3, 4}, 24, 8); /* strided 3-D */
    run_activation(op, &impls, dt, 1, (int64_t[]){0}, 512, 0);   /* no tokens */
    run_activation(op, &impls, dt, 1, (int64_t[]){3}, 0, 0);     /* empty rows */
}
END_TEST

/* Values far in the tails, where textbook float32 forms cancel or overflow. */
START_TEST(test_activation_tails)
{
    const int op = _i / 3;
    const DLDataType dt = dtype_at(_i % 3);
    static const double as[] = {-88.0, -30.0, -12.0, -9.5, -6.0, -4.0, -2.5, -1e-3, -1e-6,
                                0.0,   1e-6,  1e-3,  0.75, 2.5,  6.0,  9.5,  30.0,  88.0};
    const int64_t n = (int64_t)(sizeof as / sizeof as[0]);
    tt_tensor *x = tt_new(dt, 2, (int64_t[]){1, 2 * n});
    tt_tensor *out = tt_new(dt, 2, (int64_t[]){1, n});
    for (int64_t j = 0; j < n; j++) {
        /* both halves carry the tail values, so each op sees them in its activation */
        tt_set(x, j, as[j]);
        tt_set(x, n + j, as[n - 1 - j]);
    }
    double *xv = values_of(x);
    struct impl_list impls;
    cpu_impls(act_ops[op], &impls);
    for (int k = 0; k < impls.n; k++) {
        const char *impl = impls.ids[k];
        const bool is_ref = strcmp(impl, REF_ID) == 0;
        pin(act_ops[op], impl, dt);
        char label[160];
        snprintf(label, sizeof label, "%s %s %s tails", impl, act_ops[op], dtype_label(dt));
        int rc = call_act(op, &out->t, &x->t);
        unpin();
        if (!is_ref && declined(rc))
            continue;
        ck_assert_msg(rc == FLD_OK, "%s: %s", label, fld_last_error());
        double *ov = values_of(out);
        struct cmp c;
        cmp_default(&c, label, dt);
        /* Against the exact function: vLLM's tolerances (its formulas cancel in
         * the negative tails, where the exact values are below atol). */
        for (int64_t j = 0; j < n; j++) {
            double want = act_ref(op, xv[j], xv[n + j]);
            cmp_one(&c, j, ov[j], want, fabs(want));
        }
        cmp_done(&c);
        /* And to the bit, vLLM's rounding of its own formulas (float32: reference.c) */
        for (int64_t j = 0; j < n && (dt.bits == 16 || is_ref); j++) {
            const double a = xv[j], b = xv[n + j];
            const double w = dt.bits == 16
                                 ? act_rounded(op, dt, a, b)
                                 : (op == 1 ? (double)((float)a * act_vllm(op, (float)b))
                                            : (double)(act_vllm(op, (float)a) * (float)b));
            ck_assert_msg(ov[j] == w || (isnan(w) && isnan(ov[j])),
                          "%s: a=%g b=%g: got %.9g, want %.9g", label, a, b, ov[j], w);
        }
        free(ov);
    }
    free(xv);
    tt_free(x);
    tt_free(out);
}
END_TEST

/*
 * Every 16-bit value as the activated operand, the other one cycling through
 * values that make the product round: every implementation must give
 * round(round(act) * other) for all of them. _i = op * 2 + (0 f16, 1 bf16).
 */
START_TEST(test_activation_every_16bit_input)
{
    const int op = _i / 2;
    const DLDataType dt = dtype_at(1 + _i % 2);
    const int64_t n = 65536;
    static const double others[] = {1.0, -3.0, 0.7109375, 5.5, -1.1875, 0.0};
    tt_tensor *x = tt_new(dt, 2, (int64_t[]){1, 2 * n}), *out = tt_new(dt, 2, (int64_t[]){1, n});
    uint16_t *codes = (uint16_t *)x->t.data;
    const bool second = op == 1; /* mul_and_silu activates the second half */
    for (int64_t i = 0; i < n; i++) {
        codes[second ? n + i : i] = (uint16_t)i;
        tt_set(x, second ? i : n + i, others[i % 6]);
    }
    double *xv = values_of(x);
    int64_t single_differs = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = xv[i], b = xv[n + i];
        const double once = op == 1 ? tt_round(dt, a * act_vllm(op, (float)b))
                                    : tt_round(dt, act_vllm(op, (float)a) * b);
        single_differs += once != act_rounded(op, dt, a, b) && !isnan(once);
    }
    ck_assert_msg(single_differs > 500, "the inputs do not tell the orders apart (%lld)",
                  (long long)single_differs);
    struct impl_list impls;
    cpu_impls(act_ops[op], &impls);
    for (int k = 0; k < impls.n; k++) {
        pin(act_ops[op], impls.ids[k], dt);
        int rc = call_act(op, &out->t, &x->t);
        unpin();
        if (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc))
            continue;
        ck_assert_msg(rc == FLD_OK, "%s %s: %s", impls.ids[k], act_ops[op], fld_last_error());
        double *ov = values_of(out);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            const double w = act_rounded(op, dt, xv[i], xv[n + i]);
            if (ov[i] != w && !(isnan(w) && isnan(ov[i])))
                bad = i;
        }
        ck_assert_msg(bad < 0, "%s %s %s: input 0x%04llx (%g, other %g): got %.9g, want %.9g",
                      impls.ids[k], act_ops[op], dtype_label(dt), (long long)bad,
                      bad >= 0 ? xv[second ? n + bad : bad] : 0.0,
                      bad >= 0 ? xv[second ? bad : n + bad] : 0.0, bad >= 0 ? ov[bad] : 0.0,
                      bad >= 0 ? act_rounded(op, dt, xv[bad], xv[n + bad]) : 0.0);
        free(ov);
    }
    free(xv);
    tt_free(x);
    tt_free(out);
}
END_TEST

/* ---- elementwise activations: out = round(f(x)) --------------------------- */

static const char *const unary_ops[3] = {FLD_OP_GELU_QUICK, FLD_OP_GELU_NEW, FLD_OP_GELU_FAST};

static int call_unary(int op, DLTensor *out, const DLTensor *x)
{
    return op == 0   ? fld_gelu_quick(out, x)
           : op == 1 ? fld_gelu_new(out, x)
                     : fld_gelu_fast(out, x);
}

/* vLLM's kernels' formulas (QuickGELU, NewGELU, FastGELU) in float32, written here. */
static float unary_vllm(int op, float f)
{
    if (op == 0)
        return f / (1.0f + expf(-1.702f * f));
    if (op == 1)
        return 0.5f * f * (1.0f + tanhf(0.79788456f * (f + 0.044715f * (f * f * f))));
    return 0.5f * f * (1.0f + tanhf(0.79788456f * f * (1.0f + 0.044715f * f * f)));
}

/* The functions in double, without the tanh form's cancellation for x < 0. */
static double unary_ref(int op, double a)
{
    if (op == 0)
        return a / (1.0 + exp(-1.702 * a));
    return a / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
}

/*
 * x [rows, d] (rows strided by pad) against the double form within vLLM's
 * tolerances; 16-bit results to the bit against round(f(x)) of vLLM's
 * float32 formula, float32 ones for reference.c. Large values (x scaled by
 * scale) reach the tails.
 */
static void run_unary(int op, const struct impl_list *impls, DLDataType dt, int64_t rows, int64_t d,
                      int64_t pad, double scale)
{
    const int64_t xs[2] = {rows, d}, st[2] = {d + pad, 1};
    tt_tensor *x = pad ? tt_new_strided(dt, 2, xs, st) : tt_new(dt, 2, xs);
    tt_fill_normal(x, 4000 + (uint64_t)(op * 11 + d + rows), 0.0, scale);
    double *xv = values_of(x);
    for (int k = 0; k < impls->n; k++) {
        const char *impl = impls->ids[k];
        const bool is_ref = strcmp(impl, REF_ID) == 0;
        tt_tensor *out = pad ? tt_new_strided(dt, 2, xs, st) : tt_new(dt, 2, xs);
        double *before = values_of(out);
        char label[192];
        snprintf(label, sizeof label, "%s %s %s rows=%lld d=%lld pad=%lld scale=%g", impl,
                 unary_ops[op], dtype_label(dt), (long long)rows, (long long)d, (long long)pad,
                 scale);
        pin(unary_ops[op], impl, dt);
        int rc = call_unary(op, &out->t, &x->t);
        unpin();
        if (!is_ref && declined(rc)) {
            assert_unchanged(label, "out", out, before);
        } else {
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", label, rc, fld_last_error());
            double *ov = values_of(out);
            struct cmp c;
            cmp_default(&c, label, dt);
            for (int64_t i = 0; i < rows * d; i++) {
                const double want = unary_ref(op, xv[i]);
                cmp_one(&c, i, ov[i], want, fabs(want));
            }
            cmp_done(&c);
            for (int64_t i = 0; i < rows * d && (dt.bits == 16 || is_ref); i++) {
                const double w = tt_round(dt, unary_vllm(op, (float)xv[i]));
                tt_assert_msg(ov[i] == w || (isnan(w) && isnan(ov[i])),
                              "%s: element %lld (x %.9g) is %.9g, vLLM's formula gives %.9g", label,
                              (long long)i, xv[i], ov[i], w);
            }
            ck_assert_msg(tt_padding_intact(out), "%s: bytes outside 'out' were written", label);
            free(ov);
        }
        assert_unchanged(label, "x", x, xv);
        free(before);
        tt_free(out);
    }
    free(xv);
    tt_free(x);
}

/* _i = op * 3 + dtype index */
START_TEST(test_elementwise)
{
    const int op = _i / 3;
    const DLDataType dt = dtype_at(_i % 3);
    struct impl_list impls;
    cpu_impls(unary_ops[op], &impls);
    run_unary(op, &impls, dt, 7, 512, 0, 1.0);
    run_unary(op, &impls, dt, 83, 13824, 0, 1.0);
    run_unary(op, &impls, dt, 5, 40, 24, 1.0); /* strided rows, a partial vector */
    run_unary(op, &impls, dt, 9, 67, 3, 20.0); /* odd widths, the tails */
    run_unary(op, &impls, dt, 0, 512, 0, 1.0); /* no rows */
    run_unary(op, &impls, dt, 3, 0, 0, 1.0);   /* empty rows */
}
END_TEST

/* Every 16-bit input: round(f(x)) of vLLM's float32 formula. _i = op * 2 + (0 f16, 1 bf16). */
START_TEST(test_elementwise_every_16bit_input)
{
    const int op = _i / 2;
    const DLDataType dt = dtype_at(1 + _i % 2);
    const int64_t n = 65536;
    tt_tensor *x = tt_new(dt, 2, (int64_t[]){1, n}), *out = tt_new(dt, 2, (int64_t[]){1, n});
    uint16_t *codes = (uint16_t *)x->t.data;
    for (int64_t i = 0; i < n; i++)
        codes[i] = (uint16_t)i;
    double *xv = values_of(x);
    struct impl_list impls;
    cpu_impls(unary_ops[op], &impls);
    for (int k = 0; k < impls.n; k++) {
        pin(unary_ops[op], impls.ids[k], dt);
        int rc = call_unary(op, &out->t, &x->t);
        unpin();
        if (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc))
            continue;
        ck_assert_msg(rc == FLD_OK, "%s %s: %s", impls.ids[k], unary_ops[op], fld_last_error());
        double *ov = values_of(out);
        for (int64_t i = 0; i < n; i++) {
            const double w = tt_round(dt, unary_vllm(op, (float)xv[i]));
            tt_assert_msg(ov[i] == w || (isnan(w) && isnan(ov[i])),
                          "%s %s %s: input 0x%04llx (%g): got %.9g, want %.9g", impls.ids[k],
                          unary_ops[op], dtype_label(dt), (long long)i, xv[i], ov[i], w);
        }
        free(ov);
    }
    free(xv);
    tt_free(x);
    tt_free(out);
}
END_TEST

/*
 * Every 16-bit value again, each alone in its vector: 15 lanes of +0 on each
 * side (any vector of up to 16 lanes holds one input), so that a kernel that
 * computes the activation and falls back to its table for a whole vector
 * when one lane's rounding is unsure (the avx2 variant's 16-bit path,
 * body_activation.h) has each input's fallback decided by that input
 * alone: next to its neighbours, another lane's fallback could hide a lane
 * that needed one and was not detected. _i as above.
 */
START_TEST(test_activation_each_16bit_input_alone)
{
    enum { SPACING = 16 };
    const int op = _i / 2;
    const DLDataType dt = dtype_at(1 + _i % 2);
    const int64_t codes = 65536, n = codes * SPACING;
    static const double others[] = {1.0, -3.0, 0.7109375, 5.5, -1.1875, 0.0};
    tt_tensor *x = tt_new(dt, 2, (int64_t[]){1, 2 * n}), *out = tt_new(dt, 2, (int64_t[]){1, n});
    uint16_t *bits = (uint16_t *)x->t.data;
    const bool second = op == 1; /* mul_and_silu activates the second half */
    const int64_t g0 = second ? n : 0, o0 = second ? 0 : n;
    for (int64_t j = 0; j < n; j++) {
        bits[g0 + j] = 0; /* +0 in both dtypes: its rounding is never unsure */
        tt_set(x, o0 + j, 1.0);
    }
    for (int64_t i = 0; i < codes; i++) {
        /* the input's lane within its vector varies from one input to the next */
        const int64_t at = i * SPACING + (i * 5) % SPACING;
        bits[g0 + at] = (uint16_t)i;
        tt_set(x, o0 + at, others[i % 6]);
    }
    double *xv = values_of(x);
    struct impl_list impls;
    cpu_impls(act_ops[op], &impls);
    for (int k = 0; k < impls.n; k++) {
        pin(act_ops[op], impls.ids[k], dt);
        int rc = call_act(op, &out->t, &x->t);
        unpin();
        if (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc))
            continue;
        ck_assert_msg(rc == FLD_OK, "%s %s: %s", impls.ids[k], act_ops[op], fld_last_error());
        double *ov = values_of(out);
        int64_t bad = -1;
        for (int64_t j = 0; j < n && bad < 0; j++) {
            const double w = act_rounded(op, dt, xv[j], xv[n + j]);
            if (ov[j] != w && !(isnan(w) && isnan(ov[j])))
                bad = j;
        }
        ck_assert_msg(bad < 0, "%s %s %s: input %g alone (other %g): got %.9g, want %.9g",
                      impls.ids[k], act_ops[op], dtype_label(dt), bad >= 0 ? xv[g0 + bad] : 0.0,
                      bad >= 0 ? xv[o0 + bad] : 0.0, bad >= 0 ? ov[bad] : 0.0,
                      bad >= 0 ? act_rounded(op, dt, xv[bad], xv[n + bad]) : 0.0);
        free(ov);
    }
    free(xv);
    tt_free(x);
    tt_free(out);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* rms_norm                                                                 */
/* ------------------------------------------------------------------------ */

enum {
    R_RESIDUAL = 1 << 0,
    R_STRIDED = 1 << 1, /* x is the left half of a [T, 2H] buffer */
    R_INPLACE = 1 << 2, /* out == x */
    R_NOWEIGHT = 1 << 3,
    R_GEMMA = 1 << 4,
    R_3D = 1 << 5,  /* [2, T/2, H]-style leading dims: [T, 1, H] would be trivial */
    R_W32 = 1 << 6, /* float32 weight (16-bit x) */
    R_R32 = 1 << 7  /* float32 residual (16-bit x) */
};

/* Builds one case's inputs and expected values, then checks every implementation on copies. */
static void run_rms(const struct impl_list *impls, DLDataType dt, int64_t T, int64_t H, int flags)
{
    const bool gemma = flags & R_GEMMA;
    const char *op = gemma ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM;
    const float eps = 1e-6f;
    const double scale = 1.0 / (2.0 * (double)(H ? H : 1)); /* as vLLM's test scales x */
    int nd = 2;
    int64_t shape[3] = {T, H, 0}, st[3] = {2 * H, 1, 0};
    if (flags & R_3D) {
        nd = 3;
        shape[0] = 2;
        shape[1] = T / 2;
        shape[2] = H;
        T = 2 * (T / 2);
        st[0] = shape[1] * 2 * H;
        st[1] = 2 * H;
        st[2] = 1;
    }
    tt_tensor *x = (flags & R_STRIDED) ? tt_new_strided(dt, nd, shape, st) : tt_new(dt, nd, shape);
    tt_fill_normal(x, 77 + (uint64_t)(T * 31 + H), 0.0, scale);
    tt_tensor *w = NULL, *res = NULL;
    const DLDataType wdt = flags & R_W32 ? FLD_DTYPE_F32 : dt,
                     rdt = flags & R_R32 ? FLD_DTYPE_F32 : dt;
    if (!(flags & R_NOWEIGHT)) {
        w = tt_new(wdt, 1, &H);
        tt_fill_normal(w, 5 + (uint64_t)H, gemma ? 0.0 : 1.0, 0.1);
    }
    if (flags & R_RESIDUAL) {
        res = tt_new(rdt, nd, shape);
        tt_fill_normal(res, 99 + (uint64_t)H, 0.0, scale);
    }
    double *xv = values_of(x), *wv = w ? values_of(w) : NULL, *rv = res ? values_of(res) : NULL;
    const size_t n = (size_t)(T * H + 1);
    double *want = malloc(sizeof(double) * n), *want_res = malloc(sizeof(double) * n);
    ck_assert(want && want_res);
    for (int64_t r = 0; r < T; r++) {
        double ss = 0;
        for (int64_t j = 0; j < H; j++) {
            int64_t i = r * H + j;
            /* the sum in float32, rounded to the residual's own dtype */
            double v = res ? tt_round(rdt, (float)(xv[i] + rv[i])) : xv[i];
            want_res[i] = v;
            ss += v * v;
        }
        double inv = 1.0 / sqrt(ss / (double)H + (double)eps);
        for (int64_t j = 0; j < H; j++) {
            double sc = w ? (gemma ? 1.0 + wv[j] : wv[j]) : 1.0;
            want[r * H + j] = want_res[r * H + j] * inv * sc;
        }
    }

    for (int k = 0; k < impls->n; k++) {
        const char *impl = impls->ids[k];
        const bool is_ref = strcmp(impl, REF_ID) == 0;
        tt_tensor *xi = tt_clone(x), *ri = res ? tt_clone(res) : NULL;
        tt_tensor *out = (flags & R_INPLACE) ? xi : tt_new(dt, nd, shape);
        double *out_before = values_of(out);
        char label[224];
        snprintf(label, sizeof label, "%s %s %s T=%lld H=%lld flags=%s%s%s%s%s%s%s", impl, op,
                 dtype_label(dt), (long long)T, (long long)H, flags & R_RESIDUAL ? "residual," : "",
                 flags & R_STRIDED ? "strided," : "", flags & R_INPLACE ? "inplace," : "",
                 flags & R_NOWEIGHT ? "noweight," : "", flags & R_3D ? "3d," : "",
                 flags & R_W32 ? "w32," : "", flags & R_R32 ? "r32," : "");
        pin(op, impl, dt);
        DLTensor *wt = w ? &w->t : NULL, *rt = ri ? &ri->t : NULL;
        int rc = gemma ? fld_gemma_rms_norm(&out->t, &xi->t, wt, rt, eps)
                       : fld_rms_norm(&out->t, &xi->t, wt, rt, eps);
        unpin();
        if (!is_ref && declined(rc)) {
            assert_unchanged(label, "out", out, out_before);
            if (ri)
                assert_unchanged(label, "residual", ri, rv);
        } else {
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", label, rc, fld_last_error());
            double *ov = values_of(out), *rnew = ri ? values_of(ri) : NULL;
            struct cmp c;
            if (dt.bits == 32) {
                /* vLLM's layernorm tolerance, and 1e-5 relative: the sums are float32 */
                cmp_init(&c, label, dt, 1e-2, 1e-2);
                c.rel = 1e-5;
            } else {
                cmp_default(&c, label, dt);
            }
            for (int64_t i = 0; i < T * H; i++)
                cmp_one(&c, i, ov[i], want[i], fabs(want[i]));
            cmp_done(&c);
            /* round(x + residual) has one right answer */
            int64_t bad = -1;
            for (int64_t i = 0; rnew && i < T * H && bad < 0; i++)
                if (rnew[i] != want_res[i])
                    bad = i;
            ck_assert_msg(bad < 0, "%s: residual[%lld] = %.9g, want round_r(%.9g + %.9g) = %.9g",
                          label, (long long)bad, bad < 0 ? 0.0 : rnew[bad], bad < 0 ? 0.0 : xv[bad],
                          bad < 0 ? 0.0 : rv[bad], bad < 0 ? 0.0 : want_res[bad]);
            ck_assert_msg(tt_padding_intact(out), "%s: bytes outside 'out' were written", label);
            if (ri)
                ck_assert_msg(tt_padding_intact(ri), "%s: bytes outside 'residual' were written",
                              label);
            free(ov);
            free(rnew);
        }
        if (out != xi)
            assert_unchanged(label, "x", xi, xv);
        else
            ck_assert_msg(tt_padding_intact(xi), "%s: bytes outside 'x' were written", label);
        if (w)
            assert_unchanged(label, "weight", w, wv);
        free(out_before);
        if (out != xi)
            tt_free(out);
        tt_free(xi);
        tt_free(ri);
    }
    free(xv);
    free(wv);
    free(rv);
    free(want);
    free(want_res);
    tt_free(x);
    tt_free(w);
    tt_free(res);
}

/* _i = dtype index * 2 + gemma. vLLM's full shape grid for rms_norm, a subset for gemma. */
START_TEST(test_rms_norm_shapes)
{
    const DLDataType dt = dtype_at(_i / 2);
    const bool gemma = _i % 2;
    const char *op = gemma ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM;
    static const int64_t tokens[] = {7, 83};
    static const int64_t hs[] = {8, 768, 769, 5120, 5125, 8192};
    struct impl_list impls;
    cpu_impls(op, &impls);
    for (int ti = 0; ti < 2; ti++)
        for (int hi = 0; hi < 6; hi++)
            for (int residual = 0; residual < 2; residual++) {
                if (gemma && (hi == 1 || hi == 3 || (hi == 5 && ti == 1)))
                    continue;
                run_rms(&impls, dt, tokens[ti], hs[hi],
                        (gemma ? R_GEMMA : 0) | (residual ? R_RESIDUAL : 0));
            }
}
END_TEST

/* _i = dtype index * 2 + gemma */
START_TEST(test_rms_norm_variants)
{
    const DLDataType dt = dtype_at(_i / 2);
    const int g = (_i % 2) ? R_GEMMA : 0;
    const char *op = g ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM;
    static const int variants[] = {
        R_STRIDED,
        R_STRIDED | R_RESIDUAL,
        R_INPLACE,
        R_INPLACE | R_RESIDUAL,
        R_INPLACE | R_STRIDED,
        R_INPLACE | R_STRIDED | R_RESIDUAL,
        R_NOWEIGHT,
        R_NOWEIGHT | R_RESIDUAL,
        R_3D,
        R_3D | R_STRIDED | R_RESIDUAL,
    };
    static const struct {
        int64_t T, H;
    } shapes[] = {{7, 8}, {83, 769}, {7, 5125}};
    struct impl_list impls;
    cpu_impls(op, &impls);
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++)
        for (int si = 0; si < 3; si++)
            run_rms(&impls, dt, shapes[si].T, shapes[si].H, variants[v] | g);
    run_rms(&impls, dt, 0, 768, R_RESIDUAL | g); /* no tokens */
    run_rms(&impls, dt, 5, 0, R_RESIDUAL | g);   /* empty rows */
}
END_TEST

/*
 * 16-bit x with a float32 weight, residual or both (GemmaRMSNorm keeps its
 * weight, and for float16 its residual, in float32). _i = (f16, bf16) * 2 + gemma.
 */
START_TEST(test_rms_norm_mixed_dtypes)
{
    const DLDataType dt = dtype_at(1 + _i / 2);
    const int g = (_i % 2) ? R_GEMMA : 0;
    const char *op = g ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM;
    static const int operands[] = {R_W32, R_R32 | R_RESIDUAL, R_W32 | R_R32 | R_RESIDUAL};
    static const int variants[] = {0, R_STRIDED, R_INPLACE, R_3D | R_STRIDED};
    static const struct {
        int64_t T, H;
    } shapes[] = {{7, 8}, {83, 769}, {7, 5120}};
    struct impl_list impls;
    cpu_impls(op, &impls);
    for (size_t o = 0; o < sizeof operands / sizeof operands[0]; o++)
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++)
            for (int si = 0; si < 3; si++)
                run_rms(&impls, dt, shapes[si].T, shapes[si].H, operands[o] | variants[v] | g);
    run_rms(&impls, dt, 5, 64, R_R32 | R_RESIDUAL | R_NOWEIGHT | g);
}
END_TEST

/*
 * Rows whose float32 sum of squares is not usable, against their
 * normalised value computed in double here: 1e30 and 3e38 (the squares
 * overflow float32), 1e-30 with eps 0 (they underflow), then PyTorch's
 * answers for zeros (0, or NaN with eps 0), a row holding an inf (0, NaN
 * at the inf) and one holding a NaN (all NaN); with eps = FLT_MAX, a row
 * of 1e17, whose float32 sum is finite but its mean plus eps is not.
 * Through the fused residual too (the row being normalised is the stored
 * sum). _i: dtype.
 */
START_TEST(test_rms_norm_extremes)
{
    const DLDataType dt = dtype_at(_i);
    const int64_t R = 8, H = 515; /* odd: every variant's tail path */
    /* float16 tops out at 65504 */
    const bool f16 = dt.code == kDLFloat && dt.bits == 16;
    const double scale[8] = {f16 ? 6e4 : 1e30, f16 ? 6e4 : 3e38, 1e-30, 0.0, 1.0, 1.0, 1e-3,
                             f16 ? 6e4 : 1e17};
    const float epsilons[3] = {1e-6f, 0.0f, FLT_MAX};
    for (int gemma = 0; gemma < 2; gemma++)
        for (int with_res = 0; with_res < 2; with_res++)
            for (int e = 0; e < 3; e++) {
                const char *op = gemma ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM;
                const float eps = epsilons[e];
                tt_tensor *x = tt_new(dt, 2, (int64_t[]){R, H});
                tt_tensor *w = tt_new(dt, 1, &H);
                tt_fill_normal(x, 8, 0.0, 1.0);
                tt_fill_normal(w, 9, gemma ? 0.0 : 1.0, 0.1);
                for (int64_t r = 0; r < R; r++)
                    for (int64_t j = 0; j < H; j++) {
                        double v = tt_get(x, r * H + j) * scale[r] * (with_res ? 0.5 : 1.0);
                        if (r == 4 && j == 7)
                            v = INFINITY;
                        if (r == 5 && j == 9)
                            v = NAN;
                        tt_set(x, r * H + j, v);
                    }
                tt_tensor *res = with_res ? tt_clone(x) : NULL; /* x + res = 2x, in range */
                double *xv = values_of(x), *wv = values_of(w);
                struct impl_list impls;
                cpu_impls(op, &impls);
                for (int k = 0; k < impls.n; k++) {
                    tt_tensor *out = tt_new(dt, 2, (int64_t[]){R, H});
                    tt_tensor *ri = res ? tt_clone(res) : NULL;
                    pin(op, impls.ids[k], dt);
                    int rc =
                        gemma ? fld_gemma_rms_norm(&out->t, &x->t, &w->t, ri ? &ri->t : NULL, eps)
                              : fld_rms_norm(&out->t, &x->t, &w->t, ri ? &ri->t : NULL, eps);
                    unpin();
                    if (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc)) {
                        tt_free(out), tt_free(ri);
                        continue;
                    }
                    ck_assert_msg(rc == FLD_OK, "%s %s: %s", impls.ids[k], op, fld_last_error());
                    for (int64_t r = 0; r < R; r++) {
                        double ss = 0;
                        for (int64_t j = 0; j < H; j++) {
                            const double v =
                                with_res ? tt_round(dt, 2 * xv[r * H + j]) : xv[r * H + j];
                            ss += v * v;
                        }
                        const double inv = 1.0 / sqrt(ss / (double)H + (double)eps);
                        for (int64_t j = 0; j < H; j++) {
                            const double v =
                                with_res ? tt_round(dt, 2 * xv[r * H + j]) : xv[r * H + j];
                            const double sc = gemma ? 1.0 + wv[j] : wv[j];
                            double want = v * inv * sc;
                            if (r == 4) /* PyTorch: rsqrt(inf) = 0: 0, and inf * 0 = NaN */
                                want = isinf(v) ? NAN : 0.0;
                            const double got = tt_get(out, r * H + j);
                            const bool ok = isnan(want) ? isnan(got)
                                                        : fabs(got - want) <= 2 * ulp_of(dt, want) +
                                                                                  1e-6 * fabs(want);
                            tt_assert_msg(ok,
                                          "%s %s %s eps=%g%s row %lld [%lld]: x %.9g, got %.9g, "
                                          "want %.9g",
                                          impls.ids[k], op, dtype_label(dt), (double)eps,
                                          with_res ? " residual" : "", (long long)r, (long long)j,
                                          xv[r * H + j], got, want);
                        }
                    }
                    tt_free(out), tt_free(ri);
                }
                free(xv), free(wv);
                tt_free(x), tt_free(w), tt_free(res);
            }
}
END_TEST

/* The bits a value of dtype dt stores for f: half.h's rounding (NaN made quiet). */
static uint32_t stored_bits(DLDataType dt, float f)
{
    if (dt.bits == 32)
        return fld_f32_bits(f);
    return dt.code == kDLBfloat ? fld_f32_to_bf16(f) : fld_f32_to_f16(f);
}

/* The bits of element i of a contiguous tensor. */
static uint32_t bits_at(const tt_tensor *t, int64_t i)
{
    const unsigned char *p = (const unsigned char *)t->t.data + t->t.byte_offset;
    if (t->t.dtype.bits == 32) {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        return u;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return h;
}

/*
 * NaN and infinity in single lanes of a row, at every position of a
 * kernel's loops (width 157: unrolled blocks, a lone block, a lone vector
 * and a tail on every variant): the stored residual = round(x + residual)
 * to the bit as half.h rounds the float32 sum (a NaN operand's NaN made
 * quiet, inf + -inf, sums that overflow to inf), and a weight holding NaN,
 * inf and -inf gives NaN, NaN (inf * 0) and -inf in those lanes of an
 * otherwise ordinary row, whose other lanes stay right. _i: dtype.
 */
START_TEST(test_rms_norm_special_lanes)
{
    const DLDataType dt = dtype_at(_i);
    const int64_t R = 3, H = 157;
    const bool is16 = dt.bits == 16;
    const double big = dt.code == kDLFloat && is16 ? 65504.0 : dt.bits == 32 ? 3.4e38 : 3.38e38;
    static const int64_t lanes[] = {3, 40, 127, 130, 140, 150, 156};
    for (int gemma = 0; gemma < 2; gemma++) {
        const char *op = gemma ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM;
        const float eps = 1e-6f;
        tt_tensor *x = tt_new(dt, 2, (int64_t[]){R, H});
        tt_tensor *res = tt_new(dt, 2, (int64_t[]){R, H});
        tt_tensor *w = tt_new(dt, 1, &H);
        tt_fill_normal(x, 21, 0.0, 1.0);
        tt_fill_normal(res, 22, 0.0, 1.0);
        tt_fill_normal(w, 23, gemma ? 0.0 : 1.0, 0.1);
        /* row 0: x + residual = 0 where the weight is inf (inf * 0) */
        tt_set(x, 40, 1.0), tt_set(res, 40, -1.0);
        tt_set(w, 3, NAN), tt_set(w, 40, INFINITY), tt_set(w, 130, NAN);
        tt_set(w, 150, -INFINITY), tt_set(x, 150, 2.0), tt_set(res, 150, 1.0);
        /* row 1: NaN operands (either side) and inf + -inf; row 2: sums that overflow */
        for (size_t k = 0; k < sizeof lanes / sizeof lanes[0]; k++) {
            const int64_t j = lanes[k];
            /* one NaN operand, or the same NaN on both sides (no operand order to depend on) */
            const double nan = k % 2 ? -NAN : NAN;
            tt_set(k % 3 == 0 ? x : res, H + j, nan);
            if (k % 3 == 2)
                tt_set(x, H + j, nan);
            tt_set(x, H + (j + 5) % H, INFINITY), tt_set(res, H + (j + 5) % H, -INFINITY);
            tt_set(x, 2 * H + j, k % 2 ? -big : big), tt_set(res, 2 * H + j, k % 2 ? -big : big);
        }
        double *xv = values_of(x), *rv = values_of(res), *wv = values_of(w);
        struct impl_list impls;
        cpu_impls(op, &impls);
        for (int k = 0; k < impls.n; k++) {
            tt_tensor *out = tt_new(dt, 2, (int64_t[]){R, H});
            tt_tensor *ri = tt_clone(res);
            pin(op, impls.ids[k], dt);
            int rc = gemma ? fld_gemma_rms_norm(&out->t, &x->t, &w->t, &ri->t, eps)
                           : fld_rms_norm(&out->t, &x->t, &w->t, &ri->t, eps);
            unpin();
            if (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc)) {
                tt_free(out), tt_free(ri);
                continue;
            }
            ck_assert_msg(rc == FLD_OK, "%s %s: %s", impls.ids[k], op, fld_last_error());
            for (int64_t i = 0; i < R * H; i++) {
                const uint32_t want = stored_bits(dt, (float)xv[i] + (float)rv[i]);
                tt_assert_msg(bits_at(ri, i) == want,
                              "%s %s %s: residual[%lld][%lld] bits 0x%x, want 0x%x (%g + %g)",
                              impls.ids[k], op, dtype_label(dt), (long long)(i / H),
                              (long long)(i % H), bits_at(ri, i), want, xv[i], rv[i]);
            }
            double ss = 0;
            for (int64_t j = 0; j < H; j++) {
                const double v = tt_round(dt, (float)(xv[j] + rv[j]));
                ss += v * v;
            }
            const double inv = 1.0 / sqrt(ss / (double)H + (double)eps);
            for (int64_t j = 0; j < H; j++) {
                const double v = tt_round(dt, (float)(xv[j] + rv[j]));
                const double want = v * inv * (gemma ? 1.0 + wv[j] : wv[j]);
                const double got = tt_get(out, j);
                const bool ok = isnan(want) ? isnan(got)
                                : isinf(want)
                                    ? got == want
                                    : fabs(got - want) <= 2 * ulp_of(dt, want) + 1e-5 * fabs(want);
                ck_assert_msg(ok, "%s %s %s: out[0][%lld] = %.9g, want %.9g (w %g)", impls.ids[k],
                              op, dtype_label(dt), (long long)j, got, want, wv[j]);
            }
            tt_free(out), tt_free(ri);
        }
        free(xv), free(rv), free(wv);
        tt_free(x), tt_free(res), tt_free(w);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* rotary_embedding                                                         */
/* ------------------------------------------------------------------------ */

#define MAX_POS 8192
#define Q_HEADS 6
#define K_HEADS 2

enum layout { L_FLAT, L_SPLIT, L_PADDED }; /* [.., H*D], [.., H, D], [.., H, D] of [.., H, D+64] */

static tt_tensor *make_heads(DLDataType dt, int nlead, const int64_t *lead, int64_t heads,
                             int64_t D, enum layout layout)
{
    int64_t shape[4], strides[4];
    int nd = 0;
    for (int i = 0; i < nlead; i++)
        shape[nd++] = lead[i];
    if (layout == L_FLAT) {
        shape[nd++] = heads * D;
        return tt_new(dt, nd, shape);
    }
    shape[nd++] = heads;
    shape[nd++] = D;
    if (layout == L_SPLIT)
        return tt_new(dt, nd, shape);
    strides[nd - 1] = 1;
    strides[nd - 2] = D + 64;
    strides[nd - 3] = heads * (D + 64);
    if (nlead == 2)
        strides[0] = strides[1] * shape[1];
    return tt_new_strided(dt, nd, shape, strides);
}

/*
 * cos/sin caches are expensive at 8192 positions; keep one per (rot_dim,
 * dtype) with its values as doubles. They are checked for writes once per
 * test (check_caches_unchanged), not per call.
 */
struct cache_memo {
    int64_t rot;
    int dt;
    tt_tensor *t;
    double *values;
};
static struct cache_memo caches[16];

static const struct cache_memo *cos_sin_cache(int64_t rot, DLDataType dt)
{
    int dti = fld_dtype_index(dt);
    int i = 0;
    for (; i < 16 && caches[i].t; i++)
        if (caches[i].rot == rot && caches[i].dt == dti)
            return &caches[i];
    ck_assert_int_lt(i, 16);
    tt_tensor *c = tt_new(dt, 2, (int64_t[]){MAX_POS, rot});
    double *v = malloc(sizeof(double) * MAX_POS * (size_t)rot);
    ck_assert_ptr_nonnull(v);
    const int64_t half = rot / 2;
    for (int64_t j = 0; j < half; j++) {
        /* vLLM computes inv_freq in float32 */
        double inv_freq = (float)pow(10000.0, -2.0 * (double)j / (double)rot);
        for (int64_t p = 0; p < MAX_POS; p++) {
            double a = (double)p * inv_freq;
            v[p * rot + j] = tt_round(dt, cos(a));
            v[p * rot + half + j] = tt_round(dt, sin(a));
        }
    }
    tt_from_double(c, v);
    caches[i] = (struct cache_memo){rot, dti, c, v};
    return &caches[i];
}

static void check_caches_unchanged(void)
{
    for (int i = 0; i < 16 && caches[i].t; i++)
        assert_unchanged("rotary", "cos_sin_cache", caches[i].t, caches[i].values);
}

struct rope_case {
    bool neox, key, pos32, pos2d;
    int64_t head, rot;
    enum layout layout;
    int64_t tokens; /* 0: 55 (pos2d: [5, 11]); otherwise [tokens] */
};

/*
 * Computes the expected values of one query/key tensor in place in v: in
 * double for float32 (checked with tolerances), and for 16-bit dtypes
 * vLLM's forward_native exactly: cos and sin rounded to the dtype, each
 * product and the sum rounded (the products of two 16-bit values are exact
 * in double, and so is a sum of two of them before its rounding).
 */
static void rope_expect(double *v, double *mag, int64_t T, int64_t heads, int64_t D, int64_t rot,
                        bool neox, const double *pos, const double *cache, DLDataType dt)
{
    const int64_t half = rot / 2;
    const bool r16 = dt.bits == 16;
    for (int64_t t = 0; t < T; t++) {
        const double *row = cache + (int64_t)pos[t] * rot;
        for (int64_t h = 0; h < heads; h++) {
            double *e = v + (t * heads + h) * D, *m = mag + (t * heads + h) * D;
            for (int64_t i = 0; i < half; i++) {
                int64_t ix = neox ? i : 2 * i, iy = neox ? i + half : 2 * i + 1;
                double c = row[i], s = row[half + i], x = e[ix], y = e[iy];
                if (r16) {
                    c = tt_round(dt, c);
                    s = tt_round(dt, s);
                    e[ix] = tt_round(dt, tt_round(dt, x * c) - tt_round(dt, y * s));
                    e[iy] = tt_round(dt, tt_round(dt, y * c) + tt_round(dt, x * s));
                } else {
                    e[ix] = x * c - y * s;
                    e[iy] = y * c + x * s;
                }
                m[ix] = m[iy] = fabs(x * c) + fabs(y * s) + fabs(y * c) + fabs(x * s);
            }
        }
    }
}

static void check_rope_tensor(const char *label, const char *name, const tt_tensor *t,
                              const double *before, const double *want, const double *mag,
                              int64_t D, int64_t rot, bool is_ref)
{
    double *got = values_of(t);
    int64_t n = tt_numel(t);
    char lab[256];
    snprintf(lab, sizeof lab, "%s '%s'", label, name);
    struct cmp c;
    cmp_default(&c, lab, t->t.dtype);
    int64_t changed = -1, inexact = -1;
    const bool exact = t->t.dtype.bits == 16; /* vLLM's rounding order, to the bit */
    for (int64_t i = 0; i < n; i++) {
        if (i % D < rot) {
            cmp_one(&c, i, got[i], want[i], mag[i]);
            if (exact && got[i] != want[i] && inexact < 0)
                inexact = i;
        } else if (got[i] != before[i] && changed < 0) {
            changed = i;
        }
    }
    cmp_done(&c);
    ck_assert_msg(inexact < 0, "%s: element %lld is %.9g, vLLM's rounding gives %.9g", lab,
                  (long long)inexact, inexact >= 0 ? got[inexact] : 0.0,
                  inexact >= 0 ? want[inexact] : 0.0);
    (void)is_ref;
    ck_assert_msg(changed < 0, "%s: element %lld (past rot_dim %lld) changed", lab,
                  (long long)changed, (long long)rot);
    ck_assert_msg(tt_padding_intact(t), "%s: bytes outside the view were written", lab);
    free(got);
}

/*
 * An output for rotary_embedding_out of in's shape and dtype: contiguous, or
 * with its own padding (8 elements after each row of its last dimension,
 * the outer dims contiguous over it), which must stay unwritten.
 */
static tt_tensor *out_like(const tt_tensor *in, bool padded)
{
    const int nd = in->t.ndim;
    if (!padded)
        return tt_new(in->t.dtype, nd, in->t.shape);
    int64_t strides[4];
    strides[nd - 1] = 1;
    strides[nd - 2] = in->t.shape[nd - 1] + 8;
    for (int i = nd - 3; i >= 0; i--)
        strides[i] = strides[i + 1] * in->t.shape[i + 1];
    return tt_new_strided(in->t.dtype, nd, in->t.shape, strides);
}

/* got holds want bit for bit (NaN for NaN), its padding intact. */
static void assert_bits(const char *label, const char *name, const tt_tensor *got,
                        const double *want)
{
    double *v = values_of(got);
    int64_t n = tt_numel(got), i = 0;
    while (i < n && (v[i] == want[i] || (isnan(v[i]) && isnan(want[i]))))
        i++;
    ck_assert_msg(i == n, "%s: '%s' element %lld is %.9g, the in-place result %.9g", label, name,
                  (long long)i, i < n ? v[i] : 0.0, i < n ? want[i] : 0.0);
    ck_assert_msg(tt_padding_intact(got), "%s: bytes outside the view of '%s' were written", label,
                  name);
    free(v);
}

/*
 * rotary_embedding_out on a case's inputs, by every implementation of it,
 * into contiguous and padded outputs: reference.c's in-place result (qref,
 * kref) to the bit, the inputs untouched; a declined call writes nothing.
 */
static void run_rope_out(DLDataType qdt, const struct rope_case *rc_, const char *case_label,
                         tt_tensor *pos, tt_tensor *q, tt_tensor *k, const tt_tensor *cache,
                         const double *qv, const double *kv, const double *qref, const double *kref)
{
    struct impl_list impls;
    cpu_impls(FLD_OP_ROTARY_EMBEDDING_OUT, &impls);
    for (int i = 0; i < impls.n; i++)
        for (int padded = 0; padded < 2; padded++) {
            const char *impl = impls.ids[i];
            char label[320];
            snprintf(label, sizeof label, "%s out of place (%s outputs): %s", impl,
                     padded ? "padded" : "contiguous", case_label);
            tt_tensor *qo = out_like(q, padded), *ko = k ? out_like(k, padded) : NULL;
            double *qo0 = values_of(qo), *ko0 = ko ? values_of(ko) : NULL;
            pin(FLD_OP_ROTARY_EMBEDDING_OUT, impl, qdt);
            int rc = fld_rotary_embedding_out(&pos->t, &q->t, k ? &k->t : NULL, rc_->head,
                                              &cache->t, rc_->neox, &qo->t, ko ? &ko->t : NULL);
            unpin();
            if (strcmp(impl, REF_ID) != 0 && declined(rc)) {
                assert_unchanged(label, "query_out", qo, qo0);
                if (ko)
                    assert_unchanged(label, "key_out", ko, ko0);
            } else {
                ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", label, rc, fld_last_error());
                assert_bits(label, "query_out", qo, qref);
                if (ko)
                    assert_bits(label, "key_out", ko, kref);
            }
            assert_unchanged(label, "query", q, qv);
            if (k)
                assert_unchanged(label, "key", k, kv);
            free(qo0);
            free(ko0);
            tt_free(qo);
            tt_free(ko);
        }
}

/* One case: inputs and expected values once, then every implementation on copies. */
static void run_rope(const struct impl_list *impls, DLDataType qdt, DLDataType cdt,
                     const struct rope_case *rc_)
{
    const int64_t T = rc_->tokens ? rc_->tokens : 55, D = rc_->head;
    const bool pos2d = rc_->pos2d && !rc_->tokens;
    const int64_t lead2[2] = {5, 11}, lead1[1] = {T};
    const int nlead = pos2d ? 2 : 1;
    const int64_t *lead = pos2d ? lead2 : lead1;
    tt_tensor *pos = tt_new(rc_->pos32 ? TT_INT32 : TT_INT64, nlead, lead);
    tt_rng rng;
    tt_rng_seed(&rng, 4242 + (uint64_t)D);
    for (int64_t t = 0; t < T; t++)
        tt_set(pos, t, (double)(int64_t)(tt_rng_uniform(&rng) * MAX_POS));
    tt_set(pos, 0, MAX_POS - 1); /* the last row of the cache is reachable */
    tt_set(pos, 1, 0);
    tt_tensor *q = make_heads(qdt, nlead, lead, Q_HEADS, D, rc_->layout);
    tt_tensor *k = rc_->key ? make_heads(qdt, nlead, lead, K_HEADS, D, rc_->layout) : NULL;
    tt_fill_normal(q, 11 + (uint64_t)D, 0.0, 1.0);
    if (k)
        tt_fill_normal(k, 13 + (uint64_t)D, 0.0, 1.0);
    const struct cache_memo *cache = cos_sin_cache(rc_->rot, cdt);

    double *pv = values_of(pos);
    double *qv = values_of(q), *qe = values_of(q);
    double *qm = calloc((size_t)tt_numel(q), sizeof(double));
    double *kv = k ? values_of(k) : NULL, *ke = k ? values_of(k) : NULL;
    double *km = k ? calloc((size_t)tt_numel(k), sizeof(double)) : NULL;
    ck_assert_ptr_nonnull(qm);
    rope_expect(qe, qm, T, Q_HEADS, D, rc_->rot, rc_->neox, pv, cache->values, qdt);
    if (k)
        rope_expect(ke, km, T, K_HEADS, D, rc_->rot, rc_->neox, pv, cache->values, qdt);

    double *qref = NULL, *kref = NULL; /* reference.c's in-place result */
    char case_label[256];
    for (int i = 0; i < impls->n; i++) {
        const char *impl = impls->ids[i];
        const bool is_ref = strcmp(impl, REF_ID) == 0;
        char label[256];
        static const char *const layouts[] = {"flat", "split", "padded"};
        snprintf(label, sizeof label,
                 "%s rotary %s q=%s cache=%s head=%lld rot=%lld key=%d layout=%s pos=%s%s", impl,
                 rc_->neox ? "neox" : "gptj", dtype_label(qdt), dtype_label(cdt), (long long)D,
                 (long long)rc_->rot, rc_->key, layouts[rc_->layout],
                 rc_->pos32 ? "int32" : "int64", pos2d ? "[B,S]" : "[T]");
        tt_tensor *qi = tt_clone(q), *ki = k ? tt_clone(k) : NULL;
        pin(FLD_OP_ROTARY_EMBEDDING, impl, qdt);
        int rc =
            fld_rotary_embedding(&pos->t, &qi->t, ki ? &ki->t : NULL, D, &cache->t->t, rc_->neox);
        unpin();
        if (!is_ref && declined(rc)) {
            assert_unchanged(label, "query", qi, qv);
            if (ki)
                assert_unchanged(label, "key", ki, kv);
        } else {
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", label, rc, fld_last_error());
            check_rope_tensor(label, "query", qi, qv, qe, qm, D, rc_->rot, is_ref);
            if (ki)
                check_rope_tensor(label, "key", ki, kv, ke, km, D, rc_->rot, is_ref);
        }
        assert_unchanged(label, "positions", pos, pv);
        snprintf(case_label, sizeof case_label, "%s", label + strlen(impl) + 1);
        tt_free(qi);
        tt_free(ki);
    }
    /* reference.c in place (also when a variant run tests another implementation alone) */
    tt_tensor *qi = tt_clone(q), *ki = k ? tt_clone(k) : NULL;
    pin(FLD_OP_ROTARY_EMBEDDING, REF_ID, qdt);
    ck_assert_int_eq(
        fld_rotary_embedding(&pos->t, &qi->t, ki ? &ki->t : NULL, D, &cache->t->t, rc_->neox),
        FLD_OK);
    unpin();
    qref = values_of(qi);
    kref = ki ? values_of(ki) : NULL;
    tt_free(qi);
    tt_free(ki);
    run_rope_out(qdt, rc_, case_label, pos, q, k, cache->t, qv, kv, qref, kref);
    assert_unchanged(case_label, "positions", pos, pv);
    free(qref);
    free(kref);
    free(pv);
    free(qv);
    free(qe);
    free(qm);
    free(kv);
    free(ke);
    free(km);
    tt_free(pos);
    tt_free(q);
    tt_free(k);
}

/* _i: 0 f32, 1 f16, 2 bf16 (cache of the query's dtype), 3 bf16 query with a float32 cache */
START_TEST(test_rotary)
{
    const DLDataType qdt = dtype_at(_i < 3 ? _i : 2);
    const DLDataType cdt = _i < 3 ? qdt : FLD_DTYPE_F32;
    static const int64_t heads[] = {64, 80, 112, 120, 256};
    struct impl_list impls;
    cpu_impls(FLD_OP_ROTARY_EMBEDDING, &impls);
    for (int neox = 0; neox < 2; neox++)
        for (int hi = 0; hi < 5; hi++)
            for (int ri = 0; ri < 2; ri++)
                for (int key = 0; key < 2; key++)
                    for (int lay = 0; lay < 3; lay++) {
                        struct rope_case c = {
                            .neox = neox,
                            .key = key,
                            /* vary the positions' form across the other parameters */
                            .pos32 = (hi + ri + lay) % 2,
                            .pos2d = (neox + key + lay + hi) % 2,
                            .head = heads[hi],
                            .rot = ri ? 32 : heads[hi],
                            .layout = (enum layout)lay,
                        };
                        run_rope(&impls, qdt, cdt, &c);
                    }
    /* Enough tokens that the cpu plugin's neox goes a head at a time instead of
     * keeping cos and sin across the heads (body_rotary.h, rot_blocked): 2.4 MiB
     * of 16-bit heads, more than 1 MiB in each range of a two-thread call. Two
     * threads whatever the host has, so that its core count does not decide
     * which path runs. */
    const char *threads = getenv("VLLM_FL_CPU_THREADS");
    char *before = threads ? strdup(threads) : NULL;
    setenv("VLLM_FL_CPU_THREADS", "2", 1);
    fld_shutdown();
    ck_assert_msg(fld_init() == FLD_OK, "fld_init: %s", fld_last_error());
    for (int neox = 0; neox < 2; neox++) {
        struct rope_case c = {
            .neox = neox, .key = true, .head = 256, .rot = 256, .layout = L_FLAT, .tokens = 600};
        run_rope(&impls, qdt, cdt, &c);
    }
    if (before)
        setenv("VLLM_FL_CPU_THREADS", before, 1);
    else
        unsetenv("VLLM_FL_CPU_THREADS");
    free(before);
    fld_shutdown();
    ck_assert_msg(fld_init() == FLD_OK, "fld_init: %s", fld_last_error());
    check_caches_unchanged();
}
END_TEST

/*
 * bfloat16 products that lie exactly halfway between two bfloat16 values
 * (x = a/128 with cos 1.5 or sin 0.75: a 16-bit product whose dropped bits
 * are 0x80): each must round to even, as vLLM's forward_native rounds it,
 * in every implementation and for both pair layouts.
 */
START_TEST(test_rotary_bf16_ties)
{
    enum { D = 128, HEADS = 2 };
    struct impl_list impls;
    cpu_impls(FLD_OP_ROTARY_EMBEDDING, &impls);
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){1});
    tt_tensor *cache = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){1, D});
    for (int64_t i = 0; i < D; i++)
        tt_set(cache, i, i < D / 2 ? 1.5 : 0.75);
    tt_set(pos, 0, 0);
    for (int neox = 0; neox < 2; neox++)
        for (int k = 0; k < impls.n; k++) {
            tt_tensor *q = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){1, HEADS * D});
            double want[HEADS * D];
            for (int64_t i = 0; i < HEADS * D; i++)
                tt_set(q, i, (double)(128 + (i * 37) % 128) / 128.0);
            for (int64_t h = 0; h < HEADS; h++)
                for (int64_t f = 0; f < D / 2; f++) {
                    int64_t ix = h * D + (neox ? f : 2 * f);
                    int64_t iy = h * D + (neox ? f + D / 2 : 2 * f + 1);
                    double x = tt_get(q, ix), y = tt_get(q, iy), c = 1.5, sn = 0.75;
                    want[ix] = tt_round(FLD_DTYPE_BF16, tt_round(FLD_DTYPE_BF16, x * c) -
                                                            tt_round(FLD_DTYPE_BF16, y * sn));
                    want[iy] = tt_round(FLD_DTYPE_BF16, tt_round(FLD_DTYPE_BF16, y * c) +
                                                            tt_round(FLD_DTYPE_BF16, x * sn));
                }
            pin(FLD_OP_ROTARY_EMBEDDING, impls.ids[k], FLD_DTYPE_BF16);
            int rc = fld_rotary_embedding(&pos->t, &q->t, NULL, D, &cache->t, neox);
            unpin();
            ck_assert_msg(rc == FLD_OK || (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc)),
                          "%s: status %d: %s", impls.ids[k], rc, fld_last_error());
            for (int64_t i = 0; rc == FLD_OK && i < HEADS * D; i++)
                tt_assert_msg(tt_get(q, i) == want[i],
                              "%s bf16 rotary %s: element %lld is %.9g, round-to-even gives %.9g",
                              impls.ids[k], neox ? "neox" : "gptj", (long long)i, tt_get(q, i),
                              want[i]);
            tt_free(q);
        }
    tt_free(pos);
    tt_free(cache);
}
END_TEST

/* The bits of contiguous bfloat16 tensor t. */
static uint16_t *bf16_bits(const tt_tensor *t)
{
    return (uint16_t *)(void *)((char *)t->t.data + t->t.byte_offset);
}

static double bf16_value(uint16_t b)
{
    return (double)fld_bf16_to_f32(b);
}

static bool bf16_is_nan(uint16_t b)
{
    return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

/*
 * bfloat16 rotary on special values, every implementation: zeros of both
 * signs, subnormals, the largest finite values (whose products and sums
 * overflow to infinity), infinities, and NaN (quiet, signalling, with
 * payloads), in the heads and in the cos/sin cache (bfloat16, and float32
 * values that round to bfloat16 with ties), over whole vectors and partial
 * ones (head 40: 20 frequencies, 40 gptj elements), neox and gptj, query and
 * key. Each element must be vLLM's rounding of the exact result bit for
 * bit (a NaN result: any NaN).
 */
START_TEST(test_rotary_bf16_specials)
{
    enum { D = 40, QH = 3, KH = 2, T = 3 };
    static const uint16_t heads[] = {0x0000, 0x8000, 0x0001, 0x8003, 0x007f, 0x0080, 0x7f7f,
                                     0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0x7f81, 0xffc5,
                                     0x3f80, 0xbfc0, 0x4040, 0x3c01, 0x5f00, 0x2000, 0x7f00,
                                     0x3f81, 0xc2f7, 0x0100, 0x80ff, 0x7e80, 0x4b00};
    static const uint16_t trig[] = {0x3fc0, 0x3f40, 0x3f80, 0x0000, 0x8000, 0xbf80, 0x0001,
                                    0x4040, 0x3f7f, 0x3c00, 0xbf35, 0x3f35, 0x7f00, 0x0080};
    static const double trig32[] = {
        1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 1.0 / 3, -0.1, 0.0, -0.0, 1e-39, 0.75, -1.0, 0.70710678};
    const DLDataType bf = FLD_DTYPE_BF16;
    struct impl_list impls;
    cpu_impls(FLD_OP_ROTARY_EMBEDDING, &impls);
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){T});
    for (int64_t t = 0; t < T; t++)
        tt_set(pos, t, (double)t);
    for (int f32_cache = 0; f32_cache < 2; f32_cache++) {
        tt_tensor *cache = tt_new(f32_cache ? FLD_DTYPE_F32 : bf, 2, (int64_t[]){T, D});
        double cv[T * D]; /* cos/sin as the kernels use them: rounded to bfloat16 */
        for (int64_t i = 0; i < T * D; i++) {
            if (f32_cache)
                tt_set(cache, i, trig32[(i * 7) % (sizeof trig32 / sizeof trig32[0])]);
            else
                bf16_bits(cache)[i] = trig[(i * 5) % (sizeof trig / sizeof trig[0])];
            cv[i] = tt_round(bf, tt_get(cache, i));
        }
        for (int neox = 0; neox < 2; neox++)
            for (int k = 0; k < impls.n; k++) {
                tt_tensor *q = tt_new(bf, 2, (int64_t[]){T, QH * D});
                tt_tensor *key = tt_new(bf, 2, (int64_t[]){T, KH * D});
                tt_tensor *both[2] = {q, key};
                const int64_t nh[2] = {QH, KH};
                for (int w = 0; w < 2; w++)
                    for (int64_t i = 0; i < T * nh[w] * D; i++)
                        bf16_bits(both[w])[i] =
                            heads[(i * (w ? 11 : 3) + w) % (sizeof heads / sizeof heads[0])];
                uint16_t want[2][T * QH * D];
                for (int w = 0; w < 2; w++)
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t h = 0; h < nh[w]; h++)
                            for (int64_t f = 0; f < D / 2; f++) {
                                const int64_t base = (t * nh[w] + h) * D;
                                const int64_t ix = base + (neox ? f : 2 * f);
                                const int64_t iy = base + (neox ? f + D / 2 : 2 * f + 1);
                                const double x = bf16_value(bf16_bits(both[w])[ix]);
                                const double y = bf16_value(bf16_bits(both[w])[iy]);
                                const double c = cv[t * D + f], sn = cv[t * D + D / 2 + f];
                                /* float32 products and sums of bfloat16 values are exact or
                                 * overflow, as these in double then rounded to float32 */
                                const double xc = tt_round(bf, x * c), ys = tt_round(bf, y * sn);
                                const double yc = tt_round(bf, y * c), xs = tt_round(bf, x * sn);
                                want[w][ix] = fld_f32_to_bf16((float)(xc - ys));
                                want[w][iy] = fld_f32_to_bf16((float)(yc + xs));
                            }
                pin(FLD_OP_ROTARY_EMBEDDING, impls.ids[k], bf);
                int rc = fld_rotary_embedding(&pos->t, &q->t, &key->t, D, &cache->t, neox);
                unpin();
                ck_assert_msg(rc == FLD_OK || (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc)),
                              "%s: status %d: %s", impls.ids[k], rc, fld_last_error());
                for (int w = 0; rc == FLD_OK && w < 2; w++)
                    for (int64_t i = 0; i < T * nh[w] * D; i++) {
                        const uint16_t got = bf16_bits(both[w])[i], ref = want[w][i];
                        tt_assert_msg(got == ref || (bf16_is_nan(got) && bf16_is_nan(ref)),
                                      "%s bf16 rotary %s, %s cache, %s element %lld: 0x%04x, "
                                      "vLLM's rounding gives 0x%04x",
                                      impls.ids[k], neox ? "neox" : "gptj",
                                      f32_cache ? "float32" : "bfloat16", w ? "key" : "query",
                                      (long long)i, got, ref);
                    }
                ck_assert(tt_padding_intact(q) && tt_padding_intact(key));
                tt_free(q);
                tt_free(key);
            }
        tt_free(cache);
    }
    tt_free(pos);
}
END_TEST

/* No tokens: a valid call that touches nothing. */
START_TEST(test_rotary_empty)
{
    struct impl_list impls;
    cpu_impls(FLD_OP_ROTARY_EMBEDDING, &impls);
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){0});
    tt_tensor *q = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){0, 4 * 64});
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){16, 64});
    for (int k = 0; k < impls.n; k++) {
        pin(FLD_OP_ROTARY_EMBEDDING, impls.ids[k], FLD_DTYPE_F32);
        int rc = fld_rotary_embedding(&pos->t, &q->t, NULL, 64, &cache->t, true);
        ck_assert_msg(rc == FLD_OK || (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc)),
                      "%s: status %d: %s", impls.ids[k], rc, fld_last_error());
        unpin();
    }
    ck_assert(tt_padding_intact(q));
    tt_free(pos);
    tt_free(q);
    tt_free(cache);
}
END_TEST

/*
 * rotary_embedding_out reading query and key where vLLM passes them: column
 * slices of one fused qkv tensor (rows strided by the qkv width). Each
 * implementation's outputs equal reference.c's in-place rotation of the same
 * views, bit for bit; qkv is not written. _i: the dtype (0 f32, 1 f16, 2 bf16);
 * neox and gptj, rot_dim 32 of head 64, int32 positions for gptj.
 */
START_TEST(test_rotary_out_qkv_views)
{
    enum { T = 7, D = 64, HQ = 4, HK = 2, W = (HQ + 2 * HK) * D, ROT = 32, MAXP = 16 };
    const DLDataType dt = dtype_at(_i);
    const size_t es = dt.bits / 8;
    struct impl_list impls;
    cpu_impls(FLD_OP_ROTARY_EMBEDDING_OUT, &impls);
    tt_tensor *qkv = tt_new(dt, 2, (int64_t[]){T, W});
    tt_fill_normal(qkv, 77 + (uint64_t)_i, 0.0, 1.0);
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){MAXP, ROT});
    tt_fill_normal(cache, 5, 0.0, 1.0);
    double *qkv0 = values_of(qkv);
    for (int neox = 0; neox < 2; neox++) {
        tt_tensor *pos = tt_new(neox ? TT_INT64 : TT_INT32, 1, (int64_t[]){T});
        for (int t = 0; t < T; t++)
            tt_set(pos, t, (t * 5 + 3) % MAXP);
        int64_t qshape[2] = {T, HQ * D}, kshape[2] = {T, HK * D}, rows[2] = {W, 1};
        /* q and k views of a buffer */
        DLTensor q = {.data = NULL,
                      .device = {kDLCPU, 0},
                      .ndim = 2,
                      .dtype = dt,
                      .shape = qshape,
                      .strides = rows};
        DLTensor k = q;
        k.shape = kshape;
        /* reference.c in place on a copy of qkv */
        tt_tensor *ref = tt_clone(qkv);
        q.data = k.data = ref->t.data;
        q.byte_offset = ref->t.byte_offset;
        k.byte_offset = ref->t.byte_offset + (uint64_t)(HQ * D) * es;
        pin(FLD_OP_ROTARY_EMBEDDING, REF_ID, dt);
        ck_assert_int_eq(fld_rotary_embedding(&pos->t, &q, &k, D, &cache->t, neox), FLD_OK);
        unpin();
        for (int i = 0; i < impls.n; i++) {
            char label[160];
            snprintf(label, sizeof label, "%s qkv views %s %s", impls.ids[i], dtype_label(dt),
                     neox ? "neox" : "gptj");
            tt_tensor *qo = tt_new(dt, 2, qshape), *ko = tt_new(dt, 2, kshape);
            q.data = k.data = qkv->t.data;
            q.byte_offset = qkv->t.byte_offset;
            k.byte_offset = qkv->t.byte_offset + (uint64_t)(HQ * D) * es;
            pin(FLD_OP_ROTARY_EMBEDDING_OUT, impls.ids[i], dt);
            int rc = fld_rotary_embedding_out(&pos->t, &q, &k, D, &cache->t, neox, &qo->t, &ko->t);
            unpin();
            if (strcmp(impls.ids[i], REF_ID) != 0 && declined(rc)) {
                tt_free(qo);
                tt_free(ko);
                continue;
            }
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", label, rc, fld_last_error());
            int64_t bad = -1;
            for (int64_t t = 0; t < T && bad < 0; t++)
                for (int64_t j = 0; j < W - HK * D && bad < 0; j++) {
                    const double got = j < HQ * D ? tt_get(qo, t * HQ * D + j)
                                                  : tt_get(ko, t * HK * D + j - HQ * D);
                    if (got != tt_get(ref, t * W + j))
                        bad = t * W + j;
                }
            ck_assert_msg(bad < 0, "%s: element %lld of qkv differs from the in-place result",
                          label, (long long)bad);
            assert_unchanged(label, "qkv", qkv, qkv0);
            tt_free(qo);
            tt_free(ko);
        }
        tt_free(ref);
        tt_free(pos);
    }
    free(qkv0);
    tt_free(qkv);
    tt_free(cache);
}
END_TEST

/* An empty call is a no-op for every implementation, without touching its outputs' padding. */
START_TEST(test_rotary_out_empty)
{
    struct impl_list impls;
    cpu_impls(FLD_OP_ROTARY_EMBEDDING_OUT, &impls);
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){0});
    tt_tensor *q = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){0, 4 * 64});
    tt_tensor *qo = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){0, 4 * 64});
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){16, 64});
    for (int k = 0; k < impls.n; k++) {
        pin(FLD_OP_ROTARY_EMBEDDING_OUT, impls.ids[k], FLD_DTYPE_F32);
        int rc = fld_rotary_embedding_out(&pos->t, &q->t, NULL, 64, &cache->t, true, &qo->t, NULL);
        ck_assert_msg(rc == FLD_OK || (strcmp(impls.ids[k], REF_ID) != 0 && declined(rc)),
                      "%s: status %d: %s", impls.ids[k], rc, fld_last_error());
        unpin();
    }
    ck_assert(tt_padding_intact(qo));
    tt_free(pos);
    tt_free(q);
    tt_free(qo);
    tt_free(cache);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* attention_backend                                                        */
/* ------------------------------------------------------------------------ */

START_TEST(test_attention_backend)
{
    static const struct {
        int device;
        bool mla, sparse;
        const char *name; /* NULL: declined */
    } cases[] = {
        {FLD_DEVICE_CPU, false, false, "CPU_ATTN"},
        {FLD_DEVICE_CPU, true, false, NULL},
        {FLD_DEVICE_CPU, true, true, NULL},
        {FLD_DEVICE_CUDA, false, false, "FLASH_ATTN"},
        {FLD_DEVICE_CUDA, true, false, "FLASHMLA"},
        {FLD_DEVICE_CUDA, true, true, "FLASHMLA_SPARSE"},
        {FLD_DEVICE_ROCM, false, false, "ROCM_ATTN"},
        {FLD_DEVICE_ROCM, true, false, "ROCM_AITER_MLA"},
        {FLD_DEVICE_ROCM, true, true, "ROCM_AITER_MLA_SPARSE"},
        {FLD_DEVICE_ASCEND, false, false, "ASCEND"},
        {FLD_DEVICE_ASCEND, true, false, "ASCEND_MLA"},
        {FLD_DEVICE_ASCEND, true, true, NULL},
        {FLD_DEVICE_ASCEND_DL21, false, false, "ASCEND"},
        {FLD_DEVICE_ASCEND_DL21, true, false, "ASCEND_MLA"},
    };
    pin(FLD_OP_ATTENTION_BACKEND, REF_ID, FLD_DTYPE_ANY);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *name = "untouched";
        int rc = fld_attention_backend(cases[i].device, cases[i].mla, cases[i].sparse, &name);
        if (cases[i].name) {
            ck_assert_msg(rc == FLD_OK, "case %zu: status %d: %s", i, rc, fld_last_error());
            ck_assert_str_eq(name, cases[i].name);
        } else {
            /* The only candidate declines: nothing accepts the call. */
            ck_assert_msg(rc == FLD_EUNAVAILABLE || rc == FLD_EUNSUPPORTED,
                          "case %zu: status %d, want a decline", i, rc);
            ck_assert_str_eq(name, "untouched");
        }
    }
    unpin();
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Instruction-set variants of vendor.cpu                                   */
/* ------------------------------------------------------------------------ */

/*
 * The cpu plugin picks its variant at load, capped by VLLM_FL_CPU_ISA. Every
 * variant this machine can run gets its own run of the kernel tests (against
 * vendor.cpu only); the first run, with no cap, tests every implementation.
 */
#if defined(__x86_64__)
static const char *const isa_caps[] = {"avx512_bf16", "avx512", "avx2", "portable"};
#elif defined(__aarch64__)
static const char *const isa_caps[] = {"neon", "portable"};
#else
static const char *const isa_caps[] = {"portable"};
#endif
#define N_CAPS (sizeof isa_caps / sizeof isa_caps[0])

struct detail_probe {
    char detail[512];
};

static int find_cpu_detail(const fld_plugin_info *info, void *user)
{
    struct detail_probe *p = user;
    if (strcmp(info->name, "cpu") != 0 || info->status != FLD_PLUGIN_LOADED)
        return 0;
    snprintf(p->detail, sizeof p->detail, "%s", info->detail);
    return 1;
}

/* The variant named by the cpu plugin's detail line ("isa <name> ..."), or "". */
static void active_variant(char *name, size_t size)
{
    struct detail_probe p = {{0}};
    fld_foreach_plugin(find_cpu_detail, &p);
    const char *v = strncmp(p.detail, "isa ", 4) == 0 ? p.detail + 4 : "";
    size_t n = strcspn(v, " ;(");
    snprintf(name, size, "%.*s", (int)(n < size ? n : size - 1), v);
}

/* In a child process: whether the plugin runs variant cap when capped at it. */
static bool variant_runs_here(const char *cap, char *chosen, size_t size)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        setenv("VLLM_FL_CPU_ISA", cap, 1);
        char name[64] = "";
        if (fld_init() == FLD_OK)
            active_variant(name, sizeof name);
        ssize_t w = write(fds[1], name, strlen(name) + 1);
        _exit(w > 0 ? 0 : 1);
    }
    close(fds[1]);
    ssize_t r = pid > 0 ? read(fds[0], chosen, size - 1) : -1;
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    chosen[r > 0 ? r : 0] = '\0';
    return strcmp(chosen, cap) == 0;
}

static const char *current_cap;
/* VLLM_FL_CPU_LOOKUP for the run (the avx2 variant's two table lookups), or NULL: the default. */
static const char *current_lookup;
/* VLLM_FL_CPU_ACT16 for the run (the avx2 variant's 16-bit activations: table or compute), or
 * NULL: the default. */
static const char *current_act16;

/* Checked fixture (runs in each test's child): cap the variant, check it is the one in force. */
static void setup_variant(void)
{
    setenv("VLLM_FL_CPU_ISA", current_cap, 1);
    if (current_lookup)
        setenv("VLLM_FL_CPU_LOOKUP", current_lookup, 1);
    else
        unsetenv("VLLM_FL_CPU_LOOKUP");
    if (current_act16)
        setenv("VLLM_FL_CPU_ACT16", current_act16, 1);
    else
        unsetenv("VLLM_FL_CPU_ACT16");
    only_impl = "vendor.cpu";
    ck_assert_msg(fld_init() == FLD_OK, "fld_init: %s", fld_last_error());
    char name[64];
    active_variant(name, sizeof name);
    ck_assert_msg(strcmp(name, current_cap) == 0, "VLLM_FL_CPU_ISA=%s but the plugin runs '%s'",
                  current_cap, name);
    if (current_act16) {
        /* the mode asked for is the one in force (the detail line says so) */
        struct detail_probe p = {{0}};
        fld_foreach_plugin(find_cpu_detail, &p);
        const bool computed = strstr(p.detail, "16-bit activations computed in float32") != NULL;
        ck_assert_msg(computed == (strcmp(current_act16, "compute") == 0),
                      "VLLM_FL_CPU_ACT16=%s but the plugin says: %s", current_act16, p.detail);
    }
}

/* A test case name that lives as long as the suite (Check keeps the pointer). */
static const char *case_name(const char *base, const char *suffix)
{
    static char names[3 * (N_CAPS + 1) + 4][48];
    static size_t used;
    if (used == sizeof names / sizeof names[0])
        abort(); /* more cases than names: a bug in this file (no Check assert outside tests) */
    snprintf(names[used], sizeof names[0], "%s%s", base, suffix);
    return names[used++];
}

static void add_kernel_cases(Suite *s, const char *suffix, bool variant_run, bool only_activations)
{
    TCase *tc = tcase_create(case_name("activation", suffix));
    tcase_set_timeout(tc, 120);
    if (variant_run)
        tcase_add_checked_fixture(tc, setup_variant, NULL);
    tcase_add_loop_test(tc, test_activation, 0, 12);
    tcase_add_loop_test(tc, test_activation_tails, 0, 12);
    tcase_add_loop_test(tc, test_activation_every_16bit_input, 0, 8);
    tcase_add_loop_test(tc, test_activation_each_16bit_input_alone, 0, 8);
    tcase_add_loop_test(tc, test_elementwise, 0, 9);
    tcase_add_loop_test(tc, test_elementwise_every_16bit_input, 0, 6);
    suite_add_tcase(s, tc);
    if (only_activations)
        return;

    tc = tcase_create(case_name("rms_norm", suffix));
    tcase_set_timeout(tc, 120);
    if (variant_run)
        tcase_add_checked_fixture(tc, setup_variant, NULL);
    tcase_add_loop_test(tc, test_rms_norm_shapes, 0, 6);
    tcase_add_loop_test(tc, test_rms_norm_variants, 0, 6);
    tcase_add_loop_test(tc, test_rms_norm_mixed_dtypes, 0, 4);
    tcase_add_loop_test(tc, test_rms_norm_extremes, 0, 3);
    tcase_add_loop_test(tc, test_rms_norm_special_lanes, 0, 3);
    suite_add_tcase(s, tc);

    tc = tcase_create(case_name("rotary", suffix));
    tcase_set_timeout(tc, 120);
    if (variant_run)
        tcase_add_checked_fixture(tc, setup_variant, NULL);
    tcase_add_loop_test(tc, test_rotary, 0, 4);
    tcase_add_test(tc, test_rotary_empty);
    tcase_add_test(tc, test_rotary_bf16_ties);
    tcase_add_test(tc, test_rotary_bf16_specials);
    tcase_add_loop_test(tc, test_rotary_out_qkv_views, 0, 3);
    tcase_add_test(tc, test_rotary_out_empty);
    suite_add_tcase(s, tc);
}

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    add_kernel_cases(s, "", false, false);
    TCase *tc = tcase_create("attention_backend");
    tcase_add_test(tc, test_attention_backend);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int failed = tt_run_suite(kernels_suite()) != EXIT_SUCCESS;
    for (size_t i = 0; i < N_CAPS; i++) {
        char chosen[64];
        if (!variant_runs_here(isa_caps[i], chosen, sizeof chosen)) {
            printf("variant %s: not run here (capped at it, the cpu plugin runs '%s')\n",
                   isa_caps[i], chosen);
            continue;
        }
        printf("variant %s:\n", isa_caps[i]);
        current_cap = isa_caps[i];
        /* The suite's name labels its summary line in make check's output. */
        static char suite_names[N_CAPS][32];
        snprintf(suite_names[i], sizeof suite_names[i], "isa %s", isa_caps[i]);
        Suite *vs = suite_create(suite_names[i]);
        char suffix[64];
        snprintf(suffix, sizeof suffix, "/%s", isa_caps[i]);
        add_kernel_cases(vs, suffix, true, false);
        failed += tt_run_suite(vs) != EXIT_SUCCESS;
        if (strcmp(isa_caps[i], "avx2") != 0)
            continue;
        /* The 16-bit activations looked up and computed, each with both ways of reading the
         * tables, whichever this CPU gets by default. */
        static const char *const act16s[] = {"table", "compute"};
        static const char *const lookups[] = {"gather", "scalar"};
        for (size_t k = 0; k < 4; k++) {
            static char mode_names[4][48];
            snprintf(mode_names[k], sizeof mode_names[k], "isa avx2, act16 %s, lookup %s",
                     act16s[k / 2], lookups[k % 2]);
            current_act16 = act16s[k / 2];
            current_lookup = lookups[k % 2];
            Suite *ls = suite_create(mode_names[k]);
            snprintf(suffix, sizeof suffix, "/avx2/%s/%s", act16s[k / 2], lookups[k % 2]);
            add_kernel_cases(ls, suffix, true, true);
            failed += tt_run_suite(ls) != EXIT_SUCCESS;
        }
        current_act16 = NULL;
        current_lookup = NULL;
    }
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
