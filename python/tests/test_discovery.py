# SPDX-License-Identifier: Apache-2.0
"""Python plugin discovery under pressure: a plugin that raises SystemExit or
KeyboardInterrupt, Ctrl-C at any point of the first call, a second thread whose first call comes while another
thread's discovery is still running, a fork meanwhile, and a plugin that
waits for a thread calling fldispatch. Each case runs in a child process with
its own installed distributions (discovery happens once per process)."""

import os
import subprocess
import sys
import textwrap

import pytest


def write_package(site, dist, module, source, entry_points=None):
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    if entry_points:
        (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def run_child(code, site, env=None, timeout=180):
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    full.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=full, timeout=timeout)
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


def test_a_keyboard_interrupt_at_any_point_of_the_first_call_leaves_no_owner(tmp_path):
    """Ctrl-C may land between any two steps of the first call's way into
    discovery (a signal handler runs as a call starts or a C call returns):
    at each such point of fldispatch.registry's discovery functions in turn,
    the call must leave discovery ownerless, so that another thread's first
    call then finishes it rather than waiting forever."""
    site = tmp_path / "site"
    site.mkdir()
    good_plugin(site, "zzz_resumed", "resumed_op")
    r = run_child("""
        import os, sys, threading
        import fldispatch
        from fldispatch import registry
        FUNCTIONS = ("_ensure_plugins", "_claim_discovery")

        def interrupted_at(k):
            seen = 0
            def hook(frame, event, arg):
                nonlocal seen
                if event in ("call", "c_return") and frame.f_code.co_name in FUNCTIONS:
                    seen += 1
                    if seen == k:
                        raise KeyboardInterrupt
                return hook
            registry._discovered = False  # each point meets a discovery to do
            sys.settrace(hook)
            sys.setprofile(hook)
            try:
                fldispatch.plugins()  # each call makes sure discovery is done
            except KeyboardInterrupt:
                pass
            finally:
                sys.setprofile(None)
                sys.settrace(None)
            return seen >= k

        k = 1
        while interrupted_at(k):
            owner = registry._discoverer
            other = threading.Thread(target=lambda: print(
                "thread:", [p["status"] for p in fldispatch.plugins() if p["name"] == "zzz_resumed"],
                registry._discovered, fldispatch.call_op("resumed_op")), daemon=True)
            other.start()
            other.join(timeout=30)
            if other.is_alive() or owner is not None:
                print(f"interrupted at point {k}: owner {owner}, thread stuck: {other.is_alive()}",
                      flush=True)
                os._exit(1)
            k += 1
        print("points:", k - 1)
    """, site)
    assert r.returncode == 0, r.stdout + r.stderr
    points = int(r.stdout.split("points:")[1])
    assert points >= 5, r.stdout  # the hook did fire on the way into discovery
    assert r.stdout.count("thread: ['loaded'] True zzz_resumed") == points, r.stdout


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


def slow_plugin(site):
    """A plugin whose register function, in the process that set
    builtins.parent_pid, signals `discovery_started` and waits for
    `release_discovery`; elsewhere (a forked child) it registers at once."""
    write_package(site, "slow_dist", "slow_plugin", """
        import builtins, os
        def register(registry):
            if os.getpid() == builtins.parent_pid:
                builtins.discovery_started.set()
                builtins.release_discovery.wait(timeout=60)
            registry.register_impl("slow_op", lambda: "slow", impl_id="reference.slow",
                                   kind="reference")
    """, "[fldispatch.plugins]\nslow = slow_plugin:register\n")


def test_a_child_forked_during_another_threads_discovery_works(tmp_path):
    """A fork while another thread is inside a plugin's register function: the
    child (whose copy of that thread does not run) discovers and calls as the
    parent would, instead of waiting for ever on the registry's lock."""
    site = tmp_path / "site"
    site.mkdir()
    slow_plugin(site)
    r = run_child("""
        import builtins, os, signal, sys, threading, time
        builtins.parent_pid = os.getpid()
        builtins.discovery_started = threading.Event()
        builtins.release_discovery = threading.Event()
        import fldispatch
        results = {}
        t = threading.Thread(target=lambda: results.update(thread=fldispatch.call_op("slow_op")))
        t.start()
        assert builtins.discovery_started.wait(timeout=60)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                print("child:", fldispatch.call_op("slow_op"), flush=True)
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                print("child: hung", flush=True)
                break
            time.sleep(0.05)
        builtins.release_discovery.set()
        t.join()
        print("parent:", results["thread"], fldispatch.call_op("slow_op"), flush=True)
    """, site)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "child: slow" in r.stdout, r.stdout + r.stderr
    assert "parent: slow slow" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("waits", ["thread.join()", "future.result()"])
def test_a_plugin_waiting_for_a_thread_that_calls_fldispatch_is_named(tmp_path, waits):
    """A register function that waits for a thread whose fldispatch call waits
    for that registration to finish would deadlock: the thread's call raises
    StateError naming the plugin instead, and discovery goes on."""
    site = tmp_path / "site"
    site.mkdir()
    write_package(site, "waiting_dist", "waiting_plugin", f"""
        import builtins, concurrent.futures, threading
        import fldispatch
        def worker():
            try:
                return "worker: " + fldispatch.call_op("other_op")
            except Exception as e:
                return f"worker: {{type(e).__name__}}: {{e}}"
        def register(registry):
            if "{waits}" == "thread.join()":
                got = []
                thread = threading.Thread(target=lambda: got.append(worker()))
                thread.start()
                thread.join()
                builtins.worker_said = got[0]
            else:
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    future = pool.submit(worker)
                    builtins.worker_said = future.result()
            registry.register_impl("waiting_op", lambda: "waiting", impl_id="reference.waiting",
                                   kind="reference")
    """, "[fldispatch.plugins]\nwaiting = waiting_plugin:register\n")
    good_plugin(site, "zzz_other", "other_op")
    try:
        r = run_child("""
            import builtins
            import fldispatch
            print("main:", fldispatch.call_op("waiting_op"), fldispatch.call_op("other_op"))
            print(builtins.worker_said)
        """, site, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the plugin's register function and its worker thread deadlocked")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "main: waiting zzz_other" in r.stdout, r.stdout + r.stderr
    said = r.stdout.splitlines()[-1]
    assert said.startswith("worker: StateError: "), said
    assert "Python plugin 'waiting' (fldispatch.plugins:waiting)" in said, said
    assert "deadlock" in said


def test_a_plugin_waiting_on_a_queue_for_a_thread_that_calls_fldispatch_is_warned_of(tmp_path):
    """Where the wait cannot be traced to the thread (a queue), the thread's
    call logs a WARNING naming the plugin once the wait has lasted
    DEADLOCK_WARN_S; here the plugin gives up, is rejected, and both go on."""
    site = tmp_path / "site"
    site.mkdir()
    write_package(site, "queue_dist", "queue_plugin", """
        import queue, threading
        import fldispatch
        def register(registry):
            q = queue.Queue()
            threading.Thread(target=lambda: q.put(fldispatch.call_op("other_op")),
                             name="queue-worker").start()
            q.get(timeout=5)
    """, "[fldispatch.plugins]\nqueued = queue_plugin:register\n")
    good_plugin(site, "zzz_other", "other_op")
    r = run_child("""
        import fldispatch
        fldispatch.registry.DEADLOCK_WARN_S = 0.5
        print("main:", fldispatch.call_op("other_op"))
        print([(p["name"], p["status"]) for p in fldispatch.plugins() if p["name"] == "queued"])
    """, site, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "main: zzz_other" in r.stdout
    assert "[('queued', 'rejected')]" in r.stdout, r.stdout
    assert "Python plugin 'queued' (fldispatch.plugins:queued) has been registering on " \
           "thread 'MainThread'" in r.stderr, r.stderr
    assert "thread 'queue-worker', started since" in r.stderr and "deadlock" in r.stderr
