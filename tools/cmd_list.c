/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch list [--verbose] [--strict] [--json]: every plugin seen (loaded
 * or not, with the reason) and every registered implementation with its
 * availability.
 *
 * The text is a summary, one line per plugin (name, version, origin,
 * status, implementations available of registered, a short reason);
 * --verbose adds each plugin's file, ABI, full reason and detail line, and
 * the table of implementations. --json is always complete.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "options.h"
#include "vec.h"

static const char list_usage[] =
    "Usage: fldispatch list [--verbose] [--strict] [--json]\n"
    "\n"
    "Lists the plugins in load order, one line each: name, version, origin\n"
    "(built-in, in-tree or out-of-tree), status (loaded, unavailable, rejected,\n"
    "skipped), implementations available here of those registered, and a short\n"
    "reason when not loaded or unavailable.\n"
    "\n"
    "  --verbose  also each plugin's file, ABI, full reason, detail line and the\n"
    "             devices it provides memory for, and every registered\n"
    "             implementation (op, impl_id, kind, vendor, priority, devices,\n"
    "             dtypes, plugin, availability)\n"
    "  --strict   exit status 1 when a plugin was rejected (a bad file, ABI or\n"
    "             registration; with VLLM_FL_PLUGIN_PROBE=1 also one that\n"
    "             crashed, hung or exited when probed)\n"
    "  --json     one JSON object {\"schema\", \"plugin_path\", \"plugins\": [...],\n"
    "             \"impls\": [...]}, complete with or without --verbose\n"
    "             (docs/schemas/list.schema.json)\n"
    "\n"
    "Exit status: 0, also when plugins were rejected (unless --strict); 1 with\n"
    "--strict and a rejected plugin, or when the library failed; 2 usage or\n"
    "configuration error.\n";

/* Reasons in the summary are cut to this many bytes (whole UTF-8 characters). */
#define SHORT_REASON 64

/* Implementations per plugin name, counted from the registry. */
struct plugin_count {
    char *plugin;
    size_t registered, available;
};

struct counts {
    struct plugin_count *items;
    size_t n, cap;
    size_t ops, impls, available; /* over the whole registry */
    char *last_op;
    bool oom;
};

static struct plugin_count *count_for(struct counts *c, const char *plugin)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->items[i].plugin, plugin) == 0)
            return &c->items[i];
    if (VEC_RESERVE(c->items, c->n, c->cap, 16) != 0)
        return NULL;
    char *name = strdup(plugin);
    if (!name)
        return NULL;
    c->items[c->n] = (struct plugin_count){name, 0, 0};
    return &c->items[c->n++];
}

static int count_impl(const fld_impl_info *m, void *user)
{
    struct counts *c = user;
    struct plugin_count *pc = count_for(c, m->plugin ? m->plugin : "");
    if (!pc) {
        c->oom = true;
        return 1;
    }
    pc->registered++;
    pc->available += m->available;
    c->impls++;
    c->available += m->available;
    /* fld_foreach_impl runs by op name, so a new name is a new op. */
    if (!c->last_op || strcmp(c->last_op, m->op) != 0) {
        free(c->last_op);
        if (!(c->last_op = strdup(m->op))) {
            c->oom = true;
            return 1;
        }
        c->ops++;
    }
    return 0;
}

static void counts_free(struct counts *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->items[i].plugin);
    free(c->items);
    free(c->last_op);
}

/* The walkers' callbacks return 0 but for a lack of memory, so a non-zero status is the library's.
 */
static int walk_failed(int rc, bool oom)
{
    if (oom) {
        fprintf(stderr, "fldispatch list: out of memory\n");
        return 1;
    }
    if (rc == 0)
        return 0;
    fprintf(stderr, "fldispatch list: %s\n",
            *fld_last_error() ? fld_last_error() : fld_strerror(rc));
    return 1;
}

static bool is_builtin(const fld_plugin_info *p)
{
    /* The library's own plugins (reference.c) have this instead of a file. */
    return p->path && strcmp(p->path, "(built-in)") == 0;
}

static const char *origin(const fld_plugin_info *p)
{
    return is_builtin(p) ? "built-in" : p->in_tree ? "in-tree" : "out-of-tree";
}

/* ---- the summary ------------------------------------------------------------- */

struct summary {
    const struct counts *counts;
    size_t rejected;
    size_t duplicates; /* files skipped as duplicates: counted, not listed */
    int name_width;    /* the longest name, within limits */
};

/* A file skipped because one of the same name came earlier in the search
 * path: a build tree or a wheel beside an installation finds every plugin
 * twice. The summary counts them; --verbose and --json list them. */
static bool is_duplicate(const fld_plugin_info *p)
{
    return p->status == FLD_PLUGIN_SKIPPED && p->reason &&
           strncmp(p->reason, "duplicate of ", 13) == 0;
}

/* The closing line's note of a rejected plugin: its name and whole reason. */
static int print_rejected_note(const fld_plugin_info *p, void *user)
{
    (void)user;
    if (p->status == FLD_PLUGIN_REJECTED)
        printf("Rejected: %s: %s\n", cli_text(p->name), p->reason ? cli_text(p->reason) : "");
    return 0;
}

#define MIN_NAME_WIDTH 14
#define MAX_NAME_WIDTH 28

static int measure_name(const fld_plugin_info *p, void *user)
{
    struct summary *s = user;
    if (is_duplicate(p))
        return 0;
    int len = (int)strlen(cli_text(p->name));
    if (len > s->name_width)
        s->name_width = len < MAX_NAME_WIDTH ? len : MAX_NAME_WIDTH;
    return 0;
}

/*
 * reason on one line (control characters as spaces), cut to SHORT_REASON
 * bytes at a character boundary, with "..." when cut.
 */
static const char *short_reason(const char *reason, char *buf, size_t size)
{
    size_t len = 0;
    while (reason[len]) {
        size_t n = json_utf8_sequence((const unsigned char *)reason + len);
        if (n == 0)
            n = 1;
        if (len + n > SHORT_REASON)
            break;
        len += n;
    }
    snprintf(buf, size, "%.*s%s", (int)len, reason, reason[len] ? "..." : "");
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    return buf;
}

static int print_plugin_summary(const fld_plugin_info *p, void *user)
{
    struct summary *s = user;
    if (is_duplicate(p)) {
        s->duplicates++;
        return 0;
    }
    size_t registered = 0, available = 0;
    for (size_t i = 0; i < s->counts->n; i++) {
        if (strcmp(s->counts->items[i].plugin, p->name) == 0 && p->status != FLD_PLUGIN_REJECTED &&
            p->status != FLD_PLUGIN_SKIPPED) {
            registered = s->counts->items[i].registered;
            available = s->counts->items[i].available;
        }
    }
    char impls[48] = "-", reason[SHORT_REASON + 8] = "";
    if (p->status == FLD_PLUGIN_LOADED || p->status == FLD_PLUGIN_UNAVAILABLE)
        snprintf(impls, sizeof impls, "%zu/%zu", available, registered);
    if (p->reason && *p->reason)
        short_reason(cli_text(p->reason), reason, sizeof reason);
    s->rejected += p->status == FLD_PLUGIN_REJECTED;
    printf("%-*s %-9s %-11s %-11s %6s  %s\n", s->name_width, cli_text(p->name),
           *p->version ? cli_text(p->version) : "-", origin(p), cli_plugin_status_name(p->status),
           impls, reason);
    return 0;
}

static int list_summary(size_t *rejected)
{
    struct counts c = {0};
    int rc = fld_foreach_impl(count_impl, &c);
    if (walk_failed(rc, c.oom)) {
        counts_free(&c);
        return CLI_EXIT_CHECK_FAILED;
    }
    struct summary s = {&c, 0, 0, MIN_NAME_WIDTH};
    rc = fld_foreach_plugin(measure_name, &s);
    if (walk_failed(rc, false)) {
        counts_free(&c);
        return CLI_EXIT_CHECK_FAILED;
    }
    printf("Plugin search path: %s\n\n", cli_text(fld_plugin_path()));
    printf("%-*s %-9s %-11s %-11s %6s  %s\n", s.name_width, "PLUGIN", "VERSION", "ORIGIN", "STATUS",
           "IMPLS", "REASON");
    rc = fld_foreach_plugin(print_plugin_summary, &s);
    if (walk_failed(rc, false)) {
        counts_free(&c);
        return CLI_EXIT_CHECK_FAILED;
    }
    printf("\n%zu op(s), %zu implementation(s), %zu available here. IMPLS: available/registered.\n",
           c.ops, c.impls, c.available);
    if (s.duplicates)
        printf("%zu plugin file(s) skipped: the same file name comes earlier in the search path "
               "(--verbose lists them).\n",
               s.duplicates);
    /* A rejected plugin's ops run on the others (a bad VLLM_FL_CPU_* value
     * leaves every op to reference.c): said where the summary ends. */
    if (s.rejected) {
        printf("%zu plugin(s) rejected: their implementations are not used, their ops run on "
               "the others.\n",
               s.rejected);
        fld_foreach_plugin(print_rejected_note, NULL);
    }
    printf("'fldispatch list --verbose' shows each implementation, 'fldispatch resolve OP'\n"
           "which one a call uses.\n");
    *rejected = s.rejected;
    counts_free(&c);
    return CLI_EXIT_OK;
}

/* ---- --verbose ---------------------------------------------------------------- */

static int print_plugin_text(const fld_plugin_info *p, void *user)
{
    size_t *rejected = user;
    *rejected += p->status == FLD_PLUGIN_REJECTED;
    char abi[24];
    snprintf(abi, sizeof abi, "%u.%u", p->abi_major, p->abi_minor);
    printf("  %-12s %-9s %-5s %-12s %-12s %5zu  %s\n", cli_text(p->name),
           *p->version ? cli_text(p->version) : "-", abi, origin(p),
           cli_plugin_status_name(p->status), p->n_impls, cli_text(p->path));
    if (p->reason && *p->reason)
        printf("  %-12s reason: %s\n", "", cli_text(p->reason));
    if (p->detail && *p->detail)
        printf("  %-12s detail: %s\n", "", cli_text(p->detail));
    if (p->hook_devices) {
        char devices[64];
        printf("  %-12s device memory: %s\n", "",
               cli_devices_text(p->hook_devices, devices, sizeof devices));
    }
    return 0;
}

/* The widths of the implementation table's name columns: the longest op name and impl_id. */
struct impl_widths {
    int op, impl_id;
};

static int measure_impl(const fld_impl_info *m, void *user)
{
    struct impl_widths *w = user;
    int n = (int)strlen(cli_text(m->op));
    w->op = n > w->op ? n : w->op;
    n = (int)strlen(cli_text(m->impl_id));
    w->impl_id = n > w->impl_id ? n : w->impl_id;
    return 0;
}

static int print_impl_text(const fld_impl_info *m, void *user)
{
    const struct impl_widths *w = user;
    char devices[64], dtypes[64];
    bool why = !m->available && m->unavailable_reason && *m->unavailable_reason;
    printf("  %-*s %-*s %-9s %-8s %4d  %-20s %-13s %-10s %s%s%s\n", w->op, cli_text(m->op),
           w->impl_id, cli_text(m->impl_id), cli_text(m->kind), m->vendor ? cli_text(m->vendor) : "-",
           m->priority, cli_devices_text(m->devices, devices, sizeof devices),
           cli_dtypes_text(m->dtypes, dtypes, sizeof dtypes), cli_text(m->plugin),
           m->available ? "available" : "unavailable", why ? ": " : "",
           why ? cli_text(m->unavailable_reason) : "");
    return 0;
}

static int list_verbose(size_t *rejected)
{
    printf("Plugin search path: %s\n\n", cli_text(fld_plugin_path()));
    printf("Plugins:\n");
    printf("  %-12s %-9s %-5s %-12s %-12s %5s  %s\n", "NAME", "VERSION", "ABI", "ORIGIN", "STATUS",
           "IMPLS", "PATH");
    if (walk_failed(fld_foreach_plugin(print_plugin_text, rejected), false))
        return CLI_EXIT_CHECK_FAILED;
    printf("\nImplementations:\n");
    struct impl_widths widths = {18, 18};
    if (walk_failed(fld_foreach_impl(measure_impl, &widths), false))
        return CLI_EXIT_CHECK_FAILED;
    printf("  %-*s %-*s %-9s %-8s %4s  %-20s %-13s %-10s %s\n", widths.op, "OP", widths.impl_id,
           "IMPL_ID", "KIND", "VENDOR", "PRIO", "DEVICES", "DTYPES", "PLUGIN", "STATUS");
    if (walk_failed(fld_foreach_impl(print_impl_text, &widths), false))
        return CLI_EXIT_CHECK_FAILED;
    return CLI_EXIT_OK;
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_mask(struct json_writer *w, uint32_t mask, const char *(*bit_name)(unsigned))
{
    json_begin_array(w);
    for (unsigned bit = 0; bit < 32; bit++) {
        if (!(mask & (1u << bit)))
            continue;
        const char *name = bit_name(bit);
        if (name) {
            json_string(w, name);
        } else {
            char unknown[16];
            snprintf(unknown, sizeof unknown, "bit%u", bit);
            json_string(w, unknown);
        }
    }
    json_end_array(w);
}

struct json_walk {
    struct json_writer *w;
    size_t rejected;
};

static int print_plugin_json(const fld_plugin_info *p, void *user)
{
    struct json_walk *walk = user;
    struct json_writer *w = walk->w;
    walk->rejected += p->status == FLD_PLUGIN_REJECTED;
    json_begin_object(w);
    json_key(w, "name");
    json_string(w, p->name);
    json_key(w, "path");
    json_string(w, is_builtin(p) ? NULL : p->path);
    json_key(w, "builtin");
    json_bool(w, is_builtin(p));
    json_key(w, "version");
    json_text_or_null(w, p->version);
    json_key(w, "abi_major");
    json_int(w, p->abi_major);
    json_key(w, "abi_minor");
    json_int(w, p->abi_minor);
    json_key(w, "in_tree");
    json_bool(w, p->in_tree);
    json_key(w, "status");
    json_string(w, cli_plugin_status_name(p->status));
    json_key(w, "reason");
    json_text_or_null(w, p->reason);
    json_key(w, "impl_count");
    json_int(w, (long long)p->n_impls);
    json_key(w, "detail");
    json_text_or_null(w, p->detail);
    json_key(w, "hook_devices");
    json_mask(w, p->hook_devices, cli_device_bit_name);
    json_end_object(w);
    return 0;
}

static int print_impl_json(const fld_impl_info *m, void *user)
{
    struct json_writer *w = ((struct json_walk *)user)->w;
    json_begin_object(w);
    json_key(w, "op");
    json_string(w, m->op);
    json_key(w, "impl_id");
    json_string(w, m->impl_id);
    json_key(w, "kind");
    json_string(w, m->kind);
    json_key(w, "vendor");
    json_string(w, m->vendor);
    json_key(w, "priority");
    json_int(w, m->priority);
    json_key(w, "devices");
    json_mask(w, m->devices, cli_device_bit_name);
    json_key(w, "dtypes");
    json_mask(w, m->dtypes, cli_dtype_bit_name);
    json_key(w, "plugin");
    json_string(w, m->plugin);
    json_key(w, "in_tree");
    json_bool(w, m->in_tree);
    json_key(w, "available");
    json_bool(w, m->available);
    json_key(w, "reason");
    json_string(w, m->available                                      ? NULL
                   : m->unavailable_reason && *m->unavailable_reason ? m->unavailable_reason
                                                                     : "unavailable");
    json_end_object(w);
    return 0;
}

static int list_json(size_t *rejected)
{
    struct json_writer w;
    struct json_walk walk = {&w, 0};
    json_begin_document(&w, stdout);
    json_key(&w, "plugin_path");
    json_split(&w, fld_plugin_path(), ":");
    json_key(&w, "plugins");
    json_begin_array(&w);
    if (walk_failed(fld_foreach_plugin(print_plugin_json, &walk), false))
        return CLI_EXIT_CHECK_FAILED;
    json_end_array(&w);
    json_key(&w, "impls");
    json_begin_array(&w);
    if (walk_failed(fld_foreach_impl(print_impl_json, &walk), false))
        return CLI_EXIT_CHECK_FAILED;
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
    *rejected = walk.rejected;
    return CLI_EXIT_OK;
}

int cmd_list(int argc, char **argv)
{
    enum { OPT_JSON, OPT_VERBOSE, OPT_STRICT };
    static const struct cli_option options[] = {
        [OPT_JSON] = {"--json", false},
        [OPT_VERBOSE] = {"--verbose", false},
        [OPT_STRICT] = {"--strict", false},
        {NULL, false},
    };
    bool json = false, verbose = false, strict = false;
    struct cli_args a;
    cli_args_init(&a, "list", options, argc, argv);
    const char *value;
    for (int k; (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        switch (k) {
        case CLI_ARG_HELP:
            fputs(list_usage, stdout);
            return CLI_EXIT_OK;
        case CLI_ARG_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_ARG_OPERAND:
            return cli_usage_error("list", "unexpected argument '%s'", value);
        case OPT_JSON:
            json = true;
            break;
        case OPT_VERBOSE:
            verbose = true;
            break;
        case OPT_STRICT:
            strict = true;
            break;
        }
    }
    int rc = cli_init();
    if (rc != CLI_EXIT_OK)
        return rc;
    size_t rejected = 0;
    rc = json ? list_json(&rejected) : verbose ? list_verbose(&rejected) : list_summary(&rejected);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (strict && rejected) {
        fprintf(stderr, "fldispatch list: %zu plugin(s) rejected (--strict)\n", rejected);
        return CLI_EXIT_CHECK_FAILED;
    }
    return CLI_EXIT_OK;
}
