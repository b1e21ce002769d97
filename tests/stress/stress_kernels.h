/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Included by stress_plugin.c once per implementation, with STRESS_IMPL
 * defined (STRESS_IMPL_*): one kernel per row of the catalog table, its
 * family's (FAMILY_*), and their table kernels_<STRESS_IMPL>. No include
 * guard: each inclusion defines another implementation's kernels.
 */
#define FLD_CATALOG_OP(id, name, family, doc) KERNEL(FAMILY_##family, STRESS_OP_##id, STRESS_IMPL)
#include <fldispatch/catalog.def>

static const fld_kernel_fn TABLE(STRESS_IMPL)[STRESS_N_OPS] = {
#define FLD_CATALOG_OP(id, name, family, doc) KERNEL_NAME(STRESS_OP_##id, STRESS_IMPL)
#include <fldispatch/catalog.def>
};

#undef STRESS_IMPL
