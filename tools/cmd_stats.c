/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch stats [--by-rank] [--json|--prometheus] FILE...: merges the counters files
 * that VLLM_FL_STATS_FILE (or fld_stats_write()) left, one per process or
 * rank of a deployment, into one report: a row per (op, implementation,
 * device, dtype) with the calls, fallbacks and failures of every file
 * summed, and the time of the files that timed their calls. The files are
 * read and merged by the library (core/observe/stats_file.c,
 * stats_merge.c), which names "path:line:column" of whatever is wrong in
 * one; nothing is printed then.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "cli.h"
#include "json.h"
#include "options.h"

static const char stats_usage[] =
    "Usage: fldispatch stats [--by-rank] [--json | --prometheus] [--] FILE...\n"
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
    "  --prometheus Prometheus's text exposition format (version 0.0.4), for\n"
    "               node_exporter's textfile collector or a scraper: the\n"
    "               counters fldispatch_*_total with labels op, impl_id,\n"
    "               device, dtype (and rank with --by-rank), and the gauge\n"
    "               fldispatch_stats_files (docs/configuration.md)\n"
    "\n"
    "A file that is not such a document is named with the line and column at\n"
    "fault; so are two files of one process (the same pid and rank), which\n"
    "would count its calls twice.\n"
    "\n"
    "Exit status: 0 success, 1 a sum past 2^63-1, 2 usage error or a file that\n"
    "cannot be read or is not a counters file.\n";

static void print_text(const struct fld_stats_merge *m)
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
        const struct fld_stats_row *r = &m->rows[i];
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
        printf("  %s\n", fld__stats_row_ranks(m, r, ranks, sizeof ranks));
    }
}

static void print_json(const struct fld_stats_merge *m, const char *const *paths)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "files");
    json_begin_array(&w);
    for (size_t f = 0; f < m->nfiles; f++) {
        json_begin_object(&w);
        json_key(&w, "path");
        json_string(&w, paths[f]);
        json_key(&w, "pid");
        json_int(&w, (long long)m->files[f].pid);
        json_key(&w, "rank");
        if (m->files[f].has_rank && m->files[f].rank <= INT64_MAX)
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
        const struct fld_stats_row *r = &m->rows[i];
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
        fld__stats_row_ranks(m, r, ranks, sizeof ranks);
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

int cmd_stats(int argc, char **argv)
{
    enum { OPT_BY_RANK, OPT_JSON, OPT_PROMETHEUS };
    static const struct cli_option opts[] = {[OPT_BY_RANK] = {"--by-rank", false},
                                             [OPT_JSON] = {"--json", false},
                                             [OPT_PROMETHEUS] = {"--prometheus", false},
                                             {NULL, false}};
    struct cli_args a;
    cli_args_init(&a, "stats", opts, argc, argv);
    bool json = false, prometheus = false, by_rank = false;
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
        else if (k == OPT_BY_RANK)
            by_rank = true;
        else if (k == OPT_JSON)
            json = true;
        else
            prometheus = true;
    }
    if (!npaths || (json && prometheus)) {
        free(paths);
        return cli_usage_error("stats", npaths
                                            ? "--json and --prometheus are two outputs: choose one"
                                            : "no FILE given: name the counters files to merge");
    }
    struct fld_stats_merge m;
    int rc = fld__stats_merge(paths, npaths, by_rank, &m);
    if (rc != FLD_OK) {
        fprintf(stderr, "fldispatch stats: %s\n", cli_text(fld_last_error()));
        free(paths);
        /* a sum past 2^63-1 or no memory: the files were fine */
        return rc == FLD_EINVAL || rc == FLD_ENOMEM ? CLI_EXIT_CHECK_FAILED : CLI_EXIT_USAGE;
    }
    int status = CLI_EXIT_OK;
    if (json)
        print_json(&m, paths);
    else if (prometheus)
        status =
            fld__stats_merge_prometheus(&m, stdout) == FLD_OK ? CLI_EXIT_OK : CLI_EXIT_CHECK_FAILED;
    else
        print_text(&m);
    fld__stats_merge_free(&m);
    free(paths);
    return status;
}
