#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Whether `fldispatch tune`'s choices hold under load.

Runs `fldispatch tune --json` RUNS times with a load generator (one busy
process per online core) started and stopped by this script, then, with the
generator stopped, re-measures every bucket where some run pinned a
challenger over the policy's default winner: a `tune` of that op, dtype and
bucket alone with more rounds and --min-gain 0, comparing the pinned
implementation's min time per call with the default winner's. A pinned
choice more than 10% slower than the default winner is a failure (exit 1).

    bench/tune_mix/hold.py [--runs 5] [--tool build/bin/fldispatch]
                           [--ops gemma_rms_norm,rotary_embedding] [--dtype f32,bf16]
                           [--hidden 2048,4096] [--requantify-reps 9] [-- TUNE-ARGS...]

Prints one line per run (the decisions and the load average), then one line
per re-measured bucket, then a summary; everything it reads is in the JSON
documents of the runs, written beside the manifests under --outdir.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            info: dict[str, str] = {}
            for line in f:
                if ":" in line:
                    k, v = line.split(":", 1)
                    info.setdefault(k.strip(), v.strip())
        return "%s, family %s model %s" % (info.get("model name", "?"), info.get("cpu family", "?"),
                                           info.get("model", "?"))
    except OSError:
        return "unknown CPU"


def start_load(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_load(procs):
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait()


def tune(tool, args):
    r = subprocess.run([tool, "tune"] + args, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit("fldispatch tune %s: exit %d\n%s" % (" ".join(args), r.returncode, r.stderr))
    return json.loads(r.stdout), r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tool", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                   "bin", "fldispatch"))
    ap.add_argument("--ops", default="gemma_rms_norm,rotary_embedding")
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--hidden", default="2048,4096")
    ap.add_argument("--shapes", default="1-16=1,4,16;17-512=64,256;513-=2048")
    ap.add_argument("--remeasure-reps", type=int, default=9)
    ap.add_argument("--outdir", default="/tmp/fld-tune-hold")
    ap.add_argument("--no-load", action="store_true", help="no load generator (an A/A control)")
    ap.add_argument("extra", nargs="*", help="more tune arguments (after --)")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    ops = a.ops.split(",")
    common = ops + ["--dtype", a.dtype, "--hidden", a.hidden, "--shapes", a.shapes, "--quiet"] + a.extra
    cores = os.sysconf("SC_NPROCESSORS_ONLN")
    print("# %s, %d online cores; load average before: %.2f" % (cpu_model(), cores, loadavg()))
    print("# tune %s, %d runs%s" % (" ".join(common), a.runs,
                                    "" if a.no_load else ", %d busy processes beside it" % cores))
    pinned: dict[tuple[str, str, str], dict[str, list[int]]] = {}  # (op, dtype, rows) -> {winner: runs}
    samples = {}
    for run in range(1, a.runs + 1):
        procs = [] if a.no_load else start_load(cores)
        try:
            time.sleep(0 if a.no_load else 2)
            t0 = time.time()
            out = os.path.join(a.outdir, "run%d.yaml" % run)
            doc, err = tune(a.tool, common + ["--json", "--out", out])
            took = time.time() - t0
            load = loadavg()
        finally:
            stop_load(procs)
        with open(os.path.join(a.outdir, "run%d.json" % run), "w") as f:
            json.dump(doc, f, indent=1)
        counts: dict[str, int] = {}
        for res in doc["results"]:
            counts[res["decision"]] = counts.get(res["decision"], 0) + 1
            if res["decision"] in ("pinned", "fallback"):
                key = (res["op"], res["dtype"], res["rows"])
                pinned.setdefault(key, {}).setdefault(res["winner"], []).append(run)
                samples[key] = res["default"]
        warned = "warning" in err
        print("run %d: %.0f s, load average %.2f, decisions %s%s" % (
            run, took, load, ", ".join("%s %d" % kv for kv in sorted(counts.items())),
            ", warned" if warned else ""))
    time.sleep(0 if a.no_load else 5)
    print("# quiet re-measure (generator stopped), load average %.2f: --reps %d --min-gain 0" % (
        loadavg(), a.remeasure_reps))
    spec = dict(part.split("=", 1) for part in a.shapes.split(";"))
    failures = 0
    for (op, dtype, rows), winners in sorted(pinned.items()):
        default = samples[(op, dtype, rows)]
        doc, _ = tune(a.tool, [op, "--dtype", dtype, "--hidden", a.hidden, "--shapes",
                               "%s=%s" % (rows, spec[rows]), "--reps", str(a.remeasure_reps),
                               "--min-gain", "0", "--quiet", "--json"] + a.extra)
        by_id = {i["impl_id"]: i for i in doc["results"][0]["impls"]}
        for winner, runs in sorted(winners.items()):
            w, d = by_id.get(winner), by_id.get(default)
            if not w or not d or w["min_ns"] is None or d["min_ns"] is None:
                print("%s %s rows %s: pinned %s (runs %s), default %s: not comparable" % (
                    op, dtype, rows, winner, runs, default))
                continue
            ratio = w["min_ns"] / d["min_ns"]
            bad = ratio > 1.10
            failures += bad
            print("%s %s rows %s: pinned %s in runs %s: %.1f ns against the default %s %.1f ns: "
                  "%+.1f%%%s" % (op, dtype, rows, winner, runs, w["min_ns"], default, d["min_ns"],
                                 100 * (ratio - 1), "  MORE THAN 10% SLOWER" if bad else ""))
    print("# %d bucket(s) pinned a challenger in some run; %d pinned choice(s) more than 10%% "
          "slower than the default winner; load average after: %.2f" % (len(pinned), failures,
                                                                         loadavg()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
