# SPDX-License-Identifier: Apache-2.0
"""python -m fldispatch tune --device cuda (fldispatch.tune_gpu) without a GPU:
the same code path with the host timer on CPU tensors, against Python
implementations of silu_and_mul that differ only in how long they take. The
manifest pins the fast one over a slow default, keeps a fast default over a
slow challenger, pins nothing new on a tie, and loads in the library; without
CUDA the command says why and exits 2; Ctrl-C ends it by SIGINT with nothing
written."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")

# Busy waits, not sleeps: the extra time is the same at every call, so that
# the fastest replays of two equal implementations agree however loaded the
# machine is (preemption only lengthens a replay).
PLUGIN = textwrap.dedent("""
    import os
    import time

    import torch

    def silu(out, x, extra_us=0):
        d = x.shape[-1] // 2
        out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])
        if extra_us:
            end = time.perf_counter_ns() + extra_us * 1000
            while time.perf_counter_ns() < end:
                pass

    def make(extra_us, marker=None):
        def fn(out, x):
            if marker and not os.path.exists(marker):
                open(marker, "w").close()
            silu(out, x, extra_us)
        return fn

    def register(registry):
        spec = os.environ["TEST_IMPLS"]  # ID:EXTRA_US:PRIORITY[:MARKER],...
        for item in spec.split(","):
            impl, extra, prio, *marker = item.split(":")
            registry.register_impl("silu_and_mul", make(int(extra), marker[0] if marker else None),
                                   impl_id=impl, kind="vendor", vendor=impl.split(".")[1],
                                   priority=int(prio), devices=["cpu"], dtypes=["float32"])
""")

# tune_gpu.main with a backend that gives CPU tensors: everything but the timer's device
DRIVER = textwrap.dedent("""
    import sys

    import torch

    from fldispatch import tune_gpu

    sys.exit(tune_gpu.main(sys.argv[1:], backend=lambda device: (torch, "cpu", "this host")))
""")


def env_for(tmp_path, impls, **extra):
    (tmp_path / "busy_silu.py").write_text(PLUGIN)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["VLLM_FL_PLUGIN_MODULES"] = "busy_silu"
    env["TEST_IMPLS"] = impls
    env.pop("VLLM_FL_MANIFEST", None)
    env.update(extra)
    return env


def tune_host(tmp_path, impls, only, *args):
    manifest = tmp_path / "tuned.yaml"
    r = subprocess.run([sys.executable, str(tmp_path / "driver.py"), "silu_and_mul",
                        "--device", "cpu", "--timer", "host", "--dtype", "f32", "--hidden", "128",
                        "--shapes", "1-4=1,4", "--reps", "5", "--calls", "4", "--impl", only,
                        "--out", str(manifest), "--json"] + list(args),
                       capture_output=True, text=True, env=env_for(tmp_path, impls), timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["manifest"] == str(manifest) and doc["timer"] == "host"
    assert (doc["device"], doc["rounds"], doc["calls"], doc["hidden"]) == ("cpu", 5, 4, [128])
    (res,) = doc["results"]
    assert res["rows"] == "1-4"
    return res, {i["impl_id"]: i for i in res["impls"]}, manifest.read_text()


def test_pins_the_fast_implementation_over_a_slow_default(tmp_path):
    res, by_id, text = tune_host(tmp_path, "vendor.slow:400:900,vendor.fast:0:100", "vendor.fast")
    assert res["default"] == "vendor.slow"  # the policy's choice: its priority
    assert set(by_id) == {"vendor.slow", "vendor.fast"}
    assert all(i["correct"] for i in by_id.values())
    assert res["decision"] == "pinned" and res["winner"] == "vendor.fast"
    assert res["reason"].startswith("faster than the default winner vendor.slow by ")
    assert by_id["vendor.fast"]["min_ns"] < by_id["vendor.slow"]["min_ns"]
    assert by_id["vendor.slow"]["why"].startswith("slower by ")
    assert "version: 1\nentries:\n  - {op: silu_and_mul, device: cpu, dtype: f32, " \
           "impl: vendor.fast}\n" in text
    assert "vendor.slow" not in text.split("entries:")[1]


def test_never_pins_the_slow_challenger(tmp_path):
    res, by_id, text = tune_host(tmp_path, "vendor.slow:400:100,vendor.fast:0:900", "vendor.slow")
    assert res["default"] == "vendor.fast"
    assert res["decision"] == "default" and res["winner"] == "vendor.fast"
    assert by_id["vendor.slow"]["why"].startswith("slower by ")
    assert "vendor.slow" not in text.split("entries:")[1]


def test_a_tie_pins_nothing_but_the_default(tmp_path):
    res, by_id, text = tune_host(tmp_path, "vendor.one:300:900,vendor.two:300:100", "vendor.two")
    assert res["default"] == "vendor.one"
    assert res["winner"] == "vendor.one" and res["decision"] in ("default", "undecided")
    assert "vendor.two" not in text.split("entries:")[1]


def test_the_manifest_loads_and_resolve_selects_the_pinned_one(tmp_path):
    impls = "vendor.slow:400:900,vendor.fast:0:100"
    res, _, _ = tune_host(tmp_path, impls, "vendor.fast")
    assert res["winner"] == "vendor.fast"
    manifest = str(tmp_path / "tuned.yaml")
    # The Python plugins register first; the manifest then loads over them (a manifest in the
    # environment at start-up freezes the registry before VLLM_FL_PLUGIN_MODULES registers).
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os
        import fldispatch
        print(fldispatch.resolve("silu_and_mul", "cpu", "float32"))
        os.environ["VLLM_FL_MANIFEST"] = {manifest!r}
        fldispatch.reload()
        print(fldispatch.resolve("silu_and_mul", "cpu", "float32"))
        line = fldispatch.explain("silu_and_mul", "cpu", "float32")["order_source"]
        print(line)
        with fldispatch.policy(strict=True):
            print(fldispatch.resolve("silu_and_mul", "cpu", "float32"))
    """)], capture_output=True, text=True, env=env_for(tmp_path, impls), timeout=120)
    assert r.returncode == 0, r.stderr
    before, after, source, strict = r.stdout.splitlines()
    assert (before, after, strict) == ("vendor.slow", "vendor.fast", "vendor.fast"), r.stderr
    assert manifest in source
    assert "WARNING" not in r.stderr and "ignored" not in r.stderr, r.stderr


def test_buckets_with_different_winners_get_rows(tmp_path):
    from fldispatch import tune_gpu

    b = tune_gpu.parse_shapes("1-16=1,4,16;17-512=64,256;513-=2048")
    results = []
    for bucket, winner in zip(b, ("vendor.a", "vendor.b", "vendor.b")):
        r = tune_gpu.Result("rms_norm", "bf16", bucket)
        r.winner = winner
        results.append(r)
    assert tune_gpu.manifest_entries(results, "cuda") == [
        "  - {op: rms_norm, device: cuda, dtype: bf16, rows: 1-16, impl: vendor.a}",
        "  - {op: rms_norm, device: cuda, dtype: bf16, rows: 17-, impl: vendor.b}",
    ]
    for r in results:
        r.winner = "vendor.a"
    assert tune_gpu.manifest_entries(results, "cuda") == [
        "  - {op: rms_norm, device: cuda, dtype: bf16, impl: vendor.a}"]
    with pytest.raises(tune_gpu.UsageError, match="overlaps"):
        tune_gpu.parse_shapes("1-16=1;8-32=8")
    with pytest.raises(tune_gpu.UsageError, match="outside its bucket"):
        tune_gpu.parse_shapes("1-16=32")


def test_decision_needs_more_than_the_spread():
    from fldispatch import tune_gpu

    def result(def_min, def_spread, ch_min, ch_spread, ch_median=None):
        r = tune_gpu.Result("rms_norm", "bf16", tune_gpu.Bucket(1, 16, (1,)))
        r.default = "vendor.cuda"
        for impl, m, sp, med in (("vendor.cuda", def_min, def_spread, def_min),
                                 ("vendor.liger", ch_min, ch_spread, ch_median or ch_min)):
            s = tune_gpu.Score(impl)
            s.min_ns, s.min_spread, s.median_ns, s.spread = m, sp, med, sp
            r.scores.append(s)
        tune_gpu.decide(r, 0.05)
        return r

    assert result(2000, 0.01, 1700, 0.01).winner == "vendor.liger"  # 15% > 5%
    assert result(2000, 0.10, 1700, 0.10).decision == "undecided"  # 15% < 20% spread
    assert result(2000, 0.01, 1950, 0.01).decision == "undecided"  # 2.5% < --min-gain
    assert result(2000, 0.01, 1700, 0.01, ch_median=2100).winner == "vendor.cuda"
    assert result(2000, 0.01, 2300, 0.01).decision == "default"


def test_the_samples_are_made_on_the_timers_device_not_the_librarys():
    """The library's device name (rocm) is not a torch device: ROCm's PyTorch
    calls its devices cuda, and gpu_backend gives the timer that name."""
    from fldispatch import tune_gpu

    made = []

    class Recorded(tune_gpu.Sample):
        def __init__(self, torch, op, rows, hidden, dtype, device):
            made.append(device)
            super().__init__(torch, op, rows, hidden, dtype, device)

    timer = tune_gpu.HostTimer(torch, "cpu")
    original = tune_gpu.Sample
    tune_gpu.Sample = Recorded  # type: ignore[misc]  # the module's class, replaced for the test
    try:
        tune_gpu.tune_bucket(torch, timer, "silu_and_mul", "rocm", "f32", tune_gpu.Bucket(1, 1, (1,)),
                             hidden=(64,), reps=1, calls=1, replays=1, min_gain=0.05)
    finally:
        tune_gpu.Sample = original  # type: ignore[misc]  # put back
    assert made == ["cpu"]


def test_cuda_without_cuda_says_why_and_exits_2():
    if torch.cuda.is_available() and torch.version.cuda:
        pytest.skip("this machine has CUDA")
    r = subprocess.run([sys.executable, "-m", "fldispatch", "tune", "--device", "cuda", "--quick"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith("fldispatch tune: --device cuda needs ")
    assert "PyTorch" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "fldispatch", "tune", "--device=rocm"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("fldispatch tune: --device rocm needs ")


def test_usage_errors_exit_2():
    r = subprocess.run([sys.executable, "-m", "fldispatch", "tune", "--device", "cuda",
                        "--shapes", "16-1=4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "--shapes '16-1=4': the bucket 16-1 ends before it starts" in r.stderr
    r = subprocess.run([sys.executable, "-m", "fldispatch", "tune", "--device", "cuda",
                        "no_such_op"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown op 'no_such_op'" in r.stderr


def test_ctrl_c_ends_it_by_sigint_with_nothing_written(tmp_path):
    marker = tmp_path / "started"
    manifest = tmp_path / "tuned.yaml"
    env = env_for(tmp_path, f"vendor.slow:2000:900:{marker},vendor.fast:0:100")
    p = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), "silu_and_mul",
                          "--device", "cpu", "--timer", "host", "--dtype", "f32",
                          "--hidden", "128", "--shapes", "1-4=1,4", "--reps", "100",
                          "--calls", "50", "--impl", "vendor.fast", "--out", str(manifest)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), p.communicate()[1] if p.poll() is not None else "not started"
        p.send_signal(signal.SIGINT)  # while a Python implementation runs
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGINT, err
    assert "Traceback" not in err and out == ""
    assert not manifest.exists()
    assert [f for f in os.listdir(tmp_path) if f.startswith(".tuned")] == []


def test_a_device_list_with_the_cpu_is_the_tools_tune():
    r = subprocess.run([sys.executable, "-m", "fldispatch", "tune", "rms_norm",
                        "--device", "cpu,cuda", "--dtype", "f32", "--quick", "--hidden", "256",
                        "--shapes", "1-4=1", "--json"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, USE_FLAGGEMS="0"))  # the C plugins' implementations
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["device"] == "cpu"
    if torch.cuda.is_available() and torch.version.cuda:
        # the tool times the GPU itself, under graph replay through fld-cuda.so's hooks
        assert doc["devices"] == ["cpu", "cuda"], r.stderr
        assert [(res["device"], res["rows"]) for res in doc["results"]] == [("cpu", "1-4"),
                                                                           ("cuda", "1-4")]
    else:
        assert "fldispatch tune: device cuda: left out: fld_device_graph_capture: " in r.stderr
        assert doc["devices"] == ["cpu"]
        assert [(res["device"], res["rows"]) for res in doc["results"]] == [("cpu", "1-4")]


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.version.cuda),
                    reason="needs PyTorch with CUDA and a device")
def test_graph_timer_on_cuda(tmp_path):
    """The GPU path itself: graphs captured and replayed, device time per call."""
    manifest = tmp_path / "tuned.yaml"
    r = subprocess.run([sys.executable, "-m", "fldispatch", "tune", "--device", "cuda", "rms_norm",
                        "silu_and_mul", "rotary_embedding", "--dtype", "bf16", "--hidden", "4096",
                        "--shapes", "1-16=1,16;17-=2048", "--reps", "3", "--quick",
                        "--out", str(manifest), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["timer"] == "graph" and doc["device"] == "cuda"
    for res in doc["results"]:
        timed = [i for i in res["impls"] if i["min_ns"] is not None]
        assert timed and all(i["correct"] for i in res["impls"]), res
        assert all(0 < i["min_ns"] < 1e6 for i in timed), res  # device time per call, not host
        assert res["winner"] is not None
    text = manifest.read_text()
    assert "device: cuda, dtype: bf16" in text and "CUDA-graph replay" in text
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os
        import fldispatch
        os.environ["VLLM_FL_MANIFEST"] = {str(manifest)!r}
        fldispatch.reload()
        print(fldispatch.resolve("rms_norm", "cuda", "bfloat16"))
    """)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    assert "VLLM_FL_MANIFEST" not in r.stderr, r.stderr  # every entry loaded, none ignored
