# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.backends: the base class upstream-style backends derive from.

vllm-plugin-FL's bundled backends (FlagGems, the PyTorch reference, the
vendor backends) are not part of fldispatch; only `base.Backend`, which an
out-of-tree backend written from upstream's vendor template imports, is.
"""
