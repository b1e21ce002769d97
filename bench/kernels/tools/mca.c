/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Static throughput of the activation loop bodies (llvm-mca), independent
 * of how busy the machine is. tools/mca.sh compiles this per layer with
 * one operation and dtype, cuts out the loop and runs llvm-mca on it:
 *   -DAP_LAYER='"simd_avx512.h"' -DMCA_ACT=FLD_CPU_ACT_SILU_AND_MUL -DMCA_DT=FLD_CPU_F32
 */
#include AP_LAYER

#include "vmath.h"

#include "body_activation.h"

void mca_loop(void *out, const void *x, int64_t d);
void mca_loop(void *out, const void *x, int64_t d)
{
    const int64_t es = (int64_t)fld__cpu_elem_size(MCA_DT);
    const char *pa = x, *pb = pa + d * es;
    char *po = out;
    for (int64_t j = 0; j + V_LANES <= d; j += V_LANES) {
        vf r = act_apply(MCA_ACT, v_load(pa + j * es, MCA_DT), v_load(pb + j * es, MCA_DT));
        v_store(po + j * es, r, MCA_DT);
    }
}
