"""numba start-up is counted apart: a kernel's first call with new argument types adds its duration to
`compile_seconds`, later calls do not, and an epoch's time leaves that duration out (reported as jit_s). And it
is paid once a machine: the --nprocs parent, or the first of a launcher's processes to take the machine's lock,
compiles the kernels a run calls (`warm_up`); the other processes load them from numba's cache."""

import json
import os
import subprocess
import sys
import time

import numpy as np

from spgnn import jit
from spgnn.comm.launch import free_port
from spgnn.config import TrainConfig
from spgnn.jit import compile_seconds, kernel, lock_path, machine_lock
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


def train_by_hand(tmp_path, procs):
    """`spgnn train` as `procs` processes started by hand (torchrun's environment) with an empty numba cache;
    returns the report. (The --nprocs parent's compiling for its processes is tested in test_progress.py.)"""
    out = tmp_path / "r.json"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), MASTER_ADDR="127.0.0.1", WORLD_SIZE=str(procs),
               LOCAL_WORLD_SIZE=str(procs), MASTER_PORT=str(free_port()))
    cmd = [sys.executable, "-m", "spgnn", "train", "--epochs", "1", "--quiet", "--output", str(out)]
    ps = [subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stderr=subprocess.PIPE, text=True) for r in range(procs)]
    for p in ps:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-3000:]
    return json.loads(out.read_text())


def test_launcher_processes_compile_once_under_the_machine_lock(tmp_path):
    """An empty cache and two processes started by hand (torchrun's environment): the first to take the machine's
    lock compiles the kernels, the other waits and loads them."""
    r = train_by_hand(tmp_path, 2)
    first, second = sorted(r["jit_s"]["compiled"], reverse=True)
    assert first >= 2 and second == 0
    assert all(s["compiling kernels"] > 0 for s in r["stages"]["per_rank"])


def test_warm_up_readies_every_kernel_training_calls():
    """After warm_up (with the sampler), training compiles or loads no further kernel signature: full-batch,
    and minibatch with each sampler (in a fresh process, where no kernel is ready yet)."""
    code = """if True:
        from spgnn import cli, jit
        for sampler in (None, "sage:5,5", "ladies:64,64"):
            jit.warm_up(sampler)
            ready = sum(len(d.overloads) for d in jit._dispatchers)
            more = ["--sampler", sampler, "--batch-size", "64"] if sampler else []
            assert cli.main(["train", "--epochs", "1", "--quiet", *more]) == 0
            assert sum(len(d.overloads) for d in jit._dispatchers) == ready, sampler
        """
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


def test_machine_lock_excludes_other_processes():
    probe = ("import fcntl, sys\nf = open(sys.argv[1], 'a')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except BlockingIOError:\n    sys.exit(3)\n")
    with machine_lock():
        held = subprocess.run([sys.executable, "-c", probe, str(lock_path())], timeout=60)
    free = subprocess.run([sys.executable, "-c", probe, str(lock_path())], timeout=60)
    assert (held.returncode, free.returncode) == (3, 0)


def test_warm_up_once_a_machine_per_set_of_kernels(tmp_path, monkeypatch):
    """warm_up_once warms and leaves a marker beside the lock; later calls find it and return at once, until
    another sampler's kernels are asked for."""
    monkeypatch.setattr(jit.numba.config, "CACHE_DIR", str(tmp_path))
    assert lock_path().parent == tmp_path
    assert [jit.warm_up_once(), jit.warm_up_once(), jit.warm_up_once("sage:5"), jit.warm_up_once("sage:10")] == \
        [True, False, True, False]
    assert len(list(tmp_path.glob("spgnn-kernels-*.ready"))) == 2
