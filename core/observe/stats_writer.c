/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The periodic writer of the counters' and the trace's files (see
 * stats_writer.h). What it writes, and the lock that keeps its writes apart
 * from the other flushes and from fork(), are stats.c's, which hands it the
 * writing function.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include <fldispatch/fldispatch.h>

#include "log.h"
#include "stats_writer.h"

/* The thread's state, under lock; wake tells it that the state changed. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static double interval; /* seconds; 0: idle */
static fld_stats_writer_fn write_files;
static bool running, stopped;
static pthread_t thread;

/* The wait is on the monotonic clock: setting the wall clock neither delays nor hurries it. */
static void make_wake(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&wake, &attr);
    pthread_condattr_destroy(&attr);
}

static struct timespec monotonic_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
}

static struct timespec deadline_after(struct timespec t, double seconds)
{
    long long whole = (long long)seconds;
    long long ns = t.tv_nsec + (long long)((seconds - (double)whole) * 1e9);
    t.tv_sec += (time_t)(whole + ns / 1000000000);
    t.tv_nsec = (long)(ns % 1000000000);
    return t;
}

static void *writer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    /* An interval counts from the last write (or the thread's start, or the
     * end of an idle spell); a new interval set meanwhile counts from there
     * too, so reloads more frequent than the interval do not put writes off. */
    struct timespec since = monotonic_now();
    while (!stopped) {
        if (interval <= 0) {
            pthread_cond_wait(&wake, &lock);
            since = monotonic_now();
            continue;
        }
        struct timespec due = deadline_after(since, interval);
        if (pthread_cond_timedwait(&wake, &lock, &due) != ETIMEDOUT)
            continue; /* woken: stopped, or another interval */
        double seconds = interval;
        fld_stats_writer_fn write = write_files;
        pthread_mutex_unlock(&lock);
        write(seconds);
        pthread_mutex_lock(&lock);
        since = monotonic_now();
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* Starts the thread with every signal blocked (it inherits the mask). lock held, or one thread. */
static int start_thread(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&thread, NULL, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return err;
    running = true;
    pthread_setname_np(thread, "fld-stats");
    return 0;
}

static void warn_not_started(int err)
{
    fld__log(FLD_LOG_WARNING,
             "VLLM_FL_STATS_INTERVAL: cannot start the thread that rewrites the files (%s); "
             "they are written at exit only",
             strerror(err));
}

void fld__stats_writer_set(double seconds, fld_stats_writer_fn write)
{
    pthread_once(&wake_once, make_wake);
    pthread_mutex_lock(&lock);
    interval = seconds > 0 && write ? seconds : 0;
    write_files = write;
    int err = 0;
    if (interval > 0 && !running && !stopped)
        err = start_thread();
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    if (err)
        warn_not_started(err);
}

void fld__stats_writer_stop(void)
{
    pthread_once(&wake_once, make_wake);
    pthread_mutex_lock(&lock);
    bool join = running && !stopped;
    stopped = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    if (join && !pthread_equal(thread, pthread_self()))
        pthread_join(thread, NULL);
}

void fld__stats_writer_after_fork(void)
{
    /* One thread is left, and it is not the writer: its lock and wait may
     * have been taken there, so the child starts from fresh ones. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    lock = fresh;
    bool had_thread = running;
    running = false;
    if (!had_thread)
        return;
    make_wake();
    if (stopped || interval <= 0)
        return;
    /* Its first write comes an interval (0.1 s at least) from now, after
     * every fork handler of the child has run (stats.c's write lock's too). */
    int err = start_thread();
    if (err)
        warn_not_started(err);
}
