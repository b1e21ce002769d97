/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Frozen dispatch: the manifest reader's errors (each kind, with its
 * line:column), the freeze round trip through the real tool, pinning that
 * survives a policy change, and entries naming impls that are missing,
 * unavailable or unfit, in strict and non-strict mode.
 *
 * The library finds its plugins on the default search path (next to the
 * library in the build tree), so vendor.cpu and vendor.template exist.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>
#include "util/harness.h"

extern char **environ;

/* ---- helpers ---------------------------------------------------------------- */

static char tmpdir[256];

/* Drops every inherited variable that changes selection, and pins the platform. */
static void clean_env(void)
{
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "VLLM_FL_", 8) == 0 || strncmp(*e, "USE_FLAGGEMS=", 13) == 0 ||
                strncmp(*e, "FLD_TEMPLATE_ENABLE=", 20) == 0) {
                size_t n = strcspn(*e, "=");
                if (n < sizeof name) {
                    memcpy(name, *e, n);
                    name[n] = '\0';
                    break;
                }
            }
        }
        if (!*name)
            break;
        unsetenv(name);
    }
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
}

static void setup(void)
{
    clean_env();
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/fld-manifest-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
}

/* Removes the files the tests wrote (flat directory). */
static void teardown(void)
{
    char cmd[512];
    if (!*tmpdir)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* Writes name inside the test's directory; returns its path (static buffer per slot). */
static const char *write_file(const char *name, const char *text)
{
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, sizeof paths[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_int_eq(fputs(text, f) >= 0 || !*text, 1);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/* Captured log lines. */
static char log_text[16384];
static int warnings;

static void capture_log(int level, const char *message, void *user)
{
    (void)user;
    if (level == FLD_LOG_WARNING)
        warnings++;
    size_t used = strlen(log_text);
    snprintf(log_text + used, sizeof log_text - used, "%d %s\n", level, message);
}

/* Whether the captured line holding needle was logged at WARNING. */
static bool line_is_warning(const char *text, const char *needle)
{
    const char *hit = strstr(text, needle);
    if (!hit)
        return false;
    const char *line = hit;
    while (line > text && line[-1] != '\n')
        line--;
    return strncmp(line, "30 ", 3) == 0;
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Runs $FLD_BUILDDIR/bin/fldispatch with the test's environment plus extra; returns the exit
 * status, with stderr in err (may be NULL). */
static int run_tool(const char *const *args, const char *extra_env, char *err, size_t err_size)
{
    const char *builddir = tt_build_dir();
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/bin/fldispatch", builddir);
    ck_assert_msg(access(tool, X_OK) == 0, "%s is not built", tool);

    const char *argv[16];
    int argc = 0;
    argv[argc++] = tool;
    for (; *args && argc < 15; args++)
        argv[argc++] = *args;
    argv[argc] = NULL;

    FILE *errf = tmpfile();
    ck_assert_ptr_nonnull(errf);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fileno(errf), STDERR_FILENO);
        if (extra_env) {
            char *copy = strdup(extra_env);
            char *eq = copy ? strchr(copy, '=') : NULL;
            if (eq) {
                *eq = '\0';
                setenv(copy, eq + 1, 1);
            }
        }
        alarm(60);
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    if (err) {
        rewind(errf);
        size_t got = fread(err, 1, err_size - 1, errf);
        err[got] = '\0';
    }
    fclose(errf);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

struct frozen {
    char op[64], device[16], dtype[16], impl[128];
};

/* Reads the entries of a manifest written by freeze (one flow mapping per line). */
static size_t read_frozen(const char *path, struct frozen *out, size_t max)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    char line[512];
    size_t n = 0;
    bool saw_version = false;
    while (fgets(line, sizeof line, f)) {
        if (strcmp(line, "version: 1\n") == 0)
            saw_version = true;
        if (strncmp(line, "  - {", 5) != 0)
            continue;
        ck_assert_uint_lt(n, max);
        struct frozen *e = &out[n];
        int got = sscanf(line, "  - {op: %63[^,], device: %15[^,], dtype: %15[^,], impl: %127[^}]}",
                         e->op, e->device, e->dtype, e->impl);
        ck_assert_msg(got == 4, "unexpected manifest line: %s", line);
        n++;
    }
    fclose(f);
    ck_assert_msg(saw_version, "%s has no 'version: 1' line", path);
    return n;
}

static void entry_key(const struct frozen *e, int *device, DLDataType *dtype)
{
    ck_assert_int_eq(fld_device_from_name(e->device, device), FLD_OK);
    if (strcmp(e->dtype, "any") == 0)
        *dtype = FLD_DTYPE_ANY;
    else
        ck_assert_int_eq(fld_dtype_from_name(e->dtype, dtype), FLD_OK);
}

static const char *resolve(const char *op, int device, DLDataType dtype)
{
    const char *id = NULL;
    int rc = fld_resolve(op, device, dtype, &id);
    ck_assert_msg(rc == FLD_OK, "fld_resolve(%s): %s", op, fld_last_error());
    return id;
}

/* Freezes the default policy of this environment into the test directory. */
static const char *freeze_to_file(void)
{
    char path[512], err[4096];
    snprintf(path, sizeof path, "%s/frozen.yaml", tmpdir);
    int st =
        run_tool((const char *const[]){"freeze", "--output", path, NULL}, NULL, err, sizeof err);
    ck_assert_msg(st == 0, "freeze exited %d: %s", st, err);
    static char kept[512];
    snprintf(kept, sizeof kept, "%s", path);
    return kept;
}

/* ---- reader errors ----------------------------------------------------------- */

struct bad_case {
    const char *text;
    const char *where; /* "line:column" */
    const char *what;  /* a fragment of the message */
};

#define ENTRY_OK "  - {op: rms_norm, device: cpu, dtype: f32, impl: reference.c}\n"

static const struct bad_case bad_cases[] = {
    /* YAML syntax: the flow mapping is never closed. */
    {"version: 1\nentries:\n  - {op: rms_norm, device: cpu\n", "4:1", "YAML syntax error"},
    {"version: 1\nentries: [\n  - a\n", "3:3", "YAML syntax error"},
    /* Not a mapping. */
    {"- version\n- entries\n", "1:1",
     "must be a mapping with keys version, entries, got a sequence"},
    {"hello\n", "1:1", "must be a mapping with keys version, entries, got a scalar"},
    {"", "1:1", "empty manifest"},
    {"# only a comment\n", "1:1", "empty manifest"},
    /* version. */
    {"version: 2\nentries: []\n", "1:10", "unsupported manifest version '2' (valid: 1)"},
    {"version: \"1\"\nentries: []\n", "1:10", "must be an integer, got the string '1' (valid: 1)"},
    {"version: [1]\nentries: []\n", "1:10", "must be an integer, got a sequence (valid: 1)"},
    {"version:\nentries: []\n", "1:9", "must be an integer, got null (valid: 1)"},
    {"entries: []\n", "1:1", "missing key 'version' (required: version, entries)"},
    /* Top-level keys. */
    {"version: 1\n", "1:1", "missing key 'entries' (required: version, entries)"},
    {"version: 1\nentries: []\nplatform: cpu\n", "3:1",
     "unknown key 'platform' (valid: version, entries)"},
    {"version: 1\nentries: []\nversion: 1\n", "3:1", "duplicate key 'version' (first at line 1)"},
    {"version: 1\n[a]: 1\nentries: []\n", "2:1", "mapping keys must be strings"},
    /* entries. */
    {"version: 1\nentries: {op: rms_norm}\n", "2:10", "key 'entries' must be a sequence"},
    {"version: 1\nentries:\n", "2:9",
     "key 'entries' must be a sequence of mappings (use [] for none), got null"},
    {"version: 1\nentries:\n  - rms_norm\n", "3:5",
     "each entry must be a mapping with keys op, device, dtype, impl, got a scalar"},
    /* Entry keys. */
    {"version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: f32, impl: reference.c, why: "
     "x}\n",
     "3:64", "unknown key 'why' in entry (valid: op, device, dtype, impl, rows)"},
    {"version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: f32}\n", "3:5",
     "entry is missing key 'impl' (required: op, device, dtype, impl)"},
    {"version: 1\nentries:\n  - {op: rms_norm, op: silu_and_mul, device: cpu, dtype: f32, impl: "
     "reference.c}\n",
     "3:20", "duplicate key 'op' (first at line 3)"},
    /* Wrong types and values. */
    {"version: 1\nentries:\n  - {op: [rms_norm], device: cpu, dtype: f32, impl: reference.c}\n",
     "3:10", "key 'op' must be a string, got a sequence"},
    {"version: 1\nentries:\n  - op: rms_norm\n    device: cpu\n    dtype: f32\n    impl: ~\n",
     "6:11", "key 'impl' must be a string, got null"},
    {"version: 1\nentries:\n  - {op: '', device: cpu, dtype: f32, impl: reference.c}\n", "3:10",
     "key 'op' must not be empty"},
    {"version: 1\nentries:\n  - {op: rms_norm, device: tpu, dtype: f32, impl: reference.c}\n",
     "3:28", "invalid device 'tpu' (valid: cpu, cuda, rocm, ascend)"},
    {"version: 1\nentries:\n  - {op: rms_norm, device: nvidia, dtype: f32, impl: reference.c}\n",
     "3:28", "invalid device 'nvidia' (valid: cpu, cuda, rocm, ascend)"},
    {"version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: f64, impl: reference.c}\n",
     "3:40", "invalid dtype 'f64' (valid: f32, f16, bf16, any)"},
    /* Duplicate (op, device, dtype). */
    {"version: 1\nentries:\n" ENTRY_OK
     "  - {op: silu_and_mul, device: cpu, dtype: f32, impl: reference.c}\n"
     "  - {op: rms_norm, device: cpu, dtype: f32, impl: vendor.cpu}\n",
     "5:5", "duplicate entry for (rms_norm, cpu, f32); first at line 3"},
    /* A second document. */
    {"version: 1\nentries: []\n---\nversion: 1\nentries: []\n", "3:1",
     "more than one YAML document"},
};

START_TEST(reader_errors)
{
    const struct bad_case *c = &bad_cases[_i];
    const char *path = write_file("bad.yaml", c->text);
    setenv("VLLM_FL_MANIFEST", path, 1);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_ECONFIG, "case %d: fld_init returned %d, expected FLD_ECONFIG (%s)", _i,
                  rc, fld_last_error());
    char where[600];
    snprintf(where, sizeof where, "%s:%s: ", path, c->where);
    const char *msg = fld_last_error();
    ck_assert_msg(strstr(msg, where), "case %d: message does not point at %s:\n%s", _i, c->where,
                  msg);
    ck_assert_msg(strstr(msg, c->what), "case %d: message lacks '%s':\n%s", _i, c->what, msg);
    /* The failure is remembered, and calls fail with it. */
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_ECONFIG);
}
END_TEST

START_TEST(missing_manifest_file)
{
    char path[600];
    snprintf(path, sizeof path, "%s/absent.yaml", tmpdir);
    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    ck_assert_msg(strstr(fld_last_error(), path) && strstr(fld_last_error(), "cannot open") &&
                      strstr(fld_last_error(), "No such file"),
                  "%s", fld_last_error());

    setenv("VLLM_FL_MANIFEST", tmpdir, 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    ck_assert_msg(strstr(fld_last_error(), "Is a directory"), "%s", fld_last_error());
}
END_TEST

/* A FIFO is refused rather than opened: that would wait for a writer under the host lock. */
START_TEST(manifest_fifo_is_refused)
{
    char path[600];
    snprintf(path, sizeof path, "%s/fifo.yaml", tmpdir);
    ck_assert_msg(mkfifo(path, 0600) == 0, "mkfifo %s: %s", path, strerror(errno));
    setenv("VLLM_FL_MANIFEST", path, 1);
    alarm(5);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    alarm(0);
    char expected[700];
    snprintf(expected, sizeof expected, "VLLM_FL_MANIFEST: %s: not a regular file", path);
    ck_assert_msg(strstr(fld_last_error(), expected), "%s", fld_last_error());
}
END_TEST

/* libyaml's scanner is quadratic in flow depth: the depth limit must stop it early. */
START_TEST(manifest_deep_nesting_is_refused)
{
    enum { DEPTH = 100000 };
    char *text = malloc(2 * DEPTH + 64);
    ck_assert_ptr_nonnull(text);
    size_t n = (size_t)sprintf(text, "version: 1\nentries: ");
    memset(text + n, '[', DEPTH);
    memset(text + n + DEPTH, ']', DEPTH);
    strcpy(text + n + 2 * DEPTH, "\n");
    const char *path = write_file("deep.yaml", text);
    free(text);
    setenv("VLLM_FL_MANIFEST", path, 1);
    alarm(5);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    alarm(0);
    char expected[700];
    snprintf(expected, sizeof expected, "%s:2:", path);
    ck_assert_msg(strstr(fld_last_error(), expected) &&
                      strstr(fld_last_error(), "nested deeper than 64 levels"),
                  "%s", fld_last_error());
}
END_TEST

/* Bad UTF-8 is placed by line:column, not by byte offset. */
START_TEST(manifest_invalid_utf8_has_position)
{
    const char *path = write_file("latin1.yaml", "version: 1\nentries:\n  - {op: r\xe9sum\xe9}\n");
    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    char expected[700];
    snprintf(expected, sizeof expected, "VLLM_FL_MANIFEST: %s:3:12: ", path);
    ck_assert_msg(strstr(fld_last_error(), expected) && strstr(fld_last_error(), "UTF-8"), "%s",
                  fld_last_error());
}
END_TEST

/* Tags and anchors are refused as in policy files. */
static const struct bad_case tagged_cases[] = {
    {"version: !!str 1\nentries: []\n", "1:10",
     "key 'version' must be an integer, got the !!str value '1' (valid: 1)"},
    {"version: !!bool 1\nentries: []\n", "1:10", "key 'version' must be an integer"},
    {"version: !!int 1\nentries: []\n", "1:10", "unsupported tag 'tag:yaml.org,2002:int'"},
    {"version: 1\nentries:\n  - {op: rms_norm, device: !cuda cpu, dtype: f32, impl: x}\n", "3:28",
     "unsupported tag '!cuda'"},
    {"version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: !!bool f32, impl: x}\n", "3:40",
     "key 'dtype' must be a string, got a !!bool value"},
    {"version: &v 1\nentries: []\n", "1:10", "anchors and aliases are not supported"},
};

START_TEST(manifest_tags_are_refused)
{
    const struct bad_case *c = &tagged_cases[_i];
    const char *path = write_file("tagged.yaml", c->text);
    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    char where[700];
    snprintf(where, sizeof where, "VLLM_FL_MANIFEST: %s:%s: ", path, c->where);
    const char *msg = fld_last_error();
    ck_assert_msg(strstr(msg, where) && strstr(msg, c->what), "case %d: want %s... %s, got:\n%s",
                  _i, where, c->what, msg);
}
END_TEST

/* ---- loading and pinning --------------------------------------------------- */

START_TEST(manifest_pins_resolution)
{
    const char *path = write_file("pin.yaml", "# hand-written\n"
                                              "version: 1\n"
                                              "entries:\n"
                                              "  - op: rms_norm\n"
                                              "    device: cpu\n"
                                              "    dtype: \"f32\"\n"
                                              "    impl: 'reference.c'\n"
                                              "  - {op: silu_and_mul, device: cpu, dtype: any, "
                                              "impl: reference.c}\n"
                                              "  - {op: silu_and_mul, device: cpu, dtype: f16, "
                                              "impl: vendor.cpu}\n");
    /* Without the manifest, vendor.cpu wins. */
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32), "vendor.cpu");
    ck_assert_str_eq(resolve("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_BF16), "vendor.cpu");

    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_msg(fld_reload() == FLD_OK, "%s", fld_last_error());
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32), "reference.c");
    /* Only the pinned dtype changes. */
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_BF16), "vendor.cpu");
    /* dtype "any" pins every dtype without an entry of its own. */
    ck_assert_str_eq(resolve("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_BF16), "reference.c");
    ck_assert_str_eq(resolve("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F32), "reference.c");
    ck_assert_str_eq(resolve("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F16), "vendor.cpu");
    /* Ops without entries follow the policy. */
    ck_assert_str_eq(resolve("gelu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F32), "vendor.cpu");

    /* Without the variable, the pins are gone. */
    unsetenv("VLLM_FL_MANIFEST");
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32), "vendor.cpu");
}
END_TEST

START_TEST(empty_manifest_is_valid)
{
    const char *path = write_file("empty.yaml", "version: 1\nentries: []\n");
    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32), "vendor.cpu");
}
END_TEST

START_TEST(reload_with_bad_manifest_keeps_state)
{
    const char *good = write_file("good.yaml", "version: 1\nentries:\n" ENTRY_OK);
    const char *bad = write_file("bad.yaml", "version: 1\nentries:\n  - {op: rms_norm}\n");
    setenv("VLLM_FL_MANIFEST", good, 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32), "reference.c");
    setenv("VLLM_FL_MANIFEST", bad, 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    ck_assert_msg(strstr(fld_last_error(), ":3:5: "), "%s", fld_last_error());
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32), "reference.c");
}
END_TEST

/* ---- freeze round trip ------------------------------------------------------ */

#define MAX_FROZEN 256

START_TEST(freeze_round_trip)
{
    const char *path = freeze_to_file();
    static struct frozen entries[MAX_FROZEN];
    size_t n = read_frozen(path, entries, MAX_FROZEN);

    /* Seven typed catalog ops x three dtypes on cpu, and attention_backend. */
    ck_assert_uint_ge(n, 22);
    bool saw_rms = false, saw_attention = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(entries[i].op, "rms_norm") == 0 && strcmp(entries[i].device, "cpu") == 0 &&
            strcmp(entries[i].dtype, "bf16") == 0) {
            ck_assert_str_eq(entries[i].impl, "vendor.cpu");
            saw_rms = true;
        }
        if (strcmp(entries[i].op, "attention_backend") == 0) {
            ck_assert_str_eq(entries[i].dtype, "any");
            saw_attention = true;
        }
    }
    ck_assert(saw_rms && saw_attention);

    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    for (size_t i = 0; i < n; i++) {
        int device;
        DLDataType dtype;
        entry_key(&entries[i], &device, &dtype);
        const char *id = resolve(entries[i].op, device, dtype);
        ck_assert_msg(strcmp(id, entries[i].impl) == 0, "%s (%s, %s): frozen %s, resolved %s",
                      entries[i].op, entries[i].device, entries[i].dtype, entries[i].impl, id);
    }
}
END_TEST

START_TEST(freeze_pins_across_policy_change)
{
    const char *path = freeze_to_file();
    static struct frozen entries[MAX_FROZEN];
    size_t n = read_frozen(path, entries, MAX_FROZEN);
    ck_assert_uint_gt(n, 0);

    /* Under prefer=reference, at least one frozen choice would change... */
    setenv("VLLM_FL_PREFER", "reference", 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    int differ = 0;
    for (size_t i = 0; i < n; i++) {
        int device;
        DLDataType dtype;
        entry_key(&entries[i], &device, &dtype);
        if (strcmp(resolve(entries[i].op, device, dtype), entries[i].impl) != 0)
            differ++;
    }
    ck_assert_int_gt(differ, 0);

    /* ...but the manifest keeps every one. */
    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_msg(fld_reload() == FLD_OK, "%s", fld_last_error());
    for (size_t i = 0; i < n; i++) {
        int device;
        DLDataType dtype;
        entry_key(&entries[i], &device, &dtype);
        const char *id = resolve(entries[i].op, device, dtype);
        ck_assert_msg(strcmp(id, entries[i].impl) == 0,
                      "%s (%s, %s): frozen %s, resolved %s under prefer=reference", entries[i].op,
                      entries[i].device, entries[i].dtype, entries[i].impl, id);
    }
}
END_TEST

START_TEST(freeze_device_option)
{
    char path[512], err[4096];
    snprintf(path, sizeof path, "%s/cuda.yaml", tmpdir);
    /* No GPU here: nothing to freeze for cuda, and no manifest written. */
    int st = run_tool((const char *const[]){"freeze", "--device", "cuda", "--output", path, NULL},
                      NULL, err, sizeof err);
    ck_assert_msg(st == 3, "freeze exited %d: %s", st, err);
    ck_assert_msg(strstr(err, "left out device cuda: "), "%s", err);
    ck_assert_int_ne(access(path, F_OK), 0);

    /* The "cuda" device of tests/fakedev (CPU memory), for the tool and for this process. */
    char modules[4096];
    snprintf(modules, sizeof modules, "%s/tests/fakedev/fld-fakedev.so", tt_build_dir());
    setenv("VLLM_FL_PLUGIN_MODULES", modules, 1);
    st = run_tool((const char *const[]){"freeze", "--device", "cuda", "--output", path, NULL}, NULL,
                  err, sizeof err);
    ck_assert_msg(st == 0, "freeze exited %d: %s", st, err);
    static struct frozen entries[MAX_FROZEN];
    size_t n = read_frozen(path, entries, MAX_FROZEN);
    ck_assert_uint_ge(n, 4); /* fakedev's ops in every dtype, and attention_backend */
    for (size_t i = 0; i < n; i++)
        ck_assert_str_eq(entries[i].device, "cuda");
    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    for (size_t i = 0; i < n; i++) {
        int device;
        DLDataType dtype;
        entry_key(&entries[i], &device, &dtype);
        ck_assert_str_eq(resolve(entries[i].op, device, dtype), entries[i].impl);
    }
}
END_TEST

/* ---- entries the registry cannot honour --------------------------------------- */

struct unfit_case {
    const char *entry; /* line 4 of the manifest */
    const char *what;
};

static const struct unfit_case unfit_cases[] = {
    {"  - {op: rms_norm, device: cpu, dtype: bf16, impl: vendor.nope}\n",
     "impl 'vendor.nope' for rms_norm (cpu, bf16) is not registered"},
    {"  - {op: no_such_op, device: cpu, dtype: f32, impl: vendor.cpu}\n",
     "impl 'vendor.cpu' for no_such_op (cpu, f32) is not registered"},
    {"  - {op: silu_and_mul, device: cpu, dtype: f32, impl: vendor.template}\n",
     "impl 'vendor.template' for silu_and_mul (cpu, f32) is unavailable: set FLD_TEMPLATE_ENABLE"},
    {"  - {op: rms_norm, device: cuda, dtype: f32, impl: vendor.cpu}\n",
     "impl 'vendor.cpu' for rms_norm (cuda, f32) does not support device cuda"},
    {"  - {op: silu_and_mul, device: cpu, dtype: bf16, impl: vendor.template}\n",
     "impl 'vendor.template' for silu_and_mul (cpu, bf16) does not support dtype bf16"},
};

static const char *write_unfit(int i)
{
    char text[512];
    snprintf(text, sizeof text,
             "version: 1\nentries:\n"
             "  - {op: gelu_and_mul, device: cpu, dtype: f32, impl: reference.c}\n%s",
             unfit_cases[i].entry);
    return write_file("unfit.yaml", text);
}

START_TEST(unfit_entry_strict)
{
    const char *path = write_unfit(_i);
    setenv("VLLM_FL_MANIFEST", path, 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    char where[600];
    snprintf(where, sizeof where, "VLLM_FL_MANIFEST: %s:4:", path);
    const char *msg = fld_last_error();
    ck_assert_msg(strstr(msg, where), "case %d: message does not name %s:\n%s", _i, where, msg);
    ck_assert_msg(strstr(msg, unfit_cases[_i].what), "case %d: message lacks '%s':\n%s", _i,
                  unfit_cases[_i].what, msg);
}
END_TEST

START_TEST(unfit_entry_warns)
{
    const char *path = write_unfit(_i);
    setenv("VLLM_FL_MANIFEST", path, 1);
    fld_log_set_callback(capture_log, NULL);
    ck_assert_msg(fld_init() == FLD_OK, "case %d: %s", _i, fld_last_error());
    char where[600];
    snprintf(where, sizeof where, "VLLM_FL_MANIFEST: %s:4:", path);
    ck_assert_msg(count_of(log_text, where) == 1 && count_of(log_text, unfit_cases[_i].what) == 1,
                  "case %d: expected one warning naming %s and '%s', got:\n%s", _i, where,
                  unfit_cases[_i].what, log_text);
    ck_assert_msg(line_is_warning(log_text, unfit_cases[_i].what), "case %d: not a WARNING:\n%s",
                  _i, log_text);
    /* The good entry is honoured, the bad one resolves normally. */
    ck_assert_str_eq(resolve("gelu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F32), "reference.c");
    ck_assert_str_eq(resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_BF16), "vendor.cpu");
    ck_assert_str_eq(resolve("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F32), "vendor.cpu");
}
END_TEST

static Suite *manifest_suite(void)
{
    Suite *s = suite_create("manifest");
    TCase *reader = tcase_create("reader");
    tcase_add_checked_fixture(reader, setup, teardown);
    tcase_add_loop_test(reader, reader_errors, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(reader, missing_manifest_file);
    tcase_add_test(reader, manifest_fifo_is_refused);
    tcase_add_test(reader, manifest_deep_nesting_is_refused);
    tcase_add_test(reader, manifest_invalid_utf8_has_position);
    tcase_add_loop_test(reader, manifest_tags_are_refused, 0,
                        (int)(sizeof tagged_cases / sizeof tagged_cases[0]));
    suite_add_tcase(s, reader);

    TCase *pin = tcase_create("pin");
    tcase_add_checked_fixture(pin, setup, teardown);
    tcase_add_test(pin, manifest_pins_resolution);
    tcase_add_test(pin, empty_manifest_is_valid);
    tcase_add_test(pin, reload_with_bad_manifest_keeps_state);
    suite_add_tcase(s, pin);

    TCase *freeze = tcase_create("freeze");
    tcase_set_timeout(freeze, 60);
    tcase_add_checked_fixture(freeze, setup, teardown);
    tcase_add_test(freeze, freeze_round_trip);
    tcase_add_test(freeze, freeze_pins_across_policy_change);
    tcase_add_test(freeze, freeze_device_option);
    suite_add_tcase(s, freeze);

    TCase *unfit = tcase_create("unfit");
    tcase_add_checked_fixture(unfit, setup, teardown);
    int n_unfit = (int)(sizeof unfit_cases / sizeof unfit_cases[0]);
    tcase_add_loop_test(unfit, unfit_entry_strict, 0, n_unfit);
    tcase_add_loop_test(unfit, unfit_entry_warns, 0, n_unfit);
    suite_add_tcase(s, unfit);
    return s;
}

int main(void)
{
    return tt_run_suite(manifest_suite());
}
