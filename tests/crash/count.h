/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the crash fixtures: each appends one line "<plugin> <pid>" to the
 * file named by FLD_CRASH_COUNT_FILE (when set) as its register_builtins (or
 * constructor) starts, so tests can count how often a plugin was loaded: in
 * a probe child or in the host.
 */
#ifndef FLD_TESTS_CRASH_COUNT_H
#define FLD_TESTS_CRASH_COUNT_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline void crash_fixture_count(const char *plugin)
{
    const char *file = getenv("FLD_CRASH_COUNT_FILE");
    if (!file || !*file)
        return;
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    char line[128];
    int n = snprintf(line, sizeof line, "%s %ld\n", plugin, (long)getpid());
    if (n > 0 && write(fd, line, (size_t)n) != n)
        n = -1;
    close(fd);
}

/* An unmapped address the compiler cannot see through. */
static volatile uintptr_t crash_fixture_wild = 16;

/* A kernel the fixtures register; it is never meant to run. */
static inline int crash_fixture_kernel(const void *args)
{
    (void)args;
    return 0;
}

#endif
