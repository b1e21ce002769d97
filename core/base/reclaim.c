/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Epoch-based reclamation of retired objects; see reclaim.h for the rules.
 *
 * Why it is safe, in acquire/release terms alone (so ThreadSanitizer can
 * follow it too): a reader enters by an exchange on its own `active` (e, read
 * from `epoch`) before it loads any pointer; the retiring thread unlinks an
 * object, takes its tag t = epoch++, and the reclaimer later reads every
 * `active` with a read-modify-write. Two RMWs of one location are ordered:
 * - the reclaimer's first: the reader's exchange reads from it, so the
 *   reader's loads happen after the unlink and cannot return the object;
 * - the reader's first: the reclaimer reads e <= t (held back), or a value
 *   the reader wrote later: 0 at the section's end or a later section's
 *   epoch, both released after every read of the section; or e > t, which
 *   the reader read from `epoch` after the tag's fetch_add, so (that load
 *   being an acquire of the RMW sequenced after the unlink) its loads again
 *   follow the unlink. Keep the load of `epoch` at least acquire.
 * A record pushed on the list after the reclaimer read the head is covered
 * the same way: the head is read with a read-modify-write too.
 * Hence: free when every reader is idle or entered after t.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "reclaim.h"

struct reader {
    _Atomic uint64_t active; /* 0 outside a section, else the epoch at entry */
    _Atomic bool in_use;     /* owned by a live thread */
    struct reader *next;     /* set before the record is published, then fixed */
};

static _Atomic(struct reader *) readers;
static _Atomic uint64_t epoch = 1;
/* Open sections of threads that could get no record (out of memory): while
 * there is one, nothing is freed. */
static _Atomic unsigned anonymous_readers;

static _Thread_local struct reader *tls_reader;
static _Thread_local unsigned tls_depth;
static _Thread_local bool tls_anonymous;

static pthread_key_t reader_key;
static pthread_once_t reader_key_once = PTHREAD_ONCE_INIT;
static int reader_key_status = -1;

struct retired {
    void *ptr;
    void (*free_fn)(void *);
    uint64_t tag;
    struct retired *next;
};

/* Both lists are guarded by the host lock. */
static struct retired *pending;        /* freed once no reader can hold them */
static struct retired *until_shutdown; /* freed by fld__reclaim_all() */
static size_t n_pending;
static size_t reclaim_threshold = 64; /* the next fld__retire() that scans */

/* ---- readers -------------------------------------------------------------- */

/* At thread exit: the record goes back for the next new thread. */
static void release_reader(void *arg)
{
    struct reader *r = arg;
    atomic_store(&r->active, 0);
    atomic_store(&r->in_use, false);
    tls_reader = NULL;
}

static void make_reader_key(void)
{
    reader_key_status = pthread_key_create(&reader_key, release_reader);
}

/* A free record, or a new one pushed on the list (lock-free: a thread may
 * enter a section with or without the host lock). */
static struct reader *claim_reader(void)
{
    pthread_once(&reader_key_once, make_reader_key);
    if (reader_key_status != 0)
        return NULL;
    struct reader *r;
    for (r = atomic_load(&readers); r; r = r->next) {
        bool idle = false;
        if (!atomic_load_explicit(&r->in_use, memory_order_relaxed) &&
            atomic_compare_exchange_strong(&r->in_use, &idle, true))
            break;
    }
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return NULL;
        atomic_init(&r->in_use, true);
        struct reader *head = atomic_load(&readers);
        do
            r->next = head;
        while (!atomic_compare_exchange_weak(&readers, &head, r));
    }
    if (pthread_setspecific(reader_key, r) != 0) {
        atomic_store(&r->in_use, false);
        return NULL;
    }
    tls_reader = r;
    return r;
}

void fld__read_begin(void)
{
    if (tls_depth++ > 0)
        return;
    struct reader *r = tls_reader ? tls_reader : claim_reader();
    if (r) {
        atomic_exchange(&r->active, atomic_load(&epoch)); /* an RMW: see the top */
    } else {
        tls_anonymous = true;
        atomic_fetch_add(&anonymous_readers, 1u);
    }
}

void fld__read_end(void)
{
    if (--tls_depth > 0)
        return;
    if (tls_anonymous) {
        tls_anonymous = false;
        atomic_fetch_sub(&anonymous_readers, 1u);
    } else {
        atomic_store_explicit(&tls_reader->active, 0, memory_order_release);
    }
}

/* The list's head, read by a read-modify-write (see the top). */
static struct reader *readers_head(void)
{
    struct reader *head = atomic_load(&readers);
    while (!atomic_compare_exchange_weak(&readers, &head, head))
        ;
    return head;
}

/* The epoch of the oldest open section; UINT64_MAX when none is open. */
static uint64_t oldest_section(void)
{
    if (atomic_fetch_add(&anonymous_readers, 0u))
        return 0;
    uint64_t oldest = UINT64_MAX;
    for (struct reader *r = readers_head(); r; r = r->next) {
        uint64_t e = atomic_fetch_add(&r->active, 0); /* an RMW: see the top */
        if (e && e < oldest)
            oldest = e;
    }
    return oldest;
}

/* ---- retired objects ------------------------------------------------------- */

static struct retired *record(void *ptr, void (*free_fn)(void *))
{
    struct retired *x = malloc(sizeof *x);
    if (x) {
        x->ptr = ptr;
        x->free_fn = free_fn;
    }
    return x;
}

void fld__retire(void *ptr, void (*free_fn)(void *))
{
    struct retired *x = record(ptr, free_fn);
    if (!x)
        return; /* cannot track it: leaking is safe, freeing is not */
    x->tag = atomic_fetch_add(&epoch, 1);
    x->next = pending;
    pending = x;
    n_pending++;
    /* Scan when the list has doubled since the last scan (amortised O(1)). */
    if (n_pending >= reclaim_threshold) {
        fld__reclaim();
        reclaim_threshold = 2 * n_pending + 64;
    }
}

void fld__retire_until_shutdown(void *ptr, void (*free_fn)(void *))
{
    struct retired *x = record(ptr, free_fn);
    if (!x)
        return;
    x->tag = 0;
    x->next = until_shutdown;
    until_shutdown = x;
}

static void free_list(struct retired *x)
{
    while (x) {
        struct retired *next = x->next;
        x->free_fn(x->ptr);
        free(x);
        x = next;
    }
}

void fld__reclaim(void)
{
    const uint64_t oldest = oldest_section();
    struct retired *done = NULL, **link = &pending;
    while (*link) {
        struct retired *x = *link;
        if (x->tag < oldest) {
            *link = x->next;
            x->next = done;
            done = x;
            n_pending--;
        } else {
            link = &x->next;
        }
    }
    free_list(done);
}

void fld__reclaim_all(void)
{
    free_list(pending);
    free_list(until_shutdown);
    pending = until_shutdown = NULL;
    n_pending = 0;
    reclaim_threshold = 64;
}

void fld__reclaim_after_fork(void)
{
    /* The other threads are gone; so are their sections. */
    for (struct reader *r = atomic_load(&readers); r; r = r->next) {
        if (r == tls_reader)
            continue;
        atomic_store(&r->active, 0);
        atomic_store(&r->in_use, false);
    }
    atomic_store(&anonymous_readers, tls_anonymous ? 1u : 0u);
}

size_t fld__reclaim_pending(void)
{
    return n_pending;
}
