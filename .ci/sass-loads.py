#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make lint's check of the CUDA kernels' load order, read from their machine code.

At decode a GPU kernel's time is its chain of dependent trips to memory, and
a load's registers are waited for at their first use. So the vector
kernels of plugins/shared/gpu/gpu_kernels.cuh issue every load that does not
depend on another before the first use of any (docs/device-plugins.md, "The
order of a kernel's loads"). nvcc keeps that order only while the source
asks for it, and a change that looks harmless (converting an operand as it
is loaded, a load under a branch) can add a trip without changing a result.
This check reads the SASS of the cuda plugin's kernels (cuobjdump -sass,
every architecture in the object) and fails naming the kernel and the
instruction where:

  norm_kernel_reg   a load of the row (x, the residual, the early weight)
                    comes after an instruction that reads an earlier load's
                    registers, before the block's first barrier;
  norm_kernel_row   likewise for x and the residual; the weight's loads,
                    used after the reduction, come before the barrier;
  act_kernel,       a gated kernel's second operand is loaded after the
  act_kernel_lean   first operand's registers are read;
  rotary_kernel     a 16-byte q/k load comes before the token's position is
                    loaded.

    .ci/sass-loads.py build/obj/plugins/cuda/cuda_kernels.o
    .ci/sass-loads.py --self-test

cuobjdump and nvdisasm come from PATH, else from the CUDA toolkit beside
nvcc, else from make lint's virtual environment (.ci/cached-venv.sh
python-lint-venv: NVIDIA's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm
wheels, pinned in python/requirements-lint.txt).
"""

import glob
import os
import re
import shutil
import subprocess
import sys
from typing import cast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
REGISTER = re.compile(r"\bR(\d+)(\.64)?\b")
FUNCTION = re.compile(r"Function : (\S+)")
ARCH = re.compile(r"code for (sm_\d+)")

# The kernels checked, by their mangled names (template arguments in order).
NORM = re.compile(r"_ZN7fld_gpu15norm_kernel_regILi(\d)ELi(\d)ELi(\d)ELb1ELi(\d)ELb(\d)ELb(\d)EEE"
                  r"v18fld__gpu_norm_args$")
NORM_ROW = re.compile(r"_ZN7fld_gpu15norm_kernel_rowILi(\d)ELi(\d)ELb(\d)ELb(\d)EEEv18fld__gpu_norm_argsf$")
ACT = re.compile(r"_ZN7fld_gpu10act_kernelILi(\d)ELb1ELi(\d)ELi(\d+)EEEv17fld__gpu_act_args$")
ACT_LEAN = re.compile(r"_ZN7fld_gpu15act_kernel_leanILi(\d)ELi(\d)ELi(\d+)EEEv17fld__gpu_act_args$")
ROTARY = re.compile(r"_ZN7fld_gpu13rotary_kernelILi(\d)ELi(\d)ELb1ELb(\d)ELb(\d)EEEv20fld__gpu_rotary_args$")
GATED_OPS = 4  # FLD_GPU_SILU_AND_MUL .. FLD_GPU_GELU_TANH_AND_MUL (gpu_api.h)
DTYPES = ("f32", "f16", "bf16")
ACT_OPS = ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul")

# Kernels whose second operand is known to load late, exactly: a fix, or a
# new one, fails the check until this list says so. None now: the GELU
# kernels, where ptxas placed the second operand's load after part of the
# first's erf/tanh, tie the two (fld__gpu_tied in gpu_compat.cuh).
KNOWN_LATE: set[str] = set()
# The architectures checked: the default build's (CUDA_ARCHS 80 90), for
# which KNOWN_LATE is exact; code for others in the object is left alone.
ARCHS = ("sm_80", "sm_90")


def walk(text, item, arch=ARCH, function=FUNCTION):
    """(arch, function, match) for each line of cuobjdump output that the
    regular expression item matches, under the last architecture and
    function lines above it (none above it: not given)."""
    current_arch, current = "?", None
    for line in text.splitlines():
        m = arch.search(line)
        if m:
            current_arch = m.group(1)
            continue
        m = function.search(line)
        if m:
            current = m.group(1)
            continue
        m = item.search(line)
        if m and current is not None:
            yield current_arch, current, m


def parse(text):
    """{(arch, function): [(opcode, operands text)]} from cuobjdump -sass output."""
    functions: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for arch, name, m in walk(text, INSTRUCTION):
        opcode = m.group(2)
        # An unconditional branch or exit ends a path: what follows is
        # another one (a branch's target), which starts afresh.
        if not m.group(1) and (opcode == "BRA" or opcode == "EXIT"):
            opcode = "END"
        functions.setdefault((arch, name), []).append((opcode, m.group(3).strip()))
    return functions


def load_width(opcode):
    """Registers an LDG writes: LDG.E.128 4, .64 2, else 1."""
    return 4 if ".128" in opcode else 2 if ".64" in opcode else 1


def registers(text):
    out: set[int] = set()
    for m in REGISTER.finditer(text):
        n = int(m.group(1))
        out.update((n, n + 1) if m.group(2) else (n,))
    return out


# Opcodes whose first operand is no destination (stores, barriers, control flow).
NO_DESTINATION = ("ST", "RED", "BAR", "BRA", "EXIT", "CALL", "RET")


def reads(opcode, operands):
    """The registers an instruction reads: all of a store's or a branch's,
    else those after its destination (the first operand)."""
    if opcode.startswith(NO_DESTINATION):
        return registers(operands)
    return registers(",".join(operands.split(",")[1:]))


def written(opcode, operands):
    """The registers an instruction writes (an LDG: as many as it loads)."""
    first = operands.split(",")[0].strip() if operands else ""
    if opcode.startswith(NO_DESTINATION):
        return set()
    m = re.match(r"R(\d+)$", first)
    if not m:
        return set()
    n = int(m.group(1))
    width = load_width(opcode) if opcode.startswith("LDG") else 1
    return set(range(n, n + width))


def loads_issued_together(code, limit=None, stop=("BAR",)):
    """None when, on each straight path up to the first `stop`
    instruction (or the limit-th LDG), every LDG comes before any
    instruction reads an earlier LDG's registers; else the text of the
    first load that waited."""
    pending: set[int]
    pending, used, seen = set(), False, 0
    for opcode, operands in code:
        if opcode.startswith(stop):
            return None
        if opcode == "END":
            pending, used, seen = set(), False, 0
            continue
        if opcode.startswith("LDG"):
            if used:
                return f"{opcode} {operands}"
            seen += 1
            if limit and seen >= limit:
                return None
            pending |= written(opcode, operands)
            continue
        if pending & reads(opcode, operands):
            used = True
        pending -= written(opcode, operands)
    return None


def loads_before_barrier(code, count):
    """None when the first straight path issues count LDGs before its first
    barrier; else what it issued."""
    seen = 0
    for opcode, _ in code:
        if opcode.startswith("BAR"):
            break
        if opcode.startswith("LDG"):
            seen += 1
            if seen >= count:
                return None
    return f"{seen} of the row's {count} loads before the barrier"


def position_first(code):
    """None when the first narrow (position) load precedes the first 16-byte load."""
    for opcode, operands in code:
        if opcode.startswith("LDG"):
            if ".128" in opcode:
                return f"{opcode} {operands}, before the position's load"
            return None
    return "no load"


def check(functions, known=frozenset()):
    """(problems, counts, known late loads seen): problems as 'arch kernel: what'."""
    problems, counts, seen = [], {"norm": 0, "norm_row": 0, "act": 0, "rotary": 0}, set()
    for (arch, name), code in sorted(functions.items()):
        if arch not in ARCHS:
            continue
        label = None
        if NORM.match(name):
            family, why = "norm", loads_issued_together(code)
        elif NORM_ROW.match(name):
            # x's and the residual's loads together; the weight's (used after
            # the reduction, where ptxas may place them) before the barrier
            m = NORM_ROW.match(name)
            assert m is not None  # matched just above
            per_thread, residual = int(m.group(2)), int(m.group(3))
            row = per_thread * (1 + residual)
            family = "norm_row"
            why = loads_issued_together(code, limit=row) or loads_before_barrier(code, row + per_thread)
        elif (ACT.match(name) or ACT_LEAN.match(name)) and \
                int(cast("re.Match[str]", ACT.match(name) or ACT_LEAN.match(name)).group(2)) < GATED_OPS:
            kernel = "act_kernel" if ACT.match(name) else "act_kernel_lean"
            m = ACT.match(name) or ACT_LEAN.match(name)
            assert m is not None  # matched just above
            dt, op, size = m.groups()
            label = f"{arch} {kernel} {DTYPES[int(dt)]} {ACT_OPS[int(op)]} {size}-byte groups"
            family, why = "act", loads_issued_together(code, limit=2, stop=("STG", "BAR"))
        elif ROTARY.match(name):
            family, why = "rotary", position_first(code)
        else:
            continue
        counts[family] += 1
        if why and label in known:
            seen.add(label)
        elif why:
            problems.append(f"{arch} {name}: {why}")
    return problems, counts, seen


def find_cuobjdump():
    tool = shutil.which("cuobjdump")
    if tool and shutil.which("nvdisasm"):
        return tool, None
    nvcc = shutil.which(os.environ.get("NVCC", "nvcc"))
    if nvcc:
        bindir = os.path.dirname(os.path.realpath(nvcc))
        if os.access(os.path.join(bindir, "cuobjdump"), os.X_OK) and os.access(
            os.path.join(bindir, "nvdisasm"), os.X_OK
        ):
            return os.path.join(bindir, "cuobjdump"), bindir
    venv_python = subprocess.run(
        ["sh", os.path.join(ROOT, ".ci", "cached-venv.sh"), "python-lint-venv",
         os.path.join(ROOT, "python", "requirements-lint.txt"), "--why", "cuobjdump for make lint"],
        check=True, stdout=subprocess.PIPE, text=True,
    ).stdout.strip()
    venv = os.path.dirname(os.path.dirname(venv_python))
    for tool in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "nvidia", "cu*", "bin",
                                              "cuobjdump"))):
        return tool, os.path.dirname(tool)
    sys.exit("sass-loads: no cuobjdump in PATH, beside nvcc or in the lint environment " + venv)


def sass(obj, flag="-sass"):
    """cuobjdump's output for obj (-sass: the machine code; -res-usage: each
    kernel's registers and stack)."""
    tool, bindir = find_cuobjdump()
    env = dict(os.environ)
    if bindir:  # cuobjdump runs nvdisasm from PATH
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    run = subprocess.run([tool, flag, obj], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if run.returncode:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {tool} {flag} {obj}: {run.stderr.strip()}")
    return run.stdout


SELF_TEST = """
	code for sm_90
		Function : _ZN7fld_gpu15norm_kernel_regILi2ELi2ELi2ELb1ELi1ELb0ELb1EEEv18fld__gpu_norm_args
        /*0340*/                   LDG.E.128 R16, desc[UR8][R16.64] ;
        /*0400*/                   IMAD.U32 R0, R16.reuse, 0x10000, RZ ;
        /*0530*/                   LDG.E.128 R16, desc[UR8][R2.64] ;
        /*0ec0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
		Function : _ZN7fld_gpu15norm_kernel_regILi2ELi2ELi2ELb1ELi1ELb1ELb1EEEv18fld__gpu_norm_args
        /*0480*/                   LDG.E.128 R20, desc[UR8][R20.64] ;
        /*04a0*/                   IADD3 R30, P2, R2, R30, RZ ;
        /*04b0*/               @P3 LDG.E.128 R24, desc[UR8][R30.64] ;
        /*04c0*/               @P2 LDG.E.128 R4, desc[UR8][R32.64] ;
        /*0500*/                   IMAD.U32 R0, R20, 0x10000, RZ ;
        /*1040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*1cc0*/                   LDG.E.128 R4, desc[UR8][R6.64] ;
		Function : _ZN7fld_gpu15norm_kernel_rowILi2ELi1ELb0ELb0EEEv18fld__gpu_norm_argsf
        /*0130*/                   LDG.E.128 R4, desc[UR8][R4.64] ;
        /*01b0*/                   IMAD.U32 R0, R4.reuse, 0x10000, RZ ;
        /*03a0*/               @P0 LDG.E.128 R4, desc[UR8][R18.64] ;
        /*0560*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
		Function : _ZN7fld_gpu15norm_kernel_rowILi2ELi1ELb1ELb0EEEv18fld__gpu_norm_argsf
        /*0130*/                   LDG.E.128 R4, desc[UR8][R4.64] ;
        /*0140*/                   LDG.E.128 R8, desc[UR8][R8.64] ;
        /*01b0*/                   IMAD.U32 R0, R4.reuse, 0x10000, RZ ;
        /*0560*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0600*/                   LDG.E.128 R4, desc[UR8][R18.64] ;
		Function : _ZN7fld_gpu10act_kernelILi2ELb1ELi0ELi4EEEv17fld__gpu_act_args
        /*0290*/                   LDG.E R20, desc[UR8][R6.64] ;
        /*02e0*/                   LDG.E R17, desc[UR8][R22.64] ;
        /*0300*/                   IMAD.U32 R1, R20, 0x10000, RZ ;
        /*0870*/                   STG.E desc[UR8][R4.64], R3 ;
		Function : _ZN7fld_gpu13rotary_kernelILi2ELi2ELb1ELb1ELb0EEEv20fld__gpu_rotary_args
        /*07d0*/                   LDG.E.128 R12, desc[UR10][R12.64] ;
        /*0960*/               @P0 LDG.E R25, desc[UR10][R24.64] ;
		Function : _ZN7fld_gpu13rotary_kernelILi2ELi0ELb1ELb1ELb1EEEv20fld__gpu_rotary_args
        /*02b0*/               @P2 LDG.E R2, desc[UR10][R4.64] ;
        /*0900*/                   LDG.E.128 R12, desc[UR10][R12.64] ;
"""


def self_test():
    problems, counts, _ = check(parse(SELF_TEST))
    assert counts == {"norm": 2, "norm_row": 2, "act": 1, "rotary": 2}, counts
    assert len(problems) == 3, problems
    norm = [p for p in problems if "norm_kernel_reg" in p]
    row = [p for p in problems if "norm_kernel_row" in p]
    assert len(row) == 1 and "ELb1ELb0E" in row[0] and "2 of the row's 3 loads" in row[0], problems
    rotary = [p for p in problems if "rotary_kernel" in p]
    assert len(norm) == 1 and "ELi1ELb0ELb1E" in norm[0] and "R16, desc[UR8][R2.64]" in norm[0], problems
    assert len(rotary) == 1 and "ILi2ELi2E" in rotary[0] and "before the position" in rotary[0], problems
    assert reads("STG.E", "desc[UR8][R4.64], R3") == {3, 4, 5}
    assert written("LDG.E.64", "R8, desc[UR8][R10.64]") == {8, 9}
    print("sass-loads: self-test passed")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: sass-loads.py OBJECT | --self-test", file=sys.stderr)
        return 2
    functions = parse(sass(argv[0]))
    problems, counts, seen = check(functions, KNOWN_LATE)
    archs = sorted({arch for arch, _ in functions} & set(ARCHS))
    stale = [label for label in sorted(KNOWN_LATE - seen) if label.split()[0] in archs]
    for label in stale:
        print(f"sass-loads: {label}: listed in KNOWN_LATE, but its loads are issued together: "
              "take it off the list", file=sys.stderr)
    if not all(counts.values()):
        print(f"sass-loads: {argv[0]}: expected norm (general and one-row), act and rotary kernels, "
              f"found {counts}", file=sys.stderr)
        return 1
    for p in problems:
        print(f"sass-loads: a load waits for another's use: {p}", file=sys.stderr)
    if problems or stale:
        print("sass-loads: see docs/device-plugins.md, \"The order of a kernel's loads\"", file=sys.stderr)
        return 1
    print(f"cuda kernels' load order ({', '.join(archs)}): {counts['norm'] + counts['norm_row']} norm and "
          f"{counts['act'] - len(seen)} of {counts['act']} gated activation kernels issue a row's loads "
          f"together ({len(seen)} known late, listed), {counts['rotary']} rotary kernels the position first")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
