/* Status strings and the thread-local detail of the last failure. */
#include <stdio.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "error.h"

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

int fld__failv(int status, const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
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
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
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
}

void fld__error_copy(char *buf, size_t size)
{
    snprintf(buf, size, "%s", last_error);
}

const char *fld_version(void)
{
    return FLD_VERSION_STRING;
}
