/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch tune [OP...] [--device D] [--dtype T] [--shapes SPEC]
 *                 [--hidden N,..] [--reps N] [--quick] [--out FILE] [--json]:
 * measured, shape-aware selection. For each op and dtype it times every
 * available implementation over row buckets (by default decode 1-16 rows,
 * small prefill 17-512, large prefill 513 and up), each on a few sample
 * row counts and hidden sizes, checks each result against the reference
 * implementation with verify's tolerances, and writes a manifest that pins
 * the fastest correct implementation per (op, device, dtype, row bucket).
 * Adjacent buckets with the same winner merge; an op whose winner is the
 * same everywhere gets one entry without rows.
 *
 * Method. Each implementation runs alone, pinned by a strict per-op order
 * 'impl:<id>' as verify pins it (so every one pays the same scoped-policy
 * cost per call). A sample's time is the median over --reps batches of the
 * time per call, each batch sized to last about 2 ms (0.2 ms with --quick);
 * a bucket's score is the geometric mean of its samples' times, so that
 * every sample weighs the same whatever its size. An implementation that
 * fails, declines or is wrong on any sample of a bucket cannot win it.
 *
 * Only the CPU for now: the tensors are host tensors.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/util.h"
#include "catalog.h"
#include "cli.h"
#include "json.h"
#include "options.h"
#include "verify.h"

#define TUNE_MAX_BUCKETS 6 /* as many as a manifest takes per (op, device, dtype) */
#define TUNE_MAX_SAMPLES 8
#define TUNE_MAX_HIDDEN  8
#define TUNE_MAX_IMPLS   16
#define TUNE_REFERENCE   "reference.c"

static const char tune_usage[] =
    "Usage: fldispatch tune [OP...] [--device D] [--dtype T] [--shapes SPEC]\n"
    "                       [--hidden N[,N...]] [--reps N] [--quick] [--out FILE] [--json]\n"
    "\n"
    "Times every available implementation of each op (default: every catalog op\n"
    "with tensors) over row buckets, checks each against the reference\n"
    "implementation (verify's tolerances), and writes a manifest that pins the\n"
    "fastest correct implementation per (op, device, dtype, row bucket). Use it\n"
    "with VLLM_FL_MANIFEST=FILE; 'fldispatch resolve --rows N OP' shows the\n"
    "choice for a call of N rows.\n"
    "\n"
    "  --device D     cpu (the only device tune measures for now)\n"
    "  --dtype T      f32, f16, bf16 (default: all three)\n"
    "  --shapes SPEC  the buckets and the row counts timed in each:\n"
    "                 'LO-HI=R,R;LO-=R' (default '1-16=1,4,16;17-512=64,256;513-=2048');\n"
    "                 at most 6 buckets, ascending, not overlapping\n"
    "  --hidden N,..  hidden sizes timed for each row count (default 2048,4096;\n"
    "                 activations: d, the output width; rotary: heads of 128)\n"
    "  --reps N       timed batches per sample (default 5); the median counts\n"
    "  --quick        short batches and one repetition (a smoke test, not a tuning)\n"
    "  --out FILE     write the manifest to FILE (atomically) instead of standard\n"
    "                 output; the table then goes to standard output, else to stderr\n"
    "  --json         one JSON object on standard output {\"schema\", \"device\",\n"
    "                 \"results\": [{\"op\", \"dtype\", \"rows\", \"impls\": [{\"impl_id\",\n"
    "                 \"ns\", \"correct\", \"why\"}], \"winner\"}], \"entries\"}; the\n"
    "                 manifest only with --out\n"
    "\n"
    "Exit status: 0 a manifest was written; 1 an implementation failed or was\n"
    "wrong (it is left out, the manifest is still written); 2 usage error or the\n"
    "file cannot be written; 3 nothing to tune (no op with an available\n"
    "implementation, or a device tune does not measure).\n";

struct bucket {
    int64_t lo, hi; /* hi INT64_MAX: no upper end */
    int64_t samples[TUNE_MAX_SAMPLES];
    int n_samples;
};

struct tune_opts {
    bool op_selected[TOOL_MAX_OPS];
    struct tool_op ops[TOOL_MAX_OPS];
    size_t n_ops;
    uint32_t dtypes; /* bits of enum tool_dtype */
    struct bucket buckets[TUNE_MAX_BUCKETS];
    int n_buckets;
    int64_t hidden[TUNE_MAX_HIDDEN];
    int n_hidden;
    int reps;
    double batch_ns;
    const char *out;
    bool json;
};

/* One implementation's outcome in one bucket. */
struct score {
    char impl[128];
    double ns; /* geometric mean over the samples; NAN when it cannot win */
    bool correct;
    char why[160];
};

/* One (op, dtype, bucket): every implementation's score and the winner. */
struct result {
    const char *op;
    int dtype;
    const struct bucket *bucket;
    struct score scores[TUNE_MAX_IMPLS];
    int n_scores;
    int winner; /* index in scores, -1 when none */
};

struct tune_run {
    struct result *results;
    size_t n, cap;
    bool failures;
};

/* ---- options -------------------------------------------------------------- */

static int parse_count(const char *text, int64_t *v)
{
    char *end;
    errno = 0;
    long long n = strtoll(text, &end, 10);
    if (*text < '0' || *text > '9' || errno || end == text || n < 1)
        return -1;
    *v = n;
    return (int)(end - text);
}

/* "LO-HI=R,R;LO-=R": the buckets, ascending and disjoint, each with its samples in range. */
static int parse_shapes(struct tune_opts *o, const char *spec)
{
    o->n_buckets = 0;
    const char *p = spec;
    while (*p) {
        if (o->n_buckets == TUNE_MAX_BUCKETS)
            return cli_usage_error("tune", "--shapes '%s': at most %d buckets", spec,
                                   TUNE_MAX_BUCKETS);
        struct bucket *b = &o->buckets[o->n_buckets];
        int n = parse_count(p, &b->lo);
        if (n < 0 || p[n] != '-')
            return cli_usage_error("tune", "--shapes '%s': expected LO-HI=R,... or LO-=R,... at '%s'",
                                   spec, p);
        p += n + 1;
        b->hi = INT64_MAX;
        if (*p != '=') {
            if ((n = parse_count(p, &b->hi)) < 0)
                return cli_usage_error("tune", "--shapes '%s': bad bucket end at '%s'", spec, p);
            p += n;
        }
        if (b->hi < b->lo)
            return cli_usage_error("tune", "--shapes '%s': bucket %" PRId64 "-%" PRId64
                                   " ends before it starts", spec, b->lo, b->hi);
        if (o->n_buckets && b->lo <= o->buckets[o->n_buckets - 1].hi)
            return cli_usage_error("tune", "--shapes '%s': buckets must ascend without overlap",
                                   spec);
        if (*p++ != '=')
            return cli_usage_error("tune", "--shapes '%s': expected '=' and row counts after "
                                   "bucket %" PRId64 "-", spec, b->lo);
        b->n_samples = 0;
        for (;;) {
            int64_t r;
            if (b->n_samples == TUNE_MAX_SAMPLES || (n = parse_count(p, &r)) < 0)
                return cli_usage_error("tune", "--shapes '%s': expected up to %d row counts at '%s'",
                                       spec, TUNE_MAX_SAMPLES, p);
            if (r < b->lo || r > b->hi)
                return cli_usage_error("tune", "--shapes '%s': row count %" PRId64
                                       " lies outside its bucket", spec, r);
            b->samples[b->n_samples++] = r;
            p += n;
            if (*p != ',')
                break;
            p++;
        }
        o->n_buckets++;
        if (*p == ';')
            p++;
        else if (*p)
            return cli_usage_error("tune", "--shapes '%s': unexpected '%s'", spec, p);
    }
    if (!o->n_buckets)
        return cli_usage_error("tune", "--shapes is empty");
    return CLI_EXIT_OK;
}

static int parse_hidden(struct tune_opts *o, const char *list)
{
    o->n_hidden = 0;
    for (const char *p = list;;) {
        int64_t h;
        int n = parse_count(p, &h);
        if (n < 0 || o->n_hidden == TUNE_MAX_HIDDEN || h % 128 || h > (1 << 20))
            return cli_usage_error("tune", "--hidden '%s': expected up to %d multiples of 128",
                                   list, TUNE_MAX_HIDDEN);
        o->hidden[o->n_hidden++] = h;
        p += n;
        if (!*p)
            return CLI_EXIT_OK;
        if (*p++ != ',')
            return cli_usage_error("tune", "--hidden '%s': expected N[,N...]", list);
    }
}

static int dtype_of(const char *name)
{
    static const char *const names[] = {"f32", "f16", "bf16"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

static int parse_options(struct tune_opts *o, int argc, char **argv)
{
    enum { OPT_DEVICE, OPT_DTYPE, OPT_SHAPES, OPT_HIDDEN, OPT_REPS, OPT_QUICK, OPT_OUT, OPT_JSON };
    static const struct cli_option options[] = {
        [OPT_DEVICE] = {"--device", true}, [OPT_DTYPE] = {"--dtype", true},
        [OPT_SHAPES] = {"--shapes", true}, [OPT_HIDDEN] = {"--hidden", true},
        [OPT_REPS] = {"--reps", true},     [OPT_QUICK] = {"--quick", false},
        [OPT_OUT] = {"--out", true},       [OPT_JSON] = {"--json", false},
        {NULL, false},
    };
    o->n_ops = tool_tensor_ops(o->ops);
    o->dtypes = 7;
    o->reps = 5;
    o->batch_ns = 2e6;
    int rc = parse_shapes(o, "1-16=1,4,16;17-512=64,256;513-=2048");
    if (rc == CLI_EXIT_OK)
        rc = parse_hidden(o, "2048,4096");
    if (rc != CLI_EXIT_OK)
        return rc;
    bool any_op = false, quick = false, reps_given = false;
    struct cli_args a;
    cli_args_init(&a, "tune", options, argc, argv);
    const char *value;
    for (int k; (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        switch (k) {
        case CLI_ARG_HELP:
            printf("%s", tune_usage);
            return -1;
        case CLI_ARG_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_ARG_OPERAND: {
            size_t i = 0;
            while (i < o->n_ops && strcmp(o->ops[i].name, value) != 0)
                i++;
            if (i == o->n_ops)
                return cli_usage_error("tune", "no such op '%s' with tensors to time", value);
            o->op_selected[i] = any_op = true;
            break;
        }
        case OPT_DEVICE: {
            int device;
            if (fld_device_from_name(value, &device) != FLD_OK)
                return cli_usage_error("tune", "unknown device '%s' (%s)", value,
                                       cli_device_list(CLI_DEVICES));
            if (device != FLD_DEVICE_CPU) {
                fprintf(stderr, "fldispatch tune: device %s: tune measures the cpu only for now\n",
                        cli_text(value));
                return CLI_EXIT_NONE;
            }
            break;
        }
        case OPT_DTYPE: {
            int dt = dtype_of(value);
            if (dt < 0)
                return cli_usage_error("tune", "unknown dtype '%s' (f32, f16, bf16)", value);
            o->dtypes = 1u << dt;
            break;
        }
        case OPT_SHAPES:
            if ((rc = parse_shapes(o, value)) != CLI_EXIT_OK)
                return rc;
            break;
        case OPT_HIDDEN:
            if ((rc = parse_hidden(o, value)) != CLI_EXIT_OK)
                return rc;
            break;
        case OPT_REPS: {
            int64_t n;
            if (parse_count(value, &n) != (int)strlen(value) || n > 1000)
                return cli_usage_error("tune", "invalid --reps '%s' (1 to 1000)", value);
            o->reps = (int)n;
            reps_given = true;
            break;
        }
        case OPT_QUICK:
            quick = true;
            break;
        case OPT_OUT:
            o->out = value;
            break;
        case OPT_JSON:
            o->json = true;
            break;
        }
    }
    for (size_t i = 0; !any_op && i < o->n_ops; i++)
        o->op_selected[i] = true;
    if (quick) {
        o->batch_ns = 2e5;
        if (!reps_given)
            o->reps = 1;
    }
    return CLI_EXIT_OK;
}

/* ---- one sample ----------------------------------------------------------- */

/* The case of `rows` rows and hidden size h: no residual, contiguous, rotary neox on heads of 128. */
static struct verify_case case_of(enum tool_family f, int64_t rows, int64_t h)
{
    struct verify_case c = {.family = f, .tokens = rows};
    switch (f) {
    case TOOL_FAMILY_ACTIVATION:
        c.d = h;
        break;
    case TOOL_FAMILY_NORM:
        c.h = h;
        break;
    case TOOL_FAMILY_ROTARY:
        c.neox = true;
        c.head = c.rot = 128;
        c.q_heads = h / 128;
        c.k_heads = h / 128 >= 8 ? h / 128 / 4 : 1;
        c.layout = VR_FLAT;
        break;
    case TOOL_FAMILY_NONE:
        break;
    }
    return c;
}

static int pin(const char *op, const char *impl)
{
    char spec[256];
    snprintf(spec, sizeof spec, "%s=impl:%s", op, impl);
    int rc = fld_policy_push_per_op(spec);
    if (rc == FLD_OK && (rc = fld_policy_push_strict(true)) != FLD_OK)
        fld_policy_pop();
    return rc;
}

static void unpin(void)
{
    fld_policy_pop();
    fld_policy_pop();
}

/* Whether every written tensor of got is within (atol, rtol) of want; else why. */
static bool matches(struct verify_io *got, struct verify_io *want, double atol, double rtol,
                    char *why, size_t size)
{
    for (int s = 0; s < VS_COUNT; s++) {
        if (!verify_slot_written(got, (enum verify_slot)s))
            continue;
        const struct tool_tensor *g = verify_slot(got, (enum verify_slot)s);
        const struct tool_tensor *w = verify_slot(want, (enum verify_slot)s);
        if (!g || !w)
            continue;
        int64_t n = tool_tensor_numel(w);
        for (int64_t i = 0; i < n; i++) {
            double a = tool_tensor_get(g, i), b = tool_tensor_get(w, i);
            if (isnan(a) && isnan(b))
                continue;
            if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
                snprintf(why, size, "wrong: %s[%" PRId64 "] = %g, the reference %g",
                         verify_slot_name((enum verify_slot)s), i, a, b);
                return false;
            }
        }
    }
    return true;
}

/* Median time per call of op on io, the implementation pinned by the caller. */
static double time_calls(const char *op, struct verify_io *io, const struct tune_opts *o)
{
    long calls = 1;
    for (;;) { /* calls per batch: about batch_ns */
        double t0 = bench_now_ns();
        for (long i = 0; i < calls; i++)
            verify_io_call(op, io);
        double dt = bench_now_ns() - t0;
        if (dt >= o->batch_ns / 4 || calls >= (1L << 24)) {
            calls = dt > 0 ? (long)(calls * o->batch_ns / dt) + 1 : calls;
            break;
        }
        calls *= 4;
    }
    double per[1000];
    for (int r = 0; r < o->reps; r++) {
        double t0 = bench_now_ns();
        for (long i = 0; i < calls; i++)
            verify_io_call(op, io);
        per[r] = (bench_now_ns() - t0) / (double)calls;
    }
    return bench_median(per, o->reps);
}

/*
 * One sample of one bucket: the reference's result, then each
 * implementation's, checked and timed; log sums go into scores.
 */
static void run_sample(const struct tune_opts *o, const char *op, enum tool_family f, int dtype,
                       int64_t rows, int64_t h, struct result *res, double *log_sum)
{
    struct verify_case c = case_of(f, rows, h);
    struct verify_io input, want;
    uint64_t seed = 0x74756e65ULL ^ (uint64_t)(rows * 131 + h);
    if (!verify_io_make(&input, &c, dtype, seed) || !verify_io_clone(&want, &input)) {
        for (int i = 0; i < res->n_scores; i++)
            snprintf(res->scores[i].why, sizeof res->scores[i].why, "out of memory");
        return;
    }
    int rc = pin(op, TUNE_REFERENCE);
    if (rc == FLD_OK) {
        rc = verify_io_call(op, &want);
        unpin();
    }
    double atol, rtol;
    verify_tolerance(f, dtype, &atol, &rtol);
    for (int i = 0; i < res->n_scores; i++) {
        struct score *s = &res->scores[i];
        if (!s->correct)
            continue;
        if (rc != FLD_OK) {
            snprintf(s->why, sizeof s->why, "no reference result: %s", fld_last_error());
            s->correct = false;
            continue;
        }
        struct verify_io got;
        if (!verify_io_clone(&got, &input)) {
            snprintf(s->why, sizeof s->why, "out of memory");
            s->correct = false;
            continue;
        }
        int st = pin(op, s->impl);
        if (st == FLD_OK) {
            st = verify_io_call(op, &got);
            if (st == FLD_OK && matches(&got, &want, atol, rtol, s->why, sizeof s->why))
                log_sum[i] += log(time_calls(op, &got, o));
            else if (st == FLD_OK)
                s->correct = false;
            unpin();
        }
        if (st != FLD_OK) {
            snprintf(s->why, sizeof s->why, "%s at %" PRId64 " rows: %s", fld_strerror(st), rows,
                     fld_last_error());
            s->correct = false;
        }
        verify_io_free(&got);
    }
    verify_io_free(&want);
    verify_io_free(&input);
}

/* ---- the plan ------------------------------------------------------------- */

struct impl_walk {
    const char *op;
    int dtype;
    struct result *res;
};

static int collect_impl(const fld_impl_info *info, void *user)
{
    struct impl_walk *w = user;
    if (strcmp(info->op, w->op) != 0 || !(info->devices & FLD_DEVICE_MASK_CPU) ||
        !(info->dtypes & (1u << w->dtype)) || !info->available ||
        w->res->n_scores == TUNE_MAX_IMPLS)
        return 0;
    struct score *s = &w->res->scores[w->res->n_scores++];
    snprintf(s->impl, sizeof s->impl, "%s", info->impl_id);
    s->correct = true;
    s->ns = NAN;
    return 0;
}

/* Whether the policy lets impl serve op here (pinning it resolves to it). */
static bool pinnable(const char *op, int dtype, const char *impl)
{
    if (pin(op, impl) != FLD_OK)
        return false;
    const char *selected = NULL;
    bool ok = fld_resolve(op, FLD_DEVICE_CPU, tool_dlpack_dtype(dtype), &selected) == FLD_OK &&
              selected && strcmp(selected, impl) == 0;
    unpin();
    return ok;
}

static struct result *add_result(struct tune_run *run)
{
    if (run->n == run->cap) {
        size_t cap = run->cap ? run->cap * 2 : 16;
        struct result *r = realloc(run->results, cap * sizeof *r);
        if (!r)
            return NULL;
        run->results = r;
        run->cap = cap;
    }
    struct result *r = &run->results[run->n++];
    memset(r, 0, sizeof *r);
    r->winner = -1;
    return r;
}

static int tune_bucket(const struct tune_opts *o, const struct tool_op *op, int dtype,
                       const struct bucket *b, struct tune_run *run)
{
    struct result *res = add_result(run);
    if (!res)
        return FLD_ENOMEM;
    res->op = op->name;
    res->dtype = dtype;
    res->bucket = b;
    struct impl_walk w = {op->name, dtype, res};
    fld_foreach_impl(collect_impl, &w);
    for (int i = 0; i < res->n_scores; i++)
        if (!pinnable(op->name, dtype, res->scores[i].impl)) {
            res->scores[i].correct = false;
            snprintf(res->scores[i].why, sizeof res->scores[i].why, "dropped by the policy");
        }
    double log_sum[TUNE_MAX_IMPLS] = {0};
    enum tool_family f = tool_op_family(op);
    for (int s = 0; s < b->n_samples; s++)
        for (int k = 0; k < o->n_hidden; k++)
            run_sample(o, op->name, f, dtype, b->samples[s], o->hidden[k], res, log_sum);
    const int samples = b->n_samples * o->n_hidden;
    for (int i = 0; i < res->n_scores; i++) {
        struct score *s = &res->scores[i];
        if (!s->correct) {
            if (strncmp(s->why, "dropped", 7) != 0)
                run->failures = true;
            continue;
        }
        s->ns = exp(log_sum[i] / samples);
        if (res->winner < 0 || s->ns < res->scores[res->winner].ns)
            res->winner = i;
    }
    return FLD_OK;
}

/* ---- output --------------------------------------------------------------- */

static const char *rows_label(const struct bucket *b, char *buf, size_t size)
{
    if (b->hi == INT64_MAX)
        snprintf(buf, size, "%" PRId64 "-", b->lo);
    else
        snprintf(buf, size, "%" PRId64 "-%" PRId64, b->lo, b->hi);
    return buf;
}

static const char *winner_of(const struct result *r)
{
    return r->winner >= 0 ? r->scores[r->winner].impl : NULL;
}

/*
 * The manifest's entries for the results [first, end) of one (op, dtype):
 * adjacent buckets with one winner merge; one winner everywhere gives one
 * entry without rows. Returns how many lines it wrote.
 */
static int write_entries(FILE *f, const struct result *r, size_t n)
{
    bool same = true;
    for (size_t i = 0; i < n; i++)
        same = same && winner_of(&r[i]) && winner_of(&r[0]) &&
               strcmp(winner_of(&r[i]), winner_of(&r[0])) == 0;
    const char *dt = tool_dtype_name(r[0].dtype);
    if (same && n) {
        fprintf(f, "  - {op: %s, device: cpu, dtype: %s, impl: %s}\n", r[0].op, dt,
                winner_of(&r[0]));
        return 1;
    }
    int lines = 0;
    for (size_t i = 0; i < n; i++) {
        const char *win = winner_of(&r[i]);
        if (!win)
            continue;
        size_t j = i;
        while (j + 1 < n && winner_of(&r[j + 1]) && strcmp(winner_of(&r[j + 1]), win) == 0 &&
               r[j + 1].bucket->lo == r[j].bucket->hi + 1)
            j++;
        struct bucket merged = *r[i].bucket;
        merged.hi = r[j].bucket->hi;
        char rows[48];
        fprintf(f, "  - {op: %s, device: cpu, dtype: %s, rows: %s, impl: %s}\n", r[i].op, dt,
                rows_label(&merged, rows, sizeof rows), win);
        lines++;
        i = j;
    }
    return lines;
}

static int write_manifest(FILE *f, const struct tune_run *run, const struct tune_opts *o)
{
    char model[128];
    bench_cpu_model(model, sizeof model);
    fprintf(f, "# fldispatch manifest, written by 'fldispatch tune' on %s\n", model);
    fprintf(f, "# the fastest correct implementation per row bucket; hidden sizes");
    for (int k = 0; k < o->n_hidden; k++)
        fprintf(f, " %" PRId64, o->hidden[k]);
    fprintf(f, "\nversion: 1\nentries:\n");
    int lines = 0;
    for (size_t i = 0; i < run->n;) {
        size_t j = i;
        while (j < run->n && run->results[j].op == run->results[i].op &&
               run->results[j].dtype == run->results[i].dtype)
            j++;
        lines += write_entries(f, &run->results[i], j - i);
        i = j;
    }
    if (!lines)
        fprintf(f, "  []\n");
    return lines;
}

/* Writes the manifest to path through a temporary file renamed over it. */
static int write_manifest_file(const char *path, const struct tune_run *run,
                               const struct tune_opts *o)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "fldispatch tune: cannot write '%s': %s\n", cli_text(tmp), strerror(errno));
        return CLI_EXIT_USAGE;
    }
    write_manifest(f, run, o);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "fldispatch tune: cannot write '%s': %s\n", cli_text(path),
                strerror(errno));
        unlink(tmp);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static void report_text(FILE *f, const struct tune_run *run)
{
    fprintf(f, "%-18s %-5s %-10s %-22s %12s  %s\n", "OP", "DTYPE", "ROWS", "IMPL", "NS/CALL",
            "NOTE");
    for (size_t i = 0; i < run->n; i++) {
        const struct result *r = &run->results[i];
        char rows[48];
        rows_label(r->bucket, rows, sizeof rows);
        for (int k = 0; k < r->n_scores; k++) {
            const struct score *s = &r->scores[k];
            if (s->correct)
                fprintf(f, "%-18s %-5s %-10s %-22s %12.1f  %s\n", r->op,
                        tool_dtype_name(r->dtype), rows, cli_text(s->impl), s->ns,
                        k == r->winner ? "<- fastest" : "");
            else
                fprintf(f, "%-18s %-5s %-10s %-22s %12s  %s\n", r->op, tool_dtype_name(r->dtype),
                        rows, cli_text(s->impl), "-", cli_text(s->why));
        }
    }
    fprintf(f, "NS/CALL: geometric mean over the bucket's row counts and hidden sizes of the "
               "median time per call (each implementation pinned alone).\n");
}

static void report_json(const struct tune_run *run, const struct tune_opts *o)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "device");
    json_string(&w, "cpu");
    json_key(&w, "hidden");
    json_begin_array(&w);
    for (int k = 0; k < o->n_hidden; k++)
        json_int(&w, o->hidden[k]);
    json_end_array(&w);
    json_key(&w, "results");
    json_begin_array(&w);
    for (size_t i = 0; i < run->n; i++) {
        const struct result *r = &run->results[i];
        char rows[48];
        json_begin_object(&w);
        json_key(&w, "op");
        json_string(&w, r->op);
        json_key(&w, "dtype");
        json_string(&w, tool_dtype_name(r->dtype));
        json_key(&w, "rows");
        json_string(&w, rows_label(r->bucket, rows, sizeof rows));
        json_key(&w, "impls");
        json_begin_array(&w);
        for (int k = 0; k < r->n_scores; k++) {
            const struct score *s = &r->scores[k];
            json_begin_object(&w);
            json_key(&w, "impl_id");
            json_string(&w, s->impl);
            json_key(&w, "ns");
            if (s->correct)
                json_double(&w, s->ns, 1);
            else
                json_null(&w);
            json_key(&w, "correct");
            json_bool(&w, s->correct);
            json_key(&w, "why");
            json_text_or_null(&w, s->correct ? NULL : s->why);
            json_end_object(&w);
        }
        json_end_array(&w);
        json_key(&w, "winner");
        json_text_or_null(&w, winner_of(r));
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "manifest");
    json_text_or_null(&w, o->out);
    json_end_object(&w);
    json_finish(&w);
}

int cmd_tune(int argc, char **argv)
{
    static struct tune_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_options(&o, argc, argv);
    if (rc < 0)
        return CLI_EXIT_OK; /* --help */
    if (rc != CLI_EXIT_OK)
        return rc;
    if ((rc = cli_init()) != CLI_EXIT_OK)
        return rc;
    struct tune_run run = {0};
    for (size_t i = 0; i < o.n_ops; i++) {
        if (!o.op_selected[i])
            continue;
        for (int dt = 0; dt < 3; dt++) {
            if (!(o.dtypes & (1u << dt)))
                continue;
            for (int b = 0; b < o.n_buckets; b++)
                if (tune_bucket(&o, &o.ops[i], dt, &o.buckets[b], &run) != FLD_OK) {
                    fprintf(stderr, "fldispatch tune: out of memory\n");
                    free(run.results);
                    return CLI_EXIT_USAGE;
                }
        }
    }
    verify_caches_free();
    bool any = false;
    for (size_t i = 0; i < run.n && !any; i++)
        any = run.results[i].winner >= 0;
    if (!any) {
        fprintf(stderr, "fldispatch tune: nothing to tune: no op has an available implementation "
                        "that ran correctly\n");
        free(run.results);
        return CLI_EXIT_NONE;
    }
    FILE *table = o.out ? stdout : stderr;
    if (o.json)
        report_json(&run, &o);
    else
        report_text(table, &run);
    if (o.out)
        rc = write_manifest_file(o.out, &run, &o);
    else if (!o.json)
        write_manifest(stdout, &run, &o);
    if (rc == CLI_EXIT_OK && run.failures)
        rc = CLI_EXIT_CHECK_FAILED;
    free(run.results);
    return rc;
}
