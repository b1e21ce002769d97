/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch config [--json]: the effective policy, field by field, with
 * where each value came from (built-in default, environment variable,
 * platform file or VLLM_FL_CONFIG file with its line), the platform and how
 * it was decided, and the plugin search path. It answers "why does my
 * deployment select this?" without reading the code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "cli.h"
#include "json.h"
#include "options.h"
#include "vec.h"

static const char config_usage[] =
    "Usage: fldispatch config [--json]\n"
    "\n"
    "Shows the effective policy of this environment, each field with its value\n"
    "and its source: 'default' (built in), an environment variable\n"
    "(VLLM_FL_PREFER, ...), a platform file or the VLLM_FL_CONFIG file with the\n"
    "line (config/nvidia.yaml:3). Also shows the platform, how it was detected,\n"
    "the platform file in use, and the plugin search path.\n"
    "\n"
    "  --json   one JSON object {\"schema\", \"platform\": {\"name\", \"detected_by\",\n"
    "           \"config_file\" (null when none), \"config_path\" (directories)},\n"
    "           \"policy\": [{\"key\", \"value\", \"source\"}, ...],\n"
    "           \"policy_summary\", \"plugin_path\" (directories)}; values are\n"
    "           typed: switches booleans, lists and token orders arrays\n"
    "           (docs/schemas/config.schema.json)\n"
    "\n"
    "Exit status 2 when the configuration is invalid (the message names the\n"
    "variable or file:line:column at fault).\n";

struct field {
    char *key, *value, *source;
};

struct fields {
    struct field *items;
    size_t n, cap;
    bool oom;
};

/* The library's strings live only during the callback: keep copies. */
static int collect_field(const fld_config_field *f, void *user)
{
    struct fields *fs = user;
    if (VEC_RESERVE(fs->items, fs->n, fs->cap, 32) != 0) {
        fs->oom = true;
        return 1;
    }
    struct field *d = &fs->items[fs->n];
    d->key = strdup(f->key ? f->key : "");
    d->value = strdup(f->value ? f->value : "");
    d->source = strdup(f->source ? f->source : "");
    if (!d->key || !d->value || !d->source) {
        free(d->key);
        free(d->value);
        free(d->source);
        fs->oom = true;
        return 1;
    }
    fs->n++;
    return 0;
}

static void fields_free(struct fields *fs)
{
    for (size_t i = 0; i < fs->n; i++) {
        free(fs->items[i].key);
        free(fs->items[i].value);
        free(fs->items[i].source);
    }
    free(fs->items);
}

/* s escaped for the terminal (cli_text), or "-" when absent. */
static const char *or_dash(const char *s)
{
    return s && *s ? cli_text(s) : "-";
}

/* Columns wider than this are not padded for: one long value must not push every row. */
#define MAX_COLUMN 48

/* Column col (0 key, 1 value) of a field as printed. */
static const char *cell(const struct field *f, int col)
{
    return or_dash(col == 0 ? f->key : f->value);
}

static int column_width(const struct fields *fs, int col, const char *title)
{
    size_t w = strlen(title);
    for (size_t i = 0; i < fs->n; i++) {
        size_t len = strlen(cell(&fs->items[i], col));
        if (len > w && len <= MAX_COLUMN)
            w = len;
    }
    return (int)w;
}

static void config_text(const fld_platform_info *plat, const struct fields *fs, const char *summary,
                        const char *plugin_path)
{
    printf("platform:       %s\n", or_dash(plat->name));
    printf("detected by:    %s\n", or_dash(plat->detected_by));
    printf("platform file:  %s\n",
           plat->config_file && *plat->config_file ? cli_text(plat->config_file) : "(none)");
    printf("config path:    %s\n", or_dash(plat->config_path));
    printf("plugin path:    %s\n", or_dash(plugin_path));
    printf("policy:         %s\n", or_dash(summary));
    printf("\n");

    int kw = column_width(fs, 0, "KEY");
    int vw = column_width(fs, 1, "VALUE");
    printf("%-*s  %-*s  %s\n", kw, "KEY", vw, "VALUE", "SOURCE");
    for (size_t i = 0; i < fs->n; i++)
        printf("%-*s  %-*s  %s\n", kw, cell(&fs->items[i], 0), vw, cell(&fs->items[i], 1),
               or_dash(fs->items[i].source));
}

/* How a policy field's text value is written in JSON. */
enum value_type { VALUE_STRING, VALUE_BOOL, VALUE_LIST, VALUE_ORDER };

/* The type of a field, by its key (fld_foreach_config_field's keys: the
 * policy-field table's YAML keys, an order's as "op_backends.OP"), from the
 * kind of its row in the library's table. */
static enum value_type value_type(const char *key)
{
    const struct fld_tool_policy_field *row;
    size_t stem = strcspn(key, ".");
    for (unsigned i = 0; (row = fld__policy_field_row(i)); i++) {
        if (strncmp(key, row->yaml, stem) != 0 || row->yaml[stem])
            continue;
        if (strcmp(row->kind, "flag") == 0 || strcmp(row->kind, "switch") == 0)
            return VALUE_BOOL;
        if (strcmp(row->kind, "orders") == 0)
            return VALUE_ORDER;
        if (strcmp(row->kind, "names") == 0 || strcmp(row->kind, "vendors") == 0 ||
            strcmp(row->kind, "custom") == 0)
            return VALUE_LIST;
    }
    return VALUE_STRING;
}

static void json_value(struct json_writer *w, const struct field *f)
{
    switch (value_type(f->key)) {
    case VALUE_BOOL:
        if (strcmp(f->value, "true") == 0 || strcmp(f->value, "false") == 0)
            json_bool(w, strcmp(f->value, "true") == 0);
        else
            json_string(w, f->value); /* the schema refuses it: the tests see the change */
        break;
    case VALUE_LIST:
        json_split(w, f->value, ",");
        break;
    case VALUE_ORDER:
        json_split(w, f->value, "|");
        break;
    case VALUE_STRING:
        json_text_or_null(w, f->value);
        break;
    }
}

static void config_json(const fld_platform_info *plat, const struct fields *fs, const char *summary,
                        const char *plugin_path)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "platform");
    json_begin_object(&w);
    json_key(&w, "name");
    json_string(&w, plat->name);
    json_key(&w, "detected_by");
    json_string(&w, plat->detected_by);
    json_key(&w, "config_file");
    json_text_or_null(&w, plat->config_file);
    json_key(&w, "config_path");
    json_split(&w, plat->config_path ? plat->config_path : "", ":");
    json_end_object(&w);
    json_key(&w, "policy");
    json_begin_array(&w);
    for (size_t i = 0; i < fs->n; i++) {
        json_begin_object(&w);
        json_key(&w, "key");
        json_string(&w, fs->items[i].key);
        json_key(&w, "value");
        json_value(&w, &fs->items[i]);
        json_key(&w, "source");
        json_string(&w, fs->items[i].source);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "policy_summary");
    json_string(&w, summary);
    json_key(&w, "plugin_path");
    json_split(&w, plugin_path ? plugin_path : "", ":");
    json_end_object(&w);
    json_finish(&w);
}

static int library_error(int rc)
{
    const char *detail = *fld_last_error() ? fld_last_error() : fld_strerror(rc);
    fprintf(stderr, "fldispatch config: %s\n", detail);
    return rc == FLD_ECONFIG ? CLI_EXIT_USAGE : CLI_EXIT_CHECK_FAILED;
}

int cmd_config(int argc, char **argv)
{
    static const struct cli_option options[] = {{"--json", false}, {NULL, false}};
    bool json = false;
    struct cli_args a;
    cli_args_init(&a, "config", options, argc, argv);
    const char *value;
    for (int k; (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        if (k == CLI_ARG_HELP) {
            fputs(config_usage, stdout);
            return CLI_EXIT_OK;
        }
        if (k == CLI_ARG_ERROR)
            return CLI_EXIT_USAGE;
        if (k == CLI_ARG_OPERAND)
            return cli_usage_error("config", "unexpected argument '%s'", value);
        json = true;
    }

    int rc = cli_init();
    if (rc != CLI_EXIT_OK)
        return rc;

    fld_platform_info plat;
    memset(&plat, 0, sizeof plat);
    int st = fld_platform(&plat);
    if (st != FLD_OK)
        return library_error(st);

    struct fields fs = {0};
    st = fld_foreach_config_field(collect_field, &fs);
    if (fs.oom) {
        fields_free(&fs);
        fprintf(stderr, "fldispatch config: out of memory\n");
        return CLI_EXIT_CHECK_FAILED;
    }
    if (st < 0) {
        fields_free(&fs);
        return library_error(st);
    }

    char summary[2048];
    fld_policy_describe(summary, sizeof summary);
    const char *plugin_path = fld_plugin_path();

    if (json)
        config_json(&plat, &fs, summary, plugin_path);
    else
        config_text(&plat, &fs, summary, plugin_path);
    fields_free(&fs);
    return CLI_EXIT_OK;
}
