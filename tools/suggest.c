/* SPDX-License-Identifier: Apache-2.0 */
/*
 * "Did you mean" for the tool: the library's closeness (core/policy/names.c
 * fld__did_you_mean(), exported for the tool), among the tool's names.
 */
#include "suggest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>

#include "catalog.h"
#include "vec.h"

const char *cli_did_you_mean(const char *name, const char *const *candidates, size_t n, char *buf,
                             size_t size)
{
    return fld__did_you_mean(name, candidates, n, buf, size);
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
    if (VEC_RESERVE(ops->names, ops->n, ops->cap, 32) != 0)
        return 1;
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
