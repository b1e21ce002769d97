#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a Prometheus scrape of fldispatch's counters costs the server that
serves it (vLLM's API server runs it on its event loop).

For each --files count, writes that many counters files (one per process,
ranks 0-7, 30 rows each: five ops, two implementations, three dtypes, as
VLLM_FL_STATS=time writes them) into a temporary directory and times, in
alternated rounds, fldispatch.prometheus.CountersCollector.collect() (the
merge and the families, A), the same again (A2, the A/A control), and the
whole page of a prometheus_client registry holding the collector
(generate_latest, what /metrics answers). Printed: the medians in
milliseconds, A2/A, and the page's lines.

    PYTHONPATH=build/python python3 bench/prometheus_scrape.py --files 3,64 --reps 31

Exit status 0.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from prometheus_client import CollectorRegistry, generate_latest

from fldispatch.prometheus import CountersCollector

OPS = ("rms_norm", "silu_and_mul", "rotary_embedding", "gelu_and_mul", "fused_add_rms_norm")


def write_files(directory, count):
    for i in range(count):
        entries = [{"op": op, "impl_id": impl, "device": "cpu", "dtype": dtype,
                    "calls": 1000 + i, "fallbacks": 0, "failures": 0, "total_ns": 123456 * i}
                   for op in OPS for impl in ("vendor.cpu", "reference.c")
                   for dtype in ("f32", "bf16", "f16")]
        with open(os.path.join(directory, f"stats-{i % 8}-{1000 + i}.json"), "w") as f:
            json.dump({"pid": 1000 + i, "rank": i % 8, "mode": "time", "entries": entries}, f)


def ms(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="3,64", help="file counts, comma-separated (3,64)")
    ap.add_argument("--reps", type=int, default=31, help="rounds per count (31)")
    args = ap.parse_args()
    print(f"{'files':>5} {'collect ms':>10} {'again ms':>9} {'A2/A':>5} {'page ms':>8} {'lines':>6}")
    for count in (int(c) for c in args.files.split(",")):
        with tempfile.TemporaryDirectory() as directory:
            write_files(directory, count)
            collector = CountersCollector(os.path.join(directory, "stats-*.json"))
            registry = CollectorRegistry()
            registry.register(collector)
            a, a2, page = [], [], []
            for _ in range(args.reps):
                a.append(ms(collector.collect))
                a2.append(ms(collector.collect))
                page.append(ms(lambda: generate_latest(registry)))
            lines = len(generate_latest(registry).splitlines())
        ma, ma2 = statistics.median(a), statistics.median(a2)
        print(f"{count:>5} {ma:>10.2f} {ma2:>9.2f} {ma2 / ma:>5.2f} "
              f"{statistics.median(page):>8.2f} {lines:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
