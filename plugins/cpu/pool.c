/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cpu plugin's thread pool: one per NUMA node, built on the first
 * parallel call from a thread of that node, with threads - 1 workers (the
 * caller is worker 0) whose affinity is the node's CPUs.
 *
 * Not OpenMP: libgomp is not fork-safe (a child forked after the parent ran
 * a parallel region hangs in its first parallel region), and a library must
 * not make fork() unsafe for its host.
 *
 * One call: the caller takes the pool's `busy` mutex with trylock (a busy
 * pool means another application thread is using it: this call runs inline
 * instead of waiting), writes fn/job/n, sets `remaining` to the number of
 * workers taking part, and publishes the call by storing `word` (generation
 * << 32 | number of ranges). Workers wait for `word` to change, run their
 * range, and decrement `remaining`; the caller runs range 0 and waits for
 * `remaining` to reach 0. The call's fields are not written again before
 * every participant has decremented, so a worker that reads them after its
 * acquire load of `word` sees the call it is part of; a worker that is not
 * part of a call (more threads than ranges) reads nothing but `word`.
 *
 * Waiting: workers and the caller spin for up to SPIN_NS (pause, then
 * pause and yield), then sleep on a condition variable. Sleepers announce themselves (sleepers,
 * caller_waiting) before re-checking, and the other side checks the
 * announcement after its own store: with sequentially consistent atomics one
 * of the two always sees the other, so no wake-up is lost.
 *
 * Locks, in the order they nest: the host's lock (registration and unload
 * run under it) > create_lock (configuration, building a pool) >
 * pool->busy (one caller) > pool->lock (sleeping and waking).
 *
 * fork(): the child forgets every pool (its workers do not exist there; their
 * mutexes may be held by them) and builds new ones when it next needs them.
 * dlclose / exit: a destructor stops and joins every worker, so no code of
 * this object runs after it is unmapped.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"
#include "runtime.h"

/*
 * How long a worker, or a caller waiting for its workers, spins before it
 * sleeps; for the first SPIN_PAUSE_NS it only pauses, after that each check
 * also yields the CPU (sched_yield).
 *
 * Measured on a 2-vCPU KVM Xeon (Cascade Lake, 2.5 GHz; docs/BENCHMARKS.md), with
 * rms_norm f32 8x1024 (64 KiB; 11.7 us on one thread) and two threads,
 * min and median of 2000 calls, under chrt -f 10 so the other load of the
 * machine stays off these two CPUs:
 *   calls back to back:    no spin 13.6 / 18.8 us (a futex wake-up per
 *                          call, 7-12 us); spin 5, 20, 50 or 200 us: 6.3 / 6.4
 *   a call every 30 us:    spin 5 us 11.8 / 12.6; 20 us 7.5 / 12.7;
 *                          50 us 6.3 / 6.6
 *   a call every 100 us:   spin 50 us 12.0 / 12.9 (the worker slept);
 *                          200 us 6.4 / 6.8
 * 50 us keeps the pool awake through a run of ops with little between them
 * and costs at most 50 us of each worker's core after the last call.
 * The yield matters on a machine with more runnable threads than CPUs: the
 * thread we wait for may be queued on our own CPU. Caller and worker on
 * one CPU (taskset -c 0, VLLM_FL_CPU_THREADS=2, chrt -f 10): with a pure
 * pause spin of 50 us that call took 116 / 116 us (each side spins out its
 * 50 us while the other cannot run), with the yield after 2 us 17.4 / 17.7,
 * without spinning 15.8 / 16.1.
 * Method: a loop of timed fld_rms_norm calls with a busy wait of 0, 30 or
 * 100 us between them, VLLM_FL_CPU_PARALLEL_MIN_KB=0, the plugin built
 * with make CFLAGS="-O2 -g -DFLD_CPU_SPIN_NS=<ns>".
 */
#ifndef FLD_CPU_SPIN_NS
#define FLD_CPU_SPIN_NS 50000
#endif
#ifndef FLD_CPU_SPIN_PAUSE_NS
#define FLD_CPU_SPIN_PAUSE_NS 2000
#endif

/*
 * Calls that touch (read + write) fewer bytes than this run on the calling
 * thread; VLLM_FL_CPU_PARALLEL_MIN_KB overrides it.
 *
 * Measured on the same machine with the avx512 kernels, [rows, 1024]
 * tensors, one against two threads, median us of 3000 calls (chrt -f 10):
 * with the worker awake (calls back to back), two threads win from
 * 24-48 KiB (silu_and_mul f32 48 KiB: 2.1 vs 1.7; rms_norm f32 64 KiB:
 * 1.3 vs 1.3, 128 KiB: 2.4 vs 1.8). In a model the ops are far apart
 * (matrix products between them) and the worker has gone to sleep: the
 * call then pays its wake-up, 7-10 us, and with a call every 300 us:
 *   rms_norm f32       256 KiB 4.9 vs 12.8   512 KiB 9.4 vs 16.1
 *                      1 MiB 24.4 vs 25.1    2 MiB 85.6 vs 47.2
 *   silu_and_mul f32   384 KiB 13.5 vs 17.2  768 KiB 26.8 vs 23.1
 *   rms_norm bf16      128 KiB 10.3 vs 13.1  256 KiB 19.9 vs 18.2
 *                      512 KiB 39.4 vs 27.8
 *   silu_and_mul bf16  192 KiB 21.8 vs 18.9  384 KiB 43.2 vs 30.0
 * The break-even is about 256 KiB for the bfloat16 ops and 0.5-1 MiB for
 * the float32 ones (rms_norm f32 moves the most bytes per us). 512 KiB is
 * twice the bfloat16 break-even, where two threads already gain 1.4-1.5x
 * even from sleep, and loses at most a wake-up for the fastest kernel.
 * Method: a loop of timed fld_rms_norm / fld_silu_and_mul calls, 1 and 2
 * threads (VLLM_FL_CPU_THREADS), VLLM_FL_CPU_PARALLEL_MIN_KB=0, with a busy
 * wait of 0 or 300 us between calls; the back-to-back case is also
 *   VLLM_FL_CPU_PARALLEL_MIN_KB=0 chrt -f 10 fldispatch bench rms_norm \
 *     silu_and_mul --dtype f32,bf16 --impl vendor.cpu --threads 1,2 \
 *     --tokens 2,4,8,16,32,64,128 --hidden 1024
 */
#ifndef FLD_CPU_PARALLEL_MIN_BYTES
#define FLD_CPU_PARALLEL_MIN_BYTES (512u * 1024u)
#endif

/* Before the plugin configures the pool: outputs of at least this size stream. */
#define DEFAULT_STREAM_BYTES (32u * 1024u * 1024u)

struct pool;

struct worker {
    struct pool *pool;
    int id; /* 1 .. threads-1: its range when a call has more than id ranges */
};

struct pool {
    /* The published call: `word` and the fields it guards. */
    alignas(64) _Atomic uint64_t word;
    fld_cpu_range_fn fn;
    const void *job;
    int64_t n;

    /* Written by every participant at the end of a call. */
    alignas(64) atomic_int remaining;

    alignas(64) atomic_int sleepers;
    atomic_int caller_waiting;
    atomic_bool stop;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* workers sleep here */
    pthread_cond_t done; /* the caller sleeps here */

    pthread_mutex_t busy; /* held by the caller using the pool */
    int threads;          /* caller included */
    int started;          /* workers running */
    pthread_t *tids;
    struct worker *workers;
    struct pool *next_forgotten;
};

/* Marks a node whose pool could not be built: its calls run inline. */
static struct pool pool_failed;

static struct {
    struct fld_cpu_topology topo;
    int threads; /* per call; 0: the cores of the caller's node */
    int max_threads;
    size_t parallel_min_bytes;
    size_t stream_bytes;
    _Atomic(struct pool *) *pools; /* per node of topo */
} rt = {.parallel_min_bytes = FLD_CPU_PARALLEL_MIN_BYTES, .stream_bytes = DEFAULT_STREAM_BYTES};

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
/* Pools of the parent, forgotten in a forked child; freed (not touched) at unload. */
static struct pool *forgotten;

size_t fld__cpu_default_parallel_min_bytes(void)
{
    return FLD_CPU_PARALLEL_MIN_BYTES;
}

size_t fld__cpu_inline_below = SIZE_MAX; /* no pool until configured */
size_t fld__cpu_stream_bytes = DEFAULT_STREAM_BYTES;

/* cpu.h's copies of the settings, after each change of rt (create_lock held). */
static void publish_settings(void)
{
    fld__cpu_inline_below = rt.max_threads < 2 ? SIZE_MAX : rt.parallel_min_bytes;
    fld__cpu_stream_bytes = rt.stream_bytes;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Range r of k near-equal contiguous ranges of [0, n); none is empty when k <= n. */
static void split(int64_t n, int k, int r, int64_t *begin, int64_t *end)
{
    int64_t base = n / k, extra = n % k;
    *begin = r * base + (r < extra ? r : extra);
    *end = *begin + base + (r < extra ? 1 : 0);
}

/*
 * A bounded busy wait: pause for the first SPIN_PAUSE_NS, then also yield
 * the CPU between checks (when the thread we wait for shares our CPU, on a
 * machine with more runnable threads than CPUs, pausing would only delay
 * it), until SPIN_NS have passed.
 */
struct spin {
    unsigned i;
    uint64_t start;
};

static inline bool spin_more(struct spin *s)
{
    if ((s->i++ & 15) == 0) {
        uint64_t t = now_ns();
        if (s->i == 1)
            s->start = t;
        else if (t - s->start >= FLD_CPU_SPIN_NS)
            return false;
        if (t - s->start >= FLD_CPU_SPIN_PAUSE_NS) {
            sched_yield();
            return true;
        }
    }
    cpu_relax();
    return true;
}

/* Waits until word differs from seen and returns it: spins, then sleeps. */
static uint64_t wait_for_call(struct pool *p, uint64_t seen)
{
    uint64_t w;
    struct spin s = {0};
    do {
        w = atomic_load_explicit(&p->word, memory_order_acquire);
        if (w != seen)
            return w;
    } while (spin_more(&s));
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->sleepers, 1);
    while ((w = atomic_load(&p->word)) == seen)
        pthread_cond_wait(&p->wake, &p->lock);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->lock);
    return w;
}

static void *worker_main(void *arg)
{
    const struct worker *self = arg;
    struct pool *p = self->pool;
    uint64_t seen = 0; /* the pool is built with word 0 and published only after */
    for (;;) {
        seen = wait_for_call(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        int ranges = (int)(seen & 0xffffffffu);
        if (self->id >= ranges)
            continue;
        int64_t begin, end;
        split(p->n, ranges, self->id, &begin, &end);
        p->fn(p->job, begin, end);
        if (atomic_fetch_sub(&p->remaining, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
}

/* Publishes a new word (a call, or the stop) and wakes sleeping workers. */
static void publish(struct pool *p, int ranges)
{
    uint64_t gen = (atomic_load_explicit(&p->word, memory_order_relaxed) >> 32) + 1;
    atomic_store(&p->word, (gen << 32) | (uint32_t)ranges);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
}

static void wait_for_workers(struct pool *p)
{
    struct spin s = {0};
    do {
        if (atomic_load_explicit(&p->remaining, memory_order_acquire) == 0)
            return;
    } while (spin_more(&s));
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->caller_waiting, 1);
    while (atomic_load(&p->remaining) != 0)
        pthread_cond_wait(&p->done, &p->lock);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->lock);
}

/* Stops and joins the started workers and frees p. The caller may hold nothing of p. */
static void destroy_pool(struct pool *p)
{
    pthread_mutex_lock(&p->busy); /* waits for a call still running, if any */
    atomic_store_explicit(&p->stop, true, memory_order_release);
    publish(p, 0);
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->wake); /* workers that were about to sleep */
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->tids[i], NULL);
    pthread_mutex_unlock(&p->busy);
    pthread_mutex_destroy(&p->busy);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->tids);
    free(p->workers);
    free(p);
}

/* A new pool of `threads` (caller included) for node; NULL on failure (logged). */
static struct pool *build_pool(int node, int threads)
{
    struct pool *p = NULL;
    if (posix_memalign((void **)&p, 64, sizeof *p) != 0)
        goto nomem;
    memset(p, 0, sizeof *p);
    atomic_init(&p->word, 0);
    atomic_init(&p->remaining, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->stop, false);
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->busy, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = threads;
    p->tids = calloc((size_t)threads, sizeof *p->tids);
    p->workers = calloc((size_t)threads, sizeof *p->workers);
    if (!p->tids || !p->workers) {
        destroy_pool(p);
        goto nomem;
    }

    /* Workers never take the host's signals; they inherit this mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr, *use_attr = NULL;
    const struct fld_cpu_node *nd = &rt.topo.nodes[node];
    bool have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr && pthread_attr_setaffinity_np(&attr, nd->cpus_size, nd->cpus) == 0)
        use_attr = &attr; /* else unpinned rather than not at all */
    int err = 0;
    for (int i = 1; i < threads; i++) {
        struct worker *w = &p->workers[i];
        w->pool = p;
        w->id = i;
        err = pthread_create(&p->tids[p->started], use_attr, worker_main, w);
        if (err == EINVAL && use_attr) {
            /* CPUs of the topology that this kernel does not have (a foreign hwloc XML). */
            use_attr = NULL;
            err = pthread_create(&p->tids[p->started], NULL, worker_main, w);
        }
        if (err)
            break;
        char name[16];
        snprintf(name, sizeof name, "fld-cpu%d.%d", nd->os_index % 100, i % 1000);
        pthread_setname_np(p->tids[p->started], name);
        p->started++;
    }
    if (have_attr)
        pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        fld_log(FLD_LOG_WARNING,
                "vendor.cpu: cannot start worker threads for NUMA node %d (%s); its calls run on "
                "one thread",
                nd->os_index, strerror(err));
        destroy_pool(p);
        return NULL;
    }
    return p;

nomem:
    fld_log(FLD_LOG_WARNING, "vendor.cpu: out of memory building the thread pool of NUMA node %d",
            rt.topo.nodes[node].os_index);
    return NULL;
}

static struct pool *pool_of(int node, int threads)
{
    struct pool *p = atomic_load_explicit(&rt.pools[node], memory_order_acquire);
    if (p)
        return p == &pool_failed ? NULL : p;
    pthread_mutex_lock(&create_lock);
    p = atomic_load_explicit(&rt.pools[node], memory_order_relaxed);
    if (!p) {
        p = build_pool(node, threads);
        atomic_store_explicit(&rt.pools[node], p ? p : &pool_failed, memory_order_release);
    }
    pthread_mutex_unlock(&create_lock);
    return p == &pool_failed ? NULL : p;
}

static int caller_node(void)
{
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu >= rt.topo.n_cpus || rt.topo.cpu_node[cpu] < 0)
        return 0; /* a CPU outside what we were allowed at registration */
    return rt.topo.cpu_node[cpu];
}

void fld__cpu_parallel_run(fld_cpu_range_fn fn, const void *job, int64_t n, size_t bytes)
{
    if (n < 2 || bytes < rt.parallel_min_bytes || rt.max_threads < 2) {
        fn(job, 0, n);
        return;
    }
    int node = caller_node();
    int threads = rt.threads ? rt.threads : rt.topo.nodes[node].cores;
    struct pool *p = threads > 1 ? pool_of(node, threads) : NULL;
    if (!p || pthread_mutex_trylock(&p->busy) != 0) {
        fn(job, 0, n);
        return;
    }
    int ranges = n < p->threads ? (int)n : p->threads;
    p->fn = fn;
    p->job = job;
    p->n = n;
    atomic_store_explicit(&p->remaining, ranges - 1, memory_order_relaxed);
    publish(p, ranges);
    int64_t begin, end;
    split(n, ranges, 0, &begin, &end);
    fn(job, begin, end);
    wait_for_workers(p);
    pthread_mutex_unlock(&p->busy);
}

void fld__cpu_pool_shutdown(void)
{
    pthread_mutex_lock(&create_lock);
    for (int i = 0; rt.pools && i < rt.topo.n_nodes; i++) {
        struct pool *p = atomic_load(&rt.pools[i]);
        if (p && p != &pool_failed)
            destroy_pool(p);
    }
    free(rt.pools);
    rt.pools = NULL;
    while (forgotten) {
        struct pool *p = forgotten;
        forgotten = p->next_forgotten;
        free(p->tids); /* the parent's: nothing else of it is touched */
        free(p->workers);
        free(p);
    }
    fld__cpu_topology_free(&rt.topo);
    rt.threads = rt.max_threads = 0;
    rt.parallel_min_bytes = FLD_CPU_PARALLEL_MIN_BYTES;
    rt.stream_bytes = DEFAULT_STREAM_BYTES;
    publish_settings();
    pthread_mutex_unlock(&create_lock);
}

void fld__cpu_pool_configure(struct fld_cpu_topology *topo, int threads, size_t parallel_min_bytes,
                             size_t stream_bytes)
{
    fld__cpu_pool_shutdown();
    pthread_mutex_lock(&create_lock);
    rt.topo = *topo;
    memset(topo, 0, sizeof *topo);
    rt.threads = threads;
    rt.max_threads = fld__cpu_threads_per_call(&rt.topo, threads);
    rt.parallel_min_bytes = parallel_min_bytes;
    rt.stream_bytes = stream_bytes;
    rt.pools = calloc((size_t)(rt.topo.n_nodes > 0 ? rt.topo.n_nodes : 1), sizeof *rt.pools);
    if (!rt.pools)
        rt.max_threads = 0; /* everything inline: slower, still correct */
    publish_settings();
    pthread_mutex_unlock(&create_lock);
}

/* ---- fork and unload ------------------------------------------------------ */

static void after_fork_child(void)
{
    for (int i = 0; rt.pools && i < rt.topo.n_nodes; i++) {
        struct pool *p = atomic_load_explicit(&rt.pools[i], memory_order_relaxed);
        if (p && p != &pool_failed) {
            p->next_forgotten = forgotten;
            forgotten = p;
        }
        atomic_store_explicit(&rt.pools[i], NULL, memory_order_relaxed);
    }
    /*
     * A thread of the parent may have been building a pool: its lock is
     * held by a thread that does not exist here. The lock is not taken in
     * a prepare handler because registration (under the host's lock)
     * takes it, and the host's prepare handler, which runs after ours,
     * takes the host's lock: that order would deadlock.
     */
    pthread_mutex_init(&create_lock, NULL);
}

__attribute__((constructor)) static void pool_load(void)
{
    /* Handlers registered from a shared object are removed when it is unloaded. */
    pthread_atfork(NULL, NULL, after_fork_child);
}

__attribute__((destructor)) static void pool_unload(void)
{
    fld__cpu_pool_shutdown();
}
