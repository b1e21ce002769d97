/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging. The level and sink are process-wide atomics so that the check on
 * hot paths costs one load. Lines go to stderr as
 * "[2026-11-22 01:02:03] [WARNING] [fldispatch] message", or to the
 * application's callback.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <fldispatch/plugin.h>

#include "error.h"
#include "inflight.h"
#include "escape.h"
#include "log.h"
#include "parse.h"
#include "reentry.h"

static _Atomic int log_level = FLD_LOG_WARNING;
static _Atomic bool level_overridden; /* fld_log_set_level() wins over the environment */
static _Atomic bool dispatch_debug;

/*
 * The sink is an immutable {fn, user} pair swapped in atomically, so a
 * logging thread never pairs one callback with another's user pointer.
 * Replaced sinks are kept (a thread may still be using one) and freed by
 * fld__log_shutdown().
 */
struct sink {
    fld_log_fn fn;
    void *user;
    struct sink *retired_next;
};
static _Atomic(struct sink *) current_sink;
static struct sink *retired_sinks;
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *level_name(int level)
{
    if (level >= FLD_LOG_ERROR)
        return "ERROR";
    if (level >= FLD_LOG_WARNING)
        return "WARNING";
    if (level >= FLD_LOG_INFO)
        return "INFO";
    return "DEBUG";
}

static bool log_enabled(int level)
{
    return level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

bool fld__dispatch_debug(void)
{
    return atomic_load_explicit(&dispatch_debug, memory_order_relaxed);
}

static void emit(int level, const char *msg)
{
    struct sink *s = atomic_load_explicit(&current_sink, memory_order_acquire);
    if (s && s->fn) {
        /* The line may come from the middle of an initialisation, a reload
         * or a plugin's load: a call back into the library is refused
         * (reentry.h), and blamed on the callback, not on the plugin. */
        struct fld_callout callout;
        fld__app_callback_enter(&callout, "log callback");
        s->fn(level, msg, s->user);
        fld__callout_leave(&callout);
        return;
    }
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(stderr, "[%s] [%s] [fldispatch] %s\n", stamp, level_name(level), msg);
}

static void vlog(int level, const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fld__escape_in_place(msg, sizeof msg); /* values quoted as they are: escape.h */
    emit(level, msg);
}

void fld__log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void fld_log(int level, const char *fmt, ...)
{
    FLD_CALL_SCOPE();
    if (!fmt) {
        fld__fail(FLD_EINVAL, "fld_log: argument 'fmt' is NULL");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

int fld_log_set_level(int level)
{
    int rc = fld__callout_refuse("fld_log_set_level");
    if (rc)
        return rc;
    atomic_store(&log_level, level);
    atomic_store(&level_overridden, true);
    return FLD_OK;
}

int fld_log_get_level(void)
{
    return atomic_load(&log_level);
}

int fld_log_set_callback(fld_log_fn fn, void *user)
{
    int rc = fld__callout_refuse("fld_log_set_callback");
    if (rc)
        return rc;
    struct sink *fresh = NULL;
    if (fn) {
        fresh = malloc(sizeof *fresh);
        if (!fresh)
            return fld__fail(FLD_ENOMEM, "fld_log_set_callback: out of memory");
        fresh->fn = fn;
        fresh->user = user;
        fresh->retired_next = NULL;
    }
    struct sink *old = atomic_exchange_explicit(&current_sink, fresh, memory_order_acq_rel);
    if (old) {
        pthread_mutex_lock(&retired_lock);
        old->retired_next = retired_sinks;
        retired_sinks = old;
        pthread_mutex_unlock(&retired_lock);
    }
    return FLD_OK;
}

void fld__log_shutdown(void)
{
    pthread_mutex_lock(&retired_lock);
    while (retired_sinks) {
        struct sink *s = retired_sinks;
        retired_sinks = s->retired_next;
        free(s);
    }
    pthread_mutex_unlock(&retired_lock);
}

int fld__log_read_env(struct fld_log_env *out)
{
    out->level = FLD_LOG_WARNING;
    out->level_set = false;
    out->dispatch_debug = false;
    const char *v = getenv("VLLM_FL_LOG_LEVEL");
    if (v && *v) {
        static const struct {
            const char *name;
            int level;
        } names[] = {{"DEBUG", FLD_LOG_DEBUG},
                     {"INFO", FLD_LOG_INFO},
                     {"WARNING", FLD_LOG_WARNING},
                     {"WARN", FLD_LOG_WARNING},
                     {"ERROR", FLD_LOG_ERROR}};
        char buf[32];
        size_t n = strlen(v);
        v = fld__trim(v, &n);
        bool found = false;
        if (n < sizeof buf) {
            memcpy(buf, v, n);
            buf[n] = '\0';
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                if (strcasecmp(buf, names[i].name) == 0) {
                    out->level = names[i].level;
                    found = true;
                }
            }
        }
        if (!found)
            return fld__fail(FLD_ECONFIG,
                             "VLLM_FL_LOG_LEVEL: invalid value '%s' (valid: DEBUG, INFO, WARNING, "
                             "ERROR)",
                             getenv("VLLM_FL_LOG_LEVEL"));
        out->level_set = true;
    }
    v = getenv("VLLM_FL_DISPATCH_DEBUG");
    if (v && *v) {
        /* vllm-plugin-FL turns it on for "1" only: 0 or 1, nothing else. */
        int rc = fld__parse_flag("VLLM_FL_DISPATCH_DEBUG", v, &out->dispatch_debug);
        if (rc)
            return rc;
    }
    return FLD_OK;
}

void fld__log_commit_env(const struct fld_log_env *env)
{
    if (!atomic_load(&level_overridden))
        atomic_store(&log_level, env->level);
    atomic_store(&dispatch_debug, env->dispatch_debug);
}

void fld__log_reset_override(void)
{
    atomic_store(&level_overridden, false);
}
