/* SPDX-License-Identifier: Apache-2.0 */
/* Status strings and the thread-local detail of the last failure. */
#include <stdio.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "error.h"
#include "escape.h"

#define FLD_ERROR_SIZE 1024

static _Thread_local char last_error[FLD_ERROR_SIZE];

const char *fld_strerror(int status)
{
    switch (status) {
    case FLD_OK:
        return "success";
    case FLD_EINVAL:
        return "invalid argument";
    case FLD_ENOTFOUND:
        return "not found";
    case FLD_EUNAVAILABLE:
        return "no implementation available";
    case FLD_ECONFIG:
        return "invalid configuration";
    case FLD_EPLUGIN:
        return "plugin error";
    case FLD_EIMPL:
        return "implementation failed";
    case FLD_ENOMEM:
        return "out of memory";
    case FLD_EUNSUPPORTED:
        return "not supported by the implementation";
    case FLD_ESTATE:
        return "invalid state";
    default:
        return "unknown status";
    }
}

const char *fld_last_error(void)
{
    return last_error;
}

void fld__error_clear(void)
{
    last_error[0] = '\0';
}

/* Every message is escaped as it is formatted: values quoted from the
 * environment, files or plugins cannot carry terminal escapes or invalid
 * UTF-8 into fld_last_error() (escape.h). */
int fld__failv(int status, const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    fld__escape_in_place(last_error, sizeof last_error);
    return status;
}

int fld__fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fld__failv(status, fmt, ap);
    va_end(ap);
    return status;
}

void fld_set_error(const char *fmt, ...)
{
    if (!fmt) {
        fld__fail(FLD_EINVAL, "fld_set_error: argument 'fmt' is NULL");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    fld__failv(FLD_OK, fmt, ap);
    va_end(ap);
}

void fld__error_prefix(const char *fmt, ...)
{
    char prefix[256], old[FLD_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
    fld__escape_in_place(last_error, sizeof last_error);
}

void fld__error_copy(char *buf, size_t size)
{
    snprintf(buf, size, "%s", last_error);
}

const char *fld_version(void)
{
    return FLD_VERSION_STRING;
}
