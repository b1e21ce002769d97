/*
 * Gated activations of the cpu plugin: silu_and_mul, mul_and_silu,
 * gelu_and_mul, gelu_tanh_and_mul. float32 arithmetic, one rounding per
 * output (vLLM's CPU kernels round once too, unlike its CUDA ones).
 */
#include <math.h>

#include "cpu.h"

static inline float silu(float v)
{
    return v / (1.0f + expf(-v));
}

static inline float gelu_erf(float v)
{
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

static inline float gelu_tanh(float v)
{
    const float k = 0.79788456080286536f; /* sqrt(2/pi) */
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

/*
 * The float32 body of a row: o = act(a) * b, or a * silu(b) for
 * mul_and_silu. o may be a or b (element-wise, same index).
 */
static void act_f32(enum fld_cpu_act act, float *o, const float *a, const float *b, int64_t n)
{
    switch (act) {
    case FLD_CPU_ACT_SILU_AND_MUL:
        for (int64_t i = 0; i < n; i++)
            o[i] = silu(a[i]) * b[i];
        break;
    case FLD_CPU_ACT_MUL_AND_SILU:
        for (int64_t i = 0; i < n; i++)
            o[i] = a[i] * silu(b[i]);
        break;
    case FLD_CPU_ACT_GELU_AND_MUL:
        for (int64_t i = 0; i < n; i++)
            o[i] = gelu_erf(a[i]) * b[i];
        break;
    case FLD_CPU_ACT_GELU_TANH_AND_MUL:
        for (int64_t i = 0; i < n; i++)
            o[i] = gelu_tanh(a[i]) * b[i];
        break;
    }
}

void fld__cpu_act_row(enum fld_cpu_act act, void *out, const void *x, int64_t d, int dt)
{
    if (dt == FLD_CPU_F32) {
        const float *xf = x;
        act_f32(act, out, xf, xf + d, d);
        return;
    }
    float a[FLD_CPU_CHUNK], b[FLD_CPU_CHUNK];
    for (int64_t j = 0; j < d; j += FLD_CPU_CHUNK) {
        int64_t n = d - j < FLD_CPU_CHUNK ? d - j : FLD_CPU_CHUNK;
        fld__cpu_load(a, fld__cpu_at(x, j, dt), n, dt);
        fld__cpu_load(b, fld__cpu_at(x, d + j, dt), n, dt);
        act_f32(act, a, a, b, n);
        fld__cpu_store(fld__cpu_at(out, j, dt), a, n, dt);
    }
}

static int run_activation(const void *args, enum fld_cpu_act act, const char *op)
{
    const fld_activation_args *a = args;
    int dt = fld__cpu_dtype_of(a->x, op, "x");
    if (dt < 0)
        return FLD_EINVAL;

    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (out.width == 0)
        return FLD_OK;
    for (int64_t r = 0; r < out.rows; r++)
        fld__cpu_act_row(act, fld__cpu_at(out.data, r * out.stride, dt),
                         fld__cpu_at(x.data, r * x.stride, dt), out.width, dt);
    return FLD_OK;
}

int fld__cpu_silu_and_mul(const void *args)
{
    return run_activation(args, FLD_CPU_ACT_SILU_AND_MUL, FLD_OP_SILU_AND_MUL);
}

int fld__cpu_mul_and_silu(const void *args)
{
    return run_activation(args, FLD_CPU_ACT_MUL_AND_SILU, FLD_OP_MUL_AND_SILU);
}

int fld__cpu_gelu_and_mul(const void *args)
{
    return run_activation(args, FLD_CPU_ACT_GELU_AND_MUL, FLD_OP_GELU_AND_MUL);
}

int fld__cpu_gelu_tanh_and_mul(const void *args)
{
    return run_activation(args, FLD_CPU_ACT_GELU_TANH_AND_MUL, FLD_OP_GELU_TANH_AND_MUL);
}
