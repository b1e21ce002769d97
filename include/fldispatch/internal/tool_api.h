/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the fldispatch tool uses of the library beyond the public API: the
 * crash-isolating plugin probe of `fldispatch doctor` (core/registry/probe.c),
 * discovery's list of candidate files (core/registry/discovery.c), the host's file
 * checks (core/registry/plugin_file.c), and the rows of the device table
 * (core/base/devices.c), from which the tool's and the Python extension's
 * device names derive, the escaper of text that leaves the library
 * (core/base/escape.c), the reader of counters files and the exit
 * handler's flush (core/observe/stats_file.c, stats.c), and their merge
 * and Prometheus exposition (stats_merge.c, stats_prometheus.c).
 *
 * Internal: not installed with the public headers, not part of the API or
 * the ABI, and free to change with any release. The tool, the Python
 * extension (python/src, built and shipped with its own copy of the
 * library) and the library ship together, and the functions marked
 * FLD_TOOL_API are exported from libfldispatch.so for them alone. Nothing
 * else should include this file; core/ includes it (core/registry/probe.h,
 * core/base/devices.c), so both sides compile against the same declarations.
 *
 * Thread safety differs from the public conventions: fld__probe_run() in
 * FLD_PROBE_FORK mode is for a single-threaded process only (see enum
 * fld_probe_mode), and none of these functions initialises the library or
 * takes its lock.
 */
#ifndef FLDISPATCH_INTERNAL_TOOL_API_H
#define FLDISPATCH_INTERNAL_TOOL_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include <fldispatch/fldispatch.h>

#define FLD_TOOL_API __attribute__((visibility("default")))

/* How long a probe may take unless told otherwise, in seconds. */
#define FLD_PROBE_DEFAULT_TIMEOUT 10.0
#define FLD_PROBE_MAX_TIMEOUT     3600.0

/* Where the child was when it stopped; reported through the pipe. */
enum fld_probe_stage {
    FLD_PROBE_STAGE_START,        /* set-up of the child, before dlopen */
    FLD_PROBE_STAGE_DLOPEN,       /* dlopen: the loader and static constructors */
    FLD_PROBE_STAGE_DESCRIPTOR,   /* finding and judging the descriptor */
    FLD_PROBE_STAGE_REGISTER,     /* register_builtins */
    FLD_PROBE_STAGE_AVAILABILITY, /* impls' and device hooks' is_available */
    FLD_PROBE_STAGE_DONE          /* verdict sent; the child is exiting */
};

enum fld_probe_state {
    FLD_PROBE_OK,          /* loads; at least one impl available (or none registered) */
    FLD_PROBE_UNAVAILABLE, /* loads, but every impl says it cannot run here */
    FLD_PROBE_REJECTED,    /* the host would refuse it (file checks, dlopen, descriptor, records) */
    FLD_PROBE_CRASHED,     /* killed by a signal */
    FLD_PROBE_HUNG,        /* no verdict within the timeout; its process group was killed */
    FLD_PROBE_EXITED,      /* the process ended (exit(), _exit()) before its verdict */
    FLD_PROBE_ERROR        /* the probe itself could not run (fork, pipe, helper) */
};

struct fld_probe_impl {
    char *op;
    char *impl_id;
    bool available;
    char *reason; /* "" when available */
};

struct fld_probe_hook {
    int device_type;
    bool available;
    char *reason;
};

struct fld_probe_result {
    enum fld_probe_state state;
    enum fld_probe_stage stage;
    int signal;      /* CRASHED: the signal number */
    int exit_status; /* EXITED: the status given to exit() */
    double seconds;  /* how long the child ran */
    /* From the descriptor, once the child read it (have_descriptor). */
    bool have_descriptor;
    char name[72];
    char version[128];
    unsigned abi_major, abi_minor;
    bool in_tree;
    char detail[512]; /* fld_registry_set_detail() text, "" when none */
    /* Why it was rejected, crashed, hung, exited or could not be probed;
     * for UNAVAILABLE the first impl's reason. */
    char reason[1024];
    struct fld_probe_impl *impls;
    size_t n_impls;
    struct fld_probe_hook *hooks;
    size_t n_hooks;
};

enum fld_probe_mode {
    /* fork() and probe in the child: only from a single-threaded process
     * that has not initialised device runtimes (the fldispatch tool). */
    FLD_PROBE_FORK,
    /* posix_spawn() the fldispatch tool as a fresh helper process: safe
     * from any process (no atfork handlers, no inherited locks or driver
     * state). Needs helper. */
    FLD_PROBE_SPAWN
};

struct fld_probe_options {
    double timeout; /* seconds, > 0 */
    enum fld_probe_mode mode;
    const char *helper; /* SPAWN: absolute path of the fldispatch tool */
};

/*
 * Probes the plugin file at path. Returns FLD_OK when the probe ran,
 * whatever the verdict (in out->state); otherwise an error with
 * out->state FLD_PROBE_ERROR and the reason in out->reason and
 * fld_last_error(). out must be released with fld__probe_result_free().
 * Does not check the file's permissions (fld__plugin_check_file does).
 */
FLD_TOOL_API int fld__probe_run(const char *path, const struct fld_probe_options *opt,
                                struct fld_probe_result *out);
FLD_TOOL_API void fld__probe_result_free(struct fld_probe_result *r);

/*
 * The child's side: loads path and reports on fd, then _exit()s. The
 * fldispatch tool runs it as the spawned helper ("doctor --probe-child").
 */
FLD_TOOL_API __attribute__((noreturn)) void fld__probe_child_main(int fd, const char *path);

/* "ok", "unavailable", "rejected", "crashed", "hung", "exited", "error". */
FLD_TOOL_API const char *fld__probe_state_name(enum fld_probe_state s);
/* "start", "dlopen", "descriptor", "register_builtins", "availability", "done". */
FLD_TOOL_API const char *fld__probe_stage_name(enum fld_probe_stage s);
/* "SIGSEGV", ...; "SIG<n>" in buf for others. */
FLD_TOOL_API const char *fld__probe_signal_name(int sig, char *buf, size_t size);
/* One line: "crashed with SIGSEGV (signal 11) during register_builtins", ... */
FLD_TOOL_API void fld__probe_describe(const struct fld_probe_result *r, char *buf, size_t size);

/*
 * The plugin files discovery would consider, in its order (each directory of
 * the search path sorted by name, then VLLM_FL_PLUGIN_MODULES), each file
 * once, without loading anything. *search_path receives the ':'-joined
 * search path. Free both with fld__plugin_candidates_free(). FLD_ENOMEM.
 */
FLD_TOOL_API int fld__plugin_candidates(char ***paths, size_t *n, char **search_path);
FLD_TOOL_API void fld__plugin_candidates_free(char **paths, size_t n, char *search_path);

/*
 * The permission and owner checks the host applies before it maps a plugin
 * file (and its directory). false with the reason in why.
 */
FLD_TOOL_API bool fld__plugin_check_file(const char *path, struct stat *st, char *why, size_t size);

/*
 * One row of the library's device table (core/base/devices.h FLD_DEVICE_TABLE),
 * for the device names the tool and the Python extension print and accept.
 */
struct fld_tool_device {
    int type;          /* FLD_DEVICE_*: the row's DLPack code */
    const char *name;  /* "cuda", as fld_device_name() */
    const char *alias; /* another name fld_device_from_name() accepts ("nvidia"), or NULL */
    uint32_t mask;     /* FLD_DEVICE_MASK_*: 1u << the row's index */
    const char *codes; /* every DLPack code of the row: "2", "12 or 21" */
    const char *torch; /* PyTorch's device type of its tensors: "cuda", "npu" */
    /* the torch.version attribute set in a PyTorch built for it ("hip"), or NULL */
    const char *torch_build;
};

/*
 * The device table's row at index, in the table's order (the CPU first;
 * the order of the FLD_DEVICE_MASK_* bits), or NULL past the last row.
 * Constant data, MT safe; needs no fld_init().
 */
FLD_TOOL_API const struct fld_tool_device *fld__device_row(unsigned index);

/*
 * "; did you mean 'a'?", or "; did you mean 'a' or 'b'?" when two are
 * equally close, for name among the n candidates, or "" when none is close;
 * writes into buf and returns it.
 * Closeness is the optimal-string-alignment edit distance (insertions,
 * deletions, substitutions and swaps of neighbours each cost 1), ignoring
 * case, at most 1 + length/4 edits (3 at most). The library's messages
 * (unknown ops, impl ids, variables) and the tool's usage errors use it.
 * MT safe; needs no fld_init().
 */
FLD_TOOL_API const char *fld__did_you_mean(const char *name, const char *const *candidates,
                                           size_t n, char *buf, size_t size);

/*
 * One row of the library's dtype table (core/base/dtypes.h FLD_DTYPE_TABLE), for
 * the dtype names and mask bits the tool and the Python extension print and
 * accept.
 */
struct fld_tool_dtype {
    const char *name;      /* "bf16", as fld_dtype_name() */
    const char *long_name; /* "bfloat16" (PyTorch's torch.bfloat16) */
    uint8_t code, bits;    /* DLPack type code and width; element size bits / 8 */
    uint32_t mask;         /* FLD_DTYPE_MASK_*: 1u << the row's index */
};

/*
 * The dtype table's row at index, in the order of the FLD_DTYPE_MASK_* bits,
 * or NULL past the last row. Constant data, MT safe; needs no fld_init().
 */
FLD_TOOL_API const struct fld_tool_dtype *fld__dtype_row(unsigned index);

/*
 * One row of the library's policy-field table (core/policy/policy_table.h
 * FLD_POLICY_FIELDS), for the policy keys the Python package accepts and
 * reads back.
 */
struct fld_tool_policy_field {
    const char *key; /* fld_policy_set()'s key: "allow_vendors" */
    const char *env; /* its environment variable: "VLLM_FL_ALLOW_VENDORS" */
    const char
        *yaml; /* its key in a policy file and in fld_foreach_config_field(): "op_backends" */
    const char *word; /* its word in fld_policy_describe(): "allow" */
    const char *kind; /* "prefer", "flag", "switch", "names", "vendors", "orders" or "custom" */
    int partner;      /* the row of the field it excludes (white/blacklists), or -1 */
    bool upstream;    /* vllm-plugin-FL's policy files know the YAML key */
};

/*
 * The policy-field table's row at index, in the table's order (the order
 * of fld_foreach_config_field()'s fields), or NULL past the last row.
 * Constant data, MT safe; needs no fld_init().
 */
FLD_TOOL_API const struct fld_tool_policy_field *fld__policy_field_row(unsigned index);

/*
 * One row of the variable table (core/policy/variables.h FLD_VARIABLES): an
 * environment variable of fldispatch's own besides the policy fields'.
 */
struct fld_tool_variable {
    const char *name;    /* "VLLM_FL_MANIFEST" */
    const char *reader;  /* "LIBRARY", "CPU", "TEMPLATE", "TOOL", "PYTHON" or "BUILD" */
    const char *use;     /* "USER" or "TEST" */
    const char *compile; /* in vLLM's compile-cache key: "GRAPH", "WHEN_SET" or "NEVER" */
};

/*
 * The variable table's row at index, in the table's order, or NULL past the
 * last row. Constant data, MT safe; needs no fld_init().
 */
FLD_TOOL_API const struct fld_tool_variable *fld__variable_row(unsigned index);

/*
 * Copies src into dst (size bytes, always NUL-terminated when size > 0),
 * writing as an escape what could be misread:
 *   - C0 control characters (tab and newline included) and DEL: \xNN;
 *   - C1 control characters (U+0080..U+009F) and the bidirectional
 *     embedding, override and isolate characters (U+202A..U+202E,
 *     U+2066..U+2069): \uNNNN;
 *   - every byte that is not part of well-formed UTF-8 (stray continuation
 *     bytes, overlong forms, surrogates, code points past U+10FFFF, a
 *     sequence cut short): \xNN.
 * Everything else, printable ASCII and valid UTF-8 text, is copied as it is.
 * Output that does not fit is cut before the character or escape that does
 * not fit, never inside one. Returns dst. A dst of 4 bytes per byte of src,
 * plus 1, never cuts. MT safe; needs no fld_init(). The library's messages
 * and logs pass through it; the tool prints names, paths and configuration
 * values through it too.
 */
FLD_TOOL_API char *fld__escape(char *dst, size_t size, const char *src);

/*
 * A file written whole or not at all (core/base/atomic_file.c). open creates a
 * temporary file beside path (same directory; O_CREAT | O_EXCL with a
 * random name, so no planted link is followed, mode `mode`), its stream in
 * af->f. commit flushes it, fsyncs it and renames it over path: a reader
 * sees the old file or the new one, never a part, and a failed write (full
 * disk, file-size limit) removes the temporary file and leaves the old file
 * as it was. open refuses a path that is a symbolic link (ELOOP: the
 * link is not followed nor replaced), a directory (EISDIR) or anything
 * else that is not a regular file, a character device or a pipe (EINVAL).
 * A character device or a pipe that exists (/dev/null) is written in place,
 * never replaced. Each returns 0 or an errno value; commit frees af's
 * members either way. fld__atomic_file_strerror() words such a value for
 * a message.
 * MT safe for distinct af; needs no fld_init().
 */
typedef struct fld_atomic_file {
    FILE *f;
    char *path; /* the target */
    char *tmp;  /* the temporary file; NULL for a device or a pipe written in place */
} fld_atomic_file;
FLD_TOOL_API int fld__atomic_file_open(fld_atomic_file *af, const char *path, mode_t mode);
FLD_TOOL_API int fld__atomic_file_commit(fld_atomic_file *af);
FLD_TOOL_API const char *fld__atomic_file_strerror(int err);

/*
 * fld_explain() for a call of `rows` rows: where the effective policy's
 * manifest splits (op, device, dtype) into row buckets (`rows: 1-16` and
 * the like), the bucket holding rows decides the pin, and the resolution's
 * order_source names it ("manifest m.yaml:4 (rows 1-16)"). rows 0 is
 * fld_explain(). Same arguments and errors as fld_explain() otherwise
 * (name and out must not be NULL; the library initialised).
 */
FLD_TOOL_API int fld__explain_rows(const char *name, int device_type, DLDataType dtype,
                                   int64_t rows, fld_resolution **out);

/*
 * A counters file as VLLM_FL_STATS_FILE and fld_stats_write() write it
 * (core/observe/stats_file.c reads what core/observe/stats.c writes): `fldispatch stats`
 * merges several. read fills *out (zeroed first) or fails with
 * FLD_ECONFIG "path:line:column: message" (a key missing, unknown or
 * twice, a value of the wrong type or out of range), the reader's
 * "cannot open" messages, or FLD_ENOMEM; *out is then empty. free releases
 * what read filled (and zeroes it). Needs no fld_init().
 */
struct fld_stats_file_entry {
    char *op, *impl_id, *device, *dtype;
    uint64_t calls, fallbacks, failures, total_ns;
};
struct fld_stats_file {
    uint64_t pid;
    bool has_rank; /* false: the writer's rank variable was not a rank ("rank": null) */
    uint64_t rank;
    char mode[8]; /* "calls", "time" or "off" */
    size_t n;
    struct fld_stats_file_entry *entries;
};
FLD_TOOL_API int fld__stats_file_read(const char *path, struct fld_stats_file *out);
FLD_TOOL_API void fld__stats_file_free(struct fld_stats_file *f);

/*
 * Counters files merged (core/observe/stats_merge.c): `fldispatch stats`,
 * and the Python package's Prometheus collector. merge reads each of
 * paths[0..nfiles) with fld__stats_file_read() and sums their entries into
 * a row per (op, impl_id, device, dtype), and per rank as well with
 * by_rank; a file written with VLLM_FL_STATS=time adds its calls to
 * timed_calls and its time to total_ns, the others only their calls.
 * Rows come sorted by rank (by_rank), op, impl_id, device and dtype. Fails
 * with the reader's errors (FLD_ECONFIG "path:line:column: ...", "cannot
 * open"), FLD_ECONFIG when two files are one process's (the same pid and
 * rank: its calls would count twice), FLD_EINVAL when a sum passes 2^63-1
 * (so that every JSON reader takes the sums as integers) or FLD_ENOMEM;
 * *out is then empty. free releases what merge filled (and zeroes it).
 * Needs no fld_init().
 */
struct fld_stats_row {
    const struct fld_stats_file_entry *key; /* its names, from the first file that had it */
    int64_t rank;                           /* by_rank: the files' rank, -1 unknown; else -1 */
    uint64_t calls, fallbacks, failures, total_ns, timed_calls;
    unsigned char *from; /* [nfiles]: 1 where that file has the row */
};
struct fld_stats_merge {
    size_t nfiles;
    struct fld_stats_file *files; /* [nfiles], in the order of paths */
    bool by_rank;
    size_t n;
    struct fld_stats_row *rows;
};
FLD_TOOL_API int fld__stats_merge(const char *const *paths, size_t nfiles, bool by_rank,
                                  struct fld_stats_merge *out);
FLD_TOOL_API void fld__stats_merge_free(struct fld_stats_merge *m);
/* The distinct ranks of the files that have row r, ascending, comma-separated, "?" last for a
 * file whose rank was not a number, into buf (ending in "..." when it does not fit). */
FLD_TOOL_API const char *fld__stats_row_ranks(const struct fld_stats_merge *m,
                                              const struct fld_stats_row *r, char *buf,
                                              size_t size);
/*
 * The merged counters as Prometheus metric families, handed to a visitor:
 * family() once per family (its name, "counter" or "gauge", and its help
 * text), then sample() once per sample with its labels (names and values,
 * nlabels of them; values NULL with none) and its value, a count, or
 * nanoseconds for a family of seconds. The first status other than FLD_OK
 * that a callback returns ends the visit and is returned.
 */
struct fld_stats_visitor {
    void *ctx;
    int (*family)(void *ctx, const char *name, const char *type, const char *help);
    int (*sample)(void *ctx, const char *const *label_names, const char *const *label_values,
                  size_t nlabels, uint64_t value, bool nanoseconds);
};
FLD_TOOL_API int fld__stats_merge_visit(const struct fld_stats_merge *m,
                                        const struct fld_stats_visitor *v);
/*
 * The merged counters in Prometheus's text exposition format (version
 * 0.0.4), for a scraper: counters fldispatch_calls_total,
 * fldispatch_fallbacks_total and fldispatch_failures_total per row,
 * fldispatch_call_seconds_total and fldispatch_timed_calls_total for the
 * rows that timed calls, and the gauge fldispatch_stats_files; labels op,
 * impl_id, device, dtype, and rank ("unknown" where it was not a number)
 * with by_rank. FLD_OK, or FLD_EINVAL when out fails to take it.
 */
FLD_TOOL_API int fld__stats_merge_prometheus(const struct fld_stats_merge *m, FILE *out);
/*
 * VLLM_FL_STATS_FILE's pattern as a glob pattern that matches the file of
 * every process and rank: "%p" and "%r" become "*", "%%" a "%", and the
 * pattern's own "*", "?" and "[" are bracketed ("[*]", as Python's
 * glob.escape() does). FLD_OK; FLD_ENOTFOUND when the
 * variable is unset or empty; FLD_EINVAL when buf is too small.
 */
FLD_TOOL_API int fld__stats_file_glob(char *buf, size_t size);
/* VLLM_FL_STATS_INTERVAL in force, in seconds; 0 when the files are written at exit only. */
FLD_TOOL_API double fld__stats_interval(void);

/*
 * What the library's exit handler does, now: fld_stats_flush() unless
 * nothing was counted or traced, and no setting changed, since the last
 * flush wrote (then FLD_OK, nothing written). For the exit paths that
 * bypass that handler (a multiprocessing worker's os._exit(), a process
 * that a signal may end), so that each process writes its counters once.
 */
FLD_TOOL_API int fld__stats_flush_changed(void);

#endif
