/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch — inspect and exercise the operator dispatcher.
 *
 * main() picks the command; each command (cmd_*.c) parses its own options,
 * initialises the library and prints text or JSON. Exit statuses are in
 * cli.h.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "cli.h"
#include "suggest.h"

/* A printf format: its one conversion is the device list. */
static const char usage_text[] =
    "Usage: fldispatch <command> [options] [--] [operands]\n"
    "       fldispatch help <command>\n"
    "\n"
    "Inspect and exercise the fldispatch operator dispatcher.\n"
    "\n"
    "Commands:\n"
    "  list     [--verbose] [--strict] [--json]\n"
    "                                       one line per plugin; --verbose: every\n"
    "                                       registered implementation\n"
    "  resolve  OP [--device D] [--dtype T] [--rows N] [--json]\n"
    "                                       which implementation runs OP, the candidates\n"
    "                                       in order and why the others were dropped\n"
    "  bench    [OP...] [--device D] [--dtype T] [--threads N,..] [--json]\n"
    "                                       time per implementation, GB/s and the share of\n"
    "                                       the STREAM bandwidth measured in the same run\n"
    "  bench    --overhead [--reps N] [--calls N] [--json]\n"
    "                                       dispatch overhead per call, one and two threads\n"
    "  config   [--json]                    the effective policy, the source of each field,\n"
    "                                       the platform and the plugin search path\n"
    "  freeze   [--output FILE] [--device D]...\n"
    "                                       write the resolved (op, device, dtype) -> impl\n"
    "                                       table as a manifest for VLLM_FL_MANIFEST\n"
    "  verify   [OP...] [--device D] [--dtype T] [--quick] [--json]\n"
    "                                       every implementation against the reference\n"
    "                                       on generated inputs, within tolerances\n"
    "  doctor   [PATH...] [--timeout S] [--json]\n"
    "                                       load each plugin in a child process; report\n"
    "                                       crashes (signal and stage) and hangs\n"
    "  tune     [OP...] [--dtype T] [--shapes SPEC] [--out FILE] [--json]\n"
    "                                       time every implementation per row bucket and\n"
    "                                       write a manifest of the fastest correct ones\n"
    "  stats    FILE... [--by-rank] [--json | --prometheus]\n"
    "                                       merge the counters files of a deployment's\n"
    "                                       processes and ranks into one report\n"
    "\n"
    "Options:\n"
    "  -h, --help     this help; 'fldispatch <command> --help' (or 'fldispatch help\n"
    "                 <command>') for one command\n"
    "  --version      the versions of the tool and of the library it loaded\n"
    "  --             ends a command's options: what follows is an operand\n"
    "\n"
    "D: %s.  T: f32 (default), f16, bf16, any.\n"
    "The policy comes from the VLLM_FL_* environment variables and YAML files\n"
    "('fldispatch config' shows each field and its source).\n"
    "\n"
    "--json prints one JSON object with a \"schema\" number (docs/json-output.md).\n"
    "\n"
    "Exit status: 0 success, 1 a check failed, 2 usage or configuration error,\n"
    "3 no implementation available.\n";

static void print_usage(FILE *f)
{
    fprintf(f, usage_text, cli_device_list(CLI_DEVICES_DEFAULT));
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    size_t len = strlen(message);
    /* After a question ("did you mean 'x'?") the hint goes in parentheses. */
    bool question = len > 0 && message[len - 1] == '?';
    fprintf(stderr, "fldispatch%s%s: %s%stry 'fldispatch %s%s--help'%s\n", cmd ? " " : "",
            cmd ? cmd : "", cli_text(message), question ? " (" : "; ", cmd ? cmd : "",
            cmd ? " " : "", question ? ")" : "");
    return CLI_EXIT_USAGE;
}

static int find_strict(const fld_config_field *f, void *user)
{
    if (strcmp(f->key, "strict") != 0)
        return 0;
    *(bool *)user = strcmp(f->value, "true") == 0;
    return 1;
}

/* A plugin rejected for its configuration: its register_builtins returned
 * FLD_ECONFIG (a bad VLLM_FL_CPU_* value, for the cpu plugin). The host
 * words such a reason "register_builtins failed: plugin 'NAME' returned
 * status <FLD_ECONFIG> (<fld_strerror()>)...". */
static int report_rejected(const fld_plugin_info *p, void *user)
{
    char status[96];
    snprintf(status, sizeof status, " returned status %d (%s)", FLD_ECONFIG,
             fld_strerror(FLD_ECONFIG));
    if (p->status != FLD_PLUGIN_REJECTED || !p->reason ||
        strncmp(p->reason, "register_builtins failed: ", 26) != 0 || !strstr(p->reason, status))
        return 0;
    fprintf(stderr, "fldispatch: plugin '%s' (%s) rejected: %s\n", cli_text(p->name),
            cli_text(p->path), cli_text(p->reason));
    ++*(int *)user;
    return 0;
}

int cli_init(void)
{
    int rc = fld_init();
    if (rc != FLD_OK) {
        const char *detail = fld_last_error();
        fprintf(stderr, "fldispatch: %s\n", *detail ? detail : fld_strerror(rc));
        return CLI_EXIT_USAGE;
    }
    /* A plugin rejected for its configuration leaves its ops to the others
     * (a bad VLLM_FL_CPU_* value: every op on reference.c). Strict means no
     * such silent fallback: a configuration error, as a bad core variable
     * is. (A plugin rejected for its file or ABI is list --strict's.) */
    bool strict = false;
    fld_foreach_config_field(find_strict, &strict);
    int rejected = 0;
    if (strict)
        fld_foreach_plugin(report_rejected, &rejected);
    if (rejected) {
        fprintf(stderr,
                "fldispatch: %d plugin(s) rejected for their configuration under the strict "
                "policy (VLLM_FL_STRICT=1 or strict: true), which allows no fallback: fix the "
                "configuration, or turn strict off\n",
                rejected);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

bool cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

/* The device names come from the library's device table (fld__device_row()). */

unsigned cli_device_count(void)
{
    unsigned n = 0;
    while (fld__device_row(n))
        n++;
    return n;
}

int cli_device_bit_type(unsigned bit)
{
    const struct fld_tool_device *d = fld__device_row(bit);
    return d ? d->type : 0;
}

uint32_t cli_device_mask(int device_type)
{
    /* The row fld_device_name() names: both Ascend codes give ASCEND. */
    const char *name = fld_device_name(device_type);
    const struct fld_tool_device *d;
    for (unsigned i = 0; name && (d = fld__device_row(i)); i++)
        if (strcmp(d->name, name) == 0)
            return d->mask;
    return 0;
}

const char *cli_device_bit_name(unsigned bit)
{
    const struct fld_tool_device *d = fld__device_row(bit);
    return d ? d->name : NULL;
}

const char *cli_device_list(enum cli_device_list style)
{
    static char lists[CLI_DEVICE_LIST_COUNT][256];
    char *buf = lists[style];
    if (buf[0])
        return buf;
    const bool with_or = style == CLI_DEVICES_OR || style == CLI_DEVICES_DEFAULT_OR;
    const bool with_default = style == CLI_DEVICES_DEFAULT || style == CLI_DEVICES_DEFAULT_OR;
    const unsigned n = cli_device_count();
    size_t used = 0;
    for (unsigned i = 0; i < n && used < sizeof lists[0]; i++) {
        const char *sep = i == 0 ? "" : with_or && i == n - 1 ? " or " : ", ";
        int len = snprintf(
            buf + used, sizeof lists[0] - used, "%s%s%s", sep, fld__device_row(i)->name,
            with_default && fld__device_row(i)->type == FLD_DEVICE_CPU ? " (default)" : "");
        if (len < 0)
            break;
        used += (size_t)len;
    }
    return buf;
}

const char *cli_dtype_bit_name(unsigned bit)
{
    const struct fld_tool_dtype *d = fld__dtype_row(bit); /* the library's dtype table */
    return d ? d->name : NULL;
}

static const char *mask_text(uint32_t mask, const char *(*bit_name)(unsigned), char *buf,
                             size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned bit = 0; bit < 32; bit++) {
        if (!(mask & (1u << bit)))
            continue;
        const char *name = bit_name(bit);
        char unknown[16];
        if (!name) {
            snprintf(unknown, sizeof unknown, "bit%u", bit);
            name = unknown;
        }
        int n = snprintf(buf + used, size - used, "%s%s", used ? "," : "", name);
        if (n < 0 || (size_t)n >= size - used)
            break;
        used += (size_t)n;
    }
    if (used == 0)
        snprintf(buf, size, "-");
    return buf;
}

const char *cli_devices_text(uint32_t mask, char *buf, size_t size)
{
    return mask_text(mask, cli_device_bit_name, buf, size);
}

const char *cli_dtypes_text(uint32_t mask, char *buf, size_t size)
{
    return mask_text(mask, cli_dtype_bit_name, buf, size);
}

const char *cli_plugin_status_name(fld_plugin_status st)
{
    const char *name = fld_plugin_status_name(st);
    return name ? name : "unknown";
}

static int print_version(void)
{
    printf("fldispatch %s (library %s, plugin ABI %d.%d)\n", FLD_VERSION_STRING, fld_version(),
           FLD_PLUGIN_ABI_MAJOR, FLD_PLUGIN_ABI_MINOR);
    return CLI_EXIT_OK;
}

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"list", cmd_list},     {"resolve", cmd_resolve}, {"bench", cmd_bench},
    {"config", cmd_config}, {"freeze", cmd_freeze},   {"verify", cmd_verify},
    {"doctor", cmd_doctor}, {"tune", cmd_tune},       {"stats", cmd_stats},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return &commands[i];
    return NULL;
}

static int unknown_command(const char *name)
{
    const char *names[N_COMMANDS + 1];
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    names[N_COMMANDS] = "help";
    char hint[128];
    cli_did_you_mean(name, names, N_COMMANDS + 1, hint, sizeof hint);
    return cli_usage_error(NULL, "unknown command '%s'%s", name, hint);
}

/* "fldispatch help [COMMAND]": the same text as "fldispatch COMMAND --help". */
static int help(int argc, char **argv)
{
    if (argc < 3) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (argc > 3)
        return cli_usage_error(NULL, "'help' takes one command ('%s' and '%s')", argv[2], argv[3]);
    if (strcmp(argv[2], "help") == 0) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    const struct command *c = find_command(argv[2]);
    if (!c)
        return unknown_command(argv[2]);
    char help_flag[] = "--help";
    char *sub_argv[] = {argv[2], help_flag, NULL};
    return c->run(2, sub_argv);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    /* "--" ends the top-level options: what follows is a command, even if it starts with '-'. */
    bool operands = strcmp(argv[1], "--") == 0;
    if (operands) {
        if (argc < 3)
            return cli_usage_error(NULL, "no command after '--'");
        argv[1] = argv[0];
        argc--;
        argv++;
    }
    const char *cmd = argv[1];
    if (!operands && cli_is_help(cmd)) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0)
        return help(argc, argv);
    if ((!operands && strcmp(cmd, "--version") == 0) || strcmp(cmd, "version") == 0)
        return print_version();

    const struct command *c = find_command(cmd);
    if (c)
        return c->run(argc - 1, argv + 1);
    if (cmd[0] == '-' && !operands) {
        static const char *const top_options[] = {"--help", "--version"};
        char hint[128];
        cli_did_you_mean(cmd, top_options, 2, hint, sizeof hint);
        return cli_usage_error(NULL, "unknown option '%s'%s", cmd, hint);
    }
    return unknown_command(cmd);
}
