/* SPDX-License-Identifier: Apache-2.0 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "harness.h"

#define MAX_TMPDIRS 16

static struct {
    char path[PATH_MAX];
    pid_t owner;
} tmpdirs[MAX_TMPDIRS];
static int n_tmpdirs;
static bool removed_by_children;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tmpdirs(void)
{
    /* Tests fork: a child that exits normally must not pull the directories
     * from under the test process, unless the program asked for exactly that. */
    pid_t self = getpid();
    for (int i = 0; i < n_tmpdirs; i++)
        if (removed_by_children || tmpdirs[i].owner == self)
            nftw(tmpdirs[i].path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tt_make_tmpdir(const char *label)
{
    ck_assert_msg(n_tmpdirs < MAX_TMPDIRS, "too many temporary directories");
    /* A forked child inherits both the list and the handler: register once. */
    if (n_tmpdirs == 0)
        atexit(remove_tmpdirs);
    const char *base = getenv("TMPDIR");
    char *dir = tmpdirs[n_tmpdirs].path;
    snprintf(dir, PATH_MAX, "%s/fld-%s-XXXXXX", base && base[0] == '/' ? base : "/tmp", label);
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp(%s): %s", dir, strerror(errno));
    tmpdirs[n_tmpdirs].owner = getpid();
    n_tmpdirs++;
    return dir;
}

void tt_tmpdirs_removed_by_children(void)
{
    removed_by_children = true;
}

void tt_make_subdir(char *out, const char *parent, const char *name, mode_t mode)
{
    snprintf(out, PATH_MAX, "%s/%s", parent, name);
    ck_assert_msg(mkdir(out, mode) == 0, "mkdir(%s): %s", out, strerror(errno));
    ck_assert_msg(chmod(out, mode) == 0, "chmod(%s): %s", out, strerror(errno));
}

void tt_copy_file(const char *src, const char *dst, mode_t mode)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(in >= 0, "cannot open %s: %s (build the fixtures with `make tests`)", src,
                  strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_msg(out >= 0, "cannot create %s: %s", dst, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        ck_assert_msg(write(out, buf, (size_t)n) == n, "write %s: %s", dst, strerror(errno));
    ck_assert_msg(n == 0, "read %s: %s", src, strerror(errno));
    /* fchmod, not the open mode: the umask must not decide the test. */
    ck_assert_msg(fchmod(out, mode) == 0, "fchmod %s: %s", dst, strerror(errno));
    close(in);
    close(out);
}

void tt_install_fixture_mode(char *out, const char *dir, const char *sub, const char *name,
                             mode_t mode)
{
    char src[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof src, "%s/tests/%s/fld-%s.so", tt_build_dir(), sub, name);
    snprintf(dst, sizeof dst, "%s/fld-%s.so", dir, name);
    tt_copy_file(src, dst, mode);
    if (out != NULL)
        snprintf(out, PATH_MAX, "%s", dst);
}

void tt_install_fixture(char *out, const char *dir, const char *sub, const char *name)
{
    tt_install_fixture_mode(out, dir, sub, name, 0755);
}
