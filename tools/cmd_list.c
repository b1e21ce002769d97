/*
 * fldispatch list [--json]: every plugin seen (loaded or not, with the
 * reason) and every registered implementation with its availability.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "json.h"

static const char list_usage[] =
    "Usage: fldispatch list [--json]\n"
    "\n"
    "Lists the plugins in load order (name, version, ABI, in-tree or out-of-tree,\n"
    "status and the reason when not loaded or unavailable, file, the plugin's own\n"
    "detail line and the devices it provides memory for) and every registered\n"
    "implementation (op, impl_id, kind, vendor, priority, devices, dtypes, plugin,\n"
    "availability).\n"
    "\n"
    "  --json   one JSON object {\"search_path\", \"plugins\": [...], \"impls\": [...]}\n";

/* ---- text ---------------------------------------------------------------- */

static int print_plugin_text(const fld_plugin_info *p, void *user)
{
    (void)user;
    char abi[24];
    snprintf(abi, sizeof abi, "%u.%u", p->abi_major, p->abi_minor);
    printf("  %-12s %-9s %-5s %-12s %-12s %5zu  %s\n", p->name, *p->version ? p->version : "-", abi,
           p->in_tree ? "in-tree" : "out-of-tree", cli_plugin_status_name(p->status), p->n_impls,
           p->path);
    if (p->reason && *p->reason)
        printf("  %-12s reason: %s\n", "", p->reason);
    if (p->detail && *p->detail)
        printf("  %-12s detail: %s\n", "", p->detail);
    if (p->hook_devices) {
        char devices[64];
        printf("  %-12s device memory: %s\n", "",
               cli_devices_text(p->hook_devices, devices, sizeof devices));
    }
    return 0;
}

static int print_impl_text(const fld_impl_info *m, void *user)
{
    (void)user;
    char devices[64], dtypes[64];
    printf("  %-18s %-18s %-9s %-8s %4d  %-20s %-13s %-10s %s%s\n", m->op, m->impl_id, m->kind,
           m->vendor ? m->vendor : "-", m->priority,
           cli_devices_text(m->devices, devices, sizeof devices),
           cli_dtypes_text(m->dtypes, dtypes, sizeof dtypes), m->plugin,
           m->available ? "available" : "unavailable: ", m->available ? "" : m->unavailable_reason);
    return 0;
}

/* The walkers' callbacks return 0, so a non-zero status is the library's. */
static int walk_failed(int rc)
{
    if (rc == 0)
        return 0;
    fprintf(stderr, "fldispatch list: %s\n",
            *fld_last_error() ? fld_last_error() : fld_strerror(rc));
    return 1;
}

static int list_text(void)
{
    printf("Plugin search path: %s\n\n", fld_plugin_path());
    printf("Plugins:\n");
    printf("  %-12s %-9s %-5s %-12s %-12s %5s  %s\n", "NAME", "VERSION", "ABI", "ORIGIN", "STATUS",
           "IMPLS", "PATH");
    if (walk_failed(fld_foreach_plugin(print_plugin_text, NULL)))
        return CLI_EXIT_CHECK_FAILED;
    printf("\nImplementations:\n");
    printf("  %-18s %-18s %-9s %-8s %4s  %-20s %-13s %-10s %s\n", "OP", "IMPL_ID", "KIND", "VENDOR",
           "PRIO", "DEVICES", "DTYPES", "PLUGIN", "STATUS");
    if (walk_failed(fld_foreach_impl(print_impl_text, NULL)))
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

static int print_plugin_json(const fld_plugin_info *p, void *user)
{
    struct json_writer *w = user;
    json_begin_object(w);
    json_key(w, "name");
    json_string(w, p->name);
    json_key(w, "path");
    json_string(w, p->path);
    json_key(w, "version");
    json_string(w, p->version);
    json_key(w, "abi_major");
    json_int(w, p->abi_major);
    json_key(w, "abi_minor");
    json_int(w, p->abi_minor);
    json_key(w, "in_tree");
    json_bool(w, p->in_tree);
    json_key(w, "status");
    json_string(w, cli_plugin_status_name(p->status));
    json_key(w, "reason");
    json_string(w, p->reason ? p->reason : "");
    json_key(w, "n_impls");
    json_int(w, (long long)p->n_impls);
    json_key(w, "detail");
    json_string(w, p->detail ? p->detail : "");
    json_key(w, "hook_devices");
    json_mask(w, p->hook_devices, cli_device_bit_name);
    json_end_object(w);
    return 0;
}

static int print_impl_json(const fld_impl_info *m, void *user)
{
    struct json_writer *w = user;
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
    json_key(w, "unavailable_reason");
    json_string(w, m->unavailable_reason ? m->unavailable_reason : "");
    json_end_object(w);
    return 0;
}

static int list_json(void)
{
    struct json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "search_path");
    json_string(&w, fld_plugin_path());
    json_key(&w, "plugins");
    json_begin_array(&w);
    if (walk_failed(fld_foreach_plugin(print_plugin_json, &w)))
        return CLI_EXIT_CHECK_FAILED;
    json_end_array(&w);
    json_key(&w, "impls");
    json_begin_array(&w);
    if (walk_failed(fld_foreach_impl(print_impl_json, &w)))
        return CLI_EXIT_CHECK_FAILED;
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
    return CLI_EXIT_OK;
}

int cmd_list(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(list_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("list", "unknown option '%s'", argv[i]);
        } else {
            return cli_usage_error("list", "unexpected argument '%s'", argv[i]);
        }
    }
    int rc = cli_init();
    if (rc != CLI_EXIT_OK)
        return rc;
    return json ? list_json() : list_text();
}
