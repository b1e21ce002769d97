/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cpu plugin's runtime (plugins/cpu: isa.c, topology.c, pool.c,
 * cpu_plugin.c): which variant it chooses and what it says about it, its
 * environment variables, and the thread pool -- results independent of the
 * thread count and of how rows are split, fork safety, concurrent callers,
 * per-NUMA-node pools, and unload/reload cycles. The kernels' numerics are
 * tested in test_kernels.c.
 *
 * The variant choice is a pure function of a feature mask: isa.c is
 * compiled into this program to drive it with masks no machine here has.
 * Whole-plugin tests go through the library as an application does, with
 * the ops pinned to vendor.cpu in strict mode. Worker threads are observed
 * in /proc/self/task. Children of fork() report through their exit status
 * and arm alarm() so a hang fails instead of blocking the suite.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/cpu_tensor.h"
#include "util/env.h"
#include "util/harness.h"

/* The choice logic itself (static data and two functions, no dependencies). */
#include "../plugins/cpu/isa.c"

enum { CHILD_ALARM_S = 20 };

/*
 * Under ThreadSanitizer (SANITIZE=thread): a child of a multi-threaded
 * parent that starts threads is what the fork test checks, and TSan would
 * kill it for that by default. Read by the TSan runtime only.
 */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* A clean environment with the compute ops pinned to vendor.cpu, strictly. */
static void base_env(void)
{
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP",
           "silu_and_mul=impl:vendor.cpu;rms_norm=impl:vendor.cpu;"
           "rotary_embedding=impl:vendor.cpu",
           1);
}

struct cpu_status {
    bool found;
    fld_plugin_status status;
    char reason[1024];
    char detail[1024];
};

static int find_cpu(const fld_plugin_info *info, void *user)
{
    struct cpu_status *s = user;
    if (strcmp(info->name, "cpu") != 0)
        return 0;
    s->found = true;
    s->status = info->status;
    snprintf(s->reason, sizeof s->reason, "%s", info->reason ? info->reason : "");
    snprintf(s->detail, sizeof s->detail, "%s", info->detail ? info->detail : "");
    return 1;
}

/* Initialises the library and reads the cpu plugin's record. */
static struct cpu_status cpu_plugin(void)
{
    struct cpu_status s = {0};
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_foreach_plugin(find_cpu, &s);
    ck_assert_msg(s.found, "no plugin named cpu (build the plugins; FLD_BUILDDIR?)");
    return s;
}

static struct cpu_status cpu_plugin_loaded(void)
{
    struct cpu_status s = cpu_plugin();
    ck_assert_msg(s.status == FLD_PLUGIN_LOADED, "cpu plugin not loaded: %s", s.reason);
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_str_eq(id, "vendor.cpu");
    return s;
}

static void assert_contains(const char *text, const char *part)
{
    ck_assert_msg(strstr(text, part) != NULL, "'%s' does not contain '%s'", text, part);
}

/* The variant named by a detail line ("isa avx512 (...); ..."). */
static void detail_isa(const char *detail, char *out, size_t size)
{
    ck_assert_msg(strncmp(detail, "isa ", 4) == 0, "detail '%s' does not start with 'isa '",
                  detail);
    size_t n = strcspn(detail + 4, " ;");
    ck_assert_uint_lt(n, size);
    memcpy(out, detail + 4, n);
    out[n] = '\0';
}

/*
 * Worker threads of the pool in this process (named fld-cpu<node>.<i>); on
 * cpus, when not NULL, only those whose affinity is that CPU list ("0-1").
 */
static int workers_on(const char *cpus)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_msg(d != NULL, "/proc/self/task: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], line[256] = "", have[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* a thread that just ended */
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        fclose(f);
        if (strncmp(line, "fld-cpu", 7) != 0)
            continue;
        if (cpus) {
            snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
            f = fopen(path, "r");
            if (!f)
                continue;
            while (fgets(line, sizeof line, f))
                if (sscanf(line, "Cpus_allowed_list: %63s", have) == 1)
                    break;
            fclose(f);
            if (strcmp(have, cpus) != 0)
                continue;
        }
        n++;
    }
    closedir(d);
    return n;
}

static int workers(void)
{
    return workers_on(NULL);
}

/* A joined thread can linger in /proc for a moment; wait a little for it to go. */
static int workers_settled(int want)
{
    int n = workers();
    for (int i = 0; i < 200 && n != want; i++) {
        usleep(1000);
        n = workers();
    }
    return n;
}

static void set_threads(const char *v)
{
    ck_assert_int_eq(setenv("VLLM_FL_CPU_THREADS", v, 1), 0);
}

static bool same_bytes(const tt_tensor *a, const tt_tensor *b)
{
    return a->buf_bytes == b->buf_bytes && memcmp(a->buf, b->buf, a->buf_bytes) == 0;
}

/* ---- the ops under test: inputs and one run each ---- */

struct norm_case {
    tt_tensor *x, *w, *res, *out;
};

/* rms_norm with residual, out aliasing nothing; rows x h of dt, strided rows. */
static struct norm_case norm_new(DLDataType dt, int64_t rows, int64_t h, uint64_t seed)
{
    struct norm_case c;
    c.x = tt_new_strided(dt, 2, (int64_t[]){rows, h}, (int64_t[]){h + 16, 1});
    c.w = tt_new(dt, 1, (int64_t[]){h});
    c.res = tt_new(dt, 2, (int64_t[]){rows, h});
    c.out = tt_new(dt, 2, (int64_t[]){rows, h});
    tt_fill_normal(c.x, seed, 0.0, 1.0);
    tt_fill_normal(c.w, seed + 1, 1.0, 0.1);
    tt_fill_normal(c.res, seed + 2, 0.0, 1.0);
    return c;
}

static void norm_run(struct norm_case *c)
{
    ck_assert_int_eq(fld_rms_norm(&c->out->t, &c->x->t, &c->w->t, &c->res->t, 1e-6f), FLD_OK);
}

static void norm_free(struct norm_case *c)
{
    tt_free(c->x);
    tt_free(c->w);
    tt_free(c->res);
    tt_free(c->out);
}

/* Same results, and nothing written outside the views. */
static void norm_assert_same(const struct norm_case *a, const struct norm_case *b)
{
    ck_assert_msg(same_bytes(a->out, b->out), "rms_norm out differs");
    ck_assert_msg(same_bytes(a->res, b->res), "rms_norm residual differs");
    ck_assert(tt_padding_intact(a->x) && tt_padding_intact(a->out) && tt_padding_intact(a->res));
}

struct act_case {
    tt_tensor *x, *out;
};

static struct act_case act_new(DLDataType dt, int64_t rows, int64_t d, uint64_t seed)
{
    struct act_case c;
    c.x = tt_new(dt, 2, (int64_t[]){rows, 2 * d});
    c.out = tt_new_strided(dt, 2, (int64_t[]){rows, d}, (int64_t[]){d + 8, 1});
    tt_fill_normal(c.x, seed, 0.0, 2.0);
    return c;
}

static void act_run(struct act_case *c)
{
    ck_assert_int_eq(fld_silu_and_mul(&c->out->t, &c->x->t), FLD_OK);
}

/* An elementwise activation: out [rows, d] of x [rows, d], its rows padded. */
static struct act_case unary_new(DLDataType dt, int64_t rows, int64_t d, uint64_t seed)
{
    struct act_case c;
    c.x = tt_new(dt, 2, (int64_t[]){rows, d});
    c.out = tt_new_strided(dt, 2, (int64_t[]){rows, d}, (int64_t[]){d + 8, 1});
    tt_fill_normal(c.x, seed, 0.0, 2.0);
    return c;
}

static void unary_run(struct act_case *c)
{
    ck_assert_int_eq(fld_gelu_new(&c->out->t, &c->x->t), FLD_OK);
}

static void act_free(struct act_case *c)
{
    tt_free(c->x);
    tt_free(c->out);
}

struct rope_case {
    tt_tensor *pos, *q, *k, *cache;
    int64_t head_size;
};

static struct rope_case rope_new(DLDataType dt, int64_t tokens, uint64_t seed)
{
    const int64_t hq = 8, hk = 2, head = 128, rot = 64, max_pos = 4096;
    struct rope_case c = {.head_size = head};
    c.pos = tt_new(TT_INT64, 1, (int64_t[]){tokens});
    for (int64_t t = 0; t < tokens; t++)
        tt_set(c.pos, t, (double)((t * 7919) % max_pos));
    c.q = tt_new(dt, 2, (int64_t[]){tokens, hq * head});
    c.k = tt_new(dt, 2, (int64_t[]){tokens, hk * head});
    c.cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){max_pos, rot});
    tt_fill_normal(c.q, seed, 0.0, 1.0);
    tt_fill_normal(c.k, seed + 1, 0.0, 1.0);
    tt_fill_normal(c.cache, seed + 2, 0.0, 0.7);
    return c;
}

static void rope_run(struct rope_case *c)
{
    ck_assert_int_eq(
        fld_rotary_embedding(&c->pos->t, &c->q->t, &c->k->t, c->head_size, &c->cache->t, true),
        FLD_OK);
}

static void rope_free(struct rope_case *c)
{
    tt_free(c->pos);
    tt_free(c->q);
    tt_free(c->k);
    tt_free(c->cache);
}

/* ------------------------------------------------------------------------ */
/* The variant choice (pure)                                                */
/* ------------------------------------------------------------------------ */

#if defined(__x86_64__)
#define AVX2_ALL                                                                                   \
    (FLD_CPU_FEAT_AVX | FLD_CPU_FEAT_AVX2 | FLD_CPU_FEAT_FMA | FLD_CPU_FEAT_F16C | FLD_CPU_OS_AVX)
#define AVX512_ALL                                                                                 \
    (AVX2_ALL | FLD_CPU_FEAT_AVX512F | FLD_CPU_FEAT_AVX512BW | FLD_CPU_FEAT_AVX512VL |             \
     FLD_CPU_FEAT_AVX512DQ | FLD_CPU_OS_AVX512)
#define BF16_ALL (AVX512_ALL | FLD_CPU_FEAT_AVX512_BF16)

static const char *choose(uint32_t features, const char *cap, char *why, size_t size)
{
    int i = fld__cpu_isa_choose(features, cap, why, size);
    ck_assert_msg(i >= 0 && i < fld__cpu_isa_count, "choice %d for cap %s: %s", i,
                  cap ? cap : "(none)", why);
    return fld__cpu_isa_names[i];
}

START_TEST(test_choice_best_and_caps)
{
    char why[256];
    ck_assert_str_eq(choose(BF16_ALL, NULL, why, sizeof why), "avx512_bf16");
    ck_assert_str_eq(why, "");
    ck_assert_str_eq(choose(BF16_ALL, "avx512", why, sizeof why), "avx512");
    ck_assert_str_eq(why, "capped by VLLM_FL_CPU_ISA=avx512");
    ck_assert_str_eq(choose(BF16_ALL, "avx2", why, sizeof why), "avx2");
    ck_assert_str_eq(choose(BF16_ALL, "portable", why, sizeof why), "portable");
    ck_assert_str_eq(why, "capped by VLLM_FL_CPU_ISA=portable");

    /* A cap above the CPU: the best lower variant, and why. */
    ck_assert_str_eq(choose(AVX512_ALL, "avx512_bf16", why, sizeof why), "avx512");
    ck_assert_str_eq(why, "capped by VLLM_FL_CPU_ISA=avx512_bf16; avx512_bf16 not supported by "
                          "this CPU");
    ck_assert_str_eq(choose(AVX512_ALL, NULL, why, sizeof why), "avx512");
    ck_assert_str_eq(why, "avx512_bf16 not supported by this CPU");
    ck_assert_str_eq(choose(AVX2_ALL, "avx512", why, sizeof why), "avx2");
    ck_assert_str_eq(why, "capped by VLLM_FL_CPU_ISA=avx512; avx512_bf16, avx512 not supported "
                          "by this CPU");
    ck_assert_str_eq(choose(0, NULL, why, sizeof why), "portable");
    ck_assert_str_eq(why, "avx512_bf16, avx512, avx2 not supported by this CPU");
}
END_TEST

START_TEST(test_choice_needs_every_feature)
{
    char why[256];
    /* Each requirement of avx2 and of avx512 alone keeps the variant out. */
    const uint32_t avx2_bits[] = {FLD_CPU_FEAT_AVX, FLD_CPU_FEAT_AVX2, FLD_CPU_FEAT_FMA,
                                  FLD_CPU_FEAT_F16C};
    for (size_t i = 0; i < sizeof avx2_bits / sizeof avx2_bits[0]; i++)
        ck_assert_str_eq(choose(BF16_ALL & ~avx2_bits[i], NULL, why, sizeof why), "portable");
    const uint32_t avx512_bits[] = {FLD_CPU_FEAT_AVX512F, FLD_CPU_FEAT_AVX512BW,
                                    FLD_CPU_FEAT_AVX512VL, FLD_CPU_FEAT_AVX512DQ};
    for (size_t i = 0; i < sizeof avx512_bits / sizeof avx512_bits[0]; i++)
        ck_assert_str_eq(choose(BF16_ALL & ~avx512_bits[i], NULL, why, sizeof why), "avx2");
}
END_TEST

START_TEST(test_choice_os_support)
{
    char why[256];
    /* The CPU has AVX-512 but the OS does not save ZMM/opmask state. */
    ck_assert_str_eq(choose(BF16_ALL & ~FLD_CPU_OS_AVX512, NULL, why, sizeof why), "avx2");
    ck_assert_str_eq(why, "avx512_bf16, avx512 not enabled by the OS");
    /* No AVX state at all: only the portable kernels are safe. */
    ck_assert_str_eq(choose(BF16_ALL & ~(uint32_t)FLD_CPU_OS_AVX, NULL, why, sizeof why),
                     "portable");
    /* Both reasons at once: each variant is listed under its own. */
    ck_assert_str_eq(choose(AVX512_ALL & ~FLD_CPU_OS_AVX512, NULL, why, sizeof why), "avx2");
    ck_assert_str_eq(why, "avx512_bf16 not supported by this CPU; avx512 not enabled by the OS");
}
END_TEST
#endif

START_TEST(test_choice_unknown_cap)
{
    char why[256];
    ck_assert_int_eq(fld__cpu_isa_choose(~0u, "avx9000", why, sizeof why), -1);
    assert_contains(why, "VLLM_FL_CPU_ISA='avx9000'");
    for (int i = 0; i < fld__cpu_isa_count; i++)
        assert_contains(why, fld__cpu_isa_names[i]);
    ck_assert_int_eq(fld__cpu_isa_choose(~0u, "", why, sizeof why), -1);
    ck_assert_int_eq(fld__cpu_isa_choose(~0u, "AVX2", why, sizeof why), -1);
#if defined(__x86_64__)
    ck_assert_int_eq(fld__cpu_isa_choose(~0u, "neon", why, sizeof why), -1);
#endif
    /* The last variant is always there and needs nothing. */
    ck_assert_str_eq(fld__cpu_isa_names[fld__cpu_isa_count - 1], "portable");
    ck_assert_int_eq(fld__cpu_isa_choose(0, "portable", why, sizeof why), fld__cpu_isa_count - 1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The detail line and the environment                                      */
/* ------------------------------------------------------------------------ */

/* The best variant at or below cap index, from the compiler's own CPU check. */
static int oracle_best(int cap)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    const bool runs[] = {bf16, avx512, avx2, true};
#else
    const bool runs[] = {true, true}; /* neon is mandatory on arm64 */
#endif
    for (int i = cap; i < fld__cpu_isa_count; i++)
        if (runs[i])
            return i;
    return fld__cpu_isa_count - 1;
}

/*
 * "a, b not ": the variants better than best that the oracle says this CPU
 * cannot run, in the plugin's order, as the detail names them.
 */
static void oracle_unrunnable(int best, char *out, size_t size)
{
    out[0] = '\0';
    for (int i = 0; i < best; i++) {
        if (oracle_best(i) == i)
            continue;
        size_t len = strlen(out);
        snprintf(out + len, size - len, "%s%s", len ? ", " : "", fld__cpu_isa_names[i]);
    }
    size_t len = strlen(out);
    snprintf(out + len, size - len, " not ");
}

START_TEST(test_detail_default)
{
    base_env();
    struct cpu_status s = cpu_plugin_loaded();
    char isa[32];
    detail_isa(s.detail, isa, sizeof isa);
    ck_assert_str_eq(isa, fld__cpu_isa_names[oracle_best(0)]);
    ck_assert_msg(strstr(s.detail, "capped by") == NULL, "no cap set: %s", s.detail);
    assert_contains(s.detail, " in NUMA node ");
    assert_contains(s.detail, "; parallel from ");
    assert_contains(s.detail, " KiB; non-temporal stores from ");
    assert_contains(s.detail, "; norms prefetch rows above ");
    ck_assert_msg(strchr(s.detail, '\n') == NULL, "one line: %s", s.detail);
}
END_TEST

START_TEST(test_detail_each_cap)
{
    base_env();
    for (int cap = 0; cap < fld__cpu_isa_count; cap++) {
        const char *name = fld__cpu_isa_names[cap];
        setenv("VLLM_FL_CPU_ISA", name, 1);
        struct cpu_status s = cpu_plugin_loaded();
        char isa[32], want[128];
        detail_isa(s.detail, isa, sizeof isa);
        int best = oracle_best(cap);
        ck_assert_msg(strcmp(isa, fld__cpu_isa_names[best]) == 0, "cap %s: '%s', want %s", name,
                      s.detail, fld__cpu_isa_names[best]);
        snprintf(want, sizeof want, "(capped by VLLM_FL_CPU_ISA=%s", name);
        assert_contains(s.detail, want);
        if (best != cap) {
            /*
             * Above the CPU: the detail lists, best first, every variant
             * better than the one chosen that this CPU cannot run.
             */
            oracle_unrunnable(best, want, sizeof want);
            assert_contains(s.detail, want);
            assert_contains(want, name);
        }
        /* The variant runs: a call of each kind succeeds. */
        struct norm_case n = norm_new(FLD_DTYPE_BF16, 3, 72, 7);
        norm_run(&n);
        norm_free(&n);
        fld_shutdown();
    }
}
END_TEST

START_TEST(test_isa_unknown_rejects_plugin)
{
    const char *bad[] = {"avx9000", "", "AVX2", "portable "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        base_env();
        unsetenv("VLLM_FL_PER_OP");
        setenv("VLLM_FL_CPU_ISA", bad[i], 1);
        struct cpu_status s = cpu_plugin();
        ck_assert_int_eq(s.status, FLD_PLUGIN_REJECTED);
        char want[64];
        snprintf(want, sizeof want, "VLLM_FL_CPU_ISA='%s'", bad[i]);
        assert_contains(s.reason, want);
        for (int v = 0; v < fld__cpu_isa_count; v++)
            assert_contains(s.reason, fld__cpu_isa_names[v]);
        /* Nothing of it stays registered: the reference runs rms_norm. */
        const char *id = NULL;
        ck_assert_int_eq(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
        ck_assert_str_eq(id, "reference.c");
        fld_shutdown();
    }
}
END_TEST

START_TEST(test_threads_invalid_rejects_plugin)
{
    const char *bad[] = {"0", "-1", "1025", "2x", "", " 2", "+2", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        base_env();
        unsetenv("VLLM_FL_PER_OP"); /* strict: it would name an impl the rejection removes */
        set_threads(bad[i]);
        struct cpu_status s = cpu_plugin();
        ck_assert_msg(s.status == FLD_PLUGIN_REJECTED, "VLLM_FL_CPU_THREADS='%s' accepted", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "VLLM_FL_CPU_THREADS='%s'", bad[i]);
        assert_contains(s.reason, want);
        assert_contains(s.reason, "1 to 1024");
        fld_shutdown();
    }
    const char *good[] = {"1", "1024", "007"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        base_env();
        set_threads(good[i]);
        struct cpu_status s = cpu_plugin_loaded();
        char want[64];
        snprintf(want, sizeof want, "(VLLM_FL_CPU_THREADS=%s)", good[i]);
        assert_contains(s.detail, want);
        fld_shutdown();
    }
}
END_TEST

/* Each value of variable name rejects the plugin, with a reason naming the variable. */
static void assert_each_rejects(const char *name, const char *const *values, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        base_env();
        unsetenv("VLLM_FL_PER_OP"); /* strict: it would name an impl the rejection removes */
        setenv(name, values[i], 1);
        struct cpu_status s = cpu_plugin();
        ck_assert_msg(s.status == FLD_PLUGIN_REJECTED, "%s='%s' accepted", name, values[i]);
        assert_contains(s.reason, name);
        fld_shutdown();
    }
}

START_TEST(test_parallel_min_kb)
{
    const char *bad[] = {"-1", "1048577", "1k", ""};
    assert_each_rejects("VLLM_FL_CPU_PARALLEL_MIN_KB", bad, sizeof bad / sizeof bad[0]);
    base_env();
    setenv("VLLM_FL_CPU_PARALLEL_MIN_KB", "1048576", 1);
    assert_contains(cpu_plugin_loaded().detail, "parallel from 1048576 KiB");
    fld_shutdown();

    /* 0: even a tiny call with two rows goes to the pool. */
    setenv("VLLM_FL_CPU_PARALLEL_MIN_KB", "0", 1);
    set_threads("2");
    assert_contains(cpu_plugin_loaded().detail, "parallel from 0 KiB");
    int before = workers();
    struct act_case c = act_new(FLD_DTYPE_F32, 2, 4, 1);
    act_run(&c);
    ck_assert_int_eq(workers(), before + 1);
    act_free(&c);
}
END_TEST

START_TEST(test_lookup_values)
{
    const char *bad[] = {"Gather", "vector", ""};
    assert_each_rejects("VLLM_FL_CPU_LOOKUP", bad, sizeof bad / sizeof bad[0]);
    const char *good[] = {"gather", "scalar"};
    for (size_t i = 0; i < 2; i++) {
        base_env();
        setenv("VLLM_FL_CPU_LOOKUP", good[i], 1);
        setenv("VLLM_FL_CPU_ISA", "portable", 1); /* loads on every CPU */
        struct cpu_status s = cpu_plugin_loaded();
        ck_assert_msg(strstr(s.detail, "scalar loads") == NULL, "portable: %s", s.detail);
        fld_shutdown();
        unsetenv("VLLM_FL_CPU_ISA");
        /* The variant this CPU runs: avx2 says which lookup it was given. */
        s = cpu_plugin_loaded();
        if (strncmp(s.detail, "isa avx2 ", 9) == 0)
            ck_assert_msg((strstr(s.detail, "scalar loads") != NULL) == (i == 1), "%s: %s", good[i],
                          s.detail);
        fld_shutdown();
    }
}
END_TEST

START_TEST(test_act16_values)
{
    const char *bad[] = {"Table", "float32", ""};
    assert_each_rejects("VLLM_FL_CPU_ACT16", bad, sizeof bad / sizeof bad[0]);
    const char *good[] = {"table", "compute"};
    for (size_t i = 0; i < 2; i++) {
        base_env();
        setenv("VLLM_FL_CPU_ACT16", good[i], 1);
        setenv("VLLM_FL_CPU_ISA", "portable", 1); /* loads on every CPU */
        struct cpu_status s = cpu_plugin_loaded();
        ck_assert_msg(strstr(s.detail, "computed in float32") == NULL, "portable: %s", s.detail);
        fld_shutdown();
        unsetenv("VLLM_FL_CPU_ISA");
        /* The variant this CPU runs: avx2 says which it was given, in either activation form. */
        for (int torch = 0; torch < 2; torch++) {
            if (torch)
                setenv("VLLM_FL_CPU_ACTIVATIONS", "torch", 1);
            s = cpu_plugin_loaded();
            if (strncmp(s.detail, "isa avx2 ", 9) == 0)
                ck_assert_msg((strstr(s.detail, "16-bit activations computed in float32") !=
                               NULL) == (i == 1),
                              "%s%s: %s", good[i], torch ? ", torch" : "", s.detail);
            fld_shutdown();
        }
        unsetenv("VLLM_FL_CPU_ACTIVATIONS");
    }
}
END_TEST

START_TEST(test_stream_min_kb)
{
    const char *bad[] = {"-1", "1073741825", "4M", ""};
    assert_each_rejects("VLLM_FL_CPU_STREAM_MIN_KB", bad, sizeof bad / sizeof bad[0]);
    /* Unset: the default's reason, not the variable, in the detail. */
    base_env();
    struct cpu_status s = cpu_plugin_loaded();
    ck_assert_msg(strstr(s.detail, "VLLM_FL_CPU_STREAM_MIN_KB") == NULL, "%s", s.detail);
    fld_shutdown();

    /* Every output streamed (0) and none (1 TiB): the same bytes, odd widths and strided
     * outputs included, every dtype, gated and elementwise activations. */
    const DLDataType dts[] = {FLD_DTYPE_F32, FLD_DTYPE_BF16, FLD_DTYPE_F16};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        struct norm_case n[2] = {norm_new(dts[i], 37, 1003, 31), norm_new(dts[i], 37, 1003, 31)};
        struct act_case a[2] = {act_new(dts[i], 29, 517, 32), act_new(dts[i], 29, 517, 32)};
        struct act_case u[2] = {unary_new(dts[i], 29, 517, 33), unary_new(dts[i], 29, 517, 33)};
        const char *kb[2] = {"0", "1073741824"};
        const char *size[2] = {"0 KiB", "1048576 MiB"};
        for (int k = 0; k < 2; k++) {
            base_env();
            setenv("VLLM_FL_CPU_STREAM_MIN_KB", kb[k], 1);
            char want[96];
            snprintf(want, sizeof want,
                     "non-temporal stores from %s (VLLM_FL_CPU_STREAM_MIN_KB=%s)", size[k], kb[k]);
            assert_contains(cpu_plugin_loaded().detail, want);
            norm_run(&n[k]);
            act_run(&a[k]);
            unary_run(&u[k]);
            fld_shutdown();
        }
        norm_assert_same(&n[0], &n[1]);
        ck_assert_msg(same_bytes(a[0].out, a[1].out), "silu_and_mul differs (dtype %zu)", i);
        ck_assert_msg(same_bytes(u[0].out, u[1].out), "gelu_new differs (dtype %zu)", i);
        for (int k = 0; k < 2; k++) {
            norm_free(&n[k]);
            act_free(&a[k]);
            act_free(&u[k]);
        }
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The pool                                                                 */
/* ------------------------------------------------------------------------ */

START_TEST(test_small_calls_stay_inline)
{
    base_env();
    set_threads("2");
    cpu_plugin_loaded();
    int before = workers();
    /* One row, and a few rows far below the threshold: no pool is built. */
    struct norm_case one = norm_new(FLD_DTYPE_F32, 1, 1 << 16, 3);
    norm_run(&one);
    struct act_case few = act_new(FLD_DTYPE_BF16, 4, 64, 4);
    act_run(&few);
    ck_assert_int_eq(workers(), before);
    /* A large one builds it: one worker, the caller being the other thread. */
    struct act_case big = act_new(FLD_DTYPE_F32, 256, 4096, 5);
    act_run(&big);
    ck_assert_int_eq(workers(), before + 1);
    act_run(&big);
    ck_assert_int_eq(workers(), before + 1);
    norm_free(&one);
    act_free(&few);
    act_free(&big);
}
END_TEST

/* Results with VLLM_FL_CPU_THREADS=threads (and the given threshold), in a fresh init. */
static void run_all_with(const char *threads, const char *min_kb, char *isa, size_t isa_size,
                         struct norm_case *n, struct act_case *a, struct rope_case *r)
{
    set_threads(threads);
    if (min_kb)
        setenv("VLLM_FL_CPU_PARALLEL_MIN_KB", min_kb, 1);
    else
        unsetenv("VLLM_FL_CPU_PARALLEL_MIN_KB");
    struct cpu_status s = cpu_plugin_loaded();
    detail_isa(s.detail, isa, isa_size);
    if (n)
        norm_run(n);
    if (a)
        act_run(a);
    if (r)
        rope_run(r);
    fld_shutdown();
}

START_TEST(test_two_threads_bit_identical)
{
    base_env();
    const DLDataType dts[] = {FLD_DTYPE_F32, FLD_DTYPE_BF16, FLD_DTYPE_F16};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        /* Several MiB each: far above the default threshold. */
        struct norm_case n1 = norm_new(dts[i], 301, 4096, 11), n2 = norm_new(dts[i], 301, 4096, 11);
        struct act_case a1 = act_new(dts[i], 257, 4096, 12), a2 = act_new(dts[i], 257, 4096, 12);
        struct rope_case r1 = rope_new(dts[i], 513, 13), r2 = rope_new(dts[i], 513, 13);
        char isa1[32], isa2[32];
        run_all_with("1", NULL, isa1, sizeof isa1, &n1, &a1, &r1);
        int before = workers();
        set_threads("2");
        struct cpu_status s = cpu_plugin_loaded();
        detail_isa(s.detail, isa2, sizeof isa2);
        norm_run(&n2);
        ck_assert_int_eq(workers(), before + 1); /* it did run on the pool */
        act_run(&a2);
        rope_run(&r2);
        fld_shutdown();
        ck_assert_str_eq(isa1, isa2);
        norm_assert_same(&n1, &n2);
        ck_assert_msg(same_bytes(a1.out, a2.out), "silu_and_mul differs (dtype %zu)", i);
        ck_assert_msg(same_bytes(r1.q, r2.q) && same_bytes(r1.k, r2.k), "rotary differs");
        norm_free(&n1);
        norm_free(&n2);
        act_free(&a1);
        act_free(&a2);
        rope_free(&r1);
        rope_free(&r2);
    }
}
END_TEST

START_TEST(test_odd_rows_split)
{
    base_env();
    const int64_t rows[] = {1, 2, 3, 5, 7};
    const char *threads[] = {"2", "3", "4", "8"};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        struct norm_case ref_n = norm_new(FLD_DTYPE_BF16, rows[r], 100, 21);
        struct act_case ref_a = act_new(FLD_DTYPE_F32, rows[r], 37, 22);
        struct rope_case ref_r = rope_new(FLD_DTYPE_F16, rows[r], 23);
        char isa_ref[32], isa[32];
        run_all_with("1", "0", isa_ref, sizeof isa_ref, &ref_n, &ref_a, &ref_r);
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            struct norm_case n = norm_new(FLD_DTYPE_BF16, rows[r], 100, 21);
            struct act_case a = act_new(FLD_DTYPE_F32, rows[r], 37, 22);
            struct rope_case rr = rope_new(FLD_DTYPE_F16, rows[r], 23);
            /* Threshold 0: every call with two rows or more is split. */
            run_all_with(threads[t], "0", isa, sizeof isa, &n, &a, &rr);
            ck_assert_str_eq(isa, isa_ref);
            /* A row done twice would add the residual twice; one skipped stays 0. */
            norm_assert_same(&ref_n, &n);
            ck_assert_msg(same_bytes(ref_a.out, a.out), "rows %ld threads %s: silu differs",
                          (long)rows[r], threads[t]);
            ck_assert(same_bytes(ref_r.q, rr.q) && same_bytes(ref_r.k, rr.k));
            norm_free(&n);
            act_free(&a);
            rope_free(&rr);
        }
        norm_free(&ref_n);
        act_free(&ref_a);
        rope_free(&ref_r);
    }
}
END_TEST

START_TEST(test_fork_after_parallel_call)
{
    base_env();
    set_threads("2");
    cpu_plugin_loaded();
    struct norm_case parent = norm_new(FLD_DTYPE_F32, 256, 4096, 31);
    struct norm_case child_in = norm_new(FLD_DTYPE_F32, 256, 4096, 31);
    int before = workers();
    norm_run(&parent);
    ck_assert_int_eq(workers(), before + 1);

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* not the handler Check may have set */
        alarm(CHILD_ALARM_S);
        /* The parent's worker does not exist here; a new pool is built. */
        int t0 = workers();
        if (fld_rms_norm(&child_in.out->t, &child_in.x->t, &child_in.w->t, &child_in.res->t,
                         1e-6f) != FLD_OK) {
            fprintf(stderr, "child: rms_norm failed: %s\n", fld_last_error());
            _exit(1);
        }
        if (workers() != t0 + 1) {
            fprintf(stderr, "child: %d threads after the call, %d before\n", workers(), t0);
            _exit(2);
        }
        if (!same_bytes(child_in.out, parent.out) || !same_bytes(child_in.res, parent.res)) {
            fprintf(stderr, "child: result differs from the parent's\n");
            _exit(3);
        }
        /* Again, and once more after a fork of the child itself. */
        struct act_case a = act_new(FLD_DTYPE_BF16, 256, 4096, 32);
        act_run(&a);
        pid_t grandchild = fork();
        if (grandchild == 0) {
            signal(SIGALRM, SIG_DFL); /* not the handler Check may have set */
            alarm(CHILD_ALARM_S);
            act_run(&a);
            act_free(&a); /* valgrind checks a forked child's leaks too */
            _exit(0);
        }
        int st = 0;
        if (grandchild < 0 || waitpid(grandchild, &st, 0) != grandchild || !WIFEXITED(st) ||
            WEXITSTATUS(st) != 0) {
            fprintf(stderr, "grandchild failed (status 0x%x)\n", st);
            _exit(4);
        }
        act_free(&a);
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st), "child killed by signal %d (SIGALRM = hang)",
                  WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    /* The parent's pool still works. */
    struct norm_case again = norm_new(FLD_DTYPE_F32, 256, 4096, 31);
    norm_run(&again);
    norm_assert_same(&parent, &again);
    norm_free(&parent);
    norm_free(&child_in);
    norm_free(&again);
}
END_TEST

/* ---- two application threads calling at once ---- */

enum { CONCURRENT_ROUNDS = 40 };

struct caller {
    pthread_barrier_t *barrier;
    struct norm_case *expect_n;
    struct act_case *expect_a;
    int failures;
};

static void *concurrent_caller(void *arg)
{
    struct caller *c = arg;
    for (int round = 0; round < CONCURRENT_ROUNDS; round++) {
        struct norm_case n = norm_new(FLD_DTYPE_BF16, 128, 2048, 41);
        struct act_case a = act_new(FLD_DTYPE_F32, 128, 2048, 42);
        pthread_barrier_wait(c->barrier);
        if (fld_rms_norm(&n.out->t, &n.x->t, &n.w->t, &n.res->t, 1e-6f) != FLD_OK ||
            fld_silu_and_mul(&a.out->t, &a.x->t) != FLD_OK)
            c->failures++;
        if (!same_bytes(n.out, c->expect_n->out) || !same_bytes(n.res, c->expect_n->res) ||
            !same_bytes(a.out, c->expect_a->out))
            c->failures++;
        norm_free(&n);
        act_free(&a);
    }
    return NULL;
}

START_TEST(test_concurrent_callers)
{
    base_env();
    set_threads("2");
    cpu_plugin_loaded();
    struct norm_case n = norm_new(FLD_DTYPE_BF16, 128, 2048, 41);
    struct act_case a = act_new(FLD_DTYPE_F32, 128, 2048, 42);
    norm_run(&n);
    act_run(&a);

    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    struct caller c[2] = {{&barrier, &n, &a, 0}, {&barrier, &n, &a, 0}};
    pthread_t tid[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&tid[i], NULL, concurrent_caller, &c[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);
    ck_assert_int_eq(c[0].failures, 0);
    ck_assert_int_eq(c[1].failures, 0);
    norm_free(&n);
    act_free(&a);
}
END_TEST

/* ---- unload and reload ---- */

static void cycle_thread_counts(bool unloads)
{
    base_env();
    const int counts[] = {2, 3, 1, 4, 2};
    struct act_case expect = act_new(FLD_DTYPE_BF16, 64, 8192, 51);
    set_threads("1");
    cpu_plugin_loaded();
    act_run(&expect);
    fld_shutdown();
    const int base = workers();

    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        char v[8], want[48];
        snprintf(v, sizeof v, "%d", counts[i]);
        set_threads(v);
        struct cpu_status s = cpu_plugin_loaded();
        snprintf(want, sizeof want, "%d thread%s (VLLM_FL_CPU_THREADS=%d)", counts[i],
                 counts[i] == 1 ? "" : "s", counts[i]);
        assert_contains(s.detail, want);
        /* A kept mapping re-registers: the old workers were stopped there. */
        ck_assert_int_eq(workers_settled(base), base);
        struct act_case a = act_new(FLD_DTYPE_BF16, 64, 8192, 51);
        act_run(&a);
        ck_assert_int_eq(workers(), base + counts[i] - 1);
        ck_assert(same_bytes(a.out, expect.out));
        act_free(&a);
        fld_shutdown();
        if (unloads) /* the destructor joined the workers at dlclose */
            ck_assert_int_eq(workers_settled(base), base);
    }
    act_free(&expect);
}

START_TEST(test_shutdown_init_cycles)
{
    unsetenv("FLD_NO_DLCLOSE");
    cycle_thread_counts(true);
}
END_TEST

START_TEST(test_reregistration_without_unload)
{
    /* With FLD_NO_DLCLOSE the object stays mapped and registers again. */
    setenv("FLD_NO_DLCLOSE", "1", 1);
    cycle_thread_counts(false);
}
END_TEST

/* ---- topology ---- */

static char tmp_xml[PATH_MAX];

static void remove_tmp_xml(void)
{
    if (tmp_xml[0])
        unlink(tmp_xml);
}

/* Writes an hwloc XML topology to a temporary file and points hwloc at it. */
static void use_topology(const char *xml)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmp_xml, sizeof tmp_xml, "%s/fld-cpu-topo-XXXXXX",
             base && base[0] == '/' ? base : "/tmp");
    int fd = mkstemp(tmp_xml);
    ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
    atexit(remove_tmp_xml);
    size_t len = strlen(xml);
    ck_assert_int_eq(write(fd, xml, len), (ssize_t)len);
    close(fd);
    setenv("HWLOC_XMLFILE", tmp_xml, 1);
    setenv("HWLOC_THISSYSTEM", "1", 1);
}

/* One package holding NUMA node, 16 MiB L3, core and PU number i (CPU i). */
static int package_xml(char *out, size_t size, int i)
{
    char sets[192];
    snprintf(sets, sizeof sets,
             "cpuset=\"0x%x\" complete_cpuset=\"0x%x\" nodeset=\"0x%x\" complete_nodeset=\"0x%x\"",
             1u << i, 1u << i, 1u << i, 1u << i);
    return snprintf(out, size,
                    "<object type=\"Package\" os_index=\"%d\" %s gp_index=\"%d\">"
                    "<object type=\"NUMANode\" os_index=\"%d\" %s gp_index=\"%d\" "
                    "local_memory=\"1073741824\"/>"
                    "<object type=\"L3Cache\" %s gp_index=\"%d\" cache_size=\"16777216\" "
                    "depth=\"3\" cache_linesize=\"64\" cache_associativity=\"16\" "
                    "cache_type=\"0\">"
                    "<object type=\"L2Cache\" %s gp_index=\"%d\" cache_size=\"1048576\" "
                    "depth=\"2\" cache_linesize=\"64\" cache_associativity=\"16\" "
                    "cache_type=\"0\">"
                    "<object type=\"Core\" os_index=\"%d\" %s gp_index=\"%d\">"
                    "<object type=\"PU\" os_index=\"%d\" %s gp_index=\"%d\"/>"
                    "</object></object></object></object>",
                    i, sets, 10 * i + 10, i, sets, 10 * i + 11, sets, 10 * i + 12, sets,
                    10 * i + 15, i, sets, 10 * i + 13, i, sets, 10 * i + 14);
}

/*
 * Two NUMA nodes of one core each, CPU 0 in node 0 and CPU 1 in node 1, of
 * which the process is allowed the CPUs of the mask `allowed`.
 */
static void use_two_nodes(const char *allowed)
{
    char xml[4096];
    int len = snprintf(xml, sizeof xml,
                       "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                       "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
                       "<topology version=\"2.0\">"
                       "<object type=\"Machine\" os_index=\"0\" cpuset=\"0x3\" "
                       "complete_cpuset=\"0x3\" allowed_cpuset=\"%s\" nodeset=\"0x3\" "
                       "complete_nodeset=\"0x3\" allowed_nodeset=\"0x3\" gp_index=\"1\">",
                       allowed);
    for (int i = 0; i < 2; i++)
        len += package_xml(xml + len, sizeof xml - (size_t)len, i);
    snprintf(xml + len, sizeof xml - (size_t)len, "</object></topology>\n");
    use_topology(xml);
}

static bool pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

START_TEST(test_two_numa_nodes)
{
    cpu_set_t all;
    ck_assert_int_eq(pthread_getaffinity_np(pthread_self(), sizeof all, &all), 0);
    if (!CPU_ISSET(0, &all) || !CPU_ISSET(1, &all))
        return; /* needs CPUs 0 and 1 */
    base_env();
    use_two_nodes("0x00000003");
    struct cpu_status s = cpu_plugin_loaded();
    assert_contains(s.detail, "1 thread (1 core in each of NUMA nodes 0, 1)");
    /* One L3 of 16 MiB per node, an L2 of 1 MiB per core: in a virtual machine (cpuid's
     * hypervisor bit) the L3 a guest is shown is the host's, and each thread's L2 counts. */
    assert_contains(s.detail,
                    fld__cpu_is_guest()
                        ? "non-temporal stores from 1 MiB (virtual machine: L2 x 1 thread)"
                        : "non-temporal stores from 16 MiB");
    /* The norms prefetch each next row only in calls larger than a quarter of the L3. */
    assert_contains(s.detail, "; norms prefetch rows above 4 MiB");
    fld_shutdown();
    set_threads("2");
    s = cpu_plugin_loaded();
    assert_contains(s.detail,
                    fld__cpu_is_guest()
                        ? "non-temporal stores from 2 MiB (virtual machine: L2 x 2 threads)"
                        : "non-temporal stores from 16 MiB");
    fld_shutdown();

    /* Two threads per call: one pool per node, its worker on that node's CPU. */
    set_threads("2");
    cpu_plugin_loaded();
    int before = workers();
    struct act_case a = act_new(FLD_DTYPE_F32, 256, 4096, 61);
    struct act_case b = act_new(FLD_DTYPE_F32, 256, 4096, 61);
    ck_assert(pin_to(0));
    act_run(&a);
    ck_assert_int_eq(workers(), before + 1);
    ck_assert_int_eq(workers_on("0"), 1);
    ck_assert(pin_to(1));
    act_run(&b);
    ck_assert_int_eq(workers(), before + 2);
    ck_assert_int_eq(workers_on("1"), 1);
    ck_assert(same_bytes(a.out, b.out));
    act_free(&a);
    act_free(&b);
}
END_TEST

START_TEST(test_allowed_cpus_only)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return;
    base_env();
    /* The process may use CPU 1 only: node 0 has nothing for us and is dropped. */
    use_two_nodes("0x00000002");
    struct cpu_status s = cpu_plugin_loaded();
    assert_contains(s.detail, "1 thread (1 core in NUMA node 1)");
}
END_TEST

START_TEST(test_hwloc_failure_falls_back)
{
    base_env();
    setenv("HWLOC_HIDE_ERRORS", "2", 1);
    /* No allowed PU: hwloc refuses to load the topology. */
    use_two_nodes("0x0");
    struct cpu_status s = cpu_plugin_loaded();
    assert_contains(s.detail, "hwloc could not load the topology");
    char want[64];
    snprintf(want, sizeof want, "%ld online CPUs", sysconf(_SC_NPROCESSORS_ONLN));
    assert_contains(s.detail, want);
    /* And it still computes, in parallel when asked to. */
    fld_shutdown();
    set_threads("2");
    cpu_plugin_loaded();
    struct norm_case n = norm_new(FLD_DTYPE_F32, 64, 4096, 71);
    int before = workers();
    norm_run(&n);
    ck_assert_int_eq(workers(), before + 1);
    norm_free(&n);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *cpu_plugin_suite(void)
{
    Suite *s = suite_create("cpu_plugin");
    TCase *tc = tcase_create("choice");
#if defined(__x86_64__)
    tcase_add_test(tc, test_choice_best_and_caps);
    tcase_add_test(tc, test_choice_needs_every_feature);
    tcase_add_test(tc, test_choice_os_support);
#endif
    tcase_add_test(tc, test_choice_unknown_cap);
    suite_add_tcase(s, tc);

    tc = tcase_create("environment");
    tcase_add_test(tc, test_detail_default);
    tcase_add_test(tc, test_detail_each_cap);
    tcase_add_test(tc, test_isa_unknown_rejects_plugin);
    tcase_add_test(tc, test_threads_invalid_rejects_plugin);
    tcase_add_test(tc, test_parallel_min_kb);
    tcase_add_test(tc, test_stream_min_kb);
    tcase_add_test(tc, test_lookup_values);
    tcase_add_test(tc, test_act16_values);
    suite_add_tcase(s, tc);

    tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_small_calls_stay_inline);
    tcase_add_test(tc, test_two_threads_bit_identical);
    tcase_add_test(tc, test_odd_rows_split);
    tcase_add_test(tc, test_fork_after_parallel_call);
    tcase_add_test(tc, test_concurrent_callers);
    tcase_add_test(tc, test_shutdown_init_cycles);
    tcase_add_test(tc, test_reregistration_without_unload);
    suite_add_tcase(s, tc);

    tc = tcase_create("topology");
    tcase_add_test(tc, test_two_numa_nodes);
    tcase_add_test(tc, test_allowed_cpus_only);
    tcase_add_test(tc, test_hwloc_failure_falls_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(cpu_plugin_suite());
}
