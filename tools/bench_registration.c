/*
 * fldispatch bench --registration: what registering many ops costs (options
 * are parsed by cmd_bench.c).
 *
 * An in-process plugin ("bench_reg") registers N ops (bench_reg_000000,
 * ...) with K implementations each (vendor.bench_reg0 ...). For each N of
 * the list, in a fresh library (fld_init() ... fld_shutdown()):
 *   register  the time of fld_register_plugin(): the plugin's
 *             register_builtins (validation and staging of every record)
 *             plus the commit (interning the ops, filing the records);
 *   memory    the heap in use after it minus before (glibc mallinfo2():
 *             what the library keeps, not what it touched on the way),
 *             with the peak of the process's resident set (VmHWM) beside it;
 *   resolve   one fld_resolve() of every op (the first choice of each);
 *   reload    fld_reload() with all of them registered.
 * Each N runs reps times; the figures are the medians. The target of issue
 * 14 is printed for N = 4000, K = 1: register < 50 ms and < 4 MB. Speed
 * targets never change the exit status.
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

#define TARGET_OPS  4000
#define TARGET_MS   50.0
#define TARGET_MIB  4.0
#define OPS_MAX     1000000
#define IMPLS_MAX   64
#define REG_NAME_SZ 32

static long reg_ops, reg_impls;

static int kernel_ok(const void *args)
{
    (void)args;
    return FLD_OK;
}

static void op_name(char *buf, long i)
{
    snprintf(buf, REG_NAME_SZ, "bench_reg_%06ld", i);
}

static int reg_register(fld_registry *reg)
{
    char op[REG_NAME_SZ], id[REG_NAME_SZ];
    for (long i = 0; i < reg_ops; i++) {
        op_name(op, i);
        for (long k = 0; k < reg_impls; k++) {
            snprintf(id, sizeof id, "vendor.bench_reg%ld", k);
            const fld_impl impl = {
                .op = op,
                .impl_id = id,
                .kind = FLD_KIND_VENDOR,
                .vendor = "bench_reg",
                .priority = FLD_PRIORITY_VENDOR - (int)k,
                .devices = FLD_DEVICE_MASK_CPU,
                .dtypes = FLD_DTYPE_MASK_ALL,
                .fn = kernel_ok,
            };
            int rc = fld_registry_register(reg, &impl);
            if (rc != FLD_OK)
                return rc;
        }
    }
    return FLD_OK;
}

static const fld_plugin_descriptor reg_plugin = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = FLD_PLUGIN_FLAG_IN_TREE,
    .name = "bench_reg",
    .version = FLD_VERSION_STRING,
    .host_version = FLD_VERSION_STRING,
    .register_builtins = reg_register,
};

/* The peak resident set of the process in KiB (VmHWM), 0 when unknown. */
static long peak_rss_kib(void)
{
    char kib[64];
    return bench_proc_field("/proc/self/status", "VmHWM", kib, sizeof kib) ? atol(kib) : 0;
}

struct reg_figures {
    double register_ms, resolve_ms, reload_ms, heap_mib;
};

/* One measurement in a fresh library; false (message on stderr) on failure. */
static bool measure_once(long ops, struct reg_figures *f)
{
    if (fld_init() != FLD_OK) {
        fprintf(stderr, "fldispatch bench: fld_init: %s\n", fld_last_error());
        return false;
    }
    reg_ops = ops;
    struct mallinfo2 before = mallinfo2();
    double t0 = bench_now_ns();
    int rc = fld_register_plugin(&reg_plugin);
    double t1 = bench_now_ns();
    struct mallinfo2 after = mallinfo2();
    if (rc != FLD_OK) {
        fprintf(stderr, "fldispatch bench: registering %ld ops: %s\n", ops, fld_last_error());
        fld_shutdown();
        return false;
    }
    char op[REG_NAME_SZ];
    const char *impl;
    double t2 = bench_now_ns();
    for (long i = 0; i < ops && rc == FLD_OK; i++) {
        op_name(op, i);
        rc = fld_resolve(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &impl);
    }
    double t3 = bench_now_ns();
    if (rc == FLD_OK)
        rc = fld_reload();
    double t4 = bench_now_ns();
    if (rc != FLD_OK) {
        fprintf(stderr, "fldispatch bench: resolving or reloading %ld ops: %s\n", ops,
                fld_last_error());
        fld_shutdown();
        return false;
    }
    fld_shutdown();
    f->register_ms = (t1 - t0) / 1e6;
    f->resolve_ms = (t3 - t2) / 1e6;
    f->reload_ms = (t4 - t3) / 1e6;
    /* A malloc that mallinfo2() does not see (a sanitizer's) leaves both at 0. */
    f->heap_mib = before.uordblks == 0 && after.uordblks == 0
                      ? NAN
                      : ((double)after.uordblks - (double)before.uordblks) / (1024.0 * 1024.0);
    return true;
}

int bench_registration_run(const int64_t *ops, int n_ops, long impls, int reps)
{
    printf("fldispatch bench --registration: an in-process plugin registers N ops with %ld "
           "implementation%s each; median of %d fresh libraries per line\n",
           impls, impls == 1 ? "" : "s", reps);
    printf("%10s %14s %12s %14s %14s %12s\n", "ops", "register ms", "us per op", "heap MiB",
           "resolve all ms", "reload ms");
    reg_impls = impls;
    bool target_seen = false, target_met = false;
    double target_ms = 0, target_mib = 0;
    for (int i = 0; i < n_ops; i++) {
        double reg[1000], heap[1000], res[1000], rel[1000];
        for (int r = 0; r < reps; r++) {
            struct reg_figures f;
            if (!measure_once(ops[i], &f))
                return CLI_EXIT_CHECK_FAILED;
            reg[r] = f.register_ms;
            heap[r] = f.heap_mib;
            res[r] = f.resolve_ms;
            rel[r] = f.reload_ms;
        }
        double reg_ms = bench_median(reg, reps), mib = bench_median(heap, reps);
        char mib_text[32];
        if (isnan(mib))
            snprintf(mib_text, sizeof mib_text, "n/a");
        else
            snprintf(mib_text, sizeof mib_text, "%.3f", mib);
        printf("%10lld %14.2f %12.2f %14s %14.2f %12.2f\n", (long long)ops[i], reg_ms,
               reg_ms * 1e3 / (double)ops[i], mib_text, bench_median(res, reps),
               bench_median(rel, reps));
        if (ops[i] == TARGET_OPS && impls == 1) {
            target_seen = true;
            target_ms = reg_ms;
            target_mib = mib;
            target_met = reg_ms < TARGET_MS && mib < TARGET_MIB;
        }
    }
    printf("peak resident set of the process: %.1f MiB\n", (double)peak_rss_kib() / 1024.0);
    if (target_seen)
        printf("target (issue 14): %d ops with 1 implementation each registered in < %.0f ms "
               "and < %.0f MiB: %.2f ms, %.3f MiB  %s\n",
               TARGET_OPS, TARGET_MS, TARGET_MIB, target_ms, target_mib,
               target_met ? "met" : "MISSED");
    return CLI_EXIT_OK;
}
