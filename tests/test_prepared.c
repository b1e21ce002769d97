/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prepared calls (fld_prepare, fld_prepared_*): validated once, then called
 * with new data pointers. Checked here:
 *   - a prepared call and the typed call of the same tensors agree, status
 *     and kernel arguments, on generated data pointers (NULL, misaligned,
 *     wrapping, overlapping in every way, interleaved, out == x) and, for
 *     rotary, generated positions (in and out of range);
 *   - the template is copied: the caller's tensors and arrays may change or go;
 *   - bad templates and bad per-call pointers fail with FLD_EINVAL naming the
 *     tensor, and run nothing;
 *   - a policy change, a scoped override and a new plugin are followed;
 *   - bound pointers (fld_prepare()'s, fld_prepared_bind()'s, an accepted
 *     call's) are what fld_prepared_run() runs on; a refused bind or call
 *     keeps the previous ones; a run follows policy changes, reloads, new
 *     plugins, a shutdown, and falls back from a failing implementation
 *     without calling it again until the policy changes;
 *   - a forked child and a call after fld_shutdown() work;
 *   - threads with their own prepared calls while the policy changes (for TSan).
 *
 * The recording kernels of an in-process plugin never touch tensor memory, so
 * most tensors point at addresses nothing maps; rotary positions (which the
 * host reads) and the tensors of the shutdown and fork tests are real.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/harness.h"

/* ---- the recording plugin --------------------------------------------------- */

/* What the last kernel call saw (this thread's). */
static _Thread_local struct seen {
    int calls;
    char impl; /* 'a' or 'b' */
    const void *data[4];
    const int64_t *shape0;
    int64_t dim0;
} seen;

static void record(char impl, const DLTensor *const t[4])
{
    seen.calls++;
    seen.impl = impl;
    for (int i = 0; i < 4; i++)
        seen.data[i] = t[i] ? t[i]->data : NULL;
    seen.shape0 = t[1]->shape;
    seen.dim0 = t[1]->shape[t[1]->ndim - 1];
}

static void record_args(char impl, const void *args, fld_args_kind kind)
{
    if (kind == FLD_ARGS_ACTIVATION) {
        const fld_activation_args *a = args;
        record(impl, (const DLTensor *const[4]){a->out, a->x, NULL, NULL});
    } else if (kind == FLD_ARGS_RMS_NORM) {
        const fld_rms_norm_args *a = args;
        record(impl, (const DLTensor *const[4]){a->out, a->x, a->weight, a->residual});
    } else {
        const fld_rotary_embedding_args *a = args;
        record(impl, (const DLTensor *const[4]){a->positions, a->query, a->key, a->cos_sin_cache});
    }
}

/* While set, vendor.prep_a's silu_and_mul fails (counting its calls) and touches nothing. */
static atomic_bool act_a_fails;
static atomic_int act_a_failures;

static int act_a(const void *args)
{
    if (atomic_load(&act_a_fails)) {
        atomic_fetch_add(&act_a_failures, 1);
        return FLD_EIMPL;
    }
    record_args('a', args, FLD_ARGS_ACTIVATION);
    return FLD_OK;
}
static int act_b(const void *args)
{
    record_args('b', args, FLD_ARGS_ACTIVATION);
    return FLD_OK;
}
static int act_c(const void *args)
{
    record_args('c', args, FLD_ARGS_ACTIVATION);
    return FLD_OK;
}
static int norm_a(const void *args)
{
    record_args('a', args, FLD_ARGS_RMS_NORM);
    return FLD_OK;
}
static int norm_b(const void *args)
{
    record_args('b', args, FLD_ARGS_RMS_NORM);
    return FLD_OK;
}
static int rot_a(const void *args)
{
    record_args('a', args, FLD_ARGS_ROTARY_EMBEDDING);
    return FLD_OK;
}

static int prep_register(fld_registry *reg)
{
    const struct {
        const char *op, *id;
        fld_kernel_fn fn;
        int priority;
    } rows[] = {
        {FLD_OP_SILU_AND_MUL, "vendor.prep_a", act_a, 120},
        {FLD_OP_SILU_AND_MUL, "vendor.prep_b", act_b, 110},
        {FLD_OP_RMS_NORM, "vendor.prep_a", norm_a, 120},
        {FLD_OP_RMS_NORM, "vendor.prep_b", norm_b, 110},
        {FLD_OP_ROTARY_EMBEDDING, "vendor.prep_a", rot_a, 120},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const fld_impl impl = {
            .op = rows[i].op,
            .impl_id = rows[i].id,
            .kind = FLD_KIND_VENDOR,
            .vendor = "prep",
            .priority = rows[i].priority,
            .devices = FLD_DEVICE_MASK_ALL,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = rows[i].fn,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor prep_plugin = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = FLD_PLUGIN_FLAG_IN_TREE,
    .name = "prep",
    .version = FLD_VERSION_STRING,
    .host_version = FLD_VERSION_STRING,
    .register_builtins = prep_register,
};

/* A second plugin, loaded later: its silu_and_mul outranks prep's. */
static int prep_c_register(fld_registry *reg)
{
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.prep_c",
        .kind = FLD_KIND_VENDOR,
        .vendor = "prepc",
        .priority = 130,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = act_c,
    };
    return fld_registry_register(reg, &impl);
}

static const fld_plugin_descriptor prep_c_plugin = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = FLD_PLUGIN_FLAG_IN_TREE,
    .name = "prepc",
    .version = FLD_VERSION_STRING,
    .host_version = FLD_VERSION_STRING,
    .register_builtins = prep_c_register,
};

static void load_prep_plugin(void)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_msg(fld_register_plugin(&prep_plugin) == FLD_OK, "%s", fld_last_error());
}

static void teardown(void)
{
    fld_shutdown();
}

/* ---- tensors ------------------------------------------------------------------ */

struct gt {
    DLTensor t;
    int64_t shape[3], strides[3];
};

static DLTensor tensor(void *data, DLDataType dt, int ndim, int64_t *shape, int64_t *strides)
{
    DLTensor t = {0};
    t.data = data;
    t.device = (DLDevice){kDLCPU, 0};
    t.ndim = ndim;
    t.dtype = dt;
    t.shape = shape;
    t.strides = strides;
    return t;
}

/* ---- agreement on generated calls --------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#define ARENA ((uintptr_t)1 << 40)

/* A data pointer for tensor i of a call: often near another one, sometimes bad. */
static void *gen_pointer(void *const *prev, int i, size_t elem)
{
    uintptr_t base = ARENA + (uintptr_t)(rnd() % 256) * 4096;
    if (i > 0 && rnd() % 2) {
        uintptr_t other = (uintptr_t)prev[rnd() % (unsigned)i];
        if (other) {
            static const int64_t near[] = {0, 0, 2, 4, 16, 32, 64, 128, 256, 1024, -64, -128};
            base = other + (uintptr_t)near[rnd() % (sizeof near / sizeof near[0])];
        }
    }
    switch (rnd() % 48) {
    case 0:
        return NULL;
    case 1:
        return (void *)(base + 1);
    case 2:
        return (void *)(uintptr_t)(-(intptr_t)(elem * 4));
    default:
        return (void *)base;
    }
}

struct counts {
    long ok, refused;
    void *bound[4]; /* what the prepared object holds: the template's, then the last accepted */
};

static struct counts counts_of(DLTensor *const t[4])
{
    struct counts c = {0, 0, {NULL, NULL, NULL, NULL}};
    for (int k = 0; k < 4; k++)
        c.bound[k] = t[k] ? t[k]->data : NULL;
    return c;
}

/*
 * One generated call: prepared against typed, same tensors; then the same
 * pointers bound (the same verdict, nothing run) and a run, which must use
 * the pointers bound last (rotary: only when they were just accepted, since
 * the generator rewrites the positions of the buffer bound before).
 */
static void compare(fld_prepared *p, int family, DLTensor *t[4], const void *typed_args,
                    void *const data[4], long i, struct counts *c)
{
    for (int k = 0; k < 4; k++)
        if (t[k])
            t[k]->data = data[k];
    seen.calls = 0;
    int typed;
    if (family == 0)
        typed = fld_silu_and_mul(((const fld_activation_args *)typed_args)->out,
                                 ((const fld_activation_args *)typed_args)->x);
    else if (family == 1)
        typed = fld_call(fld_op_lookup(FLD_OP_RMS_NORM), typed_args);
    else
        typed = fld_call(fld_op_lookup(FLD_OP_ROTARY_EMBEDDING), typed_args);
    char typed_msg[512];
    snprintf(typed_msg, sizeof typed_msg, "%s", fld_last_error());
    const int typed_calls = seen.calls;
    seen.calls = 0;
    int prepared = fld_prepared_call(p, data);
    ck_assert_msg(prepared == typed, "call %ld (%s): prepared %d, typed %d (%s / %s)", i,
                  fld_prepared_op(p), prepared, typed, fld_last_error(), typed_msg);
    if (typed == FLD_OK) {
        ck_assert_int_eq(typed_calls, 1);
        ck_assert_int_eq(seen.calls, 1);
        for (int k = 0; k < 4; k++)
            ck_assert_ptr_eq(seen.data[k], t[k] ? data[k] : NULL);
        c->ok++;
    } else {
        ck_assert_int_eq(seen.calls, 0);
        ck_assert_str_eq(fld_last_error(), typed_msg);
        c->refused++;
    }
    seen.calls = 0;
    const int bound = fld_prepared_bind(p, data);
    ck_assert_msg(bound == typed, "call %ld (%s): bind %d, typed %d (%s / %s)", i,
                  fld_prepared_op(p), bound, typed, fld_last_error(), typed_msg);
    ck_assert_int_eq(seen.calls, 0);
    if (typed != FLD_OK)
        ck_assert_str_eq(fld_last_error(), typed_msg);
    else
        for (int k = 0; k < 4; k++)
            c->bound[k] = t[k] ? data[k] : NULL;
    if (family != 2 || typed == FLD_OK) {
        ck_assert_msg(fld_prepared_run(p) == FLD_OK, "call %ld: run: %s", i, fld_last_error());
        ck_assert_int_eq(seen.calls, 1);
        for (int k = 0; k < 4; k++)
            ck_assert_ptr_eq(seen.data[k], c->bound[k]);
    }
}

#define GENERATED_CALLS 20000

START_TEST(agrees_with_typed_activation)
{
    load_prep_plugin();
    for (int layout = 0; layout < 4; layout++) {
        const int64_t rows = layout & 1 ? 3 : 1;
        struct gt x, out;
        x.shape[0] = out.shape[0] = rows;
        x.shape[1] = 64;
        out.shape[1] = 32;
        x.strides[0] = 64 + (layout & 2 ? 16 : 0);
        x.strides[1] = out.strides[1] = 1;
        out.strides[0] = 32;
        x.t = tensor((void *)ARENA, FLD_DTYPE_F32, 2, x.shape, layout & 2 ? x.strides : NULL);
        out.t = tensor((void *)(ARENA + 65536), FLD_DTYPE_F32, 2, out.shape, out.strides);
        fld_activation_args a = {&out.t, &x.t};
        fld_prepared *p;
        ck_assert_msg(fld_prepare(FLD_OP_SILU_AND_MUL, &a, &p) == FLD_OK, "%s", fld_last_error());
        ck_assert_int_eq(fld_prepared_ntensors(p), 2);
        DLTensor *t[4] = {&out.t, &x.t, NULL, NULL};
        struct counts c = counts_of(t);
        for (long i = 0; i < GENERATED_CALLS; i++) {
            void *d[4] = {NULL, NULL, NULL, NULL};
            for (int k = 0; k < 2; k++)
                d[k] = gen_pointer(d, k, 4);
            compare(p, 0, t, &a, d, i, &c);
        }
        ck_assert_msg(c.ok > GENERATED_CALLS / 4 && c.refused > GENERATED_CALLS / 20,
                      "ok %ld refused %ld", c.ok, c.refused);
        fld_prepared_free(p);
    }
}
END_TEST

START_TEST(agrees_with_typed_rms_norm)
{
    load_prep_plugin();
    for (int layout = 0; layout < 16; layout++) {
        const int64_t rows = layout & 1 ? 4 : 1;
        const DLDataType dt = layout & 8 ? FLD_DTYPE_BF16 : FLD_DTYPE_F32;
        struct gt x, out, w, r;
        x.shape[0] = out.shape[0] = r.shape[0] = rows;
        x.shape[1] = out.shape[1] = r.shape[1] = w.shape[0] = 32;
        x.strides[0] = out.strides[0] = 48;
        x.strides[1] = out.strides[1] = 1;
        x.t = tensor((void *)ARENA, dt, 2, x.shape, x.strides);
        out.t = tensor((void *)(ARENA + 65536), dt, 2, out.shape, out.strides);
        w.t = tensor((void *)(ARENA + 2 * 65536), dt, 1, w.shape, NULL);
        r.t = tensor((void *)(ARENA + 3 * 65536), dt, 2, r.shape, NULL);
        fld_rms_norm_args a = {&out.t, &x.t, layout & 2 ? &w.t : NULL, layout & 4 ? &r.t : NULL,
                               1e-6f};
        fld_prepared *p;
        ck_assert_msg(fld_prepare(FLD_OP_RMS_NORM, &a, &p) == FLD_OK, "%s", fld_last_error());
        DLTensor *t[4] = {&out.t, &x.t, a.weight ? &w.t : NULL, a.residual ? &r.t : NULL};
        struct counts c = counts_of(t);
        for (long i = 0; i < GENERATED_CALLS; i++) {
            void *d[4] = {NULL, NULL, NULL, NULL};
            for (int k = 0; k < 4; k++)
                d[k] = gen_pointer(d, k, dt.bits / 8);
            if (rnd() % 8 == 0)
                d[0] = d[1]; /* in place */
            for (int k = 0; k < 4; k++)
                if (!t[k])
                    d[k] = NULL; /* an absent tensor's pointer is ignored: pass NULL */
            compare(p, 1, t, &a, d, i, &c);
        }
        ck_assert_msg(c.ok > GENERATED_CALLS / 10 && c.refused > GENERATED_CALLS / 20,
                      "layout %d: ok %ld refused %ld", layout, c.ok, c.refused);
        fld_prepared_free(p);
    }
}
END_TEST

START_TEST(agrees_with_typed_rotary)
{
    load_prep_plugin();
    enum { T = 3, MAXPOS = 16 };
    for (int layout = 0; layout < 4; layout++) {
        const bool i32 = layout & 1, has_key = layout & 2;
        int64_t pos64[2][T];
        int32_t pos32[2][T];
        struct gt pos, q, k, cache;
        pos.shape[0] = q.shape[0] = k.shape[0] = T;
        q.shape[1] = 4 * 16;
        k.shape[1] = 2 * 16;
        cache.shape[0] = MAXPOS;
        cache.shape[1] = 16;
        pos.t = tensor(i32 ? (void *)pos32[0] : (void *)pos64[0],
                       i32 ? (DLDataType){kDLInt, 32, 1} : (DLDataType){kDLInt, 64, 1}, 1,
                       pos.shape, NULL);
        for (int j = 0; j < T; j++)
            pos64[0][j] = pos32[0][j] = j;
        q.t = tensor((void *)ARENA, FLD_DTYPE_F32, 2, q.shape, NULL);
        k.t = tensor((void *)(ARENA + 65536), FLD_DTYPE_F32, 2, k.shape, NULL);
        cache.t = tensor((void *)(ARENA + 2 * 65536), FLD_DTYPE_F32, 2, cache.shape, NULL);
        fld_rotary_embedding_args a = {&pos.t, &q.t, has_key ? &k.t : NULL, 16, &cache.t, true};
        fld_prepared *p;
        ck_assert_msg(fld_prepare(FLD_OP_ROTARY_EMBEDDING, &a, &p) == FLD_OK, "%s",
                      fld_last_error());
        DLTensor *t[4] = {&pos.t, &q.t, has_key ? &k.t : NULL, &cache.t};
        struct counts c = counts_of(t);
        for (long i = 0; i < GENERATED_CALLS; i++) {
            /* positions: one of two real buffers, values mostly in range */
            const int buf = (int)(rnd() % 2);
            for (int j = 0; j < T; j++) {
                int64_t v = (int64_t)(rnd() % MAXPOS);
                if (rnd() % 16 == 0)
                    v = rnd() % 2 ? MAXPOS : -1;
                pos64[buf][j] = v;
                pos32[buf][j] = (int32_t)v;
            }
            void *d[4] = {i32 ? (void *)pos32[buf] : (void *)pos64[buf], NULL, NULL, NULL};
            for (int j = 1; j < 4; j++)
                d[j] = gen_pointer(d + 1, j - 1, 4);
            if (rnd() % 64 == 0)
                d[0] = NULL;
            if (!has_key)
                d[2] = NULL;
            compare(p, 2, t, &a, d, i, &c);
        }
        ck_assert_msg(c.ok > GENERATED_CALLS / 10 && c.refused > GENERATED_CALLS / 20,
                      "layout %d: ok %ld refused %ld", layout, c.ok, c.refused);
        fld_prepared_free(p);
    }
}
END_TEST

/* ---- the template is copied ----------------------------------------------------- */

START_TEST(template_is_copied)
{
    load_prep_plugin();
    int64_t *xs = malloc(2 * sizeof *xs), *os = malloc(2 * sizeof *os);
    xs[0] = os[0] = 2;
    xs[1] = 64;
    os[1] = 32;
    DLTensor *x = malloc(sizeof *x), *out = malloc(sizeof *out);
    *x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, xs, NULL);
    *out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, os, NULL);
    fld_activation_args a = {out, x};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_SILU_AND_MUL, &a, &p), FLD_OK);
    /* The caller's template changes and goes: the prepared call keeps its own. */
    xs[1] = 7;
    x->dtype = (DLDataType){kDLInt, 8, 1};
    free(xs);
    free(os);
    free(x);
    free(out);
    seen.calls = 0;
    ck_assert_msg(fld_prepared_activation(p, (void *)(ARENA + 65536), (void *)(ARENA + 131072)) ==
                      FLD_OK,
                  "%s", fld_last_error());
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_int_eq(seen.dim0, 64);
    ck_assert_ptr_eq(seen.data[0], (void *)(ARENA + 65536));
    ck_assert_ptr_eq(seen.data[1], (void *)(ARENA + 131072));
    ck_assert_str_eq(fld_prepared_op(p), FLD_OP_SILU_AND_MUL);
    fld_prepared_free(p);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------ */

START_TEST(bad_templates)
{
    load_prep_plugin();
    int64_t s[2] = {2, 64}, so[2] = {2, 32}, ws[1] = {31};
    DLTensor x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, s, NULL);
    DLTensor out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, so, NULL);
    DLTensor w = tensor((void *)(ARENA + 8192), FLD_DTYPE_F32, 1, ws, NULL);
    fld_prepared *p = (fld_prepared *)&x;

    /* rms_norm with a weight of the wrong width: the validator's message */
    fld_rms_norm_args n = {&out, &x, &w, NULL, 1e-6f};
    ck_assert_int_eq(fld_prepare(FLD_OP_RMS_NORM, &n, &p), FLD_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(fld_last_error(), "rms_norm: tensor 'out'"), "%s", fld_last_error());
    DLTensor out2 = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, s, NULL);
    n.out = &out2;
    ck_assert_int_eq(fld_prepare(FLD_OP_RMS_NORM, &n, &p), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "tensor 'weight'"), "%s", fld_last_error());

    ck_assert_int_eq(fld_prepare(FLD_OP_RMS_NORM, NULL, &p), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "'args' is NULL"), "%s", fld_last_error());
    ck_assert_int_eq(fld_prepare("rms_nrom", &n, &p), FLD_ENOTFOUND);
    ck_assert_msg(strstr(fld_last_error(), "rms_nrom"), "%s", fld_last_error());
    ck_assert_int_eq(fld_prepare(FLD_OP_ATTENTION_BACKEND, &n, &p), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "no tensors"), "%s", fld_last_error());
    ck_assert_int_eq(fld_prepare(NULL, &n, &p), FLD_EINVAL);
    ck_assert_int_eq(fld_prepare(FLD_OP_RMS_NORM, &n, NULL), FLD_EINVAL);
    ck_assert_ptr_null(p);
}
END_TEST

START_TEST(bad_pointers)
{
    load_prep_plugin();
    int64_t s[2] = {2, 64}, ws[1] = {64};
    DLTensor x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, s, NULL);
    DLTensor out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, s, NULL);
    DLTensor w = tensor((void *)(ARENA + 8192), FLD_DTYPE_F32, 1, ws, NULL);
    fld_rms_norm_args n = {&out, &x, &w, NULL, 1e-6f};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_RMS_NORM, &n, &p), FLD_OK);
    void *o = (void *)(ARENA + 65536), *xd = (void *)(ARENA + 2 * 65536),
         *wd = (void *)(ARENA + 3 * 65536);
    seen.calls = 0;
    ck_assert_int_eq(fld_prepared_rms_norm(p, o, NULL, wd, NULL), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "tensor 'x' has NULL data"), "%s", fld_last_error());
    ck_assert_int_eq(fld_prepared_rms_norm(p, o, xd, (char *)wd + 2, NULL), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "tensor 'weight' has data + byte_offset not aligned"),
                  "%s", fld_last_error());
    ck_assert_int_eq(fld_prepared_rms_norm(p, o, xd, (char *)o + 128, NULL), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "tensor 'out'") &&
                      strstr(fld_last_error(), "overlaps tensor 'weight'"),
                  "%s", fld_last_error());
    ck_assert_int_eq(fld_prepared_rms_norm(p, o, (char *)o + 4, wd, NULL), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "out may alias x only exactly"), "%s", fld_last_error());
    ck_assert_int_eq(seen.calls, 0);
    /* in place is the allowed aliasing */
    ck_assert_int_eq(fld_prepared_rms_norm(p, o, o, wd, NULL), FLD_OK);
    ck_assert_int_eq(seen.calls, 1);
    /* another family's entry, NULL arguments */
    ck_assert_int_eq(fld_prepared_activation(p, o, xd), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "op 'rms_norm'"), "%s", fld_last_error());
    ck_assert_int_eq(fld_prepared_rotary(NULL, o, xd, NULL, wd), FLD_EINVAL);
    ck_assert_int_eq(fld_prepared_call(p, NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_prepared_ntensors(p), 4);
    ck_assert_int_eq(fld_prepared_ntensors(NULL), 0);
    fld_prepared_free(p);
    fld_prepared_free(NULL);
}
END_TEST

START_TEST(positions_checked_per_call)
{
    load_prep_plugin();
    int64_t pos[2] = {0, 1}, ps[1] = {2}, qs[2] = {2, 32}, cs[2] = {8, 16};
    DLTensor p_t = tensor(pos, (DLDataType){kDLInt, 64, 1}, 1, ps, NULL);
    DLTensor q = tensor((void *)ARENA, FLD_DTYPE_F32, 2, qs, NULL);
    DLTensor c = tensor((void *)(ARENA + 65536), FLD_DTYPE_F32, 2, cs, NULL);
    fld_rotary_embedding_args a = {&p_t, &q, NULL, 16, &c, true};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_ROTARY_EMBEDDING, &a, &p), FLD_OK);
    seen.calls = 0;
    pos[1] = 8; /* the cache has 8 rows */
    ck_assert_int_eq(fld_prepared_rotary(p, pos, (void *)ARENA, NULL, (void *)(ARENA + 65536)),
                     FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "positions"), "%s", fld_last_error());
    ck_assert_int_eq(seen.calls, 0);
    pos[1] = 7;
    ck_assert_int_eq(fld_prepared_rotary(p, pos, (void *)ARENA, NULL, (void *)(ARENA + 65536)),
                     FLD_OK);
    ck_assert_int_eq(seen.calls, 1);
    fld_prepared_free(p);
}
END_TEST

START_TEST(bind_and_run)
{
    load_prep_plugin();
    int64_t s[2] = {2, 64}, ws[1] = {64};
    DLTensor x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, s, NULL);
    DLTensor out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, s, NULL);
    DLTensor w = tensor((void *)(ARENA + 8192), FLD_DTYPE_F32, 1, ws, NULL);
    fld_rms_norm_args n = {&out, &x, &w, NULL, 1e-6f};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_RMS_NORM, &n, &p), FLD_OK);
    /* bound at first: the template's pointers, which fld_prepare() checked */
    seen.calls = 0;
    ck_assert_msg(fld_prepared_run(p) == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_ptr_eq(seen.data[0], out.data);
    ck_assert_ptr_eq(seen.data[1], x.data);
    ck_assert_ptr_eq(seen.data[2], w.data);
    ck_assert_ptr_null(seen.data[3]);
    /* a bind runs nothing; the runs after it use its pointers */
    void *o = (void *)(ARENA + 65536), *xd = (void *)(ARENA + 2 * 65536),
         *wd = (void *)(ARENA + 3 * 65536);
    seen.calls = 0;
    ck_assert_int_eq(fld_prepared_bind(p, (void *[]){o, xd, wd, NULL}), FLD_OK);
    ck_assert_int_eq(seen.calls, 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
        ck_assert_ptr_eq(seen.data[0], o);
        ck_assert_ptr_eq(seen.data[1], xd);
        ck_assert_ptr_eq(seen.data[2], wd);
    }
    ck_assert_int_eq(seen.calls, 3);
    /* refused binds and calls: the typed call's message, nothing run, the binding kept */
    seen.calls = 0;
    ck_assert_int_eq(fld_prepared_bind(p, (void *[]){o, NULL, wd, NULL}), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "tensor 'x' has NULL data"), "%s", fld_last_error());
    ck_assert_int_eq(fld_prepared_bind(p, (void *[]){o, xd, (char *)o + 128, NULL}), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "overlaps tensor 'weight'"), "%s", fld_last_error());
    ck_assert_int_eq(fld_prepared_rms_norm(p, o, (char *)o + 4, wd, NULL), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "out may alias x only exactly"), "%s", fld_last_error());
    ck_assert_int_eq(seen.calls, 0);
    ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_ptr_eq(seen.data[0], o);
    ck_assert_ptr_eq(seen.data[1], xd);
    ck_assert_ptr_eq(seen.data[2], wd);
    /* in place, accepted by the call: bound */
    ck_assert_int_eq(fld_prepared_rms_norm(p, xd, xd, wd, NULL), FLD_OK);
    ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
    ck_assert_ptr_eq(seen.data[0], xd);
    ck_assert_ptr_eq(seen.data[1], xd);
    /* wrong use */
    ck_assert_int_eq(fld_prepared_run(NULL), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "fld_prepared_run: argument 'p' is NULL"), "%s",
                  fld_last_error());
    ck_assert_int_eq(fld_prepared_bind(NULL, (void *[]){o, xd, wd, NULL}), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "fld_prepared_bind: argument 'p' is NULL"), "%s",
                  fld_last_error());
    ck_assert_int_eq(fld_prepared_bind(p, NULL), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "fld_prepared_bind: argument 'data' is NULL"), "%s",
                  fld_last_error());
    fld_prepared_free(p);
}
END_TEST

START_TEST(run_checks_positions)
{
    load_prep_plugin();
    int64_t pos[2] = {0, 1}, ps[1] = {2}, qs[2] = {2, 32}, cs[2] = {8, 16};
    DLTensor p_t = tensor(pos, (DLDataType){kDLInt, 64, 1}, 1, ps, NULL);
    DLTensor q = tensor((void *)ARENA, FLD_DTYPE_F32, 2, qs, NULL);
    DLTensor c = tensor((void *)(ARENA + 65536), FLD_DTYPE_F32, 2, cs, NULL);
    fld_rotary_embedding_args a = {&p_t, &q, NULL, 16, &c, true};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_ROTARY_EMBEDDING, &a, &p), FLD_OK);
    seen.calls = 0;
    ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
    ck_assert_int_eq(seen.calls, 1);
    /* the bound positions' values change: each run reads them */
    pos[0] = 8; /* the cache has 8 rows */
    ck_assert_int_eq(fld_prepared_run(p), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "positions"), "%s", fld_last_error());
    pos[0] = -1;
    ck_assert_int_eq(fld_prepared_run(p), FLD_EINVAL);
    ck_assert_int_eq(seen.calls, 1);
    pos[0] = 7;
    ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
    ck_assert_int_eq(seen.calls, 2);
    fld_prepared_free(p);
}
END_TEST

/* ---- selection is followed ---------------------------------------------------------- */

START_TEST(follows_policy_changes)
{
    load_prep_plugin();
    int64_t s[2] = {1, 64}, so[2] = {1, 32};
    DLTensor x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, s, NULL);
    DLTensor out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, so, NULL);
    fld_activation_args a = {&out, &x};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_SILU_AND_MUL, &a, &p), FLD_OK);
    void *o = (void *)(ARENA + 65536), *xd = (void *)(ARENA + 131072);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(fld_prepared_activation(p, o, xd), FLD_OK);
        ck_assert_int_eq(seen.impl, 'a');
    }
    ck_assert_int_eq(fld_policy_set("per_op", "silu_and_mul=impl:vendor.prep_b"), FLD_OK);
    ck_assert_int_eq(fld_prepared_activation(p, o, xd), FLD_OK);
    ck_assert_int_eq(seen.impl, 'b');
    ck_assert_int_eq(fld_policy_push_per_op("silu_and_mul=impl:vendor.prep_a"), FLD_OK);
    ck_assert_int_eq(fld_prepared_activation(p, o, xd), FLD_OK);
    ck_assert_int_eq(seen.impl, 'a');
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_prepared_activation(p, o, xd), FLD_OK);
    ck_assert_int_eq(seen.impl, 'b');
    ck_assert_int_eq(fld_policy_set("per_op", "silu_and_mul=reference"), FLD_OK);
    seen.calls = 0;
    /* the reference kernel runs on these tensors: real memory now */
    static float xr[64], outr[32];
    for (int i = 0; i < 64; i++)
        xr[i] = 1.0f;
    ck_assert_int_eq(fld_prepared_activation(p, outr, xr), FLD_OK);
    ck_assert_int_eq(seen.calls, 0);
    ck_assert_float_eq_tol(outr[0], 1.0f / (1.0f + expf(-1.0f)), 1e-6f);
    fld_prepared_free(p);
}
END_TEST

/* A prepared silu_and_mul of the arena's addresses, and the impl its run selected. */
static char run_impl(fld_prepared *p)
{
    seen.calls = 0;
    seen.impl = '?';
    int rc = fld_prepared_run(p);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(seen.calls, 1);
    return seen.impl;
}

static fld_prepared *prepare_silu(void)
{
    static int64_t s[2] = {1, 64}, so[2] = {1, 32};
    DLTensor x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, s, NULL);
    DLTensor out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, so, NULL);
    fld_activation_args a = {&out, &x};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_SILU_AND_MUL, &a, &p), FLD_OK);
    return p;
}

START_TEST(run_follows_changes)
{
    load_prep_plugin();
    fld_prepared *p = prepare_silu();
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(run_impl(p), 'a');
    ck_assert_int_eq(fld_policy_set("per_op", "silu_and_mul=impl:vendor.prep_b"), FLD_OK);
    ck_assert_int_eq(run_impl(p), 'b');
    ck_assert_int_eq(run_impl(p), 'b');
    ck_assert_int_eq(fld_policy_push_per_op("silu_and_mul=impl:vendor.prep_a"), FLD_OK);
    ck_assert_int_eq(run_impl(p), 'a');
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(run_impl(p), 'b');
    /* a reload: the environment's policy replaces the one set above */
    ck_assert_int_eq(setenv("VLLM_FL_PER_OP", "silu_and_mul=impl:vendor.prep_b", 1), 0);
    ck_assert_int_eq(fld_policy_set("per_op", "silu_and_mul=impl:vendor.prep_a"), FLD_OK);
    ck_assert_int_eq(run_impl(p), 'a');
    ck_assert_msg(fld_reload() == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(run_impl(p), 'b');
    ck_assert_int_eq(unsetenv("VLLM_FL_PER_OP"), 0);
    ck_assert_msg(fld_reload() == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(run_impl(p), 'a');
    /* a new plugin whose implementation ranks first */
    ck_assert_msg(fld_register_plugin(&prep_c_plugin) == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(run_impl(p), 'c');
    ck_assert_int_eq(run_impl(p), 'c');
    fld_prepared_free(p);
}
END_TEST

START_TEST(run_falls_back_and_remembers)
{
    load_prep_plugin();
    fld_prepared *p = prepare_silu();
    ck_assert_int_eq(run_impl(p), 'a');
    ck_assert_int_eq(run_impl(p), 'a'); /* the direct call is open */
    atomic_store(&act_a_fails, true);
    atomic_store(&act_a_failures, 0);
    ck_assert_int_eq(run_impl(p), 'b');
    ck_assert_int_eq(atomic_load(&act_a_failures), 1);
    /* remembered for (silu_and_mul, cpu, float32): not called again, by a run or a call */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(run_impl(p), 'b');
    ck_assert_int_eq(fld_prepared_activation(p, (void *)(ARENA + 65536), (void *)ARENA), FLD_OK);
    ck_assert_int_eq(seen.impl, 'b');
    ck_assert_int_eq(atomic_load(&act_a_failures), 1);
    /* a policy change forgets the failure: a is tried again */
    ck_assert_int_eq(fld_policy_set("strict", "0"), FLD_OK);
    ck_assert_int_eq(run_impl(p), 'b');
    ck_assert_int_eq(atomic_load(&act_a_failures), 2);
    /* strict: the winner's own error */
    ck_assert_int_eq(fld_policy_set("strict", "1"), FLD_OK);
    ck_assert_int_eq(fld_prepared_run(p), FLD_EIMPL);
    ck_assert_int_eq(atomic_load(&act_a_failures), 3);
    atomic_store(&act_a_fails, false);
    ck_assert_int_eq(run_impl(p), 'a');
    fld_prepared_free(p);
}
END_TEST

/* rms_norm of one row of ones with unit weight: every output is 1/sqrt(1 + eps). */
static void check_norm_result(const float *out, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_float_eq_tol(out[i], 1.0f, 1e-5f);
}

START_TEST(survives_shutdown)
{
    /* No plugin: the library's reference kernel, on real memory. */
    static float x[2][64], out[2][64], w[64];
    for (int i = 0; i < 64; i++)
        x[0][i] = x[1][i] = w[i] = 1.0f;
    int64_t s[2] = {1, 64}, ws[1] = {64};
    DLTensor xt = tensor(x[0], FLD_DTYPE_F32, 2, s, NULL);
    DLTensor ot = tensor(out[0], FLD_DTYPE_F32, 2, s, NULL);
    DLTensor wt = tensor(w, FLD_DTYPE_F32, 1, ws, NULL);
    fld_rms_norm_args a = {&ot, &xt, &wt, NULL, 1e-6f};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_RMS_NORM, &a, &p), FLD_OK);
    ck_assert_int_eq(fld_prepared_rms_norm(p, out[0], x[0], w, NULL), FLD_OK);
    check_norm_result(out[0], 64);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
    ck_assert_int_eq(fld_prepared_rms_norm(p, out[1], x[1], w, NULL), FLD_OK);
    check_norm_result(out[1], 64);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
    /* a run after a shutdown: the op is looked up again, on the pointers bound last */
    memset(out[1], 0, sizeof out[1]);
    ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
    check_norm_result(out[1], 64);
    ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
    memset(out[1], 0, sizeof out[1]);
    ck_assert_int_eq(fld_prepared_run(p), FLD_OK);
    check_norm_result(out[1], 64);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
    fld_prepared_free(p); /* after the shutdown: plain memory */
}
END_TEST

START_TEST(works_in_forked_child)
{
    load_prep_plugin();
    int64_t s[2] = {1, 64}, so[2] = {1, 32};
    DLTensor x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, s, NULL);
    DLTensor out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, so, NULL);
    fld_activation_args a = {&out, &x};
    fld_prepared *p;
    ck_assert_int_eq(fld_prepare(FLD_OP_SILU_AND_MUL, &a, &p), FLD_OK);
    ck_assert_int_eq(fld_prepared_activation(p, (void *)ARENA, (void *)(ARENA + 65536)), FLD_OK);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        alarm(10);
        seen.calls = 0;
        int rc = fld_prepared_activation(p, (void *)ARENA, (void *)(ARENA + 65536));
        int rc2 = fld_policy_set("per_op", "silu_and_mul=impl:vendor.prep_b");
        int rc3 = fld_prepared_activation(p, (void *)ARENA, (void *)(ARENA + 65536));
        if (rc || rc2 || rc3 || seen.calls != 2 || seen.impl != 'b') {
            fprintf(stderr, "child: %d %d %d calls %d impl %c: %s\n", rc, rc2, rc3, seen.calls,
                    seen.impl, fld_last_error());
            _exit(1);
        }
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    fld_prepared_free(p);
}
END_TEST

/* ---- threads ------------------------------------------------------------------------- */

static atomic_bool stop;

static void *caller(void *arg)
{
    (void)arg;
    int64_t s[2] = {1, 64}, so[2] = {1, 32};
    DLTensor x = tensor((void *)ARENA, FLD_DTYPE_F32, 2, s, NULL);
    DLTensor out = tensor((void *)(ARENA + 4096), FLD_DTYPE_F32, 2, so, NULL);
    fld_activation_args a = {&out, &x};
    fld_prepared *p;
    if (fld_prepare(FLD_OP_SILU_AND_MUL, &a, &p) != FLD_OK)
        return (void *)1;
    long bad = 0, n = 0;
    while (!atomic_load(&stop) || n < 1000) {
        bad +=
            fld_prepared_activation(p, (void *)(ARENA + 65536), (void *)(ARENA + 131072)) != FLD_OK;
        bad += fld_prepared_run(p) != FLD_OK;
        /* the run's kernel saw this thread's bound pointers */
        bad += seen.data[0] != (void *)(ARENA + 65536) || seen.data[1] != (void *)(ARENA + 131072);
        n++;
    }
    fld_prepared_free(p);
    return (void *)(intptr_t)(bad != 0);
}

START_TEST(threads_and_policy_changes)
{
    load_prep_plugin();
    pthread_t th[2];
    atomic_store(&stop, false);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, caller, NULL), 0);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(fld_policy_set("per_op", i % 2 ? "silu_and_mul=impl:vendor.prep_b"
                                                        : "silu_and_mul=impl:vendor.prep_a"),
                         FLD_OK);
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++) {
        void *r;
        ck_assert_int_eq(pthread_join(th[i], &r), 0);
        ck_assert_ptr_null(r);
    }
}
END_TEST

static Suite *prepared_suite(void)
{
    Suite *s = suite_create("prepared");
    TCase *tc = tcase_create("prepared");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, agrees_with_typed_activation);
    tcase_add_test(tc, agrees_with_typed_rms_norm);
    tcase_add_test(tc, agrees_with_typed_rotary);
    tcase_add_test(tc, template_is_copied);
    tcase_add_test(tc, bad_templates);
    tcase_add_test(tc, bad_pointers);
    tcase_add_test(tc, positions_checked_per_call);
    tcase_add_test(tc, bind_and_run);
    tcase_add_test(tc, run_checks_positions);
    tcase_add_test(tc, follows_policy_changes);
    tcase_add_test(tc, run_follows_changes);
    tcase_add_test(tc, run_falls_back_and_remembers);
    tcase_add_test(tc, survives_shutdown);
    tcase_add_test(tc, works_in_forked_child);
    tcase_add_test(tc, threads_and_policy_changes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_prepared", prepared_suite());
}
