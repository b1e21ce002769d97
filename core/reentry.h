/*
 * Re-entry from plugin code. The host runs some of a plugin's code while it
 * is changing its own state: the plugin's static constructors (dlopen), its
 * register_builtins and its availability checks run on the loading thread,
 * under the host lock, with an initialisation, a reload or a load half done.
 * A call from there back into the library would re-enter that change: a
 * nested fld_init() during the first one initialises again and frees the
 * registry the outer load is filling (a double free), a nested discovery
 * loads the same plugin again, and so on.
 *
 * So the host marks the thread while such code runs. Every entry point that
 * needs the library's state (everything that initialises lazily, and
 * fld_init, fld_reload, fld_shutdown, fld_load_plugin, fld_register_plugin)
 * refuses on a marked thread with FLD_ESTATE, naming itself, the plugin and
 * the stage, and remembers the refusal; the loader then rejects the plugin
 * (an availability check that was refused counts as unavailable). What
 * plugin code may call there: the fld_registry_* functions, fld_set_error,
 * fld_log, and the functions without state (fld_strerror, fld_last_error,
 * fld_device_name, fld_dtype_index, ...). Other threads are not affected.
 *
 * The probe child (probe.c) runs plugin code through the same functions, so
 * `fldispatch doctor` and VLLM_FL_PLUGIN_PROBE judge a plugin as the host
 * does.
 */
#ifndef FLD_CORE_REENTRY_H
#define FLD_CORE_REENTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <fldispatch/plugin.h>

/* One span of plugin code on the calling thread (nestable). */
struct fld_plugin_code {
    const char *plugin; /* its name, or its file before the descriptor is read */
    const char *stage;  /* "register_builtins", "a static constructor", "is_available" */
    char refused[64];   /* the first entry point it called, "" when none */
    struct fld_plugin_code *outer;
};

/* How many threads are inside plugin code now; read by fld__ensure_init()'s fast path. */
extern _Atomic unsigned fld__plugin_code_threads;

void fld__plugin_code_enter(struct fld_plugin_code *c, const char *plugin, const char *stage);
void fld__plugin_code_leave(struct fld_plugin_code *c);

/*
 * FLD_OK when the calling thread is not inside plugin code; else records fn
 * and returns FLD_ESTATE with "fn: called by plugin 'x' from its stage ...".
 */
int fld__plugin_code_refuse(const char *fn);

/* "<stage> called <fn>(), ..." when c made a refused call: true, why filled. */
bool fld__plugin_code_misbehaved(const struct fld_plugin_code *c, char *why, size_t size);

/*
 * The host's ways of running plugin code, shared by discovery and the probe
 * child so that both judge a plugin alike:
 *
 * dlopen()s path (RTLD_NOW | RTLD_LOCAL) with its constructors marked.
 * NULL with the reason in why when dlopen fails or a constructor called into
 * the library (then the handle is closed again).
 */
void *fld__plugin_dlopen(const char *path, char *why, size_t size);

/*
 * Runs an availability check marked: fn NULL means available. false with
 * *reason (never NULL or empty then: the plugin's string or a static one)
 * when it says no, or when it called into the library (also logged at
 * WARNING with the function it called).
 */
bool fld__plugin_available(fld_available_fn fn, const char *plugin, const char **reason);

#endif
