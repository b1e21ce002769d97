# SPDX-License-Identifier: Apache-2.0
"""What the vLLM plugin decided in this process, on one object (DECIDED).

fldispatch.vllm.register() and what it sets going (the IR provider, the
priority it installs, the layers' log lines) record their decisions here,
once per process; every module of the plugin reads them here, and a test
resets a field by replacing it. This module imports nothing but typing.
"""

from typing import Any


class Decisions:
    """The vLLM plugin's decisions for the process.

    oot_layers         OOT name -> the vLLM class name register() replaced
    ir_providers       IR op name -> vLLM's IrOpImpl of fldispatch's provider
    served_by_ir_op    IR op name -> the (device type, x dtype, weight dtype)
                       set its provider serves
    first_by_default   IR ops VLLM_FL_OOT_* hand to fldispatch (first in the
                       platform's default priority where the mode says so)
    rotary_out_devices torch device types rotary_embedding_out serves (None:
                       not resolved yet)
    mixed_weight       whether the library takes a float32 weight with a
                       16-bit x (None: not asked yet)
    logged             (class name, text) of the path lines logged
    """

    def __init__(self) -> None:
        self.oot_layers: dict[str, str] = {}
        self.ir_providers: dict[str, Any] = {}
        self.served_by_ir_op: dict[str, frozenset[tuple[str, Any, Any]]] = {}
        self.first_by_default: set[str] = set()
        self.rotary_out_devices: frozenset[str] | None = None
        self.mixed_weight: bool | None = None
        self.logged: set[tuple[str, str]] = set()


DECIDED = Decisions()
