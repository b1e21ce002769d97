/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench: option parsing and the choice of mode.
 *
 *   bench [OP...] [options]   kernel benchmark (bench/kernels.c, with the
 *                             STREAM ceiling of bench/stream.c)
 *   bench --overhead          dispatch overhead per call (bench/overhead.c)
 *   bench --registration      the cost of registering many ops
 *                             (bench/registration.c)
 *
 * The helpers the bench files share are bench/util.c's (bench/util.h).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "catalog.h"
#include "cli.h"
#include "options.h"
#include "suggest.h"

/* A printf format: its conversions are the op list and the device list. */
static const char bench_usage[] =
    "Usage: fldispatch bench [--device D] [--dtype T] [--threads N[,N...]]\n"
    "                        [--tokens N[,N...]] [--hidden N] [--reps N] [--impl ID]\n"
    "                        [--copy-mib N] [--quick] [--json] [--] [OP...]\n"
    "       fldispatch bench --overhead [--reps N] [--calls N] [--json]\n"
    "       fldispatch bench --registration [--ops N[,N...]] [--impls K] [--reps N]\n"
    "                        [--json]\n"
    "\n"
    "Times every available implementation of each OP through the dispatcher,\n"
    "pinned to it alone (per-op policy impl:ID, strict), and compares its memory\n"
    "traffic with a STREAM triad measured in the same run (on other devices than\n"
    "the CPU: with a device-to-device copy measured in the same run).\n"
    "\n"
    "  OP              %s\n"
    "  --device D      %s: tensors in that device's\n"
    "                  memory (from its plugin's device hooks; exit 3 naming the\n"
    "                  reason when no plugin provides it), every timed batch ended\n"
    "                  by fld_device_synchronize\n"
    "  --dtype T       f32, f16 or bf16, or a comma list (default: all three)\n"
    "  --threads LIST  threads per call of the cpu plugin, e.g. 1,2: each value runs\n"
    "                  with VLLM_FL_CPU_THREADS set and the library re-initialised\n"
    "                  (default: the plugin's default thread count); cpu only\n"
    "  --tokens LIST   tokens (rows) per call (default 1,32,512,4096)\n"
    "  --hidden N      hidden size H (default 4096; rotary: a multiple of 128)\n"
    "  --reps N        timed batches per line, the median is reported (default 7)\n"
    "  --impl ID       only this implementation (default: every available one)\n"
    "  --copy-mib N    devices other than cpu: MiB of the d2d copy baseline's buffers\n"
    "                  (default 1024, 256 with --quick)\n"
    "  --quick         tokens 1,32, 3 repetitions, 2 ms batches (for tests)\n"
    "  --json          {\"schema\", \"benchmark\": \"kernels\", \"machine\": {...},\n"
    "                  \"results\": [...]}\n"
    "                  (docs/schemas/bench.schema.json)\n"
    "\n"
    "Shapes (T tokens): activations x [T, 2H] -> out [T, H], shown TxH; rms_norm\n"
    "and gemma_rms_norm x [T, H] -> out [T, H] with weight (and one fused-residual\n"
    "line at the largest T); rotary_embedding T tokens x 32 query heads and 32\n"
    "key heads of 128 (H/128 at other H), rot_dim 128, neox, int64 positions,\n"
    "shown Tx32x128.\n"
    "Columns: us = median time of one call, dispatch included; GB/s = bytes read\n"
    "plus bytes written (each tensor once) / time; bw_share = GB/s / the STREAM\n"
    "triad with the same number of threads (a fraction in --json); on other\n"
    "devices GB/s / the d2d copy's GB/s (2 x buffer bytes per copy: read + write).\n"
    "--json says which in \"baseline\": \"stream_triad\" or \"d2d_copy\".\n"
    "\n"
    "--overhead: the dispatch overhead per call of rms_norm on a [1, 4096] float32\n"
    "row, one and two threads, against a direct call of the same kernel (handle,\n"
    "name and typed calls, with a null and a loop kernel); --reps defaults to 15,\n"
    "--calls N calls per timed batch with the null kernel (default 200000);\n"
    "--json: \"benchmark\": \"dispatch_overhead\".\n"
    "\n"
    "--registration: the time and heap memory of registering N ops with K\n"
    "implementations each from one in-process plugin, in a fresh library per\n"
    "measurement (--ops default 1000,4000; --impls default 1; --reps default 3),\n"
    "then resolving each op once and fld_reload().\n"
    "--json: \"benchmark\": \"registration\".\n"
    "\n"
    "Every mode reports measurements only. This project's speed targets are\n"
    "checked from the --json document by bench/targets.py (in the source tree).\n"
    "See bench/README.md for the method.\n"
    "Without OP, an op and dtype that nothing here can run (none registered for\n"
    "the device, or none available) is skipped with a note on stderr.\n"
    "Exit status: 0 success, 1 a call failed, 2 usage, 3 no implementation for\n"
    "a named op, device and dtype (without OP: for any of them).\n";

/* ---- option values ------------------------------------------------------------ */

static int parse_count(const char *option, const char *text, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 1 || v > max)
        return cli_usage_error("bench", "%s wants a whole number from 1 to %ld, not '%s'", option,
                               max, text);
    *out = v;
    return CLI_EXIT_OK;
}

/* "1,2,4": each a whole number in [1, max]; at most BENCH_MAX_LIST values. */
static int parse_list(const char *option, const char *text, long max, int64_t *out, int *n)
{
    *n = 0;
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        char item[32];
        if (len == 0 || len >= sizeof item)
            return cli_usage_error("bench",
                                   "%s wants a comma list of whole numbers from 1 to %ld, "
                                   "not '%s'",
                                   option, max, text);
        memcpy(item, p, len);
        item[len] = '\0';
        char *end;
        errno = 0;
        long v = strtol(item, &end, 10);
        if (errno || end == item || *end || v < 1 || v > max)
            return cli_usage_error("bench", "%s wants whole numbers from 1 to %ld, not '%s'",
                                   option, max, item);
        if (*n >= BENCH_MAX_LIST)
            return cli_usage_error("bench", "%s takes at most %d values", option, BENCH_MAX_LIST);
        out[(*n)++] = v;
        if (p[len] == '\0')
            return CLI_EXIT_OK;
        p += len + 1;
    }
}

/* "f32", "bf16,f16": FLD_DTYPE_MASK_* bits. */
static int parse_dtypes(const char *text, uint32_t *mask)
{
    *mask = 0;
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        char item[32];
        DLDataType dt;
        if (len == 0 || len >= sizeof item)
            return cli_usage_error("bench", "--dtype wants f32, f16 or bf16, not '%s'", text);
        memcpy(item, p, len);
        item[len] = '\0';
        if (fld_dtype_from_name(item, &dt) != FLD_OK || dt.code == 0)
            return cli_usage_error("bench", "--dtype wants f32, f16 or bf16, not '%s'", item);
        *mask |= dt.code == kDLBfloat ? FLD_DTYPE_MASK_BF16
                 : dt.bits == 16      ? FLD_DTYPE_MASK_F16
                                      : FLD_DTYPE_MASK_F32;
        if (p[len] == '\0')
            return CLI_EXIT_OK;
        p += len + 1;
    }
}

static int op_index(const char *name)
{
    const char *const *ops = bench_op_names();
    for (int i = 0; ops[i]; i++)
        if (strcmp(ops[i], name) == 0)
            return i;
    return -1;
}

/* ---- options ------------------------------------------------------------------ */

/* The modes an option applies to: bench [OP...], --overhead, --registration. */
enum { MODE_KERNELS = 1, MODE_OVERHEAD = 2, MODE_REGISTRATION = 4, MODE_ALL = 7 };

enum {
    OPT_OVERHEAD,
    OPT_JSON,
    OPT_QUICK,
    OPT_REPS,
    OPT_CALLS,
    OPT_DEVICE,
    OPT_DTYPE,
    OPT_THREADS,
    OPT_TOKENS,
    OPT_HIDDEN,
    OPT_COPY_MIB,
    OPT_IMPL,
    OPT_REGISTRATION,
    OPT_OPS,
    OPT_IMPLS
};

static const struct cli_option options[] = {
    [OPT_OVERHEAD] = {"--overhead", false},
    [OPT_JSON] = {"--json", false},
    [OPT_QUICK] = {"--quick", false},
    [OPT_REPS] = {"--reps", true},
    [OPT_CALLS] = {"--calls", true},
    [OPT_DEVICE] = {"--device", true},
    [OPT_DTYPE] = {"--dtype", true},
    [OPT_THREADS] = {"--threads", true},
    [OPT_TOKENS] = {"--tokens", true},
    [OPT_HIDDEN] = {"--hidden", true},
    [OPT_COPY_MIB] = {"--copy-mib", true},
    [OPT_IMPL] = {"--impl", true},
    [OPT_REGISTRATION] = {"--registration", false},
    [OPT_OPS] = {"--ops", true},
    [OPT_IMPLS] = {"--impls", true},
    {NULL, false},
};

/* Indexed as options[]; the mode flags apply to their own mode. */
static const unsigned char option_modes[] = {
    [OPT_OVERHEAD] = MODE_OVERHEAD,
    [OPT_JSON] = MODE_ALL,
    [OPT_QUICK] = MODE_KERNELS,
    [OPT_REPS] = MODE_ALL,
    [OPT_CALLS] = MODE_OVERHEAD,
    [OPT_DEVICE] = MODE_KERNELS,
    [OPT_DTYPE] = MODE_KERNELS,
    [OPT_THREADS] = MODE_KERNELS,
    [OPT_TOKENS] = MODE_KERNELS,
    [OPT_HIDDEN] = MODE_KERNELS,
    [OPT_COPY_MIB] = MODE_KERNELS,
    [OPT_IMPL] = MODE_KERNELS,
    [OPT_REGISTRATION] = MODE_REGISTRATION,
    [OPT_OPS] = MODE_REGISTRATION,
    [OPT_IMPLS] = MODE_REGISTRATION,
};
_Static_assert(sizeof option_modes == sizeof options / sizeof options[0] - 1,
               "option_modes has a row for every option");

/* The command line, parsed. */
struct bench_args {
    struct bench_kernel_options kernels;
    bool overhead, registration, json, reps_set;
    long reps, null_calls, copy_mib;
    int64_t reg_ops[BENCH_MAX_LIST];
    int n_reg_ops;
    long reg_impls;
    bool reg_option;            /* --ops or --impls */
    const char *kernel_option; /* the first option only the kernel bench takes, or "an OP" */
};

static int parse_operand(struct bench_args *b, const char *value)
{
    int i = op_index(value);
    if (i < 0 && strcmp(value, FLD_OP_ATTENTION_BACKEND) == 0)
        return cli_usage_error("bench", "%s has no tensors to benchmark", value);
    if (i < 0) {
        char hint[128];
        cli_did_you_mean(value, bench_op_names(), (size_t)bench_op_count(), hint, sizeof hint);
        return cli_usage_error("bench", "unknown op '%s'%s (ops: %s)", value, hint,
                               tool_wrap_names(bench_op_names(), ", ", 0, 100000, ""));
    }
    b->kernels.ops |= 1u << i;
    b->kernel_option = b->kernel_option ? b->kernel_option : "an OP";
    return CLI_EXIT_OK;
}

/* Option k of options[] with its value (NULL for a flag). */
static int parse_option(struct bench_args *b, int k, const char *value)
{
    struct bench_kernel_options *opt = &b->kernels;
    int64_t list[BENCH_MAX_LIST];
    long hidden;
    switch (k) {
    case OPT_OVERHEAD:
        b->overhead = true;
        break;
    case OPT_JSON:
        b->json = true;
        break;
    case OPT_QUICK:
        opt->quick = true;
        break;
    case OPT_REPS:
        if (parse_count("--reps", value, 1000, &b->reps) != CLI_EXIT_OK)
            return CLI_EXIT_USAGE;
        b->reps_set = true;
        break;
    case OPT_CALLS:
        return parse_count("--calls", value, 1000000000L, &b->null_calls);
    case OPT_DEVICE:
        if (fld_device_from_name(value, &opt->device_type) != FLD_OK)
            return cli_usage_error("bench", "--device wants %s, not '%s'",
                                   cli_device_list(CLI_DEVICES_OR), value);
        break;
    case OPT_DTYPE:
        return parse_dtypes(value, &opt->dtypes);
    case OPT_THREADS:
        if (parse_list("--threads", value, 1024, list, &opt->n_threads) != CLI_EXIT_OK)
            return CLI_EXIT_USAGE;
        for (int t = 0; t < opt->n_threads; t++)
            opt->threads[t] = (int)list[t];
        break;
    case OPT_TOKENS:
        return parse_list("--tokens", value, 1L << 20, opt->tokens, &opt->n_tokens);
    case OPT_HIDDEN:
        if (parse_count("--hidden", value, 1L << 20, &hidden) != CLI_EXIT_OK)
            return CLI_EXIT_USAGE;
        opt->hidden = hidden;
        break;
    case OPT_COPY_MIB:
        return parse_count("--copy-mib", value, 1L << 20, &b->copy_mib);
    case OPT_REGISTRATION:
        b->registration = true;
        break;
    case OPT_OPS:
        b->reg_option = true;
        return parse_list("--ops", value, 1000000, b->reg_ops, &b->n_reg_ops);
    case OPT_IMPLS:
        b->reg_option = true;
        return parse_count("--impls", value, 64, &b->reg_impls);
    case OPT_IMPL:
        if (!*value)
            return cli_usage_error("bench", "--impl wants an impl_id such as vendor.cpu");
        opt->impl = value;
        break;
    }
    return CLI_EXIT_OK;
}

/* CLI_EXIT_OK, CLI_EXIT_USAGE (the error printed), or -1 after printing --help. */
static int parse_options(struct bench_args *b, int argc, char **argv)
{
    *b = (struct bench_args){
        .kernels = {.device_type = FLD_DEVICE_CPU, .dtypes = FLD_DTYPE_MASK_ALL, .hidden = 4096},
        .null_calls = BENCH_OVERHEAD_CALLS,
        .reg_ops = {1000, 4000},
        .n_reg_ops = 2,
        .reg_impls = 1,
    };
    struct cli_args a;
    cli_args_init(&a, "bench", options, argc, argv);
    const char *value;
    for (int k; (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        int rc;
        switch (k) {
        case CLI_ARG_HELP: {
            char tail[48];
            snprintf(tail, sizeof tail, " (default: all %d)", bench_op_count());
            printf(bench_usage, tool_wrap_names(bench_op_names(), " ", 18, 79, tail),
                   cli_device_list(CLI_DEVICES_DEFAULT_OR));
            return -1;
        }
        case CLI_ARG_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_ARG_OPERAND:
            rc = parse_operand(b, value);
            break;
        default:
            if (option_modes[k] == MODE_KERNELS && !b->kernel_option)
                b->kernel_option = options[k].name;
            rc = parse_option(b, k, value);
            break;
        }
        if (rc != CLI_EXIT_OK)
            return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* ---- the command --------------------------------------------------------------- */

static int run_registration(const struct bench_args *b)
{
    if (b->kernel_option || b->overhead || b->null_calls != BENCH_OVERHEAD_CALLS)
        return cli_usage_error("bench", "%s does not apply to --registration",
                               b->kernel_option ? b->kernel_option
                               : b->overhead    ? "--overhead"
                                                : "--calls");
    return bench_registration_run(b->reg_ops, b->n_reg_ops, b->reg_impls,
                                  b->reps_set ? (int)(b->reps < 1000 ? b->reps : 1000) : 3,
                                  b->json);
}

static int run_overhead(const struct bench_args *b)
{
    if (b->kernel_option)
        return cli_usage_error("bench", "%s does not apply to --overhead", b->kernel_option);
    return bench_overhead_run(b->null_calls, b->reps_set ? (int)b->reps : BENCH_OVERHEAD_REPS,
                              b->json);
}

static int run_kernels(struct bench_args *b)
{
    static const int64_t default_tokens[] = {1, 32, 512, 4096};
    static const int64_t quick_tokens[] = {1, 32};
    struct bench_kernel_options *opt = &b->kernels;
    if (b->null_calls != BENCH_OVERHEAD_CALLS)
        return cli_usage_error("bench", "--calls applies to --overhead only");
    if (opt->device_type != FLD_DEVICE_CPU && opt->n_threads > 0)
        return cli_usage_error("bench", "--threads applies to --device cpu only (not %s)",
                               fld_device_name(opt->device_type));
    if (opt->device_type == FLD_DEVICE_CPU && b->copy_mib)
        return cli_usage_error("bench", "--copy-mib applies to devices other than cpu");
    opt->copy_bytes = b->copy_mib ? (size_t)b->copy_mib << 20
                      : opt->quick ? BENCH_D2D_QUICK_BYTES
                                   : BENCH_D2D_BYTES;
    opt->ops_named = opt->ops != 0;
    if (!opt->ops)
        for (int k = 0; bench_op_names()[k]; k++)
            opt->ops |= 1u << k;
    if (opt->n_tokens == 0) {
        const int64_t *src = opt->quick ? quick_tokens : default_tokens;
        opt->n_tokens = opt->quick ? 2 : 4;
        memcpy(opt->tokens, src, (size_t)opt->n_tokens * sizeof *src);
    }
    static const char *const rotary_ops[] = {FLD_OP_ROTARY_EMBEDDING, FLD_OP_ROTARY_EMBEDDING_OUT};
    for (int k = 0; k < 2; k++)
        if (op_index(rotary_ops[k]) >= 0 && (opt->ops & (1u << op_index(rotary_ops[k]))) &&
            opt->hidden % 128 != 0)
            return cli_usage_error("bench",
                                   "--hidden %lld: %s needs a multiple of 128 (heads of 128)",
                                   (long long)opt->hidden, rotary_ops[k]);
    opt->reps = b->reps_set ? (int)b->reps : opt->quick ? 3 : 7;
    opt->json = b->json;
    return bench_kernels_run(opt);
}

int cmd_bench(int argc, char **argv)
{
    struct bench_args b;
    int rc = parse_options(&b, argc, argv);
    if (rc < 0)
        return CLI_EXIT_OK; /* --help */
    if (rc != CLI_EXIT_OK)
        return rc;
    if (b.registration)
        return run_registration(&b);
    if (b.reg_option)
        return cli_usage_error("bench", "--ops and --impls apply to --registration only");
    if (b.overhead)
        return run_overhead(&b);
    return run_kernels(&b);
}
