/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Merged counters (stats_merge.c) in Prometheus's text exposition format,
 * version 0.0.4: what `fldispatch stats --prometheus` prints for a
 * textfile collector, and what the Python package's collector serves on
 * vLLM's /metrics (through fld__stats_merge_visit(), which hands the
 * families and their samples to the Python package as objects). The
 * families are the table below, their one definition.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "error.h"

/* The families: a row's counter each, then the files' gauge; timed: only rows that timed calls. */
static const struct family {
    const char *name, *type, *help;
    size_t field; /* offset of the uint64_t in struct fld_stats_row */
    bool timed, nanoseconds, files;
} families[] = {
    {"fldispatch_calls_total", "counter",
     "Calls of each implementation of each operator, declines included.",
     offsetof(struct fld_stats_row, calls), false, false, false},
    {"fldispatch_fallbacks_total", "counter",
     "Calls that this implementation failed and the next candidate served.",
     offsetof(struct fld_stats_row, fallbacks), false, false, false},
    {"fldispatch_failures_total", "counter",
     "Calls in which this implementation failed (an error other than declining).",
     offsetof(struct fld_stats_row, failures), false, false, false},
    {"fldispatch_call_seconds_total", "counter",
     "Time in this implementation's calls, from the processes that timed them "
     "(VLLM_FL_STATS=time).",
     offsetof(struct fld_stats_row, total_ns), true, true, false},
    {"fldispatch_timed_calls_total", "counter",
     "Calls that were timed (VLLM_FL_STATS=time): the divisor of fldispatch_call_seconds_total.",
     offsetof(struct fld_stats_row, timed_calls), true, false, false},
    {"fldispatch_stats_files", "gauge", "Counters files merged into these figures.", 0, false,
     false, true},
};

int fld__stats_merge_visit(const struct fld_stats_merge *m, const struct fld_stats_visitor *v)
{
    static const char *const label_names[] = {"op", "impl_id", "device", "dtype", "rank"};
    const size_t nlabels = m->by_rank ? 5 : 4;
    bool any_timed = false;
    for (size_t i = 0; i < m->n; i++)
        any_timed |= m->rows[i].timed_calls > 0;
    for (size_t k = 0; k < sizeof families / sizeof *families; k++) {
        const struct family *f = &families[k];
        if (f->timed && !any_timed)
            continue;
        int rc = v->family(v->ctx, f->name, f->type, f->help);
        if (rc == FLD_OK && f->files)
            rc = v->sample(v->ctx, label_names, NULL, 0, m->nfiles, false);
        for (size_t i = 0; rc == FLD_OK && !f->files && i < m->n; i++) {
            const struct fld_stats_row *r = &m->rows[i];
            if (f->timed && !r->timed_calls)
                continue;
            char rank[24] = "unknown";
            if (r->rank >= 0)
                snprintf(rank, sizeof rank, "%" PRId64, r->rank);
            const char *const values[] = {r->key->op, r->key->impl_id, r->key->device,
                                          r->key->dtype, rank};
            uint64_t value;
            memcpy(&value, (const char *)r + f->field, sizeof value);
            rc = v->sample(v->ctx, label_names, values, nlabels, value, f->nanoseconds);
        }
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

/* A label value with backslash, double quote and line feed escaped, as the format wants. */
static void put_value(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') {
            fputc('\\', out);
            fputc(*s, out);
        } else if (*s == '\n') {
            fputs("\\n", out);
        } else {
            fputc(*s, out);
        }
    }
}

struct text_out {
    FILE *out;
    const char *name; /* the family's, for its samples */
};

static int text_family(void *ctx, const char *name, const char *type, const char *help)
{
    struct text_out *t = ctx;
    t->name = name;
    fprintf(t->out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    return FLD_OK;
}

static int text_sample(void *ctx, const char *const *names, const char *const *values,
                       size_t nlabels, uint64_t value, bool nanoseconds)
{
    struct text_out *t = ctx;
    fputs(t->name, t->out);
    for (size_t i = 0; i < nlabels; i++) {
        fprintf(t->out, "%c%s=\"", i ? ',' : '{', names[i]);
        put_value(t->out, values[i]);
        fputc('"', t->out);
    }
    if (nlabels)
        fputc('}', t->out);
    if (nanoseconds)
        fprintf(t->out, " %" PRIu64 ".%09" PRIu64 "\n", value / 1000000000u, value % 1000000000u);
    else
        fprintf(t->out, " %" PRIu64 "\n", value);
    return FLD_OK;
}

int fld__stats_merge_prometheus(const struct fld_stats_merge *m, FILE *out)
{
    struct text_out t = {out, NULL};
    const struct fld_stats_visitor v = {&t, text_family, text_sample};
    fld__stats_merge_visit(m, &v);
    if (fflush(out) != 0 || ferror(out))
        return fld__fail(FLD_EINVAL, "the Prometheus exposition could not be written");
    return FLD_OK;
}
