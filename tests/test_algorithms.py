"""Smoke tests of the example programs in algorithms/: each runs to the end on 2 processes and prints what it
claims (the same training curve whatever the algorithm, bytes equal to the cost model's, SAR keeping fewer bytes
for the backward, bulk sampling drawing the same minibatches as one at a time)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(program: str, *args: str) -> list[list[str]]:
    out = subprocess.run([sys.executable, str(ROOT / "algorithms" / program), "--nprocs", "2", *args],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return [line.split() for line in out.stdout.splitlines() if line.strip()]


def test_cagnet_algorithms_agree_and_match_the_model():
    header, *rows = run("cagnet.py", "--epochs", "2")
    assert header[0] == "algo" and [r[0] for r in rows] == ["1d", "1.5d", "2d", "3d"]
    assert len({(r[2], r[3]) for r in rows}) == 1                      # test accuracy and final loss agree
    assert all(r[-1] == "yes" for r in rows)                           # bytes received = the cost model's


def test_sar_gat_keeps_less_for_the_backward():
    _, halo, sar = run("sar_gat.py", "--epochs", "2", "--heads", "2")
    assert (halo[0], sar[0]) == ("1d-halo", "sar")
    assert abs(float(halo[2]) - float(sar[2])) < 1e-4                  # the same loss
    assert float(sar[3]) < float(halo[3])                              # MB saved for the backward


def test_bulk_sampling_draws_the_same_minibatches():
    sampled, trained = run("bulk_sampling.py", "--epochs", "1", "--bulk", "4")
    assert sampled[-1] == "True" and sampled[-2] == "identical:"
    assert trained[0] == "trained:" and 0.0 <= float(trained[3].rstrip(",")) <= 1.0
