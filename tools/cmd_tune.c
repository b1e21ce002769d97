/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch tune [OP...] [--device D,..] [--dtype T,..] [--shapes SPEC]
 *                 [--hidden N,..] [--reps N] [--min-gain PCT] [--max-memory SIZE]
 *                 [--quick] [--quiet] [--out FILE] [--json]:
 * measured, shape-aware selection. For each op and dtype it times every
 * available implementation over row buckets (by default decode 1-16 rows,
 * small prefill 17-512, large prefill 513 and up), each on a few sample
 * row counts and hidden sizes, checks each result against the reference
 * implementation with verify's tolerances, and writes a manifest that pins
 * per (op, device, dtype, row bucket) the policy's own choice (the default
 * winner, what fld_resolve() selects) unless a correct challenger beats it
 * by more than the measured spread. Adjacent buckets with the same winner
 * merge; an op whose winner is the same everywhere gets one entry without
 * rows.
 *
 * Method. Each implementation runs pinned by a strict per-op order
 * 'impl:<id>' as verify pins it (so every one pays the same scoped-policy
 * cost per call). Every sample (a row count and hidden size) is timed in
 * --reps rounds; a round times one batch of each implementation in turn,
 * starting one further along each round (A B C, B C A, ...), so that a
 * change of load falls on all of them alike. A batch lasts about 2 ms (0.2
 * ms with --quick) and is timed in 16 stretches: the batch's mean time per
 * call and its fastest stretch's. Per round, the geometric mean over the
 * bucket's samples gives the implementation's "min" (fastest stretches:
 * what it costs when nothing interrupts it) and "mean" figures; the bucket
 * reports the median over rounds of each and their spread (interquartile
 * range over the median). A challenger is pinned over the default winner
 * only when its min is lower by more than both spreads together and
 * --min-gain, and its median is lower too; otherwise the default winner
 * stays. An implementation that fails, declines or is wrong on any sample
 * of a bucket cannot win it.
 *
 * Before anything is timed, the tensors of every sample are sized: a size
 * that overflows or exceeds --max-memory is an error naming the bucket, and
 * nothing is written. The clock is tune_clock.h's (a simulated one for the
 * tests).
 *
 * A device other than the CPU (--device cuda, rocm) is timed as an engine
 * that replays its steps from graphs sees it: each implementation's
 * TUNE_GRAPH_CALLS calls, on device copies of the sample's tensors, are
 * captured once in a graph (fld_device_graph_capture()), and a batch is
 * TUNE_STRETCHES replays of it (TUNE_QUICK_REPLAYS with --quick), each timed
 * by the device: its stretches. The device is never preempted, so every
 * stretch counts as clean. Its result is checked on a host copy against
 * reference.c's on the host tensors. A device whose plugin cannot capture
 * graphs is left out with the reason.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/internal/tool_api.h>

#include "bench/util.h"
#include "catalog.h"
#include "cli.h"
#include "device_tensors.h"
#include "json.h"
#include "options.h"
#include "tune_clock.h"
#include "vec.h"
#include "verify.h"

#define TUNE_MAX_BUCKETS   6 /* as many as a manifest takes per (op, device, dtype) */
#define TUNE_MAX_SAMPLES   8
#define TUNE_MAX_HIDDEN    8
#define TUNE_MAX_IMPLS     16
#define TUNE_MAX_ROUNDS    100
#define TUNE_STRETCHES     16   /* timed stretches per batch */
#define TUNE_NOISY         0.10 /* a spread past this is named in the warning */
#define TUNE_REFERENCE     "reference.c"
#define TUNE_ROPE_CACHE    (8192 * 128 * 2) /* elements of the rotary cos/sin cache and its copy */
#define TUNE_GRAPH_CALLS   20 /* calls captured in a device graph, as a decode step's layers */
#define TUNE_QUICK_REPLAYS 4  /* replays per device batch with --quick */

static const char tune_usage[] =
    "Usage: fldispatch tune [OP...] [--device D[,D...]] [--dtype T[,T...]] [--shapes SPEC]\n"
    "                       [--hidden N[,N...]] [--reps N] [--min-gain PCT]\n"
    "                       [--max-memory SIZE] [--quick] [--quiet] [--out FILE] [--json]\n"
    "\n"
    "Times every available implementation of each op (default: every catalog op\n"
    "with tensors) over row buckets, checks each against the reference\n"
    "implementation (verify's tolerances), and writes a manifest that pins, per\n"
    "(op, device, dtype, row bucket), the policy's own choice (the default\n"
    "winner) unless a correct challenger is faster by more than the measured\n"
    "spread. Use it with VLLM_FL_MANIFEST=FILE; 'fldispatch resolve --rows N OP'\n"
    "shows the choice for a call of N rows.\n"
    "\n"
    "Each sample is timed in rounds, the implementations alternated within each\n"
    "round; per implementation the table gives MIN (the median over rounds of the\n"
    "fastest stretch of calls during which no thread of the process was preempted:\n"
    "its cost when nothing interrupts it; 'interrupted' with fewer than 2 such\n"
    "rounds, and then it is not compared), MEDIAN (of the batches' mean) and\n"
    "SPREAD (interquartile range over the median). A challenger is pinned only\n"
    "when its MIN is lower than the default winner's by\n"
    "more than both SPREADs of MIN and --min-gain, and its MEDIAN is lower too;\n"
    "otherwise the default stays (\"kept default\", with the reason). A warning\n"
    "on stderr says when the machine is loaded (load average above the online\n"
    "cores) or a spread passed 10%, and names the buckets that stayed undecided.\n"
    "\n"
    "  --device D,..    cpu (default), cuda, rocm: a GPU is timed under graph\n"
    "                   replay (device time of 20 calls captured in a CUDA or HIP\n"
    "                   graph); a device that cannot be timed is left out with\n"
    "                   the reason, exit 3 when none is left\n"
    "  --dtype T,..     f32, f16, bf16, comma-separated (default: all three)\n"
    "  --shapes SPEC    the buckets and the row counts timed in each:\n"
    "                   'LO-HI=R,R;LO-=R' (default '1-16=1,4,16;17-512=64,256;513-=2048');\n"
    "                   at most 6 buckets, ascending, not overlapping\n"
    "  --hidden N,..    hidden sizes timed for each row count (default 2048,4096;\n"
    "                   activations: d, the output width; rotary: heads of 128)\n"
    "  --reps N         rounds per sample, 2 to 100 (default 5; 3 with --quick)\n"
    "  --min-gain PCT   the least gain that pins a challenger over the default\n"
    "                   winner, in percent (default 5)\n"
    "  --max-memory SIZE  the most a sample's tensors may take, in bytes or with\n"
    "                   K, M, G or T (default: half the available memory); checked for\n"
    "                   every bucket before anything is timed\n"
    "  --quick          short batches, 4 replays on a GPU (a smoke test, not a tuning)\n"
    "  --quiet          no progress line (it is shown only when stderr is a terminal)\n"
    "  --out FILE       write the manifest to FILE (atomically) instead of standard\n"
    "                   output; the table then goes to standard output, else to stderr\n"
    "  --json           one JSON object on standard output (docs/schemas/tune.schema.json):\n"
    "                   every implementation's figures, each loser's why, each\n"
    "                   bucket's default and decision; the manifest only with --out\n"
    "\n"
    "Exit status: 0 a manifest was written; 1 an implementation failed or was\n"
    "wrong (it is left out, the manifest is still written); 2 usage error, a\n"
    "bucket whose tensors overflow, exceed --max-memory or cannot be allocated\n"
    "(nothing is written), or the file cannot be written; 3 nothing to tune (no\n"
    "op with an available implementation, or no device tune measures).\n";

struct bucket {
    int64_t lo, hi; /* hi INT64_MAX: no upper end */
    int64_t samples[TUNE_MAX_SAMPLES];
    int n_samples;
};

struct tune_opts {
    int devices[CLI_MAX_DEVICES]; /* device types, as given */
    int n_devices;
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
    int replays;       /* per device batch */
    double min_gain;   /* fraction */
    double max_memory; /* bytes */
    const char *out;
    bool json, quiet;
};

/* One implementation's outcome in one bucket. */
struct score {
    char impl[128];
    double min_ns, median_ns; /* NAN when it cannot win */
    double min_spread, spread;
    int clean_rounds; /* rounds in which every sample had a stretch no preemption touched */
    bool correct;
    char why[200];
};

enum decision {
    DECIDED_NONE,      /* no correct implementation */
    DECIDED_DEFAULT,   /* the default winner is the fastest */
    DECIDED_PINNED,    /* a challenger beat it by more than the spread */
    DECIDED_UNDECIDED, /* a challenger looked faster, within the spread: kept the default */
    DECIDED_FALLBACK   /* the default winner cannot serve: the fastest correct one */
};

/* One (op, device, dtype, bucket): every implementation's score and the winner. */
struct result {
    const char *op;
    int device; /* device type */
    int dtype;
    const struct bucket *bucket;
    struct score scores[TUNE_MAX_IMPLS];
    int n_scores;
    int winner;             /* index in scores, -1 when none */
    char default_impl[128]; /* what the policy selects; empty when nothing */
    enum decision decision;
    char reason[240];
    bool noisy; /* a correct implementation's spread passed TUNE_NOISY */
};

struct tune_run {
    struct result *results;
    size_t n, cap;
    bool failures;
    char alloc_error[400]; /* a sample's tensors could not be allocated: what and where */
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
            return cli_usage_error(
                "tune", "--shapes '%s': expected LO-HI=R,... or LO-=R,... at '%s'", spec, p);
        p += n + 1;
        b->hi = INT64_MAX;
        if (*p != '=') {
            if ((n = parse_count(p, &b->hi)) < 0)
                return cli_usage_error("tune", "--shapes '%s': bad bucket end at '%s'", spec, p);
            p += n;
        }
        if (b->hi < b->lo)
            return cli_usage_error(
                "tune", "--shapes '%s': bucket %" PRId64 "-%" PRId64 " ends before it starts", spec,
                b->lo, b->hi);
        if (o->n_buckets && b->lo <= o->buckets[o->n_buckets - 1].hi)
            return cli_usage_error("tune", "--shapes '%s': buckets must ascend without overlap",
                                   spec);
        if (*p++ != '=')
            return cli_usage_error("tune",
                                   "--shapes '%s': expected '=' and row counts after "
                                   "bucket %" PRId64 "-",
                                   spec, b->lo);
        b->n_samples = 0;
        for (;;) {
            int64_t r;
            if (b->n_samples == TUNE_MAX_SAMPLES || (n = parse_count(p, &r)) < 0)
                return cli_usage_error("tune",
                                       "--shapes '%s': expected up to %d row counts at '%s'", spec,
                                       TUNE_MAX_SAMPLES, p);
            if (r < b->lo || r > b->hi)
                return cli_usage_error(
                    "tune", "--shapes '%s': row count %" PRId64 " lies outside its bucket", spec,
                    r);
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

static int dtype_of(const char *name, size_t len)
{
    static const char *const names[] = {"f32", "f16", "bf16"};
    for (int i = 0; i < 3; i++)
        if (strlen(names[i]) == len && strncmp(name, names[i], len) == 0)
            return i;
    return -1;
}

/* "f32,bf16": the dtypes' bits. */
static int parse_dtypes(struct tune_opts *o, const char *list)
{
    o->dtypes = 0;
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        int dt = dtype_of(p, len);
        if (dt < 0)
            return cli_usage_error("tune", "--dtype '%s': unknown dtype '%.*s' (f32, f16, bf16)",
                                   list, (int)len, p);
        o->dtypes |= 1u << dt;
        if (!p[len])
            return CLI_EXIT_OK;
        p += len + 1;
    }
}

/* "cpu,cuda": the devices in o->devices, each once, in the order given. */
static int parse_devices(struct tune_opts *o, const char *list)
{
    o->n_devices = 0;
    char name[64];
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        int device;
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        if (!len || len >= sizeof name || fld_device_from_name(name, &device) != FLD_OK)
            return cli_usage_error("tune", "--device '%s': unknown device '%.*s' (%s)", list,
                                   (int)len, p, cli_device_list(CLI_DEVICES));
        bool seen = false;
        for (int i = 0; i < o->n_devices; i++)
            seen = seen || o->devices[i] == device;
        if (!seen && o->n_devices < CLI_MAX_DEVICES)
            o->devices[o->n_devices++] = device;
        if (!p[len])
            break;
        p += len + 1;
    }
    return CLI_EXIT_OK;
}

/* "512M", "2G", "1048576": bytes. */
static int parse_size(const char *text, double *bytes)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    double unit = 1;
    if (*end == 'K' || *end == 'k')
        unit = 1024.0;
    else if (*end == 'M' || *end == 'm')
        unit = 1024.0 * 1024;
    else if (*end == 'G' || *end == 'g')
        unit = 1024.0 * 1024 * 1024;
    else if (*end == 'T' || *end == 't')
        unit = 1024.0 * 1024 * 1024 * 1024;
    if (unit > 1)
        end++;
    /* 2^64 bytes and more cannot be addressed: refused, not clamped. */
    if (*text < '0' || *text > '9' || errno || end == text || *end || !(v > 0) ||
        !(v * unit < 18446744073709551616.0))
        return cli_usage_error("tune",
                               "invalid --max-memory '%s' (bytes, or a number with K, M, "
                               "G or T; below 2^64 bytes)",
                               text);
    *bytes = v * unit;
    return CLI_EXIT_OK;
}

/* Half the memory the kernel says is available (MemAvailable), else half the physical memory. */
static double default_max_memory(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    if (kib > 0)
        return kib * 1024 / 2;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page / 2 : 1024.0 * 1024 * 1024;
}

static int parse_options(struct tune_opts *o, int argc, char **argv)
{
    enum {
        OPT_DEVICE,
        OPT_DTYPE,
        OPT_SHAPES,
        OPT_HIDDEN,
        OPT_REPS,
        OPT_MIN_GAIN,
        OPT_MAX_MEMORY,
        OPT_QUICK,
        OPT_QUIET,
        OPT_OUT,
        OPT_JSON
    };
    static const struct cli_option options[] = {
        [OPT_DEVICE] = {"--device", true},
        [OPT_DTYPE] = {"--dtype", true},
        [OPT_SHAPES] = {"--shapes", true},
        [OPT_HIDDEN] = {"--hidden", true},
        [OPT_REPS] = {"--reps", true},
        [OPT_MIN_GAIN] = {"--min-gain", true},
        [OPT_MAX_MEMORY] = {"--max-memory", true},
        [OPT_QUICK] = {"--quick", false},
        [OPT_QUIET] = {"--quiet", false},
        [OPT_OUT] = {"--out", true},
        [OPT_JSON] = {"--json", false},
        {NULL, false},
    };
    o->n_ops = tool_tensor_ops(o->ops);
    o->devices[0] = FLD_DEVICE_CPU;
    o->n_devices = 1;
    o->dtypes = 7;
    o->reps = 5;
    o->batch_ns = 2e6;
    o->replays = TUNE_STRETCHES;
    o->min_gain = 0.05;
    o->max_memory = -1;
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
        case OPT_DEVICE:
            if ((rc = parse_devices(o, value)) != CLI_EXIT_OK)
                return rc;
            break;
        case OPT_DTYPE:
            if ((rc = parse_dtypes(o, value)) != CLI_EXIT_OK)
                return rc;
            break;
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
            if (parse_count(value, &n) != (int)strlen(value) || n < 2 || n > TUNE_MAX_ROUNDS)
                return cli_usage_error("tune", "invalid --reps '%s' (2 to %d rounds)", value,
                                       TUNE_MAX_ROUNDS);
            o->reps = (int)n;
            reps_given = true;
            break;
        }
        case OPT_MIN_GAIN: {
            char *end;
            errno = 0;
            double pct = strtod(value, &end);
            if (errno || end == value || *end || !(pct >= 0 && pct < 100))
                return cli_usage_error("tune",
                                       "invalid --min-gain '%s' (a percentage, 0 to "
                                       "less than 100)",
                                       value);
            o->min_gain = pct / 100;
            break;
        }
        case OPT_MAX_MEMORY:
            if ((rc = parse_size(value, &o->max_memory)) != CLI_EXIT_OK)
                return rc;
            break;
        case OPT_QUICK:
            quick = true;
            break;
        case OPT_QUIET:
            o->quiet = true;
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
        o->replays = TUNE_QUICK_REPLAYS;
        if (!reps_given)
            o->reps = 3;
    }
    if (o->max_memory < 0)
        o->max_memory = default_max_memory();
    return CLI_EXIT_OK;
}

/* ---- one sample ----------------------------------------------------------- */

/* The case of `rows` rows and hidden size h: no residual, contiguous, rotary neox on heads of 128.
 */
static struct verify_case case_of(enum tool_family f, int64_t rows, int64_t h)
{
    struct verify_case c = {.family = f, .tokens = rows};
    switch (f) {
    case TOOL_FAMILY_ACTIVATION:
    case TOOL_FAMILY_ELEMENTWISE:
        c.d = h;
        break;
    case TOOL_FAMILY_NORM:
        c.h = h;
        break;
    case TOOL_FAMILY_ROTARY:
    case TOOL_FAMILY_ROTARY_OUT:
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

/*
 * The bytes a sample's tensors take: the input, the reference's result and
 * the copy the implementations run on (the rotary cos/sin cache beside
 * them). false when the size overflows.
 */
static bool sample_bytes(enum tool_family f, int dtype, int64_t rows, int64_t h, double *bytes)
{
    struct verify_case c = case_of(f, rows, h);
    uint64_t elems = 0, extra = 0, t;
    switch (f) {
    case TOOL_FAMILY_ACTIVATION:  /* x [T, 2d], out [T, d] */
    case TOOL_FAMILY_ELEMENTWISE: /* x, out [T, d] */
        if (__builtin_mul_overflow((uint64_t)c.tokens, (uint64_t)c.d, &t) ||
            __builtin_mul_overflow(t, (uint64_t)(f == TOOL_FAMILY_ACTIVATION ? 3 : 2), &elems))
            return false;
        break;
    case TOOL_FAMILY_NORM: /* x, out [T, h], weight [h] */
        if (__builtin_mul_overflow((uint64_t)c.tokens, (uint64_t)c.h, &t) ||
            __builtin_mul_overflow(t, (uint64_t)2, &elems) ||
            __builtin_add_overflow(elems, (uint64_t)c.h, &elems))
            return false;
        break;
    case TOOL_FAMILY_ROTARY:     /* query, key [T, heads * 128], positions [T] int64 */
    case TOOL_FAMILY_ROTARY_OUT: /* the same, query_out and key_out beside */
        if (__builtin_mul_overflow((uint64_t)c.tokens,
                                   (uint64_t)((c.q_heads + c.k_heads) * c.head *
                                              (f == TOOL_FAMILY_ROTARY_OUT ? 2 : 1)),
                                   &elems) ||
            __builtin_mul_overflow((uint64_t)c.tokens, (uint64_t)8, &extra))
            return false;
        break;
    case TOOL_FAMILY_NONE:
        break;
    }
    uint64_t one;
    if (__builtin_mul_overflow(elems, (uint64_t)tool_dtype_size(dtype), &one) ||
        __builtin_add_overflow(one, extra, &one) || __builtin_mul_overflow(one, (uint64_t)3, &one))
        return false;
    *bytes = (double)one + (f == TOOL_FAMILY_ROTARY || f == TOOL_FAMILY_ROTARY_OUT
                                ? (double)TUNE_ROPE_CACHE * (double)tool_dtype_size(dtype)
                                : 0);
    return true;
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

/*
 * Whether every written tensor of got is within (atol, rtol) of want; else
 * why, with the largest error beyond the tolerance and where it is.
 */
static bool matches(struct verify_io *got, struct verify_io *want, double atol, double rtol,
                    char *why, size_t size)
{
    double worst = -1, worst_got = 0, worst_want = 0;
    int64_t worst_i = 0, bad = 0;
    int worst_slot = 0;
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
            if (fabs(a - b) <= atol + rtol * fabs(b))
                continue;
            double err = isnan(a - b) ? INFINITY : fabs(a - b);
            bad++;
            if (err > worst) {
                worst = err;
                worst_got = a;
                worst_want = b;
                worst_i = i;
                worst_slot = s;
            }
        }
    }
    if (!bad)
        return true;
    snprintf(why, size,
             "wrong: max error %.3g at %s[%" PRId64 "] (%g, the reference %g; %" PRId64
             " element(s) beyond atol %g + rtol %g)",
             worst, verify_slot_name((enum verify_slot)worst_slot), worst_i, worst_got, worst_want,
             bad, atol, rtol);
    return false;
}

/*
 * One batch of `calls` calls of op on io (impl pinned by the caller), timed in
 * TUNE_STRETCHES stretches: the mean time per call and the fastest clean
 * stretch's (one during which no thread of the process was preempted; NAN
 * when none was).
 */
static void time_batch(const char *op, const char *impl, struct verify_io *io, long calls,
                       double *mean, double *fastest)
{
    long per = calls / TUNE_STRETCHES > 0 ? calls / TUNE_STRETCHES : 1;
    int stretches = calls >= TUNE_STRETCHES ? TUNE_STRETCHES : (int)calls;
    double sum = 0;
    *fastest = NAN;
    for (int k = 0; k < stretches; k++) {
        struct tune_mark m;
        bool clean;
        tune_clock_start(&m);
        for (long i = 0; i < per; i++)
            verify_io_call(op, io);
        double t = tune_clock_stop(&m, impl, per, &clean);
        sum += t;
        if (clean && !(t >= *fastest))
            *fastest = t;
    }
    *mean = sum / stretches;
}

/* Calls per batch for about batch_ns (impl pinned by the caller). */
static long batch_calls(const char *op, const char *impl, struct verify_io *io,
                        const struct tune_opts *o)
{
    long calls = 1;
    for (;;) {
        struct tune_mark m;
        bool clean;
        tune_clock_start(&m);
        for (long i = 0; i < calls; i++)
            verify_io_call(op, io);
        double dt = tune_clock_stop(&m, impl, calls, &clean) * (double)calls;
        if (dt >= o->batch_ns / 4 || calls >= (1L << 24))
            return dt > 0 ? (long)((double)calls * o->batch_ns / dt) + 1 : calls;
        calls *= 4;
    }
}

/* Per-bucket accumulators: sums over samples of the logs of each round's figures. */
struct round_logs {
    double min[TUNE_MAX_IMPLS][TUNE_MAX_ROUNDS];
    double mean[TUNE_MAX_IMPLS][TUNE_MAX_ROUNDS];
    bool interrupted[TUNE_MAX_IMPLS][TUNE_MAX_ROUNDS]; /* a sample had no clean stretch */
};

/* Copies every owned tensor of src into dst (same layout: dst is a clone of src). */
static void io_copy(struct verify_io *dst, const struct verify_io *src)
{
    for (int s = 0; s < VS_COUNT; s++)
        if (src->t[s].alloc)
            tool_tensor_copy(&dst->t[s], &src->t[s]);
}

/* The host tensors of one sample: its input, the reference's result and a copy to run on. */
struct sample {
    struct verify_case c;
    struct verify_io input, want, got;
    int reference_rc; /* the reference's status (its message in fld_last_error() after it) */
    double atol, rtol;
};

/*
 * Makes the sample of `rows` rows and hidden size h, and runs the reference
 * on want. false when the tensors cannot be allocated (err says so; nothing
 * is left allocated).
 */
static bool sample_make(struct sample *sm, const char *op, enum tool_family f, int dtype,
                        int64_t rows, int64_t h, char *err, size_t err_size)
{
    sm->c = case_of(f, rows, h);
    const uint64_t seed = 0x74756e65ULL ^ (uint64_t)(rows * 131 + h);
    if (!verify_io_make(&sm->input, &sm->c, dtype, seed))
        goto no_memory;
    if (!verify_io_clone(&sm->want, &sm->input))
        goto free_input;
    if (!verify_io_clone(&sm->got, &sm->input))
        goto free_want;
    sm->reference_rc = pin(op, TUNE_REFERENCE);
    if (sm->reference_rc == FLD_OK) {
        sm->reference_rc = verify_io_call(op, &sm->want);
        unpin();
    }
    verify_tolerance(f, dtype, &sm->atol, &sm->rtol);
    return true;

free_want:
    verify_io_free(&sm->want);
free_input:
    verify_io_free(&sm->input);
no_memory:;
    double bytes = 0;
    sample_bytes(f, dtype, rows, h, &bytes);
    snprintf(err, err_size,
             "could not allocate the tensors of %" PRId64 " rows, hidden %" PRId64 " (%.0f MiB)",
             rows, h, bytes / 1048576);
    return false;
}

/* Without a reference result nothing can be checked: every implementation still in the running
 * fails, with the reference's message. */
static void sample_fail_without_reference(const struct sample *sm, struct result *res)
{
    if (sm->reference_rc == FLD_OK)
        return;
    for (int i = 0; i < res->n_scores; i++)
        if (res->scores[i].correct) {
            snprintf(res->scores[i].why, sizeof res->scores[i].why, "no reference result: %s",
                     fld_last_error());
            res->scores[i].correct = false;
        }
}

static void sample_free(struct sample *sm)
{
    verify_io_free(&sm->got);
    verify_io_free(&sm->want);
    verify_io_free(&sm->input);
}

/*
 * One sample of one bucket: the reference's result, each implementation's,
 * checked; then the correct ones timed in alternated rounds, their logs
 * added to logs. false when the tensors cannot be allocated (err says so).
 */
static bool run_sample(const struct tune_opts *o, const char *op, enum tool_family f, int dtype,
                       int64_t rows, int64_t h, struct result *res, struct round_logs *logs,
                       char *err, size_t err_size)
{
    struct sample sm;
    if (!sample_make(&sm, op, f, dtype, rows, h, err, err_size))
        return false;
    sample_fail_without_reference(&sm, res);
    int timed[TUNE_MAX_IMPLS], n_timed = 0;
    long calls[TUNE_MAX_IMPLS];
    for (int i = 0; i < res->n_scores; i++) {
        struct score *s = &res->scores[i];
        if (!s->correct)
            continue;
        io_copy(&sm.got, &sm.input);
        int st = pin(op, s->impl);
        if (st == FLD_OK) {
            st = verify_io_call(op, &sm.got);
            if (st == FLD_OK &&
                matches(&sm.got, &sm.want, sm.atol, sm.rtol, s->why, sizeof s->why)) {
                calls[n_timed] = batch_calls(op, s->impl, &sm.got, o);
                timed[n_timed++] = i;
            } else if (st == FLD_OK)
                s->correct = false;
            unpin();
        }
        if (st != FLD_OK) {
            snprintf(s->why, sizeof s->why, "%s at %" PRId64 " rows: %s", fld_strerror(st), rows,
                     fld_last_error());
            s->correct = false;
        }
    }
    /* Rounds: A B C, B C A, C A B, ... */
    for (int r = 0; r < o->reps; r++)
        for (int j = 0; j < n_timed; j++) {
            int k = (j + r) % n_timed, i = timed[k];
            double mean = NAN, fastest = NAN;
            if (pin(op, res->scores[i].impl) == FLD_OK) {
                time_batch(op, res->scores[i].impl, &sm.got, calls[k], &mean, &fastest);
                unpin();
            }
            logs->mean[i][r] += log(mean);
            if (isfinite(fastest))
                logs->min[i][r] += log(fastest);
            else
                logs->interrupted[i][r] = true;
        }
    sample_free(&sm);
    return true;
}

/* ---- one sample on a device ---------------------------------------------- */

/* The device copies of one implementation's tensors and its graph. */
struct device_run {
    struct dev_tensor t[VS_COUNT];
    DLTensor *views[VS_COUNT];
    fld_device_graph *graph;
};

static void device_run_free(struct device_run *d)
{
    fld_device_graph_free(d->graph);
    d->graph = NULL;
    for (int s = 0; s < VS_COUNT; s++)
        dev_tensor_free(&d->t[s]);
}

/* Device copies of every tensor of io (the cos/sin cache too); false with why. */
static bool device_run_upload(struct device_run *d, DLDevice dev, struct verify_io *io, char *why,
                              size_t size)
{
    memset(d, 0, sizeof *d);
    for (int s = 0; s < VS_COUNT; s++) {
        struct tool_tensor *tt = verify_slot(io, (enum verify_slot)s);
        if (!tt)
            continue;
        if (dev_tensor_upload(&d->t[s], dev, tt, 0) != FLD_OK) {
            snprintf(why, size, "copying '%s' to the device: %s",
                     verify_slot_name((enum verify_slot)s), fld_last_error());
            device_run_free(d);
            return false;
        }
        d->views[s] = &d->t[s].t;
    }
    return true;
}

/* Copies the written tensors back into io; false with why. */
static bool device_run_download(struct device_run *d, struct verify_io *io, char *why, size_t size)
{
    for (int s = 0; s < VS_COUNT; s++)
        if (d->views[s] && verify_slot_written(io, (enum verify_slot)s) &&
            dev_tensor_download(&d->t[s], verify_slot(io, (enum verify_slot)s)) != FLD_OK) {
            snprintf(why, size, "copying '%s' back from the device: %s",
                     verify_slot_name((enum verify_slot)s), fld_last_error());
            return false;
        }
    return true;
}

/* What a graph records: TUNE_GRAPH_CALLS calls of op (pinned by the caller). */
struct recording {
    const char *op;
    const struct verify_case *c;
    DLTensor *const *views;
};

static int record_calls(void *user)
{
    const struct recording *r = user;
    for (int i = 0; i < TUNE_GRAPH_CALLS; i++) {
        int rc = verify_call(r->op, r->c, r->views);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

/*
 * One batch on a device: o->replays replays of the graph of d, each a
 * stretch: the mean time per call and the fastest's. false with why when
 * the replay fails.
 */
static bool replay_batch(const struct tune_opts *o, const char *impl, struct device_run *d,
                         double *mean, double *fastest, char *why, size_t size)
{
    double ns[TUNE_STRETCHES];
    if (fld_device_graph_replay(d->graph, o->replays, ns) != FLD_OK) {
        snprintf(why, size, "replaying its graph: %s", fld_last_error());
        return false;
    }
    double sum = 0;
    *fastest = NAN;
    for (int k = 0; k < o->replays; k++) {
        double t = tune_clock_device(ns[k], impl, TUNE_GRAPH_CALLS);
        sum += t;
        if (!(t >= *fastest))
            *fastest = t;
    }
    *mean = sum / o->replays;
    return true;
}

/*
 * One sample of one bucket on a device: the reference's result on the host
 * tensors; each implementation's on its device copies, brought back and
 * checked; the correct ones captured in graphs and replayed in alternated
 * rounds, their logs added to logs. false when the host tensors cannot be
 * allocated (err says so); a device failure fails the implementation.
 */
static bool run_sample_device(const struct tune_opts *o, int device, const char *op,
                              enum tool_family f, int dtype, int64_t rows, int64_t h,
                              struct result *res, struct round_logs *logs, char *err,
                              size_t err_size)
{
    const DLDevice dev = {(DLDeviceType)device, 0};
    struct sample sm;
    if (!sample_make(&sm, op, f, dtype, rows, h, err, err_size))
        return false;
    sample_fail_without_reference(&sm, res);
    struct device_run *runs = calloc(TUNE_MAX_IMPLS, sizeof *runs); /* n_scores at most */
    if (!runs) {
        sample_free(&sm);
        snprintf(err, err_size, "out of memory");
        return false;
    }
    int timed[TUNE_MAX_IMPLS], n_timed = 0;
    for (int i = 0; i < res->n_scores; i++) {
        struct score *s = &res->scores[i];
        struct device_run *d = &runs[i];
        if (!s->correct)
            continue;
        if (!device_run_upload(d, dev, &sm.input, s->why, sizeof s->why)) {
            s->correct = false;
            continue;
        }
        int st = pin(op, s->impl);
        if (st == FLD_OK) {
            st = verify_call(op, &sm.c, d->views);
            if (st == FLD_OK && fld_device_synchronize(dev) != FLD_OK) {
                snprintf(s->why, sizeof s->why, "synchronizing after its call: %s",
                         fld_last_error());
                s->correct = false;
            } else if (st == FLD_OK) {
                io_copy(&sm.got, &sm.input);
                struct recording r = {op, &sm.c, d->views};
                if (!device_run_download(d, &sm.got, s->why, sizeof s->why) ||
                    !matches(&sm.got, &sm.want, sm.atol, sm.rtol, s->why, sizeof s->why))
                    s->correct = false;
                else if (fld_device_graph_capture(dev, record_calls, &r, &d->graph) != FLD_OK) {
                    snprintf(s->why, sizeof s->why, "capturing %d calls in a graph: %s",
                             TUNE_GRAPH_CALLS, fld_last_error());
                    s->correct = false;
                } else
                    timed[n_timed++] = i;
            }
            unpin();
        }
        if (st != FLD_OK) {
            snprintf(s->why, sizeof s->why, "%s at %" PRId64 " rows: %s", fld_strerror(st), rows,
                     fld_last_error());
            s->correct = false;
        }
        if (!s->correct)
            device_run_free(d);
    }
    /* Rounds: A B C, B C A, C A B, ... */
    for (int r = 0; r < o->reps; r++)
        for (int j = 0; j < n_timed; j++) {
            int i = timed[(j + r) % n_timed];
            struct score *s = &res->scores[i];
            double mean = NAN, fastest = NAN;
            if (!s->correct)
                continue;
            if (!replay_batch(o, s->impl, &runs[i], &mean, &fastest, s->why, sizeof s->why)) {
                s->correct = false;
                continue;
            }
            logs->mean[i][r] += log(mean);
            logs->min[i][r] += log(fastest);
        }
    for (int i = 0; i < res->n_scores; i++)
        device_run_free(&runs[i]);
    free(runs);
    sample_free(&sm);
    return true;
}

/* ---- the plan ------------------------------------------------------------- */

static const char *rows_label(const struct bucket *b, char *buf, size_t size);

struct impl_walk {
    const char *op;
    int device;
    int dtype;
    struct result *res;
};

static int collect_impl(const fld_impl_info *info, void *user)
{
    struct impl_walk *w = user;
    if (strcmp(info->op, w->op) != 0 || !(info->devices & cli_device_mask(w->device)) ||
        !(info->dtypes & (1u << w->dtype)) || !info->available ||
        w->res->n_scores == TUNE_MAX_IMPLS)
        return 0;
    struct score *s = &w->res->scores[w->res->n_scores++];
    snprintf(s->impl, sizeof s->impl, "%s", info->impl_id);
    s->correct = true;
    s->min_ns = s->median_ns = NAN;
    return 0;
}

/* Whether the policy lets impl serve op here (pinning it resolves to it). */
static bool pinnable(const char *op, int device, int dtype, const char *impl)
{
    if (pin(op, impl) != FLD_OK)
        return false;
    const char *selected = NULL;
    bool ok = fld_resolve(op, device, tool_dlpack_dtype(dtype), &selected) == FLD_OK && selected &&
              strcmp(selected, impl) == 0;
    unpin();
    return ok;
}

static struct result *add_result(struct tune_run *run)
{
    if (VEC_RESERVE(run->results, run->n, run->cap, 16) != 0)
        return NULL;
    struct result *r = &run->results[run->n++];
    memset(r, 0, sizeof *r);
    r->winner = -1;
    return r;
}

/* The median of v[0..n) (reordered) and its spread: interquartile range over the median. */
static double median_spread(double *v, int n, double *spread)
{
    double med = bench_median(v, n); /* sorts v */
    double q1p = 0.25 * (n - 1), q3p = 0.75 * (n - 1);
    int a = (int)q1p, b = (int)q3p;
    double q1 = v[a] + (a + 1 < n ? (q1p - a) * (v[a + 1] - v[a]) : 0);
    double q3 = v[b] + (b + 1 < n ? (q3p - b) * (v[b + 1] - v[b]) : 0);
    *spread = med > 0 ? (q3 - q1) / med : NAN;
    return med;
}

static double pct(double fraction)
{
    return 100 * fraction;
}

/* Whether s has a MIN to compare: at least 2 rounds with a clean stretch in every sample. */
static bool compared(const struct score *s)
{
    return s->correct && isfinite(s->min_ns);
}

/*
 * The winner of a bucket: the default winner unless a correct challenger's
 * min is lower by more than min_gain and both spreads of min, and its
 * median is lower too; then each loser's why. An implementation whose
 * rounds were interrupted has no min: it is not compared, and when it is
 * the default winner, it stays.
 */
static void decide(const struct tune_opts *o, struct result *res)
{
    int d = -1;
    for (int i = 0; i < res->n_scores; i++)
        if (res->default_impl[0] && strcmp(res->scores[i].impl, res->default_impl) == 0)
            d = i;
    if (d < 0 || !res->scores[d].correct) {
        for (int i = 0; i < res->n_scores; i++) {
            const struct score *c = &res->scores[i];
            const struct score *b = res->winner < 0 ? NULL : &res->scores[res->winner];
            if (c->correct && (!b || (compared(c) && (!compared(b) || c->min_ns < b->min_ns)) ||
                               (!compared(c) && !compared(b) && c->median_ns < b->median_ns)))
                res->winner = i;
        }
        res->decision = res->winner < 0 ? DECIDED_NONE : DECIDED_FALLBACK;
        if (!res->default_impl[0])
            snprintf(res->reason, sizeof res->reason, "the policy selects no implementation here%s",
                     res->winner < 0 ? "" : ": the fastest correct one");
        else
            snprintf(res->reason, sizeof res->reason, "the default winner %s cannot serve (%s)%s",
                     res->default_impl, d < 0 ? "not timed" : res->scores[d].why,
                     res->winner < 0 ? "" : ": the fastest correct one");
    } else {
        const struct score *def = &res->scores[d];
        int best = d, close = -1;
        for (int i = 0; i < res->n_scores; i++) {
            const struct score *c = &res->scores[i];
            if (i == d || !compared(c) || !compared(def) || !(c->min_ns < def->min_ns))
                continue;
            double gain = 1 - c->min_ns / def->min_ns;
            double need = fmax(o->min_gain, c->min_spread + def->min_spread);
            if (gain > need && c->median_ns < def->median_ns) {
                if (best == d || c->min_ns < res->scores[best].min_ns)
                    best = i;
            } else if (close < 0 || c->min_ns < res->scores[close].min_ns)
                close = i;
        }
        int others = 0;
        for (int i = 0; i < res->n_scores; i++)
            others += i != d && res->scores[i].correct;
        res->winner = best;
        const struct score *w = &res->scores[best];
        if (best != d) {
            res->decision = DECIDED_PINNED;
            snprintf(res->reason, sizeof res->reason,
                     "faster than the default winner %s by %.1f%% ± %.1f%% (more than the %.1f%% "
                     "needed)",
                     def->impl, pct(1 - w->min_ns / def->min_ns),
                     pct(w->min_spread + def->min_spread),
                     pct(fmax(o->min_gain, w->min_spread + def->min_spread)));
        } else if (others && !compared(def)) {
            res->decision = DECIDED_UNDECIDED;
            snprintf(res->reason, sizeof res->reason,
                     "kept default: its timings were interrupted (preempted) in %d of %d rounds, "
                     "nothing to compare with",
                     o->reps - def->clean_rounds, o->reps);
        } else if (close >= 0) {
            const struct score *c = &res->scores[close];
            res->decision = DECIDED_UNDECIDED;
            snprintf(res->reason, sizeof res->reason,
                     "kept default: %s is faster by %.1f%% ± %.1f%%, %s", c->impl,
                     pct(1 - c->min_ns / def->min_ns), pct(c->min_spread + def->min_spread),
                     c->median_ns < def->median_ns ? "within the spread or --min-gain"
                                                   : "but its median is not lower");
        } else {
            res->decision = DECIDED_DEFAULT;
            snprintf(res->reason, sizeof res->reason, "the default winner is the fastest");
        }
    }
    if (res->winner < 0)
        return;
    const struct score *w = &res->scores[res->winner];
    for (int i = 0; i < res->n_scores; i++) {
        struct score *s = &res->scores[i];
        if (i == res->winner || !s->correct)
            continue;
        double err = pct(s->min_spread + w->min_spread);
        if (!compared(s))
            snprintf(s->why, sizeof s->why,
                     "not compared: its timings were interrupted (preempted) in %d of %d rounds",
                     o->reps - s->clean_rounds, o->reps);
        else if (!compared(w))
            snprintf(s->why, sizeof s->why,
                     "not compared: the timings of %s were interrupted (preempted) in %d of %d "
                     "rounds",
                     w->impl, o->reps - w->clean_rounds, o->reps);
        else if (s->min_ns >= w->min_ns)
            snprintf(s->why, sizeof s->why, "slower by %.1f%% ± %.1f%%",
                     pct(s->min_ns / w->min_ns - 1), err);
        else
            snprintf(s->why, sizeof s->why, "faster by %.1f%% ± %.1f%%, %s: kept %s",
                     pct(1 - s->min_ns / w->min_ns), err,
                     s->median_ns < w->median_ns ? "not by more than the spread or --min-gain"
                                                 : "but its median is not lower",
                     w->impl);
    }
}

/* Times one (op, device, dtype, bucket); false when a sample's tensors could not be allocated. */
static int tune_bucket(const struct tune_opts *o, const struct tool_op *op, int device, int dtype,
                       const struct bucket *b, struct tune_run *run)
{
    struct result *res = add_result(run);
    if (!res)
        return FLD_ENOMEM;
    res->op = op->name;
    res->device = device;
    res->dtype = dtype;
    res->bucket = b;
    const char *def = NULL;
    if (fld_resolve(op->name, device, tool_dlpack_dtype(dtype), &def) == FLD_OK && def)
        snprintf(res->default_impl, sizeof res->default_impl, "%s", def);
    struct impl_walk w = {op->name, device, dtype, res};
    fld_foreach_impl(collect_impl, &w);
    for (int i = 0; i < res->n_scores; i++)
        if (!pinnable(op->name, device, dtype, res->scores[i].impl)) {
            res->scores[i].correct = false;
            snprintf(res->scores[i].why, sizeof res->scores[i].why, "dropped by the policy");
        }
    struct round_logs *logs = calloc(1, sizeof *logs);
    if (!logs)
        return FLD_ENOMEM;
    enum tool_family f = tool_op_family(op);
    char err[sizeof run->alloc_error - 64];
    for (int s = 0; s < b->n_samples; s++)
        for (int k = 0; k < o->n_hidden; k++)
            if (!(device == FLD_DEVICE_CPU
                      ? run_sample(o, op->name, f, dtype, b->samples[s], o->hidden[k], res, logs,
                                   err, sizeof err)
                      : run_sample_device(o, device, op->name, f, dtype, b->samples[s],
                                          o->hidden[k], res, logs, err, sizeof err))) {
                char rows[48];
                snprintf(run->alloc_error, sizeof run->alloc_error, "%s%s%s %s rows %s: %s",
                         op->name, device == FLD_DEVICE_CPU ? "" : " on ",
                         device == FLD_DEVICE_CPU ? "" : fld_device_name(device),
                         tool_dtype_name(dtype), rows_label(b, rows, sizeof rows), err);
                for (int i = 0; i < res->n_scores; i++)
                    if (res->scores[i].correct) {
                        res->scores[i].correct = false;
                        snprintf(res->scores[i].why, sizeof res->scores[i].why, "%s", err);
                    }
                free(logs);
                return FLD_ENOMEM;
            }
    const int samples = b->n_samples * o->n_hidden;
    for (int i = 0; i < res->n_scores; i++) {
        struct score *s = &res->scores[i];
        if (!s->correct) {
            if (strncmp(s->why, "dropped", 7) != 0)
                run->failures = true;
            continue;
        }
        double mins[TUNE_MAX_ROUNDS], means[TUNE_MAX_ROUNDS];
        s->clean_rounds = 0;
        for (int r = 0; r < o->reps; r++) {
            if (!logs->interrupted[i][r])
                mins[s->clean_rounds++] = exp(logs->min[i][r] / samples);
            means[r] = exp(logs->mean[i][r] / samples);
        }
        s->min_ns = s->min_spread = NAN;
        if (s->clean_rounds >= 2)
            s->min_ns = median_spread(mins, s->clean_rounds, &s->min_spread);
        s->median_ns = median_spread(means, o->reps, &s->spread);
        if (s->spread > TUNE_NOISY || s->min_spread > TUNE_NOISY)
            res->noisy = true;
    }
    free(logs);
    decide(o, res);
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
    const char *dt = tool_dtype_name(r[0].dtype), *dev = fld_device_name(r[0].device);
    if (same && n) {
        fprintf(f, "  - {op: %s, device: %s, dtype: %s, impl: %s}\n", r[0].op, dev, dt,
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
        fprintf(f, "  - {op: %s, device: %s, dtype: %s, rows: %s, impl: %s}\n", r[i].op, dev, dt,
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
    for (int d = 0; d < o->n_devices; d++)
        if (o->devices[d] != FLD_DEVICE_CPU) {
            const char *plugin = NULL;
            fld_device_provider(o->devices[d], &plugin);
            fprintf(f, "# %s: device time of %d calls replayed from a graph, through plugin '%s'\n",
                    fld_device_name(o->devices[d]), TUNE_GRAPH_CALLS, plugin ? plugin : "?");
        }
    fprintf(f, "# per row bucket the default winner, or a correct challenger faster by more than "
               "the spread; hidden sizes");
    for (int k = 0; k < o->n_hidden; k++)
        fprintf(f, " %" PRId64, o->hidden[k]);
    fprintf(f, "\nversion: 1\nentries:\n");
    int lines = 0;
    for (size_t i = 0; i < run->n;) {
        size_t j = i;
        while (j < run->n && run->results[j].op == run->results[i].op &&
               run->results[j].device == run->results[i].device &&
               run->results[j].dtype == run->results[i].dtype)
            j++;
        lines += write_entries(f, &run->results[i], j - i);
        i = j;
    }
    if (!lines)
        fprintf(f, "  []\n");
    return lines;
}

/* Writes the manifest to path whole or not at all (fld__atomic_file_open(): a temporary file
 * beside it, renamed over it; a link planted at path is refused, not followed). */
static int write_manifest_file(const char *path, const struct tune_run *run,
                               const struct tune_opts *o)
{
    fld_atomic_file af = {0};
    int err = fld__atomic_file_open(&af, path, 0644);
    if (!err) {
        write_manifest(af.f, run, o);
        err = fld__atomic_file_commit(&af);
    }
    if (err) {
        fprintf(stderr, "fldispatch tune: cannot write '%s': %s\n", cli_text(path),
                fld__atomic_file_strerror(err));
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static const char *decision_name(enum decision d)
{
    static const char *const names[] = {
        [DECIDED_NONE] = "none",         [DECIDED_DEFAULT] = "default",
        [DECIDED_PINNED] = "pinned",     [DECIDED_UNDECIDED] = "undecided",
        [DECIDED_FALLBACK] = "fallback",
    };
    return names[d];
}

static void report_text(FILE *f, const struct tune_run *run)
{
    fprintf(f, "%-18s %-6s %-5s %-10s %-22s %12s %12s %7s  %s\n", "OP", "DEVICE", "DTYPE", "ROWS",
            "IMPL", "MIN NS", "MEDIAN NS", "SPREAD", "NOTE");
    for (size_t i = 0; i < run->n; i++) {
        const struct result *r = &run->results[i];
        char rows[48], note[320];
        rows_label(r->bucket, rows, sizeof rows);
        for (int k = 0; k < r->n_scores; k++) {
            const struct score *s = &r->scores[k];
            const bool def = strcmp(s->impl, r->default_impl) == 0;
            if (k == r->winner)
                snprintf(note, sizeof note, "<- %s%s: %s", decision_name(r->decision),
                         def && r->decision != DECIDED_DEFAULT ? " (default winner)" : "",
                         r->reason);
            else
                snprintf(note, sizeof note, "%s%s", def ? "(default winner) " : "", s->why);
            if (s->correct) {
                char min[32] = "interrupted";
                if (isfinite(s->min_ns))
                    snprintf(min, sizeof min, "%.1f", s->min_ns);
                fprintf(f, "%-18s %-6s %-5s %-10s %-22s %12s %12.1f %6.1f%%  %s\n", r->op,
                        fld_device_name(r->device), tool_dtype_name(r->dtype), rows,
                        cli_text(s->impl), min, s->median_ns, pct(s->spread), cli_text(note));
            } else
                fprintf(f, "%-18s %-6s %-5s %-10s %-22s %12s %12s %7s  %s\n", r->op,
                        fld_device_name(r->device), tool_dtype_name(r->dtype), rows,
                        cli_text(s->impl), "-", "-", "-", cli_text(note));
        }
    }
    fprintf(
        f,
        "MIN NS: median over rounds of the fastest stretch of calls that no preemption "
        "touched ('interrupted': fewer than 2 such rounds, not compared); MEDIAN NS: median over "
        "rounds of the batch's mean; SPREAD: its interquartile range over the median. Each "
        "a geometric mean over the bucket's row counts and hidden sizes, each "
        "implementation pinned alone, alternated within each round. On a GPU a stretch is "
        "one replay of %d calls captured in a graph, timed by the device.\n",
        TUNE_GRAPH_CALLS);
}

/* The load average over the last minute, -1 when unknown. */
static double load_average(void)
{
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1)
            load = -1;
        fclose(f);
    }
    return load;
}

struct machine {
    double load_before, load_after;
    long cores;
};

static bool loaded(const struct machine *m)
{
    return fmax(m->load_before, m->load_after) > (double)m->cores;
}

static void report_json(const struct tune_run *run, const struct tune_opts *o,
                        const struct machine *m, bool manifest_written)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "device");
    json_string(&w, fld_device_name(o->devices[0]));
    json_key(&w, "devices");
    json_begin_array(&w);
    for (int d = 0; d < o->n_devices; d++)
        json_string(&w, fld_device_name(o->devices[d]));
    json_end_array(&w);
    json_key(&w, "graph_calls");
    json_int(&w, TUNE_GRAPH_CALLS);
    json_key(&w, "hidden");
    json_begin_array(&w);
    for (int k = 0; k < o->n_hidden; k++)
        json_int(&w, o->hidden[k]);
    json_end_array(&w);
    json_key(&w, "rounds");
    json_int(&w, o->reps);
    json_key(&w, "min_gain");
    json_double(&w, o->min_gain, 4);
    json_key(&w, "load_average");
    if (m->load_before >= 0)
        json_double(&w, fmax(m->load_before, m->load_after), 2);
    else
        json_null(&w);
    json_key(&w, "cores");
    json_int(&w, m->cores);
    json_key(&w, "loaded");
    json_bool(&w, loaded(m));
    json_key(&w, "results");
    json_begin_array(&w);
    for (size_t i = 0; i < run->n; i++) {
        const struct result *r = &run->results[i];
        char rows[48];
        json_begin_object(&w);
        json_key(&w, "op");
        json_string(&w, r->op);
        json_key(&w, "device");
        json_string(&w, fld_device_name(r->device));
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
            const double figures[] = {s->median_ns, s->min_ns, s->median_ns, s->spread,
                                      s->min_spread};
            const char *const keys[] = {"ns", "min_ns", "median_ns", "spread", "min_spread"};
            for (int q = 0; q < 5; q++) {
                json_key(&w, keys[q]);
                if (s->correct && isfinite(figures[q]))
                    json_double(&w, figures[q], q < 3 ? 1 : 4);
                else
                    json_null(&w);
            }
            json_key(&w, "clean_rounds");
            json_int(&w, s->correct ? s->clean_rounds : 0);
            json_key(&w, "correct");
            json_bool(&w, s->correct);
            json_key(&w, "why");
            json_text_or_null(&w, k == r->winner ? NULL : s->why);
            json_end_object(&w);
        }
        json_end_array(&w);
        json_key(&w, "default");
        json_text_or_null(&w, r->default_impl[0] ? r->default_impl : NULL);
        json_key(&w, "winner");
        json_text_or_null(&w, winner_of(r));
        json_key(&w, "decision");
        json_string(&w, decision_name(r->decision));
        json_key(&w, "reason");
        json_text_or_null(&w, r->reason[0] ? r->reason : NULL);
        json_key(&w, "noisy");
        json_bool(&w, r->noisy);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "manifest");
    json_text_or_null(&w, manifest_written ? o->out : NULL);
    json_end_object(&w);
    json_finish(&w);
}

/* The warnings on stderr: a loaded machine, noisy buckets, the buckets that stayed undecided. */
static void report_warnings(const struct tune_run *run, const struct machine *m)
{
    size_t noisy = 0, undecided = 0;
    for (size_t i = 0; i < run->n; i++) {
        noisy += run->results[i].noisy;
        undecided += run->results[i].decision == DECIDED_UNDECIDED;
    }
    if (loaded(m))
        fprintf(stderr,
                "fldispatch tune: warning: the machine is loaded (load average %.2f, %ld online "
                "core(s)): the figures are noisy; a challenger is pinned only when it wins by "
                "more than the spread\n",
                fmax(m->load_before, m->load_after), m->cores);
    if (noisy) {
        fprintf(stderr,
                "fldispatch tune: warning: %zu bucket(s) with a spread above %.0f%%:", noisy,
                pct(TUNE_NOISY));
        for (size_t i = 0; i < run->n; i++)
            if (run->results[i].noisy) {
                char rows[48];
                fprintf(stderr, " %s %s %s;", cli_text(run->results[i].op),
                        tool_dtype_name(run->results[i].dtype),
                        rows_label(run->results[i].bucket, rows, sizeof rows));
            }
        fprintf(stderr, "\n");
    }
    if (undecided && (noisy || loaded(m))) {
        fprintf(stderr,
                "fldispatch tune: warning: %zu bucket(s) stayed undecided (kept the "
                "default winner):",
                undecided);
        for (size_t i = 0; i < run->n; i++)
            if (run->results[i].decision == DECIDED_UNDECIDED) {
                char rows[48];
                fprintf(stderr, " %s %s %s;", cli_text(run->results[i].op),
                        tool_dtype_name(run->results[i].dtype),
                        rows_label(run->results[i].bucket, rows, sizeof rows));
            }
        fprintf(stderr, " re-run on a quiet machine to decide them\n");
    }
}

/*
 * Every sample's tensors sized before anything is timed: CLI_EXIT_USAGE
 * naming the first bucket whose size overflows or exceeds --max-memory.
 */
static int check_sizes(const struct tune_opts *o)
{
    for (size_t i = 0; i < o->n_ops; i++) {
        if (!o->op_selected[i])
            continue;
        enum tool_family f = tool_op_family(&o->ops[i]);
        for (int dt = 0; dt < 3; dt++) {
            if (!(o->dtypes & (1u << dt)))
                continue;
            for (int b = 0; b < o->n_buckets; b++) {
                const struct bucket *bk = &o->buckets[b];
                for (int s = 0; s < bk->n_samples; s++)
                    for (int k = 0; k < o->n_hidden; k++) {
                        double bytes;
                        char rows[48];
                        rows_label(bk, rows, sizeof rows);
                        if (!sample_bytes(f, dt, bk->samples[s], o->hidden[k], &bytes)) {
                            fprintf(stderr,
                                    "fldispatch tune: %s %s rows %s: %" PRId64
                                    " rows of hidden %" PRId64 " is an impossible shape: the "
                                    "size of its tensors overflows; nothing written\n",
                                    o->ops[i].name, tool_dtype_name(dt), rows, bk->samples[s],
                                    o->hidden[k]);
                            return CLI_EXIT_USAGE;
                        }
                        if (bytes > o->max_memory) {
                            fprintf(stderr,
                                    "fldispatch tune: %s %s rows %s: %" PRId64
                                    " rows of hidden %" PRId64 " needs %.0f MiB of tensors, "
                                    "more than --max-memory allows (%.0f MiB; default half the "
                                    "available memory); nothing written\n",
                                    o->ops[i].name, tool_dtype_name(dt), rows, bk->samples[s],
                                    o->hidden[k], bytes / 1048576, o->max_memory / 1048576);
                            return CLI_EXIT_USAGE;
                        }
                    }
            }
        }
    }
    return CLI_EXIT_OK;
}

/* "1m05s" */
static const char *duration_text(double s, char *buf, size_t size)
{
    long t = (long)(s + 0.5);
    if (t >= 60)
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, size, "%lds", t);
    return buf;
}

static void progress(bool on, int done, int total, const struct result *next, double t0)
{
    if (!on)
        return;
    if (!next) {
        fprintf(stderr, "\r\033[K");
        return;
    }
    char rows[48], eta[32] = "?";
    double elapsed = (tune_clock_now() - t0) / 1e9;
    if (done)
        duration_text(elapsed / done * (total - done), eta, sizeof eta);
    fprintf(stderr, "\r\033[Kfldispatch tune: bucket %d of %d (%s %s %s rows %s), ETA %s", done + 1,
            total, cli_text(next->op), fld_device_name(next->device), tool_dtype_name(next->dtype),
            rows_label(next->bucket, rows, sizeof rows), eta);
    fflush(stderr);
}

static int record_nothing(void *user)
{
    (void)user;
    return FLD_OK;
}

/*
 * Leaves out, with the reason on stderr, every device other than the CPU
 * that cannot be timed: an empty graph must capture and replay there.
 * CLI_EXIT_NONE when no device is left.
 */
static int timed_devices(struct tune_opts *o)
{
    int kept = 0;
    for (int d = 0; d < o->n_devices; d++) {
        const int device = o->devices[d];
        bool ok = device == FLD_DEVICE_CPU;
        if (!ok) {
            const DLDevice dev = {(DLDeviceType)device, 0};
            fld_device_graph *g = NULL;
            double ns;
            ok = fld_device_graph_capture(dev, record_nothing, NULL, &g) == FLD_OK &&
                 fld_device_graph_replay(g, 1, &ns) == FLD_OK;
            if (!ok)
                fprintf(stderr, "fldispatch tune: device %s: left out: %s\n",
                        fld_device_name(device), cli_text(fld_last_error()));
            fld_device_graph_free(g);
        }
        if (ok)
            o->devices[kept++] = device;
    }
    o->n_devices = kept;
    if (kept)
        return CLI_EXIT_OK;
    fprintf(stderr, "fldispatch tune: nothing to tune: no device given can be timed\n");
    return CLI_EXIT_NONE;
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
    char err[512];
    if (!tune_clock_init(err, sizeof err)) {
        fprintf(stderr, "fldispatch tune: %s\n", cli_text(err));
        return CLI_EXIT_USAGE;
    }
    if ((rc = check_sizes(&o)) != CLI_EXIT_OK)
        return rc;
    if ((rc = cli_init()) != CLI_EXIT_OK)
        return rc;
    struct machine m = {load_average(), -1, sysconf(_SC_NPROCESSORS_ONLN)};
    const bool show = !o.quiet && isatty(STDERR_FILENO);
    if ((rc = timed_devices(&o)) != CLI_EXIT_OK)
        return rc;
    int total = 0, done = 0;
    for (size_t i = 0; i < o.n_ops; i++)
        for (int dt = 0; dt < 3; dt++)
            total += o.op_selected[i] && (o.dtypes & (1u << dt)) ? o.n_buckets * o.n_devices : 0;
    struct tune_run run = {0};
    const double t0 = tune_clock_now();
    bool stop = false;
    for (int d = 0; d < o.n_devices && !stop; d++)
        for (size_t i = 0; i < o.n_ops && !stop; i++) {
            if (!o.op_selected[i])
                continue;
            for (int dt = 0; dt < 3 && !stop; dt++) {
                if (!(o.dtypes & (1u << dt)))
                    continue;
                for (int b = 0; b < o.n_buckets && !stop; b++) {
                    const struct result next = {.op = o.ops[i].name,
                                                .device = o.devices[d],
                                                .dtype = dt,
                                                .bucket = &o.buckets[b]};
                    progress(show, done++, total, &next, t0);
                    if (tune_bucket(&o, &o.ops[i], o.devices[d], dt, &o.buckets[b], &run) !=
                        FLD_OK) {
                        if (!run.alloc_error[0])
                            snprintf(run.alloc_error, sizeof run.alloc_error, "out of memory");
                        stop = true;
                    }
                }
            }
        }
    progress(show, done, total, NULL, t0);
    verify_caches_free();
    m.load_after = load_average();
    if (stop) {
        if (o.json)
            report_json(&run, &o, &m, false);
        fprintf(stderr, "fldispatch tune: %s; nothing written\n", cli_text(run.alloc_error));
        free(run.results);
        return CLI_EXIT_USAGE;
    }
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
    if (o.out)
        rc = write_manifest_file(o.out, &run, &o);
    if (o.json)
        report_json(&run, &o, &m, o.out && rc == CLI_EXIT_OK);
    else
        report_text(table, &run);
    if (!o.out && !o.json)
        write_manifest(stdout, &run, &o);
    report_warnings(&run, &m);
    if (rc == CLI_EXIT_OK && run.failures)
        rc = CLI_EXIT_CHECK_FAILED;
    free(run.results);
    return rc;
}
