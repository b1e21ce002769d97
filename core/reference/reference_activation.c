/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reference gated activations (impl "reference.c"), vLLM's numerics:
 *
 *   silu_and_mul       out = round(round(silu(a)) * b)
 *   mul_and_silu       out = round(a * round(silu(b)))
 *   gelu_and_mul       out = round(round(gelu(a)) * b)
 *   gelu_tanh_and_mul  out = round(round(gelu_tanh(a)) * b)
 *
 * with a = x[..., j], b = x[..., d + j] and round() to the storage dtype
 * (nearest even): the activation is rounded to the dtype, then multiplied
 * and the product rounded again, as vLLM's CUDA kernels do (ACT_FN returns
 * the storage type, the product is taken in it) and as its forward_native
 * does (F.silu(x[..., :d]) * x[..., d:] on 16-bit tensors). For float32
 * both rounds are no-ops: one float32 product. The product of two 16-bit
 * values is exact in float32, so the second rounding is the only one.
 *
 * The activations are vLLM's CUDA formulas in float32, operation for
 * operation (csrc/activation_kernels.cu), with the C library's expf, erff
 * and tanhf:
 *   silu(f)      = f / (1 + expf(-f))
 *   gelu(f)      = f * 0.5 * (1 + erff(f * sqrt(1/2)))
 *   gelu_tanh(f) = 0.5 * f * (1 + tanhf(beta * (f + kappa * f^3))),
 *                  beta = float(sqrt(2/pi)), kappa = 0.044715
 * including their cancellation for f -> -inf (1 + erff and 1 + tanhf go to
 * 0 in steps of float32's spacing below 1): vLLM's results there are these
 * quantised values, not the exact function, and so are ours. vendor.cpu
 * and the GPU kernels give the same 16-bit results for every input
 * (tests/test_kernels.c checks all 65536 of each dtype).
 *
 * Elementwise activations, out the shape of x, one rounding:
 *
 *   gelu_quick         out = round(f / (1 + expf(-1.702 * f)))
 *   gelu_new           out = round(0.5 * f * (1 + tanhf(c * (f + 0.044715 * f^3))))
 *   gelu_fast          out = round(0.5 * f * (1 + tanhf(c * f * (1 + 0.044715 * f^2))))
 *
 * with c = 0.79788456 (sqrt(2/pi)): vLLM's kernels' formulas (QuickGELU,
 * x * sigmoid(1.702 x); NewGELU; FastGELU) in float32. Where vLLM's 16-bit
 * kernels round an intermediate to the storage type, these do not; vLLM's
 * own tests hold these three to its default tolerances, not to exactness.
 * The cpu plugin serves them with vector kernels (16-bit: tables of these
 * formulas' rounded results), the GPU plugins with their own.
 */
#include <math.h>

#include <fldispatch/plugin.h>

#include "reference.h"

enum act { ACT_SILU_MUL, ACT_MUL_SILU, ACT_GELU_MUL, ACT_GELU_TANH_MUL };
enum unary { UNARY_GELU_QUICK, UNARY_GELU_NEW, UNARY_GELU_FAST };

static inline float silu(float f)
{
    return f / (1.0f + expf(-f));
}

static inline float gelu_erf(float f)
{
    const float alpha = (float)M_SQRT1_2;
    return f * 0.5f * (1.0f + erff(f * alpha));
}

static inline float gelu_tanh(float f)
{
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5);
    const float kappa = 0.044715f;
    const float cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(beta * (f + kappa * cube)));
}

static int gated(const void *argp, enum act kind)
{
    const fld_activation_args *args = argp;
    fld_rows x, out;
    fld_tensor_rows(args->x, &x);
    fld_tensor_rows(args->out, &out);
    const int dt = fld_dtype_index(args->x->dtype);
    const size_t elem = dt == 0 ? 4 : 2;
    const int64_t d = out.width;

    for (int64_t r = 0; r < x.rows && d > 0; r++) {
        const char *xr = (const char *)x.data + (size_t)(r * x.stride) * elem;
        const char *yr = xr + (size_t)d * elem;
        char *orow = (char *)out.data + (size_t)(r * out.stride) * elem;
        for (int64_t j = 0; j < d; j++) {
            float a = fld__ref_load(xr, j, dt), b = fld__ref_load(yr, j, dt), v;
            switch (kind) {
            case ACT_SILU_MUL:
                v = fld__ref_round(dt, silu(a)) * b;
                break;
            case ACT_MUL_SILU:
                v = a * fld__ref_round(dt, silu(b));
                break;
            case ACT_GELU_MUL:
                v = fld__ref_round(dt, gelu_erf(a)) * b;
                break;
            default:
                v = fld__ref_round(dt, gelu_tanh(a)) * b;
                break;
            }
            fld__ref_store(orow, j, dt, v);
        }
    }
    return FLD_OK;
}

int fld__ref_silu_and_mul(const void *args)
{
    return gated(args, ACT_SILU_MUL);
}

int fld__ref_mul_and_silu(const void *args)
{
    return gated(args, ACT_MUL_SILU);
}

int fld__ref_gelu_and_mul(const void *args)
{
    return gated(args, ACT_GELU_MUL);
}

int fld__ref_gelu_tanh_and_mul(const void *args)
{
    return gated(args, ACT_GELU_TANH_MUL);
}

static inline float gelu_quick(float f)
{
    return f / (1.0f + expf(-1.702f * f));
}

static inline float gelu_new(float f)
{
    const float c = 0.79788456f, cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(c * (f + 0.044715f * cube)));
}

static inline float gelu_fast(float f)
{
    const float c = 0.79788456f;
    return 0.5f * f * (1.0f + tanhf(c * f * (1.0f + 0.044715f * f * f)));
}

static int elementwise(const void *argp, enum unary kind)
{
    const fld_activation_args *args = argp;
    fld_rows x, out;
    fld_tensor_rows(args->x, &x);
    fld_tensor_rows(args->out, &out);
    const int dt = fld_dtype_index(args->x->dtype);
    const size_t elem = dt == 0 ? 4 : 2;
    for (int64_t r = 0; r < x.rows && x.width > 0; r++) {
        const char *xr = (const char *)x.data + (size_t)(r * x.stride) * elem;
        char *orow = (char *)out.data + (size_t)(r * out.stride) * elem;
        for (int64_t j = 0; j < x.width; j++) {
            const float f = fld__ref_load(xr, j, dt);
            float v;
            switch (kind) {
            case UNARY_GELU_NEW:
                v = gelu_new(f);
                break;
            case UNARY_GELU_FAST:
                v = gelu_fast(f);
                break;
            default:
                v = gelu_quick(f);
                break;
            }
            fld__ref_store(orow, j, dt, v);
        }
    }
    return FLD_OK;
}

int fld__ref_gelu_quick(const void *args)
{
    return elementwise(args, UNARY_GELU_QUICK);
}

int fld__ref_gelu_new(const void *args)
{
    return elementwise(args, UNARY_GELU_NEW);
}

int fld__ref_gelu_fast(const void *args)
{
    return elementwise(args, UNARY_GELU_FAST);
}
