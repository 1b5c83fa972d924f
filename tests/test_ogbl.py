"""OGB link-property-prediction folders (`spgnn.graph.ogbl`), written here in OGB's layout, of both kinds (collab's
edge_neg, judged by Hits@50; citation2's target_node_neg, judged by MRR): the loss curve and every figure are those of
one process at P = 2 on 1d-halo and 2d; the figures equal a plain computation of OGB's definitions from the files;
Hits@K and MRR over ranks equal them on one array; the ledger's phase edges is predicted; bad input is one line."""

import gzip
import pickle

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from spgnn import spmm
from spgnn.cli import _partition_once
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.graph.ogbl import read_held_out, read_pt
from spgnn.metrics import hits_at_k, mrr
from spgnn.partition.partitioned import PartitionedDataset
from spgnn.tasks.link import EdgeSplit, predict_edges
from spgnn.train.fullbatch import Trainer
from spgnn.train.link import LinkTrainer

N, F, EDGES, HELD, NEG, M, EPOCHS = 120, 8, 480, 30, 90, 20, 3
KINDS = {"hits": "ogbl_collab", "mrr": "ogbl_citation2"}
LAYOUTS = [("1d-halo", None), ("2d", "1x2")]


def _csv(path, a, fmt):
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.atleast_1d(a), fmt=fmt, delimiter=",")


def write_folder(root, kind, seed=0, save=torch.save, **change):
    """An OGB link folder of a random graph: raw/*.csv.gz of the training edges, split/time/{train,valid,test}.pt
    with HELD validation and test edges out of the graph and their negatives (`change` replaces split files'
    dicts: {"valid": {...}})."""
    rng = np.random.default_rng(seed)
    pairs = set()
    while len(pairs) < EDGES:
        u, v = rng.integers(0, N, 2)
        if u != v and (v, u) not in pairs:
            pairs.add((int(u), int(v)))
    edges = np.array(sorted(pairs))[rng.permutation(EDGES)]
    val, test, train = edges[:HELD], edges[HELD:2 * HELD], edges[2 * HELD:]
    folder = root / KINDS[kind]
    (folder / "raw").mkdir(parents=True)
    (folder / "split" / "time").mkdir(parents=True)
    _csv(folder / "raw" / "edge.csv.gz", train, "%d")
    _csv(folder / "raw" / "num-node-list.csv.gz", N, "%d")
    _csv(folder / "raw" / "num-edge-list.csv.gz", len(train), "%d")
    _csv(folder / "raw" / "node-feat.csv.gz", rng.standard_normal((N, F)), "%.6f")
    if kind == "hits":
        files = {"train": {"edge": np.concatenate([train, train[:5]]), "weight": np.ones(len(train) + 5),
                           "year": np.full(len(train) + 5, 2019)}} | {
            name: {"edge": e, "weight": np.ones(HELD), "year": np.full(HELD, 2019),
                   "edge_neg": rng.integers(0, N, (NEG, 2))} for name, e in (("valid", val), ("test", test))}
    else:
        files = {"train": {"source_node": train[:, 0], "target_node": train[:, 1]}} | {
            name: {"source_node": e[:, 0], "target_node": e[:, 1], "target_node_neg": rng.integers(0, N, (HELD, M))}
            for name, e in (("valid", val), ("test", test))}
    for name, d in (files | change).items():
        save(d, folder / "split" / "time" / f"{name}.pt")
    return folder


def _cfg(folder, cache, algo="1d-halo", grid=None, **kw):
    return TrainConfig(dataset=str(folder), algo=algo, grid=grid, hidden=8, dropout=0.0, lr=0.02,
                       cache_dir=str(cache), task="link", **kw)


def _scores(rng, n):
    """Scores with ties (rounded to a coarse grid)."""
    return np.round(rng.standard_normal(n), 1).astype(np.float32)


def _plain_hits(pos, neg, k):
    """OGB's evaluator, numpy branch."""
    return 1.0 if len(neg) < k else float(np.sum(pos > np.sort(neg)[-k])) / len(pos)


def _plain_mrr(pos, neg):
    """OGB's evaluator, one positive at a time."""
    return float(np.mean([1 / (0.5 * (np.sum(n >= p) + np.sum(n > p)) + 1) for p, n in zip(pos, neg)]))


def _train(comm, roots, cache):
    """Per kind and layout: the losses, the figures, the phase edges of the ledger, and the folder and grid to
    predict it from; and per rank the metrics of rank-split arrays (rank r holds rows r::P)."""
    out = {}
    for kind, folder in roots.items():
        for algo, grid in LAYOUTS if comm.world_size > 1 else LAYOUTS[:1]:
            comm.ledger.reset()
            t = LinkTrainer(_cfg(folder, cache, algo, grid), comm)
            losses, figures = [], []
            for e in range(EPOCHS):
                losses.append(t.epoch(e))
                figures.append(t.evaluate())
            edges = {(r["op"], r["group"]): [r[k] for k in ("calls", "sent_bytes", "recv_bytes", "messages")]
                     for r in comm.ledger.table() if r["phase"] == "edges"}
            out[kind, algo] = {"losses": losses, "figures": figures, "edges": edges, "folder": str(t.parts.path),
                               "shape": t.g.grid.shape, "metric": t.metric, "counts": t.counts}
    rng, P, r = np.random.default_rng(5), comm.world_size, comm.rank
    pos, neg, neg2 = _scores(rng, 40) + 1, _scores(rng, 70), _scores(rng, (40, 9))
    out["metrics"] = [hits_at_k(pos[r::P], neg[r::P], k, comm) for k in (1, 10, 50)] + \
        [hits_at_k(pos[r::P], neg[:3][r::P], 10, comm), mrr(pos[r::P], neg2[r::P], comm)]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ogbl")
    roots = {kind: write_folder(root, kind) for kind in KINDS}
    cache = root / "cache"
    one = _train(Comm(0, 1), roots, cache)
    return roots, cache, one, run_local(_train, 2, roots, cache, timeout_s=600)


def test_hits_and_mrr_over_ranks_are_ogbs(runs):
    rng = np.random.default_rng(5)
    pos, neg, neg2 = _scores(rng, 40) + 1, _scores(rng, 70), _scores(rng, (40, 9))
    plain = [_plain_hits(pos, neg, k) for k in (1, 10, 50)] + [_plain_hits(pos, neg[:3], 10), _plain_mrr(pos, neg2)]
    assert plain[-2] == 1.0 and 0 < plain[0] < plain[1] < plain[2] < 1
    _, _, one, two = runs
    for result in [one] + two:
        assert result["metrics"] == pytest.approx(plain, rel=1e-12)


def _plain_figures(t: LinkTrainer, folder) -> dict:
    """OGB's figures and ROC-AUC / AP of the folder's validation and test pairs, scored on the trainer's z (one
    process: its rows are every node's, in the order of `node_ids`)."""
    given, out = read_held_out(folder), {}
    with torch.no_grad():
        z = np.empty_like(rows := t.embeddings().numpy())
        z[t.g.node_ids.numpy()] = rows
    for split in given.pairs:
        src, dst, nsrc, ndst = given.share(split)
        pos, neg = (z[src] * z[dst]).sum(1), (z[nsrc] * z[ndst]).sum(1)
        out[f"{split}_{given.label}"] = _plain_hits(pos, neg, given.k) if given.metric == "hits" else \
            _plain_mrr(pos, neg.reshape(len(pos), -1))
        y, s = np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg]
        out[f"{split}_rocauc"], out[f"{split}_ap"] = roc_auc_score(y, s), average_precision_score(y, s)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_figures_are_ogbs_definitions(runs, kind):
    roots, cache, _, _ = runs
    t = LinkTrainer(_cfg(roots[kind], cache), Comm(0, 1))
    t.epoch(0)
    figures, plain = t.evaluate(), _plain_figures(t, roots[kind])
    metric = "hits@50" if kind == "hits" else "mrr"
    assert t.metric == metric and {"val_" + metric, "test_" + metric, "train_rocauc"} <= figures.keys()
    for key, value in plain.items():
        assert figures[key] == pytest.approx(value, rel=1e-5), key
    assert t.counts == {"train": EDGES - 2 * HELD, "val": HELD, "test": HELD}


@pytest.mark.parametrize("kind", KINDS)
def test_one_curve_at_every_p_and_the_ledger_predicted(runs, kind):
    roots, _, one, two = runs
    ref = one[kind, "1d-halo"]
    assert ref["losses"][-1] < ref["losses"][0]
    for algo, _ in LAYOUTS:
        for mine in (two[0][kind, algo], two[1][kind, algo]):
            assert mine["metric"] == ref["metric"] and mine["counts"] == ref["counts"]
            np.testing.assert_allclose(mine["losses"], ref["losses"], rtol=2e-5, err_msg=algo)
            for f, f1 in zip(mine["figures"], ref["figures"]):
                assert f.keys() == f1.keys()
                np.testing.assert_allclose([f[k] for k in f1], list(f1.values()), rtol=1e-4, err_msg=algo)
        predicted = predict_edges(PartitionedDataset(mine["folder"]), spmm.get(algo), mine["shape"],
                                  EdgeSplit(0.0, 0.0), 8, EPOCHS, EPOCHS, given=read_held_out(roots[kind]))
        for r in range(2):
            assert two[r][kind, algo]["edges"] == {(row["op"], row["group"]): [row[k] for k in (
                "calls", "sent_bytes", "recv_bytes", "messages")] for row in predicted[r].table()}, (algo, r)


def test_a_partitioned_folder_with_its_ogb_split(runs):
    """--nprocs hands the processes the partition cache and the OGB folder (--ogb-split); a run on them equals one on
    the folder itself."""
    roots, cache, one, _ = runs
    cfg = _cfg(roots["mrr"], cache)
    argv = _partition_once(cfg, 1, ["train"])
    assert argv[:2] == ["train", "--dataset"] and argv[3:] == ["--given-dataset", cfg.dataset, "--ogb-split",
                                                               str(roots["mrr"])]
    t = LinkTrainer(_cfg(argv[2], cache, ogb_split=argv[6]), Comm(0, 1))
    assert [t.epoch(e) for e in range(EPOCHS)] == one["mrr", "1d-halo"]["losses"]
    assert t.evaluate() == one["mrr", "1d-halo"]["figures"][-1]


def test_a_graph_in_memory_with_its_ogb_split(runs):
    """`graph=` with ogb_split trains on the folder's split (it was dropped: a hashed split, judged by ROC-AUC), as a
    run on the folder does; fractions of a split of its own are refused with the folder."""
    roots, cache, one, _ = runs
    graph = load_dataset(str(roots["mrr"]))
    t = LinkTrainer(_cfg("cora", cache, ogb_split=str(roots["mrr"])), Comm(0, 1), graph=graph)
    assert t.metric == "mrr" and [t.epoch(e) for e in range(EPOCHS)] == one["mrr", "1d-halo"]["losses"]
    assert t.evaluate() == one["mrr", "1d-halo"]["figures"][-1]
    with pytest.raises(SpgnnError, match=r"^--val-edges and --test-edges: .*ogbl_citation2 is an OGB link folder, "
                                         r"whose split is its own: drop them$"):
        LinkTrainer(_cfg(roots["mrr"], cache, val_edges=0.2, test_edges=0.2), Comm(0, 1))


def test_an_ogb_graph_without_its_split_is_refused(runs):
    """A partitioned folder of an OGB link graph, or the graph in memory, without --ogb-split trained a hashed split
    of OGB's training edges, judged by ROC-AUC instead of the folder's split and figure, and said nothing."""
    roots, cache, _, _ = runs
    parts = _partition_once(_cfg(roots["mrr"], cache), 1, ["train"])[2]
    for where, graph in ((parts, None), ("cora", load_dataset(str(roots["mrr"])))):
        with pytest.raises(SpgnnError, match=r"^--task link: dataset 'ogbl-citation2' is the graph of an OGB link "
                                             r"folder .*: give --ogb-split FOLDER, the OGB folder it was made from$"):
            LinkTrainer(_cfg(where, cache), Comm(0, 1), graph=graph)


def test_report_names_the_metric(tmp_path):
    folder = write_folder(tmp_path, "mrr")
    report = LinkTrainer(_cfg(folder, tmp_path / "cache", epochs=2), Comm(0, 1)).run(log=None)
    assert report["task"] == {"name": "link", "metric": "mrr", "label": "MRR", "higher_is_better": True}
    assert report["link"]["ogb"] == {"name": "ogbl-citation2", "split": "time", "metric": "mrr"}
    assert {"val_mrr", "test_mrr", "val_rocauc", "test_ap"} <= report["final"].keys() and "val_mrr" in report["best"]
    assert report["graph"]["edges"] == {"train": EDGES - 2 * HELD, "val": HELD, "test": HELD}


def test_ogbl_vessel_is_judged_by_roc_auc(tmp_path):
    """An edge_neg folder was judged by Hits@50 whatever its name; OGB judges ogbl-vessel by ROC-AUC (its positives
    against the file's negatives), which picks the best epoch there."""
    folder = write_folder(tmp_path, "hits").rename(tmp_path / "ogbl_vessel")
    report = LinkTrainer(_cfg(folder, tmp_path / "cache", epochs=2), Comm(0, 1)).run(log=None)
    assert report["task"] == {"name": "link", "metric": "rocauc", "label": "ROC-AUC", "higher_is_better": True}
    assert report["link"]["ogb"]["metric"] == "rocauc" and "val_rocauc" in report["best"]
    assert not any(k.startswith("val_hits") for k in report["final"])


@pytest.mark.parametrize("split, label", [("throughput", "hits@100"), ("target", "hits@20"), ("spatial", "rocauc"),
                                          ("time", "hits@50")])
def test_a_renamed_folder_is_judged_by_its_split_type(tmp_path, split, label):
    """A folder renamed away from OGB's name (ogbl_ppa to ppa-2025, say) was judged by Hits@50; the split types
    throughput, target and spatial are ogbl-ppa's, ogbl-ddi's and ogbl-vessel's alone."""
    folder = write_folder(tmp_path, "hits").rename(tmp_path / "my-graph")
    (folder / "split" / "time").rename(folder / "split" / split)
    assert read_held_out(folder).label == label


def test_split_files_in_both_torch_formats_and_as_tensors(tmp_path):
    d = {"source_node": np.arange(4), "target_node_neg": np.arange(12).reshape(4, 3)}
    for i, save in enumerate([lambda o, p: torch.save(o, p, pickle_protocol=4),
                              lambda o, p: torch.save(o, p, _use_new_zipfile_serialization=False),
                              lambda o, p: torch.save({k: torch.as_tensor(v) for k, v in o.items()}, p)]):
        save(d, tmp_path / f"{i}.pt")
        got = read_pt(tmp_path / f"{i}.pt")
        assert got.keys() == d.keys() and all(np.array_equal(got[k], d[k]) for k in d), i


class _Boom:
    def __reduce__(self):
        return (exec, ("raise SystemExit('ran code from a .pt')",))


@pytest.mark.parametrize("kind, change, message", [
    ("hits", {"valid": {"edge": np.array([[0, N]]), "edge_neg": np.zeros((3, 2), np.int64)}},
     r"valid\.pt: 'edge' holds node ids 0\.\.120, but the graph has 120 nodes \(raw/num-node-list\)"),
    ("mrr", {"test": {"source_node": np.arange(4), "target_node": np.arange(4), "target_node_neg": np.zeros((3, M),
                                                                                                            int)}},
     r"test\.pt: 'target_node_neg' has shape \(3, 20\), expected \(4, M\): a row of negative targets"),
    ("hits", {"test": {"edge": np.zeros((2, 2), int), "edge_neg": np.zeros((3, 3), int)}},
     r"test\.pt: 'edge_neg' has shape \(3, 3\), expected \(E', 2\)"),
    ("hits", {"train": {"edge": np.array([[0, 1], [2, 3]] * 40)}},
     r"train\.pt: \d+ of its 80 training edges are not edges of the graph in raw/ \(the first: \d+ -> \d+\)"),
    ("hits", {"valid": {"head": np.zeros(2), "relation": np.zeros(2), "tail": np.zeros(2)}},
     "valid.pt is a knowledge-graph split"),
    ("mrr", {"valid": _Boom()}, r"cannot read .*valid\.pt: UnpicklingError: refusing to unpickle .*exec: "),
    ("mrr", {"dataset": "cora"},
     r"--ogb-split .*ogbl_citation2: its graph is not --dataset cora's \(120 against 2708 nodes\)"),
    ("mrr", {"dataset": "cora", "ogb_split": "elsewhere"}, r"--ogb-split must be an OGB link folder .*'elsewhere'"),
])
def test_bad_input_is_one_line(tmp_path, kind, change, message):
    change = dict(change)
    dataset, ogb_split = change.pop("dataset", None), change.pop("ogb_split", None)
    folder = write_folder(tmp_path, kind, **change)
    cfg = _cfg(dataset or folder, tmp_path / "cache", **({"ogb_split": ogb_split or str(folder)} if dataset else {}))
    with pytest.raises(SpgnnError, match=message):
        LinkTrainer(cfg.validate(), Comm(0, 1))


def _refusal(comm, folder, cache):
    try:
        LinkTrainer(_cfg(folder, cache), comm)
    except SpgnnError as e:
        return str(e)


@pytest.mark.parametrize("task", ["auto", "multiclass", "binary", "multilabel"])
def test_a_node_task_on_a_link_folder_is_one_line(tmp_path, task):
    """--task auto (the default) on an OGB link folder trained multiclass on its labels, zeros: one class, accuracy
    1.0 on every split. A node task is refused there, naming --task link."""
    folder = write_folder(tmp_path, "hits")
    with pytest.raises(SpgnnError, match=r"^dataset 'ogbl-collab' is an OGB link-prediction graph, whose nodes have "
                                         r"no labels: train it with --task link$"):
        Trainer(TrainConfig(dataset=str(folder), task=task, epochs=1, cache_dir=str(tmp_path / "cache")), Comm(0, 1))


def test_a_negative_no_node_is_refused_by_every_rank(tmp_path):
    """Each rank reads and checks only the rows of target_node_neg whose source it holds: a bad id in one row stops
    both ranks of P = 2 with the one line."""
    bad = np.zeros((HELD, M), np.int64)
    bad[HELD - 1, 3] = N
    valid = {"source_node": np.arange(HELD), "target_node": np.arange(HELD)[::-1], "target_node_neg": bad}
    folder = write_folder(tmp_path, "mrr", valid=valid)
    said = run_local(_refusal, 2, folder, tmp_path / "cache")
    assert said[0] == said[1] and said[0] is not None
    assert "valid.pt: 'target_node_neg' holds node ids 0..120, but the graph has 120 nodes" in said[0]


def test_missing_and_corrupt_files_are_one_line(tmp_path):
    folder = write_folder(tmp_path, "mrr")
    (folder / "split" / "time" / "test.pt").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(SpgnnError, match=r"cannot read .*test\.pt: "):
        read_held_out(folder)
    (folder / "split" / "time" / "test.pt").unlink()
    with pytest.raises(SpgnnError, match=r"cannot read .*test\.pt: no such file"):
        LinkTrainer(_cfg(folder, tmp_path / "cache"), Comm(0, 1))
    (folder / "split" / "time" / "train.pt").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(SpgnnError, match=r"cannot read .*train\.pt: not a file torch\.save wrote"):
        load_dataset(str(folder))
    (folder / "split" / "other").mkdir()
    (folder / "split" / "other" / "train.pt").write_bytes(b"")
    with pytest.raises(SpgnnError, match=r"holds 2 split types \(other, time\): pick one with .*:TYPE"):
        load_dataset(str(folder))


def test_the_split_of_another_graph_of_as_many_nodes_is_refused(tmp_path):
    """--ogb-split was checked against --dataset by its node count only: another OGB folder's split (its held-out
    positives possibly message-passing edges here) trained and reported Hits@K."""
    from spgnn.cli import main

    ours, theirs = (write_folder(tmp_path / name, "hits", seed=seed) for name, seed in (("ours", 0), ("theirs", 1)))
    assert main(["partition", "--dataset", str(ours), "--nparts", "1", "--method", "block", "--output",
                 str(tmp_path / "parts"), "--quiet"]) == 0
    assert PartitionedDataset(tmp_path / "parts").info.source.startswith("ogbl:")
    LinkTrainer(_cfg(tmp_path / "parts", tmp_path, ogb_split=str(ours)), Comm(0, 1))          # its own: trains
    with pytest.raises(SpgnnError, match=r"its graph is not --dataset .*parts's \(120 against 120 nodes, other "):
        LinkTrainer(_cfg(tmp_path / "parts", tmp_path, ogb_split=str(theirs)), Comm(0, 1))


def test_the_same_graph_gzipped_again_or_unzipped_is_the_same_graph(tmp_path):
    """The digest a partitioned folder keeps of its OGB folder's graph hashed the .csv.gz files' bytes, whose gzip
    header holds a time and a name: the same edges gzip'd again, or unzipped to edge.csv, were refused as 'other
    edges', also by a cache folder's run that gave no --ogb-split at all."""
    from spgnn.cli import main
    from spgnn.graph.ogbl import fingerprint

    folder = write_folder(tmp_path, "hits")
    assert main(["partition", "--dataset", str(folder), "--nparts", "1", "--method", "block", "--output",
                 str(tmp_path / "parts"), "--quiet"]) == 0
    made, edges = fingerprint(folder), folder / "raw" / "edge.csv.gz"
    text = gzip.decompress(edges.read_bytes())
    edges.write_bytes(gzip.compress(text, mtime=12345))
    assert fingerprint(folder) == made
    LinkTrainer(_cfg(tmp_path / "parts", tmp_path, ogb_split=str(folder)), Comm(0, 1))
    edges.unlink()
    (folder / "raw" / "edge.csv").write_bytes(text)
    assert fingerprint(folder) == made
    LinkTrainer(_cfg(tmp_path / "parts", tmp_path, ogb_split=str(folder)), Comm(0, 1))
    (folder / "raw" / "edge.csv").write_bytes(text + b"0,1\n")         # another graph: another digest
    assert fingerprint(folder) != made


def test_out_of_core_refuses_a_link_folder_by_what_it_is(tmp_path, capsys):
    """spgnn partition --out-of-core of an OGB link folder said its raw/ was missing node-label.csv.gz, a file no link
    folder has."""
    from spgnn.cli import main

    folder = write_folder(tmp_path, "hits")
    assert main(["partition", "--out-of-core", "--dataset", str(folder), "--nparts", "2", "--method", "fennel",
                 "--output", str(tmp_path / "parts"), "--quiet"]) == 2
    assert capsys.readouterr().err == (f"spgnn: error: {folder} is an OGB link folder (split/TYPE/train.pt), which is "
                                       "partitioned in memory, not out of core: drop --out-of-core\n")
    assert not (tmp_path / "parts").exists()


def test_minibatch_training_refuses_a_link_folder(tmp_path):
    """--sampler on an OGB link folder, or a block partition of it with --split-graph, trained multiclass on its
    labels, zeros: one class, accuracy 1.0 on every split (the full-batch trainer refuses it)."""
    from spgnn.cli import main
    from spgnn.train.minibatch import MinibatchTrainer

    folder = write_folder(tmp_path, "hits")
    assert main(["partition", "--dataset", str(folder), "--nparts", "1", "--method", "block", "--node-order",
                 "natural", "--output", str(tmp_path / "parts"), "--quiet"]) == 0
    for dataset, split in ((folder, False), (tmp_path / "parts", True)):
        cfg = TrainConfig(dataset=str(dataset), model="sage", epochs=1, cache_dir=str(tmp_path / "cache"))
        with pytest.raises(SpgnnError, match=r"^dataset 'ogbl-collab' is an OGB link-prediction graph, whose nodes "
                                             r"have no labels: train it full-batch with --task link \(drop "
                                             r"--sampler\)$"):
            MinibatchTrainer(cfg, Comm(0, 1), "sage:3", split_graph=split)
