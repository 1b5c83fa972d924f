"""The benchmarks' own plumbing, run small: a benchmark that measures for minutes must still write its report."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from spgnn import cost

ROOT = Path(__file__).resolve().parents[1]


def test_bench_model_writes_a_valid_report_against_the_defaults(tmp_path):
    """bench_model at P = 1 and 2 on a small synthetic graph, scored against the built-in rates ("default"): the JSON
    report is written, every layout has its --epochs timed steps (the --warmup rounds untimed) and a prediction, and the
    rates it records are the defaults, a process alone's included (a nested dataclass that once failed the JSON write
    after every step was measured)."""
    out = tmp_path / "model.json"
    done = subprocess.run([sys.executable, "benchmarks/bench_model.py", "--datasets", "sbm:400:4", "--procs", "1,2",
                           "--epochs", "2", "--warmup", "1", "--calibration", "default", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["calibration"] is None and list(report["scores"]) == ["default"]
    assert (report["warmup"], report["epochs"]) == (1, 2)
    assert {r["P"] for r in report["runs"]} == {1, 2} and len(report["runs"]) > 2
    for r in report["runs"]:
        assert len(r["epochs_s"]) == 2 and r["measured_s"] == np.median(r["epochs_s"]) > 0
        assert len(r["predicted_by"]) == 1 and r["predicted_by"][0] == r["predicted_s"] > 0
        assert r["rates"]["flops_per_s"] == cost.DEFAULT_RATES.flops_per_s
        assert r["rates"]["alone"]["spmm_bytes_per_s"] == cost.DEFAULT_RATES.alone.spmm_bytes_per_s
    assert out.with_suffix(".png").stat().st_size > 0


def test_bench_model_refuses_rounds_it_cannot_time(tmp_path):
    """No timed step, or a negative warm-up, is refused in one line before the calibration or any launch."""
    for flags in (["--epochs", "0"], ["--warmup", "-1"]):
        done = subprocess.run([sys.executable, "benchmarks/bench_model.py", *flags, "--out", str(tmp_path / "m.json")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1].endswith("error: --epochs must be >= 1 and --warmup >= 0")
        assert not (tmp_path / "m-calibration.json").exists()


def test_bench_ring_times_each_way_and_writes_its_report(tmp_path):
    """bench_ring at P = 3: a row per message size, each way timed --repeats times on rank 0 (the ring's rounds
    delivered the right shape, else the rank fails), the ratio that of the medians, the PNG beside the JSON."""
    out = tmp_path / "ring.json"
    done = subprocess.run([sys.executable, "benchmarks/bench_ring.py", "--procs", "3", "--rows", "1,8", "--width", "4",
                           "--repeats", "3", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["P"], r["rows"], r["bytes"]) for r in rows] == [(3, 1, 16), (3, 8, 128)]
    for r in rows:
        assert {len(v) for v in r["raw_s"].values()} == {3} and set(r["raw_s"]) == {"point_to_point",
                                                                                 "all_to_all_single", "spgnn"}
        assert r["ratio"] == r["all_to_all_single_ms"] / r["point_to_point_ms"] > 0
    assert out.with_suffix(".png").stat().st_size > 0


def test_bench_bound_takes_config_fields_per_algorithm(tmp_path):
    """bench_bound on a small synthetic graph with ``ALGO:ORDER:FIELD=VALUE`` items: a row each, the JSON and PNG
    written, and the fields applied: with --precompute on (the default, dropout 0) a step of a 2-layer GraphSAGE
    makes its second layer's product and its transpose (2 SpMMs), with ``precompute=off`` the first layer's too (4)."""
    out = tmp_path / "bound.json"
    done = subprocess.run([sys.executable, "benchmarks/bench_bound.py", "--dataset", "sbm:400:4", "--layers", "2",
                           "--hidden", "8", "--rounds", "2", "--algos", "sar,sar:natural:precompute=off",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {r["algo"]: r for r in report["rows"]}
    assert list(rows) == ["sar", "sar:natural:precompute=off"]
    assert rows["sar"]["spmm_calls"] == 2 and rows["sar:natural:precompute=off"]["spmm_calls"] == 4
    for r in rows.values():
        assert r["step_ms"] > 0 and r["dense_ms"] > 0 and r["bound_ms"] >= r["dense_ms"] and r["step_over_bound"] > 0
        assert len(report["raw"][r["algo"]]["step_s"]) == 2
    assert out.with_suffix(".png").stat().st_size > 0


def test_bench_spmm_times_each_width_beside_torch_and_another_build(tmp_path):
    """bench_spmm on a small synthetic graph with --library this build's own kernels: a row per width, each system
    checked against torch.sparse.mm first and timed --repeats times, the paired ratio spgnn / other positive, the
    JSON and PNG written; a --library that does not exist is refused in one line before any work."""
    import spgnn._native as built

    out = tmp_path / "spmm.json"
    args = [sys.executable, "benchmarks/bench_spmm.py", "--datasets", "sbm:400:4", "--widths", "3,17",
            "--repeats", "2", "--warmup", "0", "--out", str(out)]
    done = subprocess.run([*args, "--library", built.__file__], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["dataset"], r["f"]) for r in rows] == [("sbm:400:4", 3), ("sbm:400:4", 17)]
    for r in rows:
        assert {k: len(v) for k, v in r["raw_s"].items()} == {"spgnn": 2, "torch.sparse.mm": 2, "other build": 2}
        assert r["torch_over_spgnn"] == r["ms"]["torch.sparse.mm"] / r["ms"]["spgnn"] > 0
        assert r["spgnn_over_other"] > 0
    assert out.with_suffix(".png").stat().st_size > 0
    refused = subprocess.run([*args, "--library", str(tmp_path / "none.so")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and "no such file" in refused.stderr.strip().splitlines()[-1]


def test_profile_step_lists_each_algorithms_operators(tmp_path):
    """profile_step at P = 1 on a small graph: per algorithm, the step's median and its operators a step; the
    distributed SpMM is one of them (as `_LinearMap`), called as often by each algorithm (at P = 1 all multiply the
    same matrices)."""
    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, "benchmarks/profile_step.py", "--dataset", "sbm:400:4", "--algos",
                           "sar,1d-halo", "--layers", "2", "--hidden", "16", "--steps", "2", "--top", "5", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["sar", "1d-halo"]
    calls = {}
    for algo, r in results.items():
        ops = {o["op"]: o for o in r["ops"]}
        assert r["step_s"] > 0 and ops["_LinearMap"]["calls"] >= 1, algo
        calls[algo] = ops["_LinearMap"]["calls"]
        assert f"{algo}: step" in done.stdout
    assert calls["sar"] == calls["1d-halo"]
    assert out.with_suffix(".png").stat().st_size > 0
    refused = subprocess.run([sys.executable, "benchmarks/profile_step.py", "--dataset", "sbm:400:4", "--algos",
                              "sar,nope", "--out", str(tmp_path / "bad.json")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and not refused.stdout
    assert refused.stderr.strip().splitlines()[-1].endswith("unknown algorithm 'nope': choose one of 1d, 1.5d, "
                                                            "1d-halo, sar, 2d, 3d")
