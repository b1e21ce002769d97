# SPDX-License-Identifier: Apache-2.0
"""Upstream-style backend packages beside fldispatch's own plugins, upstream's calling
convention for the shared catalog ops, vllm_fl.utils, and the library's log lines on
Python's logging.

The packages are python/tests/plugins/upstream/*, installed in a temporary site
directory as distributions with a `vllm_fl.plugin` entry point; each scenario runs in a
fresh process with fldispatch.compat.alias installed.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

PACKAGES = pathlib.Path(__file__).parent / "plugins" / "upstream"


def make_site(tmp_path, *packages):
    """A site directory with each package as a distribution: (module, entry point name)."""
    site = tmp_path / "site"
    site.mkdir()
    for module, ep_name in packages:
        shutil.copytree(PACKAGES / module, site / module)
        dist = site / f"{module}-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text(f"[vllm_fl.plugin]\n{ep_name} = {module}\n")
    return site


def run(site, body, alias=True, **env):
    head = "import fldispatch.compat.alias as _a\nassert _a.install()\n" if alias else ""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(site)] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", head + textwrap.dedent(body)], env=full_env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


# ---- one impl_id from two plugins ------------------------------------------------------


def test_vendor_package_beside_in_tree_plugin_of_that_vendor(tmp_path):
    site = make_site(tmp_path, ("fl_cuda_backend", "cuda_ext"))
    run(site, """
        import torch, fldispatch
        from vllm_fl.dispatch import call_op, get_discovered_plugins, get_default_manager
        from fl_cuda_backend.cuda import CALLS
        rows = [(m["plugin"], m["impl_id"]) for m in fldispatch.impls()
                if m["op"] == "silu_and_mul" and m["impl_id"] == "vendor.cuda"]
        plugins = {p["name"]: p for p in fldispatch.plugins()}
        assert ("cuda_ext", "vendor.cuda") in rows, rows
        assert plugins["cuda_ext"]["status"] == "loaded", plugins["cuda_ext"]
        assert ("cuda_ext", "entry_point", True) in get_discovered_plugins()
        if "cuda" in plugins and plugins["cuda"]["status"] != "rejected":
            # fldispatch's in-tree cuda plugin keeps its record too; both are named
            assert ("cuda", "vendor.cuda") in rows, rows
            info = fldispatch.explain("silu_and_mul", "cpu")
            names = info["candidates"] + [r["impl_id"] for r in info["rejected"]]
            assert "vendor.cuda@cuda_ext" in names and "vendor.cuda@cuda" in names, info
        # the vendor package's op outside the catalog, and the policy choosing its record
        assert call_op("vendor_only_op", 1) == 2
        x = torch.randn(4, 16)
        with fldispatch.policy(per_op={"silu_and_mul": ["impl:vendor.cuda@cuda_ext"]}):
            assert fldispatch.resolve("silu_and_mul") in ("vendor.cuda", "vendor.cuda@cuda_ext")
            y = call_op("silu_and_mul", None, x)
        ref = torch.nn.functional.silu(x[:, :8]) * x[:, 8:]
        torch.testing.assert_close(y, ref)
        assert CALLS == ["vendor_only_op", "silu_and_mul"], CALLS
        impl = get_default_manager().resolve_candidates("vendor_only_op")[0]
        assert impl.impl_id == "vendor.cuda" and impl.vendor == "cuda"
    """)


def test_bad_implementation_is_rejected_alone(tmp_path):
    site = make_site(tmp_path, ("fl_reference_backend", "fl_reference"))
    proc = run(site, """
        import fldispatch
        from fldispatch.compat.discovery import rejected_impls
        from vllm_fl.dispatch import get_discovered_plugins
        ours = {m["op"] for m in fldispatch.impls() if m["plugin"] == "fl_reference"}
        assert ours == {"silu_and_mul", "gelu_and_mul", "rms_norm", "rotary_embedding",
                        "attention_backend"}, ours
        assert ("fl_reference", "entry_point", True) in get_discovered_plugins()
        bad = rejected_impls()
        assert len(bad) == 1 and bad[0][:3] == ("fl_reference", "bad op", "reference.torch"), bad
        assert "invalid op name" in bad[0][3], bad
    """)
    assert "rejected: invalid op name 'bad op'" in proc.stderr, proc.stderr


# ---- upstream's calling convention -------------------------------------------------------

CONVENTION = """
    import torch, fldispatch
    from vllm_fl.dispatch import CachedOp, call_op, get_default_manager
    from fl_reference_backend.reference import CALLS

    fldispatch.plugins()            # loads the Python plugins (first use)

    class Layer(torch.nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(hidden) + 0.5)
            self.variance_epsilon = 1e-5
            self.approximate = "none"


    torch.manual_seed(0)
    layer = Layer(64)
    x = torch.randn(5, 128)
    h = torch.randn(5, 64)
    res = torch.randn(5, 64)
    d = 64

    def check_all(expect_calls):
        CALLS.clear()
        y = CachedOp("silu_and_mul")(layer, x)
        torch.testing.assert_close(y, torch.nn.functional.silu(x[:, :d]) * x[:, d:])
        y = call_op("gelu_and_mul", layer, x)
        torch.testing.assert_close(y, torch.nn.functional.gelu(x[:, :d]) * x[:, d:])
        ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * layer.weight
        y = get_default_manager().call("rms_norm", layer, h)
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)
        r0 = res.clone()
        y, s = call_op("rms_norm", layer, h, res)
        torch.testing.assert_close(res, r0)              # the caller's residual is left alone
        s_ref = h + res
        torch.testing.assert_close(s, s_ref)
        torch.testing.assert_close(
            y, s_ref * torch.rsqrt(s_ref.pow(2).mean(-1, keepdim=True) + 1e-5) * layer.weight,
            rtol=1e-4, atol=1e-5)
        # rotary: upstream's call site, NeoX style
        heads, head, rot, tokens = 2, 16, 16, 5
        inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
        freqs = torch.outer(torch.arange(32).float(), inv)
        cache = torch.cat([freqs.cos(), freqs.sin()], -1)
        cos, sin = cache.chunk(2, -1)
        pos = torch.tensor([0, 3, 7, 1, 30])
        q = torch.randn(tokens, heads, head)
        k = torch.randn(tokens, heads, head)
        q0, k0 = q.clone(), k.clone()
        qe, ke = CachedOp("rotary_embedding")(layer, q, k, cos, sin, pos, False, True)
        c, s_ = cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)
        def neox(t):
            a, b = t[..., :rot // 2], t[..., rot // 2:]
            return torch.cat((a * c - b * s_, b * c + a * s_), -1)
        torch.testing.assert_close(qe, neox(q0), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ke, neox(k0), rtol=1e-4, atol=1e-5)
        name = CachedOp("attention_backend")(use_mla=False, use_sparse=False)
        assert isinstance(name, str) and name, name
        assert CALLS == expect_calls, CALLS
"""


def test_upstream_calls_of_the_shared_ops_on_fldispatch_kernels(tmp_path):
    site = make_site(tmp_path, ("fl_reference_backend", "fl_reference"))
    run(site, CONVENTION + """
    check_all([])                       # fldispatch's kernels served every call
    # fldispatch's own convention is untouched
    out = torch.empty(5, 64)
    assert fldispatch.silu_and_mul(out, x) is None
    torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :d]) * x[:, d:])
    """)


def test_upstream_implementations_serve_both_conventions(tmp_path):
    site = make_site(tmp_path, ("fl_reference_backend", "fl_reference"))
    run(site, CONVENTION + """
    pin = {op: ["impl:reference.torch"] for op in
           ("silu_and_mul", "gelu_and_mul", "rms_norm", "rotary_embedding", "attention_backend")}
    with fldispatch.policy(per_op=pin, strict=True):
        check_all(["silu_and_mul", "gelu_and_mul", "rms_norm", "rms_norm",
                   "rotary_embedding", "attention_backend"])
        # fldispatch's convention: the upstream implementation's result lands in out
        CALLS.clear()
        out = torch.empty(5, 64)
        fldispatch.silu_and_mul(out, x)
        torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :d]) * x[:, d:])
        o = torch.empty(5, 64)
        r = res.clone()
        fldispatch.rms_norm(o, h, layer.weight.detach(), r, 1e-5)
        torch.testing.assert_close(r, h + res)
        assert CALLS == ["silu_and_mul", "rms_norm"], CALLS
    """)


# ---- a FlagGems-style package and vllm_fl.utils ------------------------------------------


def test_flaggems_package_beside_the_flagos_tier(tmp_path):
    site = make_site(tmp_path, ("fl_flaggems_backend", "flaggems"))
    run(site, """
        import torch, fldispatch
        import vllm_fl.utils
        from vllm_fl.dispatch import call_op, get_discovered_plugins
        from fl_flaggems_backend.flaggems import CALLS
        assert vllm_fl.utils.use_flaggems_op("silu_and_mul")
        assert not vllm_fl.utils.use_flaggems_op("rms_norm")        # blacklisted below
        ours = {m["op"] for m in fldispatch.impls() if m["plugin"] == "flaggems"}
        assert ours == {"silu_and_mul"}, ours
        assert ("flaggems", "entry_point", True) in get_discovered_plugins()
        flagos = [m["plugin"] for m in fldispatch.impls()
                  if m["op"] == "silu_and_mul" and m["impl_id"] == "default.flagos"]
        assert sorted(flagos) == ["flaggems", "flagos"], flagos
        info = fldispatch.explain("silu_and_mul", "cpu")
        assert info["selected"] == "default.flagos@flaggems", info
        x = torch.randn(3, 8)
        y = call_op("silu_and_mul", None, x)
        torch.testing.assert_close(y, torch.nn.functional.silu(x[:, :4]) * x[:, 4:])
        assert CALLS == ["silu_and_mul"], CALLS
    """, VLLM_FL_FLAGOS_BLACKLIST="rms_norm")


def test_allow_vendors_of_separators_only_is_no_allow_list(tmp_path):
    site = make_site(tmp_path)
    run(site, """
        import fldispatch
        from vllm_fl.dispatch import get_policy
        assert fldispatch.resolve("silu_and_mul")          # the library initialises
        assert get_policy().allow_vendors is None, get_policy()
        assert "allow=" not in fldispatch.describe_policy(), fldispatch.describe_policy()
    """, VLLM_FL_ALLOW_VENDORS=" , ")


# ---- the library's log lines on Python's logging --------------------------------------


LOGGING = """
    import logging, threading, fldispatch
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.name, record.levelno, record.getMessage()))

    logging.getLogger().addHandler(Keep())
    logging.getLogger().setLevel(logging.DEBUG)

    def unknown_token():
        with fldispatch.policy(per_op={"silu_and_mul": ["impl:vendor.nosuch", "vendor"]}):
            fldispatch.resolve("silu_and_mul")

    unknown_token()
    t = threading.Thread(target=unknown_token)
    t.start()
    t.join()
    fldispatch._C.log_flush()
    hits = [r for r in records if "impl:vendor.nosuch" in r[2]]
    assert len(hits) == 2, records
    assert all(r[0] == NAME and r[1] == logging.WARNING for r in hits), hits
    # silenced the standard way
    logging.getLogger(NAME).setLevel(logging.ERROR)
    records.clear()
    unknown_token()
    fldispatch._C.log_flush()
    assert not [r for r in records if "nosuch" in r[2]], records
"""


@pytest.mark.parametrize("alias", [False, True])
def test_library_log_lines_reach_python_logging_once(tmp_path, alias):
    site = make_site(tmp_path)
    name = "vllm_fl.dispatch" if alias else "fldispatch"
    proc = run(site, f"NAME = {name!r}\n" + textwrap.dedent(LOGGING), alias=alias)
    assert "[fldispatch]" not in proc.stderr, proc.stderr


def test_library_log_lines_go_to_stderr_without_a_handler(tmp_path):
    site = make_site(tmp_path)
    proc = run(site, """
        import fldispatch
        with fldispatch.policy(per_op={"silu_and_mul": ["impl:vendor.nosuch", "vendor"]}):
            fldispatch.resolve("silu_and_mul")
        fldispatch._C.log_flush()
    """, alias=False)
    assert proc.stderr.count("impl:vendor.nosuch") == 1, proc.stderr
