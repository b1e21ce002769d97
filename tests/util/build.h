/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers: make, the compiler and shell commands, run for real on the
 * source tree ($FLD_SRCDIR) and the build tree ($FLD_BUILDDIR).
 *
 *   char args[3 * PATH_MAX];
 *   tt_install_dir_args(args, sizeof args);   // LIBDIR='...' DATADIR='...' BINDIR='...'
 *   tt_sh(log, "%s install DESTDIR='%s' %s", tt_make(), dest, args);
 *
 * A command that fails fails the test through Check, with the tail of its
 * log.
 */
#ifndef FLD_TESTS_UTIL_BUILD_H
#define FLD_TESTS_UTIL_BUILD_H

#include <stddef.h>

/*
 * "make -C <src> B=<build tree>" with no inherited make state (MAKEFLAGS),
 * no install directories from the environment and SANITIZE as the running
 * build has it: append a goal and variables. tt_make_in names another build
 * tree. Both return a static buffer: one per command.
 */
const char *tt_make(void);
const char *tt_make_in(const char *build_dir);

/* The install directories the build tree was configured with (its
 * gen/fld_paths.h). An install with them changes nothing that was compiled
 * into the library, so it rebuilds nothing under the running tests. */
void tt_configured_dirs(char *libdir, char *datadir, char *bindir); /* PATH_MAX each */
/* The same as make arguments: LIBDIR='...' DATADIR='...' BINDIR='...'. */
void tt_install_dir_args(char *out, size_t size);

/* Runs the formatted command through sh with stdout and stderr appended to
 * log; fails the test (with the log's tail) unless it exits with status 0. */
void tt_sh(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like tt_sh, but returns the exit status (or -1) whatever it is. */
int tt_sh_status(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The whole content of a file (malloc'd, NUL-terminated; the test fails
 * when it cannot be read). Free with free(). */
char *tt_read_file(const char *path, size_t *size);

#endif
