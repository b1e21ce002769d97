/*
 * fldispatch bench: declarations shared by its files.
 *
 *   cmd_bench.c       option parsing, dispatch to a mode, helpers below
 *   bench_overhead.c  bench --overhead: what dispatch costs per call
 *   bench_kernels.c   bench [OP...]: time, GB/s and bandwidth share per
 *                     op, impl, dtype, shape and thread count
 *   bench_stream.c    the STREAM-like bandwidth ceiling (triad and copy)
 *
 * The method of each is described at the top of its file and in
 * bench/README.md.
 */
#ifndef FLD_TOOLS_BENCH_H
#define FLD_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- helpers (cmd_bench.c) ------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
double bench_now_ns(void);

/* The "model name" of /proc/cpuinfo (or "unknown"). */
void bench_cpu_model(char *buf, size_t size);

/* The median of n values (sorts v in place); NAN if any value is NAN or n < 1. */
double bench_median(double *v, int n);

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int bench_allowed_cpus(void);

/*
 * Pins the thread to the index-th CPU of the process's allowed set
 * (index modulo the number of allowed CPUs). Best effort: nothing happens
 * when the affinity cannot be read or set.
 */
void bench_pin_thread(unsigned long thread, int index);

/* ---- bench --overhead (bench_overhead.c) ------------------------------------ */

#define BENCH_OVERHEAD_REPS  15
#define BENCH_OVERHEAD_CALLS 200000L

/* Runs the dispatch overhead benchmark and prints it; returns a CLI exit status. */
int bench_overhead_run(long null_calls, int reps, bool json);

/* ---- STREAM (bench_stream.c) ------------------------------------------------ */

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

/* ---- bench OP... (bench_kernels.c) -------------------------------------------- */

#define BENCH_MAX_LIST 16 /* values of --threads and --tokens */

struct bench_kernel_options {
    uint32_t ops;    /* bits: index in bench_op_names() */
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
    bool quick; /* short batches */
};

/* The ops the kernel bench knows, NULL-terminated, in bench order. */
const char *const *bench_op_names(void);

/* Runs the kernel benchmark and prints it; returns a CLI exit status. */
int bench_kernels_run(const struct bench_kernel_options *opt);

#endif
