/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What tests/stress/stress_plugin.c and slow_plugin.c share with the tests
 * that load them: op and implementation codes, marks and priorities, and the
 * argument struct of the slow fixture's own ops.
 */
#ifndef FLD_TESTS_STRESS_FIXTURE_H
#define FLD_TESTS_STRESS_FIXTURE_H

#include <stdatomic.h>

/* Catalog ops: STRESS_OP_<ID> per row of the catalog table, in its order. */
enum {
#define FLD_CATALOG_OP(id, name, family, doc) STRESS_OP_##id,
#include <fldispatch/catalog.def>
    STRESS_N_OPS
};

/* Implementations; REF is the library's reference.c (no fixture counter). */
enum {
    STRESS_IMPL_REF,
    STRESS_IMPL_ALPHA,  /* vendor.alpha, fld-stressa.so */
    STRESS_IMPL_BETA,   /* vendor.beta, fld-stressa.so */
    STRESS_IMPL_FLAGOS, /* default.stress, fld-stressa.so */
    STRESS_IMPL_GAMMA,  /* vendor.gamma, fld-stressb.so */
    STRESS_N_IMPLS
};

#define STRESS_MARK_BASE       1000
#define STRESS_PRIORITY_ALPHA  100
#define STRESS_PRIORITY_BETA   100
#define STRESS_PRIORITY_FLAGOS 150
#define STRESS_PRIORITY_GAMMA  120

/*
 * fld-slow.so registers vendor.slow for two ops outside the catalog:
 * "slow_op", whose kernel spins until args->release is set (or for
 * args->spin_ms), and "slow_avail_op", whose is_available() sleeps
 * fld_slow_set_delays()' available_ms. Its register_builtins sleeps
 * register_ms. Each phase sets an exported flag while it runs.
 */
typedef struct slow_args {
    int spin_ms;          /* 0: return at once unless release is watched */
    _Atomic int *release; /* when not NULL, spin until *release != 0 */
    _Atomic int *entered; /* when not NULL, set to 1 on entry */
    long served;          /* incremented by the kernel */
} slow_args;

#endif
