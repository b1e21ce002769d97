/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench: declarations shared by its files.
 *
 *   ../cmd_bench.c  option parsing, dispatch to a mode
 *   util.c          helpers every mode uses (util.h): clock, medians, affinity
 *   overhead.c      bench --overhead: what dispatch costs per call
 *   registration.c  bench --registration: what registering many ops costs
 *   kernels.c       bench [OP...]: time, GB/s and bandwidth share per
 *                   op, impl, dtype, shape and thread count
 *   report.c        its report, text or JSON (report.h: the run's record)
 *   stream.c        the STREAM-like bandwidth ceiling (triad and copy)
 *   d2d.c           the ceiling on other devices: device-to-device copy
 *   clock.c         the CPU clock, for elements per cycle
 *
 * The method of each is described at the top of its file and in
 * bench/README.md.
 */
#ifndef FLD_TOOLS_BENCH_H
#define FLD_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* ---- bench --overhead (overhead.c) ------------------------------------ */

#define BENCH_OVERHEAD_REPS  15
#define BENCH_OVERHEAD_CALLS 200000L
/*
 * The "schema" number of its --json document ("benchmark":
 * "dispatch_overhead"), which has its own: 2 since "targets" went
 * (bench/targets.py checks them). docs/json-output.md lists the changes.
 */
#define BENCH_OVERHEAD_SCHEMA 2

/* Runs the dispatch overhead benchmark and prints it; returns a CLI exit status. */
int bench_overhead_run(long null_calls, int reps, bool json);

/* ---- bench --registration (registration.c) ----------------------------- */

/*
 * Registers ops[i] ops with impls implementations each, reps times per count;
 * prints a table, or with json the document "benchmark": "registration".
 */
int bench_registration_run(const int64_t *ops, int n_ops, long impls, int reps, bool json);

/* ---- STREAM (stream.c) ------------------------------------------------ */

/* Three float arrays, each at least 4x the last-level cache and 64 MiB. */
struct bench_stream;

/* One STREAM measurement: the best of its repetitions. */
struct bench_stream_figures {
    int threads;
    double triad_gbps; /* a[i] = b[i] + s*c[i]: 3 arrays x 4 bytes per element */
    double copy_gbps;  /* c[i] = a[i]: 2 arrays x 4 bytes per element */
};

/* The last-level cache in bytes (sysconf, else sysfs), 0 when unknown. */
size_t bench_llc_bytes(void);

/* Allocates and fills the arrays; NULL when out of memory. */
struct bench_stream *bench_stream_open(void);
void bench_stream_close(struct bench_stream *s);

/* Bytes of one array. */
size_t bench_stream_array_bytes(const struct bench_stream *s);

/* The instruction set the STREAM loops use here ("avx512f", "avx2", "sse2", "generic"). */
const char *bench_stream_isa(void);

/*
 * Runs triad and copy with `threads` threads (each its own slice, pinned to
 * the allowed CPUs in order, released together), reps times each, and
 * keeps the best of the repetitions as STREAM does. The first repetition
 * tries plain and non-temporal stores; the faster kind runs the others.
 * false (and a message on stderr) when out of memory.
 */
bool bench_stream_measure(struct bench_stream *s, int threads, int reps,
                          struct bench_stream_figures *out);

/* ---- device-to-device copy (d2d.c) --------------------------------------- */

#define BENCH_D2D_BYTES       ((size_t)1 << 30)   /* 1 GiB: far beyond any GPU's L2 */
#define BENCH_D2D_QUICK_BYTES ((size_t)256 << 20) /* --quick */

/* Two device buffers of one size; the source is filled once. */
struct bench_d2d;

/*
 * Allocates the buffers on {device_type, 0} and fills the source. NULL,
 * after a message on stderr naming the library's reason, on failure.
 */
struct bench_d2d *bench_d2d_open(int device_type, size_t bytes);
void bench_d2d_close(struct bench_d2d *d);
size_t bench_d2d_bytes(const struct bench_d2d *d);

/*
 * One measurement of fld_device_copy(DEVICE_TO_DEVICE) of the whole buffer:
 * a warm-up copy, then reps batches of copies, each batch sized to last
 * >= batch_ns and ended by fld_device_synchronize(); the median over the
 * batches of 2 x bytes x copies / time in GB/s (read + write, as STREAM's
 * copy counts). NAN, after a message on stderr, when a copy failed.
 */
double bench_d2d_measure(struct bench_d2d *d, int reps, double batch_ns);

/* ---- bench OP... (kernels.c) -------------------------------------------- */

#define BENCH_MAX_LIST 16 /* values of --threads, --tokens and --ops */

struct bench_kernel_options {
    uint32_t ops; /* bits: index in bench_op_names() */
    bool
        ops_named; /* ops were named: an (op, dtype) with nothing to run is an error, not skipped */
    int device_type; /* FLD_DEVICE_* */
    uint32_t dtypes; /* FLD_DTYPE_MASK_* */
    int threads[BENCH_MAX_LIST];
    int n_threads; /* 0: the plugin's default */
    int64_t tokens[BENCH_MAX_LIST];
    int n_tokens;
    int64_t hidden;
    int reps;
    const char *impl; /* only this impl_id, or NULL for every available one */
    bool json;
    bool quick;        /* short batches */
    size_t copy_bytes; /* devices other than cpu: the d2d copy buffer of the baseline */
};

/* The ops the kernel bench knows (the catalog's with tensors it can build), NULL-terminated,
 * in catalog order, and how many. */
const char *const *bench_op_names(void);
int bench_op_count(void);

/* Runs the kernel benchmark and prints it; returns a CLI exit status. */
int bench_kernels_run(const struct bench_kernel_options *opt);

#endif
