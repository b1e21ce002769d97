# SPDX-License-Identifier: Apache-2.0
"""fldispatch's log lines in vLLM's log (fldispatch.vllm_log).

Each case runs in a fresh interpreter, whose logging nothing else has set
up: vLLM's configuration is made as vLLM's dictConfig makes it (the "vllm"
logger with its handler and level, not propagating; the root logger left
alone), with a format that shows the logger, the level and the file. The
library's line is a real one: VLLM_FL_DENY_VENDORS names a vendor no
plugin registers (a WARNING, as an op is first resolved). test_engine and test_serve (make
check-vllm) see the same lines in a real vLLM's processes."""

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import logging, sys
    import fldispatch
    from fldispatch import _C, vllm_log

    def vllm_configures(level):
        # as vLLM's configure_logging: its handler and level, no propagation
        theirs = logging.getLogger("vllm")
        for handler in list(theirs.handlers):
            theirs.removeHandler(handler)
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(
            "vLLM: %(levelname)s %(name)s [%(filename)s:%(lineno)d] %(message)s"))
        handler.setLevel(level)
        theirs.addHandler(handler)
        theirs.setLevel(level)
        theirs.propagate = False

    def library_line():
        # the policy's names are checked as an op is first resolved
        fldispatch.reload()
        fldispatch.resolve("rms_norm")
        _C.log_flush()

    def lines(label):
        print("--", label, flush=True)
        library_line()
        logging.getLogger("fldispatch.prometheus").warning("fldispatch: a scrape's %s", "warning")
        logging.getLogger("fldispatch.vllm").info("fldispatch: a path %s", "line")
        sys.stdout.flush()

    def settled(label):
        print("settled:", vllm_log.settle())
        lines(label)
""")
# the lines of PRELUDE that log the plugin's own lines, as the records say
WARNING_AT, INFO_AT = (next(i for i, line in enumerate(PRELUDE.splitlines(), 1) if call in line)
                       for call in (".warning(", ".info("))
LIBRARY_LINE = ("VLLM_FL_DENY_VENDORS: no vendor named 'nvida' is registered (registered "
                "vendors: ")
# the three lines of PRELUDE's lines() as vLLM's handler here prints them
LIBRARY_IN_VLLM = f"vLLM: WARNING fldispatch [libfldispatch.so:0] {LIBRARY_LINE}"
SCRAPE_IN_VLLM = (f"vLLM: WARNING fldispatch.prometheus [<string>:{WARNING_AT}] fldispatch: a "
                  "scrape's warning")
PATH_IN_VLLM = f"vLLM: INFO fldispatch.vllm [<string>:{INFO_AT}] fldispatch: a path line"


def run(body, **env):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    environment.update(VLLM_FL_DENY_VENDORS="nvida", **env)
    out = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                         capture_output=True, text=True, timeout=120, env=environment)
    assert out.returncode == 0, out.stderr
    return out


def shown(text):
    """The lines of text, the library line's list of vendors cut off."""
    return [line.split(LIBRARY_LINE)[0] + LIBRARY_LINE if LIBRARY_LINE in line else line
            for line in text.splitlines()]


def test_in_vllms_api_server_every_line_reaches_vllms_log():
    # vLLM's API server: its logging configured, nothing on the root logger,
    # whose level a module of its OpenAI server sets to ERROR
    out = run("""
        _C.init()
        vllm_configures(logging.INFO)
        logging.getLogger().setLevel(logging.ERROR)
        lines("before")
        settled("joined")
        vllm_configures(logging.WARNING)  # VLLM_LOGGING_LEVEL=WARNING
        settled("at WARNING")
    """)
    assert shown(out.stdout) == [
        "-- before",
        "settled: joined",
        "-- joined",
        LIBRARY_IN_VLLM,
        SCRAPE_IN_VLLM,
        PATH_IN_VLLM,
        "settled: joined",
        "-- at WARNING",
        LIBRARY_IN_VLLM,
        SCRAPE_IN_VLLM], out
    # before settle(): the root logger's ERROR drops the warnings, and
    # Python's last resort would have printed them bare
    assert out.stderr == "", out.stderr


def test_without_vllms_logging_pythons_last_resort_prints_the_warnings():
    # VLLM_CONFIGURE_LOGGING=0: no handler on vLLM's logger
    out = run("""
        _C.init()
        settled("unconfigured")
    """)
    assert out.stdout.splitlines() == ["settled: None", "-- unconfigured"], out
    assert shown(out.stderr) == [LIBRARY_LINE, "fldispatch: a scrape's warning"], out.stderr


def test_a_program_that_configured_logging_keeps_its_routing():
    out = run("""
        logging.basicConfig(stream=sys.stdout, format="root: %(levelname)s %(name)s %(message)s")
        _C.init()
        vllm_configures(logging.INFO)
        settled("the root's handler")
    """)
    assert shown(out.stdout) == [
        "settled: None",
        "-- the root's handler",
        f"root: WARNING fldispatch {LIBRARY_LINE}",
        "root: WARNING fldispatch.prometheus fldispatch: a scrape's warning"], out
    out = run("""
        _C.init()
        vllm_configures(logging.INFO)
        logging.getLogger("fldispatch").setLevel(logging.ERROR)  # the program's: quieter
        settled("the program's level")
    """)
    assert out.stdout.splitlines() == ["settled: None", "-- the program's level"], out
    assert out.stderr == "", out.stderr


def test_a_later_root_handler_takes_the_lines_back():
    # joined, then the program (or a VLLM_LOGGING_CONFIG_PATH file vLLM
    # applies) puts a handler on the root logger: the next join() undoes
    # what the last one set
    out = run("""
        _C.init()
        vllm_configures(logging.INFO)
        print("settled:", vllm_log.settle())
        logging.basicConfig(stream=sys.stdout, format="root: %(levelname)s %(name)s %(message)s")
        print("settled:", vllm_log.settle())
        ours = logging.getLogger("fldispatch")
        print("as Python made it:", ours.handlers == [] and ours.level == logging.NOTSET
              and ours.propagate)
        lines("the root's handler")
    """)
    assert shown(out.stdout) == [
        "settled: joined",
        "settled: None",
        "as Python made it: True",
        "-- the root's handler",
        f"root: WARNING fldispatch {LIBRARY_LINE}",
        "root: WARNING fldispatch.prometheus fldispatch: a scrape's warning"], out


def test_vllm_fl_log_level_shows_the_librarys_lines_at_its_level():
    # as vllm-plugin-FL's own logger, whose level VLLM_FL_LOG_LEVEL sets:
    # the library's lines at that level whatever vLLM's level; the plugin's
    # Python lines keep vLLM's
    out = run("""
        _C.init()
        vllm_configures(logging.ERROR)  # VLLM_LOGGING_LEVEL=ERROR
        settled("vLLM at ERROR")
    """, VLLM_FL_LOG_LEVEL="warning")
    assert shown(out.stdout) == [
        "settled: joined",
        "-- vLLM at ERROR",
        LIBRARY_IN_VLLM], out
    out = run("""
        vllm_configures(logging.WARNING)  # VLLM_LOGGING_LEVEL=WARNING
        settled("vLLM at WARNING")
    """, VLLM_FL_LOG_LEVEL="info")
    got = shown(out.stdout)
    assert got[:2] == ["settled: joined", "-- vLLM at WARNING"], out
    loaded = [line for line in got if line.startswith(
        "vLLM: INFO fldispatch [libfldispatch.so:0] Loaded plugin 'reference'")]
    assert len(loaded) == 1, out
    assert LIBRARY_IN_VLLM in got, out
    assert got[-1] == SCRAPE_IN_VLLM, out
    assert not [line for line in got if "fldispatch.vllm" in line], out


def test_a_level_the_program_sets_counts_as_vllm_fl_log_level():
    # fldispatch.set_log_level() after the plugin settled: the library's
    # lines at the new level reach vLLM's log whatever vLLM's level, until
    # fldispatch.reload() makes the environment's level the library's again
    pytest.importorskip("torch")
    out = run("""
        import torch
        vllm_configures(logging.ERROR)  # VLLM_LOGGING_LEVEL=ERROR
        settled("vLLM at ERROR")
        fldispatch.set_log_level("info")
        fldispatch.silu_and_mul(torch.empty(2, 4), torch.ones(2, 8))  # its first call: INFO
        _C.log_flush()
        sys.stdout.flush()
        fldispatch.reload()
        print("reloaded:", vllm_log.library_level(),
              logging.getLevelName(logging.getLogger("fldispatch").level))
    """)
    got = shown(out.stdout)
    assert got[:2] == ["settled: joined", "-- vLLM at ERROR"], out
    assert got[2].startswith(
        "vLLM: INFO fldispatch [libfldispatch.so:0] Op 'silu_and_mul' (cpu, f32) using "), out
    assert got[-1] == "reloaded: None ERROR", out


def test_in_vllms_driver_the_lines_nothing_would_show_wait_for_vllms_logging():
    # vLLM's driver loads the plugin before it configures its logging (a
    # stand-in vllm.logger here; test_vllm_ir.py has vLLM's own): the
    # warnings print at once, as Python prints them, and the INFO lines
    # (the path line, the library's with VLLM_FL_LOG_LEVEL=info) come in
    # vLLM's log as vLLM configures it
    out = run("""
        import types
        sys.modules["vllm"] = types.ModuleType("vllm")
        sys.modules["vllm.logger"] = vllm_logger = types.ModuleType("vllm.logger")
        vllm_logger.configure_logging = lambda config: vllm_configures(logging.INFO)
        settled("held")
        print("configuring", flush=True)
        vllm_logger.configure_logging(None)
    """, VLLM_FL_LOG_LEVEL="info")
    got = shown(out.stdout)
    assert got[:3] == ["settled: holds", "-- held", "configuring"], out
    assert any(line.startswith("vLLM: INFO fldispatch [libfldispatch.so:0] Loaded plugin "
                               "'reference'") for line in got), out
    assert all(line.startswith("vLLM: INFO fldispatch") for line in got[3:]), out
    assert got[-1] == PATH_IN_VLLM, out
    assert shown(out.stderr) == [LIBRARY_LINE, "fldispatch: a scrape's warning"], out.stderr


def test_with_the_vllm_fl_alias_the_librarys_lines_reach_vllms_log_too():
    # fldispatch.compat.alias sends the library's lines to upstream's
    # "vllm_fl.dispatch" logger, installed before the plugin registers (a
    # sitecustomize) or after: settle() sets that logger up as its own, and
    # leaves it as Python made it once the alias is gone
    out = run("""
        import fldispatch.compat.alias as alias
        _C.init()
        vllm_configures(logging.INFO)
        alias.install(force=True)
        settled("alias first")
        alias.uninstall()
        upstream = logging.getLogger("vllm_fl.dispatch")
        print("as Python made it:", upstream.handlers == [] and upstream.level == logging.NOTSET
              and upstream.propagate)
        lines("alias gone")
        alias.install(force=True)
        lines("alias after")
        logging.getLogger("vllm_fl.dispatch.io_dump").warning("fldispatch: a dump's %s", "warning")
        sys.stdout.flush()
    """)
    upstream_line = f"vLLM: WARNING vllm_fl.dispatch [libfldispatch.so:0] {LIBRARY_LINE}"
    dump_at = next(i for i, line in enumerate(out.args[2].splitlines(), 1) if "a dump's" in line)
    assert shown(out.stdout) == [
        "settled: joined",
        "-- alias first",
        upstream_line,
        SCRAPE_IN_VLLM,
        PATH_IN_VLLM,
        "as Python made it: True",
        "-- alias gone",
        LIBRARY_IN_VLLM,
        SCRAPE_IN_VLLM,
        PATH_IN_VLLM,
        "-- alias after",
        upstream_line,
        SCRAPE_IN_VLLM,
        PATH_IN_VLLM,
        f"vLLM: WARNING vllm_fl.dispatch.io_dump [<string>:{dump_at}] fldispatch: a dump's warning",
    ], out
    assert out.stderr == "", out.stderr
    # a real vllm_fl's logger has its handler: settle() leaves it to it
    out = run("""
        import fldispatch.compat.alias as alias
        upstream = logging.getLogger("vllm_fl.dispatch")
        mine = logging.StreamHandler(sys.stdout)
        mine.setFormatter(logging.Formatter("upstream's: %(levelname)s %(message)s"))
        upstream.addHandler(mine)
        upstream.propagate = False
        _C.init()
        vllm_configures(logging.INFO)
        alias.install(force=True)
        settled("upstream's handler")
        print("left alone:", upstream.handlers == [mine])
    """)
    assert shown(out.stdout) == [
        "settled: joined",
        "-- upstream's handler",
        f"upstream's: WARNING {LIBRARY_LINE}",
        SCRAPE_IN_VLLM,
        PATH_IN_VLLM,
        "left alone: True"], out
