/* SPDX-License-Identifier: Apache-2.0 */
/* The frame of a test program; see harness.h. */
#include "harness.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "env.h"

static const char *absolute_dir(const char *variable, const char *what)
{
    const char *v = getenv(variable);
    ck_assert_msg(v != NULL && v[0] == '/', "%s must name the absolute %s (make check sets it)",
                  variable, what);
    return v;
}

const char *tt_src_dir(void)
{
    return absolute_dir("FLD_SRCDIR", "source directory");
}

const char *tt_build_dir(void)
{
    return absolute_dir("FLD_BUILDDIR", "build directory");
}

double tt_time_scale(void)
{
    const char *v = getenv("CK_TIMEOUT_MULTIPLIER");
    char *end = NULL;
    double scale = v ? strtod(v, &end) : 1.0;
    if (!v || end == v || *end != '\0' || !(scale >= 1.0))
        return 1.0;
    return scale > 1000.0 ? 1000.0 : scale;
}

int tt_run_suite(Suite *suite)
{
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* Outside a test: a missing variable is one line, not a Check failure. */
static int refuse_unless_absolute(const char *program, const char *variable, Suite *suite)
{
    const char *v = getenv(variable);
    if (v != NULL && v[0] == '/')
        return 0;
    fprintf(stderr,
            "%s: %s is not set to an absolute path; run `make check` or set FLD_SRCDIR and "
            "FLD_BUILDDIR\n",
            program, variable);
    srunner_free(srunner_create(suite)); /* frees the suite */
    return -1;
}

int tt_run_suite_with_build_dir(const char *program, Suite *suite)
{
    if (refuse_unless_absolute(program, "FLD_BUILDDIR", suite))
        return EXIT_FAILURE;
    return tt_run_suite(suite);
}

int tt_run_suite_with_src_and_build_dir(const char *program, Suite *suite)
{
    if (refuse_unless_absolute(program, "FLD_SRCDIR", suite))
        return EXIT_FAILURE;
    return tt_run_suite_with_build_dir(program, suite);
}

int tt_run_suite_without_plugins(const char *program, Suite *suite)
{
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/fld-%s-XXXXXX", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp",
             program);
    if (mkdtemp(dir) == NULL) {
        perror(dir);
        srunner_free(srunner_create(suite)); /* frees the suite */
        return EXIT_FAILURE;
    }
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    int rc = tt_run_suite(suite);
    rmdir(dir);
    return rc;
}
