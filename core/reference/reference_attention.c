/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reference attention backend choice (impl "reference.c"): the backend vLLM
 * uses on each device for standard, MLA and sparse-MLA attention. Serves
 * every device type, since it touches no tensor.
 */
#include <fldispatch/plugin.h>

#include "ops.h"
#include "reference.h"

int fld__ref_attention_backend(const void *argp)
{
    const fld_attention_backend_args *args = argp;
    const char *name = NULL;
    switch (fld__device_index(args->device_type)) {
    case FLD_DEV_CPU:
        if (args->use_mla) {
            fld_set_error("attention_backend: no MLA attention backend on cpu (use_mla=true%s)",
                          args->use_sparse ? ", use_sparse=true" : "");
            return FLD_EUNSUPPORTED;
        }
        name = "CPU_ATTN";
        break;
    case FLD_DEV_CUDA:
        name = args->use_sparse ? "FLASHMLA_SPARSE" : args->use_mla ? "FLASHMLA" : "FLASH_ATTN";
        break;
    case FLD_DEV_ROCM:
        name = args->use_sparse ? "ROCM_AITER_MLA_SPARSE"
               : args->use_mla  ? "ROCM_AITER_MLA"
                                : "ROCM_ATTN";
        break;
    case FLD_DEV_ASCEND:
        if (args->use_sparse) {
            fld_set_error("attention_backend: no sparse MLA attention backend on ascend");
            return FLD_EUNSUPPORTED;
        }
        name = args->use_mla ? "ASCEND_MLA" : "ASCEND";
        break;
    default:
        /* Validation rejects unknown device types; never reached. */
        fld_set_error("attention_backend: device type %d is not supported", args->device_type);
        return FLD_EUNSUPPORTED;
    }
    *args->name = name;
    return FLD_OK;
}
