/*
 * The library's reference kernels (impl_id "reference.c"): simple, exact
 * loops over validated arguments, float32 accumulation, one rounding to the
 * storage dtype. They are the executable spec every fast path is checked
 * against.
 */
#ifndef FLD_CORE_REFERENCE_H
#define FLD_CORE_REFERENCE_H

int fld__ref_silu_and_mul(const void *args);
int fld__ref_mul_and_silu(const void *args);
int fld__ref_gelu_and_mul(const void *args);
int fld__ref_gelu_tanh_and_mul(const void *args);
int fld__ref_rms_norm(const void *args);
int fld__ref_gemma_rms_norm(const void *args);
int fld__ref_rotary_embedding(const void *args);
int fld__ref_attention_backend(const void *args);

#endif
