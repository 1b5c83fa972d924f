"""The command line end to end: four launchers give the same run (mpirun's on the mpi transport, the others
on torch's), the report has its fields, bad input gives one clear line and a non-zero exit on every rank,
and a rank that dies does not hang the others."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from spgnn.cli import main
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.train import MinibatchTrainer, Trainer
from tests import launchers
from tests.launchers import MPIRUN, MPIRUN_ARGS, TORCHRUN

SPGNN = [sys.executable, "-m", "spgnn", "train"]
QUICK = ["--epochs", "30", "--quiet", "--eval-every", "0"]


def run(args, timeout=180, env=None, cmd=None):
    return subprocess.run((cmd or SPGNN) + args, capture_output=True, text=True, timeout=timeout,
                          env=launchers.env(**(env or {})))


def write_graph(folder, n=6, edges=((0, 1), (1, 2), (2, 3), (3, 4), (4, 5)), f=3, x=None, y=None):
    """A tiny edge-list dataset folder with explicit masks."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "edges.txt").write_text("".join(f"{a} {b}\n" for a, b in edges))
    np.save(folder / "features.npy", np.ones((n, f), np.float32) if x is None else x)
    np.save(folder / "labels.npy", np.arange(n) % 2 if y is None else y)
    for name, m in (("train", [0, 1]), ("val", [2]), ("test", [3, 4, 5])):
        np.save(folder / f"{name}_mask.npy", np.isin(np.arange(n), m))
    return str(folder)


def test_report_fields(tmp_path, capfd):
    """The report of a --nprocs 2 run (its supervisor `main` here; capfd holds the ranks' stdout) has its fields."""
    out = tmp_path / "r.json"
    code = main(["train", "--epochs", "3", "--output", str(out), "--nprocs", "2", "--algo", "1d"])
    said, err = capfd.readouterr()
    assert code == 0, err
    assert sum(x.startswith("epoch ") for x in said.splitlines()) == 3   # one line an epoch, rank 0 only
    r = json.loads(out.read_text())
    assert r["config"]["algo"] == "1d" and r["world_size"] == 2
    assert r["config"]["dataset"] == "cora"         # the user's, not the cache folder the processes were handed
    assert 0 <= r["final"]["test_acc"] <= 1 and {"train_acc", "val_acc"} <= set(r["final"])
    assert len(r["epochs"]) == 3 and all(e["loss"] > 0 and e["time_s"] > 0 for e in r["epochs"])
    for key in ("comm", "memory"):
        assert [x["rank"] for x in r[key]["per_rank"]] == [0, 1]
    for c, m in zip(r["comm"]["per_rank"], r["memory"]["per_rank"], strict=True):
        assert c["sent_bytes"] > 0 and c["recv_bytes"] > 0
        assert m["peak_rss_bytes"] > 10 * 2**20 and m["saved_for_backward_bytes"] > 0
        assert 0 < m["setup_peak_rss_bytes"] <= m["peak_rss_bytes"] <= max(m["setup_peak_rss_bytes"],
                                                                            m["train_peak_rss_bytes"])


SAMPLED = ["--sampler", "sage:5,5", "--batch-size", "64", "--bulk", "2", "--split-graph", "--epochs", "3",
           "--quiet", "--eval-every", "0"]


@pytest.mark.skipif(not (MPIRUN and TORCHRUN), reason="mpirun or torchrun not found beside the interpreter or on PATH "
                    "(pip install 'spgnn[mpi]')")
@pytest.mark.parametrize("args", [QUICK, SAMPLED], ids=["full-batch", "sampled-split-graph"])
def test_four_launches_same_run(tmp_path, args):
    """spawn, mpirun, torchrun (P = 2) and a single process give the training curve and accuracy of the same run
    made through the library API (sampled minibatch training: the three P = 2 launches; a step of P = 1 trains
    on other minibatches). spawn's supervisor and the single process are `main` called here, as ``python -m
    spgnn`` calls it (a process of its own would add only its imports: 1-2 s each); mpirun and torchrun start
    their own."""
    reports = {}
    launched = {
        "mpirun": MPIRUN_ARGS + ["--oversubscribe", "-np", "2"] + SPGNN,
        "torchrun": [TORCHRUN, "--nproc-per-node", "2", "-m", "spgnn", "train"],
    }
    here = {"spawn": ["--nprocs", "2"]} | ({} if args is SAMPLED else {"single": []})
    for name, cmd in launched.items():
        out = tmp_path / f"{name}.json"
        res = run(args + ["--output", str(out)], cmd=cmd)
        assert res.returncode == 0, f"{name}: {res.stderr[-2000:]}"
        reports[name] = json.loads(out.read_text())
    for name, extra in here.items():
        out = tmp_path / f"{name}.json"
        assert main(["train", *args, *extra, "--output", str(out)]) == 0, name
        reports[name] = json.loads(out.read_text())
    losses, test_acc = run_local(_library_run, 2, args is SAMPLED)[0]       # the library, no launcher
    for name, r in reports.items():
        assert r["world_size"] == (1 if name == "single" else 2), name
        assert r["transport"] == ("mpi" if name == "mpirun" else "torch"), name      # --transport auto
        np.testing.assert_allclose([e["loss"] for e in r["epochs"]], losses, rtol=1e-5, err_msg=name)
        assert r["final"]["test_acc"] == test_acc, name


def _library_run(comm, sampled):
    """The runs of QUICK and SAMPLED through the library API: (losses, final test accuracy)."""
    if sampled:
        cfg = TrainConfig(epochs=3, eval_every=0)
        t = MinibatchTrainer(cfg, comm, "sage:5,5", 64, bulk=2, split_graph=True)
    else:
        t = Trainer(TrainConfig(epochs=30, eval_every=0), comm)
    report = t.run(log=None)
    return [e["loss"] for e in report["epochs"]], report["final"]["test_acc"]


def _bad_inputs(tmp):
    good = write_graph(tmp / "good")
    nan = np.ones((6, 3), np.float32)
    nan[2, 1] = np.nan
    parts = {"short": np.array([0, 1, 0]), "big": np.array([0, 0, 0, 1, 1, 5]), "empty": np.array([0, 0, 0, 2, 2, 2])}
    for k, v in parts.items():
        np.save(tmp / f"{k}.npy", v)
    (tmp / "corrupt.npz").write_bytes(b"PK\x03\x04 not really a zip")
    return {
        "unknown dataset": (["--dataset", "no-such-graph"], "unknown dataset"),
        "missing file": (["--dataset", str(tmp / "absent.npz")], "no such file"),
        "corrupt file": (["--dataset", str(tmp / "corrupt.npz")], "cannot read"),
        "size mismatch": (["--dataset", write_graph(tmp / "mis", y=np.zeros(5, np.int64))], "labels"),
        "edge id >= n": (["--dataset", write_graph(tmp / "ids", edges=((0, 1), (2, 9)))], "[0, 6)"),
        "NaN features": (["--dataset", write_graph(tmp / "nan", x=nan)], "NaN"),
        "nprocs < 1": (["--nprocs", "0"], "--nprocs"),
        "more ranks than nodes": (["--dataset", good, "--nprocs", "7"], "only 6 nodes"),
        "partition length": (["--dataset", good, "--nprocs", "2", "--partition", str(tmp / "short.npy")],
                             "length 3"),
        "parts != row blocks": (["--dataset", good, "--nprocs", "2", "--partition", str(tmp / "big.npy")],
                                "holds 6 parts but --algo 1d-halo on grid 2 needs 2 row blocks"),
        "empty part": (["--dataset", good, "--nprocs", "3", "--partition", str(tmp / "empty.npy")], "empty"),
        "bad dropout": (["--dropout", "1"], "--dropout"),
        "grid product": (["--nprocs", "4", "--algo", "2d", "--grid", "3x3"], "has 9 processes but the job has 4"),
        "mpi without mpirun": (["--transport", "mpi", "--nprocs", "2"], "needs a job started by mpirun"),
    } | ({} if torch.cuda.is_available() else
         {"cuda without a GPU": (["--device", "cuda", "--nprocs", "2"], "use --device cpu")})


def test_bad_input_one_clear_line(tmp_path, capfd):
    """Each bad input ends `spgnn train` with a non-zero exit status and one line on stderr that names it, no
    traceback. The cases run through `main` in this process (capfd holds fd 2, which ranks an --nprocs case starts
    write to as well; each is refused before any starts, and a spawned process per case cost 1-2 s of imports),
    and one of them through ``python -m spgnn`` too: the exit status and stderr of the process itself."""
    cases = _bad_inputs(tmp_path)
    for name, (args, needle) in cases.items():
        try:
            code = main(["train", *args, "--epochs", "1"])
        except SystemExit as e:                                       # argparse's refusal: the process's status
            code = e.code
        _one_clear_line(name, code, capfd.readouterr().err, needle)
    args, needle = cases["unknown dataset"]
    res = run(args + ["--epochs", "1"], timeout=120)
    _one_clear_line("unknown dataset (python -m spgnn)", res.returncode, res.stderr, needle)


def _one_clear_line(name, code, err, needle):
    lines = [x for x in err.splitlines() if x.strip()]
    assert code != 0, name
    assert len(lines) == 1 and lines[0].startswith("spgnn: error: "), f"{name}: {err[-1500:]}"
    assert needle in lines[0], f"{name}: {lines[0]}"
    assert "Traceback" not in err, name


@pytest.mark.skipif(not MPIRUN, reason="mpirun not found beside the interpreter or on PATH (pip install 'spgnn[mpi]')")
def test_bad_input_under_mpirun_exits_every_rank(tmp_path):
    res = run(["--partition", str(tmp_path / "nope.npy")],
              cmd=MPIRUN_ARGS + ["--oversubscribe", "-np", "3"] + SPGNN, timeout=120)
    assert res.returncode != 0
    assert res.stderr.count("spgnn: error: unknown partition") == 1


def test_rank_that_dies_does_not_hang_the_others(tmp_path):
    """Two ranks started by hand (the torchrun environment, no supervisor): once they train, kill one; the other
    exits with an error well within the collective timeout."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", WORLD_SIZE="2",
               MASTER_PORT=str(__import__("spgnn.comm.launch", fromlist=["x"]).free_port()))
    args = SPGNN + ["--epochs", "100000", "--eval-every", "0", "--timeout", "30"]
    procs = [subprocess.Popen(args, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE if r == 0 else None,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in procs[0].stdout], daemon=True).start()
    try:
        while not lines.get(timeout=300).startswith("epoch"):    # training has begun (a hang fails here)
            pass
        procs[1].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=90)                                # a hang past --timeout 30 fails here
        assert procs[0].returncode == 1
        assert "communication failed" in procs[0].stderr.read()
    finally:
        for p in procs:
            p.kill()


def test_auto_names_its_pick_where_the_run_says_what_it_trains(tmp_path, capsys):
    """The run's first line named "auto" where the report named the algorithm --algo auto picked."""
    out = tmp_path / "auto.json"
    assert main(["train", "--algo", "auto", "--epochs", "1", "--eval-every", "0", "--output", str(out)]) == 0
    picked = json.loads(out.read_text())["config"]["algo"]
    first = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("spgnn: gcn on cora"))
    assert picked != "auto" and f"), {picked} (--algo auto's pick) on 1 process(es)" in first


def test_help_shows_one_default_per_option():
    """An option whose help says its default (``(default: gloo figures ...)``, ``(the default)``) is not given a
    second one by the formatter; the others still are."""
    import re

    from spgnn.cli import build_parser

    subs = next(a for a in build_parser()._actions if a.choices).choices
    for name, parser in subs.items():
        for entry in re.split(r"\n  (?=-)", parser.format_help()):
            assert len(re.findall(r"\((the )?default\b", entry)) <= 1, (name, " ".join(entry.split()))
    assert "(default: 0.01)" in subs["train"].format_help()


def test_a_leading_tilde_of_an_output_is_the_home_folder(tmp_path, monkeypatch):
    """``--output=~/plan.json`` (which the shell does not expand) made a folder named ~ in the working folder, where
    --dataset's ~ was the home folder; every option naming a file or folder now expands it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert main(["cost", "--dataset", "cora", "--nprocs", "2", "--output=~/plans/plan.json"]) == 0
    assert json.loads((tmp_path / "home" / "plans" / "plan.json").read_text())["rows"]
    assert list((tmp_path / "work").iterdir()) == []
