/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace of dispatch decisions and timed calls (VLLM_FL_TRACE), written
 * as Chrome/Perfetto trace JSON ("traceEvents"). A fixed buffer of
 * FLD_TRACE_MAX_EVENTS events, allocated on first use; a thread claims a slot
 * with one atomic add and publishes it with a release store, so recording
 * takes no lock. Past the cap events are counted as dropped (the file says
 * how many). Chain events keep their text (the candidates) in a string of
 * their own; call events point at the counter cell, which names the op, the
 * implementation, the device and the dtype and lives until the process ends.
 *
 * Reset and write (fld_stats_reset(), fld_trace_write()) are cold and take
 * trace_lock; the recording threads never do. A reset does not empty the
 * buffer in place (a thread that claimed a slot before it may still be
 * filling that slot, and another would claim it again): it unlinks the
 * buffer, waits until no recording thread can still hold it, and frees it
 * with its texts. A recording thread holds the buffer between its entry and
 * its exit of a section counted in one of two counters (the reset flips
 * which one new sections use, so that each drains even under a steady
 * stream of calls); a section only claims and fills a slot, so the wait is
 * short. Why the wait suffices, in acquire/release terms that
 * ThreadSanitizer follows: a section enters by a read-modify-write of its
 * counter before it loads the buffer, and the reset reads both counters by
 * read-modify-writes after the unlink. If the reset's read of a counter
 * comes first, the section's entry reads from it and its load sees the
 * unlink; if the section's entry comes first, a reading of zero can only
 * come after the section's release exit, so everything it wrote happens
 * before the free.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>

#include "atomic_file.h"
#include "devices.h"
#include "dtypes.h"
#include "error.h"
#include "escape.h"
#include "trace.h"

enum { EVENT_CALL = 1, EVENT_CHAIN = 2 };

struct event {
    _Atomic int ready; /* 0 being written, else its kind */
    int rc;
    long tid;
    uint64_t start, end;
    const struct fld_stats_cell *cell; /* calls */
    char *text;                        /* chains: the args object */
};

struct buffer {
    _Atomic size_t claimed;
    _Atomic size_t dropped;
    struct event ev[FLD_TRACE_MAX_EVENTS];
};

/* The buffer in use; NULL until the first event after start or a reset. */
static _Atomic(struct buffer *) current;
/* Open recording sections, by the counter they entered; which one new ones use. */
static struct {
    _Alignas(64) _Atomic unsigned long n;
} sections[2];
static _Atomic unsigned section_side;
/* Reset and write; never taken while recording. */
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;

/* CLOCK_MONOTONIC in ns: the clock of the call events' times (fld__stats_now()). */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long thread_id(void)
{
    static _Thread_local long tid;
    if (!tid)
        tid = (long)syscall(SYS_gettid);
    return tid;
}

/* Enters a recording section; returns the counter to leave by. */
static unsigned section_enter(void)
{
    unsigned side = atomic_load_explicit(&section_side, memory_order_relaxed) & 1u;
    atomic_fetch_add_explicit(&sections[side].n, 1, memory_order_acq_rel);
    return side;
}

static void section_leave(unsigned side)
{
    atomic_fetch_sub_explicit(&sections[side].n, 1, memory_order_release);
}

/* In a section: a slot of the current buffer (allocated on first use), or NULL when full. */
static struct event *claim(void)
{
    struct buffer *b = atomic_load_explicit(&current, memory_order_acquire);
    if (!b) {
        struct buffer *fresh = calloc(1, sizeof *fresh);
        if (!fresh)
            return NULL;
        if (!atomic_compare_exchange_strong_explicit(&current, &b, fresh, memory_order_acq_rel,
                                                     memory_order_acquire))
            free(fresh);
        else
            b = fresh;
    }
    size_t i = atomic_fetch_add_explicit(&b->claimed, 1, memory_order_relaxed);
    if (i >= FLD_TRACE_MAX_EVENTS) {
        atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
        return NULL;
    }
    return &b->ev[i];
}

void fld__trace_call(const struct fld_stats_cell *c, uint64_t start_ns, uint64_t end_ns, int rc)
{
    unsigned side = section_enter();
    struct event *e = claim();
    if (e) {
        e->rc = rc;
        e->tid = thread_id();
        e->start = start_ns;
        e->end = end_ns;
        e->cell = c;
        atomic_store_explicit(&e->ready, EVENT_CALL, memory_order_release);
    }
    section_leave(side);
}

/* Appends s to buf as a JSON string (names here are the registry's: no quotes or controls). */
static size_t add_quoted(char *buf, size_t size, size_t len, const char *s)
{
    if (len < size)
        len += (size_t)snprintf(buf + len, size - len, "\"");
    for (; *s && len + 2 < size; s++)
        if ((unsigned char)*s >= 0x20 && *s != '"' && *s != '\\')
            buf[len++] = *s;
    if (len < size)
        buf[len] = '\0';
    if (len < size)
        len += (size_t)snprintf(buf + len, size - len, "\"");
    return len;
}

void fld__trace_chain(const char *op, int dev, int dt, const char *const *candidates, size_t n)
{
    uint64_t now = now_ns();
    char text[2048];
    size_t len = (size_t)snprintf(text, sizeof text, "{\"op\": ");
    len = add_quoted(text, sizeof text, len, op);
    if (len < sizeof text)
        len +=
            (size_t)snprintf(text + len, sizeof text - len,
                             ", \"device\": \"%s\", \"dtype\": \"%s\", \"selected\": ",
                             dev == FLD_DEV_ANY ? "any" : fld_device_name(fld__device_type_of(dev)),
                             fld__dtype_word(dt));
    if (n)
        len = add_quoted(text, sizeof text, len, candidates[0]);
    else if (len < sizeof text)
        len += (size_t)snprintf(text + len, sizeof text - len, "null");
    if (len < sizeof text)
        len += (size_t)snprintf(text + len, sizeof text - len, ", \"candidates\": [");
    for (size_t i = 0; i < n && len < sizeof text; i++) {
        if (i)
            len += (size_t)snprintf(text + len, sizeof text - len, ", ");
        len = add_quoted(text, sizeof text, len, candidates[i]);
    }
    if (len + 3 >= sizeof text) /* cut: keep it valid JSON */
        snprintf(text, sizeof text, "{\"op\": \"?\", \"truncated\": true}");
    else
        snprintf(text + len, sizeof text - len, "]}");
    char *copy = strdup(text);
    if (!copy)
        return;
    unsigned side = section_enter();
    struct event *e = claim();
    if (e) {
        e->text = copy;
        copy = NULL;
        e->tid = thread_id();
        e->start = e->end = now;
        atomic_store_explicit(&e->ready, EVENT_CHAIN, memory_order_release);
    }
    section_leave(side);
    free(copy);
}

/* Waits until the sections counted on side have all left (read by RMWs: see the top). */
static void drain(unsigned side)
{
    while (atomic_fetch_add_explicit(&sections[side].n, 0, memory_order_acq_rel) != 0)
        sched_yield();
}

static void free_buffer(struct buffer *b)
{
    if (!b)
        return;
    size_t n = atomic_load_explicit(&b->claimed, memory_order_relaxed);
    if (n > FLD_TRACE_MAX_EVENTS)
        n = FLD_TRACE_MAX_EVENTS;
    for (size_t i = 0; i < n; i++)
        free(b->ev[i].text);
    free(b);
}

void fld__trace_reset(void)
{
    pthread_mutex_lock(&trace_lock);
    struct buffer *old = atomic_exchange_explicit(&current, NULL, memory_order_acq_rel);
    if (old) {
        /* New sections go to the other counter while this one drains, then back. */
        unsigned side = atomic_fetch_xor(&section_side, 1u) & 1u;
        drain(side);
        atomic_fetch_xor(&section_side, 1u);
        drain(side ^ 1u);
    }
    pthread_mutex_unlock(&trace_lock);
    free_buffer(old);
}

size_t fld__trace_claimed(void)
{
    pthread_mutex_lock(&trace_lock);
    struct buffer *b = atomic_load_explicit(&current, memory_order_acquire);
    size_t n = b ? atomic_load_explicit(&b->claimed, memory_order_relaxed) : 0;
    pthread_mutex_unlock(&trace_lock);
    return n;
}

void fld__trace_after_fork(void)
{
    /* One thread is left: no section is open, and the lock may have been held. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    trace_lock = fresh;
    atomic_store(&sections[0].n, 0);
    atomic_store(&sections[1].n, 0);
}

static void write_ts(FILE *f, uint64_t ns)
{
    fprintf(f, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

int fld__trace_write(const char *who, const char *path, fld_trace_cell_names_fn *names)
{
    fld_atomic_file af = {0};
    int err = fld__atomic_file_open(&af, path, 0600);
    if (err)
        return fld__fail(FLD_EINVAL, "%s: cannot write '%s': %s", who, path,
                         fld__atomic_file_strerror(err));
    FILE *f = af.f;
    long pid = (long)getpid();
    fprintf(f,
            "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n"
            "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %ld, \"tid\": 0, \"args\": "
            "{\"name\": \"fldispatch\"}}",
            pid);
    /* The lock keeps a reset from freeing the buffer while it is read. */
    pthread_mutex_lock(&trace_lock);
    struct buffer *b = atomic_load_explicit(&current, memory_order_acquire);
    size_t n = b ? atomic_load(&b->claimed) : 0, written = 0;
    size_t dropped = b ? atomic_load(&b->dropped) : 0;
    if (n > FLD_TRACE_MAX_EVENTS)
        n = FLD_TRACE_MAX_EVENTS;
    for (size_t i = 0; i < n; i++) {
        const struct event *ev = &b->ev[i];
        int kind = atomic_load_explicit(&b->ev[i].ready, memory_order_acquire);
        if (kind == EVENT_CALL) {
            const char *op, *impl, *device, *dtype;
            names(ev->cell, &op, &impl, &device, &dtype);
            fputs(",\n  {\"name\": ", f);
            fld__json_string(f, op);
            fputs(", \"cat\": \"call\", \"ph\": \"X\", \"ts\": ", f);
            write_ts(f, ev->start);
            fputs(", \"dur\": ", f);
            write_ts(f, ev->end - ev->start);
            fprintf(f, ", \"pid\": %ld, \"tid\": %ld, \"args\": {\"impl_id\": ", pid, ev->tid);
            fld__json_string(f, impl);
            fprintf(f, ", \"device\": \"%s\", \"dtype\": \"%s\", \"status\": %d}}", device, dtype,
                    ev->rc);
        } else if (kind == EVENT_CHAIN) {
            fputs(",\n  {\"name\": \"dispatch decision\", \"cat\": \"dispatch\", \"ph\": \"i\", "
                  "\"s\": \"t\", \"ts\": ",
                  f);
            write_ts(f, ev->start);
            fprintf(f, ", \"pid\": %ld, \"tid\": %ld, \"args\": %s}", pid, ev->tid, ev->text);
        } else {
            continue;
        }
        written++;
    }
    pthread_mutex_unlock(&trace_lock);
    fprintf(f, "\n], \"otherData\": {\"events\": %zu, \"dropped\": %zu, \"cap\": %d}}\n", written,
            dropped, FLD_TRACE_MAX_EVENTS);
    err = fld__atomic_file_commit(&af);
    if (err)
        return fld__fail(FLD_EINVAL, "%s: cannot write '%s' (the file there is unchanged): %s", who,
                         path, fld__atomic_file_strerror(err));
    return FLD_OK;
}
