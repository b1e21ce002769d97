/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Text that leaves the library: fld_last_error(), log lines (stderr or the
 * application's callback), plugin reasons and details. Messages quote values
 * from the environment, configuration files, file names and plugins; such a
 * value must not drive the reader's terminal (escape sequences) nor break a
 * UTF-8 reader (invalid bytes). Every message passes through fld__escape()
 * where it is formatted (error.c, log.c, registry.c), so callers quote values
 * as they are.
 */
#ifndef FLD_CORE_ESCAPE_H
#define FLD_CORE_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <fldispatch/internal/tool_api.h> /* fld__escape(), exported for the tool */

/* fld__escape(dst, size, src) is declared in <fldispatch/internal/tool_api.h>:
 * the fldispatch tool escapes what it prints with the same rules. */

/* Whether fld__escape() would change s (one pass; false for plain ASCII text). */
bool fld__needs_escape(const char *s);

/* fld__escape() of buf (a NUL-terminated string in a buffer of size bytes) in place. */
void fld__escape_in_place(char *buf, size_t size);

/* Writes s to f as a JSON string: quotes, backslash and control bytes escaped
 * (the stats and trace files; names registered from Python may hold anything). */
void fld__json_string(FILE *f, const char *s);

#endif
