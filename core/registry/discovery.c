/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plugin discovery and loading.
 *
 * Order of work for one file: identity and permission checks on the file
 * and its directory (stat, before anything is mapped), dlopen, the
 * descriptor read as plain data (magic, ABI major/minor, size, name) and
 * judged before any plugin function is called, then register_builtins into
 * a staging registry that is committed only if the whole plugin succeeded.
 * Every file seen leaves a plugin record with its status and reason. The
 * file and descriptor checks are plugin_file.c's, which the probe child
 * and `fldispatch doctor` call too; this file decides when each runs.
 *
 * The working directory is never searched: relative entries in
 * VLLM_FL_PLUGIN_DIR are ignored, and the default directories are derived
 * from the library's own location and the install prefix. A copy of
 * libfldispatch.a has no location of its own: it searches the installed
 * plugin directory only, and maps a plugin only where the plugin's calls
 * into the library reach that copy (linkage.h).
 */
#include <dirent.h>
#include <errno.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fld_paths.h"

#include "discovery.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "linkage.h"
#include "log.h"
#include "parse.h"
#include "pathvar.h"
#include "plugin_file.h"
#include "probe_gate.h"
#include "reclaim.h"
#include "reentry.h"
#include "registry.h"

struct search_path {
    char **dirs;
    size_t n;
    char *joined;
};

/* Used under the host lock; `published` is the joined copy that
 * fld_plugin_path() returns without the lock (old ones are retired). */
static struct search_path search;
static _Atomic(char *) published;

static void search_free(struct search_path *sp)
{
    for (size_t i = 0; i < sp->n; i++)
        free(sp->dirs[i]);
    free(sp->dirs);
    free(sp->joined);
    memset(sp, 0, sizeof *sp);
}

static int search_add(struct search_path *sp, const char *dir)
{
    char real[PATH_MAX];
    const char *key = realpath(dir, real) ? real : dir;
    for (size_t i = 0; i < sp->n; i++)
        if (strcmp(sp->dirs[i], key) == 0)
            return FLD_OK;
    char **v = realloc(sp->dirs, (sp->n + 1) * sizeof *v);
    if (!v)
        return FLD_ENOMEM;
    sp->dirs = v;
    if (!(sp->dirs[sp->n] = strdup(key)))
        return FLD_ENOMEM;
    sp->n++;
    return FLD_OK;
}

/* Reads a path-bearing variable; ignored (with a warning) in privileged processes. */
static void library_plugin_dir(char *out, size_t size)
{
    Dl_info info;
    out[0] = '\0';
    /* A static copy's object is the program (or another library), whose
     * directory holds no plugins of ours. */
    if (!fld__linkage_shared())
        return;
    if (!dladdr((void *)fld__discover_plugins, &info) || !info.dli_fname)
        return;
    char real[PATH_MAX];
    if (!realpath(info.dli_fname, real))
        return;
    snprintf(out, size, "%s/fldispatch/plugins", dirname(real));
}

static void compute_search_path(struct search_path *sp)
{
    search_free(sp);
    const char *env = fld__path_variable("VLLM_FL_PLUGIN_DIR");
    if (env) {
        char *copy = strdup(env);
        for (char *save = NULL, *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
             d = strtok_r(NULL, ":", &save)) {
            if (d[0] != '/') {
                fld__log(FLD_LOG_WARNING,
                         "VLLM_FL_PLUGIN_DIR: ignoring relative directory '%s' (plugin directories "
                         "must be absolute; the working directory is never searched)",
                         d);
                continue;
            }
            search_add(sp, d);
        }
        free(copy);
    } else {
        char lib_dir[PATH_MAX];
        library_plugin_dir(lib_dir, sizeof lib_dir);
        if (lib_dir[0])
            search_add(sp, lib_dir);
        search_add(sp, FLD_INSTALL_PLUGIN_DIR);
    }
    size_t len = 1;
    for (size_t i = 0; i < sp->n; i++)
        len += strlen(sp->dirs[i]) + 1;
    sp->joined = calloc(len, 1);
    for (size_t i = 0; sp->joined && i < sp->n; i++) {
        if (i)
            strcat(sp->joined, ":");
        strcat(sp->joined, sp->dirs[i]);
    }
}

/* The search path in force (':'-separated), computed at discovery. */
static const char *plugin_search_path(void)
{
    return search.joined ? search.joined : "";
}

static void publish_search_path(void)
{
    const char *now = atomic_load(&published);
    if (now && strcmp(now, plugin_search_path()) == 0)
        return; /* unchanged: a reload keeps no extra copy */
    char *copy = strdup(plugin_search_path());
    if (!copy)
        return;
    char *old = atomic_exchange(&published, copy);
    if (old)
        fld__retire_until_shutdown(old, free); /* fld_plugin_path() handed it out */
}

/* ---- records -------------------------------------------------------------- */

static struct fld_plugin_rec *find_by_path(const char *path)
{
    for (struct fld_plugin_rec *p = fld__plugins_first(); p; p = p->next)
        if (strcmp(p->path, path) == 0)
            return p;
    return NULL;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A record for path: reused when the path was seen before and not loaded. */
static struct fld_plugin_rec *find_builtin(const char *name)
{
    for (struct fld_plugin_rec *p = fld__plugins_first(); p; p = p->next)
        if (strcmp(p->path, "(built-in)") == 0 && p->status != FLD_PLUGIN_LOADED &&
            strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

static struct fld_plugin_rec *record_for(const char *name, const char *path)
{
    struct fld_plugin_rec *p = strcmp(path, "(built-in)") ? find_by_path(path) : find_builtin(name);
    if (p) {
        char *n = strdup(name);
        if (n) {
            free(p->name);
            p->name = n;
        }
        return p;
    }
    p = fld__plugin_new(name, path);
    if (!p)
        fld__log(FLD_LOG_ERROR, "out of memory recording plugin '%s'", path);
    return p;
}

static int reject_plugin(struct fld_plugin_rec *p, fld_plugin_status st, const char *why)
{
    fld__plugin_set_status(p, st, "%s", why);
    fld__log(st == FLD_PLUGIN_SKIPPED ? FLD_LOG_WARNING : FLD_LOG_ERROR, "plugin %s %s: %s",
             p->path, fld_plugin_status_name(st), why);
    return fld__fail(FLD_EPLUGIN, "plugin %s %s: %s", p->path, fld_plugin_status_name(st), why);
}

int fld__load_plugin_descriptor(const fld_plugin_descriptor *desc, const char *path, void *dl)
{
    char why[768];
    /* The name is read only from a descriptor whose layout is known to be ours
     * (desc tested here too, where the analyser can see it). */
    bool readable = desc && fld__descriptor_layout_known(desc);
    const char *name =
        readable && fld__plugin_name_valid(desc->name) ? desc->name : base_name(path);
    struct fld_plugin_rec *p = record_for(name, path);
    if (!p)
        return fld__fail(FLD_ENOMEM, "out of memory loading plugin %s", path);
    if (!desc)
        return reject_plugin(p, FLD_PLUGIN_REJECTED, "descriptor is NULL");
    if (!fld__check_descriptor(desc, why, sizeof why))
        return reject_plugin(p, FLD_PLUGIN_REJECTED, why);
    p->abi_major = desc->abi_major;
    p->abi_minor = desc->abi_minor;
    char *version = strdup(desc->version ? desc->version : "");
    if (version) {
        free(p->version);
        p->version = version;
    }
    p->in_tree = fld__descriptor_in_tree(desc);
    for (struct fld_plugin_rec *q = fld__plugins_first(); q; q = q->next) {
        if (q != p && q->status == FLD_PLUGIN_LOADED && strcmp(q->name, desc->name) == 0) {
            snprintf(why, sizeof why, "a plugin named '%s' is already loaded from %s", desc->name,
                     q->path);
            return reject_plugin(p, FLD_PLUGIN_SKIPPED, why);
        }
    }

    /* The registry the plugin fills outlives the load (registry.h): a
     * pointer the plugin keeps reaches a closed registry, never a dead one. */
    if (!p->staging && !(p->staging = malloc(sizeof *p->staging)))
        return fld__fail(FLD_ENOMEM, "out of memory loading plugin %s", path);
    struct fld_registry *reg = p->staging;
    fld__registry_begin(reg, p);
    /* Marked as plugin code: a call back into the library is refused (reentry.h). */
    int rc = fld__plugin_register(desc, reg, why, sizeof why);
    if (rc != FLD_OK) {
        fld__registry_discard(reg);
        return reject_plugin(p, FLD_PLUGIN_REJECTED, why);
    }
    size_t n = reg->n;
    rc = fld__registry_commit(reg);
    if (rc) {
        fld__error_copy(why, sizeof why);
        fld__registry_discard(reg);
        return reject_plugin(p, FLD_PLUGIN_REJECTED, why);
    }
    p->dl_handle = dl;
    fld__plugin_set_status(p, FLD_PLUGIN_LOADED, "%s", "");
    fld__log(FLD_LOG_INFO, "Loaded plugin '%s' %s from %s: %zu implementation(s), %s", p->name,
             p->version, path, n, p->in_tree ? "in-tree" : "out-of-tree");
    return FLD_OK;
}

/* Loads one file; FLD_OK or FLD_EPLUGIN with the reason. */
static int load_plugin_file(const char *path, bool explicit_request)
{
    char real[PATH_MAX], why[768];
    const char *key = realpath(path, real) ? real : path;
    struct fld_plugin_rec *seen = find_by_path(key);
    if (seen && seen->status == FLD_PLUGIN_LOADED)
        return FLD_OK;
    if (seen && !explicit_request && seen->status == FLD_PLUGIN_SKIPPED)
        return FLD_OK;

    struct stat st;
    bool secure = fld__plugin_check_file(key, &st, why, sizeof why);
    if (secure) {
        /* The same file reached by another path (a link, or listed twice): loaded once. */
        for (struct fld_plugin_rec *q = fld__plugins_first(); q; q = q->next) {
            if (q->status == FLD_PLUGIN_LOADED && q->dl_handle &&
                fld__file_same_inode(q->st_dev, q->st_ino, &st)) {
                fld__log(FLD_LOG_DEBUG, "plugin %s is the same file as %s, already loaded", key,
                         q->path);
                return FLD_OK;
            }
        }
    }
    struct fld_plugin_rec *p = record_for(base_name(key), key);
    if (!p)
        return fld__fail(FLD_ENOMEM, "out of memory loading plugin %s", key);
    if (!secure)
        return reject_plugin(p, FLD_PLUGIN_REJECTED, why);
    for (struct fld_plugin_rec *q = fld__plugins_first(); q; q = q->next) {
        if (q == p || q->status != FLD_PLUGIN_LOADED || !q->dl_handle)
            continue;
        if (strcmp(base_name(q->path), base_name(key)) == 0) {
            snprintf(why, sizeof why,
                     "duplicate of %s (a plugin file of that name is already "
                     "loaded; the first in the search path wins)",
                     q->path);
            if (explicit_request)
                return reject_plugin(p, FLD_PLUGIN_SKIPPED, why);
            /* Found by a directory scan: a later directory of the search path
             * holding the same plugins is the normal case of a build tree or a
             * wheel beside an installation (the library's own directory comes
             * before the compiled-in one). Recorded, said at DEBUG only. */
            fld__plugin_set_status(p, FLD_PLUGIN_SKIPPED, "%s", why);
            fld__log(FLD_LOG_DEBUG, "plugin %s skipped: %s", p->path, why);
            return FLD_OK;
        }
    }
    p->st_dev = st.st_dev;
    p->st_ino = st.st_ino;
    /* A plugin whose calls would reach another copy of the library (this
     * one is libfldispatch.a in a program that does not export it) is not
     * mapped: it would register into, log to and fail through that copy. */
    if (!fld__linkage_plugins_reach_here(why, sizeof why))
        return reject_plugin(p, FLD_PLUGIN_SKIPPED, why);
    /* With VLLM_FL_PLUGIN_PROBE, a plugin that crashed, hung or exited when
     * loaded in a child process is never mapped into this one. */
    if (!fld__probe_gate(key, &st, why, sizeof why))
        return reject_plugin(p, FLD_PLUGIN_REJECTED, why);

    void *dl = fld__plugin_dlopen(key, why, sizeof why);
    if (!dl)
        return reject_plugin(p, FLD_PLUGIN_REJECTED, why);
    const char *missing;
    const fld_plugin_descriptor *desc = fld__descriptor_find(dl, &missing);
    if (!desc) {
        dlclose(dl);
        return reject_plugin(p, FLD_PLUGIN_REJECTED, missing);
    }
    int rc = fld__load_plugin_descriptor(desc, key, dl);
    if (rc != FLD_OK)
        dlclose(dl);
    return rc;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool plugin_file_name(const char *n)
{
    size_t len = strlen(n);
    return len > 7 && strncmp(n, "fld-", 4) == 0 && strcmp(n + len - 3, ".so") == 0;
}

/* The plugin file names of dir (fld-*.so), sorted; *names NULL when none. */
static void list_directory(const char *dir, char ***names_out, size_t *n_out)
{
    *names_out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) {
        fld__log(FLD_LOG_DEBUG, "plugin directory %s: %s", dir, strerror(errno));
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!plugin_file_name(e->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **v = realloc(names, cap * sizeof *v);
            if (!v)
                break;
            names = v;
        }
        if (!(names[n] = strdup(e->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, name_cmp);
    *names_out = names;
    *n_out = n;
}

static void scan_directory(const char *dir)
{
    char **names;
    size_t n;
    list_directory(dir, &names, &n);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        load_plugin_file(path, false);
        free(names[i]);
    }
    free(names);
}

/* Finds fld-<name>.so in the search path sp; *out receives the full path. */
static bool find_module(const struct search_path *sp, const char *entry, char *out, size_t size)
{
    char name[256];
    const char *n = entry;
    if (strncmp(n, "fld-", 4) == 0)
        n += 4;
    snprintf(name, sizeof name, "%s", n);
    size_t len = strlen(name);
    if (len > 3 && strcmp(name + len - 3, ".so") == 0)
        name[len - 3] = '\0';
    for (size_t i = 0; i < sp->n; i++) {
        snprintf(out, size, "%s/fld-%s.so", sp->dirs[i], name);
        if (access(out, F_OK) == 0)
            return true;
    }
    return false;
}

/* A Python module name: identifiers joined by dots (never a plugin file's name when dotted). */
static bool python_module_name(const char *e, bool *dotted)
{
    *dotted = false;
    bool start = true;
    for (const char *c = e; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u == '.') {
            if (start)
                return false;
            *dotted = true;
            start = true;
            continue;
        }
        bool alpha = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_';
        if (!alpha && !(u >= '0' && u <= '9' && !start))
            return false;
        start = false;
    }
    return !start;
}

static void load_modules(const char *list)
{
    char skipped[512] = "";
    size_t n_skipped = 0;
    char *copy = strdup(list);
    for (char *save = NULL, *e = copy ? strtok_r(copy, ",", &save) : NULL; e;
         e = strtok_r(NULL, ",", &save)) {
        size_t len = strlen(e);
        e += fld__trim(e, &len) - e;
        e[len] = '\0';
        if (!*e)
            continue;
        char path[PATH_MAX];
        bool dotted;
        if (strchr(e, '/')) {
            if (e[0] != '/') {
                struct fld_plugin_rec *p = record_for(e, e);
                if (p)
                    reject_plugin(p, FLD_PLUGIN_REJECTED,
                                  "VLLM_FL_PLUGIN_MODULES: relative path (give an absolute path "
                                  "or a plugin name; the working directory is never searched)");
                continue;
            }
            load_plugin_file(e, true);
        } else if (find_module(&search, e, path, sizeof path)) {
            load_plugin_file(path, true);
        } else if (python_module_name(e, &dotted) && (dotted || fld__binding_claims_modules())) {
            /* A Python module (vllm-plugin-FL's meaning of the variable): the
             * Python package imports it; a C-only process says so once. */
            size_t used = strlen(skipped);
            snprintf(skipped + used, sizeof skipped - used, "%s%s", n_skipped++ ? ", " : "", e);
        } else {
            struct fld_plugin_rec *p = record_for(e, e);
            char why[PATH_MAX + 128];
            snprintf(why, sizeof why,
                     "VLLM_FL_PLUGIN_MODULES: plugin '%s' not found in the search path (%s)", e,
                     plugin_search_path());
            if (p)
                reject_plugin(p, FLD_PLUGIN_REJECTED, why);
        }
    }
    free(copy);
    if (n_skipped)
        fld__log(fld__binding_claims_modules() ? FLD_LOG_DEBUG : FLD_LOG_WARNING,
                 "VLLM_FL_PLUGIN_MODULES: %s %s: Python module name%s, which only the Python "
                 "package imports (import fldispatch)%s",
                 fld__binding_claims_modules() ? "left to the Python package:" : "skipped", skipped,
                 n_skipped > 1 ? "s" : "",
                 fld__binding_claims_modules() ? "" : "; no Python package runs in this process");
}

/*
 * Each absolute directory of VLLM_FL_PLUGIN_DIR that is not a directory one
 * can list: a WARNING naming the variable and, when record is set (a
 * discovery, not doctor's listing), a rejected plugin record of its own, so
 * that `fldispatch list --strict` and the plugin list say so too (as for a
 * VLLM_FL_PLUGIN_MODULES entry that is not found).
 */
static void check_plugin_dir_variable(bool record)
{
    const char *env = fld__path_variable("VLLM_FL_PLUGIN_DIR");
    char *copy = env ? strdup(env) : NULL;
    for (char *save = NULL, *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
         d = strtok_r(NULL, ":", &save)) {
        if (d[0] != '/')
            continue; /* compute_search_path() warned */
        struct stat st;
        char why[PATH_MAX + 128];
        if (stat(d, &st) != 0)
            snprintf(why, sizeof why, "VLLM_FL_PLUGIN_DIR: the directory '%s' %s", d,
                     errno == ENOENT ? "does not exist" : strerror(errno));
        else if (!S_ISDIR(st.st_mode))
            snprintf(why, sizeof why, "VLLM_FL_PLUGIN_DIR: '%s' is not a directory", d);
        else if (access(d, R_OK | X_OK) != 0)
            snprintf(why, sizeof why, "VLLM_FL_PLUGIN_DIR: the directory '%s' cannot be read: %s",
                     d, strerror(errno));
        else
            continue;
        fld__log(FLD_LOG_WARNING, "%s: no plugins are loaded from it", why);
        struct fld_plugin_rec *p = record ? record_for(d, d) : NULL;
        if (p)
            fld__plugin_set_status(p, FLD_PLUGIN_REJECTED, "%s", why);
    }
    free(copy);
}

void fld__discover_plugins(void)
{
    compute_search_path(&search);
    publish_search_path();
    check_plugin_dir_variable(true);
    /* A static copy has only the compiled-in directory: say when it is gone. */
    struct stat dir;
    if (!fld__path_variable("VLLM_FL_PLUGIN_DIR") && !fld__linkage_shared() &&
        (stat(FLD_INSTALL_PLUGIN_DIR, &dir) != 0 || !S_ISDIR(dir.st_mode))) {
        char here[PATH_MAX];
        fld__linkage_object(here, sizeof here);
        fld__log(FLD_LOG_WARNING,
                 "the plugin directory " FLD_INSTALL_PLUGIN_DIR
                 " (compiled into libfldispatch.a, linked into %s) does not exist: no plugins "
                 "are found there; install fldispatch there or set VLLM_FL_PLUGIN_DIR",
                 here[0] ? here : "the program");
    }
    fld__probe_session_begin();
    for (size_t i = 0; i < search.n; i++)
        scan_directory(search.dirs[i]);
    const char *modules = fld__path_variable("VLLM_FL_PLUGIN_MODULES");
    if (modules)
        load_modules(modules);
    fld__probe_session_end();
}

/* ---- the candidates, for fldispatch doctor -------------------------------- */

struct candidates {
    char **paths;
    size_t n, cap;
    int rc;
};

static void candidates_add(struct candidates *c, const char *path)
{
    char real[PATH_MAX];
    const char *key = realpath(path, real) ? real : path;
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->paths[i], key) == 0)
            return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        char **v = realloc(c->paths, cap * sizeof *v);
        if (!v) {
            c->rc = FLD_ENOMEM;
            return;
        }
        c->paths = v;
        c->cap = cap;
    }
    if (!(c->paths[c->n] = strdup(key))) {
        c->rc = FLD_ENOMEM;
        return;
    }
    c->n++;
}

int fld__plugin_candidates(char ***paths, size_t *n, char **search_path)
{
    struct search_path sp = {0};
    struct candidates c = {0};
    *paths = NULL;
    *n = 0;
    *search_path = NULL;
    compute_search_path(&sp);
    check_plugin_dir_variable(false);
    for (size_t i = 0; i < sp.n && !c.rc; i++) {
        char **names;
        size_t count;
        list_directory(sp.dirs[i], &names, &count);
        for (size_t j = 0; j < count; j++) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", sp.dirs[i], names[j]);
            if (!c.rc)
                candidates_add(&c, path);
            free(names[j]);
        }
        free(names);
    }
    const char *modules = fld__path_variable("VLLM_FL_PLUGIN_MODULES");
    char *copy = modules ? strdup(modules) : NULL;
    for (char *save = NULL, *e = copy ? strtok_r(copy, ",", &save) : NULL; e && !c.rc;
         e = strtok_r(NULL, ",", &save)) {
        size_t len = strlen(e);
        e += fld__trim(e, &len) - e;
        e[len] = '\0';
        char path[PATH_MAX];
        if (e[0] == '/')
            candidates_add(&c, e);
        else if (*e && !strchr(e, '/') && find_module(&sp, e, path, sizeof path))
            candidates_add(&c, path);
    }
    free(copy);
    if (modules && !copy)
        c.rc = FLD_ENOMEM;
    if (!c.rc && !(*search_path = strdup(sp.joined ? sp.joined : "")))
        c.rc = FLD_ENOMEM;
    search_free(&sp);
    if (c.rc) {
        fld__plugin_candidates_free(c.paths, c.n, *search_path);
        *search_path = NULL;
        return fld__fail(FLD_ENOMEM, "out of memory listing the plugin files");
    }
    *paths = c.paths;
    *n = c.n;
    return FLD_OK;
}

void fld__plugin_candidates_free(char **paths, size_t n, char *search_path)
{
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    free(search_path);
}

void fld__discovery_shutdown(void)
{
    search_free(&search);
    free(atomic_exchange(&published, NULL));
}

/* ---- public --------------------------------------------------------------- */

int fld_load_plugin(const char *path)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!path || !*path)
        return fld__fail(FLD_EINVAL, "fld_load_plugin: argument 'path' is %s",
                         path ? "empty" : "NULL");
    if (path[0] != '/')
        return fld__fail(FLD_EINVAL,
                         "fld_load_plugin: '%s' is not an absolute path (plugins are never looked "
                         "up relative to the working directory)",
                         path);
    fld__lock();
    rc = load_plugin_file(path, true);
    fld__unlock();
    return rc;
}

int fld_register_plugin(const fld_plugin_descriptor *desc)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!desc)
        return fld__fail(FLD_EINVAL, "fld_register_plugin: argument 'desc' is NULL");
    fld__lock();
    rc = fld__load_plugin_descriptor(desc, "(built-in)", NULL);
    fld__unlock();
    return rc;
}

const char *fld_plugin_path(void)
{
    FLD_CALL_SCOPE();
    if (fld__ensure_init())
        return "";
    const char *p = atomic_load(&published);
    return p ? p : "";
}
