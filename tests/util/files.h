/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers: private directories and copies of built fixtures.
 *
 *   const char *dir = tt_make_tmpdir("disc");
 *   char plugins[PATH_MAX], path[PATH_MAX];
 *   tt_make_subdir(plugins, dir, "plugins", 0755);
 *   tt_install_fixture(path, plugins, "plugins", "good");
 *
 * Failures (no $FLD_BUILDDIR, a fixture not built, a full disk) fail the test
 * through Check, with a message that names the file and errno.
 */
#ifndef FLD_TESTS_UTIL_FILES_H
#define FLD_TESTS_UTIL_FILES_H

#include <sys/types.h>

/*
 * A fresh private directory (mode 0700) $TMPDIR/fld-<label>-XXXXXX, or under
 * /tmp when $TMPDIR is not absolute. Up to 16 per process; each is removed
 * with all it holds when the process that made it exits, and by default not
 * by a forked child that inherited it and calls exit(). The path stays valid
 * until the process exits.
 */
const char *tt_make_tmpdir(const char *label);

/*
 * From now on, a forked child that exits through exit() removes the
 * directories it inherited too. A test program calls this in main(), before
 * it runs its suite, when that removal is its tripwire for code that must
 * leave a child without running the parent's exit handlers.
 */
void tt_tmpdirs_removed_by_children(void);

/* Makes directory <parent>/<name> with exactly mode (chmod: the umask does not count); its path
 * in out (PATH_MAX bytes). */
void tt_make_subdir(char *out, const char *parent, const char *name, mode_t mode);

/* Copies src to dst, a file that must not exist yet, and gives dst exactly mode. */
void tt_copy_file(const char *src, const char *dst, mode_t mode);

/*
 * Copies the built fixture $FLD_BUILDDIR/tests/<sub>/fld-<name>.so to
 * <dir>/fld-<name>.so with mode 0755 (tt_install_fixture) or the given mode;
 * the copy's path in out (PATH_MAX bytes) unless out is NULL.
 */
void tt_install_fixture(char *out, const char *dir, const char *sub, const char *name);
void tt_install_fixture_mode(char *out, const char *dir, const char *sub, const char *name,
                             mode_t mode);

#endif
