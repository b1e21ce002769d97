/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `fldispatch stats FILE...`: the counters files of a deployment's
 * processes merged into one report. The files come from the library's own
 * writer (fld_stats_write() in forked children, each with its RANK) and from
 * hand-written documents for the sums, the modes and every refusal; the
 * reader (core/observe/stats_file.c) is called directly too.
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>

#include "util/files.h"
#include "util/harness.h"
#include "util/schema.h"
#include "util/tool.h"

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* dir/name, in a static buffer that holds up to 8 paths. */
static const char *in_dir(const char *dir, const char *name)
{
    static char bufs[8][PATH_MAX];
    static int next;
    char *p = bufs[next++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

static const char entry_fmt[] =
    "{\"op\": \"%s\", \"impl_id\": \"%s\", \"device\": \"cpu\", \"dtype\": \"f32\", "
    "\"calls\": %s, \"fallbacks\": %s, \"failures\": %s, \"total_ns\": %s}";

/* A counters document of one entry. */
static void write_counters(const char *path, const char *pid, const char *rank, const char *mode,
                           const char *op, const char *impl, const char *calls,
                           const char *fallbacks, const char *failures, const char *total_ns)
{
    char entry[512], doc[1024];
    snprintf(entry, sizeof entry, entry_fmt, op, impl, calls, fallbacks, failures, total_ns);
    snprintf(doc, sizeof doc,
             "{\"pid\": %s, \"rank\": %s, \"mode\": \"%s\", \"entries\": [\n  %s\n]}\n", pid, rank,
             mode, entry);
    write_text(path, doc);
}

/* The line of out that starts with prefix (after leading blanks), in a static buffer; "" if none.
 */
static const char *line_starting(const char *out, const char *prefix)
{
    static char line[512];
    for (const char *p = out; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len < sizeof line && strncmp(p, prefix, strlen(prefix)) == 0) {
            memcpy(line, p, len);
            line[len] = '\0';
            return line;
        }
        p = end ? end + 1 : NULL;
    }
    return "";
}

/* The whitespace-separated fields of line, at most 16, into f (pointing into a static copy). */
static int fields(const char *line, const char *f[16])
{
    static char copy[512];
    snprintf(copy, sizeof copy, "%s", line);
    int n = 0;
    for (char *t = strtok(copy, " "); t && n < 16; t = strtok(NULL, " "))
        f[n++] = t;
    return n;
}

START_TEST(sums_over_files_and_keeps_modes_apart)
{
    const char *dir = tt_make_tmpdir("stats-merge");
    write_counters(in_dir(dir, "a.json"), "100", "0", "time", "rms_norm", "vendor.cpu", "10", "1",
                   "0", "5000");
    write_counters(in_dir(dir, "b.json"), "200", "1", "time", "rms_norm", "vendor.cpu", "30", "0",
                   "2", "15000");
    /* counts only: adds calls, but no time, and not to avg_ns's divisor */
    write_counters(in_dir(dir, "c.json"), "300", "2", "calls", "rms_norm", "vendor.cpu", "60", "0",
                   "0", "0");
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV,
                ARGS("stats", in_dir(dir, "a.json"), in_dir(dir, "b.json"), in_dir(dir, "c.json")));
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "3 file(s), 3 with a rank, 2 timed: 1 row(s)"), "%s", r.out);
    const char *f[16];
    int n = fields(line_starting(r.out, "rms_norm"), f);
    ck_assert_int_eq(n, 10);
    ck_assert_str_eq(f[1], "vendor.cpu");
    ck_assert_str_eq(f[4], "100"); /* calls 10 + 30 + 60 */
    ck_assert_str_eq(f[5], "1");
    ck_assert_str_eq(f[6], "2");
    ck_assert_str_eq(f[7], "0.020"); /* ms: 5000 + 15000 ns */
    ck_assert_str_eq(f[8], "500");   /* 20000 ns / 40 timed calls, not / 100 */
    ck_assert_str_eq(f[9], "0,1,2");
    tt_tool_run_free(&r);

    /* --by-rank: one row per rank, nothing summed across them */
    tt_tool_run(&r, NO_ENV,
                ARGS("stats", "--by-rank", in_dir(dir, "b.json"), in_dir(dir, "a.json"),
                     in_dir(dir, "c.json")));
    ck_assert_int_eq(r.status, 0);
    n = fields(line_starting(r.out, "2 "), f);
    ck_assert_int_eq(n, 11);
    ck_assert_str_eq(f[5], "60");
    ck_assert_str_eq(f[8], "-"); /* a calls-only row has no time */
    n = fields(line_starting(r.out, "0 "), f);
    ck_assert_str_eq(f[5], "10");
    ck_assert_msg(strstr(r.out, "\n0 ") < strstr(r.out, "\n1 ") &&
                      strstr(r.out, "\n1 ") < strstr(r.out, "\n2 "),
                  "rows not in rank order:\n%s", r.out);
    tt_tool_run_free(&r);

    /* --json: the same sums, valid against the published schema */
    tt_tool_run(&r, NO_ENV,
                ARGS("stats", "--json", in_dir(dir, "a.json"), in_dir(dir, "b.json"),
                     in_dir(dir, "c.json")));
    ck_assert_int_eq(r.status, 0);
    tt_assert_schema(r.out, "stats");
    ck_assert_msg(strstr(r.out, "\"calls\": 100"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "\"timed_calls\": 40"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "\"total_ns\": 20000"), "%s", r.out);
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV,
                ARGS("stats", "--json", "--by-rank", in_dir(dir, "a.json"), in_dir(dir, "c.json")));
    ck_assert_int_eq(r.status, 0);
    tt_assert_schema(r.out, "stats");
    tt_tool_run_free(&r);

    /* --prometheus: the same sums as counters; seconds from the timed files alone */
    tt_tool_run(&r, NO_ENV,
                ARGS("stats", "--prometheus", in_dir(dir, "a.json"), in_dir(dir, "b.json"),
                     in_dir(dir, "c.json")));
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    static const char *const lines[] = {
        "# TYPE fldispatch_calls_total counter\n",
        "\nfldispatch_calls_total{op=\"rms_norm\",impl_id=\"vendor.cpu\",device=\"cpu\","
        "dtype=\"f32\"} 100\n",
        "\nfldispatch_fallbacks_total{op=\"rms_norm\",impl_id=\"vendor.cpu\",device=\"cpu\","
        "dtype=\"f32\"} 1\n",
        "\nfldispatch_failures_total{op=\"rms_norm\",impl_id=\"vendor.cpu\",device=\"cpu\","
        "dtype=\"f32\"} 2\n",
        "\nfldispatch_call_seconds_total{op=\"rms_norm\",impl_id=\"vendor.cpu\",device=\"cpu\","
        "dtype=\"f32\"} 0.000020000\n",
        "\nfldispatch_timed_calls_total{op=\"rms_norm\",impl_id=\"vendor.cpu\",device=\"cpu\","
        "dtype=\"f32\"} 40\n",
        "\n# TYPE fldispatch_stats_files gauge\nfldispatch_stats_files 3\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        ck_assert_msg(strstr(r.out, lines[i]), "no '%s' in:\n%s", lines[i], r.out);
    ck_assert_str_eq(r.err, "");
    tt_tool_run_free(&r);
    /* by rank: the calls-only rank has no time series */
    tt_tool_run(
        &r, NO_ENV,
        ARGS("stats", "--prometheus", "--by-rank", in_dir(dir, "a.json"), in_dir(dir, "c.json")));
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "\nfldispatch_calls_total{op=\"rms_norm\",impl_id=\"vendor.cpu\","
                                "device=\"cpu\",dtype=\"f32\",rank=\"2\"} 60\n"),
                  "%s", r.out);
    ck_assert_msg(strstr(r.out, "dtype=\"f32\",rank=\"0\"} 0.000005000\n"), "%s", r.out);
    ck_assert_msg(!strstr(r.out, "rank=\"2\"} 0.0"), "a calls-only rank timed:\n%s", r.out);
    tt_tool_run_free(&r);
    /* no timed file: no time families at all */
    tt_tool_run(&r, NO_ENV, ARGS("stats", "--prometheus", in_dir(dir, "c.json")));
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(!strstr(r.out, "seconds") && !strstr(r.out, "timed"), "%s", r.out);
    tt_tool_run_free(&r);
    /* one output at a time */
    tt_tool_run(&r, NO_ENV, ARGS("stats", "--json", "--prometheus", in_dir(dir, "c.json")));
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--json and --prometheus are two outputs: choose one"), "%s",
                  r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);
}
END_TEST

/* Label values as the exposition format escapes them; an unknown rank is "unknown". */
START_TEST(prometheus_escapes_label_values)
{
    const char *dir = tt_make_tmpdir("stats-prom");
    write_counters(in_dir(dir, "q.json"), "5", "null", "calls", "my_op", "say \\\"hi\\\" \\\\ \\n",
                   "4", "0", "0", "0");
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("stats", "--prometheus", "--by-rank", in_dir(dir, "q.json")));
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    const char *want = "\nfldispatch_calls_total{op=\"my_op\",impl_id=\"say \\\"hi\\\" \\\\ "
                       "\\n\",device=\"cpu\",dtype=\"f32\",rank=\"unknown\"} 4\n";
    ck_assert_msg(strstr(r.out, want), "no '%s' in:\n%s", want, r.out);
    tt_tool_run_free(&r);
}
END_TEST

/* Forks a process with RANK=rank that counts `calls` rms_norm calls and writes its file into dir.
 */
static void child_writes_counters(const char *dir, const char *rank, int calls)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv("RANK", rank, 1);
        float x[64], w[64], out[64];
        for (int i = 0; i < 64; i++)
            x[i] = w[i] = 0.5f + (float)i;
        int64_t shape[2] = {1, 64}, wshape[1] = {64};
        DLTensor tx = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
        DLTensor tw = {w, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, wshape, NULL, 0};
        DLTensor to = {out, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
        int rc = fld_stats_enable(FLD_STATS_TIME);
        for (int i = 0; i < calls && rc == FLD_OK; i++)
            rc = fld_rms_norm(&to, &tx, &tw, NULL, 1e-6f);
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/stats-%%r-%%p.json", dir);
        if (rc == FLD_OK)
            rc = fld_stats_write(path);
        _exit(rc == FLD_OK ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child of rank %s failed", rank);
}

START_TEST(merges_what_the_library_writes)
{
    const char *dir = tt_make_tmpdir("stats-lib");
    child_writes_counters(dir, "0", 7);
    child_writes_counters(dir, "1", 5);
    char pattern[PATH_MAX];
    snprintf(pattern, sizeof pattern, "cd '%s' && ls stats-*.json", dir);
    FILE *ls = popen(pattern, "r");
    ck_assert_ptr_nonnull(ls);
    char names[2][256];
    for (int i = 0; i < 2; i++) {
        ck_assert_ptr_nonnull(fgets(names[i], sizeof names[i], ls));
        names[i][strcspn(names[i], "\n")] = '\0';
    }
    pclose(ls);
    ck_assert_msg(strncmp(names[0], "stats-0-", 8) == 0 && strncmp(names[1], "stats-1-", 8) == 0,
                  "files %s %s", names[0], names[1]);

    struct fld_stats_file f;
    ck_assert_int_eq(fld__stats_file_read(in_dir(dir, names[1]), &f), FLD_OK);
    ck_assert(f.has_rank);
    ck_assert_uint_eq(f.rank, 1);
    ck_assert_str_eq(f.mode, "time");
    ck_assert_uint_ge(f.n, 1);
    uint64_t calls = 0;
    for (size_t i = 0; i < f.n; i++)
        if (strcmp(f.entries[i].op, "rms_norm") == 0)
            calls += f.entries[i].calls;
    ck_assert_uint_eq(calls, 5);
    fld__stats_file_free(&f);
    ck_assert_uint_eq(f.n, 0);

    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("stats", "--json", in_dir(dir, names[0]), in_dir(dir, names[1])));
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    tt_assert_schema(r.out, "stats");
    ck_assert_msg(strstr(r.out, "\"calls\": 12"), "7 + 5 calls not merged:\n%s", r.out);
    ck_assert_msg(strstr(r.out, "\"ranks\": [\n        0,\n        1\n      ]"), "%s", r.out);
    tt_tool_run_free(&r);
}
END_TEST

/* Runs stats on the one file text and checks the status and that stderr holds want. */
static void refused(const char *dir, const char *name, const char *text, int status,
                    const char *want)
{
    const char *path = in_dir(dir, name);
    write_text(path, text);
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("stats", path));
    ck_assert_msg(r.status == status, "%s: status %d, stderr: %s", name, r.status, r.err);
    ck_assert_msg(strstr(r.err, want), "%s: stderr lacks '%s':\n%s", name, want, r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);
}

START_TEST(refuses_what_is_not_a_counters_file)
{
    const char *dir = tt_make_tmpdir("stats-bad");
    refused(dir, "empty.json", "", 2, "empty.json:1:1: the file is empty");
    refused(dir, "list.json", "[1, 2]\n", 2, "list.json:1:1: the document must be an object");
    refused(dir, "nokey.json", "{\"pid\": 1, \"rank\": 0, \"mode\": \"time\"}\n", 2,
            "nokey.json:1:1: the document has no 'entries'");
    refused(dir, "extra.json",
            "{\"pid\": 1, \"rank\": 0, \"mode\": \"time\", \"entries\": [], \"host\": \"x\"}\n", 2,
            "extra.json:1:54: the document has an unknown key 'host'");
    refused(dir, "twice.json",
            "{\"pid\": 1, \"pid\": 2, \"rank\": 0, \"mode\": \"time\", \"entries\": []}\n", 2,
            "twice.json:1:12: the document has 'pid' twice");
    refused(dir, "mode.json", "{\"pid\": 1, \"rank\": 0, \"mode\": \"fast\", \"entries\": []}\n", 2,
            "mode.json:1:31: 'mode' must be \"calls\", \"time\" or \"off\"");
    refused(dir, "negative.json",
            "{\"pid\": 1, \"rank\": 0, \"mode\": \"time\", \"entries\": [\n"
            "  {\"op\": \"a\", \"impl_id\": \"b\", \"device\": \"cpu\", \"dtype\": \"f32\", "
            "\"calls\": -3, \"fallbacks\": 0, \"failures\": 0, \"total_ns\": 0}]}\n",
            2, "negative.json:2:73: 'calls' must be a whole number from 0 to 2^64-1, got -3");
    refused(
        dir, "huge.json",
        "{\"pid\": 1, \"rank\": 0, \"mode\": \"time\", \"entries\": [\n"
        "  {\"op\": \"a\", \"impl_id\": \"b\", \"device\": \"cpu\", \"dtype\": \"f32\", "
        "\"calls\": 1, \"fallbacks\": 0, \"failures\": 0, \"total_ns\": 18446744073709551616}]}\n",
        2, "huge.json:2:119: 'total_ns' is 18446744073709551616, above 2^64-1");
    refused(dir, "opnum.json",
            "{\"pid\": 1, \"rank\": 0, \"mode\": \"time\", \"entries\": [\n"
            "  {\"op\": 5, \"impl_id\": \"b\", \"device\": \"cpu\", \"dtype\": \"f32\", "
            "\"calls\": 1, \"fallbacks\": 0, \"failures\": 0, \"total_ns\": 0}]}\n",
            2, "opnum.json:2:10: 'op' must be a string");
    refused(dir, "syntax.json", "{\"pid\": 1, \"rank\": \n", 2,
            "syntax.json:2:1: JSON syntax error: unexpected end of file");
    /* JSON, not YAML: what YAML alone would read is refused as JSON. */
    refused(dir, "yaml.json", "pid: 1\nrank: 0\nmode: time\nentries: []\n", 2,
            "yaml.json:1:1: JSON syntax error: unexpected 'p'");
    /* A string is shown with its quotes: "1" is not the number 1. */
    refused(dir, "quoted.json",
            "{\"pid\": \"1\", \"rank\": 0, \"mode\": \"time\", \"entries\": []}\n", 2,
            "quoted.json:1:9: 'pid' must be a whole number from 0 to 2^64-1, got the string \"1\"");
    refused(dir, "listpid.json",
            "{\"pid\": [1], \"rank\": 0, \"mode\": \"time\", \"entries\": []}\n", 2,
            "'pid' must be a whole number from 0 to 2^64-1, got an array");

    /* two files of one process; a sum past 2^63-1 */
    write_counters(in_dir(dir, "p1.json"), "42", "3", "calls", "x", "y", "9223372036854775807", "0",
                   "0", "0");
    write_counters(in_dir(dir, "p2.json"), "42", "3", "calls", "x", "y", "1", "0", "0", "0");
    write_counters(in_dir(dir, "p3.json"), "43", "3", "calls", "x", "y", "1", "0", "0", "0");
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("stats", in_dir(dir, "p1.json"), in_dir(dir, "p2.json")));
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "are both pid 42 rank 3: one process's counters would count twice"),
                  "%s", r.err);
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("stats", in_dir(dir, "p1.json"), in_dir(dir, "p3.json")));
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "the sum of x/y (cpu, f32) passes 2^63-1 at"), "%s", r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    /* usage */
    tt_tool_run(&r, NO_ENV, ARGS("stats"));
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "no FILE given"), "%s", r.err);
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("stats", in_dir(dir, "absent.json")));
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "cannot open"), "%s", r.err);
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("stats", "--by-rnak", in_dir(dir, "p3.json")));
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "did you mean '--by-rank'"), "%s", r.err);
    tt_tool_run_free(&r);
}
END_TEST

/* What a process with no calls writes: no rows, not an error. */
START_TEST(a_file_without_entries)
{
    const char *dir = tt_make_tmpdir("stats-empty");
    write_text(in_dir(dir, "none.json"),
               "{\"pid\": 7, \"rank\": null, \"mode\": \"calls\", \"entries\": []}\n");
    write_text(in_dir(dir, "none2.json"),
               "{\"pid\": 8, \"rank\": 1, \"mode\": \"time\", \"entries\": []}\n");
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("stats", in_dir(dir, "none.json")));
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "1 file(s), 0 with a rank, 0 timed: 0 row(s)"), "%s", r.out);
    tt_tool_run_free(&r);
    tt_tool_run(
        &r, NO_ENV,
        ARGS("stats", "--json", "--by-rank", in_dir(dir, "none.json"), in_dir(dir, "none2.json")));
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    tt_assert_schema(r.out, "stats");
    ck_assert_msg(strstr(r.out, "\"entries\": []"), "%s", r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(a_rank_that_was_not_a_number)
{
    const char *dir = tt_make_tmpdir("stats-norank");
    write_counters(in_dir(dir, "n.json"), "5", "null", "time", "myop", "impl", "4", "0", "0",
                   "400");
    write_counters(in_dir(dir, "r.json"), "6", "3", "time", "myop", "impl", "4", "0", "0", "400");
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("stats", in_dir(dir, "n.json"), in_dir(dir, "r.json")));
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "2 file(s), 1 with a rank, 2 timed"), "%s", r.out);
    const char *f[16];
    ck_assert_int_eq(fields(line_starting(r.out, "myop "), f), 10);
    ck_assert_str_eq(f[9], "3,?");
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("stats", "--json", in_dir(dir, "n.json"), in_dir(dir, "r.json")));
    ck_assert_int_eq(r.status, 0);
    tt_assert_schema(r.out, "stats");
    ck_assert_msg(strstr(r.out, "\"rank\": null"), "%s", r.out);
    tt_tool_run_free(&r);
}
END_TEST

static Suite *stats_merge_suite(void)
{
    Suite *s = suite_create("stats_merge");
    TCase *tc = tcase_create("merge");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sums_over_files_and_keeps_modes_apart);
    tcase_add_test(tc, merges_what_the_library_writes);
    tcase_add_test(tc, refuses_what_is_not_a_counters_file);
    tcase_add_test(tc, a_file_without_entries);
    tcase_add_test(tc, a_rank_that_was_not_a_number);
    tcase_add_test(tc, prometheus_escapes_label_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_stats_merge", stats_merge_suite());
}
