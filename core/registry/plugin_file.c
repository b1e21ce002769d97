/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The checks on a plugin file and its descriptor that discovery, the probe
 * and `fldispatch doctor` share (plugin_file.h says which rule is which and
 * why some come in two kinds). Moved here from discovery.c and
 * probe_gate.c so that a plugin is judged by one piece of code wherever it
 * is loaded: in the host, in a probe child or by the tool.
 */
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin_file.h"

/* The descriptor size of ABI 1.0: anything smaller cannot be read safely. */
#define DESCRIPTOR_SIZE_1_0 (offsetof(fld_plugin_descriptor, register_builtins) + sizeof(void *))

/* ---- the file -------------------------------------------------------------- */

static bool owner_ok(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* Permission and ownership of the file and its directory; reason on failure. */
bool fld__plugin_check_file(const char *path, struct stat *st, char *why, size_t size)
{
    if (stat(path, st) != 0) {
        snprintf(why, size, "cannot stat: %s", strerror(errno));
        return false;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(why, size, "not a regular file");
        return false;
    }
    if (st->st_mode & S_IWOTH) {
        snprintf(why, size, "file is writable by others (mode %04o)", st->st_mode & 07777);
        return false;
    }
    if (!owner_ok(st->st_uid)) {
        snprintf(why, size, "file is owned by uid %u (neither root nor the current user)",
                 (unsigned)st->st_uid);
        return false;
    }
    char copy[PATH_MAX], dst[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    struct stat ds;
    if (!realpath(dir, dst) || stat(dst, &ds) != 0) {
        snprintf(why, size, "cannot stat its directory '%s'", dir);
        return false;
    }
    if (ds.st_mode & S_IWOTH) {
        snprintf(why, size, "directory '%s' is writable by others (mode %04o)", dst,
                 ds.st_mode & 07777);
        return false;
    }
    if (!owner_ok(ds.st_uid)) {
        snprintf(why, size, "directory '%s' is owned by uid %u (neither root nor the current user)",
                 dst, (unsigned)ds.st_uid);
        return false;
    }
    return true;
}

bool fld__executable_trusted(const char *path)
{
    char why[256];
    struct stat st;
    return fld__plugin_check_file(path, &st, why, sizeof why) && (st.st_mode & S_IXUSR) &&
           access(path, X_OK) == 0;
}

bool fld__file_private(const struct stat *st)
{
    return st->st_uid == geteuid() && !(st->st_mode & 022);
}

/* ---- the file's identity --------------------------------------------------- */

struct fld_file_stamp fld__file_stamp(const struct stat *st)
{
    return (struct fld_file_stamp){
        .size = (long long)st->st_size,
        .mtime_sec = (long long)st->st_mtim.tv_sec,
        .mtime_nsec = st->st_mtim.tv_nsec,
        .ino = (unsigned long long)st->st_ino,
    };
}

bool fld__file_stamp_equal(const struct fld_file_stamp *a, const struct fld_file_stamp *b)
{
    return a->size == b->size && a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec &&
           a->ino == b->ino;
}

/* ---- the descriptor -------------------------------------------------------- */

const fld_plugin_descriptor *fld__descriptor_find(void *dl, const char **why)
{
    const fld_plugin_descriptor *d = dlsym(dl, FLD_PLUGIN_SYMBOL);
    if (!d)
        *why = "no plugin descriptor (symbol '" FLD_PLUGIN_SYMBOL "' not found; "
               "define one with FLD_PLUGIN_DEFINE)";
    return d;
}

bool fld__descriptor_layout_known(const fld_plugin_descriptor *d)
{
    return d && d->magic == FLD_PLUGIN_MAGIC && d->abi_major == FLD_PLUGIN_ABI_MAJOR &&
           d->struct_size >= DESCRIPTOR_SIZE_1_0;
}

bool fld__plugin_name_valid(const char *s)
{
    if (!s || !*s || strlen(s) > 64)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
            return false;
    return true;
}

bool fld__check_descriptor(const fld_plugin_descriptor *d, char *why, size_t size)
{
    if (d->magic != FLD_PLUGIN_MAGIC) {
        snprintf(why, size, "bad descriptor magic 0x%08x (not an fldispatch plugin descriptor)",
                 d->magic);
        return false;
    }
    if (d->abi_major != FLD_PLUGIN_ABI_MAJOR) {
        snprintf(why, size, "ABI major %u is not supported (host ABI %d.%d)", d->abi_major,
                 FLD_PLUGIN_ABI_MAJOR, FLD_PLUGIN_ABI_MINOR);
        return false;
    }
    if (d->abi_minor > FLD_PLUGIN_ABI_MINOR) {
        snprintf(why, size, "built for ABI %u.%u, newer than the host's ABI %d.%d", d->abi_major,
                 d->abi_minor, FLD_PLUGIN_ABI_MAJOR, FLD_PLUGIN_ABI_MINOR);
        return false;
    }
    if (d->struct_size < DESCRIPTOR_SIZE_1_0) {
        snprintf(why, size, "descriptor size %u is smaller than ABI 1.0's %zu", d->struct_size,
                 DESCRIPTOR_SIZE_1_0);
        return false;
    }
    if (!fld__plugin_name_valid(d->name)) {
        snprintf(why, size, "invalid plugin name '%s' (lowercase letters, digits, '_', '-')",
                 d->name ? d->name : "(null)");
        return false;
    }
    if (!d->register_builtins) {
        snprintf(why, size, "register_builtins is NULL");
        return false;
    }
    return true;
}

bool fld__descriptor_in_tree(const fld_plugin_descriptor *d)
{
    return (d->flags & FLD_PLUGIN_FLAG_IN_TREE) && d->host_version &&
           strcmp(d->host_version, FLD_VERSION_STRING) == 0;
}
