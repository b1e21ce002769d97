# SPDX-License-Identifier: Apache-2.0
"""The IO dump (fldispatch.iodump): vllm-plugin-FL's layout for fldispatch's ops."""

import json
import os
import subprocess
import sys

import pytest
import torch

import fldispatch
import fldispatch.iodump as iodump


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    iodump.disable_io_dump()
    iodump.reset_step()
    iodump.reset_rank()
    yield
    iodump.disable_io_dump()
    iodump.reset_step()
    iodump.reset_rank()


def read_lines(path):
    merged = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            merged.update(json.loads(line))
    return merged


def process_dir(root, rank=None, pid=None):
    """rank_NNNN for a process with a rank, else pid_NNNN (this process's by default)."""
    if rank is not None:
        return os.path.join(root, f"rank_{rank:04d}")
    return os.path.join(root, f"pid_{pid or os.getpid()}")


def op_dir(root, op, step=0, rank=None, pid=None):
    return os.path.join(process_dir(root, rank, pid), f"step_{step:04d}", op)


def test_off_installs_nothing():
    raw = fldispatch.silu_and_mul
    assert not iodump.is_dump_enabled()
    assert getattr(raw, "__wrapped__", None) is None
    iodump.enable_io_dump("/tmp/never-written-" + str(os.getpid()), ops={"x"})
    assert getattr(fldispatch.silu_and_mul, "__wrapped__", None) is raw
    iodump.disable_io_dump()
    assert fldispatch.silu_and_mul is raw


def test_catalog_call_layout(tmp_path):
    iodump.enable_io_dump(str(tmp_path), with_metas=True, with_values=True)
    x = torch.randn(4, 16)
    out = torch.empty(4, 8)
    fldispatch.silu_and_mul(out, x)
    fldispatch.silu_and_mul(out, x)
    d = op_dir(tmp_path, "silu_and_mul")
    inputs = read_lines(os.path.join(d, "input.json"))
    outputs = read_lines(os.path.join(d, "output.json"))
    assert sorted(inputs) == ["call_1", "call_2"] == sorted(outputs)
    meta = inputs["call_1"]
    assert meta["op_name"] == "silu_and_mul" and meta["step"] == 0 and meta["rank"] is None
    assert meta["impl_id"] == fldispatch.resolve("silu_and_mul")
    assert meta["tensors"]["arg_1"]["shape"] == [4, 16]
    assert meta["tensors"]["arg_1"]["max"] == pytest.approx(x.max().item())
    # the op writes its first argument: the output record holds it as written
    written = torch.load(os.path.join(d, "call_2_output.pt"))
    torch.testing.assert_close(written["arg_0"], out)
    assert outputs["call_2"]["tensors"]["arg_0"]["mean"] == pytest.approx(out.mean().item())
    given = torch.load(os.path.join(d, "call_1_input.pt"))
    torch.testing.assert_close(given["arg_1"], x)


def test_non_finite_statistics_are_strict_json(tmp_path):
    """A tensor holding NaN or an infinity (often why a dump is taken): its
    statistics are written as the strings "NaN", "Infinity", "-Infinity",
    so every line is RFC 8259 JSON."""
    iodump.enable_io_dump(str(tmp_path), with_metas=True)
    x = torch.randn(2, 16)
    x[0, 0] = float("nan")
    out = torch.empty(2, 8)
    fldispatch.silu_and_mul(out, x)
    y = torch.tensor([[float("inf"), -float("inf"), 1.0, 2.0]])
    fldispatch.gelu_quick(torch.empty_like(y), y)

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    for op in ("silu_and_mul", "gelu_quick"):
        with open(os.path.join(op_dir(tmp_path, op), "input.json"), encoding="utf-8") as f:
            for line in f:
                json.loads(line, parse_constant=refuse)
    meta = read_lines(os.path.join(op_dir(tmp_path, "silu_and_mul"), "input.json"))
    assert "NaN" in meta["call_1"]["tensors"]["arg_1"].values()
    meta = read_lines(os.path.join(op_dir(tmp_path, "gelu_quick"), "input.json"))
    stats = meta["call_1"]["tensors"]["arg_1"]
    assert stats["max"] == "Infinity" and stats["min"] == "-Infinity"


def test_summary_only_by_default(tmp_path):
    iodump.enable_io_dump(str(tmp_path))
    fldispatch.rms_norm(torch.empty(2, 8), torch.randn(2, 8), torch.ones(8))
    assert not os.path.exists(op_dir(tmp_path, "rms_norm"))
    iodump.disable_io_dump()
    summary = json.load(open(os.path.join(process_dir(tmp_path), "summary.json")))
    assert summary["rank"] is None and summary["pid"] == os.getpid()
    assert "rms_norm" in summary["non_flaggems_ops"] + summary["flaggems_ops"]
    assert summary["calls"]["rms_norm"] == 1


def test_filters_steps_and_max_calls(tmp_path):
    iodump.enable_io_dump(str(tmp_path), ops={"rms_norm"}, max_calls=2, step_range="1-1",
                          with_metas=True)
    x, w = torch.randn(2, 8), torch.ones(8)
    fldispatch.rms_norm(torch.empty(2, 8), x, w)          # step 0: outside the range
    iodump.io_dump_step()
    for _ in range(3):                                    # step 1: only 2 recorded
        fldispatch.rms_norm(torch.empty(2, 8), x, w)
    fldispatch.silu_and_mul(torch.empty(2, 4), x)         # not in ops
    iodump.io_dump_step()
    fldispatch.rms_norm(torch.empty(2, 8), x, w)          # step 2: outside
    assert not os.path.exists(op_dir(tmp_path, "rms_norm", 0))
    assert not os.path.exists(op_dir(tmp_path, "rms_norm", 2))
    assert not os.path.exists(op_dir(tmp_path, "silu_and_mul", 1))
    assert sorted(read_lines(os.path.join(op_dir(tmp_path, "rms_norm", 1), "input.json"))) == \
        ["call_1", "call_2"]


def test_rank_directory_and_filter(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    iodump.reset_rank()
    iodump.enable_io_dump(str(tmp_path), with_metas=True, ranks={3})
    fldispatch.gelu_and_mul(torch.empty(2, 4), torch.randn(2, 8))
    assert os.path.isdir(op_dir(tmp_path, "gelu_and_mul", rank=3))
    iodump.disable_io_dump()
    iodump.enable_io_dump(str(tmp_path / "other"), with_metas=True, ranks={0})
    fldispatch.gelu_and_mul(torch.empty(2, 4), torch.randn(2, 8))
    assert not os.path.exists(tmp_path / "other" / "rank_0003")


def test_torch_ops_recorded(tmp_path):
    import fldispatch.torch  # noqa: F401

    iodump.enable_io_dump(str(tmp_path), ops={"rms_norm"}, with_metas=True)
    out, res = torch.empty(2, 8), torch.randn(2, 8)
    torch.ops.fldispatch.rms_norm(out, torch.randn(2, 8), torch.ones(8), res, 1e-6)
    lines = read_lines(os.path.join(op_dir(tmp_path, "rms_norm"), "output.json"))
    assert set(lines["call_1"]["tensors"]) == {"arg_0", "arg_3"}  # out and residual
    iodump.disable_io_dump()
    torch.ops.fldispatch.rms_norm(out, torch.randn(2, 8), torch.ones(8), None, 1e-6)
    assert sorted(read_lines(os.path.join(op_dir(tmp_path, "rms_norm"), "input.json"))) == \
        ["call_1"]


def test_failed_call_leaves_no_output_record(tmp_path):
    iodump.enable_io_dump(str(tmp_path), with_metas=True)
    with pytest.raises(fldispatch.InvalidArgumentError):
        fldispatch.silu_and_mul(torch.empty(2, 3), torch.randn(2, 8))
    d = op_dir(tmp_path, "silu_and_mul")
    assert os.path.exists(os.path.join(d, "input.json"))
    assert not os.path.exists(os.path.join(d, "output.json"))


@pytest.mark.parametrize("name,value,word", [
    ("VLLM_FL_IO_DUMP_MAX_CALLS", "ten", "VLLM_FL_IO_DUMP_MAX_CALLS"),
    ("VLLM_FL_IO_DUMP_STEP_RANGE", "5-2", "VLLM_FL_IO_DUMP_STEP_RANGE"),
    ("VLLM_FL_IO_DUMP_RANK", "0,x", "VLLM_FL_IO_DUMP_RANK"),
    ("VLLM_FL_IO_DUMP_WITH_METAS", "yes", "VLLM_FL_IO_DUMP_WITH_METAS"),
    ("VLLM_FL_IO_DUMP_LAYERS", "0-3", "not supported"),
])
def test_bad_variable_is_named(tmp_path, monkeypatch, name, value, word):
    monkeypatch.setenv("VLLM_FL_IO_DUMP", str(tmp_path))
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=word):
        iodump.init_io_dump_from_env(True)
    assert not iodump.is_dump_enabled()
    assert getattr(fldispatch.silu_and_mul, "__wrapped__", None) is None


def test_environment_in_a_fresh_process(tmp_path):
    """VLLM_FL_IO_DUMP* at start-up: on from `import fldispatch`, per rank, known to the core."""
    env = dict(os.environ, VLLM_FL_IO_DUMP=str(tmp_path), VLLM_FL_IO_DUMP_WITH_METAS="1",
               VLLM_FL_IO_DUMP_OPS="silu_and_mul", LOCAL_RANK="1", VLLM_FL_STRICT="1")
    code = ("import torch, fldispatch\n"
            "fldispatch.silu_and_mul(torch.empty(2, 4), torch.randn(2, 8))\n")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "unknown" not in run.stderr.lower(), run.stderr
    assert os.path.isfile(os.path.join(op_dir(tmp_path, "silu_and_mul", rank=1), "input.json"))
    assert json.load(open(tmp_path / "rank_0001" / "summary.json"))["rank"] == 1


def test_python_ops_by_name_and_through_compat(tmp_path):
    """call_op on a Python implementation, and the compatibility layer's manager, are recorded
    under the op's own name (the compat registry's prefix does not show)."""
    from fldispatch.compat import BackendImplKind, OpImpl, OpManager, OpRegistry

    fldispatch.register_impl("iodump_scale", lambda x: x * 2, impl_id="reference.iodump",
                             kind="reference")
    registry = OpRegistry()
    registry.register_impl(OpImpl(op_name="iodump_twice", impl_id="default.iodump",
                                  kind=BackendImplKind.DEFAULT, fn=lambda x: x + x))
    manager = OpManager(registry)
    iodump.enable_io_dump(str(tmp_path), with_metas=True)
    x = torch.ones(3)
    torch.testing.assert_close(fldispatch.call_op("iodump_scale", x), x * 2)
    torch.testing.assert_close(manager.call("iodump_twice", x), x * 2)
    for op in ("iodump_scale", "iodump_twice"):
        out = read_lines(os.path.join(op_dir(tmp_path, op), "output.json"))
        assert out["call_1"]["tensors"]["result"]["max"] == 2.0
    assert not [d for d in os.listdir(os.path.join(process_dir(tmp_path), "step_0000"))
                if d.startswith("compat")]


# ---- one place per process, never through a planted link -------------------------
WORKER = """
import os, sys, torch, fldispatch, fldispatch.iodump as iodump
sys.stdin.readline()  # start together
x = torch.full((2, 8), float(os.getpid() % 1000))
for i in range(50):
    fldispatch.silu_and_mul(torch.empty(2, 4), x)
iodump.disable_io_dump()
print(os.getpid())
"""


def test_two_processes_without_a_rank_keep_their_own_files(tmp_path):
    """Two processes with no rank dump into one directory at once: each gets a place of its own
    (pid_NNNN), with its 50 calls, its own .pt files and its own summary."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    env.update(VLLM_FL_IO_DUMP=str(tmp_path), VLLM_FL_IO_DUMP_WITH_METAS="1",
               VLLM_FL_IO_DUMP_WITH_VALUES="1", VLLM_FL_IO_DUMP_OPS="silu_and_mul")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    pids = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        pids.append(int(out.split()[-1]))
    assert not os.path.exists(tmp_path / "rank_0000")
    for pid in pids:
        d = op_dir(tmp_path, "silu_and_mul", pid=pid)
        with open(os.path.join(d, "input.json"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        assert len(lines) == 50
        assert sorted(k for line in lines for k in line) == sorted(f"call_{i}"
                                                                   for i in range(1, 51))
        assert {line[k]["rank"] for line in lines for k in line} == {None}
        for i in (1, 50):
            data = torch.load(os.path.join(d, f"call_{i}_input.pt"))
            assert float(data["arg_1"].flatten()[0]) == float(pid % 1000)
        summary = json.load(open(os.path.join(process_dir(tmp_path, pid=pid), "summary.json")))
        assert summary["pid"] == pid and summary["rank"] is None
        assert summary["calls"] == {"silu_and_mul": 50}


def plant_links(directory, victim, uid=None):
    """Symbolic links to victim at the files a first silu_and_mul call writes under directory
    (this process's place), planted by uid (a forked child that drops to it) or by us."""
    d = op_dir(directory, "silu_and_mul")
    names = ("input.json", "output.json", "call_1_input.pt", "call_1_output.pt")
    pid = os.fork()
    if pid == 0:  # only system calls here, then _exit
        code = 1
        try:
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            os.makedirs(d, exist_ok=True)
            for name in names:
                os.symlink(victim, os.path.join(d, name))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"planting in {d}: {status}"
    return d


def test_planted_links_are_not_followed(tmp_path, caplog):
    """Links planted in the dump at the files it writes: the file they point to is unchanged
    (no append, no overwrite), with a warning naming the variable and the path."""
    root = tmp_path / "dump"
    os.mkdir(root, 0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    d = plant_links(root, victim)
    with caplog.at_level("WARNING", logger="vllm_fl.dispatch.io_dump"):
        iodump.enable_io_dump(str(root), with_metas=True, with_values=True)
        fldispatch.silu_and_mul(torch.empty(2, 4), torch.randn(2, 8))
        iodump.disable_io_dump()
    assert victim.read_text() == "precious\n"
    assert os.path.islink(os.path.join(d, "input.json"))
    text = caplog.text
    assert "VLLM_FL_IO_DUMP" in text and os.path.join(d, "input.json") in text, text


def test_new_dump_directory_is_private(tmp_path):
    root = tmp_path / "fresh"
    iodump.enable_io_dump(str(root), with_metas=True)
    fldispatch.silu_and_mul(torch.empty(2, 4), torch.randn(2, 8))
    iodump.disable_io_dump()
    assert os.stat(root).st_mode & 0o777 == 0o700
    assert os.stat(process_dir(root)).st_mode & 0o077 == 0
    assert os.stat(os.path.join(op_dir(root, "silu_and_mul"), "input.json")).st_mode & 0o077 == 0


@pytest.mark.parametrize("how", ["writable by others", "a symbolic link"])
def test_unsafe_dump_directory_is_refused(tmp_path, monkeypatch, how):
    root = tmp_path / "shared"
    os.mkdir(root)
    if how == "writable by others":
        os.chmod(root, 0o777)
        where = root
    else:
        where = tmp_path / "link"
        os.symlink(root, where)
    monkeypatch.setenv("VLLM_FL_IO_DUMP", str(where))
    with pytest.raises(ValueError, match=f"VLLM_FL_IO_DUMP: '{where}' is {how}"):
        iodump.init_io_dump_from_env(True)
    assert not iodump.is_dump_enabled()
    assert os.listdir(root) == []


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_directory_of_another_user_is_refused(monkeypatch):
    """As root: another user made the dump directory (the documented example's, in a shared
    temporary directory) and planted links in it; nothing is written there."""
    import pathlib
    import shutil
    import tempfile

    base = tempfile.mkdtemp(prefix="fld-iodump-")  # pytest's own is closed to other users
    try:
        os.chmod(base, 0o755)
        refused_in_a_directory_of_another_user(pathlib.Path(base), monkeypatch)
    finally:
        shutil.rmtree(base)


def refused_in_a_directory_of_another_user(tmp_path, monkeypatch):
    root = tmp_path / "dump"
    os.mkdir(root, 0o755)
    os.chown(root, NOBODY, NOBODY)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    plant_links(root, victim, uid=NOBODY)
    monkeypatch.setenv("VLLM_FL_IO_DUMP", str(root))
    monkeypatch.setenv("VLLM_FL_IO_DUMP_WITH_METAS", "1")
    with pytest.raises(ValueError, match=f"VLLM_FL_IO_DUMP: '{root}' is owned by uid {NOBODY}"):
        iodump.init_io_dump_from_env(True)
    fldispatch.silu_and_mul(torch.empty(2, 4), torch.randn(2, 8))
    assert victim.read_text() == "precious\n"


def catalog_written():
    """{op: positions of its arguments marked written, Tensor(a!)}, read off the
    catalog's schemas by a parser of this test's own."""
    out = {}
    for op, schema in fldispatch._C.catalog_ops():
        args = [a.strip() for a in schema[1:schema.rindex(") ->")].split(",")]
        marks = [i for i, arg in enumerate(args) if arg.split(" ", 1)[0].endswith(("!)", "!)?"))]
        if marks:
            out[op] = tuple(marks)
    return out


def test_written_positions_cover_every_catalog_op_that_writes():
    """The dumper's table of written arguments is the catalog's: every op with
    a Tensor(a!) argument, at the positions the schemas mark."""
    from fldispatch.compat import io_dumper

    expected = catalog_written()
    assert {"gelu_quick", "gelu_new", "gelu_fast", "rms_norm"} <= set(expected)
    assert expected["rms_norm"] == (0, 3) and expected["rotary_embedding_out"] == (6, 7)
    assert dict(io_dumper.WRITTEN) == expected


def _scale_into(out, x):
    out.copy_(x * 2)


def test_a_declared_ops_output_record_holds_what_it_wrote(tmp_path):
    """An op declared with a signature (not the catalog's) records the
    argument its schema marks written, and the implementation that served."""
    op = f"iodump_declared_{os.getpid()}"
    with fldispatch.registering("iodump_declared"):
        fldispatch.declare_op(op, "(Tensor(a!) out, Tensor x) -> ()")
        fldispatch.register_impl(op, _scale_into, impl_id="vendor.pyscale", kind="vendor",
                                 vendor="py")
    iodump.enable_io_dump(str(tmp_path), ops={op}, with_metas=True, with_values=True)
    out, x = torch.empty(2, 4), torch.randn(2, 4)
    fldispatch.call_op(op, out, x)
    d = op_dir(tmp_path, op)
    record = read_lines(os.path.join(d, "output.json"))["call_1"]
    assert set(record["tensors"]) == {"arg_0"}, record
    assert record["impl_id"] == "vendor.pyscale"
    torch.testing.assert_close(torch.load(os.path.join(d, "call_1_output.pt"))["arg_0"], x * 2)


@pytest.mark.parametrize("op", [op for op, pos in catalog_written().items() if pos == (0,)])
def test_an_activations_output_record_holds_out(tmp_path, op):
    """Every activation's output record holds the `out` it wrote, not the None it returned."""
    iodump.enable_io_dump(str(tmp_path), ops={op}, with_metas=True, with_values=True)
    gated = op.endswith("_and_mul") or op.startswith("mul_and_")
    out, x = torch.empty(2, 8), torch.randn(2, 16 if gated else 8)
    getattr(fldispatch, op)(out, x)
    d = op_dir(tmp_path, op)
    record = read_lines(os.path.join(d, "output.json"))["call_1"]
    assert set(record["tensors"]) == {"arg_0"}, record
    torch.testing.assert_close(torch.load(os.path.join(d, "call_1_output.pt"))["arg_0"], out)
