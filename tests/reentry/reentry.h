/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the re-entry fixtures: each calls one library function from
 * plugin code the host runs while loading it, and appends one line
 *   "<plugin> <pid> <function> <status> <fld_last_error()>"
 * to the file named by FLD_REENTRY_LOG (when set), so that a test sees what
 * the nested call returned, in which process (a probe child or the host),
 * and how often the plugin was loaded. Each fixture also registers an
 * implementation, which must not stay when the host rejects it.
 */
#ifndef FLD_TESTS_REENTRY_H
#define FLD_TESTS_REENTRY_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

static inline void reentry_note(const char *plugin, const char *function, int status)
{
    const char *file = getenv("FLD_REENTRY_LOG");
    if (!file || !*file)
        return;
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    char line[1400];
    int n = snprintf(line, sizeof line, "%s %ld %s %d %s\n", plugin, (long)getpid(), function,
                     status, fld_last_error());
    if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) != n)
        n = -1;
    close(fd);
}

static inline int reentry_kernel(const void *args)
{
    (void)args;
    return FLD_OK;
}

/* A vendor rms_norm implementation "vendor.<plugin>" with the highest priority. */
static inline int reentry_register(fld_registry *reg, const char *impl_id, const char *vendor,
                                   fld_available_fn available)
{
    const fld_impl impl = {
        .op = FLD_OP_RMS_NORM,
        .impl_id = impl_id,
        .kind = FLD_KIND_VENDOR,
        .vendor = vendor,
        .priority = 1000,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = reentry_kernel,
        .is_available = available,
    };
    return fld_registry_register(reg, &impl);
}

#endif
