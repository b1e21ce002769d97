/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The vmath functions of one vector layer, callable from the harness for
 * the accuracy sweep. Compiled once per layer with
 *   -DAP_LAYER='"simd_avx512.h"' -DAP_NAME=act_probe_avx512
 * and that layer's flags.
 */
#include AP_LAYER

#include "vmath.h"

#include "act_harness.h"

V_INLINE vf probe_one(int fn, vf x)
{
    switch (fn) {
    case PROBE_EXP:
        return vm_exp(x);
    case PROBE_SIGMOID:
        return vm_sigmoid(x);
    case PROBE_SILU:
        return vm_silu(x);
    case PROBE_GELU_TANH:
        return vm_gelu_tanh(x);
    case PROBE_ERF:
        return vm_erf(x);
    default:
        return vm_gelu(x);
    }
}

V_INLINE void probe_loop(int fn, float *out, const float *in, int64_t n)
{
    int64_t i = 0;
    for (; i + V_LANES <= n; i += V_LANES)
        v_store(out + i, probe_one(fn, v_load(in + i, FLD_CPU_F32)), FLD_CPU_F32);
    if (i < n)
        v_store_n(out + i, probe_one(fn, v_load_n(in + i, n - i, FLD_CPU_F32)), n - i, FLD_CPU_F32);
}

void AP_NAME(int fn, float *out, const float *in, int64_t n)
{
    switch (fn) {
    case PROBE_EXP:
        probe_loop(PROBE_EXP, out, in, n);
        break;
    case PROBE_SIGMOID:
        probe_loop(PROBE_SIGMOID, out, in, n);
        break;
    case PROBE_SILU:
        probe_loop(PROBE_SILU, out, in, n);
        break;
    case PROBE_GELU_TANH:
        probe_loop(PROBE_GELU_TANH, out, in, n);
        break;
    case PROBE_ERF:
        probe_loop(PROBE_ERF, out, in, n);
        break;
    default:
        probe_loop(PROBE_GELU, out, in, n);
        break;
    }
}
