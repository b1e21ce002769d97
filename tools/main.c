/*
 * fldispatch — inspect and exercise the operator dispatcher.
 *
 * main() picks the command; each command (cmd_*.c) parses its own options,
 * initialises the library and prints text or JSON. Exit statuses are in
 * cli.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "Usage: fldispatch <command> [options]\n"
    "\n"
    "Inspect and exercise the fldispatch operator dispatcher.\n"
    "\n"
    "Commands:\n"
    "  list     [--json]                    plugins and every registered implementation\n"
    "  resolve  OP [--device D] [--dtype T] [--json]\n"
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
    "\n"
    "Options:\n"
    "  -h, --help     this help; 'fldispatch <command> --help' for one command\n"
    "  --version      the versions of the tool and of the library it loaded\n"
    "\n"
    "D: cpu (default), cuda, rocm, ascend.  T: f32 (default), f16, bf16, any.\n"
    "The policy comes from the VLLM_FL_* environment variables and YAML files\n"
    "('fldispatch config' shows each field and its source).\n"
    "\n"
    "Exit status: 0 success, 1 a check failed, 2 usage or configuration error,\n"
    "3 no implementation available.\n";

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fldispatch%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; try 'fldispatch %s%s--help'\n", cmd ? cmd : "", cmd ? " " : "");
    return CLI_EXIT_USAGE;
}

int cli_init(void)
{
    int rc = fld_init();
    if (rc == FLD_OK)
        return CLI_EXIT_OK;
    const char *detail = fld_last_error();
    fprintf(stderr, "fldispatch: %s\n", *detail ? detail : fld_strerror(rc));
    return CLI_EXIT_USAGE;
}

bool cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int cli_option_value(const char *cmd, int argc, char **argv, int *i, const char *name,
                     const char **value)
{
    const char *arg = argv[*i];
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0)
        return 0;
    if (arg[len] == '=') {
        *value = arg + len + 1;
        return 1;
    }
    if (arg[len] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option '%s' needs a value", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

static const char *const device_bits[] = {"cpu", "cuda", "rocm", "ascend"};
static const char *const dtype_bits[] = {"f32", "f16", "bf16"};

uint32_t cli_device_mask(int device_type)
{
    switch (device_type) {
    case FLD_DEVICE_CPU:
        return FLD_DEVICE_MASK_CPU;
    case FLD_DEVICE_CUDA:
        return FLD_DEVICE_MASK_CUDA;
    case FLD_DEVICE_ROCM:
        return FLD_DEVICE_MASK_ROCM;
    default:
        return FLD_DEVICE_MASK_ASCEND;
    }
}

const char *cli_device_bit_name(unsigned bit)
{
    return bit < sizeof device_bits / sizeof device_bits[0] ? device_bits[bit] : NULL;
}

const char *cli_dtype_bit_name(unsigned bit)
{
    return bit < sizeof dtype_bits / sizeof dtype_bits[0] ? dtype_bits[bit] : NULL;
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
    switch (st) {
    case FLD_PLUGIN_LOADED:
        return "loaded";
    case FLD_PLUGIN_UNAVAILABLE:
        return "unavailable";
    case FLD_PLUGIN_REJECTED:
        return "rejected";
    case FLD_PLUGIN_SKIPPED:
        return "skipped";
    }
    return "unknown";
}

static int print_version(void)
{
    printf("fldispatch %s (library %s, plugin ABI %d.%d)\n", FLD_VERSION_STRING, fld_version(),
           FLD_PLUGIN_ABI_MAJOR, FLD_PLUGIN_ABI_MINOR);
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {
        {"list", cmd_list},     {"resolve", cmd_resolve}, {"bench", cmd_bench},
        {"config", cmd_config}, {"freeze", cmd_freeze},   {"verify", cmd_verify},
        {"doctor", cmd_doctor},
    };

    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (cli_is_help(cmd) || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0)
        return print_version();

    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    if (cmd[0] == '-')
        return cli_usage_error(NULL, "unknown option '%s'", cmd);
    return cli_usage_error(NULL, "unknown command '%s'", cmd);
}
