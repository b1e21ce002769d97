/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Re-entry from code the library calls out to: the thread-local mark, the
 * refusal, and the host's ways of running plugin code (see reentry.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "reentry.h"

_Atomic unsigned fld__callout_threads;

static _Thread_local struct fld_callout *current;

void fld__callout_enter(struct fld_callout *c, enum fld_callout_kind kind, const char *who,
                        const char *stage)
{
    c->kind = kind;
    c->who = who ? who : "?";
    c->stage = stage;
    c->refused[0] = '\0';
    c->outer = current;
    if (!current)
        atomic_fetch_add(&fld__callout_threads, 1u);
    current = c;
}

void fld__callout_leave(struct fld_callout *c)
{
    current = c->outer;
    if (!current)
        atomic_fetch_sub(&fld__callout_threads, 1u);
}

int fld__callout_refuse(const char *fn)
{
    struct fld_callout *c = current;
    if (!c)
        return FLD_OK;
    if (!c->refused[0])
        snprintf(c->refused, sizeof c->refused, "%s", fn);
    switch (c->kind) {
    case FLD_CALLOUT_PLUGIN_LOAD:
        return fld__fail(FLD_ESTATE,
                         "%s: called by plugin '%s' from %s while the host is loading it (plugin "
                         "code may call only the fld_registry_* functions, fld_set_error, fld_log "
                         "and functions without library state there)",
                         fn, c->who, c->stage);
    case FLD_CALLOUT_PLUGIN_HOOK:
        return fld__fail(FLD_ESTATE,
                         "%s: called by plugin '%s' from its '%s' device hook (a device hook may "
                         "call only fld_set_error, fld_log and functions without library state)",
                         fn, c->who, c->stage);
    case FLD_CALLOUT_APPLICATION:
        break;
    }
    return fld__fail(FLD_ESTATE,
                     "%s: called from the application's %s, which must not call back into the "
                     "library (it may run while the library is initialising, reloading or loading "
                     "a plugin, or holds its lock; it may call only fld_log, fld_set_error and "
                     "functions without library state)",
                     fn, c->stage);
}

bool fld__plugin_code_misbehaved(const struct fld_callout *c, char *why, size_t size)
{
    if (!c->refused[0])
        return false;
    snprintf(why, size,
             "%s called %s(), which plugins must not call while the host loads them (refused "
             "with FLD_ESTATE; see docs/plugin-authors.md)",
             c->stage, c->refused);
    return true;
}

void *fld__plugin_dlopen(const char *path, char *why, size_t size)
{
    struct fld_callout code;
    fld__plugin_code_enter(&code, path, "a static constructor (dlopen)");
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *e = dl ? NULL : dlerror();
    fld__callout_leave(&code);
    if (!dl) {
        snprintf(why, size, "dlopen failed: %s", e ? e : "unknown error");
        return NULL;
    }
    if (fld__plugin_code_misbehaved(&code, why, size)) {
        dlclose(dl);
        return NULL;
    }
    return dl;
}

bool fld__plugin_available(fld_available_fn fn, const char *plugin, const char **reason,
                           char *misbehaved, size_t size)
{
    *reason = "";
    if (size)
        misbehaved[0] = '\0';
    if (!fn)
        return true;
    struct fld_callout code;
    const char *why = NULL;
    fld__plugin_code_enter(&code, plugin, "is_available");
    bool ok = fn(&why);
    fld__callout_leave(&code);
    if (fld__plugin_code_misbehaved(&code, misbehaved, size)) {
        *reason = "is_available() called back into the library, which plugins must not do there "
                  "(counted as unavailable)";
        return false;
    }
    if (!ok)
        *reason = why && *why ? why : "is_available() returned false";
    return ok;
}
