/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Entry point of rotary_embedding: one job over the tokens (each token's
 * cos/sin row serves all its query and key heads), split across threads by
 * the pool and run by the active variant's kernel, in place.
 */
#include "cpu.h"

static void rotary_range(const void *job, int64_t begin, int64_t end)
{
    fld__cpu_active->rotary(job, begin, end);
}

int fld__cpu_rotary_embedding(const void *args)
{
    const fld_rotary_embedding_args *a = args;
    int dt = fld__cpu_dtype_of(a->query, FLD_OP_ROTARY_EMBEDDING, "query");
    if (dt < 0)
        return FLD_EINVAL;

    struct fld_cpu_rotary_job job = {
        .is_neox = a->is_neox, .dt = dt, .prefetch = fld__cpu_rotary_prefetch};
    fld_rotary_geometry_of(a, &job.g);
    job.cache_dt = fld_dtype_index(job.g.cache_dtype);
    if (job.cache_dt < 0) {
        fld_set_error("rotary_embedding: tensor 'cos_sin_cache' has a dtype vendor.cpu cannot "
                      "read");
        return FLD_EINVAL;
    }
    const fld_rotary_geometry *g = &job.g;
    if (g->tokens == 0 || g->rot_dim == 0 || (g->q_heads == 0 && g->k_heads == 0))
        return FLD_OK; /* nothing rotates: do not even read the cache */

    /* Per token: the rotated part of every head read and written, one cache row, one position. */
    size_t per_token =
        (size_t)(g->q_heads + g->k_heads) * (size_t)g->rot_dim * 2u * fld__cpu_elem_size(dt) +
        (size_t)g->rot_dim * fld__cpu_elem_size(job.cache_dt) + (g->positions_int32 ? 4u : 8u);
    fld__cpu_parallel(rotary_range, &job, g->tokens, (size_t)g->tokens * per_token);
    return FLD_OK;
}
