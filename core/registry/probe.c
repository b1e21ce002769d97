/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Crash isolation: a plugin is loaded in a child process and judged from
 * outside, so a plugin that crashes, hangs or calls exit() takes down the
 * child instead of the host. See probe.h for the interface and
 * docs/doctor.md for the design.
 *
 * The child reports its progress through a pipe, one tab-separated line per
 * event (protocol below), so the parent knows at which stage a signal or the
 * timeout caught it. The parent polls the pipe and the child's state until
 * the child ends or the timeout passes, then kills the child's whole process
 * group (a plugin may have forked) before reaping it.
 *
 * Discovery (VLLM_FL_PLUGIN_PROBE=1) runs inside the host, which may have
 * many threads and initialised device runtimes, so it does not fork: it
 * posix_spawn()s the fldispatch tool as a fresh helper ("doctor
 * --probe-child"), which runs the same child code. Verdicts are cached in
 * $XDG_CACHE_HOME/fldispatch/plugin-probe.cache by path, size, modification
 * time, inode and library version.
 *
 * This file holds the names, the child and the supervising parent;
 * probe_gate.c the configuration, the verdict cache and discovery's gate.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fld_paths.h"

#include "error.h"
#include "escape.h"
#include "log.h"
#include "parse.h"
#include "plugin_file.h"
#include "probe.h"
#include "reentry.h"
#include "registry.h"

extern char **environ;

/*
 * Protocol, child to parent; every line is "<tag>\t<fields>\n", fields never
 * contain tabs or newlines (the last field may contain tabs):
 *   V  <library version> <protocol>      first line: the child is running
 *   S  <stage>                           entering a stage
 *   D  <abi major> <abi minor> <in-tree> <name> <version>
 *   T  <detail>
 *   I  <available> <op> <impl_id> <reason>
 *   H  <available> <device type> <reason>
 *   R  <state> <reason>                  the verdict; the child then exits 0
 */
#define PROTOCOL_VERSION 1
/* The helper reads its end of the pipe on this descriptor. */
#define HELPER_FD 3
/* A child that writes more than this is not listened to any further. */
#define MAX_REPORT (1u << 20)

/* ---- names ---------------------------------------------------------------- */

const char *fld__probe_state_name(enum fld_probe_state s)
{
    switch (s) {
    case FLD_PROBE_OK:
        return "ok";
    case FLD_PROBE_UNAVAILABLE:
        return "unavailable";
    case FLD_PROBE_REJECTED:
        return "rejected";
    case FLD_PROBE_CRASHED:
        return "crashed";
    case FLD_PROBE_HUNG:
        return "hung";
    case FLD_PROBE_EXITED:
        return "exited";
    case FLD_PROBE_ERROR:
        return "error";
    }
    return "error";
}

const char *fld__probe_stage_name(enum fld_probe_stage s)
{
    switch (s) {
    case FLD_PROBE_STAGE_START:
        return "start";
    case FLD_PROBE_STAGE_DLOPEN:
        return "dlopen";
    case FLD_PROBE_STAGE_DESCRIPTOR:
        return "descriptor";
    case FLD_PROBE_STAGE_REGISTER:
        return "register_builtins";
    case FLD_PROBE_STAGE_AVAILABILITY:
        return "availability";
    case FLD_PROBE_STAGE_DONE:
        return "done";
    }
    return "start";
}

bool fld__probe_state_from_name(const char *s, enum fld_probe_state *out)
{
    for (int i = FLD_PROBE_OK; i <= FLD_PROBE_ERROR; i++) {
        if (strcmp(s, fld__probe_state_name((enum fld_probe_state)i)) == 0) {
            *out = (enum fld_probe_state)i;
            return true;
        }
    }
    return false;
}

const char *fld__probe_signal_name(int sig, char *buf, size_t size)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {
        {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGABRT, "SIGABRT"}, {SIGFPE, "SIGFPE"},
        {SIGILL, "SIGILL"},   {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},   {SIGKILL, "SIGKILL"},
        {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGHUP, "SIGHUP"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
        {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(buf, size, "SIG%d", sig);
    return buf;
}

static const char *stage_phrase(enum fld_probe_stage s)
{
    switch (s) {
    case FLD_PROBE_STAGE_START:
        return "before dlopen";
    case FLD_PROBE_STAGE_DLOPEN:
        return "during dlopen (static constructors)";
    case FLD_PROBE_STAGE_DESCRIPTOR:
        return "while its descriptor was read";
    case FLD_PROBE_STAGE_REGISTER:
        return "during register_builtins";
    case FLD_PROBE_STAGE_AVAILABILITY:
        return "during the availability checks";
    case FLD_PROBE_STAGE_DONE:
        return "after its checks";
    }
    return "";
}

void fld__probe_describe(const struct fld_probe_result *r, char *buf, size_t size)
{
    char sig[16];
    switch (r->state) {
    case FLD_PROBE_OK:
    case FLD_PROBE_UNAVAILABLE: {
        size_t avail = 0;
        for (size_t i = 0; i < r->n_impls; i++)
            avail += r->impls[i].available;
        if (r->state == FLD_PROBE_OK)
            snprintf(buf, size, "ok: %zu implementation(s), %zu available", r->n_impls, avail);
        else
            snprintf(buf, size, "unavailable: %s", r->reason);
        return;
    }
    case FLD_PROBE_REJECTED:
        snprintf(buf, size, "rejected: %s", r->reason);
        return;
    case FLD_PROBE_CRASHED:
        snprintf(buf, size, "crashed with %s (signal %d) %s",
                 fld__probe_signal_name(r->signal, sig, sizeof sig), r->signal,
                 stage_phrase(r->stage));
        return;
    case FLD_PROBE_HUNG:
        snprintf(buf, size, "hung %s (no verdict within %g s; killed)", stage_phrase(r->stage),
                 r->seconds);
        return;
    case FLD_PROBE_EXITED:
        snprintf(buf, size, "exited with status %d %s", r->exit_status, stage_phrase(r->stage));
        return;
    case FLD_PROBE_ERROR:
        snprintf(buf, size, "could not be probed: %s", r->reason);
        return;
    }
    snprintf(buf, size, "?");
}

/* s as a protocol field: escaped (escape.h), so it holds no tab or line
 * break, and whatever the plugin or dlerror() said reaches doctor's output
 * as text. */
static const char *field(const char *s, char *out, size_t size)
{
    return fld__escape(out, size, s);
}

/* ---- the child ------------------------------------------------------------ */

static void emit(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit(int fd, const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line - 2 ? (size_t)n : sizeof line - 2;
    line[len++] = '\n';
    /* One write per line (under PIPE_BUF), retried on interruption. */
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        off += (size_t)w;
    }
}

static __attribute__((noreturn)) void child_verdict(int fd, enum fld_probe_state st,
                                                    const char *reason)
{
    char f[2048];
    emit(fd, "R\t%s\t%s", fld__probe_state_name(st), field(reason, f, sizeof f));
    _exit(0);
}

/* Set in a probe child (fld__probe_child_main): it never probes plugins itself. */
static bool in_probe_child;

bool fld__probe_in_child(void)
{
    return in_probe_child;
}

/* Registered last in the child, so it runs first when a plugin calls
 * exit(): the status is kept and none of the parent's exit handlers (nor
 * stdio flushes of its buffers) run in the child. */
static void exit_at_once(int status, void *arg)
{
    (void)arg;
    _exit(status);
}

void fld__probe_child_main(int fd, const char *path)
{
    /* Crashes must end the child with their signal, whatever handlers the
     * parent (a sanitizer, an interpreter) installed or signals it blocked. */
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* The child runs in its own, background, process group: a plugin writing
     * to a terminal with `stty tostop` must not be stopped (and judged hung). */
    signal(SIGTTOU, SIG_IGN);
    signal(SIGTTIN, SIG_IGN);
    /* A plugin's log lines go to stderr, not to the application's callback
     * (an interpreter's, which is not usable in a forked child). */
    fld_log_set_callback(NULL, NULL);
    on_exit(exit_at_once, NULL);

    /* A probe child never probes: should plugin code here get the library
     * to load plugins (from a thread of its own), they load unprobed. */
    in_probe_child = true;

    char f1[1024], f2[1024];
    emit(fd, "V\t%s\t%d", FLD_VERSION_STRING, PROTOCOL_VERSION);
    emit(fd, "S\t%d", FLD_PROBE_STAGE_DLOPEN);
    /* The host's own ways of running plugin code (reentry.h), so that the
     * verdict is the host's: a plugin that calls back into the library from
     * a constructor or register_builtins is rejected here as there. */
    void *dl = fld__plugin_dlopen(path, f1, sizeof f1);
    if (!dl)
        child_verdict(fd, FLD_PROBE_REJECTED, f1);
    emit(fd, "S\t%d", FLD_PROBE_STAGE_DESCRIPTOR);
    /* Found and judged by discovery's own code (plugin_file.h). */
    const char *missing;
    const fld_plugin_descriptor *desc = fld__descriptor_find(dl, &missing);
    if (!desc)
        child_verdict(fd, FLD_PROBE_REJECTED, missing);
    if (!fld__check_descriptor(desc, f1, sizeof f1))
        child_verdict(fd, FLD_PROBE_REJECTED, f1);
    bool in_tree = fld__descriptor_in_tree(desc);
    emit(fd, "D\t%u\t%u\t%d\t%s\t%s", desc->abi_major, desc->abi_minor, in_tree ? 1 : 0, desc->name,
         field(desc->version ? desc->version : "", f2, sizeof f2));

    emit(fd, "S\t%d", FLD_PROBE_STAGE_REGISTER);
    char name[72];
    snprintf(name, sizeof name, "%s", desc->name);
    struct fld_plugin_rec scratch = {.name = name, .path = (char *)path};
    struct fld_registry reg;
    fld__registry_begin(&reg, &scratch);
    if (fld__plugin_register(desc, &reg, f1, sizeof f1) != FLD_OK)
        child_verdict(fd, FLD_PROBE_REJECTED, f1);
    if (reg.detail)
        emit(fd, "T\t%s", field(reg.detail, f1, sizeof f1));

    emit(fd, "S\t%d", FLD_PROBE_STAGE_AVAILABILITY);
    size_t available = 0;
    const char *first_reason = NULL;
    for (size_t i = 0; i < reg.n; i++) {
        const struct fld_impl_rec *r = reg.staged[i];
        const char *why;
        char misbehaved[256];
        bool ok = fld__plugin_available(r->is_available, name, &why, misbehaved, sizeof misbehaved);
        available += ok;
        if (!ok && !first_reason)
            first_reason = why;
        emit(fd, "I\t%d\t%s\t%s\t%s", ok ? 1 : 0, r->staged_op, r->impl_id,
             field(ok ? "" : why, f1, sizeof f1));
    }
    for (int d = 0; d < FLD_NDEVICES; d++) {
        const struct fld_hook_rec *h = reg.hooks[d];
        if (!h)
            continue;
        const char *why;
        char misbehaved[256];
        bool ok =
            fld__plugin_available(h->hooks.is_available, name, &why, misbehaved, sizeof misbehaved);
        emit(fd, "H\t%d\t%d\t%s", ok ? 1 : 0, h->hooks.device_type,
             field(ok ? "" : why, f1, sizeof f1));
    }
    if (reg.n && !available)
        child_verdict(fd, FLD_PROBE_UNAVAILABLE, first_reason);
    child_verdict(fd, FLD_PROBE_OK, "");
}

/* ---- the parent: reading the report --------------------------------------- */

struct report {
    char *buf;
    size_t len, cap;
    bool started;   /* the V line arrived */
    bool verdict;   /* the R line arrived */
    bool truncated; /* the child wrote too much */
    char version[64];
    int protocol;
};

static char *dup_field(const char *s)
{
    return strdup(s ? s : "");
}

/* Splits line at tabs into at most max fields; the last keeps its tabs. */
size_t fld__probe_split(char *line, char **fields, size_t max)
{
    size_t n = 0;
    fields[n++] = line;
    for (char *p = line; *p && n < max; p++) {
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    }
    return n;
}

static void add_impl(struct fld_probe_result *out, bool ok, const char *op, const char *id,
                     const char *why)
{
    struct fld_probe_impl *v = realloc(out->impls, (out->n_impls + 1) * sizeof *v);
    if (!v)
        return;
    out->impls = v;
    struct fld_probe_impl *m = &v[out->n_impls];
    m->op = dup_field(op);
    m->impl_id = dup_field(id);
    m->reason = dup_field(why);
    m->available = ok;
    if (!m->op || !m->impl_id || !m->reason) {
        free(m->op);
        free(m->impl_id);
        free(m->reason);
        return;
    }
    out->n_impls++;
}

static void add_hook(struct fld_probe_result *out, bool ok, int device_type, const char *why)
{
    struct fld_probe_hook *v = realloc(out->hooks, (out->n_hooks + 1) * sizeof *v);
    if (!v)
        return;
    out->hooks = v;
    struct fld_probe_hook *h = &v[out->n_hooks];
    h->device_type = device_type;
    h->available = ok;
    if (!(h->reason = dup_field(why)))
        return;
    out->n_hooks++;
}

static void handle_line(struct report *rep, char *line, struct fld_probe_result *out)
{
    char *f[6];
    size_t n = fld__probe_split(line, f, 6);
    if (strcmp(f[0], "V") == 0 && n >= 3) {
        rep->started = true;
        snprintf(rep->version, sizeof rep->version, "%s", f[1]);
        rep->protocol = atoi(f[2]);
    } else if (strcmp(f[0], "S") == 0 && n >= 2) {
        int s = atoi(f[1]);
        if (s >= FLD_PROBE_STAGE_START && s <= FLD_PROBE_STAGE_DONE)
            out->stage = (enum fld_probe_stage)s;
    } else if (strcmp(f[0], "D") == 0 && n >= 6) {
        out->have_descriptor = true;
        out->abi_major = (unsigned)strtoul(f[1], NULL, 10);
        out->abi_minor = (unsigned)strtoul(f[2], NULL, 10);
        out->in_tree = atoi(f[3]) != 0;
        snprintf(out->name, sizeof out->name, "%s", f[4]);
        snprintf(out->version, sizeof out->version, "%s", f[5]);
    } else if (strcmp(f[0], "T") == 0 && n >= 2) {
        snprintf(out->detail, sizeof out->detail, "%s", f[1]);
    } else if (strcmp(f[0], "I") == 0 && n >= 5) {
        add_impl(out, atoi(f[1]) != 0, f[2], f[3], f[4]);
    } else if (strcmp(f[0], "H") == 0 && n >= 4) {
        add_hook(out, atoi(f[1]) != 0, atoi(f[2]), f[3]);
    } else if (strcmp(f[0], "R") == 0 && n >= 3) {
        enum fld_probe_state st;
        if (fld__probe_state_from_name(f[1], &st) &&
            (st == FLD_PROBE_OK || st == FLD_PROBE_UNAVAILABLE || st == FLD_PROBE_REJECTED)) {
            rep->verdict = true;
            out->state = st;
            out->stage = FLD_PROBE_STAGE_DONE;
            snprintf(out->reason, sizeof out->reason, "%s", f[2]);
        }
    }
}

/* Appends data and handles every complete line. */
static void feed(struct report *rep, const char *data, size_t n, struct fld_probe_result *out)
{
    if (rep->truncated)
        return;
    if (rep->len + n + 1 > rep->cap) {
        size_t cap = rep->cap ? rep->cap : 4096;
        while (cap < rep->len + n + 1)
            cap *= 2;
        char *b = cap <= MAX_REPORT ? realloc(rep->buf, cap) : NULL;
        if (!b) {
            rep->truncated = true;
            return;
        }
        rep->buf = b;
        rep->cap = cap;
    }
    memcpy(rep->buf + rep->len, data, n);
    rep->len += n;
    rep->buf[rep->len] = '\0';
    char *start = rep->buf, *nl;
    while ((nl = memchr(start, '\n', rep->len - (size_t)(start - rep->buf)))) {
        *nl = '\0';
        handle_line(rep, start, out);
        start = nl + 1;
    }
    size_t rest = rep->len - (size_t)(start - rep->buf);
    memmove(rep->buf, start, rest);
    rep->len = rest;
    rep->buf[rest] = '\0';
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads what the pipe holds now; false at end of file or on an error. */
static bool drain(int fd, struct report *rep, struct fld_probe_result *out, int wait_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, wait_ms);
    if (pr < 0)
        return errno == EINTR;
    if (pr == 0)
        return true;
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN;
    if (n == 0)
        return false;
    feed(rep, buf, (size_t)n, out);
    return true;
}

/* Whether the child has ended; it stays a zombie (its pid and process group
 * cannot be reused) until reaped. -1 when it cannot be waited for. */
static int child_ended(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    for (;;) {
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
            return si.si_pid == pid;
        if (errno != EINTR)
            return -1;
    }
}

static int reap(pid_t pid, int *status)
{
    for (;;) {
        pid_t w = waitpid(pid, status, 0);
        if (w == pid)
            return 0;
        if (w < 0 && errno != EINTR)
            return -1;
    }
}

static void kill_group(pid_t pid)
{
    /* The child leads its own process group; a plugin may have forked. */
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
}

static int probe_error(struct fld_probe_result *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int probe_error(struct fld_probe_result *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->reason, sizeof out->reason, fmt, ap);
    va_end(ap);
    out->state = FLD_PROBE_ERROR;
    return fld__fail(FLD_EPLUGIN, "%s", out->reason);
}

static int supervise(pid_t pid, int fd, const struct fld_probe_options *opt, const char *path,
                     double start, struct fld_probe_result *out)
{
    struct report rep = {0};
    double deadline = start + opt->timeout;
    bool open_pipe = true, timed_out = false;
    int ended, wait_errno = 0;
    for (;;) {
        double left = deadline - now_seconds();
        int wait_ms = left <= 0 ? 0 : left < 0.05 ? (int)(left * 1000) + 1 : 50;
        if (open_pipe) {
            open_pipe = drain(fd, &rep, out, wait_ms);
        } else {
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        ended = child_ended(pid);
        if (ended < 0)
            wait_errno = errno;
        if (ended != 0)
            break;
        if (now_seconds() >= deadline) {
            timed_out = true;
            break;
        }
    }
    /* Whatever it wrote before it ended is still in the pipe (a grandchild
     * may hold the pipe open: read only what is there). */
    while (open_pipe && (ended > 0 || timed_out) && drain(fd, &rep, out, 0)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0)
            break;
    }
    out->seconds = now_seconds() - start;
    kill_group(pid);
    int status = 0;
    int wr = reap(pid, &status);
    if (wr < 0)
        wait_errno = errno;
    free(rep.buf);

    if (ended < 0 || wr < 0)
        return probe_error(out, "cannot wait for the probe of %s: %s (is SIGCHLD ignored?)", path,
                           strerror(wait_errno));
    /* The child reports before it touches the plugin: without a first line
     * the failure is the probe's own (a helper that did not start). */
    if (!rep.started)
        return probe_error(out, "the probe %s of %s did not start (%s %d)",
                           opt->mode == FLD_PROBE_SPAWN ? opt->helper : "child", path,
                           timed_out             ? "timed out after"
                           : WIFSIGNALED(status) ? "killed by signal"
                                                 : "exit status",
                           timed_out             ? (int)opt->timeout
                           : WIFSIGNALED(status) ? WTERMSIG(status)
                                                 : WEXITSTATUS(status));
    if (rep.protocol != PROTOCOL_VERSION || strcmp(rep.version, FLD_VERSION_STRING) != 0)
        return probe_error(out,
                           "the probe helper %s runs library %s (protocol %d), not this library's "
                           "%s (protocol %d)",
                           opt->helper ? opt->helper : "(fork)", rep.version, rep.protocol,
                           FLD_VERSION_STRING, PROTOCOL_VERSION);
    if (timed_out && !rep.verdict) {
        out->state = FLD_PROBE_HUNG;
        out->seconds = opt->timeout;
    } else if (timed_out) {
        /* The verdict stands: the child only failed to exit in time. */
    } else if (WIFSIGNALED(status)) {
        /* A crash after the verdict (in a thread the plugin started) would
         * crash the host as well: it counts, at stage "done". */
        out->state = FLD_PROBE_CRASHED;
        out->signal = WTERMSIG(status);
    } else if (WIFEXITED(status) && (WEXITSTATUS(status) != 0 || !rep.verdict)) {
        out->state = FLD_PROBE_EXITED;
        out->exit_status = WEXITSTATUS(status);
    }
    if (out->state != FLD_PROBE_OK && out->state != FLD_PROBE_UNAVAILABLE &&
        out->state != FLD_PROBE_REJECTED) {
        char d[sizeof out->reason];
        fld__probe_describe(out, d, sizeof d);
        snprintf(out->reason, sizeof out->reason, "%s", d);
    }
    return FLD_OK;
}

static int spawn_helper(const char *path, const struct fld_probe_options *opt, int wfd, pid_t *pid)
{
    char fdtext[16];
    snprintf(fdtext, sizeof fdtext, "%d", HELPER_FD);
    char *const argv[] = {(char *)opt->helper, "doctor", "--probe-child", fdtext,
                          (char *)path,        NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc)
        return rc;
    rc = posix_spawnattr_init(&attr);
    if (rc) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    static const int reset[] = {SIGSEGV, SIGBUS,  SIGABRT, SIGFPE,  SIGILL,  SIGTRAP, SIGSYS,
                                SIGPIPE, SIGCHLD, SIGINT,  SIGQUIT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
        sigaddset(&defaults, reset[i]);
    if (!rc)
        rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                 POSIX_SPAWN_SETSIGDEF);
    if (!rc)
        rc = posix_spawnattr_setpgroup(&attr, 0);
    if (!rc)
        rc = posix_spawnattr_setsigmask(&attr, &none);
    if (!rc)
        rc = posix_spawnattr_setsigdefault(&attr, &defaults);
    /* stdin from /dev/null, the plugin's stdout onto stderr (never into the
     * application's output), the report pipe on HELPER_FD, nothing else. */
    if (!rc)
        rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, 2, 1);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, wfd, HELPER_FD);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    if (!rc)
        rc = posix_spawn_file_actions_addclosefrom_np(&fa, HELPER_FD + 1);
#endif
    if (!rc)
        rc = posix_spawn(pid, opt->helper, &fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

void fld__probe_result_free(struct fld_probe_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_impls; i++) {
        free(r->impls[i].op);
        free(r->impls[i].impl_id);
        free(r->impls[i].reason);
    }
    free(r->impls);
    for (size_t i = 0; i < r->n_hooks; i++)
        free(r->hooks[i].reason);
    free(r->hooks);
    r->impls = NULL;
    r->hooks = NULL;
    r->n_impls = r->n_hooks = 0;
}

int fld__probe_run(const char *path, const struct fld_probe_options *opt,
                   struct fld_probe_result *out)
{
    memset(out, 0, sizeof *out);
    out->state = FLD_PROBE_ERROR;
    if (!path || !opt || !(opt->timeout > 0) || !isfinite(opt->timeout))
        return probe_error(out, "probe: invalid arguments");
    if (opt->mode == FLD_PROBE_SPAWN && (!opt->helper || opt->helper[0] != '/'))
        return probe_error(out, "probe: no helper program to spawn");
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return probe_error(out, "cannot probe %s: pipe: %s", path, strerror(errno));
    /* The helper reads the pipe on HELPER_FD: keep the write end off it, or
     * the dup2 onto itself would leave it close-on-exec. */
    if (opt->mode == FLD_PROBE_SPAWN && p[1] == HELPER_FD) {
        int moved = fcntl(p[1], F_DUPFD_CLOEXEC, HELPER_FD + 1);
        if (moved < 0) {
            int e = errno;
            close(p[0]);
            close(p[1]);
            return probe_error(out, "cannot probe %s: %s", path, strerror(e));
        }
        close(p[1]);
        p[1] = moved;
    }
    pid_t pid = -1;
    double start = now_seconds();
    if (opt->mode == FLD_PROBE_SPAWN) {
        int rc = spawn_helper(path, opt, p[1], &pid);
        if (rc) {
            close(p[0]);
            close(p[1]);
            return probe_error(out, "cannot start the probe helper %s: %s", opt->helper,
                               strerror(rc));
        }
    } else {
        /* Unflushed output would be written twice if the child calls exit(). */
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
            int e = errno;
            close(p[0]);
            close(p[1]);
            return probe_error(out, "cannot probe %s: fork: %s", path, strerror(e));
        }
        if (pid == 0) {
            close(p[0]);
            setpgid(0, 0);
            int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (null >= 0 && null != 0) {
                dup2(null, 0);
                close(null);
            }
            dup2(2, 1);
            fld__probe_child_main(p[1], path);
        }
        setpgid(pid, pid); /* also here: no window in which it is in our group */
    }
    close(p[1]);
    int rc = supervise(pid, p[0], opt, path, start, out);
    close(p[0]);
    return rc;
}
