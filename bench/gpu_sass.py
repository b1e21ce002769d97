#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a thread of each CUDA kernel runs, read from its machine code.

For every kernel of a CUDA object (build/obj/plugins/cuda/cuda_kernels.o,
or any object nvcc built) and every architecture in it: the registers a
thread uses (ptxas's count; a block is allocated them in steps of 8; "+NB":
an N-byte stack frame, for spilled registers or those a call to a slow-path
subroutine saves) and the instructions it runs on its fastest full route. With a
second object, the two side by side: how a source change moved them, before
a GPU times it (docs/device-plugins.md quotes these figures).

The fastest full route: the most bytes a thread can store to global memory
on a path from the kernel's entry that runs each loop's body at most once
(its whole share of a one-pass kernel, one iteration's of a looping one),
and the fewest instructions to an EXIT on a path that has stored that many
(a loop's branch back taken where the exit test is behind it); a CALL counts
its subroutine's fewest instructions to a RET. So it is the path of a
thread that writes its share with no slow path: no range fallback, no
division's slow path, no NaN's. Where a branch the machine code cannot
decide chooses between two full routes (a block wider than the shared-memory
slots of a reduction, a row width that is not a power of two), the shorter
one is counted: the figure is exact for the shapes that take it and a floor
for the others. Beside it, the route's instructions after its last barrier
(BAR): in a kernel whose block sums a row, what every thread runs once the
sum is known, the part of a decode call that no other work overlaps.

    bench/gpu_sass.py OBJECT [BASE_OBJECT] [--arch sm_90] [--match REGEX] [--all]
    bench/gpu_sass.py PEER_CUBINS_DIR [--arch sm_90] [--match REGEX]
    bench/gpu_sass.py --self-test

A directory in place of OBJECT: every .cubin under it, such as the
peer-cubins/ folder of the GPU kit's `sass` step (the Triton and Inductor
kernels of Liger, FlagGems and torch.compile as that GPU's run compiled
them), each kernel named with its Triton metadata's warps and the first
characters of its cache folder, which tell one specialisation from another.

A kernel is named as c++filt reads it, without the return type and the
parameters (norm_kernel_row<2, 2, false, false>), so that it pairs with its
namesake in BASE_OBJECT (the same kernels built from another tree) even
where its parameters changed; with a base only the kernels whose figures
differ are listed, unless --all. --match keeps the kernels whose name
matches REGEX. cuobjdump and nvdisasm are found as
make lint finds them (.ci/sass-loads.py).
"""

import argparse
import heapq
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_spec = importlib.util.spec_from_file_location("sass_loads", os.path.join(ROOT, ".ci", "sass-loads.py"))
if _spec is None or _spec.loader is None:
    raise ImportError("cannot load .ci/sass-loads.py")
sass_loads = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_loads)

ADDRESSED = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
TARGET = re.compile(r"0x([0-9a-f]+)\s*$")
RES_ARCH = re.compile(r"arch = (sm_\d+)")
RES_FUNCTION = re.compile(r"Function (\S+):")
RES_REGISTERS = re.compile(r"REG:(\d+) STACK:(\d+)")
# bytes a global store writes, by its width suffix (no suffix: 4)
STORE_BYTES = ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1), (".S8", 1))


def parse(text):
    """{(arch, function): [(address, predicated, opcode, operands)]} from
    cuobjdump -sass output."""
    functions: dict[tuple[str, str], list[tuple[int, bool, str, str]]] = {}
    for arch, name, m in sass_loads.walk(text, ADDRESSED):
        functions.setdefault((arch, name), []).append(
            (int(m.group(1), 16), bool(m.group(2)), m.group(3), m.group(4).strip()))
    return functions


def stored(opcode):
    if not opcode.startswith("STG"):
        return 0
    return next((n for suffix, n in STORE_BYTES if suffix in opcode), 4)


def _successors(code, index, i):
    """Where control may go after instruction i: the indexes of the next
    instructions (None: a branch target that is no instruction)."""
    _, predicated, opcode, operands = code[i]
    if opcode.startswith("BRA"):
        m = TARGET.search(operands)
        out = [index.get(int(m.group(1), 16))] if m else []
        # "@P BRA" and "BRA P1, target" (a second predicate) may fall through
        if predicated or "," in operands:
            out.append(i + 1)
        return out
    if opcode.startswith(("EXIT", "RET", "BRX", "JMX")):
        return [i + 1] if predicated else []
    return [i + 1]


def _most_bytes(code, index):
    """The most bytes a path from the entry stores on forward edges alone:
    a thread's whole share, each loop's body once."""
    most: list[int | None] = [None] * (len(code) + 1)
    most[0] = 0
    top = 0
    for i in range(len(code)):
        if most[i] is None:
            continue
        here = most[i] + stored(code[i][2])
        top = max(top, here)
        for j in _successors(code, index, i):
            if j is not None and j > i and (most[j] is None or here > most[j]):
                most[j] = here
    return top


def _fewest(code, index, start, end, need, calls):
    """(instructions, those after the last barrier or None) of the fewest
    instructions from start to an `end` instruction (EXIT or RET) on a path
    that has stored `need` bytes by then (Dijkstra over (instruction, bytes
    stored, capped at need)); None where no path does."""
    dist = {(start, 0): 0}
    came: dict[tuple[int, int], tuple[int, int]] = {}
    heap = [(0, start, 0)]
    while heap:
        d, i, have = heapq.heappop(heap)
        if d > dist[(i, have)] or i >= len(code):
            continue
        opcode, operands = code[i][2], code[i][3]
        have_after = min(need, have + stored(opcode))
        cost = d + 1
        if opcode.startswith(end) and have_after >= need:
            state: tuple[int, int] | None = (i, have)
            while state is not None and not code[state[0]][2].startswith("BAR"):
                state = came.get(state)
            return cost, (None if state is None else cost - dist[state] - 1)
        steps = [(j, 0) for j in _successors(code, index, i)]
        if opcode.startswith("CALL"):
            # into the subroutine (an EXIT there ends the thread: sm_80 calls
            # a loop's exit), or over it, at its fewest instructions to RET;
            # a predicated call may be skipped (the fall-through above)
            m = TARGET.search(operands)
            target = index.get(int(m.group(1), 16)) if m else None
            callee = calls(target)
            steps = steps if code[i][1] else []
            steps += [(target, 0)] if end == "EXIT" else []
            steps += [(i + 1, callee)] if callee is not None else []
        for j, extra in steps:
            if j is not None and cost + extra < dist.get((j, have_after), cost + extra + 1):
                dist[(j, have_after)] = cost + extra
                came[(j, have_after)] = (i, have)
                heapq.heappush(heap, (cost + extra, j, have_after))
    return None


def fastest_full_route(code):
    """(bytes stored, instructions, instructions after the route's last
    barrier or None) of the kernel's fastest full route, or None where no
    path stores anything and reaches an EXIT."""
    index = {address: i for i, (address, *_) in enumerate(code)}
    need = _most_bytes(code, index)
    if need == 0:
        return None
    subroutines: dict[int, int | None] = {}

    def calls(i):
        if i is None:
            return None
        if i not in subroutines:
            subroutines[i] = None  # a subroutine that calls itself has no route
            found = _fewest(code, index, i, "RET", 0, calls)
            subroutines[i] = None if found is None else found[0]
        return subroutines[i]

    fewest = _fewest(code, index, 0, "EXIT", need, calls)
    return None if fewest is None else (need,) + fewest


def registers(text):
    """{(arch, function): "registers", or "registers+stack bytes" where the
    thread has a stack frame} from cuobjdump -res-usage output."""
    return {(arch, name): m.group(1) + (f"+{m.group(2)}B" if m.group(2) != "0" else "")
            for arch, name, m in sass_loads.walk(text, RES_REGISTERS, RES_ARCH, RES_FUNCTION)}


def readable(names):
    """{mangled: "kernel<args>"} by c++filt, without the return type and the
    parameters; the mangled name where c++filt is missing."""
    names = sorted(names)
    if not shutil.which("c++filt") or not names:
        return {n: n for n in names}
    run = subprocess.run(["c++filt"], input="\n".join(names), stdout=subprocess.PIPE, text=True, check=True)
    out = {}
    for mangled, line in zip(names, run.stdout.splitlines()):
        line = re.sub(r"^void ", "", line)
        line = re.sub(r"\([^()]*\)$", "", line)
        out[mangled] = re.sub(r"^fld_gpu::", "", line)
    return out


def figures(obj):
    """{(arch, kernel's readable name): (registers, instructions of the
    fastest full route, those after its last barrier)}: the readable name,
    without the parameters, pairs a kernel with its namesake in another tree
    whose parameters changed."""
    if not os.path.isfile(obj):
        sys.exit(f"gpu_sass: {obj}: no such file (make builds build/obj/plugins/cuda/cuda_kernels.o)")
    regs = registers(sass_loads.sass(obj, "-res-usage"))
    code = parse(sass_loads.sass(obj))
    names = readable({name for _, name in code})
    taken: dict[tuple[str, str], int] = {}
    for arch, name in code:
        taken[(arch, names[name])] = taken.get((arch, names[name]), 0) + 1
    out = {}
    for (arch, name), instructions in code.items():
        route = fastest_full_route(instructions) or (None, None, None)
        label = names[name] if taken[(arch, names[name])] == 1 else name  # overloads: mangled
        # a lone cubin's resource usage names no architecture
        out[(arch, label)] = (regs.get((arch, name), regs.get(("?", name))), route[1], route[2])
    return out


def cubin_label(path, kernel):
    """kernel [N warps, FOLDER]: a Triton cache entry's kernel, with the
    warps its metadata (the .json beside the cubin) gives, where it does."""
    meta = os.path.splitext(path)[0] + ".json"
    warps = "?"
    try:
        with open(meta, encoding="utf-8") as f:
            warps = json.load(f).get("num_warps", "?")
    except (OSError, ValueError):
        pass
    return f"{kernel} [{warps} warps, {os.path.basename(os.path.dirname(path))[:8]}]"


def folder_figures(folder):
    """figures() of every .cubin under folder, each kernel labelled by
    cubin_label."""
    out = {}
    for root, _, files in sorted(os.walk(folder)):
        for file in sorted(f for f in files if f.endswith(".cubin")):
            path = os.path.join(root, file)
            for (arch, kernel), figure in figures(path).items():
                out[(arch, cubin_label(path, kernel))] = figure
    if not out:
        sys.exit(f"gpu_sass: {folder}: no .cubin files under it")
    return out


def table(now, base, arch, match, everything):
    """The rows: arch, registers, instructions and those after the last
    barrier (base -> now), name."""
    keys = {k for k in now if arch is None or k[0] == arch}
    if base is not None:
        keys |= {k for k in base if arch is None or k[0] == arch}
    rows = []
    missing = (None, None, None)
    for key in sorted(keys):
        if match and not re.search(match, key[1]):
            continue
        figure = now.get(key, missing)
        if base is None:
            rows.append(f"{key[0]}  {_cell(figure[0]):>7}  {_cell(figure[1]):>5}  {_cell(figure[2]):>7}  {key[1]}")
            continue
        before = base.get(key, missing)
        if before == figure and not everything:
            continue
        rows.append(f"{key[0]}  {_cell(before[0]):>7} -> {_cell(figure[0]):>7}  "
                    f"{_cell(before[1]):>5} -> {_cell(figure[1]):>5}  "
                    f"{_cell(before[2]):>5} -> {_cell(figure[2]):>5}  {key[1]}")
    head = ("arch      regs  route  barrier  kernel" if base is None else
            "arch         registers              route   after barrier  kernel")
    return [head] + rows


def _cell(value):
    return "-" if value is None else str(value)


SELF_TEST = """
	code for sm_90
		Function : kernel_a
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/               @P0 EXIT ;
        /*0020*/               @P1 BRA 0x60 ;
        /*0030*/                   CALL.REL.NOINC 0xa0 ;
        /*0040*/                   STG.E.U16 desc[UR4][R2.64], R4 ;
        /*0050*/                   BRA 0x90 ;
        /*0060*/                   FADD R4, R4, R5 ;
        /*0070*/               @P2 BRA 0x20 ;
        /*0080*/                   STG.E.128 desc[UR4][R2.64], R4 ;
        /*0090*/                   EXIT ;
        /*00a0*/                   FMUL R4, R4, R4 ;
        /*00b0*/                   RET.REL.NODEC R20 0x0 ;
        /*00c0*/                   BRA 0xc0;
		Function : kernel_b
        /*0000*/                   ISETP.GE.AND P0, PT, R0, R1, PT ;
        /*0010*/               @P0 BRA P1, 0x40 ;
        /*0020*/                   CALL.REL.NOINC 0x70 ;
        /*0030*/                   FADD R4, R4, R5 ;
        /*0040*/                   STG.E desc[UR4][R2.64], R4 ;
        /*0050*/                   EXIT ;
        /*0060*/                   BRA 0x60;
        /*0070*/                   FMUL R4, R4, R4 ;
        /*0080*/                   FMUL R4, R4, R4 ;
        /*0090*/                   RET.REL.NODEC R20 0x0 ;
		Function : kernel_loop
        /*0000*/                   ISETP.GE.AND P0, PT, R0, R1, PT ;
        /*0010*/               @P0 EXIT ;
        /*0020*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0030*/                   STG.E desc[UR4][R2.64], R4 ;
        /*0040*/                   BRA 0x10 ;
		Function : kernel_call_exit
        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0010*/                   STG.E desc[UR4][R2.64], R4 ;
        /*0020*/                   ISETP.GE.AND P0, PT, R0, R1, PT ;
        /*0030*/               @P0 CALL.REL.NOINC 0x50 ;
        /*0040*/                   BRA 0x0 ;
        /*0050*/                   EXIT ;
		Function : kernel_bar
        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0020*/                   FADD R4, R4, R5 ;
        /*0030*/               @P0 BRA 0x60 ;
        /*0040*/                   FMUL R4, R4, R4 ;
        /*0050*/                   FMUL R4, R4, R4 ;
        /*0060*/                   STG.E desc[UR4][R2.64], R4 ;
        /*0070*/                   EXIT ;
"""

SELF_TEST_REGISTERS = """
arch = sm_90
 Function kernel_a:
  REG:40 STACK:0 SHARED:0 LOCAL:0
 Function kernel_b:
  REG:24 STACK:8 SHARED:0 LOCAL:0
"""


def self_test():
    functions = parse(SELF_TEST)
    # kernel_a: the early EXIT stores nothing; the 16-byte store beats the
    # 2-byte one (LDG, @P0 EXIT, @P1 BRA, FADD, @P2 BRA not taken back, STG, EXIT)
    assert fastest_full_route(functions[("sm_90", "kernel_a")]) == (16, 7, None), \
        fastest_full_route(functions[("sm_90", "kernel_a")])
    # kernel_b: the two-predicate branch may skip the call, whose subroutine
    # counts its own instructions otherwise
    code = functions[("sm_90", "kernel_b")]
    assert fastest_full_route(code) == (4, 4, None), fastest_full_route(code)
    # from the CALL: it, FMUL FMUL RET, then FADD STG EXIT
    assert fastest_full_route(code[2:]) == (4, 7, None), fastest_full_route(code[2:])
    assert fastest_full_route(code[:1]) is None
    # kernel_loop: one body's store, then back to the loop's exit test
    assert fastest_full_route(functions[("sm_90", "kernel_loop")]) == (4, 6, None), \
        fastest_full_route(functions[("sm_90", "kernel_loop")])
    # kernel_call_exit: sm_80 leaves a loop by calling an EXIT
    assert fastest_full_route(functions[("sm_90", "kernel_call_exit")]) == (4, 5, None), \
        fastest_full_route(functions[("sm_90", "kernel_call_exit")])
    # kernel_bar: 4 of the route's 6 instructions after its barrier
    assert fastest_full_route(functions[("sm_90", "kernel_bar")]) == (4, 6, 4), \
        fastest_full_route(functions[("sm_90", "kernel_bar")])
    assert registers(SELF_TEST_REGISTERS) == {("sm_90", "kernel_a"): "40", ("sm_90", "kernel_b"): "24+8B"}
    assert stored("STG.E.64") == 8 and stored("STG.E") == 4 and stored("LDG.E.128") == 0
    rows = table({("sm_90", "k"): ("40", 100, 30), ("sm_90", "j"): ("32", 50, None)},
                 {("sm_90", "k"): ("40", 120, 40), ("sm_90", "j"): ("32", 50, None)}, None, None, False)
    assert len(rows) == 2 and "120 ->   100" in rows[1] and "40 ->    30" in rows[1], rows
    assert cubin_label("/nowhere/ABCDEFGHIJ/k.cubin", "k") == "k [? warps, ABCDEFGH]"
    print("gpu_sass: self-test passed")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    parser = argparse.ArgumentParser(prog="gpu_sass.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("object", help="a CUDA object (cubin, .o or fatbin) with the kernels, or a folder of cubins")
    parser.add_argument("base", nargs="?", help="the same kernels built from another tree")
    parser.add_argument("--arch", help="one architecture of the object (sm_90); default all")
    parser.add_argument("--match", help="keep kernels whose readable name matches this regular expression")
    parser.add_argument("--all", action="store_true", help="with a base, list unchanged kernels too")
    args = parser.parse_args(argv)
    if args.match:
        try:
            re.compile(args.match)
        except re.error as e:
            parser.error(f"--match {args.match!r}: {e}")
    if os.path.isdir(args.object):
        if args.base:
            parser.error("a folder of cubins takes no BASE_OBJECT")
        now = folder_figures(args.object)
    else:
        now = figures(args.object)
    base = figures(args.base) if args.base else None
    if args.arch and not any(arch == args.arch for arch, _ in now):
        parser.error(f"--arch {args.arch}: {args.object} has code for "
                     f"{', '.join(sorted({a for a, _ in now})) or 'no architecture'}")
    for row in table(now, base, args.arch, args.match, args.all):
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
