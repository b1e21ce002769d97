/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device hooks (plugin ABI 1.1) and the device-memory API built on them:
 * which plugin provides a device, availability with its reason, missing
 * hooks, invalid hook records rejecting their plugin whole, hook errors,
 * argument checks, the host's own CPU provider, fork, streams, and the
 * FLD_EUNAVAILABLE message of a call whose device's plugin cannot run.
 *
 * Plugins are registered in-process (fld_register_plugin) whose "device"
 * memory is CPU memory; the real plugins are kept out by an empty plugin
 * directory.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/cpu_tensor.h"
#include "util/harness.h"
#include <fldispatch/plugin.h>

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

static const DLDevice cuda0 = {kDLCUDA, 0};
static const DLDevice rocm0 = {kDLROCM, 0};

/* ------------------------------------------------------------------------ */
/* Host-memory hooks that record what they were given                       */
/* ------------------------------------------------------------------------ */

static atomic_int avail_calls, allocs, frees, copies, syncs;
static int last_device_id = -1;
static void *last_stream;
static int last_kind = -1;

static bool yes_counted(const char **reason)
{
    atomic_fetch_add(&avail_calls, 1);
    return true;
}

static bool no_driver(const char **reason)
{
    atomic_fetch_add(&avail_calls, 1);
    *reason = "no fake driver (libfake.so.1 not found)";
    return false;
}

static int host_alloc(int device_id, size_t bytes, void **ptr)
{
    atomic_fetch_add(&allocs, 1);
    last_device_id = device_id;
    *ptr = malloc(bytes);
    return *ptr ? FLD_OK : FLD_ENOMEM;
}

static int host_free(int device_id, void *ptr)
{
    atomic_fetch_add(&frees, 1);
    last_device_id = device_id;
    free(ptr);
    return FLD_OK;
}

static int host_copy(int device_id, void *dst, const void *src, size_t bytes, fld_copy_kind kind)
{
    atomic_fetch_add(&copies, 1);
    last_device_id = device_id;
    last_kind = (int)kind;
    last_stream = fld_get_stream(FLD_DEVICE_CUDA);
    memcpy(dst, src, bytes);
    return FLD_OK;
}

static int host_sync(int device_id)
{
    atomic_fetch_add(&syncs, 1);
    last_stream = fld_get_stream(FLD_DEVICE_CUDA);
    return FLD_OK;
}

static int alloc_fails_with_message(int device_id, size_t bytes, void **ptr)
{
    *ptr = (void *)(uintptr_t)0x1; /* must not reach the caller */
    fld_set_error("fake device out of memory for %zu bytes", bytes);
    return FLD_ENOMEM;
}

static int copy_fails_silently(int device_id, void *dst, const void *src, size_t bytes,
                               fld_copy_kind kind)
{
    return FLD_EIMPL;
}

static fld_device_hooks host_hooks(int device_type)
{
    return (fld_device_hooks){
        .struct_size = sizeof(fld_device_hooks),
        .device_type = device_type,
        .is_available = yes_counted,
        .alloc = host_alloc,
        .free = host_free,
        .copy = host_copy,
        .synchronize = host_sync,
    };
}

/* ------------------------------------------------------------------------ */
/* In-process plugins: register_builtins registers what the test staged     */
/* ------------------------------------------------------------------------ */

#define MAX_STAGED 4
static const fld_device_hooks *staged_hooks[MAX_STAGED];
static size_t n_staged_hooks;
static const fld_impl *staged_impl;
static int hook_status[MAX_STAGED];

static int register_staged(fld_registry *reg)
{
    int rc = FLD_OK;
    if (staged_impl && (rc = fld_registry_register(reg, staged_impl)) != FLD_OK)
        return rc;
    for (size_t i = 0; i < n_staged_hooks; i++)
        hook_status[i] = fld_registry_set_device_hooks(reg, staged_hooks[i]);
    return FLD_OK;
}

static fld_plugin_descriptor pool[16];
static int used;

static int add_plugin(const char *name, const fld_device_hooks *const *hooks, size_t n,
                      const fld_impl *impl)
{
    ck_assert_int_lt(used, 16);
    fld_plugin_descriptor *d = &pool[used++];
    *d = (fld_plugin_descriptor){FLD_PLUGIN_MAGIC,
                                 FLD_PLUGIN_ABI_MAJOR,
                                 FLD_PLUGIN_ABI_MINOR,
                                 sizeof(fld_plugin_descriptor),
                                 0,
                                 name,
                                 "1.0",
                                 FLD_VERSION_STRING,
                                 register_staged};
    ck_assert_uint_le(n, MAX_STAGED);
    for (size_t i = 0; i < n; i++)
        staged_hooks[i] = hooks[i];
    n_staged_hooks = n;
    staged_impl = impl;
    int rc = fld_register_plugin(d);
    n_staged_hooks = 0;
    staged_impl = NULL;
    return rc;
}

static int plugin_hook_mask(const fld_plugin_info *info, void *user)
{
    struct {
        const char *name;
        uint32_t mask;
        bool found;
    } *q = user;
    if (strcmp(info->name, q->name) == 0) {
        q->mask = info->hook_devices;
        q->found = true;
    }
    return 0;
}

static uint32_t hook_mask_of(const char *name)
{
    struct {
        const char *name;
        uint32_t mask;
        bool found;
    } q = {name, 0, false};
    ck_assert_int_eq(fld_foreach_plugin(plugin_hook_mask, &q), FLD_OK);
    ck_assert_msg(q.found, "plugin %s not listed", name);
    return q.mask;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

START_TEST(round_trip_through_hooks)
{
    fld_device_hooks h = host_hooks(FLD_DEVICE_CUDA);
    const fld_device_hooks *hs[] = {&h};
    ck_assert_int_eq(add_plugin("hostdev", hs, 1, NULL), FLD_OK);
    ck_assert_int_eq(hook_status[0], FLD_OK);
    ck_assert_uint_eq(hook_mask_of("hostdev"), FLD_DEVICE_MASK_CUDA);

    const char *who = NULL;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_CUDA, &who), FLD_OK);
    ck_assert_str_eq(who, "hostdev");

    int stream_token = 0;
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, &stream_token), FLD_OK);
    float in[257], out[257];
    for (int i = 0; i < 257; i++)
        in[i] = (float)i * 0.5f - 3.0f;
    void *a = NULL, *b = NULL;
    DLDevice dev1 = {kDLCUDA, 1};
    ck_assert_int_eq(fld_device_alloc(dev1, sizeof in, &a), FLD_OK);
    ck_assert_int_eq(last_device_id, 1);
    ck_assert_int_eq(fld_device_alloc(cuda0, sizeof in, &b), FLD_OK);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(fld_device_copy(cuda0, a, in, sizeof in, FLD_COPY_HOST_TO_DEVICE), FLD_OK);
    ck_assert_int_eq(last_kind, FLD_COPY_HOST_TO_DEVICE);
    ck_assert_ptr_eq(last_stream, &stream_token);
    ck_assert_int_eq(fld_device_copy(cuda0, b, a, sizeof in, FLD_COPY_DEVICE_TO_DEVICE), FLD_OK);
    ck_assert_int_eq(last_kind, FLD_COPY_DEVICE_TO_DEVICE);
    ck_assert_int_eq(fld_device_synchronize(cuda0), FLD_OK);
    ck_assert_int_eq(fld_device_copy(cuda0, out, b, sizeof out, FLD_COPY_DEVICE_TO_HOST), FLD_OK);
    ck_assert_int_eq(memcmp(in, out, sizeof in), 0);
    ck_assert_int_eq(fld_device_free(cuda0, a), FLD_OK);
    ck_assert_int_eq(fld_device_free(cuda0, b), FLD_OK);
    ck_assert_int_eq(fld_device_free(cuda0, NULL), FLD_OK); /* no-op */
    ck_assert_int_eq(atomic_load(&allocs), 2);
    ck_assert_int_eq(atomic_load(&frees), 2);
    ck_assert_int_eq(atomic_load(&copies), 3);
    ck_assert_int_eq(atomic_load(&syncs), 1);
    ck_assert_int_eq(atomic_load(&avail_calls), 1); /* evaluated once */
    /* A zero-byte copy touches nothing. */
    ck_assert_int_eq(fld_device_copy(cuda0, out, b, 0, FLD_COPY_DEVICE_TO_HOST), FLD_OK);
    ck_assert_int_eq(atomic_load(&copies), 3);
}
END_TEST

START_TEST(cpu_is_served_by_the_host)
{
    const char *who = NULL;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_CPU, &who), FLD_OK);
    ck_assert_str_eq(who, "(built-in)");
    DLDevice cpu = {kDLCPU, 0};
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc(cpu, 100, &p), FLD_OK);
    ck_assert_uint_eq((uintptr_t)p % 64, 0);
    char msg[100] = "hello, device", back[100] = {0};
    ck_assert_int_eq(fld_device_copy(cpu, p, msg, sizeof msg, FLD_COPY_HOST_TO_DEVICE), FLD_OK);
    ck_assert_int_eq(fld_device_copy(cpu, back, p, sizeof back, FLD_COPY_DEVICE_TO_HOST), FLD_OK);
    ck_assert_str_eq(back, "hello, device");
    ck_assert_int_eq(fld_device_synchronize(cpu), FLD_OK);
    ck_assert_int_eq(fld_device_free(cpu, p), FLD_OK);
}
END_TEST

START_TEST(unavailable_names_plugin_and_reason)
{
    fld_device_hooks h = host_hooks(FLD_DEVICE_CUDA);
    h.is_available = no_driver;
    const fld_device_hooks *hs[] = {&h};
    ck_assert_int_eq(add_plugin("nodriver", hs, 1, NULL), FLD_OK);
    void *p = (void *)&h;
    ck_assert_int_eq(fld_device_alloc(cuda0, 64, &p), FLD_EUNAVAILABLE);
    ck_assert_ptr_null(p);
    ck_assert_contains(fld_last_error(), "fld_device_alloc");
    ck_assert_contains(fld_last_error(), "plugin 'nodriver'");
    ck_assert_contains(fld_last_error(), "no fake driver (libfake.so.1 not found)");
    const char *who = (const char *)1;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_CUDA, &who), FLD_EUNAVAILABLE);
    ck_assert_ptr_null(who);
    ck_assert_int_eq(fld_device_synchronize(cuda0), FLD_EUNAVAILABLE);
    ck_assert_int_eq(atomic_load(&allocs), 0);
    ck_assert_int_eq(atomic_load(&avail_calls), 1);
}
END_TEST

START_TEST(first_available_provider_wins)
{
    fld_device_hooks dead = host_hooks(FLD_DEVICE_CUDA);
    dead.is_available = no_driver;
    fld_device_hooks live = host_hooks(FLD_DEVICE_CUDA);
    const fld_device_hooks *d[] = {&dead}, *l[] = {&live};
    ck_assert_int_eq(add_plugin("a_dead", d, 1, NULL), FLD_OK);
    ck_assert_int_eq(add_plugin("b_live", l, 1, NULL), FLD_OK);
    const char *who = NULL;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_CUDA, &who), FLD_OK);
    ck_assert_str_eq(who, "b_live");
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc(cuda0, 16, &p), FLD_OK);
    ck_assert_int_eq(fld_device_free(cuda0, p), FLD_OK);
}
END_TEST

START_TEST(no_provider_is_not_found)
{
    fld_device_hooks h = host_hooks(FLD_DEVICE_CUDA);
    const fld_device_hooks *hs[] = {&h};
    ck_assert_int_eq(add_plugin("cudaonly", hs, 1, NULL), FLD_OK);
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc(rocm0, 16, &p), FLD_ENOTFOUND);
    ck_assert_contains(fld_last_error(), "no loaded plugin provides device memory for rocm");
    const char *who = NULL;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_ASCEND_DL21, &who), FLD_ENOTFOUND);
}
END_TEST

START_TEST(missing_hook_is_unsupported)
{
    fld_device_hooks h = host_hooks(FLD_DEVICE_ROCM);
    h.copy = NULL;
    h.synchronize = NULL;
    const fld_device_hooks *hs[] = {&h};
    ck_assert_int_eq(add_plugin("partial", hs, 1, NULL), FLD_OK);
    char buf[8] = {0};
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc(rocm0, sizeof buf, &p), FLD_OK);
    ck_assert_int_eq(fld_device_copy(rocm0, p, buf, sizeof buf, FLD_COPY_HOST_TO_DEVICE),
                     FLD_EUNSUPPORTED);
    ck_assert_contains(fld_last_error(), "plugin 'partial' has no 'copy' device hook");
    ck_assert_int_eq(fld_device_synchronize(rocm0), FLD_EUNSUPPORTED);
    ck_assert_contains(fld_last_error(), "'synchronize'");
    ck_assert_int_eq(fld_device_free(rocm0, p), FLD_OK);
}
END_TEST

static int noop_kernel(const void *args)
{
    return FLD_OK;
}

static const fld_impl hooks_plugin_impl = {
    .op = "t_dev_op",
    .impl_id = "vendor.hooky",
    .kind = FLD_KIND_VENDOR,
    .vendor = "hooky",
    .priority = FLD_PRIORITY_VENDOR,
    .devices = FLD_DEVICE_MASK_CUDA,
    .dtypes = FLD_DTYPE_MASK_ALL,
    .fn = noop_kernel,
};

static int impl_count(const fld_impl_info *info, void *user)
{
    if (strcmp(info->impl_id, "vendor.hooky") == 0)
        ++*(int *)user;
    return 0;
}

/* Each invalid record rejects the whole plugin: its impl is not kept either. */
START_TEST(invalid_hooks_reject_the_plugin)
{
    fld_device_hooks small = host_hooks(FLD_DEVICE_CUDA);
    small.struct_size = offsetof(fld_device_hooks, copy);
    fld_device_hooks cpu = host_hooks(FLD_DEVICE_CPU);
    fld_device_hooks unknown = host_hooks(99);
    fld_device_hooks twice = host_hooks(FLD_DEVICE_ASCEND);
    fld_device_hooks twice_dl21 = host_hooks(FLD_DEVICE_ASCEND_DL21);
    const struct {
        const fld_device_hooks *hooks[2];
        size_t n;
        const char *why;
    } cases[] = {
        {{&small}, 1, "smaller than ABI 1.1's"},
        {{&cpu}, 1, "the CPU, which the host serves itself"},
        {{&unknown}, 1, "device_type 99 is unknown"},
        {{&twice, &twice_dl21}, 2, "registered twice"},
        {{NULL}, 1, "hooks is NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "bad%zu", i);
        int rc = add_plugin(name, cases[i].hooks, cases[i].n, &hooks_plugin_impl);
        if (cases[i].hooks[0] == NULL) {
            /* A NULL record is an argument error; the plugin may still load. */
            ck_assert_int_eq(hook_status[0], FLD_EINVAL);
            continue;
        }
        ck_assert_msg(rc == FLD_EPLUGIN, "case %zu: rc %d", i, rc);
        ck_assert_contains(fld_last_error(), cases[i].why);
        int n = 0;
        ck_assert_int_eq(fld_foreach_impl(impl_count, &n), FLD_OK);
        ck_assert_int_eq(n, 0);
        const char *who;
        if (cases[i].hooks[0]->device_type != FLD_DEVICE_CPU) /* the host serves the CPU */
            ck_assert_int_ne(fld_device_provider(cases[i].hooks[0]->device_type, &who), FLD_OK);
    }
}
END_TEST

/* A newer plugin's larger record is accepted: the host reads what it knows. */
START_TEST(larger_record_from_newer_plugin)
{
    struct {
        fld_device_hooks known;
        void *future_field;
    } bigger = {host_hooks(FLD_DEVICE_CUDA), (void *)&bigger};
    bigger.known.struct_size = sizeof bigger;
    const fld_device_hooks *hs[] = {&bigger.known};
    ck_assert_int_eq(add_plugin("newer", hs, 1, NULL), FLD_OK);
    ck_assert_int_eq(hook_status[0], FLD_OK);
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc(cuda0, 8, &p), FLD_OK);
    ck_assert_int_eq(fld_device_free(cuda0, p), FLD_OK);
}
END_TEST

START_TEST(hook_errors_are_explained)
{
    fld_device_hooks h = host_hooks(FLD_DEVICE_CUDA);
    h.alloc = alloc_fails_with_message;
    h.copy = copy_fails_silently;
    const fld_device_hooks *hs[] = {&h};
    ck_assert_int_eq(add_plugin("flaky", hs, 1, NULL), FLD_OK);
    void *p = NULL;
    ck_assert_int_eq(fld_device_alloc(cuda0, 4096, &p), FLD_ENOMEM);
    ck_assert_ptr_null(p);
    ck_assert_contains(fld_last_error(),
                       "fld_device_alloc: plugin 'flaky': fake device out of memory for 4096");
    char a[4], b[4];
    ck_assert_int_eq(fld_device_copy(cuda0, a, b, 4, FLD_COPY_DEVICE_TO_HOST), FLD_EIMPL);
    ck_assert_contains(fld_last_error(), "fld_device_copy: plugin 'flaky' failed");
}
END_TEST

START_TEST(arguments_are_checked)
{
    fld_device_hooks h = host_hooks(FLD_DEVICE_CUDA);
    const fld_device_hooks *hs[] = {&h};
    ck_assert_int_eq(add_plugin("args", hs, 1, NULL), FLD_OK);
    void *p = NULL;
    char buf[4];
    ck_assert_int_eq(fld_device_alloc(cuda0, 16, NULL), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "argument 'ptr' is NULL");
    ck_assert_int_eq(fld_device_alloc(cuda0, 0, &p), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "bytes is 0");
    DLDevice negative = {kDLCUDA, -1};
    ck_assert_int_eq(fld_device_alloc(negative, 16, &p), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "device_id -1");
    DLDevice odd = {(DLDeviceType)77, 0};
    ck_assert_int_eq(fld_device_alloc(odd, 16, &p), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "unknown device type 77");
    ck_assert_int_eq(fld_device_copy(cuda0, NULL, buf, 4, FLD_COPY_HOST_TO_DEVICE), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "argument 'dst' is NULL");
    ck_assert_int_eq(fld_device_copy(cuda0, buf, buf, 4, (fld_copy_kind)7), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "unknown copy kind 7");
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_CUDA, NULL), FLD_EINVAL);
    ck_assert_int_eq(atomic_load(&allocs) + atomic_load(&copies), 0);
}
END_TEST

/* Availability is evaluated again in a forked child (a driver state is per process). */
START_TEST(fork_reevaluates_availability)
{
    fld_device_hooks h = host_hooks(FLD_DEVICE_CUDA);
    const fld_device_hooks *hs[] = {&h};
    ck_assert_int_eq(add_plugin("forky", hs, 1, NULL), FLD_OK);
    const char *who;
    ck_assert_int_eq(fld_device_provider(FLD_DEVICE_CUDA, &who), FLD_OK);
    ck_assert_int_eq(atomic_load(&avail_calls), 1);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        void *p = NULL;
        int ok = fld_device_alloc(cuda0, 32, &p) == FLD_OK && atomic_load(&avail_calls) == 2 &&
                 fld_device_free(cuda0, p) == FLD_OK;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(atomic_load(&avail_calls), 1);
}
END_TEST

static bool cuda_missing(const char **reason)
{
    *reason = "no CUDA driver (libcuda.so.1: cannot open shared object file)";
    return false;
}

static int must_not_run(const void *args)
{
    ck_abort_msg("an unavailable implementation ran");
    return FLD_EIMPL;
}

/* A call on a device whose only implementation cannot run names the reason. */
START_TEST(call_on_unavailable_device_names_reason)
{
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.fakegpu",
        .kind = FLD_KIND_VENDOR,
        .vendor = "fakegpu",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CUDA,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = must_not_run,
        .is_available = cuda_missing,
    };
    ck_assert_int_eq(add_plugin("fakegpu", NULL, 0, &impl), FLD_OK);
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 32});
    x->t.device = cuda0;
    out->t.device = cuda0;
    for (int round = 0; round < 2; round++) { /* the cached chain says it too */
        ck_assert_int_eq(fld_silu_and_mul(&out->t, &x->t), FLD_EUNAVAILABLE);
        ck_assert_contains(fld_last_error(), "silu_and_mul");
        ck_assert_contains(fld_last_error(), "cuda");
        ck_assert_contains(fld_last_error(), "vendor.fakegpu: unavailable: no CUDA driver "
                                             "(libcuda.so.1: cannot open shared object file)");
    }
    /* bf16 on ROCm: nothing declares it at all. */
    tt_tensor *xb = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 64});
    tt_tensor *ob = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 32});
    xb->t.device = rocm0;
    ob->t.device = rocm0;
    ck_assert_int_eq(fld_silu_and_mul(&ob->t, &xb->t), FLD_EUNAVAILABLE);
    ck_assert_contains(fld_last_error(), "none supports it");
    ck_assert_contains(fld_last_error(), "reference.c: does not support device rocm");
    tt_free(x);
    tt_free(out);
    tt_free(xb);
    tt_free(ob);
}
END_TEST

/* When every candidate declines, the message carries the decliner's own words. */
START_TEST(all_declined_names_the_decliners_reason)
{
    const char *name = "unchanged";
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_CPU, true, false, &name), FLD_EUNAVAILABLE);
    ck_assert_str_eq(name, "unchanged");
    ck_assert_contains(fld_last_error(), "accepts these arguments");
    ck_assert_contains(fld_last_error(), "'reference.c' said: attention_backend: no MLA "
                                         "attention backend on cpu");
    /* A stale message from an earlier failure is not passed off as the reason. */
    ck_assert_int_eq(fld_device_alloc(cuda0, 0, (void **)&name), FLD_EINVAL);
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_ASCEND, true, true, &name), FLD_EUNAVAILABLE);
    ck_assert_contains(fld_last_error(), "no sparse MLA attention backend on ascend");
    ck_assert_msg(!strstr(fld_last_error(), "bytes is 0"), "%s", fld_last_error());
}
END_TEST

/* A plugin built for ABI 1.0 (no hooks) loads on this 1.4 host. */
START_TEST(abi_1_0_descriptor_loads)
{
    ck_assert_int_eq(FLD_PLUGIN_ABI_MINOR, 4);
    static fld_plugin_descriptor old = {
        FLD_PLUGIN_MAGIC, 1, 0, sizeof(fld_plugin_descriptor), 0, "old_abi", "0.9", "0.1.0",
        register_staged};
    staged_impl = &hooks_plugin_impl;
    ck_assert_int_eq(fld_register_plugin(&old), FLD_OK);
    staged_impl = NULL;
    int n = 0;
    ck_assert_int_eq(fld_foreach_impl(impl_count, &n), FLD_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(hook_mask_of("old_abi"), 0);
}
END_TEST

static Suite *device_suite(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("hooks");
    tcase_add_test(tc, round_trip_through_hooks);
    tcase_add_test(tc, cpu_is_served_by_the_host);
    tcase_add_test(tc, unavailable_names_plugin_and_reason);
    tcase_add_test(tc, first_available_provider_wins);
    tcase_add_test(tc, no_provider_is_not_found);
    tcase_add_test(tc, missing_hook_is_unsupported);
    tcase_add_test(tc, invalid_hooks_reject_the_plugin);
    tcase_add_test(tc, larger_record_from_newer_plugin);
    tcase_add_test(tc, hook_errors_are_explained);
    tcase_add_test(tc, arguments_are_checked);
    tcase_add_test(tc, fork_reevaluates_availability);
    suite_add_tcase(s, tc);
    tc = tcase_create("calls");
    tcase_add_test(tc, call_on_unavailable_device_names_reason);
    tcase_add_test(tc, abi_1_0_descriptor_loads);
    tcase_add_test(tc, all_declined_names_the_decliners_reason);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_device", device_suite());
}
