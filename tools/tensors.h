/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU tensors owned by the tool, for verify and bench: allocation with
 * optional row padding (strided rows), deterministic random fills, copies
 * and element access in float32 whatever the storage dtype.
 *
 * The fills draw from splitmix64 (tool_rng_u64(), the tool's one generator)
 * with Marsaglia's polar method: the generator's state is kept across fills,
 * the second value of each pair is handed out first and a leftover value is
 * dropped at the end of a fill, so verify's inputs for a given --seed are
 * the same on every machine. (The tests have their own helper,
 * tests/util/cpu_tensor.h: guarded buffers that catch stray writes.)
 */
#ifndef FLD_TOOLS_TENSORS_H
#define FLD_TOOLS_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fldispatch/fldispatch.h>

/* Storage dtypes: FLD_DTYPE_MASK_* bit order, then int64 and int32 for positions. */
enum tool_dtype { TOOL_F32 = 0, TOOL_F16 = 1, TOOL_BF16 = 2, TOOL_I64 = 3, TOOL_I32 = 4 };

#define TOOL_MAX_DIMS 4

struct tool_tensor {
    DLTensor t; /* points at shape, strides and storage below; pass &tt.t to the library */
    int64_t shape[TOOL_MAX_DIMS];
    int64_t strides[TOOL_MAX_DIMS];
    int dtype;    /* enum tool_dtype */
    void *alloc;  /* 64-byte aligned storage; t.data == alloc, t.byte_offset == 0 */
    size_t bytes; /* size of the storage, padding included */
    size_t guard; /* bytes of guard pattern after the storage (tool_tensor_guard_intact()) */
};

/* At least this many bytes of a fixed pattern follow every tensor's storage. */
#define TOOL_GUARD_BYTES 256

/* The DLPack dtype of a tool dtype. */
DLDataType tool_dlpack_dtype(int dtype);
/* "f32", "f16", "bf16", "i64", "i32". */
const char *tool_dtype_name(int dtype);
/* Bytes per element. */
size_t tool_dtype_size(int dtype);

/*
 * Allocates a row-major CPU tensor of ndim (1..4) dims. row_pad > 0 adds that
 * many unused elements after each row of the last dim (the row stride becomes
 * shape[ndim-1] + row_pad), like x = randn(T, 2H)[:, :H]. Storage is zeroed.
 * Returns false (tensor left empty, nothing to free) when out of memory.
 */
bool tool_tensor_alloc(struct tool_tensor *tt, int dtype, int ndim, const int64_t *shape,
                       int64_t row_pad);
void tool_tensor_free(struct tool_tensor *tt);
/* Whether the guard pattern after tt's storage is as written: nothing wrote past the end. */
bool tool_tensor_guard_intact(const struct tool_tensor *tt);
/* Writes the guard pattern again (a tensor shared by several runs, after one wrote past it). */
void tool_tensor_guard_reset(struct tool_tensor *tt);

/* Number of logical elements (padding excluded). */
int64_t tool_tensor_numel(const struct tool_tensor *tt);

/* Element i in row-major logical order (padding skipped), widened to float. */
float tool_tensor_get(const struct tool_tensor *tt, int64_t i);
/* Stores v as element i in row-major logical order (padding skipped), rounded to
 * nearest even for 16-bit dtypes. */
void tool_tensor_set(struct tool_tensor *tt, int64_t i, float v);

/* Fills every logical element: uniform in [lo, hi), or normal(mean, std). seed is advanced. */
void tool_tensor_fill_uniform(struct tool_tensor *tt, uint64_t *seed, float lo, float hi);
void tool_tensor_fill_normal(struct tool_tensor *tt, uint64_t *seed, float mean, float std);

/* The next value of the splitmix64 generator whose state is *state, and a
 * uniform double in [0, 1) from its top 53 bits. */
uint64_t tool_rng_u64(uint64_t *state);
double tool_rng_unit(uint64_t *state);

/* Copies the whole storage (padding included) of src into dst of identical layout. */
void tool_tensor_copy(struct tool_tensor *dst, const struct tool_tensor *src);

#endif
