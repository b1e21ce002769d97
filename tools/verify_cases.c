/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cases of `fldispatch verify` and their inputs: vLLM's kernel test
 * shapes (tests/kernels in vLLM), trimmed where the full cartesian product would
 * not fit the time budget (every dtype of the full set well under a minute
 * on two cores, --quick about two seconds for everything):
 *   - activations: tokens {7, 83, 2048} x d {512, 13824} in full, odd d
 *     {1, 3, 17, 769} with tokens {7, 83} only, strided rows, no tokens
 *     (gated: x [T, 2d]; elementwise: x [T, d]);
 *   - norms: tokens {7, 83} x H {8, 768, 769, 5120, 5125, 8192} x {plain,
 *     residual, strided, in place, strided in place with residual}; tokens
 *     4096 only with H {768, 5125} (plain, and strided with residual);
 *     no weight, x scaled by 1/(2H) and no tokens as single cases; a
 *     float32 weight and/or residual with 16-bit x (vLLM's GemmaRMSNorm;
 *     float32 runs have them anyway); rows of 1e30 (squares past float32's
 *     range; float16 cannot hold them and runs unscaled), full set only:
 *     Ascend's norms are CANN's float32 RmsNorm and give PyTorch's 0 there;
 *   - rotary: neox and gptj x head {64, 80, 112, 120, 256} x rot_dim {head,
 *     32} x key {16 q / 4 k heads, 17 / 17, 17 / none} x layout {[T, H*D],
 *     padded heads, [5, 11, H*D]} at 55 tokens; 1024 tokens only for head
 *     {64, 256} with rot_dim = head, 16 / 4 heads, [T, H*D]; int32 positions
 *     and a float32 cos/sin cache as single cases.
 */
#include "verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#define MAX_POS 8192

/* ------------------------------------------------------------------------ */
/* Tolerances                                                               */
/* ------------------------------------------------------------------------ */

/*
 * allclose |got - want| <= atol + rtol |want|. Activations and rotary use
 * vLLM's defaults per dtype (tests/kernels/allclose_default.py); vLLM's
 * test_layernorm checks the norms at 1e-2 for every dtype. verify reports
 * the errors it measures too, so a tighter result stays visible.
 */
static const struct {
    double atol, rtol;
} default_tol[3] = {
    [TOOL_F32] = {1e-5, 1.3e-6},
    [TOOL_F16] = {1e-3, 1e-3},
    [TOOL_BF16] = {1e-3, 1.6e-2},
};
static const double norm_tol = 1e-2;

void verify_tolerance(enum tool_family family, int dtype, double *atol, double *rtol)
{
    if (family == TOOL_FAMILY_NORM) {
        *atol = *rtol = norm_tol;
        return;
    }
    *atol = default_tol[dtype].atol;
    *rtol = default_tol[dtype].rtol;
}

/* ------------------------------------------------------------------------ */
/* Case tables                                                              */
/* ------------------------------------------------------------------------ */

#define MAX_CASES 256

struct case_table {
    struct verify_case v[MAX_CASES];
    size_t n;
};

static void add_case(struct case_table *t, struct verify_case c)
{
    if (t->n < MAX_CASES)
        t->v[t->n++] = c;
}

/* The gated activations' cases; elementwise ones take the same (tokens, d), x [T, d]. */
static void activation_cases(struct case_table *t, enum tool_family family, bool quick)
{
    const struct verify_case base = {.family = family};
    struct verify_case c = base;
    if (quick) {
        static const int64_t q[][3] = {{7, 17, 0}, {83, 512, 64}, {3, 769, 3}, {1, 1, 0}};
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
            c.tokens = q[i][0], c.d = q[i][1], c.row_pad = q[i][2];
            add_case(t, c);
        }
        return;
    }
    static const int64_t tokens[] = {7, 83, 2048}, dims[] = {512, 13824}, odd[] = {1, 3, 17, 769};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 2; j++) {
            c.tokens = tokens[i], c.d = dims[j];
            add_case(t, c);
        }
    for (size_t i = 0; i < 2; i++)
        for (size_t j = 0; j < 4; j++) {
            c.tokens = tokens[i], c.d = odd[j];
            add_case(t, c);
        }
    static const int64_t strided[][3] = {{83, 512, 64}, {7, 769, 3}, {2048, 512, 128}};
    for (size_t i = 0; i < 3; i++) {
        c.tokens = strided[i][0], c.d = strided[i][1], c.row_pad = strided[i][2];
        add_case(t, c);
    }
    c = base;
    c.tokens = 0, c.d = 512;
    add_case(t, c);
}

enum {
    N_PLAIN = 0,
    N_RES = 1,
    N_STRIDED = 2,
    N_INPLACE = 4,
    N_NOWEIGHT = 8,
    N_SCALED = 16,
    N_W32 = 32,  /* float32 weight */
    N_R32 = 64,  /* float32 residual */
    N_HUGE = 128 /* x scaled by 1e30 */
};

static struct verify_case norm_case(int64_t tokens, int64_t h, unsigned flags)
{
    return (struct verify_case){
        .family = TOOL_FAMILY_NORM,
        .tokens = tokens,
        .h = h,
        .residual = flags & N_RES,
        .strided = flags & N_STRIDED,
        .in_place = flags & N_INPLACE,
        .no_weight = flags & N_NOWEIGHT,
        .scaled = flags & N_SCALED,
        .w32 = flags & N_W32,
        .r32 = flags & N_R32,
        .huge = flags & N_HUGE,
    };
}

static void norm_cases(struct case_table *t, bool quick)
{
    if (quick) {
        add_case(t, norm_case(7, 769, N_STRIDED | N_RES | N_INPLACE));
        add_case(t, norm_case(83, 8, N_PLAIN));
        add_case(t, norm_case(5, 5125, N_RES | N_NOWEIGHT));
        add_case(t, norm_case(7, 768, N_INPLACE | N_SCALED));
        add_case(t, norm_case(3, 5120, N_STRIDED));
        add_case(t, norm_case(7, 769, N_STRIDED | N_RES | N_W32 | N_R32));
        return;
    }
    static const int64_t tokens[] = {7, 83}, hs[] = {8, 768, 769, 5120, 5125, 8192};
    static const unsigned variants[] = {N_PLAIN, N_RES, N_STRIDED, N_INPLACE,
                                        N_STRIDED | N_RES | N_INPLACE};
    for (size_t i = 0; i < 2; i++)
        for (size_t j = 0; j < 6; j++)
            for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++)
                add_case(t, norm_case(tokens[i], hs[j], variants[v]));
    add_case(t, norm_case(4096, 768, N_PLAIN));
    add_case(t, norm_case(4096, 768, N_STRIDED | N_RES));
    add_case(t, norm_case(4096, 5125, N_PLAIN));
    add_case(t, norm_case(4096, 5125, N_STRIDED | N_RES));
    add_case(t, norm_case(83, 769, N_RES | N_NOWEIGHT));
    add_case(t, norm_case(7, 8192, N_NOWEIGHT));
    add_case(t, norm_case(83, 5120, N_SCALED));
    add_case(t, norm_case(7, 769, N_SCALED | N_RES));
    add_case(t, norm_case(0, 768, N_RES));
    add_case(t, norm_case(7, 768, N_W32));
    add_case(t, norm_case(83, 5120, N_RES | N_R32));
    add_case(t, norm_case(83, 769, N_RES | N_W32 | N_R32));
    add_case(t, norm_case(7, 769, N_STRIDED | N_RES | N_INPLACE | N_W32 | N_R32));
    add_case(t, norm_case(4096, 768, N_RES | N_W32 | N_R32));
    add_case(t, norm_case(7, 4096, N_HUGE));
    add_case(t, norm_case(83, 769, N_RES | N_HUGE | N_W32));
}

static struct verify_case rope_case(bool neox, int64_t head, int64_t rot, int64_t q_heads,
                                    int64_t k_heads, enum verify_rope_layout layout, int64_t tokens)
{
    struct verify_case c = {
        .family = TOOL_FAMILY_ROTARY,
        .neox = neox,
        .head = head,
        .rot = rot,
        .q_heads = q_heads,
        .k_heads = k_heads,
        .layout = layout,
        .tokens = tokens,
    };
    if (layout == VR_BATCH) {
        c.batch = 5;
        c.seq = 11;
        c.tokens = 55;
    }
    return c;
}

static void rotary_cases(struct case_table *t, bool quick)
{
    struct verify_case c;
    if (quick) {
        add_case(t, rope_case(true, 80, 32, 16, 4, VR_PADDED, 55));
        add_case(t, rope_case(false, 64, 64, 17, 0, VR_BATCH, 55));
        add_case(t, rope_case(true, 120, 120, 17, 17, VR_FLAT, 55));
        c = rope_case(false, 112, 32, 16, 4, VR_FLAT, 7);
        c.pos_i32 = true;
        add_case(t, c);
        c = rope_case(true, 256, 256, 16, 4, VR_FLAT, 3);
        c.cache_f32 = true;
        add_case(t, c);
        return;
    }
    static const int64_t heads[] = {64, 80, 112, 120, 256};
    static const int64_t kv[][2] = {{16, 4}, {17, 17}, {17, 0}};
    for (int neox = 1; neox >= 0; neox--)
        for (size_t h = 0; h < 5; h++)
            for (int r = 0; r < 2; r++)
                for (size_t k = 0; k < 3; k++)
                    for (int lay = VR_FLAT; lay <= VR_BATCH; lay++)
                        add_case(t, rope_case(neox, heads[h], r ? 32 : heads[h], kv[k][0], kv[k][1],
                                              (enum verify_rope_layout)lay, 55));
    for (int neox = 1; neox >= 0; neox--) {
        add_case(t, rope_case(neox, 64, 64, 16, 4, VR_FLAT, 1024));
        add_case(t, rope_case(neox, 256, 256, 16, 4, VR_FLAT, 1024));
    }
    c = rope_case(true, 128, 128, 16, 4, VR_BATCH, 55);
    c.pos_i32 = true;
    add_case(t, c);
    c = rope_case(true, 64, 64, 16, 4, VR_FLAT, 55);
    c.cache_f32 = true;
    add_case(t, c);
    c = rope_case(false, 80, 32, 17, 17, VR_PADDED, 55);
    c.cache_f32 = true;
    add_case(t, c);
}

/* The rotary cases, for the out-of-place op: the same inputs, query_out and key_out beside. */
static void rotary_out_cases(struct case_table *t, bool quick)
{
    rotary_cases(t, quick);
    for (size_t i = 0; i < t->n; i++)
        t->v[i].family = TOOL_FAMILY_ROTARY_OUT;
}

const struct verify_case *verify_cases(enum tool_family family, bool quick, size_t *count)
{
    static struct case_table tables[TOOL_FAMILY_NONE][2];
    static bool built[TOOL_FAMILY_NONE][2];
    if (family >= TOOL_FAMILY_NONE) { /* no tensors, no cases */
        *count = 0;
        return NULL;
    }
    struct case_table *t = &tables[family][quick];
    if (!built[family][quick]) {
        t->n = 0;
        if (family == TOOL_FAMILY_ACTIVATION || family == TOOL_FAMILY_ELEMENTWISE)
            activation_cases(t, family, quick);
        else if (family == TOOL_FAMILY_NORM)
            norm_cases(t, quick);
        else if (family == TOOL_FAMILY_ROTARY_OUT)
            rotary_out_cases(t, quick);
        else
            rotary_cases(t, quick);
        built[family][quick] = true;
    }
    *count = t->n;
    return t->v;
}

const char *verify_case_label(const struct verify_case *c, char *buf, size_t size)
{
    static const char *const layouts[] = {"[T,H*D]", "[T,H,D+64][..,:D]", "[B,S,H*D]"};
    switch (c->family) {
    case TOOL_FAMILY_ACTIVATION:
    case TOOL_FAMILY_ELEMENTWISE:
        snprintf(buf, size, "T=%lld d=%lld%s", (long long)c->tokens, (long long)c->d,
                 c->row_pad ? " strided" : "");
        if (c->row_pad) {
            size_t n = strlen(buf);
            snprintf(buf + n, size - n, "(row+%lld)", (long long)c->row_pad);
        }
        break;
    case TOOL_FAMILY_NORM:
        snprintf(buf, size, "T=%lld H=%lld%s%s%s%s%s%s%s%s", (long long)c->tokens, (long long)c->h,
                 c->residual ? " residual" : "", c->strided ? " strided" : "",
                 c->in_place ? " in-place" : "", c->no_weight ? " no-weight" : "",
                 c->scaled ? " x/(2H)" : "", c->w32 ? " weight=f32" : "",
                 c->r32 ? " residual=f32" : "", c->huge ? " x*1e30" : "");
        break;
    case TOOL_FAMILY_ROTARY:
    case TOOL_FAMILY_ROTARY_OUT: {
        char key[32] = "no-key";
        if (c->k_heads)
            snprintf(key, sizeof key, "k=%lld", (long long)c->k_heads);
        snprintf(buf, size, "%s head=%lld rot=%lld q=%lld %s %s T=%lld%s%s",
                 c->neox ? "neox" : "gptj", (long long)c->head, (long long)c->rot,
                 (long long)c->q_heads, key, layouts[c->layout], (long long)c->tokens,
                 c->pos_i32 ? " pos=i32" : "", c->cache_f32 ? " cache=f32" : "");
        break;
    }
    case TOOL_FAMILY_NONE:
        snprintf(buf, size, "no tensors");
        break;
    }
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Slots                                                                    */
/* ------------------------------------------------------------------------ */

const char *verify_slot_name(enum verify_slot s)
{
    static const char *const names[VS_COUNT] = {"x",         "out",          "weight", "residual",
                                                "positions", "query",        "key",    "query_out",
                                                "key_out",   "cos_sin_cache"};
    return s < VS_COUNT ? names[s] : "?";
}

struct tool_tensor *verify_slot(struct verify_io *io, enum verify_slot s)
{
    if (s == VS_CACHE)
        return io->cache;
    return io->t[s].alloc ? &io->t[s] : NULL;
}

bool verify_slot_written(const struct verify_io *io, enum verify_slot s)
{
    switch (s) {
    case VS_OUT:
    case VS_RESIDUAL:
    case VS_QUERY_OUT:
    case VS_KEY_OUT:
        return true;
    case VS_QUERY:
    case VS_KEY:
        return io->c->family == TOOL_FAMILY_ROTARY;
    case VS_X:
        return io->c->family == TOOL_FAMILY_NORM && io->c->in_place;
    default:
        return false;
    }
}

/* ------------------------------------------------------------------------ */
/* Inputs                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Allocates a tensor whose padding, and whatever no kernel has written yet,
 * holds all-ones bytes: NaN in every float dtype, so that a kernel reading
 * padding into a result or leaving an output unwritten cannot pass.
 */
static bool alloc_sentinel(struct tool_tensor *tt, int dtype, int ndim, const int64_t *shape,
                           int64_t row_pad)
{
    if (!tool_tensor_alloc(tt, dtype, ndim, shape, row_pad))
        return false;
    memset(tt->alloc, 0xff, tt->bytes);
    return true;
}

/*
 * N(0, 1) with the tails of silu and gelu exercised: about one element in
 * 32 uniform in [-10, 10), and a few exact zeros and large negatives.
 */
static void fill_activation_input(struct tool_tensor *x, uint64_t *seed)
{
    tool_tensor_fill_normal(x, seed, 0.0f, 1.0f);
    const int64_t n = tool_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = tool_rng_u64(seed);
        if (r % 32 == 0)
            tool_tensor_set(x, i, (float)(-10.0 + 20.0 * tool_rng_unit(seed)));
        else if (r % 97 == 1)
            tool_tensor_set(x, i, 0.0f);
        else if (r % 89 == 2)
            tool_tensor_set(x, i, (float)(-8.0 - 24.0 * tool_rng_unit(seed)));
    }
    /* the extremes at least once, whatever the size */
    static const float fixed[] = {0.0f, -10.0f, 10.0f, -30.0f};
    for (int64_t i = 0; i < n && i < 4; i++)
        tool_tensor_set(x, i, fixed[i]);
}

static bool make_activation(struct verify_io *io, const struct verify_case *c, uint64_t *seed)
{
    const int64_t width = c->family == TOOL_FAMILY_ELEMENTWISE ? c->d : 2 * c->d;
    const int64_t xs[2] = {c->tokens, width}, os[2] = {c->tokens, c->d};
    if (!alloc_sentinel(&io->t[VS_X], io->dtype, 2, xs, c->row_pad) ||
        !alloc_sentinel(&io->t[VS_OUT], io->dtype, 2, os, 0))
        return false;
    fill_activation_input(&io->t[VS_X], seed);
    return true;
}

static bool make_norm(struct verify_io *io, const struct verify_case *c, uint64_t *seed)
{
    const int64_t shape[2] = {c->tokens, c->h};
    struct tool_tensor *x = &io->t[VS_X];
    if (!alloc_sentinel(x, io->dtype, 2, shape, c->strided ? c->h : 0))
        return false;
    /* 1e30: squares past float32's range (float16 tops out at 65504: unscaled) */
    const float huge = c->huge && io->dtype != TOOL_F16 ? 1e30f : 1.0f;
    tool_tensor_fill_normal(x, seed, 0.0f, c->scaled ? 1.0f / (float)(2 * c->h) : huge);
    if (!c->in_place && !alloc_sentinel(&io->t[VS_OUT], io->dtype, 2, shape, 0))
        return false;
    if (!c->no_weight) {
        const int wdt = c->w32 ? TOOL_F32 : io->dtype;
        if (!alloc_sentinel(&io->t[VS_WEIGHT], wdt, 1, &c->h, 0))
            return false;
        tool_tensor_fill_normal(&io->t[VS_WEIGHT], seed, 1.0f, 0.1f);
    }
    if (c->residual) {
        const int rdt = c->r32 ? TOOL_F32 : io->dtype;
        if (!alloc_sentinel(&io->t[VS_RESIDUAL], rdt, 2, shape, 0))
            return false;
        tool_tensor_fill_normal(&io->t[VS_RESIDUAL], seed, 0.0f, huge);
    }
    return true;
}

/* The cos/sin caches, one per (rot_dim, dtype), built once: 8192 rows is the costly part. */
#define MAX_CACHES 24
static struct cache_memo {
    int64_t rot;
    int dtype;
    struct tool_tensor t, pristine;
} caches[MAX_CACHES];

/*
 * As vLLM builds it: inv_freq = base^(-2i/rot_dim) in float32, freqs =
 * position * inv_freq in float32, row = cat(cos, sin), rounded to dtype.
 */
static bool build_cache(struct cache_memo *m, int64_t rot, int dtype)
{
    const int64_t shape[2] = {MAX_POS, rot}, half = rot / 2;
    if (!tool_tensor_alloc(&m->t, dtype, 2, shape, 0))
        return false;
    if (!tool_tensor_alloc(&m->pristine, dtype, 2, shape, 0)) {
        tool_tensor_free(&m->t);
        return false;
    }
    for (int64_t i = 0; i < half; i++) {
        const float inv_freq = (float)(1.0 / pow(10000.0, (double)(2 * i) / (double)rot));
        for (int64_t p = 0; p < MAX_POS; p++) {
            const float f = (float)p * inv_freq;
            tool_tensor_set(&m->t, p * rot + i, (float)cos((double)f));
            tool_tensor_set(&m->t, p * rot + half + i, (float)sin((double)f));
        }
    }
    tool_tensor_copy(&m->pristine, &m->t);
    m->rot = rot;
    m->dtype = dtype;
    return true;
}

static struct cache_memo *cos_sin_cache(int64_t rot, int dtype)
{
    int i = 0;
    for (; i < MAX_CACHES && caches[i].t.alloc; i++)
        if (caches[i].rot == rot && caches[i].dtype == dtype)
            return &caches[i];
    if (i == MAX_CACHES) { /* full: start over rather than fail */
        verify_caches_free();
        i = 0;
    }
    return build_cache(&caches[i], rot, dtype) ? &caches[i] : NULL;
}

void verify_caches_free(void)
{
    for (int i = 0; i < MAX_CACHES; i++) {
        tool_tensor_free(&caches[i].t);
        tool_tensor_free(&caches[i].pristine);
    }
}

/* query or key in the case's layout, N(0, 1) (seed NULL: an output, all sentinel). */
static bool make_heads(struct tool_tensor *tt, const struct verify_case *c, int dtype,
                       int64_t heads, uint64_t *seed)
{
    bool ok;
    if (c->layout == VR_PADDED) {
        const int64_t shape[3] = {c->tokens, heads, c->head};
        ok = alloc_sentinel(tt, dtype, 3, shape, 64);
    } else if (c->layout == VR_BATCH) {
        const int64_t shape[3] = {c->batch, c->seq, heads * c->head};
        ok = alloc_sentinel(tt, dtype, 3, shape, 0);
    } else {
        const int64_t shape[2] = {c->tokens, heads * c->head};
        ok = alloc_sentinel(tt, dtype, 2, shape, 0);
    }
    if (ok && seed)
        tool_tensor_fill_normal(tt, seed, 0.0f, 1.0f);
    return ok;
}

static bool make_rotary(struct verify_io *io, const struct verify_case *c, uint64_t *seed)
{
    struct tool_tensor *pos = &io->t[VS_POSITIONS];
    const int pdt = c->pos_i32 ? TOOL_I32 : TOOL_I64;
    const bool batch = c->layout == VR_BATCH;
    const int64_t pshape[2] = {batch ? c->batch : c->tokens, c->seq};
    if (!tool_tensor_alloc(pos, pdt, batch ? 2 : 1, pshape, 0))
        return false;
    for (int64_t t = 0; t < c->tokens; t++) {
        int64_t p = (int64_t)(tool_rng_unit(seed) * MAX_POS);
        if (t == 0)
            p = MAX_POS - 1; /* the last row of the cache is reachable */
        else if (t == 1)
            p = 0;
        if (c->pos_i32)
            ((int32_t *)pos->alloc)[t] = (int32_t)p;
        else
            ((int64_t *)pos->alloc)[t] = p;
    }
    if (!make_heads(&io->t[VS_QUERY], c, io->dtype, c->q_heads, seed))
        return false;
    if (c->k_heads && !make_heads(&io->t[VS_KEY], c, io->dtype, c->k_heads, seed))
        return false;
    if (c->family == TOOL_FAMILY_ROTARY_OUT &&
        (!make_heads(&io->t[VS_QUERY_OUT], c, io->dtype, c->q_heads, NULL) ||
         (c->k_heads && !make_heads(&io->t[VS_KEY_OUT], c, io->dtype, c->k_heads, NULL))))
        return false;
    struct cache_memo *m = cos_sin_cache(c->rot, c->cache_f32 ? TOOL_F32 : io->dtype);
    if (!m)
        return false;
    io->cache = &m->t;
    io->cache_ro = &m->pristine;
    return true;
}

bool verify_io_make(struct verify_io *io, const struct verify_case *c, int dtype, uint64_t seed)
{
    memset(io, 0, sizeof *io);
    io->c = c;
    io->dtype = dtype;
    bool ok = c->family == TOOL_FAMILY_ACTIVATION || c->family == TOOL_FAMILY_ELEMENTWISE
                  ? make_activation(io, c, &seed)
              : c->family == TOOL_FAMILY_NORM ? make_norm(io, c, &seed)
                                              : make_rotary(io, c, &seed);
    if (!ok)
        verify_io_free(io);
    return ok;
}

/* The row_pad a tensor was allocated with. */
static int64_t row_pad_of(const struct tool_tensor *tt)
{
    const int last = tt->t.ndim - 1;
    if (last == 0)
        return (int64_t)(tt->bytes / tool_dtype_size(tt->dtype)) - tt->shape[0];
    return tt->strides[last - 1] - tt->shape[last];
}

bool verify_io_clone(struct verify_io *dst, const struct verify_io *src)
{
    memset(dst, 0, sizeof *dst);
    dst->c = src->c;
    dst->dtype = src->dtype;
    dst->cache = src->cache;
    dst->cache_ro = src->cache_ro;
    for (int s = 0; s < VS_COUNT; s++) {
        const struct tool_tensor *from = &src->t[s];
        if (!from->alloc)
            continue;
        if (!tool_tensor_alloc(&dst->t[s], from->dtype, from->t.ndim, from->shape,
                               row_pad_of(from))) {
            verify_io_free(dst);
            return false;
        }
        tool_tensor_copy(&dst->t[s], from);
    }
    return true;
}

void verify_io_free(struct verify_io *io)
{
    for (int s = 0; s < VS_COUNT; s++)
        tool_tensor_free(&io->t[s]);
    io->cache = NULL;
    io->cache_ro = NULL;
}

void verify_io_drop_inputs(struct verify_io *io)
{
    for (int s = 0; s < VS_COUNT; s++)
        if (!verify_slot_written(io, (enum verify_slot)s))
            tool_tensor_free(&io->t[s]);
}

/* ------------------------------------------------------------------------ */
/* Calls                                                                    */
/* ------------------------------------------------------------------------ */

int verify_call(const char *op, const struct verify_case *c, DLTensor *const views[VS_COUNT])
{
    switch (c->family) {
    case TOOL_FAMILY_ACTIVATION:
    case TOOL_FAMILY_ELEMENTWISE: {
        fld_activation_args args = {views[VS_OUT], views[VS_X]};
        return fld_call_by_name(op, &args);
    }
    case TOOL_FAMILY_NORM: {
        DLTensor *x = views[VS_X];
        fld_rms_norm_args args = {c->in_place ? x : views[VS_OUT], x, views[VS_WEIGHT],
                                  views[VS_RESIDUAL], 1e-6f};
        return fld_call_by_name(op, &args);
    }
    case TOOL_FAMILY_ROTARY: {
        fld_rotary_embedding_args args = {
            views[VS_POSITIONS], views[VS_QUERY], views[VS_KEY], c->head, views[VS_CACHE], c->neox};
        return fld_call_by_name(op, &args);
    }
    case TOOL_FAMILY_ROTARY_OUT: {
        fld_rotary_embedding_out_args args = {
            views[VS_POSITIONS], views[VS_QUERY], views[VS_KEY],       c->head,
            views[VS_CACHE],     c->neox,         views[VS_QUERY_OUT], views[VS_KEY_OUT]};
        return fld_call_by_name(op, &args);
    }
    case TOOL_FAMILY_NONE: /* no case has it */
        break;
    }
    return FLD_EINVAL;
}

int verify_io_call(const char *op, struct verify_io *io)
{
    DLTensor *views[VS_COUNT];
    for (int s = 0; s < VS_COUNT; s++) {
        struct tool_tensor *tt = verify_slot(io, (enum verify_slot)s);
        views[s] = tt ? &tt->t : NULL;
    }
    return verify_call(op, io->c, views);
}
