/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU plugins (plugins/cuda: fld-cuda.so; plugins/rocm: fld-rocm.so and
 * libfld-rocm-hip.so) and their shared glue (plugins/shared/gpu/gpu_plugin.c).
 *
 * Part 1, the real plugins from $FLD_BUILDDIR/lib/fldispatch/plugins, as
 * they behave on a machine without the device (CI): they load with status
 * UNAVAILABLE and a reason naming the cause, register their impls with the
 * right kinds, masks and dtypes, `fldispatch list` shows them unavailable,
 * a call with their device's tensors returns FLD_EUNAVAILABLE naming the
 * reason (nothing is dereferenced, so fake device pointers do), the device
 * hooks say the same, attention_backend falls back to reference.c, and
 * fld-rocm.so without a loadable HIP library next to it is unavailable, not
 * rejected. On a
 * machine where a plugin's device is present those checks are skipped with
 * a message; a plugin that was not built is skipped likewise.
 *
 * Part 2, the glue for real, through the fixture fld-fakecuda.so
 * (tests/gpuplug): the same gpu_plugin.c over the GPU emulator (tests/gpu),
 * serving CUDA tensors that are CPU memory. Each op, pinned to vendor.cuda
 * and to reference.cuda, matches the library's reference on the CPU;
 * supports() routes layouts the 128-bit kernels cannot take to
 * reference.cuda; the device hooks move data; the thread's stream reaches
 * the runtime; a tensor on another device is run there and the current
 * device is put back; a launch error is FLD_EIMPL naming the impl and op,
 * with the outputs untouched. The kernels' numerics are tested with the
 * emulator in tests/gpu; here a loose tolerance catches plumbing errors
 * (wrong stride, row or pointer), which are never small.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/cpu_tensor.h"
#include "../plugins/shared/gpu/gpu_api.h"
#include "gpuplug/fakecuda.h"
#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"
#include "util/tool.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Every catalog op that computes on tensors, by family (the GPU plugins serve them all). */
#define COMPUTE_GATED(name)       #name,
#define COMPUTE_ELEMENTWISE(name) #name,
#define COMPUTE_NORM(name)        #name,
#define COMPUTE_ROTARY(name)      #name,
#define COMPUTE_ROTARY_OUT(name)  #name,
#define COMPUTE_ATTENTION(name)
static const char *const compute_ops[] = {
#define FLD_CATALOG_OP(id, name, family, doc) COMPUTE_##family(name)
#include <fldispatch/catalog.def>
};
enum { N_COMPUTE_OPS = sizeof compute_ops / sizeof compute_ops[0] };

static const DLDataType dtypes[] = {FLD_DTYPE_F32, FLD_DTYPE_F16, FLD_DTYPE_BF16};

static char *path_in_build(const char *rel)
{
    const char *b = tt_build_dir();
    size_t n = strlen(b) + strlen(rel) + 2;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s", b, rel);
    return p;
}

static bool file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* A clean environment that loads only the plugins of dir. */
static void env_with_plugin_dir(const char *dir)
{
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
}

struct plugin_seen {
    const char *name;
    bool found;
    fld_plugin_info info;
    char reason[1024], detail[1024];
};

static int find_plugin(const fld_plugin_info *info, void *user)
{
    struct plugin_seen *s = user;
    if (strcmp(info->name, s->name) != 0)
        return 0;
    s->found = true;
    s->info = *info;
    snprintf(s->reason, sizeof s->reason, "%s", info->reason ? info->reason : "");
    snprintf(s->detail, sizeof s->detail, "%s", info->detail ? info->detail : "");
    return 1;
}

static struct plugin_seen plugin_status(const char *name)
{
    struct plugin_seen s = {.name = name};
    fld_foreach_plugin(find_plugin, &s);
    ck_assert_msg(s.found, "plugin '%s' not seen (search path %s)", name, fld_plugin_path());
    return s;
}

/* The real plugins' directory, or NULL (with a message) when plugin is not built. */
static char *real_plugins_or_skip(const char *plugin, const char *test)
{
    char *dir = path_in_build("lib/fldispatch/plugins");
    char file[64];
    snprintf(file, sizeof file, "/fld-%s.so", plugin);
    char *path = malloc(strlen(dir) + sizeof file);
    ck_assert_ptr_nonnull(path);
    strcpy(path, dir);
    strcat(path, file);
    bool built = file_exists(path);
    free(path);
    if (!built) {
        fprintf(stderr, "%s: SKIPPED: fld-%s.so was not built here (see make's output)\n", test,
                plugin);
        free(dir);
        return NULL;
    }
    return dir;
}

/* ---- device tensors that are never dereferenced -------------------------- */

struct fake_tensor {
    DLTensor t;
    int64_t shape[3];
};

static void fake_tensor(struct fake_tensor *f, int device_type, uintptr_t addr, DLDataType dt,
                        int ndim, const int64_t *shape)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < ndim; i++)
        f->shape[i] = shape[i];
    f->t.data = (void *)addr;
    f->t.device = (DLDevice){(DLDeviceType)device_type, 0};
    f->t.ndim = ndim;
    f->t.dtype = dt;
    f->t.shape = f->shape;
}

/* Calls op on device_type tensors at fake addresses; returns the status. */
static int call_on_fake_device(const char *op, int device_type, DLDataType dt)
{
    struct fake_tensor out, x, w, pos, q, cache;
    if (strcmp(op, FLD_OP_RMS_NORM) == 0 || strcmp(op, FLD_OP_GEMMA_RMS_NORM) == 0) {
        fake_tensor(&out, device_type, 0x10000000, dt, 2, (int64_t[]){4, 64});
        fake_tensor(&x, device_type, 0x20000000, dt, 2, (int64_t[]){4, 64});
        fake_tensor(&w, device_type, 0x30000000, dt, 1, (int64_t[]){64});
        const fld_rms_norm_args a = {&out.t, &x.t, &w.t, NULL, 1e-6f};
        return fld_call_by_name(op, &a);
    }
    if (strcmp(op, FLD_OP_ROTARY_EMBEDDING) == 0) {
        fake_tensor(&pos, device_type, 0x10000000, (DLDataType){kDLInt, 64, 1}, 1, (int64_t[]){4});
        fake_tensor(&q, device_type, 0x20000000, dt, 2, (int64_t[]){4, 2 * 64});
        fake_tensor(&cache, device_type, 0x30000000, FLD_DTYPE_F32, 2, (int64_t[]){16, 64});
        const fld_rotary_embedding_args a = {&pos.t, &q.t, NULL, 64, &cache.t, true};
        return fld_call_by_name(op, &a);
    }
    if (strcmp(op, FLD_OP_ROTARY_EMBEDDING_OUT) == 0) {
        struct fake_tensor q_out;
        fake_tensor(&pos, device_type, 0x10000000, (DLDataType){kDLInt, 64, 1}, 1, (int64_t[]){4});
        fake_tensor(&q, device_type, 0x20000000, dt, 2, (int64_t[]){4, 2 * 64});
        fake_tensor(&cache, device_type, 0x30000000, FLD_DTYPE_F32, 2, (int64_t[]){16, 64});
        fake_tensor(&q_out, device_type, 0x40000000, dt, 2, (int64_t[]){4, 2 * 64});
        const fld_rotary_embedding_out_args a = {&pos.t,   &q.t, NULL,     64,
                                                 &cache.t, true, &q_out.t, NULL};
        return fld_call_by_name(op, &a);
    }
    static const struct {
        const char *name, *family;
    } families[] = {
#define FLD_CATALOG_OP(id, name, family, doc) {#name, #family},
#include <fldispatch/catalog.def>
    };
    bool gated = false;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        gated |= strcmp(op, families[i].name) == 0 && strcmp(families[i].family, "GATED") == 0;
    fake_tensor(&out, device_type, 0x10000000, dt, 2, (int64_t[]){4, 64});
    fake_tensor(&x, device_type, 0x20000000, dt, 2, (int64_t[]){4, gated ? 128 : 64});
    const fld_activation_args a = {&out.t, &x.t};
    return fld_call_by_name(op, &a);
}

/* ---- impls as the registry lists them ------------------------------------ */

struct impl_seen {
    const char *impl_id;
    const char *op;
    bool found;
    fld_impl_info info;
    char vendor[32], kind[32], reason[1024];
};

static int find_impl(const fld_impl_info *info, void *user)
{
    struct impl_seen *s = user;
    if (strcmp(info->impl_id, s->impl_id) != 0 || strcmp(info->op, s->op) != 0)
        return 0;
    s->found = true;
    s->info = *info;
    snprintf(s->vendor, sizeof s->vendor, "%s", info->vendor ? info->vendor : "(null)");
    snprintf(s->kind, sizeof s->kind, "%s", info->kind);
    snprintf(s->reason, sizeof s->reason, "%s",
             info->unavailable_reason ? info->unavailable_reason : "");
    return 1;
}

static struct impl_seen impl_status(const char *op, const char *impl_id)
{
    struct impl_seen s = {.impl_id = impl_id, .op = op};
    fld_foreach_impl(find_impl, &s);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Part 1: the real plugins without their device                           */
/* ------------------------------------------------------------------------ */

struct gpu_case {
    const char *plugin;       /* "cuda" */
    int device_type;          /* FLD_DEVICE_CUDA */
    uint32_t mask;            /* FLD_DEVICE_MASK_CUDA */
    const char *reason_words; /* one of them must be in the reason */
    const char *attn[3];      /* standard, MLA, sparse MLA */
};

static const struct gpu_case gpu_cases[] = {
    {"cuda",
     FLD_DEVICE_CUDA,
     FLD_DEVICE_MASK_CUDA,
     "no CUDA driver|CUDA driver older|no CUDA device|CUDA runtime:",
     {"FLASH_ATTN", "FLASHMLA", "FLASHMLA_SPARSE"}},
    {"rocm",
     FLD_DEVICE_ROCM,
     FLD_DEVICE_MASK_ROCM,
     "HIP runtime",
     {"ROCM_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_MLA_SPARSE"}},
};

/* Whether text holds one of the '|'-separated words. */
static bool has_one_of(const char *text, const char *words)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", words);
    for (char *save = NULL, *w = strtok_r(buf, "|", &save); w; w = strtok_r(NULL, "|", &save))
        if (strstr(text, w))
            return true;
    return false;
}

/*
 * The plugin's status in the real plugin directory; false (with a message)
 * when the test cannot run here: not built, or its device is present.
 */
static bool real_plugin_unavailable(const struct gpu_case *c, const char *test,
                                    struct plugin_seen *seen)
{
    char *dir = real_plugins_or_skip(c->plugin, test);
    if (!dir)
        return false;
    env_with_plugin_dir(dir);
    free(dir);
    ck_assert_int_eq(fld_init(), FLD_OK);
    *seen = plugin_status(c->plugin);
    if (seen->info.status == FLD_PLUGIN_LOADED) {
        fprintf(stderr, "%s: SKIPPED for %s: its device is present here (%s)\n", test, c->plugin,
                seen->detail);
        return false;
    }
    return true;
}

START_TEST(test_loads_unavailable_with_reason)
{
    const struct gpu_case *c = &gpu_cases[_i];
    struct plugin_seen s;
    if (!real_plugin_unavailable(c, "test_loads_unavailable_with_reason", &s))
        return;
    ck_assert_msg(s.info.status == FLD_PLUGIN_UNAVAILABLE,
                  "%s: status %d, expected UNAVAILABLE; reason '%s'", c->plugin, s.info.status,
                  s.reason);
    ck_assert_msg(has_one_of(s.reason, c->reason_words), "%s: reason '%s' names none of '%s'",
                  c->plugin, s.reason, c->reason_words);
    ck_assert_msg(s.info.in_tree, "%s: not marked in-tree", c->plugin);
    ck_assert_uint_eq(s.info.abi_major, FLD_PLUGIN_ABI_MAJOR);
    ck_assert_uint_eq(s.info.abi_minor, FLD_PLUGIN_ABI_MINOR);
    ck_assert_msg(s.info.hook_devices == c->mask, "%s: hook_devices 0x%x, expected 0x%x", c->plugin,
                  s.info.hook_devices, c->mask);
    /* 7 ops x (vendor + reference) + attention_backend. */
    ck_assert_uint_eq(s.info.n_impls, 2 * N_COMPUTE_OPS + 1);
    /* The detail line names the runtime it carries; devices are probed later. */
    ck_assert_msg(strstr(s.detail, " runtime ") && strstr(s.detail, "probed on first use"),
                  "%s: detail '%s'", c->plugin, s.detail);
}
END_TEST

START_TEST(test_cuda_reason_names_the_driver)
{
    struct plugin_seen s;
    if (!real_plugin_unavailable(&gpu_cases[0], "test_cuda_reason_names_the_driver", &s))
        return;
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver) {
        dlclose(driver);
        ck_assert_msg(strstr(s.reason, "no CUDA driver") == NULL,
                      "libcuda.so.1 loads here, yet the reason is '%s'", s.reason);
        return;
    }
    ck_assert_msg(strstr(s.reason, "no CUDA driver: ") == s.reason &&
                      strstr(s.reason, "libcuda.so.1") != NULL,
                  "reason '%s', expected 'no CUDA driver: libcuda.so.1: ...'", s.reason);
    ck_assert_msg(strstr(s.detail, "CUDA runtime ") == s.detail &&
                      strstr(s.detail, ", needs NVIDIA driver >= ") &&
                      strstr(s.detail, "code for sm_"),
                  "detail '%s'", s.detail);
    /* The reason names what the runtime reports: no driver, its own version. */
    ck_assert_msg(strstr(s.reason, " (driver none, runtime 1"), "reason '%s'", s.reason);
}
END_TEST

/* The static CUDA runtime: nothing named libcudart in the process. */
static int no_cudart(struct dl_phdr_info *info, size_t size, void *user)
{
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libcudart")) {
        snprintf(user, 512, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

START_TEST(test_cuda_links_runtime_statically)
{
    char *dir = real_plugins_or_skip("cuda", "test_cuda_links_runtime_statically");
    if (!dir)
        return;
    env_with_plugin_dir(dir);
    free(dir);
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct plugin_seen s = plugin_status("cuda");
    ck_assert_msg(s.info.status != FLD_PLUGIN_REJECTED, "fld-cuda.so rejected: %s", s.reason);
    char found[512] = "";
    dl_iterate_phdr(no_cudart, found);
    ck_assert_msg(!found[0], "a shared CUDA runtime was loaded: %s", found);
}
END_TEST

START_TEST(test_impls_registered)
{
    const struct gpu_case *c = &gpu_cases[_i];
    char *dir = real_plugins_or_skip(c->plugin, "test_impls_registered");
    if (!dir)
        return;
    env_with_plugin_dir(dir);
    free(dir);
    ck_assert_int_eq(fld_init(), FLD_OK);
    char vid[32], rid[32];
    snprintf(vid, sizeof vid, "vendor.%s", c->plugin);
    snprintf(rid, sizeof rid, "reference.%s", c->plugin);
    for (int i = 0; i < N_COMPUTE_OPS; i++) {
        struct impl_seen v = impl_status(compute_ops[i], vid);
        ck_assert_msg(v.found, "%s: %s not registered", compute_ops[i], vid);
        ck_assert_str_eq(v.kind, "vendor");
        ck_assert_str_eq(v.vendor, c->plugin);
        ck_assert_int_eq(v.info.priority, FLD_PRIORITY_VENDOR);
        ck_assert_uint_eq(v.info.devices, c->mask);
        ck_assert_uint_eq(v.info.dtypes, FLD_DTYPE_MASK_ALL);
        ck_assert_str_eq(v.info.plugin, c->plugin);
        ck_assert(v.info.in_tree);

        struct impl_seen r = impl_status(compute_ops[i], rid);
        ck_assert_msg(r.found, "%s: %s not registered", compute_ops[i], rid);
        ck_assert_str_eq(r.kind, "reference");
        ck_assert_int_eq(r.info.priority, FLD_PRIORITY_REFERENCE);
        ck_assert_uint_eq(r.info.devices, c->mask);
        ck_assert_uint_eq(r.info.dtypes, FLD_DTYPE_MASK_ALL);
        ck_assert_msg(v.info.available == r.info.available, "%s: vendor and reference differ",
                      compute_ops[i]);
        if (!v.info.available)
            ck_assert_msg(has_one_of(v.reason, c->reason_words) && strcmp(v.reason, r.reason) == 0,
                          "%s: reasons '%s' / '%s'", compute_ops[i], v.reason, r.reason);
    }
    struct impl_seen a = impl_status(FLD_OP_ATTENTION_BACKEND, vid);
    ck_assert_msg(a.found, "attention_backend: %s not registered", vid);
    ck_assert_str_eq(a.kind, "vendor");
    ck_assert_uint_eq(a.info.devices, c->mask);
    ck_assert(!impl_status(FLD_OP_ATTENTION_BACKEND, rid).found);
}
END_TEST

START_TEST(test_list_shows_unavailable)
{
    const struct gpu_case *c = &gpu_cases[_i];
    struct plugin_seen s;
    if (!real_plugin_unavailable(c, "test_list_shows_unavailable", &s))
        return;
    char *dir = path_in_build("lib/fldispatch/plugins");
    char env[4096];
    snprintf(env, sizeof env, "VLLM_FL_PLUGIN_DIR=%s", dir);
    free(dir);
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(env), ARGS("list", "--verbose"));
    assert_status(r, 0);
    char so[32], vid[32];
    snprintf(so, sizeof so, "fld-%s.so", c->plugin);
    snprintf(vid, sizeof vid, "vendor.%s", c->plugin);
    ck_assert_msg(line_with(r.out, c->plugin, "unavailable", so),
                  "no unavailable plugin line:\n" CLIP, r.out);
    ck_assert_msg(line_with(r.out, "reason: ", s.reason), "no reason line '%s':\n" CLIP, s.reason,
                  r.out);
    ck_assert_msg(line_with(r.out, "rms_norm", vid, "unavailable: "), "no impl line:\n" CLIP,
                  r.out);
    ck_assert_msg(line_with(r.out, "detail: ", "probed on first use"), "no detail line:\n" CLIP,
                  r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(test_calls_unavailable_name_reason)
{
    const struct gpu_case *c = &gpu_cases[_i];
    struct plugin_seen s;
    if (!real_plugin_unavailable(c, "test_calls_unavailable_name_reason", &s))
        return;
    for (int i = 0; i < N_COMPUTE_OPS; i++) {
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            int rc = call_on_fake_device(compute_ops[i], c->device_type, dtypes[d]);
            ck_assert_msg(rc == FLD_EUNAVAILABLE, "%s on %s: status %d (%s), expected UNAVAILABLE",
                          compute_ops[i], c->plugin, rc, fld_last_error());
            ck_assert_msg(strstr(fld_last_error(), s.reason) != NULL,
                          "%s on %s: message '%s' lacks the reason '%s'", compute_ops[i], c->plugin,
                          fld_last_error(), s.reason);
        }
    }
}
END_TEST

static int record_nothing(void *user)
{
    (void)user;
    return FLD_OK;
}
#define NULL_RECORD record_nothing

START_TEST(test_device_memory_unavailable)
{
    const struct gpu_case *c = &gpu_cases[_i];
    struct plugin_seen s;
    if (!real_plugin_unavailable(c, "test_device_memory_unavailable", &s))
        return;
    const char *provider = "untouched";
    ck_assert_int_eq(fld_device_provider(c->device_type, &provider), FLD_EUNAVAILABLE);
    ck_assert_ptr_null(provider);
    ck_assert_msg(strstr(fld_last_error(), s.reason) && strstr(fld_last_error(), c->plugin),
                  "provider message '%s' lacks '%s' or the plugin name", fld_last_error(),
                  s.reason);
    void *p = (void *)0x1;
    DLDevice dev = {(DLDeviceType)c->device_type, 0};
    ck_assert_int_eq(fld_device_alloc(dev, 256, &p), FLD_EUNAVAILABLE);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(fld_last_error(), s.reason), "alloc message '%s' lacks '%s'",
                  fld_last_error(), s.reason);
    char buf[16] = {0};
    ck_assert_int_eq(fld_device_copy(dev, buf, (void *)0x1000, sizeof buf, FLD_COPY_DEVICE_TO_HOST),
                     FLD_EUNAVAILABLE);
    ck_assert_int_eq(fld_device_synchronize(dev), FLD_EUNAVAILABLE);
    fld_device_graph *g = (fld_device_graph *)0x1;
    ck_assert_int_eq(fld_device_graph_capture(dev, NULL_RECORD, NULL, &g), FLD_EUNAVAILABLE);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(fld_last_error(), "fld_device_graph_capture: ") &&
                      strstr(fld_last_error(), s.reason),
                  "capture message '%s' lacks '%s'", fld_last_error(), s.reason);
}
END_TEST

START_TEST(test_attention_falls_back_to_reference)
{
    const struct gpu_case *c = &gpu_cases[_i];
    struct plugin_seen s;
    if (!real_plugin_unavailable(c, "test_attention_falls_back_to_reference", &s))
        return;
    const char *name = NULL, *id = NULL;
    ck_assert_int_eq(fld_attention_backend(c->device_type, false, false, &name), FLD_OK);
    ck_assert_str_eq(name, c->attn[0]);
    ck_assert_int_eq(fld_attention_backend(c->device_type, true, false, &name), FLD_OK);
    ck_assert_str_eq(name, c->attn[1]);
    ck_assert_int_eq(fld_attention_backend(c->device_type, true, true, &name), FLD_OK);
    ck_assert_str_eq(name, c->attn[2]);
    ck_assert_int_eq(fld_resolve(FLD_OP_ATTENTION_BACKEND, c->device_type, FLD_DTYPE_ANY, &id),
                     FLD_OK);
    ck_assert_str_eq(id, "reference.c");
}
END_TEST

/*
 * fld-rocm.so copied into a directory of its own: _i 0 alone, 1 with a copy
 * of its HIP library that others may write, 2 with a good copy (it finds
 * the library next to itself, wherever that is).
 */
START_TEST(test_rocm_hip_library_next_to_it)
{
    char *dir = real_plugins_or_skip("rocm", "test_rocm_hip_library_next_to_it");
    if (!dir)
        return;
    char src[4096], dst[4096], hip_src[4096], hip_dst[4096];
    snprintf(src, sizeof src, "%s/fld-rocm.so", dir);
    snprintf(hip_src, sizeof hip_src, "%s/libfld-rocm-hip.so", dir);
    free(dir);
    const char *tmp = tt_make_tmpdir("gpuplug"); /* removed at exit */
    snprintf(dst, sizeof dst, "%s/fld-rocm.so", tmp);
    snprintf(hip_dst, sizeof hip_dst, "%s/libfld-rocm-hip.so", tmp);
    tt_copy_file(src, dst, 0755);
    if (_i > 0)
        tt_copy_file(hip_src, hip_dst, _i == 1 ? 0757 : 0755);

    env_with_plugin_dir(tmp);
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct plugin_seen s = plugin_status("rocm");
    unlink(dst);
    unlink(hip_dst);
    rmdir(tmp);
    if (_i == 2) {
        ck_assert_msg(s.info.status != FLD_PLUGIN_REJECTED && !strstr(s.reason, "not loadable"),
                      "status %d, reason '%s'", s.info.status, s.reason);
        return;
    }
    ck_assert_msg(s.info.status == FLD_PLUGIN_UNAVAILABLE, "status %d, reason '%s'", s.info.status,
                  s.reason);
    ck_assert_msg(
        strstr(s.reason, "HIP runtime not loadable: ") == s.reason &&
            strstr(s.reason, "libfld-rocm-hip.so") &&
            strstr(s.reason, _i == 0 ? "cannot open shared object file" : "writable by others"),
        "reason '%s'", s.reason);
    ck_assert_uint_eq(s.info.n_impls, 2 * N_COMPUTE_OPS + 1);
    ck_assert_uint_eq(s.info.hook_devices, FLD_DEVICE_MASK_ROCM);
    ck_assert_int_eq(call_on_fake_device(FLD_OP_RMS_NORM, FLD_DEVICE_ROCM, FLD_DTYPE_F16),
                     FLD_EUNAVAILABLE);
    ck_assert_msg(strstr(fld_last_error(), s.reason), "message '%s'", fld_last_error());
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc((DLDevice){kDLROCM, 0}, 64, &p), FLD_EUNAVAILABLE);
    const char *name = NULL;
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_ROCM, true, false, &name), FLD_OK);
    ck_assert_str_eq(name, "ROCM_AITER_MLA");
}
END_TEST

/* Whether a loaded object's name holds part; with needed, whether its DT_NEEDED entries do. */
struct mapped_query {
    const char *name_part, *needed_part;
    bool found, needs;
};

static int find_mapped(struct dl_phdr_info *info, size_t size, void *user)
{
    (void)size;
    struct mapped_query *q = user;
    if (!info->dlpi_name || !strstr(info->dlpi_name, q->name_part))
        return 0;
    q->found = true;
    if (!q->needed_part)
        return 1;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        const char *strtab = NULL;
        for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_STRTAB)
                strtab = (const char *)d->d_un.d_ptr; /* relocated by the loader on glibc */
        for (const ElfW(Dyn) *d = dyn; strtab && d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_NEEDED && strstr(strtab + d->d_un.d_val, q->needed_part))
                q->needs = true;
    }
    return 1;
}

static struct mapped_query mapped(const char *name_part, const char *needed_part)
{
    struct mapped_query q = {name_part, needed_part, false, false};
    dl_iterate_phdr(find_mapped, &q);
    return q;
}

/*
 * fld_init() does not open the HIP runtime (10-20 ms where there is no AMD
 * GPU); the first availability question does, and the kernels library binds
 * to whichever libamdhip64 was found instead of naming one.
 */
START_TEST(test_rocm_runtime_opened_on_first_use)
{
    char *dir = real_plugins_or_skip("rocm", "test_rocm_runtime_opened_on_first_use");
    if (!dir)
        return;
    env_with_plugin_dir(dir);
    free(dir);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_msg(!mapped("libamdhip64", NULL).found, "fld_init() opened the HIP runtime");
    ck_assert_msg(!mapped("libfld-rocm-hip", NULL).found, "fld_init() opened the HIP kernels");
    struct plugin_seen s = plugin_status("rocm"); /* asks availability */
    ck_assert_msg(strstr(s.detail, "HIP runtime opened on first use"), "detail '%s'", s.detail);
    if (strstr(s.reason, "none of libamdhip64")) {
        fprintf(stderr, "test_rocm_runtime_opened_on_first_use: no HIP runtime here: %s\n",
                s.reason);
        ck_assert_int_eq(s.info.status, FLD_PLUGIN_UNAVAILABLE);
        return;
    }
    ck_assert_msg(mapped("libamdhip64.so", NULL).found, "no HIP runtime opened; reason '%s'",
                  s.reason);
    struct mapped_query k = mapped("libfld-rocm-hip.so", "libamdhip64");
    ck_assert_msg(k.found, "kernels library not opened; reason '%s'", s.reason);
    ck_assert_msg(!k.needs, "libfld-rocm-hip.so names a libamdhip64 in DT_NEEDED");
    if (s.info.status == FLD_PLUGIN_UNAVAILABLE)
        ck_assert_msg(strstr(s.reason, "HIP runtime libamdhip64.so") == s.reason &&
                          strstr(s.reason, "(driver ") && strstr(s.reason, "runtime "),
                      "reason '%s'", s.reason);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Part 2: the glue over the emulator (fld-fakecuda.so)                    */
/* ------------------------------------------------------------------------ */

static struct {
    void *handle;
    fakecuda_record_get_fn record;
    fakecuda_current_device_fn current;
    fakecuda_set_current_device_fn set_current;
    fakecuda_fail_next_launch_fn fail_next;
} fake;

/*
 * Loads only the fixture (plus the library's reference.c) and finds its
 * recording functions; false (with a message) when it was not built.
 */
static bool fake_setup(const char *test)
{
    char *dir = path_in_build("tests/gpuplug");
    char *so = path_in_build("tests/gpuplug/fld-fakecuda.so");
    if (!file_exists(so)) {
        fprintf(stderr, "%s: SKIPPED: %s was not built (no GPU emulator sources)\n", test, so);
        free(dir);
        free(so);
        return false;
    }
    env_with_plugin_dir(dir);
    setenv("VLLM_FL_STRICT", "1", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct plugin_seen s = plugin_status("fakecuda");
    ck_assert_msg(s.info.status != FLD_PLUGIN_REJECTED, "fakecuda rejected: %s", s.reason);
    fake.handle = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(fake.handle != NULL, "fakecuda not loaded: %s", dlerror());
    fake.record = (fakecuda_record_get_fn)dlsym(fake.handle, "fakecuda_record_get");
    fake.current = (fakecuda_current_device_fn)dlsym(fake.handle, "fakecuda_current_device");
    fake.set_current =
        (fakecuda_set_current_device_fn)dlsym(fake.handle, "fakecuda_set_current_device");
    fake.fail_next = (fakecuda_fail_next_launch_fn)dlsym(fake.handle, "fakecuda_fail_next_launch");
    ck_assert(fake.record && fake.current && fake.set_current && fake.fail_next);
    free(dir);
    free(so);
    return true;
}

static struct fakecuda_record fake_record(void)
{
    struct fakecuda_record r;
    fake.record(&r);
    return r;
}

/* Sets order for every compute op, with reference.c after it for the CPU
 * runs that give the expected values (the CUDA impls do not serve the CPU,
 * nor reference.c CUDA). */
static void pin(const char *order)
{
    char spec[1024];
    int len = 0;
    for (int i = 0; i < N_COMPUTE_OPS; i++)
        len += snprintf(spec + len, sizeof spec - (size_t)len, "%s=%s|impl:reference.c;",
                        compute_ops[i], order);
    ck_assert_int_eq(fld_policy_set("per_op", spec), FLD_OK);
}

static void on_cuda(tt_tensor *t, int device_id)
{
    t->t.device = (DLDevice){kDLCUDA, device_id};
}

/* got against want, elementwise within vLLM's layernorm tolerance (1e-2). */
static void assert_close(const char *what, const tt_tensor *got, const tt_tensor *want)
{
    int64_t n = tt_numel(want);
    ck_assert_int_eq(tt_numel(got), n);
    for (int64_t i = 0; i < n; i++) {
        double g = tt_get(got, i), w = tt_get(want, i);
        ck_assert_msg(fabs(g - w) <= 1e-2 + 1e-2 * fabs(w), "%s: element %lld is %g, want %g", what,
                      (long long)i, g, w);
    }
    ck_assert_msg(tt_padding_intact(got), "%s: wrote outside its view", what);
}

/* One op in one dtype on fake CUDA (device_id) against reference.c on the CPU. */
struct op_case {
    const char *op;
    int64_t rows, width; /* activation: out width d; norm: H */
    int64_t x_stride;    /* 0: contiguous */
    bool residual;
    bool f32_operands; /* norms with a 16-bit x: float32 weight and residual (GemmaRMSNorm's) */
};

static int run_act_case(const struct op_case *c, DLDataType dt, int device_id, char *what,
                        size_t what_size)
{
    int64_t d = c->width;
    tt_tensor *x = c->x_stride ? tt_new_strided(dt, 2, (int64_t[]){c->rows, 2 * d},
                                                (int64_t[]){c->x_stride, 1})
                               : tt_new(dt, 2, (int64_t[]){c->rows, 2 * d});
    tt_fill_normal(x, 7, 0.0, 1.5);
    tt_tensor *want = tt_new(dt, 2, (int64_t[]){c->rows, d});
    tt_tensor *got = tt_new(dt, 2, (int64_t[]){c->rows, d});
    const fld_activation_args ref = {&want->t, &x->t};
    ck_assert_int_eq(fld_call_by_name(c->op, &ref), FLD_OK);
    on_cuda(x, device_id);
    on_cuda(got, device_id);
    const fld_activation_args a = {&got->t, &x->t};
    int rc = fld_call_by_name(c->op, &a);
    snprintf(what, what_size, "%s %s [%lld, %lld]", c->op, fld_dtype_name(dt), (long long)c->rows,
             (long long)d);
    if (rc == FLD_OK)
        assert_close(what, got, want);
    tt_free(x);
    tt_free(want);
    tt_free(got);
    return rc;
}

static int run_norm_case(const struct op_case *c, DLDataType dt, int device_id, char *what,
                         size_t what_size)
{
    int64_t h = c->width;
    tt_tensor *x = c->x_stride
                       ? tt_new_strided(dt, 2, (int64_t[]){c->rows, h}, (int64_t[]){c->x_stride, 1})
                       : tt_new(dt, 2, (int64_t[]){c->rows, h});
    tt_fill_normal(x, 11, 0.0, 1.0);
    const DLDataType odt = c->f32_operands ? FLD_DTYPE_F32 : dt;
    tt_tensor *w = tt_new(odt, 1, (int64_t[]){h});
    tt_fill_normal(w, 12, 1.0, 0.1);
    tt_tensor *res = c->residual ? tt_new(odt, 2, (int64_t[]){c->rows, h}) : NULL;
    if (res)
        tt_fill_normal(res, 13, 0.0, 1.0);
    tt_tensor *res_want = res ? tt_clone(res) : NULL;
    tt_tensor *want = tt_new(dt, 2, (int64_t[]){c->rows, h});
    tt_tensor *got = tt_new(dt, 2, (int64_t[]){c->rows, h});
    const fld_rms_norm_args ref = {&want->t, &x->t, &w->t, res_want ? &res_want->t : NULL, 1e-6f};
    ck_assert_int_eq(fld_call_by_name(c->op, &ref), FLD_OK);
    on_cuda(x, device_id);
    on_cuda(w, device_id);
    on_cuda(got, device_id);
    if (res)
        on_cuda(res, device_id);
    const fld_rms_norm_args a = {&got->t, &x->t, &w->t, res ? &res->t : NULL, 1e-6f};
    int rc = fld_call_by_name(c->op, &a);
    snprintf(what, what_size, "%s %s [%lld, %lld]%s%s", c->op, fld_dtype_name(dt),
             (long long)c->rows, (long long)h, res ? " +residual" : "",
             c->f32_operands ? " (float32 weight/residual)" : "");
    if (rc == FLD_OK) {
        assert_close(what, got, want);
        if (res)
            assert_close("residual", res, res_want);
    }
    tt_free(x);
    tt_free(w);
    tt_free(want);
    tt_free(got);
    if (res) {
        tt_free(res);
        tt_free(res_want);
    }
    return rc;
}

/* neox over a full-width rotation with a float32 cache; gptj over half of a
 * padded [T, H, D+8] layout with a cache in the query's dtype. */
static int run_rotary_case(bool neox, DLDataType dt, int device_id, char *what, size_t what_size)
{
    const int64_t tokens = 6, qh = 4, kh = 2, head = 64, max_pos = 32;
    const int64_t rot = neox ? head : head / 2;
    DLDataType cache_dt = neox ? FLD_DTYPE_F32 : dt;
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){tokens});
    for (int64_t t = 0; t < tokens; t++)
        tt_set(pos, t, (double)((t * 7 + 3) % max_pos));
    tt_tensor *cache = tt_new(cache_dt, 2, (int64_t[]){max_pos, rot});
    tt_fill_normal(cache, 21, 0.0, 0.7);
    tt_tensor *q, *k;
    if (neox) {
        q = tt_new(dt, 2, (int64_t[]){tokens, qh * head});
        k = tt_new(dt, 2, (int64_t[]){tokens, kh * head});
    } else {
        q = tt_new_strided(dt, 3, (int64_t[]){tokens, qh, head},
                           (int64_t[]){qh * (head + 8), head + 8, 1});
        k = tt_new_strided(dt, 3, (int64_t[]){tokens, kh, head},
                           (int64_t[]){kh * (head + 8), head + 8, 1});
    }
    tt_fill_normal(q, 22, 0.0, 1.0);
    tt_fill_normal(k, 23, 0.0, 1.0);
    tt_tensor *qw = tt_clone(q), *kw = tt_clone(k);
    const fld_rotary_embedding_args ref = {&pos->t, &qw->t, &kw->t, head, &cache->t, neox};
    ck_assert_int_eq(fld_call_by_name(FLD_OP_ROTARY_EMBEDDING, &ref), FLD_OK);
    on_cuda(pos, device_id);
    on_cuda(cache, device_id);
    on_cuda(q, device_id);
    on_cuda(k, device_id);
    const fld_rotary_embedding_args a = {&pos->t, &q->t, &k->t, head, &cache->t, neox};
    int rc = fld_call_by_name(FLD_OP_ROTARY_EMBEDDING, &a);
    snprintf(what, what_size, "rotary_embedding %s %s", neox ? "neox" : "gptj padded",
             fld_dtype_name(dt));
    if (rc == FLD_OK) {
        assert_close(what, q, qw);
        assert_close(what, k, kw);
    }
    tt_free(pos);
    tt_free(cache);
    tt_free(q);
    tt_free(k);
    tt_free(qw);
    tt_free(kw);
    return rc;
}

static int run_case(const struct op_case *c, DLDataType dt, int device_id, char *what,
                    size_t what_size)
{
    if (strcmp(c->op, FLD_OP_ROTARY_EMBEDDING) == 0)
        return run_rotary_case(c->rows != 0, dt, device_id, what, what_size);
    if (strstr(c->op, "norm"))
        return run_norm_case(c, dt, device_id, what, what_size);
    return run_act_case(c, dt, device_id, what, what_size);
}

/* Layouts vendor.cuda takes: 16-byte aligned rows in every dtype. */
static const struct op_case aligned_cases[] = {
    {FLD_OP_SILU_AND_MUL, 7, 64, 0, false, false},
    {FLD_OP_MUL_AND_SILU, 3, 128, 0, false, false},
    {FLD_OP_GELU_AND_MUL, 5, 64, 0, false, false},
    {FLD_OP_GELU_TANH_AND_MUL, 2, 256, 0, false, false},
    {FLD_OP_RMS_NORM, 5, 256, 0, false, false},
    {FLD_OP_RMS_NORM, 3, 64, 0, true, false},
    {FLD_OP_RMS_NORM, 4, 128, 384, true, false}, /* strided x, rows 16-byte aligned */
    {FLD_OP_GEMMA_RMS_NORM, 3, 256, 0, true, false},
    {FLD_OP_ROTARY_EMBEDDING, 1, 0, 0, false, false}, /* neox */
    {FLD_OP_ROTARY_EMBEDDING, 0, 0, 0, false, false}, /* gptj, padded heads */
    {FLD_OP_GEMMA_RMS_NORM, 3, 256, 0, true, true},
    {FLD_OP_RMS_NORM, 5, 256, 0, false, true},
};
enum { N_ALIGNED = sizeof aligned_cases / sizeof aligned_cases[0] };

/* Layouts it declines: odd widths and strides (vLLM's H 769, d 13). */
static const struct op_case unaligned_cases[] = {
    {FLD_OP_SILU_AND_MUL, 7, 13, 0, false, false},
    {FLD_OP_GELU_AND_MUL, 3, 64, 129 * 2 + 1, false, false},
    {FLD_OP_RMS_NORM, 3, 769, 0, true, false},
    {FLD_OP_GEMMA_RMS_NORM, 2, 64, 67, false, false},
    {FLD_OP_RMS_NORM, 3, 769, 0, true, true},
};
enum { N_UNALIGNED = sizeof unaligned_cases / sizeof unaligned_cases[0] };

START_TEST(test_fake_ops_match_reference)
{
    /* _i: 0 pinned to vendor.cuda, 1 pinned to reference.cuda. */
    if (!fake_setup("test_fake_ops_match_reference"))
        return;
    pin(_i == 0 ? "impl:vendor.cuda" : "impl:reference.cuda");
    const int variant = _i == 0 ? FLD_GPU_VECTOR : FLD_GPU_REFERENCE;
    int launches = 0;
    for (int c = 0; c < N_ALIGNED; c++) {
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            char what[128];
            int rc = run_case(&aligned_cases[c], dtypes[d], 0, what, sizeof what);
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", what, rc, fld_last_error());
            struct fakecuda_record r = fake_record();
            ck_assert_msg(r.variant == variant, "%s: ran variant %d, expected %d", what, r.variant,
                          variant);
            ck_assert_int_eq(r.kernels, ++launches);
        }
    }
    if (_i == 1) {
        /* reference.cuda takes any layout. */
        for (int c = 0; c < N_UNALIGNED; c++) {
            char what[128];
            int rc = run_case(&unaligned_cases[c], FLD_DTYPE_BF16, 0, what, sizeof what);
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", what, rc, fld_last_error());
            ck_assert_int_eq(fake_record().variant, FLD_GPU_REFERENCE);
        }
    }
}
END_TEST

START_TEST(test_fake_supports_routes_to_reference)
{
    if (!fake_setup("test_fake_supports_routes_to_reference"))
        return;
    pin("vendor|impl:reference.cuda");
    for (int c = 0; c < N_UNALIGNED; c++) {
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            char what[128];
            int rc = run_case(&unaligned_cases[c], dtypes[d], 0, what, sizeof what);
            ck_assert_msg(rc == FLD_OK, "%s: status %d: %s", what, rc, fld_last_error());
            ck_assert_msg(fake_record().variant == FLD_GPU_REFERENCE,
                          "%s: not routed to reference.cuda", what);
        }
    }
    /* An aligned call under the same order stays on vendor.cuda. */
    char what[128];
    ck_assert_int_eq(run_case(&aligned_cases[0], FLD_DTYPE_F16, 0, what, sizeof what), FLD_OK);
    ck_assert_int_eq(fake_record().variant, FLD_GPU_VECTOR);

    /* Pinned to vendor.cuda alone, strictly, a declined call has nothing to run. */
    pin("impl:vendor.cuda");
    int rc = run_case(&unaligned_cases[0], FLD_DTYPE_F32, 0, what, sizeof what);
    ck_assert_msg(rc != FLD_OK, "%s: vendor.cuda ran a layout it declines", what);
}
END_TEST

START_TEST(test_fake_stream_reaches_runtime)
{
    if (!fake_setup("test_fake_stream_reaches_runtime"))
        return;
    pin("impl:vendor.cuda");
    char what[128];
    /* No stream set: the per-thread default stream, not the legacy NULL one. */
    ck_assert_int_eq(run_case(&aligned_cases[4], FLD_DTYPE_F32, 0, what, sizeof what), FLD_OK);
    ck_assert_ptr_eq(fake_record().stream, FAKECUDA_DEFAULT_STREAM);
    void *stream = (void *)(uintptr_t)0x5eed0;
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, stream), FLD_OK);
    ck_assert_int_eq(run_case(&aligned_cases[4], FLD_DTYPE_F32, 0, what, sizeof what), FLD_OK);
    ck_assert_ptr_eq(fake_record().stream, stream);
    ck_assert_int_eq(run_case(&aligned_cases[8], FLD_DTYPE_BF16, 0, what, sizeof what), FLD_OK);
    ck_assert_ptr_eq(fake_record().stream, stream);
    /* cudaStreamLegacy (0x1) is a stream like any other: passed through. */
    void *legacy = (void *)(uintptr_t)0x1;
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, legacy), FLD_OK);
    ck_assert_int_eq(run_case(&aligned_cases[0], FLD_DTYPE_F16, 0, what, sizeof what), FLD_OK);
    ck_assert_ptr_eq(fake_record().stream, legacy);
    /* Another device type's stream is not the CUDA one; NULL resets to the default. */
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, NULL), FLD_OK);
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_ROCM, stream), FLD_OK);
    ck_assert_int_eq(run_case(&aligned_cases[0], FLD_DTYPE_F32, 0, what, sizeof what), FLD_OK);
    ck_assert_ptr_eq(fake_record().stream, FAKECUDA_DEFAULT_STREAM);
    /* The hooks use the same stream. */
    ck_assert_int_eq(fld_device_synchronize((DLDevice){kDLCUDA, 0}), FLD_OK);
    ck_assert_ptr_eq(fake_record().stream, FAKECUDA_DEFAULT_STREAM);
}
END_TEST

START_TEST(test_fake_device_switching)
{
    if (!fake_setup("test_fake_device_switching"))
        return;
    pin("impl:vendor.cuda");
    char what[128];
    /* A thread that never chose a device has no current context. A call on
     * device 1 runs there and leaves the thread as it was: no context made
     * current, none created on device 0. */
    ck_assert_int_eq(fake.current(), -1);
    ck_assert_uint_eq(fake_record().contexts, 0);
    ck_assert_int_eq(run_case(&aligned_cases[5], FLD_DTYPE_F16, 1, what, sizeof what), FLD_OK);
    struct fakecuda_record r = fake_record();
    ck_assert_int_eq(r.device, 1);
    ck_assert_int_eq(fake.current(), -1);
    ck_assert_uint_eq(r.contexts, 1u << 1);
    ck_assert_int_eq(r.pushes, 1);
    ck_assert_int_eq(r.pops, 1);

    /* The caller's context is on device 0: a device-0 call changes nothing. */
    fake.set_current(0);
    int pushes = fake_record().pushes;
    ck_assert_int_eq(run_case(&aligned_cases[5], FLD_DTYPE_F16, 0, what, sizeof what), FLD_OK);
    ck_assert_int_eq(fake_record().pushes, pushes);
    ck_assert_int_eq(fake_record().device, 0);
    /* ... a device-1 call runs on 1, then device 0 is current again. */
    ck_assert_int_eq(run_case(&aligned_cases[5], FLD_DTYPE_F16, 1, what, sizeof what), FLD_OK);
    r = fake_record();
    ck_assert_int_eq(r.device, 1);
    ck_assert_int_eq(r.pushes, pushes + 1);
    ck_assert_int_eq(r.pops, r.pushes);
    ck_assert_int_eq(fake.current(), 0);

    /* The caller's current device is 1: a device-0 tensor runs on 0, then 1 again. */
    fake.set_current(1);
    ck_assert_int_eq(run_case(&aligned_cases[0], FLD_DTYPE_BF16, 0, what, sizeof what), FLD_OK);
    ck_assert_int_eq(fake_record().device, 0);
    ck_assert_int_eq(fake.current(), 1);
    ck_assert_int_eq(run_case(&aligned_cases[8], FLD_DTYPE_BF16, 1, what, sizeof what), FLD_OK);
    ck_assert_int_eq(fake_record().pushes, pushes + 2);

    /* A device the runtime does not have: the switch fails, naming it. */
    fake.set_current(0);
    int rc = run_case(&aligned_cases[4], FLD_DTYPE_F32, 5, what, sizeof what);
    ck_assert_int_eq(rc, FLD_EIMPL);
    ck_assert_msg(strstr(fld_last_error(), "vendor.cuda: rms_norm: ") == fld_last_error() &&
                      strstr(fld_last_error(), "device 5"),
                  "message '%s'", fld_last_error());
    ck_assert_int_eq(fake.current(), 0);
    ck_assert_int_eq(fake_record().pops, fake_record().pushes);
}
END_TEST

/* The device hooks on a thread without a context leave it without one too. */
struct hook_thread {
    int current_after;
    unsigned contexts;
    int rc;
};

static void *hooks_on_device_1(void *p)
{
    struct hook_thread *h = p;
    void *mem = NULL;
    h->rc = fld_device_alloc((DLDevice){kDLCUDA, 1}, 256, &mem);
    if (h->rc == FLD_OK)
        h->rc = fld_device_free((DLDevice){kDLCUDA, 1}, mem);
    h->current_after = fake.current();
    h->contexts = fake_record().contexts;
    return NULL;
}

START_TEST(test_fake_new_thread_no_context_on_device_0)
{
    if (!fake_setup("test_fake_new_thread_no_context_on_device_0"))
        return;
    struct hook_thread h = {0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, hooks_on_device_1, &h), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(h.rc == FLD_OK, "hooks: %d", h.rc);
    ck_assert_int_eq(h.current_after, -1);
    ck_assert_uint_eq(h.contexts, 1u << 1);
}
END_TEST

START_TEST(test_fake_launch_error_leaves_outputs)
{
    if (!fake_setup("test_fake_launch_error_leaves_outputs"))
        return;
    pin("impl:vendor.cuda");
    const int64_t rows = 4, h = 64;
    tt_tensor *x = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){rows, h});
    tt_fill_normal(x, 1, 0.0, 1.0);
    tt_tensor *res = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){rows, h});
    tt_fill_normal(res, 2, 0.0, 1.0);
    tt_tensor *res0 = tt_clone(res);
    tt_tensor *out = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){rows, h});
    on_cuda(x, 1);
    on_cuda(res, 1);
    on_cuda(out, 1);
    int launches = fake_record().kernels;
    fake.fail_next(9); /* FLD_EMU_ERR_LAUNCH_CONFIG */
    int rc = fld_rms_norm(&out->t, &x->t, NULL, &res->t, 1e-6f);
    ck_assert_int_eq(rc, FLD_EIMPL);
    const char *msg = fld_last_error();
    ck_assert_msg(strstr(msg, "vendor.cuda: rms_norm: ") == msg && strlen(msg) > 23, "message '%s'",
                  msg);
    ck_assert_int_eq(fake_record().kernels, launches);
    ck_assert_int_eq(fake.current(), -1);
    for (int64_t i = 0; i < rows * h; i++) {
        ck_assert(tt_get(out, i) == 0.0);
        ck_assert(tt_get(res, i) == tt_get(res0, i));
    }
    /* The next call runs. */
    ck_assert_int_eq(fld_rms_norm(&out->t, &x->t, NULL, &res->t, 1e-6f), FLD_OK);
    ck_assert_int_eq(fake_record().kernels, launches + 1);
    tt_free(x);
    tt_free(res);
    tt_free(res0);
    tt_free(out);
}
END_TEST

START_TEST(test_fake_device_hooks)
{
    if (!fake_setup("test_fake_device_hooks"))
        return;
    const char *provider = NULL;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_CUDA, &provider), FLD_OK);
    ck_assert_str_eq(provider, "fakecuda");
    struct plugin_seen s = plugin_status("fakecuda");
    ck_assert_uint_eq(s.info.hook_devices, FLD_DEVICE_MASK_CUDA);

    void *stream = (void *)(uintptr_t)0xc0ffee0;
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, stream), FLD_OK);
    DLDevice dev = {kDLCUDA, 1};
    enum { N = 1000 };
    unsigned char host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (unsigned char)(i * 37 + 5);
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(fld_device_alloc(dev, N, &a), FLD_OK);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(fake_record().device, 1);
    ck_assert_int_eq(fake.current(), -1);
    ck_assert_int_eq(fld_device_alloc(dev, N, &b), FLD_OK);

    ck_assert_int_eq(fld_device_copy(dev, a, host, N, FLD_COPY_HOST_TO_DEVICE), FLD_OK);
    struct fakecuda_record r = fake_record();
    ck_assert_int_eq(r.memcpy_kind, 0);
    ck_assert_ptr_eq(r.stream, stream);
    ck_assert_int_eq(r.device, 1);
    ck_assert_int_eq(fld_device_copy(dev, b, a, N, FLD_COPY_DEVICE_TO_DEVICE), FLD_OK);
    ck_assert_int_eq(fake_record().memcpy_kind, 2);
    int syncs = fake_record().synchronizes;
    ck_assert_int_eq(fld_device_synchronize(dev), FLD_OK);
    r = fake_record();
    ck_assert_int_eq(r.synchronizes, syncs + 1);
    ck_assert_ptr_eq(r.stream, stream);
    memset(back, 0, sizeof back);
    ck_assert_int_eq(fld_device_copy(dev, back, b, N, FLD_COPY_DEVICE_TO_HOST), FLD_OK);
    ck_assert_int_eq(fake_record().memcpy_kind, 1);
    ck_assert(memcmp(host, back, N) == 0);
    ck_assert_int_eq(fld_device_free(dev, a), FLD_OK);
    ck_assert_int_eq(fld_device_free(dev, b), FLD_OK);
    ck_assert_int_eq(fld_device_free(dev, NULL), FLD_OK);
    ck_assert_int_eq(fake.current(), -1);

    /* A device the runtime does not have: an error naming it, no pointer. */
    void *p = (void *)0x1;
    int rc = fld_device_alloc((DLDevice){kDLCUDA, 7}, 64, &p);
    ck_assert_int_ne(rc, FLD_OK);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(fld_last_error(), "cuda") && strstr(fld_last_error(), "device 7"),
                  "message '%s'", fld_last_error());
}
END_TEST

/* What a graph records: `calls` silu_and_mul calls of out from x, on CUDA. */
struct graph_work {
    tt_tensor *out, *x;
    int calls;
    bool sync_inside; /* a synchronize while capturing, which the runtime refuses */
    int fail_with;    /* the record callback's own failure after its calls; FLD_OK none */
    void *stream_seen;
};

static int record_work(void *user)
{
    struct graph_work *w = user;
    w->stream_seen = fld_get_stream(FLD_DEVICE_CUDA);
    const fld_activation_args a = {&w->out->t, &w->x->t};
    for (int i = 0; i < w->calls; i++) {
        int rc = fld_call_by_name("silu_and_mul", &a);
        if (rc != FLD_OK)
            return rc;
    }
    if (w->sync_inside) {
        int rc = fld_device_synchronize((DLDevice){kDLCUDA, 0});
        if (rc != FLD_OK)
            return rc;
    }
    if (w->fail_with != FLD_OK)
        fld_set_error("record_work: told to fail");
    return w->fail_with;
}

static bool all_zero(const tt_tensor *t)
{
    for (int64_t i = 0; i < tt_numel(t); i++)
        if (tt_get(t, i) != 0.0)
            return false;
    return true;
}

/*
 * Work captured through the library runs at replay, not before; the thread's
 * stream is the capture stream meanwhile and the caller's afterwards; a
 * replay gives the direct call's result; the timings are the device's.
 */
START_TEST(test_fake_graph_capture_and_replay)
{
    if (!fake_setup("test_fake_graph_capture_and_replay"))
        return;
    pin("impl:vendor.cuda");
    const int64_t rows = 3, d = 256;
    tt_tensor *x = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){rows, 2 * d});
    tt_fill_normal(x, 21, 0.0, 1.5);
    tt_tensor *want = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){rows, d});
    tt_tensor *out = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){rows, d});
    on_cuda(x, 0);
    on_cuda(want, 0);
    on_cuda(out, 0);
    const fld_activation_args direct = {&want->t, &x->t};
    ck_assert_int_eq(fld_call_by_name("silu_and_mul", &direct), FLD_OK);
    ck_assert(!all_zero(want));

    void *mine = (void *)(uintptr_t)0x5eed0;
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, mine), FLD_OK);
    const DLDevice dev = {kDLCUDA, 0};
    struct graph_work w = {.out = out, .x = x, .calls = 3};
    int kernels = fake_record().kernels;
    fld_device_graph *g = NULL;
    ck_assert_int_eq(fld_device_graph_capture(dev, record_work, &w, &g), FLD_OK);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_ne(w.stream_seen, mine);
    ck_assert_ptr_nonnull(w.stream_seen);
    ck_assert_ptr_eq(fld_get_stream(FLD_DEVICE_CUDA), mine);
    ck_assert_int_eq(fake_record().kernels, kernels + 3); /* launched into the capture */
    ck_assert_msg(all_zero(out), "captured work ran before the replay");
    ck_assert_int_eq(fake_record().captures, 1);

    double ns[5] = {-1, -1, -1, -1, -1};
    ck_assert_int_eq(fld_device_graph_replay(g, 5, ns), FLD_OK);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(isfinite(ns[i]) && ns[i] >= 0, "replay %d timed %g ns", i, ns[i]);
    ck_assert_int_eq(fake_record().replays, 5);
    for (int64_t i = 0; i < rows * d; i++)
        ck_assert_msg(tt_get(out, i) == tt_get(want, i), "element %lld: %g, want %g",
                      (long long)i, tt_get(out, i), tt_get(want, i));
    /* The graph keeps the pointers it was recorded with: a new input shows at the next replay. */
    tt_fill_normal(x, 22, 0.0, 1.5);
    ck_assert_int_eq(fld_call_by_name("silu_and_mul", &direct), FLD_OK);
    ck_assert_int_eq(fld_device_graph_replay(g, 1, ns), FLD_OK);
    for (int64_t i = 0; i < rows * d; i++)
        ck_assert(tt_get(out, i) == tt_get(want, i));

    ck_assert_int_eq(fld_device_graph_replay(g, 0, ns), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "replays 0 is outside 1..1024"), "%s",
                  fld_last_error());
    ck_assert_int_eq(fld_device_graph_replay(g, FLD_DEVICE_GRAPH_MAX_REPLAYS + 1, ns),
                     FLD_EINVAL);
    ck_assert_int_eq(fld_device_graph_replay(g, 1, NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_device_graph_replay(NULL, 1, ns), FLD_EINVAL);
    ck_assert_int_eq(fld_device_graph_free(g), FLD_OK);
    ck_assert_int_eq(fld_device_graph_free(NULL), FLD_OK);
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, NULL), FLD_OK);
    tt_free(x);
    tt_free(want);
    tt_free(out);
}
END_TEST

/* A capture that fails keeps nothing, says why, and gives the thread its stream back. */
START_TEST(test_fake_graph_capture_failures)
{
    if (!fake_setup("test_fake_graph_capture_failures"))
        return;
    pin("impl:vendor.cuda");
    const int64_t rows = 2, d = 64;
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){rows, 2 * d});
    tt_fill_normal(x, 23, 0.0, 1.0);
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){rows, d});
    on_cuda(x, 0);
    on_cuda(out, 0);
    const DLDevice dev = {kDLCUDA, 0};
    fld_device_graph *g = (fld_device_graph *)0x1;

    /* The record callback's own error, with its message. */
    struct graph_work w = {.out = out, .x = x, .calls = 1, .fail_with = FLD_EIMPL};
    ck_assert_int_eq(fld_device_graph_capture(dev, record_work, &w, &g), FLD_EIMPL);
    ck_assert_ptr_null(g);
    ck_assert_str_eq(fld_last_error(), "record_work: told to fail");
    ck_assert_ptr_null(fld_get_stream(FLD_DEVICE_CUDA));

    /* A synchronize while capturing: refused by the runtime, named by the glue. */
    w = (struct graph_work){.out = out, .x = x, .calls = 1, .sync_inside = true};
    g = (fld_device_graph *)0x1;
    ck_assert_int_eq(fld_device_graph_capture(dev, record_work, &w, &g), FLD_EIMPL);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(fld_last_error(), "fld_device_synchronize: plugin 'fakecuda'") &&
                      strstr(fld_last_error(), "capturing"),
                  "message '%s'", fld_last_error());
    ck_assert_ptr_null(fld_get_stream(FLD_DEVICE_CUDA));
    ck_assert(all_zero(out));

    /* Arguments, and the CPU, which has no graphs. */
    ck_assert_int_eq(fld_device_graph_capture(dev, NULL, NULL, &g), FLD_EINVAL);
    ck_assert_int_eq(fld_device_graph_capture(dev, record_nothing, NULL, NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_device_graph_capture((DLDevice){kDLCUDA, -1}, record_nothing, NULL, &g),
                     FLD_EINVAL);
    ck_assert_int_eq(fld_device_graph_capture((DLDevice){kDLCPU, 0}, record_nothing, NULL, &g),
                     FLD_EUNSUPPORTED);
    ck_assert_msg(strstr(fld_last_error(), "the cpu has no graphs"), "%s", fld_last_error());
    /* A device the runtime does not have. */
    ck_assert_int_ne(fld_device_graph_capture((DLDevice){kDLCUDA, 7}, record_nothing, NULL, &g),
                     FLD_OK);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(fld_last_error(), "graph capture") && strstr(fld_last_error(), "device 7"),
                  "message '%s'", fld_last_error());
    tt_free(x);
    tt_free(out);
}
END_TEST

/* A runtime without graphs: FLD_EUNSUPPORTED saying so. */
START_TEST(test_fake_graph_runtime_without_graphs)
{
    setenv("FAKECUDA_NO_GRAPHS", "1", 1);
    if (!fake_setup("test_fake_graph_runtime_without_graphs"))
        return;
    fld_device_graph *g = (fld_device_graph *)0x1;
    ck_assert_int_eq(fld_device_graph_capture((DLDevice){kDLCUDA, 0}, record_nothing, NULL, &g),
                     FLD_EUNSUPPORTED);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(fld_last_error(), "has no graphs"), "%s", fld_last_error());
    unsetenv("FAKECUDA_NO_GRAPHS");
}
END_TEST

START_TEST(test_fake_detail_and_attention)
{
    if (!fake_setup("test_fake_detail_and_attention"))
        return;
    struct plugin_seen s = plugin_status("fakecuda");
    ck_assert_int_eq(s.info.status, FLD_PLUGIN_LOADED);
    ck_assert_msg(strstr(s.detail, "probed on first use"), "detail '%s'", s.detail);
    const char *id = NULL, *name = NULL;
    ck_assert_int_eq(fld_resolve(FLD_OP_ATTENTION_BACKEND, FLD_DEVICE_CUDA, FLD_DTYPE_ANY, &id),
                     FLD_OK);
    ck_assert_str_eq(id, "vendor.cuda");
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_CUDA, false, false, &name), FLD_OK);
    ck_assert_str_eq(name, "FLASH_ATTN");
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_CUDA, true, false, &name), FLD_OK);
    ck_assert_str_eq(name, "FLASHMLA");
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_CUDA, true, true, &name), FLD_OK);
    ck_assert_str_eq(name, "FLASHMLA_SPARSE");
    /* CPU is not the plugin's: reference.c answers there. */
    ck_assert_int_eq(fld_resolve(FLD_OP_ATTENTION_BACKEND, FLD_DEVICE_CPU, FLD_DTYPE_ANY, &id),
                     FLD_OK);
    ck_assert_str_eq(id, "reference.c");
}
END_TEST

/* Loading must not initialise the driver: a process that forks after
 * fld_init() (vLLM's workers) would inherit it. The first listing or call
 * probes, once. */
START_TEST(test_fake_not_probed_at_load)
{
    char *so = path_in_build("tests/gpuplug/fld-fakecuda.so");
    if (!file_exists(so)) {
        fprintf(stderr, "test_fake_not_probed_at_load: SKIPPED: %s was not built\n", so);
        free(so);
        return;
    }
    char *dir = path_in_build("tests/gpuplug");
    env_with_plugin_dir(dir);
    /* Platform detection runs too (no PCI accelerator here, so it looks at
     * the plugins): it must not probe either. */
    unsetenv("VLLM_FL_PLATFORM");
    ck_assert_int_eq(fld_init(), FLD_OK);
    void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "fakecuda not loaded: %s", dlerror());
    fakecuda_record_get_fn get = (fakecuda_record_get_fn)dlsym(h, "fakecuda_record_get");
    ck_assert_ptr_nonnull(get);
    struct fakecuda_record r;
    get(&r);
    ck_assert_int_eq(r.device_counts, 0);
    /* The fake device's memory is CPU memory. */
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 32});
    x->t.device = out->t.device = (DLDevice){kDLCUDA, 0};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(fld_silu_and_mul(&out->t, &x->t), FLD_OK);
    tt_free(x);
    tt_free(out);
    get(&r);
    ck_assert_int_eq(r.device_counts, 1);
    dlclose(h);
    fld_shutdown();
    free(dir);
    free(so);
}
END_TEST

START_TEST(test_fake_no_device)
{
    /* _i: 0 no device, 1 device_count fails. */
    setenv(_i == 0 ? "FAKECUDA_DEVICES" : "FAKECUDA_COUNT_ERROR", _i == 0 ? "0" : "101", 1);
    if (!fake_setup("test_fake_no_device"))
        return;
    struct plugin_seen s = plugin_status("fakecuda");
    ck_assert_int_eq(s.info.status, FLD_PLUGIN_UNAVAILABLE);
    if (_i == 0)
        ck_assert_msg(strncmp(s.reason, "no ", 3) == 0 && strstr(s.reason, " device"),
                      "reason '%s'", s.reason);
    else
        ck_assert_msg(strstr(s.reason, " runtime: ") && strlen(strstr(s.reason, ": ")) > 2,
                      "reason '%s'", s.reason);
    int rc = call_on_fake_device(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CUDA, FLD_DTYPE_F32);
    ck_assert_int_eq(rc, FLD_EUNAVAILABLE);
    ck_assert_msg(strstr(fld_last_error(), s.reason), "message '%s'", fld_last_error());
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc((DLDevice){kDLCUDA, 0}, 64, &p), FLD_EUNAVAILABLE);
    ck_assert_msg(strstr(fld_last_error(), s.reason), "message '%s'", fld_last_error());
    ck_assert_int_eq(fake_record().kernels, 0);
}
END_TEST

/* CUDA's binary compatibility, as fld__gpu_arch_runs() applies it. */
START_TEST(test_arch_rule)
{
    const char *built = "sm_80 sm_90 compute_90";
    static const struct {
        int arch;
        bool runs;
    } cases[] = {
        {70, false},             /* V100 */
        {75, false},             /* T4 */
        {80, true},              /* A100: sm_80 */
        {86, true},              /* A10, RTX 30: sm_80 machine code runs on 8.x */
        {87, true},  {89, true}, /* L4, L40 */
        {90, true},              /* H100 */
        {100, true},             /* B200: compute_90 PTX */
        {120, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(fld__gpu_arch_runs(built, cases[i].arch) == cases[i].runs, "sm_%d: %d",
                      cases[i].arch, !cases[i].runs);
    /* Without PTX nothing runs past the machine code's major version. */
    ck_assert(!fld__gpu_arch_runs("sm_80 sm_90", 100));
    ck_assert(fld__gpu_arch_runs("sm_80 sm_90", 90));
    ck_assert(!fld__gpu_arch_runs("sm_90", 89));
    ck_assert(fld__gpu_arch_runs("sm_75 sm_80 compute_80", 75));
    ck_assert(fld__gpu_arch_runs("compute_80", 89));
    ck_assert(!fld__gpu_arch_runs("compute_80", 75));
    /* Architecture-specific code runs on that one architecture alone. */
    ck_assert(fld__gpu_arch_runs("sm_90a", 90));
    ck_assert(!fld__gpu_arch_runs("sm_100a compute_100a", 103));
    ck_assert(fld__gpu_arch_runs("sm_100f", 103));
    /* Malformed or empty lists run nothing. */
    ck_assert(!fld__gpu_arch_runs("", 90));
    ck_assert(!fld__gpu_arch_runs(NULL, 90));
    ck_assert(!fld__gpu_arch_runs("sm_ gfx90a sm_9 compute_", 90));
    ck_assert(!fld__gpu_arch_runs("sm_90x", 90));
}
END_TEST

/* One fake device of compute capability _i's arch: available or not, by the rule. */
static const struct {
    const char *arch;
    bool runs;
} fake_archs[] = {{"70", false}, {"75", false}, {"80", true},
                  {"89", true},  {"90", true},  {"100", true}};

START_TEST(test_fake_arch_availability)
{
    setenv("FAKECUDA_DEVICES", "1", 1);
    setenv("FAKECUDA_ARCHS", fake_archs[_i].arch, 1);
    if (!fake_setup("test_fake_arch_availability"))
        return;
    struct plugin_seen s = plugin_status("fakecuda");
    ck_assert_msg(strstr(s.detail, "code for " FAKECUDA_BUILT), "detail '%s'", s.detail);
    if (fake_archs[_i].runs) {
        ck_assert_msg(s.info.status == FLD_PLUGIN_LOADED, "sm_%s: status %d, reason '%s'",
                      fake_archs[_i].arch, s.info.status, s.reason);
        return;
    }
    ck_assert_msg(s.info.status == FLD_PLUGIN_UNAVAILABLE, "sm_%s: status %d", fake_archs[_i].arch,
                  s.info.status);
    char sm[16];
    snprintf(sm, sizeof sm, "is sm_%s", fake_archs[_i].arch);
    ck_assert_msg(strstr(s.reason, "no emulator device can run this build: ") == s.reason &&
                      strstr(s.reason, "device 0 (Emulated GPU 0)") && strstr(s.reason, sm) &&
                      strstr(s.reason, "code for " FAKECUDA_BUILT) &&
                      strstr(s.reason, "CUDA_ARCHS"),
                  "reason '%s'", s.reason);
    int rc = call_on_fake_device(FLD_OP_RMS_NORM, FLD_DEVICE_CUDA, FLD_DTYPE_BF16);
    ck_assert_int_eq(rc, FLD_EUNAVAILABLE);
    ck_assert_msg(strstr(fld_last_error(), s.reason), "message '%s'", fld_last_error());
    ck_assert_int_eq(fake_record().kernels, 0);
}
END_TEST

/* A V100 beside an H100: the plugin serves the H100 and refuses the V100 by name. */
START_TEST(test_fake_arch_mixed_devices)
{
    setenv("FAKECUDA_ARCHS", "70,90", 1);
    if (!fake_setup("test_fake_arch_mixed_devices"))
        return;
    ck_assert_int_eq(plugin_status("fakecuda").info.status, FLD_PLUGIN_LOADED);
    pin("impl:vendor.cuda");
    char what[128];
    ck_assert_int_eq(run_case(&aligned_cases[4], FLD_DTYPE_F32, 1, what, sizeof what), FLD_OK);
    int kernels = fake_record().kernels;

    const int64_t rows = 3, h = 64;
    tt_tensor *x = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){rows, h});
    tt_fill_normal(x, 3, 0.0, 1.0);
    tt_tensor *res = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){rows, h});
    tt_fill_normal(res, 4, 0.0, 1.0);
    tt_tensor *res0 = tt_clone(res);
    tt_tensor *out = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){rows, h});
    on_cuda(x, 0);
    on_cuda(res, 0);
    on_cuda(out, 0);
    int rc = fld_rms_norm(&out->t, &x->t, NULL, &res->t, 1e-6f);
    ck_assert_int_eq(rc, FLD_EUNAVAILABLE);
    const char *msg = fld_last_error();
    ck_assert_msg(strstr(msg, "vendor.cuda: rms_norm: emulator device 0 (Emulated GPU 0) is sm_70; "
                              "the plugin has code for " FAKECUDA_BUILT) == msg,
                  "message '%s'", msg);
    ck_assert_int_eq(fake_record().kernels, kernels);
    for (int64_t i = 0; i < rows * h; i++) {
        ck_assert(tt_get(out, i) == 0.0);
        ck_assert(tt_get(res, i) == tt_get(res0, i));
    }
    tt_free(x);
    tt_free(res);
    tt_free(res0);
    tt_free(out);
}
END_TEST

/* A failed probe names the driver version the runtime reports. */
START_TEST(test_fake_reason_names_versions)
{
    setenv("FAKECUDA_COUNT_ERROR", "35", 1);
    setenv("FAKECUDA_DRIVER", "12020", 1);
    if (!fake_setup("test_fake_reason_names_versions"))
        return;
    struct plugin_seen s = plugin_status("fakecuda");
    ck_assert_int_eq(s.info.status, FLD_PLUGIN_UNAVAILABLE);
    ck_assert_msg(strstr(s.reason, "emulator runtime: ") == s.reason &&
                      strstr(s.reason, " (driver 12020)"),
                  "reason '%s'", s.reason);
}
END_TEST

/* make check-gpu's program says it skipped, and succeeds, where there is no CUDA device. */
START_TEST(test_check_gpu_skips_without_device)
{
    const char *src = tt_src_dir();
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_check_gpu_skips_without_device: SKIPPED: no python3\n");
        return;
    }
    char *lib = path_in_build("lib/libfldispatch.so");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/gpu_real/check_gpu.py' --lib '%s' 2>&1", src, lib);
    free(lib);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[4096] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    if (strstr(out, "PASS ") || strstr(out, "FAIL ")) {
        fprintf(stderr, "test_check_gpu_skips_without_device: SKIPPED: a CUDA device is here\n");
        return;
    }
    ck_assert_msg(status == 0, "exit status %d, output:\n%s", status, out);
    ck_assert_msg(strncmp(out, "skipped: no CUDA device (", 25) == 0 && strchr(out, ')'),
                  "output:\n%s", out);
}
END_TEST

static Suite *gpu_plugins_suite(void)
{
    Suite *s = suite_create("gpu_plugins");
    TCase *tc = tcase_create("real");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_loads_unavailable_with_reason, 0, 2);
    tcase_add_test(tc, test_cuda_reason_names_the_driver);
    tcase_add_test(tc, test_cuda_links_runtime_statically);
    tcase_add_loop_test(tc, test_impls_registered, 0, 2);
    tcase_add_loop_test(tc, test_list_shows_unavailable, 0, 2);
    tcase_add_loop_test(tc, test_calls_unavailable_name_reason, 0, 2);
    tcase_add_loop_test(tc, test_device_memory_unavailable, 0, 2);
    tcase_add_loop_test(tc, test_attention_falls_back_to_reference, 0, 2);
    tcase_add_loop_test(tc, test_rocm_hip_library_next_to_it, 0, 3);
    tcase_add_test(tc, test_rocm_runtime_opened_on_first_use);
    tcase_add_test(tc, test_check_gpu_skips_without_device);
    suite_add_tcase(s, tc);

    tc = tcase_create("emulated");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_fake_ops_match_reference, 0, 2);
    tcase_add_test(tc, test_fake_supports_routes_to_reference);
    tcase_add_test(tc, test_fake_stream_reaches_runtime);
    tcase_add_test(tc, test_fake_device_switching);
    tcase_add_test(tc, test_fake_new_thread_no_context_on_device_0);
    tcase_add_test(tc, test_arch_rule);
    tcase_add_loop_test(tc, test_fake_arch_availability, 0,
                        (int)(sizeof fake_archs / sizeof fake_archs[0]));
    tcase_add_test(tc, test_fake_arch_mixed_devices);
    tcase_add_test(tc, test_fake_reason_names_versions);
    tcase_add_test(tc, test_fake_launch_error_leaves_outputs);
    tcase_add_test(tc, test_fake_device_hooks);
    tcase_add_test(tc, test_fake_graph_capture_and_replay);
    tcase_add_test(tc, test_fake_graph_capture_failures);
    tcase_add_test(tc, test_fake_graph_runtime_without_graphs);
    tcase_add_test(tc, test_fake_detail_and_attention);
    tcase_add_test(tc, test_fake_not_probed_at_load);
    tcase_add_loop_test(tc, test_fake_no_device, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(gpu_plugins_suite());
}
