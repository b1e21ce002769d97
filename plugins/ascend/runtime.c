/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CANN discovery and the per-thread device memory of the ascend plugin.
 *
 * Nothing here needs the CANN SDK to build: the libraries are opened with
 * dlopen() when the plugin registers, and a machine without them gets a
 * plugin that loads, registers its implementations and reports them
 * unavailable with the loader's reason.
 *
 * Library layout of a CANN toolkit (<home>/lib64):
 *   libascendcl.so  AscendCL runtime: aclInit, aclrt* (devices, memory, streams)
 *   libnnopbase.so  aclnn tensor descriptors: aclCreateTensor, aclDestroyTensor
 *   libopapi.so     the aclnn operators: aclnn*GetWorkspaceSize, aclnn*
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ascend.h"

#define DEFAULT_HOME "/usr/local/Ascend/ascend-toolkit/latest"

struct fld_ascend_api fld__acl;

enum { LIB_ACL, LIB_NNOPBASE, LIB_OPAPI, LIB_COUNT };
static const char *const lib_names[LIB_COUNT] = {"libascendcl.so", "libnnopbase.so", "libopapi.so"};

static void *libs[LIB_COUNT];
static bool loaded;
static char home[1024];
/* Why the plugin cannot run; static storage for fld_available_fn. */
static char reason_text[1536];

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t init_pid; /* the process aclInit ran in; 0 = not yet */
static bool init_ok;

const char *fld__ascend_home(void)
{
    return home;
}

static bool resolve(int lib, const char *name, void **slot, bool required)
{
    dlerror();
    void *p = dlsym(libs[lib], name);
    if (!p && required) {
        const char *err = dlerror();
        snprintf(reason_text, sizeof reason_text,
                 "CANN runtime incomplete: %s/lib64/%s lacks %s (%s)", home, lib_names[lib], name,
                 err ? err : "symbol not found");
        return false;
    }
    *slot = p;
    return true;
}

bool fld__ascend_load(void)
{
    const char *env = getenv("ASCEND_HOME_PATH");
    snprintf(home, sizeof home, "%s", env && env[0] ? env : DEFAULT_HOME);
    size_t len = strlen(home);
    while (len > 1 && home[len - 1] == '/')
        home[--len] = '\0';

    for (int i = 0; i < LIB_COUNT; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/lib64/%s", home, lib_names[i]);
        libs[i] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!libs[i]) {
            const char *err = dlerror();
            snprintf(reason_text, sizeof reason_text, "CANN runtime not found: %s%s",
                     err ? err : path, env && env[0] ? "" : " (set ASCEND_HOME_PATH)");
            goto fail_close;
        }
    }

    bool ok = true;
#define FLD_ACL_RT(ret, name, params)                                                              \
    ok = ok && resolve(LIB_ACL, #name, (void **)&fld__acl.name, true);
#define FLD_ACL_TS(ret, name, params)                                                              \
    ok = ok && resolve(LIB_NNOPBASE, #name, (void **)&fld__acl.name, true);
#define FLD_ACL_OP(ret, name, params)                                                              \
    ok = ok && resolve(LIB_OPAPI, #name, (void **)&fld__acl.name, true);
    FLD_ACL_RUNTIME_FUNCS(FLD_ACL_RT)
    FLD_ACL_TENSOR_FUNCS(FLD_ACL_TS)
    FLD_ACL_OP_FUNCS(FLD_ACL_OP)
#undef FLD_ACL_RT
#undef FLD_ACL_TS
#undef FLD_ACL_OP
    if (!ok)
        goto fail_close;
#define FLD_ACL_OPT(ret, name, params) resolve(LIB_OPAPI, #name, (void **)&fld__acl.name, false);
    FLD_ACL_OPTIONAL_OP_FUNCS(FLD_ACL_OPT)
#undef FLD_ACL_OPT
    resolve(LIB_ACL, "aclGetRecentErrMsg", (void **)&fld__acl.aclGetRecentErrMsg, false);
    resolve(LIB_NNOPBASE, "aclDestroyAclOpExecutor", (void **)&fld__acl.aclDestroyAclOpExecutor,
            false);

    /* Devices are counted when availability is first asked, not here: a
     * process that loads plugins and then forks must not inherit an
     * initialised runtime. */
    loaded = true;
    return true;

fail_close:
    /* Nothing ran in them yet: close what opened. */
    for (int i = 0; i < LIB_COUNT; i++) {
        if (libs[i])
            dlclose(libs[i]);
        libs[i] = NULL;
    }
    memset(&fld__acl, 0, sizeof fld__acl);
    return false;
}

bool fld__ascend_available(const char **reason)
{
    if (!loaded) {
        *reason = reason_text;
        return false;
    }
    pthread_mutex_lock(&init_lock);
    /* Again in a forked child: the host asks once per process. */
    if (init_pid != getpid()) {
        acl_error rc = fld__acl.aclInit(NULL);
        init_ok = rc == ACL_OK || rc == ACL_ERR_REPEAT_INIT;
        if (!init_ok)
            snprintf(reason_text, sizeof reason_text, "CANN at %s: aclInit failed: error %d%s%s",
                     home, rc, fld__acl.aclGetRecentErrMsg ? ": " : "",
                     fld__acl.aclGetRecentErrMsg ? fld__acl.aclGetRecentErrMsg() : "");
        if (init_ok) {
            uint32_t n = 0;
            acl_error crc = fld__acl.aclrtGetDeviceCount(&n);
            if (crc != ACL_OK)
                snprintf(reason_text, sizeof reason_text,
                         "CANN at %s: aclrtGetDeviceCount failed: error %d", home, crc);
            else if (n == 0)
                snprintf(reason_text, sizeof reason_text, "no Ascend device (CANN at %s)", home);
            init_ok = crc == ACL_OK && n > 0;
        }
        init_pid = getpid();
    }
    bool ok = init_ok;
    pthread_mutex_unlock(&init_lock);
    if (!ok)
        *reason = reason_text;
    return ok;
}

int fld__ascend_fail(const struct fld_ascend_call *c, const char *func, int status)
{
    const char *msg = fld__acl.aclGetRecentErrMsg ? fld__acl.aclGetRecentErrMsg() : NULL;
    fld_set_error("%s: %s: %s failed: error %d (%s)", c ? c->impl : "vendor.ascend",
                  c ? c->op : "device", func, status, msg && msg[0] ? msg : "no detail from CANN");
    return FLD_EIMPL;
}

/* ------------------------------------------------------------------------ */
/* Per-thread scratch: aclnn workspaces and intermediate tensors            */
/* ------------------------------------------------------------------------ */

/*
 * Each thread keeps one growing workspace and one growing buffer area on the
 * device it used last, so a call allocates nothing once warm. The memory is
 * reused by the next call of the same thread; before that reuse moves to
 * another stream, or before memory is replaced, the stream that used it is
 * synchronised, so no queued operator still reads what is overwritten or
 * freed. All scratch is listed globally and freed at plugin unload.
 */
struct fld_ascend_scratch {
    struct fld_ascend_scratch *next;
    pid_t pid;
    int device;
    bool used;
    acl_stream last_stream;
    void *ws;
    size_t ws_size;
    void *buf;
    size_t buf_size;
};

/*
 * The calling thread's scratch, through a pthread key rather than a
 * _Thread_local variable: this object is dlclosed at fld_shutdown() while
 * threads live on, and a static TLS block of an unloaded object is left
 * dangling in every thread's TLS vector (LeakSanitizer's scan of it crashes).
 */
static pthread_key_t scratch_key;
static _Atomic bool scratch_key_ok; /* created; false again after unload */
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fld_ascend_scratch *scratch_all;

static struct fld_ascend_scratch *thread_scratch(void)
{
    if (!atomic_load(&scratch_key_ok)) {
        pthread_mutex_lock(&scratch_lock);
        if (!atomic_load(&scratch_key_ok) && pthread_key_create(&scratch_key, NULL) == 0)
            atomic_store(&scratch_key_ok, true);
        pthread_mutex_unlock(&scratch_lock);
        if (!atomic_load(&scratch_key_ok))
            return NULL;
    }
    struct fld_ascend_scratch *s = pthread_getspecific(scratch_key);
    if (s && s->pid == getpid())
        return s;
    /* A forked child must not free its parent's device memory: start afresh. */
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->pid = getpid();
    s->device = -1;
    pthread_mutex_lock(&scratch_lock);
    s->next = scratch_all;
    scratch_all = s;
    pthread_mutex_unlock(&scratch_lock);
    pthread_setspecific(scratch_key, s);
    return s;
}

/* Waits for the stream that last used s, so its memory may be reused or freed. */
static int scratch_quiesce(const struct fld_ascend_call *c, struct fld_ascend_scratch *s)
{
    if (!s->used)
        return FLD_OK;
    acl_error rc = fld__acl.aclrtSynchronizeStream(s->last_stream);
    if (rc != ACL_OK)
        return fld__ascend_fail(c, "aclrtSynchronizeStream", rc);
    s->used = false;
    return FLD_OK;
}

static void scratch_release(struct fld_ascend_scratch *s)
{
    if (s->ws)
        fld__acl.aclrtFree(s->ws);
    if (s->buf)
        fld__acl.aclrtFree(s->buf);
    s->ws = s->buf = NULL;
    s->ws_size = s->buf_size = 0;
}

/* Makes *area at least need bytes, on the call's device. */
static int scratch_grow(const struct fld_ascend_call *c, void **area, size_t *size, size_t need)
{
    if (need <= *size)
        return FLD_OK;
    int rc = scratch_quiesce(c, c->scratch);
    if (rc != FLD_OK)
        return rc;
    if (*area)
        fld__acl.aclrtFree(*area);
    *area = NULL;
    *size = 0;
    /* Round up so a slowly growing series of calls reallocates rarely. */
    size_t want = need < 65536 ? 65536 : need + need / 4;
    void *p = NULL;
    acl_error e = fld__acl.aclrtMalloc(&p, want, ACL_MALLOC_HUGE_FIRST);
    if (e != ACL_OK || !p)
        return fld__ascend_fail(c, "aclrtMalloc", e != ACL_OK ? e : -1);
    *area = p;
    *size = want;
    return FLD_OK;
}

/*
 * Makes device_id current for one call. When it already is, nothing
 * changes. Otherwise the thread's current context (aclrtGetCurrentContext;
 * none on a thread that never chose a device) is saved and leave_device()
 * makes it current again, so that the caller's later ACL calls still go to
 * the device it chose. A thread that had no context keeps device_id's: ACL
 * has no way back to "none".
 */
static int enter_device(const struct fld_ascend_call *c, int device_id,
                        struct fld_ascend_device_save *save)
{
    save->switched = false;
    save->prev = NULL;
    int32_t cur = -1;
    /* Without a current device aclrtGetDevice fails; then set one. */
    if (fld__acl.aclrtGetDevice(&cur) == ACL_OK && cur == device_id)
        return FLD_OK;
    acl_context prev = NULL;
    if (fld__acl.aclrtGetCurrentContext(&prev) != ACL_OK)
        prev = NULL;
    acl_error rc = fld__acl.aclrtSetDevice(device_id);
    if (rc != ACL_OK)
        return fld__ascend_fail(c, "aclrtSetDevice", rc);
    save->switched = true;
    save->prev = prev;
    return FLD_OK;
}

static void leave_device(struct fld_ascend_device_save *save)
{
    if (save->switched && save->prev) {
        acl_error rc = fld__acl.aclrtSetCurrentContext(save->prev);
        if (rc != ACL_OK)
            /* The work is queued; only the caller's current device is left changed. */
            fld_log(FLD_LOG_WARNING,
                    "ascend: cannot make the thread's previous context current again "
                    "(aclrtSetCurrentContext: error %d)",
                    rc);
    }
    save->switched = false;
    save->prev = NULL;
}

int fld__ascend_begin(struct fld_ascend_call *c, const char *op, DLDevice device)
{
    return fld__ascend_begin_as(c, "vendor.ascend", op, device);
}

int fld__ascend_begin_as(struct fld_ascend_call *c, const char *impl, const char *op,
                         DLDevice device)
{
    memset(c, 0, sizeof *c);
    c->impl = impl;
    c->op = op;
    c->stream = fld_get_stream(FLD_DEVICE_ASCEND);
    int rc = enter_device(c, device.device_id, &c->device_save);
    if (rc != FLD_OK)
        return rc;
    struct fld_ascend_scratch *s = thread_scratch();
    if (!s) {
        fld_set_error("%s: %s: out of memory", impl, op);
        rc = FLD_ENOMEM;
        goto fail;
    }
    c->scratch = s;
    if (s->device != device.device_id && (s->ws || s->buf)) {
        rc = scratch_quiesce(c, s);
        if (rc != FLD_OK)
            goto fail;
        scratch_release(s);
    }
    s->device = device.device_id;
    if (s->used && s->last_stream != c->stream) {
        rc = scratch_quiesce(c, s);
        if (rc != FLD_OK)
            goto fail;
    }
    return FLD_OK;
fail:
    leave_device(&c->device_save);
    return rc;
}

void fld__ascend_end(struct fld_ascend_call *c)
{
    for (int i = 0; i < c->n_tensors; i++)
        fld__acl.aclDestroyTensor(c->tensors[i]);
    c->n_tensors = 0;
    for (int i = 0; i < c->n_scalars; i++)
        fld__acl.aclDestroyScalar(c->scalars[i]);
    c->n_scalars = 0;
    leave_device(&c->device_save);
}

acl_scalar *fld__ascend_scalar(struct fld_ascend_call *c, float value)
{
    if (c->n_scalars == FLD_ASCEND_MAX_SCALARS) {
        fld_set_error("%s: %s: too many scalar descriptors", c->impl, c->op);
        return NULL;
    }
    /* aclCreateScalar copies the value out of our host variable. */
    acl_scalar *s = fld__acl.aclCreateScalar(&value, ACL_DT_FLOAT);
    if (!s) {
        fld__ascend_fail(c, "aclCreateScalar", -1);
        return NULL;
    }
    c->scalars[c->n_scalars++] = s;
    /* cppcheck-suppress returnDanglingLifetime ; s is CANN's own copy, not &value */
    return s;
}

void *fld__ascend_buffers(struct fld_ascend_call *c, size_t bytes)
{
    struct fld_ascend_scratch *s = c->scratch;
    if (scratch_grow(c, &s->buf, &s->buf_size, bytes) != FLD_OK)
        return NULL;
    return s->buf;
}

int fld__ascend_launch(struct fld_ascend_call *c, const char *name, acl_run_fn run, uint64_t ws,
                       acl_executor *executor)
{
    struct fld_ascend_scratch *s = c->scratch;
    int rc = scratch_grow(c, &s->ws, &s->ws_size, (size_t)ws);
    if (rc != FLD_OK) {
        /* The executor never runs; release it where the runtime lets us. */
        if (fld__acl.aclDestroyAclOpExecutor)
            fld__acl.aclDestroyAclOpExecutor(executor);
        return rc;
    }
    acl_error e = run(ws ? s->ws : NULL, ws, executor, c->stream);
    s->used = true;
    s->last_stream = c->stream;
    return e == ACL_OK ? FLD_OK : fld__ascend_fail(c, name, e);
}

int fld__ascend_dtype(DLDataType t)
{
    switch (fld_dtype_index(t)) {
    case 0:
        return ACL_DT_FLOAT;
    case 1:
        return ACL_DT_FLOAT16;
    case 2:
        return ACL_DT_BF16;
    default:
        return -1;
    }
}

acl_tensor *fld__ascend_tensor(struct fld_ascend_call *c, int ndim, const int64_t *dims,
                               const int64_t *strides, int acl_dtype, const void *data)
{
    if (c->n_tensors == FLD_ASCEND_MAX_TENSORS || ndim > FLD_ASCEND_MAX_DIMS) {
        fld_set_error("%s: %s: too many tensor descriptors", c->impl, c->op);
        return NULL;
    }
    /* Storage: the elements from the first of the view to its last. */
    int64_t extent = 1;
    for (int i = 0; i < ndim; i++)
        extent += (dims[i] - 1) * strides[i];
    acl_tensor *t = fld__acl.aclCreateTensor(dims, (uint64_t)ndim, acl_dtype, strides, 0,
                                             ACL_FMT_ND, &extent, 1, (void *)data);
    if (!t) {
        fld__ascend_fail(c, "aclCreateTensor", -1);
        return NULL;
    }
    c->tensors[c->n_tensors++] = t;
    /* cppcheck-suppress returnDanglingLifetime ; CANN copies the dims, strides and extent */
    return t;
}

/* ------------------------------------------------------------------------ */
/* Device hooks                                                             */
/* ------------------------------------------------------------------------ */

int fld__ascend_hook_alloc(int device_id, size_t bytes, void **ptr)
{
    *ptr = NULL;
    struct fld_ascend_device_save save;
    int rc = enter_device(NULL, device_id, &save);
    if (rc != FLD_OK)
        return rc;
    void *p = NULL;
    acl_error e = fld__acl.aclrtMalloc(&p, bytes, ACL_MALLOC_HUGE_FIRST);
    leave_device(&save);
    if (e != ACL_OK || !p)
        return fld__ascend_fail(NULL, "aclrtMalloc", e != ACL_OK ? e : -1);
    *ptr = p;
    return FLD_OK;
}

int fld__ascend_hook_free(int device_id, void *ptr)
{
    if (!ptr)
        return FLD_OK;
    acl_error e = fld__acl.aclrtFree(ptr);
    return e == ACL_OK ? FLD_OK : fld__ascend_fail(NULL, "aclrtFree", e);
}

static int copy_on_device(void *dst, const void *src, size_t bytes, fld_copy_kind kind);

int fld__ascend_hook_copy(int device_id, void *dst, const void *src, size_t bytes,
                          fld_copy_kind kind)
{
    struct fld_ascend_device_save save;
    int rc = enter_device(NULL, device_id, &save);
    if (rc != FLD_OK)
        return rc;
    rc = copy_on_device(dst, src, bytes, kind);
    leave_device(&save);
    return rc;
}

static int copy_on_device(void *dst, const void *src, size_t bytes, fld_copy_kind kind)
{
    acl_error e;
    switch (kind) {
    case FLD_COPY_HOST_TO_DEVICE:
        e = fld__acl.aclrtMemcpy(dst, bytes, src, bytes, ACL_COPY_HOST_TO_DEVICE);
        return e == ACL_OK ? FLD_OK : fld__ascend_fail(NULL, "aclrtMemcpy", e);
    case FLD_COPY_DEVICE_TO_HOST:
        /* Work queued on the stream may still write src. */
        e = fld__acl.aclrtSynchronizeStream(fld_get_stream(FLD_DEVICE_ASCEND));
        if (e != ACL_OK)
            return fld__ascend_fail(NULL, "aclrtSynchronizeStream", e);
        e = fld__acl.aclrtMemcpy(dst, bytes, src, bytes, ACL_COPY_DEVICE_TO_HOST);
        return e == ACL_OK ? FLD_OK : fld__ascend_fail(NULL, "aclrtMemcpy", e);
    case FLD_COPY_DEVICE_TO_DEVICE:
        e = fld__acl.aclrtMemcpyAsync(dst, bytes, src, bytes, ACL_COPY_DEVICE_TO_DEVICE,
                                      fld_get_stream(FLD_DEVICE_ASCEND));
        return e == ACL_OK ? FLD_OK : fld__ascend_fail(NULL, "aclrtMemcpyAsync", e);
    }
    fld_set_error("vendor.ascend: copy: unknown copy kind %d", (int)kind);
    return FLD_EINVAL;
}

int fld__ascend_hook_synchronize(int device_id)
{
    struct fld_ascend_device_save save;
    int rc = enter_device(NULL, device_id, &save);
    if (rc != FLD_OK)
        return rc;
    acl_error e = fld__acl.aclrtSynchronizeStream(fld_get_stream(FLD_DEVICE_ASCEND));
    leave_device(&save);
    return e == ACL_OK ? FLD_OK : fld__ascend_fail(NULL, "aclrtSynchronizeStream", e);
}

/* ------------------------------------------------------------------------ */
/* Unload                                                                   */
/* ------------------------------------------------------------------------ */

void fld__ascend_unload(void)
{
    /* Other threads' values are dropped with the key; the list frees them. */
    pthread_mutex_lock(&scratch_lock);
    if (atomic_load(&scratch_key_ok)) {
        pthread_key_delete(scratch_key);
        atomic_store(&scratch_key_ok, false);
    }
    struct fld_ascend_scratch *s = scratch_all;
    scratch_all = NULL;
    pthread_mutex_unlock(&scratch_lock);
    while (s) {
        struct fld_ascend_scratch *next = s->next;
        /* Memory of a parent process is not ours to free. */
        if (loaded && s->pid == getpid()) {
            if (s->used)
                fld__acl.aclrtSynchronizeStream(s->last_stream);
            scratch_release(s);
        }
        free(s);
        s = next;
    }
    /*
     * The CANN libraries stay loaded: the runtime keeps process-wide state
     * (aclInit happens once per process) and unloading it is not supported.
     */
    loaded = false;
}
