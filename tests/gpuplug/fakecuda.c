/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture plugin "fakecuda": see fakecuda.h. Every call the glue makes goes
 * through a wrapper here that records it, then to the emulator's table
 * (fld__gpu_api_emu), which runs the real kernel source on the CPU.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../../plugins/shared/gpu/gpu_plugin.h"
#include "fakecuda.h"

extern const struct fld__gpu_api fld__gpu_api_emu;

/* FLD_EMU_ERR_INVALID_DEVICE (plugins/shared/gpu/gpu_emu.h) */
enum { EMU_ERR_INVALID_DEVICE = 101 };

static struct fld__gpu_api api;
static struct fakecuda_record rec = {.variant = -1, .device = -1, .memcpy_kind = -1};
static int n_devices = 2, count_error, fail_next, driver = 13000;
enum { MAX_DEVICES = 16, MAX_DEPTH = 8 };
static int archs[MAX_DEVICES];
/* The thread's context stack, as the driver keeps it: top is current. */
static _Thread_local int ctx_stack[MAX_DEPTH];
static _Thread_local int ctx_depth;

static int current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : -1;
}

void fakecuda_record_get(struct fakecuda_record *out)
{
    *out = rec;
}

size_t fakecuda_record_size(void)
{
    return sizeof rec;
}

int fakecuda_current_device(void)
{
    return current();
}

void fakecuda_set_current_device(int device)
{
    if (device < 0) {
        ctx_depth = 0;
        return;
    }
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = device;
    rec.contexts |= 1u << device;
}

void fakecuda_fail_next_launch(int code)
{
    fail_next = code;
}

static int fake_device_count(int *count)
{
    rec.device_counts++;
    if (count_error)
        return count_error;
    *count = n_devices;
    return 0;
}

static int fake_driver_version(int *version)
{
    *version = driver;
    return 0;
}

static int fake_device_name(int device_id, char *buf, size_t size)
{
    snprintf(buf, size, "Emulated GPU %d", device_id);
    return device_id >= 0 && device_id < n_devices ? 0 : EMU_ERR_INVALID_DEVICE;
}

static int fake_device_arch(int device_id, int *arch)
{
    if (device_id < 0 || device_id >= n_devices)
        return EMU_ERR_INVALID_DEVICE;
    *arch = archs[device_id];
    return 0;
}

static int fake_current_device(int *device_id)
{
    *device_id = current();
    return 0;
}

static int fake_push_device(int device_id)
{
    if (device_id < 0 || device_id >= n_devices || ctx_depth >= MAX_DEPTH)
        return EMU_ERR_INVALID_DEVICE;
    ctx_stack[ctx_depth++] = device_id;
    rec.contexts |= 1u << device_id;
    rec.pushes++;
    return 0;
}

static int fake_pop_device(void)
{
    if (ctx_depth <= 0)
        return EMU_ERR_INVALID_DEVICE;
    ctx_depth--;
    rec.pops++;
    return 0;
}

static int fake_malloc(void **ptr, size_t bytes)
{
    rec.device = current();
    return fld__gpu_api_emu.malloc(ptr, bytes);
}

static int fake_memcpy(void *dst, const void *src, size_t bytes, int kind, void *stream)
{
    rec.device = current();
    rec.stream = stream;
    rec.memcpy_kind = kind;
    return fld__gpu_api_emu.memcpy(dst, src, bytes, kind, stream);
}

static int fake_stream_synchronize(void *stream)
{
    rec.device = current();
    rec.stream = stream;
    rec.synchronizes++;
    return fld__gpu_api_emu.stream_synchronize(stream);
}

/* Records a launch; a non-zero result is the injected failure. */
static int launch_begin(int variant, void *stream)
{
    rec.stream = stream;
    rec.variant = variant;
    rec.device = current();
    int rc = fail_next;
    fail_next = 0;
    if (rc == 0)
        rec.kernels++;
    return rc;
}

static int fake_act(const struct fld__gpu_act_args *a, int variant, void *stream)
{
    int rc = launch_begin(variant, stream);
    return rc ? rc : fld__gpu_api_emu.act(a, variant, stream);
}

static int fake_norm(const struct fld__gpu_norm_args *a, int variant, void *stream)
{
    int rc = launch_begin(variant, stream);
    return rc ? rc : fld__gpu_api_emu.norm(a, variant, stream);
}

static int fake_rotary(const struct fld__gpu_rotary_args *a, int variant, void *stream)
{
    int rc = launch_begin(variant, stream);
    return rc ? rc : fld__gpu_api_emu.rotary(a, variant, stream);
}

static int fake_capture_end(void *stream, int keep, void **graph)
{
    int rc = fld__gpu_api_emu.capture_end(stream, keep, graph);
    if (rc == 0 && keep)
        rec.captures++;
    return rc;
}

static int fake_graph_replay(void *graph, int replays, double *ns)
{
    int rc = fld__gpu_api_emu.graph_replay(graph, replays, ns);
    if (rc == 0)
        rec.replays += replays;
    return rc;
}

static int register_builtins(fld_registry *reg)
{
    const char *s = getenv("FAKECUDA_DEVICES");
    n_devices = s ? atoi(s) : 2;
    if (n_devices > MAX_DEVICES)
        n_devices = MAX_DEVICES;
    s = getenv("FAKECUDA_COUNT_ERROR");
    count_error = s ? atoi(s) : 0;
    s = getenv("FAKECUDA_DRIVER");
    driver = s ? atoi(s) : 13000;
    s = getenv("FAKECUDA_ARCHS");
    for (int i = 0; i < MAX_DEVICES; i++) {
        archs[i] = 90;
        if (s && *s) {
            char *end;
            archs[i] = (int)strtol(s, &end, 10);
            s = *end == ',' ? end + 1 : end;
        }
    }

    api = fld__gpu_api_emu;
    api.device_count = fake_device_count;
    api.driver_version = fake_driver_version;
    api.device_name = fake_device_name;
    api.device_arch = fake_device_arch;
    api.built_archs = FAKECUDA_BUILT;
    api.default_stream = FAKECUDA_DEFAULT_STREAM;
    api.current_device = fake_current_device;
    api.push_device = fake_push_device;
    api.pop_device = fake_pop_device;
    api.malloc = fake_malloc;
    api.memcpy = fake_memcpy;
    api.stream_synchronize = fake_stream_synchronize;
    api.act = fake_act;
    api.norm = fake_norm;
    api.rotary = fake_rotary;
    api.capture_end = fake_capture_end;
    api.graph_replay = fake_graph_replay;
    s = getenv("FAKECUDA_NO_GRAPHS");
    if (s && atoi(s) != 0) {
        api.capture_begin = NULL;
        api.capture_end = NULL;
        api.graph_replay = NULL;
        api.graph_free = NULL;
    }

    const struct fld__gpu_plugin p = {
        .api = &api,
        .vendor = "cuda",
        .device_type = FLD_DEVICE_CUDA,
        .device_mask = FLD_DEVICE_MASK_CUDA,
        .attn_name = "FLASH_ATTN",
        .attn_mla_name = "FLASHMLA",
        .attn_sparse_name = "FLASHMLA_SPARSE",
        .rebuild_hint = "rebuild with CUDA_ARCHS naming it",
    };
    return fld__gpu_plugin_register(reg, &p);
}

FLD_PLUGIN_DEFINE("fakecuda", FLD_VERSION_STRING, register_builtins)
