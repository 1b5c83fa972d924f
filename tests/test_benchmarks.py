"""The benchmarks' own plumbing, run small: a benchmark that measures for minutes must still write its report."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spgnn import cost, progress

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch, capfd):
    """`bench(script, argv)`: (exit status, stdout, stderr) of benchmarks/`script`'s main(`argv`) run in this process,
    as ``python benchmarks/SCRIPT.py ARGV`` runs it (from the repository, stage lines off as in a fresh process;
    torch's threads set back after): a process of its own added only an interpreter and torch's import, 1-2 s each.
    stdout and stderr are the file descriptors', which the ranks a benchmark starts write to as well."""
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(progress, "_shown", False)
    threads = torch.get_num_threads()

    def run(script, argv):
        capfd.readouterr()
        try:
            code = importlib.import_module(script).main(argv)
        except SystemExit as e:                          # argparse's refusals
            code = e.code
        finally:
            torch.set_num_threads(threads)
        out, err = capfd.readouterr()
        return code or 0, out, err

    return run


def test_bench_model_writes_a_valid_report_against_the_defaults(tmp_path, bench):
    """bench_model at P = 1 and 2 on a small synthetic graph, scored against the built-in rates ("default"): the JSON
    report is written, every layout has its --epochs timed steps (the --warmup rounds untimed) and a prediction, and the
    rates it records are the defaults, a process alone's included (a nested dataclass that once failed the JSON write
    after every step was measured)."""
    out = tmp_path / "model.json"
    code, _, err = bench("bench_model", ["--datasets", "sbm:400:4", "--procs", "1,2", "--epochs", "2", "--warmup",
                                         "1", "--calibration", "default", "--out", str(out)])
    assert code == 0, err[-3000:]
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


def test_bench_model_memory_only_draws_its_memory_beside_the_prediction(tmp_path, bench, monkeypatch):
    """--memory GRAPHS --memory-only writes the .png the docs promise, peak memory measured against predicted (it
    drew epoch seconds only, so a run of no timed layout wrote no plot at all); each `spgnn train` run stood in for."""
    import bench_model
    import machine

    def run(graph, P, algo, args, folder):
        return {"dataset": graph, "P": P, "algo": algo, "shape": str(P), "setup_mb": [250.0] * P,
                "train_mb": [270.0 + P] * P, "rss_mb": 270.0 + P, "predicted_mb": 260.0,
                "memory_ratio": 260 / (270 + P)}

    drawn = []
    monkeypatch.setattr(bench_model, "memory", run)
    monkeypatch.setattr(machine, "save_figure", lambda fig, path: drawn.append(fig) or Path(path).write_bytes(b"png"))
    out = tmp_path / "m.json"
    code, said, err = bench("bench_model", ["--memory", "cora", "--memory-only", "--calibration", "default", "--out",
                                            str(out)])
    assert code == 0, err[-3000:]
    mems = json.loads(out.read_text())["memory"]
    assert len(mems) == 7 and out.with_suffix(".png").exists() and f"and {out.with_suffix('.png')}" in said
    assert "\nmemory within 15%: 7/7\n" in said and "nan" not in said      # no score of timed runs not made
    (ax,) = drawn[0].axes
    measured, predicted = ax.collections[0].get_offsets().T
    assert measured.tolist() == [r["rss_mb"] for r in mems] and predicted.tolist() == [r["predicted_mb"] for r in mems]
    assert "memory" in ax.get_title()


def test_bench_model_refuses_rounds_it_cannot_time(tmp_path, bench):
    """No timed step, or a negative warm-up, is refused in one line before the calibration or any launch."""
    for flags in (["--epochs", "0"], ["--warmup", "-1"]):
        code, _, err = bench("bench_model", [*flags, "--out", str(tmp_path / "m.json")])
        assert code == 2
        assert err.strip().splitlines()[-1].endswith("error: --epochs must be >= 1 and --warmup >= 0")
        assert not (tmp_path / "m-calibration.json").exists()
    code, _, err = bench("bench_model", ["--memory-only", "--out", str(tmp_path / "m.json")])
    assert code == 2 and err.strip().splitlines()[-1].endswith(
        "error: --memory-only skips the timed runs and leaves nothing to run: give --memory GRAPHS too")
    assert not (tmp_path / "m-calibration.json").exists()


def test_bench_ring_times_each_way_and_writes_its_report(tmp_path, bench):
    """bench_ring at P = 3: a row per message size, each way timed --repeats times on rank 0 (the ring's rounds
    delivered the right shape, else the rank fails), the ratio that of the medians, the PNG beside the JSON."""
    out = tmp_path / "ring.json"
    code, _, err = bench("bench_ring", ["--procs", "3", "--rows", "1,8", "--width", "4", "--repeats", "3", "--out",
                                        str(out)])
    assert code == 0, err[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["P"], r["rows"], r["bytes"]) for r in rows] == [(3, 1, 16), (3, 8, 128)]
    for r in rows:
        assert {len(v) for v in r["raw_s"].values()} == {3} and set(r["raw_s"]) == {"point_to_point",
                                                                                 "all_to_all_single", "spgnn"}
        assert r["ratio"] == r["all_to_all_single_ms"] / r["point_to_point_ms"] > 0
    assert out.with_suffix(".png").stat().st_size > 0


def test_bench_bound_takes_config_fields_per_algorithm(tmp_path, bench):
    """bench_bound on a small synthetic graph with ``ALGO:ORDER:FIELD=VALUE`` items: a row each, the JSON and PNG
    written, and the fields applied: with --precompute on (the default, dropout 0) a step of a 2-layer GraphSAGE
    makes its second layer's product and its transpose (2 SpMMs), with ``precompute=off`` the first layer's too (4),
    each algorithm's count printed under its name (the footer once showed the first row's alone)."""
    out = tmp_path / "bound.json"
    code, said, err = bench("bench_bound", ["--dataset", "sbm:400:4", "--layers", "2", "--hidden", "8", "--rounds",
                                            "2", "--algos", "sar,sar:natural:precompute=off", "--out", str(out)])
    assert code == 0, err[-3000:]
    report = json.loads(out.read_text())
    rows = {r["algo"]: r for r in report["rows"]}
    assert list(rows) == ["sar", "sar:natural:precompute=off"]
    assert rows["sar"]["spmm_calls"] == 2 and rows["sar:natural:precompute=off"]["spmm_calls"] == 4
    assert "sar 2 SpMMs" in said and "sar:natural:precompute=off 4 SpMMs" in said   # each named
    for r in rows.values():
        assert r["step_ms"] > 0 and r["dense_ms"] > 0 and r["bound_ms"] >= r["dense_ms"] and r["step_over_bound"] > 0
        assert len(report["raw"][r["algo"]]["step_s"]) == 2
    assert out.with_suffix(".png").stat().st_size > 0


def test_bench_spmm_times_each_width_beside_torch_and_another_build(tmp_path, bench):
    """bench_spmm on a small synthetic graph with --library this build's own kernels: a row per width, each system
    checked against torch.sparse.mm first and timed --repeats times, the paired ratio spgnn / other positive, the
    JSON and PNG written; a --library that does not exist is refused in one line before any work. The run is a
    process of its own: loaded in this one, the library would be the handle this process holds, not another build."""
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
    code, _, err = bench("bench_spmm", [*args[2:], "--library", str(tmp_path / "none.so")])   # (no build loaded)
    assert code == 2 and "no such file" in err.strip().splitlines()[-1]


def test_profile_step_lists_each_algorithms_operators(tmp_path, bench):
    """profile_step at P = 1 on a small graph: per algorithm, the step's median and its operators a step; the
    distributed SpMM is one of them (as `_LinearMap`), called as often by each algorithm (at P = 1 all multiply the
    same matrices)."""
    out = tmp_path / "profile.json"
    code, said, err = bench("profile_step", ["--dataset", "sbm:400:4", "--algos", "sar,1d-halo", "--layers", "2",
                                             "--hidden", "16", "--steps", "2", "--top", "5", "--out", str(out)])
    assert code == 0, err[-3000:]
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["sar", "1d-halo"]
    calls = {}
    for algo, r in results.items():
        ops = {o["op"]: o for o in r["ops"]}
        assert r["step_s"] > 0 and ops["_LinearMap"]["calls"] >= 1, algo
        calls[algo] = ops["_LinearMap"]["calls"]
        assert f"{algo}: step" in said
    assert calls["sar"] == calls["1d-halo"]
    assert out.with_suffix(".png").stat().st_size > 0
    code, said, err = bench("profile_step", ["--dataset", "sbm:400:4", "--algos", "sar,nope", "--out",
                                             str(tmp_path / "bad.json")])
    assert code == 2 and "Traceback" not in err and not said
    assert err.strip().splitlines()[-1].endswith("unknown algorithm 'nope': choose one of 1d, 1.5d, "
                                                            "1d-halo, sar, 2d, 3d")


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")    # PyG's, in this process
def test_bench_init_writes_a_valid_report_and_retabulates_it(tmp_path, bench):
    """bench_init's smallest run writes its JSON (the chosen initialisations as a plain dict: the registry's mapping
    once failed the write after training); --tables-from re-tabulates it under its own dataset and refuses a --window
    that would not change it."""
    out = tmp_path / "init.json"
    code, _, err = bench("bench_init", ["--dataset", "cora", "--models", "gcn", "--seeds", "0", "--epochs", "3",
                                        "--window", "1", "--targets", "gcn:0.3", "--threads", "1", "--out", str(out)])
    assert code == 0, err[-3000:]
    report = json.loads(out.read_text())
    assert report["chosen"]["gcn"] in ("pyg", "dgl") and (report["dataset"], report["window"]) == ("cora", 1)
    assert {r["system"] for r in report["runs"]} == {"spgnn --init pyg", "spgnn --init dgl", "PyG"}
    assert out.with_suffix(".png").stat().st_size > 0
    again = ["--tables-from", str(out), "--targets", "gcn:0.5"]
    code, said, err = bench("bench_init", again)
    assert code == 0 and said.lstrip().startswith("cora, one process"), err[-3000:]
    code, _, err = bench("bench_init", [*again, "--window", "3"])
    assert code == 2 and err.strip().splitlines()[-1].endswith("--window cannot change it")


def test_bench_comm_extrapolates_and_tabulates_without_timed_epochs(monkeypatch):
    """bench_comm's model at scale (`extrapolate`, on a small graph and few P here) splits each algorithm's fastest
    row into terms and α/β (it once passed one BlockStats where {adjacency: BlockStats} is expected, and read model
    widths no longer kept, after every measurement), and its measured table shows "–" for the epoch times of an
    --epochs 0 run (it once multiplied None)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_comm

    monkeypatch.setattr(bench_comm, "OGB", {"small": (20_000, 2 * 200_000, 8)})
    monkeypatch.setattr(bench_comm, "PLAN_PS", (8, 16, 64))
    monkeypatch.setattr(bench_comm, "DEGREES", (16, 256))
    ex = bench_comm.extrapolate()
    e = ex["small"]
    assert e["widths"] == [bench_comm.PLAN_F, 128, 128, 8] and e["spmm_widths"] == [128, 128, 8]
    for P in bench_comm.PLAN_PS:
        for row in e["fastest_per_algo"][P].values():
            assert row["alpha_s"] + row["beta_s"] > 0 and sum(row["terms"].values()) > 0
    json.dumps(ex, allow_nan=False)
    assert "| 64 |" in bench_comm.plan_markdown("small", e)
    record = {"graph": "sparse", "spec": "rmat:6", "P": 1, "label": "1d", "max_recv_words": 0,
              "max_recv_words_predicted": 0, "max_sent_words": 0, "max_sent_words_predicted": 0, "exact": True,
              "mismatches": [], "median_epoch_s": None, "max_comm_s": 0.0, "max_predicted_comm_s": 0.0}
    row = bench_comm.measured_table([record], "sparse").splitlines()[-1]
    assert row == "| 1 | 1d | 0 | 0 | 0 | 0 | yes | – | – | 0.0 |"


REFUSED = [   # (script, arguments, the end of the one-line error)
    ("bench_ring", ["--procs", "2", "--rows", "16,x"], "argument --rows: 'x' is not an integer"),
    ("bench_time_to_accuracy", ["--dataset", "cora", "--seeds", "0,x"], "argument --seeds: 'x' is not an integer"),
    ("bench_memory", ["--datasets", "cora", "--P", "1,x"], "argument --P: 'x' is not an integer"),
    ("bench_shares", ["--dataset", "rmat:6", "--P", "1,x"], "argument --P: 'x' is not an integer"),
    ("bench_overlap", ["--datasets", "cora,nosuch", "--procs", "2"], "unknown dataset 'nosuch'"),
    ("bench_overlap", ["--datasets", "cora", "--procs", "2,x"], "argument --procs: 'x' is not an integer"),
    ("bench_overlap", ["--datasets", "cora", "--models", "gat", "--algos", "1d"], "(gat: attention)"),
    ("bench_overlap", ["--datasets", "cora", "--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
    ("bench_partition", ["--datasets", "cora,nosuch", "--methods", "block"], "unknown dataset 'nosuch'"),
    ("bench_partition", ["--datasets", "cora", "--methods", "block,bogus"], "unknown partitioner 'bogus'"),
    ("bench_ooc", ["--dataset", "rmat:6", "--methods", "block,bogus"], "'bogus' is not an out-of-core partitioner"),
    ("fit_attention", ["--dataset", "cora", "--algos", "1d-halo,1d"], "'1d' is not a layout with attention"),
    ("fit_attention", ["--dataset", "cora", "--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
    ("bench_collectives", ["--procs", "2", "--epoch-dataset", "nosuch"], "unknown dataset 'nosuch'"),
    ("bench_collectives", ["--procs", "2,x"], "argument --procs: 'x' is not an integer"),
    ("bench_model", ["--datasets", "cora", "--procs", "1", "--algos", "1d-halo,sr"], "'sr' is not an algorithm"),
    ("bench_model", ["--datasets", "cora", "--procs", "1,x"], "argument --procs: 'x' is not an integer"),
    ("bench_bound", ["--dataset", "cora", "--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
    ("bench_ring", ["--procs", "2", "--out", "ring.png"], "names the plot written beside the JSON report"),
    # TrainConfig's own refusals, before any work (they were tracebacks, some after the measurements)
    ("bench_collectives", ["--procs", "2", "--hidden", "0"], "--hidden must be at least 1, got 0"),
    ("bench_model", ["--datasets", "cora", "--procs", "1", "--dropout", "2"], "--dropout must lie in [0, 1), got 2"),
    ("bench_link", ["--lr", "-1"], "--lr must be a positive number (below 3.4e37"),
    ("bench_link", ["--init", "bogus"], "--init must be auto"),
    ("bench_layers", ["--quick", "--weight-decay", "-1"], "--weight-decay must be a non-negative number"),
    ("fit_attention", ["--dataset", "cora", "--dropout", "1.5"], "--dropout must lie in [0, 1), got 1.5"),
    ("bench_time_to_accuracy", ["--dataset", "cora", "--margin", "nan"], "--margin must be a number of points"),
    ("bench_sampling", ["--datasets", "cora", "--minibatches", "0"], "argument --minibatches: must be >= 1, got 0"),
    ("bench_sampling", ["--datasets", "cora", "--budget-s", "0"], "argument --budget-s: must be > 0.0, got 0"),
    ("bench_sampling", ["--datasets", "cora,rmat:6", "--batch-size", "100"], "--batch-size 100 exceeds the 64 nodes "
     "of rmat:6"),
    ("bench_init", ["--dataset", "cora", "--models", "gcn", "--targets", "sage:0.7"], "no target for gcn (give "
     "MODEL:ACCURACY for each model run)"),
    ("bench_init", ["--dataset", "cora", "--models", "gcn,nope"], "'nope' is not a model: choose from gcn, sage, gat"),
    ("bench_init", ["--dataset", "cora", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
    ("bench_epoch", ["--datasets", "cora", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
    ("bench_layers", ["--dataset", "cora", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
    ("bench_layers", ["--quick", "--plot", "layers.txt"], "--plot layers.txt: give a .png path"),
    ("bench_epoch", ["--datasets", "cora", "--budget-s", "-1"], "argument --budget-s: must be > 0.0, got -1"),
    ("bench_spmm", ["--datasets", "cora", "--budget-s", "-1"], "argument --budget-s: must be > 0.0, got -1"),
    ("bench_collectives", ["--procs", "2", "--budget-s", "-1"], "argument --budget-s: must be > 0.0, got -1"),
    ("bench_partition", ["--datasets", "cora", "--coauthor-max-nparts", "0"], "argument --coauthor-max-nparts: "
     "must be >= 1, got 0"),
    ("bench_init", ["--dataset", "cora", "--models", "gcn", "--targets", "gcn:nan"], "gcn:nan: an accuracy lies in "
     "[0, 1]"),
    ("bench_link", ["--seeds", "0,1,0"], "--seeds 0,1,0: a seed given twice"),
    ("bench_bound", ["--dataset", "cora", "--algos", "sar:prefetch=x"], "--algos sar:prefetch=x: prefetch=x: not int"),
    # a file that is no shared library: OSError after the datasets loaded, once
    ("bench_spmm", ["--datasets", "cora", "--library", str(ROOT / "pyproject.toml")], "not a build of spgnn's "
     "kernels"),
]


def _refusal(script, argv, monkeypatch, capsys):
    """(exit code, stdout, stderr) of benchmarks/`script`'s main(`argv`), which must exit; stage lines off, as in a
    fresh process (an earlier test's spgnn.cli.main may have left them on)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(progress, "_shown", False)
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(script).main(argv)
    err = capsys.readouterr()
    return exit_.value.code, err.out, err.err


@pytest.mark.parametrize("script, argv, error", REFUSED, ids=[f"{s} {' '.join(a)}" for s, a, _ in REFUSED])
def test_benchmarks_refuse_bad_input_in_one_line_before_any_work(script, argv, error, tmp_path, monkeypatch, capsys):
    """A bad list item (a later one too), an unknown dataset, algorithm, partitioner or layout, a count of zero, a
    model without a target: argparse's one line, before anything is measured or written."""
    out = tmp_path / "out" / "report.json"
    flag = "--output" if script == "bench_layers" else "--out"
    code, said, err = _refusal(script, [*argv, flag, str(out)], monkeypatch, capsys)
    assert code == 2 and not said
    assert error in err.strip().splitlines()[-1] and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("text, error", [("[", "JSONDecodeError"), ('{"world_size": 0, "collectives": {}}',
                                                                    "comm_ranks 0 is no figure")])
def test_bench_model_refuses_a_calibration_it_cannot_read_before_any_launch(text, error, tmp_path, monkeypatch,
                                                                          capsys):
    """A --calibration file that is no calibration spgnn reads is one line before any launch (it was a traceback of
    the ranks' SpgnnError, after the processes had started)."""
    bad, out = tmp_path / "cal.json", tmp_path / "m.json"
    bad.write_text(text)
    code, said, err = _refusal("bench_model", ["--datasets", "cora", "--procs", "2", "--calibration",
                                               f"default,{bad}", "--out", str(out)], monkeypatch, capsys)
    assert code == 2 and not said and "Traceback" not in err, err
    assert error in err.strip().splitlines()[-1] and str(bad) in err.strip().splitlines()[-1], err
    assert not out.exists()


@pytest.mark.parametrize("script", ["bench_bound", "bench_comm", "bench_init", "bench_sampling", "bench_ring"])
def test_benchmarks_refuse_an_out_they_cannot_write(script, tmp_path, monkeypatch, capsys):
    """An --out that is a folder is refused in one line before any work (it once failed with IsADirectoryError after
    every measurement)."""
    code, _, err = _refusal(script, ["--out", str(tmp_path)], monkeypatch, capsys)
    err = err.strip().splitlines()[-1]
    assert code == 2 and err.endswith(f"argument --out: cannot write {tmp_path}: a folder"), err


@pytest.mark.parametrize("script", ["bench_spmm", "bench_ooc"])
def test_benchmarks_refuse_an_out_no_file_can_be_made_at(script, monkeypatch, capsys):
    """An --out in a folder where no file can be made (/proc, even for root, whom os.access lets write anywhere) is
    refused in one line before any work (bench_spmm once measured everything, then failed on the PNG, no JSON)."""
    code, _, err = _refusal(script, ["--out", "/proc/spgnn-report.json"], monkeypatch, capsys)
    err = err.strip().splitlines()[-1]
    assert code == 2 and "argument --out: cannot write /proc/spgnn-report.json" in err, err


BROKEN_PLOT = [   # (script, a tiny run's arguments): each writes its JSON, then plots
    ("bench_spmm", ["--datasets", "sbm:200:2", "--widths", "3", "--repeats", "1", "--warmup", "0"]),
    ("bench_bound", ["--dataset", "sbm:200:2", "--algos", "sar", "--layers", "2", "--hidden", "4", "--rounds", "1"]),
    ("profile_step", ["--dataset", "sbm:200:2", "--algos", "sar", "--layers", "2", "--hidden", "4", "--steps", "1"]),
    ("bench_overlap", ["--datasets", "sbm:200:2", "--procs", "1", "--algos", "1d-halo", "--hidden", "4",
                       "--repeats", "1"]),
]


@pytest.mark.parametrize("script, argv", BROKEN_PLOT, ids=[s for s, _ in BROKEN_PLOT])
def test_benchmarks_write_their_report_before_a_plot_that_fails(script, argv, tmp_path, monkeypatch, bench):
    """A plot that fails (here: raises OSError) is one warning line after the JSON is written: it once came first and
    took the report down with it. (What bench_overlap sets in the environment for its ranks is undone after.)"""
    out = tmp_path / "r.json"
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)

    def plot(*args):
        raise OSError("no space left")

    monkeypatch.setattr(importlib.import_module(script), "plot", plot)
    code, _, err = bench(script, [*argv, "--out", str(out)])
    assert code == 0, err[-3000:]
    assert json.loads(out.read_text()) and not out.with_suffix(".png").exists()
    assert err.strip().splitlines()[-1] == (f"{script}: warning: no plot at {out.with_suffix('.png')} "
                                            "(OSError: no space left)")


def test_bench_init_refuses_tables_from_another_report(tmp_path, monkeypatch, capsys):
    """--tables-from a JSON whose runs lack what the tables read (another benchmark's report) is refused in one line
    (its runs' "model", then "smoothed_test_acc", once raised KeyError)."""
    for run in ({"system": "PyG", "seed": 0, "test_acc": [0.5]},
                {"model": "gcn", "system": "PyG", "seed": 0, "test_acc": [0.5], "train_s": [0.1]}):
        report = tmp_path / "other.json"
        report.write_text(json.dumps({"dataset": "cora", "runs": [run]}))
        code, said, err = _refusal("bench_init", ["--tables-from", str(report), "--targets", "gcn:0.5"],
                                   monkeypatch, capsys)
        assert code == 2 and not said and "Traceback" not in err
        assert f"--tables-from {report}: not a bench_init report" in err.strip().splitlines()[-1], err


def test_bench_layers_refuses_a_plot_at_its_report(tmp_path, monkeypatch, capsys):
    """--plot the same file as --output would overwrite the report: refused in one line before any work."""
    out = tmp_path / "layers.png"
    code, _, err = _refusal("bench_layers", ["--quick", "--output", str(out), "--plot", str(out)], monkeypatch, capsys)
    assert code == 2 and err.strip().splitlines()[-1].endswith(f"--plot {out} is --output too: the plot would "
                                                               "overwrite the report"), err


def test_bench_bound_types_and_overrides_config_fields(monkeypatch):
    """An --algos item's FIELD=VALUE is of its field's type (prefetch=2 an int: a string once failed validation) and
    overrides the fields bench_bound sets itself (hidden=4: once "got multiple values for keyword argument")."""
    import argparse

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_bound

    args = argparse.Namespace(model="sage", layers=2, hidden=8)
    cfg = bench_bound.config("cora", "sar:natural:prefetch=2:hidden=4:dropout=0.25:batch_norm=on", args).validate()
    assert (cfg.algo, cfg.node_order, cfg.prefetch, cfg.hidden, cfg.dropout, cfg.batch_norm) == \
        ("sar", "natural", 2, 4, 0.25, True)
    assert (cfg.model, cfg.layers, cfg.lr) == ("sage", 2, 0.01)


def test_bench_ooc_reports_a_failing_method_in_one_line_and_keeps_the_others(tmp_path, monkeypatch, capsys):
    """A method whose process fails is one line, that process's own error (once a CalledProcessError traceback
    hiding it), and the methods measured before it are still written."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_ooc

    monkeypatch.setattr(bench_ooc, "MEASURE", "import sys\nif sys.argv[4] == 'random':\n"
                        "    raise SystemExit('SpgnnError: random broke')\n" + bench_ooc.MEASURE)
    out = tmp_path / "ooc.json"
    code = bench_ooc.main(["--dataset", "rmat:6", "--nparts", "2", "--methods", "block,random", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "bench_ooc: random failed: SpgnnError: random broke" in err and "Traceback" not in err, err
    report = json.loads(out.read_text())
    assert [r["method"] for r in report["rows"]] == ["block"] and report["failed"] == {"random":
                                                                                       "SpgnnError: random broke"}


def test_bench_link_plot_names_its_decoder(tmp_path, monkeypatch):
    """The plot's title names --decoder (it once said "GCN + dot" whatever the decoder)."""
    import argparse

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_link
    import machine

    figures = []
    monkeypatch.setattr(machine, "save_figure", lambda fig, path: figures.append(fig))
    runs = {0: [{"epoch": 0, "test_rocauc": 0.8, "val_rocauc": 0.7}]}
    bench_link.plot(runs, argparse.Namespace(decoder="mlp", hidden=32, embedding=16), tmp_path / "l.png")
    title = figures[0].axes[0].get_title()
    import matplotlib.pyplot as plt

    plt.close(figures[0])
    assert title.startswith("GCN + mlp on Cora"), title
