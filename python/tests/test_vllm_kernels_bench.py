# SPDX-License-Identifier: Apache-2.0
"""bench/vllm_kernels.py's timing loop, without vLLM or torch: an in-place
call with inputs to restore has them restored every RESTORE_EVERY calls, and
only the calls are timed."""

import importlib.util
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "vllm_kernels", os.path.join(ROOT, "bench", "vllm_kernels.py"))
assert spec is not None and spec.loader is not None
vk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vk)


class Grows:
    """An in-place op whose value doubles per call unless restored."""

    def __init__(self):
        self.value, self.calls, self.restores, self.largest = 1, 0, 0, 1

    def __call__(self):
        self.calls += 1
        self.value *= 2
        self.largest = max(self.largest, self.value)

    def restore(self):
        self.restores += 1
        self.value = 1


def test_restored_every_so_many_calls():
    op = Grows()
    n = 3 * vk.RESTORE_EVERY + 5
    vk.run_timed(op, n)
    assert op.calls == n
    assert op.restores == 4
    assert op.largest == 2 ** vk.RESTORE_EVERY


def test_plain_call_runs_n_times_without_restoring():
    calls = []
    vk.run_timed(lambda: calls.append(1), 1000)
    assert len(calls) == 1000


def test_restoring_is_not_timed():
    class SlowRestore(Grows):
        def restore(self):
            super().restore()
            time.sleep(0.02)

    op = SlowRestore()
    el = vk.run_timed(op, 2 * vk.RESTORE_EVERY)
    assert op.restores == 2
    assert el < 0.02e9  # two 20 ms restores were left out
