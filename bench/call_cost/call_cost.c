/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Instructions per call of the entry points, for callgrind:
 *
 *   call_cost KIND N
 *
 * makes N calls of one kind in a function of its own (loop_<KIND>; both
 * rotary kinds: loop_rotary), so that
 * `valgrind --tool=callgrind --toggle-collect=loop_<KIND> call_cost KIND N`
 * counts exactly those calls; run it with N and 2N and divide the difference
 * by N (bench/call_cost/run.sh does). Kinds:
 *
 *   direct     a null rms_norm kernel through a volatile function pointer
 *   typed      fld_rms_norm() on [1, 4096] float32 x, out, weight, with the
 *              null kernel pinned (what `fldispatch bench --overhead` times)
 *   prepared   fld_prepared_rms_norm() of the same call
 *   run        fld_prepared_run() of the same prepared call (its bound pointers)
 *   opaque     fld_call() by handle of the null kernel registered for an op
 *              outside the catalog (dispatch alone: no validation)
 *   norm, norm_res, silu, rotary, rotary_bf16
 *              the typed calls at 1 x 4096 (rotary: 1 token, 32 + 32 heads of
 *              128, neox, a float32 cache) with whatever the policy selects
 *              (vendor.cpu where the cpu plugin is found)
 */
#include <fldispatch/fldispatch.h>
#include <fldispatch/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H 4096

static int null_kernel(const void *args)
{
    (void)args;
    return FLD_OK;
}

static int register_null(fld_registry *reg)
{
    static const char *const ops[] = {FLD_OP_RMS_NORM, "cost_opaque"};
    for (int i = 0; i < 2; i++) {
        const fld_impl impl = {
            .op = ops[i],
            .impl_id = "vendor.cost_null",
            .kind = FLD_KIND_VENDOR,
            .vendor = "cost",
            .priority = 1,
            .devices = FLD_DEVICE_MASK_CPU,
            .dtypes = FLD_DTYPE_MASK_F32,
            .fn = null_kernel,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor null_plugin = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .name = "cost",
    .version = FLD_VERSION_STRING,
    .host_version = FLD_VERSION_STRING,
    .register_builtins = register_null,
};

static const DLDataType F32 = {kDLFloat, 32, 1}, BF16 = {kDLBfloat, 16, 1}, I64 = {kDLInt, 64, 1};

static DLTensor tensor(void *data, int ndim, int64_t *shape, DLDataType dt)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype = dt;
    t.shape = shape;
    return t;
}

static void *zeros(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "call_cost: out of memory\n");
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}

static int (*volatile direct_fn)(const void *) = null_kernel;
static int failures;

__attribute__((noinline)) void loop_direct(long n, const void *args)
{
    for (long i = 0; i < n; i++)
        failures += direct_fn(args) != FLD_OK;
}

__attribute__((noinline)) void loop_typed(long n, const fld_rms_norm_args *a)
{
    for (long i = 0; i < n; i++)
        failures += fld_rms_norm(a->out, a->x, a->weight, a->residual, a->eps) != FLD_OK;
}

__attribute__((noinline)) void loop_prepared(long n, fld_prepared *p, const fld_rms_norm_args *a)
{
    for (long i = 0; i < n; i++)
        failures +=
            fld_prepared_rms_norm(p, a->out->data, a->x->data, a->weight->data, NULL) != FLD_OK;
}

__attribute__((noinline)) void loop_run(long n, fld_prepared *p)
{
    for (long i = 0; i < n; i++)
        failures += fld_prepared_run(p) != FLD_OK;
}

__attribute__((noinline)) void loop_opaque(long n, fld_op op, const void *args)
{
    for (long i = 0; i < n; i++)
        failures += fld_call(op, args) != FLD_OK;
}

__attribute__((noinline)) void loop_norm(long n, const fld_rms_norm_args *a)
{
    for (long i = 0; i < n; i++)
        failures += fld_rms_norm(a->out, a->x, a->weight, a->residual, a->eps) != FLD_OK;
}

__attribute__((noinline)) void loop_norm_res(long n, const fld_rms_norm_args *a)
{
    for (long i = 0; i < n; i++)
        failures += fld_rms_norm(a->out, a->x, a->weight, a->residual, a->eps) != FLD_OK;
}

__attribute__((noinline)) void loop_silu(long n, DLTensor *out, DLTensor *x)
{
    for (long i = 0; i < n; i++)
        failures += fld_silu_and_mul(out, x) != FLD_OK;
}

__attribute__((noinline)) void loop_rotary(long n, const fld_rotary_embedding_args *a)
{
    for (long i = 0; i < n; i++)
        failures += fld_rotary_embedding(a->positions, a->query, a->key, a->head_size,
                                         a->cos_sin_cache, a->is_neox) != FLD_OK;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: call_cost KIND N\n");
        return 2;
    }
    const char *kind = argv[1];
    const long n = atol(argv[2]);
    const bool null = !strcmp(kind, "direct") || !strcmp(kind, "typed") ||
                      !strcmp(kind, "prepared") || !strcmp(kind, "run") || !strcmp(kind, "opaque");
    if (null && fld_register_plugin(&null_plugin) != FLD_OK) {
        fprintf(stderr, "call_cost: %s\n", fld_last_error());
        return 1;
    }
    if (fld_init() != FLD_OK ||
        (null && fld_policy_set("per_op", FLD_OP_RMS_NORM "=impl:vendor.cost_null") != FLD_OK)) {
        fprintf(stderr, "call_cost: %s\n", fld_last_error());
        return 1;
    }
    int64_t row[2] = {1, H}, row2[2] = {1, 2 * H}, wsh[1] = {H};
    DLTensor x = tensor(zeros(2 * H * 4), 2, row, F32), out = tensor(zeros(H * 4), 2, row, F32);
    DLTensor w = tensor(zeros(H * 4), 1, wsh, F32), r = tensor(zeros(H * 4), 2, row, F32);
    fld_rms_norm_args norm = {&out, &x, &w, NULL, 1e-6f};
    /* one warm-up call of each: selection and caches are not counted */
    if (!strcmp(kind, "direct")) {
        loop_direct(n, &norm);
    } else if (!strcmp(kind, "typed")) {
        loop_typed(1, &norm);
        loop_typed(n, &norm);
    } else if (!strcmp(kind, "prepared") || !strcmp(kind, "run")) {
        fld_prepared *p;
        if (fld_prepare(FLD_OP_RMS_NORM, &norm, &p) != FLD_OK) {
            fprintf(stderr, "call_cost: %s\n", fld_last_error());
            return 1;
        }
        if (!strcmp(kind, "run")) {
            loop_run(1, p);
            loop_run(n, p);
        } else {
            loop_prepared(1, p, &norm);
            loop_prepared(n, p, &norm);
        }
        fld_prepared_free(p);
    } else if (!strcmp(kind, "opaque")) {
        fld_op op = fld_op_lookup("cost_opaque");
        if (!op) {
            fprintf(stderr, "call_cost: %s\n", fld_last_error());
            return 1;
        }
        loop_opaque(1, op, &norm);
        loop_opaque(n, op, &norm);
    } else if (!strcmp(kind, "norm")) {
        loop_norm(1, &norm);
        loop_norm(n, &norm);
    } else if (!strcmp(kind, "norm_res")) {
        norm.residual = &r;
        loop_norm_res(1, &norm);
        loop_norm_res(n, &norm);
    } else if (!strcmp(kind, "silu")) {
        DLTensor xs = tensor(x.data, 2, row2, F32);
        loop_silu(1, &out, &xs);
        loop_silu(n, &out, &xs);
    } else if (!strcmp(kind, "rotary") || !strcmp(kind, "rotary_bf16")) {
        const bool bf = !strcmp(kind, "rotary_bf16");
        int64_t pos_shape[1] = {1}, qk[2] = {1, 32 * 128}, cache_shape[2] = {64, 128};
        DLTensor pos = tensor(zeros(8), 1, pos_shape, I64);
        DLTensor q = tensor(zeros(32 * 128 * 4), 2, qk, bf ? BF16 : F32);
        DLTensor k = tensor(zeros(32 * 128 * 4), 2, qk, bf ? BF16 : F32);
        DLTensor cache = tensor(zeros(64 * 128 * 4), 2, cache_shape, F32);
        fld_rotary_embedding_args a = {&pos, &q, &k, 128, &cache, true};
        loop_rotary(1, &a);
        loop_rotary(n, &a);
    } else {
        fprintf(stderr, "call_cost: unknown kind '%s'\n", kind);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "call_cost: %d calls failed: %s\n", failures, fld_last_error());
        return 1;
    }
    fld_shutdown();
    return 0;
}
