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

/*
 * Copies src into dst (size bytes, always NUL-terminated when size > 0),
 * writing as an escape what could be misread:
 *   - C0 control characters (tab and newline included) and DEL: \xNN;
 *   - C1 control characters (U+0080..U+009F) and the bidirectional
 *     embedding, override and isolate characters (U+202A..U+202E,
 *     U+2066..U+2069): \uNNNN;
 *   - every byte that is not part of well-formed UTF-8 (stray continuation
 *     bytes, overlong forms, surrogates, code points past U+10FFFF, a
 *     sequence cut short): \xNN.
 * Everything else, printable ASCII and valid UTF-8 text, is copied as it is.
 * Output that does not fit is cut before the character or escape that does
 * not fit, never inside one. Returns dst.
 */
char *fld__escape(char *dst, size_t size, const char *src);

/* Whether fld__escape() would change s (one pass; false for plain ASCII text). */
bool fld__needs_escape(const char *s);

/* fld__escape() of buf (a NUL-terminated string in a buffer of size bytes) in place. */
void fld__escape_in_place(char *buf, size_t size);

#endif
