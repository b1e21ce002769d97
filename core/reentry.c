/*
 * Re-entry from plugin code: the thread-local mark, the refusal, and the
 * host's ways of running plugin code (see reentry.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "reentry.h"

_Atomic unsigned fld__plugin_code_threads;

static _Thread_local struct fld_plugin_code *current;

void fld__plugin_code_enter(struct fld_plugin_code *c, const char *plugin, const char *stage)
{
    c->plugin = plugin ? plugin : "?";
    c->stage = stage;
    c->refused[0] = '\0';
    c->outer = current;
    if (!current)
        atomic_fetch_add(&fld__plugin_code_threads, 1u);
    current = c;
}

void fld__plugin_code_leave(struct fld_plugin_code *c)
{
    current = c->outer;
    if (!current)
        atomic_fetch_sub(&fld__plugin_code_threads, 1u);
}

int fld__plugin_code_refuse(const char *fn)
{
    struct fld_plugin_code *c = current;
    if (!c)
        return FLD_OK;
    if (!c->refused[0])
        snprintf(c->refused, sizeof c->refused, "%s", fn);
    return fld__fail(FLD_ESTATE,
                     "%s: called by plugin '%s' from %s while the host is loading it (plugin code "
                     "may call only the fld_registry_* functions, fld_set_error, fld_log and "
                     "functions without library state there)",
                     fn, c->plugin, c->stage);
}

bool fld__plugin_code_misbehaved(const struct fld_plugin_code *c, char *why, size_t size)
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
    struct fld_plugin_code code;
    fld__plugin_code_enter(&code, path, "a static constructor (dlopen)");
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *e = dl ? NULL : dlerror();
    fld__plugin_code_leave(&code);
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

bool fld__plugin_available(fld_available_fn fn, const char *plugin, const char **reason)
{
    *reason = "";
    if (!fn)
        return true;
    struct fld_plugin_code code;
    const char *why = NULL;
    fld__plugin_code_enter(&code, plugin, "is_available");
    bool ok = fn(&why);
    fld__plugin_code_leave(&code);
    char text[256];
    if (fld__plugin_code_misbehaved(&code, text, sizeof text)) {
        fld__log(FLD_LOG_WARNING, "plugin '%s': %s; counted as unavailable", code.plugin, text);
        *reason = "is_available() called back into the library, which plugins must not do there "
                  "(counted as unavailable)";
        return false;
    }
    if (!ok)
        *reason = why && *why ? why : "is_available() returned false";
    return ok;
}
