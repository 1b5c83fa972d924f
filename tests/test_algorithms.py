"""The example programs in algorithms/: each runs to the end on 2 processes and prints what it claims (the final
loss and test accuracy of the single-process run of the same configuration, whatever the algorithm; bytes equal
to the cost model's; SAR keeping fewer bytes for the backward; bulk sampling drawing the same minibatches as one
at a time and training as the library does)."""

import subprocess
import sys
from pathlib import Path

import pytest

from spgnn import MinibatchTrainer, TrainConfig, Trainer
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local

ROOT = Path(__file__).resolve().parents[1]


def run(program: str, *args: str) -> list[list[str]]:
    out = subprocess.run([sys.executable, str(ROOT / "algorithms" / program), "--nprocs", "2", *args],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return [line.split() for line in out.stdout.splitlines() if line.strip()]


def serial(**options) -> tuple[float, float]:
    """(final test accuracy, final loss) of the single-process run on cora."""
    final = Trainer(TrainConfig(dataset="cora", eval_every=0, **options), Comm()).run(log=None)["final"]
    return final["test_acc"], final["loss"]


def test_cagnet_algorithms_agree_and_match_the_model():
    header, *rows = run("cagnet.py", "--epochs", "2")
    assert header[0] == "algo" and [r[0] for r in rows] == ["1d", "1.5d", "2d", "3d"]
    acc, loss = serial(epochs=2, hidden=16)
    for r in rows:                                                     # test accuracy and final loss
        assert (float(r[2]), float(r[3])) == pytest.approx((acc, loss), abs=1e-4, rel=1e-5), r
    assert all(r[-1] == "yes" for r in rows)                           # bytes received = the cost model's


def test_sar_gat_keeps_less_for_the_backward():
    _, halo, sar = run("sar_gat.py", "--epochs", "2", "--heads", "2")
    assert (halo[0], sar[0]) == ("1d-halo", "sar")
    acc, loss = serial(model="gat", epochs=2, hidden=8, heads=2)
    for r in (halo, sar):
        assert (float(r[1]), float(r[2])) == pytest.approx((acc, loss), abs=1e-4, rel=1e-5), r
    assert float(sar[3]) < float(halo[3])                              # MB saved for the backward


def _sampled(comm):
    cfg = TrainConfig(dataset="cora", model="sage", epochs=1, hidden=64, eval_every=0)
    final = MinibatchTrainer(cfg, comm, "sage:10,5", batch_size=64, bulk=4).run(log=None)["final"]
    return final["test_acc"], final["loss"]


def test_bulk_sampling_draws_the_same_minibatches():
    sampled, trained = run("bulk_sampling.py", "--epochs", "1", "--bulk", "4")
    assert sampled[-1] == "True" and sampled[-2] == "identical:"
    acc, loss = run_local(_sampled, 2)[0]                              # the library on the same 2 processes
    assert trained[:3] == ["trained:", "test", "acc"], trained
    assert (float(trained[3].rstrip(",")), float(trained[6].rstrip(","))) == pytest.approx((acc, loss), abs=1e-4)
