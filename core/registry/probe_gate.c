/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Discovery's side of crash isolation (VLLM_FL_PLUGIN_PROBE): the probe's
 * configuration, the on-disk verdict cache and the gate discovery asks
 * before it dlopen()s a plugin in the host. The probe itself (the child and
 * the supervising parent) is probe.c.
 *
 * Verdicts are cached in $XDG_CACHE_HOME/fldispatch/plugin-probe.cache by
 * path, size, modification time, inode and library version.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "fld_paths.h"

#include "error.h"
#include "escape.h"
#include "log.h"
#include "parse.h"
#include "plugin_file.h"
#include "probe.h"
#include "probe_gate.h"
/* ---- configuration -------------------------------------------------------- */

struct cache_entry {
    char *path;
    char *version;
    struct fld_file_stamp stamp; /* size, mtime, inode (plugin_file.h) */
    enum fld_probe_state state;
    char *what; /* fld__probe_describe() of the verdict */
};

struct cache {
    struct cache_entry *v;
    size_t n, cap;
};

static struct {
    bool active;  /* inside a discovery pass */
    bool enabled; /* VLLM_FL_PLUGIN_PROBE */
    struct fld_probe_options opt;
    char helper[PATH_MAX];
    bool fork_fallback_logged;
    char cache_base[PATH_MAX]; /* $XDG_CACHE_HOME or $HOME/.cache; "" without */
    char cache_dir[PATH_MAX];  /* <base>/fldispatch */
    char cache_file[PATH_MAX]; /* <dir>/plugin-probe.cache; "" without a cache */
    char no_cache_why[160];
    struct cache cache;
    bool dirty;
} session;

#define CACHE_NAME   "plugin-probe.cache"
#define CACHE_HEADER "fldispatch-plugin-probe-cache 1"
#define CACHE_MAX    (4u << 20)

static bool privileged(void)
{
    return getauxval(AT_SECURE) != 0;
}

/*
 * The helper is the fldispatch tool of this library's installation:
 * <libdir>/../bin/fldispatch (the build tree and PREFIX installs), or the
 * compiled-in BINDIR.
 */
static bool find_helper(char *out, size_t size)
{
    Dl_info info;
    char real[PATH_MAX];
    if (dladdr((void *)fld__probe_run, &info) && info.dli_fname && realpath(info.dli_fname, real)) {
        char cand[PATH_MAX + 32];
        snprintf(cand, sizeof cand, "%s/../bin/fldispatch", dirname(real));
        char resolved[PATH_MAX];
        if (realpath(cand, resolved) && fld__executable_trusted(resolved)) {
            snprintf(out, size, "%s", resolved);
            return true;
        }
    }
    char resolved[PATH_MAX];
    if (realpath(FLD_INSTALL_BIN_DIR "/fldispatch", resolved) &&
        fld__executable_trusted(resolved)) {
        snprintf(out, size, "%s", resolved);
        return true;
    }
    return false;
}

static void read_config(void)
{
    const char *v = getenv("VLLM_FL_PLUGIN_PROBE");
    session.enabled = false;
    if (fld__probe_in_child()) {
        /* A probe of a probe would load the plugin under test again in a
         * helper of its own, and that one again: never start one. */
        fld__log(FLD_LOG_DEBUG, "VLLM_FL_PLUGIN_PROBE: not probing inside a probe child");
        return;
    }
    if (v && *v) {
        bool on = true;
        if (fld__parse_bool("VLLM_FL_PLUGIN_PROBE", v, &on) != FLD_OK) {
            fld__log(FLD_LOG_ERROR, "%s; probing plugins anyway", fld_last_error());
            on = true;
        }
        session.enabled = on;
    }
    if (!session.enabled)
        return;
    session.opt.timeout = FLD_PROBE_DEFAULT_TIMEOUT;
    const char *t = getenv("VLLM_FL_PLUGIN_PROBE_TIMEOUT");
    if (t && *t) {
        double s;
        if (!fld__parse_seconds(t, &s) || s <= 0 || s > FLD_PROBE_MAX_TIMEOUT)
            fld__log(FLD_LOG_ERROR,
                     "VLLM_FL_PLUGIN_PROBE_TIMEOUT: invalid value '%s' (seconds, more than 0 and "
                     "at most %g); using %g",
                     t, FLD_PROBE_MAX_TIMEOUT, FLD_PROBE_DEFAULT_TIMEOUT);
        else
            session.opt.timeout = s;
    }
    /* A privileged process does not exec a helper with its caller's
     * environment, and keeps no cache under a directory the caller names. */
    session.opt.mode = FLD_PROBE_FORK;
    session.opt.helper = NULL;
    const char *no_exec = getenv("FLD_PROBE_NO_EXEC");
    bool forced = no_exec && *no_exec && strcmp(no_exec, "0") != 0;
    if (!privileged() && !forced && find_helper(session.helper, sizeof session.helper)) {
        session.opt.mode = FLD_PROBE_SPAWN;
        session.opt.helper = session.helper;
    } else if (!session.fork_fallback_logged) {
        session.fork_fallback_logged = true;
        fld__log(privileged() || forced ? FLD_LOG_DEBUG : FLD_LOG_WARNING,
                 "VLLM_FL_PLUGIN_PROBE: %s; probing plugins in forked children instead (see "
                 "docs/doctor.md for the caveats)",
                 privileged() ? "privileged process: no helper is run"
                 : forced     ? "FLD_PROBE_NO_EXEC is set"
                              : "the fldispatch tool is not found next to the library");
    }

    session.cache_base[0] = session.cache_dir[0] = session.cache_file[0] = '\0';
    const char *xdg = secure_getenv("XDG_CACHE_HOME");
    const char *home = secure_getenv("HOME");
    if (xdg && xdg[0] == '/')
        snprintf(session.cache_base, sizeof session.cache_base, "%s", xdg);
    else if (home && home[0] == '/')
        snprintf(session.cache_base, sizeof session.cache_base, "%s/.cache", home);
    if (session.cache_base[0]) {
        snprintf(session.cache_dir, sizeof session.cache_dir, "%s/fldispatch", session.cache_base);
        snprintf(session.cache_file, sizeof session.cache_file, "%s/" CACHE_NAME,
                 session.cache_dir);
    } else {
        snprintf(session.no_cache_why, sizeof session.no_cache_why, "%s",
                 privileged() ? "no probe cache in a privileged process"
                              : "no probe cache: neither XDG_CACHE_HOME nor HOME is an absolute "
                                "path");
    }
}

/* ---- the cache ------------------------------------------------------------ */

static void entry_free(struct cache_entry *e)
{
    free(e->path);
    free(e->version);
    free(e->what);
}

static void cache_clear(struct cache *c)
{
    for (size_t i = 0; i < c->n; i++)
        entry_free(&c->v[i]);
    free(c->v);
    memset(c, 0, sizeof *c);
}

static struct cache_entry *cache_find(struct cache *c, const char *path, const char *version)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->v[i].path, path) == 0 && strcmp(c->v[i].version, version) == 0)
            return &c->v[i];
    return NULL;
}

/* Takes e's strings; replaces the entry of the same path and version. */
static bool cache_put(struct cache *c, struct cache_entry *e)
{
    struct cache_entry *old = cache_find(c, e->path, e->version);
    if (old) {
        entry_free(old);
        *old = *e;
        return true;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct cache_entry *v = realloc(c->v, cap * sizeof *v);
        if (!v) {
            entry_free(e);
            return false;
        }
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = *e;
    return true;
}

static bool same_file(const struct cache_entry *e, const struct stat *st)
{
    struct fld_file_stamp now = fld__file_stamp(st);
    return fld__file_stamp_equal(&e->stamp, &now);
}

/* One line: version size mtime ino state what path. false when malformed. */
static bool parse_entry(char *line, struct cache_entry *e)
{
    char *f[7];
    if (fld__probe_split(line, f, 7) != 7 || !*f[0] || f[6][0] != '/')
        return false;
    char *end;
    errno = 0;
    e->stamp.size = strtoll(f[1], &end, 10);
    if (errno || *end || e->stamp.size < 0)
        return false;
    e->stamp.mtime_sec = strtoll(f[2], &end, 10);
    if (errno || *end != '.')
        return false;
    long ns = strtol(end + 1, &end, 10);
    if (errno || *end || ns < 0 || ns > 999999999)
        return false;
    e->stamp.mtime_nsec = ns;
    e->stamp.ino = strtoull(f[3], &end, 10);
    if (errno || *end)
        return false;
    if (!fld__probe_state_from_name(f[4], &e->state) || e->state == FLD_PROBE_ERROR)
        return false;
    e->version = strdup(f[0]);
    e->what = strdup(f[5]);
    e->path = strdup(f[6]);
    if (!e->version || !e->what || !e->path) {
        entry_free(e);
        return false;
    }
    return true;
}

/* The directory of the cache, opened, if it is ours and not writable by
 * others; created (0700) when create is set. -1 when it is missing or cannot
 * be opened, -2 when it is refused (the reason in session.no_cache_why). */
static int open_cache_dir(bool create)
{
    if (!session.cache_dir[0])
        return -1;
    if (create) {
        if (mkdir(session.cache_base, 0700) != 0 && errno != EEXIST)
            fld__log(FLD_LOG_DEBUG, "probe cache: mkdir %s: %s", session.cache_base,
                     strerror(errno));
        if (mkdir(session.cache_dir, 0700) != 0 && errno != EEXIST) {
            fld__log(FLD_LOG_WARNING, "probe cache: cannot create %s: %s", session.cache_dir,
                     strerror(errno));
            return -1;
        }
    }
    int dfd = open(session.cache_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == ENOENT)
            return -1;
        snprintf(session.no_cache_why, sizeof session.no_cache_why,
                 "probe cache directory %s refused: %s", session.cache_dir, strerror(errno));
        return -2;
    }
    struct stat st;
    if (fstat(dfd, &st) != 0 || !fld__file_private(&st)) {
        snprintf(session.no_cache_why, sizeof session.no_cache_why,
                 "probe cache directory %s refused: owned by uid %u (this process runs as %u) "
                 "or writable by others (mode %04o)",
                 session.cache_dir, (unsigned)st.st_uid, (unsigned)geteuid(),
                 (unsigned)(st.st_mode & 07777));
        close(dfd);
        return -2;
    }
    return dfd;
}

/* Reads the cache file into c; a missing, foreign, unsafe or corrupt file
 * gives nothing (or only its well-formed lines). *damaged when some of it
 * was ignored, so that the next write replaces it. */
static void cache_read(struct cache *c, bool *damaged, bool *refused)
{
    *damaged = *refused = false;
    int dfd = open_cache_dir(false);
    *refused = dfd == -2;
    if (dfd < 0)
        return;
    int fd = openat(dfd, CACHE_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dfd);
    if (fd < 0) {
        *damaged = errno != ENOENT;
        return;
    }
    struct stat st;
    char *text = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !fld__file_private(&st) ||
        st.st_size > (off_t)CACHE_MAX) {
        fld__log(FLD_LOG_WARNING,
                 "probe cache: ignoring %s (not a regular file of uid %u, writable by others, or "
                 "larger than %u bytes); it will be replaced",
                 session.cache_file, (unsigned)geteuid(), CACHE_MAX);
        *damaged = true;
        goto out;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text)
        goto out;
    size_t len = 0;
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, text + len, (size_t)st.st_size - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    text[len] = '\0';
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    if (!line || strcmp(line, CACHE_HEADER) != 0) {
        if (len)
            fld__log(FLD_LOG_WARNING,
                     "probe cache: %s is not a probe cache of this format; it will be replaced",
                     session.cache_file);
        *damaged = len != 0;
        goto out;
    }
    while ((line = strtok_r(NULL, "\n", &save))) {
        struct cache_entry e;
        memset(&e, 0, sizeof e);
        if (!parse_entry(line, &e)) {
            *damaged = true;
            continue;
        }
        cache_put(c, &e);
    }
    if (*damaged)
        fld__log(FLD_LOG_WARNING, "probe cache: %s has malformed lines; they are dropped",
                 session.cache_file);
out:
    free(text);
    close(fd);
}

static bool write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

/*
 * Writes the cache: what another process wrote meanwhile is merged in, and
 * entries of files that changed or disappeared are dropped. Atomic: a
 * private temporary file renamed over the old one.
 */
static void cache_write(void)
{
    int dfd = open_cache_dir(true);
    if (dfd < 0) {
        if (dfd == -2)
            fld__log(FLD_LOG_WARNING, "%s", session.no_cache_why);
        return;
    }
    struct cache disk = {0};
    bool damaged, refused;
    cache_read(&disk, &damaged, &refused);
    for (size_t i = 0; i < disk.n; i++) {
        if (!cache_find(&session.cache, disk.v[i].path, disk.v[i].version)) {
            struct cache_entry e = disk.v[i];
            memset(&disk.v[i], 0, sizeof disk.v[i]);
            cache_put(&session.cache, &e);
        }
    }
    cache_clear(&disk);

    char tmp[64];
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(tmp, sizeof tmp, CACHE_NAME ".%ld.%ld.tmp", (long)getpid(),
                 (long)(ts.tv_nsec + attempt));
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        fld__log(FLD_LOG_WARNING, "probe cache: cannot create a file in %s: %s", session.cache_dir,
                 strerror(errno));
        close(dfd);
        return;
    }
    bool ok = fchmod(fd, 0600) == 0 && write_all(fd, CACHE_HEADER "\n", strlen(CACHE_HEADER) + 1);
    for (size_t i = 0; ok && i < session.cache.n; i++) {
        const struct cache_entry *e = &session.cache.v[i];
        struct stat st;
        if (stat(e->path, &st) != 0 || !same_file(e, &st) || strchr(e->path, '\n'))
            continue;
        char line[PATH_MAX + 1400], what[1100];
        int n = snprintf(line, sizeof line, "%s\t%lld\t%lld.%09ld\t%llu\t%s\t%s\t%s\n", e->version,
                         e->stamp.size, e->stamp.mtime_sec, e->stamp.mtime_nsec, e->stamp.ino,
                         fld__probe_state_name(e->state), fld__escape(what, sizeof what, e->what),
                         e->path);
        if (n > 0 && (size_t)n < sizeof line)
            ok = write_all(fd, line, (size_t)n);
    }
    ok = ok && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (ok && renameat(dfd, tmp, dfd, CACHE_NAME) == 0) {
        session.dirty = false;
    } else {
        fld__log(FLD_LOG_WARNING, "probe cache: cannot write %s: %s", session.cache_file,
                 strerror(errno));
        unlinkat(dfd, tmp, 0);
    }
    close(dfd);
}

/* ---- discovery's gate ----------------------------------------------------- */

void fld__probe_session_begin(void)
{
    session.active = true;
    session.dirty = false;
    read_config();
    if (session.enabled && session.cache_file[0]) {
        bool damaged, refused;
        cache_read(&session.cache, &damaged, &refused);
        session.dirty = damaged;
        if (refused) {
            /* Verdicts are still used for this pass, never written there. */
            fld__log(FLD_LOG_WARNING, "%s", session.no_cache_why);
            session.cache_file[0] = '\0';
        }
    }
}

void fld__probe_session_end(void)
{
    if (session.enabled && session.dirty && session.cache_file[0])
        cache_write();
    cache_clear(&session.cache);
    session.active = false;
    session.dirty = false;
}

static bool bad_state(enum fld_probe_state s)
{
    return s == FLD_PROBE_CRASHED || s == FLD_PROBE_HUNG || s == FLD_PROBE_EXITED;
}

static bool gate(const char *path, const struct stat *st, char *why, size_t size)
{
    struct cache_entry *e = cache_find(&session.cache, path, FLD_VERSION_STRING);
    if (e && same_file(e, st)) {
        if (!bad_state(e->state)) {
            fld__log(FLD_LOG_DEBUG, "plugin %s: probed before (%s), not probed again", path,
                     e->what);
            return true;
        }
        snprintf(why, size, "%s when probed (cached in %s until the file changes)", e->what,
                 session.cache_file);
        return false;
    }

    struct fld_probe_result r;
    int rc = fld__probe_run(path, &session.opt, &r);
    if (rc != FLD_OK && session.opt.mode == FLD_PROBE_SPAWN) {
        fld__log(FLD_LOG_WARNING, "plugin %s: %s; probing in a forked child instead", path,
                 r.reason);
        fld__probe_result_free(&r);
        session.opt.mode = FLD_PROBE_FORK;
        session.opt.helper = NULL;
        rc = fld__probe_run(path, &session.opt, &r);
    }
    if (rc != FLD_OK) {
        /* The probe is a safety net: when it cannot run, the plugin loads as
         * it would without VLLM_FL_PLUGIN_PROBE. */
        fld__log(FLD_LOG_WARNING, "plugin %s could not be probed (%s); loading it unprobed", path,
                 r.reason);
        fld__probe_result_free(&r);
        return true;
    }
    char what[1024];
    fld__probe_describe(&r, what, sizeof what);
    /* A bad verdict is logged once more, as the plugin's rejection. */
    fld__log(bad_state(r.state) ? FLD_LOG_INFO : FLD_LOG_DEBUG, "plugin %s probed in %.3f s: %s",
             path, r.seconds, what);
    bool cached = false;
    if (session.cache_file[0]) {
        struct cache_entry ne = {
            .path = strdup(path),
            .version = strdup(FLD_VERSION_STRING),
            .stamp = fld__file_stamp(st),
            .state = r.state,
            .what = strdup(what),
        };
        if (ne.path && ne.version && ne.what)
            cached = cache_put(&session.cache, &ne);
        else
            entry_free(&ne);
        session.dirty |= cached;
    }
    bool ok = !bad_state(r.state);
    if (!ok) {
        if (cached)
            snprintf(why, size,
                     "%s when probed out of process (remembered in %s until the file changes)",
                     what, session.cache_file);
        else
            snprintf(why, size, "%s when probed out of process (%s)", what,
                     session.cache_file[0] ? "could not be cached" : session.no_cache_why);
    }
    fld__probe_result_free(&r);
    return ok;
}

bool fld__probe_gate(const char *path, const struct stat *st, char *why, size_t size)
{
    bool own = !session.active;
    if (own)
        fld__probe_session_begin();
    bool ok = !session.enabled || gate(path, st, why, size);
    if (own)
        fld__probe_session_end();
    return ok;
}
