/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ascend plugin (plugins/ascend) against the fake CANN of tests/fake_acl:
 * loading with and without CANN, the reasons it gives, every op's results on
 * "Ascend" tensors (CPU memory; device types 12 and 21) against the
 * reference kernels (vendor.ascend, and reference.ascend on strided layouts), the aclnn call
 * protocol (workspace sizes, streams, executors and descriptors), injected failures and the device
 * hooks.
 *
 * Real Ascend hardware is never used: the fake computes on the CPU. Tests
 * fork, so each starts with fresh library and fake state; the fake's
 * counters are read through the same libascendcl.so the plugin opened.
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/cpu_tensor.h"
#include "fake_acl/fake_acl.h"
#include "util/env.h"
#include "util/harness.h"

static char fake_home[1024];

/* A clean environment; home NULL: the fake CANN. */
static void base_env(const char *home)
{
    tt_clear_fld_environment();
    unsetenv("FAKE_ACL_FAIL");
    unsetenv("FAKE_ACL_DEVICES");
    unsetenv("FAKE_ACL_WORKSPACE");
    unsetenv("FAKE_ACL_LOG");
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    snprintf(fake_home, sizeof fake_home, "%s/tests/fake_acl", tt_build_dir());
    setenv("ASCEND_HOME_PATH", home ? home : fake_home, 1);
}

/* The fake's test queries, from the library the plugin opened. */
static void *fake(const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/lib64/libascendcl.so", fake_home);
    void *h = dlopen(path, RTLD_NOW);
    ck_assert_msg(h != NULL, "%s", dlerror());
    void *f = dlsym(h, name);
    ck_assert_msg(f != NULL, "fake lacks %s", name);
    return f; /* the handle stays open: counters outlive fld_shutdown() */
}

static int fake_count(const char *name)
{
    return ((fake_acl_count_fn)fake(name))();
}

static const char *fake_log(void)
{
    return ((fake_acl_text_fn)fake("fake_acl_log"))();
}

static void assert_clean_protocol(void)
{
    ck_assert_msg(fake_count("fake_acl_violations") == 0, "violation: %s",
                  ((fake_acl_text_fn)fake("fake_acl_last_violation"))());
    ck_assert_int_eq(fake_count("fake_acl_live_executors"), 0);
    ck_assert_int_eq(fake_count("fake_acl_live_tensors"), 0);
    ck_assert_int_eq(fake_count("fake_acl_live_scalars"), 0);
}

struct plugin_seen {
    bool found;
    fld_plugin_status status;
    char reason[1024];
    char detail[1024];
    uint32_t hooks;
};

static int find_ascend(const fld_plugin_info *info, void *user)
{
    struct plugin_seen *s = user;
    if (strcmp(info->name, "ascend") != 0)
        return 0;
    s->found = true;
    s->status = info->status;
    s->hooks = info->hook_devices;
    snprintf(s->reason, sizeof s->reason, "%s", info->reason ? info->reason : "");
    snprintf(s->detail, sizeof s->detail, "%s", info->detail ? info->detail : "");
    return 1;
}

static struct plugin_seen ascend_plugin(void)
{
    struct plugin_seen s = {0};
    fld_foreach_plugin(find_ascend, &s);
    ck_assert_msg(s.found, "plugin 'ascend' not seen");
    return s;
}

static void on_device(tt_tensor *t, int device_type, int device_id)
{
    t->t.device.device_type = (DLDeviceType)device_type;
    t->t.device.device_id = device_id;
}

static const DLDataType dtypes[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};

static double tol(DLDataType dt)
{
    return dt.bits == 32 ? 1e-5 : dt.code == kDLFloat ? 2e-3 : 2e-2;
}

static void assert_close(const tt_tensor *got, const tt_tensor *want, const char *what)
{
    int64_t n = tt_numel(got);
    double t = tol(got->t.dtype);
    for (int64_t i = 0; i < n; i++) {
        double g = tt_get(got, i), w = tt_get(want, i);
        ck_assert_msg(fabs(g - w) <= t + t * fabs(w), "%s: element %lld: got %g, want %g", what,
                      (long long)i, g, w);
    }
    ck_assert_msg(tt_padding_intact(got), "%s: wrote outside the view", what);
}

/*
 * Bit for bit (NaNs alike): activations and rotary round where the reference
 * rounds, with the fake computing each operator in float32 as the reference
 * does, so the results are the reference's.
 */
static void assert_exact(const tt_tensor *got, const tt_tensor *want, const char *what)
{
    int64_t n = tt_numel(got);
    for (int64_t i = 0; i < n; i++) {
        double g = tt_get(got, i), w = tt_get(want, i);
        ck_assert_msg(g == w || (isnan(g) && isnan(w)), "%s: element %lld: got %.9g, want %.9g",
                      what, (long long)i, g, w);
    }
    ck_assert_msg(tt_padding_intact(got), "%s: wrote outside the view", what);
}

static bool same_values(const tt_tensor *a, const tt_tensor *b)
{
    for (int64_t i = 0; i < tt_numel(a); i++)
        if (memcmp(&(double){tt_get(a, i)}, &(double){tt_get(b, i)}, sizeof(double)) != 0)
            return false;
    return true;
}

#define CPU_REF                                                                                    \
    "rms_norm=impl:reference.c;silu_and_mul=impl:reference.c;"                                     \
    "rotary_embedding=impl:reference.c;mul_and_silu=impl:reference.c;"                             \
    "gelu_and_mul=impl:reference.c;gelu_tanh_and_mul=impl:reference.c;"                            \
    "gemma_rms_norm=impl:reference.c"
#define ASCEND_ONLY                                                                                \
    "rms_norm=impl:vendor.ascend;silu_and_mul=impl:vendor.ascend;"                                 \
    "rotary_embedding=impl:vendor.ascend;gemma_rms_norm=impl:vendor.ascend"
#define ASCEND_REF                                                                                 \
    "rms_norm=impl:reference.ascend;silu_and_mul=impl:reference.ascend;"                           \
    "rotary_embedding=impl:reference.ascend;mul_and_silu=impl:reference.ascend;"                   \
    "gelu_and_mul=impl:reference.ascend;gelu_tanh_and_mul=impl:reference.ascend;"                  \
    "gemma_rms_norm=impl:reference.ascend"

/* ------------------------------------------------------------------------ */
/* Without CANN                                                             */
/* ------------------------------------------------------------------------ */

START_TEST(no_cann_loads_unavailable)
{
    char dir[] = "/tmp/fld-no-cann-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    base_env(dir);
    struct plugin_seen s = ascend_plugin();
    ck_assert_int_eq(s.status, FLD_PLUGIN_UNAVAILABLE);
    ck_assert_msg(strstr(s.reason, "CANN runtime not found") &&
                      strstr(s.reason, "lib64/libascendcl.so") &&
                      strstr(s.reason, "cannot open shared object file"),
                  "reason: %s", s.reason);
    ck_assert_msg(strstr(s.detail, dir), "detail: %s", s.detail);
    ck_assert_uint_eq(s.hooks, FLD_DEVICE_MASK_ASCEND);

    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 32});
    on_device(x, FLD_DEVICE_ASCEND, 0);
    on_device(out, FLD_DEVICE_ASCEND, 0);
    ck_assert_int_eq(fld_silu_and_mul(&out->t, &x->t), FLD_EUNAVAILABLE);
    ck_assert_msg(strstr(fld_last_error(), "CANN runtime not found"), "%s", fld_last_error());

    void *p = (void *)1;
    ck_assert_int_eq(fld_device_alloc((DLDevice){(DLDeviceType)FLD_DEVICE_ASCEND, 0}, 64, &p),
                     FLD_EUNAVAILABLE);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(fld_last_error(), "CANN runtime not found"), "%s", fld_last_error());
    tt_free(x);
    tt_free(out);
    rmdir(dir);
}
END_TEST

START_TEST(missing_library_named)
{
    char dir[] = "/tmp/fld-half-cann-XXXXXX", lib64[64], link[96], target[1200];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    base_env(dir);
    snprintf(lib64, sizeof lib64, "%s/lib64", dir);
    ck_assert_int_eq(mkdir(lib64, 0755), 0);
    snprintf(link, sizeof link, "%s/libascendcl.so", lib64);
    snprintf(target, sizeof target, "%s/lib64/libascendcl.so", fake_home);
    ck_assert_int_eq(symlink(target, link), 0);
    struct plugin_seen s = ascend_plugin();
    ck_assert_int_eq(s.status, FLD_PLUGIN_UNAVAILABLE);
    ck_assert_msg(strstr(s.reason, "libnnopbase.so"), "reason: %s", s.reason);
    unlink(link);
    rmdir(lib64);
    rmdir(dir);
}
END_TEST

START_TEST(zero_devices)
{
    base_env(NULL);
    setenv("FAKE_ACL_DEVICES", "0", 1);
    struct plugin_seen s = ascend_plugin();
    ck_assert_int_eq(s.status, FLD_PLUGIN_UNAVAILABLE);
    ck_assert_msg(strstr(s.reason, "no Ascend device"), "reason: %s", s.reason);
    const char *who = NULL;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_ASCEND, &who), FLD_EUNAVAILABLE);
    ck_assert_msg(strstr(fld_last_error(), "no Ascend device"), "%s", fld_last_error());
}
END_TEST

START_TEST(init_failure_reported)
{
    base_env(NULL);
    setenv("FAKE_ACL_FAIL", "aclInit", 1);
    struct plugin_seen s = ascend_plugin();
    ck_assert_int_eq(s.status, FLD_PLUGIN_UNAVAILABLE);
    ck_assert_msg(strstr(s.reason, "aclInit failed"), "reason: %s", s.reason);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* With the fake CANN                                                       */
/* ------------------------------------------------------------------------ */

/* Loading opens CANN but starts nothing: no aclInit, no device query, until
 * availability is first asked (a process may fork after fld_init()). */
START_TEST(load_does_not_start_the_runtime)
{
    base_env(NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    const char *log = fake_log();
    ck_assert_msg(!strstr(log, "aclInit") && !strstr(log, "aclrtGetDeviceCount"),
                  "called at load:\n%s", log);
    const char *impl = NULL;
    ck_assert_int_eq(fld_resolve("rms_norm", FLD_DEVICE_ASCEND, FLD_DTYPE_F32, &impl), FLD_OK);
    log = fake_log();
    ck_assert_msg(strstr(log, "aclInit") && strstr(log, "aclrtGetDeviceCount"), "log:\n%s", log);
}
END_TEST

START_TEST(available_with_fake)
{
    base_env(NULL);
    setenv("FAKE_ACL_DEVICES", "2", 1);
    struct plugin_seen s = ascend_plugin();
    ck_assert_int_eq(s.status, FLD_PLUGIN_LOADED);
    ck_assert_msg(strstr(s.detail, "probed on first use") && strstr(s.detail, fake_home),
                  "detail: %s", s.detail);
    const char *impl = NULL;
    for (int d = 0; d < 2; d++) {
        int dev = d ? FLD_DEVICE_ASCEND_DL21 : FLD_DEVICE_ASCEND;
        ck_assert_int_eq(fld_resolve("rms_norm", dev, FLD_DTYPE_BF16, &impl), FLD_OK);
        ck_assert_str_eq(impl, "vendor.ascend");
        ck_assert_int_eq(fld_resolve("rotary_embedding", dev, FLD_DTYPE_F16, &impl), FLD_OK);
        ck_assert_str_eq(impl, "vendor.ascend");
    }
    ck_assert_int_eq(fake_count("fake_acl_inits"), 1);
    const char *who = NULL;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_ASCEND, &who), FLD_OK);
    ck_assert_str_eq(who, "ascend");
}
END_TEST

/* rms_norm (with and without residual) on device dev vs reference.c on CPU. */
static void check_rms(DLDataType dt, int dev, bool residual)
{
    const int64_t shape[2] = {7, 96};
    tt_tensor *x = tt_new(dt, 2, shape), *w = tt_new(dt, 1, &shape[1]);
    tt_tensor *r = residual ? tt_new(dt, 2, shape) : NULL;
    tt_fill_normal(x, 11, 0.0, 1.0);
    tt_fill_normal(w, 12, 1.0, 0.2);
    if (r)
        tt_fill_normal(r, 13, 0.0, 1.0);
    tt_tensor *out = tt_new(dt, 2, shape), *x_ref = tt_clone(x), *out_ref = tt_new(dt, 2, shape);
    tt_tensor *r_ref = r ? tt_clone(r) : NULL;

    ck_assert_int_eq(fld_policy_push_per_op(CPU_REF), FLD_OK);
    ck_assert_int_eq(fld_rms_norm(&out_ref->t, &x_ref->t, &w->t, r_ref ? &r_ref->t : NULL, 1e-6f),
                     FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);

    on_device(x, dev, 0);
    on_device(w, dev, 0);
    on_device(out, dev, 0);
    if (r)
        on_device(r, dev, 0);
    int rc = fld_rms_norm(&out->t, &x->t, &w->t, r ? &r->t : NULL, 1e-6f);
    ck_assert_msg(rc == FLD_OK, "rms_norm: %s", fld_last_error());
    assert_close(out, out_ref, "rms_norm out");
    if (r)
        assert_close(r, r_ref, "rms_norm residual");
    tt_free(x), tt_free(w), tt_free(out), tt_free(x_ref), tt_free(out_ref);
    if (r)
        tt_free(r), tt_free(r_ref);
}

static void check_silu(DLDataType dt, int dev)
{
    tt_tensor *x = tt_new(dt, 3, (int64_t[]){2, 5, 128});
    tt_tensor *out = tt_new(dt, 3, (int64_t[]){2, 5, 64});
    tt_tensor *out_ref = tt_new(dt, 3, (int64_t[]){2, 5, 64});
    tt_fill_normal(x, 21, 0.0, 2.0);
    ck_assert_int_eq(fld_policy_push_per_op(CPU_REF), FLD_OK);
    ck_assert_int_eq(fld_silu_and_mul(&out_ref->t, &x->t), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    on_device(x, dev, 0);
    on_device(out, dev, 0);
    int rc = fld_silu_and_mul(&out->t, &x->t);
    ck_assert_msg(rc == FLD_OK, "silu_and_mul: %s", fld_last_error());
    assert_exact(out, out_ref, "silu_and_mul");
    tt_free(x), tt_free(out), tt_free(out_ref);
}

/*
 * rotary_embedding: T tokens, padded heads (head stride > head_size),
 * rot_dim < head_size so the tail must stay, int32 or int64 positions.
 */
static void check_rotary(DLDataType dt, int dev, bool neox, bool int32_pos, bool f32_cache,
                         bool with_key)
{
    const int64_t T = 6, hq = 4, hk = 2, hs = 64, rot = 32, pad = 72, max_pos = 40;
    tt_tensor *pos = tt_new(int32_pos ? TT_INT32 : TT_INT64, 1, &T);
    for (int64_t i = 0; i < T; i++)
        tt_set(pos, i, (double)((i * 7 + 3) % max_pos));
    tt_tensor *q = tt_new_strided(dt, 3, (int64_t[]){T, hq, hs}, (int64_t[]){hq * pad, pad, 1});
    tt_tensor *k = tt_new_strided(dt, 3, (int64_t[]){T, hk, hs}, (int64_t[]){hk * pad, pad, 1});
    tt_tensor *cache = tt_new(f32_cache ? FLD_DTYPE_F32 : dt, 2, (int64_t[]){max_pos, rot});
    tt_fill_normal(q, 31, 0.0, 1.0);
    tt_fill_normal(k, 32, 0.0, 1.0);
    for (int64_t p = 0; p < max_pos; p++)
        for (int64_t i = 0; i < rot / 2; i++) {
            double th = (double)p * pow(10000.0, -2.0 * (double)i / (double)rot);
            tt_set(cache, p * rot + i, cos(th));
            tt_set(cache, p * rot + rot / 2 + i, sin(th));
        }
    tt_tensor *q_ref = tt_clone(q), *k_ref = tt_clone(k);
    ck_assert_int_eq(fld_policy_push_per_op(CPU_REF), FLD_OK);
    ck_assert_int_eq(
        fld_rotary_embedding(&pos->t, &q_ref->t, with_key ? &k_ref->t : NULL, hs, &cache->t, neox),
        FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    on_device(pos, dev, 0);
    on_device(q, dev, 0);
    on_device(k, dev, 0);
    on_device(cache, dev, 0);
    tt_tensor *k0 = tt_clone(k);
    int rc = fld_rotary_embedding(&pos->t, &q->t, with_key ? &k->t : NULL, hs, &cache->t, neox);
    ck_assert_msg(rc == FLD_OK, "rotary_embedding: %s", fld_last_error());
    assert_exact(q, q_ref, neox ? "rotary query (neox)" : "rotary query (gptj)");
    if (with_key)
        assert_exact(k, k_ref, neox ? "rotary key (neox)" : "rotary key (gptj)");
    else
        ck_assert(same_values(k, k0));
    tt_free(pos), tt_free(q), tt_free(k), tt_free(cache), tt_free(q_ref), tt_free(k_ref);
    tt_free(k0);
}

/*
 * rms_norm or gemma_rms_norm on device dev vs reference.c on CPU; strided:
 * rows padded (x, out and residual each with its own row stride).
 */
/* odt: the weight's and residual's dtype (dt, or float32 with a 16-bit dt). */
static void check_norm_dt(DLDataType dt, DLDataType odt, int dev, bool gemma, bool weight,
                          bool residual, bool strided)
{
    const int64_t R = 7, H = 96, shape[2] = {R, H};
    tt_tensor *x =
        strided ? tt_new_strided(dt, 2, shape, (int64_t[]){100, 1}) : tt_new(dt, 2, shape);
    tt_tensor *out =
        strided ? tt_new_strided(dt, 2, shape, (int64_t[]){104, 1}) : tt_new(dt, 2, shape);
    tt_tensor *r = !residual ? NULL
                   : strided ? tt_new_strided(odt, 2, shape, (int64_t[]){112, 1})
                             : tt_new(odt, 2, shape);
    tt_tensor *w = weight ? tt_new(odt, 1, &shape[1]) : NULL;
    tt_fill_normal(x, 41, 0.0, 1.0);
    tt_fill_normal(out, 42, 0.0, 1.0);
    if (w)
        tt_fill_normal(w, 43, gemma ? 0.0 : 1.0, 0.2);
    if (r)
        tt_fill_normal(r, 44, 0.0, 1.0);
    tt_tensor *x_ref = tt_clone(x), *out_ref = tt_clone(out), *r_ref = r ? tt_clone(r) : NULL;
    int (*fn)(DLTensor *, const DLTensor *, const DLTensor *, DLTensor *, float) =
        gemma ? fld_gemma_rms_norm : fld_rms_norm;

    ck_assert_int_eq(fld_policy_push_per_op(CPU_REF), FLD_OK);
    ck_assert_int_eq(fn(&out_ref->t, &x_ref->t, w ? &w->t : NULL, r_ref ? &r_ref->t : NULL, 1e-6f),
                     FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);

    on_device(x, dev, 0);
    on_device(out, dev, 0);
    if (w)
        on_device(w, dev, 0);
    if (r)
        on_device(r, dev, 0);
    int rc = fn(&out->t, &x->t, w ? &w->t : NULL, r ? &r->t : NULL, 1e-6f);
    ck_assert_msg(rc == FLD_OK, "%s: %s", gemma ? "gemma_rms_norm" : "rms_norm", fld_last_error());
    char what[96];
    snprintf(what, sizeof what, "%s%s%s%s out", gemma ? "gemma_rms_norm" : "rms_norm",
             weight ? "" : " (no weight)", residual ? " (residual)" : "",
             strided ? " strided" : "");
    assert_close(out, out_ref, what);
    if (r)
        assert_exact(r, r_ref, "residual");
    tt_free(x), tt_free(out), tt_free(x_ref), tt_free(out_ref);
    if (w)
        tt_free(w);
    if (r)
        tt_free(r), tt_free(r_ref);
}

static void check_norm(DLDataType dt, int dev, bool gemma, bool weight, bool residual, bool strided)
{
    check_norm_dt(dt, dt, dev, gemma, weight, residual, strided);
}

enum { ACT_SILU, ACT_MUL_SILU, ACT_GELU, ACT_GELU_TANH, N_ACT };
static int (*const act_fns[N_ACT])(DLTensor *, const DLTensor *) = {
    fld_silu_and_mul, fld_mul_and_silu, fld_gelu_and_mul, fld_gelu_tanh_and_mul};
static const char *const act_names[N_ACT] = {"silu_and_mul", "mul_and_silu", "gelu_and_mul",
                                             "gelu_tanh_and_mul"};

/* A gated activation on strided rows ([2, 5, 2d] with padded rows). */
static void check_gated(DLDataType dt, int dev, int act)
{
    const int64_t d = 64;
    tt_tensor *x = tt_new_strided(dt, 3, (int64_t[]){2, 5, 2 * d}, (int64_t[]){5 * 144, 144, 1});
    tt_tensor *out = tt_new_strided(dt, 3, (int64_t[]){2, 5, d}, (int64_t[]){5 * 80, 80, 1});
    tt_fill_normal(x, 51 + (uint64_t)act, 0.0, 2.0);
    tt_fill_normal(out, 61, 0.0, 1.0);
    tt_tensor *out_ref = tt_clone(out);
    ck_assert_int_eq(fld_policy_push_per_op(CPU_REF), FLD_OK);
    ck_assert_int_eq(act_fns[act](&out_ref->t, &x->t), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    on_device(x, dev, 0);
    on_device(out, dev, 0);
    int rc = act_fns[act](&out->t, &x->t);
    ck_assert_msg(rc == FLD_OK, "%s: %s", act_names[act], fld_last_error());
    assert_exact(out, out_ref, act_names[act]);
    tt_free(x), tt_free(out), tt_free(out_ref);
}

/* Every op, dtype and Ascend device code, pinned to vendor.ascend strictly. */
START_TEST(ops_match_reference)
{
    base_env(NULL);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", ASCEND_ONLY, 1);
    int dt = _i % 3, dev = _i / 3 ? FLD_DEVICE_ASCEND_DL21 : FLD_DEVICE_ASCEND;
    check_rms(dtypes[dt], dev, false);
    check_rms(dtypes[dt], dev, true);
    check_silu(dtypes[dt], dev);
    if (dt == 0) { /* 16-bit rotary is reference.ascend's (declined_layouts_served_by_reference) */
        check_rotary(dtypes[dt], dev, true, false, false, true);
        check_rotary(dtypes[dt], dev, false, true, false, true);
    }
    check_norm(dtypes[dt], dev, true, true, false, false);
    assert_clean_protocol();
    fld_shutdown();
    ck_assert_int_eq(fake_count("fake_acl_live_allocs"), 0);
}
END_TEST

/* Every op of reference.ascend, pinned strictly, on strided layouts vs reference.c. */
START_TEST(reference_ops_match_reference)
{
    base_env(NULL);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", ASCEND_REF, 1);
    setenv("FAKE_ACL_WORKSPACE", "4096", 1);
    int dt = _i % 3, dev = _i / 3 ? FLD_DEVICE_ASCEND_DL21 : FLD_DEVICE_ASCEND;
    for (int act = 0; act < N_ACT; act++)
        check_gated(dtypes[dt], dev, act);
    for (int gemma = 0; gemma < 2; gemma++)
        for (int weight = 0; weight < 2; weight++)
            for (int residual = 0; residual < 2; residual++)
                check_norm(dtypes[dt], dev, gemma, weight, residual, true);
    check_norm(dtypes[dt], dev, false, true, true, false);
    check_rotary(dtypes[dt], dev, true, false, false, true);
    check_rotary(dtypes[dt], dev, false, true, false, true);
    check_rotary(dtypes[dt], dev, true, true, true, false);
    check_rotary(dtypes[dt], dev, false, false, true, true);
    if (dt != 0) /* float32 weight and residual with a 16-bit x */
        for (int gemma = 0; gemma < 2; gemma++)
            for (int residual = 0; residual < 2; residual++)
                check_norm_dt(dtypes[dt], FLD_DTYPE_F32, dev, gemma, true, residual, residual);
    assert_clean_protocol();
    fld_shutdown();
    ck_assert_int_eq(fake_count("fake_acl_live_allocs"), 0);
}
END_TEST

/* What vendor.ascend declines, reference.ascend serves (default policy). */
START_TEST(declined_layouts_served_by_reference)
{
    base_env(NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    /* No weight: aclnn's gamma is required, so the composition fills ones. */
    check_norm(FLD_DTYPE_F32, FLD_DEVICE_ASCEND, false, false, false, false);
    ck_assert_msg(strstr(fake_log(), "aclnnInplaceFillScalar"), "log:\n%s", fake_log());
    /* Strided rows: SwiGlu takes contiguous tensors only. */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_gated(FLD_DTYPE_BF16, FLD_DEVICE_ASCEND, ACT_SILU);
    ck_assert_msg(!strstr(fake_log(), "aclnnSwiGlu") && strstr(fake_log(), "aclnnSilu"), "log:\n%s",
                  fake_log());
    /* gemma with a residual: aclnnGemmaRmsNorm has no fused add. */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_norm(FLD_DTYPE_F16, FLD_DEVICE_ASCEND, true, true, true, false);
    ck_assert_msg(!strstr(fake_log(), "aclnnGemmaRmsNorm") && strstr(fake_log(), "aclnnAdds"),
                  "log:\n%s", fake_log());
    /* Contiguous gemma without residual: vendor.ascend's aclnnGemmaRmsNorm. */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_norm(FLD_DTYPE_F16, FLD_DEVICE_ASCEND, true, true, false, false);
    ck_assert_msg(strstr(fake_log(), "aclnnGemmaRmsNorm ws=2048"), "log:\n%s", fake_log());
    /* Rotary with a float32 cache for a bfloat16 query. */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_rotary(FLD_DTYPE_BF16, FLD_DEVICE_ASCEND, true, false, true, true);
    ck_assert_msg(!strstr(fake_log(), "aclnnRotaryPositionEmbedding"), "log:\n%s", fake_log());
    /* 16-bit rotary: the fused operator would round once; reference.ascend rounds each step. */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_rotary(FLD_DTYPE_F16, FLD_DEVICE_ASCEND, false, false, false, true);
    ck_assert_msg(!strstr(fake_log(), "aclnnRotaryPositionEmbedding") &&
                      strstr(fake_log(), "aclnnAdd"),
                  "log:\n%s", fake_log());
    /* float32 rotary stays on the fused operator. */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_rotary(FLD_DTYPE_F32, FLD_DEVICE_ASCEND, true, false, false, true);
    ck_assert_msg(strstr(fake_log(), "aclnnRotaryPositionEmbedding"), "log:\n%s", fake_log());
    /* silu_and_mul on contiguous rows: SwiGlu for float32; Silu then Mul (the
     * activation rounded first) for 16-bit, in vendor.ascend (no Cast). */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_silu(FLD_DTYPE_F32, FLD_DEVICE_ASCEND);
    ck_assert_msg(strstr(fake_log(), "aclnnSwiGlu"), "log:\n%s", fake_log());
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_silu(FLD_DTYPE_BF16, FLD_DEVICE_ASCEND);
    ck_assert_msg(!strstr(fake_log(), "aclnnSwiGlu") && strstr(fake_log(), "aclnnSilu") &&
                      strstr(fake_log(), "aclnnMul") && !strstr(fake_log(), "aclnnCast"),
                  "log:\n%s", fake_log());
    /* float32 weight / residual with 16-bit x: reference.ascend (vendor's fused
     * operators take gamma and residual in x's dtype). */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_norm_dt(FLD_DTYPE_BF16, FLD_DTYPE_F32, FLD_DEVICE_ASCEND, false, true, true, false);
    ck_assert_msg(!strstr(fake_log(), "aclnnAddRmsNorm") && strstr(fake_log(), "aclnnCast"),
                  "log:\n%s", fake_log());
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_norm_dt(FLD_DTYPE_F16, FLD_DTYPE_F32, FLD_DEVICE_ASCEND, true, true, false, false);
    ck_assert_msg(!strstr(fake_log(), "aclnnGemmaRmsNorm") && strstr(fake_log(), "aclnnCast"),
                  "log:\n%s", fake_log());
    /* GeluV2 modes: none (erf) for gelu_and_mul, tanh for gelu_tanh_and_mul. */
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    check_gated(FLD_DTYPE_F32, FLD_DEVICE_ASCEND, ACT_GELU);
    check_gated(FLD_DTYPE_F32, FLD_DEVICE_ASCEND, ACT_GELU_TANH);
    const char *log = fake_log(), *none = strstr(log, "approximate=0");
    ck_assert_msg(none && strstr(none, "approximate=1"), "log:\n%s", log);
    assert_clean_protocol();
}
END_TEST

/*
 * Every 16-bit value through the activations on the fake NPU, against
 * reference.c to the bit: vendor.ascend's silu_and_mul (Silu, then Mul) and
 * reference.ascend's four compositions. _i: dtype (f16, bf16) x impl (2).
 */
START_TEST(activations_every_16bit_input)
{
    base_env(NULL);
    setenv("VLLM_FL_STRICT", "1", 1);
    const bool vendor = _i / 2;
    setenv("VLLM_FL_PER_OP", vendor ? ASCEND_ONLY : ASCEND_REF, 1);
    const DLDataType dt = dtypes[1 + _i % 2];
    const int64_t n = 65536;
    static const double others[] = {1.0, -3.0, 0.7109375, 5.5};
    for (int act = 0; act < (vendor ? 1 : N_ACT); act++) {
        tt_tensor *x = tt_new(dt, 2, (int64_t[]){1, 2 * n});
        const bool second = act == ACT_MUL_SILU;
        uint16_t *codes = (uint16_t *)x->t.data;
        for (int64_t i = 0; i < n; i++) {
            codes[second ? n + i : i] = (uint16_t)i;
            tt_set(x, second ? i : n + i, others[i % 4]);
        }
        tt_tensor *out = tt_new(dt, 2, (int64_t[]){1, n}), *want = tt_new(dt, 2, (int64_t[]){1, n});
        ck_assert_int_eq(fld_policy_push_per_op(CPU_REF), FLD_OK);
        ck_assert_int_eq(act_fns[act](&want->t, &x->t), FLD_OK);
        ck_assert_int_eq(fld_policy_pop(), FLD_OK);
        on_device(x, FLD_DEVICE_ASCEND, 0);
        on_device(out, FLD_DEVICE_ASCEND, 0);
        ck_assert_msg(act_fns[act](&out->t, &x->t) == FLD_OK, "%s: %s", act_names[act],
                      fld_last_error());
        char what[96];
        snprintf(what, sizeof what, "%s %s %s, every input", vendor ? "vendor" : "reference",
                 act_names[act], fld_dtype_name(dt));
        assert_exact(out, want, what);
        tt_free(x), tt_free(out), tt_free(want);
    }
    assert_clean_protocol();
}
END_TEST

/* The aclnn calls, their workspaces and the stream, as the fake logged them. */
START_TEST(call_sequence_workspace_stream)
{
    base_env(NULL);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", ASCEND_ONLY, 1);
    setenv("FAKE_ACL_WORKSPACE", "100000", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_ASCEND, (void *)0x5150), FLD_OK);

    tt_tensor *x = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){3, 64});
    tt_tensor *w = tt_new(FLD_DTYPE_F16, 1, (int64_t[]){64});
    tt_tensor *out = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){3, 64});
    tt_fill_normal(x, 1, 0, 1);
    tt_fill_normal(w, 2, 1, 0.1);
    on_device(x, FLD_DEVICE_ASCEND, 0);
    on_device(w, FLD_DEVICE_ASCEND, 0);
    on_device(out, FLD_DEVICE_ASCEND, 0);
    ck_assert_int_eq(fld_rms_norm(&out->t, &x->t, &w->t, NULL, 1e-5f), FLD_OK);
    ck_assert_int_eq(fld_rms_norm(&out->t, &x->t, &w->t, NULL, 1e-5f), FLD_OK);

    const char *log = fake_log();
    /* Device chosen, rstd scratch, phase one, workspace grown once, phase two on our stream. */
    const char *seq[] = {"aclrtSetDevice device=0",
                         "aclrtMalloc size=65536",
                         "aclnnRmsNormGetWorkspaceSize ws=100000",
                         "aclrtMalloc size=125000",
                         "aclnnRmsNorm ws=100000 stream=0x5150",
                         "aclnnRmsNormGetWorkspaceSize ws=100000",
                         "aclnnRmsNorm ws=100000 stream=0x5150"};
    const char *at = log;
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        const char *hit = strstr(at, seq[i]);
        ck_assert_msg(hit != NULL, "'%s' missing (in order) from the log:\n%s", seq[i], log);
        at = hit + strlen(seq[i]);
    }
    /* Warm: the second call allocated nothing and set no device. */
    ck_assert_msg(!strstr(at, "aclrtMalloc") && !strstr(at, "aclrtSetDevice"), "log:\n%s", log);

    /* Another stream: the workspace's last user is waited for first. */
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_ASCEND, (void *)0x6160), FLD_OK);
    ck_assert_int_eq(fld_rms_norm(&out->t, &x->t, &w->t, NULL, 1e-5f), FLD_OK);
    log = fake_log();
    const char *sync = strstr(at, "aclrtSynchronizeStream stream=0x5150");
    ck_assert_msg(sync && strstr(sync, "aclnnRmsNorm ws=100000 stream=0x6160"), "log:\n%s", log);
    assert_clean_protocol();
    ck_assert_int_gt(fake_count("fake_acl_live_allocs"), 0);
    tt_free(x), tt_free(w), tt_free(out);
    fld_shutdown();
    ck_assert_int_eq(fake_count("fake_acl_live_allocs"), 0);
    ck_assert_int_eq(fake_count("fake_acl_violations"), 0);
}
END_TEST

START_TEST(device_id_selected)
{
    base_env(NULL);
    setenv("FAKE_ACL_DEVICES", "2", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){2, 16});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){2, 8});
    on_device(x, FLD_DEVICE_ASCEND_DL21, 1);
    on_device(out, FLD_DEVICE_ASCEND_DL21, 1);
    ck_assert_int_eq(fld_silu_and_mul(&out->t, &x->t), FLD_OK);
    ck_assert_msg(strstr(fake_log(), "aclrtSetDevice device=1"), "%s", fake_log());
    tt_free(x), tt_free(out);
}
END_TEST

/*
 * The caller's current device survives a call on another one: a thread on
 * device 0 calling on device 1 is on device 0 afterwards (its context made
 * current again), and a call on its own device switches nothing.
 */
START_TEST(device_restored_after_call)
{
    base_env(NULL);
    setenv("FAKE_ACL_DEVICES", "2", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(ascend_plugin().status, FLD_PLUGIN_LOADED);
    int (*current)(void) = (int (*)(void))fake("fake_acl_current_device");
    int (*set_calls)(void) = (int (*)(void))fake("fake_acl_set_device_calls");
    int (*set_device)(int32_t) = (int (*)(int32_t))fake("aclrtSetDevice");
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){2, 16});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){2, 8});
    tt_fill_normal(x, 3, 0, 1);

    ck_assert_int_eq(set_device(0), 0); /* the caller's own choice */
    on_device(x, FLD_DEVICE_ASCEND, 1);
    on_device(out, FLD_DEVICE_ASCEND, 1);
    ck_assert_int_eq(fld_silu_and_mul(&out->t, &x->t), FLD_OK);
    ck_assert_msg(strstr(fake_log(), "aclrtSetDevice device=1") &&
                      strstr(fake_log(), "aclrtSetCurrentContext device=0"),
                  "%s", fake_log());
    ck_assert_int_eq(current(), 0);

    /* The device hooks too. */
    void *p = NULL;
    DLDevice dev1 = {(DLDeviceType)FLD_DEVICE_ASCEND, 1};
    ck_assert_int_eq(fld_device_alloc(dev1, 64, &p), FLD_OK);
    ck_assert_int_eq(current(), 0);
    ck_assert_int_eq(fld_device_synchronize(dev1), FLD_OK);
    ck_assert_int_eq(current(), 0);
    ck_assert_int_eq(fld_device_free(dev1, p), FLD_OK);

    /* Already on the tensors' device: no switch at all. */
    on_device(x, FLD_DEVICE_ASCEND, 0);
    on_device(out, FLD_DEVICE_ASCEND, 0);
    int calls = set_calls();
    ck_assert_int_eq(fld_silu_and_mul(&out->t, &x->t), FLD_OK);
    ck_assert_int_eq(set_calls(), calls);
    ck_assert_int_eq(current(), 0);
    assert_clean_protocol();
    tt_free(x), tt_free(out);
}
END_TEST

/*
 * rotary with a key whose heads fill each token's row (q/k views of a fused
 * qkv tensor, as vLLM has them): one aclnnRopeWithSinCosCache; when that
 * operator refuses (a SoC it does not support), the 4-D
 * aclnnRotaryPositionEmbedding path, with the same result. _i: 0 neox, 1 gptj,
 * 2 neox with the operator refusing, 3 gptj with int32 positions refusing.
 */
START_TEST(rotary_fused_operator_or_4d)
{
    base_env(NULL);
    const bool neox = _i % 2 == 0, refuse = _i >= 2;
    if (refuse)
        setenv("FAKE_ACL_FAIL", "aclnnRopeWithSinCosCacheGetWorkspaceSize", 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", ASCEND_ONLY, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ((fake_acl_reset_fn)fake("fake_acl_log_reset"))();
    const int64_t T = 5, hq = 4, hk = 2, hs = 64, rot = 32, max_pos = 24;
    const int64_t row = (hq + 2 * hk) * hs; /* q | k | v */
    /* float32: vendor.ascend leaves 16-bit rotary to reference.ascend (vLLM's per-step rounding).
     */
    DLDataType dt = FLD_DTYPE_F32;
    tt_tensor *qkv = tt_new(dt, 2, (int64_t[]){T, row});
    tt_fill_normal(qkv, 51, 0.0, 1.0);
    tt_tensor *pos = tt_new(_i == 3 ? TT_INT32 : TT_INT64, 1, &T);
    for (int64_t i = 0; i < T; i++)
        tt_set(pos, i, (double)((i * 5 + 2) % max_pos));
    tt_tensor *cache = tt_new(dt, 2, (int64_t[]){max_pos, rot});
    tt_fill_normal(cache, 52, 0.0, 0.7);
    tt_tensor *ref = tt_clone(qkv);
    /* q and k: views into each token's row, row stride = the whole qkv row. */
    DLTensor q = qkv->t, k = qkv->t, qr = ref->t, kr = ref->t;
    int64_t q_shape[2] = {T, hq * hs}, k_shape[2] = {T, hk * hs}, strides[2] = {row, 1};
    q.shape = qr.shape = q_shape;
    k.shape = kr.shape = k_shape;
    q.strides = k.strides = qr.strides = kr.strides = strides;
    k.byte_offset = kr.byte_offset = qkv->t.byte_offset + (uint64_t)(hq * hs) * 4u;
    ck_assert_int_eq(fld_policy_push_per_op(CPU_REF), FLD_OK);
    ck_assert_int_eq(fld_rotary_embedding(&pos->t, &qr, &kr, hs, &cache->t, neox), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    on_device(pos, FLD_DEVICE_ASCEND, 0);
    on_device(cache, FLD_DEVICE_ASCEND, 0);
    q.device = k.device = pos->t.device;
    int rc = fld_rotary_embedding(&pos->t, &q, &k, hs, &cache->t, neox);
    ck_assert_msg(rc == FLD_OK, "rotary: %s", fld_last_error());
    assert_close(qkv, ref, "rotary on q/k views of qkv (v untouched)");
    const char *log = fake_log();
    if (!refuse) {
        ck_assert_msg(strstr(log, "aclnnRopeWithSinCosCache ws=") &&
                          !strstr(log, "aclnnRotaryPositionEmbedding") &&
                          !strstr(log, "aclnnIndexSelect"),
                      "log:\n%s", log);
    } else {
        ck_assert_msg(!strstr(log, "aclnnRopeWithSinCosCache ws=") &&
                          strstr(log, "aclnnIndexSelect ws=") &&
                          strstr(log, "aclnnRotaryPositionEmbedding ws="),
                      "log:\n%s", log);
    }
    assert_clean_protocol();
    tt_free(qkv), tt_free(ref), tt_free(pos), tt_free(cache);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Injected failures                                                        */
/* ------------------------------------------------------------------------ */

static const char *const rms_failures[] = {
    "aclrtSetDevice",  "aclCreateTensor", "aclrtMalloc", "aclnnAddRmsNormGetWorkspaceSize",
    "aclnnAddRmsNorm",
};

/* A failing CANN call: FLD_EIMPL naming it, outputs and residual untouched. */
START_TEST(rms_failure_leaves_outputs)
{
    base_env(NULL);
    const char *fn = rms_failures[_i];
    setenv("FAKE_ACL_FAIL", fn, 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", ASCEND_ONLY, 1);
    tt_tensor *x = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 64});
    tt_tensor *w = tt_new(FLD_DTYPE_BF16, 1, (int64_t[]){64});
    tt_tensor *r = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 64});
    tt_tensor *out = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 64});
    tt_fill_normal(x, 1, 0, 1), tt_fill_normal(w, 2, 1, 0.1), tt_fill_normal(r, 3, 0, 1);
    tt_fill_normal(out, 4, 0, 1);
    tt_tensor *r0 = tt_clone(r), *out0 = tt_clone(out);
    on_device(x, FLD_DEVICE_ASCEND, 0), on_device(w, FLD_DEVICE_ASCEND, 0);
    on_device(r, FLD_DEVICE_ASCEND, 0), on_device(out, FLD_DEVICE_ASCEND, 0);

    int rc = fld_rms_norm(&out->t, &x->t, &w->t, &r->t, 1e-6f);
    ck_assert_int_eq(rc, FLD_EIMPL);
    ck_assert_msg(strstr(fld_last_error(), "vendor.ascend: rms_norm: ") &&
                      strstr(fld_last_error(), fn) && strstr(fld_last_error(), "injected"),
                  "%s", fld_last_error());
    ck_assert(same_values(out, out0));
    ck_assert(same_values(r, r0));
    assert_clean_protocol();

    /* Not strict: the failure is reported as such, naming the implementation. */
    ck_assert_int_eq(fld_policy_push_strict(false), FLD_OK);
    rc = fld_rms_norm(&out->t, &x->t, &w->t, &r->t, 1e-6f);
    ck_assert_int_eq(rc, FLD_EIMPL);
    ck_assert_msg(strstr(fld_last_error(), "vendor.ascend") && strstr(fld_last_error(), fn), "%s",
                  fld_last_error());
    ck_assert(same_values(out, out0));
    ck_assert(same_values(r, r0));
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    tt_free(x), tt_free(w), tt_free(r), tt_free(out), tt_free(r0), tt_free(out0);
    fld_shutdown();
    ck_assert_int_eq(fake_count("fake_acl_live_allocs"), 0);
    ck_assert_int_eq(fake_count("fake_acl_live_executors"), 0);
}
END_TEST

static const char *const rope_failures[] = {
    "aclnnIndexSelectGetWorkspaceSize",
    "aclnnIndexSelect",
    "aclnnRotaryPositionEmbeddingGetWorkspaceSize",
    "aclnnRotaryPositionEmbedding",
    "aclnnInplaceCopyGetWorkspaceSize",
    "aclnnSwiGluGetWorkspaceSize", /* float32 silu_and_mul */
    "aclnnSwiGlu",
    "aclnnSiluGetWorkspaceSize", /* 16-bit silu_and_mul: Silu, then Mul */
    "aclnnSilu",
    "aclnnMulGetWorkspaceSize",
    "aclnnMul",
};

START_TEST(rope_and_silu_failures)
{
    base_env(NULL);
    const char *fn = rope_failures[_i];
    setenv("FAKE_ACL_FAIL", fn, 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", ASCEND_ONLY, 1);
    int rc;
    if (strstr(fn, "SwiGlu") || strstr(fn, "Silu") || strstr(fn, "Mul")) {
        const DLDataType dt = strstr(fn, "SwiGlu") ? FLD_DTYPE_F32 : FLD_DTYPE_F16;
        tt_tensor *x = tt_new(dt, 2, (int64_t[]){3, 32});
        tt_tensor *out = tt_new(dt, 2, (int64_t[]){3, 16});
        tt_fill_normal(x, 5, 0, 1), tt_fill_normal(out, 6, 0, 1);
        tt_tensor *out0 = tt_clone(out);
        on_device(x, FLD_DEVICE_ASCEND, 0), on_device(out, FLD_DEVICE_ASCEND, 0);
        rc = fld_silu_and_mul(&out->t, &x->t);
        ck_assert(same_values(out, out0));
        tt_free(x), tt_free(out), tt_free(out0);
    } else {
        const int64_t T = 3;
        tt_tensor *pos = tt_new(TT_INT64, 1, &T);
        tt_tensor *q = tt_new(FLD_DTYPE_F32, 3, (int64_t[]){T, 2, 32});
        tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){8, 32});
        tt_fill_normal(q, 7, 0, 1), tt_fill_normal(cache, 8, 0, 1);
        tt_tensor *q0 = tt_clone(q);
        on_device(pos, FLD_DEVICE_ASCEND, 0), on_device(q, FLD_DEVICE_ASCEND, 0);
        on_device(cache, FLD_DEVICE_ASCEND, 0);
        rc = fld_rotary_embedding(&pos->t, &q->t, NULL, 32, &cache->t, true);
        ck_assert(same_values(q, q0));
        tt_free(pos), tt_free(q), tt_free(cache), tt_free(q0);
    }
    ck_assert_int_eq(rc, FLD_EIMPL);
    ck_assert_msg(strstr(fld_last_error(), fn), "%s", fld_last_error());
    assert_clean_protocol();
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Injected failures in reference.ascend (and vendor.ascend gemma)          */
/* ------------------------------------------------------------------------ */

static const char *const ref_failures[] = {
    "aclCreateScalar",
    "aclnnCastGetWorkspaceSize",
    "aclnnCast",
    "aclnnSiluGetWorkspaceSize",
    "aclnnSilu",
    "aclnnGeluV2GetWorkspaceSize",
    "aclnnGeluV2",
    "aclnnMulGetWorkspaceSize",
    "aclnnMul",
    "aclnnAddGetWorkspaceSize",
    "aclnnAdd",
    "aclnnAddsGetWorkspaceSize",
    "aclnnAdds",
    "aclnnInplaceFillScalarGetWorkspaceSize",
    "aclnnInplaceFillScalar",
    "aclnnRmsNormGetWorkspaceSize",
    "aclnnRmsNorm",
    "aclnnIndexSelectGetWorkspaceSize",
    "aclnnIndexSelect",
    "aclnnInplaceCopyGetWorkspaceSize",
    "aclnnInplaceCopy",
    "aclnnGemmaRmsNormGetWorkspaceSize", /* vendor.ascend */
    "aclnnGemmaRmsNorm",                 /* vendor.ascend */
};

enum { CASE_RMS = N_ACT, CASE_GEMMA, CASE_RMS_NO_WEIGHT, CASE_GEMMA_PLAIN, CASE_ROTARY, N_CASES };

/*
 * One call of case `which` on Ascend tensors with fn failing: either it does
 * not use fn (FLD_OK) or it fails with FLD_EIMPL naming fn, every output
 * untouched. Returns whether it failed.
 */
static bool failing_call(int which, const char *fn)
{
    const DLDataType dt = FLD_DTYPE_BF16;
    tt_tensor *ins[4] = {NULL}, *outs[3] = {NULL}, *snap[3] = {NULL};
    int n_in = 0, n_out = 0, rc;
    const char *op;
    if (which < N_ACT) {
        op = act_names[which];
        ins[n_in++] = tt_new_strided(dt, 2, (int64_t[]){3, 64}, (int64_t[]){72, 1});
        outs[n_out++] = tt_new(dt, 2, (int64_t[]){3, 32});
    } else if (which != CASE_ROTARY) {
        const bool gemma = which == CASE_GEMMA || which == CASE_GEMMA_PLAIN;
        op = gemma ? "gemma_rms_norm" : "rms_norm";
        ins[n_in++] = tt_new(dt, 2, (int64_t[]){4, 64});
        ins[n_in++] = which == CASE_RMS_NO_WEIGHT ? NULL : tt_new(dt, 1, (int64_t[]){64});
        outs[n_out++] = tt_new(dt, 2, (int64_t[]){4, 64});
        if (which == CASE_RMS || which == CASE_GEMMA)
            outs[n_out++] = tt_new_strided(dt, 2, (int64_t[]){4, 64}, (int64_t[]){80, 1});
    } else {
        op = "rotary_embedding";
        const int64_t T = 3;
        ins[n_in++] = tt_new(TT_INT64, 1, &T);
        ins[n_in++] = tt_new(dt, 2, (int64_t[]){8, 32});
        outs[n_out++] = tt_new(dt, 3, (int64_t[]){T, 2, 48});
        outs[n_out++] = tt_new(dt, 3, (int64_t[]){T, 1, 48});
    }
    for (int i = 0; i < n_in; i++)
        if (ins[i]) {
            if (ins[i]->t.dtype.code != kDLInt)
                tt_fill_normal(ins[i], 70 + (uint64_t)i, 0.0, 1.0);
            on_device(ins[i], FLD_DEVICE_ASCEND, 0);
        }
    for (int i = 0; i < n_out; i++) {
        tt_fill_normal(outs[i], 80 + (uint64_t)i, 0.0, 1.0);
        snap[i] = tt_clone(outs[i]);
        on_device(outs[i], FLD_DEVICE_ASCEND, 0);
    }
    if (which < N_ACT)
        rc = act_fns[which](&outs[0]->t, &ins[0]->t);
    else if (which != CASE_ROTARY)
        rc = (which == CASE_GEMMA || which == CASE_GEMMA_PLAIN ? fld_gemma_rms_norm : fld_rms_norm)(
            &outs[0]->t, &ins[0]->t, ins[1] ? &ins[1]->t : NULL, n_out > 1 ? &outs[1]->t : NULL,
            1e-6f);
    else
        rc = fld_rotary_embedding(&ins[0]->t, &outs[0]->t, &outs[1]->t, 48, &ins[1]->t, false);

    if (rc != FLD_OK) {
        char want[160];
        snprintf(want, sizeof want, "ascend: %s: %s failed", op, fn);
        ck_assert_msg(rc == FLD_EIMPL && strstr(fld_last_error(), want) &&
                          strstr(fld_last_error(), "injected"),
                      "%s with %s failing: rc %d: %s", op, fn, rc, fld_last_error());
        for (int i = 0; i < n_out; i++)
            ck_assert_msg(same_values(outs[i], snap[i]), "%s with %s failing wrote output %d", op,
                          fn, i);
    }
    for (int i = 0; i < n_in; i++)
        if (ins[i])
            tt_free(ins[i]);
    for (int i = 0; i < n_out; i++)
        tt_free(outs[i]), tt_free(snap[i]);
    return rc != FLD_OK;
}

START_TEST(reference_failures_leave_outputs)
{
    base_env(NULL);
    const char *fn = ref_failures[_i];
    const bool vendor = strstr(fn, "GemmaRmsNorm") != NULL;
    setenv("FAKE_ACL_FAIL", fn, 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", vendor ? ASCEND_ONLY : ASCEND_REF, 1);
    int failed = 0;
    for (int which = 0; which < N_CASES; which++) {
        /* vendor.ascend's gemma takes no residual; reference.ascend any case. */
        if (vendor != (which == CASE_GEMMA_PLAIN))
            continue;
        failed += failing_call(which, fn);
    }
    ck_assert_msg(failed > 0, "no call used %s", fn);
    assert_clean_protocol();
    fld_shutdown();
    ck_assert_int_eq(fake_count("fake_acl_live_allocs"), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Declines, attention backend, device hooks                                */
/* ------------------------------------------------------------------------ */

START_TEST(attention_backend_names)
{
    base_env(NULL);
    setenv("VLLM_FL_PER_OP", "attention_backend=impl:vendor.ascend", 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    const char *name = NULL;
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_ASCEND, false, false, &name), FLD_OK);
    ck_assert_str_eq(name, "ASCEND");
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_ASCEND_DL21, true, false, &name), FLD_OK);
    ck_assert_str_eq(name, "ASCEND_MLA");
    /* Sparse MLA: vendor.ascend declines (the host words the final message). */
    name = NULL;
    int rc = fld_attention_backend(FLD_DEVICE_ASCEND, true, true, &name);
    ck_assert_int_ne(rc, FLD_OK);
    ck_assert_ptr_null(name);
    ck_assert_msg(strstr(fld_last_error(), "attention_backend"), "%s", fld_last_error());
}
END_TEST

START_TEST(device_hooks_round_trip)
{
    base_env(NULL);
    const DLDevice dev = {(DLDeviceType)FLD_DEVICE_ASCEND, 0};
    unsigned char host[300], back[300];
    for (size_t i = 0; i < sizeof host; i++)
        host[i] = (unsigned char)(i * 37 + 1);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(fld_device_alloc(dev, sizeof host, &a), FLD_OK);
    ck_assert_int_eq(fld_device_alloc(dev, sizeof host, &b), FLD_OK);
    ck_assert_int_eq(fake_count("fake_acl_live_allocs"), 2);
    ck_assert_int_eq(fld_device_copy(dev, a, host, sizeof host, FLD_COPY_HOST_TO_DEVICE), FLD_OK);
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_ASCEND, (void *)0x7170), FLD_OK);
    ck_assert_int_eq(fld_device_copy(dev, b, a, sizeof host, FLD_COPY_DEVICE_TO_DEVICE), FLD_OK);
    ck_assert_int_eq(fld_device_synchronize(dev), FLD_OK);
    ck_assert_int_eq(fld_device_copy(dev, back, b, sizeof back, FLD_COPY_DEVICE_TO_HOST), FLD_OK);
    ck_assert_mem_eq(host, back, sizeof host);
    const char *log = fake_log();
    ck_assert_msg(strstr(log, "aclrtMemcpyAsync count=300 kind=3 stream=0x7170") &&
                      strstr(log, "aclrtSynchronizeStream stream=0x7170") &&
                      strstr(log, "aclrtMemcpy count=300 kind=1") &&
                      strstr(log, "aclrtMemcpy count=300 kind=2"),
                  "log:\n%s", log);
    ck_assert_int_eq(fld_device_free(dev, a), FLD_OK);
    ck_assert_int_eq(fld_device_free(dev, b), FLD_OK);
    ck_assert_int_eq(fake_count("fake_acl_live_allocs"), 0);

    setenv("FAKE_ACL_FAIL", "aclrtMalloc", 1);
    void *c = (void *)1;
    ck_assert_int_eq(fld_device_alloc(dev, 64, &c), FLD_EIMPL);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(fld_last_error(), "aclrtMalloc"), "%s", fld_last_error());
    ck_assert_int_eq(fake_count("fake_acl_violations"), 0);
}
END_TEST

static Suite *ascend_suite(void)
{
    Suite *s = suite_create("ascend_plugin");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, no_cann_loads_unavailable);
    tcase_add_test(tc, missing_library_named);
    tcase_add_test(tc, zero_devices);
    tcase_add_test(tc, init_failure_reported);
    tcase_add_test(tc, load_does_not_start_the_runtime);
    tcase_add_test(tc, available_with_fake);
    tcase_add_loop_test(tc, ops_match_reference, 0, 6);
    tcase_add_loop_test(tc, reference_ops_match_reference, 0, 6);
    tcase_add_loop_test(tc, activations_every_16bit_input, 0, 4);
    tcase_add_test(tc, call_sequence_workspace_stream);
    tcase_add_test(tc, device_id_selected);
    tcase_add_test(tc, device_restored_after_call);
    tcase_add_loop_test(tc, rotary_fused_operator_or_4d, 0, 4);
    tcase_add_loop_test(tc, rms_failure_leaves_outputs, 0,
                        (int)(sizeof rms_failures / sizeof rms_failures[0]));
    tcase_add_loop_test(tc, rope_and_silu_failures, 0,
                        (int)(sizeof rope_failures / sizeof rope_failures[0]));
    tcase_add_loop_test(tc, reference_failures_leave_outputs, 0,
                        (int)(sizeof ref_failures / sizeof ref_failures[0]));
    tcase_add_test(tc, declined_layouts_served_by_reference);
    tcase_add_test(tc, attention_backend_names);
    tcase_add_test(tc, device_hooks_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(ascend_suite());
}
