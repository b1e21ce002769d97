/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench, run for real: $FLD_BUILDDIR/bin/fldispatch is executed
 * in a child with a controlled environment (no inherited VLLM_FL_*
 * variables, the build's plugin directory, platform cpu), and its exit
 * status, stdout and stderr are checked. --json output is parsed into a
 * small tree and its figures checked for plausibility.
 *
 * Every run uses --quick (tokens 1 and 32, 3 repetitions, 2 ms batches) and
 * one op, and --overhead and --registration runs few calls, ops and
 * repetitions, so the whole program stays well under 20 s. The project's
 * targets are checked on real --json output by bench/targets.py (run under
 * /usr/bin/python3 -I).
 *
 * --device cuda runs on tests/fakedev/fake_device.c (fld-fakedev.so), a
 * cuda device on CPU memory, with small d2d copy buffers (--copy-mib).
 */
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/harness.h"
#include "util/schema.h"
#include "util/tool.h"

/* "VLLM_FL_PLUGIN_MODULES=<build>/tests/fakedev/fld-fakedev.so", in a static buffer. */
static const char *fakedev_env(void)
{
    static char entry[4096];
    snprintf(entry, sizeof entry, "VLLM_FL_PLUGIN_MODULES=%s/tests/fakedev/fld-fakedev.so",
             tt_build_dir());
    ck_assert_msg(access(entry + strlen("VLLM_FL_PLUGIN_MODULES="), R_OK) == 0,
                  "%s is not built (make tests)", entry + strlen("VLLM_FL_PLUGIN_MODULES="));
    return entry;
}

/* ---- a small JSON tree ------------------------------------------------------------- */

enum jtype { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT };

struct jvalue {
    enum jtype type;
    double number;
    bool boolean;
    char *string;          /* J_STRING (escapes other than \" and \\ kept as is) */
    size_t n;              /* J_ARRAY, J_OBJECT: items */
    char **keys;           /* J_OBJECT */
    struct jvalue **items; /* J_ARRAY, J_OBJECT */
};

static const char *jp_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* Parses a string at p (on the quote); returns the end or NULL. */
static const char *jp_string(const char *p, char **out)
{
    if (*p++ != '"')
        return NULL;
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    for (;;) {
        char c = *p++;
        if (c == '\0' || (unsigned char)c < 0x20) {
            free(s);
            return NULL;
        }
        if (c == '"')
            break;
        if (c == '\\') {
            c = *p++;
            if (c == '\0') {
                free(s);
                return NULL;
            }
        }
        if (len + 2 > cap) {
            cap *= 2;
            char *bigger = realloc(s, cap);
            ck_assert_ptr_nonnull(bigger);
            s = bigger;
        }
        s[len++] = c;
    }
    s[len] = '\0';
    *out = s;
    return p;
}

static struct jvalue *jv_new(enum jtype type)
{
    struct jvalue *v = calloc(1, sizeof *v);
    ck_assert_ptr_nonnull(v);
    v->type = type;
    return v;
}

static void jv_free(struct jvalue *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        if (v->keys)
            free(v->keys[i]);
        jv_free(v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->string);
    free(v);
}

static void jv_push(struct jvalue *v, char *key, struct jvalue *item)
{
    v->items = realloc(v->items, (v->n + 1) * sizeof *v->items);
    ck_assert_ptr_nonnull(v->items);
    if (v->type == J_OBJECT) {
        v->keys = realloc(v->keys, (v->n + 1) * sizeof *v->keys);
        ck_assert_ptr_nonnull(v->keys);
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
}

static const char *jp_value(const char *p, struct jvalue **out, int depth);

static const char *jp_container(const char *p, struct jvalue *v, char close, int depth)
{
    p = jp_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        char *key = NULL;
        if (v->type == J_OBJECT) {
            if (!(p = jp_string(jp_ws(p), &key)))
                return NULL;
            p = jp_ws(p);
            if (*p++ != ':') {
                free(key);
                return NULL;
            }
        }
        struct jvalue *item = NULL;
        if (!(p = jp_value(p, &item, depth + 1))) {
            free(key);
            return NULL;
        }
        jv_push(v, key, item);
        p = jp_ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *jp_value(const char *p, struct jvalue **out, int depth)
{
    if (depth > 32)
        return NULL;
    p = jp_ws(p);
    struct jvalue *v;
    if (*p == '{' || *p == '[') {
        v = jv_new(*p == '{' ? J_OBJECT : J_ARRAY);
        p = jp_container(p, v, *p == '{' ? '}' : ']', depth);
    } else if (*p == '"') {
        v = jv_new(J_STRING);
        p = jp_string(p, &v->string);
    } else if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
        v = jv_new(J_BOOL);
        v->boolean = *p == 't';
        p += v->boolean ? 4 : 5;
    } else if (strncmp(p, "null", 4) == 0) {
        v = jv_new(J_NULL);
        p += 4;
    } else {
        char *end;
        v = jv_new(J_NUMBER);
        v->number = strtod(p, &end);
        p = end == p || !(*p == '-' || isdigit((unsigned char)*p)) ? NULL : end;
    }
    *out = v;
    if (!p) {
        jv_free(v);
        *out = NULL;
    }
    return p;
}

/* The whole document, or NULL when it is not exactly one JSON value. */
static struct jvalue *json_parse(const char *text)
{
    struct jvalue *v = NULL;
    const char *end = jp_value(text, &v, 0);
    if (!end || *jp_ws(end) != '\0') {
        jv_free(v);
        return NULL;
    }
    return v;
}

static const struct jvalue *jv_get(const struct jvalue *obj, const char *key)
{
    if (!obj || obj->type != J_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

static double jv_number(const struct jvalue *obj, const char *key)
{
    const struct jvalue *v = jv_get(obj, key);
    ck_assert_msg(v && v->type == J_NUMBER, "key '%s' is missing or not a number", key);
    return v->number;
}

static const char *jv_string(const struct jvalue *obj, const char *key)
{
    const struct jvalue *v = jv_get(obj, key);
    ck_assert_msg(v && v->type == J_STRING, "key '%s' is missing or not a string", key);
    return v->string;
}

START_TEST(json_tree_parses_and_rejects)
{
    struct jvalue *v = json_parse("{\"a\": [1, -2.5e3, true, null, \"x\\\"y\"], \"b\": {}}\n");
    ck_assert_ptr_nonnull(v);
    const struct jvalue *a = jv_get(v, "a");
    ck_assert(a && a->type == J_ARRAY && a->n == 5);
    ck_assert(a->items[1]->number == -2500.0);
    ck_assert_str_eq(a->items[4]->string, "x\"y");
    jv_free(v);
    ck_assert_ptr_null(json_parse("{\"a\": 1,}"));
    ck_assert_ptr_null(json_parse("{\"a\" 1}"));
    ck_assert_ptr_null(json_parse("[1, 2"));
    ck_assert_ptr_null(json_parse("{} {}"));
    ck_assert_ptr_null(json_parse("{\"a\": nan}"));
}
END_TEST

/* ---- the kernel benchmark ------------------------------------------------------------- */

/* "32x4096": digits 'x' digits (and more 'x' digits). */
static bool shape_text(const char *s)
{
    int parts = 0;
    for (;;) {
        if (!isdigit((unsigned char)*s))
            return false;
        while (isdigit((unsigned char)*s))
            s++;
        parts++;
        if (*s == '\0')
            return parts >= 2;
        if (*s++ != 'x')
            return false;
    }
}

/* Whether obj has key with the value null. */
static bool jv_is_null(const struct jvalue *obj, const char *key)
{
    const struct jvalue *v = jv_get(obj, key);
    return v && v->type == J_NULL;
}

/*
 * Checks the document against docs/schemas/bench.schema.json, the machine
 * object and every result; returns the parsed document. On a device (not
 * the CPU) the baseline is the d2d copy and there are no thread counts and
 * no STREAM figures (null); on the CPU no device figures (null).
 */
static struct jvalue *parse_bench_json_on(const struct tt_tool_run *r, bool device)
{
    ck_assert_msg(r->out[0] == '{', "output is not a JSON object:\n" CLIP, r->out);
    tt_assert_schema(r->out, "bench");
    struct jvalue *doc = json_parse(r->out);
    ck_assert_msg(doc != NULL, "output is not valid JSON:\n" CLIP, r->out);
    const struct jvalue *m = jv_get(doc, "machine");
    ck_assert_msg(m && m->type == J_OBJECT, "no machine object");
    ck_assert(strlen(jv_string(m, "cpu")) > 0);
    ck_assert(strlen(jv_string(m, "isa")) > 0);
    ck_assert(jv_number(m, "threads") >= 1);
    ck_assert_str_eq(jv_string(doc, "baseline"), device ? "d2d_copy" : "stream_triad");
    if (device) {
        const struct jvalue *s1 = jv_get(m, "stream_gbps_1t");
        ck_assert_msg(s1 && s1->type == J_NULL, "stream_gbps_1t is not null on a device");
        double d2d = jv_number(m, "d2d_copy_gbps");
        ck_assert_msg(d2d > 0.01 && d2d < 100000, "d2d_copy_gbps %g", d2d);
        ck_assert(jv_number(doc, "baseline_gbps") == d2d);
        ck_assert(jv_is_null(m, "stream_array_bytes"));
    } else {
        double s1 = jv_number(m, "stream_gbps_1t"), sn = jv_number(m, "stream_gbps");
        ck_assert_msg(s1 > 0.1 && s1 < 10000, "stream_gbps_1t %g", s1);
        ck_assert_msg(sn > 0.1 && sn < 10000, "stream_gbps %g", sn);
        ck_assert(jv_is_null(doc, "baseline_gbps"));
        ck_assert(jv_is_null(doc, "provider"));
        ck_assert(jv_is_null(m, "d2d_copy_gbps") && jv_is_null(m, "d2d_copy_bytes") &&
                  jv_is_null(m, "device_detail"));
    }
    ck_assert_str_eq(jv_string(doc, "benchmark"), "kernels");

    const struct jvalue *res = jv_get(doc, "results");
    ck_assert_msg(res && res->type == J_ARRAY && res->n > 0, "no results");
    for (size_t i = 0; i < res->n; i++) {
        const struct jvalue *e = res->items[i];
        ck_assert(strlen(jv_string(e, "op")) > 0);
        ck_assert(strchr(jv_string(e, "impl_id"), '.') != NULL);
        ck_assert(strlen(jv_string(e, "dtype")) > 0);
        ck_assert_msg(shape_text(jv_string(e, "shape")), "shape '%s'", jv_string(e, "shape"));
        if (device)
            ck_assert(jv_is_null(e, "threads"));
        else
            ck_assert(jv_number(e, "threads") >= 1);
        double us = jv_number(e, "us"), gbps = jv_number(e, "gbps");
        double share = jv_number(e, "bw_share");
        ck_assert_msg(us > 0 && us < 1e7, "us %g", us);
        ck_assert_msg(gbps > 0 && gbps < 1e5, "gbps %g", gbps);
        ck_assert_msg(share > 0 && share < 1e4, "bw_share %g", share);
    }
    return doc;
}

static struct jvalue *parse_bench_json(const struct tt_tool_run *r)
{
    return parse_bench_json_on(r, false);
}

/* The result for (impl, shape, threads), or NULL. */
static const struct jvalue *find_result(const struct jvalue *doc, const char *impl,
                                        const char *shape, int threads)
{
    const struct jvalue *res = jv_get(doc, "results");
    for (size_t i = 0; res && i < res->n; i++) {
        const struct jvalue *e = res->items[i];
        /* threads 0: a device, where results have none (null) */
        bool same_threads = threads ? jv_number(e, "threads") == threads : jv_is_null(e, "threads");
        if (strcmp(jv_string(e, "impl_id"), impl) == 0 &&
            strcmp(jv_string(e, "shape"), shape) == 0 && same_threads)
            return e;
    }
    return NULL;
}

START_TEST(quick_rms_norm_json)
{
    struct tt_tool_run r;
    /* One thread by default: the caller's VLLM_FL_CPU_THREADS is the default the
     * machine reports, and STREAM then runs with one thread only, which is quicker. */
    tt_tool_run(&r, ENV("VLLM_FL_CPU_THREADS=1"),
                ARGS("bench", "--quick", "rms_norm", "--dtype", "f32", "--json"));
    assert_status(r, 0);
    ck_assert_msg(!strchr(r.err, '\r'), "progress written although stderr is not a terminal");
    struct jvalue *doc = parse_bench_json(&r);
    const struct jvalue *m = jv_get(doc, "machine");
    const int threads = 1;
    ck_assert_int_eq((int)jv_number(m, "threads"), threads);
    ck_assert(jv_number(m, "stream_gbps") == jv_number(m, "stream_gbps_1t"));

    const struct jvalue *res = jv_get(doc, "results");
    for (size_t i = 0; i < res->n; i++) {
        ck_assert_str_eq(jv_string(res->items[i], "op"), "rms_norm");
        ck_assert_str_eq(jv_string(res->items[i], "dtype"), "f32");
        ck_assert_int_eq((int)jv_number(res->items[i], "threads"), threads);
    }
    /* The cpu plugin and the reference, at both quick token counts. */
    for (const char *const *impl = (const char *const[]){"vendor.cpu", "reference.c", NULL}; *impl;
         impl++) {
        for (const char *const *shape = (const char *const[]){"1x4096", "32x4096", NULL}; *shape;
             shape++) {
            const struct jvalue *e = find_result(doc, *impl, *shape, threads);
            ck_assert_msg(e, "no %s result for %s:\n" CLIP, *impl, *shape, r.out);
            /* x read, out written, weight once: 4 bytes x (2 T H + H). */
            double t = strcmp(*shape, "1x4096") == 0 ? 1 : 32;
            double bytes = 4.0 * (2 * t * 4096 + 4096);
            double gbps = bytes / (jv_number(e, "us") * 1e3);
            ck_assert_msg(fabs(gbps - jv_number(e, "gbps")) <= 0.01 * gbps + 0.002,
                          "%s %s: gbps %g, bytes/us give %g", *impl, *shape, jv_number(e, "gbps"),
                          gbps);
            double share = jv_number(e, "gbps") / jv_number(m, "stream_gbps_1t");
            ck_assert_msg(fabs(share - jv_number(e, "bw_share")) <= 0.01 * share + 1e-4,
                          "bw_share %g, expected %g", jv_number(e, "bw_share"), share);
            /* T x H normalised values; per second and per cycle of the measured clock */
            ck_assert_int_eq((long long)jv_number(e, "elements"), (long long)t * 4096);
            double gelem = t * 4096 / (jv_number(e, "us") * 1e3);
            ck_assert_msg(fabs(gelem - jv_number(e, "gelem_per_s")) <= 0.01 * gelem + 1e-4,
                          "gelem_per_s %g, expected %g", jv_number(e, "gelem_per_s"), gelem);
            double per_cycle = jv_number(e, "gelem_per_s") / jv_number(m, "cpu_ghz");
            ck_assert_msg(
                fabs(per_cycle - jv_number(e, "elem_per_cycle")) <= 0.01 * per_cycle + 1e-4,
                "elem_per_cycle %g, expected %g", jv_number(e, "elem_per_cycle"), per_cycle);
        }
    }
    /* schema 3 (2: the elements and the clock, timed by a chain of adds: a plausible clock;
     * 3: no "targets", the project's targets are bench/targets.py's) */
    ck_assert_int_eq((int)jv_number(doc, "schema"), 3);
    ck_assert_ptr_null(jv_get(doc, "targets"));
    ck_assert_str_eq(jv_string(m, "cpu_ghz_source"), "calibrated");
    ck_assert_msg(jv_number(m, "cpu_ghz") > 0.2 && jv_number(m, "cpu_ghz") < 10, "cpu_ghz %g",
                  jv_number(m, "cpu_ghz"));
    jv_free(doc);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(threads_list_runs_each_count)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV,
                ARGS("bench", "--quick", "silu_and_mul", "--dtype", "bf16", "--impl", "vendor.cpu",
                     "--tokens", "1,64", "--threads", "1,2", "--json"));
    assert_status(r, 0);
    struct jvalue *doc = parse_bench_json(&r);
    const struct jvalue *m = jv_get(doc, "machine");
    for (int t = 1; t <= 2; t++)
        for (const char *const *shape = (const char *const[]){"1x4096", "64x4096", NULL}; *shape;
             shape++)
            ck_assert_msg(find_result(doc, "vendor.cpu", *shape, t), "no %s result, %d threads",
                          *shape, t);
    const struct jvalue *res = jv_get(doc, "results");
    ck_assert_uint_eq(res->n, 4);
    /* A STREAM figure for every thread count used and for the default, which
     * is the "stream_gbps" figure. */
    const struct jvalue *stream = jv_get(m, "stream");
    ck_assert(stream && stream->type == J_ARRAY);
    int default_threads = (int)jv_number(m, "threads");
    bool seen[3] = {false}, seen_default = false;
    for (size_t i = 0; i < stream->n; i++) {
        int t = (int)jv_number(stream->items[i], "threads");
        double triad = jv_number(stream->items[i], "triad_gbps");
        ck_assert(triad > 0);
        ck_assert(jv_number(stream->items[i], "copy_gbps") > 0);
        if (t >= 1 && t <= 2)
            seen[t] = true;
        if (t == 1)
            ck_assert(triad == jv_number(m, "stream_gbps_1t"));
        if (t == default_threads) {
            seen_default = true;
            ck_assert(triad == jv_number(m, "stream_gbps"));
        }
    }
    ck_assert(seen[1] && seen[2] && seen_default);
    jv_free(doc);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(text_output_has_header_lines_and_no_targets)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_CPU_THREADS=1"),
                ARGS("bench", "--quick", "rotary_embedding", "--dtype", "f16", "--impl",
                     "vendor.cpu", "--tokens", "1"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "machine:"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "STREAM"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "triad GB/s", "copy GB/s"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "cpu clock:", "GHz", "calibrated"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "GB/s", "bw_share", "Gelem/s", "el/cyc"), CLIP, r.out);
    ck_assert_msg(
        line_with(r.out, "op", "impl", "dtype", "shape", "threads", "us", "GB/s", "bw_share"), CLIP,
        r.out);
    ck_assert_msg(line_with(r.out, "rotary_embedding", "vendor.cpu", "f16", "1x32x128", "%"), CLIP,
                  r.out);
    ck_assert_msg(!strstr(r.out, "reference.c"), "--impl vendor.cpu ran others:\n" CLIP, r.out);
    /* The tool reports measurements only: the project's targets are bench/targets.py's. */
    ck_assert_msg(!strstr(r.out, "targets") && !strstr(r.out, "issue") && !strstr(r.out, "MISSED"),
                  CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

/*
 * Runs bench/targets.py ARGS on the document in text (written to a file) under
 * /usr/bin/python3 -I; returns its exit status and its output in *out.
 */
static int run_targets_script(const char *text, const char *extra_arg, char **out)
{
    char doc[] = "/tmp/fld-bench-json-XXXXXX";
    int fd = mkstemp(doc);
    ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
    size_t len = strlen(text);
    ck_assert(write(fd, text, len) == (ssize_t)len);
    close(fd);
    char script[4096];
    snprintf(script, sizeof script, "%s/bench/targets.py", tt_src_dir());
    FILE *o = tmpfile();
    ck_assert_ptr_nonnull(o);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fileno(o), STDOUT_FILENO);
        dup2(fileno(o), STDERR_FILENO);
        execl("/usr/bin/python3", "python3", "-I", script, doc, extra_arg, (char *)NULL);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        ck_assert(errno == EINTR);
    unlink(doc);
    *out = tt_read_all(o);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(targets_script_reads_the_json)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_CPU_THREADS=1"),
                ARGS("bench", "--quick", "rotary_embedding", "--dtype", "f16", "--impl",
                     "vendor.cpu", "--tokens", "1", "--json"));
    assert_status(r, 0);
    char *out = NULL;
    /* One token covers the decode target; met or missed, the exit status stays 0. */
    int rc = run_targets_script(r.out, NULL, &out);
    ck_assert_msg(rc == 0, "bench/targets.py exited %d:\n" CLIP, rc, out);
    ck_assert_msg(line_with(out, "targets (CPU kernels"), CLIP, out);
    ck_assert_msg(line_with(out, "decode"), CLIP, out);
    ck_assert_msg(line_with(out, "rotary_embedding", "f16", "vendor.cpu", " us", "met") ||
                      line_with(out, "rotary_embedding", "f16", "vendor.cpu", " us", "MISSED"),
                  CLIP, out);
    free(out);
    rc = run_targets_script(r.out, "--json", &out);
    ck_assert_msg(rc == 0 && strstr(out, "\"target\": \"decode_us\"") &&
                      strstr(out, "\"limit\": 0.5"),
                  "status %d:\n" CLIP, rc, out);
    free(out);
    /* Not a document it knows: status 2. */
    rc = run_targets_script("{\"schema\": 1, \"benchmark\": \"stream\"}", NULL, &out);
    ck_assert_msg(rc == 2 && strstr(out, "not the output of"), "status %d:\n" CLIP, rc, out);
    free(out);
    rc = run_targets_script("[1, 2]", NULL, &out);
    ck_assert_msg(rc == 2, "status %d:\n" CLIP, rc, out);
    free(out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(usage_errors_name_the_option)
{
    static const struct {
        const char *args[5];
        const char *needle;
    } cases[] = {
        {{"bench", "no_such_op"}, "no_such_op"},
        {{"bench", "--threads", "0"}, "--threads"},
        {{"bench", "--threads", "x"}, "--threads"},
        {{"bench", "--threads", "1,,2"}, "--threads"},
        {{"bench", "--threads=1025"}, "--threads"},
        {{"bench", "--dtype", "f64"}, "--dtype"},
        {{"bench", "--dtype", "any"}, "--dtype"},
        {{"bench", "--tokens", "0"}, "--tokens"},
        {{"bench", "--reps", "0"}, "--reps"},
        {{"bench", "--device", "tpu"}, "--device"},
        {{"bench", "--overhead", "--threads", "2"}, "--threads"},
        {{"bench", "--calls", "10"}, "--calls"},
        {{"bench", "attention_backend"}, "attention_backend"},
        {{"bench", "--device=cuda", "--threads", "2"}, "--threads applies to --device cpu only"},
        {{"bench", "--copy-mib", "4"}, "--copy-mib"},
        {{"bench", "--device=cuda", "--copy-mib", "0"}, "--copy-mib"},
        {{"bench", "--ops", "10"}, "--ops and --impls apply to --registration only"},
        {{"bench", "--registration", "--overhead"}, "--overhead does not apply to --registration"},
        {{"bench", "--registration", "rms_norm"}, "does not apply to --registration"},
        {{"bench", "--registration", "--impls", "65"}, "--impls"},
        {{"bench", "--registration", "--ops", "0"}, "--ops"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tt_tool_run r;
        tt_tool_run(&r, NO_ENV, cases[i].args);
        assert_status(r, 2);
        ck_assert_msg(strstr(r.err, cases[i].needle), "%s %s: message does not name '%s': %s",
                      cases[i].args[1], cases[i].args[2] ? cases[i].args[2] : "", cases[i].needle,
                      r.err);
        ck_assert_str_eq(r.out, "");
        tt_tool_run_free(&r);
    }
}
END_TEST

START_TEST(no_implementation_exits_3)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--quick", "rms_norm", "--impl", "vendor.no_such"));
    assert_status(r, 3);
    ck_assert(strstr(r.err, "vendor.no_such"));
    tt_tool_run_free(&r);

    /* Registered but unavailable: the reason is passed on. */
    tt_tool_run(
        &r, NO_ENV,
        ARGS("bench", "--quick", "silu_and_mul", "--dtype", "f32", "--impl", "vendor.template"));
    assert_status(r, 3);
    ck_assert_msg(strstr(r.err, "vendor.template") && strstr(r.err, "unavailable"), CLIP, r.err);
    tt_tool_run_free(&r);

    /* No plugin provides cuda memory here (none built, or one without a driver). */
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--quick", "rms_norm", "--device", "cuda"));
    assert_status(r, 3);
    ck_assert_msg(strstr(r.err, "fldispatch bench: device cuda: fld_device_provider"), CLIP, r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    /* The device's plugin is there but switched off: its reason is passed on. */
    tt_tool_run(&r, ENV(fakedev_env(), "FLD_FAKEDEV_UNAVAILABLE=1"),
                ARGS("bench", "--quick", "rms_norm", "--device", "cuda"));
    assert_status(r, 3);
    ck_assert_msg(line_with(r.err, "device cuda: ", "fakedev", "FLD_FAKEDEV_UNAVAILABLE"), CLIP,
                  r.err);
    tt_tool_run_free(&r);

    /* A provider, but no implementation of the op for the device. */
    tt_tool_run(&r, ENV(fakedev_env()),
                ARGS("bench", "--quick", "gelu_and_mul", "--device", "cuda"));
    assert_status(r, 3);
    ck_assert_msg(strstr(r.err, "no implementation of gelu_and_mul for cuda/f32"), CLIP, r.err);
    tt_tool_run_free(&r);

    /* Without OP, such an op is skipped and the others run. */
    tt_tool_run(&r, ENV(fakedev_env()),
                ARGS("bench", "--quick", "--device", "cuda", "--dtype", "f32", "--tokens", "1",
                     "--copy-mib", "16"));
    assert_status(r, 0);
    ck_assert_msg(strstr(r.err, "skipped: no implementation of gelu_and_mul for cuda/f32"), CLIP,
                  r.err);
    ck_assert_msg(line_with(r.out, "rms_norm", "f32"), CLIP, r.out);
    ck_assert_msg(!line_with(r.out, "gelu_and_mul", "f32"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

/* ---- a device on CPU memory (tests/fakedev) ------------------------------------------- */

START_TEST(device_quick_json_has_d2d_baseline)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env()),
                ARGS("bench", "--quick", "rms_norm", "--device", "cuda", "--dtype", "f32,bf16",
                     "--copy-mib", "16", "--json"));
    assert_status(r, 0);
    struct jvalue *doc = parse_bench_json_on(&r, true);
    ck_assert_str_eq(jv_string(doc, "device"), "cuda");
    const struct jvalue *m = jv_get(doc, "machine");
    ck_assert_str_eq(jv_string(doc, "provider"), "fakedev");
    ck_assert(jv_number(m, "d2d_copy_bytes") == 16 << 20);
    ck_assert(jv_number(m, "d2d_runs") >= 2); /* before the kernels and after the op */
    const double d2d = jv_number(m, "d2d_copy_gbps");
    const struct jvalue *res = jv_get(doc, "results");
    ck_assert_uint_eq(res->n, 6); /* 2 dtypes x (1x4096, 32x4096, 32x4096+res) */
    for (size_t i = 0; i < res->n; i++) {
        const struct jvalue *e = res->items[i];
        ck_assert_str_eq(jv_string(e, "impl_id"), "vendor.fakedev");
        /* gbps and d2d_copy_gbps are printed to 3 decimals: under a sanitizer
         * they are small enough for that rounding to matter. */
        double share = jv_number(e, "gbps") / d2d;
        double printed = 0.0005 * (1 + share) / d2d;
        ck_assert_msg(fabs(share - jv_number(e, "bw_share")) <= 0.01 * share + 1e-4 + printed,
                      "bw_share %g, expected gbps / d2d_copy_gbps = %g", jv_number(e, "bw_share"),
                      share);
    }
    const struct jvalue *e = find_result(doc, "vendor.fakedev", "32x4096", 0);
    ck_assert_msg(e, CLIP, r.out);
    /* f32 or bf16: 2 bytes at least per element; x read, out written, weight once */
    ck_assert(jv_number(e, "bytes") >= 2.0 * (2 * 32 * 4096 + 4096));
    ck_assert_msg(!strstr(r.err, "not freed"), CLIP, r.err);
    jv_free(doc);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(device_text_names_the_baseline)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env()),
                ARGS("bench", "--quick", "rotary_embedding", "--device", "cuda", "--dtype", "f16",
                     "--tokens", "4", "--copy-mib", "8"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "fldispatch bench: cuda", "fld_device_synchronize"), CLIP,
                  r.out);
    ck_assert_msg(line_with(r.out, "device: cuda 0", "plugin 'fakedev'"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "d2d copy: 8 MiB", "GB/s"), CLIP, r.out);
    ck_assert_msg(!line_with(r.out, "STREAM:"), CLIP, r.out);
    ck_assert_msg(
        line_with(r.out, "rotary_embedding", "vendor.fakedev", "f16", "4x32x128", " - ", "%"), CLIP,
        r.out);
    ck_assert_msg(!strstr(r.out, "targets"), CLIP, r.out);
    ck_assert_msg(!strstr(r.err, "not freed"), CLIP, r.err);
    tt_tool_run_free(&r);
}
END_TEST

/*
 * On a device, a case smaller than the device caches gets several tensor sets
 * that consecutive calls take in turn (DEVICE_COLD_BYTES / DEVICE_MAX_SETS in
 * tools/bench/kernels.c): one token of silu_and_mul is tiny, so 64 sets, of which a
 * --quick run reaches as many as it makes calls. How many calls fit in its
 * 2 ms batches depends on the machine's load (7 seen on a loaded 2-vCPU
 * machine, fewer under a sanitizer), so the test asks only for rotation:
 * more than one set read, and no more than the 64 there are.
 */
START_TEST(device_rotates_input_sets)
{
    struct tt_tool_run r;
    char counting[] = "FLD_FAKEDEV_COUNT_INPUTS=1";
    tt_tool_run(&r, ENV(fakedev_env(), counting),
                ARGS("bench", "--quick", "silu_and_mul", "--device", "cuda", "--dtype", "f32",
                     "--tokens", "1", "--copy-mib", "4"));
    assert_status(r, 0);
    const char *line = strstr(r.err, "fakedev: silu_and_mul read ");
    ck_assert_msg(line, CLIP, r.err);
    int n = atoi(line + strlen("fakedev: silu_and_mul read "));
    ck_assert_msg(n >= 2 && n <= 64, "%d distinct inputs, expected 2 to 64:\n" CLIP, n, r.err);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(device_failing_kernel_fails_the_run)
{
    /* A kernel that fails asynchronously, as GPU kernels do: the call returns FLD_OK and
     * the synchronisation at the end of the batch reports it. */
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env(), "FLD_FAKEDEV_FAIL_SYNC=1"),
                ARGS("bench", "--quick", "silu_and_mul", "--device", "cuda", "--dtype", "f32",
                     "--tokens", "1", "--copy-mib", "8"));
    assert_status(r, 1);
    ck_assert_msg(line_with(r.err, "silu_and_mul vendor.fakedev f32 1x4096 failed",
                            "fld_device_synchronize", "failed asynchronously"),
                  CLIP, r.err);
    ck_assert_msg(line_with(r.out, "silu_and_mul", "vendor.fakedev", "failed"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(overhead_reports_no_targets)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--overhead", "--reps", "3", "--calls", "2000"));
    assert_status(r, 0);
    for (const char *const *v = (const char *const[]){"direct", "handle", "name", "typed", NULL};
         *v; v++)
        ck_assert_msg(line_with(r.out, "null", *v), "no null/%s row:\n" CLIP, *v, r.out);
    ck_assert_msg(line_with(r.out, "ns/call", "overhead"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "opaque", "direct", "handle", "name", "call_on", "x"), CLIP,
                  r.out);
    /* Measurements only: the project's targets are bench/targets.py's. */
    ck_assert_msg(!strstr(r.out, "target") && !strstr(r.out, "MISS") && !strstr(r.out, "<= "), CLIP,
                  r.out);
    /* An overhead below zero is marked, and said what it means once, under the table. */
    int negative = 0;
    for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        size_t len = strcspn(line, "\n");
        const char *last = line + len;
        while (last > line && last[-1] != ' ')
            last--;
        if (last < line + len && last[0] == '-' && last[1] >= '0' && last[1] <= '9') {
            ck_assert_msg(line[len - 1] == '*', "unmarked negative overhead: %.*s", (int)len, line);
            negative++;
        }
    }
    ck_assert_int_eq(tt_count_of(r.out, "* below zero: "), negative ? 1 : 0);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(targets_script_judges_overhead)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV,
                ARGS("bench", "--overhead", "--reps", "1", "--calls", "2000", "--json"));
    assert_status(r, 0);
    tt_assert_schema(r.out, "bench");
    struct jvalue *doc = json_parse(r.out);
    ck_assert_msg(doc != NULL, CLIP, r.out);
    /* schema 2: no "targets" */
    ck_assert_int_eq((int)jv_number(doc, "schema"), 2);
    ck_assert_ptr_null(jv_get(doc, "targets"));
    jv_free(doc);

    char *out = NULL;
    int rc = run_targets_script(r.out, NULL, &out);
    ck_assert_msg(rc == 0, "bench/targets.py exited %d:\n" CLIP, rc, out);
    ck_assert_msg(line_with(out, "targets (dispatch overhead", "rms_norm"), CLIP, out);
    /* The verdicts the tool printed: handle and name rows per kernel and thread count. */
    for (const char *const *k = (const char *const[]){"null", "loop", "opaque", NULL}; *k; k++)
        for (const char *const *t = (const char *const[]){" 1 ", " 2 ", NULL}; *t; t++) {
            ck_assert_msg(line_with(out, *k, "handle", *t, "<= 5 ns", "ok") ||
                              line_with(out, *k, "handle", *t, "<= 5 ns", "MISS"),
                          "%s handle%s:\n" CLIP, *k, *t, out);
            ck_assert_msg(line_with(out, *k, "name", *t, "<= 25 ns", "ok") ||
                              line_with(out, *k, "name", *t, "<= 25 ns", "MISS"),
                          "%s name%s:\n" CLIP, *k, *t, out);
        }
    ck_assert_msg(line_with(out, "two threads vs one", "(target >= 1.8x)"), CLIP, out);
    ck_assert_msg(line_with(out, "opaque", "direct", "handle", "name", "call_on"), CLIP, out);
    /* 3 kernels x (handle and name at 1 and 2 threads + 4 variants' scaling), and
     * null and loop x (prepared and run at 1 and 2 threads + their scaling) */
    ck_assert_msg(line_with(out, " of 36 met"), CLIP, out);
    bool all_met = line_with(out, "36 of 36 met") != NULL;
    free(out);

    rc = run_targets_script(r.out, "--json", &out);
    ck_assert_msg(rc == 0, "status %d:\n" CLIP, rc, out);
    ck_assert_int_eq(tt_count_of(out, "\"target\": "), 36);
    ck_assert_int_eq(tt_count_of(out, "\"target\": \"handle_overhead_ns\""), 6);
    ck_assert_int_eq(tt_count_of(out, "\"target\": \"name_overhead_ns\""), 6);
    ck_assert_int_eq(tt_count_of(out, "\"target\": \"prepared_overhead_ns\""), 4);
    ck_assert_int_eq(tt_count_of(out, "\"target\": \"run_overhead_ns\""), 4);
    ck_assert_int_eq(tt_count_of(out, "\"target\": \"scaling_2t\""), 16);
    ck_assert_msg(strstr(out, "\"impl_id\": \"vendor.bench_loop\"") &&
                      strstr(out, "\"op\": \"bench_opaque\"") &&
                      strstr(out, "\"variant\": \"call_on\"") && strstr(out, "\"limit\": 1.8"),
                  CLIP, out);
    free(out);

    /* --strict: 1 exactly when a target is missed. */
    rc = run_targets_script(r.out, "--strict", &out);
    ck_assert_msg(rc == (all_met ? 0 : 1), "status %d:\n" CLIP, rc, out);
    free(out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(registration_reports_each_count)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV,
                ARGS("bench", "--registration", "--ops", "10,300", "--impls", "2", "--reps", "1"));
    assert_status(r, 0);
    ck_assert_msg(strstr(r.out, "with 2 implementations each"), CLIP, r.out);
    for (const char *const *n = (const char *const[]){"10", "300", NULL}; *n; n++) {
        bool found = false;
        for (const char *line = r.out; line && *line; line = strchr(line, '\n')) {
            while (*line == '\n')
                line++;
            long ops = 0;
            double ms, us, mib = 0;
            char heap[16];
            if (sscanf(line, "%ld %lf %lf %15s", &ops, &ms, &us, heap) == 4 && ops == atol(*n)) {
                /* a sanitizer's malloc is invisible to mallinfo2(): "n/a" there, and only there */
                bool sanitized = getenv("FLD_SANITIZE") && *getenv("FLD_SANITIZE");
                found = ms > 0 && (sanitized ? strcmp(heap, "n/a") == 0
                                             : sscanf(heap, "%lf", &mib) == 1 && mib > 0);
                break;
            }
        }
        ck_assert_msg(found, "no plausible row for %s ops:\n" CLIP, *n, r.out);
    }
    ck_assert_msg(line_with(r.out, "peak resident set"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(registration_json_and_targets_script)
{
    struct tt_tool_run r;
    /* 4000 ops, one implementation each: what the registration target needs. */
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--registration", "--ops", "10,4000", "--reps", "1"));
    assert_status(r, 0);
    ck_assert_msg(!strstr(r.out, "target") && !strstr(r.out, "issue") && !strstr(r.out, "MISSED"),
                  "the text names a target:\n" CLIP, r.out);
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV,
                ARGS("bench", "--registration", "--ops", "10,4000", "--reps", "1", "--json"));
    assert_status(r, 0);
    tt_assert_schema(r.out, "bench");
    struct jvalue *doc = json_parse(r.out);
    ck_assert_msg(doc != NULL, CLIP, r.out);
    ck_assert_int_eq((int)jv_number(doc, "schema"), 1);
    ck_assert_str_eq(jv_string(doc, "benchmark"), "registration");
    ck_assert_int_eq((int)jv_number(doc, "impls"), 1);
    const struct jvalue *results = jv_get(doc, "results");
    ck_assert(results && results->type == J_ARRAY && results->n == 2);
    const struct jvalue *row = results->items[1];
    ck_assert_int_eq((int)jv_number(row, "ops"), 4000);
    ck_assert_msg(jv_number(row, "register_ms") > 0, CLIP, r.out);
    ck_assert_msg(fabs(jv_number(row, "us_per_op") - jv_number(row, "register_ms") * 1e3 / 4000) <
                      0.01,
                  CLIP, r.out);
    bool sanitized = getenv("FLD_SANITIZE") && *getenv("FLD_SANITIZE");
    ck_assert_msg(sanitized ? jv_is_null(row, "heap_mib") : jv_number(row, "heap_mib") > 0, CLIP,
                  r.out);
    jv_free(doc);

    char *out = NULL;
    int rc = run_targets_script(r.out, NULL, &out);
    ck_assert_msg(rc == 0, "bench/targets.py exited %d:\n" CLIP, rc, out);
    ck_assert_msg(
        line_with(out, "target (registration): 4000 ops", "< 50 ms", "< 4 MiB", "met") ||
            line_with(out, "target (registration): 4000 ops", "< 50 ms", "< 4 MiB", "MISSED"),
        CLIP, out);
    free(out);
    rc = run_targets_script(r.out, "--json", &out);
    ck_assert_msg(rc == 0 && strstr(out, "\"target\": \"register_ms\"") &&
                      strstr(out, "\"target\": \"register_heap_mib\"") &&
                      strstr(out, "\"limit\": 50.0") && strstr(out, "\"ops\": 4000"),
                  "status %d:\n" CLIP, rc, out);
    free(out);
    tt_tool_run_free(&r);

    /* Without 4000 ops the run does not cover the target. */
    tt_tool_run(&r, NO_ENV,
                ARGS("bench", "--registration", "--ops", "10", "--reps", "1", "--json"));
    assert_status(r, 0);
    rc = run_targets_script(r.out, "--strict", &out);
    ck_assert_msg(rc == 0 && line_with(out, "not covered by this run"), "status %d:\n" CLIP, rc,
                  out);
    free(out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(help_lists_modes_and_defaults)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--help"));
    assert_status(r, 0);
    ck_assert(strstr(r.out, "--overhead"));
    ck_assert(strstr(r.out, "--registration"));
    ck_assert(strstr(r.out, "--threads"));
    ck_assert(line_with(r.out, "--dtype", "all three"));
    tt_tool_run_free(&r);
}
END_TEST

static Suite *bench_suite(void)
{
    Suite *s = suite_create("bench");
    TCase *parse = tcase_create("json");
    tcase_add_test(parse, json_tree_parses_and_rejects);
    suite_add_tcase(s, parse);

    TCase *kernels = tcase_create("kernels");
    tcase_set_timeout(kernels, 90);
    tcase_add_test(kernels, quick_rms_norm_json);
    tcase_add_test(kernels, threads_list_runs_each_count);
    tcase_add_test(kernels, text_output_has_header_lines_and_no_targets);
    tcase_add_test(kernels, targets_script_reads_the_json);
    tcase_add_test(kernels, usage_errors_name_the_option);
    tcase_add_test(kernels, no_implementation_exits_3);
    tcase_add_test(kernels, device_quick_json_has_d2d_baseline);
    tcase_add_test(kernels, device_text_names_the_baseline);
    tcase_add_test(kernels, device_rotates_input_sets);
    tcase_add_test(kernels, device_failing_kernel_fails_the_run);
    tcase_add_test(kernels, overhead_reports_no_targets);
    tcase_add_test(kernels, targets_script_judges_overhead);
    tcase_add_test(kernels, registration_reports_each_count);
    tcase_add_test(kernels, registration_json_and_targets_script);
    tcase_add_test(kernels, help_lists_modes_and_defaults);
    suite_add_tcase(s, kernels);
    return s;
}

int main(void)
{
    return tt_run_suite(bench_suite());
}
