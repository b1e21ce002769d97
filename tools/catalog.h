/*
 * The catalog's ops as the tool lists them. The library's catalog table
 * (core/catalog.c, through fld_foreach_catalog_op()) is the one list: verify,
 * freeze and the op suggestions take their ops from here instead of naming
 * them again, and `make run` reads the same names from the public header.
 */
#ifndef FLD_TOOLS_CATALOG_H
#define FLD_TOOLS_CATALOG_H

#include <stdbool.h>
#include <stddef.h>

#include <fldispatch/fldispatch.h>

/* More than the catalog holds; tool_catalog_ops() stops the tool if it grows past it. */
#define TOOL_MAX_OPS 32

struct tool_op {
    const char *name; /* FLD_OP_* */
    fld_args_kind args;
};

/*
 * Every catalog op in catalog order, and how many. Asks the library once
 * (it needs no initialisation, so it works under any configuration). The
 * tool is single-threaded; so is this.
 */
size_t tool_catalog_ops(const struct tool_op **ops);

/*
 * The catalog ops that take tensors (all but attention_backend), in catalog
 * order, in ops[TOOL_MAX_OPS]; returns how many.
 */
size_t tool_tensor_ops(struct tool_op *ops);

/*
 * names (NULL-terminated) as help text: joined by sep, wrapped before
 * column width with continuation lines indented by indent spaces (the
 * first line's indent is the caller's), then tail. Returns a static buffer
 * (the tool is single-threaded), so the help texts list what the catalog
 * holds instead of naming the ops again.
 */
const char *tool_wrap_names(const char *const *names, const char *sep, int indent, int width,
                            const char *tail);

/* Whether name is a catalog op. */
bool tool_is_catalog_op(const char *name);

#endif
