/*
 * Host glue of the GPU plugins (see gpu_plugin.h). Compiled into fld-cuda.so
 * (as a plugins/cuda C file), into fld-rocm.so (plugins/rocm/plugin.mk) and
 * into the emulator fixture of the tests, each with its own static state.
 *
 * Every kernel runs on the tensors' device (made current for the call when
 * it is not, then put back) and on the calling thread's current stream of
 * the plugin's device type. The device code reports launch errors at once,
 * before anything is written, so an error leaves the outputs untouched as
 * the plugin contract asks; errors of a kernel that already runs surface
 * later, at the next synchronising call, as with any asynchronous runtime.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu_plugin.h"

/* The plugin this object serves; set once by fld__gpu_plugin_register. */
static struct fld_gpu_plugin plug;
static char vendor_id[64], reference_id[64]; /* "vendor.cuda", "reference.cuda" */

/* ------------------------------------------------------------------------ */
/* Availability                                                             */
/* ------------------------------------------------------------------------ */

/*
 * The device count is asked once per process: the host evaluates
 * availability once per process and again in a forked child, where the
 * parent's answer (and runtime state) does not hold, hence the pid.
 */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t probe_pid;
static bool probe_ok;
static int probe_count;
static char probe_reason[512];

static const char *runtime_name(void)
{
    return plug.api && plug.api->runtime ? plug.api->runtime : plug.vendor;
}

static const char *error_text(int code)
{
    const char *s = plug.api->error_string ? plug.api->error_string(code) : NULL;
    return s && *s ? s : "unknown error";
}

static void probe_locked(void)
{
    pid_t pid = getpid();
    if (probe_pid == pid)
        return;
    probe_pid = pid;
    probe_ok = false;
    probe_count = 0;
    probe_reason[0] = '\0';
    if (!plug.api) {
        snprintf(probe_reason, sizeof probe_reason, "%s",
                 plug.load_error ? plug.load_error : "device code not loaded");
        return;
    }
    int n = 0;
    int rc = plug.api->device_count(&n);
    if (rc != 0) {
        if (plug.explain)
            plug.explain(rc, probe_reason, sizeof probe_reason);
        if (!probe_reason[0])
            snprintf(probe_reason, sizeof probe_reason, "%s runtime: %s", runtime_name(),
                     error_text(rc));
        return;
    }
    if (n <= 0) {
        snprintf(probe_reason, sizeof probe_reason, "no %s device", runtime_name());
        return;
    }
    probe_ok = true;
    probe_count = n;
}

static bool gpu_available(const char **reason)
{
    pthread_mutex_lock(&probe_lock);
    probe_locked();
    bool ok = probe_ok;
    pthread_mutex_unlock(&probe_lock);
    if (!ok && reason)
        *reason = probe_reason;
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Running on a device                                                      */
/* ------------------------------------------------------------------------ */

/* Makes device_id current; *prev is the device to restore, or -1. */
static int enter_device(int device_id, int *prev)
{
    *prev = -1;
    int cur = -1;
    int rc = plug.api->get_device(&cur);
    if (rc != 0 || cur == device_id)
        return rc;
    rc = plug.api->set_device(device_id);
    if (rc == 0)
        *prev = cur;
    return rc;
}

static int leave_device(int prev)
{
    return prev < 0 ? 0 : plug.api->set_device(prev);
}

enum call_kind { CALL_ACT, CALL_NORM, CALL_ROTARY };

/* Runs one kernel call on device_id; impl_id and op name it in messages. */
static int launch(enum call_kind kind, const void *gargs, int variant, int device_id,
                  const char *impl_id, const char *op)
{
    if (!plug.api) {
        fld_set_error("%s: %s: %s", impl_id, op,
                      plug.load_error ? plug.load_error : "no device code");
        return FLD_EUNAVAILABLE;
    }
    int prev;
    int rc = enter_device(device_id, &prev);
    if (rc != 0) {
        fld_set_error("%s: %s: cannot make %s device %d current: %s", impl_id, op, runtime_name(),
                      device_id, error_text(rc));
        return FLD_EIMPL;
    }
    void *stream = fld_get_stream(plug.device_type);
    switch (kind) {
    case CALL_ACT:
        rc = plug.api->act(gargs, variant, stream);
        break;
    case CALL_NORM:
        rc = plug.api->norm(gargs, variant, stream);
        break;
    case CALL_ROTARY:
        rc = plug.api->rotary(gargs, variant, stream);
        break;
    }
    int back = leave_device(prev);
    if (rc != 0) {
        fld_set_error("%s: %s: %s", impl_id, op, error_text(rc));
        return FLD_EIMPL;
    }
    if (back != 0)
        /* The kernel is queued and will write the outputs, so this call did
         * not fail (the host must not run another impl on them); only the
         * caller's current device is left changed. */
        fld_log(FLD_LOG_WARNING, "%s: %s: cannot make %s device %d current again: %s", impl_id, op,
                runtime_name(), prev, error_text(back));
    return FLD_OK;
}

/* ------------------------------------------------------------------------ */
/* Catalog arguments -> gpu_api.h                                           */
/* ------------------------------------------------------------------------ */

static void act_args_of(const fld_activation_args *a, int op, struct fld_gpu_act_args *g)
{
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    *g = (struct fld_gpu_act_args){
        .op = op,
        .dtype = fld_dtype_index(a->x->dtype),
        .out = out.data,
        .x = x.data,
        .rows = x.rows,
        .d = out.width,
        .out_stride = out.stride,
        .x_stride = x.stride,
    };
}

static void norm_args_of(const fld_rms_norm_args *a, bool gemma, struct fld_gpu_norm_args *g)
{
    fld_rows x, out, res = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    const int dt = fld_dtype_index(a->x->dtype);
    *g = (struct fld_gpu_norm_args){
        .dtype = dt,
        .weight_dtype = a->weight ? fld_dtype_index(a->weight->dtype) : dt,
        .residual_dtype = a->residual ? fld_dtype_index(a->residual->dtype) : dt,
        .gemma = gemma,
        .out = out.data,
        .x = x.data,
        .weight = a->weight ? (const char *)a->weight->data + a->weight->byte_offset : NULL,
        .residual = a->residual ? res.data : NULL,
        .rows = x.rows,
        .width = x.width,
        .out_stride = out.stride,
        .x_stride = x.stride,
        .residual_stride = a->residual ? res.stride : 0,
        .eps = a->eps,
    };
}

static void rotary_args_of(const fld_rotary_embedding_args *a, struct fld_gpu_rotary_args *g)
{
    fld_rotary_geometry geo;
    fld_rotary_geometry_of(a, &geo);
    *g = (struct fld_gpu_rotary_args){
        .dtype = fld_dtype_index(a->query->dtype),
        .cache_dtype = fld_dtype_index(geo.cache_dtype),
        .positions = geo.positions,
        .positions_int32 = geo.positions_int32,
        .query = geo.query,
        .key = geo.key,
        .tokens = geo.tokens,
        .head_size = a->head_size,
        .rot_dim = geo.rot_dim,
        .q_heads = geo.q_heads,
        .q_token_stride = geo.q_token_stride,
        .q_head_stride = geo.q_head_stride,
        .k_heads = geo.key ? geo.k_heads : 0,
        .k_token_stride = geo.k_token_stride,
        .k_head_stride = geo.k_head_stride,
        .cache = geo.cache,
        .cache_stride = geo.cache_stride,
        .max_pos = geo.max_pos,
        .is_neox = a->is_neox,
    };
}

static const char *id_of(int variant)
{
    return variant == FLD_GPU_VECTOR ? vendor_id : reference_id;
}

/* Empty tensors make a call a no-op; a launch with an empty grid is an error on GPUs. */
static int run_act(const void *argp, int op, int variant, const char *name)
{
    const fld_activation_args *a = argp;
    struct fld_gpu_act_args g;
    act_args_of(a, op, &g);
    if (g.rows == 0 || g.d == 0)
        return FLD_OK;
    return launch(CALL_ACT, &g, variant, a->x->device.device_id, id_of(variant), name);
}

static int run_norm(const void *argp, bool gemma, int variant, const char *name)
{
    const fld_rms_norm_args *a = argp;
    struct fld_gpu_norm_args g;
    norm_args_of(a, gemma, &g);
    if (g.rows == 0 || g.width == 0)
        return FLD_OK;
    return launch(CALL_NORM, &g, variant, a->x->device.device_id, id_of(variant), name);
}

static int run_rotary(const void *argp, int variant)
{
    const fld_rotary_embedding_args *a = argp;
    struct fld_gpu_rotary_args g;
    rotary_args_of(a, &g);
    if (g.tokens == 0 || (g.q_heads == 0 && g.k_heads == 0))
        return FLD_OK;
    return launch(CALL_ROTARY, &g, variant, a->query->device.device_id, id_of(variant),
                  FLD_OP_ROTARY_EMBEDDING);
}

#define ACT_KERNELS(name, code)                                                                    \
    static int name##_vector(const void *a)                                                        \
    {                                                                                              \
        return run_act(a, code, FLD_GPU_VECTOR, #name);                                            \
    }                                                                                              \
    static int name##_reference(const void *a)                                                     \
    {                                                                                              \
        return run_act(a, code, FLD_GPU_REFERENCE, #name);                                         \
    }
ACT_KERNELS(silu_and_mul, FLD_GPU_SILU_AND_MUL)
ACT_KERNELS(mul_and_silu, FLD_GPU_MUL_AND_SILU)
ACT_KERNELS(gelu_and_mul, FLD_GPU_GELU_AND_MUL)
ACT_KERNELS(gelu_tanh_and_mul, FLD_GPU_GELU_TANH_AND_MUL)

static int rms_norm_vector(const void *a)
{
    return run_norm(a, false, FLD_GPU_VECTOR, FLD_OP_RMS_NORM);
}
static int rms_norm_reference(const void *a)
{
    return run_norm(a, false, FLD_GPU_REFERENCE, FLD_OP_RMS_NORM);
}
static int gemma_rms_norm_vector(const void *a)
{
    return run_norm(a, true, FLD_GPU_VECTOR, FLD_OP_GEMMA_RMS_NORM);
}
static int gemma_rms_norm_reference(const void *a)
{
    return run_norm(a, true, FLD_GPU_REFERENCE, FLD_OP_GEMMA_RMS_NORM);
}
static int rotary_vector(const void *a)
{
    return run_rotary(a, FLD_GPU_VECTOR);
}
static int rotary_reference(const void *a)
{
    return run_rotary(a, FLD_GPU_REFERENCE);
}

/* vendor.<v> takes 128-bit paths only; other layouts go to reference.<v>. */
static bool act_supports(const void *argp)
{
    struct fld_gpu_act_args g;
    act_args_of(argp, 0, &g);
    return fld_gpu_act_vector_ok(&g);
}

static bool norm_supports(const void *argp)
{
    struct fld_gpu_norm_args g;
    norm_args_of(argp, false, &g);
    return fld_gpu_norm_vector_ok(&g);
}

static int attention_backend(const void *argp)
{
    const fld_attention_backend_args *a = argp;
    *a->name = a->use_sparse ? plug.attn_sparse_name
               : a->use_mla  ? plug.attn_mla_name
                             : plug.attn_name;
    return FLD_OK;
}

/* ------------------------------------------------------------------------ */
/* Device hooks                                                             */
/* ------------------------------------------------------------------------ */

static int hook_fail(const char *what, int device_id, int code)
{
    fld_set_error("%s: %s on %s device %d: %s", plug.vendor, what, runtime_name(), device_id,
                  error_text(code));
    return FLD_EIMPL;
}

/* Puts the previous device back after an operation that returned rc_op; the first error wins. */
static int finish(int rc_op, int prev)
{
    int back = leave_device(prev);
    return rc_op != 0 ? rc_op : back;
}

/* The host calls hooks only when is_available said yes; this guards the rest. */
static int no_api(void)
{
    if (plug.api)
        return FLD_OK;
    fld_set_error("%s: %s", plug.vendor, plug.load_error ? plug.load_error : "no device code");
    return FLD_EUNAVAILABLE;
}

static int hook_alloc(int device_id, size_t bytes, void **ptr)
{
    *ptr = NULL;
    if (no_api() != FLD_OK)
        return FLD_EUNAVAILABLE;
    int prev, rc = enter_device(device_id, &prev);
    if (rc == 0) {
        void *p = NULL;
        int op = plug.api->malloc(&p, bytes);
        rc = finish(op, prev);
        if (op == 0 && rc != 0)
            plug.api->free(p);
        else if (rc == 0)
            *ptr = p;
    }
    if (rc != 0) {
        char what[64];
        snprintf(what, sizeof what, "allocating %zu bytes", bytes);
        return hook_fail(what, device_id, rc);
    }
    return FLD_OK;
}

static int hook_free(int device_id, void *ptr)
{
    if (!ptr)
        return FLD_OK;
    if (no_api() != FLD_OK)
        return FLD_EUNAVAILABLE;
    int prev, rc = enter_device(device_id, &prev);
    if (rc == 0)
        rc = finish(plug.api->free(ptr), prev);
    return rc != 0 ? hook_fail("freeing memory", device_id, rc) : FLD_OK;
}

static int hook_copy(int device_id, void *dst, const void *src, size_t bytes, fld_copy_kind kind)
{
    static const char *const kinds[] = {"host-to-device copy", "device-to-host copy",
                                        "device-to-device copy"};
    if ((unsigned)kind > FLD_COPY_DEVICE_TO_DEVICE) {
        fld_set_error("%s: copy kind %d is not one of fld_copy_kind", plug.vendor, (int)kind);
        return FLD_EINVAL;
    }
    if (bytes == 0)
        return FLD_OK;
    if (no_api() != FLD_OK)
        return FLD_EUNAVAILABLE;
    int prev, rc = enter_device(device_id, &prev);
    if (rc == 0)
        rc = finish(plug.api->memcpy(dst, src, bytes, (int)kind, fld_get_stream(plug.device_type)),
                    prev);
    if (rc != 0) {
        char what[96];
        snprintf(what, sizeof what, "%s of %zu bytes", kinds[kind], bytes);
        return hook_fail(what, device_id, rc);
    }
    return FLD_OK;
}

static int hook_synchronize(int device_id)
{
    if (no_api() != FLD_OK)
        return FLD_EUNAVAILABLE;
    int prev, rc = enter_device(device_id, &prev);
    if (rc == 0)
        rc = finish(plug.api->stream_synchronize(fld_get_stream(plug.device_type)), prev);
    return rc != 0 ? hook_fail("synchronizing the current stream", device_id, rc) : FLD_OK;
}

/* ------------------------------------------------------------------------ */
/* Registration                                                             */
/* ------------------------------------------------------------------------ */

/*
 * "CUDA runtime 13000; devices are probed on first use ...": the runtime the
 * plugin carries. Devices are not counted here (see fld__gpu_plugin_register);
 * `fldispatch list` shows the availability reason once it asked.
 */
static int set_detail(fld_registry *reg)
{
    char head[96] = "";
    int version = 0;
    if (plug.api && plug.api->runtime_version && plug.api->runtime_version(&version) == 0 &&
        version > 0)
        snprintf(head, sizeof head, "%s runtime %d; ", runtime_name(), version);
    if (!plug.api)
        return fld_registry_set_detail(reg, "%s%s", head,
                                       plug.load_error ? plug.load_error : "no device code");
    return fld_registry_set_detail(reg,
                                   "%sdevices are probed on first use (loading does not "
                                   "initialise the driver)",
                                   head);
}

int fld__gpu_plugin_register(fld_registry *reg, const struct fld_gpu_plugin *p)
{
    plug = *p;
    if (plug.api && plug.api->version != FLD_GPU_API_VERSION) {
        /* A device-code object from another build: do not call into it. */
        static char why[160];
        snprintf(why, sizeof why, "device code has gpu_api version %d, this glue expects %d",
                 plug.api->version, FLD_GPU_API_VERSION);
        plug.api = NULL;
        plug.load_error = why;
    }
    snprintf(vendor_id, sizeof vendor_id, "vendor.%s", plug.vendor);
    snprintf(reference_id, sizeof reference_id, "reference.%s", plug.vendor);

    /* A re-registration after fld_shutdown() + fld_init() probes afresh.
     * Not now, though: asking for the device count initialises the driver,
     * and a process that loads the library and then forks (vLLM's workers)
     * must not inherit an initialised CUDA. The host asks is_available the
     * first time a call or a listing involves this device. */
    pthread_mutex_lock(&probe_lock);
    probe_pid = 0;
    pthread_mutex_unlock(&probe_lock);

    static const struct {
        const char *op;
        fld_kernel_fn vector, reference;
        fld_supports_fn supports;
    } ops[] = {
        {FLD_OP_SILU_AND_MUL, silu_and_mul_vector, silu_and_mul_reference, act_supports},
        {FLD_OP_MUL_AND_SILU, mul_and_silu_vector, mul_and_silu_reference, act_supports},
        {FLD_OP_GELU_AND_MUL, gelu_and_mul_vector, gelu_and_mul_reference, act_supports},
        {FLD_OP_GELU_TANH_AND_MUL, gelu_tanh_and_mul_vector, gelu_tanh_and_mul_reference,
         act_supports},
        {FLD_OP_RMS_NORM, rms_norm_vector, rms_norm_reference, norm_supports},
        {FLD_OP_GEMMA_RMS_NORM, gemma_rms_norm_vector, gemma_rms_norm_reference, norm_supports},
        /* One thread per pair whatever the layout: every shape is the fast path. */
        {FLD_OP_ROTARY_EMBEDDING, rotary_vector, rotary_reference, NULL},
    };
    int rc = FLD_OK;
    for (size_t i = 0; rc == FLD_OK && i < sizeof ops / sizeof ops[0]; i++) {
        const fld_impl vendor = {
            .op = ops[i].op,
            .impl_id = vendor_id,
            .kind = FLD_KIND_VENDOR,
            .vendor = plug.vendor,
            .priority = FLD_PRIORITY_VENDOR,
            .devices = plug.device_mask,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = ops[i].vector,
            .is_available = gpu_available,
            .supports = ops[i].supports,
        };
        const fld_impl reference = {
            .op = ops[i].op,
            .impl_id = reference_id,
            .kind = FLD_KIND_REFERENCE,
            .priority = FLD_PRIORITY_REFERENCE,
            .devices = plug.device_mask,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = ops[i].reference,
            .is_available = gpu_available,
        };
        rc = fld_registry_register(reg, &vendor);
        if (rc == FLD_OK)
            rc = fld_registry_register(reg, &reference);
    }
    if (rc == FLD_OK) {
        const fld_impl attention = {
            .op = FLD_OP_ATTENTION_BACKEND,
            .impl_id = vendor_id,
            .kind = FLD_KIND_VENDOR,
            .vendor = plug.vendor,
            .priority = FLD_PRIORITY_VENDOR,
            .devices = plug.device_mask,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = attention_backend,
            .is_available = gpu_available,
        };
        rc = fld_registry_register(reg, &attention);
    }
    /* Registered without device code too, so that fld_device_alloc() says why. */
    if (rc == FLD_OK) {
        const fld_device_hooks hooks = {
            .struct_size = sizeof(fld_device_hooks),
            .device_type = plug.device_type,
            .is_available = gpu_available,
            .alloc = hook_alloc,
            .free = hook_free,
            .copy = hook_copy,
            .synchronize = hook_synchronize,
        };
        rc = fld_registry_set_device_hooks(reg, &hooks);
    }
    if (rc == FLD_OK)
        rc = set_detail(reg);
    return rc;
}
