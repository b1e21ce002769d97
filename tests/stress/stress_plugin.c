/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture of test_stress, test_fork and test_memory: implementations of every
 * catalog op (CPU, float32) that leave a mark saying which one ran, so a
 * test can tell from a call's outputs who served it, and that count what
 * they served per thread and per process.
 *
 * Built twice (tests/stress/tests.mk):
 *   fld-stressa.so (STRESS_VARIANT_A): vendor.alpha and vendor.beta
 *       (vendors "alpha", "beta", priority 100) and default.stress (flagos,
 *       priority 150);
 *   fld-stressb.so: vendor.gamma (vendor "gamma", priority 120), loaded in
 *       the middle of a run.
 *
 * The mark of implementation code c (STRESS_IMPL_*): every element of an
 * out-of-place op's `out`, every element of rotary_embedding's query and key,
 * becomes 1000 + c; attention_backend names "STRESS_<c>". The reference
 * kernels of the library never produce these values from the tests' inputs.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "stress_fixture.h"

#define EXPORT __attribute__((visibility("default")))

static _Atomic long total_counts[STRESS_N_OPS][STRESS_N_IMPLS];
static _Thread_local long thread_counts[STRESS_N_OPS][STRESS_N_IMPLS];

EXPORT long fld_stress_total_count(int op, int impl);
EXPORT long fld_stress_total_count(int op, int impl)
{
    if (op < 0 || op >= STRESS_N_OPS || impl < 0 || impl >= STRESS_N_IMPLS)
        return -1;
    return atomic_load(&total_counts[op][impl]);
}

EXPORT long fld_stress_thread_count(int op, int impl);
EXPORT long fld_stress_thread_count(int op, int impl)
{
    if (op < 0 || op >= STRESS_N_OPS || impl < 0 || impl >= STRESS_N_IMPLS)
        return -1;
    return thread_counts[op][impl];
}

static void count(int op, int impl)
{
    atomic_fetch_add_explicit(&total_counts[op][impl], 1, memory_order_relaxed);
    thread_counts[op][impl]++;
}

static void fill_rows(const DLTensor *t, float value)
{
    fld_rows r;
    fld_tensor_rows(t, &r);
    for (int64_t i = 0; i < r.rows; i++) {
        float *row = (float *)r.data + i * r.stride;
        for (int64_t j = 0; j < r.width; j++)
            row[j] = value;
    }
}

static float mark_of(int impl)
{
    return (float)(STRESS_MARK_BASE + impl);
}

static int activation(int op, int impl, const void *args)
{
    const fld_activation_args *a = args;
    fill_rows(a->out, mark_of(impl));
    count(op, impl);
    return FLD_OK;
}

static int norm(int op, int impl, const void *args)
{
    const fld_rms_norm_args *a = args;
    fill_rows(a->out, mark_of(impl));
    count(op, impl);
    return FLD_OK;
}

static int rotary(int op, int impl, const void *args)
{
    const fld_rotary_embedding_args *a = args;
    fill_rows(a->query, mark_of(impl));
    if (a->key)
        fill_rows(a->key, mark_of(impl));
    count(op, impl);
    return FLD_OK;
}

static int rotary_out(int op, int impl, const void *args)
{
    const fld_rotary_embedding_out_args *a = args;
    fill_rows(a->query_out, mark_of(impl));
    if (a->key_out)
        fill_rows(a->key_out, mark_of(impl));
    count(op, impl);
    return FLD_OK;
}

static const char *const backend_names[STRESS_N_IMPLS] = {
    [STRESS_IMPL_ALPHA] = "STRESS_1",
    [STRESS_IMPL_BETA] = "STRESS_2",
    [STRESS_IMPL_FLAGOS] = "STRESS_3",
    [STRESS_IMPL_GAMMA] = "STRESS_4",
};

static int backend(int op, int impl, const void *args)
{
    const fld_attention_backend_args *a = args;
    *a->name = backend_names[impl];
    count(op, impl);
    return FLD_OK;
}

/*
 * One kernel function per (op, impl): the host gets plain function pointers.
 * stress_kernels.h defines those of implementation STRESS_IMPL, one per row of the
 * catalog table with its family's kernel, and their table kernels_<impl>
 * (stress_kernels.h, included once per implementation).
 */
#define FAMILY_GATED       activation
#define FAMILY_ELEMENTWISE activation
#define FAMILY_NORM        norm
#define FAMILY_ROTARY      rotary
#define FAMILY_ROTARY_OUT  rotary_out
#define FAMILY_ATTENTION   backend
#define KERNEL_(fn, op, impl)                                                                      \
    static int k_##op##_##impl(const void *args)                                                   \
    {                                                                                              \
        return fn(op, impl, args);                                                                 \
    }
#define KERNEL(fn, op, impl)   KERNEL_(fn, op, impl)
#define KERNEL_NAME_(op, impl) k_##op##_##impl,
#define KERNEL_NAME(op, impl)  KERNEL_NAME_(op, impl)
#define TABLE_(impl)           kernels_##impl
#define TABLE(impl)            TABLE_(impl)

static const char *const op_names[STRESS_N_OPS] = {
#define FLD_CATALOG_OP(id, name, family, doc) FLD_OP_##id,
#include <fldispatch/catalog.def>
};

static int register_all(fld_registry *reg, const fld_kernel_fn *kernels, const char *impl_id,
                        fld_kind kind, const char *vendor, int priority)
{
    for (int op = 0; op < STRESS_N_OPS; op++) {
        const fld_impl impl = {
            .op = op_names[op],
            .impl_id = impl_id,
            .kind = kind,
            .vendor = vendor,
            .priority = priority,
            .devices = FLD_DEVICE_MASK_CPU,
            .dtypes = FLD_DTYPE_MASK_F32,
            .fn = kernels[op],
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

#ifdef STRESS_VARIANT_A

#define STRESS_IMPL STRESS_IMPL_ALPHA
#include "stress_kernels.h"
#define STRESS_IMPL STRESS_IMPL_BETA
#include "stress_kernels.h"
#define STRESS_IMPL STRESS_IMPL_FLAGOS
#include "stress_kernels.h"

static int register_builtins(fld_registry *reg)
{
    int rc = register_all(reg, kernels_STRESS_IMPL_ALPHA, "vendor.alpha", FLD_KIND_VENDOR, "alpha",
                          STRESS_PRIORITY_ALPHA);
    if (rc == FLD_OK)
        rc = register_all(reg, kernels_STRESS_IMPL_BETA, "vendor.beta", FLD_KIND_VENDOR, "beta",
                          STRESS_PRIORITY_BETA);
    if (rc == FLD_OK)
        rc = register_all(reg, kernels_STRESS_IMPL_FLAGOS, "default.stress", FLD_KIND_DEFAULT, NULL,
                          STRESS_PRIORITY_FLAGOS);
    return rc;
}

FLD_PLUGIN_DEFINE("stressa", "1.0.0", register_builtins)

#else

#define STRESS_IMPL STRESS_IMPL_GAMMA
#include "stress_kernels.h"

static int register_builtins(fld_registry *reg)
{
    return register_all(reg, kernels_STRESS_IMPL_GAMMA, "vendor.gamma", FLD_KIND_VENDOR, "gamma",
                        STRESS_PRIORITY_GAMMA);
}

FLD_PLUGIN_DEFINE("stressb", "1.0.0", register_builtins)

#endif
