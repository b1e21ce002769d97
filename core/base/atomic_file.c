/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Files written whole or not at all (see fld__atomic_file_open() in
 * <fldispatch/internal/tool_api.h>): a temporary file created exclusively
 * beside the target, flushed, fsynced and renamed over it. rename() replaces
 * the directory entry itself, so a link planted at the target is never
 * followed; one found there before writing is refused with ELOOP, so that
 * the caller can say so instead of silently replacing it. A device or a
 * pipe (/dev/null) is written in place: replacing it would be wrong.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"

/* The directory part of path ("." when it has none), malloc'ed. */
static char *directory_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (dir) {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return dir;
}

static void clear(fld_atomic_file *af)
{
    free(af->path);
    free(af->tmp);
    af->f = NULL;
    af->path = af->tmp = NULL;
}

/* A device or a pipe (/dev/null, a named pipe): written in place, never replaced. */
static int open_stream(fld_atomic_file *af, const char *path)
{
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    struct stat st;
    int err = 0;
    if (fstat(fd, &st) != 0)
        err = errno;
    else if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode))
        err = EINVAL; /* replaced meanwhile */
    else if (!(af->path = strdup(path)))
        err = ENOMEM;
    else if (!(af->f = fdopen(fd, "w")))
        err = errno;
    if (err) {
        close(fd);
        clear(af);
    }
    return err;
}

int fld__atomic_file_open(fld_atomic_file *af, const char *path, mode_t mode)
{
    af->f = NULL;
    af->path = af->tmp = NULL;
    if (!path || !*path)
        return EINVAL;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return ELOOP;
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
            return open_stream(af, path);
        if (!S_ISREG(st.st_mode))
            return S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    } else if (errno != ENOENT) {
        return errno;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!*base)
        return EISDIR; /* "dir/" */
    int err = ENOMEM;
    char *dir = directory_of(path);
    size_t len = (dir ? strlen(dir) : 0) + strlen(base) + 16;
    af->path = strdup(path);
    af->tmp = malloc(len);
    if (!dir || !af->path || !af->tmp)
        goto fail;
    /* A hidden name in the same directory: rename() stays on one file system. */
    snprintf(af->tmp, len, "%s/.%s.XXXXXX", dir, base);
    int fd = mkostemp(af->tmp, O_CLOEXEC); /* O_CREAT | O_EXCL: never a planted link */
    if (fd < 0) {
        err = errno;
        goto fail;
    }
    if (fchmod(fd, mode) != 0 || !(af->f = fdopen(fd, "w"))) {
        err = errno;
        close(fd);
        unlink(af->tmp);
        goto fail;
    }
    free(dir);
    return 0;
fail:
    free(dir);
    clear(af);
    return err;
}

/* fsync of path's directory, so that the rename outlives a crash (best effort). */
static void sync_directory(const char *path)
{
    char *dir = directory_of(path);
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

int fld__atomic_file_commit(fld_atomic_file *af)
{
    if (!af->f)
        return EINVAL;
    int err = 0;
    errno = 0;
    if (fflush(af->f) != 0 || ferror(af->f))
        err = errno ? errno : EIO;
    else if (af->tmp && fsync(fileno(af->f)) != 0)
        err = errno;
    if (fclose(af->f) != 0 && !err)
        err = errno ? errno : EIO;
    af->f = NULL;
    if (!af->tmp) {
        /* a device or a pipe: written in place */
    } else if (!err && rename(af->tmp, af->path) != 0) {
        err = errno;
        unlink(af->tmp);
    } else if (err) {
        unlink(af->tmp);
    } else {
        sync_directory(af->path);
    }
    clear(af);
    return err;
}

const char *fld__atomic_file_strerror(int err)
{
    switch (err) {
    case ELOOP:
        return "it is a symbolic link (not followed; remove it or name the file it points to)";
    case EINVAL:
        return "it exists and is not a regular file, a device or a pipe";
    default:
        return strerror(err);
    }
}
