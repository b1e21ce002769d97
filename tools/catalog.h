/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The catalog's ops as the tool lists them. The library's catalog table
 * (core/ops/catalog.c, through fld_foreach_catalog_op()) is the one list: verify,
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
 * The families of the tensor inputs verify and bench build: an op's family
 * in the catalog table (<fldispatch/catalog.def>) decides which
 * (tool_op_family()).
 */
enum tool_family {
    TOOL_FAMILY_ACTIVATION,  /* GATED: fld_activation_args, x [T, 2d] -> out [T, d] */
    TOOL_FAMILY_ELEMENTWISE, /* ELEMENTWISE: fld_activation_args, x [T, d] -> out [T, d] */
    TOOL_FAMILY_NORM,        /* NORM: fld_rms_norm_args */
    TOOL_FAMILY_ROTARY,      /* ROTARY: fld_rotary_embedding_args */
    TOOL_FAMILY_ROTARY_OUT,  /* ROTARY_OUT: fld_rotary_embedding_out_args */
    TOOL_FAMILY_NONE         /* ATTENTION, no tensors: fld_attention_backend_args */
};

/*
 * The family of op, from its row of the catalog table this tool was built
 * with. An op this tool does not know (a library newer than the tool), or
 * one whose argument kind disagrees with its row, stops the tool with one
 * line naming the op, exit status 2: verify and bench never skip an op
 * silently.
 */
enum tool_family tool_op_family(const struct tool_op *op);

/*
 * Every catalog op in catalog order, and how many. Asks the library once
 * (it needs no initialisation, so it works under any configuration). The
 * tool is single-threaded; so is this.
 */
size_t tool_catalog_ops(const struct tool_op **ops);

/*
 * The catalog ops that take tensors (family other than TOOL_FAMILY_NONE), in
 * catalog order, in ops[TOOL_MAX_OPS]; returns how many.
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
