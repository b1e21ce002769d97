# SPDX-License-Identifier: Apache-2.0
"""Python plugin discovery under pressure: a plugin that raises SystemExit or
KeyboardInterrupt, and a second thread whose first call comes while another
thread's discovery is still running. Each case runs in a child process with
its own installed distributions (discovery happens once per process)."""

import os
import subprocess
import sys
import textwrap


def write_package(site, dist, module, source, entry_points=None):
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    if entry_points:
        (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def run_child(code, site, env=None):
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    full.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=full, timeout=180)
    return r


def good_plugin(site, name, op):
    write_package(site, f"{name}_dist", name, f"""
        def register(registry):
            registry.register_impl("{op}", lambda: "{name}", impl_id="reference.{name}",
                                   kind="reference")
    """, f"[fldispatch.plugins]\n{name} = {name}:register\n")


def test_system_exit_from_a_plugin_rejects_that_plugin_only(tmp_path):
    """SystemExit from a plugin's import or register function is that plugin's
    failure (rejected, WARNING naming it); discovery and the process go on."""
    site = tmp_path / "site"
    site.mkdir()
    write_package(site, "exit_dist", "aaa_exit", """
        def register(registry):
            raise SystemExit(3)
    """, "[fldispatch.plugins]\naaa_exit = aaa_exit:register\n")
    write_package(site, "exit_import_dist", "aab_exit_import", """
        raise SystemExit("leaving at import")
    """, "[fldispatch.plugins]\naab_exit_import = aab_exit_import:register\n")
    good_plugin(site, "zzz_after", "after_exit_op")
    r = run_child("""
        import fldispatch
        print("call:", fldispatch.call_op("after_exit_op"))
        for p in fldispatch.plugins():
            if p["name"] in ("aaa_exit", "aab_exit_import", "zzz_after"):
                print("plugin:", p["name"], p["status"], p["reason"])
    """, site, {"VLLM_FL_PLUGIN_MODULES": "aab_exit_import"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "call: zzz_after" in r.stdout
    assert "plugin: aaa_exit rejected registration raised SystemExit: 3" in r.stdout
    assert "plugin: aab_exit_import rejected import failed: SystemExit: leaving at import" \
        in r.stdout
    assert "zzz_after loaded" in r.stdout
    assert "Python plugin 'aaa_exit'" in r.stderr and "SystemExit" in r.stderr


def test_keyboard_interrupt_in_discovery_propagates_and_discovery_resumes(tmp_path):
    """KeyboardInterrupt from a plugin reaches the caller; discovery is not
    marked done, so the next call resumes it and the later plugins load."""
    site = tmp_path / "site"
    site.mkdir()
    write_package(site, "kbd_dist", "aaa_kbd", """
        calls = []
        def register(registry):
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt()
            registry.register_impl("kbd_op", lambda: "kbd", impl_id="reference.kbd",
                                   kind="reference")
    """, "[fldispatch.plugins]\naaa_kbd = aaa_kbd:register\n")
    good_plugin(site, "zzz_later", "later_op")
    r = run_child("""
        import fldispatch
        try:
            fldispatch.call_op("later_op")
            print("first: no interrupt")
        except KeyboardInterrupt:
            print("first: interrupted")
        print("second:", fldispatch.call_op("later_op"))
        print("kbd:", fldispatch.call_op("kbd_op"))
        print("status:", sorted((p["name"], p["status"]) for p in fldispatch.plugins()
                                if p["name"] in ("aaa_kbd", "zzz_later")))
    """, site)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "first: interrupted" in r.stdout
    assert "second: zzz_later" in r.stdout and "kbd: kbd" in r.stdout
    assert "status: [('aaa_kbd', 'loaded'), ('zzz_later', 'loaded')]" in r.stdout


def test_a_second_threads_first_call_waits_for_discovery(tmp_path):
    """Thread 1's first call runs discovery, which a slow plugin holds up;
    thread 2's first call (an op function and call_op) must wait for it and
    see the slow plugin's winner, not NotFoundError or the default winner."""
    site = tmp_path / "site"
    site.mkdir()
    write_package(site, "slow_dist", "slow_plugin", """
        import builtins
        def fill(out, x):
            out.fill_(42.0)
        def register(registry):
            builtins.discovery_started.set()
            builtins.release_discovery.wait(timeout=60)
            registry.register_impl("slow_op", lambda: "slow", impl_id="reference.slow",
                                   kind="reference")
            registry.register_impl("silu_and_mul", fill,
                                   impl_id="vendor.slow", kind="vendor", vendor="slow",
                                   priority=1000)
    """, "[fldispatch.plugins]\nslow = slow_plugin:register\n")
    r = run_child("""
        import builtins, threading, time
        import torch
        builtins.discovery_started = threading.Event()
        builtins.release_discovery = threading.Event()
        import fldispatch
        results = {}
        def first():
            results["first"] = fldispatch.call_op("slow_op")
        def second():
            try:
                results["second"] = fldispatch.call_op("slow_op")
            except Exception as e:
                results["second"] = repr(e)
            out = torch.zeros(2, 4)
            fldispatch.silu_and_mul(out, torch.ones(2, 8))
            results["op function"] = float(out[0, 0])
        t1 = threading.Thread(target=first)
        t1.start()
        assert builtins.discovery_started.wait(timeout=60)
        t2 = threading.Thread(target=second)
        t2.start()
        time.sleep(0.5)  # thread 2 is in its first call (or has failed) by now
        builtins.release_discovery.set()
        t1.join()
        t2.join()
        print(sorted(results.items()))
    """, site)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[('first', 'slow'), ('op function', 42.0), ('second', 'slow')]" in r.stdout, \
        r.stdout + r.stderr
