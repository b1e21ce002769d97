/*
 * Closest names by optimal string alignment distance: insertions, deletions,
 * substitutions and transpositions of two neighbours each count one, so
 * "--devcie" is one edit from "--device" and "rms_nrom" one from "rms_norm".
 */
#include "suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "catalog.h"

#define MAX_NAME 64 /* longer names are not compared */

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > MAX_NAME || lb > MAX_NAME)
        return (size_t)-1;
    size_t d[MAX_NAME + 1][MAX_NAME + 1];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            size_t cost = ca != cb;
            d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1;
        }
    }
    return d[la][lb];
}

const char *cli_did_you_mean(const char *name, const char *const *candidates, size_t n, char *buf,
                             size_t size)
{
    size_t len = strlen(name);
    size_t limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    size_t best[2] = {(size_t)-1, (size_t)-1};
    const char *pick[2] = {NULL, NULL};
    for (size_t i = 0; i < n; i++) {
        if (!candidates[i] || strcmp(candidates[i], name) == 0)
            continue;
        size_t dist = distance(name, candidates[i]);
        if (dist > limit)
            continue;
        if (dist < best[0]) {
            best[1] = best[0];
            pick[1] = pick[0];
            best[0] = dist;
            pick[0] = candidates[i];
        } else if (dist < best[1] && (!pick[0] || strcmp(pick[0], candidates[i]) != 0)) {
            best[1] = dist;
            pick[1] = candidates[i];
        }
    }
    if (!pick[0])
        snprintf(buf, size, "%s", "");
    else if (!pick[1] || best[1] > best[0])
        snprintf(buf, size, "; did you mean '%s'?", pick[0]);
    else
        snprintf(buf, size, "; did you mean '%s' or '%s'?", pick[0], pick[1]);
    return buf;
}

struct op_names {
    char **names;
    size_t n, cap;
};

static int add_op(const fld_impl_info *m, void *user)
{
    struct op_names *ops = user;
    /* fld_foreach_impl runs by op name: one entry per op. */
    if (ops->n && strcmp(ops->names[ops->n - 1], m->op) == 0)
        return 0;
    if (ops->n == ops->cap) {
        size_t cap = ops->cap ? 2 * ops->cap : 32;
        char **names = realloc(ops->names, cap * sizeof *names);
        if (!names)
            return 1;
        ops->names = names;
        ops->cap = cap;
    }
    if (!(ops->names[ops->n] = strdup(m->op)))
        return 1;
    ops->n++;
    return 0;
}

const char *cli_did_you_mean_op(const char *name, char *buf, size_t size)
{
    const struct tool_op *cat;
    const size_t n = tool_catalog_ops(&cat);
    const char *catalog[TOOL_MAX_OPS];
    for (size_t i = 0; i < n; i++)
        catalog[i] = cat[i].name;
    struct op_names ops = {0};
    fld_foreach_impl(add_op, &ops); /* a short list on failure: the catalog still counts */
    const char **all = malloc((ops.n + n) * sizeof *all);
    if (all) {
        for (size_t i = 0; i < n; i++)
            all[i] = catalog[i];
        for (size_t i = 0; i < ops.n; i++)
            all[n + i] = ops.names[i];
        cli_did_you_mean(name, all, n + ops.n, buf, size);
    } else {
        cli_did_you_mean(name, catalog, n, buf, size);
    }
    free(all);
    for (size_t i = 0; i < ops.n; i++)
        free(ops.names[i]);
    free(ops.names);
    return buf;
}
