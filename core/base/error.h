/* SPDX-License-Identifier: Apache-2.0 */
/* Thread-local error detail behind fld_last_error(). */
#ifndef FLD_CORE_ERROR_H
#define FLD_CORE_ERROR_H

#include <stdarg.h>

/* Sets the calling thread's last-error message and returns status. */
int fld__fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fld__failv(int status, const char *fmt, va_list ap);
/* Prefixes the current last-error message with "prefix: ". */
void fld__error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Empties the calling thread's message (cheap: one store). */
void fld__error_clear(void);
/* A copy of the current message into buf (for building longer messages). */
void fld__error_copy(char *buf, size_t size);

#endif
