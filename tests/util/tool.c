/* SPDX-License-Identifier: Apache-2.0 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env.h"
#include "harness.h"
#include "tool.h"

extern char **environ;

char *tt_read_all(FILE *f)
{
    fflush(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    ck_assert_int_ge(size, 0);
    char *buf = malloc((size_t)size + 1);
    ck_assert_ptr_nonnull(buf);
    rewind(f);
    size_t got = fread(buf, 1, (size_t)size, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

/* Whether env (NULL-terminated "NAME=value" entries, or NULL) sets the variable of entry. */
static bool env_sets(const char *const *env, const char *entry)
{
    size_t len = strcspn(entry, "=") + 1;
    for (const char *const *e = env; e && *e; e++)
        if (strncmp(*e, entry, len) == 0)
            return true;
    return false;
}

void tt_tool_run(struct tt_tool_run *r, const char *const *env, const char *const *args)
{
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/bin/fldispatch", tt_build_dir());
    tt_tool_run_at(r, tool, env, args);
}

void tt_tool_run_at(struct tt_tool_run *r, const char *tool, const char *const *env,
                    const char *const *args)
{
    char plugin_dir[4096], build_tool[4096];
    snprintf(build_tool, sizeof build_tool, "%s/bin/fldispatch", tt_build_dir());
    bool relocated = strcmp(tool, build_tool) != 0;
    snprintf(plugin_dir, sizeof plugin_dir, "VLLM_FL_PLUGIN_DIR=%s/lib/fldispatch/plugins",
             tt_build_dir());
    ck_assert_msg(access(tool, X_OK) == 0, "%s is not built", tool);

    const char *argv[TT_TOOL_MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = tool;
    for (const char *const *a = args; *a; a++) {
        ck_assert_int_le(argc, TT_TOOL_MAX_ARGS);
        argv[argc++] = *a;
    }
    argv[argc] = NULL;

    /* The defaults go in only where env does not set them: getenv() finds the first entry. */
    const char *envp[TT_TOOL_MAX_ENV + 1];
    int n = 0;
    for (char **e = environ; *e && n < TT_TOOL_MAX_ENV - 16; e++)
        if (!tt_steers_fldispatch(*e) && !(relocated && strncmp(*e, "LD_LIBRARY_PATH=", 16) == 0))
            envp[n++] = *e;
    if (!env_sets(env, plugin_dir))
        envp[n++] = plugin_dir;
    if (!env_sets(env, "VLLM_FL_PLATFORM="))
        envp[n++] = "VLLM_FL_PLATFORM=cpu";
    for (const char *const *e = env; e && *e; e++) {
        ck_assert_int_lt(n, TT_TOOL_MAX_ENV);
        envp[n++] = *e;
    }
    envp[n] = NULL;

    FILE *out = tmpfile(), *err = tmpfile();
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(err);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fileno(out), STDOUT_FILENO);
        dup2(fileno(err), STDERR_FILENO);
        alarm(120); /* survives exec: a hung tool dies instead of hanging the test */
        execve(tool, (char *const *)argv, (char *const *)envp);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    r->out = tt_read_all(out);
    r->err = tt_read_all(err);
}

void tt_tool_run_free(struct tt_tool_run *r)
{
    free(r->out);
    free(r->err);
}

const char *tt_line_with_all(const char *text, const char *const *needles)
{
    static char line[1024];
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        bool all = true;
        for (const char *const *n = needles; *n && all; n++) {
            const char *hit = strstr(p, *n);
            all = hit && hit < p + len;
        }
        if (all) {
            size_t k = len < sizeof line ? len : sizeof line - 1;
            memcpy(line, p, k);
            line[k] = '\0';
            return line;
        }
        p += len;
        if (*p == '\n')
            p++;
    }
    return NULL;
}

int tt_count_of(const char *text, const char *needle)
{
    int n = 0;
    if (!text)
        return 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---- a strict JSON syntax checker (RFC 8259 grammar, no semantics) ------- */

static const char *js_value(const char *p, int depth);

static const char *js_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *js_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (;;) {
        unsigned char c = (unsigned char)*p++;
        if (c == '"')
            return p;
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            c = (unsigned char)*p++;
            if (c == 'u') {
                for (int i = 0; i < 4; i++, p++)
                    if (!*p || !strchr("0123456789abcdefABCDEF", *p))
                        return NULL;
            } else if (!c || !strchr("\"\\/bfnrt", c)) {
                return NULL;
            }
        }
    }
}

static const char *js_digits(const char *p)
{
    if (*p < '0' || *p > '9')
        return NULL;
    while (*p >= '0' && *p <= '9')
        p++;
    return p;
}

static const char *js_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (!(p = js_digits(p)))
        return NULL;
    if (*p == '.' && !(p = js_digits(p + 1)))
        return NULL;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(p = js_digits(p)))
            return NULL;
    }
    return p;
}

static const char *js_container(const char *p, int depth, char close, bool object)
{
    p = js_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (object) {
            if (!(p = js_string(js_ws(p))))
                return NULL;
            p = js_ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = js_value(p, depth + 1)))
            return NULL;
        p = js_ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *js_value(const char *p, int depth)
{
    if (depth > 64)
        return NULL;
    p = js_ws(p);
    switch (*p) {
    case '{':
        return js_container(p, depth, '}', true);
    case '[':
        return js_container(p, depth, ']', false);
    case '"':
        return js_string(p);
    case 't':
        return strncmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return strncmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return strncmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return js_number(p);
    }
}

bool tt_json_valid(const char *text)
{
    const char *end = js_value(text, 0);
    return end && *js_ws(end) == '\0';
}
