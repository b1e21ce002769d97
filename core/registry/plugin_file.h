/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the host checks on a plugin before any of the plugin's code runs,
 * in one place for its three users: discovery (discovery.c), the probe
 * (probe.c's child, probe_gate.c's helper and cache) and `fldispatch
 * doctor` (through fld__plugin_check_file, <fldispatch/internal/tool_api.h>).
 * The probe child and discovery must judge a plugin alike, so both call
 * this code. Nothing here takes the host lock, logs or calls plugin code.
 *
 * The file. Two trust rules, different on purpose:
 *   - code the host maps or runs (a plugin file and its directory, the probe
 *     helper): owned by root or by the effective user, not writable by
 *     others; group-writable is accepted (docs/security.md).
 *     fld__plugin_check_file, fld__executable_trusted.
 *   - the host's own files (the probe's verdict cache and its directory):
 *     owned by the effective user only, not root, and writable by neither
 *     group nor others. fld__file_private.
 *
 * The file's identity. Two keys, different on purpose:
 *   - "the same file" (discovery loads each file once, whatever path reached
 *     it): device and inode, nothing else. fld__file_same_inode.
 *   - "the same contents as when probed" (the cache's key, next to the path
 *     and the library version): size, modification time to the nanosecond
 *     and inode, without the device (the path already names the file
 *     system). fld__file_stamp.
 *
 * The descriptor, read as plain data. Two judgements:
 *   - fld__descriptor_layout_known: magic, ABI major and the size of ABI
 *     1.0; enough to read the name for the plugin's record, even of a
 *     descriptor that fld__check_descriptor rejects (a newer ABI minor).
 *   - fld__check_descriptor: the full check, in this order (the first
 *     failure is the reason): magic, ABI major, ABI minor, size, name,
 *     register_builtins.
 */
#ifndef FLD_CORE_PLUGIN_FILE_H
#define FLD_CORE_PLUGIN_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include <fldispatch/plugin.h>

/* fld__plugin_check_file(), exported for the tool. */
#include <fldispatch/internal/tool_api.h>

/* ---- the file -------------------------------------------------------------- */

/*
 * fld__plugin_check_file(path, st, why, size) (tool_api.h): stat()s path
 * into *st; a regular file, not writable by others, owned by root or the
 * effective user, in a directory (symbolic links resolved) not writable by
 * others and owned by root or the effective user. false with the reason in
 * why.
 */

/* A program the host may run (the probe helper): the plugin file check, and
 * executable by its owner and by this process. */
bool fld__executable_trusted(const char *path);

/* One of the host's private files or directories (st from fstat): owned by
 * the effective user and writable by neither group nor others. The caller
 * adds the type and size checks, and says why itself. */
bool fld__file_private(const struct stat *st);

/* ---- the file's identity --------------------------------------------------- */

/* Whether st is the file recorded as (dev, ino). */
static inline bool fld__file_same_inode(dev_t dev, ino_t ino, const struct stat *st)
{
    return dev == st->st_dev && ino == st->st_ino;
}

/* What changes when a file is replaced or rewritten: the probe cache's key. */
struct fld_file_stamp {
    long long size;
    long long mtime_sec;
    long mtime_nsec;
    unsigned long long ino;
};

struct fld_file_stamp fld__file_stamp(const struct stat *st);
bool fld__file_stamp_equal(const struct fld_file_stamp *a, const struct fld_file_stamp *b);

/* ---- the descriptor -------------------------------------------------------- */

/* The descriptor dl exports (FLD_PLUGIN_SYMBOL). NULL when it has none, with
 * *why the (static) reason. */
const fld_plugin_descriptor *fld__descriptor_find(void *dl, const char **why);

/* Whether d (may be NULL) has a layout known to be ours: magic, ABI major
 * and at least ABI 1.0's size. The ABI minor is not looked at. */
bool fld__descriptor_layout_known(const fld_plugin_descriptor *d);

/* [a-z0-9_-], 1 to 64 characters; false for NULL. */
bool fld__plugin_name_valid(const char *s);

/* Judges a descriptor as data, calling nothing in it; false with the reason
 * in why. */
bool fld__check_descriptor(const fld_plugin_descriptor *d, char *why, size_t size);

/* Whether d says it was built in this tree, for this very library version. */
bool fld__descriptor_in_tree(const fld_plugin_descriptor *d);

#endif
