/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Selection policy: the immutable value that selection reads, how it is
 * built from the environment and from fld_policy_set() (policy.c), and the
 * reads of the thread-local stack of scoped overrides (policy_override.c).
 *
 * A struct fld_policy is never changed once published: a change builds a new
 * one (fld__policy_clone + edit) and publishes it. Published policies are
 * kept until fld_shutdown(), so a reader holding a pointer never sees it
 * freed (reclaim.c keeps the retire list). The global policy pointer and
 * its publication are here too; lifecycle.c builds the policy of all sources.
 */
#ifndef FLD_CORE_POLICY_H
#define FLD_CORE_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "custom_ops.h"
#include "parse.h"
#include "policy_table.h"

enum fld_prefer { FLD_PREFER_FLAGOS = 0, FLD_PREFER_VENDOR = 1, FLD_PREFER_REFERENCE = 2 };

struct fld_manifest;

/* One member per row of the policy-field table (policy_table.h). */
struct fld_policy {
    enum fld_prefer prefer;
    bool strict;
    bool enabled;      /* VLLM_FL_PREFER_ENABLED: false keeps REFERENCE impls only */
    bool use_flaggems; /* USE_FLAGGEMS: false drops DEFAULT (flagos) impls */
    /* VLLM_FL_OOT_*, vllm-plugin-FL's meaning: which of the engine's own
     * layers an engine integration replaces with fldispatch's ops
     * (fld_oot_op_enabled()). Selection does not read them. */
    bool oot_enabled;
    /* VLLM_FL_EXTERNAL_*: false drops impls of plugins built outside this
     * project (out-of-tree plugins); the lists filter them by op. */
    bool external_enabled;
    struct fld_strlist allow_vendors; /* unset: every vendor allowed; lowercase */
    struct fld_strlist deny_vendors;  /* lowercase */
    struct fld_strlist flagos_whitelist, flagos_blacklist;     /* at most one set */
    struct fld_strlist oot_whitelist, oot_blacklist;           /* at most one set */
    struct fld_strlist external_whitelist, external_blacklist; /* at most one set */
    struct fld_orders per_op; /* each order carries its own source */
    struct fld_custom_ops custom_ops;
    /* VLLM_FL_MANIFEST: pinned (op, device, dtype) -> impl_id; shared,
     * immutable, reference-counted (see manifest_record.h); NULL when none. */
    struct fld_manifest *manifest;
    /* Where each field's value came from: "default", "VLLM_FL_PREFER",
     * "config/nvidia.yaml:3", "/path/policy.yaml:7", "fld_policy_set",
     * "scoped override", ... */
    char source[FLD_PF_COUNT][FLD_SOURCE_LEN];
    uint64_t serial; /* unique per policy object, for thread-local caches */
};

/* Whether op may be served by non-reference implementations (custom_ops). */
bool fld__policy_op_enabled(const struct fld_policy *p, const char *op, char *why, size_t why_size);

/* The name list (kinds NAMES, VENDORS) member of p that field f is, or
 * NULL if f is not one; the _mut form for a policy being built. */
const struct fld_strlist *fld__policy_list(const struct fld_policy *p, enum fld_policy_field f);
struct fld_strlist *fld__policy_list_mut(struct fld_policy *p, enum fld_policy_field f);

/*
 * The value kinds of the fields (FLD_PK_*, policy_table.h): how a value of
 * each is made, read from text, copied, merged, reported and freed. Every
 * operation on a field's value, whatever its kind, goes through its kind's
 * row (policy.c); a value is the member of struct fld_policy that the
 * field's row names, or a union fld_policy_value holding one.
 */
struct fld_policy_kind_ops {
    const char *name; /* "prefer", "flag", ...: FLD_POLICY_KINDS' name */
    size_t size;      /* of a value */
    /* Its values name ops, vendors or impls (the registry check reads them). */
    bool names;
    /* The built-in default into v. */
    void (*init)(void *v);
    /* The environment's and fld_policy_set()'s grammar into v (a temporary:
     * written only on success); FLD_ECONFIG naming what. */
    int (*parse)(const char *what, const char *text, void *v);
    /* A copy of src into dst (written only on success); FLD_ENOMEM. NULL:
     * the value is plain data, copied as it is. */
    int (*copy)(void *dst, const void *src);
    /* The items of add into dst (dst unchanged on FLD_ENOMEM). NULL: a
     * value of this kind is only ever replaced. */
    int (*merge)(void *dst, const void *add);
    /* Whether v sets nothing (an unset list, no orders). NULL: never. */
    bool (*empty)(const void *v);
    /* Records source in the items of v that carry their own (the orders).
     * NULL: none do. */
    void (*stamp)(void *v, const char *source);
    /* The value as fld_foreach_config_field() reports it, snprintf's
     * contract. NULL: reported item by item (the orders, one per op). */
    size_t (*format)(const void *v, char *buf, size_t size);
    /* NULL: nothing to free. */
    void (*free)(void *v);
};

/* Room for a value of any kind, for a value read before it is put in place. */
union fld_policy_value {
    enum fld_prefer prefer;
    bool flag;
    struct fld_strlist list;
    struct fld_orders orders;
    struct fld_custom_ops custom;
};

/* The kind of field f (f must be a field). */
const struct fld_policy_kind_ops *fld__policy_kind(enum fld_policy_field f);
/* The member of p that holds field f's value (f must be a field). */
const void *fld__policy_value(const struct fld_policy *p, enum fld_policy_field f);
/* Frees field f's value in p and moves *v (a value of f's kind, taken) in
 * its place. */
void fld__policy_put_value(struct fld_policy *p, enum fld_policy_field f, void *v);
/* Exchanges field f's values of a and b. */
void fld__policy_swap_value(struct fld_policy *a, struct fld_policy *b, enum fld_policy_field f);
/*
 * Makes delta's value of f what merging it into base's would give (base's
 * items with delta's added or replacing theirs), so that
 * fld__policy_swap_value() then moves it into base without a step that can
 * fail. Only for a kind with a merge; FLD_ENOMEM leaves delta as it was.
 */
int fld__policy_merge_onto(struct fld_policy *delta, const struct fld_policy *base,
                           enum fld_policy_field f);

/* Key names ("prefer", ...) and environment variables ("VLLM_FL_PREFER", ...)
 * of fields (the table's columns), NULL when f is not a field. */
const char *fld__policy_field_key(enum fld_policy_field f);
const char *fld__policy_field_env(enum fld_policy_field f);

/* Built-in defaults: prefer flagos, not strict, everything enabled, no lists. */
struct fld_policy *fld__policy_new_default(void);
struct fld_policy *fld__policy_clone(const struct fld_policy *p);
void fld__policy_free(struct fld_policy *p);

/* Records source as where field f's value came from (truncated to FLD_SOURCE_LEN). */
void fld__policy_set_source(struct fld_policy *p, enum fld_policy_field f, const char *source);

/*
 * Sets one field by key name (see fld_policy_set() in fldispatch.h) from a
 * string in that field's grammar, recording source. FLD_ECONFIG on an
 * unknown key or invalid value; on error p is unchanged.
 */
int fld__policy_set_field(struct fld_policy *p, const char *key, const char *value,
                          const char *source);
/* The same for field f, the messages naming what (a key, a function). */
int fld__policy_set_value(struct fld_policy *p, enum fld_policy_field f, const char *what,
                          const char *value, const char *source);

/* FLD_ESTATE naming what, when a manifest freezes the global policy; host lock held. */
int fld__policy_refuse_if_frozen(const char *what);

/* Cross-field checks (white- and blacklist both set): FLD_ECONFIG naming both sources. */
int fld__policy_check(const struct fld_policy *p);

/* The order of an op: its own per-op order, else the default order of prefer.
 * *source receives the field source ("VLLM_FL_PER_OP", "default", ...). */
const struct fld_order *fld__policy_order_for(const struct fld_policy *p, const char *op,
                                              const char **source);

/* Vendor filter (deny wins). On false, *why gets a static-free reason written to buf. */
bool fld__policy_vendor_allowed(const struct fld_policy *p, const char *vendor, char *why,
                                size_t why_size);
/* flagos white/blacklist and the OOT white/blacklist, by op name. */
bool fld__policy_flagos_allows_op(const struct fld_policy *p, const char *op, char *why,
                                  size_t why_size);
bool fld__policy_oot_allows_op(const struct fld_policy *p, const char *op, char *why,
                               size_t why_size);
bool fld__policy_external_allows_op(const struct fld_policy *p, const char *op, char *why,
                                    size_t why_size);

/* "prefer=flagos;strict=0;allow=a,b;deny=c;per=op=a|b;op2=c" (vendors and ops sorted). */
size_t fld__policy_fingerprint(const struct fld_policy *p, char *buf, size_t size);

/*
 * Thread-local scoped overrides, defined in policy_override.c (above
 * policy.c, which never calls them; declared here because dispatch reads
 * them with the global policy). fld__policy_override_top() returns the
 * calling thread's innermost override, or NULL. fld__override_threads counts
 * threads with a non-empty stack, so the hot path reads thread-local state
 * only when some thread has one.
 *
 * The override policies are built on top of the calling thread's effective
 * policy at push time.
 */
extern __attribute__((visibility("hidden"))) _Atomic unsigned fld__override_threads;
const struct fld_policy *fld__policy_override_top(void);

/* The global policy (never NULL after init). Without the host lock, read it
 * inside fld__read_begin()/fld__read_end() (reclaim.h). */
const struct fld_policy *fld__policy_global(void);
/* The policy of the calling thread: its innermost override, else global
 * (policy_override.c). */
const struct fld_policy *fld__policy_effective(void);
/* Makes p the global policy (takes ownership) and, once the library is
 * initialised, bumps the generation. Takes the host lock itself. */
void fld__policy_publish(struct fld_policy *p);
/* fld_shutdown(): frees the global policy; host lock held, no reader left. */
void fld__policy_unpublish(void);

#endif
