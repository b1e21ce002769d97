# SPDX-License-Identifier: Apache-2.0
"""Which path each vLLM layer takes inside vLLM, and the log line saying why.

fldispatch reaches vLLM's layers by two routes (fldispatch.vllm): as the
provider of vLLM IR ops (RMSNorm and GemmaRMSNorm call vllm.ir ops) and as
out-of-tree CustomOps (the other layers; the norms too on a vLLM without
IR). On both, a layer the VLLM_FL_OOT_* switches hand to fldispatch runs
fldispatch's kernel by default only in the vLLM modes where that was
measured faster than vLLM's own path (MODE_TABLE on CPUs, GPU_MODE_TABLE
on GPUs, where vLLM's own CUDA kernels stay wherever fldispatch does not
serve), and vLLM's own switches keep their meaning:

- IR ops: vLLM's ir_op_priority. Where the operator gave no list for an
  op, the platform's default applies, and the plugin puts fldispatch in
  front of it where MODE_TABLE says so for the mode (or VLLM_FL_OOT_FORCE
  names the layer); a list the operator gave always wins.
- CustomOps: vLLM's compilation_config.custom_ops, read as vLLM reads it
  for its own layers: "+name" or "-name" (vLLM's name, "silu_and_mul", or
  the class name, "SiluAndMul") decides; else VLLM_FL_OOT_FORCE naming the
  layer (or "all") runs fldispatch's; else the base mode: "all" runs
  fldispatch's, "none" vLLM's forward_native. vLLM's own default base mode
  is "none" where Inductor compiles the model and "all" elsewhere: the
  CustomOp column of MODE_TABLE (a test checks that they agree).

The modes are told apart as vLLM tells them apart for its own default
custom_ops: "inductor" where the compilation mode is not NONE and the
backend is Inductor (vLLM's default: Dynamo-trace-once on CPU,
VLLM_COMPILE on GPUs, CUDA graphs or not), "compiled" for another backend,
"eager" for mode NONE (enforce_eager).

Every decision is logged once per layer class, decision and process, at
INFO on the logger "fldispatch.vllm" (in vLLM's log inside vLLM's processes:
fldispatch.vllm_log):

    fldispatch: SiluAndMul -> fldispatch CustomOp (custom_ops all: vLLM's
        default in eager mode, where ...)
    fldispatch: RMSNorm -> vLLM IR provider native (ir_op_priority
        fused_add_rms_norm: native; rms_norm: native; compiled by Inductor,
        ...; VLLM_FL_OOT_FORCE does not name rms_norm)
"""

import logging
import os
from collections.abc import Collection
from typing import Any

from . import _C
from .vllm_layers import LAYERS
from .vllm_state import DECIDED

# The path lines are the vLLM plugin's: they go to its module's logger
# (fldispatch.vllm, which imports this module), where docs/vllm.md says
# operators find them.
logger = logging.getLogger("fldispatch.vllm")

FORCE = "VLLM_FL_OOT_FORCE"

# OOT layer name (VLLM_FL_OOT_*) -> family, the column of MODE_TABLE
# (vllm_layers: from the catalog family of the layer's op)
FAMILIES = {oot: layer.family for oot, layer in LAYERS.items()}

# mode -> family -> (fldispatch serves it by default, why). The figures it
# rests on are in docs/vllm.md ("Which path each layer takes").
_EAGER_WHY = "where fldispatch's kernel was measured faster than vLLM's unfused one"
_INDUCTOR_WHY = "which fuses {} with its neighbours, measured faster than fldispatch's opaque call"
MODE_TABLE = {
    "eager": {"norm": (True, _EAGER_WHY), "activation": (True, _EAGER_WHY),
              "rotary": (True, _EAGER_WHY)},
    "inductor": {"norm": (False, _INDUCTOR_WHY.format("add + norm")),
                 "activation": (False, _INDUCTOR_WHY.format("the activation")),
                 "rotary": (False, _INDUCTOR_WHY.format("rope"))},
    "compiled": {family: (True, "no Inductor fusion to lose (not measured)")
                 for family in ("norm", "activation", "rotary")},
}

# The same on an NVIDIA or AMD GPU (vLLM's device type "cuda"). vLLM runs its
# own CUDA kernels there in eager mode (ir_op_priority vllm_c, CustomOps'
# forward_cuda) and Inductor's under VLLM_COMPILE, CUDA graphs or not. On an
# H100 (docs/vllm.md, "On a GPU"): fldispatch's norms, activations and rotary
# were faster than vLLM's C++ kernels at decode (norms by up to 0.2 us, the
# others 1.2-2.5x) but slower at some larger sizes (norms from 512 rows,
# gelu_and_mul at 512, gptj rotary at 512 tokens), and a layer takes one path
# for every size; through torch.ops fldispatch's host launch is level with
# vLLM's C++ ops. So it serves nothing there by default: an operator puts it
# first with ir_op_priority, "+name" in custom_ops or VLLM_FL_OOT_FORCE.
_GPU_SIZES_WHY = ("vLLM's own GPU kernels: fldispatch's were measured faster at decode but "
                  "slower at some larger sizes")
GPU_MODE_TABLE = {
    "eager": {"norm": (False, _GPU_SIZES_WHY), "activation": (False, _GPU_SIZES_WHY),
              "rotary": (False, _GPU_SIZES_WHY)},
    "inductor": MODE_TABLE["inductor"],
    "compiled": {family: (False, "vLLM's own GPU kernels (not measured)")
                 for family in ("norm", "activation", "rotary")},
}

# vLLM's device type -> the table of its modes; a device not named here
# (cpu, and the others fldispatch serves through vLLM) takes MODE_TABLE.
DEVICE_MODE_TABLES = {"cpu": MODE_TABLE, "cuda": GPU_MODE_TABLE}

# how a mode reads in a log line
MODE_WORDS = {"eager": "in eager mode", "inductor": "compiled by Inductor",
              "compiled": "compiled without Inductor"}


def device_type() -> str:
    """vLLM's current platform's device type ("cpu", "cuda", ...), or "cpu"
    where vLLM cannot say."""
    try:
        from vllm.platforms import current_platform

        return str(getattr(current_platform, "device_type", None) or "cpu")
    except Exception:  # noqa: BLE001  (a vLLM without platforms, or one that fails to detect)
        return "cpu"


def mode_table(device: str) -> dict[str, dict[str, tuple[bool, str]]]:
    """The mode table of a vLLM device type."""
    return DEVICE_MODE_TABLES.get(device, MODE_TABLE)


def _mode_words(m: str, device: str) -> str:
    return MODE_WORDS[m] + (" on a GPU" if mode_table(device) is GPU_MODE_TABLE else "")


def mode(compilation_config: Any) -> str:
    """"eager", "inductor" or "compiled" for vLLM's CompilationConfig (None:
    no configuration, as a direct call without vLLM's: "eager"), by vLLM's
    own test for its default custom_ops."""
    if compilation_config is None:
        return "eager"
    compile_mode = getattr(compilation_config, "mode", None)
    if compile_mode is not None and int(compile_mode) == 0:  # CompilationMode.NONE
        return "eager"
    if getattr(compilation_config, "backend", "inductor") == "inductor":
        return "inductor"
    return "compiled"


def forced() -> frozenset[str]:
    """The OOT names VLLM_FL_OOT_FORCE names (all of FAMILIES for "all"),
    read from the environment at each call. A name that is not a layer's,
    or an empty item, raises fldispatch.ConfigError naming the variable."""
    raw = os.environ.get(FORCE, "")
    items = [item.strip() for item in raw.split(",")]
    if not any(items):
        return frozenset()
    valid = "all, " + ", ".join(sorted(FAMILIES))
    names: set[str] = set()
    for item in items:
        if not item:
            raise _C.ConfigError(f"{FORCE}: empty item in '{raw}' (valid: {valid})")
        if item.lower() == "all":
            names.update(FAMILIES)
        elif item in FAMILIES:
            names.add(item)
        else:
            raise _C.ConfigError(f"{FORCE}: unknown layer '{item}' (valid: {valid})")
    return frozenset(names)


def _force_words(oot_name: str) -> str:
    value = os.environ.get(FORCE, "").strip()
    return f"{FORCE} does not name {oot_name}" if not value else \
        f"{FORCE}={value} does not name {oot_name}"


def ir_default(oot_name: str, compilation_config: Any, device: str | None = None) -> tuple[bool, str]:
    """(whether the platform's default IR priority gets fldispatch first for
    the IR ops of layer oot_name, why), where VLLM_FL_OOT_* enable it, on
    vLLM's device type device (None: the current platform's)."""
    device = device_type() if device is None else device
    m = mode(compilation_config)
    first, why = mode_table(device)[m][FAMILIES[oot_name]]
    words = _mode_words(m, device)
    if oot_name in forced():
        return True, f"{FORCE}={os.environ[FORCE].strip()}" + \
            ("" if first else f", over the default {words}")
    if first:
        return True, f"fldispatch first by default {words}, {why}"
    return False, f"{words}, {why}; {_force_words(oot_name)}"


def custom_op_route(oot_name: str, vllm_name: str | None, compilation_config: Any,
                    device: str | None = None) -> tuple[bool, bool, str]:
    """(whether a replaced CustomOp layer runs fldispatch's op, whether vLLM
    would run its own layer's kernel (its enabled()), why) under vLLM's
    custom_ops, VLLM_FL_OOT_FORCE and the mode table of vLLM's device type
    device (None: the current platform's)."""
    device = device_type() if device is None else device
    custom_ops = list(getattr(compilation_config, "custom_ops", None) or [])
    class_name = LAYERS[oot_name].class_name if oot_name in LAYERS else None
    names = [n for n in (vllm_name, oot_name, class_name) if n]
    for sign, serve in (("-", False), ("+", True)):
        for name in names:
            if f"{sign}{name}" in custom_ops:
                return serve, serve, f"custom_ops {sign}{name}"
    base = "none" if "none" in custom_ops else "all"
    m = mode(compilation_config)
    words = _mode_words(m, device)
    if oot_name in forced():
        return True, base == "all", f"{FORCE}={os.environ[FORCE].strip()}, over custom_ops {base}"
    default_base = "none" if m == "inductor" else "all"
    first, table_why = mode_table(device)[m][FAMILIES[oot_name]]
    if base != default_base:
        why = (f"custom_ops {base}, the operator's "
               f"(vLLM's default {MODE_WORDS[m]} is {default_base})")
    else:
        why = f"custom_ops {base}: vLLM's default {words}, " + table_why
    serve = base == "all"
    if serve and not first and mode_table(device) is not MODE_TABLE:
        # vLLM's own kernel where the device's table leaves the layer to vLLM
        return False, True, why + f"; {_force_words(oot_name)}"
    if base == "none":
        why += f"; {_force_words(oot_name)}"
    return serve, serve, why


def custom_op(oot_name: str, vllm_name: str | None, compilation_config: Any,
              device: str | None = None) -> tuple[bool, str]:
    """(whether a replaced CustomOp layer runs fldispatch's op, why): see
    custom_op_route()."""
    serve, _, why = custom_op_route(oot_name, vllm_name, compilation_config, device)
    return serve, why


def log_once(class_name: str, text: str) -> None:
    """Logs "fldispatch: <class_name> -> <text>" at INFO once per process."""
    if (class_name, text) in DECIDED.logged:
        return
    DECIDED.logged.add((class_name, text))
    logger.info("fldispatch: %s -> %s", class_name, text)


def log_custom_op(class_name: str, serve: bool, why: str) -> None:
    """The CustomOp route's line for a layer class."""
    log_once(class_name, ("fldispatch CustomOp" if serve else "vLLM's own") + f" ({why})")


def log_ir(class_name: str, priorities: dict[str, list[str]], oot_name: str, compilation_config: Any,
           given: Collection[str] = frozenset()) -> None:
    """The IR route's line for a layer class: priorities, {IR op: the
    installed provider list}; which provider comes first and why. given:
    the IR ops whose list the operator gave (KernelConfig.ir_op_priority,
    the platform's default appended): their first provider is the
    operator's choice; the others' comes from the default (the plugin's
    place in it), or, where it disagrees with the default, from a list
    set otherwise."""
    firsts = sorted({p[0] for p in priorities.values() if p})
    path = f"vLLM IR provider {firsts[0]}" if len(firsts) == 1 else \
        "vLLM IR providers " + ", ".join(f"{op}: {p[0]}" for op, p in sorted(priorities.items()))
    lists = "; ".join(f"{op}: {', '.join(p)}" for op, p in sorted(priorities.items()))
    enabled = _C.oot_op_enabled(oot_name)
    theirs = {op: p for op, p in priorities.items() if op in given and p}
    rest = {op: p for op, p in priorities.items() if op not in theirs}
    reasons: list[tuple[list[str], str]] = []  # (ops, why)
    for first in sorted({p[0] for p in theirs.values()}):
        why = f"ir_op_priority {'names' if first == 'fldispatch' else 'puts'} {first} first"
        if first == "fldispatch" and not enabled:
            why += f"; VLLM_FL_OOT_* or VLLM_FL_PREFER_ENABLED leave {oot_name} to vLLM"
        reasons.append((sorted(op for op, p in theirs.items() if p[0] == first), why))
    if rest:
        rest_firsts = sorted({p[0] for p in rest.values() if p})
        ours = "fldispatch" in rest_firsts
        if not enabled:
            why = f"VLLM_FL_OOT_* or VLLM_FL_PREFER_ENABLED leave {oot_name} to vLLM"
            if ours:
                why = "ir_op_priority names fldispatch first; " + why
        else:
            default_first, why = ir_default(oot_name, compilation_config)
            if ours and not default_first:
                why = "ir_op_priority names fldispatch first"
            elif default_first and not ours:
                why = f"ir_op_priority puts {', '.join(rest_firsts)} first"
        reasons.append((sorted(rest), why))
    if len(reasons) == 1:
        why = reasons[0][1]
    else:
        why = "; ".join(f"{', '.join(ops)}: {text}" for ops, text in reasons)
    log_once(class_name, f"{path} (ir_op_priority {lists}; {why})")
