# SPDX-License-Identifier: Apache-2.0
"""Scoped policies on several threads at once, and a fork."""

import os
import threading

import pytest
import torch
import torch.nn.functional as F

import fldispatch

PREFERENCES = ["reference", "vendor", "flagos", "reference", "vendor", "flagos"]


def test_threads_with_different_scoped_policies_at_once():
    """Each thread enters its own policy, all of them meet at a barrier while
    inside it, then each resolves and computes many times while the others
    do the same: every thread sees its own policy only."""
    default = fldispatch.resolve("silu_and_mul")
    barrier = threading.Barrier(len(PREFERENCES))
    results, errors = {}, []

    def worker(i, prefer):
        try:
            x = torch.randn(64, 512)
            out = torch.empty(64, 256)
            want = F.silu(x[:, :256]) * x[:, 256:]
            seen = set()
            with fldispatch.policy(prefer=prefer):
                barrier.wait(timeout=30)
                for _ in range(200):
                    seen.add(fldispatch.resolve("silu_and_mul"))
                    fldispatch.silu_and_mul(out, x)
                    torch.testing.assert_close(out, want)
                barrier.wait(timeout=30)
            seen_after = fldispatch.resolve("silu_and_mul")
            results[i] = (prefer, seen, seen_after)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i, p)) for i, p in enumerate(PREFERENCES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for prefer, seen, seen_after in results.values():
        if prefer == "reference":
            assert seen == {"reference.c"}
        else:  # no flagos impl here: flagos falls to vendor, as vendor does
            assert seen == {default}
        assert seen_after == default
    assert fldispatch.resolve("silu_and_mul") == default


def test_large_calls_release_the_gil():
    """A big CPU call lets another Python thread run meanwhile."""
    x = torch.randn(2048, 4096)
    out = torch.empty(2048, 2048)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        for _ in range(5):
            before = len(ticks)
            fldispatch.gelu_and_mul(out, x)
            if len(ticks) > before:
                break
        else:
            pytest.fail("no other thread ran during five 32 MiB calls")
    finally:
        stop.set()
        t.join()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_fork():
    """A child forked while a policy scope is open on the forking thread
    keeps that scope (the thread's state is copied), computes, resolves and
    reloads; the parent is unaffected."""
    x = torch.randn(8, 64)
    want = F.silu(x[:, :32]) * x[:, 32:]
    out = torch.empty(8, 32)
    fldispatch.silu_and_mul(out, x)  # initialised and cached before the fork
    r, w = os.pipe()
    with fldispatch.policy(prefer="reference"):
        pid = os.fork()
        if pid == 0:  # the child: report by exit status, never return into pytest
            code = 1
            try:
                os.close(r)
                msgs = [fldispatch.resolve("silu_and_mul")]
                child_out = torch.empty(8, 32)
                fldispatch.silu_and_mul(child_out, x)
                ok = torch.allclose(child_out, want)
                fldispatch.reload()
                msgs.append(str(ok))
                os.write(w, ";".join(msgs).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        report = os.read(r, 4096).decode()
        os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, report
    assert report == "reference.c;True"
    assert fldispatch.resolve("silu_and_mul") != "reference.c"
    fldispatch.silu_and_mul(out, x)
    torch.testing.assert_close(out, want)
