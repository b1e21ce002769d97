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
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>

#include "devices.h"
#include "dtypes.h"
#include "error.h"
#include "ops.h"
#include "stats.h"

enum { EVENT_CALL = 1, EVENT_CHAIN = 2 };

struct event {
    _Atomic int ready; /* 0 being written, else its kind */
    int rc;
    long tid;
    uint64_t start, end;
    const struct fld_stats_cell *cell; /* calls */
    char *text;                        /* chains: the args object */
};

static _Atomic(struct event *) events;
static _Atomic size_t claimed;
static _Atomic size_t dropped;

static long thread_id(void)
{
    static _Thread_local long tid;
    if (!tid)
        tid = (long)syscall(SYS_gettid);
    return tid;
}

static struct event *claim(void)
{
    struct event *ev = atomic_load_explicit(&events, memory_order_acquire);
    if (!ev) {
        struct event *fresh = calloc(FLD_TRACE_MAX_EVENTS, sizeof *fresh);
        if (!fresh)
            return NULL;
        if (!atomic_compare_exchange_strong(&events, &ev, fresh))
            free(fresh);
        else
            ev = fresh;
    }
    size_t i = atomic_fetch_add_explicit(&claimed, 1, memory_order_relaxed);
    if (i >= FLD_TRACE_MAX_EVENTS) {
        atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
        return NULL;
    }
    return &ev[i];
}

void fld__trace_call(const struct fld_stats_cell *c, uint64_t start_ns, uint64_t end_ns, int rc)
{
    struct event *e = claim();
    if (!e)
        return;
    e->rc = rc;
    e->tid = thread_id();
    e->start = start_ns;
    e->end = end_ns;
    e->cell = c;
    atomic_store_explicit(&e->ready, EVENT_CALL, memory_order_release);
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
    uint64_t now = fld__stats_now();
    char text[2048];
    size_t len = (size_t)snprintf(text, sizeof text, "{\"op\": ");
    len = add_quoted(text, sizeof text, len, op);
    if (len < sizeof text)
        len += (size_t)snprintf(
            text + len, sizeof text - len, ", \"device\": \"%s\", \"dtype\": \"%s\", \"selected\": ",
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
    struct event *e = claim();
    if (!e)
        return;
    e->text = strdup(text);
    e->tid = thread_id();
    e->start = e->end = now;
    atomic_store_explicit(&e->ready, e->text ? EVENT_CHAIN : 0, memory_order_release);
}

void fld__trace_reset(void)
{
    struct event *ev = atomic_load(&events);
    size_t n = atomic_exchange(&claimed, 0);
    atomic_store(&dropped, 0);
    if (!ev)
        return;
    if (n > FLD_TRACE_MAX_EVENTS)
        n = FLD_TRACE_MAX_EVENTS;
    for (size_t i = 0; i < n; i++) {
        free(ev[i].text);
        ev[i].text = NULL;
        atomic_store(&ev[i].ready, 0);
    }
}

static void write_ts(FILE *f, uint64_t ns)
{
    fprintf(f, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

int fld__trace_write(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fld__fail(FLD_EINVAL, "fld_trace_write: cannot create '%s': %s", path,
                         strerror(errno));
    long pid = (long)getpid();
    fprintf(f,
            "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n"
            "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %ld, \"tid\": 0, \"args\": "
            "{\"name\": \"fldispatch\"}}",
            pid);
    struct event *ev = atomic_load_explicit(&events, memory_order_acquire);
    size_t n = atomic_load(&claimed), written = 0;
    if (n > FLD_TRACE_MAX_EVENTS)
        n = FLD_TRACE_MAX_EVENTS;
    for (size_t i = 0; ev && i < n; i++) {
        int kind = atomic_load_explicit(&ev[i].ready, memory_order_acquire);
        if (kind == EVENT_CALL) {
            const char *op, *impl, *device, *dtype;
            fld__stats_cell_names(ev[i].cell, &op, &impl, &device, &dtype);
            fprintf(f, ",\n  {\"name\": \"%s\", \"cat\": \"call\", \"ph\": \"X\", \"ts\": ", op);
            write_ts(f, ev[i].start);
            fputs(", \"dur\": ", f);
            write_ts(f, ev[i].end - ev[i].start);
            fprintf(f,
                    ", \"pid\": %ld, \"tid\": %ld, \"args\": {\"impl_id\": \"%s\", \"device\": "
                    "\"%s\", \"dtype\": \"%s\", \"status\": %d}}",
                    pid, ev[i].tid, impl, device, dtype, ev[i].rc);
        } else if (kind == EVENT_CHAIN) {
            fputs(",\n  {\"name\": \"dispatch decision\", \"cat\": \"dispatch\", \"ph\": \"i\", "
                  "\"s\": \"t\", \"ts\": ",
                  f);
            write_ts(f, ev[i].start);
            fprintf(f, ", \"pid\": %ld, \"tid\": %ld, \"args\": %s}", pid, ev[i].tid, ev[i].text);
        } else {
            continue;
        }
        written++;
    }
    fprintf(f,
            "\n], \"otherData\": {\"events\": %zu, \"dropped\": %zu, \"cap\": %d}}\n", written,
            atomic_load(&dropped), FLD_TRACE_MAX_EVENTS);
    bool bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return fld__fail(FLD_EINVAL, "fld_trace_write: write error on '%s'", path);
    return FLD_OK;
}
