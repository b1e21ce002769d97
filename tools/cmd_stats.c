/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch stats [--by-rank] [--json] FILE...: merges the counters files
 * that VLLM_FL_STATS_FILE (or fld_stats_write()) left, one per process or
 * rank of a deployment, into one report: a row per (op, implementation,
 * device, dtype) with the calls, fallbacks and failures of every file
 * summed, and the time of the files that timed their calls. The files are
 * read by the library's reader (core/observe/stats_file.c), which names
 * "path:line:column" of whatever is wrong in one; nothing is printed then.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "cli.h"
#include "json.h"
#include "options.h"
#include "vec.h"

static const char stats_usage[] =
    "Usage: fldispatch stats [--by-rank] [--json] [--] FILE...\n"
    "\n"
    "Merges the counters files that VLLM_FL_STATS_FILE (e.g. stats-%r-%p.json)\n"
    "or fld_stats_write() wrote, one per process or rank of a deployment, into\n"
    "one report: a row per (op, impl_id, device, dtype) with calls, fallbacks\n"
    "and failures summed over the files, and total_ms and avg_ns from the\n"
    "files written with VLLM_FL_STATS=time (avg_ns divides by their calls\n"
    "alone). 'ranks' lists the ranks whose files have the row ('?' for a file\n"
    "whose rank was not a number).\n"
    "\n"
    "  --by-rank    a row per rank as well: the same counters, not summed\n"
    "               across ranks\n"
    "  --json       one JSON object {\"schema\", \"files\": [{\"path\", \"pid\",\n"
    "               \"rank\" (null when unknown), \"mode\"}], \"entries\": [{\"op\",\n"
    "               \"impl_id\", \"device\", \"dtype\", \"rank\" (with --by-rank),\n"
    "               \"ranks\", \"calls\", \"fallbacks\", \"failures\", \"total_ns\",\n"
    "               \"timed_calls\"}]} (docs/schemas/stats.schema.json)\n"
    "\n"
    "A file that is not such a document is named with the line and column at\n"
    "fault; so are two files of one process (the same pid and rank), which\n"
    "would count its calls twice.\n"
    "\n"
    "Exit status: 0 success, 1 a sum past 2^63-1, 2 usage error or a file that\n"
    "cannot be read or is not a counters file.\n";

/* One merged row. ranks: bit i set when file i contributed. */
struct row {
    const struct fld_stats_file_entry *key; /* names from the first file that had it */
    int64_t rank;                           /* --by-rank: the rank, -1 unknown; else unused */
    uint64_t calls, fallbacks, failures, total_ns, timed_calls;
    unsigned char *from; /* [nfiles]: which files contributed */
};

struct merge {
    struct fld_stats_file *files;
    const char *const *paths;
    size_t nfiles;
    bool by_rank;
    struct row *rows;
    size_t n, cap;
};

static int64_t rank_of(const struct fld_stats_file *f)
{
    return f->has_rank && f->rank <= INT64_MAX ? (int64_t)f->rank : -1;
}

static bool same_key(const struct fld_stats_file_entry *a, const struct fld_stats_file_entry *b)
{
    return strcmp(a->op, b->op) == 0 && strcmp(a->impl_id, b->impl_id) == 0 &&
           strcmp(a->device, b->device) == 0 && strcmp(a->dtype, b->dtype) == 0;
}

static struct row *find_row(struct merge *m, const struct fld_stats_file_entry *e, int64_t rank)
{
    for (size_t i = 0; i < m->n; i++)
        if (same_key(m->rows[i].key, e) && (!m->by_rank || m->rows[i].rank == rank))
            return &m->rows[i];
    if (VEC_RESERVE(m->rows, m->n, m->cap, 16))
        return NULL;
    struct row *r = &m->rows[m->n];
    *r = (struct row){.key = e, .rank = rank, .from = calloc(m->nfiles, 1)};
    if (!r->from)
        return NULL;
    m->n++;
    return r;
}

/* Sums stay at most 2^63-1, so that every JSON reader takes them as integers. */
static bool add(uint64_t *sum, uint64_t v)
{
    return !__builtin_add_overflow(*sum, v, sum) && *sum <= INT64_MAX;
}

/* CLI_EXIT_OK, or the exit status after a message. */
static int merge_files(struct merge *m)
{
    for (size_t f = 0; f < m->nfiles; f++) {
        const struct fld_stats_file *file = &m->files[f];
        const bool timed = strcmp(file->mode, "time") == 0;
        for (size_t i = 0; i < file->n; i++) {
            const struct fld_stats_file_entry *e = &file->entries[i];
            struct row *r = find_row(m, e, rank_of(file));
            if (!r) {
                fprintf(stderr, "fldispatch stats: out of memory\n");
                return CLI_EXIT_CHECK_FAILED;
            }
            r->from[f] = 1;
            bool ok = add(&r->calls, e->calls) && add(&r->fallbacks, e->fallbacks) &&
                      add(&r->failures, e->failures);
            if (ok && timed)
                ok = add(&r->total_ns, e->total_ns) && add(&r->timed_calls, e->calls);
            if (!ok) {
                fprintf(stderr,
                        "fldispatch stats: the sum of %s/%s (%s, %s) passes 2^63-1 at '%s'\n",
                        cli_text(e->op), cli_text(e->impl_id), cli_text(e->device),
                        cli_text(e->dtype), cli_text(m->paths[f]));
                return CLI_EXIT_CHECK_FAILED;
            }
        }
    }
    return CLI_EXIT_OK;
}

static const struct merge *sort_ctx;

static int row_order(const void *pa, const void *pb)
{
    const struct row *a = pa, *b = pb;
    if (sort_ctx->by_rank && a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    int c = strcmp(a->key->op, b->key->op);
    if (!c)
        c = strcmp(a->key->impl_id, b->key->impl_id);
    if (!c)
        c = strcmp(a->key->device, b->key->device);
    if (!c)
        c = strcmp(a->key->dtype, b->key->dtype);
    return c;
}

/* The distinct ranks of the files a row came from, ascending ("?" for unknown), into buf. */
static const char *ranks_text(const struct merge *m, const struct row *r, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    bool unknown = false;
    /* ascending without sorting: repeatedly the smallest rank above the last one printed */
    for (uint64_t last = 0, first = 1;;) {
        bool found = false;
        uint64_t best = 0;
        for (size_t f = 0; f < m->nfiles; f++) {
            if (!r->from[f])
                continue;
            if (!m->files[f].has_rank) {
                unknown = true;
                continue;
            }
            uint64_t v = m->files[f].rank;
            if ((first || v > last) && (!found || v < best)) {
                best = v;
                found = true;
            }
        }
        if (!found)
            break;
        int k = snprintf(buf + len, size - len, "%s%" PRIu64, len ? "," : "", best);
        if (k < 0 || (size_t)k >= size - len) {
            snprintf(buf + (size > 4 ? size - 4 : 0), size > 4 ? 4 : size, "...");
            return buf;
        }
        len += (size_t)k;
        last = best;
        first = 0;
    }
    if (unknown)
        snprintf(buf + len, size - len, "%s?", len ? "," : "");
    return buf;
}

static void print_text(const struct merge *m)
{
    size_t timed = 0, known = 0;
    for (size_t f = 0; f < m->nfiles; f++) {
        timed += strcmp(m->files[f].mode, "time") == 0;
        known += m->files[f].has_rank;
    }
    printf("fldispatch stats: %zu file(s), %zu with a rank, %zu timed: %zu row(s)\n", m->nfiles,
           known, timed, m->n);
    if (!m->n)
        return;
    if (m->by_rank)
        printf("%-5s ", "rank");
    printf("%-22s %-24s %-6s %-5s %12s %9s %8s %12s %9s  %s\n", "op", "impl_id", "device", "dtype",
           "calls", "fallbacks", "failures", "total_ms", "avg_ns", "ranks");
    char ranks[256];
    for (size_t i = 0; i < m->n; i++) {
        const struct row *r = &m->rows[i];
        if (m->by_rank) {
            if (r->rank < 0)
                printf("%-5s ", "?");
            else
                printf("%-5" PRId64 " ", r->rank);
        }
        printf("%-22s %-24s %-6s %-5s %12" PRIu64 " %9" PRIu64 " %8" PRIu64, cli_text(r->key->op),
               cli_text(r->key->impl_id), cli_text(r->key->device), cli_text(r->key->dtype),
               r->calls, r->fallbacks, r->failures);
        if (r->timed_calls)
            printf(" %12.3f %9.0f", (double)r->total_ns / 1e6,
                   (double)r->total_ns / (double)r->timed_calls);
        else
            printf(" %12s %9s", "-", "-");
        printf("  %s\n", ranks_text(m, r, ranks, sizeof ranks));
    }
}

static void print_json(const struct merge *m)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "files");
    json_begin_array(&w);
    for (size_t f = 0; f < m->nfiles; f++) {
        json_begin_object(&w);
        json_key(&w, "path");
        json_string(&w, m->paths[f]);
        json_key(&w, "pid");
        json_int(&w, (long long)m->files[f].pid);
        json_key(&w, "rank");
        if (rank_of(&m->files[f]) >= 0)
            json_int(&w, (long long)m->files[f].rank);
        else
            json_null(&w);
        json_key(&w, "mode");
        json_string(&w, m->files[f].mode);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "entries");
    json_begin_array(&w);
    for (size_t i = 0; i < m->n; i++) {
        const struct row *r = &m->rows[i];
        json_begin_object(&w);
        json_key(&w, "op");
        json_string(&w, r->key->op);
        json_key(&w, "impl_id");
        json_string(&w, r->key->impl_id);
        json_key(&w, "device");
        json_string(&w, r->key->device);
        json_key(&w, "dtype");
        json_string(&w, r->key->dtype);
        if (m->by_rank) {
            json_key(&w, "rank");
            if (r->rank >= 0)
                json_int(&w, r->rank);
            else
                json_null(&w);
        }
        json_key(&w, "ranks");
        json_begin_array(&w);
        char ranks[256];
        ranks_text(m, r, ranks, sizeof ranks);
        for (char *p = ranks; *p;) {
            char *end = strchr(p, ',');
            if (end)
                *end = '\0';
            if (strcmp(p, "?") == 0)
                json_null(&w);
            else if (strcmp(p, "...") != 0)
                json_int(&w, strtoll(p, NULL, 10));
            p = end ? end + 1 : p + strlen(p);
        }
        json_end_array(&w);
        const char *keys[] = {"calls", "fallbacks", "failures", "total_ns", "timed_calls"};
        const uint64_t values[] = {r->calls, r->fallbacks, r->failures, r->total_ns,
                                   r->timed_calls};
        for (size_t k = 0; k < 5; k++) {
            json_key(&w, keys[k]);
            json_int(&w, (long long)values[k]);
        }
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
}

static void free_merge(struct merge *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->rows[i].from);
    free(m->rows);
    for (size_t f = 0; f < m->nfiles; f++)
        fld__stats_file_free(&m->files[f]);
    free(m->files);
}

int cmd_stats(int argc, char **argv)
{
    static const struct cli_option opts[] = {
        {"--by-rank", false}, {"--json", false}, {NULL, false}};
    struct cli_args a;
    cli_args_init(&a, "stats", opts, argc, argv);
    bool json = false, by_rank = false;
    const char **paths = calloc((size_t)(argc > 0 ? argc : 1), sizeof *paths);
    if (!paths) {
        fprintf(stderr, "fldispatch stats: out of memory\n");
        return CLI_EXIT_CHECK_FAILED;
    }
    size_t npaths = 0;
    const char *value;
    int k;
    while ((k = cli_args_next(&a, &value)) != CLI_ARG_END) {
        if (k == CLI_ARG_ERROR) {
            free(paths);
            return CLI_EXIT_USAGE;
        }
        if (k == CLI_ARG_HELP) {
            fputs(stats_usage, stdout);
            free(paths);
            return CLI_EXIT_OK;
        }
        if (k == CLI_ARG_OPERAND)
            paths[npaths++] = value;
        else if (k == 0)
            by_rank = true;
        else
            json = true;
    }
    if (!npaths) {
        free(paths);
        return cli_usage_error("stats", "no FILE given: name the counters files to merge");
    }
    struct merge m = {.paths = paths, .nfiles = npaths, .by_rank = by_rank};
    int status = CLI_EXIT_OK;
    m.files = calloc(npaths, sizeof *m.files);
    if (!m.files) {
        fprintf(stderr, "fldispatch stats: out of memory\n");
        free(paths);
        return CLI_EXIT_CHECK_FAILED;
    }
    for (size_t f = 0; f < npaths && !status; f++) {
        if (fld__stats_file_read(paths[f], &m.files[f]) != FLD_OK) {
            fprintf(stderr, "fldispatch stats: %s\n", cli_text(fld_last_error()));
            status = CLI_EXIT_USAGE;
            break;
        }
        for (size_t g = 0; g < f; g++) {
            const struct fld_stats_file *x = &m.files[g], *y = &m.files[f];
            if (x->pid == y->pid && x->has_rank == y->has_rank && x->rank == y->rank) {
                char rank[24] = "unknown";
                if (y->has_rank)
                    snprintf(rank, sizeof rank, "%" PRIu64, y->rank);
                fprintf(stderr,
                        "fldispatch stats: '%s' and '%s' are both pid %" PRIu64
                        " rank %s: one process's counters would count twice\n",
                        cli_text(paths[g]), cli_text(paths[f]), y->pid, rank);
                status = CLI_EXIT_USAGE;
                break;
            }
        }
    }
    if (!status)
        status = merge_files(&m);
    if (!status) {
        sort_ctx = &m;
        if (m.n > 1) /* rows is NULL when no file has an entry */
            qsort(m.rows, m.n, sizeof *m.rows, row_order);
        if (json)
            print_json(&m);
        else
            print_text(&m);
    }
    free_merge(&m);
    free(paths);
    return status;
}
