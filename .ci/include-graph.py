#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The dependency graph of core/, by module, and its cycles.

A module is a file stem: core/registry.c and core/registry.h are module
"registry". Module a depends on module b when a's .c or .h includes b.h
("b.h" in quotes; system and public headers are left out), and when a's .c
uses a function or variable that b's .c defines (an fld_ or fld__
name defined at file scope, not static), whichever header declares it: a
call is seen even when its declaration lives in a header named after
another module. A cycle is a strongly connected set of modules: each
reaches every other. core/README.md describes the floors these cycles
would cut across.

The documented upward calls (UPWARD below: a floor calling up into the
module that starts it) are left out of the graph; any other call up shows
as a cycle.

    python3 .ci/include-graph.py            # summary: per module, and the cycles
    python3 .ci/include-graph.py --dot      # the graph for graphviz (dot -Tsvg)
    python3 .ci/include-graph.py --edges    # one "a -> b" line per dependency

--self-test checks the rules on a made-up core (make lint runs it).

Exit status 0; with --max-cycle N, 1 when a cycle has more than N modules
(N = 1 forbids every cycle) and is not within one of KNOWN_CYCLES, for a
check in CI. --includes-only draws the include graph alone.
"""
import argparse
import os
import re
import signal
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
# A function defined at file scope: a line that starts with its type, the
# name, the parameters, then the body's brace (attributes allowed between).
FUNCTION = re.compile(r"^(?!static\b)[A-Za-z_][^;{}()\n]*?\b(fld_\w+)\s*\([^;{}]*?\)\s*(?:__attribute__\s*\(\(.*?\)\)\s*)?\{",
                      re.M | re.S)
# A variable defined at file scope (not static, not extern).
VARIABLE = re.compile(r"^(?!static\b|extern\b|typedef\b|struct\s+\w+\s*\{|enum\b|#)"
                      r"[A-Za-z_][^;{}()=\n]*?\b(fld_\w+)\s*(?:\[[^\]]*\])*\s*(?:=|;)", re.M)
NAME = re.compile(r"\bfld_\w+\b")

# (floor, module above it): the documented upward calls (core/README.md).
UPWARD = {
    ("host", "lifecycle"),  # fld__ensure_init_from() -> fld__init_from()
}

# The cycles that uses of definitions show and core/README.md lists under
# "What is left of the floors": --max-cycle lets a cycle through only when
# its modules are all within one of these (a cycle that grows, or a new one,
# fails). Shrink them as the floors are cut.
KNOWN_CYCLES = (
    # ops.c interns the catalog table (catalog.c, declared in ops.h); the
    # catalog's typed entry points call dispatch (dispatch.c), which reads it;
    # the registry commits a plugin's declared signatures (declarations.c),
    # which are kept on the ops.
    frozenset("catalog chain chain_cache chain_run declarations dispatch dispatch_override explain "
              "manifest names ops policy_override reference_activation reference_attention "
              "reference_norm reference_rotary registry select stats trace validate".split()),
)


def strip(text):
    """text without comments, string and character literals."""
    return COMMENT.sub(lambda m: " " if m.group(0).startswith("/") else '""', text)


def definitions(core, sources):
    """{name: module} of the non-static functions and variables core's .c files define."""
    defined = {}
    for name, text in sources.items():
        stem, ext = os.path.splitext(name)
        if ext != ".c":
            continue
        for m in FUNCTION.finditer(text):
            defined.setdefault(m.group(1), stem)
        for m in VARIABLE.finditer(text):
            defined.setdefault(m.group(1), stem)
    return defined


def modules(core, calls=True):
    """{module: set(modules it depends on)} for the C files of core: by
    include, and (calls) by the definitions it uses."""
    deps, sources = {}, {}
    for name in sorted(os.listdir(core)):
        stem, ext = os.path.splitext(name)
        if ext not in (".c", ".h"):
            continue
        deps.setdefault(stem, set())
        with open(os.path.join(core, name), encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            base = os.path.basename(inc)
            target, text_ext = os.path.splitext(base)
            if text_ext == ".h" and os.path.exists(os.path.join(core, base)) and target != stem:
                deps[stem].add(target)
        sources[name] = strip(text)
    if calls:
        defined = definitions(core, sources)
        for name, text in sources.items():
            stem, ext = os.path.splitext(name)
            if ext != ".c":  # a header's prototypes declare, they do not use
                continue
            for used in set(NAME.findall(text)):
                target = defined.get(used)
                if target and target != stem and (stem, target) not in UPWARD:
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


def self_test():
    """The uses are seen through a header named after another module; a
    static function, a prototype and a comment are not definitions or uses."""
    import tempfile
    files = {
        "x.h": "int fld__b(void);\nint fld__x(void);\n",
        "x.c": '#include "x.h"\nint fld__x(void)\n{\n    return 0;\n}\n',
        "b.c": '#include "a.h"\nint fld__b(void)\n{\n    return fld__a;\n}\n'
               "static int fld__hidden(void)\n{\n    return 1;\n}\n",
        "a.h": "extern int fld__a;\n",
        "a.c": '#include "x.h"\nint fld__a = 1;\n/* fld__x() */\n'
               "static int use(void)\n{\n    return fld__b();\n}\n",
        "c.c": "static int fld__hidden(void);\nint fld__c(void)\n{\n    return fld__hidden();\n}\n",
    }
    with tempfile.TemporaryDirectory() as core:
        for name, text in files.items():
            with open(os.path.join(core, name), "w", encoding="utf-8") as f:
                f.write(text)
        deps = modules(core)
        inc = modules(core, calls=False)
    want = {"a": {"x", "b"}, "b": {"a"}, "c": set(), "x": set()}
    assert deps == want, deps
    assert inc == {"a": {"x"}, "b": {"a"}, "c": set(), "x": set()}, inc
    assert cycles(deps) == [["a", "b"]] and cycles(inc) == [], (cycles(deps), cycles(inc))
    return 0


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", default=os.path.join(os.path.dirname(__file__), "..", "core"))
    ap.add_argument("--dot", action="store_true")
    ap.add_argument("--edges", action="store_true")
    ap.add_argument("--max-cycle", type=int, default=0)
    ap.add_argument("--includes-only", action="store_true",
                    help="the include graph alone, without the uses of definitions")
    ap.add_argument("--self-test", action="store_true",
                    help="check the graph's rules on a small made-up core, then exit")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    deps = modules(args.core, calls=not args.includes_only)
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
            known = any(set(c) <= k for k in KNOWN_CYCLES)
            print(f"  {len(c)} modules{' (known)' if known else ''}: {' '.join(c)}")
    if args.max_cycle and any(len(c) > args.max_cycle and
                              not any(set(c) <= known for known in KNOWN_CYCLES) for c in comps):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
