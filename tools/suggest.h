/* SPDX-License-Identifier: Apache-2.0 */
/*
 * "Did you mean": the known names closest to a mistyped one, for the
 * tool's usage errors (commands, options, op names).
 */
#ifndef FLD_TOOLS_SUGGEST_H
#define FLD_TOOLS_SUGGEST_H

#include <stddef.h>

/*
 * Writes "; did you mean 'a'?" or "; did you mean 'a' or 'b'?" into buf for
 * the n candidates closest to name, or "" when none is close; returns buf.
 * The library's closeness and wording (fld__did_you_mean(), tool_api.h), so
 * the tool and the library's messages suggest alike.
 */
const char *cli_did_you_mean(const char *name, const char *const *candidates, size_t n, char *buf,
                             size_t size);

/*
 * cli_did_you_mean() among the ops registered now (the library must be
 * initialised) and the catalog's op names.
 */
const char *cli_did_you_mean_op(const char *name, char *buf, size_t size);

#endif
