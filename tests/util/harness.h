/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers: the frame of a test program. `make check` (tests/run.sh)
 * runs each program with FLD_SRCDIR and FLD_BUILDDIR set to the absolute
 * source and build trees; every test reads them through the two getters
 * below, and main() is one of the runners below:
 *
 *   int main(void)
 *   {
 *       return tt_run_suite_without_plugins("test_registry", registry_suite());
 *   }
 *
 * Each runner runs the suite with Check's fork mode from CK_FORK and its
 * verbosity from CK_VERBOSITY (default: one summary line, which
 * tests/run.sh adds up) and returns EXIT_SUCCESS when no test failed, else
 * EXIT_FAILURE.
 */
#ifndef FLD_TESTS_UTIL_HARNESS_H
#define FLD_TESTS_UTIL_HARNESS_H

#include <check.h>

/*
 * ck_assert_msg for the inner loops of exhaustive checks: Check records the
 * place of every passing ck_assert in its message file (a write and a flush
 * each), which over millions of values costs more than the checks; this
 * reaches Check only when expr is false.
 */
#define tt_assert_msg(expr, ...)                                                                   \
    do {                                                                                           \
        if (!(expr))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* $FLD_SRCDIR / $FLD_BUILDDIR; the test fails when it is not an absolute path. */
const char *tt_src_dir(void);
const char *tt_build_dir(void);

/*
 * How much slower than an idle machine this run may be: CK_TIMEOUT_MULTIPLIER
 * as a number >= 1 (tests/run.sh sets it from the load average when the
 * program starts; make check-valgrind multiplies it by 10). A test that
 * bounds a wall time from above ("finishes within 8 s", "no hang") scales
 * the bound by it; a lower bound ("waited at least the 1 s timeout") does not.
 */
double tt_time_scale(void);

/* Runs suite as it is: for tests that set up their own environment. */
int tt_run_suite(Suite *suite);

/*
 * For programs whose tests need the build tree (fixtures, the tool) or the
 * source tree too: when a directory is not given as an absolute path,
 * prints one line naming program and the variable, and fails without
 * running anything.
 */
int tt_run_suite_with_build_dir(const char *program, Suite *suite);
int tt_run_suite_with_src_and_build_dir(const char *program, Suite *suite);

/*
 * For tests of the library alone: first clears every variable that steers
 * fldispatch (tt_clear_fld_environment()), then sets VLLM_FL_PLATFORM=cpu
 * and VLLM_FL_PLUGIN_DIR to a fresh empty directory, so that no plugin of
 * the build tree loads; forked tests inherit that environment.
 */
int tt_run_suite_without_plugins(const char *program, Suite *suite);

#endif
