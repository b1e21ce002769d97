/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry: validated implementation records grouped by op, the plugin
 * records, and the staging registry a plugin fills during register_builtins
 * (committed all-or-nothing). All functions here expect the host lock held.
 */
#ifndef FLD_CORE_REGISTRY_H
#define FLD_CORE_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include <fldispatch/binding.h>

#include "declarations.h"
#include "ops.h"

/* A plugin's device hooks for one device type, with their availability. */
struct fld_hook_rec {
    fld_device_hooks hooks; /* zero past what the plugin's struct_size gave */
    /* Evaluated once per process: 0 unknown, 1 yes, -1 no. */
    _Atomic int available;
    const char *unavailable_reason;
};

struct fld_plugin_rec {
    char *name;
    char *path; /* "(built-in)" for the library's own and in-process plugins */
    char *version;
    unsigned abi_major, abi_minor;
    bool in_tree;
    fld_plugin_status status;
    char *reason;
    char *detail; /* the plugin's own status line, "" when none */
    size_t n_impls;
    struct fld_hook_rec *hooks[FLD_NDEVICES]; /* by FLD_DEV_*; NULL where none (always CPU) */
    void *dl_handle;                          /* NULL unless dlopen()ed */
    dev_t st_dev;                             /* identity of the file, to load each file once */
    ino_t st_ino;
    bool binding; /* registered by a language binding (binding_registration.c), not loaded */
    /* The registry its register_builtins filled, kept (closed) until
     * fld_shutdown(): a plugin that keeps the pointer and calls the
     * fld_registry_* functions later is refused through it. NULL until the
     * first load (discovery.c). */
    struct fld_registry *staging;
    struct fld_plugin_rec *next;
};

struct fld_impl_rec {
    struct fld_op_s *op; /* NULL while staged */
    char *staged_op;     /* the op name while staged */
    char *impl_id;
    /* "impl_id@plugin": the name shown and matched when another plugin
     * registered the same impl_id for the op (shared_id, set at commit). */
    char *qualified;
    _Atomic bool shared_id;
    fld_kind kind;
    char *vendor;
    int priority;
    uint32_t devices, dtypes;
    fld_kernel_fn fn; /* NULL for a binding implementation, which runs binding_fn */
    fld_binding_kernel_fn binding_fn;
    void *binding_ctx;
    char *binding_unavailable; /* a binding implementation's reason it cannot run, or NULL */
    fld_available_fn is_available;
    fld_supports_fn supports;
    struct fld_plugin_rec *plugin;
    /* Availability, evaluated once per process: 0 unknown, 1 yes, -1 no. */
    _Atomic int available;
    const char *unavailable_reason;
    /* Its counter cell per cache slot, once stats counted a call (stats.c). */
    struct fld_stats_cell *_Atomic stats[FLD_NSLOTS];
};

/* The staging registry behind the plugin API's fld_registry. */
struct fld_registry {
    struct fld_plugin_rec *plugin;
    struct fld_impl_rec **staged;
    size_t n, cap;
    /* Index of the staged records by (op, impl_id) for the duplicate check:
     * open addressing, entries are staged index + 1, 0 empty; at most half full. */
    size_t *dup;
    size_t dup_mask;
    int first_error; /* FLD_OK or the first failing registration's status */
    char *detail;    /* staged fld_registry_set_detail() text, or NULL */
    struct fld_hook_rec *hooks[FLD_NDEVICES]; /* staged device hooks */
    struct fld_decls decls;                   /* staged signatures (fld_registry_declare_op) */
    char error[1024];
    /* Open from fld__registry_begin() to the commit or discard, for the
     * thread that began it: the fld_registry_* functions refuse any other
     * call (FLD_ESTATE) without touching the rest of the record. */
    _Atomic bool open;
    pthread_t thread;
    char who[320]; /* "plugin 'name' (path)", for those refusals */
};

/* Opens reg for plugin on the calling thread. */
void fld__registry_begin(struct fld_registry *reg, struct fld_plugin_rec *plugin);
/* Closes reg, moves the staged records into their ops, bumps the generation. */
int fld__registry_commit(struct fld_registry *reg);
/* Closes reg and frees what it staged. */
void fld__registry_discard(struct fld_registry *reg);

/*
 * Stages a binding implementation (binding.h): the checks of
 * fld_registry_register() on impl (whose fn is ignored), then fn and ctx.
 */
int fld__registry_register_binding(struct fld_registry *reg, const fld_impl *impl,
                                   fld_binding_kernel_fn fn, void *ctx, const char *unavailable);

/* Whether a language binding claimed VLLM_FL_PLUGIN_MODULES's module names
 * (fld_binding_claim_module_names(), binding_registration.c); read by discovery. */
bool fld__binding_claims_modules(void);

/* Whether an impl can run here; evaluates is_available once. */
bool fld__impl_available(struct fld_impl_rec *impl, const char **reason);
/* The name of impl in resolutions, logs and failure records: its impl_id, or
 * "impl_id@plugin" when another plugin registered the same impl_id for its op. */
const char *fld__impl_name(const struct fld_impl_rec *impl);
/* Whether name addresses impl: its impl_id (any plugin's), or exactly "impl_id@plugin". */
bool fld__impl_named(const struct fld_impl_rec *impl, const char *name);
/* Whether a plugin's device hooks can be used here; evaluates is_available once. */
bool fld__hooks_available(struct fld_hook_rec *h, const char *plugin, const char **reason);
/* Marks every impl's and device hook's availability unknown (after fork). */
void fld__registry_forget_availability(void);

/* Plugin records in load order. */
struct fld_plugin_rec *fld__plugins_first(void);
struct fld_plugin_rec *fld__plugin_new(const char *name, const char *path);
void fld__plugin_set_status(struct fld_plugin_rec *p, fld_plugin_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Frees every plugin and impl record (shutdown); dlcloses handles. */
void fld__registry_shutdown(void);

/* "flagos", "vendor", "reference". */
const char *fld__kind_token(fld_kind k);

/*
 * Runs desc->register_builtins(reg) marked as plugin code (reentry.h), and judges the outcome:
 * FLD_OK, or FLD_EPLUGIN with why ("register_builtins failed: ...", "invalid implementation record:
 * ...", "register_builtins called fld_init(), ..."). The caller discards reg on failure.
 */
int fld__plugin_register(const fld_plugin_descriptor *desc, struct fld_registry *reg, char *why,
                         size_t size);

#endif
