/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers: the fldispatch tool, run for real.
 *
 *   struct tt_tool_run r;
 *   tt_tool_run(&r, ENV("VLLM_FL_PREFER=reference"), ARGS("resolve", "rms_norm"));
 *   assert_status(r, 0);
 *   ck_assert_msg(line_with(r.out, "1.", "reference.c"), "no winner:\n" CLIP, r.out);
 *   tt_tool_run_free(&r);
 *
 * $FLD_BUILDDIR/bin/fldispatch runs in a child with a controlled environment:
 * the caller's environment less every variable that would steer the tool
 * (env.h tt_steers_fldispatch()), plus
 * VLLM_FL_PLUGIN_DIR=<build>/lib/fldispatch/plugins and VLLM_FL_PLATFORM=cpu
 * unless the run's own entries set those, plus the run's own entries. Its
 * exit status, stdout and stderr come back in a struct tt_tool_run. Failures of
 * the harness itself (tool not built, too many arguments) fail the test
 * through Check.
 *
 * The short macro names (ENV, ARGS, CLIP, assert_status, line_with) are for
 * test files only.
 */
#ifndef FLD_TESTS_UTIL_TOOL_H
#define FLD_TESTS_UTIL_TOOL_H

#include <stdbool.h>
#include <stdio.h>

#define TT_TOOL_MAX_ARGS 24  /* arguments after the program name */
#define TT_TOOL_MAX_ENV  256 /* environment entries in all */

struct tt_tool_run {
    int status; /* exit status, or 128 + signal */
    char *out;  /* stdout, NUL-terminated */
    char *err;  /* stderr, NUL-terminated */
};

/*
 * Runs the tool with args (NULL-terminated) and env, NULL-terminated
 * "NAME=value" entries added to the controlled environment (or NULL). A hung
 * tool is killed by SIGALRM after 120 s (status 128 + 14).
 */
void tt_tool_run(struct tt_tool_run *r, const char *const *env, const char *const *args);
/*
 * As tt_tool_run, with the tool at the path tool (a copy of the build's
 * beside a copy of its library, say). LD_LIBRARY_PATH is not passed on, so
 * the copy loads the library its run path ($ORIGIN/../lib) names.
 */
void tt_tool_run_at(struct tt_tool_run *r, const char *tool, const char *const *env,
                    const char *const *args);
void tt_tool_run_free(struct tt_tool_run *r);

/* All of f (from its start) in a NUL-terminated malloc'd string; closes f. */
char *tt_read_all(FILE *f);

/*
 * The first line of text that contains every one of needles (NULL-terminated),
 * without its newline, in a static buffer (clipped to 1023 bytes); NULL when
 * no line does.
 */
const char *tt_line_with_all(const char *text, const char *const *needles);

/* How many times needle occurs in text, overlapping occurrences included. */
int tt_count_of(const char *text, const char *needle);

/* Whether text is exactly one JSON value (RFC 8259 grammar, surrounding white space allowed). */
bool tt_json_valid(const char *text);

#define NO_ENV    ((const char *const *)NULL)
#define ENV(...)  ((const char *const[]){__VA_ARGS__, NULL})
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_ARGS   ((const char *const[]){NULL})

/* Outputs quoted in failure messages are clipped: Check caps the size of a message. */
#define CLIP "%.2000s"

#define assert_status(r, expected)                                                                 \
    ck_assert_msg((r).status == (expected),                                                        \
                  "exit status %d, expected %d\nstdout:\n" CLIP "\nstderr:\n" CLIP, (r).status,    \
                  (expected), (r).out, (r).err)

/* line_with(text, "a", "b", ...): tt_line_with_all with the needles inline. */
#define line_with(text, ...) tt_line_with_all((text), (const char *const[]){__VA_ARGS__, NULL})

#endif
