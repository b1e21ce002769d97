/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host glue of the GPU plugins (see gpu_plugin.h). One object (gpu.mk),
 * linked into fld-cuda.so, fld-rocm.so and the emulator fixture of the tests
 * (tests/gpuplug), each shared object with its own copy of the static state.
 *
 * Every kernel runs on the tensors' device (pushed for the call when the
 * thread's current context is elsewhere or absent, then popped: the thread
 * ends the call as it began) and on the calling thread's stream of the
 * plugin's device type, or the per-thread default stream when it set none. The device code reports
 * launch errors at once, before anything is written, so an error leaves the outputs untouched as
 * the plugin contract asks; errors of a kernel that already runs surface
 * later, at the next synchronising call, as with any asynchronous runtime.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_plugin.h"

/* The device code's dtype indices are the library's (fld_dtype_index(), the
   bit of each FLD_DTYPE_MASK_*): the glue passes fld_dtype_index() through. */
_Static_assert(FLD_DTYPE_MASK_F32 == 1u << FLD_GPU_F32 && FLD_DTYPE_MASK_F16 == 1u << FLD_GPU_F16 &&
                   FLD_DTYPE_MASK_BF16 == 1u << FLD_GPU_BF16 &&
                   FLD_DTYPE_MASK_ALL == (1u << FLD_GPU_DTYPES) - 1,
               "enum fld__gpu_dtype (gpu_api.h) must follow fld_dtype_index()");

/* The plugin this object serves; set once by fld__gpu_plugin_register. */
static struct fld__gpu_plugin plug;
static char vendor_id[64], reference_id[64]; /* "vendor.cuda", "reference.cuda" */

/* ------------------------------------------------------------------------ */
/* Availability                                                             */
/* ------------------------------------------------------------------------ */

/*
 * The device count is asked once per process: the host evaluates
 * availability once per process and again in a forked child, where the
 * parent's answer (and runtime state) does not hold, hence the pid.
 *
 * With each device's compute capability (api->device_arch) the probe also
 * decides which devices can run the code that was built (api->built_archs):
 * the plugin is available when at least one can; a call on another one
 * fails naming the device and what was built, instead of the runtime's
 * "no kernel image" at every launch.
 */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t probe_pid;
static bool probe_ok;
static int probe_count;
static char probe_reason[1024];
/* Per device: 1 runs the built code, 0 does not (see arch_reason), or
 * NULL when not checked (no device_arch). Read without the lock once
 * probe_ok is set: it is written only while probing. */
static unsigned char *probe_runs;
static int *probe_arch;

static const char *runtime_name(void)
{
    return plug.api && plug.api->runtime ? plug.api->runtime : plug.vendor;
}

static const char *error_text(int code)
{
    const char *s = plug.api->error_string ? plug.api->error_string(code) : NULL;
    return s && *s ? s : "unknown error";
}

static void version_text(int v, char *buf, size_t size)
{
    buf[0] = '\0';
    if (plug.version_text)
        plug.version_text(v, buf, size);
    if (!buf[0])
        snprintf(buf, size, "%d", v);
}

/* "driver 12.2, runtime 13.0" from what the runtime reports; "" when it reports neither. */
static void versions_text(char *buf, size_t size)
{
    int drv = 0, rt = 0;
    char d[32] = "", r[32] = "";
    buf[0] = '\0';
    bool has_drv = plug.api->driver_version && plug.api->driver_version(&drv) == 0;
    bool has_rt = plug.api->runtime_version && plug.api->runtime_version(&rt) == 0 && rt > 0;
    if (has_drv) {
        if (drv > 0)
            version_text(drv, d, sizeof d);
        else
            snprintf(d, sizeof d, "none");
    }
    if (has_rt)
        version_text(rt, r, sizeof r);
    if (has_drv && has_rt)
        snprintf(buf, size, "driver %s, runtime %s", d, r);
    else if (has_drv || has_rt)
        snprintf(buf, size, "%s %s", has_drv ? "driver" : "runtime", has_drv ? d : r);
}

/* Appends " (driver X, runtime Y)" to the probe reason. */
static void append_versions(void)
{
    char v[96];
    versions_text(v, sizeof v);
    size_t n = strlen(probe_reason);
    if (v[0] && n + 4 < sizeof probe_reason)
        snprintf(probe_reason + n, sizeof probe_reason - n, " (%s)", v);
}

/* "device 0 (<name>) is sm_70" into buf. */
static void device_text(int id, int arch, char *buf, size_t size)
{
    char name[256] = "";
    if (plug.api->device_name(id, name, sizeof name) != 0 || !name[0])
        snprintf(name, sizeof name, "?");
    if (arch > 0)
        snprintf(buf, size, "%s device %d (%s) is sm_%d", runtime_name(), id, name, arch);
    else
        snprintf(buf, size, "%s device %d (%s) did not report its compute capability",
                 runtime_name(), id, name);
}

/* Fills probe_runs / probe_arch for n devices; false (reason set) when none runs the code. */
static bool check_archs(int n)
{
    if (!plug.api->device_arch || !plug.api->built_archs)
        return true;
    probe_runs = calloc((size_t)n, 1);
    probe_arch = calloc((size_t)n, sizeof *probe_arch);
    if (!probe_runs || !probe_arch) {
        free(probe_runs);
        free(probe_arch);
        probe_runs = NULL;
        probe_arch = NULL;
        return true; /* unchecked: the runtime's own error at launch */
    }
    int good = 0;
    for (int i = 0; i < n; i++) {
        int arch = 0;
        if (plug.api->device_arch(i, &arch) != 0)
            arch = -1;
        probe_arch[i] = arch;
        probe_runs[i] = arch > 0 && fld__gpu_arch_runs(plug.api->built_archs, arch);
        good += probe_runs[i];
    }
    if (good > 0)
        return true;
    /* "no CUDA device can run this build: CUDA device 0 (...) is sm_70,
     * CUDA device 1 (...) is sm_70; the plugin has code for ..." */
    int len = snprintf(probe_reason, sizeof probe_reason,
                       "no %s device can run this build: ", runtime_name());
    for (int i = 0; i < n && i < 4 && len > 0 && (size_t)len < sizeof probe_reason; i++) {
        char dev[320];
        device_text(i, probe_arch[i], dev, sizeof dev);
        len += snprintf(probe_reason + len, sizeof probe_reason - (size_t)len, "%s%s",
                        i ? ", " : "", dev);
    }
    if (n > 4 && len > 0 && (size_t)len < sizeof probe_reason)
        len += snprintf(probe_reason + len, sizeof probe_reason - (size_t)len, ", ...");
    if (len > 0 && (size_t)len < sizeof probe_reason)
        snprintf(probe_reason + len, sizeof probe_reason - (size_t)len,
                 "; the plugin has code for %s%s%s", plug.api->built_archs,
                 plug.rebuild_hint ? "; " : "", plug.rebuild_hint ? plug.rebuild_hint : "");
    return false;
}

/* NULL when api can serve this glue, else why not (and api is dropped). */
static const char *api_mismatch(const struct fld__gpu_api *api)
{
    static char why[160];
    if (!api || api->version == FLD_GPU_API_VERSION)
        return NULL;
    /* A device-code object from another build: do not call into it. */
    snprintf(why, sizeof why, "device code has gpu_api version %d, this glue expects %d",
             api->version, FLD_GPU_API_VERSION);
    return why;
}

/* Opens deferred device code (plug.load) once per registration. */
static bool load_done;

static void load_locked(void)
{
    if (plug.api || !plug.load || load_done)
        return;
    load_done = true;
    const struct fld__gpu_api *api = plug.load();
    const char *why = api_mismatch(api);
    if (why) {
        plug.load_error = why;
        api = NULL;
    }
    plug.api = api;
}

static void probe_locked(void)
{
    pid_t pid = getpid();
    if (probe_pid == pid)
        return;
    probe_pid = pid;
    load_locked();
    probe_ok = false;
    probe_count = 0;
    probe_reason[0] = '\0';
    free(probe_runs);
    free(probe_arch);
    probe_runs = NULL;
    probe_arch = NULL;
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
        append_versions();
        return;
    }
    if (n <= 0) {
        snprintf(probe_reason, sizeof probe_reason, "no %s device", runtime_name());
        append_versions();
        return;
    }
    if (!check_archs(n))
        return;
    probe_ok = true;
    probe_count = n;
}

/* At unload (fld_shutdown() closes the plugin) or exit. */
__attribute__((destructor)) static void probe_release(void)
{
    free(probe_runs);
    free(probe_arch);
    probe_runs = NULL;
    probe_arch = NULL;
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

/*
 * FLD_OK when device_id can run the built code (or it is not known); else
 * FLD_EUNAVAILABLE with "<impl>: <op>: <runtime> device N (...) is sm_XY;
 * the plugin has code for ...". Calls come after gpu_available() said yes.
 */
static int check_device_arch(int device_id, const char *impl_id, const char *op)
{
    if (!probe_runs || device_id < 0 || device_id >= probe_count || probe_runs[device_id])
        return FLD_OK;
    char dev[320];
    device_text(device_id, probe_arch[device_id], dev, sizeof dev);
    fld_set_error("%s: %s: %s; the plugin has code for %s%s%s", impl_id, op, dev,
                  plug.api->built_archs, plug.rebuild_hint ? "; " : "",
                  plug.rebuild_hint ? plug.rebuild_hint : "");
    return FLD_EUNAVAILABLE;
}

/* ------------------------------------------------------------------------ */
/* Running on a device                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Makes device_id current for one call. When the thread's current context
 * is already on that device nothing changes (*pushed false); otherwise the
 * device is pushed on top of what was current -- which may be nothing: a
 * thread that never chose a device gets no context created on device 0 by
 * a call on device 1 -- and leave_device() pops it, so the thread ends as
 * it began.
 */
static int enter_device(int device_id, bool *pushed)
{
    *pushed = false;
    int cur = -1;
    int rc = plug.api->current_device(&cur);
    if (rc != 0 || cur == device_id)
        return rc;
    rc = plug.api->push_device(device_id);
    if (rc == 0)
        *pushed = true;
    return rc;
}

static int leave_device(bool pushed)
{
    return pushed ? plug.api->pop_device() : 0;
}

/* The caller's stream for this device type, else the per-thread default stream. */
static void *current_stream(void)
{
    void *s = fld_get_stream(plug.device_type);
    return s ? s : plug.api->default_stream;
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
    int rc = check_device_arch(device_id, impl_id, op);
    if (rc != FLD_OK)
        return rc;
    bool pushed;
    rc = enter_device(device_id, &pushed);
    if (rc != 0) {
        fld_set_error("%s: %s: cannot make %s device %d current: %s", impl_id, op, runtime_name(),
                      device_id, error_text(rc));
        return FLD_EIMPL;
    }
    void *stream = current_stream();
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
    int back = leave_device(pushed);
    if (rc != 0) {
        fld_set_error("%s: %s: %s", impl_id, op, error_text(rc));
        return FLD_EIMPL;
    }
    if (back != 0)
        /* The kernel is queued and will write the outputs, so this call did
         * not fail (the host must not run another impl on them); only the
         * caller's current context is left changed. */
        fld_log(FLD_LOG_WARNING,
                "%s: %s: cannot restore the thread's %s context after device %d: %s", impl_id, op,
                runtime_name(), device_id, error_text(back));
    return FLD_OK;
}

/* ------------------------------------------------------------------------ */
/* Catalog arguments -> gpu_api.h                                           */
/* ------------------------------------------------------------------------ */

static void act_args_of(const fld_activation_args *a, int op, struct fld__gpu_act_args *g)
{
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    *g = (struct fld__gpu_act_args){
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

static void norm_args_of(const fld_rms_norm_args *a, bool gemma, struct fld__gpu_norm_args *g)
{
    fld_rows x, out, res = {0}, w = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    /* Not data + byte_offset: an empty weight's are not validated (see fld_tensor_rows). */
    if (a->weight)
        fld_tensor_rows(a->weight, &w);
    const int dt = fld_dtype_index(a->x->dtype);
    *g = (struct fld__gpu_norm_args){
        .dtype = dt,
        .weight_dtype = a->weight ? fld_dtype_index(a->weight->dtype) : dt,
        .residual_dtype = a->residual ? fld_dtype_index(a->residual->dtype) : dt,
        .gemma = gemma,
        .out = out.data,
        .x = x.data,
        .weight = a->weight ? w.data : NULL,
        .residual = a->residual ? res.data : NULL,
        .rows = x.rows,
        .width = x.width,
        .out_stride = out.stride,
        .x_stride = x.stride,
        .residual_stride = a->residual ? res.stride : 0,
        .eps = a->eps,
    };
}

/* The in-place arguments of a call whose query, key and cache geo describes. */
static void rotary_args_from(const fld_rotary_geometry *geo, DLDataType dtype, int64_t head_size,
                             bool is_neox, struct fld__gpu_rotary_args *g)
{
    *g = (struct fld__gpu_rotary_args){
        .dtype = fld_dtype_index(dtype),
        .cache_dtype = fld_dtype_index(geo->cache_dtype),
        .positions = geo->positions,
        .positions_int32 = geo->positions_int32,
        .query = geo->query,
        .key = geo->key,
        .tokens = geo->tokens,
        .head_size = head_size,
        .rot_dim = geo->rot_dim,
        .q_heads = geo->q_heads,
        .q_token_stride = geo->q_token_stride,
        .q_head_stride = geo->q_head_stride,
        .k_heads = geo->key ? geo->k_heads : 0,
        .k_token_stride = geo->k_token_stride,
        .k_head_stride = geo->k_head_stride,
        .cache = geo->cache,
        .cache_stride = geo->cache_stride,
        .max_pos = geo->max_pos,
        .is_neox = is_neox,
    };
}

static void rotary_args_of(const fld_rotary_embedding_args *a, struct fld__gpu_rotary_args *g)
{
    fld_rotary_geometry geo;
    fld_rotary_geometry_of(a, &geo);
    rotary_args_from(&geo, a->query->dtype, a->head_size, a->is_neox, g);
}

/* rotary_embedding_out: the in-place arguments of its inputs, plus the outputs. */
static void rotary_out_args_of(const fld_rotary_embedding_out_args *a,
                               struct fld__gpu_rotary_args *g)
{
    fld_rotary_geometry in, out;
    fld_rotary_out_geometry_of(a, &in, &out);
    rotary_args_from(&in, a->query->dtype, a->head_size, a->is_neox, g);
    g->query_out = out.query;
    g->key_out = in.key ? out.key : NULL;
    g->qo_token_stride = out.q_token_stride;
    g->qo_head_stride = out.q_head_stride;
    g->ko_token_stride = out.k_token_stride;
    g->ko_head_stride = out.k_head_stride;
}

static const char *id_of(int variant)
{
    return variant == FLD_GPU_VECTOR ? vendor_id : reference_id;
}

/* Empty tensors make a call a no-op; a launch with an empty grid is an error on GPUs. */
static int run_act(const void *argp, int op, int variant, const char *name)
{
    const fld_activation_args *a = argp;
    struct fld__gpu_act_args g;
    act_args_of(a, op, &g);
    if (g.rows == 0 || g.d == 0)
        return FLD_OK;
    return launch(CALL_ACT, &g, variant, a->x->device.device_id, id_of(variant), name);
}

static int run_norm(const void *argp, bool gemma, int variant, const char *name)
{
    const fld_rms_norm_args *a = argp;
    struct fld__gpu_norm_args g;
    norm_args_of(a, gemma, &g);
    if (g.rows == 0 || g.width == 0)
        return FLD_OK;
    return launch(CALL_NORM, &g, variant, a->x->device.device_id, id_of(variant), name);
}

static int run_rotary(const void *argp, int variant)
{
    const fld_rotary_embedding_args *a = argp;
    struct fld__gpu_rotary_args g;
    rotary_args_of(a, &g);
    if (g.tokens == 0 || (g.q_heads == 0 && g.k_heads == 0))
        return FLD_OK;
    return launch(CALL_ROTARY, &g, variant, a->query->device.device_id, id_of(variant),
                  FLD_OP_ROTARY_EMBEDDING);
}

static int run_rotary_out(const void *argp, int variant)
{
    const fld_rotary_embedding_out_args *a = argp;
    struct fld__gpu_rotary_args g;
    rotary_out_args_of(a, &g);
    if (g.tokens == 0 || (g.q_heads == 0 && g.k_heads == 0))
        return FLD_OK;
    return launch(CALL_ROTARY, &g, variant, a->query->device.device_id, id_of(variant),
                  FLD_OP_ROTARY_EMBEDDING_OUT);
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
ACT_KERNELS(gelu_quick, FLD_GPU_GELU_QUICK)
ACT_KERNELS(gelu_new, FLD_GPU_GELU_NEW)
ACT_KERNELS(gelu_fast, FLD_GPU_GELU_FAST)

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
static int rotary_out_vector(const void *a)
{
    return run_rotary_out(a, FLD_GPU_VECTOR);
}
static int rotary_out_reference(const void *a)
{
    return run_rotary_out(a, FLD_GPU_REFERENCE);
}

/* vendor.<v> takes 128-bit paths only; other layouts go to reference.<v>. */
static bool act_supports(const void *argp)
{
    struct fld__gpu_act_args g;
    act_args_of(argp, 0, &g);
    return fld__gpu_act_vector_ok(&g);
}

static bool norm_supports(const void *argp)
{
    struct fld__gpu_norm_args g;
    norm_args_of(argp, false, &g);
    return fld__gpu_norm_vector_ok(&g);
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

/* Restores the thread's context after an operation that returned rc_op; the first error wins. */
static int finish(int rc_op, bool pushed)
{
    int back = leave_device(pushed);
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
    bool pushed;
    int rc = enter_device(device_id, &pushed);
    if (rc == 0) {
        void *p = NULL;
        int op = plug.api->malloc(&p, bytes);
        rc = finish(op, pushed);
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
    bool pushed;
    int rc = enter_device(device_id, &pushed);
    if (rc == 0)
        rc = finish(plug.api->free(ptr), pushed);
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
    bool pushed;
    int rc = enter_device(device_id, &pushed);
    if (rc == 0)
        rc = finish(plug.api->memcpy(dst, src, bytes, (int)kind, current_stream()), pushed);
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
    bool pushed;
    int rc = enter_device(device_id, &pushed);
    if (rc == 0)
        rc = finish(plug.api->stream_synchronize(current_stream()), pushed);
    return rc != 0 ? hook_fail("synchronizing the current stream", device_id, rc) : FLD_OK;
}

/*
 * Graphs: the hooks are registered whatever the device code; a table
 * without the four graph functions (an emulator, a runtime without graphs)
 * makes each call FLD_EUNSUPPORTED.
 */
static int no_graphs(void)
{
    if (no_api() != FLD_OK)
        return FLD_EUNAVAILABLE;
    if (plug.api->capture_begin && plug.api->capture_end && plug.api->graph_replay &&
        plug.api->graph_free)
        return FLD_OK;
    fld_set_error("%s: the %s runtime has no graphs", plug.vendor, runtime_name());
    return FLD_EUNSUPPORTED;
}

static int hook_capture_begin(int device_id, void **stream)
{
    if (!stream) {
        fld_set_error("%s: capture_begin: stream is NULL", plug.vendor);
        return FLD_EINVAL;
    }
    *stream = NULL;
    int rc = no_graphs();
    if (rc != FLD_OK)
        return rc;
    bool pushed;
    rc = enter_device(device_id, &pushed);
    if (rc == 0) {
        void *s = NULL;
        int op = plug.api->capture_begin(&s);
        rc = finish(op, pushed);
        if (op == 0 && rc != 0) {
            void *g = NULL;
            plug.api->capture_end(s, 0, &g); /* drops the capture and the stream */
        } else if (rc == 0)
            *stream = s;
    }
    return rc != 0 ? hook_fail("beginning a graph capture", device_id, rc) : FLD_OK;
}

static int hook_capture_end(int device_id, void *stream, int keep, void **graph)
{
    if (graph)
        *graph = NULL;
    if (!stream || (keep && !graph)) {
        fld_set_error("%s: capture_end: %s is NULL", plug.vendor, stream ? "graph" : "stream");
        return FLD_EINVAL;
    }
    int rc = no_graphs();
    if (rc != FLD_OK)
        return rc;
    bool pushed;
    rc = enter_device(device_id, &pushed);
    if (rc == 0) {
        void *g = NULL;
        int op = plug.api->capture_end(stream, keep, &g);
        rc = finish(op, pushed);
        if (op == 0 && rc != 0 && g)
            plug.api->graph_free(g);
        else if (rc == 0 && keep)
            *graph = g;
    }
    return rc != 0 ? hook_fail("ending a graph capture", device_id, rc) : FLD_OK;
}

static int hook_graph_replay(int device_id, void *graph, int replays, double *ns)
{
    if (!graph || replays < 1 || !ns) {
        fld_set_error("%s: graph_replay: %s", plug.vendor,
                      !graph ? "graph is NULL"
                      : !ns  ? "ns is NULL"
                             : "replays must be at least 1");
        return FLD_EINVAL;
    }
    int rc = no_graphs();
    if (rc != FLD_OK)
        return rc;
    bool pushed;
    rc = enter_device(device_id, &pushed);
    if (rc == 0)
        rc = finish(plug.api->graph_replay(graph, replays, ns), pushed);
    return rc != 0 ? hook_fail("replaying a graph", device_id, rc) : FLD_OK;
}

static int hook_graph_free(int device_id, void *graph)
{
    if (!graph)
        return FLD_OK;
    int rc = no_graphs();
    if (rc != FLD_OK)
        return rc;
    bool pushed;
    rc = enter_device(device_id, &pushed);
    if (rc == 0)
        rc = finish(plug.api->graph_free(graph), pushed);
    return rc != 0 ? hook_fail("freeing a graph", device_id, rc) : FLD_OK;
}

/* ------------------------------------------------------------------------ */
/* Registration                                                             */
/* ------------------------------------------------------------------------ */

/*
 * "CUDA runtime 13.0, needs NVIDIA driver >= 580; code for sm_80 ...; devices
 * are probed on first use ...": the runtime the plugin carries and the code
 * it holds. Devices are not counted here (see fld__gpu_plugin_register);
 * `fldispatch list` shows the availability reason once it asked.
 */
static int set_detail(fld_registry *reg)
{
    char head[160] = "";
    int version = 0;
    if (plug.api && plug.api->runtime_version && plug.api->runtime_version(&version) == 0 &&
        version > 0) {
        char v[32];
        version_text(version, v, sizeof v);
        const char *note = plug.runtime_note ? plug.runtime_note(version) : NULL;
        snprintf(head, sizeof head, "%s runtime %s%s%s; ", runtime_name(), v, note ? ", " : "",
                 note ? note : "");
    }
    if (!plug.api && plug.load)
        return fld_registry_set_detail(reg,
                                       "%s; devices are probed on first use (loading does not "
                                       "initialise the driver)",
                                       plug.load_note ? plug.load_note
                                                      : "device code opened on first use");
    if (!plug.api)
        return fld_registry_set_detail(reg, "%s%s", head,
                                       plug.load_error ? plug.load_error : "no device code");
    char code[160] = "";
    if (plug.api->built_archs)
        snprintf(code, sizeof code, "code for %s; ", plug.api->built_archs);
    return fld_registry_set_detail(reg,
                                   "%s%sdevices are probed on first use (loading does not "
                                   "initialise the driver)",
                                   head, code);
}

int fld__gpu_plugin_register(fld_registry *reg, const struct fld__gpu_plugin *p)
{
    plug = *p;
    const char *why = api_mismatch(plug.api);
    if (why) {
        plug.api = NULL;
        plug.load = NULL;
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
    load_done = false;
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
        {FLD_OP_GELU_QUICK, gelu_quick_vector, gelu_quick_reference, act_supports},
        {FLD_OP_GELU_NEW, gelu_new_vector, gelu_new_reference, act_supports},
        {FLD_OP_GELU_FAST, gelu_fast_vector, gelu_fast_reference, act_supports},
        {FLD_OP_RMS_NORM, rms_norm_vector, rms_norm_reference, norm_supports},
        {FLD_OP_GEMMA_RMS_NORM, gemma_rms_norm_vector, gemma_rms_norm_reference, norm_supports},
        /* One thread per pair whatever the layout: every shape is the fast path. */
        {FLD_OP_ROTARY_EMBEDDING, rotary_vector, rotary_reference, NULL},
        {FLD_OP_ROTARY_EMBEDDING_OUT, rotary_out_vector, rotary_out_reference, NULL},
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
            .capture_begin = hook_capture_begin,
            .capture_end = hook_capture_end,
            .graph_replay = hook_graph_replay,
            .graph_free = hook_graph_free,
        };
        rc = fld_registry_set_device_hooks(reg, &hooks);
    }
    if (rc == FLD_OK)
        rc = set_detail(reg);
    return rc;
}
