/* SPDX-License-Identifier: Apache-2.0 */
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
 * Each N runs reps times; the figures are the medians, printed as a table
 * or, with --json, as the document "benchmark": "registration"
 * (docs/schemas/bench.schema.json). The tool reports measurements only: the
 * registration target (N = 4000, K = 1: register < 50 ms and < 4 MiB) is
 * checked by bench/targets.py from that document.
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "../cli.h"
#include "../json.h"

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

/* The medians of one count of ops. */
struct reg_row {
    long long ops;
    struct reg_figures f;
};

static void report_text_row(const struct reg_row *row)
{
    char mib_text[32];
    if (isnan(row->f.heap_mib))
        snprintf(mib_text, sizeof mib_text, "n/a");
    else
        snprintf(mib_text, sizeof mib_text, "%.3f", row->f.heap_mib);
    printf("%10lld %14.2f %12.2f %14s %14.2f %12.2f\n", row->ops, row->f.register_ms,
           row->f.register_ms * 1e3 / (double)row->ops, mib_text, row->f.resolve_ms,
           row->f.reload_ms);
}

static void report_json(const struct reg_row *rows, int n_rows, long impls, int reps, long peak_kib)
{
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "benchmark");
    json_string(&w, "registration");
    json_key(&w, "impls");
    json_int(&w, impls);
    json_key(&w, "reps");
    json_int(&w, reps);
    json_key(&w, "machine");
    json_begin_object(&w);
    json_key(&w, "cpu");
    json_string(&w, cpu);
    json_key(&w, "threads");
    json_int(&w, sysconf(_SC_NPROCESSORS_ONLN));
    json_end_object(&w);
    json_key(&w, "results");
    json_begin_array(&w);
    for (int i = 0; i < n_rows; i++) {
        const struct reg_row *row = &rows[i];
        json_begin_object(&w);
        json_key(&w, "ops");
        json_int(&w, row->ops);
        json_key(&w, "register_ms");
        json_double(&w, row->f.register_ms, 3);
        json_key(&w, "us_per_op");
        json_double(&w, row->f.register_ms * 1e3 / (double)row->ops, 3);
        json_key(&w, "heap_mib"); /* NAN (null) where mallinfo2() sees nothing */
        json_double(&w, row->f.heap_mib, 3);
        json_key(&w, "resolve_all_ms");
        json_double(&w, row->f.resolve_ms, 3);
        json_key(&w, "reload_ms");
        json_double(&w, row->f.reload_ms, 3);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "peak_rss_mib");
    if (peak_kib > 0)
        json_double(&w, (double)peak_kib / 1024.0, 1);
    else
        json_null(&w);
    json_end_object(&w);
    json_finish(&w);
}

int bench_registration_run(const int64_t *ops, int n_ops, long impls, int reps, bool json)
{
    if (!json) {
        printf("fldispatch bench --registration: an in-process plugin registers N ops with %ld "
               "implementation%s each; median of %d fresh libraries per line\n",
               impls, impls == 1 ? "" : "s", reps);
        printf("%10s %14s %12s %14s %14s %12s\n", "ops", "register ms", "us per op", "heap MiB",
               "resolve all ms", "reload ms");
    }
    reg_impls = impls;
    struct reg_row rows[BENCH_MAX_LIST];
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
        rows[i] = (struct reg_row){
            .ops = (long long)ops[i],
            .f = {.register_ms = bench_median(reg, reps),
                  .resolve_ms = bench_median(res, reps),
                  .reload_ms = bench_median(rel, reps),
                  .heap_mib = bench_median(heap, reps)},
        };
        if (!json)
            report_text_row(&rows[i]);
    }
    long peak_kib = peak_rss_kib();
    if (json)
        report_json(rows, n_ops, impls, reps, peak_kib);
    else
        printf("peak resident set of the process: %.1f MiB\n", (double)peak_kib / 1024.0);
    return CLI_EXIT_OK;
}
