"""numba start-up is counted apart: a kernel's first call with new argument types adds its duration to
`compile_seconds`, later calls do not, and an epoch's time leaves that duration out (reported as jit_s)."""

import time

import numpy as np

from spgnn.config import TrainConfig
from spgnn.jit import compile_seconds, kernel
from spgnn.train.loop import epoch_loop


def fresh_kernel():
    """A kernel numba has never seen (no on-disk cache), so its first call compiles."""
    @kernel(cache=False)
    def total(a):
        s = a[0] * 0
        for i in range(a.size):
            s += a[i]
        return s
    return total


def test_first_call_of_each_signature_is_counted():
    total = fresh_kernel()
    before = compile_seconds()
    assert total(np.arange(5.0)) == 10.0
    first = compile_seconds() - before
    assert first > 0.01                                   # numba compiled (it takes far more than 10 ms)
    total(np.arange(7.0))
    assert compile_seconds() - before == first            # same types: nothing new
    assert total(np.arange(4, dtype=np.int32)) == 6       # new argument types: compiled again
    assert compile_seconds() - before > first


def test_epoch_time_leaves_numba_start_up_out():
    total = fresh_kernel()
    walls = []

    def step(epoch):
        t0 = time.perf_counter()
        total(np.ones(3))
        walls.append(time.perf_counter() - t0)
        return 1.0

    records, _ = epoch_loop(step, dict, TrainConfig(epochs=3, eval_every=0))
    assert records[0]["jit_s"] > 0.01 and records[1]["jit_s"] == records[2]["jit_s"] == 0
    assert records[0]["jit_s"] <= walls[0]                # the compile happened inside the step
    assert all(r["time_s"] >= 0 and r["time_s"] + r["jit_s"] >= w for r, w in zip(records, walls))
