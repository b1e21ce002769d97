# SPDX-License-Identifier: Apache-2.0
"""python -m fldispatch as the tool program behaves: Ctrl-C ends an in-process
command at once (SIGINT, no manifest), an interrupt raised by a Python
implementation ends it instead of counting as a decline, and an argument that
is not UTF-8 is the tool's usage error, not a traceback."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch")

import fldispatch  # noqa: E402

PACKAGE = os.path.dirname(os.path.abspath(fldispatch.__file__))
HAS_TOOL_SO = os.path.exists(os.path.join(PACKAGE, "_tool.so"))
needs_tool_so = pytest.mark.skipif(not HAS_TOOL_SO, reason="no _tool.so (make python builds it)")


def plugin_env(tmp_path, module, source):
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["VLLM_FL_PLUGIN_MODULES"] = module
    env.pop("VLLM_FL_MANIFEST", None)
    return env


NORM = """
    import os, time
    import torch  # noqa: F401  (the tensors come as torch tensors)

    def rms_norm(out, x, weight, residual, eps):
        {body}
        if residual is not None:
            residual.add_(x)
            x = residual
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        out.copy_(y * weight if weight is not None else y)

    def register(registry):
        registry.register_impl("rms_norm", rms_norm, impl_id="vendor.{name}", kind="vendor",
                               vendor="{name}", devices=["cpu"], dtypes=["float32"])
"""


@needs_tool_so
def test_ctrl_c_ends_tune_at_once_and_writes_no_manifest(tmp_path):
    """SIGINT while tune runs a (slow) Python implementation: the process ends
    by SIGINT within seconds, as the tool program does, and writes nothing;
    the interrupt is not a decline that lets tune go on to a manifest."""
    started = tmp_path / "started"
    env = plugin_env(tmp_path, "slow_norm", NORM.format(
        name="slow", body=f"open({str(started)!r}, 'a').close(); time.sleep(0.05)"))
    manifest = tmp_path / "tuned.yaml"
    p = subprocess.Popen([sys.executable, "-m", "fldispatch", "tune", "rms_norm", "--dtype", "f32",
                          "--quick", "--hidden", "256", "--shapes", "1-4=2;5-=64",
                          "--out", str(manifest)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started.exists(), "the Python implementation never ran"
        p.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGINT, (p.returncode, out, err)
    assert took < 5, f"tune ran on {took:.1f} s after SIGINT"
    assert not manifest.exists()
    assert b"declined" not in out + err


@needs_tool_so
@pytest.mark.parametrize("raised, status, word", [
    ("KeyboardInterrupt()", -signal.SIGINT, "interrupted"),
    ("SystemExit(3)", 3, "exit status 3"),
])
def test_an_implementations_interrupt_ends_verify(tmp_path, raised, status, word):
    """An implementation that raises KeyboardInterrupt or SystemExit on every
    call ends verify (by SIGINT, or with the exit status), naming itself; it
    is not counted as declining every case with verify exiting 0."""
    env = plugin_env(tmp_path, "stopping_norm",
                     NORM.format(name="stopping", body=f"raise {raised}"))
    r = subprocess.run([sys.executable, "-m", "fldispatch", "verify", "--quick", "--dtype", "f32",
                        "rms_norm"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == status, (r.returncode, r.stdout, r.stderr)
    assert "rms_norm: Python implementation 'vendor.stopping' raised" in r.stderr, r.stderr
    assert word in r.stderr
    assert "Traceback" not in r.stderr


@needs_tool_so
def test_ctrl_c_while_the_plugins_load_ends_without_a_traceback(tmp_path):
    """A KeyboardInterrupt while the Python plugins load (here raised by one at
    import) ends the command by SIGINT, as the tool program, with no traceback."""
    env = plugin_env(tmp_path, "interrupting_plugin", "raise KeyboardInterrupt\n")
    r = subprocess.run([sys.executable, "-m", "fldispatch", "list"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == -signal.SIGINT, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr


@needs_tool_so
def test_a_default_sigint_handler_is_restored_after_the_tool():
    """The SIGINT handler is Python's again after an in-process command."""
    code = textwrap.dedent("""
        import signal, sys
        from fldispatch import __main__ as m
        rc = m.run_in_process(["list"])
        print(rc, signal.getsignal(signal.SIGINT) is signal.default_int_handler, file=sys.stderr)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().endswith("0 True"), r.stderr


@pytest.mark.parametrize("command", ["resolve", "list", "doctor"])
def test_an_argument_that_is_not_utf8_is_a_usage_error(command):
    """Bytes that are not UTF-8 on the command line reach the tool as they are
    (in process or exec'd): its message and exit status 2, no traceback."""
    arg = os.fsdecode(b"\xff\xfe")
    r = subprocess.run([sys.executable, "-m", "fldispatch", command, arg], capture_output=True,
                       timeout=120)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert b"Traceback" not in r.stderr
    assert r.stderr.startswith(b"fldispatch " + command.encode()), r.stderr
