#!/usr/bin/env python3
"""The include graph of core/, by module, and its cycles.

A module is a file stem: core/registry.c and core/registry.h are module
"registry". Module a depends on module b when a's .c or .h includes b.h
("b.h" in quotes; system and public headers are left out). A cycle is a
strongly connected set of modules: each reaches every other through
includes. core/README.md describes the floors these cycles cut across.

    python3 .ci/include-graph.py            # summary: per module, and the cycles
    python3 .ci/include-graph.py --dot      # the graph for graphviz (dot -Tsvg)
    python3 .ci/include-graph.py --edges    # one "a -> b" line per dependency

Exit status 0; with --max-cycle N, 1 when a cycle has more than N modules
(N = 1 forbids every cycle), for a check in CI.
"""
import argparse
import os
import re
import signal
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def modules(core):
    """{module: set(modules it includes)} for the C files of core."""
    deps = {}
    for name in sorted(os.listdir(core)):
        stem, ext = os.path.splitext(name)
        if ext not in (".c", ".h"):
            continue
        deps.setdefault(stem, set())
        with open(os.path.join(core, name), encoding="utf-8") as f:
            for inc in INCLUDE.findall(f.read()):
                base = os.path.basename(inc)
                target, text = os.path.splitext(base)
                if text == ".h" and os.path.exists(os.path.join(core, base)) and target != stem:
                    deps[stem].add(target)
    return deps


def cycles(deps):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(deps[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", default=os.path.join(os.path.dirname(__file__), "..", "core"))
    ap.add_argument("--dot", action="store_true")
    ap.add_argument("--edges", action="store_true")
    ap.add_argument("--max-cycle", type=int, default=0)
    args = ap.parse_args()
    deps = modules(args.core)
    comps = cycles(deps)
    if args.dot:
        print("digraph core {")
        for a in sorted(deps):
            for b in sorted(deps[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
    elif args.edges:
        for a in sorted(deps):
            for b in sorted(deps[a]):
                print(f"{a} -> {b}")
    else:
        users = {m: sorted(a for a in deps if m in deps[a]) for m in deps}
        print(f"{len(deps)} modules, {sum(len(d) for d in deps.values())} dependencies")
        for m in sorted(deps):
            print(f"  {m:22} includes {len(deps[m]):2}, included by {len(users[m]):2}")
        print(f"{len(comps)} cycle(s)")
        for c in comps:
            print(f"  {len(c)} modules: {' '.join(c)}")
    if args.max_cycle and any(len(c) > args.max_cycle for c in comps):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
