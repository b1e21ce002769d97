# SPDX-License-Identifier: Apache-2.0
"""A vendor backend package registering vendor.cuda (test fixture)."""


def register(registry):
    from .register_ops import register_builtins

    register_builtins(registry)
