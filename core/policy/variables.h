/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The variable table: every environment variable of fldispatch's own
 * (VLLM_FL_*, FLD_*, FLDISPATCH_*) that the library, its plugins, the tool,
 * the Python package and its vLLM plugin read, besides the policy fields,
 * whose variables are the env column of the policy-field table
 * (policy_table.h). The unknown-variable check (names.c) knows exactly
 * these and the policy's; python/tests/test_variables.py checks the table
 * against the sources that read variables (a name read and not listed
 * here, or listed and read nowhere, fails) and against the documentation
 * (docs/configuration.md lists every row, the user guide the library's).
 *
 * Columns of X(name, reader, use, compile):
 *   name    the variable
 *   reader  where it is read:
 *             LIBRARY   core/ (the C library)
 *             CPU       plugins/cpu/ (the CPU plugin)
 *             TEMPLATE  plugins/template/ (the example plugin)
 *             TOOL      tools/ (the fldispatch tool)
 *             PYTHON    python/fldispatch/ (the Python package)
 *             BUILD     python/setup.py (building the Python package)
 *   use     USER: a setting for users; TEST: for tests and debugging
 *   compile whether it enters vLLM's compile-cache key (python/fldispatch/vllm_compile.py):
 *             GRAPH     always: it may change what the vLLM plugin puts in a
 *                       compiled graph or what its IR provider accepts
 *             WHEN_SET  when set: not known to change a graph, keyed as any
 *                       VLLM_FL_* variable the table does not list
 *             NEVER     never: it only observes (counters, trace, IO dump, log
 *                       level) or is not a VLLM_FL_* variable
 *           (the policy fields' variables are always in the key)
 *
 * Variables of other systems that fldispatch also reads (RANK, LOCAL_RANK,
 * HOME, XDG_CACHE_HOME, ASCEND_HOME_PATH) and the benchmarks' own (bench/)
 * are not listed: the check only looks at VLLM_FL_* names.
 */
#ifndef FLD_CORE_VARIABLES_H
#define FLD_CORE_VARIABLES_H

/* clang-format off */
#define FLD_VARIABLES(X)                                        \
    X("VLLM_FL_CONFIG", LIBRARY, USER, GRAPH)                   \
    X("VLLM_FL_OP_CONFIG", LIBRARY, USER, GRAPH)                \
    X("VLLM_FL_MANIFEST", LIBRARY, USER, GRAPH)                 \
    X("VLLM_FL_PLATFORM", LIBRARY, USER, GRAPH)                 \
    X("VLLM_FL_LOG_LEVEL", LIBRARY, USER, NEVER)                \
    X("VLLM_FL_DISPATCH_DEBUG", LIBRARY, USER, NEVER)           \
    X("VLLM_FL_PLUGIN_DIR", LIBRARY, USER, GRAPH)               \
    X("VLLM_FL_PLUGIN_MODULES", LIBRARY, USER, GRAPH)           \
    X("VLLM_FL_PLUGIN_PROBE", LIBRARY, USER, GRAPH)             \
    X("VLLM_FL_PLUGIN_PROBE_TIMEOUT", LIBRARY, USER, WHEN_SET)  \
    X("VLLM_FL_SHUTDOWN_TIMEOUT", LIBRARY, USER, NEVER)         \
    X("VLLM_FL_STATS", LIBRARY, USER, NEVER)                    \
    X("VLLM_FL_STATS_FILE", LIBRARY, USER, NEVER)               \
    X("VLLM_FL_TRACE", LIBRARY, USER, NEVER)                    \
    X("VLLM_FL_STATS_INTERVAL", LIBRARY, USER, NEVER)           \
    X("FLD_PROBE_NO_EXEC", LIBRARY, TEST, NEVER)                \
    X("FLD_NO_DLCLOSE", LIBRARY, TEST, NEVER)                   \
    X("VLLM_FL_CPU_THREADS", CPU, USER, WHEN_SET)               \
    X("VLLM_FL_CPU_PARALLEL_MIN_KB", CPU, USER, WHEN_SET)       \
    X("VLLM_FL_CPU_STREAM_MIN_KB", CPU, USER, WHEN_SET)         \
    X("VLLM_FL_CPU_ACTIVATIONS", CPU, USER, GRAPH)              \
    X("VLLM_FL_CPU_LOOKUP", CPU, USER, WHEN_SET)                \
    X("VLLM_FL_CPU_ACT16", CPU, USER, WHEN_SET)                 \
    X("VLLM_FL_CPU_ISA", CPU, USER, GRAPH)                      \
    X("FLD_TEMPLATE_ENABLE", TEMPLATE, USER, NEVER)             \
    X("FLD_TUNE_TEST_CLOCK", TOOL, TEST, NEVER)                 \
    X("VLLM_FL_IO_DUMP", PYTHON, USER, NEVER)                   \
    X("VLLM_FL_IO_DUMP_OPS", PYTHON, USER, NEVER)               \
    X("VLLM_FL_IO_DUMP_MODULES", PYTHON, USER, NEVER)           \
    X("VLLM_FL_IO_DUMP_MAX_CALLS", PYTHON, USER, NEVER)         \
    X("VLLM_FL_IO_DUMP_STEP_RANGE", PYTHON, USER, NEVER)        \
    X("VLLM_FL_IO_DUMP_RANK", PYTHON, USER, NEVER)              \
    X("VLLM_FL_IO_DUMP_WITH_METAS", PYTHON, USER, NEVER)        \
    X("VLLM_FL_IO_DUMP_WITH_VALUES", PYTHON, USER, NEVER)       \
    X("VLLM_FL_OOT_FORCE", PYTHON, USER, GRAPH)                 \
    X("FLDISPATCH_TORCH_NATIVE", PYTHON, USER, NEVER)           \
    X("FLDISPATCH_VLLM_STARTED", PYTHON, USER, NEVER)           \
    X("FLDISPATCH_BUILD_GPU", BUILD, USER, NEVER)               \
    X("FLDISPATCH_BUILD_JOBS", BUILD, USER, NEVER)              \
    X("FLDISPATCH_SOURCE_DIR", BUILD, USER, NEVER)              \
    X("FLDISPATCH_TORCH_PYTHON", BUILD, USER, NEVER)

/*
 * Variables that vllm-plugin-FL reads and fldispatch does not: the check
 * names them as such, with what fldispatch does instead.
 * Columns of X(name, note).
 */
#define FLD_UPSTREAM_VARIABLES(X)                                                        \
    X("VLLM_FL_OP_FAST_PATH", "fldispatch always calls through its cached fast path")    \
    X("VLLM_FL_USE_FLAGGEMS_ATTN",                                                       \
      "fldispatch's attention_backend follows the policy (prefer, per-op orders)")       \
    X("VLLM_FL_FLAGOS_BLACKLIST_APPEND", "set VLLM_FL_FLAGOS_BLACKLIST here")            \
    X("VLLM_FL_DISPATCH_MODE", "fldispatch has one dispatch mode")                       \
    X("VLLM_FL_IO_DUMP_LAYERS", "the IO dump does not track vLLM's layer paths")         \
    X("VLLM_FL_IO_DUMP_WITH_TORCH_FUNCS", "the IO dump records dispatch-managed ops only") \
    X("VLLM_FL_IO_DUMP_WITH_PRINT", "the IO dump writes files, it does not print tensors") \
    X("VLLM_FL_IO_DUMP_BG_WORKERS", "the IO dump writes in the calling thread")
/* clang-format on */

#endif
