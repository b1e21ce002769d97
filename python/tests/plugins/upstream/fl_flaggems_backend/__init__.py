# SPDX-License-Identifier: Apache-2.0
"""A FlagGems-style backend package registering default.flagos (test fixture)."""


def register(registry):
    from .register_ops import register_builtins

    register_builtins(registry)
