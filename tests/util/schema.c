/* SPDX-License-Identifier: Apache-2.0 */
#include "schema.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tool.h"

#define DEFAULT_PYTHON "/usr/bin/python3"

/* A file holding text, rewound; closed by the caller. */
static FILE *file_with(const char *text)
{
    FILE *f = tmpfile();
    ck_assert_msg(f != NULL, "tmpfile: %s", strerror(errno));
    size_t len = strlen(text);
    ck_assert_msg(fwrite(text, 1, len, f) == len && fflush(f) == 0, "writing a temporary file: %s",
                  strerror(errno));
    rewind(f);
    return f;
}

int tt_validate_json(const char *text, const char *schema, const char *python, char **report)
{
    char script[4096], schema_path[4096];
    const char *src = tt_src_dir();
    if (!python)
        python = getenv("FLD_TEST_PYTHON") ? getenv("FLD_TEST_PYTHON") : DEFAULT_PYTHON;
    snprintf(script, sizeof script, "%s/tests/util/validate_json.py", src);
    snprintf(schema_path, sizeof schema_path, "%s/docs/schemas/%s.schema.json", src, schema);
    ck_assert_msg(access(schema_path, R_OK) == 0, "no schema %s: %s", schema_path, strerror(errno));
    ck_assert_msg(access(python, X_OK) == 0,
                  "%s: %s (the schema checks need Debian's python3 with python3-jsonschema)",
                  python, strerror(errno));

    FILE *in = file_with(text), *out = tmpfile();
    ck_assert_msg(out != NULL, "tmpfile: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fileno(in), STDIN_FILENO);
        dup2(fileno(out), STDOUT_FILENO);
        dup2(fileno(out), STDERR_FILENO);
        /* -I: no user site directory and no PYTHON* variables, only the system's modules. */
        execl(python, python, "-I", script, schema_path, (char *)NULL);
        fprintf(stderr, "cannot run %s: %s\n", python, strerror(errno));
        _exit(2);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        ck_assert_msg(errno == EINTR, "waitpid: %s", strerror(errno));
    fclose(in);
    char *text_out = tt_read_all(out);
    if (report)
        *report = text_out;
    else
        free(text_out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void tt_assert_schema(const char *text, const char *schema)
{
    char *report = NULL;
    int rc = tt_validate_json(text, schema, NULL, &report);
    ck_assert_msg(rc == 0,
                  "%s --json output does not validate against docs/schemas/%s.schema.json "
                  "(validator status %d):\n%.1500s\noutput:\n%.1500s",
                  schema, schema, rc, report, text);
    free(report);
}
