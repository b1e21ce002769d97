# SPDX-License-Identifier: Apache-2.0
"""python -m fldispatch tune --device cuda|rocm: the tune on a GPU, timing
what vLLM sees: device time per call under CUDA-graph replay.

For each (op, dtype, row bucket) of tune's bucket scheme and sample shapes
(--shapes, --hidden, as `fldispatch tune` has them) it lists the
implementations available on the device (the C plugins' and those
registered from Python, as the library's registry has them), checks each
against the reference implementation (the library's reference.c on host
copies of the same inputs, verify's tolerances), pins each in turn by a
strict per-op order 'impl:<id>' and captures N calls of it in a CUDA graph
on torch's current stream (the capture stream; the op functions pass it to
the library). Rounds then replay the graphs alternately, starting one
further along each round (A B C, B C A, ...); a replay's device time comes
from CUDA events around it. Each implementation's figures are the medians
over rounds (of its fastest replay, MIN, and of the mean, MEDIAN) and
their spread (interquartile range over the median), each a geometric mean
over the bucket's samples. The decision is the CPU tune's: the policy's
own choice (the default winner) stays unless a correct challenger's MIN is
lower by more than both spreads of MIN together and --min-gain, and its
MEDIAN is lower too. The manifest is the CPU tune's format (adjacent
buckets with one winner merge; one winner everywhere: one entry without
rows), for VLLM_FL_MANIFEST.

The timer is a parameter: GraphTimer (the GPU) or HostTimer (host time of
the same calls, on tensors of any device; the tests run it on CPU
tensors). Everything else is the same code path.
"""

import math
import os
import signal
import sys
import time
from typing import Any, Callable, Iterable, Literal, Sequence, TextIO

import fldispatch
from fldispatch import devices

USAGE = """\
Usage: python -m fldispatch tune --device cuda|rocm [OP...] [--dtype T[,T...]]
                 [--shapes SPEC] [--hidden N[,N...]] [--reps N] [--calls N]
                 [--min-gain PCT] [--impl ID[,ID...]] [--timer graph|host]
                 [--quick] [--quiet] [--out FILE] [--json]

Times every available implementation of each op on the GPU (the C plugins'
and those registered from Python) as vLLM runs them: device time per call
under CUDA-graph replay, in rounds that alternate the implementations. Each
is checked against the reference implementation (verify's tolerances). The
manifest pins, per (op, device, dtype, row bucket), the policy's own choice
(the default winner) unless a correct challenger is faster by more than the
measured spread; use it with VLLM_FL_MANIFEST=FILE.

  --device D       cuda or rocm (needs PyTorch built for it, with a device)
  --dtype T,..     f32, f16, bf16 (default: all three)
  --shapes SPEC    buckets and the row counts timed in each, 'LO-HI=R,R;LO-=R'
                   (default '1-16=1,4,16;17-512=64,256;513-=2048')
  --hidden N,..    hidden sizes, multiples of 128 (default 2048,4096;
                   activations: d, the output width; rotary: heads of 128)
  --reps N         rounds, 2 to 100 (default 7; 3 with --quick)
  --calls N        calls captured in each graph, 1 to 1000 (default 20)
  --min-gain PCT   the least gain that pins a challenger, in percent (default 5)
  --impl ID,..     time only these implementations and the default winner
                   (the one they must beat); default: every available one
  --timer T        graph (default): device time under CUDA-graph replay;
                   host: the calls' host time, synchronized (a check, not a tuning)
  --quick          fewer replays per round (a smoke test, not a tuning)
  --quiet          no progress line
  --out FILE       write the manifest to FILE (atomically) instead of standard output
  --json           one JSON object on standard output; the manifest only with --out

Exit status: 0 a manifest was written; 1 an implementation failed or was
wrong (it is left out, the manifest is still written); 2 usage error, or no
PyTorch with the device; 3 nothing to tune.
"""

DEFAULT_SHAPES = "1-16=1,4,16;17-512=64,256;513-=2048"
DEFAULT_HIDDEN = "2048,4096"
MAX_BUCKETS = 6
MAX_SAMPLES = 8
MAX_HIDDEN = 8
REFERENCE = "reference.c"
ROPE_MAX_POS = 8192
HEAD = 128
NOISY = 0.10

# The ops with tensors, {op: its catalog family, lower case} (_C.catalog()).
FAMILY = {op: family.lower() for op, family, _doc in fldispatch._C.catalog()
          if family != "ATTENTION"}
# verify's tolerances (allclose: |got - want| <= atol + rtol |want|); the norms 1e-2 for every dtype
TOLERANCE = {"f32": (1e-5, 1.3e-6), "f16": (1e-3, 1e-3), "bf16": (1e-3, 1.6e-2)}
NORM_TOLERANCE = 1e-2
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOTHING = 0, 1, 2, 3


class UsageError(Exception):
    """A command-line or argument error (exit 2), its message naming what is at fault."""


# ---- buckets ------------------------------------------------------------------


class Bucket:
    __slots__ = ("lo", "hi", "samples")

    def __init__(self, lo: int, hi: int | None, samples: Iterable[int]) -> None:
        self.lo, self.hi, self.samples = lo, hi, tuple(samples)

    def label(self, upto: "Bucket | None" = None) -> str:
        """'LO-HI' or 'LO-'; upto: the bucket whose end it takes (adjacent buckets merged)."""
        hi = (upto or self).hi
        return f"{self.lo}-" if hi is None else f"{self.lo}-{hi}"


def _count(text: str, what: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{what}: '{text}' is not a whole count from 1")
    return int(text)


def parse_shapes(spec: str) -> list[Bucket]:
    """'LO-HI=R,R;LO-=R' -> [Bucket]; the C tune's rules: at most 6 buckets,
    ascending, not overlapping, each row count inside its bucket."""
    buckets: list[Bucket] = []
    for part in spec.split(";"):
        rng, eq, rows = part.partition("=")
        lo_text, dash, hi_text = rng.partition("-")
        if not eq or not dash or not rows:
            raise UsageError(f"--shapes '{spec}': expected 'LO-HI=R,R;LO-=R', not '{part}'")
        lo = _count(lo_text, f"--shapes '{spec}'")
        hi = _count(hi_text, f"--shapes '{spec}'") if hi_text else None
        if hi is not None and hi < lo:
            raise UsageError(f"--shapes '{spec}': the bucket {lo}-{hi} ends before it starts")
        samples = [_count(r, f"--shapes '{spec}'") for r in rows.split(",")]
        if len(samples) > MAX_SAMPLES:
            raise UsageError(f"--shapes '{spec}': at most {MAX_SAMPLES} row counts a bucket")
        for r in samples:
            if r < lo or (hi is not None and r > hi):
                raise UsageError(f"--shapes '{spec}': {r} rows is outside its bucket "
                                 f"{Bucket(lo, hi, ()).label()}")
        if buckets and (buckets[-1].hi is None or lo <= buckets[-1].hi):
            raise UsageError(f"--shapes '{spec}': the bucket {Bucket(lo, hi, ()).label()} overlaps "
                             f"or precedes {buckets[-1].label()}")
        buckets.append(Bucket(lo, hi, samples))
        if len(buckets) > MAX_BUCKETS:
            raise UsageError(f"--shapes '{spec}': at most {MAX_BUCKETS} buckets")
    return buckets


def parse_hidden(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        h = _count(part, f"--hidden '{text}'")
        if h % HEAD or h > 1 << 20 or len(out) == MAX_HIDDEN:
            raise UsageError(f"--hidden '{text}': expected up to {MAX_HIDDEN} multiples of {HEAD}")
        out.append(h)
    return out


# ---- the tensors of one sample -------------------------------------------------


class Sample:
    """The inputs of (op, rows, hidden) on a device, the fresh state an
    in-place op starts from, and the call."""

    def __init__(self, torch: Any, op: str, rows: int, hidden: int, dtype: str, device: str) -> None:
        self.op, self.rows, self.hidden = op, rows, hidden
        self.family = FAMILY[op]
        dt = getattr(torch, DTYPE_NAMES[dtype])
        gen = torch.Generator().manual_seed(rows * 7919 + hidden)

        def rand(*shape: int) -> Any:
            return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dt).to(device)

        f = self.family
        if f in ("gated", "elementwise"):
            self.inputs = {"x": rand(rows, 2 * hidden if f == "gated" else hidden)}
            self.outputs = {"out": torch.empty(rows, hidden, dtype=dt, device=device)}
        elif f == "norm":
            self.inputs = {"x": rand(rows, hidden), "weight": rand(hidden)}
            self.outputs = {"out": torch.empty(rows, hidden, dtype=dt, device=device)}
        else:
            q_heads = hidden // HEAD
            k_heads = q_heads // 4 if q_heads >= 8 else 1
            pos = torch.randint(0, ROPE_MAX_POS, (rows,), generator=gen, dtype=torch.int64)
            self.inputs = {"positions": pos.to(device),
                           "cos_sin_cache": rand(ROPE_MAX_POS, HEAD)}
            self.fresh = {"query": rand(rows, q_heads * HEAD), "key": rand(rows, k_heads * HEAD)}
            if f == "rotary":
                self.outputs = {k: v.clone() for k, v in self.fresh.items()}
            else:
                self.inputs.update(self.fresh)
                self.outputs = {"query_out": torch.empty_like(self.fresh["query"]),
                                "key_out": torch.empty_like(self.fresh["key"])}

    def reset(self) -> None:
        """Puts the in-place op's tensors back to the inputs."""
        if self.family == "rotary":
            for k, v in self.fresh.items():
                self.outputs[k].copy_(v)

    def call(self) -> None:
        """One call of the op on these tensors, as vLLM's layer calls it."""
        i, o = self.inputs, self.outputs
        f = self.family
        if f in ("gated", "elementwise"):
            getattr(fldispatch, self.op)(o["out"], i["x"])
        elif f == "norm":
            getattr(fldispatch, self.op)(o["out"], i["x"], i["weight"], None, 1e-6)
        elif f == "rotary":
            fldispatch.rotary_embedding(i["positions"], o["query"], o["key"], HEAD,
                                        i["cos_sin_cache"], True)
        else:
            fldispatch.rotary_embedding_out(i["positions"], i["query"], i["key"], HEAD,
                                            i["cos_sin_cache"], True, o["query_out"],
                                            o["key_out"])

    def host_copy(self, torch: Any) -> "Sample":
        """The same sample on CPU tensors (the reference runs there)."""
        c = object.__new__(Sample)
        c.op, c.rows, c.hidden, c.family = self.op, self.rows, self.hidden, self.family
        c.inputs = {k: v.cpu() for k, v in self.inputs.items()}
        c.outputs = {k: v.cpu().clone() for k, v in self.outputs.items()}
        if hasattr(self, "fresh"):
            c.fresh = {k: v.cpu() for k, v in self.fresh.items()}
        return c


class pinned:
    """The policy that makes impl the only candidate of op: a strict per-op
    order 'impl:<id>', as the CPU tune and verify pin it."""

    def __init__(self, op: str, impl: str) -> None:
        self.scope = fldispatch.policy(per_op={op: [f"impl:{impl}"]}, strict=True)

    def __enter__(self) -> "pinned":
        self.scope.__enter__()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return self.scope.__exit__(*exc)


def _mismatch(torch: Any, got: dict[str, Any], want: dict[str, Any], atol: float, rtol: float) -> str | None:
    """None when every output is within tolerance, else why (the largest error and where)."""
    worst: tuple[float, str] | None = None
    for name, w in want.items():
        g = got[name].float().cpu()
        w = w.float()
        err = (g - w).abs()
        bad = err - (atol + rtol * w.abs())
        if bad.numel() == 0 or bool((bad <= 0).all()) and bool(torch.isfinite(g).all()):
            continue
        bad = torch.where(torch.isfinite(bad), bad, torch.full_like(bad, math.inf))
        flat = int(bad.flatten().argmax())
        e = float(err.flatten()[flat])
        if worst is None or not e <= worst[0]:
            idx = list(torch.unravel_index(torch.tensor(flat), w.shape))
            worst = (e, f"{name}[{']['.join(str(int(v)) for v in idx)}]")
    if worst is None:
        return None
    return f"wrong: max error {worst[0]:.3g} at {worst[1]} (atol {atol:g}, rtol {rtol:g})"


# ---- timers ----------------------------------------------------------------------


class HostTimer:
    """Host time of `calls` calls, the device synchronized around them: the
    same code path as GraphTimer without a GPU (the tests run it on CPU
    tensors). Not what a CUDA-graph step costs: a check, not a tuning."""

    name = "host"

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.device = torch, device

    def _sync(self) -> None:
        if self.device != "cpu":
            self.torch.cuda.synchronize()

    def prepare(self, sample: Sample, op: str, impl: str, calls: int) -> Callable[[], float]:
        def run() -> float:
            with pinned(op, impl):
                self._sync()
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    sample.call()
                self._sync()
                return (time.perf_counter_ns() - t0) / calls
        run()  # warm-up (and the failure, if it fails)
        return run


class GraphTimer:
    """Device time per call under CUDA-graph replay: `calls` calls of the
    pinned implementation captured in one torch.cuda.CUDAGraph on torch's
    current stream (the capture stream), each replay timed by CUDA events."""

    name = "graph"

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.device = torch, device
        self.graphs: list[Any] = []  # kept alive while their timings are taken

    def prepare(self, sample: Sample, op: str, impl: str, calls: int) -> Callable[[], float]:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), pinned(op, impl):
            for _ in range(3):  # warm-up off the capture (lazy initialisation, autotuning)
                sample.call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with pinned(op, impl), torch.cuda.graph(graph):
            for _ in range(calls):
                sample.call()
        self.graphs.append(graph)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def run() -> float:
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e6 / calls
        graph.replay()
        torch.cuda.synchronize()
        return run

    def release(self) -> None:
        self.graphs.clear()


# ---- statistics and the decision ----------------------------------------------------


def median_spread(values: Iterable[float]) -> tuple[float, float]:
    """The median of values and the spread: interquartile range over the median."""
    v = sorted(values)
    n = len(v)

    def q(p: float) -> float:
        x = p * (n - 1)
        a = int(x)
        return v[a] + ((x - a) * (v[a + 1] - v[a]) if a + 1 < n else 0)
    med = q(0.5)
    return med, ((q(0.75) - q(0.25)) / med if med > 0 else math.nan)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-3)) for v in values) / len(values))


class Score:
    def __init__(self, impl: str) -> None:
        self.impl = impl
        self.correct = True
        self.why: str | None = None
        self.min_ns = self.median_ns = self.spread = self.min_spread = math.nan
        self.round_min: list[list[float]] = []   # per round: per sample's fastest replay
        self.round_mean: list[list[float]] = []  # per round: per sample's mean

    def as_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if isinstance(x, float) and not math.isfinite(x) else x
        return {"impl_id": self.impl, "ns": num(self.median_ns), "min_ns": num(self.min_ns),
                "median_ns": num(self.median_ns), "spread": num(self.spread),
                "min_spread": num(self.min_spread), "correct": self.correct, "why": self.why}


class Result:
    def __init__(self, op: str, dtype: str, bucket: Bucket) -> None:
        self.op, self.dtype, self.bucket = op, dtype, bucket
        self.scores: list[Score] = []
        self.default: str | None = None
        self.winner: str | None = None
        self.decision = "none"
        self.reason = ""

    def score(self, impl: str) -> Score | None:
        return next((s for s in self.scores if s.impl == impl), None)


def _pct(x: float) -> float:
    return 100 * x


def decide(res: Result, min_gain: float) -> None:
    """The winner of a bucket, as the CPU tune decides it; then each loser's why."""
    d = res.score(res.default) if res.default else None
    timed = [s for s in res.scores if s.correct and math.isfinite(s.min_ns)]
    if d is None or not d.correct or not math.isfinite(d.min_ns):
        w = min(timed, key=lambda s: s.min_ns, default=None)
        res.winner = w.impl if w else None
        res.decision = "fallback" if w else "none"
        tail = ": the fastest correct one" if w else ""
        if not res.default:
            res.reason = "the policy selects no implementation here" + tail
        else:
            res.reason = (f"the default winner {res.default} cannot serve "
                          f"({d.why if d else 'not timed'}){tail}")
    else:
        best, close = d, None
        for c in timed:
            if c is d or not c.min_ns < d.min_ns:
                continue
            gain = 1 - c.min_ns / d.min_ns
            need = max(min_gain, c.min_spread + d.min_spread)
            if gain > need and c.median_ns < d.median_ns:
                if best is d or c.min_ns < best.min_ns:
                    best = c
            elif close is None or c.min_ns < close.min_ns:
                close = c
        res.winner = best.impl
        if best is not d:
            res.decision = "pinned"
            res.reason = (f"faster than the default winner {d.impl} by "
                          f"{_pct(1 - best.min_ns / d.min_ns):.1f}% ± "
                          f"{_pct(best.min_spread + d.min_spread):.1f}% (more than the "
                          f"{_pct(max(min_gain, best.min_spread + d.min_spread)):.1f}% needed)")
        elif close is not None:
            res.decision = "undecided"
            res.reason = (f"kept default: {close.impl} is faster by "
                          f"{_pct(1 - close.min_ns / d.min_ns):.1f}% ± "
                          f"{_pct(close.min_spread + d.min_spread):.1f}%, " +
                          ("within the spread or --min-gain" if close.median_ns < d.median_ns
                           else "but its median is not lower"))
        else:
            res.decision = "default"
            res.reason = "the default winner is the fastest"
    w = res.score(res.winner) if res.winner else None
    if w is None:
        return
    for s in res.scores:
        if s is w or not s.correct:
            continue
        err = _pct(s.min_spread + w.min_spread)
        if s.min_ns >= w.min_ns:
            s.why = f"slower by {_pct(s.min_ns / w.min_ns - 1):.1f}% ± {err:.1f}%"
        else:
            s.why = (f"faster by {_pct(1 - s.min_ns / w.min_ns):.1f}% ± {err:.1f}%, " +
                     ("not by more than the spread or --min-gain" if s.median_ns < w.median_ns
                      else "but its median is not lower") + f": kept {w.impl}")


# ---- the run ---------------------------------------------------------------------------


def candidates(op: str, device: str, dtype: str, only: Iterable[str] | None = None) -> list[str]:
    """The implementations of op available on (device, dtype) that the policy
    lets serve (pinning each resolves to it), C and Python alike, in impl_id
    order; with only, those of them it names and the default winner."""
    long = DTYPE_NAMES[dtype]
    keep = None if only is None else {*only, default_winner(op, device, dtype)}
    ids = sorted({m["impl_id"] for m in fldispatch.impls()
                  if m["op"] == op and m["available"] and device in m["devices"]
                  and dtype in m["dtypes"] and (keep is None or m["impl_id"] in keep)})
    out: list[str] = []
    for impl in ids:
        try:
            with pinned(op, impl):
                ok = fldispatch.resolve(op, device, long) == impl
        except fldispatch.Error:
            ok = False
        if ok:
            out.append(impl)
    return out


def default_winner(op: str, device: str, dtype: str) -> str | None:
    try:
        return fldispatch.resolve(op, device, DTYPE_NAMES[dtype])
    except fldispatch.Error:
        return None


def _failure(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"failed: {text.splitlines()[0]}"


def tune_bucket(torch: Any, timer: GraphTimer | HostTimer, op: str, device: str, dtype: str, bucket: Bucket,
                hidden: Sequence[int], reps: int, calls: int, replays: int, min_gain: float,
                only: Iterable[str] | None = None) -> Result:
    """Times one (op, dtype, bucket) and decides it; returns the Result."""
    res = Result(op, dtype, bucket)
    res.default = default_winner(op, device, dtype)
    impls = candidates(op, device, dtype, only)
    res.scores = [Score(i) for i in impls]
    for s in res.scores:
        s.round_min = [[] for _ in range(reps)]
        s.round_mean = [[] for _ in range(reps)]
    tol = (NORM_TOLERANCE, NORM_TOLERANCE) if FAMILY[op] == "norm" else TOLERANCE[dtype]
    for rows in bucket.samples:
        for h in hidden:
            sample = Sample(torch, op, rows, h, dtype, timer.device)
            host = sample.host_copy(torch)
            host.reset()
            with pinned(op, REFERENCE):
                host.call()
            want = host.outputs
            runners: dict[str, Callable[[], float]] = {}
            for s in res.scores:
                if not s.correct:
                    continue
                try:
                    sample.reset()
                    with pinned(op, s.impl):
                        sample.call()
                    why = _mismatch(torch, sample.outputs, want, *tol)
                except fldispatch.Error as exc:
                    why = _failure(exc)
                if why is None:
                    try:
                        runners[s.impl] = timer.prepare(sample, op, s.impl, calls)
                    except Exception as exc:  # a call that fails, or cannot be captured
                        why = f"{_failure(exc)} (timing with the {timer.name} timer)"
                if why is not None:
                    s.correct, s.why = False, why
            live = [s for s in res.scores if s.correct]
            for r in range(reps):
                for k in range(len(live)):
                    s = live[(r + k) % len(live)]
                    times = [runners[s.impl]() for _ in range(replays)]
                    s.round_min[r].append(min(times))
                    s.round_mean[r].append(sum(times) / len(times))
            if hasattr(timer, "release"):
                timer.release()
    for s in res.scores:
        if s.correct and s.round_min and all(s.round_min):
            s.min_ns, s.min_spread = median_spread([_geomean(v) for v in s.round_min])
            s.median_ns, s.spread = median_spread([_geomean(v) for v in s.round_mean])
    decide(res, min_gain)
    return res


def tune(ops: Sequence[str], device: str, dtypes: Sequence[str], buckets: Sequence[Bucket], hidden: Sequence[int],
         *, timer: GraphTimer | HostTimer, reps: int = 7, calls: int = 20, replays: int = 8,
         min_gain: float = 0.05, only: Iterable[str] | None = None,
         progress: Callable[[int, int, str, str, Bucket], None] | None = None) -> list[Result]:
    """Every (op, dtype, bucket): [Result]. timer: a GraphTimer or HostTimer;
    only: the impl_ids to time beside the default winner (None: every one)."""
    import torch

    results: list[Result] = []
    total = len(ops) * len(dtypes) * len(buckets)
    for op in ops:
        for dtype in dtypes:
            for b in buckets:
                if progress:
                    progress(len(results), total, op, dtype, b)
                results.append(tune_bucket(torch, timer, op, device, dtype, b, hidden, reps,
                                           calls, replays, min_gain, only))
    return results


# ---- the manifest (the format `fldispatch tune` writes) ------------------------------------


def manifest_entries(results: Iterable[Result], device: str) -> list[str]:
    """The manifest lines of results: per (op, dtype) adjacent buckets with one
    winner merge; one winner everywhere gives one entry without rows."""
    lines: list[str] = []
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.op, r.dtype), []).append(r)
    for (op, dtype), rs in groups.items():
        wins = [r.winner for r in rs]
        if wins and all(w and w == wins[0] for w in wins):
            lines.append(f"  - {{op: {op}, device: {device}, dtype: {dtype}, impl: {wins[0]}}}")
            continue
        i = 0
        while i < len(rs):
            w = rs[i].winner
            if not w:
                i += 1
                continue
            j = i
            while (j + 1 < len(rs) and rs[j + 1].winner == w and rs[j].bucket.hi is not None
                   and rs[j + 1].bucket.lo - 1 == rs[j].bucket.hi):
                j += 1
            rows = rs[i].bucket.label(rs[j].bucket)
            lines.append(f"  - {{op: {op}, device: {device}, dtype: {dtype}, rows: {rows}, "
                         f"impl: {w}}}")
            i = j + 1
    return lines


def manifest_text(results: Iterable[Result], device: str, hidden: Iterable[int], timer_name: str, machine: str) -> str:
    head = [f"# fldispatch manifest, written by 'python -m fldispatch tune --device {device}' "
            f"on {machine}",
            "# per row bucket the default winner, or a correct challenger faster by more than "
            "the spread; " + ("device time under CUDA-graph replay" if timer_name == "graph"
                              else "host time") + "; hidden sizes " +
            " ".join(str(h) for h in hidden),
            "version: 1", "entries:"]
    lines = manifest_entries(results, device)
    return "\n".join(head + (lines or ["  []"])) + "\n"


def write_atomically(path: str, text: str) -> None:
    """path whole or not at all (fldispatch._files.write_replacing); a
    symbolic link at path is refused, not replaced."""
    if os.path.islink(path):
        raise OSError(f"'{path}' is a symbolic link (not followed)")
    from ._files import write_replacing

    write_replacing(path, lambda f: f.write(text), mode=0o644)


# ---- the command -------------------------------------------------------------------------


def _options(argv: Iterable[str]) -> dict[str, Any]:
    o: dict[str, Any] = {
        "ops": [], "device": None, "dtypes": None, "shapes": DEFAULT_SHAPES, "hidden": DEFAULT_HIDDEN,
        "reps": None, "calls": 20, "min_gain": 5.0, "timer": "graph", "impl": None, "quick": False,
        "quiet": False, "out": None, "json": False}
    valued = {"--device", "--dtype", "--shapes", "--hidden", "--reps", "--calls", "--min-gain",
              "--impl", "--timer", "--out"}
    it = iter(argv)
    value: str | None
    for a in it:
        name, eq, value = a.partition("=")
        if name in valued:
            if not eq:
                value = next(it, None)
                if value is None:
                    raise UsageError(f"{name} needs a value")
            key = name[2:].replace("-", "_")
            o["dtypes" if key == "dtype" else key] = value
        elif a in ("--quick", "--quiet", "--json"):
            o[a[2:]] = True
        elif a in ("-h", "--help"):
            o["help"] = True
        elif a.startswith("-"):
            raise UsageError(f"unknown option '{a}'")
        elif a not in FAMILY:
            known = ", ".join(FAMILY)
            raise UsageError(f"unknown op '{a}' (the ops with tensors: {known})")
        else:
            o["ops"].append(a)
    if o.get("help"):
        return o
    if o["device"] is None:
        raise UsageError("the GPU tune needs --device cuda or --device rocm")
    if o["device"] not in devices.TORCH_BUILT + ("cpu",):
        raise UsageError(f"--device '{o['device']}': the GPU tune takes one device, cuda or "
                         "rocm (the CPU is tuned by 'fldispatch tune --device cpu')")
    if o["timer"] not in ("graph", "host"):
        raise UsageError(f"--timer '{o['timer']}': expected graph or host")
    dtypes = (o["dtypes"] or "f32,f16,bf16").split(",")
    for dt in dtypes:
        if dt not in DTYPE_NAMES:
            raise UsageError(f"--dtype '{o['dtypes']}': '{dt}' is not f32, f16 or bf16")
    o["dtypes"] = list(dict.fromkeys(dtypes))
    o["buckets"] = parse_shapes(o["shapes"])
    o["hidden"] = parse_hidden(o["hidden"])
    for key, lo, hi in (("reps", 2, 100), ("calls", 1, 1000)):
        v = o[key]
        if v is None:
            continue
        if not str(v).isdigit() or not lo <= int(v) <= hi:
            raise UsageError(f"invalid --{key} '{v}' ({lo} to {hi})")
        o[key] = int(v)
    if o["impl"] is not None:
        o["impl"] = [i for i in o["impl"].split(",") if i]
        if not o["impl"]:
            raise UsageError("--impl '': expected ID[,ID...]")
    if o["reps"] is None:
        o["reps"] = 3 if o["quick"] else 7
    try:
        o["min_gain"] = float(o["min_gain"]) / 100
    except ValueError:
        raise UsageError(f"invalid --min-gain '{o['min_gain']}' (a percentage)") from None
    if not 0 <= o["min_gain"] < 1:
        raise UsageError(f"invalid --min-gain '{o['min_gain'] * 100:g}' (0 to 100)")
    return o


def gpu_backend(device: str) -> tuple[Any, str, str]:
    """(torch, device name for its tensors, machine name), or UsageError naming why the
    device cannot be tuned here."""
    if device == "cpu":
        raise UsageError("--device cpu: the GPU tune takes cuda or rocm (the CPU is tuned by "
                         "'fldispatch tune --device cpu', without --timer)")
    try:
        import torch
    except ImportError as exc:
        raise UsageError(f"--device {device} needs PyTorch built for {device}: "
                         f"'import torch' failed: {exc}") from None
    build = devices.torch_build(device)
    if not build:
        raise UsageError(f"--device {device} needs PyTorch built for {device}: this PyTorch "
                         f"({torch.__version__}) is built without "
                         f"{'ROCm' if device == 'rocm' else 'CUDA'}")
    if not torch.cuda.is_available():
        raise UsageError(f"--device {device} needs a {device} device: PyTorch "
                         f"{torch.__version__} sees none (torch.cuda.is_available() is false)")
    return torch, "cuda", torch.cuda.get_device_name()


def _table(results: Iterable[Result], out: TextIO) -> None:
    for r in results:
        out.write(f"{r.op} {r.dtype} rows {r.bucket.label()}: {r.decision}, winner "
                  f"{r.winner or '-'} ({r.reason})\n")
        for s in r.scores:
            figs = (f"min {s.min_ns:10.1f} ns  median {s.median_ns:10.1f} ns  spread "
                    f"{_pct(s.spread):5.1f}%" if math.isfinite(s.min_ns) else "not timed")
            out.write(f"  {s.impl:28} {figs}  {s.why or '<- winner'}\n")


def _json(results: Iterable[Result], o: dict[str, Any], device: str, machine: str, manifest: str | None) -> None:
    import json

    # the keys of `fldispatch tune --json` (docs/schemas/tune.schema.json), with the
    # machine, the timer and the calls captured per graph
    doc = {"schema": 1, "device": device, "machine": machine, "timer": o["timer"],
           "hidden": o["hidden"], "rounds": o["reps"], "calls": o["calls"],
           "min_gain": o["min_gain"],
           "results": [{"op": r.op, "dtype": r.dtype, "rows": r.bucket.label(),
                        "impls": [s.as_dict() for s in r.scores], "default": r.default,
                        "winner": r.winner, "decision": r.decision, "reason": r.reason,
                        "noisy": any(s.min_spread > NOISY for s in r.scores
                                     if math.isfinite(s.min_spread))} for r in results],
           "manifest": manifest}
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def run(argv: Iterable[str], *, backend: Callable[[str], tuple[Any, str, str]] | None = None) -> int:
    """The command; returns its exit status. backend(device) -> (torch, tensor
    device, machine name) replaces gpu_backend (the tests: CPU tensors)."""
    try:
        o = _options(argv)
        if o.get("help"):
            sys.stdout.write(USAGE)
            return EXIT_OK
        torch, tensor_device, machine = (backend or gpu_backend)(o["device"])
    except UsageError as exc:
        sys.stderr.write(f"fldispatch tune: {exc}\n")
        return EXIT_USAGE
    fldispatch.registry._ensure_plugins()
    timer = (GraphTimer if o["timer"] == "graph" else HostTimer)(torch, tensor_device)
    ops = o["ops"] or [op for op in fldispatch.OPS if op in FAMILY]
    if o["impl"]:
        known = {m["impl_id"] for m in fldispatch.impls() if m["op"] in ops}
        unknown = [i for i in o["impl"] if i not in known]
        if unknown:
            sys.stderr.write(f"fldispatch tune: --impl: no implementation "
                             f"{', '.join(unknown)} is registered for {', '.join(ops)}\n")
            return EXIT_USAGE
    ops = [op for op in ops if any(candidates(op, o["device"], dt) for dt in o["dtypes"])]
    if not ops:
        sys.stderr.write(f"fldispatch tune: nothing to tune: no op has an implementation "
                         f"available on {o['device']} for {','.join(o['dtypes'])}\n")
        return EXIT_NOTHING
    show = not o["quiet"] and sys.stderr.isatty()

    def progress(done: int, total: int, op: str, dtype: str, b: Bucket) -> None:
        if show:
            sys.stderr.write(f"\rbucket {done + 1} of {total} ({op} {dtype} {b.label()})\033[K")
            sys.stderr.flush()
    results = tune(ops, o["device"], o["dtypes"], o["buckets"], o["hidden"], timer=timer,
                   reps=o["reps"], calls=o["calls"], replays=4 if o["quick"] else 16,
                   min_gain=o["min_gain"], only=o["impl"], progress=progress)
    if show:
        sys.stderr.write("\r\033[K")
    text = manifest_text(results, o["device"], o["hidden"], o["timer"], machine)
    rc = EXIT_FAILED if any(not s.correct for r in results for s in r.scores) else EXIT_OK
    if o["out"]:
        try:
            write_atomically(o["out"], text)
        except OSError as exc:
            sys.stderr.write(f"fldispatch tune: cannot write '{o['out']}': "
                             f"{exc.strerror or exc}\n")
            return EXIT_USAGE
    if o["json"]:
        _json(results, o, o["device"], machine, o["out"])
    else:
        _table(results, sys.stdout if o["out"] else sys.stderr)
        if not o["out"]:
            sys.stdout.write(text)
    undecided = [f"{r.op} {r.dtype} {r.bucket.label()}" for r in results
                 if r.decision == "undecided"]
    if undecided:
        sys.stderr.write("fldispatch tune: warning: undecided (kept default): " +
                         ", ".join(undecided) + "\n")
    return rc


def main(argv: Iterable[str], *, backend: Callable[[str], tuple[Any, str, str]] | None = None) -> int:
    """run() as `python -m fldispatch` runs its commands: Ctrl-C ends it at once
    by SIGINT, with nothing more written and no traceback, as it ends the tool."""
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    fldispatch._C._interrupts_end_process(True)
    try:
        rc = run(argv, backend=backend)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise
    finally:
        fldispatch._C._interrupts_end_process(False)
        if handler is signal.default_int_handler:
            signal.signal(signal.SIGINT, handler)
    sys.stdout.flush()
    return rc
