/* SPDX-License-Identifier: Apache-2.0 */
/* The catalog's ops, as the library lists them (see catalog.h). */
#include "catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct tool_op catalog[TOOL_MAX_OPS];
static size_t n_catalog;

static int add_op(const fld_catalog_op_info *op, void *user)
{
    (void)user;
    if (n_catalog == TOOL_MAX_OPS) {
        fprintf(stderr,
                "fldispatch: the library's catalog has more than %d ops; this tool was "
                "built for fewer (rebuild it with the library)\n",
                TOOL_MAX_OPS);
        exit(2);
    }
    catalog[n_catalog++] = (struct tool_op){op->name, op->args};
    return 0;
}

size_t tool_catalog_ops(const struct tool_op **ops)
{
    if (n_catalog == 0)
        fld_foreach_catalog_op(add_op, NULL); /* fails only for a NULL callback */
    *ops = catalog;
    return n_catalog;
}

/* The tool's family and the argument kind of each family of the catalog table. */
#define TOOL_GATED       TOOL_FAMILY_ACTIVATION, FLD_ARGS_ACTIVATION
#define TOOL_ELEMENTWISE TOOL_FAMILY_ELEMENTWISE, FLD_ARGS_ACTIVATION
#define TOOL_NORM        TOOL_FAMILY_NORM, FLD_ARGS_RMS_NORM
#define TOOL_ROTARY      TOOL_FAMILY_ROTARY, FLD_ARGS_ROTARY_EMBEDDING
#define TOOL_ROTARY_OUT  TOOL_FAMILY_ROTARY_OUT, FLD_ARGS_ROTARY_EMBEDDING_OUT
#define TOOL_ATTENTION   TOOL_FAMILY_NONE, FLD_ARGS_ATTENTION_BACKEND

static const struct {
    const char *name;
    enum tool_family family;
    fld_args_kind args;
} families[] = {
#define FLD_CATALOG_OP(id, name, family, doc) {FLD_OP_##id, TOOL_##family},
#include <fldispatch/catalog.def>
};

enum tool_family tool_op_family(const struct tool_op *op)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i].name, op->name) == 0 && families[i].args == op->args)
            return families[i].family;
    fprintf(stderr,
            "fldispatch: op '%s' takes argument kind %d, which this tool does not know "
            "(rebuild it with the library)\n",
            op->name, (int)op->args);
    exit(2);
}

size_t tool_tensor_ops(struct tool_op *ops)
{
    const struct tool_op *all;
    size_t n_all = tool_catalog_ops(&all), n = 0;
    for (size_t i = 0; i < n_all; i++)
        if (tool_op_family(&all[i]) != TOOL_FAMILY_NONE)
            ops[n++] = all[i];
    return n;
}

bool tool_is_catalog_op(const char *name)
{
    const struct tool_op *all;
    size_t n = tool_catalog_ops(&all);
    for (size_t i = 0; i < n; i++)
        if (strcmp(all[i].name, name) == 0)
            return true;
    return false;
}

const char *tool_wrap_names(const char *const *names, const char *sep, int indent, int width,
                            const char *tail)
{
    static char buf[1024];
    size_t len = 0;
    int col = indent;
    buf[0] = '\0';
    for (size_t i = 0; names[i]; i++) {
        const char *s = names[i + 1] ? sep : "";
        int need = (int)(strlen(names[i]) + strlen(s));
        if (i > 0 && col + need > width) {
            /* the separator's trailing space ends the line instead */
            while (len > 0 && buf[len - 1] == ' ')
                len--;
            len += (size_t)snprintf(buf + len, sizeof buf - len, "\n%*s", indent, "");
            col = indent;
        }
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", names[i], s);
        col += need;
        if (len >= sizeof buf)
            break;
    }
    tail = tail ? tail : "";
    if (len < sizeof buf && *tail && col + (int)strlen(tail) > width) {
        while (*tail == ' ')
            tail++;
        len += (size_t)snprintf(buf + len, sizeof buf - len, "\n%*s", indent, "");
    }
    if (len < sizeof buf)
        snprintf(buf + len, sizeof buf - len, "%s", tail);
    return buf;
}
