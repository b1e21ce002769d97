# SPDX-License-Identifier: Apache-2.0
"""The configuration's names (per-op orders, vendor lists) are checked once
every Python source has registered: at the first op call or resolve, not
when the library initialises. Ops and vendors that Python registers are
known then: no false WARNING, and strict mode works with them. Each case
runs in a child process (the check runs once per process)."""

import os
import subprocess
import sys
import textwrap

SCRIPT = """
    import fldispatch
    fldispatch.register_impl("my_op", lambda: "mine", impl_id="vendor.mine", kind="vendor",
                             vendor="acme", plugin="pytest_names_mine")
    fldispatch.register_impl("my_op", lambda: "ref", impl_id="reference.ref",
                             kind="reference", plugin="pytest_names_mine")
    print("call:", fldispatch.call_op("my_op"))
    print("resolve:", fldispatch.resolve("my_op"))
"""


def run_child(code, **env):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full, timeout=180)


def test_strict_mode_and_a_python_registered_op():
    r = run_child(SCRIPT, VLLM_FL_STRICT="1", VLLM_FL_PER_OP="my_op=reference|vendor")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "call: ref" in r.stdout and "resolve: reference.ref" in r.stdout


def test_no_false_warning_for_python_registered_names():
    r = run_child(SCRIPT, VLLM_FL_PER_OP="my_op=impl:reference.ref|vendor",
                  VLLM_FL_DENY_VENDORS="acme")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "call: ref" in r.stdout
    assert "no op named" not in r.stderr and "no vendor named" not in r.stderr, r.stderr


def test_an_unknown_name_is_still_reported_once():
    r = run_child(SCRIPT + """
    print("again:", fldispatch.call_op("my_op"))
    """, VLLM_FL_PER_OP="my_opp=reference")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count("no op named 'my_opp'") == 1, r.stderr
    assert "did you mean 'my_op'" in r.stderr


def test_strict_mode_fails_every_call_until_the_name_exists():
    r = run_child("""
        import fldispatch
        for attempt in range(2):
            try:
                fldispatch.call_op("rms_norm")
            except fldispatch.ConfigError as e:
                print("refused:", "later_op" in str(e))
        fldispatch.register_impl("later_op", lambda: "later", impl_id="reference.later",
                                 kind="reference", plugin="pytest_names_later")
        print("call:", fldispatch.call_op("later_op"))
    """, VLLM_FL_STRICT="1", VLLM_FL_PER_OP="later_op=reference")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("refused: True") == 2, r.stdout + r.stderr
    assert "call: later" in r.stdout
