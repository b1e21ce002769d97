/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/base/reclaim.c: epoch-based reclamation. The file is compiled into this
 * program (its functions are hidden in the library), so the tests see its
 * state: which objects were freed, how many reader records exist.
 *
 * What must hold: an object retired while a section that could hold it is
 * open is not freed until that section ends; sections entered after the
 * retire hold nothing back; the waiting list stays bounded when nobody
 * reads; records of exited threads are reused; a forked child is not held
 * back by its parent's other threads; and, under real threads swapping and
 * retiring a shared pointer, no reader ever sees a freed object (ASan and
 * TSan runs make any slip a report, the plain run checks a poisoned tag).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/base/reclaim.c"
#include "util/harness.h"

#define ALIVE 0x5a5a5a5au
#define DEAD  0xdeaddeadu

struct object {
    _Atomic unsigned tag;
    long value;
};

static atomic_long freed;

static struct object *object_new(long value)
{
    struct object *o = malloc(sizeof *o);
    ck_assert_ptr_nonnull(o);
    atomic_init(&o->tag, ALIVE);
    o->value = value;
    return o;
}

static void object_free(void *p)
{
    struct object *o = p;
    atomic_store(&o->tag, DEAD); /* what a reader of freed memory would see (no ASan) */
    atomic_fetch_add(&freed, 1);
    free(o);
}

static long n_freed(void)
{
    return atomic_load(&freed);
}

static size_t count_readers(void)
{
    size_t n = 0;
    for (struct reader *r = atomic_load(&readers); r; r = r->next)
        n++;
    return n;
}

/* ---- a reader thread driven step by step ---------------------------------- */

struct stepper {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int command; /* 1 enter, 2 leave, 3 exit; 0 when done */
};

static void *stepper_main(void *arg)
{
    struct stepper *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->command == 0)
            pthread_cond_wait(&s->cond, &s->lock);
        int c = s->command;
        if (c == 1)
            fld__read_begin();
        else if (c == 2)
            fld__read_end();
        s->command = 0;
        pthread_cond_broadcast(&s->cond);
        if (c == 3)
            break;
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void step(struct stepper *s, int command)
{
    pthread_mutex_lock(&s->lock);
    s->command = command;
    pthread_cond_broadcast(&s->cond);
    while (s->command != 0)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void stepper_start(struct stepper *s)
{
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->command = 0;
    ck_assert_int_eq(pthread_create(&s->thread, NULL, stepper_main, s), 0);
}

static void stepper_stop(struct stepper *s)
{
    step(s, 3);
    pthread_join(s->thread, NULL);
}

/* ---- tests ------------------------------------------------------------------ */

START_TEST(test_without_readers_everything_goes)
{
    for (int i = 0; i < 10; i++)
        fld__retire(object_new(i), object_free);
    ck_assert_uint_eq(fld__reclaim_pending(), 10);
    fld__reclaim();
    ck_assert_uint_eq(fld__reclaim_pending(), 0);
    ck_assert_int_eq(n_freed(), 10);
}
END_TEST

START_TEST(test_an_open_section_holds_what_was_retired_after_it)
{
    struct stepper s;
    stepper_start(&s);
    fld__retire(object_new(1), object_free); /* before the section: free to go */
    step(&s, 1);
    fld__retire(object_new(2), object_free);
    fld__retire(object_new(3), object_free);
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 1);
    ck_assert_uint_eq(fld__reclaim_pending(), 2);
    step(&s, 2);
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 3);
    stepper_stop(&s);
}
END_TEST

START_TEST(test_a_later_section_holds_nothing_back)
{
    struct stepper s;
    stepper_start(&s);
    fld__retire(object_new(1), object_free);
    step(&s, 1); /* entered after the retire: cannot hold it */
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 1);
    step(&s, 2);
    stepper_stop(&s);
}
END_TEST

START_TEST(test_nested_sections_end_with_the_outermost)
{
    fld__read_begin();
    fld__read_begin();
    fld__retire(object_new(1), object_free);
    fld__read_end();
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 0);
    fld__read_end();
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 1);
}
END_TEST

START_TEST(test_waiting_list_stays_bounded)
{
    for (int i = 0; i < 100000; i++) {
        fld__read_begin();
        fld__retire(object_new(i), object_free);
        fld__read_end();
        ck_assert_uint_le(fld__reclaim_pending(), 200);
    }
    ck_assert_int_ge(n_freed(), 100000 - 200);
}
END_TEST

START_TEST(test_kept_until_shutdown)
{
    fld__retire_until_shutdown(object_new(1), object_free);
    fld__retire(object_new(2), object_free);
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 1);
    fld__reclaim_all();
    ck_assert_int_eq(n_freed(), 2);
    ck_assert_uint_eq(fld__reclaim_pending(), 0);
}
END_TEST

START_TEST(test_records_of_exited_threads_are_reused)
{
    for (int i = 0; i < 50; i++) {
        struct stepper s;
        stepper_start(&s);
        step(&s, 1);
        step(&s, 2);
        stepper_stop(&s);
    }
    ck_assert_uint_le(count_readers(), 2);
    /* An exited thread's record is idle: nothing is held back. */
    fld__retire(object_new(1), object_free);
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 1);
}
END_TEST

START_TEST(test_fork_child_is_not_held_by_parent_threads)
{
    struct stepper s;
    stepper_start(&s);
    step(&s, 1); /* a parent thread stays inside a section across fork() */
    fld__retire(object_new(1), object_free);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fld__reclaim_after_fork();
        fld__reclaim();
        _exit(n_freed() == 1 && fld__reclaim_pending() == 0 ? 0 : 1);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child could not free (status %d)",
                  st);
    fld__reclaim(); /* the parent's thread is still inside: held */
    ck_assert_int_eq(n_freed(), 0);
    step(&s, 2);
    fld__reclaim();
    ck_assert_int_eq(n_freed(), 1);
    stepper_stop(&s);
}
END_TEST

/* ---- real threads: swap, retire, read --------------------------------------- */

#define N_READERS 3

static _Atomic(struct object *) shared;
static atomic_bool stop_readers;
static pthread_mutex_t writer_lock = PTHREAD_MUTEX_INITIALIZER; /* stands in for the host lock */

static void *reader_main(void *arg)
{
    long *bad = arg, reads = 0;
    while (!atomic_load(&stop_readers)) {
        fld__read_begin();
        struct object *o = atomic_load(&shared);
        for (int spin = 0; spin < 50; spin++) /* hold it a while */
            if (atomic_load(&o->tag) != ALIVE)
                (*bad)++;
        if (o->value < 0)
            (*bad)++;
        fld__read_end();
        reads++;
    }
    return reads > 0 ? NULL : arg;
}

START_TEST(test_readers_never_see_freed_objects)
{
    atomic_store(&shared, object_new(0));
    pthread_t threads[N_READERS];
    long bad[N_READERS] = {0};
    for (int i = 0; i < N_READERS; i++)
        ck_assert_int_eq(pthread_create(&threads[i], NULL, reader_main, &bad[i]), 0);
    const long swaps = 20000;
    for (long i = 1; i <= swaps; i++) {
        pthread_mutex_lock(&writer_lock);
        struct object *old = atomic_exchange(&shared, object_new(i));
        fld__retire(old, object_free);
        pthread_mutex_unlock(&writer_lock);
    }
    atomic_store(&stop_readers, true);
    for (int i = 0; i < N_READERS; i++) {
        void *r;
        pthread_join(threads[i], &r);
        ck_assert_msg(r == NULL, "reader %d never read", i);
        ck_assert_msg(bad[i] == 0, "reader %d saw a freed object %ld times", i, bad[i]);
    }
    fld__reclaim();
    ck_assert_uint_eq(fld__reclaim_pending(), 0);
    ck_assert_int_eq(n_freed(), swaps);
    object_free(atomic_load(&shared));
}
END_TEST

static Suite *reclaim_suite(void)
{
    Suite *s = suite_create("reclaim");
    TCase *tc = tcase_create("reclaim");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_without_readers_everything_goes);
    tcase_add_test(tc, test_an_open_section_holds_what_was_retired_after_it);
    tcase_add_test(tc, test_a_later_section_holds_nothing_back);
    tcase_add_test(tc, test_nested_sections_end_with_the_outermost);
    tcase_add_test(tc, test_waiting_list_stays_bounded);
    tcase_add_test(tc, test_kept_until_shutdown);
    tcase_add_test(tc, test_records_of_exited_threads_are_reused);
    tcase_add_test(tc, test_fork_child_is_not_held_by_parent_threads);
    tcase_add_test(tc, test_readers_never_see_freed_objects);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(reclaim_suite());
}
