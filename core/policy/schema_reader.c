/* SPDX-License-Identifier: Apache-2.0 */
/* A schema reader's errors and node tests (see schema_reader.h). */
#include "schema_reader.h"

#include <stdarg.h>
#include <stdio.h>

#include <fldispatch/fldispatch.h>

#include "error.h"

int fld__schema_fail(const struct fld_schema_reader *r, const struct fld_ynode *n, const char *fmt,
                     ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fld__fail(FLD_ECONFIG, "%s:%u:%u: %s", r->path, n ? n->line : 1u, n ? n->column : 1u,
                     msg);
}

bool fld__schema_is_plain(const struct fld_ynode *n)
{
    return n->type == FLD_YNODE_SCALAR && n->style == FLD_YSTYLE_PLAIN && !n->tag_str &&
           !n->tag_bool;
}
