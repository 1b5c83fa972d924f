"""The catalogue of bad input: each case is refused before any training with one ``spgnn: error:`` line that
names the problem (and the file), and exit code 2; what is right in an unusual form (edges as [2, E]) is read
right. Cases run in this process through `spgnn.cli.main` (fast); one runs two ranks, to show that a bad share
on one rank stops both with one line."""

import json
import math
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spgnn import DistGraph, build_model, cli
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.adjacency import ADJACENCIES, normalize
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import Graph
from spgnn.graph.pyg import from_pyg
from spgnn.jsonfile import json_safe
from spgnn.partition.partition import make_partition
from spgnn.partition.partitioned import InMemoryParts, PartitionedDataset, write_parts
from spgnn.partition.share import Share

N, F, C = 24, 4, 3
RING = np.stack([np.arange(N), (np.arange(N) + 1) % N], axis=1)       # [E, 2]
QUICK = ["--epochs", "2", "--hidden", "4", "--quiet", "--eval-every", "0"]


def edge_folder(folder, edges=RING, x=None, y=None, masks=None, name="edges.npy"):
    """An edge-list dataset folder: `edges` saved as given, features, labels and masks (defaults all good)."""
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / name, np.asarray(edges))
    np.save(folder / "features.npy", np.random.default_rng(0).standard_normal((N, F)).astype(np.float32)
            if x is None else x)
    np.save(folder / "labels.npy", np.arange(N) % C if y is None else y)
    split = {"train": np.arange(N) < 9, "val": (np.arange(N) >= 9) & (np.arange(N) < 15),
             "test": np.arange(N) >= 15} | (masks or {})
    for k, m in split.items():
        np.save(folder / f"{k}_mask.npy", m)
    return str(folder)


def text_edges(folder, text: str) -> str:
    """`edge_folder` with its edges as the text `text` (edges.txt)."""
    edge_folder(folder)
    (folder / "edges.npy").unlink()
    (folder / "edges.txt").write_text(text)
    return str(folder)


def meta_folder(folder, meta: str) -> str:
    """`edge_folder` with a meta.json of the text `meta`."""
    edge_folder(folder)
    (folder / "meta.json").write_text(meta)
    return str(folder)


def error_line(capsys, argv) -> tuple[int, str]:
    """Exit code and the one stderr line of `spgnn argv`; asserts there is one line and no epoch ran. (`capsys` or,
    where ranks are started, capfd.)"""
    code = cli.main(argv)
    out, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("spgnn: error: "), err[-2000:]
    assert "epoch" not in out and "final" not in out, out[-500:]
    return code, lines[0]


def bad_datasets(tmp):
    """{case: (dataset path, what the line must say)}."""
    x = np.random.default_rng(0).standard_normal((N, F)).astype(np.float32)
    nan, inf = x.copy(), x.copy()
    nan[5, 1] = nan[7, 0] = np.nan
    inf[3] = np.inf
    overlap = {"test": np.ones(N, bool)}
    np.savez(tmp / "outside.npz", edges=RING, features=x, labels=np.where(np.arange(N) == 4, 7, np.arange(N) % C),
             num_classes=C, train_mask=np.arange(N) < 9)
    return {
        "odd-sized edges": (edge_folder(tmp / "odd", RING.ravel()[:-1]), "edges.npy: edges must be a 2-D array"),
        "flat edges": (edge_folder(tmp / "flat", RING.ravel()), "got shape (48,)"),
        "2x2 edges": (edge_folder(tmp / "square", [[0, 1], [1, 2]]), "reads both as [E, 2] and as [2, E]"),
        "3 x E edges": (edge_folder(tmp / "three", np.zeros((3, 5), np.int64)), "edges must be a 2-D array [E, 2]"),
        "fractional ids": (edge_folder(tmp / "frac", RING + 0.5),
                           "must be whole numbers, 48 are not (first at (0, 0): 0.5)"),
        "string ids": (edge_folder(tmp / "str", RING.astype(str)), "must be integers"),
        "overlapping masks": (edge_folder(tmp / "overlap", masks=overlap), "nodes are in both the train and the test"),
        "stray label": (edge_folder(tmp / "stray", y=np.where(np.arange(N) == 0, 1000000, np.arange(N) % C)),
                        "labels must be class ids 0..C-1, C at most 65536 (the larger of the node count and "
                        "65536), found 1000000"),
        "labels 1..C": (edge_folder(tmp / "one", y=np.arange(N) % C + 1), "(first: class 0)"),
        "label outside 0..C-1": (str(tmp / "outside.npz"), "1 labels lie outside 0..2 (first at node 4: 7)"),
        "string features": (edge_folder(tmp / "strfeat", x=x.astype(str)), "features must be numbers"),
        "no feature columns": (edge_folder(tmp / "nofeat", x=np.zeros((N, 0), np.float32)), "0 columns"),
        "NaN features": (edge_folder(tmp / "nan", x=nan), "2 NaN or infinite values in 2 rows (first at node 5)"),
        "infinite features": (edge_folder(tmp / "inf", x=inf), "4 NaN or infinite values in 1 rows (first at node 3)"),
        "float64 features beyond float32": (edge_folder(tmp / "big", x=x.astype(np.float64) * 1e300),
                                           "feature values lie beyond float32's range"),
        "no training node": (edge_folder(tmp / "notrain", masks={"train": np.zeros(N, bool)}), "selects no node"),
    }


def test_bad_datasets_refused_before_training(tmp_path, capsys):
    for case, (path, needle) in bad_datasets(tmp_path).items():
        code, line = error_line(capsys, ["train", "--dataset", path, *QUICK])
        assert code == 2 and needle in line, f"{case}: {line}"
        assert path.rstrip("/").split("/")[-1] in line, f"{case} does not name the file: {line}"


def test_both_edge_layouts_read_the_same(tmp_path):
    """[E, 2] and PyG's [2, E] give one graph (a plain reshape of [2, E] read wrong pairs before)."""
    rows = load_dataset(edge_folder(tmp_path / "rows", RING))
    cols = load_dataset(edge_folder(tmp_path / "cols", RING.T))
    assert (rows.adj != cols.adj).nnz == 0 and rows.adj[1, 0] == 1 and rows.adj[2, 1] == 1 and rows.adj[2, 0] == 0
    whole = load_dataset(edge_folder(tmp_path / "whole", RING.astype(np.float64)))   # whole-number floats: fine
    assert (whole.adj != rows.adj).nnz == 0
    np.savez(tmp_path / "ei.npz", edge_index=RING.T, features=rows.x, labels=rows.y, train_mask=rows.train_mask)
    assert (load_dataset(str(tmp_path / "ei.npz")).adj != rows.adj).nnz == 0


def test_out_of_core_partitioner_checks_alike(tmp_path, capsys):
    """spgnn partition --out-of-core reads an edge-list folder in chunks: the same layouts, the same refusals."""
    folders = {}
    for name, edges in (("rows", RING), ("cols", RING.T)):
        src = edge_folder(tmp_path / name, edges)
        assert cli.main(["partition", "--dataset", src, "--out-of-core", "--nparts", "2", "--method", "block",
                         "--output", str(tmp_path / f"{name}-parts")]) == 0
        folders[name] = PartitionedDataset(tmp_path / f"{name}-parts")
    for p in range(2):
        a, b = folders["rows"].share(p), folders["cols"].share(p)
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    capsys.readouterr()
    for src, needle in ((edge_folder(tmp_path / "frac", RING + 0.5), "must be whole numbers"),
                        (edge_folder(tmp_path / "square", [[0, 1], [1, 2]]), "reads both as"),
                        (edge_folder(tmp_path / "one", y=np.arange(N) % C + 1), "(first: class 0)"),
                        (edge_folder(tmp_path / "ovl", masks={"test": np.ones(N, bool)}), "both the train and"),
                        (meta_folder(tmp_path / "meta", '{"directed": "false"}'), 'optional keys "directed"'),
                        # tracebacks, or a folder written with what training then refused
                        (edge_folder(tmp_path / "long", masks={"val": np.zeros(N + 3, bool)}),
                         f"the val mask has {N + 3} entries but the train mask {N}"),
                        (edge_folder(tmp_path / "longer", masks={k: np.arange(N + 3) % 3 == i for i, k in
                                                                  enumerate(("train", "val", "test"))}),
                         f"the train mask has shape ({N + 3},), expected ({N},)"),
                        (edge_folder(tmp_path / "nan", x=np.full((N, F), np.nan, np.float32)), "NaN or infinite"),
                        (text_edges(tmp_path / "head", "src dst\n0 1\n"), "head/edges.txt: expected two columns")):
        code, line = error_line(capsys, ["partition", "--dataset", src, "--out-of-core", "--nparts", "2",
                                         "--method", "block", "--output", str(tmp_path / "out")])
        assert code == 2 and needle in line, line
        assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*tmp*"))
    hashes = set()                                  # the graph's hash: the edges in order, whatever the chunk
    for chunk in (3, 7, 1000):
        out = tmp_path / f"chunk{chunk}"
        assert cli.main(["partition", "--dataset", str(tmp_path / "rows"), "--out-of-core", "--nparts", "2",
                         "--method", "block", "--chunk", str(chunk), "--output", str(out), "--quiet"]) == 0
        hashes.add(PartitionedDataset(out).info.graph_hash)
    assert len(hashes) == 1


def test_allow_overlap_trains_what_is_refused_otherwise(tmp_path, capsys):
    path = edge_folder(tmp_path / "overlap", masks={"test": np.ones(N, bool)})
    assert cli.main(["train", "--dataset", path, *QUICK, "--allow-overlap"]) == 0
    assert "final" in capsys.readouterr().out
    with pytest.raises(SpgnnError, match="both the train and the test mask"):       # the switch does not stick
        load_dataset(path)


def test_pyg_data_is_checked_alike():
    data = SimpleNamespace(edge_index=RING.T.astype(np.float32) + 0.25, x=np.ones((N, F), np.float32),
                           y=np.arange(N) % C, num_nodes=N, train_mask=np.arange(N) < 9, val_mask=None,
                           test_mask=None)
    with pytest.raises(SpgnnError, match="whole numbers"):
        from_pyg(data)
    data.edge_index, data.test_mask = RING.T, np.ones(N, bool)
    with pytest.raises(SpgnnError, match="both the train and the test mask"):
        from_pyg(data)
    data.test_mask = np.arange(N) >= 12         # one fixed split, or none: no other to choose (split was ignored)
    with pytest.raises(SpgnnError, match="^the PyG Data has one fixed split, asked for split 3$"):
        from_pyg(data, split=3)
    data.train_mask = None                      # validation/test masks were dropped for a random split
    with pytest.raises(SpgnnError, match="^the PyG Data: validation/test masks given without a training mask$"):
        from_pyg(data)
    data.test_mask = None
    with pytest.raises(SpgnnError, match="^the PyG Data has no fixed splits, so ':2' cannot pick one"):
        from_pyg(data, split=2)
    assert from_pyg(data).train_mask.sum() > 0                  # no masks: the per-class random split


def _parts(tmp, nparts=1):
    g = load_dataset(edge_folder(tmp / "src"))
    return write_parts(tmp / f"parts{nparts}", InMemoryParts(g, make_partition("block", g.adj, nparts)))


def _damage(folder, part, name, change):
    f = folder / f"part-{part:05d}" / f"{name}.npy"
    a = np.load(f)
    change(a)
    np.save(f, a)


def _no_key(folder):
    meta = json.loads((folder / "meta.json").read_text())
    del meta["graph"]["num_classes"]
    (folder / "meta.json").write_text(json.dumps(meta))


SHARE_DAMAGE = {
    "indices out of range": (lambda f: _damage(f, 0, "indices", lambda a: a.__setitem__(3, N + 5)),
                             "indices.npy holds 1 ids outside 0..23"),
    "label >= classes": (lambda f: _damage(f, 0, "y", lambda a: a.__setitem__(2, C)), "y.npy: 1 labels lie outside"),
    "NaN in x": (lambda f: _damage(f, 0, "x", lambda a: a.__setitem__((4, 0), np.nan)), "x.npy: features hold 1 NaN"),
    "meta.json without a key": (_no_key, "meta.json lacks the key 'num_classes'"),
    "overlapping masks": (lambda f: _damage(f, 0, "test_mask", lambda a: a.__setitem__(0, True)),
                          "in both the train and the test mask"),
    "indptr not CSR": (lambda f: _damage(f, 0, "indptr", lambda a: a.__setitem__(1, a[2] + 1)), "does not rise"),
}


def test_damaged_partitioned_folders_refused(tmp_path, capsys):
    for case, (damage, needle) in SHARE_DAMAGE.items():
        folder = _parts(tmp_path / case.replace(" ", "_"))
        damage(folder)
        code, line = error_line(capsys, ["train", "--dataset", str(folder), *QUICK])
        assert code == 2 and needle in line, f"{case}: {line}"


def test_damaged_block_stats_stop_every_rank_with_one_line(tmp_path, capfd):
    """block_stats.npz of the wrong shapes gave a ValueError traceback and a "communication failed" line. (P = 2: the
    --nprocs supervisor is `cli.main` here; capfd holds the ranks' stderr, fd 2, as well.)"""
    for P in (1, 2):
        folder = _parts(tmp_path / f"p{P}", nparts=P)
        np.savez(folder / "block_stats.npz", halo=np.zeros((3, 3), int), block_nnz=np.zeros((3, 3), int),
                 diagonal=np.zeros(3, int))
        said = f"block_stats.npz: halo is a int64 array of shape (3, 3), expected counts of shape ({P}, {P})"
        code, line = error_line(capfd, ["train", "--dataset", str(folder), *QUICK, *(["--nprocs", "2"] if P > 1
                                                                                      else [])])
        assert code == 2 and said in line, line


def test_out_of_core_errors_name_the_file_and_what_they_counted(tmp_path):
    """The out-of-core reader named `dataset 'X'` for bad labels, and counted the NaN features of the stretch of rows
    it had read as if they were the file's."""
    from spgnn.partition.ooc import partition_edge_folder

    x = np.ones((N, F), np.float32)
    x[[2, 20], 0] = np.nan
    with pytest.raises(SpgnnError, match=r"nan/features\.npy: features hold 1 NaN or infinite values in 1 rows "
                                         r"\(first at node 2\).*\(counted in nodes 2\.\.2 alone, .*may hold more\)"):
        partition_edge_folder(edge_folder(tmp_path / "nan", x=x), tmp_path / "out", 1, "block", chunk=16)
    for name, y, said in (("neg", np.arange(N) % C - 1, "labels must be class ids >= 0, found -1"),
                          ("frac", np.arange(N) * 0.5, "labels must be whole numbers")):
        with pytest.raises(SpgnnError, match="^" + re.escape(f"{tmp_path / name / 'labels.npy'}: {said}")):
            partition_edge_folder(edge_folder(tmp_path / name, y=y), tmp_path / "out", 1, "block")


def test_bad_share_on_one_rank_stops_both(tmp_path, capfd):
    """A share only rank 1 reads is bad: both ranks stop, one line said, code 2 (the --nprocs supervisor is `cli.main`
    here; capfd holds the ranks' stderr, fd 2, as well)."""
    folder = _parts(tmp_path, nparts=2)
    _damage(folder, 1, "x", lambda a: a.__setitem__((0, 0), np.inf))
    code, line = error_line(capfd, ["train", "--dataset", str(folder), "--nprocs", "2", *QUICK])
    assert code == 2 and "part-00001/x.npy: features hold 1 NaN or infinite values" in line, line


def test_files_read_or_written_later_checked_at_start(tmp_path, capsys):
    good = edge_folder(tmp_path / "good")
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "nokey.json").write_text("{}")
    (tmp_path / "file").write_text("")
    cases = {
        "missing calibration": (["--calibration", str(tmp_path / "absent.json")],
                                "absent.json (No such file or directory): give a file written"),
        "malformed calibration": (["--calibration", str(tmp_path / "bad.json")], "bad.json (JSONDecodeError"),
        "calibration without fits": (["--calibration", str(tmp_path / "nokey.json")], "KeyError: 'collectives'"),
        "unwritable output": (["--output", str(tmp_path / "file" / "r.json")], "cannot write the report"),
        "output is a folder": (["--output", str(tmp_path)], "cannot write the report"),
        "unwritable checkpoint": (["--checkpoint", str(tmp_path / "file" / "ck")], "cannot write checkpoints"),
        "resume without checkpoint": (["--resume", str(tmp_path)], "holds no checkpoint"),
        "checkpoints every k epochs to nowhere": (["--checkpoint-every", "5"], "--checkpoint-every goes with "
                                                  "--checkpoint DIR"),          # ran, and wrote nothing
    }
    sq, rows = tmp_path / "sq.npz", load_dataset(good)
    np.savez(sq, edges=RING, features=rows.x, labels=rows.y, train_mask=rows.train_mask)
    (tmp_path / "ck").mkdir()
    torch.save({}, tmp_path / "ck" / "checkpoint.pt")
    cases |= {      # an output that is one of the run's inputs: the dataset, the calibration, the checkpoint replaced
        "output is the dataset": (["--dataset", str(sq), "--output", str(sq)], f"--output {sq} is {sq}, which the "),
        "output is the calibration": (["--calibration", str(tmp_path / "bad.json"), "--output",
                                       str(tmp_path / "bad.json")], "which the run reads"),
        "output is the checkpoint": (["--resume", str(tmp_path / "ck"), "--output",
                                      str(tmp_path / "ck" / "checkpoint.pt")], "which the run reads"),
    }
    for case, (args, needle) in cases.items():
        code, line = error_line(capsys, ["train", "--dataset", good, *QUICK, *args])
        assert code == 2 and needle in line, f"{case}: {line}"
    assert not (tmp_path / "absent.json").exists() and (tmp_path / "bad.json").read_text() == "{"
    for args, needle in ((["--json", str(tmp_path / "file" / "m.json")], "cannot write the metrics to"),
                         (["--plot", str(tmp_path / "file" / "m.png")], "cannot write the chart to"),
                         (["--output", str(tmp_path / "file" / "p.npz")], "cannot write the partition to"),
                         (["--json", str(sq)], "which the run reads")):       # after the partitioning, or never
        code, line = error_line(capsys, ["partition", "--dataset", str(sq), "--nparts", "2", "--method", "metis",
                                         *args])
        assert code == 2 and needle in line, line


@pytest.mark.parametrize("args, needle", [
    (["--nprocs", "2,x"], "--nprocs takes comma-separated process counts"),
    (["--nprocs", "0,4"], "--nprocs takes comma-separated process counts"),
    (["--layers", "0"], "--layers must be at least 1"),
    (["--hidden", "-1"], "--hidden must be at least 1"),
    (["--nodes", "-100000"], "--nodes -100000 --nnz 10000: n must be a whole number of at least 1"),  # "best"
    (["--nodes", "0.5"], "n must be a whole number of at least 1"),                                  # a traceback
    (["--nodes", "inf"], "n must be a whole number of at least 1"),                                  # a traceback
    (["--nprocs", "100000000"], "spgnn cost models up to 8192 processes"),          # 71 PiB asked of numpy
    (["--nodes", "100", "--nnz", "10", "--nprocs", "16,20000"], "spgnn cost models up to"),
    (["--nnz", "1e9"], "--nodes 1000 --nnz 1e+09: n must be a whole number of at least 1 and nnz between 0 and n²"),
])
def test_cost_arguments(args, needle, capsys):
    code, line = error_line(capsys, ["cost", "--nodes", "1000", "--nnz", "10000", *args])
    assert code == 2 and needle in line


@pytest.mark.parametrize("args, needle", [              # tracebacks, or a failure blamed on the network or the lr
    (["--seed", "-1", "--partition", "random"], "--seed must lie in [0, 2^63), got -1"),
    (["--seed", str(2**64)], "--seed must lie in [0, 2^63)"),
    (["--lr", "inf"], "--lr must be a positive number (below 3.4e37: Adam's first step, 10·lr, is a float32)"),
    (["--lr", "1e300"], "--lr must be a positive number (below 3.4e37"),   # Adam's overflow
    (["--weight-decay", "nan"], "--weight-decay must be a non-negative number (below float32's 3.4e38), got nan"),
    (["--timeout", "1e12"], "--timeout must be a number of seconds of at least 1 and at most 2592000"),
    (["--timeout", "inf"], "--timeout must be a number of seconds of at least 1"),
    (["--timeout", "0.001"], "--timeout must be a number of seconds of at least 1"),
    (["--batch-norm", "--layers", "1"], "and none of the gcn's layers (GCNConv) is one"),         # no norm at all
    (["--batch-norm", "--layers", "1", "--model", "appnp"], "none of the appnp's layers (Linear, APPNP) is one"),
])
def test_numbers_no_run_can_use_are_one_line(args, needle, capsys):
    code, line = error_line(capsys, ["train", *QUICK, *args])
    assert code == 2 and needle in line, line


def test_diverging_run_stops_at_its_epoch_and_writes_valid_json(tmp_path, capsys):
    """--lr 1e30, or finite features of 3e38: the run stops at the first non-finite loss with one line naming
    the epoch and the checkpoint still good (exit 1), and the report so far holds no NaN token."""
    x = np.full((N, F), 3e38, np.float32)
    for case, args in {"lr": ["--dataset", edge_folder(tmp_path / "ok"), "--lr", "1e30"],
                       "huge": ["--dataset", edge_folder(tmp_path / "huge", x=x), "--feature-norm", "none"]}.items():
        report, ck = tmp_path / f"{case}.json", tmp_path / f"ck-{case}"
        code = cli.main(["train", *args, "--epochs", "20", "--hidden", "4", "--quiet", "--output", str(report),
                         "--checkpoint", str(ck), "--checkpoint-every", "1"])
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert code == 1 and len(err) == 1, err
        epoch = int(err[0].split(" at epoch ")[1].split(";")[0])
        assert err[0].startswith("spgnn: error: the training loss became nan at epoch") and epoch < 19
        data = json.loads(report.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the report"))
        assert len(data["epochs"]) == epoch and all(math.isfinite(e["loss"]) for e in data["epochs"])
        assert data["final"] is None and data["predicted"] is None      # no final evaluation; a prediction of
        if epoch:                                                       # the run it did not finish left out
            assert f"{ck}/checkpoint.pt holds epoch {epoch - 1}, from before: resume from it with a lower" in err[0]


def test_scores_that_overflow_stop_the_run_as_diverged(tmp_path, capsys):
    """Weights of 1e30 are finite, yet a binary task's scores overflow: its ROC-AUC raised 'scores must be finite'
    in a traceback, with no report."""
    report = tmp_path / "r.json"
    code = cli.main(["train", "--dataset", edge_folder(tmp_path / "two", y=np.arange(N) % 2), "--task", "binary",
                     "--lr", "1e30", "--epochs", "20", "--hidden", "4", "--quiet", "--output", str(report)])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert code == 1 and len(err) == 1 and " at epoch " in err[0], err
    assert "Traceback" not in err[0] and json.loads(report.read_text())["final"] is None


def test_json_safe_leaves_no_nan():
    obj = {"a": [1.0, float("nan"), {"b": float("inf")}], "c": (float("-inf"), 2)}
    assert json_safe(obj) == {"a": [1.0, None, {"b": None}], "c": [None, 2]}


def test_options_a_mode_never_reads_are_refused(tmp_path, capsys):
    """An option the command would accept and then not use in this mode is one line before any work, never a run
    that reports it as if it had been used."""
    good = edge_folder(tmp_path / "g", RING)
    saved = tmp_path / "p.npz"
    assert cli.main(["partition", "--dataset", good, "--nparts", "2", "--method", "random",
                     "--output", str(saved)]) == 0
    for order in ("rcm", "natural"):
        assert cli.main(["partition", "--dataset", good, "--nparts", "1", "--method", "block", "--node-order", order,
                         "--output", str(tmp_path / order)]) == 0
    capsys.readouterr()
    cases = {
        "sampler-only flags, full batch": (["train", "--dataset", good, "--bulk", "4", "--split-graph"],
                                           "--bulk and --split-graph go with --sampler (minibatch training)"),
        "auto picks the grid": (["train", "--dataset", good, "--algo", "auto", "--grid", "2x2"],
                                "--grid with --algo auto: auto chooses the algorithm and its grid"),
        # refused after auto's pick and the partitioning, and --prefetch without overlap was ignored
        "auto with one algorithm's option": (["train", "--dataset", good, "--algo", "auto", "--prefetch", "2"],
                                             "--prefetch with --algo auto: auto chooses the algorithm"),
        "rounds in flight without overlap": (["train", "--dataset", good, "--algo", "sar", "--prefetch", "2",
                                              "--overlap", "off"], "--prefetch 2 keeps ring rounds in flight while "
                                             "one is computed, which --overlap off never does"),
        "another order than the folder's": (["train", "--dataset", str(tmp_path / "rcm"), "--node-order", "natural"],
                                            "is partitioned already (in rcm node order): --node-order natural does "
                                            "not apply to it"),
        "a partition file for a partitioned folder": (["train", "--dataset", str(tmp_path / "rcm"), "--partition",
                                                      str(saved)],
                                                     "is partitioned already (by block, seed 0, 1 parts): --partition"),
        "statistics with a dataset": (["cost", "--dataset", good, "--nodes", "100", "--features", "8"],
                                      "--nodes and --features describe a graph by statistics, --dataset by its own"),
        "a dataset's flags with statistics": (["cost", "--nodes", "100", "--nnz", "400", "--data-dir", "x"],
                                              "--data-dir goes with --dataset, not with --nodes and --nnz"),
        "parameters of a saved partition": (["partition", "--dataset", good, "--nparts", "2", "--method", str(saved),
                                             "--param", "gamma=2"], "go with a partitioner, not with the saved"),
        "out-of-core parameters": (["partition", "--dataset", good, "--out-of-core", "--nparts", "2", "--method",
                                    "ldg", "--param", "gamma=2", "--output", str(tmp_path / "o")],
                                   "unknown partitioner parameter(s) gamma: this partitioner takes none"),
        "out-of-core tables": (["partition", "--dataset", good, "--out-of-core", "--nparts", "2", "--method",
                                "block", "--output", str(tmp_path / "o"), "--json", str(tmp_path / "m.json")],
                               "--json: --out-of-core writes the partitioned folder without holding the graph"),
        "an order out-of-core does not make": (["partition", "--dataset", good, "--out-of-core", "--nparts", "2",
                                                "--method", "block", "--node-order", "rcm", "--output",
                                                str(tmp_path / "o")], "--node-order rcm orders each part by its "
                                               "diagonal block, which --out-of-core never holds"),
        "a chunk read in memory": (["partition", "--dataset", good, "--nparts", "2", "--method", "block", "--chunk",
                                    "64"], "--chunk sets how much --out-of-core reads at a time"),
        "an .npy output": (["partition", "--dataset", good, "--nparts", "2", "--method", "block", "--output",
                            str(tmp_path / "p.npy")], "a partition is saved as an .npz"),   # became a folder
        "an order an .npz does not keep": (["partition", "--dataset", good, "--nparts", "2", "--method", "block",
                                            "--node-order", "natural", "--output", str(tmp_path / "q.npz")],
                                           "--node-order orders the nodes of a partitioned folder"),
    }
    for case, (argv, needle) in cases.items():
        code, line = error_line(capsys, argv + (QUICK if argv[0] == "train" else []))
        assert code == 2 and needle in line, f"{case}: {line}"
    assert not (tmp_path / "o").exists() and not (tmp_path / "q.npz").exists()
    assert cli.main(["train", "--dataset", str(tmp_path / "natural"), "--node-order", "natural", *QUICK]) == 0
    # the folder's own partition file applies; the report says what ran, not the defaults it kept (block, rcm)
    assert cli.main(["partition", "--dataset", good, "--nparts", "1", "--method", "random", "--output",
                     str(tmp_path / "r1.npz")]) == 0
    assert cli.main(["partition", "--dataset", good, "--nparts", "1", "--method", "random", "--node-order",
                     "natural", "--output", str(tmp_path / "random")]) == 0
    report = tmp_path / "report.json"
    assert cli.main(["train", "--dataset", str(tmp_path / "random"), "--partition", str(tmp_path / "r1.npz"),
                     "--output", str(report), *QUICK]) == 0
    ran = json.loads(report.read_text())["config"]
    assert (ran["partition"], ran["node_order"]) == ("random", "natural")
    with pytest.raises(SystemExit):             # calibrate reads no calibration
        cli.build_parser().parse_args(["calibrate", "--calibration", "f.json"])
    capsys.readouterr()


def test_parameters_the_graph_and_partition_api_would_drop_are_refused():
    """Each of these returned an answer that ignored a parameter (or a wrong one) before."""
    g = load_dataset("cora")
    two = make_partition("block", g.adj, 2)
    with pytest.raises(SpgnnError, match="^the gcn block row of part 1 needs its remote columns' degrees: pass"):
        Share.of(g, two, 1).normalized("gcn")                   # remote degrees read at wrapped-around indices
    whole = Share.of(g, make_partition("block", g.adj, 1), 0).normalized("gcn")     # one part: no remote columns
    assert abs(whole - normalize(g.adj, "gcn")).max() < 1e-6
    with pytest.raises(SpgnnError, match=r"^part -1 of a partition into 2 parts: it must lie in \[0, 2\)$"):
        Share.of(g, two, -1)                                    # an empty share
    with pytest.raises(SpgnnError, match="^partitioner parameter.s. gamma go with a partitioner, not with a part"):
        make_partition(np.arange(g.n) % 2, g.adj, 2, gamma=2.0)
    # a Partition made before: taken whole (it was 'partition vector has length 2'), or refused for another P
    again = make_partition(make_partition("random", g.adj, 2, seed=3), g.adj, 2)
    assert np.array_equal(again.parts, make_partition("random", g.adj, 2, seed=3).parts)
    assert again.info["method"] == "random" and again.info["seed"] == 3
    with pytest.raises(SpgnnError, match="^a Partition into 2 parts, but 1 parts"):
        DistGraph(graph=g, parts=two)
    with pytest.raises(SpgnnError, match=r"^the graph in memory \(cora\) and dataset='citeseer' both name"):
        DistGraph(graph=g, dataset="citeseer")                  # trained on cora, reported as citeseer
    weighted = Graph(g.adj.copy(), g.x, g.y, g.train_mask, g.val_mask, g.test_mask, name=g.name)
    weighted.adj.data[:2] = [np.nan, -1.0]
    with pytest.raises(SpgnnError, match="^dataset 'cora': 2 edge values of the adjacency are NaN, infinite or "):
        weighted.validate()                                     # written to a folder that training then refused
    pyg = SimpleNamespace(edge_index=np.array([[0, 1, 2], [1, 2, 0]]), x=np.ones((3, 2), np.float32),
                          y=np.array([[0, 1], [1, 0], [1, 1]], np.float32))
    assert from_pyg(pyg).targets == 2                          # n×t targets were flattened: '6 labels for 3 nodes'
    with pytest.raises(SpgnnError, match="^fennel's nu must be a number of at least 1 .* got 0.5$"):
        make_partition("fennel", g.adj, 4, nu=0.5)              # raised to 1, reported as 0.5
    y = np.zeros((N, 3), np.float32)
    masks = np.arange(N) < 9, np.zeros(N, bool), np.arange(N) >= 9
    with pytest.raises(SpgnnError, match="num_classes 10 but y holds 3 binary targets a node"):
        Graph(sp.eye(N, format="csr"), np.ones((N, F), np.float32), y, *masks, num_classes=10)
    assert Graph(sp.eye(N, format="csr"), np.ones((N, F), np.float32), y, *masks).num_classes == 3


def test_what_the_model_and_layout_api_would_drop_is_refused():
    """Each of these was accepted and then ignored, or answered wrongly, before."""
    with pytest.raises(SpgnnError, match="^build_model: no registered layer takes step; --model appnp takes steps, "):
        build_model("appnp", 5, 3, step=3)                      # a typo: steps stayed 10
    with pytest.raises(SpgnnError, match="^--steps must be at least 1, got 0$"):
        build_model("appnp", 5, 3, steps=0)                     # the identity
    assert build_model("gcn", 5, 3, heads=4).layers[0].f_in == 5     # another layer's option: ignored, as documented
    assert len(build_model("gcnii", 5, 3, layers=1, batch_norm=True).norms) == 2      # its one layer is hidden
    from spgnn.layers.appnp import APPNP
    from spgnn.layers.gat import GATConv
    from spgnn.layers.gcnii import GCN2Conv
    for make, needle in ((lambda: build_model("gcn", 5, 3, layers=0), "build_model: f_in, classes, hidden and layers"),
                         (lambda: build_model("gcnii", 5, 3, hidden=0), "build_model: f_in, classes, hidden and"),
                         (lambda: GCN2Conv(4, layer=0), "GCN2Conv: layer must be at least 1"),     # ZeroDivisionError
                         (lambda: GCN2Conv(4, theta=-5), "GCN2Conv: layer must be at least 1, theta positive"),
                         (lambda: APPNP(4, alpha=3), "APPNP: steps must be at least 1 and alpha in"),
                         (lambda: GATConv(4, 4, heads=0), "GATConv: heads must be at least 1"),     # each built
                         (lambda: build_model("sage", 5, 3, layers=1, batch_norm=True), "batch norm follows each")):
        with pytest.raises(SpgnnError, match=f"^{re.escape(needle)}"):
            make()
    with pytest.raises(SpgnnError, match="^memory_per_rank predicts each rank's peak memory by the model's"):
        DistGraph(dataset="cora", memory_per_rank="1GB")        # predicted for the built-in gcn, not the user's
    sum_of = type(ADJACENCIES["sum"])
    with pytest.raises(SpgnnError, match="^the adjacency 'sum' given is not the one registered under that name"):
        DistGraph(dataset="cora", adjacency=sum_of())           # laid out as the registered "sum"
    with pytest.raises(SpgnnError, match="^DistGraph does not read epochs, heads: options of the model, its "):
        DistGraph(dataset="cora", epochs=100, heads=2)          # set up as if they had been read
    g = DistGraph(dataset="cora")
    with pytest.raises(SpgnnError, match="^dataset 'cora' has 7 classes, not binary targets"):
        g.binary_cross_entropy(torch.zeros(g.n, 1))             # class ids 0..6 taken as targets
    for loss in (g.cross_entropy, g.accuracy):
        with pytest.raises(SpgnnError, match=r"^logits of shape \(2708, 10\): this rank holds columns 0:7 of the 7"):
            loss(torch.zeros(g.n, 10))                          # a value that depended on the layout
    assert g.cross_entropy(torch.zeros(g.n, 7)).item() == pytest.approx(math.log(7))


def test_a_partitioned_folder_replaces_only_what_it_wrote(tmp_path, capsys, monkeypatch):
    """--output DIR deleted whatever was there: a user's folder, the edge-list folder it was made from, the current
    folder. Now only nothing, an empty folder or a partitioned folder is replaced, and the rest is refused before
    any work."""
    src = edge_folder(tmp_path / "src", RING)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    monkeypatch.chdir(tmp_path)
    argv = ["partition", "--dataset", src, "--nparts", "2", "--method", "block", "--output"]
    for out, ooc, needle in ((str(mine), [], "exists and is not a partitioned dataset folder"),
                             (src, ["--out-of-core"], "is the dataset it is made from"),
                             (".", [], "holds the current folder"), ("..", [], "holds the current folder"),
                             # (after partitioning: "cannot write the partitioned dataset ... Not a directory")
                             (str(mine / "notes.txt" / "out"), [], "notes.txt is a file): name a folder in a "),
                             (str(mine / "notes.txt" / "out"), ["--out-of-core"], "notes.txt is a file)")):
        code, line = error_line(capsys, argv + [out] + ooc)
        assert code == 2 and needle in line, line
    assert (mine / "notes.txt").read_text() == "precious" and (tmp_path / "src" / "edges.npy").is_file()
    (tmp_path / "empty").mkdir()
    for out in ("empty", "new", "new"):                         # empty, absent, and a partitioned folder again
        assert cli.main(argv + [out]) == 0 and (tmp_path / out / "meta.json").is_file()


def _launched_by_hand(argvs) -> list[str]:
    """The stderr of ranks started as torchrun starts them, rank r with the command line argvs[r] (after
    ``spgnn train``), once each has ended with code 2."""
    from spgnn.comm.launch import free_port

    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "spgnn", "train", *argv],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(len(argvs)), LOCAL_RANK=str(r),
                                       LOCAL_WORLD_SIZE=str(len(argvs)), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), TORCHELASTIC_RUN_ID="by-hand"),
                              stderr=subprocess.PIPE, text=True) for r, argv in enumerate(argvs)]
    errs = [p.communicate(timeout=300)[1] for p in procs]      # a hang fails here; --timeout would end it at 120 s
    assert [p.returncode for p in procs] == [2] * len(argvs), errs
    return errs


def test_a_launched_job_stops_every_rank_at_a_bad_path(tmp_path):
    """Under torchrun, srun or mpirun, rank 0 alone checked the files and stopped before joining: the others waited
    out --timeout and then blamed the network. Now rank 0 checks them once all have joined, and all stop."""
    (tmp_path / "file").write_text("")
    errs = _launched_by_hand([[*QUICK, "--timeout", "120", "--output", str(tmp_path / "file" / "r.json")]] * 2)
    assert errs[0].strip().endswith("give --output a writable file path") and not errs[1].strip(), errs


def test_ranks_given_different_options_are_refused():
    """Ranks started by hand with different flags trained each by its own learning rate to a report that was no
    one's, or (other --epochs) waited out --timeout and blamed the network."""
    errs = _launched_by_hand([[*QUICK, "--timeout", "120", *lr] for lr in (["--lr", "0.01"], ["--lr", "0.5"],
                                                                            ["--lr", "0.01"])])
    assert errs[0].strip() == "spgnn: error: the processes of this job were given different --lr: 0.01 on rank 0, " \
        "0.5 on rank 1: start every process with the same options" and not errs[1].strip(), errs


def test_figures_of_no_nodes_and_of_the_wrong_kind_are_said(tmp_path, capsys):
    """A graph without validation nodes reported val_acc 0.0 and made epoch 0 the best for good; a split name given
    as a string was taken letter by letter; class figures of a graph with binary targets failed inside torch; a
    task whose evaluate named its figures otherwise than its metric ended in a KeyError after training."""
    report = tmp_path / "r.json"
    path = edge_folder(tmp_path / "noval", masks={"val": np.zeros(N, bool)})
    assert cli.main(["train", "--dataset", path, "--epochs", "3", "--hidden", "4", "--quiet", "--output",
                     str(report)]) == 0
    r = json.loads(report.read_text())
    assert all(e["val_acc"] is None for e in r["epochs"]) and r["best"]["epoch"] == 2 and r["best"]["val_acc"] is None
    for split in ([], ["--split-graph", "--nprocs", "2"]):          # minibatch said 0.0 (both ways of holding it)
        assert cli.main(["train", "--dataset", path, "--epochs", "3", "--hidden", "4", "--quiet", "--sampler",
                         "sage:5,5", "--batch-size", "8", "--output", str(report), *split]) == 0
        r = json.loads(report.read_text())
        assert all(e["val_acc"] is None for e in r["epochs"]) and r["best"]["epoch"] == 2, (split, r["best"])
    g = DistGraph(dataset="cora")
    logits = torch.zeros(g.n, 7)
    assert set(g.accuracy(logits, "val")) == {"val_acc"}
    with pytest.raises(SpgnnError, match="^the figures of a split take split names"):
        g.accuracy(logits, [g.masks["val"]])
    targets = edge_folder(tmp_path / "targets", y=(np.arange(N)[:, None] % np.array([2, 3]) == 0).astype(float))
    t = DistGraph(dataset=targets)
    for fn in (t.accuracy, t.cross_entropy):
        with pytest.raises(SpgnnError, match="is of class labels; dataset .* has 2 binary targets per node"):
            fn(torch.zeros(N, 2))


def test_a_split_index_of_an_edge_folder_is_said_to_have_none(tmp_path):
    """FOLDER:1 of an edge-list folder was 'unknown dataset', though the reader explains that a folder has one
    fixed split (FOLDER:0 is that split)."""
    path = edge_folder(tmp_path / "edges")
    with pytest.raises(SpgnnError, match="has one fixed split .*, so ':1' cannot pick another"):
        load_dataset(f"{path}:1")
    assert load_dataset(f"{path}:0").n == N


def test_only_a_collective_that_failed_is_called_a_communication_failure(monkeypatch, capsys):
    """--hidden 100000000 (out of memory) and an overflow in Adam were both reported as 'communication failed;
    another process probably exited or stalled'."""
    from spgnn.comm import autograd, comm

    def raiser(message, frame=None):
        def command(args, argv):
            if frame:                                         # raised from a frame of that file
                exec(compile("raise RuntimeError(message)", frame, "exec"), {"message": message})
            raise RuntimeError(message)
        return command

    monkeypatch.setenv("RANK", "0")                 # a rank of two: at P = 1 no peer is blamed
    monkeypatch.setenv("WORLD_SIZE", "2")
    for command, said in ((raiser("Connection reset by peer", comm.__file__), "communication failed"),
                          (raiser("DefaultCPUAllocator: can't allocate memory: you tried"), "out of memory"),
                          (raiser("DefaultCPUAllocator: can't allocate memory", comm.__file__), "out of memory"),
                          (raiser("an SpMM's own failure", autograd.__file__), "Traceback"),   # under its wrapper
                          (raiser("value cannot be converted to type float without overflow"), "Traceback")):
        monkeypatch.setitem(cli.COMMANDS, "plot", command)
        assert cli.main(["plot", "r.json", "--output", "p.png"]) == 1
        err = capsys.readouterr().err
        assert said in err and ("communication failed" in err) == (said == "communication failed"), err
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setitem(cli.COMMANDS, "plot", raiser("Connection reset by peer", comm.__file__))
    assert cli.main(["plot", "r.json", "--output", "p.png"]) == 1
    assert "communication failed" not in capsys.readouterr().err


def _overflow_on_one_rank(comm):
    """A binary run whose one isolated test node has features of 3e38: its score alone overflows."""
    from spgnn.train.fullbatch import Trainer
    from tests.graphs import small_graph

    g = small_graph(n=40, f=3, classes=2, seed=1)                      # node 39 has no edges
    x, test = g.x.copy(), g.test_mask.copy()
    x[39], test[39] = np.float32(3e38), True
    g = Graph(g.adj, x, g.y, g.train_mask & (np.arange(40) != 39), g.val_mask & (np.arange(40) != 39), test,
              name="overflow-one-node", num_classes=2)
    cfg = dict(model="sage", task="binary", epochs=2, eval_every=1, hidden=16, layers=3, dropout=0.0,
               feature_norm="none", timeout=20)
    return Trainer(TrainConfig(**cfg), comm, graph=g).run(log=None).get("stopped")


def test_a_score_that_overflows_on_one_rank_stops_every_rank_alike():
    """Only the rank holding the overflowing score raised; the others were inside the ranking's exchanges, which
    then met the report's: an IndexError or ValueError, no report."""
    from spgnn.comm.launch import run_local

    stopped = run_local(_overflow_on_one_rank, 3, timeout_s=30)
    assert len(set(stopped)) == 1 and stopped[0].startswith("the model's scores became NaN or infinite at epoch 0")


def test_an_edge_of_weight_zero_is_none():
    """Graph kept explicit zeros: GAT, which attends over the pattern, attended over them on every layout while the
    serial reference (whose A + I drops them) did not."""
    a = sp.csr_matrix((np.array([1.0, 0.0, 2.0, 0.0]), (np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0]))), shape=(4, 4))
    g = Graph(a, np.ones((4, 2), np.float32), np.arange(4) % 2, np.ones(4, bool), np.zeros(4, bool), np.zeros(4, bool))
    assert g.nnz == 2 and (g.adj.data != 0).all()


def test_numpy_out_of_memory_is_one_line(monkeypatch, capsys):
    """numpy's failed allocation is a MemoryError, not torch's RuntimeError: it was a page of traceback."""
    def short_of_memory(args, argv):
        raise MemoryError("Unable to allocate 7.28 TiB for an array with shape (1000000000001,) and data type int64")

    monkeypatch.setitem(cli.COMMANDS, "train", short_of_memory)
    assert cli.main(["train", "--epochs", "1"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "spgnn: error: rank 0: out of memory (Unable to allocate 7.28 TiB for an array with shape (1000000000001,) and "
        "data type int64): use more processes, a smaller model, or spgnn cost --memory-per-rank to find a layout that "
        "fits"]


@pytest.mark.parametrize("command, argv, remedy", [
    ("cost", ["cost", "--nodes", "10", "--nnz", "10"], "give smaller widths (--hidden, --features)"),
    ("calibrate", ["calibrate"], "give smaller --sizes"),
    ("partition", ["partition", "--nparts", "2", "--method", "block"], "with --out-of-core"),
    ("train", ["train"], "spgnn cost --memory-per-rank to find a layout that fits"),
])
def test_out_of_memory_advises_what_the_command_can_change(command, argv, remedy, monkeypatch, capsys):
    """Every command out of memory advised "use more processes, a smaller model, or spgnn cost --memory-per-rank":
    nonsense inside spgnn cost (whose model of --hidden 100000000000 ran out), calibrate or partition."""
    def short_of_memory(args, argv):
        raise MemoryError("Unable to allocate 7.28 TiB for an array with shape (1000000000001,) and data type int64")

    monkeypatch.setitem(cli.COMMANDS, command, short_of_memory)
    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("spgnn: error: rank 0: out of memory (Unable to allocate 7.28 TiB") and remedy in line, line
    assert ("--memory-per-rank" in line) == (command == "train"), line
