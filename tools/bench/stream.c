/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The memory bandwidth ceiling of bench: a STREAM-like triad and copy.
 *
 *   triad  a[i] = b[i] + s * c[i]   counted as 3 arrays x 4 bytes per element
 *   copy   c[i] = a[i]              counted as 2 arrays x 4 bytes per element
 *
 * STREAM's convention: bytes the program names, with no write-allocate
 * traffic counted, and the best of the repetitions is reported. Each array
 * is at least 4x the last-level cache and at least 64 MiB, so the loops run
 * from memory.
 *
 * To be a fair ceiling for kernels that use the widest vectors of the
 * machine and non-temporal stores for outputs larger than the cache, the
 * loops are written per instruction set (AVX-512F, AVX2, SSE2 on x86-64;
 * plain C elsewhere), the best one the CPU and OS support runs, and the
 * first repetition of a measurement tries plain and non-temporal stores;
 * the faster kind runs the other repetitions.
 *
 * With N threads each thread owns a contiguous slice (64-byte aligned),
 * threads are pinned to the allowed CPUs in order, wait at a barrier, meet
 * at a spinning rendezvous so none starts its clock while another is still
 * being woken, and the time is from the first start to the last end.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench.h"

#define STREAM_MIN_BYTES   ((size_t)64 << 20)
#define STREAM_LLC_FACTOR  4
#define STREAM_ALIGN       64
#define STREAM_ALIGN_ELEMS (STREAM_ALIGN / sizeof(float))
#define STREAM_SCALAR      3.0f

struct bench_stream {
    float *a, *b, *c;
    size_t n; /* elements per array, a multiple of STREAM_ALIGN_ELEMS */
};

enum stream_kernel { K_TRIAD, K_COPY };

/* One slice of one kernel: [begin, end) elements, begin 64-byte aligned. */
typedef void (*stream_fn)(struct bench_stream *s, size_t begin, size_t end, bool nontemporal);

/* ---- last-level cache ------------------------------------------------------- */

/* "36608K" -> bytes. */
static size_t parse_cache_size(const char *text)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text)
        return 0;
    if (*end == 'K')
        v <<= 10;
    else if (*end == 'M')
        v <<= 20;
    return (size_t)v;
}

/* The largest cache of cpu0 in sysfs: the fallback where sysconf does not know. */
static size_t sysfs_llc_bytes(void)
{
    size_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], line[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(line, sizeof line, f)) {
            size_t v = parse_cache_size(line);
            if (v > best)
                best = v;
        }
        fclose(f);
    }
    return best;
}

size_t bench_llc_bytes(void)
{
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0)
        return (size_t)l3;
#endif
    return sysfs_llc_bytes();
}

/* ---- the loops, per instruction set ------------------------------------------ */

/*
 * Every loop handles the 64-byte aligned body with vectors and the tail of
 * the last slice with scalars. Non-temporal stores are ordered with a fence
 * before the slice ends, so the time covers them.
 */

static void triad_tail(struct bench_stream *s, size_t i, size_t end)
{
    for (; i < end; i++)
        s->a[i] = s->b[i] + STREAM_SCALAR * s->c[i];
}

static void copy_tail(struct bench_stream *s, size_t i, size_t end)
{
    for (; i < end; i++)
        s->c[i] = s->a[i];
}

#if defined(__x86_64__)

__attribute__((target("avx512f"))) static void triad_avx512(struct bench_stream *s, size_t begin,
                                                            size_t end, bool nontemporal)
{
    const __m512 k = _mm512_set1_ps(STREAM_SCALAR);
    size_t i = begin;
    if (nontemporal) {
        for (; i + 16 <= end; i += 16)
            _mm512_stream_ps(
                s->a + i, _mm512_fmadd_ps(k, _mm512_load_ps(s->c + i), _mm512_load_ps(s->b + i)));
        _mm_sfence();
    } else {
        for (; i + 16 <= end; i += 16)
            _mm512_store_ps(s->a + i,
                            _mm512_fmadd_ps(k, _mm512_load_ps(s->c + i), _mm512_load_ps(s->b + i)));
    }
    triad_tail(s, i, end);
}

__attribute__((target("avx512f"))) static void copy_avx512(struct bench_stream *s, size_t begin,
                                                           size_t end, bool nontemporal)
{
    size_t i = begin;
    if (nontemporal) {
        for (; i + 16 <= end; i += 16)
            _mm512_stream_ps(s->c + i, _mm512_load_ps(s->a + i));
        _mm_sfence();
    } else {
        for (; i + 16 <= end; i += 16)
            _mm512_store_ps(s->c + i, _mm512_load_ps(s->a + i));
    }
    copy_tail(s, i, end);
}

__attribute__((target("avx2"))) static void triad_avx2(struct bench_stream *s, size_t begin,
                                                       size_t end, bool nontemporal)
{
    const __m256 k = _mm256_set1_ps(STREAM_SCALAR);
    size_t i = begin;
    if (nontemporal) {
        for (; i + 8 <= end; i += 8)
            _mm256_stream_ps(s->a + i, _mm256_add_ps(_mm256_load_ps(s->b + i),
                                                     _mm256_mul_ps(k, _mm256_load_ps(s->c + i))));
        _mm_sfence();
    } else {
        for (; i + 8 <= end; i += 8)
            _mm256_store_ps(s->a + i, _mm256_add_ps(_mm256_load_ps(s->b + i),
                                                    _mm256_mul_ps(k, _mm256_load_ps(s->c + i))));
    }
    triad_tail(s, i, end);
}

__attribute__((target("avx2"))) static void copy_avx2(struct bench_stream *s, size_t begin,
                                                      size_t end, bool nontemporal)
{
    size_t i = begin;
    if (nontemporal) {
        for (; i + 8 <= end; i += 8)
            _mm256_stream_ps(s->c + i, _mm256_load_ps(s->a + i));
        _mm_sfence();
    } else {
        for (; i + 8 <= end; i += 8)
            _mm256_store_ps(s->c + i, _mm256_load_ps(s->a + i));
    }
    copy_tail(s, i, end);
}

static void triad_sse2(struct bench_stream *s, size_t begin, size_t end, bool nontemporal)
{
    const __m128 k = _mm_set1_ps(STREAM_SCALAR);
    size_t i = begin;
    if (nontemporal) {
        for (; i + 4 <= end; i += 4)
            _mm_stream_ps(s->a + i,
                          _mm_add_ps(_mm_load_ps(s->b + i), _mm_mul_ps(k, _mm_load_ps(s->c + i))));
        _mm_sfence();
    } else {
        for (; i + 4 <= end; i += 4)
            _mm_store_ps(s->a + i,
                         _mm_add_ps(_mm_load_ps(s->b + i), _mm_mul_ps(k, _mm_load_ps(s->c + i))));
    }
    triad_tail(s, i, end);
}

static void copy_sse2(struct bench_stream *s, size_t begin, size_t end, bool nontemporal)
{
    size_t i = begin;
    if (nontemporal) {
        for (; i + 4 <= end; i += 4)
            _mm_stream_ps(s->c + i, _mm_load_ps(s->a + i));
        _mm_sfence();
    } else {
        for (; i + 4 <= end; i += 4)
            _mm_store_ps(s->c + i, _mm_load_ps(s->a + i));
    }
    copy_tail(s, i, end);
}

#else

/* Other architectures: plain loops the compiler vectorises for the baseline ISA
 * (NEON is part of the arm64 baseline); no portable non-temporal store. */
static void triad_generic(struct bench_stream *s, size_t begin, size_t end, bool nontemporal)
{
    (void)nontemporal;
    triad_tail(s, begin, end);
}

static void copy_generic(struct bench_stream *s, size_t begin, size_t end, bool nontemporal)
{
    (void)nontemporal;
    copy_tail(s, begin, end);
}

#endif

struct stream_isa {
    const char *name;
    stream_fn triad, copy;
};

static struct stream_isa pick_isa(void)
{
#if defined(__x86_64__)
    /* libgcc's feature test checks the OS's register state (XCR0) as well as cpuid. */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return (struct stream_isa){"avx512f", triad_avx512, copy_avx512};
    if (__builtin_cpu_supports("avx2"))
        return (struct stream_isa){"avx2", triad_avx2, copy_avx2};
    return (struct stream_isa){"sse2", triad_sse2, copy_sse2};
#else
    return (struct stream_isa){"generic", triad_generic, copy_generic};
#endif
}

const char *bench_stream_isa(void)
{
    return pick_isa().name;
}

/* ---- arrays ---------------------------------------------------------------- */

struct bench_stream *bench_stream_open(void)
{
    size_t bytes = STREAM_LLC_FACTOR * bench_llc_bytes();
    if (bytes < STREAM_MIN_BYTES)
        bytes = STREAM_MIN_BYTES;
    bytes = (bytes + STREAM_ALIGN - 1) / STREAM_ALIGN * STREAM_ALIGN;

    struct bench_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n = bytes / sizeof(float);
    s->a = aligned_alloc(STREAM_ALIGN, bytes);
    s->b = aligned_alloc(STREAM_ALIGN, bytes);
    s->c = aligned_alloc(STREAM_ALIGN, bytes);
    if (!s->a || !s->b || !s->c) {
        bench_stream_close(s);
        return NULL;
    }
    /* Touches every page now, so no repetition pays for page faults. */
    for (size_t i = 0; i < s->n; i++) {
        s->a[i] = 1.0f;
        s->b[i] = 2.0f;
        s->c[i] = 0.5f;
    }
    return s;
}

void bench_stream_close(struct bench_stream *s)
{
    if (!s)
        return;
    free(s->a);
    free(s->b);
    free(s->c);
    free(s);
}

size_t bench_stream_array_bytes(const struct bench_stream *s)
{
    return s->n * sizeof(float);
}

/* ---- threads ----------------------------------------------------------------- */

struct stream_team;

struct stream_worker {
    pthread_t thread;
    struct stream_team *team;
    size_t begin, end;
    double t_start, t_end; /* written before the done barrier */
} __attribute__((aligned(64)));

struct stream_team {
    struct bench_stream *s;
    int threads;
    pthread_barrier_t start, done;
    stream_fn fn; /* the posted kernel */
    bool nontemporal;
    bool quit;
    unsigned round;           /* rounds posted so far */
    _Atomic unsigned arrived; /* workers at the rendezvous, over all rounds */
    struct stream_worker *workers;
};

static void *stream_worker_main(void *arg)
{
    struct stream_worker *w = arg;
    struct stream_team *t = w->team;
    for (;;) {
        pthread_barrier_wait(&t->start);
        if (t->quit)
            break;
        unsigned everyone = t->round * (unsigned)t->threads;
        atomic_fetch_add(&t->arrived, 1);
        while (atomic_load(&t->arrived) < everyone)
            sched_yield();
        w->t_start = bench_now_ns();
        t->fn(t->s, w->begin, w->end, t->nontemporal);
        w->t_end = bench_now_ns();
        pthread_barrier_wait(&t->done);
    }
    return NULL;
}

/* Seconds of one round: every worker runs its slice of fn once. */
static double team_round(struct stream_team *t, stream_fn fn, bool nontemporal)
{
    t->fn = fn;
    t->nontemporal = nontemporal;
    t->round++;
    pthread_barrier_wait(&t->start);
    pthread_barrier_wait(&t->done);
    double first = t->workers[0].t_start, last = t->workers[0].t_end;
    for (int i = 1; i < t->threads; i++) {
        first = fmin(first, t->workers[i].t_start);
        last = fmax(last, t->workers[i].t_end);
    }
    return (last - first) * 1e-9;
}

bool bench_stream_measure(struct bench_stream *s, int threads, int reps,
                          struct bench_stream_figures *out)
{
    struct stream_team t = {.s = s, .threads = threads};
    /* aligned_alloc: calloc does not honour the workers' cache-line alignment. */
    t.workers = aligned_alloc(_Alignof(struct stream_worker), (size_t)threads * sizeof *t.workers);
    if (t.workers)
        memset(t.workers, 0, (size_t)threads * sizeof *t.workers);
    if (!t.workers) {
        fprintf(stderr, "fldispatch bench: out of memory for %d STREAM threads\n", threads);
        return false;
    }
    /* Contiguous slices, each starting on a 64-byte boundary. */
    size_t blocks = s->n / STREAM_ALIGN_ELEMS;
    for (int i = 0; i < threads; i++) {
        t.workers[i].team = &t;
        t.workers[i].begin = blocks * (size_t)i / (size_t)threads * STREAM_ALIGN_ELEMS;
        t.workers[i].end = blocks * (size_t)(i + 1) / (size_t)threads * STREAM_ALIGN_ELEMS;
    }
    t.workers[threads - 1].end = s->n;
    pthread_barrier_init(&t.start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&t.done, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&t.workers[i].thread, NULL, stream_worker_main, &t.workers[i])) {
            /* The barriers count every worker; the missing ones cannot arrive. */
            fprintf(stderr, "fldispatch bench: cannot start STREAM thread %d of %d\n", i + 1,
                    threads);
            exit(1);
        }
        bench_pin_thread((unsigned long)t.workers[i].thread, i);
    }

    /* The first repetition tries both kinds of store; the rest use the faster. */
    struct stream_isa isa = pick_isa();
    double triad[2], copy[2];
    for (int nt = 0; nt < 2; nt++) {
        triad[nt] = team_round(&t, isa.triad, nt);
        copy[nt] = team_round(&t, isa.copy, nt);
    }
    bool triad_nt = triad[1] < triad[0], copy_nt = copy[1] < copy[0];
    double best_triad = fmin(triad[0], triad[1]), best_copy = fmin(copy[0], copy[1]);
    for (int r = 1; r < reps; r++) {
        best_triad = fmin(best_triad, team_round(&t, isa.triad, triad_nt));
        best_copy = fmin(best_copy, team_round(&t, isa.copy, copy_nt));
    }

    t.quit = true;
    pthread_barrier_wait(&t.start);
    for (int i = 0; i < threads; i++)
        pthread_join(t.workers[i].thread, NULL);
    pthread_barrier_destroy(&t.start);
    pthread_barrier_destroy(&t.done);
    free(t.workers);

    double bytes = (double)s->n * sizeof(float);
    out->threads = threads;
    out->triad_gbps = 3.0 * bytes / best_triad * 1e-9;
    out->copy_gbps = 2.0 * bytes / best_copy * 1e-9;
    return true;
}
