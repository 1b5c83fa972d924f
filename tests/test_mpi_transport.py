"""The mpi4py transport under mpirun: the same data, bytes, outputs, gradients and loss curves as the torch
transport for every algorithm (P = 2 and 4); a rank that dies or fails ends the job instead of hanging it;
``spgnn calibrate`` fits α and β and writes its JSON schema."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import spgnn.spmm as algorithms
from spgnn import plan
from spgnn.cli import main
from spgnn.config import TrainConfig
from tests import launchers, mpi_helper
from tests.graphs import small_graph
from tests.launchers import MPI4PY, MPIRUN, MPIRUN_ARGS

pytestmark = pytest.mark.skipif(not (MPIRUN and MPI4PY), reason=f"needs {'mpi4py' if MPIRUN else 'mpirun'} "
                                "(pip install 'spgnn[mpi]')")
ROOT = Path(__file__).resolve().parents[1]


def mpirun(P, args, timeout=180):
    """``mpirun -np P python ARGS`` from the repository root (--oversubscribe only when P exceeds the cores:
    it makes waiting ranks yield the CPU, which is slow on a busy machine)."""
    env = launchers.env(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = MPIRUN_ARGS + ["-np", str(P)] + (["--oversubscribe"] if P > os.cpu_count() else [])
    return subprocess.run(cmd + [sys.executable] + args, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)


@pytest.mark.parametrize("P", [2, 4])
def test_same_results_and_bytes_on_both_transports(tmp_path, P):
    out = tmp_path / "both.pkl"
    res = mpirun(P, ["-m", "tests.mpi_helper", "compare", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    per_rank = pickle.loads(out.read_bytes())
    assert len(per_rank) == P
    graph = small_graph(**mpi_helper.TRAINING_GRAPH)
    predicted = {algo: [{k: tuple(v[:4]) for k, v in rank.rows.items()} for rank in plan.predict(
        TrainConfig(algo=algo, **mpi_helper.TRAINING), graph, P, epochs=mpi_helper.EPOCHS, evals=0)]
        for algo in algorithms.ALGORITHMS if algorithms.get(algo).has_cost_model()}
    for rank, r in enumerate(per_rank):
        torch_side, mpi_side = r["collectives"]["torch"], r["collectives"]["mpi"]
        for key, value in torch_side.items():          # world and grid-row/column collectives, and the ledger
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(mpi_side[key], value, err_msg=f"{key}, rank {rank}")
            else:
                assert mpi_side[key] == value, f"{key}, rank {rank}"
        expect = np.arange(12.0).reshape(4, 3).T
        np.testing.assert_array_equal(mpi_side["strided/bcast"], expect)
        np.testing.assert_array_equal(mpi_side["strided/sum"], np.full((3, 4), P))
        assert {algo for algo, _ in r["training"]} == set(algorithms.ALGORITHMS)
        for algo in algorithms.ALGORITHMS:
            a, b, where = r["training"][algo, "torch"], r["training"][algo, "mpi"], f"{algo}, P={P}, rank {rank}"
            np.testing.assert_array_equal(a["rows"], b["rows"])
            np.testing.assert_allclose(b["logits"], a["logits"], rtol=1e-5, atol=1e-6, err_msg=where)
            for ga, gb in zip(a["grads"], b["grads"], strict=True):
                np.testing.assert_allclose(gb, ga, rtol=1e-5, atol=1e-6, err_msg=where)
            np.testing.assert_allclose(b["losses"], a["losses"], rtol=1e-6, err_msg=where)
            if algorithms.get(algo).has_cost_model():      # every call, byte and message the cost model predicts
                assert a["ledger"] == b["ledger"] == predicted[algo][rank], where


def test_a_wait_on_a_peer_that_never_comes_fails_after_the_timeout():
    """A non-blocking broadcast's wait is watched against the timeout as every other wait: rank 0 ends with the
    watchdog's line (it waited, unwatched, for a peer that never came)."""
    res = mpirun(2, ["-m", "tests.mpi_helper", "stall", os.devnull], timeout=120)       # a hang fails here
    assert res.returncode != 0 and "communication failed (broadcast waited beyond --timeout 3 s)" in res.stderr
    assert "or never called it: every rank must call the same collectives in the same order" in res.stderr
    # a group's communicator, made at its first use by a non-blocking call, waited unwatched for 12 s
    res = mpirun(3, ["-m", "tests.mpi_helper", "group", os.devnull], timeout=120)
    assert res.returncode != 0 and "(making the communicator of ranks [0, 1] waited beyond --timeout 3 s)" in \
        res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize("mode", ["die", "raise"])
def test_failing_rank_ends_the_job(mode):
    """die: rank 1 calls os._exit(3) mid-training (mpirun sees a rank vanish); raise: rank 1 raises inside
    ``spgnn train`` (cli.main aborts the job: a plain exit would wait in MPI_Finalize for its peers)."""
    res = mpirun(2, ["-m", "tests.mpi_helper", mode, os.devnull], timeout=120)     # a hang fails here
    assert res.returncode != 0, res.stderr[-2000:]
    if mode == "raise":
        assert "injected failure" in res.stderr


def test_calibrate(tmp_path):
    out = tmp_path / "cal.json"
    res = mpirun(2, ["-m", "spgnn", "calibrate", "--sizes", "4K,64K,1M", "--repeats", "3", "--output", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "| all_to_all |" in res.stdout
    cal = json.loads(out.read_text())
    assert cal["schema"] == "spgnn.calibration/6" and cal["transport"] == "mpi" and cal["world_size"] == 2
    assert "alone" not in cal["compute"]          # Open MPI's waiting ranks poll a core: no process would be alone
    assert set(cal["collectives"]) == {"broadcast", "all_reduce", "all_to_all", "all_gather", "reduce_scatter"}
    for op, c in cal["collectives"].items():
        assert c["alpha_s"] >= 0 and c["beta_s_per_byte"] >= 0 and c["alpha_s"] + c["beta_s_per_byte"] > 0, op
        assert (c["bandwidth_bytes_per_s"] is None) == (c["beta_s_per_byte"] == 0), op
        assert [p["size_bytes"] for p in c["points"]] == [4096, 65536, 1 << 20], op
        assert all(p["seconds"] > 0 and len(p["samples_s"]) == 3 for p in c["points"]), op
    # the x axis is the bytes the cost model charges (cost.charged_bytes): at P = 2 half or all of the message
    # (a broadcast's 2·(P−1)/P of it: all)
    pts = {op: [p["bytes"] for p in c["points"]] for op, c in cal["collectives"].items()}
    assert pts["broadcast"] == pts["all_gather"] == [4096, 65536, 1 << 20]
    assert pts["all_to_all"] == pts["reduce_scatter"] == [2048, 32768, 1 << 19]
    assert cal["collectives"]["all_reduce"]["messages"] == 2


def test_calibrate_torch_transport_with_nprocs(tmp_path):
    """--nprocs 2 (its supervisor `main` called here, as python -m spgnn calls it) calibrates the torch transport,
    only the --ops asked for."""
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--nprocs", "2", "--sizes", "4K,256K", "--ops", "all_reduce,all_gather", "--repeats",
                 "3", "--output", str(out)]) == 0
    cal = json.loads(out.read_text())
    assert cal["transport"] == "torch" and set(cal["collectives"]) == {"all_reduce", "all_gather"}
