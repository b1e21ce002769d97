/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tool's tensors in CPU memory (see tensors.h). Row-major storage with optional
 * padding after each row of the last dim; the DLTensor view always carries
 * explicit strides (as PyTorch's DLPack export does) and byte_offset 0.
 */
#include "tensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/half.h>

DLDataType tool_dlpack_dtype(int dtype)
{
    switch (dtype) {
    case TOOL_F16:
        return FLD_DTYPE_F16;
    case TOOL_BF16:
        return FLD_DTYPE_BF16;
    case TOOL_I64:
        return (DLDataType){kDLInt, 64, 1};
    case TOOL_I32:
        return (DLDataType){kDLInt, 32, 1};
    default:
        return FLD_DTYPE_F32;
    }
}

const char *tool_dtype_name(int dtype)
{
    static const char *const names[] = {"f32", "f16", "bf16", "i64", "i32"};
    return dtype >= 0 && dtype <= TOOL_I32 ? names[dtype] : "?";
}

size_t tool_dtype_size(int dtype)
{
    switch (dtype) {
    case TOOL_F16:
    case TOOL_BF16:
        return 2;
    case TOOL_I64:
        return 8;
    default:
        return 4;
    }
}

/* Byte i of the guard pattern: not a constant a memset could write, nor a plausible float. */
static unsigned char guard_byte(size_t i)
{
    return (unsigned char)(0xa5u ^ (i * 0x3bu));
}

bool tool_tensor_alloc(struct tool_tensor *tt, int dtype, int ndim, const int64_t *shape,
                       int64_t row_pad)
{
    memset(tt, 0, sizeof *tt);
    if (ndim < 1 || ndim > TOOL_MAX_DIMS || row_pad < 0 || dtype < TOOL_F32 || dtype > TOOL_I32)
        return false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return false;
        tt->shape[i] = shape[i];
    }
    /* Row-major strides; only the step between rows of the last dim grows. */
    int64_t step = 1;
    bool overflow = false;
    for (int i = ndim - 1; i >= 0; i--) {
        tt->strides[i] = step;
        int64_t extent = i == ndim - 1 ? shape[i] + row_pad : shape[i];
        overflow |= __builtin_mul_overflow(step, extent, &step);
    }
    size_t bytes;
    overflow |= __builtin_mul_overflow((size_t)step, tool_dtype_size(dtype), &bytes);
    if (overflow)
        return false;
    /* aligned_alloc wants a multiple of the alignment; guard bytes follow the storage, so a
     * kernel that writes past the end is caught (verify) instead of corrupting the heap. */
    size_t rounded;
    if (__builtin_add_overflow(bytes, (size_t)TOOL_GUARD_BYTES + 63, &rounded))
        return false;
    rounded &= ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return false;
    memset(p, 0, bytes);
    for (size_t i = bytes; i < rounded; i++)
        ((unsigned char *)p)[i] = guard_byte(i - bytes);
    tt->alloc = p;
    tt->bytes = bytes;
    tt->guard = rounded - bytes;
    tt->dtype = dtype;
    tt->t.data = p;
    tt->t.device = (DLDevice){kDLCPU, 0};
    tt->t.ndim = ndim;
    tt->t.dtype = tool_dlpack_dtype(dtype);
    tt->t.shape = tt->shape;
    tt->t.strides = tt->strides;
    tt->t.byte_offset = 0;
    return true;
}

bool tool_tensor_guard_intact(const struct tool_tensor *tt)
{
    if (!tt->alloc)
        return true;
    const unsigned char *g = (const unsigned char *)tt->alloc + tt->bytes;
    for (size_t i = 0; i < tt->guard; i++)
        if (g[i] != guard_byte(i))
            return false;
    return true;
}

void tool_tensor_guard_reset(struct tool_tensor *tt)
{
    if (!tt->alloc)
        return;
    unsigned char *g = (unsigned char *)tt->alloc + tt->bytes;
    for (size_t i = 0; i < tt->guard; i++)
        g[i] = guard_byte(i);
}

void tool_tensor_free(struct tool_tensor *tt)
{
    free(tt->alloc);
    memset(tt, 0, sizeof *tt);
}

int64_t tool_tensor_numel(const struct tool_tensor *tt)
{
    if (!tt->alloc)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < tt->t.ndim; i++)
        n *= tt->shape[i];
    return n;
}

/* Storage offset (elements) of logical element i: rows are the only thing padded. */
static int64_t storage_offset(const struct tool_tensor *tt, int64_t i)
{
    const int last = tt->t.ndim - 1;
    if (last == 0)
        return i;
    const int64_t width = tt->shape[last];
    return (i / width) * tt->strides[last - 1] + i % width;
}

static float load_at(const struct tool_tensor *tt, int64_t off)
{
    switch (tt->dtype) {
    case TOOL_F16:
        return fld_f16_to_f32(((const uint16_t *)tt->alloc)[off]);
    case TOOL_BF16:
        return fld_bf16_to_f32(((const uint16_t *)tt->alloc)[off]);
    case TOOL_I64:
        return (float)((const int64_t *)tt->alloc)[off];
    case TOOL_I32:
        return (float)((const int32_t *)tt->alloc)[off];
    default:
        return ((const float *)tt->alloc)[off];
    }
}

static void store_at(struct tool_tensor *tt, int64_t off, float v)
{
    switch (tt->dtype) {
    case TOOL_F16:
        ((uint16_t *)tt->alloc)[off] = fld_f32_to_f16(v);
        break;
    case TOOL_BF16:
        ((uint16_t *)tt->alloc)[off] = fld_f32_to_bf16(v);
        break;
    case TOOL_I64:
        ((int64_t *)tt->alloc)[off] = (int64_t)v;
        break;
    case TOOL_I32:
        ((int32_t *)tt->alloc)[off] = (int32_t)v;
        break;
    default:
        ((float *)tt->alloc)[off] = v;
        break;
    }
}

float tool_tensor_get(const struct tool_tensor *tt, int64_t i)
{
    return load_at(tt, storage_offset(tt, i));
}

void tool_tensor_set(struct tool_tensor *tt, int64_t i, float v)
{
    store_at(tt, storage_offset(tt, i), v);
}

/* Logical elements as rows of width elements, stride apart in storage. */
static void row_layout(const struct tool_tensor *tt, int64_t *rows, int64_t *width, int64_t *stride)
{
    const int last = tt->t.ndim - 1;
    *width = tt->shape[last];
    *stride = last ? tt->strides[last - 1] : *width;
    *rows = *width ? tool_tensor_numel(tt) / *width : 0;
}

/* splitmix64: tiny, fast, and the same sequence on every machine. */
uint64_t tool_rng_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double tool_rng_unit(uint64_t *state)
{
    return (double)(tool_rng_u64(state) >> 11) * 0x1.0p-53;
}

void tool_tensor_fill_uniform(struct tool_tensor *tt, uint64_t *seed, float lo, float hi)
{
    int64_t rows, width, stride;
    row_layout(tt, &rows, &width, &stride);
    const double span = (double)hi - (double)lo;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < width; j++) {
            float v = (float)((double)lo + span * tool_rng_unit(seed));
            store_at(tt, r * stride + j, v >= hi ? lo : v); /* rounding to float can reach hi */
        }
}

/* Marsaglia's polar method: a pair of independent N(0, 1) values, no trigonometry. */
static void next_normal_pair(uint64_t *seed, double *a, double *b)
{
    double u, v, s;
    do {
        u = 2.0 * tool_rng_unit(seed) - 1.0;
        v = 2.0 * tool_rng_unit(seed) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = sqrt(-2.0 * log(s) / s);
    *a = u * f;
    *b = v * f;
}

void tool_tensor_fill_normal(struct tool_tensor *tt, uint64_t *seed, float mean, float std)
{
    int64_t rows, width, stride;
    row_layout(tt, &rows, &width, &stride);
    double pair[2];
    int left = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < width; j++) {
            if (left == 0) {
                next_normal_pair(seed, &pair[0], &pair[1]);
                left = 2;
            }
            store_at(tt, r * stride + j, (float)(mean + std * pair[--left]));
        }
}

void tool_tensor_copy(struct tool_tensor *dst, const struct tool_tensor *src)
{
    if (dst->alloc && src->alloc)
        memcpy(dst->alloc, src->alloc, src->bytes < dst->bytes ? src->bytes : dst->bytes);
}
