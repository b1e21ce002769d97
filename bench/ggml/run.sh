#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/ggml/run.sh DIR [ROUNDS]: fetch ggml (inside the llama-cpp-python sdist from PyPI), build its CPU
# backend and our driver (bench/ggml/ggml_ops.c) under DIR, and run the comparison with `fldispatch bench`:
# ROUNDS (default 3) rounds, each ggml_ops then fldispatch bench, alternated, the JSON of every run kept in
# DIR/results/, then a table of the medians over the rounds and our/ggml ratios.
#
# Idempotent: what is already in DIR (the sdist, the unpacked tree, the cmake build, the driver) is reused.
# Nothing is written inside the repository except build/ by `make` (run it first, or let this script).
# Environment: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), JOBS (make -j, default 2), REPS (default 7),
# THREADS (default 1,2), TOKENS (default 4096), GGML_ONLY=1 (build and run ggml_ops once, no comparison).
set -eu

DIR=${1:?usage: bench/ggml/run.sh DIR [ROUNDS]}
ROUNDS=${2:-3}
VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
JOBS=${JOBS:-2}
REPS=${REPS:-7}
THREADS=${THREADS:-1,2}
TOKENS=${TOKENS:-4096}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# 1. The sdist: llama-cpp-python vendors llama.cpp, which carries ggml.
SDIST="$DIR/llama_cpp_python-$VER.tar.gz"
if [ ! -f "$SDIST" ]; then
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$DIR"
fi
SRC="$DIR/llama_cpp_python-$VER/vendor/llama.cpp/ggml"
if [ ! -d "$SRC" ]; then
    tar xzf "$SDIST" -C "$DIR"
fi
# The sdist leaves out ggml.pc.in, which ggml's standalone CMakeLists configures: an empty one will do
# (only the pkg-config file it would install is affected).
[ -f "$SRC/ggml.pc.in" ] || : > "$SRC/ggml.pc.in"

# 2. ggml's CPU backend only, shared libraries, native ISA, OpenMP.
BUILD="$DIR/build"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON \
        -DBUILD_SHARED_LIBS=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DGGML_BLAS=OFF \
        -DGGML_CCACHE=OFF
fi
(cd "$BUILD" && nice make -j"$JOBS" ggml ggml-base ggml-cpu)
LIB=$(dirname "$(find "$BUILD" -name 'libggml-cpu.so' | head -n 1)")

# 3. Our driver, linked against that build (rpath, so no LD_LIBRARY_PATH is needed).
DRIVER="$DIR/ggml_ops"
if [ ! -x "$DRIVER" ] || [ "$REPO/bench/ggml/ggml_ops.c" -nt "$DRIVER" ]; then
    cc -O2 -std=c11 -Wall -Wextra -I"$SRC/include" "$REPO/bench/ggml/ggml_ops.c" -o "$DRIVER" \
        -L"$LIB" -Wl,-rpath,"$LIB" -lggml -lggml-base -lggml-cpu -lm
fi
if [ "${GGML_ONLY:-0}" = 1 ]; then
    exec "$DRIVER" --tokens "$TOKENS" --threads "$THREADS" --reps "$REPS"
fi

# 4. Ours, then the alternated rounds.
(cd "$REPO" && nice make -j"$JOBS")
OUT="$DIR/results"
mkdir -p "$OUT"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    echo "round $r: ggml_ops ($(cat /proc/loadavg))" >&2
    "$DRIVER" --tokens "$TOKENS" --threads "$THREADS" --reps "$REPS" --json > "$OUT/ggml.$r.json"
    echo "round $r: fldispatch bench ($(cat /proc/loadavg))" >&2
    "$REPO/build/bin/fldispatch" bench --impl vendor.cpu --dtype f32,f16 --tokens "$TOKENS" \
        --threads "$THREADS" --reps "$REPS" --json silu_and_mul rms_norm rotary_embedding \
        > "$OUT/ours.$r.json"
    cat /proc/loadavg > "$OUT/loadavg.$r"
    r=$((r + 1))
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ggml, ours, triad = {}, {}, {}
for r in range(1, rounds + 1):
    for row in json.load(open(f"{out}/ggml.{r}.json"))["results"]:
        ggml.setdefault((row["ours"], row["dtype"], row["threads"]), []).append(row)
    doc = json.load(open(f"{out}/ours.{r}.json"))
    for row in doc["results"]:
        if row["residual"]:
            continue
        ours.setdefault((row["op"], row["dtype"], row["threads"]), []).append(row)
    for s in doc["machine"]["stream"]:
        triad.setdefault(s["threads"], []).append(s["triad_gbps"])
med = statistics.median
print("STREAM triad (median of the rounds): " +
      ", ".join(f"{t} thr {med(v):.1f} GB/s" for t, v in sorted(triad.items())))
print(f"{'op':18} {'dtype':5} {'thr':>3} {'ours GB/s':>9} {'share':>6} {'ggml GB/s':>9} {'share':>6} {'ours/ggml':>9}")
for key in sorted(ggml, key=lambda k: (k[0], k[1] != "f32", k[2])):
    g = ggml[key]
    o = ours.get(key)
    if not o:
        continue
    tri = med(triad[key[2]]) if key[2] in triad else float("nan")
    og, gg = med(x["gbps"] for x in o), med(x["gb_per_s"] for x in g)
    # ratio: median over the rounds of the same-round time ratios (equal byte counts, so GB/s ratios)
    ratios = [a["ns_per_call"] / (b["us"] * 1e3) for a, b in zip(g, o)]
    print(f"{key[0]:18} {key[1]:5} {key[2]:>3} {og:9.1f} {og / tri:6.0%} {gg:9.1f} {gg / tri:6.0%} {med(ratios):8.2f}x")
EOF
