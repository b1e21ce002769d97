/*
 * fldispatch bench [OP...]: per op, implementation, dtype, shape and thread
 * count, the time of one call through the dispatcher, the bytes it moves
 * per second, and that rate as a share of the memory bandwidth a STREAM
 * triad reaches in the same run (bench_stream.c).
 *
 * Method (bench/README.md says the same for users):
 *   - every call goes through fld_call() with the op's handle, under a
 *     global policy that pins the op to one implementation ("op=impl:ID",
 *     strict), so the time includes validation and dispatch; the global
 *     policy rather than a scoped push, because a thread with scoped
 *     overrides leaves the cached fast path;
 *   - a line is calibrated once (calls doubled until a batch lasts 1/8 of
 *     the batch time), then --reps batches of calls sized to last >= 20 ms
 *     (2 ms with --quick; at least one call) are timed; the median of the
 *     per-call times is reported;
 *   - bytes are the compulsory traffic: every tensor read once and every
 *     tensor written once, nothing for write-allocate (the STREAM
 *     convention), so GB/s is comparable with STREAM's figure;
 *   - elements are what the op computes: T x H outputs for the activations
 *     and norms (the fused residual's update included), T x (query heads +
 *     key heads) x rot_dim rotated values for rotary; per second and per
 *     CPU cycle (the clock of bench_clock.c, measured once), so that a
 *     kernel that is compute-bound shows as such whatever the memory;
 *   - each --threads value re-initialises the library with
 *     VLLM_FL_CPU_THREADS set (the cpu plugin reads it when it registers);
 *     the caller's value is restored at the end;
 *   - STREAM runs before the first kernel and again after each op of each
 *     thread count, with every thread count the report needs; the figure
 *     for a thread count is the median over those runs (each run keeps the
 *     best of its repetitions, as STREAM does), so a noisy neighbour that
 *     slows part of the run weighs on both sides alike.
 *
 * Devices other than the CPU (--device cuda|rocm|ascend): the tensors are
 * generated on the host as for the CPU and copied once to device memory
 * (fld_device_alloc/copy, the device plugin's hooks); every timed batch
 * ends with fld_device_synchronize() inside the timed interval, so kernel
 * launches are not mistaken for kernel runs. So that the figure is the
 * device memory's and not its cache's (a 4096 x 4096 bf16 case fits in an
 * H100's 50 MB L2), a case smaller than DEVICE_COLD_BYTES gets several
 * copies of its tensors on the device, up to that size in all (at most
 * DEVICE_MAX_SETS), and consecutive calls take them in turn: each call
 * reads inputs the previous ones did not touch. The ceiling is a
 * device-to-device copy of a large buffer (bench_d2d.c), measured before
 * the first kernel and after each op like STREAM, median over those runs;
 * there is no thread count (0 in the results) and no STREAM.
 *
 * Why one file of about 1,550 lines: the cases, their tensors, the timing
 * and the report share the per-line record. The report (text and JSON) and
 * the targets printed for this project's own issues are the parts to move
 * out next (core/README.md lists it); until then they stay here, below the
 * timing code.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "device_tensors.h"
#include "json.h"
#include "tensors.h"

static const char *const op_names[] = {
    FLD_OP_SILU_AND_MUL, FLD_OP_MUL_AND_SILU,   FLD_OP_GELU_AND_MUL,     FLD_OP_GELU_TANH_AND_MUL,
    FLD_OP_RMS_NORM,     FLD_OP_GEMMA_RMS_NORM, FLD_OP_ROTARY_EMBEDDING, NULL};

#define N_OPS    7
#define N_DTYPES 3 /* TOOL_F32, TOOL_F16, TOOL_BF16: the FLD_DTYPE_MASK_* bit order */

const char *const *bench_op_names(void)
{
    return op_names;
}

enum family { FAM_ACT, FAM_NORM, FAM_ROTARY };

static enum family op_family(int op)
{
    return op <= 3 ? FAM_ACT : op <= 5 ? FAM_NORM : FAM_ROTARY;
}

#define ROTARY_HEAD_SIZE 128
#define ROTARY_BASE      10000.0
#define NORM_EPS         1e-6f
#define BATCH_NS         20e6
#define QUICK_BATCH_NS   2e6
#define ENV_THREADS      "VLLM_FL_CPU_THREADS"

/* Targets of issue 4; printed as met or missed, never part of the exit status. */
#define TARGET_TOKENS    4096
#define TARGET_HIDDEN    4096
#define TARGET_BW_SHARE  0.80
#define TARGET_SCALING   1.7
#define TARGET_DECODE_US 0.5
/* Issue 5 on devices: 4096 x 4096 (rotary 4096 x 32 x 128), every dtype, >= 85% of the d2d copy. */
#define TARGET_DEVICE_BW_SHARE 0.85

/* ---- implementations ------------------------------------------------------- */

struct impl_entry {
    char op[64];
    char id[128];
    char reason[256]; /* why unavailable */
    uint32_t devices, dtypes;
    bool available;
};

struct impl_table {
    struct impl_entry *v;
    size_t n, cap;
    bool oom;
};

static int collect_impl(const fld_impl_info *info, void *user)
{
    struct impl_table *t = user;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 32;
        struct impl_entry *v = realloc(t->v, cap * sizeof *v);
        if (!v) {
            t->oom = true;
            return 1;
        }
        t->v = v;
        t->cap = cap;
    }
    struct impl_entry *e = &t->v[t->n++];
    snprintf(e->op, sizeof e->op, "%s", info->op);
    snprintf(e->id, sizeof e->id, "%s", info->impl_id);
    snprintf(e->reason, sizeof e->reason, "%s", info->unavailable_reason);
    e->devices = info->devices;
    e->dtypes = info->dtypes;
    e->available = info->available;
    return 0;
}

static bool load_impls(struct impl_table *t)
{
    t->n = 0;
    fld_foreach_impl(collect_impl, t);
    if (t->oom)
        fprintf(stderr, "fldispatch bench: out of memory\n");
    return !t->oom;
}

static const struct impl_entry *find_impl(const struct impl_table *t, const char *op,
                                          const char *id)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].op, op) == 0 && strcmp(t->v[i].id, id) == 0)
            return &t->v[i];
    return NULL;
}

/* ---- the cpu plugin's line ---------------------------------------------------- */

struct plugin_line {
    char detail[512];
    char reason[256];
    bool found;
};

static int find_cpu_plugin(const fld_plugin_info *info, void *user)
{
    struct plugin_line *p = user;
    if (strcmp(info->name, "cpu") != 0)
        return 0;
    p->found = true;
    snprintf(p->detail, sizeof p->detail, "%s", info->detail ? info->detail : "");
    snprintf(p->reason, sizeof p->reason, "%s", info->reason ? info->reason : "");
    return 1;
}

/* The first word after "isa " in the detail ("avx512"), or "unknown". */
static void detail_isa(const char *detail, char *buf, size_t size)
{
    const char *p = strstr(detail, "isa ");
    if (!p) {
        snprintf(buf, size, "unknown");
        return;
    }
    p += 4;
    size_t len = strcspn(p, " ;,()");
    snprintf(buf, size, "%.*s", (int)len, p);
}

/* N of "N thread(s)" in the detail, or 0. */
static int detail_threads(const char *detail)
{
    for (const char *p = strstr(detail, " thread"); p; p = strstr(p + 1, " thread")) {
        const char *q = p;
        while (q > detail && isdigit((unsigned char)q[-1]))
            q--;
        if (q < p)
            return atoi(q);
    }
    return 0;
}

/* ---- policy --------------------------------------------------------------------- */

/*
 * Lets every registered implementation be pinned whatever the environment
 * filters, and makes a pinned call fail instead of falling back.
 */
static bool open_policy(void)
{
    static const char *const fields[][2] = {
        {"enabled", "1"},           {"strict", "1"},        {"use_flaggems", "1"},
        {"allow_vendors", NULL},    {"deny_vendors", NULL}, {"flagos_whitelist", NULL},
        {"flagos_blacklist", NULL}, {"oot_enabled", "1"},   {"oot_whitelist", NULL},
        {"oot_blacklist", NULL},    {"custom_ops", "all"},  {"per_op", NULL},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (fld_policy_set(fields[i][0], fields[i][1]) != FLD_OK) {
            fprintf(stderr, "fldispatch bench: cannot set policy '%s': %s\n", fields[i][0],
                    fld_last_error());
            return false;
        }
    }
    return true;
}

/* Pins op to impl and checks that the library selects it; else a message in err. */
static bool pin_impl(const char *op, const char *impl, int device, int dtype, char *err,
                     size_t size)
{
    char spec[256];
    snprintf(spec, sizeof spec, "%s=impl:%s", op, impl);
    if (fld_policy_set("per_op", spec) != FLD_OK) {
        snprintf(err, size, "cannot pin %s: %s", spec, fld_last_error());
        return false;
    }
    const char *selected = NULL;
    int rc = fld_resolve(op, device, tool_dlpack_dtype(dtype), &selected);
    if (rc != FLD_OK || !selected || strcmp(selected, impl) != 0) {
        snprintf(err, size,
                 "%s pinned, but %s (%s) resolves to %s (%s); a dispatch manifest "
                 "(VLLM_FL_MANIFEST) overrides pins",
                 impl, op, tool_dtype_name(dtype), selected ? selected : "nothing",
                 rc != FLD_OK ? fld_last_error() : "policy ignored");
        return false;
    }
    return true;
}

/* ---- cases: the tensors of one (op family, dtype, shape) ------------------------ */

/* Device tensor sets of a case add up to this, so that calls taking them in
 * turn miss any device cache: larger than the L2 of current GPUs (H100 50 MB,
 * B200 126 MB) and MI300X's 256 MB Infinity Cache. */
#define DEVICE_COLD_BYTES (512.0 * 1024 * 1024)
#define DEVICE_MAX_SETS   64

/* The arguments of one call on one set of device tensors. */
union case_args {
    fld_activation_args act;
    fld_rms_norm_args norm;
    fld_rotary_embedding_args rot;
};

struct bench_case {
    enum family family;
    int dtype;
    int64_t tokens, hidden;
    bool residual;
    int heads; /* rotary: query heads, also key heads */
    struct tool_tensor x, out, weight, res, positions, query, key, cache;
    /* devices other than the CPU: the copies the calls use, in the order above */
    struct dev_tensor dev[8];
    int device_type;
    fld_activation_args act;
    fld_rms_norm_args norm;
    fld_rotary_embedding_args rot;
    const void *args;
    /* devices: the sets calls take in turn (set 0 is dev[] and args) */
    int n_sets, n_extra;           /* sets in use; extra sets allocated */
    struct dev_tensor (*extra)[8]; /* sets 1 .. n_sets - 1 */
    union case_args *extra_args;
    const void *set_args[DEVICE_MAX_SETS];
    double bytes;    /* compulsory traffic of one call */
    double elements; /* values the op computes per call (the file's header) */
    char shape[48];
};

/*
 * Random values in [lo, hi): a block is generated once and repeated over
 * the storage, which is much faster than drawing every element of a
 * 128 MiB tensor and makes no difference to the timing. The block length
 * is odd, so rows do not all start alike.
 */
static bool fill_random(struct tool_tensor *tt, uint64_t *seed, float lo, float hi)
{
    enum { BLOCK = 65521 };
    int64_t n = tool_tensor_numel(tt);
    if (n <= BLOCK) {
        tool_tensor_fill_uniform(tt, seed, lo, hi);
        return true;
    }
    struct tool_tensor block;
    if (!tool_tensor_alloc(&block, tt->dtype, 1, (const int64_t[]){BLOCK}, 0))
        return false;
    tool_tensor_fill_uniform(&block, seed, lo, hi);
    size_t block_bytes = block.bytes;
    char *dst = tt->alloc;
    for (size_t off = 0; off < tt->bytes; off += block_bytes) {
        size_t len = tt->bytes - off < block_bytes ? tt->bytes - off : block_bytes;
        memcpy(dst + off, block.alloc, len);
    }
    tool_tensor_free(&block);
    return true;
}

/* The host tensors of a case, in the order of bench_case.dev. */
static struct tool_tensor *case_tensor(struct bench_case *c, int i)
{
    struct tool_tensor *const t[8] = {&c->x,         &c->out,   &c->weight, &c->res,
                                      &c->positions, &c->query, &c->key,    &c->cache};
    return t[i];
}

/* The device copy in set (dev[] or an extra set) standing for a host view of the case. */
static DLTensor *device_view(struct bench_case *c, struct dev_tensor *set, DLTensor *host)
{
    for (int i = 0; host && i < 8; i++)
        if (host == &case_tensor(c, i)->t)
            return &set[i].t;
    return host;
}

/* The arguments of the case (host views) pointed at set's copies. */
static void args_on_set(struct bench_case *c, struct dev_tensor *set, union case_args *a)
{
    if (c->args == &c->act) {
        a->act = c->act;
        a->act.out = device_view(c, set, c->act.out);
        a->act.x = device_view(c, set, (DLTensor *)c->act.x);
    } else if (c->args == &c->norm) {
        a->norm = c->norm;
        a->norm.out = device_view(c, set, c->norm.out);
        a->norm.x = device_view(c, set, (DLTensor *)c->norm.x);
        a->norm.weight = device_view(c, set, (DLTensor *)c->norm.weight);
        a->norm.residual = device_view(c, set, c->norm.residual);
    } else {
        a->rot = c->rot;
        a->rot.positions = device_view(c, set, (DLTensor *)c->rot.positions);
        a->rot.query = device_view(c, set, c->rot.query);
        a->rot.key = device_view(c, set, c->rot.key);
        a->rot.cos_sin_cache = device_view(c, set, (DLTensor *)c->rot.cos_sin_cache);
    }
}

/* Uploads the case's host tensors into set; FLD_OK or the library's status. */
static int upload_set(struct bench_case *c, struct dev_tensor *set, DLDevice dev)
{
    for (int i = 0; i < 8; i++) {
        struct tool_tensor *tt = case_tensor(c, i);
        if (!tt->alloc)
            continue;
        int rc = dev_tensor_upload(&set[i], dev, tt, 0);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

/*
 * Copies the case's tensors to the device -- as many sets as DEVICE_COLD_BYTES
 * asks (fewer if device memory runs out after the first) -- points the
 * arguments at the copies and frees the host storage. false after a message
 * on stderr.
 */
static bool case_to_device(struct bench_case *c, int device_type)
{
    const DLDevice dev = {(DLDeviceType)device_type, 0};
    if (upload_set(c, c->dev, dev) != FLD_OK) {
        fprintf(stderr, "fldispatch bench: copying the %s tensors of shape %s to %s: %s\n",
                tool_dtype_name(c->dtype), c->shape, fld_device_name(device_type),
                fld_last_error());
        return false;
    }
    double set_bytes = 0;
    for (int i = 0; i < 8; i++)
        set_bytes += (double)case_tensor(c, i)->bytes;
    int want = set_bytes > 0 ? (int)ceil(DEVICE_COLD_BYTES / set_bytes) : 1;
    want = want < 1 ? 1 : want > DEVICE_MAX_SETS ? DEVICE_MAX_SETS : want;
    c->n_sets = 1;
    if (want > 1) {
        c->extra = calloc((size_t)(want - 1), sizeof *c->extra);
        c->extra_args = calloc((size_t)(want - 1), sizeof *c->extra_args);
        if (!c->extra || !c->extra_args) {
            fprintf(stderr, "fldispatch bench: out of memory\n");
            return false;
        }
        c->n_extra = want - 1;
        while (c->n_sets < want && upload_set(c, c->extra[c->n_sets - 1], dev) == FLD_OK) {
            args_on_set(c, c->extra[c->n_sets - 1], &c->extra_args[c->n_sets - 1]);
            c->set_args[c->n_sets] = &c->extra_args[c->n_sets - 1];
            c->n_sets++;
        }
        /* A set that did not fit is freed (case_free frees the rest); fewer sets still run. */
        if (c->n_sets < want)
            for (int i = 0; i < 8; i++)
                dev_tensor_free(&c->extra[c->n_sets - 1][i]);
    }
    /* Set 0: the case's own argument structs, pointed at dev[]. */
    union case_args first;
    args_on_set(c, c->dev, &first);
    if (c->args == &c->act)
        c->act = first.act;
    else if (c->args == &c->norm)
        c->norm = first.norm;
    else
        c->rot = first.rot;
    c->set_args[0] = c->args;
    c->device_type = device_type;
    for (int i = 0; i < 8; i++)
        tool_tensor_free(case_tensor(c, i));
    return true;
}

static void case_free(struct bench_case *c)
{
    for (int i = 0; i < 8; i++)
        dev_tensor_free(&c->dev[i]);
    for (int k = 0; c->extra && k < c->n_extra; k++)
        for (int i = 0; i < 8; i++)
            dev_tensor_free(&c->extra[k][i]);
    free(c->extra);
    free(c->extra_args);
    c->extra = NULL;
    c->extra_args = NULL;
    tool_tensor_free(&c->x);
    tool_tensor_free(&c->out);
    tool_tensor_free(&c->weight);
    tool_tensor_free(&c->res);
    tool_tensor_free(&c->positions);
    tool_tensor_free(&c->query);
    tool_tensor_free(&c->key);
    tool_tensor_free(&c->cache);
}

static void case_shape(enum family fam, int64_t tokens, int64_t hidden, bool residual, char *buf,
                       size_t size)
{
    if (fam == FAM_ROTARY)
        snprintf(buf, size, "%lldx%lldx%d", (long long)tokens,
                 (long long)(hidden / ROTARY_HEAD_SIZE), ROTARY_HEAD_SIZE);
    else
        snprintf(buf, size, "%lldx%lld%s", (long long)tokens, (long long)hidden,
                 residual ? "+res" : "");
}

/*
 * The cos/sin cache as vLLM builds it (inv_freq = base^(-2i/rot_dim)), so
 * that repeated in-place rotations keep the values' magnitude: a cache of
 * random numbers would make them grow or vanish over thousands of calls.
 */
static void fill_rotary_cache(struct tool_tensor *cache, int64_t max_pos)
{
    const int half = ROTARY_HEAD_SIZE / 2;
    for (int64_t p = 0; p < max_pos; p++) {
        for (int i = 0; i < half; i++) {
            double inv_freq = pow(ROTARY_BASE, -2.0 * i / ROTARY_HEAD_SIZE);
            double angle = (double)p * inv_freq;
            tool_tensor_set(cache, p * ROTARY_HEAD_SIZE + i, (float)cos(angle));
            tool_tensor_set(cache, p * ROTARY_HEAD_SIZE + half + i, (float)sin(angle));
        }
    }
}

static bool case_init(struct bench_case *c, enum family fam, int dtype, int64_t tokens,
                      int64_t hidden, bool residual)
{
    memset(c, 0, sizeof *c);
    c->family = fam;
    c->dtype = dtype;
    c->tokens = tokens;
    c->hidden = hidden;
    c->residual = residual;
    case_shape(fam, tokens, hidden, residual, c->shape, sizeof c->shape);
    const double e = (double)tool_dtype_size(dtype), t = (double)tokens, h = (double)hidden;
    uint64_t seed = 0x5eed0000u + (uint64_t)dtype * 131u + (uint64_t)tokens;
    bool ok = true;

    switch (fam) {
    case FAM_ACT:
        ok = tool_tensor_alloc(&c->x, dtype, 2, (const int64_t[]){tokens, 2 * hidden}, 0) &&
             tool_tensor_alloc(&c->out, dtype, 2, (const int64_t[]){tokens, hidden}, 0) &&
             fill_random(&c->x, &seed, -4.0f, 4.0f);
        c->act = (fld_activation_args){.out = &c->out.t, .x = &c->x.t};
        c->args = &c->act;
        c->bytes = e * (t * 2 * h + t * h);
        c->elements = t * h;
        break;
    case FAM_NORM:
        ok = tool_tensor_alloc(&c->x, dtype, 2, (const int64_t[]){tokens, hidden}, 0) &&
             tool_tensor_alloc(&c->out, dtype, 2, (const int64_t[]){tokens, hidden}, 0) &&
             tool_tensor_alloc(&c->weight, dtype, 1, (const int64_t[]){hidden}, 0) &&
             fill_random(&c->x, &seed, -2.0f, 2.0f) && fill_random(&c->weight, &seed, 0.5f, 1.5f);
        /* The residual grows by x every call; small values keep it far from overflow. */
        if (ok && residual)
            ok = tool_tensor_alloc(&c->res, dtype, 2, (const int64_t[]){tokens, hidden}, 0) &&
                 fill_random(&c->res, &seed, -0.01f, 0.01f);
        c->norm = (fld_rms_norm_args){.out = &c->out.t,
                                      .x = &c->x.t,
                                      .weight = &c->weight.t,
                                      .residual = residual ? &c->res.t : NULL,
                                      .eps = NORM_EPS};
        c->args = &c->norm;
        c->bytes = e * (2 * t * h + h + (residual ? 2 * t * h : 0));
        c->elements = t * h;
        break;
    case FAM_ROTARY: {
        c->heads = (int)(hidden / ROTARY_HEAD_SIZE);
        int64_t width = (int64_t)c->heads * ROTARY_HEAD_SIZE;
        ok = tool_tensor_alloc(&c->positions, TOOL_I64, 1, (const int64_t[]){tokens}, 0) &&
             tool_tensor_alloc(&c->query, dtype, 2, (const int64_t[]){tokens, width}, 0) &&
             tool_tensor_alloc(&c->key, dtype, 2, (const int64_t[]){tokens, width}, 0) &&
             tool_tensor_alloc(&c->cache, dtype, 2, (const int64_t[]){tokens, ROTARY_HEAD_SIZE},
                               0) &&
             fill_random(&c->query, &seed, -1.0f, 1.0f) && fill_random(&c->key, &seed, -1.0f, 1.0f);
        if (ok) {
            int64_t *pos = c->positions.alloc;
            for (int64_t i = 0; i < tokens; i++)
                pos[i] = i;
            fill_rotary_cache(&c->cache, tokens);
        }
        c->rot = (fld_rotary_embedding_args){.positions = &c->positions.t,
                                             .query = &c->query.t,
                                             .key = &c->key.t,
                                             .head_size = ROTARY_HEAD_SIZE,
                                             .cos_sin_cache = &c->cache.t,
                                             .is_neox = true};
        c->args = &c->rot;
        /* q and k rotated part read and written, the cache rows used, the positions. */
        c->bytes = e * (2 * t * 2 * (double)width) + e * t * ROTARY_HEAD_SIZE + 8 * t;
        c->elements = t * 2 * (double)width;
        break;
    }
    }
    if (!ok) {
        fprintf(stderr, "fldispatch bench: out of memory for the %s tensors of shape %s\n",
                tool_dtype_name(dtype), c->shape);
        case_free(c);
    }
    return ok;
}

/* ---- timing ---------------------------------------------------------------------- */

/*
 * Nanoseconds for n calls, taking the n_args argument sets in turn, or NAN
 * when a call failed (fld_last_error() says why). On a device the batch
 * ends when the device has finished it.
 */
static double time_calls(fld_op op, const void *const *args, int n_args, int device_type, long n)
{
    /* Where the previous batch stopped: the sets are taken in turn across batches too. */
    static int next;
    int k = next < n_args ? next : 0;
    int failed = 0;
    double t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        failed |= fld_call(op, args[k]);
        if (++k == n_args)
            k = 0;
    }
    next = k;
    if (device_type != FLD_DEVICE_CPU && !failed)
        failed |= fld_device_synchronize((DLDevice){(DLDeviceType)device_type, 0});
    double t1 = bench_now_ns();
    return failed ? NAN : t1 - t0;
}

struct timing {
    double us; /* median per call */
    long batch;
};

/* Warm-up, calibration, then reps timed batches. false after a failed call. */
static bool time_line(fld_op op, const void *const *args, int n_args, int device_type, int reps,
                      double batch_ns, struct timing *out)
{
    /* The first call resolves the pinned choice, faults pages in, starts threads. */
    if (isnan(time_calls(op, args, n_args, device_type, 1)))
        return false;
    long n = 1;
    double ns;
    for (;;) {
        ns = time_calls(op, args, n_args, device_type, n);
        if (isnan(ns))
            return false;
        if (ns >= batch_ns / 8 || n >= (1L << 30))
            break;
        n *= 2;
    }
    double per_call = ns / (double)n;
    double want = ceil(batch_ns / (per_call > 0 ? per_call : 1.0));
    long batch = want < 1 ? 1 : want > 1e9 ? 1000000000L : (long)want;

    double *samples = malloc((size_t)reps * sizeof *samples);
    if (!samples) {
        fprintf(stderr, "fldispatch bench: out of memory\n");
        return false;
    }
    bool ok = true;
    for (int r = 0; r < reps && ok; r++) {
        ns = time_calls(op, args, n_args, device_type, batch);
        ok = !isnan(ns);
        samples[r] = ns / (double)batch;
    }
    if (ok) {
        out->us = bench_median(samples, reps) * 1e-3;
        out->batch = batch;
    }
    free(samples);
    return ok;
}

/* ---- results --------------------------------------------------------------------- */

struct result {
    int op, dtype, threads;
    int64_t tokens;
    bool residual;
    bool selected; /* the impl the policy selects by default for (op, dtype) */
    char impl[128];
    char shape[48];
    double bytes, us; /* us NAN when the call failed */
    double elements;
    long batch;
};

struct run {
    const struct bench_kernel_options *opt;
    double batch_ns;
    struct impl_table impls;
    /* impl ids to run per (op, dtype): indices into `planned` */
    char (*planned)[128];
    size_t n_planned;
    size_t plan_first[N_OPS][N_DTYPES], plan_count[N_OPS][N_DTYPES];
    char selected[N_OPS][N_DTYPES][128]; /* under the caller's policy, "" if none */

    /* thread counts: groups run, and those STREAM measures */
    int group_threads[BENCH_MAX_LIST];
    int n_groups;
    bool reinit;
    int default_threads; /* the plugin's; the "all threads" STREAM figure */
    int stream_threads[BENCH_MAX_LIST + 2];
    int n_stream_threads;

    struct bench_stream *stream;
    struct bench_stream_figures *samples;
    size_t n_samples, cap_samples;
    int stream_runs;

    /* devices other than the CPU: the d2d copy baseline and its runs */
    bool on_device;
    struct bench_d2d *d2d;
    double d2d_gbps[1024];
    int d2d_runs;
    char provider[128];        /* the plugin serving the device's memory */
    char provider_detail[512]; /* its detail line */

    struct result *results;
    size_t n_results, cap_results;
    size_t total_lines, done_lines;
    bool progress;
    bool failed;

    char cpu[256];
    double cpu_ghz; /* bench_clock.c; 0 unknown */
    const char *cpu_ghz_source;
    struct plugin_line plugin;
    char isa[64];
};

static bool add_result(struct run *r, const struct result *res)
{
    if (r->n_results == r->cap_results) {
        size_t cap = r->cap_results ? 2 * r->cap_results : 64;
        struct result *v = realloc(r->results, cap * sizeof *v);
        if (!v)
            return false;
        r->results = v;
        r->cap_results = cap;
    }
    r->results[r->n_results++] = *res;
    return true;
}

/* ---- progress on a terminal -------------------------------------------------------- */

static void progress(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void progress(struct run *r, const char *fmt, ...)
{
    if (!r->progress)
        return;
    char text[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r\033[K[%zu/%zu] %s ...", r->done_lines, r->total_lines, text);
    fflush(stderr);
}

static void progress_clear(struct run *r)
{
    if (!r->progress)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* ---- STREAM runs ------------------------------------------------------------------- */

/* One d2d copy measurement of the baseline on a device. */
static bool d2d_run(struct run *r)
{
    progress(r, "d2d copy, %zu MiB", bench_d2d_bytes(r->d2d) >> 20);
    double gbps = bench_d2d_measure(r->d2d, r->opt->reps, r->batch_ns);
    if (isnan(gbps))
        return false;
    if (r->d2d_runs < (int)(sizeof r->d2d_gbps / sizeof r->d2d_gbps[0]))
        r->d2d_gbps[r->d2d_runs++] = gbps;
    return true;
}

/* The median d2d copy bandwidth over the runs. */
static double d2d_figure(const struct run *r)
{
    double v[sizeof r->d2d_gbps / sizeof r->d2d_gbps[0]];
    memcpy(v, r->d2d_gbps, (size_t)r->d2d_runs * sizeof v[0]);
    return bench_median(v, r->d2d_runs);
}

static bool stream_run(struct run *r)
{
    if (r->on_device)
        return d2d_run(r);
    for (int i = 0; i < r->n_stream_threads; i++) {
        progress(r, "STREAM, %d thread%s", r->stream_threads[i],
                 r->stream_threads[i] == 1 ? "" : "s");
        struct bench_stream_figures f;
        if (!bench_stream_measure(r->stream, r->stream_threads[i], r->opt->reps, &f))
            return false;
        if (r->n_samples == r->cap_samples) {
            size_t cap = r->cap_samples ? 2 * r->cap_samples : 16;
            struct bench_stream_figures *v = realloc(r->samples, cap * sizeof *v);
            if (!v) {
                fprintf(stderr, "fldispatch bench: out of memory\n");
                return false;
            }
            r->samples = v;
            r->cap_samples = cap;
        }
        r->samples[r->n_samples++] = f;
    }
    r->stream_runs++;
    return true;
}

/* The median over the STREAM runs for a thread count; NAN if never measured. */
static double stream_figure(const struct run *r, int threads, bool copy)
{
    double v[1024];
    int n = 0;
    for (size_t i = 0; i < r->n_samples && n < 1024; i++)
        if (r->samples[i].threads == threads)
            v[n++] = copy ? r->samples[i].copy_gbps : r->samples[i].triad_gbps;
    return bench_median(v, n);
}

static void add_stream_threads(struct run *r, int threads)
{
    for (int i = 0; i < r->n_stream_threads; i++)
        if (r->stream_threads[i] == threads)
            return;
    r->stream_threads[r->n_stream_threads++] = threads;
}

/* ---- planning ---------------------------------------------------------------------- */

static bool op_selected(const struct run *r, int op)
{
    return r->opt->ops & (1u << op);
}

static bool dtype_selected(const struct run *r, int dtype)
{
    return r->opt->dtypes & (1u << dtype);
}

/* Token counts of an op's lines, and whether each is the fused-residual line. */
static int op_shapes(const struct run *r, int op, int64_t *tokens, bool *residual)
{
    int n = 0;
    int64_t largest = 0;
    for (int i = 0; i < r->opt->n_tokens; i++) {
        tokens[n] = r->opt->tokens[i];
        residual[n++] = false;
        if (r->opt->tokens[i] > largest)
            largest = r->opt->tokens[i];
    }
    if (op_family(op) == FAM_NORM) {
        tokens[n] = largest;
        residual[n++] = true;
    }
    return n;
}

/*
 * Decides which impls run for every (op, dtype) and which one the caller's
 * policy selects. Returns CLI_EXIT_NONE (after a message per missing pair)
 * when some (op, dtype) has nothing to run.
 */
static int plan(struct run *r)
{
    const struct bench_kernel_options *opt = r->opt;
    if (!load_impls(&r->impls))
        return CLI_EXIT_CHECK_FAILED;
    /* An impl runs once per dtype it serves. */
    r->planned = calloc(N_DTYPES * r->impls.n + 1, sizeof *r->planned);
    if (!r->planned) {
        fprintf(stderr, "fldispatch bench: out of memory\n");
        return CLI_EXIT_CHECK_FAILED;
    }
    bool impl_known = !opt->impl;
    for (size_t i = 0; i < r->impls.n && !impl_known; i++)
        impl_known = strcmp(r->impls.v[i].id, opt->impl) == 0;
    if (!impl_known) {
        fprintf(stderr,
                "fldispatch bench: --impl %s: no such implementation is registered "
                "('fldispatch list' shows them)\n",
                opt->impl);
        return CLI_EXIT_NONE;
    }
    int status = CLI_EXIT_OK;
    const uint32_t device_bit = cli_device_mask(opt->device_type);
    for (int op = 0; op < N_OPS; op++) {
        if (!op_selected(r, op))
            continue;
        for (int dt = 0; dt < N_DTYPES; dt++) {
            if (!dtype_selected(r, dt))
                continue;
            const char *sel = NULL;
            if (fld_resolve(op_names[op], opt->device_type, tool_dlpack_dtype(dt), &sel) ==
                    FLD_OK &&
                sel)
                snprintf(r->selected[op][dt], sizeof r->selected[op][dt], "%s", sel);
            r->plan_first[op][dt] = r->n_planned;
            char unavailable[512] = "";
            for (size_t i = 0; i < r->impls.n; i++) {
                const struct impl_entry *e = &r->impls.v[i];
                if (strcmp(e->op, op_names[op]) != 0 || !(e->devices & device_bit) ||
                    !(e->dtypes & (1u << dt)) || (opt->impl && strcmp(opt->impl, e->id) != 0))
                    continue;
                if (!e->available) {
                    size_t len = strlen(unavailable);
                    snprintf(unavailable + len, sizeof unavailable - len, "; %s is unavailable: %s",
                             e->id, e->reason);
                    continue;
                }
                snprintf(r->planned[r->n_planned++], sizeof r->planned[0], "%s", e->id);
            }
            r->plan_count[op][dt] = r->n_planned - r->plan_first[op][dt];
            if (r->plan_count[op][dt] == 0) {
                fprintf(stderr, "fldispatch bench: no implementation%s%s of %s for %s/%s%s\n",
                        opt->impl ? " " : "", opt->impl ? opt->impl : "", op_names[op],
                        fld_device_name(opt->device_type), tool_dtype_name(dt), unavailable);
                status = CLI_EXIT_NONE;
            }
        }
    }
    return status;
}

static size_t count_lines(const struct run *r)
{
    size_t lines = 0;
    int64_t tokens[BENCH_MAX_LIST + 1];
    bool residual[BENCH_MAX_LIST + 1];
    for (int op = 0; op < N_OPS; op++) {
        if (!op_selected(r, op))
            continue;
        int shapes = op_shapes(r, op, tokens, residual);
        for (int dt = 0; dt < N_DTYPES; dt++)
            if (dtype_selected(r, dt))
                lines += (size_t)shapes * r->plan_count[op][dt];
    }
    return lines * (size_t)r->n_groups;
}

/* ---- one thread count --------------------------------------------------------------- */

/* Re-initialises the library with VLLM_FL_CPU_THREADS=threads and checks the plan still holds. */
static bool reinit_with_threads(struct run *r, int threads)
{
    char value[16];
    snprintf(value, sizeof value, "%d", threads);
    fld_shutdown();
    setenv(ENV_THREADS, value, 1);
    if (cli_init() != CLI_EXIT_OK)
        return false;
    struct impl_table now = {0};
    bool ok = load_impls(&now);
    for (int op = 0; op < N_OPS && ok; op++) {
        for (int dt = 0; dt < N_DTYPES && ok && op_selected(r, op); dt++) {
            for (size_t k = 0; k < r->plan_count[op][dt] && ok; k++) {
                const char *id = r->planned[r->plan_first[op][dt] + k];
                const struct impl_entry *e = find_impl(&now, op_names[op], id);
                if (e && e->available)
                    continue;
                struct plugin_line p = {0};
                fld_foreach_plugin(find_cpu_plugin, &p);
                fprintf(stderr, "fldispatch bench: with %s=%d, %s is %s for %s%s%s\n", ENV_THREADS,
                        threads, id, e ? "unavailable" : "not registered", op_names[op],
                        p.reason[0] ? "; cpu plugin: " : "", p.reason);
                ok = false;
            }
        }
    }
    free(now.v);
    return ok;
}

static bool run_line(struct run *r, int op, fld_op handle, const struct bench_case *c,
                     const char *impl, int threads)
{
    r->done_lines++;
    progress(r, "%s %s %s %s", op_names[op], tool_dtype_name(c->dtype), c->shape, impl);
    struct result res = {
        .op = op,
        .dtype = c->dtype,
        .threads = threads,
        .tokens = c->tokens,
        .residual = c->residual,
        .selected = strcmp(impl, r->selected[op][c->dtype]) == 0,
        .bytes = c->bytes,
        .elements = c->elements,
        .us = NAN,
    };
    snprintf(res.impl, sizeof res.impl, "%s", impl);
    snprintf(res.shape, sizeof res.shape, "%s", c->shape);
    struct timing t;
    char err[768];
    if (!pin_impl(op_names[op], impl, r->opt->device_type, c->dtype, err, sizeof err)) {
        progress_clear(r);
        fprintf(stderr, "fldispatch bench: %s\n", err);
        r->failed = true;
    } else if (!time_line(handle, c->n_sets > 0 ? c->set_args : &c->args,
                          c->n_sets > 0 ? c->n_sets : 1, r->opt->device_type, r->opt->reps,
                          r->batch_ns, &t)) {
        progress_clear(r);
        fprintf(stderr, "fldispatch bench: %s %s %s %s failed: %s\n", op_names[op], impl,
                tool_dtype_name(c->dtype), c->shape, fld_last_error());
        r->failed = true;
    } else {
        res.us = t.us;
        res.batch = t.batch;
    }
    if (!add_result(r, &res)) {
        fprintf(stderr, "fldispatch bench: out of memory\n");
        return false;
    }
    return true;
}

/* Every op, dtype, shape and impl with the current thread count, STREAM after each op. */
static bool run_group(struct run *r, int threads)
{
    int64_t tokens[BENCH_MAX_LIST + 1];
    bool residual[BENCH_MAX_LIST + 1];
    for (int op = 0; op < N_OPS; op++) {
        if (!op_selected(r, op))
            continue;
        fld_op handle = fld_op_lookup(op_names[op]);
        if (!handle) {
            fprintf(stderr, "fldispatch bench: %s\n", fld_last_error());
            return false;
        }
        int shapes = op_shapes(r, op, tokens, residual);
        for (int dt = 0; dt < N_DTYPES; dt++) {
            if (!dtype_selected(r, dt))
                continue;
            for (int s = 0; s < shapes; s++) {
                struct bench_case c;
                if (!case_init(&c, op_family(op), dt, tokens[s], r->opt->hidden, residual[s]))
                    return false;
                if (r->on_device && !case_to_device(&c, r->opt->device_type)) {
                    case_free(&c);
                    return false;
                }
                bool ok = true;
                for (size_t k = 0; k < r->plan_count[op][dt] && ok; k++)
                    ok =
                        run_line(r, op, handle, &c, r->planned[r->plan_first[op][dt] + k], threads);
                case_free(&c);
                if (!ok)
                    return false;
            }
        }
        if (!stream_run(r))
            return false;
    }
    return true;
}

/* ---- reporting ----------------------------------------------------------------------- */

static double bw_share(const struct run *r, const struct result *res)
{
    double ceiling = r->on_device ? d2d_figure(r) : stream_figure(r, res->threads, false);
    return res->bytes / (res->us * 1e-6) * 1e-9 / ceiling;
}

static double gbps(const struct result *res)
{
    return res->bytes / (res->us * 1e-6) * 1e-9;
}

/* Giga-elements per second. */
static double gelems(const struct result *res)
{
    return res->elements / (res->us * 1e-6) * 1e-9;
}

/* Elements per CPU cycle; NAN on other devices or when the clock is unknown. */
static double elems_per_cycle(const struct run *r, const struct result *res)
{
    if (r->on_device || r->cpu_ghz <= 0)
        return NAN;
    return gelems(res) / r->cpu_ghz;
}

/* The result of the selected impl for (op, dtype, tokens, threads), plain shape; NULL if none. */
static const struct result *find_result(const struct run *r, int op, int dtype, int64_t tokens,
                                        int threads)
{
    for (size_t i = 0; i < r->n_results; i++) {
        const struct result *res = &r->results[i];
        if (res->op == op && res->dtype == dtype && res->tokens == tokens &&
            res->threads == threads && !res->residual && res->selected && !isnan(res->us))
            return res;
    }
    return NULL;
}

static bool ran_threads(const struct run *r, int threads)
{
    for (int g = 0; g < r->n_groups; g++)
        if (r->group_threads[g] == threads)
            return true;
    return false;
}

enum target_kind { T_BANDWIDTH, T_SCALING, T_DECODE };

struct target {
    enum target_kind kind;
    int op, dtype;
    const char *impl;
    double value, limit;
    bool met;
};

/*
 * The targets this run covers, for the implementation the caller's policy
 * selects: 4096 x 4096 at one thread (f32, bf16) >= 80% of STREAM; the
 * same at two threads >= 1.7x faster; one token <= 0.5 us. On a device
 * (issue 5): 4096 x 4096 in every dtype >= 85% of the d2d copy.
 */
static size_t collect_targets(const struct run *r, struct target *out, size_t max)
{
    size_t n = 0;
    if (r->opt->hidden != TARGET_HIDDEN)
        return 0;
    int decode_threads = ran_threads(r, 1) ? 1 : r->group_threads[0];
    for (int kind = T_BANDWIDTH; kind <= T_DECODE; kind++) {
        if (r->on_device && kind != T_BANDWIDTH)
            continue;
        for (int op = 0; op < N_OPS; op++) {
            for (int dt = 0; dt < N_DTYPES; dt++) {
                if (n >= max || (!r->on_device && kind != T_DECODE && dt == TOOL_F16))
                    continue;
                struct target t = {.kind = kind, .op = op, .dtype = dt};
                const struct result *one = NULL, *two = NULL;
                if (kind == T_BANDWIDTH) {
                    one = find_result(r, op, dt, TARGET_TOKENS, r->on_device ? 0 : 1);
                    if (!one)
                        continue;
                    t.value = bw_share(r, one);
                    t.limit = r->on_device ? TARGET_DEVICE_BW_SHARE : TARGET_BW_SHARE;
                    t.met = t.value >= t.limit;
                } else if (kind == T_SCALING) {
                    one = find_result(r, op, dt, TARGET_TOKENS, 1);
                    two = find_result(r, op, dt, TARGET_TOKENS, 2);
                    if (!one || !two)
                        continue;
                    t.value = one->us / two->us;
                    t.limit = TARGET_SCALING;
                    t.met = t.value >= t.limit;
                } else {
                    one = find_result(r, op, dt, 1, decode_threads);
                    if (!one)
                        continue;
                    t.value = one->us;
                    t.limit = TARGET_DECODE_US;
                    t.met = t.value <= t.limit;
                }
                t.impl = one->impl;
                out[n++] = t;
            }
        }
    }
    return n;
}

static const char *target_title(const struct run *r, enum target_kind kind)
{
    switch (kind) {
    case T_BANDWIDTH:
        return r->on_device ? "bandwidth: 4096x4096 (rotary 4096x32x128), >= 85% of the d2d copy "
                              "(f32, f16, bf16)"
                            : "bandwidth: 4096x4096, 1 thread, >= 80% of STREAM 1t (f32, bf16)";
    case T_SCALING:
        return "threads: 4096x4096, 2 threads >= 1.7x faster than 1 (f32, bf16)";
    case T_DECODE:
        return "decode: 1 token, <= 0.5 us per call with dispatch";
    }
    return "";
}

static const char *target_key(const struct run *r, enum target_kind kind)
{
    if (r->on_device && kind == T_BANDWIDTH)
        return "bw_share_4096_d2d";
    return kind == T_BANDWIDTH ? "bw_share_4096_1t"
           : kind == T_SCALING ? "scaling_2t"
                               : "decode_us";
}

static void print_targets(const struct run *r)
{
    struct target t[3 * N_OPS * N_DTYPES];
    size_t n = collect_targets(r, t, sizeof t / sizeof t[0]);
    printf("\ntargets (issue %d; the implementation the policy selects by default):\n",
           r->on_device ? 5 : 4);
    if (n == 0) {
        if (r->on_device)
            printf("  not covered by this run: they need --hidden 4096 and tokens 4096\n");
        else
            printf("  not covered by this run: they need --hidden 4096 and tokens 4096 "
                   "(bandwidth),\n  --threads 1,2 (scaling) or tokens 1 (decode)\n");
        return;
    }
    int met = 0;
    for (int kind = T_BANDWIDTH; kind <= T_DECODE; kind++) {
        bool titled = false;
        for (size_t i = 0; i < n; i++) {
            if (t[i].kind != (enum target_kind)kind)
                continue;
            if (!titled)
                printf("  %s\n", target_title(r, kind));
            titled = true;
            char value[32];
            if (kind == T_BANDWIDTH)
                snprintf(value, sizeof value, "%.1f%%", 100 * t[i].value);
            else if (kind == T_SCALING)
                snprintf(value, sizeof value, "%.2fx", t[i].value);
            else
                snprintf(value, sizeof value, "%.3f us", t[i].value);
            printf("    %-18s %-5s %-15s %10s  %s\n", op_names[t[i].op],
                   tool_dtype_name(t[i].dtype), t[i].impl, value, t[i].met ? "met" : "MISSED");
            met += t[i].met;
        }
    }
    printf("  %d of %zu met\n", met, n);
}

static void print_text(const struct run *r)
{
    const struct bench_kernel_options *opt = r->opt;
    printf("fldispatch bench: %s, median of %d timed batches of >= %.0f ms per line (calls through "
           "fld_call, pinned, strict%s)\n",
           fld_device_name(opt->device_type), opt->reps, r->batch_ns * 1e-6,
           r->on_device ? "; each batch ends with fld_device_synchronize" : "");
    printf("machine: %s; %d allowed cpus; last-level cache %.1f MiB\n", r->cpu,
           bench_allowed_cpus(), (double)bench_llc_bytes() / (1 << 20));
    if (r->on_device) {
        printf("device: %s 0, memory from plugin '%s': %s\n", fld_device_name(opt->device_type),
               r->provider, r->provider_detail[0] ? r->provider_detail : "(no detail line)");
        printf("d2d copy: %.0f MiB buffer, read + write counted, median of %d batches per run, "
               "median of %d runs (before, between and after the kernels): %.2f GB/s\n",
               (double)bench_d2d_bytes(r->d2d) / (1 << 20), opt->reps, r->d2d_runs, d2d_figure(r));
    } else if (r->plugin.found)
        printf("cpu plugin: %s\n", r->plugin.detail[0] ? r->plugin.detail : "(no detail line)");
    else
        printf("cpu plugin: not loaded\n");
    if (!r->on_device) {
        printf("threads: %d by default", r->default_threads);
        if (r->reinit) {
            printf("; measured with %s=", ENV_THREADS);
            for (int g = 0; g < r->n_groups; g++)
                printf("%s%d", g ? "," : "", r->group_threads[g]);
        }
        printf("\n");
        printf("STREAM: %s loops, 3 arrays of %.0f MiB, best of %d per run, median of %d runs "
               "(before, between and after the kernels)\n",
               bench_stream_isa(), (double)bench_stream_array_bytes(r->stream) / (1 << 20),
               opt->reps, r->stream_runs);
        printf("cpu clock: %.2f GHz (%s)\n", r->cpu_ghz,
               strcmp(r->cpu_ghz_source, "calibrated") == 0
                   ? "calibrated: a chain of dependent adds, one per cycle, fastest of 30 runs"
                   : "/proc/cpuinfo cpu MHz: the adds could not be timed");
        printf("  %7s %12s %12s\n", "threads", "triad GB/s", "copy GB/s");
        for (int i = 0; i < r->n_stream_threads; i++)
            printf("  %7d %12.2f %12.2f\n", r->stream_threads[i],
                   stream_figure(r, r->stream_threads[i], false),
                   stream_figure(r, r->stream_threads[i], true));
    }

    printf("\n%-18s %-15s %-5s %-15s %7s %12s %9s %9s %8s %7s\n", "op", "impl", "dtype", "shape",
           "threads", "us", "GB/s", "bw_share", "Gelem/s", "el/cyc");
    for (size_t i = 0; i < r->n_results; i++) {
        const struct result *res = &r->results[i];
        char threads[16] = "-";
        if (!r->on_device)
            snprintf(threads, sizeof threads, "%d", res->threads);
        printf("%-18s %-15s %-5s %-15s %7s ", op_names[res->op], res->impl,
               tool_dtype_name(res->dtype), res->shape, threads);
        if (isnan(res->us)) {
            printf("%12s %9s %9s %8s %7s\n", "failed", "-", "-", "-", "-");
        } else {
            printf("%12.3f %9.2f %8.1f%% %8.3f ", res->us, gbps(res), 100 * bw_share(r, res),
                   gelems(res));
            double epc = elems_per_cycle(r, res);
            if (isnan(epc))
                printf("%7s\n", "-");
            else
                printf("%7.3f\n", epc);
        }
    }
    printf("\nshapes: activations [T, 2H] -> [T, H] shown TxH; norms [T, H] with weight, +res "
           "with a fused residual;\nrotary T tokens x %lld query and %lld key heads x %d, rot_dim "
           "%d, neox. %s\n",
           (long long)(opt->hidden / ROTARY_HEAD_SIZE), (long long)(opt->hidden / ROTARY_HEAD_SIZE),
           ROTARY_HEAD_SIZE, ROTARY_HEAD_SIZE,
           r->on_device ? "bw_share: GB/s over the d2d copy's GB/s (baseline d2d_copy)."
                        : "bw_share over 100%: the data fit in the caches.");
    print_targets(r);
}

static void json_figure(struct json_writer *w, const char *key, double v, int decimals)
{
    json_key(w, key);
    json_double(w, v, decimals);
}

static void print_json(const struct run *r)
{
    const struct bench_kernel_options *opt = r->opt;
    struct json_writer w;
    json_begin_document_schema(&w, stdout, JSON_SCHEMA_BENCH_KERNELS);
    json_key(&w, "benchmark");
    json_string(&w, "kernels");
    json_key(&w, "machine");
    json_begin_object(&w);
    json_key(&w, "cpu");
    json_string(&w, r->cpu);
    json_key(&w, "isa");
    json_string(&w, r->isa);
    json_key(&w, "threads");
    json_int(&w, r->default_threads);
    json_figure(&w, "cpu_ghz", r->cpu_ghz > 0 ? r->cpu_ghz : NAN, 3);
    json_key(&w, "cpu_ghz_source");
    json_string(&w, r->cpu_ghz > 0 ? r->cpu_ghz_source : NULL);
    json_figure(&w, "stream_gbps_1t", stream_figure(r, 1, false), 3);
    json_figure(&w, "stream_gbps", stream_figure(r, r->default_threads, false), 3);
    json_figure(&w, "stream_copy_gbps_1t", stream_figure(r, 1, true), 3);
    json_figure(&w, "stream_copy_gbps", stream_figure(r, r->default_threads, true), 3);
    json_key(&w, "stream");
    json_begin_array(&w);
    for (int i = 0; i < r->n_stream_threads; i++) {
        json_begin_object(&w);
        json_key(&w, "threads");
        json_int(&w, r->stream_threads[i]);
        json_figure(&w, "triad_gbps", stream_figure(r, r->stream_threads[i], false), 3);
        json_figure(&w, "copy_gbps", stream_figure(r, r->stream_threads[i], true), 3);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "stream_isa");
    json_string(&w, bench_stream_isa());
    json_key(&w, "stream_array_bytes");
    if (r->stream)
        json_int(&w, (long long)bench_stream_array_bytes(r->stream));
    else
        json_null(&w);
    json_key(&w, "stream_runs");
    json_int(&w, r->stream_runs);
    json_key(&w, "allowed_cpus");
    json_int(&w, bench_allowed_cpus());
    json_key(&w, "llc_bytes");
    json_int(&w, (long long)bench_llc_bytes());
    json_key(&w, "plugin_detail");
    json_text_or_null(&w, r->plugin.found ? r->plugin.detail : NULL);
    /* The device's figures: null on the CPU. */
    json_key(&w, "device_detail");
    json_text_or_null(&w, r->on_device ? r->provider_detail : NULL);
    json_figure(&w, "d2d_copy_gbps", r->on_device ? d2d_figure(r) : NAN, 3);
    json_key(&w, "d2d_copy_bytes");
    if (r->on_device)
        json_int(&w, (long long)bench_d2d_bytes(r->d2d));
    else
        json_null(&w);
    json_key(&w, "d2d_runs");
    if (r->on_device)
        json_int(&w, r->d2d_runs);
    else
        json_null(&w);
    json_end_object(&w);

    json_key(&w, "device");
    json_string(&w, fld_device_name(opt->device_type));
    json_key(&w, "provider"); /* the plugin serving the device's memory, as verify says */
    json_string(&w, r->on_device ? r->provider : NULL);
    json_key(&w, "baseline");
    json_string(&w, r->on_device ? "d2d_copy" : "stream_triad");
    json_figure(&w, "baseline_gbps", r->on_device ? d2d_figure(r) : NAN, 3);
    json_key(&w, "reps");
    json_int(&w, opt->reps);
    json_figure(&w, "batch_ms", r->batch_ns * 1e-6, 1);

    json_key(&w, "results");
    json_begin_array(&w);
    for (size_t i = 0; i < r->n_results; i++) {
        const struct result *res = &r->results[i];
        char shape[48];
        case_shape(op_family(res->op), res->tokens, opt->hidden, false, shape, sizeof shape);
        json_begin_object(&w);
        json_key(&w, "op");
        json_string(&w, op_names[res->op]);
        json_key(&w, "impl_id");
        json_string(&w, res->impl);
        json_key(&w, "dtype");
        json_string(&w, tool_dtype_name(res->dtype));
        json_key(&w, "shape");
        json_string(&w, shape);
        json_key(&w, "threads"); /* of the cpu plugin: null on other devices */
        if (r->on_device)
            json_null(&w);
        else
            json_int(&w, res->threads);
        json_figure(&w, "us", res->us, 4);
        json_figure(&w, "gbps", gbps(res), 3);
        json_figure(&w, "bw_share", bw_share(r, res), 4);
        json_key(&w, "tokens");
        json_int(&w, res->tokens);
        json_key(&w, "residual");
        json_bool(&w, res->residual);
        json_key(&w, "bytes");
        json_int(&w, (long long)res->bytes);
        json_key(&w, "elements");
        json_int(&w, (long long)res->elements);
        json_figure(&w, "gelem_per_s", gelems(res), 4);
        json_figure(&w, "elem_per_cycle", elems_per_cycle(r, res), 4);
        json_key(&w, "calls_per_batch");
        json_int(&w, res->batch);
        json_key(&w, "selected_by_default");
        json_bool(&w, res->selected);
        json_end_object(&w);
    }
    json_end_array(&w);

    struct target t[3 * N_OPS * N_DTYPES];
    size_t n = collect_targets(r, t, sizeof t / sizeof t[0]);
    json_key(&w, "targets");
    json_begin_array(&w);
    for (size_t i = 0; i < n; i++) {
        json_begin_object(&w);
        json_key(&w, "target");
        json_string(&w, target_key(r, t[i].kind));
        json_key(&w, "op");
        json_string(&w, op_names[t[i].op]);
        json_key(&w, "dtype");
        json_string(&w, tool_dtype_name(t[i].dtype));
        json_key(&w, "impl_id");
        json_string(&w, t[i].impl);
        json_figure(&w, "value", t[i].value, 4);
        json_figure(&w, "limit", t[i].limit, 2);
        json_key(&w, "met");
        json_bool(&w, t[i].met);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
}

/* ---- the run ----------------------------------------------------------------------------- */

/* The plugin whose name is in p->detail on entry: its detail line replaces it. */
static int find_named_plugin(const fld_plugin_info *info, void *user)
{
    struct plugin_line *p = user;
    if (strcmp(info->name, p->detail) != 0)
        return 0;
    p->found = true;
    snprintf(p->detail, sizeof p->detail, "%s", info->detail ? info->detail : "");
    snprintf(p->reason, sizeof p->reason, "%s", info->reason ? info->reason : "");
    return 1;
}

static void run_free(struct run *r)
{
    bench_stream_close(r->stream);
    bench_d2d_close(r->d2d);
    free(r->impls.v);
    free(r->planned);
    free(r->samples);
    free(r->results);
}

/* Puts VLLM_FL_CPU_THREADS back as the caller had it. */
static void restore_threads_env(const char *saved, bool was_set)
{
    if (was_set)
        setenv(ENV_THREADS, saved, 1);
    else
        unsetenv(ENV_THREADS);
}

/* The planned run on a device: one group without a thread count, the d2d copy as the ceiling. */
static int run_on_device(struct run *r)
{
    int status;
    r->n_groups = 1;
    r->group_threads[0] = 0;
    r->total_lines = count_lines(r);
    r->d2d = bench_d2d_open(r->opt->device_type, r->opt->copy_bytes);
    bool ok = r->d2d && stream_run(r) && open_policy() && run_group(r, 0);
    progress_clear(r);
    fld_policy_reset();
    if (!ok) {
        status = CLI_EXIT_CHECK_FAILED;
    } else {
        if (r->opt->json)
            print_json(r);
        else
            print_text(r);
        status = r->failed ? CLI_EXIT_CHECK_FAILED : CLI_EXIT_OK;
    }
    run_free(r);
    return status;
}

int bench_kernels_run(const struct bench_kernel_options *opt)
{
    struct run r = {.opt = opt, .batch_ns = opt->quick ? QUICK_BATCH_NS : BATCH_NS};
    r.progress = isatty(STDERR_FILENO);
    int status = cli_init();
    if (status != CLI_EXIT_OK)
        return status;

    bench_cpu_model(r.cpu, sizeof r.cpu);
    r.cpu_ghz = bench_cpu_ghz(&r.cpu_ghz_source);
    fld_foreach_plugin(find_cpu_plugin, &r.plugin);
    detail_isa(r.plugin.detail, r.isa, sizeof r.isa);
    r.default_threads = detail_threads(r.plugin.detail);
    if (r.default_threads < 1)
        r.default_threads = bench_allowed_cpus();

    r.on_device = opt->device_type != FLD_DEVICE_CPU;
    if (r.on_device) {
        const char *provider = dev_provider(opt->device_type);
        if (!provider) {
            fprintf(stderr, "fldispatch bench: device %s: %s\n", fld_device_name(opt->device_type),
                    fld_last_error());
            return CLI_EXIT_NONE;
        }
        snprintf(r.provider, sizeof r.provider, "%s", provider);
        struct plugin_line p = {0};
        snprintf(p.detail, sizeof p.detail, "%s", provider); /* the name to look for */
        fld_foreach_plugin(find_named_plugin, &p);
        snprintf(r.provider_detail, sizeof r.provider_detail, "%s", p.found ? p.detail : "");
    }

    status = plan(&r);
    if (status != CLI_EXIT_OK)
        goto done;

    if (r.on_device)
        return run_on_device(&r);

    r.reinit = opt->n_threads > 0;
    r.n_groups = r.reinit ? opt->n_threads : 1;
    for (int g = 0; g < r.n_groups; g++)
        r.group_threads[g] = r.reinit ? opt->threads[g] : r.default_threads;
    add_stream_threads(&r, 1);
    for (int g = 0; g < r.n_groups; g++)
        add_stream_threads(&r, r.group_threads[g]);
    add_stream_threads(&r, r.default_threads);
    r.total_lines = count_lines(&r);

    r.stream = bench_stream_open();
    if (!r.stream) {
        fprintf(stderr, "fldispatch bench: out of memory for the STREAM arrays\n");
        status = CLI_EXIT_CHECK_FAILED;
        goto done;
    }

    const char *env = getenv(ENV_THREADS);
    char saved[64] = "";
    bool was_set = env != NULL;
    if (env)
        snprintf(saved, sizeof saved, "%s", env);

    bool ok = stream_run(&r);
    for (int g = 0; g < r.n_groups && ok; g++) {
        if (r.reinit)
            ok = reinit_with_threads(&r, r.group_threads[g]);
        ok = ok && open_policy() && run_group(&r, r.group_threads[g]);
    }
    progress_clear(&r);
    if (r.reinit) {
        restore_threads_env(saved, was_set);
        fld_shutdown();
    } else {
        fld_policy_reset();
    }
    if (!ok) {
        status = CLI_EXIT_CHECK_FAILED;
        goto done;
    }
    if (opt->json)
        print_json(&r);
    else
        print_text(&r);
    status = r.failed ? CLI_EXIT_CHECK_FAILED : CLI_EXIT_OK;

done:
    run_free(&r);
    return status;
}
