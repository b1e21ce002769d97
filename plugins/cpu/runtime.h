/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cpu plugin's runtime: which variant runs (isa.c), where the threads
 * are (topology.c) and the thread pool's configuration (pool.c). Everything
 * here is set up once, when the plugin registers, before any op call; after
 * that only fld__cpu_parallel() (cpu.h) is used on the call path.
 */
#ifndef FLD_PLUGIN_CPU_RUNTIME_H
#define FLD_PLUGIN_CPU_RUNTIME_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- instruction sets (isa.c) ------------------------------------------ */

/*
 * What the CPU and the OS support, as bits. The FLD_CPU_OS_* bits say the
 * OS saves the register state (XCR0); a CPU feature is usable only with it.
 */
enum {
    FLD_CPU_FEAT_AVX = 1u << 0,
    FLD_CPU_FEAT_AVX2 = 1u << 1,
    FLD_CPU_FEAT_FMA = 1u << 2,
    FLD_CPU_FEAT_F16C = 1u << 3,
    FLD_CPU_FEAT_AVX512F = 1u << 4,
    FLD_CPU_FEAT_AVX512BW = 1u << 5,
    FLD_CPU_FEAT_AVX512VL = 1u << 6,
    FLD_CPU_FEAT_AVX512DQ = 1u << 7,
    FLD_CPU_FEAT_AVX512_BF16 = 1u << 8,
    FLD_CPU_FEAT_NEON = 1u << 9,
    FLD_CPU_OS_AVX = 1u << 16,    /* XCR0 bits 1 and 2: SSE and AVX state */
    FLD_CPU_OS_AVX512 = 1u << 17, /* XCR0 bits 5, 6 and 7: opmask and ZMM state */
};

/* The variants this build has, best first; fld__cpu_isa_names[i] names the i-th. */
extern const char *const fld__cpu_isa_names[];
extern const int fld__cpu_isa_count;

/* The features of the machine we run on (cpuid and xgetbv). */
uint32_t fld__cpu_detect_features(void);

/* Whether the CPU is AMD's (cpuid vendor "AuthenticAMD"); false off x86-64. */
bool fld__cpu_is_amd(void);

/* Whether we run in a virtual machine (cpuid's hypervisor bit); false off x86-64. */
bool fld__cpu_is_guest(void);

/*
 * Chooses the best variant that features allow at or below cap (a name from
 * fld__cpu_isa_names, or NULL for no cap): returns its index and writes to
 * why what kept the better ones out ("capped by VLLM_FL_CPU_ISA=avx2;
 * avx512_bf16 not supported by this CPU"; "" when nothing did). An unknown
 * cap returns -1 with the error text in why. A pure function.
 */
int fld__cpu_isa_choose(uint32_t features, const char *cap, char *why, size_t why_size);

/* ---- topology (topology.c) ---------------------------------------------- */

struct fld_cpu_node {
    int os_index;     /* the NUMA node's number (hwloc os_index) */
    int cores;        /* physical cores with at least one allowed PU; >= 1 */
    cpu_set_t *cpus;  /* the allowed PUs of the node (CPU_ALLOC) */
    size_t cpus_size; /* CPU_ALLOC_SIZE of cpus */
};

struct fld_cpu_topology {
    int n_nodes; /* >= 1: only nodes with allowed cores are kept */
    struct fld_cpu_node *nodes;
    int n_cpus;       /* entries of cpu_node */
    int *cpu_node;    /* OS CPU number -> index into nodes, or -1 */
    size_t llc_bytes; /* one last-level cache instance; 0 when unknown */
    size_t l2_bytes;  /* one L2 instance (a core's own on x86-64); 0 when unknown */
    char note[160];   /* why hwloc was not used, or "" */
};

/*
 * Fills t for the CPUs this process may run on: from hwloc, or when hwloc
 * fails, one node of the online CPUs (then note says why). FLD_OK or
 * FLD_ENOMEM (after fld_set_error()).
 */
int fld__cpu_topology_load(struct fld_cpu_topology *t);
void fld__cpu_topology_free(struct fld_cpu_topology *t);

/* The most threads one call runs on: threads, or when 0 (each call on its node's cores) the
 * cores of the largest node. */
int fld__cpu_threads_per_call(const struct fld_cpu_topology *t, int threads);

/*
 * The smallest output (bytes) that kernels write with non-temporal stores
 * when VLLM_FL_CPU_STREAM_MIN_KB is unset, for calls on up to threads
 * threads: one last-level cache instance, or in a virtual machine the L2
 * of each thread (the last-level cache a guest is shown is the host's,
 * shared with CPUs it cannot see). why gets "" or the reason in a few
 * words, for the plugin's detail line.
 */
size_t fld__cpu_default_stream_bytes(const struct fld_cpu_topology *t, int threads, char *why,
                                     size_t size);

/*
 * The data (bytes read or written, each buffer once) above which the norms
 * prefetch each next row: a quarter of one last-level cache instance (8 MiB
 * when its size is unknown). Smaller calls find their rows in L2 or L3,
 * where the prefetches only cost (docs/BENCHMARKS.md, "Measured choices in
 * the CPU plugin").
 */
size_t fld__cpu_default_norm_prefetch_bytes(const struct fld_cpu_topology *t);

/* ---- the pool (pool.c) --------------------------------------------------- */

/*
 * Installs a configuration: takes ownership of *topo (and zeroes it),
 * threads per parallel call (0: the cores of the caller's NUMA node), the
 * smallest call (bytes) that runs in parallel, and the output size from
 * which kernels use non-temporal stores. Stops any pool of an earlier
 * configuration first. Not MT safe: only at registration.
 */
void fld__cpu_pool_configure(struct fld_cpu_topology *topo, int threads, size_t parallel_min_bytes,
                             size_t stream_bytes);

/* Stops and joins every worker and frees the configuration. Idempotent. */
void fld__cpu_pool_shutdown(void);

/* The parallel threshold when VLLM_FL_CPU_PARALLEL_MIN_KB is unset, in bytes. */
size_t fld__cpu_default_parallel_min_bytes(void);

#endif
