/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the libFuzzer targets of tests/fuzz/: a reader that turns the
 * fuzzer's bytes into values (running dry reads zeros, so every input is
 * complete), an in-memory file for parsers that take a path, and the
 * process setup every target wants (no plugins from the machine, quiet log).
 *
 * Header-only (static functions) so each target stays one file.
 */
#ifndef FLD_FUZZ_COMMON_H
#define FLD_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A property the library broke: print it and abort, so libFuzzer keeps the input. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: check failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n  fld_last_error: %s\n", fld_last_error());                         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

struct fuzz_reader {
    const uint8_t *p;
    size_t n;
};

static inline uint8_t fuzz_u8(struct fuzz_reader *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

static inline uint64_t fuzz_u64(struct fuzz_reader *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | fuzz_u8(r);
    return v;
}

static inline uint32_t fuzz_u32(struct fuzz_reader *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | fuzz_u8(r);
    return v;
}

/*
 * An anonymous regular file holding the input, reachable by a path
 * (/proc/self/fd/N) for the parsers that open a file themselves. Created
 * once; each input replaces its content.
 */
static int fuzz_memfd = -1;
static char fuzz_memfd_path[64];

static inline const char *fuzz_file_with(const uint8_t *data, size_t size)
{
    if (fuzz_memfd < 0) {
        fuzz_memfd = memfd_create("fld-fuzz", 0);
        if (fuzz_memfd < 0) {
            perror("fuzz: memfd_create");
            abort();
        }
        snprintf(fuzz_memfd_path, sizeof fuzz_memfd_path, "/proc/self/fd/%d", fuzz_memfd);
    }
    if (ftruncate(fuzz_memfd, 0) != 0 ||
        (size && pwrite(fuzz_memfd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz: writing the memfd");
        abort();
    }
    return fuzz_memfd_path;
}

/*
 * The environment every target runs in: an empty plugin directory (only the
 * library's reference kernels; nothing of the machine's install is loaded),
 * the cpu platform, errors only in the log (FUZZ_LOG_LEVEL to see more), and
 * no policy variables of the caller's shell.
 */
static char fuzz_plugin_dir[64];

static inline void fuzz_remove_plugin_dir(void)
{
    if (fuzz_plugin_dir[0])
        rmdir(fuzz_plugin_dir);
}

static inline void fuzz_setup_environment(void)
{
    static const char *const policy_vars[] = {
        "VLLM_FL_CONFIG",
        "VLLM_FL_OP_CONFIG",
        "VLLM_FL_PER_OP",
        "VLLM_FL_PREFER",
        "VLLM_FL_STRICT",
        "VLLM_FL_PREFER_ENABLED",
        "USE_FLAGGEMS",
        "VLLM_FL_ALLOW_VENDORS",
        "VLLM_FL_DENY_VENDORS",
        "VLLM_FL_FLAGOS_WHITELIST",
        "VLLM_FL_FLAGOS_BLACKLIST",
        "VLLM_FL_OOT_ENABLED",
        "VLLM_FL_OOT_WHITELIST",
        "VLLM_FL_OOT_BLACKLIST",
        "VLLM_FL_CUSTOM_OPS",
        "VLLM_FL_MANIFEST",
        "VLLM_FL_PLUGIN_MODULES",
        "VLLM_FL_PLUGIN_PROBE",
    };
    for (size_t i = 0; i < sizeof policy_vars / sizeof policy_vars[0]; i++)
        unsetenv(policy_vars[i]);
    snprintf(fuzz_plugin_dir, sizeof fuzz_plugin_dir, "/tmp/fld-fuzz-plugins-XXXXXX");
    if (!mkdtemp(fuzz_plugin_dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_remove_plugin_dir);
    setenv("VLLM_FL_PLUGIN_DIR", fuzz_plugin_dir, 1);
    /* Named, so detection never scans PCI: the same policy layers on every
     * machine (cpu.yaml is empty), and hwloc's PCI backend leaks inside
     * hwloc_topology_load(), which LeakSanitizer would report at exit. */
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_LOG_LEVEL", getenv("FUZZ_LOG_LEVEL") ? getenv("FUZZ_LOG_LEVEL") : "ERROR", 1);
}

#endif
