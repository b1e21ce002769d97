# SPDX-License-Identifier: Apache-2.0
"""The flagos tier (FlagGems kernels, python/fldispatch/flagos.py) and every
other Python plugin are external to the core, as docs/configuration.md and
the user guide say: VLLM_FL_EXTERNAL_ENABLED=false drops their
implementations as it drops out-of-tree C plugins', besides USE_FLAGGEMS and
the flagos lists. Each case runs in a child process (the policy is read once
per process)."""

import os
import subprocess
import sys
import textwrap

SCRIPT = """
    import fldispatch

    def demo(out, x):
        out.copy_(x[..., : x.shape[-1] // 2])

    with fldispatch.registering("pytest_flagos_demo"):
        fldispatch.register_impl("silu_and_mul", demo, impl_id="default.demo", kind="flagos",
                                 priority=500)
    tier = [m for m in fldispatch.impls() if m["plugin"] == "flagos"]
    print("tier records:", len(tier), "in tree:", sorted({m["in_tree"] for m in tier}))
    info = fldispatch.explain("silu_and_mul")
    print("selected:", info["selected"])
    print("rejected:", info["rejected"])
"""


def run_child(**env):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True,
                          text=True, env=full, timeout=180)


def test_a_python_flagos_impl_serves_by_default():
    r = run_child()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "selected: default.demo" in r.stdout, r.stdout
    # The flagos tier registers its ops (unavailable here without flag_gems), out of tree.
    assert "in tree: [False]" in r.stdout and "tier records: 0" not in r.stdout, r.stdout


def test_external_enabled_false_drops_python_plugins_flagos_tier_included():
    r = run_child(VLLM_FL_EXTERNAL_ENABLED="false")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "selected: default.demo" not in r.stdout, r.stdout
    assert "external (out-of-tree) plugins disabled by VLLM_FL_EXTERNAL_ENABLED" in r.stdout, r.stdout
