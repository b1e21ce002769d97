/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The counters files of a deployment's processes and ranks merged into one
 * set of rows (include/fldispatch/internal/tool_api.h): what `fldispatch
 * stats` prints and what the Prometheus exposition (stats_prometheus.c)
 * serves. The files are read by stats_file.c; a sum never passes 2^63-1,
 * so that every JSON reader takes it as an integer.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "error.h"

static int64_t rank_of(const struct fld_stats_file *f)
{
    return f->has_rank && f->rank <= INT64_MAX ? (int64_t)f->rank : -1;
}

static bool same_key(const struct fld_stats_file_entry *a, const struct fld_stats_file_entry *b)
{
    return strcmp(a->op, b->op) == 0 && strcmp(a->impl_id, b->impl_id) == 0 &&
           strcmp(a->device, b->device) == 0 && strcmp(a->dtype, b->dtype) == 0;
}

/* The row of e (and rank), appended when new; NULL when memory runs out. */
static struct fld_stats_row *find_row(struct fld_stats_merge *m, size_t *cap,
                                      const struct fld_stats_file_entry *e, int64_t rank)
{
    for (size_t i = 0; i < m->n; i++)
        if (same_key(m->rows[i].key, e) && (!m->by_rank || m->rows[i].rank == rank))
            return &m->rows[i];
    if (m->n == *cap) {
        size_t want = *cap ? *cap * 2 : 16;
        struct fld_stats_row *grown =
            want < SIZE_MAX / sizeof *grown ? realloc(m->rows, want * sizeof *grown) : NULL;
        if (!grown)
            return NULL;
        m->rows = grown;
        *cap = want;
    }
    struct fld_stats_row *r = &m->rows[m->n];
    *r = (struct fld_stats_row){
        .key = e, .rank = m->by_rank ? rank : -1, .from = calloc(m->nfiles, 1)};
    if (!r->from)
        return NULL;
    m->n++;
    return r;
}

static bool add(uint64_t *sum, uint64_t v)
{
    return !__builtin_add_overflow(*sum, v, sum) && *sum <= INT64_MAX;
}

static int add_file(struct fld_stats_merge *m, size_t *cap, size_t f, const char *path)
{
    const struct fld_stats_file *file = &m->files[f];
    const bool timed = strcmp(file->mode, "time") == 0;
    for (size_t i = 0; i < file->n; i++) {
        const struct fld_stats_file_entry *e = &file->entries[i];
        struct fld_stats_row *r = find_row(m, cap, e, rank_of(file));
        if (!r)
            return fld__fail(FLD_ENOMEM, "out of memory merging '%s'", path);
        r->from[f] = 1;
        bool ok = add(&r->calls, e->calls) && add(&r->fallbacks, e->fallbacks) &&
                  add(&r->failures, e->failures);
        if (ok && timed)
            ok = add(&r->total_ns, e->total_ns) && add(&r->timed_calls, e->calls);
        if (!ok)
            return fld__fail(FLD_EINVAL, "the sum of %s/%s (%s, %s) passes 2^63-1 at '%s'", e->op,
                             e->impl_id, e->device, e->dtype, path);
    }
    return FLD_OK;
}

static int key_order(const struct fld_stats_row *a, const struct fld_stats_row *b)
{
    int c = strcmp(a->key->op, b->key->op);
    if (!c)
        c = strcmp(a->key->impl_id, b->key->impl_id);
    if (!c)
        c = strcmp(a->key->device, b->key->device);
    if (!c)
        c = strcmp(a->key->dtype, b->key->dtype);
    return c;
}

static int row_order(const void *pa, const void *pb, void *by_rank)
{
    const struct fld_stats_row *a = pa, *b = pb;
    if (*(const bool *)by_rank && a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    return key_order(a, b);
}

/* FLD_ECONFIG when file f is the same process's as an earlier one. */
static int refuse_twice(const struct fld_stats_merge *m, size_t f, const char *const *paths)
{
    const struct fld_stats_file *y = &m->files[f];
    for (size_t g = 0; g < f; g++) {
        const struct fld_stats_file *x = &m->files[g];
        if (x->pid != y->pid || x->has_rank != y->has_rank || x->rank != y->rank)
            continue;
        char rank[24] = "unknown";
        if (y->has_rank)
            snprintf(rank, sizeof rank, "%" PRIu64, y->rank);
        return fld__fail(FLD_ECONFIG,
                         "'%s' and '%s' are both pid %" PRIu64
                         " rank %s: one process's counters would count twice",
                         paths[g], paths[f], y->pid, rank);
    }
    return FLD_OK;
}

int fld__stats_merge(const char *const *paths, size_t nfiles, bool by_rank,
                     struct fld_stats_merge *out)
{
    *out = (struct fld_stats_merge){.nfiles = nfiles, .by_rank = by_rank};
    if (nfiles && !(out->files = calloc(nfiles, sizeof *out->files))) {
        out->nfiles = 0;
        return fld__fail(FLD_ENOMEM, "out of memory reading %zu counters files", nfiles);
    }
    size_t cap = 0;
    int rc = FLD_OK;
    for (size_t f = 0; f < nfiles && rc == FLD_OK; f++) {
        rc = fld__stats_file_read(paths[f], &out->files[f]);
        if (rc == FLD_OK)
            rc = refuse_twice(out, f, paths);
    }
    for (size_t f = 0; f < nfiles && rc == FLD_OK; f++)
        rc = add_file(out, &cap, f, paths[f]);
    if (rc != FLD_OK) {
        fld__stats_merge_free(out);
        return rc;
    }
    if (out->n > 1)
        qsort_r(out->rows, out->n, sizeof *out->rows, row_order, &out->by_rank);
    return FLD_OK;
}

void fld__stats_merge_free(struct fld_stats_merge *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->rows[i].from);
    free(m->rows);
    for (size_t f = 0; f < m->nfiles; f++)
        fld__stats_file_free(&m->files[f]);
    free(m->files);
    *m = (struct fld_stats_merge){0};
}

const char *fld__stats_row_ranks(const struct fld_stats_merge *m, const struct fld_stats_row *r,
                                 char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    bool unknown = false;
    /* ascending without sorting: repeatedly the smallest rank above the last one written */
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
