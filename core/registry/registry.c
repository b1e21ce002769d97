/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry. A plugin registers into a staging struct fld_registry; the
 * host commits the staged records into the ops' lists only when the whole
 * plugin succeeded, so a failing plugin leaves nothing behind. Records are
 * immutable once committed and live until fld_shutdown(), so cached chains
 * may point at them without reference counting.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"
#include "error.h"
#include "inflight.h"
#include "escape.h"
#include "host.h"
#include "log.h"
#include "reentry.h"
#include "registry.h"

#define NAME_MAX_LEN 96

static struct fld_plugin_rec *plugins_head, *plugins_tail;

const char *fld__kind_token(fld_kind k)
{
    switch (k) {
    case FLD_KIND_DEFAULT:
        return "flagos";
    case FLD_KIND_VENDOR:
        return "vendor";
    case FLD_KIND_REFERENCE:
        return "reference";
    }
    return "?";
}

const char *fld_plugin_status_name(fld_plugin_status status)
{
    switch (status) {
    case FLD_PLUGIN_LOADED:
        return "loaded";
    case FLD_PLUGIN_UNAVAILABLE:
        return "unavailable";
    case FLD_PLUGIN_REJECTED:
        return "rejected";
    case FLD_PLUGIN_SKIPPED:
        return "skipped";
    }
    return NULL;
}

static const char *kind_prefix(fld_kind k)
{
    switch (k) {
    case FLD_KIND_DEFAULT:
        return "default";
    case FLD_KIND_VENDOR:
        return "vendor";
    case FLD_KIND_REFERENCE:
        return "reference";
    }
    return NULL;
}

static bool valid_name(const char *s, const char *extra)
{
    size_t n = 0;
    if (!s || !*s)
        return false;
    for (; *s; s++, n++) {
        unsigned char c = (unsigned char)*s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || strchr(extra, c);
        if (!ok || n >= NAME_MAX_LEN)
            return false;
    }
    return true;
}

static void impl_free(struct fld_impl_rec *r)
{
    if (!r)
        return;
    free(r->staged_op);
    free(r->impl_id);
    free(r->qualified);
    free(r->vendor);
    free(r->binding_unavailable);
    free(r);
}

/*
 * An op's records are kept in ascending impl_id order (the records of one
 * impl_id from several plugins side by side, in commit order), so that
 * finding one and committing many stay near-linear in the op's records:
 * binary search, and one merge per op and commit.
 */

/* The index of op's first record whose impl_id is not below impl_id. */
static size_t lower_bound(const struct fld_op_s *op, const char *impl_id)
{
    size_t lo = 0, hi = op->n_impls;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(op->impls[mid]->impl_id, impl_id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The committed record of (op, impl_id) that plugin registered, or NULL. */
static struct fld_impl_rec *find_own_impl(struct fld_op_s *op, const char *impl_id,
                                          const struct fld_plugin_rec *plugin)
{
    if (!op)
        return NULL;
    for (size_t i = lower_bound(op, impl_id);
         i < op->n_impls && strcmp(op->impls[i]->impl_id, impl_id) == 0; i++)
        if (op->impls[i]->plugin == plugin)
            return op->impls[i];
    return NULL;
}

const char *fld__impl_name(const struct fld_impl_rec *impl)
{
    return atomic_load_explicit(&impl->shared_id, memory_order_relaxed) ? impl->qualified
                                                                        : impl->impl_id;
}

bool fld__impl_named(const struct fld_impl_rec *impl, const char *name)
{
    return strcmp(impl->impl_id, name) == 0 || strcmp(impl->qualified, name) == 0;
}

/* Marks r's committed (op, impl_id) records as sharing the id when there are several. */
static void mark_shared_id(const struct fld_impl_rec *r)
{
    struct fld_op_s *op = r->op;
    size_t first = lower_bound(op, r->impl_id), end = first;
    while (end < op->n_impls && strcmp(op->impls[end]->impl_id, r->impl_id) == 0)
        end++;
    for (size_t i = first; end - first > 1 && i < end; i++)
        atomic_store_explicit(&op->impls[i]->shared_id, true, memory_order_relaxed);
}

void fld__registry_begin(struct fld_registry *reg, struct fld_plugin_rec *plugin)
{
    memset(reg, 0, sizeof *reg);
    reg->plugin = plugin;
    reg->thread = pthread_self();
    if (plugin)
        snprintf(reg->who, sizeof reg->who, "plugin '%s' (%s)", plugin->name,
                 plugin->path ? plugin->path : "?");
    else
        snprintf(reg->who, sizeof reg->who, "the library");
    atomic_store_explicit(&reg->open, true, memory_order_release);
}

static void registry_close(struct fld_registry *reg)
{
    atomic_store_explicit(&reg->open, false, memory_order_release);
}

/*
 * FLD_OK when reg is open and the caller is the thread that fills it. Else
 * FLD_ESTATE naming fn and the plugin, and nothing else of reg is read or
 * written: a plugin may have kept the pointer past its register_builtins
 * (to call from a kernel, say), or passed it to a thread of its own.
 */
static int registry_usable(const struct fld_registry *reg, const char *fn)
{
    if (!atomic_load_explicit(&reg->open, memory_order_acquire))
        return fld__fail(FLD_ESTATE,
                         "%s: called by %s after its register_builtins returned (a registry is "
                         "valid only inside register_builtins; nothing was registered)",
                         fn, reg->who);
    if (!pthread_equal(reg->thread, pthread_self()))
        return fld__fail(FLD_ESTATE,
                         "%s: called by %s on another thread than its register_builtins (a "
                         "registry is valid only on the thread that runs register_builtins; "
                         "nothing was registered)",
                         fn, reg->who);
    return FLD_OK;
}

static void dup_free(struct fld_registry *reg)
{
    free(reg->dup);
    reg->dup = NULL;
    reg->dup_mask = 0;
}

void fld__registry_discard(struct fld_registry *reg)
{
    registry_close(reg);
    dup_free(reg);
    for (size_t i = 0; i < reg->n; i++)
        impl_free(reg->staged[i]);
    free(reg->staged);
    reg->staged = NULL;
    reg->n = reg->cap = 0;
    free(reg->detail);
    reg->detail = NULL;
    for (int d = 0; d < FLD_NDEVICES; d++) {
        free(reg->hooks[d]);
        reg->hooks[d] = NULL;
    }
    fld__decls_discard(&reg->decls);
}

/* Records a failed registration call (the plugin's first error); returns status. */
__attribute__((format(printf, 3, 4))) static int registry_fail(struct fld_registry *reg, int status,
                                                               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fld__failv(status, fmt, ap);
    va_end(ap);
    if (reg->first_error == FLD_OK) {
        reg->first_error = status;
        fld__error_copy(reg->error, sizeof reg->error);
    }
    return status;
}

/* ---- the staged records by (op, impl_id): duplicate checks in O(1) ------- */

static size_t dup_hash(const char *op, const char *impl_id)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over "op\0impl_id" */
    for (const char *c = op;; c++) {
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        if (!*c)
            break;
    }
    for (const char *c = impl_id; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return (size_t)(h ^ (h >> 32));
}

/* The staged record of (op, impl_id), or NULL. */
static const struct fld_impl_rec *dup_find(const struct fld_registry *reg, const char *op,
                                           const char *impl_id)
{
    if (!reg->dup)
        return NULL;
    for (size_t i = dup_hash(op, impl_id) & reg->dup_mask; reg->dup[i];
         i = (i + 1) & reg->dup_mask) {
        const struct fld_impl_rec *s = reg->staged[reg->dup[i] - 1];
        if (strcmp(s->impl_id, impl_id) == 0 && strcmp(s->staged_op, op) == 0)
            return s;
    }
    return NULL;
}

static void dup_put(size_t *dup, size_t mask, const struct fld_impl_rec *r, size_t index)
{
    size_t i = dup_hash(r->staged_op, r->impl_id) & mask;
    while (dup[i])
        i = (i + 1) & mask;
    dup[i] = index + 1;
}

/* Room in the index for one more record (at most half full); FLD_ENOMEM leaves it as it was. */
static int dup_reserve(struct fld_registry *reg)
{
    size_t cap = reg->dup ? reg->dup_mask + 1 : 0;
    if (2 * (reg->n + 1) <= cap)
        return FLD_OK;
    size_t new_cap = cap ? 2 * cap : 32;
    size_t *dup = calloc(new_cap, sizeof *dup);
    if (!dup)
        return FLD_ENOMEM;
    for (size_t k = 0; k < reg->n; k++)
        dup_put(dup, new_cap - 1, reg->staged[k], k);
    free(reg->dup);
    reg->dup = dup;
    reg->dup_mask = new_cap - 1;
    return FLD_OK;
}

static int validate_record(struct fld_registry *reg, const fld_impl *impl)
{
    const char *id = impl->impl_id ? impl->impl_id : "";
    if (!valid_name(impl->op, "."))
        return registry_fail(reg, FLD_EINVAL,
                             "impl '%s': invalid op name '%s' (letters, digits, '_' and '.')", id,
                             impl->op ? impl->op : "(null)");
    if (!*id)
        return registry_fail(reg, FLD_EINVAL, "impl_id '' for op '%s' is empty", impl->op);
    const char *prefix = kind_prefix(impl->kind);
    if (!prefix)
        return registry_fail(reg, FLD_EINVAL, "impl '%s' for op '%s': invalid kind %d", id,
                             impl->op, (int)impl->kind);
    size_t plen = strlen(prefix);
    if (!valid_name(id, ".-") || strncmp(id, prefix, plen) != 0 || id[plen] != '.' || !id[plen + 1])
        return registry_fail(
            reg, FLD_EINVAL,
            "impl_id '%s' for op '%s' must look like '%s.<name>' (the prefix names "
            "its kind: default, vendor or reference)",
            id, impl->op, prefix);
    if (impl->kind == FLD_KIND_VENDOR && (!impl->vendor || !*impl->vendor))
        return registry_fail(reg, FLD_EINVAL,
                             "impl '%s' for op '%s': kind VENDOR requires a vendor name", id,
                             impl->op);
    if (impl->vendor && !valid_name(impl->vendor, ".-"))
        return registry_fail(reg, FLD_EINVAL, "impl '%s' for op '%s': invalid vendor name '%s'", id,
                             impl->op, impl->vendor);
    if (!impl->fn)
        return registry_fail(reg, FLD_EINVAL, "impl '%s' for op '%s': fn is NULL", id, impl->op);
    if (!impl->devices || (impl->devices & ~FLD_DEVICE_MASK_ALL))
        return registry_fail(reg, FLD_EINVAL,
                             "impl '%s' for op '%s': device mask 0x%x is empty or "
                             "has unknown bits",
                             id, impl->op, impl->devices);
    if (!impl->dtypes || (impl->dtypes & ~FLD_DTYPE_MASK_ALL))
        return registry_fail(reg, FLD_EINVAL,
                             "impl '%s' for op '%s': dtype mask 0x%x is empty or "
                             "has unknown bits",
                             id, impl->op, impl->dtypes);
    if (dup_find(reg, impl->op, id))
        return registry_fail(reg, FLD_EINVAL,
                             "duplicate impl_id '%s' for op '%s' (registered twice by plugin '%s')",
                             id, impl->op, reg->plugin ? reg->plugin->name : "?");
    /* Another plugin's record of the same impl_id stays beside this one
     * (a vendor's own package beside the in-tree plugin of that vendor):
     * both are named "impl_id@plugin" and ranked by select.c. */
    if (find_own_impl(fld__op_find(impl->op), id, reg->plugin))
        return registry_fail(
            reg, FLD_EINVAL,
            "duplicate impl_id '%s' for op '%s' (already registered by the same plugin '%s')", id,
            impl->op, reg->plugin ? reg->plugin->name : "?");
    return FLD_OK;
}

int fld_registry_set_detail(fld_registry *reg, const char *fmt, ...)
{
    if (!reg || !fmt)
        return fld__fail(FLD_EINVAL, "fld_registry_set_detail: argument '%s' is NULL",
                         reg ? "fmt" : "reg");
    int rc = registry_usable(reg, "fld_registry_set_detail");
    if (rc)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0)
        return fld__fail(FLD_ENOMEM, "fld_registry_set_detail: out of memory");
    for (char *c = text; *c; c++)
        if (*c == '\n' || *c == '\r' || *c == '\t')
            *c = ' ';
    if (fld__needs_escape(text)) {
        /* An escape is at most four bytes per byte of text. */
        char *escaped = malloc(4 * (size_t)n + 1);
        if (!escaped) {
            free(text);
            return fld__fail(FLD_ENOMEM, "fld_registry_set_detail: out of memory");
        }
        fld__escape(escaped, 4 * (size_t)n + 1, text);
        free(text);
        text = escaped;
    }
    free(reg->detail);
    reg->detail = text;
    return FLD_OK;
}

int fld_registry_set_device_hooks(fld_registry *reg, const fld_device_hooks *hooks)
{
    if (!reg || !hooks)
        return fld__fail(FLD_EINVAL, "fld_registry_set_device_hooks: argument '%s' is NULL",
                         reg ? "hooks" : "reg");
    int rc = registry_usable(reg, "fld_registry_set_device_hooks");
    if (rc)
        return rc;
    /* The ABI 1.1 record ends with synchronize; newer plugins may pass more. */
    const size_t min_size = offsetof(fld_device_hooks, synchronize) + sizeof hooks->synchronize;
    const char *plugin = reg->plugin ? reg->plugin->name : "?";
    if (hooks->struct_size < min_size)
        return registry_fail(reg, FLD_EINVAL,
                             "plugin '%s': device hooks: struct_size %zu is smaller than ABI 1.1's "
                             "%zu (set it to sizeof(fld_device_hooks))",
                             plugin, hooks->struct_size, min_size);
    int dev = fld__device_index(hooks->device_type);
    if (dev < 0 || dev == FLD_DEV_CPU)
        return registry_fail(
            reg, FLD_EINVAL, "plugin '%s': device hooks: device_type %d is %s (valid: %s)", plugin,
            hooks->device_type,
            dev == FLD_DEV_CPU ? "the CPU, which the host serves itself" : "unknown",
            fld__device_text(FLD_DEVICE_TEXT_ACCEL_CODES));
    if (reg->hooks[dev])
        return registry_fail(reg, FLD_EINVAL, "plugin '%s': device hooks for %s registered twice",
                             plugin, fld_device_name(hooks->device_type));
    struct fld_hook_rec *h = calloc(1, sizeof *h);
    if (!h)
        return registry_fail(reg, FLD_ENOMEM, "plugin '%s': out of memory", plugin);
    size_t n = hooks->struct_size < sizeof h->hooks ? hooks->struct_size : sizeof h->hooks;
    memcpy(&h->hooks, hooks, n);
    h->hooks.struct_size = sizeof h->hooks;
    reg->hooks[dev] = h;
    return FLD_OK;
}

/* Stages op's signature (declarations.c), declared by the plugin this registry fills. */
int fld_registry_declare_op(fld_registry *reg, const char *op, const char *schema)
{
    if (!reg)
        return fld__fail(FLD_EINVAL, "fld_registry_declare_op: argument 'reg' is NULL");
    int rc = registry_usable(reg, "fld_registry_declare_op");
    if (rc)
        return rc;
    char by[400], err[sizeof reg->error];
    if (!reg->plugin)
        snprintf(by, sizeof by, "the library");
    else
        snprintf(by, sizeof by, "plugin '%s' (%s)", reg->plugin->name,
                 reg->plugin->path ? reg->plugin->path : "?");
    rc = fld__decls_stage(&reg->decls, op, schema, by, err, sizeof err);
    return rc ? registry_fail(reg, rc, "%s", err) : FLD_OK;
}

int fld_registry_register(fld_registry *reg, const fld_impl *impl)
{
    if (!reg)
        return fld__fail(FLD_EINVAL, "fld_registry_register: argument 'reg' is NULL");
    int rc = registry_usable(reg, "fld_registry_register");
    if (rc)
        return rc;
    if (!impl)
        return registry_fail(reg, FLD_EINVAL, "fld_registry_register: argument 'impl' is NULL");
    rc = validate_record(reg, impl);
    if (rc)
        return rc;
    if (reg->n == reg->cap) {
        size_t cap = reg->cap ? reg->cap * 2 : 16;
        struct fld_impl_rec **s = realloc(reg->staged, cap * sizeof *s);
        if (!s)
            return registry_fail(reg, FLD_ENOMEM, "out of memory registering '%s'", impl->impl_id);
        reg->staged = s;
        reg->cap = cap;
    }
    if (dup_reserve(reg) != FLD_OK)
        return registry_fail(reg, FLD_ENOMEM, "out of memory registering '%s'", impl->impl_id);
    struct fld_impl_rec *r = calloc(1, sizeof *r);
    if (!r)
        return registry_fail(reg, FLD_ENOMEM, "out of memory registering '%s'", impl->impl_id);
    r->staged_op = strdup(impl->op);
    r->impl_id = strdup(impl->impl_id);
    r->vendor = impl->vendor ? strdup(impl->vendor) : NULL;
    if (asprintf(&r->qualified, "%s@%s", impl->impl_id, reg->plugin ? reg->plugin->name : "?") < 0)
        r->qualified = NULL;
    if (!r->staged_op || !r->impl_id || !r->qualified || (impl->vendor && !r->vendor)) {
        impl_free(r);
        return registry_fail(reg, FLD_ENOMEM, "out of memory registering '%s'", impl->impl_id);
    }
    r->kind = impl->kind;
    r->priority = impl->priority;
    r->devices = impl->devices;
    r->dtypes = impl->dtypes;
    r->fn = impl->fn;
    r->is_available = impl->is_available;
    r->supports = impl->supports;
    r->plugin = reg->plugin;
    dup_put(reg->dup, reg->dup_mask, r, reg->n);
    reg->staged[reg->n++] = r;
    return FLD_OK;
}

/* What validate_record() sees as fn of a binding implementation, which has none. */
static int binding_fn_placeholder(const void *args)
{
    (void)args;
    return FLD_EUNSUPPORTED;
}

int fld__registry_register_binding(struct fld_registry *reg, const fld_impl *impl,
                                   fld_binding_kernel_fn fn, void *ctx, const char *unavailable)
{
    if (!impl)
        return registry_fail(reg, FLD_EINVAL, "fld_binding_register: an implementation is NULL");
    if (!fn)
        return registry_fail(reg, FLD_EINVAL, "impl '%s' for op '%s': fn is NULL",
                             impl->impl_id ? impl->impl_id : "", impl->op ? impl->op : "(null)");
    fld_impl copy = *impl;
    copy.fn = binding_fn_placeholder;
    copy.is_available = NULL;
    copy.supports = NULL;
    int rc = fld_registry_register(reg, &copy);
    if (rc)
        return rc;
    struct fld_impl_rec *r = reg->staged[reg->n - 1];
    if (unavailable && !(r->binding_unavailable = strdup(unavailable))) {
        reg->n--;
        impl_free(r);
        /* the duplicate index still names it: rebuild it without */
        dup_free(reg);
        if (dup_reserve(reg) == FLD_OK)
            for (size_t k = 0; k < reg->n; k++)
                dup_put(reg->dup, reg->dup_mask, reg->staged[k], k);
        return registry_fail(reg, FLD_ENOMEM, "out of memory registering '%s'", impl->impl_id);
    }
    r->fn = NULL;
    r->binding_fn = fn;
    r->binding_ctx = ctx;
    return FLD_OK;
}

/* Staged records by op, then impl_id (unique within one plugin's staging). */
static int by_op_and_id(const void *a, const void *b)
{
    const struct fld_impl_rec *x = *(struct fld_impl_rec *const *)a;
    const struct fld_impl_rec *y = *(struct fld_impl_rec *const *)b;
    if (x->op != y->op)
        return (uintptr_t)x->op < (uintptr_t)y->op ? -1 : 1;
    return strcmp(x->impl_id, y->impl_id);
}

/*
 * Merges add[0..k), sorted by impl_id, into op's sorted records, from the
 * back so that no record moves twice; an impl_id already there keeps its
 * earlier records first. Room must have been reserved.
 */
static void merge_sorted(struct fld_op_s *op, struct fld_impl_rec *const *add, size_t k)
{
    size_t i = op->n_impls, j = k, out = op->n_impls + k;
    while (j > 0) {
        if (i > 0 && strcmp(op->impls[i - 1]->impl_id, add[j - 1]->impl_id) > 0)
            op->impls[--out] = op->impls[--i];
        else
            op->impls[--out] = add[--j];
    }
    op->n_impls += k;
}

int fld__registry_commit(struct fld_registry *reg)
{
    registry_close(reg);
    /*
     * Intern every op and reserve room first, so nothing fails half-way:
     * each op grows by what this plugin adds to it (at least doubling, so
     * many plugins adding to one op stay linear). r->op is set here; a
     * failure leaves the records staged, to be discarded.
     */
    int rc = fld__decls_prepare(&reg->decls);
    for (size_t i = 0; rc == FLD_OK && i < reg->n; i++) {
        struct fld_impl_rec *r = reg->staged[i];
        r->op = fld__op_intern(r->staged_op);
        if (!r->op) {
            rc = FLD_ENOMEM;
            break;
        }
        r->op->n_staged = 0;
    }
    for (size_t i = 0; rc == FLD_OK && i < reg->n; i++)
        reg->staged[i]->op->n_staged++;
    for (size_t i = 0; rc == FLD_OK && i < reg->n; i++) {
        struct fld_op_s *op = reg->staged[i]->op;
        size_t need = op->n_impls + op->n_staged;
        if (need > op->cap_impls) {
            size_t cap = 2 * op->cap_impls > need ? 2 * op->cap_impls : need;
            struct fld_impl_rec **v = realloc(op->impls, cap * sizeof *v);
            if (!v) {
                rc = FLD_ENOMEM;
                break;
            }
            op->impls = v;
            op->cap_impls = cap;
        }
    }
    if (rc != FLD_OK) {
        for (size_t i = 0; i < reg->n; i++)
            reg->staged[i]->op = NULL;
        return fld__fail(FLD_ENOMEM, "out of memory committing plugin '%s'",
                         reg->plugin ? reg->plugin->name : "?");
    }
    dup_free(reg);
    fld__decls_commit(&reg->decls);
    if (reg->n > 1)
        qsort(reg->staged, reg->n, sizeof *reg->staged, by_op_and_id);
    for (size_t i = 0, k; i < reg->n; i += k) {
        for (k = 1; i + k < reg->n && reg->staged[i + k]->op == reg->staged[i]->op; k++)
            ;
        merge_sorted(reg->staged[i]->op, reg->staged + i, k);
    }
    for (size_t i = 0; i < reg->n; i++) {
        struct fld_impl_rec *r = reg->staged[i];
        free(r->staged_op);
        r->staged_op = NULL;
        mark_shared_id(r);
    }
    if (reg->plugin) {
        reg->plugin->n_impls += reg->n;
        if (reg->detail) {
            free(reg->plugin->detail);
            reg->plugin->detail = reg->detail;
            reg->detail = NULL;
        }
        for (int d = 0; d < FLD_NDEVICES; d++) {
            if (reg->hooks[d]) {
                free(reg->plugin->hooks[d]);
                reg->plugin->hooks[d] = reg->hooks[d];
                reg->hooks[d] = NULL;
            }
        }
    }
    for (int d = 0; d < FLD_NDEVICES; d++) {
        free(reg->hooks[d]);
        reg->hooks[d] = NULL;
    }
    free(reg->detail);
    reg->detail = NULL;
    free(reg->staged);
    reg->staged = NULL;
    reg->n = reg->cap = 0;
    fld__bump_generation();
    return FLD_OK;
}

bool fld__impl_available(struct fld_impl_rec *impl, const char **reason)
{
    int a = atomic_load(&impl->available);
    if (a == 0) {
        const char *why = impl->binding_unavailable;
        char misbehaved[256] = "";
        const char *plugin = impl->plugin ? impl->plugin->name : "?";
        bool ok = impl->binding_unavailable
                      ? false
                      : fld__plugin_available(impl->is_available, plugin, &why, misbehaved,
                                              sizeof misbehaved);
        if (misbehaved[0])
            fld__log(FLD_LOG_WARNING, "plugin '%s': %s; counted as unavailable", plugin,
                     misbehaved);
        impl->unavailable_reason = why;
        a = ok ? 1 : -1;
        atomic_store(&impl->available, a);
        if (!ok)
            fld__log(FLD_LOG_DEBUG, "Implementation '%s' not available for op '%s': %s",
                     impl->impl_id, impl->op->name, impl->unavailable_reason);
    }
    if (reason)
        *reason = a > 0 ? "" : impl->unavailable_reason;
    return a > 0;
}

static void forget_op_availability(struct fld_op_s *op, void *user)
{
    for (size_t i = 0; i < op->n_impls; i++)
        atomic_store(&op->impls[i]->available, 0);
}

bool fld__hooks_available(struct fld_hook_rec *h, const char *plugin, const char **reason)
{
    int a = atomic_load(&h->available);
    if (a == 0) {
        const char *why;
        char misbehaved[256];
        bool ok = fld__plugin_available(h->hooks.is_available, plugin, &why, misbehaved,
                                        sizeof misbehaved);
        if (misbehaved[0])
            fld__log(FLD_LOG_WARNING, "plugin '%s': %s; counted as unavailable", plugin,
                     misbehaved);
        h->unavailable_reason = why;
        a = ok ? 1 : -1;
        atomic_store(&h->available, a);
    }
    if (reason)
        *reason = a > 0 ? "" : h->unavailable_reason;
    return a > 0;
}

void fld__registry_forget_availability(void)
{
    fld__op_foreach(forget_op_availability, NULL);
    for (struct fld_plugin_rec *p = plugins_head; p; p = p->next)
        for (int d = 0; d < FLD_NDEVICES; d++)
            if (p->hooks[d])
                atomic_store(&p->hooks[d]->available, 0);
}

struct fld_plugin_rec *fld__plugins_first(void)
{
    return plugins_head;
}

struct fld_plugin_rec *fld__plugin_new(const char *name, const char *path)
{
    struct fld_plugin_rec *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->name = strdup(name ? name : "");
    p->path = strdup(path ? path : "");
    p->version = strdup("");
    p->reason = strdup("");
    p->detail = strdup("");
    if (!p->name || !p->path || !p->version || !p->reason || !p->detail) {
        free(p->name);
        free(p->path);
        free(p->version);
        free(p->reason);
        free(p->detail);
        free(p);
        return NULL;
    }
    if (plugins_tail)
        plugins_tail->next = p;
    else
        plugins_head = p;
    plugins_tail = p;
    return p;
}

void fld__plugin_set_status(struct fld_plugin_rec *p, fld_plugin_status st, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fld__escape_in_place(buf, sizeof buf); /* paths and dlerror() text: escape.h */
    char *r = strdup(buf);
    if (r) {
        free(p->reason);
        p->reason = r;
    }
    p->status = st;
}

static void free_op_impls(struct fld_op_s *op, void *user)
{
    for (size_t i = 0; i < op->n_impls; i++)
        impl_free(op->impls[i]);
    op->n_impls = 0;
}

void fld__registry_shutdown(void)
{
    fld__op_foreach(free_op_impls, NULL);
    while (plugins_head) {
        struct fld_plugin_rec *p = plugins_head;
        plugins_head = p->next;
        if (p->dl_handle && !getenv("FLD_NO_DLCLOSE"))
            dlclose(p->dl_handle);
        free(p->name);
        free(p->path);
        free(p->version);
        free(p->reason);
        free(p->detail);
        for (int d = 0; d < FLD_NDEVICES; d++)
            free(p->hooks[d]);
        free(p->staging);
        free(p);
    }
    plugins_tail = NULL;
}

/* ---- iteration for tools ---------------------------------------------- */

struct plugin_avail {
    const struct fld_plugin_rec *plugin;
    size_t total, unavailable;
    const char *first_reason;
};

static void scan_plugin_impls(struct fld_op_s *op, void *user)
{
    struct plugin_avail *pa = user;
    for (size_t i = 0; i < op->n_impls; i++) {
        struct fld_impl_rec *r = op->impls[i];
        if (r->plugin != pa->plugin)
            continue;
        const char *why;
        pa->total++;
        if (!fld__impl_available(r, &why)) {
            pa->unavailable++;
            if (!pa->first_reason)
                pa->first_reason = why;
        }
    }
}

int fld_foreach_plugin(int (*fn)(const fld_plugin_info *info, void *user), void *user)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_plugin: argument 'fn' is NULL");
    fld__lock();
    rc = FLD_OK;
    for (struct fld_plugin_rec *p = plugins_head; p && !rc; p = p->next) {
        fld_plugin_info info = {
            .name = p->name,
            .path = p->path,
            .version = p->version,
            .abi_major = p->abi_major,
            .abi_minor = p->abi_minor,
            .in_tree = p->in_tree,
            .status = p->status,
            .reason = p->reason,
            .n_impls = p->n_impls,
            .detail = p->detail,
        };
        for (int d = 0; d < FLD_NDEVICES; d++)
            if (p->hooks[d])
                info.hook_devices |= 1u << d;
        if (p->status == FLD_PLUGIN_LOADED && p->n_impls) {
            struct plugin_avail pa = {.plugin = p};
            fld__op_foreach(scan_plugin_impls, &pa);
            if (pa.total && pa.unavailable == pa.total) {
                info.status = FLD_PLUGIN_UNAVAILABLE;
                info.reason = pa.first_reason;
            }
        }
        struct fld_callout callout;
        fld__app_callback_enter(&callout, "fld_foreach_plugin() callback");
        rc = fn(&info, user);
        fld__callout_leave(&callout);
    }
    fld__unlock();
    return rc;
}

struct impl_walk {
    int (*fn)(const fld_impl_info *info, void *user);
    void *user;
    int rc;
};

static void walk_op_impls(struct fld_op_s *op, void *user)
{
    struct impl_walk *w = user;
    for (size_t i = 0; i < op->n_impls && !w->rc; i++) {
        struct fld_impl_rec *r = op->impls[i];
        const char *why;
        bool ok = fld__impl_available(r, &why);
        fld_impl_info info = {
            .op = op->name,
            .impl_id = r->impl_id,
            .kind = fld__kind_token(r->kind),
            .vendor = r->kind == FLD_KIND_VENDOR ? r->vendor : NULL,
            .priority = r->priority,
            .devices = r->devices,
            .dtypes = r->dtypes,
            .plugin = r->plugin ? r->plugin->name : "",
            .in_tree = r->plugin && r->plugin->in_tree,
            .available = ok,
            .unavailable_reason = why,
        };
        /* Under the lock, in the middle of the walk: no call back in (reentry.h). */
        struct fld_callout callout;
        fld__app_callback_enter(&callout, "fld_foreach_impl() callback");
        w->rc = w->fn(&info, w->user);
        fld__callout_leave(&callout);
    }
}

int fld_foreach_impl(int (*fn)(const fld_impl_info *info, void *user), void *user)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_impl: argument 'fn' is NULL");
    struct impl_walk w = {fn, user, FLD_OK};
    fld__lock();
    fld__op_foreach(walk_op_impls, &w);
    fld__unlock();
    return w.rc;
}

int fld__plugin_register(const fld_plugin_descriptor *desc, struct fld_registry *reg, char *why,
                         size_t size)
{
    struct fld_callout code;
    /* Whatever the thread's last error was, it is not this plugin's. */
    fld__error_clear();
    fld__plugin_code_enter(&code, desc->name, "register_builtins");
    int rc = desc->register_builtins(reg);
    fld__callout_leave(&code);
    if (fld__plugin_code_misbehaved(&code, why, size))
        return FLD_EPLUGIN;
    if (rc == FLD_OK && reg->first_error == FLD_OK)
        return FLD_OK;
    if (rc != FLD_OK) {
        const char *detail = reg->first_error == FLD_OK ? fld_last_error() : reg->error;
        snprintf(why, size, "register_builtins failed: plugin '%s' returned status %d (%s)%s%s",
                 desc->name, rc, fld_strerror(rc), detail[0] ? ": " : "",
                 detail[0] ? detail : " without an error message (fld_set_error)");
    } else {
        snprintf(why, size, "invalid implementation record: %s", reg->error);
    }
    return FLD_EPLUGIN;
}
