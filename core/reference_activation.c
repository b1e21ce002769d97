/*
 * Reference gated activations (impl "reference.c"): out[..., j] =
 * act(x[..., j]) * x[..., d + j] (mul_and_silu: x[..., j] * silu(x[..., d + j])),
 * computed in float32 from the loaded values and rounded once to the dtype.
 *
 * The activations are written in forms that stay accurate in the tails,
 * where the textbook forms cancel:
 *   silu(a)      = a / (1 + exp(-a))
 *   gelu(a)      = 0.5 a (1 + erf(a/sqrt2))  = 0.5 a erfc(-a/sqrt2)
 *   gelu_tanh(a) = 0.5 a (1 + tanh(u))       = a / (1 + exp(-2u)),
 *                  u = sqrt(2/pi) (a + 0.044715 a^3)
 * For a -> -inf, 1 + erf and 1 + tanh lose every digit in float32, while the
 * erfc and exp forms keep full relative precision; the results are the same
 * functions, so callers see vLLM's semantics with one rounding.
 */
#include <math.h>

#include <fldispatch/plugin.h>

#include "reference.h"

enum act { ACT_SILU_MUL, ACT_MUL_SILU, ACT_GELU_MUL, ACT_GELU_TANH_MUL };

static inline float silu(float a)
{
    return a / (1.0f + expf(-a));
}

static inline float gelu_erf(float a)
{
    return 0.5f * a * erfcf(-a * (float)M_SQRT1_2);
}

static inline float gelu_tanh(float a)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    float u = k * (a + 0.044715f * a * a * a);
    return a / (1.0f + expf(-2.0f * u));
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
                v = silu(a) * b;
                break;
            case ACT_MUL_SILU:
                v = a * silu(b);
                break;
            case ACT_GELU_MUL:
                v = gelu_erf(a) * b;
                break;
            default:
                v = gelu_tanh(a) * b;
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
