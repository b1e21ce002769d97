/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Entry points of rotary_embedding (in place) and rotary_embedding_out (out
 * of place): one job over the tokens (each token's cos/sin row serves all
 * its query and key heads), split across threads by the pool and run by
 * the active variant's kernel, which reads the heads where the job's input
 * geometry says and writes them where its output geometry says.
 */
#include "cpu.h"

static void rotary_range(const void *job, int64_t begin, int64_t end)
{
    fld__cpu_active->rotary(job, begin, end);
}

/* Runs a job whose g, out, head_size and copy_rest are set; op names the caller in messages. */
static int run_rotary(struct fld_cpu_rotary_job *job, const char *op, const DLTensor *query,
                      bool is_neox)
{
    int dt = fld__cpu_dtype_of(query, op, "query");
    if (dt < 0)
        return FLD_EINVAL;
    job->is_neox = is_neox;
    job->dt = dt;
    job->prefetch = fld__cpu_rotary_prefetch;
    job->cache_dt = fld_dtype_index(job->g.cache_dtype);
    if (job->cache_dt < 0) {
        fld_set_error("%s: tensor 'cos_sin_cache' has a dtype vendor.cpu cannot read", op);
        return FLD_EINVAL;
    }
    const fld_rotary_geometry *g = &job->g;
    if (g->tokens == 0 || g->rot_dim == 0 || (g->q_heads == 0 && g->k_heads == 0))
        return FLD_OK; /* nothing rotates: do not even read the cache */

    /* Per token: the rotated part of every head read and written, one cache row, one position. */
    const int64_t moved = job->copy_rest ? job->head_size : g->rot_dim;
    size_t per_token =
        (size_t)(g->q_heads + g->k_heads) * (size_t)moved * 2u * fld__cpu_elem_size(dt) +
        (size_t)g->rot_dim * fld__cpu_elem_size(job->cache_dt) + (g->positions_int32 ? 4u : 8u);
    fld__cpu_parallel(rotary_range, job, g->tokens, (size_t)g->tokens * per_token);
    return FLD_OK;
}

int fld__cpu_rotary_embedding(const void *args)
{
    const fld_rotary_embedding_args *a = args;
    struct fld_cpu_rotary_job job = {.head_size = a->head_size};
    fld_rotary_geometry_of(a, &job.g);
    job.out = job.g;
    return run_rotary(&job, FLD_OP_ROTARY_EMBEDDING, a->query, a->is_neox);
}

int fld__cpu_rotary_embedding_out(const void *args)
{
    const fld_rotary_embedding_out_args *a = args;
    struct fld_cpu_rotary_job job = {.head_size = a->head_size};
    fld_rotary_out_geometry_of(a, &job.g, &job.out);
    job.copy_rest = job.g.rot_dim < a->head_size;
    return run_rotary(&job, FLD_OP_ROTARY_EMBEDDING_OUT, a->query, a->is_neox);
}
