/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Owning DLTensors in CPU memory, for the tests (the tool's own, for verify
 * and bench, is tools/tensors.c: row padding and fallible allocation, no
 * guards).
 *
 *   tt_tensor *x = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){7, 768});
 *   tt_fill_normal(x, 42, 0.0, 1.0);
 *   ... fld_rms_norm(&out->t, &x->t, ...) ...
 *   double v = tt_get(x, 5);         // logical element 5, row-major
 *   ck_assert(tt_padding_intact(x)); // nothing outside the view was written
 *   tt_free(x);
 *
 * A tt_tensor's view (t) is a CPU DLTensor whose shape and strides point into
 * the tt_tensor itself. Its buffer is 64-byte aligned and the view starts
 * TT_GUARD bytes into it (through byte_offset, so kernels that ignore
 * byte_offset are caught); every byte of the buffer outside the view --
 * guards before and after, padding between strided rows or heads -- is set to
 * TT_SENTINEL at creation, and tt_padding_intact() checks it still is.
 *
 * Logical elements are numbered row-major over the shape (what
 * tensor.flatten() would give); tt_get/tt_set/tt_to_double/tt_from_double
 * use that order whatever the strides. Float values are rounded to the dtype
 * with half.h (double -> float32 -> f16/bf16); int64 and int32 (positions)
 * are supported too. tt_new() and the other creators abort on failure (out
 * of memory, bad dtype, negative shape): that suits tests; tt_try_new() and
 * tt_try_new_strided() return NULL instead, for a test of bad shapes. Not thread-safe
 * per tensor; distinct tensors are independent.
 */
#ifndef FLD_TESTS_CPU_TENSOR_H
#define FLD_TESTS_CPU_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#define TT_MAX_DIMS 8
#define TT_GUARD    64u   /* bytes before and after the view */
#define TT_SENTINEL 0xA5u /* fill byte of everything outside the view */

#define TT_INT64 ((DLDataType){kDLInt, 64, 1})
#define TT_INT32 ((DLDataType){kDLInt, 32, 1})

typedef struct tt_tensor {
    DLTensor t; /* the view handed to the library */
    int64_t shape[TT_MAX_DIMS];
    int64_t strides[TT_MAX_DIMS]; /* t.strides points here, or is NULL */
    void *buf;                    /* the owning allocation */
    size_t buf_bytes;
} tt_tensor;

/* Contiguous tensor with t.strides == NULL, elements zeroed. */
tt_tensor *tt_new(DLDataType dtype, int ndim, const int64_t *shape);
/*
 * Tensor with explicit element strides (t.strides set; all >= 0). The buffer
 * covers the view; elements of the view are zeroed, the rest is sentinel.
 */
tt_tensor *tt_new_strided(DLDataType dtype, int ndim, const int64_t *shape, const int64_t *strides);
/*
 * As tt_new() and tt_new_strided(), but NULL instead of an abort when the
 * dtype is not one of the above, ndim is out of [0, TT_MAX_DIMS], a shape
 * or stride is negative, the size overflows, or memory runs out.
 */
tt_tensor *tt_try_new(DLDataType dtype, int ndim, const int64_t *shape);
tt_tensor *tt_try_new_strided(DLDataType dtype, int ndim, const int64_t *shape,
                              const int64_t *strides);
/* A tensor of the same dtype, shape and strides holding the same values. */
tt_tensor *tt_clone(const tt_tensor *src);
void tt_free(tt_tensor *t);

/* Logical element count (product of the shape). */
int64_t tt_numel(const tt_tensor *t);
size_t tt_elem_size(DLDataType dtype);

/* Element idx (row-major logical index) as a double, and setting it (rounded to the dtype). */
double tt_get(const tt_tensor *t, int64_t idx);
void tt_set(tt_tensor *t, int64_t idx, double v);
/* All elements into dst[numel] / from src[numel]. */
void tt_to_double(const tt_tensor *t, double *dst);
void tt_from_double(tt_tensor *t, const double *src);

/*
 * Fills the view with N(mean, std) values from a fixed-seed generator
 * (the same seed gives the same values on every machine), rounded to the dtype.
 */
void tt_fill_normal(tt_tensor *t, uint64_t seed, double mean, double std);

/* True when every byte of the buffer outside the view still holds TT_SENTINEL. */
bool tt_padding_intact(const tt_tensor *t);

/* value rounded to dtype (float dtypes) and back to double. */
double tt_round(DLDataType dtype, double value);

/* A deterministic generator for tests: 32 random bits, uniform in [0, 1)
   and standard normal. */
typedef struct tt_rng {
    uint64_t state;
    double spare; /* the second normal of the last pair */
    bool has_spare;
} tt_rng;
void tt_rng_seed(tt_rng *r, uint64_t seed);
uint32_t tt_rng_bits(tt_rng *r);
double tt_rng_uniform(tt_rng *r);
double tt_rng_normal(tt_rng *r);

#endif
