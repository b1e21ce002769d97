/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stress: worker threads call every catalog op in a loop -- typed entry
 * points, fld_call() by handle and fld_call_by_name() -- and push and pop
 * their own scoped overrides, while a policy thread walks the global policy
 * through a cycle of states (fld_reload(), fld_policy_load_file(),
 * fld_policy_set(), fld_policy_reset()), a loader thread loads a plugin in
 * the middle of the run, and a noise thread resolves, explains, lists and
 * reloads already-loaded plugins.
 *
 * Proof, not just survival. The fixtures of tests/stress/ (fld-stressa.so:
 * vendor.alpha, vendor.beta, default.stress; fld-stressb.so: vendor.gamma)
 * mark their outputs, so every call's outputs say which implementation
 * served it (reference.c's exact results are recorded first). The test
 * carries a model of selection: for each state of the cycle, and each stack
 * of overrides, which implementation must win. The policy thread publishes
 * "change k started" and "change k finished" counters, so a call knows the
 * range of global states that may have been in force while it ran; a thread
 * with overrides runs on a snapshot of the global state taken at its first
 * push, bracketed the same way. Every call must return FLD_OK and be served
 * by a winner of one of those states; per-thread tallies must equal the
 * fixtures' own per-thread counters and add up to the calls made.
 *
 * Time: FLD_STRESS_SECONDS (default 1.5) of concurrent running once the
 * cycle went round twice and the plugin is loaded.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fldispatch/plugin.h>

#include "stress/stress_fixture.h"
#include "util/catalog_args.h"
#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"

/* ------------------------------------------------------------------------ */
/* Files                                                                    */
/* ------------------------------------------------------------------------ */

/* Made in set-up, once per test process; write_file() puts the policy files there. */
static const char *tmpdir;

static void write_file(char *out, const char *name, const char *text)
{
    snprintf(out, PATH_MAX, "%s/%s", tmpdir, name);
    FILE *f = fopen(out, "w");
    ck_assert_msg(f != NULL, "cannot create %s: %s", out, strerror(errno));
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

static void quiet_log(int level, const char *message, void *user)
{
    (void)user;
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "[log %d] %s\n", level, message);
}

/* ------------------------------------------------------------------------ */
/* The ops                                                                  */
/* ------------------------------------------------------------------------ */

/* STRESS_OP_* are the catalog order of util/catalog_args.h. */
_Static_assert((int)STRESS_N_OPS == (int)TT_CAT_N_OPS &&
                   (int)STRESS_OP_RMS_NORM == (int)TT_CAT_RMS_NORM &&
                   (int)STRESS_OP_ROTARY_EMBEDDING == (int)TT_CAT_ROTARY_EMBEDDING &&
                   (int)STRESS_OP_ATTENTION_BACKEND == (int)TT_CAT_ATTENTION_BACKEND,
               "STRESS_OP_* follow the catalog order");

static const char *const impl_ids[STRESS_N_IMPLS] = {
    [STRESS_IMPL_REF] = "reference.c",    [STRESS_IMPL_ALPHA] = "vendor.alpha",
    [STRESS_IMPL_BETA] = "vendor.beta",   [STRESS_IMPL_FLAGOS] = "default.stress",
    [STRESS_IMPL_GAMMA] = "vendor.gamma",
};

static int impl_by_id(const char *id)
{
    for (int i = 0; i < STRESS_N_IMPLS; i++)
        if (id != NULL && strcmp(id, impl_ids[i]) == 0)
            return i;
    return -1;
}

/* "op1=<order>;op2=<order>;..." for every catalog op. */
static void all_ops_spec(char *out, size_t size, const char *order)
{
    size_t len = 0;
    out[0] = '\0';
    for (int op = 0; op < STRESS_N_OPS; op++)
        len += (size_t)snprintf(out + len, size - len, "%s%s=%s", op ? ";" : "",
                                tt_catalog_op_names[op], order);
    ck_assert_msg(len < size, "spec too long");
}

/* ------------------------------------------------------------------------ */
/* The model of selection                                                   */
/* ------------------------------------------------------------------------ */

enum { V_ALPHA = 1u, V_BETA = 2u, V_GAMMA = 4u };
enum { K_FLAGOS, K_VENDOR, K_REF };
enum { T_FLAGOS, T_VENDOR, T_REF, T_V_ALPHA, T_V_BETA, T_V_GAMMA };

static const struct {
    int kind;
    unsigned vendor;
    int priority;
} impl_props[STRESS_N_IMPLS] = {
    [STRESS_IMPL_REF] = {K_REF, 0, FLD_PRIORITY_REFERENCE},
    [STRESS_IMPL_ALPHA] = {K_VENDOR, V_ALPHA, STRESS_PRIORITY_ALPHA},
    [STRESS_IMPL_BETA] = {K_VENDOR, V_BETA, STRESS_PRIORITY_BETA},
    [STRESS_IMPL_FLAGOS] = {K_FLAGOS, 0, STRESS_PRIORITY_FLAGOS},
    [STRESS_IMPL_GAMMA] = {K_VENDOR, V_GAMMA, STRESS_PRIORITY_GAMMA},
};

struct model {
    int prefer; /* K_* */
    unsigned deny;
    bool allow_set;
    unsigned allow;
    int n_order; /* a per-op order of every op, or 0 */
    int order[4];
    bool only_reference; /* enabled=false, custom_ops=none */
    bool flagos_ok;      /* the ops are not on a flagos blacklist */
};

static bool token_matches(int tok, int impl)
{
    switch (tok) {
    case T_FLAGOS:
        return impl_props[impl].kind == K_FLAGOS;
    case T_VENDOR:
        return impl_props[impl].kind == K_VENDOR;
    case T_REF:
        return impl_props[impl].kind == K_REF;
    case T_V_ALPHA:
        return impl_props[impl].vendor == V_ALPHA;
    case T_V_BETA:
        return impl_props[impl].vendor == V_BETA;
    default:
        return impl_props[impl].vendor == V_GAMMA;
    }
}

static bool model_passes(const struct model *m, int impl, bool gamma_loaded)
{
    if (impl == STRESS_IMPL_GAMMA && !gamma_loaded)
        return false;
    int kind = impl_props[impl].kind;
    if (m->only_reference && kind != K_REF)
        return false;
    if (kind == K_VENDOR) {
        unsigned v = impl_props[impl].vendor;
        if ((m->deny & v) || (m->allow_set && !(m->allow & v)))
            return false;
    }
    return kind != K_FLAGOS || m->flagos_ok;
}

/* The implementation that must win under m, or -1. */
static int model_winner(const struct model *m, bool gamma_loaded)
{
    static const int orders[3][3] = {
        [K_FLAGOS] = {T_FLAGOS, T_VENDOR, T_REF},
        [K_VENDOR] = {T_VENDOR, T_FLAGOS, T_REF},
        [K_REF] = {T_REF, T_FLAGOS, T_VENDOR},
    };
    const int *order = m->n_order ? m->order : orders[m->prefer];
    int n = m->n_order ? m->n_order : 3;
    for (int t = 0; t < n; t++) {
        int best = -1;
        for (int i = 0; i < STRESS_N_IMPLS; i++) {
            if (!token_matches(order[t], i) || !model_passes(m, i, gamma_loaded))
                continue;
            /* Descending priority, ties by ascending impl_id. */
            if (best < 0 || impl_props[i].priority > impl_props[best].priority ||
                (impl_props[i].priority == impl_props[best].priority &&
                 strcmp(impl_ids[i], impl_ids[best]) < 0))
                best = i;
        }
        if (best >= 0)
            return best;
    }
    return -1;
}

/* The environment of the process, which fld_reload() and fld_policy_reset() restore. */
#define ENV_PREFER       "vendor"
#define ENV_DENY_VENDORS "beta"
static const struct model env_model = {.prefer = K_VENDOR, .deny = V_BETA, .flagos_ok = true};

/* The global cycle: each step is applied to the state the previous one left. */
enum step_kind { S_RELOAD, S_RESET, S_SET, S_LOAD };
struct step {
    enum step_kind kind;
    const char *key;   /* S_SET: the key; S_LOAD: the file's name */
    const char *value; /* S_SET: the value (ALL_OPS: every op gets value + 8) */
    struct model state;
};

static char yaml_a[PATH_MAX], yaml_b[PATH_MAX], yaml_c[PATH_MAX];

#define ALL_OPS_PREFIX "ALL_OPS:"
static const struct step steps[] = {
    {S_RELOAD, NULL, NULL, {.prefer = K_VENDOR, .deny = V_BETA, .flagos_ok = true}},
    {S_LOAD, "a", NULL, {.prefer = K_VENDOR, .deny = V_ALPHA, .flagos_ok = true}},
    {S_SET,
     "deny_vendors",
     "alpha,gamma",
     {.prefer = K_VENDOR, .deny = V_ALPHA | V_GAMMA, .flagos_ok = true}},
    {S_SET, "prefer", "flagos", {.prefer = K_FLAGOS, .deny = V_ALPHA | V_GAMMA, .flagos_ok = true}},
    {S_LOAD,
     "b",
     NULL,
     {.prefer = K_FLAGOS,
      .allow_set = true,
      .allow = V_GAMMA,
      .n_order = 2,
      .order = {T_VENDOR, T_REF},
      .flagos_ok = true}},
    {S_SET,
     "per_op",
     "",
     {.prefer = K_FLAGOS, .allow_set = true, .allow = V_GAMMA, .flagos_ok = true}},
    {S_SET,
     "enabled",
     "false",
     {.prefer = K_FLAGOS,
      .allow_set = true,
      .allow = V_GAMMA,
      .only_reference = true,
      .flagos_ok = true}},
    {S_RESET, NULL, NULL, {.prefer = K_VENDOR, .deny = V_BETA, .flagos_ok = true}},
    {S_LOAD, "c", NULL, {.prefer = K_FLAGOS, .deny = V_GAMMA, .flagos_ok = false}},
    {S_SET,
     "per_op",
     ALL_OPS_PREFIX "vendor:beta|reference",
     {.prefer = K_FLAGOS,
      .deny = V_GAMMA,
      .n_order = 2,
      .order = {T_V_BETA, T_REF},
      .flagos_ok = false}},
    {S_SET,
     "custom_ops",
     "none",
     {.prefer = K_FLAGOS,
      .deny = V_GAMMA,
      .n_order = 2,
      .order = {T_V_BETA, T_REF},
      .only_reference = true,
      .flagos_ok = false}},
};
enum { N_STEPS = sizeof steps / sizeof steps[0] };

static void write_policy_files(void)
{
    char text[2048], map[1024];
    size_t len = 0;
    for (int op = 0; op < STRESS_N_OPS; op++)
        len += (size_t)snprintf(map + len, sizeof map - len, "%s%s: [vendor, reference]",
                                op ? ", " : "", tt_catalog_op_names[op]);
    write_file(yaml_a, "a.yaml", "prefer: vendor\ndeny_vendors: [alpha]\n");
    snprintf(text, sizeof text, "allow_vendors: [gamma]\nop_backends: {%s}\n", map);
    write_file(yaml_b, "b.yaml", text);
    len = 0;
    for (int op = 0; op < STRESS_N_OPS; op++)
        len += (size_t)snprintf(map + len, sizeof map - len, "%s%s", op ? ", " : "",
                                tt_catalog_op_names[op]);
    snprintf(text, sizeof text, "prefer: flagos\nflagos_blacklist: [%s]\ndeny_vendors: gamma\n",
             map);
    write_file(yaml_c, "c.yaml", text);
}

/* Applies step s; FLD_OK or the failing call's status. */
static int apply_step(int s, char *what, size_t size)
{
    const struct step *st = &steps[s];
    char spec[1024];
    switch (st->kind) {
    case S_RELOAD:
        snprintf(what, size, "fld_reload()");
        return fld_reload();
    case S_RESET:
        snprintf(what, size, "fld_policy_reset()");
        return fld_policy_reset();
    case S_LOAD: {
        const char *path = st->key[0] == 'a' ? yaml_a : st->key[0] == 'b' ? yaml_b : yaml_c;
        snprintf(what, size, "fld_policy_load_file(%s.yaml)", st->key);
        return fld_policy_load_file(path);
    }
    default:
        if (strncmp(st->value, ALL_OPS_PREFIX, strlen(ALL_OPS_PREFIX)) == 0)
            all_ops_spec(spec, sizeof spec, st->value + strlen(ALL_OPS_PREFIX));
        else
            snprintf(spec, sizeof spec, "%s", st->value);
        snprintf(what, size, "fld_policy_set(%s, '%s')", st->key, st->value);
        return fld_policy_set(st->key, spec);
    }
}

/* Scoped overrides a worker pushes, and what each does to the model. */
enum {
    O_DENY_ALPHA,
    O_PREFER_REF,
    O_PREFER_FLAGOS,
    O_ALLOW_BG,
    O_PER_OP,
    O_STRICT,
    O_DENY_GB,
    N_O
};
static const char *const override_names[N_O] = {
    "deny alpha",
    "prefer reference",
    "prefer flagos",
    "allow beta,gamma",
    "per_op vendor:alpha|flagos|reference",
    "strict",
    "deny gamma,beta",
};

static int push_override(int o)
{
    char spec[1024];
    switch (o) {
    case O_DENY_ALPHA:
        return fld_policy_push_denied_vendors("alpha");
    case O_PREFER_REF:
        return fld_policy_push_preference("reference");
    case O_PREFER_FLAGOS:
        return fld_policy_push_preference("flagos");
    case O_ALLOW_BG:
        return fld_policy_push_allowed_vendors("beta,gamma");
    case O_PER_OP:
        all_ops_spec(spec, sizeof spec, "vendor:alpha|flagos|reference");
        return fld_policy_push_per_op(spec);
    case O_STRICT:
        return fld_policy_push_strict(true);
    default:
        return fld_policy_push_denied_vendors("gamma,beta");
    }
}

static void apply_override(struct model *m, int o)
{
    switch (o) {
    case O_DENY_ALPHA:
        m->deny |= V_ALPHA;
        break;
    case O_PREFER_REF:
        m->prefer = K_REF;
        break;
    case O_PREFER_FLAGOS:
        m->prefer = K_FLAGOS;
        break;
    case O_ALLOW_BG:
        m->allow_set = true;
        m->allow = V_BETA | V_GAMMA;
        break;
    case O_PER_OP:
        m->n_order = 3;
        m->order[0] = T_V_ALPHA;
        m->order[1] = T_FLAGOS;
        m->order[2] = T_REF;
        break;
    case O_STRICT:
        break;
    default:
        m->deny |= V_GAMMA | V_BETA;
    }
}

/*
 * The implementations that may serve a call: global changes number first..
 * last may have been in force (change k leaves steps[k % N_STEPS]; change 0
 * is the environment at start), with the overrides on top, and the plugin
 * loaded or not as the flags say. A bit per STRESS_IMPL_*.
 */
static unsigned allowed_winners(long first, long last, const int *overrides, int depth,
                                bool maybe_unloaded, bool maybe_loaded)
{
    unsigned mask = 0;
    if (last - first >= N_STEPS)
        last = first + N_STEPS - 1;
    for (long k = first; k <= last; k++) {
        struct model m = steps[k % N_STEPS].state;
        for (int i = 0; i < depth; i++)
            apply_override(&m, overrides[i]);
        for (int g = 0; g < 2; g++) {
            if ((g == 0 && !maybe_unloaded) || (g == 1 && !maybe_loaded))
                continue;
            int w = model_winner(&m, g == 1);
            if (w >= 0)
                mask |= 1u << w;
        }
    }
    return mask;
}

static void describe_mask(char *out, size_t size, unsigned mask)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < STRESS_N_IMPLS && len < size; i++)
        if (mask & (1u << i))
            len += (size_t)snprintf(out + len, size - len, "%s%s", len ? ", " : "", impl_ids[i]);
    if (len == 0)
        snprintf(out, size, "(none)");
}

/* ------------------------------------------------------------------------ */
/* Shared run state                                                         */
/* ------------------------------------------------------------------------ */

static atomic_long changes_started, changes_finished; /* global policy changes */
static atomic_int gamma_started, gamma_finished;      /* fld-stressb.so load */
static atomic_bool stop_run;
static char stressa_path[PATH_MAX], stressb_path[PATH_MAX];

static pthread_mutex_t error_mutex = PTHREAD_MUTEX_INITIALIZER;
static char first_error[1024];

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    pthread_mutex_lock(&error_mutex);
    if (first_error[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_error, sizeof first_error, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&error_mutex);
    atomic_store(&stop_run, true);
}

static bool failed(void)
{
    pthread_mutex_lock(&error_mutex);
    bool f = first_error[0] != '\0';
    pthread_mutex_unlock(&error_mutex);
    return f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------ */
/* A worker's tensors and calls                                             */
/* ------------------------------------------------------------------------ */

enum { ROWS = TT_CAT_ROWS, HALF = TT_CAT_HALF, WIDTH = TT_CAT_WIDTH, HS = TT_CAT_HEAD };
enum { HQ = TT_CAT_QHEADS, HK = TT_CAT_KHEADS };

struct tensors {
    struct tt_catalog_args a; /* the calls (util/catalog_args.h), in STRESS_OP_* order */
    /* reference.c's results, recorded at the start under a reference-only override */
    float ref_aout[STRESS_N_OPS][ROWS][HALF], ref_nout[2][ROWS][WIDTH], ref_nres[ROWS][WIDTH];
    float ref_q[ROWS][HQ * HS], ref_k[ROWS][HK * HS], ref_qout[ROWS][HQ * HS],
        ref_kout[ROWS][HK * HS];
    const char *ref_attn;
};

static void tensors_init(struct tensors *t, unsigned seed)
{
    memset(t, 0, sizeof *t);
    tt_catalog_args_init(&t->a, seed);
}

static fld_op handles[STRESS_N_OPS];

/* Calls op one of three ways (0 typed, 1 fld_call, 2 fld_call_by_name) with fresh outputs; the
 * status. */
static int call_op(struct tensors *t, int op, int way)
{
    tt_catalog_args_reset(&t->a);
    return tt_catalog_call(&t->a, op, (enum tt_call_way)way, handles[op]);
}

/* The fixture whose mark fills all n floats, or -1. */
static int marked_by(const float *v, size_t n)
{
    for (int impl = STRESS_IMPL_ALPHA; impl < STRESS_N_IMPLS; impl++) {
        float mark = (float)(STRESS_MARK_BASE + impl);
        size_t i = 0;
        while (i < n && v[i] == mark)
            i++;
        if (i == n)
            return impl;
    }
    return -1;
}

/*
 * Who served the last call of op, from its outputs: STRESS_IMPL_*, or -1
 * when they are neither one fixture's mark (with untouched in-place inputs)
 * nor reference.c's exact results. With record set, a result without a mark
 * is taken as reference.c's and remembered.
 */
static int served_by(struct tensors *t, int op, bool record)
{
    int who;
    switch (op) {
    case STRESS_OP_RMS_NORM:
    case STRESS_OP_GEMMA_RMS_NORM:
        who = marked_by(&t->a.nout[0][0], ROWS * WIDTH);
        if (who >= 0)
            return memcmp(t->a.nres, t->a.nres0, sizeof t->a.nres) == 0 ? who : -1;
        if (record) {
            memcpy(t->ref_nout[op - STRESS_OP_RMS_NORM], t->a.nout, sizeof t->a.nout);
            if (op == STRESS_OP_GEMMA_RMS_NORM)
                memcpy(t->ref_nres, t->a.nres, sizeof t->a.nres);
            return isnan(t->a.nout[0][0]) ? -1 : STRESS_IMPL_REF;
        }
        if (memcmp(t->a.nout, t->ref_nout[op - STRESS_OP_RMS_NORM], sizeof t->a.nout) != 0)
            return -1;
        if (op == STRESS_OP_GEMMA_RMS_NORM && memcmp(t->a.nres, t->ref_nres, sizeof t->a.nres) != 0)
            return -1;
        return STRESS_IMPL_REF;
    case STRESS_OP_ROTARY_EMBEDDING:
        who = marked_by(&t->a.q[0][0], ROWS * HQ * HS);
        if (who >= 0)
            return marked_by(&t->a.k[0][0], ROWS * HK * HS) == who ? who : -1;
        if (record) {
            memcpy(t->ref_q, t->a.q, sizeof t->a.q);
            memcpy(t->ref_k, t->a.k, sizeof t->a.k);
            return memcmp(t->a.q, t->a.q0, sizeof t->a.q) == 0 ? -1 : STRESS_IMPL_REF;
        }
        return memcmp(t->a.q, t->ref_q, sizeof t->a.q) == 0 &&
                       memcmp(t->a.k, t->ref_k, sizeof t->a.k) == 0
                   ? STRESS_IMPL_REF
                   : -1;
    case STRESS_OP_ROTARY_EMBEDDING_OUT:
        /* query and key are only read, whoever serves */
        if (memcmp(t->a.q, t->a.q0, sizeof t->a.q) != 0 ||
            memcmp(t->a.k, t->a.k0, sizeof t->a.k) != 0)
            return -1;
        who = marked_by(&t->a.qout[0][0], ROWS * HQ * HS);
        if (who >= 0)
            return marked_by(&t->a.kout[0][0], ROWS * HK * HS) == who ? who : -1;
        if (record) {
            memcpy(t->ref_qout, t->a.qout, sizeof t->a.qout);
            memcpy(t->ref_kout, t->a.kout, sizeof t->a.kout);
            return isnan(t->a.qout[0][0]) ? -1 : STRESS_IMPL_REF;
        }
        return memcmp(t->a.qout, t->ref_qout, sizeof t->a.qout) == 0 &&
                       memcmp(t->a.kout, t->ref_kout, sizeof t->a.kout) == 0
                   ? STRESS_IMPL_REF
                   : -1;
    case STRESS_OP_ATTENTION_BACKEND:
        if (t->a.attn == NULL)
            return -1;
        if (strncmp(t->a.attn, "STRESS_", 7) == 0) {
            int code = t->a.attn[7] - '0';
            return code >= STRESS_IMPL_ALPHA && code < STRESS_N_IMPLS && t->a.attn[8] == '\0' ? code
                                                                                              : -1;
        }
        if (record)
            t->ref_attn = t->a.attn;
        return t->ref_attn != NULL && strcmp(t->a.attn, t->ref_attn) == 0 ? STRESS_IMPL_REF : -1;
    default:
        who = marked_by(&t->a.aout[0][0], ROWS * HALF);
        if (who >= 0)
            return who;
        if (record) {
            memcpy(t->ref_aout[op], t->a.aout, sizeof t->a.aout);
            return isnan(t->a.aout[0][0]) ? -1 : STRESS_IMPL_REF;
        }
        return memcmp(t->a.aout, t->ref_aout[op], sizeof t->a.aout) == 0 ? STRESS_IMPL_REF : -1;
    }
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                  */
/* ------------------------------------------------------------------------ */

enum { N_WORKERS = 4, MAX_DEPTH = 3 };

typedef long (*count_fn)(int op, int impl);

struct worker {
    int id;
    pthread_t thread;
    struct tensors t;
    long calls;
    long tally[STRESS_N_OPS][STRESS_N_IMPLS];
    long pushes, checked_overridden;
    atomic_long progress;
};

static uint32_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*state >> 33);
}

static const char *way_name(int way)
{
    return way == 0 ? "typed" : way == 1 ? "fld_call" : "fld_call_by_name";
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
    int overrides[MAX_DEPTH], depth = 0;
    long base_first = 0, base_last = 0; /* global changes the override snapshot may hold */
    char spec[1024];

    /* reference.c's results, under an override that only reference matches. */
    all_ops_spec(spec, sizeof spec, "reference");
    int rc = fld_policy_push_per_op(spec);
    if (rc != FLD_OK) {
        report("worker %d: fld_policy_push_per_op: %s: %s", w->id, fld_strerror(rc),
               fld_last_error());
        return NULL;
    }
    for (int op = 0; op < STRESS_N_OPS; op++) {
        rc = call_op(&w->t, op, 0);
        int who = rc == FLD_OK ? served_by(&w->t, op, true) : -1;
        if (rc != FLD_OK || who != STRESS_IMPL_REF) {
            report("worker %d: %s under a reference-only override: %s (%s), served by %s", w->id,
                   tt_catalog_op_names[op], fld_strerror(rc), rc ? fld_last_error() : "",
                   who >= 0 ? impl_ids[who] : "an unknown implementation");
            fld_policy_pop();
            return NULL;
        }
        w->tally[op][who]++;
        w->calls++;
    }
    fld_policy_pop();

    while (!atomic_load_explicit(&stop_run, memory_order_relaxed)) {
        uint32_t r = next_random(&rng);
        if (r % 24 == 0) {
            if (depth < MAX_DEPTH && (depth == 0 || r % 3 != 0)) {
                int o = (int)((r >> 8) % N_O);
                long first = atomic_load(&changes_finished);
                rc = push_override(o);
                long last = atomic_load(&changes_started);
                if (rc != FLD_OK) {
                    report("worker %d: push %s: %s: %s", w->id, override_names[o], fld_strerror(rc),
                           fld_last_error());
                    break;
                }
                if (depth == 0)
                    base_first = first, base_last = last;
                overrides[depth++] = o;
                w->pushes++;
            } else if (depth > 0) {
                rc = fld_policy_pop();
                if (rc != FLD_OK) {
                    report("worker %d: fld_policy_pop: %s: %s", w->id, fld_strerror(rc),
                           fld_last_error());
                    break;
                }
                depth--;
            }
        }
        int op = (int)((r >> 4) % STRESS_N_OPS);
        int way = (int)((r >> 12) % 3);
        long first = atomic_load(&changes_finished);
        int g_before = atomic_load(&gamma_finished);
        rc = call_op(&w->t, op, way);
        long last = atomic_load(&changes_started);
        int g_after = atomic_load(&gamma_started);
        w->calls++;
        if (rc != FLD_OK) {
            report("worker %d: %s (%s) failed: %s: %s", w->id, tt_catalog_op_names[op],
                   way_name(way), fld_strerror(rc), fld_last_error());
            break;
        }
        int who = served_by(&w->t, op, false);
        if (who < 0) {
            report("worker %d: %s (%s): outputs are neither a fixture's mark nor reference.c's "
                   "results",
                   w->id, tt_catalog_op_names[op], way_name(way));
            break;
        }
        w->tally[op][who]++;
        unsigned allowed =
            depth ? allowed_winners(base_first, base_last, overrides, depth, !g_before, g_after)
                  : allowed_winners(first, last, NULL, 0, !g_before, g_after);
        if (!(allowed & (1u << who))) {
            char want[256], stack[256] = "none";
            size_t len = 0;
            describe_mask(want, sizeof want, allowed);
            for (int i = 0; i < depth; i++)
                len += (size_t)snprintf(stack + len, sizeof stack - len, "%s%s", i ? " + " : "",
                                        override_names[overrides[i]]);
            report("worker %d: %s (%s) was served by %s; the policy in force allowed only %s "
                   "(global changes %ld..%ld, overrides: %s, gamma loaded: %s)",
                   w->id, tt_catalog_op_names[op], way_name(way), impl_ids[who], want,
                   depth ? base_first : first, depth ? base_last : last, stack,
                   g_before  ? "yes"
                   : g_after ? "maybe"
                             : "no");
            break;
        }
        if (depth)
            w->checked_overridden++;
        atomic_store_explicit(&w->progress, w->calls, memory_order_relaxed);
    }
    while (depth-- > 0)
        fld_policy_pop();
    if (fld_policy_pop() != FLD_ESTATE)
        report("worker %d: pushes and pops do not balance", w->id);

    /* The fixtures' own counts of this thread agree with the outputs seen. */
    void *ha = dlopen(stressa_path, RTLD_NOW | RTLD_NOLOAD);
    void *hb = dlopen(stressb_path, RTLD_NOW | RTLD_NOLOAD);
    count_fn ca = ha ? (count_fn)dlsym(ha, "fld_stress_thread_count") : NULL;
    count_fn cb = hb ? (count_fn)dlsym(hb, "fld_stress_thread_count") : NULL;
    if (ca == NULL)
        report("worker %d: fld-stressa.so is not loaded", w->id);
    for (int op = 0; ca != NULL && op < STRESS_N_OPS; op++)
        for (int impl = STRESS_IMPL_ALPHA; impl < STRESS_N_IMPLS; impl++) {
            long n = impl == STRESS_IMPL_GAMMA ? (cb ? cb(op, impl) : 0) : ca(op, impl);
            if (n != w->tally[op][impl])
                report("worker %d: %s ran %s %ld times on this thread, the outputs showed %ld",
                       w->id, impl_ids[impl], tt_catalog_op_names[op], n, w->tally[op][impl]);
        }
    if (ha)
        dlclose(ha);
    if (hb)
        dlclose(hb);
    return NULL;
}

struct policy_thread {
    pthread_t thread;
    long changes;
};

static void *policy_main(void *arg)
{
    struct policy_thread *p = arg;
    const struct timespec pause = {0, 300 * 1000};
    for (long k = 1; !atomic_load(&stop_run); k++) {
        char what[256];
        atomic_store(&changes_started, k);
        int rc = apply_step((int)(k % N_STEPS), what, sizeof what);
        atomic_store(&changes_finished, k);
        if (rc != FLD_OK) {
            report("policy thread, change %ld: %s: %s: %s", k, what, fld_strerror(rc),
                   fld_last_error());
            break;
        }
        p->changes = k;
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static void *loader_main(void *arg)
{
    (void)arg;
    /* Mid-run: once the cycle is half way round. */
    while (!atomic_load(&stop_run) && atomic_load(&changes_finished) < N_STEPS / 2)
        sched_yield();
    if (atomic_load(&stop_run))
        return NULL;
    atomic_store(&gamma_started, 1);
    int rc = fld_load_plugin(stressb_path);
    atomic_store(&gamma_finished, 1);
    if (rc != FLD_OK) {
        report("fld_load_plugin(%s): %s: %s", stressb_path, fld_strerror(rc), fld_last_error());
        return NULL;
    }
    /* Loading loaded files again changes nothing and must say so. */
    const struct timespec pause = {0, 2 * 1000 * 1000};
    for (unsigned round = 0; !atomic_load(&stop_run);) {
        const char *path = (round++ & 1) ? stressa_path : stressb_path;
        rc = fld_load_plugin(path);
        if (rc != FLD_OK) {
            report("fld_load_plugin(%s) again: %s: %s", path, fld_strerror(rc), fld_last_error());
            break;
        }
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static int count_impls(const fld_impl_info *info, void *user)
{
    (void)info;
    (*(long *)user)++;
    return 0;
}

static int count_plugins(const fld_plugin_info *info, void *user)
{
    long *n = user;
    n[0]++;
    if (strcmp(info->name, "stressa") == 0 || strcmp(info->name, "stressb") == 0)
        n[1] += info->status == FLD_PLUGIN_LOADED;
    return 0;
}

/* Reads while everything changes: resolve (checked against the model), explain, list. */
static void *noise_main(void *arg)
{
    long *resolves = arg;
    uint64_t rng = 12345;
    while (!atomic_load(&stop_run)) {
        uint32_t r = next_random(&rng);
        int op = (int)(r % STRESS_N_OPS);
        long first = atomic_load(&changes_finished);
        int g_before = atomic_load(&gamma_finished);
        const char *id = NULL;
        int rc = fld_resolve(tt_catalog_op_names[op], FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
        long last = atomic_load(&changes_started);
        int g_after = atomic_load(&gamma_started);
        if (rc != FLD_OK) {
            report("fld_resolve(%s): %s: %s", tt_catalog_op_names[op], fld_strerror(rc),
                   fld_last_error());
            break;
        }
        int who = impl_by_id(id);
        unsigned allowed = allowed_winners(first, last, NULL, 0, !g_before, g_after);
        if (who < 0 || !(allowed & (1u << who))) {
            char want[256];
            describe_mask(want, sizeof want, allowed);
            report("fld_resolve(%s) = %s during global changes %ld..%ld; expected one of %s",
                   tt_catalog_op_names[op], id, first, last, want);
            break;
        }
        (*resolves)++;
        switch ((r >> 8) % 4) {
        case 0: {
            fld_resolution *res = NULL;
            rc = fld_explain(tt_catalog_op_names[op], FLD_DEVICE_CPU, FLD_DTYPE_F32, &res);
            if (rc != FLD_OK || res == NULL || res->n_candidates == 0) {
                report("fld_explain(%s): %s: %s", tt_catalog_op_names[op], fld_strerror(rc),
                       fld_last_error());
            }
            fld_resolution_free(res);
            break;
        }
        case 1: {
            long n = 0;
            fld_foreach_impl(count_impls, &n);
            if (n < 3 * STRESS_N_OPS)
                report("fld_foreach_impl listed %ld implementations", n);
            break;
        }
        case 2: {
            long n[2] = {0, 0};
            fld_foreach_plugin(count_plugins, n);
            if (n[1] < 1 || n[1] > 2)
                report("fld_foreach_plugin: %ld stress plugins loaded", n[1]);
            char buf[512];
            fld_policy_describe(buf, sizeof buf);
            break;
        }
        default:
            if (fld_op_lookup(tt_catalog_op_names[op]) != handles[op])
                report("fld_op_lookup(%s) returned another handle", tt_catalog_op_names[op]);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Set-up                                                                   */
/* ------------------------------------------------------------------------ */

static void setup_stress_environment(void)
{
    char plugins[PATH_MAX], later[PATH_MAX];
    tt_clear_fld_environment();
    tmpdir = tt_make_tmpdir("stress");
    tt_make_subdir(plugins, tmpdir, "plugins", 0755);
    tt_make_subdir(later, tmpdir, "later", 0755);
    tt_install_fixture(stressa_path, plugins, "stress", "stressa");
    tt_install_fixture(stressb_path, later, "stress", "stressb");
    write_policy_files();
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", plugins, 1), 0);
    ck_assert_int_eq(setenv("VLLM_FL_PLATFORM", "cpu", 1), 0);
    ck_assert_int_eq(setenv("VLLM_FL_PREFER", ENV_PREFER, 1), 0);
    ck_assert_int_eq(setenv("VLLM_FL_DENY_VENDORS", ENV_DENY_VENDORS, 1), 0);
    fld_log_set_callback(quiet_log, NULL);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s: %s", fld_strerror(rc), fld_last_error());
    for (int op = 0; op < STRESS_N_OPS; op++) {
        handles[op] = fld_op_lookup(tt_catalog_op_names[op]);
        ck_assert_msg(handles[op] != NULL, "fld_op_lookup(%s): %s", tt_catalog_op_names[op],
                      fld_last_error());
    }
}

/* Under every state of the cycle and a few override stacks, fld_resolve()
 * agrees with the model (with and without the late plugin). */
static void check_model(bool gamma_loaded)
{
    static const int stacks[][3] = {
        {-1, -1, -1},
        {O_DENY_ALPHA, -1, -1},
        {O_PREFER_REF, -1, -1},
        {O_PREFER_FLAGOS, -1, -1},
        {O_ALLOW_BG, -1, -1},
        {O_PER_OP, -1, -1},
        {O_DENY_GB, -1, -1},
        {O_ALLOW_BG, O_DENY_GB, -1},
        {O_PER_OP, O_DENY_ALPHA, -1},
        {O_PREFER_FLAGOS, O_ALLOW_BG, O_STRICT},
        {O_PER_OP, O_PREFER_REF, O_DENY_GB},
    };
    for (long k = 1; k <= N_STEPS; k++) {
        char what[256];
        int rc = apply_step((int)(k % N_STEPS), what, sizeof what);
        ck_assert_msg(rc == FLD_OK, "%s: %s: %s", what, fld_strerror(rc), fld_last_error());
        for (size_t s = 0; s < sizeof stacks / sizeof stacks[0]; s++) {
            int depth = 0;
            char stack[256] = "none";
            size_t len = 0;
            for (; depth < 3 && stacks[s][depth] >= 0; depth++) {
                rc = push_override(stacks[s][depth]);
                ck_assert_msg(rc == FLD_OK, "push %s: %s", override_names[stacks[s][depth]],
                              fld_last_error());
                len += (size_t)snprintf(stack + len, sizeof stack - len, "%s%s", depth ? " + " : "",
                                        override_names[stacks[s][depth]]);
            }
            unsigned want = allowed_winners(k, k, stacks[s], depth, !gamma_loaded, gamma_loaded);
            for (int op = 0; op < STRESS_N_OPS; op++) {
                const char *id = NULL;
                rc = fld_resolve(tt_catalog_op_names[op], FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
                ck_assert_msg(rc == FLD_OK, "after %s, overrides %s: fld_resolve(%s): %s: %s", what,
                              stack, tt_catalog_op_names[op], fld_strerror(rc), fld_last_error());
                int who = impl_by_id(id);
                char wanted[128];
                describe_mask(wanted, sizeof wanted, want);
                ck_assert_msg(who >= 0 && want == (1u << who),
                              "after %s, overrides %s: %s resolves to %s; the model says %s", what,
                              stack, tt_catalog_op_names[op], id, wanted);
            }
            while (depth-- > 0)
                ck_assert_int_eq(fld_policy_pop(), FLD_OK);
        }
    }
}

START_TEST(test_model_matches_selection)
{
    setup_stress_environment();
    /* The starting state is the environment's, like change 0 of the model. */
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_str_eq(id, impl_ids[model_winner(&env_model, false)]);
    check_model(false);
    int rc = fld_load_plugin(stressb_path);
    ck_assert_msg(rc == FLD_OK, "fld_load_plugin(%s): %s", stressb_path, fld_last_error());
    check_model(true);
    fld_shutdown();
}
END_TEST

static double run_seconds(void)
{
    const char *v = getenv("FLD_STRESS_SECONDS");
    double s = v ? atof(v) : 1.5;
    return s > 0 ? s : 1.5;
}

START_TEST(test_stress_every_op)
{
    setup_stress_environment();

    static struct worker workers[N_WORKERS];
    static struct policy_thread policy;
    pthread_t loader, noise;
    long resolves = 0;
    memset(&policy, 0, sizeof policy);
    for (int i = 0; i < N_WORKERS; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].id = i;
        tensors_init(&workers[i].t, 777u + 31u * (unsigned)i);
        ck_assert_int_eq(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]), 0);
    }
    ck_assert_int_eq(pthread_create(&policy.thread, NULL, policy_main, &policy), 0);
    ck_assert_int_eq(pthread_create(&loader, NULL, loader_main, NULL), 0);
    ck_assert_int_eq(pthread_create(&noise, NULL, noise_main, &resolves), 0);

    /* Run for the time asked once everything has happened at least twice,
     * within a hard limit that turns a stall into a failure. */
    const double seconds = run_seconds(), start = now_s(), hard_limit = 40.0 * tt_time_scale();
    double going_since = -1;
    bool stalled = false;
    while (!failed()) {
        const struct timespec tick = {0, 20 * 1000 * 1000};
        nanosleep(&tick, NULL);
        bool going = atomic_load(&gamma_finished) && atomic_load(&changes_finished) >= 2 * N_STEPS;
        for (int i = 0; i < N_WORKERS; i++)
            going = going && atomic_load(&workers[i].progress) >= 200;
        if (going && going_since < 0)
            going_since = now_s();
        if (going_since >= 0 && now_s() - going_since >= seconds)
            break;
        if (now_s() - start > hard_limit) {
            stalled = true;
            break;
        }
    }
    atomic_store(&stop_run, true);
    for (int i = 0; i < N_WORKERS; i++)
        pthread_join(workers[i].thread, NULL);
    pthread_join(policy.thread, NULL);
    pthread_join(loader, NULL);
    pthread_join(noise, NULL);
    ck_assert_msg(first_error[0] == '\0', "%s", first_error);
    ck_assert_msg(!stalled,
                  "no progress within %.0f s: %ld global changes, plugin loaded: %d, calls per "
                  "worker %ld %ld %ld %ld",
                  hard_limit, atomic_load(&changes_finished), atomic_load(&gamma_finished),
                  workers[0].calls, workers[1].calls, workers[2].calls, workers[3].calls);

    /* Every call is accounted for, each by exactly one implementation. */
    long total = 0, served[STRESS_N_IMPLS] = {0}, pushes = 0, overridden = 0;
    for (int i = 0; i < N_WORKERS; i++) {
        long sum = 0;
        for (int op = 0; op < STRESS_N_OPS; op++)
            for (int impl = 0; impl < STRESS_N_IMPLS; impl++) {
                sum += workers[i].tally[op][impl];
                served[impl] += workers[i].tally[op][impl];
            }
        ck_assert_msg(sum == workers[i].calls, "worker %d made %ld calls, %ld were served", i,
                      workers[i].calls, sum);
        total += sum;
        pushes += workers[i].pushes;
        overridden += workers[i].checked_overridden;
    }
    /* ... and the fixtures served no call that no worker saw. */
    void *ha = dlopen(stressa_path, RTLD_NOW | RTLD_NOLOAD);
    void *hb = dlopen(stressb_path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(ha);
    ck_assert_ptr_nonnull(hb);
    count_fn ta = (count_fn)dlsym(ha, "fld_stress_total_count");
    count_fn tb = (count_fn)dlsym(hb, "fld_stress_total_count");
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_nonnull(tb);
    for (int impl = STRESS_IMPL_ALPHA; impl < STRESS_N_IMPLS; impl++) {
        long n = 0;
        for (int op = 0; op < STRESS_N_OPS; op++)
            n += impl == STRESS_IMPL_GAMMA ? tb(op, impl) : ta(op, impl);
        ck_assert_msg(n == served[impl], "%s served %ld calls, the workers saw %ld", impl_ids[impl],
                      n, served[impl]);
    }
    dlclose(ha);
    dlclose(hb);
    /* The run exercised what it claims to. */
    for (int impl = 0; impl < STRESS_N_IMPLS; impl++)
        ck_assert_msg(served[impl] > 0, "%s never served a call", impl_ids[impl]);
    ck_assert_int_gt(pushes, 0);
    ck_assert_int_gt(overridden, 0);
    ck_assert_int_gt(resolves, 0);
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr,
                "%ld calls (ref %ld, alpha %ld, beta %ld, flagos %ld, gamma %ld), %ld under "
                "overrides, %ld pushes, %ld global changes, %ld resolves\n",
                total, served[0], served[1], served[2], served[3], served[4], overridden, pushes,
                policy.changes, resolves);
    fld_shutdown();
}
END_TEST

static Suite *stress_suite(void)
{
    Suite *s = suite_create("stress");
    TCase *tc = tcase_create("stress");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_model_matches_selection);
    tcase_add_test(tc, test_stress_every_op);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_stress", stress_suite());
}
