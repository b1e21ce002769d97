/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What ran: the counters, their switch and their output (see stats.h and
 * the fld_stats_* functions of fldispatch.h). The trace is trace.c's; this
 * file switches it, names its cells and has it written.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>

#include "atomic_file.h"
#include "devices.h"
#include "dtypes.h"
#include "error.h"
#include "escape.h"
#include "host.h"
#include "log.h"
#include "ops.h"
#include "parse.h"
#include "pathvar.h"
#include "reentry.h"
#include "registry.h"
#include "stats.h"
#include "stats_writer.h"

_Atomic unsigned fld__stats_flags;

/* One (op, implementation, device, dtype). Never freed: a snapshot's strings
 * and the pointers cached in implementation records stay valid. */
struct fld_stats_cell {
    char *op, *impl_id;
    const char *device, *dtype; /* static names */
    _Atomic uint64_t calls, fallbacks, failures, total_ns;
    struct fld_stats_cell *next;
};

/* A leaf lock: the list of cells and the output settings. */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fld_stats_cell *cells;
static size_t n_cells;
static char *stats_file;      /* VLLM_FL_STATS_FILE, unexpanded */
static char *trace_file;      /* VLLM_FL_TRACE, unexpanded */
static double stats_interval; /* VLLM_FL_STATS_INTERVAL in seconds; 0: at exit only */
static bool mode_set_by_call; /* fld_stats_enable() wins over the environment until a reload */
static bool exit_armed;
/* How far the trace has come: its events claimed, and the resets that empty
 * it (after a reset the same count is other events). */
struct trace_mark {
    size_t claimed;
    uint64_t resets;
};
static uint64_t trace_resets; /* under stats_lock */

/* What the last fld_stats_flush() wrote, so that the exit handler writes only
 * what came after: a worker that flushed from its own exit hook and then
 * leaves through exit() prints one table, not two. Under stats_lock. */
static struct {
    bool valid;
    int mode;
    fld_stats_entry *entries; /* its snapshot; NULL with n 0 */
    size_t n;
    struct trace_mark traced;
    char *file, *trace; /* the settings it wrote under */
} flushed;

/*
 * Held across every write of the files and the table: the exit handler,
 * fld_stats_flush() and the periodic writer write one at a time, and fork()
 * waits for a write under way (a child must not inherit a half-written
 * temporary file, whose buffer its exit() would flush into the parent's
 * file). Taken before stats_lock, never under the host lock.
 */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t write_fork_once = PTHREAD_ONCE_INIT;
/* A periodic write that failed, not to be reported again; its trace's length. Under write_lock. */
static char periodic_failure[512];
static struct trace_mark periodic_traced = {0, UINT64_MAX}; /* none written */

static void write_lock_prepare(void)
{
    pthread_mutex_lock(&write_lock);
}

static void write_lock_parent(void)
{
    pthread_mutex_unlock(&write_lock);
}

static void write_lock_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    write_lock = fresh;
    periodic_failure[0] = '\0';
    periodic_traced = (struct trace_mark){0, UINT64_MAX};
}

static void write_lock_fork_handlers(void)
{
    pthread_atfork(write_lock_prepare, write_lock_parent, write_lock_child);
}

static void hold_writes(void)
{
    pthread_once(&write_fork_once, write_lock_fork_handlers);
    pthread_mutex_lock(&write_lock);
}

static void release_writes(void)
{
    pthread_mutex_unlock(&write_lock);
}

uint64_t fld__stats_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *device_word(int dev)
{
    return dev == FLD_DEV_ANY ? "any" : fld_device_name(fld__device_type_of(dev));
}

static const char *dtype_word(int dt)
{
    return fld__dtype_word(dt);
}

/* stats_lock held. */
static struct fld_stats_cell *find_or_add(const char *op, const char *impl_id, const char *device,
                                          const char *dtype)
{
    for (struct fld_stats_cell *c = cells; c; c = c->next)
        if (c->device == device && c->dtype == dtype && strcmp(c->op, op) == 0 &&
            strcmp(c->impl_id, impl_id) == 0)
            return c;
    struct fld_stats_cell *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->op = strdup(op);
    c->impl_id = strdup(impl_id);
    if (!c->op || !c->impl_id) {
        free(c->op);
        free(c->impl_id);
        free(c);
        return NULL;
    }
    c->device = device;
    c->dtype = dtype;
    c->next = cells;
    cells = c;
    n_cells++;
    return c;
}

struct fld_stats_cell *fld__stats_cell(struct fld_impl_rec *r, unsigned slot, int dev, int dt)
{
    struct fld_stats_cell *c = atomic_load_explicit(&r->stats[slot], memory_order_acquire);
    if (c)
        return c;
    pthread_mutex_lock(&stats_lock);
    c = atomic_load_explicit(&r->stats[slot], memory_order_relaxed);
    if (!c) {
        c = find_or_add(r->op->name, fld__impl_name(r), device_word(dev), dtype_word(dt));
        atomic_store_explicit(&r->stats[slot], c, memory_order_release);
    }
    pthread_mutex_unlock(&stats_lock);
    return c;
}

void fld__stats_count(struct fld_stats_cell *c, int rc, uint64_t ns)
{
    atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
    if (rc != FLD_OK && rc != FLD_EUNSUPPORTED)
        atomic_fetch_add_explicit(&c->failures, 1, memory_order_relaxed);
    if (ns)
        atomic_fetch_add_explicit(&c->total_ns, ns, memory_order_relaxed);
}

void fld__stats_fallback(struct fld_stats_cell *c)
{
    atomic_fetch_add_explicit(&c->fallbacks, 1, memory_order_relaxed);
}

/* The trace's names of a cell (fld_trace_cell_names_fn). */
static void cell_names(const struct fld_stats_cell *c, const char **op, const char **impl_id,
                       const char **device, const char **dtype)
{
    *op = c->op;
    *impl_id = c->impl_id;
    *device = c->device;
    *dtype = c->dtype;
}

/* ---- the switch ------------------------------------------------------------ */

static void arm_exit(void);

/* Sets the flags; turning counting on closes the direct call paths. */
static void set_flags(unsigned flags)
{
    unsigned old = atomic_exchange(&fld__stats_flags, flags);
    if (flags && !old) {
        fld__lock();
        if (atomic_load(&fld__ready))
            fld__bump_generation(); /* direct paths carry the old generation: closed */
        fld__unlock();
    }
    if (flags)
        arm_exit();
}

int fld_stats_enable(int mode)
{
    int rc = fld__callout_refuse("fld_stats_enable");
    if (rc)
        return rc;
    unsigned flags;
    switch (mode) {
    case FLD_STATS_OFF:
        flags = 0;
        break;
    case FLD_STATS_CALLS:
        flags = FLD_STATS_FLAG_COUNT;
        break;
    case FLD_STATS_TIME:
        flags = FLD_STATS_FLAG_COUNT | FLD_STATS_FLAG_TIME;
        break;
    default:
        return fld__fail(FLD_EINVAL,
                         "fld_stats_enable: unknown mode %d (valid: 0 FLD_STATS_OFF, 1 "
                         "FLD_STATS_CALLS, 2 FLD_STATS_TIME)",
                         mode);
    }
    pthread_mutex_lock(&stats_lock);
    mode_set_by_call = true;
    unsigned trace = atomic_load(&fld__stats_flags) & FLD_STATS_FLAG_TRACE;
    pthread_mutex_unlock(&stats_lock);
    if (trace)
        flags |= FLD_STATS_FLAG_TRACE | FLD_STATS_FLAG_TIME;
    set_flags(flags);
    return FLD_OK;
}

int fld_stats_mode(void)
{
    unsigned f = atomic_load(&fld__stats_flags);
    if (!(f & FLD_STATS_FLAG_COUNT))
        return FLD_STATS_OFF;
    return f & FLD_STATS_FLAG_TIME ? FLD_STATS_TIME : FLD_STATS_CALLS;
}

static int expand_path(const char *who, const char *pattern, bool as_glob, char *out, size_t size);

/* A path variable (pathvar.h), copied into *out (NULL when unset), once its expansion fits. */
static int path_variable(const char *name, char **out)
{
    *out = NULL;
    const char *v = fld__path_variable(name);
    if (!v)
        return FLD_OK;
    char probe[4096];
    if (expand_path(name, v, false, probe, sizeof probe) != FLD_OK) {
        char why[sizeof probe + 512]; /* the message quotes the path */
        snprintf(why, sizeof why, "%s", fld_last_error());
        return fld__fail(FLD_ECONFIG, "%s", why);
    }
    if (!(*out = strdup(v)))
        return fld__fail(FLD_ENOMEM, "%s: out of memory", name);
    return FLD_OK;
}

/* VLLM_FL_STATS_INTERVAL, once the files are read: it rewrites them, so it needs one. */
static int read_interval(struct fld_stats_env *out)
{
    const char *v = getenv("VLLM_FL_STATS_INTERVAL");
    if (fld__is_blank(v))
        return FLD_OK;
    double s;
    if (!fld__parse_seconds(v, &s) ||
        !(s == 0 || (s >= FLD_STATS_INTERVAL_MIN && s <= FLD_STATS_INTERVAL_MAX)))
        return fld__fail(FLD_ECONFIG,
                         "VLLM_FL_STATS_INTERVAL: invalid value '%s' (seconds between rewrites of "
                         "the files, from %g to %g; 0 or unset: written at exit only)",
                         v, FLD_STATS_INTERVAL_MIN, FLD_STATS_INTERVAL_MAX);
    if (s > 0 && !out->file && !out->trace)
        return fld__fail(FLD_ECONFIG,
                         "VLLM_FL_STATS_INTERVAL: '%s' asks to rewrite the files while the process "
                         "runs, but there is none: set VLLM_FL_STATS_FILE or VLLM_FL_TRACE (the "
                         "table on stderr is printed at exit only)",
                         v);
    out->interval = s;
    return FLD_OK;
}

int fld__stats_read_env(struct fld_stats_env *out)
{
    memset(out, 0, sizeof *out);
    const char *v = getenv("VLLM_FL_STATS");
    bool mode_given = false;
    if (v) {
        char word[16];
        size_t n = strlen(v);
        v = fld__trim(v, &n);
        if (n >= sizeof word)
            n = sizeof word - 1;
        memcpy(word, v, n);
        word[n] = '\0';
        mode_given = n > 0;
        if (n == 0 || strcmp(word, "0") == 0 || strcasecmp(word, "off") == 0)
            out->flags = 0;
        else if (strcmp(word, "1") == 0 || strcasecmp(word, "calls") == 0)
            out->flags = FLD_STATS_FLAG_COUNT;
        else if (strcasecmp(word, "time") == 0)
            out->flags = FLD_STATS_FLAG_COUNT | FLD_STATS_FLAG_TIME;
        else
            return fld__fail(FLD_ECONFIG,
                             "VLLM_FL_STATS: invalid value '%s' (valid: 0 or unset: off; 1 or "
                             "calls: count calls; time: count and time them)",
                             getenv("VLLM_FL_STATS"));
    }
    int rc = path_variable("VLLM_FL_STATS_FILE", &out->file);
    if (rc == FLD_OK)
        rc = path_variable("VLLM_FL_TRACE", &out->trace);
    if (rc == FLD_OK)
        rc = read_interval(out);
    if (rc) {
        fld__stats_env_free(out);
        return rc;
    }
    /* A file to write asks for counts, unless VLLM_FL_STATS says otherwise. */
    if (out->file && !mode_given)
        out->flags = FLD_STATS_FLAG_COUNT;
    if (out->trace)
        out->flags |= FLD_STATS_FLAG_TRACE | FLD_STATS_FLAG_TIME;
    return FLD_OK;
}

void fld__stats_env_free(struct fld_stats_env *env)
{
    free(env->file);
    free(env->trace);
    env->file = env->trace = NULL;
}

static void write_periodic(double interval);

void fld__stats_commit_env(struct fld_stats_env *env, bool reload)
{
    pthread_mutex_lock(&stats_lock);
    if (reload)
        mode_set_by_call = false;
    unsigned flags = env->flags;
    if (mode_set_by_call)
        flags = (atomic_load(&fld__stats_flags) & (FLD_STATS_FLAG_COUNT | FLD_STATS_FLAG_TIME)) |
                (env->flags & FLD_STATS_FLAG_TRACE);
    if (flags & FLD_STATS_FLAG_TRACE)
        flags |= FLD_STATS_FLAG_TIME;
    free(stats_file);
    free(trace_file);
    stats_file = env->file;
    trace_file = env->trace;
    env->file = env->trace = NULL;
    stats_interval = env->interval;
    pthread_mutex_unlock(&stats_lock);
    /* Init and reload bump the generation themselves once this returns. */
    atomic_store(&fld__stats_flags, flags);
    if (flags || stats_file)
        arm_exit();
    fld__stats_writer_set(env->interval, write_periodic);
}

void fld__stats_after_fork(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    stats_lock = fresh;
    flushed.valid = false; /* the parent's flush wrote the parent's counters */
    fld__trace_after_fork();
    fld_stats_reset();
    fld__stats_writer_after_fork();
}

/* ---- reading the counters --------------------------------------------------- */

static int compare_entries(const void *a, const void *b)
{
    const fld_stats_entry *x = a, *y = b;
    int d = strcmp(x->op, y->op);
    if (!d)
        d = strcmp(x->impl_id, y->impl_id);
    if (!d)
        d = strcmp(x->device, y->device);
    if (!d)
        d = strcmp(x->dtype, y->dtype);
    return d;
}

int fld_stats_snapshot(fld_stats_entry *out, size_t cap, size_t *count)
{
    if (!count)
        return fld__fail(FLD_EINVAL, "fld_stats_snapshot: argument 'count' is NULL");
    if (cap && !out)
        return fld__fail(FLD_EINVAL, "fld_stats_snapshot: argument 'out' is NULL with cap %zu",
                         cap);
    pthread_mutex_lock(&stats_lock);
    size_t n = 0;
    for (struct fld_stats_cell *c = cells; c; c = c->next) {
        uint64_t calls = atomic_load_explicit(&c->calls, memory_order_relaxed);
        if (!calls)
            continue;
        if (n < cap)
            out[n] = (fld_stats_entry){
                .op = c->op,
                .impl_id = c->impl_id,
                .device = c->device,
                .dtype = c->dtype,
                .calls = calls,
                .fallbacks = atomic_load_explicit(&c->fallbacks, memory_order_relaxed),
                .failures = atomic_load_explicit(&c->failures, memory_order_relaxed),
                .total_ns = atomic_load_explicit(&c->total_ns, memory_order_relaxed),
            };
        n++;
    }
    pthread_mutex_unlock(&stats_lock);
    if (out && n)
        qsort(out, n < cap ? n : cap, sizeof *out, compare_entries);
    *count = n;
    return FLD_OK;
}

void fld_stats_reset(void)
{
    pthread_mutex_lock(&stats_lock);
    for (struct fld_stats_cell *c = cells; c; c = c->next) {
        atomic_store_explicit(&c->calls, 0, memory_order_relaxed);
        atomic_store_explicit(&c->fallbacks, 0, memory_order_relaxed);
        atomic_store_explicit(&c->failures, 0, memory_order_relaxed);
        atomic_store_explicit(&c->total_ns, 0, memory_order_relaxed);
    }
    trace_resets++;
    pthread_mutex_unlock(&stats_lock);
    fld__trace_reset();
}

static struct trace_mark trace_mark_now(void)
{
    pthread_mutex_lock(&stats_lock);
    uint64_t resets = trace_resets;
    pthread_mutex_unlock(&stats_lock);
    return (struct trace_mark){fld__trace_claimed(), resets};
}

static bool same_text(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

static bool same_mark(struct trace_mark a, struct trace_mark b)
{
    return a.claimed == b.claimed && a.resets == b.resets;
}

/* Whether the traces at a and b hold the same events: past the cap, claims
 * only count as dropped. */
static bool same_events(struct trace_mark a, struct trace_mark b)
{
    size_t cap = FLD_TRACE_MAX_EVENTS;
    return a.resets == b.resets &&
           (a.claimed < cap ? a.claimed : cap) == (b.claimed < cap ? b.claimed : cap);
}

/* Every entry with calls, sorted; *n of them. NULL when there are none or no memory. */
static fld_stats_entry *take_snapshot(size_t *n)
{
    *n = 0;
    for (int attempt = 0; attempt < 4; attempt++) {
        size_t want;
        if (fld_stats_snapshot(NULL, 0, &want) != FLD_OK || want == 0)
            return NULL;
        want += 8; /* cells added meanwhile */
        fld_stats_entry *e = malloc(want * sizeof *e);
        if (!e)
            return NULL;
        size_t got;
        fld_stats_snapshot(e, want, &got);
        if (got <= want) {
            *n = got;
            return e;
        }
        free(e);
    }
    return NULL;
}

/*
 * The rank of this process: RANK, else LOCAL_RANK (a whole number from 0 to
 * LONG_MAX), else 0. -1 when the variable that decides is set to anything
 * else, its name in *bad (a huge value does not saturate into a wrong rank).
 */
static long rank_of_process(const char **bad)
{
    static const char *const names[] = {"RANK", "LOCAL_RANK"};
    *bad = NULL;
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        if (!v || !*v)
            continue;
        char *end;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (*end || errno == ERANGE || r < 0 || *v == '-' || *v == '+' || *v == ' ') {
            *bad = names[i];
            return -1;
        }
        return r;
    }
    return 0;
}

/*
 * pattern with "%p" replaced by the process id, "%r" by the rank and "%%"
 * by "%", into out (size bytes). as_glob: a glob pattern of every
 * process's and rank's path instead, "%p" and "%r" a "*", and glob's own
 * characters taken literally the way Python's glob.escape() and a shell
 * read them ("[*]"). FLD_EINVAL naming who when it does not fit or "%r"
 * meets a rank variable that holds no rank.
 */
static int expand_path(const char *who, const char *pattern, bool as_glob, char *out, size_t size)
{
    size_t len = 0;
    for (const char *p = pattern; *p; p++) {
        char piece[32];
        const char *add = piece;
        if (as_glob && p[0] == '%' && (p[1] == 'p' || p[1] == 'r')) {
            add = "*";
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            snprintf(piece, sizeof piece, "%ld", (long)getpid());
            p++;
        } else if (p[0] == '%' && p[1] == 'r') {
            const char *bad;
            long rank = rank_of_process(&bad);
            if (rank < 0)
                return fld__fail(FLD_EINVAL,
                                 "%s: the path '%s' uses %%r, but %s='%s' is not a rank (a whole "
                                 "number from 0 to %ld)",
                                 who, pattern, bad, getenv(bad), LONG_MAX);
            snprintf(piece, sizeof piece, "%ld", rank);
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            add = "%";
            p++;
        } else if (as_glob && strchr("*?[", *p)) {
            snprintf(piece, sizeof piece, "[%c]", *p);
        } else {
            piece[0] = *p;
            piece[1] = '\0';
        }
        size_t n = strlen(add);
        if (len + n >= size)
            return fld__fail(FLD_EINVAL, "%s: the path '%s' is too long once expanded", who,
                             pattern);
        memcpy(out + len, add, n);
        len += n;
    }
    out[len] = '\0';
    return FLD_OK;
}

int fld__stats_file_glob(char *buf, size_t size)
{
    pthread_mutex_lock(&stats_lock);
    int rc = stats_file ? expand_path("VLLM_FL_STATS_FILE", stats_file, true, buf, size)
                        : fld__fail(FLD_ENOTFOUND, "VLLM_FL_STATS_FILE is not set");
    pthread_mutex_unlock(&stats_lock);
    return rc;
}

double fld__stats_interval(void)
{
    pthread_mutex_lock(&stats_lock);
    double seconds = stats_interval;
    pthread_mutex_unlock(&stats_lock);
    return seconds;
}

/* A name for the table: s, or its escape (fld__escape()) in *buf when it
 * holds control characters or bytes that are not UTF-8 text. */
static const char *table_name(const char *s, char **buf)
{
    if (!fld__needs_escape(s))
        return s;
    size_t size = 4 * strlen(s) + 1;
    char *p = realloc(*buf, size);
    if (!p)
        return "?";
    *buf = p;
    return fld__escape(p, size, s);
}

int fld_stats_print(FILE *f)
{
    if (!f)
        return fld__fail(FLD_EINVAL, "fld_stats_print: argument 'f' is NULL");
    size_t n;
    fld_stats_entry *e = take_snapshot(&n);
    int mode = fld_stats_mode();
    const char *bad;
    long rank = rank_of_process(&bad);
    char rank_text[32];
    if (rank < 0)
        snprintf(rank_text, sizeof rank_text, "? (%s is not a rank)", bad);
    else
        snprintf(rank_text, sizeof rank_text, "%ld", rank);
    fprintf(f, "fldispatch stats (pid %ld, rank %s, %s): %zu row(s)\n", (long)getpid(), rank_text,
            mode == FLD_STATS_TIME    ? "counts and times"
            : mode == FLD_STATS_CALLS ? "counts"
                                      : "off",
            n);
    if (n)
        fprintf(f, "%-22s %-24s %-6s %-5s %12s %9s %8s %12s %9s\n", "op", "impl_id", "device",
                "dtype", "calls", "fallbacks", "failures", "total_ms", "avg_ns");
    char *op_buf = NULL, *impl_buf = NULL;
    for (size_t i = 0; i < n; i++) {
        double ms = (double)e[i].total_ns / 1e6;
        fprintf(f, "%-22s %-24s %-6s %-5s %12llu %9llu %8llu %12.3f %9.0f\n",
                table_name(e[i].op, &op_buf), table_name(e[i].impl_id, &impl_buf), e[i].device,
                e[i].dtype, (unsigned long long)e[i].calls, (unsigned long long)e[i].fallbacks,
                (unsigned long long)e[i].failures, ms,
                e[i].calls ? (double)e[i].total_ns / (double)e[i].calls : 0.0);
    }
    free(op_buf);
    free(impl_buf);
    free(e);
    return ferror(f) ? fld__fail(FLD_EINVAL, "fld_stats_print: write error") : FLD_OK;
}

/* Writes the counters as JSON to path (expanded) through fld__atomic_file_*(); who names the
 * caller or the variable in messages. */
static int write_json(const char *who, const char *path)
{
    fld_atomic_file af = {0};
    int err = fld__atomic_file_open(&af, path, 0600);
    if (err)
        return fld__fail(FLD_EINVAL, "%s: cannot write '%s': %s", who, path,
                         fld__atomic_file_strerror(err));
    FILE *f = af.f;
    size_t n;
    fld_stats_entry *e = take_snapshot(&n);
    int mode = fld_stats_mode();
    const char *bad;
    long rank = rank_of_process(&bad);
    char rank_text[32];
    if (rank < 0)
        snprintf(rank_text, sizeof rank_text, "null");
    else
        snprintf(rank_text, sizeof rank_text, "%ld", rank);
    fprintf(f, "{\"pid\": %ld, \"rank\": %s, \"mode\": \"%s\", \"entries\": [", (long)getpid(),
            rank_text,
            mode == FLD_STATS_TIME    ? "time"
            : mode == FLD_STATS_CALLS ? "calls"
                                      : "off");
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",\n  {\"op\": " : "\n  {\"op\": ", f);
        fld__json_string(f, e[i].op);
        fputs(", \"impl_id\": ", f);
        fld__json_string(f, e[i].impl_id);
        fprintf(f,
                ", \"device\": \"%s\", \"dtype\": \"%s\", \"calls\": %llu, \"fallbacks\": %llu, "
                "\"failures\": %llu, \"total_ns\": %llu}",
                e[i].device, e[i].dtype, (unsigned long long)e[i].calls,
                (unsigned long long)e[i].fallbacks, (unsigned long long)e[i].failures,
                (unsigned long long)e[i].total_ns);
    }
    fputs(n ? "\n]}\n" : "]}\n", f);
    free(e);
    err = fld__atomic_file_commit(&af);
    if (err)
        return fld__fail(FLD_EINVAL, "%s: cannot write '%s' (the file there is unchanged): %s", who,
                         path, fld__atomic_file_strerror(err));
    return FLD_OK;
}

/* fld_stats_write() or fld_trace_write() of pattern, who naming the caller or the variable. */
static int write_expanded(const char *who, const char *pattern, bool trace)
{
    if (!pattern || !*pattern)
        return fld__fail(FLD_EINVAL, "%s: argument 'path' is %s", who, pattern ? "empty" : "NULL");
    char expanded[4096];
    int rc = expand_path(who, pattern, false, expanded, sizeof expanded);
    if (rc)
        return rc;
    return trace ? fld__trace_write(who, expanded, cell_names) : write_json(who, expanded);
}

int fld_stats_write(const char *path)
{
    int rc = fld__callout_refuse("fld_stats_write");
    return rc ? rc : write_expanded("fld_stats_write", path, false);
}

int fld_trace_write(const char *path)
{
    int rc = fld__callout_refuse("fld_trace_write");
    return rc ? rc : write_expanded("fld_trace_write", path, true);
}

static int flush_now(bool periodic);
/* What a flush is about to write, taken before it writes: a call counted
 * while it writes is then written again later, never taken as written. */
struct flush_note {
    fld_stats_entry *entries; /* take_snapshot()'s; NULL with n 0 */
    size_t n;
    struct trace_mark traced;
    int mode;
};
static void take_note(struct flush_note *note);
static void note_flushed(struct flush_note *note, char *file, char *trace);

int fld_stats_flush(void)
{
    int rc = fld__callout_refuse("fld_stats_flush");
    if (rc)
        return rc;
    hold_writes();
    rc = flush_now(false);
    release_writes();
    return rc;
}

/* What the exit handler does; also at an exit() from plugin code. write_lock
 * held. periodic: the periodic writer's, which leaves a trace file alone that
 * has every event the trace holds (a full trace grows no more, and is tens
 * of megabytes to write again for its dropped count; the exit writes it). */
static int flush_now(bool periodic)
{
    pthread_mutex_lock(&stats_lock);
    char *file = stats_file ? strdup(stats_file) : NULL;
    char *trace = trace_file ? strdup(trace_file) : NULL;
    pthread_mutex_unlock(&stats_lock);
    struct flush_note note;
    take_note(&note);
    int rc = FLD_OK;
    if (file)
        rc = write_expanded("VLLM_FL_STATS_FILE", file, false);
    else if (fld_stats_mode() != FLD_STATS_OFF)
        rc = fld_stats_print(stderr);
    bool write_trace = trace != NULL;
    if (trace && periodic) {
        pthread_mutex_lock(&stats_lock);
        write_trace = !(flushed.valid && same_text(trace, flushed.trace) &&
                        same_events(note.traced, flushed.traced));
        pthread_mutex_unlock(&stats_lock);
    }
    if (write_trace) {
        int trc = write_expanded("VLLM_FL_TRACE", trace, true);
        if (rc == FLD_OK)
            rc = trc;
    }
    if (rc == FLD_OK)
        note_flushed(&note, file, trace);
    else
        free(note.entries);
    free(file);
    free(trace);
    return rc;
}

static void take_note(struct flush_note *note)
{
    note->entries = take_snapshot(&note->n);
    note->traced = trace_mark_now();
    note->mode = fld_stats_mode();
}

/* Records what a flush wrote, as take_note() saw it before the write (the
 * note's snapshot passes to flushed), and the settings (file and trace are
 * their owner's strings). */
static void note_flushed(struct flush_note *note, char *file, char *trace)
{
    char *file_copy = file ? strdup(file) : NULL, *trace_copy = trace ? strdup(trace) : NULL;
    pthread_mutex_lock(&stats_lock);
    free(flushed.entries);
    free(flushed.file);
    free(flushed.trace);
    flushed.entries = note->entries;
    flushed.n = note->n;
    flushed.traced = note->traced;
    flushed.mode = note->mode;
    flushed.file = file_copy;
    flushed.trace = trace_copy;
    /* a snapshot or a copy that failed: write again at exit rather than lose anything */
    flushed.valid =
        (note->entries || !note->n) && same_text(file, file_copy) && same_text(trace, trace_copy);
    pthread_mutex_unlock(&stats_lock);
}

/* Whether the counters, the trace and the settings are what the last
 * fld_stats_flush() wrote: nothing counted or traced since. */
static bool unchanged_since_flush(void)
{
    size_t n;
    fld_stats_entry *e = take_snapshot(&n);
    struct trace_mark traced = trace_mark_now();
    int mode = fld_stats_mode();
    pthread_mutex_lock(&stats_lock);
    bool same = flushed.valid && mode == flushed.mode && n == flushed.n &&
                same_mark(traced, flushed.traced) && same_text(stats_file, flushed.file) &&
                same_text(trace_file, flushed.trace);
    for (size_t i = 0; same && i < n; i++) {
        const fld_stats_entry *a = &e[i], *b = &flushed.entries[i];
        same = a->op == b->op && a->impl_id == b->impl_id && a->device == b->device &&
               a->dtype == b->dtype && a->calls == b->calls && a->fallbacks == b->fallbacks &&
               a->failures == b->failures && a->total_ns == b->total_ns;
    }
    pthread_mutex_unlock(&stats_lock);
    free(e);
    return same;
}

int fld__stats_flush_changed(void)
{
    int rc = fld__callout_refuse("fld_stats_flush");
    if (rc)
        return rc;
    hold_writes();
    rc = unchanged_since_flush() ? FLD_OK : flush_now(false);
    release_writes();
    return rc;
}

/*
 * The periodic writer's turn (stats_writer.h): rewrites the files, the
 * counters' and the trace's, if something was counted or traced since they
 * were last written; never the table on stderr, which is the exit's. A
 * failed write is reported on stderr once until the message changes, with
 * the interval at which it is tried again.
 */
static void write_periodic(double interval)
{
    hold_writes();
    pthread_mutex_lock(&stats_lock);
    bool table = !stats_file && fld_stats_mode() != FLD_STATS_OFF;
    char *trace = table && trace_file ? strdup(trace_file) : NULL;
    pthread_mutex_unlock(&stats_lock);
    int rc = FLD_OK;
    if (!table) {
        if (!unchanged_since_flush())
            rc = flush_now(true);
    } else if (trace) {
        /* The counts go to the table at exit: only the trace is rewritten,
         * and the exit writes it again with the table. */
        struct trace_mark traced = trace_mark_now();
        if (!same_events(traced, periodic_traced)) {
            rc = write_expanded("VLLM_FL_TRACE", trace, true);
            if (rc == FLD_OK)
                periodic_traced = traced;
        }
    }
    free(trace);
    if (rc == FLD_OK) {
        periodic_failure[0] = '\0';
    } else if (strncmp(periodic_failure, fld_last_error(), sizeof periodic_failure - 1) != 0) {
        snprintf(periodic_failure, sizeof periodic_failure, "%s", fld_last_error());
        fprintf(stderr, "[fldispatch] %s (VLLM_FL_STATS_INTERVAL: tried again every %g s)\n",
                fld_last_error(), interval);
    }
    release_writes();
}

static void at_exit(void)
{
    fld__stats_writer_stop(); /* after the write it may be doing */
    hold_writes();
    if (!unchanged_since_flush() && flush_now(false) != FLD_OK) /* else flushed already */
        fprintf(stderr, "[fldispatch] %s\n", fld_last_error());
    release_writes();
}

static void arm_exit(void)
{
    pthread_mutex_lock(&stats_lock);
    bool arm = !exit_armed;
    exit_armed = true;
    pthread_mutex_unlock(&stats_lock);
    if (arm)
        atexit(at_exit);
}

int fld_stats_record(const char *op, const char *impl_id, int device_type, DLDataType dtype,
                     int status, unsigned flags, uint64_t ns)
{
    int rc = fld__callout_refuse("fld_stats_record");
    if (rc)
        return rc;
    if (!op || !*op || !impl_id || !*impl_id)
        return fld__fail(FLD_EINVAL, "fld_stats_record: argument '%s' is %s",
                         !op || !*op ? "op" : "impl_id",
                         (!op || !*op ? op : impl_id) ? "empty" : "NULL");
    int dev = fld__device_index(device_type);
    if (dev < 0)
        return fld__fail(FLD_EINVAL, "fld_stats_record: unknown device type %d (valid: %s)",
                         device_type, fld__device_text(FLD_DEVICE_TEXT_CODES));
    int dt = dtype.code == 0 && dtype.bits == 0 && dtype.lanes == 0 ? FLD_DT_ANY
                                                                    : fld_dtype_index(dtype);
    if (dt < 0)
        return fld__fail(FLD_EINVAL,
                         "fld_stats_record: unsupported dtype (code %d, bits %d, lanes %d; valid: "
                         "f32, f16, bf16, or all zero for any)",
                         dtype.code, dtype.bits, dtype.lanes);
    if (!(atomic_load_explicit(&fld__stats_flags, memory_order_relaxed) & FLD_STATS_FLAG_COUNT))
        return FLD_OK;
    pthread_mutex_lock(&stats_lock);
    struct fld_stats_cell *c = find_or_add(op, impl_id, device_word(dev), dtype_word(dt));
    pthread_mutex_unlock(&stats_lock);
    if (!c)
        return fld__fail(FLD_ENOMEM, "fld_stats_record: out of memory");
    fld__stats_count(c, status, ns);
    if (flags & FLD_STATS_FELL_BACK)
        fld__stats_fallback(c);
    return FLD_OK;
}
