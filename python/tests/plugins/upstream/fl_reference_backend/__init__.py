# SPDX-License-Identifier: Apache-2.0
"""A reference-style backend package (test fixture)."""


def register(registry):
    from .register_ops import register_builtins

    register_builtins(registry)
