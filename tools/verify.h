/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch verify: the test cases (verify_cases.c) and how cmd_verify.c
 * runs them. A case belongs to an op family; the ops of a family share
 * their inputs (the four activations read the same x, rms_norm and
 * gemma_rms_norm the same x, weight and residual), so one generated input
 * serves every op of the family.
 */
#ifndef FLD_TOOLS_VERIFY_H
#define FLD_TOOLS_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "tensors.h"

/* The layouts of rotary query and key. */
enum verify_rope_layout {
    VR_FLAT,   /* [T, H*D] */
    VR_PADDED, /* [T, H, D] sliced from [T, H, D+64]: head stride D+64 */
    VR_BATCH   /* [B, S, H*D] with positions [B, S] */
};

struct verify_case {
    enum tool_family family;
    int64_t tokens; /* rows (VR_BATCH: batch * seq) */
    /* activations: x [tokens, 2d] with row_pad unused elements per row, out [tokens, d] */
    int64_t d, row_pad;
    /* norms: x [tokens, h]; strided: x is randn(T, 2H)[:, :H]; w32 / r32: float32
       weight / residual whatever the dtype; huge: x (and residual) scaled by 1e30 */
    int64_t h;
    bool residual, no_weight, strided, in_place, scaled, w32, r32, huge;
    /* rotary */
    bool neox, pos_i32, cache_f32;
    int64_t head, rot, q_heads, k_heads; /* k_heads 0: key absent */
    int64_t batch, seq;                  /* VR_BATCH */
    enum verify_rope_layout layout;
};

/* The cases of a family, full set or --quick, in a static table. */
const struct verify_case *verify_cases(enum tool_family family, bool quick, size_t *count);

/* "T=83 H=769 residual strided in-place"-style label. */
const char *verify_case_label(const struct verify_case *c, char *buf, size_t size);

/* The allclose tolerance of a family and dtype (enum tool_dtype): vLLM's kernel tests' defaults. */
void verify_tolerance(enum tool_family family, int dtype, double *atol, double *rtol);

/* ---- the tensors of one case ------------------------------------------- */

enum verify_slot {
    VS_X,        /* activation and norm input */
    VS_OUT,      /* absent when the norm runs in place (out is x) */
    VS_WEIGHT,   /* absent when no_weight */
    VS_RESIDUAL, /* absent without residual */
    VS_POSITIONS,
    VS_QUERY,
    VS_KEY,       /* absent when k_heads is 0 */
    VS_QUERY_OUT, /* rotary_embedding_out's outputs, in the layout of query and key */
    VS_KEY_OUT,
    VS_CACHE,
    VS_COUNT
};

/*
 * The tensors of one run. A slot is present when its tensor has storage.
 * The cos/sin cache is shared between cases and runs (it is large); it is
 * borrowed, not owned, and checked for writes against a pristine copy.
 */
struct verify_io {
    const struct verify_case *c;
    int dtype; /* enum tool_dtype of the floating tensors */
    struct tool_tensor t[VS_COUNT];
    struct tool_tensor *cache;          /* borrowed, VS_CACHE unused */
    const struct tool_tensor *cache_ro; /* its pristine copy */
};

/* The tensor of a slot, NULL when absent (the cache for VS_CACHE). */
struct tool_tensor *verify_slot(struct verify_io *io, enum verify_slot s);
const char *verify_slot_name(enum verify_slot s);
/* Whether op writes the slot ("out", residual, query, key, query_out, key_out; x when in place). */
bool verify_slot_written(const struct verify_io *io, enum verify_slot s);

/*
 * Generates the inputs of case c in dtype (deterministic in seed). Padding
 * and untouched outputs hold a sentinel so that writes show. false when out
 * of memory (io left empty).
 */
bool verify_io_make(struct verify_io *io, const struct verify_case *c, int dtype, uint64_t seed);
/* A copy of every owned tensor of src; the cache stays borrowed. */
bool verify_io_clone(struct verify_io *dst, const struct verify_io *src);
void verify_io_free(struct verify_io *io);
/* Frees the slots op does not write (after a reference run: only outputs are compared). */
void verify_io_drop_inputs(struct verify_io *io);
/* Frees the shared cos/sin caches. */
void verify_caches_free(void);

/* Calls op on io (no policy change: the caller pins the implementation). */
int verify_io_call(const char *op, struct verify_io *io);

/*
 * Calls op for case c on the tensors of views, slot by slot (NULL when
 * absent; VS_CACHE is the cos/sin cache): how verify calls an implementation
 * on device copies of io's tensors.
 */
int verify_call(const char *op, const struct verify_case *c, DLTensor *const views[VS_COUNT]);

#endif
