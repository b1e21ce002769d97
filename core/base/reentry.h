/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Re-entry from code the library calls out to. The host runs code that is
 * not its own at points where its state is half changed or its lock is held:
 *
 *   - a plugin's code while the host loads it: its static constructors
 *     (dlopen), its register_builtins and its availability checks run on the
 *     loading thread, under the host lock, with an initialisation, a reload
 *     or a load half done;
 *   - a loaded plugin's device hooks (alloc, free, copy, synchronize);
 *   - the application's callbacks: the log callback (any line, from any
 *     stage: a plugin rejected during fld_init(), a did-you-mean warning
 *     during a reload), and the callbacks of fld_foreach_plugin() and
 *     fld_foreach_impl(), which run under the host lock while the registry
 *     is walked.
 *
 * A call from there back into the library would re-enter that change: a
 * nested fld_init() or fld_policy_set() during the first initialisation
 * initialises again and frees the registry the outer one is filling, a
 * nested fld_shutdown() releases what the outer change goes on using, a
 * nested load grows the list a walk is reading, and so on.
 *
 * So the host marks the thread while such code runs ("a callout"). Every
 * entry point that needs the library's state (everything that initialises
 * lazily, and fld_init, fld_reload, fld_shutdown, fld_load_plugin,
 * fld_register_plugin, fld_policy_set, ...) refuses on a marked thread with
 * FLD_ESTATE, naming itself and whose code called it, and the innermost mark
 * remembers the refusal. For a plugin being loaded, the loader then rejects
 * the plugin (an availability check that was refused counts as
 * unavailable); an application callback that called in is the application's
 * fault, so when the log callback runs inside a plugin's register_builtins,
 * its refused call is its own and the plugin loads. What marked code may
 * call: the fld_registry_* functions (plugin code at load), fld_set_error,
 * fld_log, and the functions without state (fld_strerror, fld_last_error,
 * fld_device_name, fld_get_stream, ...). Other threads are not affected.
 *
 * Not marked: kernels and supports() predicates (they run outside the lock,
 * inside a reader section, and may call ops themselves; fld_shutdown() from
 * one is refused by inflight.h's count), and fld_foreach_config_field()'s
 * callback (a reader section, no lock).
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

/* Whose code a callout runs. */
enum fld_callout_kind {
    FLD_CALLOUT_PLUGIN_LOAD, /* a plugin's code while the host loads it */
    FLD_CALLOUT_PLUGIN_HOOK, /* a loaded plugin's device hook */
    FLD_CALLOUT_APPLICATION, /* a callback of the application */
};

/* One span of outside code on the calling thread (nestable). */
struct fld_callout {
    enum fld_callout_kind kind;
    const char *who;   /* the plugin's name (its file before the descriptor is read); "" for
                          the application */
    const char *stage; /* "register_builtins", "a static constructor", "is_available", "alloc",
                          "log callback", "fld_foreach_impl() callback" */
    char refused[64];  /* the first entry point it called, "" when none */
    struct fld_callout *outer;
};

/* How many threads are inside a callout now; read by fld__ensure_init()'s fast path. */
extern _Atomic unsigned fld__callout_threads;

void fld__callout_enter(struct fld_callout *c, enum fld_callout_kind kind, const char *who,
                        const char *stage);
void fld__callout_leave(struct fld_callout *c);

/* The common cases of fld__callout_enter(). */
static inline void fld__plugin_code_enter(struct fld_callout *c, const char *plugin,
                                          const char *stage)
{
    fld__callout_enter(c, FLD_CALLOUT_PLUGIN_LOAD, plugin, stage);
}
static inline void fld__app_callback_enter(struct fld_callout *c, const char *what)
{
    fld__callout_enter(c, FLD_CALLOUT_APPLICATION, "", what);
}

/*
 * FLD_OK when the calling thread is not inside a callout; else records fn
 * in the innermost one and returns FLD_ESTATE with "fn: called by plugin 'x'
 * from its stage ..." or "fn: called from the application's log callback ...".
 */
int fld__callout_refuse(const char *fn);

/* "<stage> called <fn>(), ..." when plugin code c made a refused call: true, why filled. */
bool fld__plugin_code_misbehaved(const struct fld_callout *c, char *why, size_t size);

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
 * when it says no, or when it called into the library; then misbehaved
 * (size bytes) says which function it called, for the caller's WARNING, and
 * is "" otherwise.
 */
bool fld__plugin_available(fld_available_fn fn, const char *plugin, const char **reason,
                           char *misbehaved, size_t size);

#endif
