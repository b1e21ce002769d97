/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch freeze [--output FILE] [--device D]...: resolves every op that
 * has implementations on every device and dtype its implementations declare,
 * under the policy of the environment, and writes the (op, device, dtype) ->
 * impl_id table as a manifest (core/policy/manifest.h). VLLM_FL_MANIFEST=FILE then
 * pins every worker of a deployment to the same kernels, whatever their
 * plugin directories or policies say.
 *
 * Only devices that are present are frozen: a device whose memory provider
 * (the device hooks of its plugin) is unavailable, or, without a provider,
 * none of whose own implementations is available, is left out, with one
 * line on stderr and in the manifest's header saying why. So are the (op,
 * dtype) pairs of a frozen device that nothing qualifies for.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/internal/tool_api.h>

#include "catalog.h"
#include "cli.h"
#include "json.h"
#include "options.h"
#include "vec.h"

/* A printf format: its one conversion is the device list. */
static const char freeze_usage[] =
    "Usage: fldispatch freeze [--output FILE] [--device D]...\n"
    "\n"
    "Resolves every op that has implementations, on every device and dtype\n"
    "they declare, under the policy of the environment, and writes the result\n"
    "as a manifest: a YAML table (op, device, dtype) -> impl_id. Set\n"
    "VLLM_FL_MANIFEST=FILE in every worker to pin it to the same kernels.\n"
    "Only combinations that resolve are written. Catalog ops are frozen for\n"
    "f32, f16 and bf16; attention_backend and ops outside the catalog for the\n"
    "dtype 'any'.\n"
    "\n"
    "Only devices present here are frozen: one whose memory provider (its\n"
    "plugin's device hooks) is unavailable, or that has no provider and none of\n"
    "whose own implementations is available, is left out. What was left out and\n"
    "why (devices, and (op, dtype) pairs nothing qualifies for) is said on\n"
    "stderr, one line per device, and in the manifest's header.\n"
    "\n"
    "  --output FILE  write FILE (atomically: a temporary file renamed over it)\n"
    "                 instead of standard output\n"
    "  --device D     %s; repeatable (default: every device\n"
    "                 some implementation declares)\n"
    "\n"
    "Exit status: 0 a manifest was written; 2 usage or configuration error, or\n"
    "the file cannot be written; 3 nothing to freeze (no device present, or\n"
    "nothing resolves): no manifest is written.\n";

struct op_decl {
    char *name;
    uint32_t devices, dtypes; /* union over the op's implementations */
};

struct op_list {
    struct op_decl *items;
    size_t n, cap;
    bool oom;
    /* Per device bit: implementations declaring that device and not every
     * device (attention_backend's reference serves any device: it proves
     * nothing), and how many of those are available. */
    unsigned own_impls[CLI_MAX_DEVICES], own_available[CLI_MAX_DEVICES];
};

/* Why a device is left out, or why some of its (op, dtype) pairs are. */
struct device_note {
    bool left_out;
    char why[768];      /* left_out: the reason */
    char missing[1024]; /* kept: "op dtype, op dtype" that nothing qualifies for */
    size_t n_missing;
};

struct entry {
    const char *op;
    unsigned device_bit;
    const char *dtype;
    const char *impl_id; /* owned by the library */
};

struct entry_list {
    struct entry *items;
    size_t n, cap;
};

/* fld_foreach_impl runs by op name, so one op's impls are consecutive. */
static int collect_impl(const fld_impl_info *info, void *user)
{
    struct op_list *ops = user;
    uint32_t all = (1u << cli_device_count()) - 1;
    for (unsigned bit = 0; bit < cli_device_count(); bit++) {
        if ((info->devices & (1u << bit)) && (info->devices & all) != all) {
            ops->own_impls[bit]++;
            ops->own_available[bit] += info->available;
        }
    }
    if (ops->n && strcmp(ops->items[ops->n - 1].name, info->op) == 0) {
        ops->items[ops->n - 1].devices |= info->devices;
        ops->items[ops->n - 1].dtypes |= info->dtypes;
        return 0;
    }
    if (VEC_RESERVE(ops->items, ops->n, ops->cap, 16) != 0) {
        ops->oom = true;
        return 1;
    }
    char *name = strdup(info->op);
    if (!name) {
        ops->oom = true;
        return 1;
    }
    ops->items[ops->n++] = (struct op_decl){name, info->devices, info->dtypes};
    return 0;
}

static void ops_free(struct op_list *ops)
{
    for (size_t i = 0; i < ops->n; i++)
        free(ops->items[i].name);
    free(ops->items);
}

static bool entry_add(struct entry_list *l, struct entry e)
{
    if (VEC_RESERVE(l->items, l->n, l->cap, 64) != 0)
        return false;
    l->items[l->n++] = e;
    return true;
}

/* Adds "op dtype" to the pairs of a device that nothing qualifies for. */
static void note_missing(struct device_note *note, const char *op, const char *dtype_name)
{
    size_t used = strlen(note->missing);
    if (note->n_missing++ < 8)
        snprintf(note->missing + used, sizeof note->missing - used, "%s%s %s", used ? ", " : "", op,
                 dtype_name);
    else if (note->n_missing == 9)
        snprintf(note->missing + used, sizeof note->missing - used, ", ...");
}

/*
 * Resolves one (op, device, dtype); adds an entry when something is
 * selected. FLD_EUNAVAILABLE is not an error: that combination is left out.
 */
static int freeze_one(struct entry_list *l, struct device_note *note, const char *op, unsigned bit,
                      const char *dtype_name, DLDataType dtype)
{
    const char *impl_id = NULL;
    int rc = fld_resolve(op, cli_device_bit_type(bit), dtype, &impl_id);
    if (rc == FLD_EUNAVAILABLE) {
        note_missing(note, op, dtype_name);
        return FLD_OK;
    }
    if (rc != FLD_OK)
        return rc;
    if (!entry_add(l, (struct entry){op, bit, dtype_name, impl_id})) {
        fprintf(stderr, "fldispatch freeze: out of memory\n");
        return FLD_ENOMEM;
    }
    return FLD_OK;
}

/*
 * Whether the device of mask bit `bit` is present: the CPU always; another
 * device when a plugin's device hooks for it are available, or, when no
 * plugin registered hooks for it (plugins of ABI 1.0), when one of its own
 * implementations is available. Otherwise note->why says why not.
 */
static bool device_present(const struct op_list *ops, unsigned bit, struct device_note *note)
{
    int device = cli_device_bit_type(bit);
    if (device == FLD_DEVICE_CPU)
        return true;
    const char *provider = NULL;
    int rc = fld_device_provider(device, &provider);
    if (rc == FLD_OK)
        return true;
    if (rc != FLD_ENOTFOUND) {
        static const char prefix[] = "fld_device_provider: ";
        const char *why = *fld_last_error() ? fld_last_error() : fld_strerror(rc);
        if (strncmp(why, prefix, sizeof prefix - 1) == 0)
            why += sizeof prefix - 1;
        snprintf(note->why, sizeof note->why, "%s", why);
        return false;
    }
    if (ops->own_available[bit])
        return true;
    if (ops->own_impls[bit])
        snprintf(note->why, sizeof note->why,
                 "no plugin provides its memory and none of its %u implementation(s) is available "
                 "('fldispatch list --verbose' says why)",
                 ops->own_impls[bit]);
    else
        snprintf(note->why, sizeof note->why,
                 "no plugin provides its memory or registers implementations for it");
    return false;
}

static int freeze_all(const struct op_list *ops, uint32_t *want_devices, struct entry_list *out,
                      struct device_note notes[])
{
    /* The dtypes are the rows of the library's dtype table. */
    const struct fld_tool_dtype *dt;

    for (unsigned bit = 0; bit < cli_device_count(); bit++) {
        if ((*want_devices & (1u << bit)) && !device_present(ops, bit, &notes[bit])) {
            notes[bit].left_out = true;
            *want_devices &= ~(1u << bit);
        }
    }
    for (size_t o = 0; o < ops->n; o++) {
        const struct op_decl *op = &ops->items[o];
        bool typed =
            tool_is_catalog_op(op->name) && strcmp(op->name, FLD_OP_ATTENTION_BACKEND) != 0;
        for (unsigned bit = 0; bit < cli_device_count(); bit++) {
            if (!(*want_devices & (1u << bit)))
                continue;
            if (!(op->devices & (1u << bit))) {
                /* No implementation declares the device: said like the rest
                   (a catalog op's every dtype; another op's "any"). */
                if (!typed && tool_is_catalog_op(op->name))
                    note_missing(&notes[bit], op->name, "any");
                for (unsigned t = 0; typed && (dt = fld__dtype_row(t)); t++)
                    note_missing(&notes[bit], op->name, dt->name);
                continue;
            }
            int rc = FLD_OK;
            if (!typed) {
                rc = freeze_one(out, &notes[bit], op->name, bit, "any", FLD_DTYPE_ANY);
            } else {
                for (unsigned t = 0; rc == FLD_OK && (dt = fld__dtype_row(t)); t++)
                    if (op->dtypes & dt->mask)
                        rc = freeze_one(out, &notes[bit], op->name, bit, dt->name,
                                        (DLDataType){dt->code, dt->bits, 1});
            }
            if (rc != FLD_OK)
                return rc;
        }
    }
    return FLD_OK;
}

/* One line per device with something left out, on f (stderr or the manifest, as comments). */
static void report_left_out(FILE *f, const char *prefix, const struct device_note notes[])
{
    for (unsigned bit = 0; bit < cli_device_count(); bit++) {
        const struct device_note *n = &notes[bit];
        const char *name = cli_device_bit_name(bit);
        if (n->left_out)
            fprintf(f, "%sleft out device %s: %s\n", prefix, name, cli_text(n->why));
        else if (n->n_missing)
            fprintf(f,
                    "%sleft out on %s: %zu (op, dtype) pair(s) nothing qualifies for under the "
                    "policy: %s ('fldispatch resolve OP --device %s --dtype T' says why)\n",
                    prefix, name, n->n_missing, cli_text(n->missing), name);
    }
}

/* Whether s can be written as a plain YAML scalar that reads back as the same string. */
static bool plain_safe(const char *s)
{
    static const char *const reserved[] = {"null", "true", "false", "yes", "no",
                                           "on",   "off",  "y",     "n"};
    if (!*s || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')))
        return false;
    for (const char *p = s; *p; p++)
        if (!(*p == '_' || *p == '.' || *p == '-' || (*p >= '0' && *p <= '9') ||
              (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')))
            return false;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcasecmp(s, reserved[i]) == 0)
            return false;
    return true;
}

static void yaml_scalar(FILE *f, const char *s)
{
    if (plain_safe(s)) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/*
 * A comment line's text with control characters replaced, so it stays one
 * line, and bytes that are not UTF-8 replaced by '?' (a YAML reader refuses
 * the whole file otherwise).
 */
static void comment_text(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t len = json_utf8_sequence(p);
        if (len == 0) {
            fputc('?', f);
            len = 1;
        } else if (len == 1) {
            fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, f);
        } else {
            fwrite(p, 1, len, f);
        }
        p += len;
    }
}

static void write_manifest(FILE *f, const struct entry_list *l, uint32_t want_devices,
                           const struct device_note notes[])
{
    char when[32] = "unknown time";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fld_platform_info plat = {0};
    bool have_plat = fld_platform(&plat) == FLD_OK && plat.name;
    char policy[2048];
    fld_policy_describe(policy, sizeof policy);
    char devices[64];

    fputs("# fldispatch manifest: frozen dispatch, (op, device, dtype) -> impl_id.\n"
          "# Pin workers to it with VLLM_FL_MANIFEST=<this file>.\n",
          f);
    fprintf(f, "# Written by fldispatch freeze %s (library %s) on %s\n", FLD_VERSION_STRING,
            fld_version(), when);
    fputs("# Platform: ", f);
    if (have_plat) {
        comment_text(f, plat.name);
        fputs(" (detected by ", f);
        comment_text(f, plat.detected_by ? plat.detected_by : "?");
        fputs(")", f);
    } else {
        fputs("unknown", f);
    }
    fputs("\n# Policy: ", f);
    comment_text(f, policy);
    fprintf(f, "\n# Devices: %s\n", cli_devices_text(want_devices, devices, sizeof devices));
    /* The reasons come from plugins: kept on their comment line. */
    char *text = NULL;
    size_t size = 0;
    FILE *m = open_memstream(&text, &size);
    if (m) {
        report_left_out(m, "", notes);
        fclose(m);
        for (char *line = text; line && *line;) {
            size_t len = strcspn(line, "\n");
            char saved = line[len];
            line[len] = '\0';
            fputs("# ", f);
            comment_text(f, line);
            fputc('\n', f);
            line[len] = saved;
            line += len + (saved ? 1 : 0);
        }
        free(text);
    }
    fputs("version: 1\n", f);
    fputs("entries:\n", f);
    for (size_t i = 0; i < l->n; i++) {
        const struct entry *e = &l->items[i];
        fputs("  - {op: ", f);
        yaml_scalar(f, e->op);
        fprintf(f, ", device: %s, dtype: %s, impl: ", cli_device_bit_name(e->device_bit), e->dtype);
        yaml_scalar(f, e->impl_id);
        fputs("}\n", f);
    }
}

/* Writes path whole or not at all (fld__atomic_file_open(): a temporary file beside it, renamed
 * over it; a link planted at path is refused, not followed). */
static int write_file(const char *path, const struct entry_list *l, uint32_t want_devices,
                      const struct device_note notes[])
{
    fld_atomic_file af = {0};
    int err = fld__atomic_file_open(&af, path, 0644);
    if (!err) {
        write_manifest(af.f, l, want_devices, notes);
        err = fld__atomic_file_commit(&af);
    }
    if (err) {
        fprintf(stderr, "fldispatch freeze: cannot write '%s': %s\n", cli_text(path),
                fld__atomic_file_strerror(err));
        return CLI_EXIT_USAGE;
    }
    fprintf(stderr, "fldispatch freeze: %zu entr%s written to %s\n", l->n, l->n == 1 ? "y" : "ies",
            cli_text(path));
    return CLI_EXIT_OK;
}

int cmd_freeze(int argc, char **argv)
{
    enum { OPT_OUTPUT, OPT_DEVICE };
    static const struct cli_option options[] = {
        [OPT_OUTPUT] = {"--output", true},
        [OPT_DEVICE] = {"--device", true},
        {NULL, false},
    };
    const char *output = NULL;
    uint32_t want_devices = 0;
    struct cli_args a;
    cli_args_init(&a, "freeze", options, argc, argv);
    const char *value;
    for (int k; (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        int device;
        switch (k) {
        case CLI_ARG_HELP:
            printf(freeze_usage, cli_device_list(CLI_DEVICES_OR));
            return CLI_EXIT_OK;
        case CLI_ARG_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_ARG_OPERAND:
            return cli_usage_error("freeze", "unexpected argument '%s'", value);
        case OPT_OUTPUT:
            if (!*value)
                return cli_usage_error("freeze", "option '--output' needs a file name");
            output = value;
            break;
        case OPT_DEVICE:
            if (fld_device_from_name(value, &device) != FLD_OK)
                return cli_usage_error("freeze", "unknown device '%s' (%s)", value,
                                       cli_device_list(CLI_DEVICES));
            want_devices |= cli_device_mask(device);
            break;
        }
    }

    int rc = cli_init();
    if (rc != CLI_EXIT_OK)
        return rc;

    struct op_list ops = {0};
    struct entry_list entries = {0};
    struct device_note notes[CLI_MAX_DEVICES];
    memset(notes, 0, sizeof notes);
    int status = CLI_EXIT_OK;
    int st = fld_foreach_impl(collect_impl, &ops);
    if (ops.oom || st < 0) {
        fprintf(stderr, "fldispatch freeze: %s\n",
                ops.oom             ? "out of memory"
                : *fld_last_error() ? fld_last_error()
                                    : fld_strerror(st));
        status = st == FLD_ECONFIG ? CLI_EXIT_USAGE : CLI_EXIT_CHECK_FAILED;
        goto done;
    }
    if (!want_devices)
        for (size_t i = 0; i < ops.n; i++)
            want_devices |= ops.items[i].devices;

    st = freeze_all(&ops, &want_devices, &entries, notes);
    if (st != FLD_OK) {
        if (st != FLD_ENOMEM)
            fprintf(stderr, "fldispatch freeze: %s\n",
                    *fld_last_error() ? fld_last_error() : fld_strerror(st));
        status = st == FLD_ECONFIG ? CLI_EXIT_USAGE : CLI_EXIT_CHECK_FAILED;
        goto done;
    }
    report_left_out(stderr, "fldispatch freeze: ", notes);
    if (entries.n == 0) {
        fprintf(stderr, "fldispatch freeze: nothing to freeze%s; no manifest written\n",
                want_devices ? " (nothing resolves under the policy)" : " (no device present)");
        status = CLI_EXIT_NONE;
        goto done;
    }

    if (output) {
        status = write_file(output, &entries, want_devices, notes);
    } else {
        write_manifest(stdout, &entries, want_devices, notes);
        if (fflush(stdout) != 0) {
            fprintf(stderr, "fldispatch freeze: cannot write standard output: %s\n",
                    strerror(errno));
            status = CLI_EXIT_CHECK_FAILED;
        }
    }

done:
    free(entries.items);
    ops_free(&ops);
    return status;
}
