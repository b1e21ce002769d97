/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench [OP...]: per op, implementation, dtype, shape and thread
 * count, the time of one call through the dispatcher, the bytes it moves
 * per second, and that rate as a share of the memory bandwidth a STREAM
 * triad reaches in the same run (stream.c).
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
 *     CPU cycle (the clock of clock.c, measured once), so that a
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
 * generated in CPU memory as for the CPU and copied once to device memory
 * (fld_device_alloc/copy, the device plugin's hooks); every timed batch
 * ends with fld_device_synchronize() inside the timed interval, so kernel
 * launches are not mistaken for kernel runs. So that the figure is the
 * device memory's and not its cache's (a 4096 x 4096 bf16 case fits in an
 * H100's 50 MB L2), a case smaller than DEVICE_COLD_BYTES gets several
 * copies of its tensors on the device, up to that size in all (at most
 * DEVICE_MAX_SETS), and consecutive calls take them in turn: each call
 * reads inputs the previous ones did not touch. The ceiling is a
 * device-to-device copy of a large buffer (d2d.c), measured before
 * the first kernel and after each op like STREAM, median over those runs;
 * there is no thread count (0 in the results) and no STREAM.
 *
 * The report of a run (text table, JSON) is report.c's, from the
 * record declared in report.h; it prints measurements only.
 *
 * The cases, their tensors, the plan and the timing share the per-line
 * record and the per-case state (device sets, argument structs).
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/internal/tool_api.h>

#include "bench.h"
#include "report.h"
#include "../cli.h"
#include "../device_tensors.h"
#include "../tensors.h"

/*
 * The ops the bench times: the catalog's (tools/catalog.c) whose argument
 * struct it can build tensors for, in catalog order, each with its family
 * (tool_op_family(), which stops the tool at a kind it does not know).
 */
static const char *op_names[N_OPS + 1];
static enum tool_family op_families[N_OPS];
static int n_bench_ops = -1;

static void load_bench_ops(void)
{
    if (n_bench_ops >= 0)
        return;
    struct tool_op ops[TOOL_MAX_OPS];
    size_t n = tool_tensor_ops(ops);
    n_bench_ops = 0;
    for (size_t i = 0; i < n; i++) {
        op_families[n_bench_ops] = tool_op_family(&ops[i]);
        op_names[n_bench_ops++] = ops[i].name;
    }
    op_names[n_bench_ops] = NULL;
}

const char *const *bench_op_names(void)
{
    load_bench_ops();
    return op_names;
}

int bench_op_count(void)
{
    load_bench_ops();
    return n_bench_ops;
}

static enum tool_family op_family(int op)
{
    load_bench_ops();
    return op_families[op];
}

#define ROTARY_BASE    10000.0
#define NORM_EPS       1e-6f
#define BATCH_NS       20e6
#define QUICK_BATCH_NS 2e6

/* ---- implementations ------------------------------------------------------- */

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
    /* Every field of the library's policy table but prefer (which filters
     * nothing): switches and the strict flag on, lists and orders unset,
     * every custom op enabled. */
    const struct fld_tool_policy_field *row;
    for (unsigned i = 0; (row = fld__policy_field_row(i)); i++) {
        const char *value = NULL;
        if (strcmp(row->kind, "prefer") == 0)
            continue;
        if (strcmp(row->kind, "flag") == 0 || strcmp(row->kind, "switch") == 0)
            value = "1";
        else if (strcmp(row->kind, "custom") == 0)
            value = "all";
        if (fld_policy_set(row->key, value) != FLD_OK) {
            fprintf(stderr, "fldispatch bench: cannot set policy '%s': %s\n", row->key,
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
    fld_rotary_embedding_out_args rot_out;
};

/* The tensors of a case (bench_case.dev's order: case_tensor()). */
#define CASE_TENSORS 10

struct bench_case {
    enum tool_family family;
    int dtype;
    int64_t tokens, hidden;
    bool residual;
    int heads; /* rotary: query heads, also key heads */
    struct tool_tensor x, out, weight, res, positions, query, key, cache, qout, kout;
    /* devices other than the CPU: the copies the calls use, in the order above */
    struct dev_tensor dev[CASE_TENSORS];
    int device_type;
    fld_activation_args act;
    fld_rms_norm_args norm;
    fld_rotary_embedding_args rot;
    fld_rotary_embedding_out_args rot_out;
    const void *args;
    /* devices: the sets calls take in turn (set 0 is dev[] and args) */
    int n_sets, n_extra;                      /* sets in use; extra sets allocated */
    struct dev_tensor (*extra)[CASE_TENSORS]; /* sets 1 .. n_sets - 1 */
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

/* The CPU tensors of a case, in the order of bench_case.dev. */
static struct tool_tensor *case_tensor(struct bench_case *c, int i)
{
    struct tool_tensor *const t[CASE_TENSORS] = {&c->x,         &c->out,   &c->weight, &c->res,
                                                 &c->positions, &c->query, &c->key,    &c->cache,
                                                 &c->qout,      &c->kout};
    return t[i];
}

/* The device copy in set (dev[] or an extra set) standing for a CPU view of the case. */
static DLTensor *device_view(struct bench_case *c, struct dev_tensor *set, DLTensor *cpu_view)
{
    for (int i = 0; cpu_view && i < CASE_TENSORS; i++)
        if (cpu_view == &case_tensor(c, i)->t)
            return &set[i].t;
    return cpu_view;
}

/* The arguments of the case (CPU views) pointed at set's copies. */
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
    } else if (c->args == &c->rot_out) {
        a->rot_out = c->rot_out;
        a->rot_out.positions = device_view(c, set, (DLTensor *)c->rot_out.positions);
        a->rot_out.query = device_view(c, set, (DLTensor *)c->rot_out.query);
        a->rot_out.key = device_view(c, set, (DLTensor *)c->rot_out.key);
        a->rot_out.cos_sin_cache = device_view(c, set, (DLTensor *)c->rot_out.cos_sin_cache);
        a->rot_out.query_out = device_view(c, set, c->rot_out.query_out);
        a->rot_out.key_out = device_view(c, set, c->rot_out.key_out);
    } else {
        a->rot = c->rot;
        a->rot.positions = device_view(c, set, (DLTensor *)c->rot.positions);
        a->rot.query = device_view(c, set, c->rot.query);
        a->rot.key = device_view(c, set, c->rot.key);
        a->rot.cos_sin_cache = device_view(c, set, (DLTensor *)c->rot.cos_sin_cache);
    }
}

/* Uploads the case's CPU tensors into set; FLD_OK or the library's status. */
static int upload_set(struct bench_case *c, struct dev_tensor *set, DLDevice dev)
{
    for (int i = 0; i < CASE_TENSORS; i++) {
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
 * arguments at the copies and frees the CPU storage. false after a message
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
    for (int i = 0; i < CASE_TENSORS; i++)
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
            for (int i = 0; i < CASE_TENSORS; i++)
                dev_tensor_free(&c->extra[c->n_sets - 1][i]);
    }
    /* Set 0: the case's own argument structs, pointed at dev[]. */
    union case_args first;
    args_on_set(c, c->dev, &first);
    if (c->args == &c->act)
        c->act = first.act;
    else if (c->args == &c->norm)
        c->norm = first.norm;
    else if (c->args == &c->rot_out)
        c->rot_out = first.rot_out;
    else
        c->rot = first.rot;
    c->set_args[0] = c->args;
    c->device_type = device_type;
    for (int i = 0; i < CASE_TENSORS; i++)
        tool_tensor_free(case_tensor(c, i));
    return true;
}

static void case_free(struct bench_case *c)
{
    for (int i = 0; i < CASE_TENSORS; i++)
        dev_tensor_free(&c->dev[i]);
    for (int k = 0; c->extra && k < c->n_extra; k++)
        for (int i = 0; i < CASE_TENSORS; i++)
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
    tool_tensor_free(&c->qout);
    tool_tensor_free(&c->kout);
}

/* "TxH" ("+res" with a fused residual), or "Tx<H/128>x128" for rotary. */
static void bench_case_shape(enum tool_family fam, int64_t tokens, int64_t hidden, bool residual,
                             char *buf, size_t size)
{
    if (fam == TOOL_FAMILY_ROTARY || fam == TOOL_FAMILY_ROTARY_OUT)
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

static bool case_init(struct bench_case *c, enum tool_family fam, int dtype, int64_t tokens,
                      int64_t hidden, bool residual)
{
    memset(c, 0, sizeof *c);
    c->family = fam;
    c->dtype = dtype;
    c->tokens = tokens;
    c->hidden = hidden;
    c->residual = residual;
    bench_case_shape(fam, tokens, hidden, residual, c->shape, sizeof c->shape);
    const double e = (double)tool_dtype_size(dtype), t = (double)tokens, h = (double)hidden;
    uint64_t seed = 0x5eed0000u + (uint64_t)dtype * 131u + (uint64_t)tokens;
    bool ok = true;

    switch (fam) {
    case TOOL_FAMILY_ACTIVATION:    /* x [T, 2H] -> out [T, H] */
    case TOOL_FAMILY_ELEMENTWISE: { /* x [T, H] -> out [T, H] */
        const int64_t width = fam == TOOL_FAMILY_ACTIVATION ? 2 * hidden : hidden;
        ok = tool_tensor_alloc(&c->x, dtype, 2, (const int64_t[]){tokens, width}, 0) &&
             tool_tensor_alloc(&c->out, dtype, 2, (const int64_t[]){tokens, hidden}, 0) &&
             fill_random(&c->x, &seed, -4.0f, 4.0f);
        c->act = (fld_activation_args){.out = &c->out.t, .x = &c->x.t};
        c->args = &c->act;
        c->bytes = e * (t * (double)width + t * h);
        c->elements = t * h;
        break;
    }
    case TOOL_FAMILY_NORM:
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
    case TOOL_FAMILY_ROTARY:
    case TOOL_FAMILY_ROTARY_OUT: {
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
        if (ok && fam == TOOL_FAMILY_ROTARY_OUT) {
            ok = tool_tensor_alloc(&c->qout, dtype, 2, (const int64_t[]){tokens, width}, 0) &&
                 tool_tensor_alloc(&c->kout, dtype, 2, (const int64_t[]){tokens, width}, 0);
            c->rot_out = (fld_rotary_embedding_out_args){.positions = &c->positions.t,
                                                         .query = &c->query.t,
                                                         .key = &c->key.t,
                                                         .head_size = ROTARY_HEAD_SIZE,
                                                         .cos_sin_cache = &c->cache.t,
                                                         .is_neox = true,
                                                         .query_out = &c->qout.t,
                                                         .key_out = &c->kout.t};
            c->args = &c->rot_out;
        }
        /* q and k read, q and k (or their outputs) written, the cache rows used, the positions. */
        c->bytes = e * (2 * t * 2 * (double)width) + e * t * ROTARY_HEAD_SIZE + 8 * t;
        c->elements = t * 2 * (double)width;
        break;
    }
    case TOOL_FAMILY_NONE: /* not among bench_op_names() */
        ok = false;
        break;
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

static bool add_result(struct bench_run *r, const struct bench_result *res)
{
    if (r->n_results == r->cap_results) {
        size_t cap = r->cap_results ? 2 * r->cap_results : 64;
        struct bench_result *v = realloc(r->results, cap * sizeof *v);
        if (!v)
            return false;
        r->results = v;
        r->cap_results = cap;
    }
    r->results[r->n_results++] = *res;
    return true;
}

/* ---- progress on a terminal -------------------------------------------------------- */

static void progress(struct bench_run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void progress(struct bench_run *r, const char *fmt, ...)
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

static void progress_clear(struct bench_run *r)
{
    if (!r->progress)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* ---- STREAM runs ------------------------------------------------------------------- */

/* One d2d copy measurement of the baseline on a device. */
static bool d2d_run(struct bench_run *r)
{
    progress(r, "d2d copy, %zu MiB", bench_d2d_bytes(r->d2d) >> 20);
    double gbps = bench_d2d_measure(r->d2d, r->opt->reps, r->batch_ns);
    if (isnan(gbps))
        return false;
    if (r->d2d_runs < (int)(sizeof r->d2d_gbps / sizeof r->d2d_gbps[0]))
        r->d2d_gbps[r->d2d_runs++] = gbps;
    return true;
}

static bool stream_run(struct bench_run *r)
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

static void add_stream_threads(struct bench_run *r, int threads)
{
    for (int i = 0; i < r->n_stream_threads; i++)
        if (r->stream_threads[i] == threads)
            return;
    r->stream_threads[r->n_stream_threads++] = threads;
}

/* ---- planning ---------------------------------------------------------------------- */

static bool op_selected(const struct bench_run *r, int op)
{
    return r->opt->ops & (1u << op);
}

static bool dtype_selected(const struct bench_run *r, int dtype)
{
    return r->opt->dtypes & (1u << dtype);
}

/* Token counts of an op's lines, and whether each is the fused-residual line. */
static int op_shapes(const struct bench_run *r, int op, int64_t *tokens, bool *residual)
{
    int n = 0;
    int64_t largest = 0;
    for (int i = 0; i < r->opt->n_tokens; i++) {
        tokens[n] = r->opt->tokens[i];
        residual[n++] = false;
        if (r->opt->tokens[i] > largest)
            largest = r->opt->tokens[i];
    }
    if (op_family(op) == TOOL_FAMILY_NORM) {
        tokens[n] = largest;
        residual[n++] = true;
    }
    return n;
}

/*
 * Decides which impls run for every (op, dtype) and which one the caller's
 * policy selects. Returns CLI_EXIT_NONE (after a message per missing pair)
 * when a named op has a dtype with nothing to run, or when nothing at all
 * can run; without named ops such a pair is skipped with a note.
 */
static int plan(struct bench_run *r)
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
    for (int op = 0; op < bench_op_count(); op++) {
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
                fprintf(stderr, "fldispatch bench: %sno implementation%s%s of %s for %s/%s%s\n",
                        opt->ops_named ? "" : "skipped: ", opt->impl ? " " : "",
                        opt->impl ? cli_text(opt->impl) : "", op_names[op],
                        fld_device_name(opt->device_type), tool_dtype_name(dt), unavailable);
                if (opt->ops_named)
                    status = CLI_EXIT_NONE;
            }
        }
    }
    if (status == CLI_EXIT_OK && r->n_planned == 0) {
        fprintf(stderr, "fldispatch bench: nothing to run on %s\n",
                fld_device_name(opt->device_type));
        status = CLI_EXIT_NONE;
    }
    return status;
}

static size_t count_lines(const struct bench_run *r)
{
    size_t lines = 0;
    int64_t tokens[BENCH_MAX_LIST + 1];
    bool residual[BENCH_MAX_LIST + 1];
    for (int op = 0; op < bench_op_count(); op++) {
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
static bool reinit_with_threads(struct bench_run *r, int threads)
{
    char value[16];
    snprintf(value, sizeof value, "%d", threads);
    fld_shutdown();
    setenv(ENV_THREADS, value, 1);
    if (cli_init() != CLI_EXIT_OK)
        return false;
    struct impl_table now = {0};
    bool ok = load_impls(&now);
    for (int op = 0; op < bench_op_count() && ok; op++) {
        for (int dt = 0; dt < N_DTYPES && ok && op_selected(r, op); dt++) {
            for (size_t k = 0; k < r->plan_count[op][dt] && ok; k++) {
                const char *id = r->planned[r->plan_first[op][dt] + k];
                const struct impl_entry *e = find_impl(&now, op_names[op], id);
                if (e && e->available)
                    continue;
                struct plugin_line p = {0};
                fld_foreach_plugin(find_cpu_plugin, &p);
                fprintf(stderr, "fldispatch bench: with %s=%d, %s is %s for %s%s%s\n", ENV_THREADS,
                        threads, cli_text(id), e ? "unavailable" : "not registered", op_names[op],
                        p.reason[0] ? "; cpu plugin: " : "", cli_text(p.reason));
                ok = false;
            }
        }
    }
    free(now.v);
    return ok;
}

static bool run_line(struct bench_run *r, int op, fld_op handle, const struct bench_case *c,
                     const char *impl, int threads)
{
    r->done_lines++;
    progress(r, "%s %s %s %s", op_names[op], tool_dtype_name(c->dtype), c->shape, impl);
    struct bench_result res = {
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
    res.op_name = op_names[op];
    snprintf(res.shape, sizeof res.shape, "%s", c->shape);
    bench_case_shape(c->family, c->tokens, c->hidden, false, res.json_shape, sizeof res.json_shape);
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
        fprintf(stderr, "fldispatch bench: %s %s %s %s failed: %s\n", op_names[op], cli_text(impl),
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
static bool run_group(struct bench_run *r, int threads)
{
    int64_t tokens[BENCH_MAX_LIST + 1];
    bool residual[BENCH_MAX_LIST + 1];
    for (int op = 0; op < bench_op_count(); op++) {
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

static void run_free(struct bench_run *r)
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
static int run_on_device(struct bench_run *r)
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
            bench_report_json(r);
        else
            bench_report_text(r);
        status = r->failed ? CLI_EXIT_CHECK_FAILED : CLI_EXIT_OK;
    }
    run_free(r);
    return status;
}

int bench_kernels_run(const struct bench_kernel_options *opt)
{
    struct bench_run r = {.opt = opt, .batch_ns = opt->quick ? QUICK_BATCH_NS : BATCH_NS};
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
        bench_report_json(&r);
    else
        bench_report_text(&r);
    status = r.failed ? CLI_EXIT_CHECK_FAILED : CLI_EXIT_OK;

done:
    run_free(&r);
    return status;
}
