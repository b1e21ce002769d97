/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench OP...: what the kernel benchmark (kernels.c) hands
 * its report (report.c): the record of one run -- the plan, the
 * STREAM or d2d copy samples, one result per line -- and the two writers
 * of that record, text and JSON.
 *
 * The measuring side fills the record and the report only reads it: the
 * record is the one thing the two files share, and report.c calls nothing
 * of kernels.c (each result carries its op's name and shapes). bench.h
 * stays the interface of the modes to cmd_bench.c.
 *
 * The report prints measurements only (time, GB/s, share of the STREAM or
 * d2d ceiling, elements per second and per cycle). Speed targets of this
 * project are checked outside the tool, by bench/targets.py on the --json
 * output (docs/BENCHMARKS.md).
 */
#ifndef FLD_TOOLS_BENCH_REPORT_H
#define FLD_TOOLS_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "../catalog.h"

#define N_OPS    TOOL_MAX_OPS /* at most: bench_op_names() has bench_op_count() */
#define N_DTYPES 3            /* TOOL_F32, TOOL_F16, TOOL_BF16: the FLD_DTYPE_MASK_* bit order */

#define ROTARY_HEAD_SIZE 128
#define ENV_THREADS      "VLLM_FL_CPU_THREADS"

/* ---- the record of a run ------------------------------------------------------- */

struct impl_entry {
    char op[64];
    char id[128];
    char reason[256]; /* why unavailable */
    uint32_t devices, dtypes;
    bool available;
};

struct impl_table {
    struct impl_entry *v;
    size_t n, cap;
    bool oom;
};

struct plugin_line {
    char detail[512];
    char reason[256];
    bool found;
};

struct bench_result {
    int op; /* index in bench_op_names() */
    const char *op_name;
    int dtype, threads;
    int64_t tokens;
    bool residual;
    bool selected; /* the impl the policy selects by default for (op, dtype) */
    char impl[128];
    char shape[48];      /* "TxH" ("+res" with a fused residual), "Tx<H/128>x128" for rotary */
    char json_shape[48]; /* the same without "+res" (the JSON document's "residual" says it) */
    double bytes, us; /* us NAN when the call failed */
    double elements;
    long batch;
};

struct bench_run {
    const struct bench_kernel_options *opt;
    double batch_ns;
    struct impl_table impls;
    /* impl ids to run per (op, dtype): indices into `planned` */
    char (*planned)[128];
    size_t n_planned;
    size_t plan_first[N_OPS][N_DTYPES], plan_count[N_OPS][N_DTYPES];
    char selected[N_OPS][N_DTYPES][128]; /* under the caller's policy, "" if none */

    /* thread counts: groups run, and those STREAM measures */
    int group_threads[BENCH_MAX_LIST];
    int n_groups;
    bool reinit;
    int default_threads; /* the plugin's; the "all threads" STREAM figure */
    int stream_threads[BENCH_MAX_LIST + 2];
    int n_stream_threads;

    struct bench_stream *stream;
    struct bench_stream_figures *samples;
    size_t n_samples, cap_samples;
    int stream_runs;

    /* devices other than the CPU: the d2d copy baseline and its runs */
    bool on_device;
    struct bench_d2d *d2d;
    double d2d_gbps[1024];
    int d2d_runs;
    char provider[128];        /* the plugin serving the device's memory */
    char provider_detail[512]; /* its detail line */

    struct bench_result *results;
    size_t n_results, cap_results;
    size_t total_lines, done_lines;
    bool progress;
    bool failed;

    char cpu[256];
    double cpu_ghz; /* clock.c; 0 unknown */
    const char *cpu_ghz_source;
    struct plugin_line plugin;
    char isa[64];
};

/* ---- the report (report.c) ------------------------------------------------ */

/* The text table, with the machine, the ceiling and the method in its head. */
void bench_report_text(const struct bench_run *r);

/* The document of docs/schemas/bench.schema.json ("benchmark": "kernels"). */
void bench_report_json(const struct bench_run *r);

#endif
