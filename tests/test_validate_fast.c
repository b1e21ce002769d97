/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/ops/validate.c's fast paths: each family's shortcut for the
 * common layouts must accept only calls that the full validator accepts,
 * with the same key, and must take the layouts a model passes. The file is
 * compiled into this program (its functions are static in the library), so
 * both paths are called directly on generated arguments: random layouts
 * (ranks, dtypes, devices, sizes, strides, offsets, misaligned and NULL
 * data, tensors that share memory in every way) where the two must agree,
 * and the everyday layouts, which must take the shortcut.
 *
 * Tensors point at addresses nothing maps (the validators never touch
 * tensor memory), except rotary positions, which live in a real buffer.
 * Messages are not built here: fld__fail is a stub (the behaviour and
 * messages of the public calls are test_validation.c's).
 */
#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/ops/validate.c"
#include "util/harness.h"

int fld__fail(int status, const char *fmt, ...)
{
    (void)fmt;
    return status;
}

/* ---- a small deterministic generator ------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t pick(const int64_t *v, size_t n)
{
    return v[rnd() % n];
}
#define PICK(...) pick((const int64_t[]){__VA_ARGS__}, sizeof((int64_t[]){__VA_ARGS__}) / 8)

/* Fake addresses: a 1 TiB window that nothing dereferences. */
#define ARENA ((uintptr_t)1 << 40)

struct gen_tensor {
    DLTensor t;
    int64_t shape[4], strides[4];
};

static const DLDataType float_types[] = {
    {kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 64, 1}, {kDLFloat, 32, 2}};

/*
 * A tensor of mostly plausible, sometimes wrong, layout. like (or NULL): a
 * tensor to resemble (same shape, dtype, device most of the time, and an
 * address at, inside, next to or far from it, so that ranges meet often).
 */
static void gen(struct gen_tensor *g, const struct gen_tensor *like, int ndim, int64_t width)
{
    memset(g, 0, sizeof *g);
    DLTensor *t = &g->t;
    t->ndim = (rnd() % 16 == 0) ? (int)PICK(0, 1, 3) : ndim;
    t->dtype = like && rnd() % 8 ? like->t.dtype : float_types[rnd() % 4 + (rnd() % 16 == 0)];
    t->device = like && rnd() % 16 ? like->t.device : (DLDevice){kDLCPU, 0};
    if (rnd() % 32 == 0)
        t->device = (DLDevice){(DLDeviceType)PICK(kDLCUDA, kDLCPU, 99), (int32_t)PICK(0, 1)};
    for (int i = 0; i < t->ndim && i < 4; i++)
        g->shape[i] = like && i < like->t.ndim && rnd() % 8 ? like->shape[i] : PICK(1, 2, 3, 7, 64);
    if (t->ndim >= 1)
        g->shape[t->ndim - 1] = rnd() % 8 ? width : PICK(0, 1, 2, 63, 64, -2, (int64_t)1 << 31);
    if (t->ndim >= 2 && rnd() % 16 == 0)
        g->shape[0] = PICK(0, -1, (int64_t)1 << 30);
    t->shape = rnd() % 64 ? g->shape : NULL;
    if (rnd() % 2) {
        int64_t step = 1;
        for (int i = t->ndim - 1; i >= 0 && i < 4; i--) {
            g->strides[i] = step;
            /* wraps (defined in unsigned) where the shapes are huge: odd strides are welcome */
            step = (int64_t)((uint64_t)step * (uint64_t)(g->shape[i] > 0 ? g->shape[i] : 1));
        }
        if (t->ndim >= 2 && rnd() % 4 == 0)
            g->strides[0] = g->shape[t->ndim - 1] + PICK(-1, 1, 5, 64, -1000, (int64_t)1 << 31);
        if (t->ndim >= 1 && rnd() % 16 == 0)
            g->strides[t->ndim - 1] = PICK(0, 2, -1);
        t->strides = g->strides;
    }
    t->byte_offset = (uint64_t)PICK(0, 0, 0, 2, 4, 64, (int64_t)1 << 31);
    uintptr_t base = ARENA + (uintptr_t)(rnd() % 64) * 4096;
    if (like && rnd() % 2) {
        uintptr_t lb = (uintptr_t)like->t.data + like->t.byte_offset;
        base = lb + (uintptr_t)PICK(0, 0, 2, 64, 128, 256, 4096, 16384, -4096);
        t->byte_offset = 0;
    }
    t->data = (void *)base;
    if (rnd() % 64 == 0)
        t->data = (void *)(uintptr_t)PICK(0, 1, (int64_t)1 << 62, -4096);
}

/* ---- agreement on random calls --------------------------------------------------- */

#define RANDOM_CALLS 200000

struct tally {
    long fast, full;
};

static void agree(bool fast, const struct fld_call_key *kf, int full, const struct fld_call_key *k,
                  long i, struct tally *t)
{
    t->fast += fast;
    t->full += full == FLD_OK;
    ck_assert_msg(!fast || full == FLD_OK,
                  "call %ld: the fast path accepted what the full one "
                  "refuses (%d)",
                  i, full);
    if (fast) {
        ck_assert_int_eq(kf->device, k->device);
        ck_assert_int_eq(kf->dtype, k->dtype);
    }
}

/* Enough calls of each kind: the generator reaches both verdicts, and the shortcut most OKs. */
static void check_coverage(const char *family, const struct tally *t)
{
    ck_assert_msg(t->full > RANDOM_CALLS / 20, "%s: only %ld of %d accepted", family, t->full,
                  RANDOM_CALLS);
    ck_assert_msg(t->full < RANDOM_CALLS - RANDOM_CALLS / 20, "%s: %ld of %d accepted", family,
                  t->full, RANDOM_CALLS);
    ck_assert_msg(t->fast * 2 > t->full, "%s: the fast path took %ld of %ld accepted calls", family,
                  t->fast, t->full);
}

START_TEST(activation_fast_path_agrees)
{
    rng_state = 0x9e3779b97f4a7c15ull;
    struct tally tally = {0, 0};
    for (long i = 0; i < RANDOM_CALLS; i++) {
        struct gen_tensor x, out;
        int64_t d = PICK(1, 8, 64, 4096);
        gen(&x, NULL, 2, 2 * d);
        gen(&out, &x, 2, d);
        const fld_activation_args a = {&out.t, &x.t};
        struct fld_call_key kf = {-1, -1}, k = {-1, -1};
        bool fast = fast_activation(&a, &kf);
        agree(fast, &kf, full_activation("silu_and_mul", &a, &k), &k, i, &tally);
    }
    check_coverage("activation", &tally);
}
END_TEST

START_TEST(elementwise_fast_path_agrees)
{
    rng_state = 0x3c6ef372fe94f82bull;
    struct tally tally = {0, 0};
    for (long i = 0; i < RANDOM_CALLS; i++) {
        struct gen_tensor x, out;
        int64_t d = PICK(1, 8, 64, 4096);
        gen(&x, NULL, 2, d);
        gen(&out, &x, 2, d);
        const fld_activation_args a = {&out.t, &x.t};
        struct fld_call_key kf = {-1, -1}, k = {-1, -1};
        bool fast = fast_elementwise(&a, &kf);
        agree(fast, &kf, full_elementwise("gelu_quick", &a, &k), &k, i, &tally);
    }
    check_coverage("elementwise", &tally);
}
END_TEST

START_TEST(rms_norm_fast_path_agrees)
{
    rng_state = 0x2545f4914f6cdd1dull;
    struct tally tally = {0, 0};
    for (long i = 0; i < RANDOM_CALLS; i++) {
        struct gen_tensor x, out, w, r;
        int64_t h = PICK(1, 8, 64, 768, 4096);
        gen(&x, NULL, 2, h);
        if (rnd() % 4 == 0)
            out = x; /* in place */
        else
            gen(&out, &x, 2, h);
        gen(&w, &x, 1, h);
        gen(&r, rnd() % 2 ? &x : &out, 2, h);
        if (rnd() % 4 == 0)
            w.t.dtype = (DLDataType){kDLFloat, 32, 1};
        if (rnd() % 4 == 0)
            r.t.dtype = (DLDataType){kDLFloat, 32, 1};
        out.t.shape = out.t.shape ? out.shape : NULL;
        out.t.strides = out.t.strides ? out.strides : NULL;
        const float eps = (float)PICK(1, 1, 1, 0, -1, 2) * 1e-6f;
        const fld_rms_norm_args a = {&out.t, &x.t, rnd() % 4 ? &w.t : NULL, rnd() % 2 ? &r.t : NULL,
                                     rnd() % 64 ? eps : INFINITY};
        struct fld_call_key kf = {-1, -1}, k = {-1, -1};
        bool fast = fast_rms_norm(&a, &kf);
        agree(fast, &kf, full_rms_norm("rms_norm", &a, &k), &k, i, &tally);
    }
    check_coverage("rms_norm", &tally);
}
END_TEST

START_TEST(rotary_fast_path_agrees)
{
    rng_state = 0x853c49e6748fea9bull;
    static int64_t positions[64];
    struct tally tally = {0, 0};
    for (long i = 0; i < RANDOM_CALLS; i++) {
        const int64_t hs = rnd() % 16 ? PICK(64, 128) : PICK(1, 0, -128);
        const int64_t tokens = PICK(1, 3, 7);
        struct gen_tensor q, k, c, p;
        gen(&q, NULL, 2, PICK(1, 2, 4) * (hs > 0 ? hs : 64));
        q.shape[0] = rnd() % 8 ? tokens : PICK(0, 2);
        gen(&k, &q, 2, PICK(1, 2) * (hs > 0 ? hs : 64) + (rnd() % 16 == 0));
        k.shape[0] = rnd() % 8 ? tokens : PICK(0, 2);
        gen(&c, &q, 2, rnd() % 8 ? PICK(64, 32) : PICK(63, 256, 128));
        c.shape[0] = rnd() % 8 ? 16 : PICK(1, 0);
        if (rnd() % 4 == 0)
            c.t.dtype = (DLDataType){kDLFloat, 32, 1};
        memset(&p, 0, sizeof p);
        p.shape[0] = rnd() % 8 ? tokens : PICK(0, 1, 2);
        p.t = (DLTensor){positions, q.t.device, 1, {kDLInt, 64, 1}, p.shape, NULL, 0};
        if (rnd() % 4 == 0)
            p.t.dtype = (DLDataType){kDLInt, (uint8_t)PICK(32, 32, 16), 1};
        if (rnd() % 16 == 0)
            p.t.ndim = 2;
        /* in range, now and then one position that is not */
        const int64_t bad_at = rnd() % 8 == 0 ? (int64_t)(rnd() % 8) : -1;
        for (int j = 0; j < 8; j++) {
            int64_t v = j == bad_at ? PICK(16, -1, 1000) : PICK(0, 3, 15);
            if (p.t.dtype.bits == 32)
                ((int32_t *)positions)[j] = (int32_t)v;
            else
                positions[j] = v;
        }
        const fld_rotary_embedding_args a = {&p.t, &q.t, rnd() % 4 ? &k.t : NULL,
                                             hs,   &c.t, rnd() % 2};
        struct fld_call_key kf = {-1, -1}, kk = {-1, -1};
        bool fast = fast_rotary(&a, &kf);
        agree(fast, &kf, full_rotary("rotary_embedding", &a, &kk), &kk, i, &tally);
    }
    check_coverage("rotary", &tally);
}
END_TEST

/*
 * An output of rotary_embedding_out like its input in: mostly its rank, shape
 * and dtype, and mostly a new contiguous tensor in a window of its own
 * (region 3 or 4 of the arena), as callers allocate them.
 */
static void gen_output(struct gen_tensor *o, const struct gen_tensor *in, uintptr_t region)
{
    gen(o, in, in->t.ndim > 0 && in->t.ndim <= 4 ? in->t.ndim : 2,
        in->t.shape && in->t.ndim > 0 && in->t.ndim <= 4 ? in->shape[in->t.ndim - 1] : 64);
    if (rnd() % 8 && in->t.shape && in->t.ndim >= 0 && in->t.ndim <= 4) {
        o->t.ndim = in->t.ndim;
        memcpy(o->shape, in->shape, sizeof o->shape);
        o->t.shape = o->shape;
        o->t.dtype = in->t.dtype;
        o->t.device = in->t.device;
    }
    if (rnd() % 4) {
        o->t.strides = NULL;
        o->t.byte_offset = 0;
        o->t.data = (void *)(region * ARENA + (uintptr_t)(rnd() % 64) * 4096);
    }
}

START_TEST(rotary_out_fast_path_agrees)
{
    rng_state = 0x2545f4914f6cdd1dull;
    static int64_t positions[64];
    struct tally tally = {0, 0};
    for (long i = 0; i < RANDOM_CALLS; i++) {
        const int64_t hs = rnd() % 16 ? PICK(64, 128) : PICK(1, 0, -128);
        const int64_t tokens = PICK(1, 3, 7);
        struct gen_tensor q, k, c, p, qo, ko;
        gen(&q, NULL, 2, PICK(1, 2, 4) * (hs > 0 ? hs : 64));
        q.shape[0] = rnd() % 8 ? tokens : PICK(0, 2);
        gen(&k, &q, 2, PICK(1, 2) * (hs > 0 ? hs : 64) + (rnd() % 16 == 0));
        k.shape[0] = rnd() % 8 ? tokens : PICK(0, 2);
        gen(&c, &q, 2, rnd() % 8 ? PICK(64, 32) : PICK(63, 256, 128));
        c.shape[0] = rnd() % 8 ? 16 : PICK(1, 0);
        if (rnd() % 4 == 0)
            c.t.dtype = (DLDataType){kDLFloat, 32, 1};
        memset(&p, 0, sizeof p);
        p.shape[0] = rnd() % 8 ? tokens : PICK(0, 1, 2);
        p.t = (DLTensor){positions, q.t.device, 1, {kDLInt, 64, 1}, p.shape, NULL, 0};
        if (rnd() % 4 == 0)
            p.t.dtype = (DLDataType){kDLInt, (uint8_t)PICK(32, 32, 16), 1};
        const int64_t bad_at = rnd() % 8 == 0 ? (int64_t)(rnd() % 8) : -1;
        for (int j = 0; j < 8; j++) {
            int64_t v = j == bad_at ? PICK(16, -1, 1000) : PICK(0, 3, 15);
            if (p.t.dtype.bits == 32)
                ((int32_t *)positions)[j] = (int32_t)v;
            else
                positions[j] = v;
        }
        gen_output(&qo, &q, 3);
        gen_output(&ko, &k, 4);
        const bool with_key = rnd() % 4;
        /* key and key_out: both or neither, now and then one alone */
        const bool with_key_out = rnd() % 32 ? with_key : !with_key;
        const fld_rotary_embedding_out_args a = {
            &p.t, &q.t,      with_key ? &k.t : NULL,    hs,
            &c.t, rnd() % 2, rnd() % 64 ? &qo.t : NULL, with_key_out ? &ko.t : NULL};
        struct fld_call_key kf = {-1, -1}, kk = {-1, -1};
        bool fast = fast_rotary_out(&a, &kf);
        agree(fast, &kf, full_rotary_out("rotary_embedding_out", &a, &kk), &kk, i, &tally);
    }
    check_coverage("rotary_out", &tally);
}
END_TEST

/* ---- the everyday layouts take the shortcut ---------------------------------------------- */

static DLTensor tensor(uintptr_t addr, int ndim, int64_t *shape, int64_t *strides, DLDataType dt)
{
    return (DLTensor){(void *)addr, {kDLCPU, 0}, ndim, dt, shape, strides, 0};
}

/* fld_tensor_rows()'s shortcut for ranks 1 and 2 gives what the general walk gives. */
START_TEST(tensor_rows_shortcut_agrees)
{
    rng_state = 0x7e57a11ce5ULL;
    long shortcut = 0;
    for (long i = 0; i < RANDOM_CALLS; i++) {
        struct gen_tensor g;
        gen(&g, NULL, (int)PICK(1, 2, 2, 3), PICK(1, 2, 64, 4096, 0));
        if (!g.t.shape || g.t.ndim < 1 || g.t.ndim > 4)
            continue;
        /* Kernels call it on validated tensors: data in the arena, not the generator's
         * NULL or wrapping addresses (data + byte_offset would overflow a pointer). */
        if ((uintptr_t)g.t.data < ARENA || (uintptr_t)g.t.data >= 2 * ARENA)
            g.t.data = (void *)(ARENA + 4096);
        fld_rows a, b;
        memset(&a, 0x5a, sizeof a);
        memset(&b, 0xa5, sizeof b);
        fld_tensor_rows(&g.t, &a);
        tensor_rows_general(&g.t, &b);
        shortcut += g.t.ndim <= 2 && g.shape[0] > 0 && g.shape[g.t.ndim - 1] > 0;
        ck_assert_msg(
            a.data == b.data && a.rows == b.rows && a.width == b.width && a.stride == b.stride,
            "tensor %ld (rank %d, shape [%lld, %lld], strides %s): rows %lld/%lld, "
            "width %lld/%lld, stride %lld/%lld",
            i, g.t.ndim, (long long)g.shape[0], (long long)g.shape[1], g.t.strides ? "set" : "NULL",
            (long long)a.rows, (long long)b.rows, (long long)a.width, (long long)b.width,
            (long long)a.stride, (long long)b.stride);
    }
    ck_assert_msg(shortcut > RANDOM_CALLS / 2, "the shortcut ran for %ld tensors only", shortcut);
}
END_TEST

START_TEST(common_layouts_take_the_fast_path)
{
    static const DLDataType f32 = {kDLFloat, 32, 1}, bf16 = {kDLBfloat, 16, 1};
    int64_t rows_h[2] = {7, 4096}, strided[2] = {8192, 1}, contiguous[2] = {4096, 1};
    int64_t h[1] = {4096}, one[1] = {1}, act_x[2] = {7, 8192};
    struct fld_call_key k;

    /* activations: NULL strides, and PyTorch's explicit strides */
    DLTensor x = tensor(ARENA, 2, act_x, NULL, bf16),
             out = tensor(2 * ARENA, 2, rows_h, NULL, bf16);
    const fld_activation_args act = {&out, &x};
    ck_assert(fast_activation(&act, &k));
    ck_assert_int_eq(k.dtype, FLD_DT_BF16);
    int64_t xs[2] = {8192, 1};
    x.strides = xs;
    out.strides = contiguous;
    ck_assert(fast_activation(&act, &k));

    /* rms_norm: out of place, in place, a strided x (a view of a wider tensor), residual */
    DLTensor nx = tensor(ARENA, 2, rows_h, contiguous, f32),
             no = tensor(2 * ARENA, 2, rows_h, NULL, f32);
    DLTensor w = tensor(3 * ARENA, 1, h, one, f32), r = tensor(4 * ARENA, 2, rows_h, NULL, f32);
    fld_rms_norm_args n = {&no, &nx, &w, NULL, 1e-6f};
    ck_assert(fast_rms_norm(&n, &k));
    n.out = &nx;
    ck_assert(fast_rms_norm(&n, &k));
    nx.strides = strided;
    ck_assert(fast_rms_norm(&n, &k));
    n.residual = &r;
    ck_assert(fast_rms_norm(&n, &k));
    /* bfloat16 x with a float32 weight and residual (vLLM's Gemma, float16 residuals) */
    nx.dtype = bf16;
    no.dtype = bf16;
    n.out = &no;
    ck_assert(fast_rms_norm(&n, &k));
    ck_assert_int_eq(k.dtype, FLD_DT_BF16);

    /* rotary: [T, H * D] query and key, int64 and int32 positions, key absent */
    static int64_t pos64[7] = {0, 1, 2, 3, 4, 5, 6};
    static int32_t pos32[7] = {6, 5, 4, 3, 2, 1, 0};
    int64_t qshape[2] = {7, 32 * 128}, kshape[2] = {7, 8 * 128}, cshape[2] = {4096, 128};
    int64_t pshape[1] = {7};
    DLTensor q = tensor(ARENA, 2, qshape, NULL, bf16),
             kt = tensor(2 * ARENA, 2, kshape, NULL, bf16);
    DLTensor c = tensor(3 * ARENA, 2, cshape, NULL, f32);
    DLTensor p = {pos64, {kDLCPU, 0}, 1, {kDLInt, 64, 1}, pshape, NULL, 0};
    fld_rotary_embedding_args rot = {&p, &q, &kt, 128, &c, true};
    ck_assert(fast_rotary(&rot, &k));
    ck_assert_int_eq(k.dtype, FLD_DT_BF16);
    p.data = pos32;
    p.dtype = (DLDataType){kDLInt, 32, 1};
    rot.key = NULL;
    ck_assert(fast_rotary(&rot, &k));
    /* a position out of range is the full path's to report */
    pos32[3] = 4096;
    ck_assert(!fast_rotary(&rot, &k));
    ck_assert_int_eq(full_rotary("rotary_embedding", &rot, &k), FLD_EINVAL);
    pos32[3] = 3;

    /* rotary_embedding_out: q and k as column slices of one qkv, new contiguous outputs */
    int64_t rows[2] = {(32 + 16) * 128, 1};
    DLTensor qv = tensor(ARENA, 2, qshape, rows, bf16), kv = tensor(ARENA, 2, kshape, rows, bf16);
    kv.byte_offset = 32 * 128 * 2;
    DLTensor qo = tensor(4 * ARENA, 2, qshape, NULL, bf16),
             ko = tensor(5 * ARENA, 2, kshape, NULL, bf16);
    fld_rotary_embedding_out_args ro = {&p, &qv, &kv, 128, &c, true, &qo, &ko};
    ck_assert(fast_rotary_out(&ro, &k)); /* inputs only read: their ranges may meet */
    ck_assert_int_eq(full_rotary_out("rotary_embedding_out", &ro, &k), FLD_OK);
    ro.query = &q;
    ro.key = &kt;
    ck_assert(fast_rotary_out(&ro, &k));
    ck_assert_int_eq(k.dtype, FLD_DT_BF16);
    ro.key = ro.key_out = NULL;
    ck_assert(fast_rotary_out(&ro, &k));
    ro.query_out = &q; /* written over what it reads */
    ck_assert(!fast_rotary_out(&ro, &k));
    ck_assert_int_eq(full_rotary_out("rotary_embedding_out", &ro, &k), FLD_EINVAL);
}
END_TEST

static Suite *fast_suite(void)
{
    Suite *s = suite_create("validate_fast");
    TCase *tc = tcase_create("agreement");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, activation_fast_path_agrees);
    tcase_add_test(tc, elementwise_fast_path_agrees);
    tcase_add_test(tc, rms_norm_fast_path_agrees);
    tcase_add_test(tc, rotary_fast_path_agrees);
    tcase_add_test(tc, rotary_out_fast_path_agrees);
    tcase_add_test(tc, common_layouts_take_the_fast_path);
    tcase_add_test(tc, tensor_rows_shortcut_agrees);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(fast_suite());
}
