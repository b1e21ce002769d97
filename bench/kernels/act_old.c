/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The old plain-loop activation kernels (git HEAD:plugins/cpu/activation.c
 * before the vector rewrite: scalar libm expf / erff / tanhf, 16-bit rows through
 * float32 scratch chunks), behind the job interface, for the speed
 * comparison only.
 */
#include <math.h>
#include <string.h>

#include "act_harness.h"
#include "old_convert.h"

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
    const float k = 0.79788456080286536f;
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

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

static void old_row(enum fld_cpu_act act, void *out, const void *x, int64_t d, int dt)
{
    if (dt == FLD_CPU_F32) {
        const float *xf = x;
        act_f32(act, out, xf, xf + d, d);
        return;
    }
    float a[OLD_CHUNK], b[OLD_CHUNK];
    for (int64_t j = 0; j < d; j += OLD_CHUNK) {
        int64_t n = d - j < OLD_CHUNK ? d - j : OLD_CHUNK;
        old_load(a, fld__cpu_at(x, j, dt), n, dt);
        old_load(b, fld__cpu_at(x, d + j, dt), n, dt);
        act_f32(act, a, a, b, n);
        old_store(fld__cpu_at(out, j, dt), a, n, dt);
    }
}

void act_old_range(const struct fld_cpu_act_job *job, int64_t row_begin, int64_t row_end)
{
    for (int64_t r = row_begin; r < row_end; r++)
        old_row(job->act, fld__cpu_at(job->out, r * job->out_stride, job->dt),
                fld__cpu_at(job->x, r * job->x_stride, job->dt), job->d, job->dt);
}
