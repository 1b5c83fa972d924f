"""Data from the field's formats: OGB node-property-prediction folders (written here in OGB's exact layout, in
its three forms; read whole, or streamed for out-of-core partitioning) and PyTorch Geometric ``Data`` objects
(to a Graph and back, and trained on, against PyG's own layers on the same Data)."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spgnn.cli import main
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import DATA_DIR_ENV, load_dataset, read_edge_list
from spgnn.graph.ogb import read_ogb, to_edge_folder
from spgnn.graph.pyg import from_pyg, to_pyg
from spgnn.graph.validate import allow_overlap
from spgnn.partition.partitioned import PartitionedDataset
from spgnn.partition.share import SPLITS
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close

N, F, C = 60, 7, 4


@pytest.fixture(autouse=True)
def hermetic(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def ogb_arrays(seed=0):
    """A directed edge list (with a duplicate and a self-loop, as raw data has), features, labels with NaN for
    five nodes outside the split, and an official split."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, 200), rng.integers(0, N, 200)
    src, dst = np.append(src, [src[0], 5]), np.append(dst, [dst[0], 5])
    x = rng.standard_normal((N, F)).astype(np.float32)
    y = rng.integers(0, C, N).astype(np.float64)
    perm = rng.permutation(N)
    split = {"train": perm[:30], "valid": perm[30:42], "test": perm[42:55]}
    y[perm[55:]] = np.nan
    return np.stack([src, dst]), x, y, split


def write_ogb(folder, form, seed=0, splits=("time",)):
    """An OGB folder as OGB publishes it: raw/ CSVs (arxiv, products), raw/ npz (papers100M) or the ogb package's
    processed/data_processed; split/TYPE/{train,valid,test}.csv.gz; RELEASE_v1.txt."""
    edge_index, x, y, split = ogb_arrays(seed)
    raw = folder / "raw"
    raw.mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("# Release note\n")
    if form == "csv":
        np.savetxt(raw / "edge.csv.gz", edge_index.T, fmt="%d", delimiter=",")
        np.savetxt(raw / "num-node-list.csv.gz", [N], fmt="%d")
        np.savetxt(raw / "num-edge-list.csv.gz", [edge_index.shape[1]], fmt="%d")
        np.savetxt(raw / "node-feat.csv.gz", x, fmt="%.9g", delimiter=",")
        np.savetxt(raw / "node-label.csv.gz", y, fmt="%g")         # nan as "nan", as pandas reads it
        np.savetxt(raw / "node_year.csv.gz", np.full(N, 2020), fmt="%d")
    elif form == "binary":
        np.savez_compressed(raw / "data.npz", edge_index=edge_index, num_nodes_list=np.array([N]),
                            num_edges_list=np.array([edge_index.shape[1]]), node_feat=x, node_year=np.zeros((N, 1)))
        np.savez_compressed(raw / "node-label.npz", node_label=y.reshape(-1, 1))
    else:
        (folder / "processed").mkdir()
        graph = {"edge_index": edge_index, "edge_feat": None, "node_feat": x, "num_nodes": N}
        torch.save({"graph": graph, "labels": y.reshape(-1, 1)}, folder / "processed" / "data_processed",
                   pickle_protocol=4, _use_new_zipfile_serialization=form != "processed-legacy")
    for kind in splits:
        (folder / "split" / kind).mkdir(parents=True)
        for name, ids in split.items():
            np.savetxt(folder / "split" / kind / f"{name}.csv.gz", ids, fmt="%d")
    return folder


@pytest.mark.parametrize("form", ["csv", "binary", "processed", "processed-legacy"])   # legacy: torch before 1.6's
def test_ogb_folder_in_each_form(tmp_path, form):
    g = load_dataset(str(write_ogb(tmp_path / "ogbn_tiny", form)))
    edge_index, x, y, split = ogb_arrays()
    a = sp.coo_matrix((np.ones(edge_index.shape[1]), (edge_index[1], edge_index[0])), shape=(N, N)).tocsr()
    a = ((a + a.T) > 0).astype(np.float32)
    a.setdiag(0)
    a.eliminate_zeros()
    assert g.name == "ogbn-tiny" and g.n == N and g.num_classes == C
    assert (g.adj != a).nnz == 0 and g.is_symmetric
    assert np.array_equal(g.x.view(np.uint32), x.view(np.uint32))
    labelled = np.isfinite(y)
    assert np.array_equal(g.y[labelled], y[labelled].astype(np.int64))
    for mask, ids in zip((g.train_mask, g.val_mask, g.test_mask), split.values()):
        assert np.array_equal(np.flatnonzero(mask), np.sort(ids))
    assert not (g.train_mask | g.val_mask | g.test_mask)[~labelled].any()


def test_ogb_folder_trains_from_the_command_line(tmp_path):
    folder = write_ogb(tmp_path / "ogbn_tiny", "csv")
    out = tmp_path / "report.json"
    assert main(["train", "--dataset", str(folder), "--epochs", "3", "--hidden", "8", "--output", str(out),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    report = json.loads(out.read_text())
    assert report["graph"]["n"] == N and len(report["epochs"]) == 3
    g = load_dataset(str(folder))
    assert report["graph"]["nnz"] == g.nnz


def test_ogb_split_is_chosen_by_name(tmp_path):
    folder = write_ogb(tmp_path / "ogbn_tiny", "binary", splits=("time", "random"))
    with pytest.raises(SpgnnError, match=r"holds 2 splits \(random, time\); pick one with .*:NAME"):
        load_dataset(str(folder))
    assert load_dataset(f"{folder}:random").train_mask.sum() == 30
    with pytest.raises(SpgnnError, match="has no split 'year'; it has random, time"):
        load_dataset(f"{folder}:year")


def test_ogb_bad_folders_say_what_is_wrong(tmp_path):
    folder = write_ogb(tmp_path / "a", "csv")
    (folder / "split" / "time" / "valid.csv.gz").unlink()
    with pytest.raises(SpgnnError, match=r"missing valid.csv.gz \(node ids of the val set\)"):
        load_dataset(str(folder))

    folder = write_ogb(tmp_path / "b", "binary")
    y = np.load(folder / "raw" / "node-label.npz")["node_label"]
    y[np.load(folder / "raw" / "data.npz")["edge_index"][0, 0]] = np.nan
    train = np.loadtxt(folder / "split" / "time" / "train.csv.gz", dtype=np.int64)
    y[train[0]] = np.nan
    np.savez(folder / "raw" / "node-label.npz", node_label=y)
    with pytest.raises(SpgnnError, match=f"node {train[0]} is in the split but has no label"):
        load_dataset(str(folder))

    folder = write_ogb(tmp_path / "c", "csv")
    np.savetxt(folder / "raw" / "node-feat.csv.gz", np.zeros((N - 1, F)), delimiter=",")
    with pytest.raises(SpgnnError, match=rf"node features have shape \({N - 1}, {F}\), expected \({N}, F\)"):
        load_dataset(str(folder))

    folder = write_ogb(tmp_path / "d", "csv")
    np.savetxt(folder / "raw" / "num-node-list.csv.gz", [N, N], fmt="%d")
    with pytest.raises(SpgnnError, match="holds 2 graphs"):
        load_dataset(str(folder))

    folder = write_ogb(tmp_path / "e", "csv")
    (folder / "raw" / "triplet-type-list.csv.gz").write_bytes(b"")
    with pytest.raises(SpgnnError, match="heterogeneous OGB graph"):
        load_dataset(str(folder))

    folder = write_ogb(tmp_path / "f", "csv")
    (folder / "raw" / "edge.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(SpgnnError, match="cannot read .*edge.csv.gz"):
        load_dataset(str(folder))


@pytest.mark.parametrize("form", ["csv", "binary"])
def test_ogb_folder_streams_to_an_edge_folder(tmp_path, form):
    """Seven rows at a time (the binary edge_index's src/dst boundary falls inside a block), the edge-list
    folder holds the graph read_ogb reads."""
    folder = write_ogb(tmp_path / "ogbn_tiny", form)
    out = to_edge_folder(folder, tmp_path / "edges", chunk=7)
    a, b = read_ogb(folder), read_edge_list(out)
    assert b.name == a.name and (a.adj != b.adj).nnz == 0
    assert np.array_equal(a.x.view(np.uint32), b.x.view(np.uint32))
    for k in ("y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k


def test_ogb_stream_refuses_a_short_file(tmp_path):
    folder = write_ogb(tmp_path / "ogbn_tiny", "csv")
    np.savetxt(folder / "raw" / "node-feat.csv.gz", np.zeros((N - 1, F)), delimiter=",")
    with pytest.raises(SpgnnError, match=f"fewer than num-node-list and num-edge-list announce \\({N} nodes\\)"):
        to_edge_folder(folder, tmp_path / "edges", chunk=7)
    np.savetxt(folder / "raw" / "node-feat.csv.gz", np.zeros((N + 1, F)), delimiter=",")
    with pytest.raises(SpgnnError, match=f"more than the {N} rows"):
        to_edge_folder(folder, tmp_path / "edges", chunk=7)


def _ooc_losses(comm, dataset):
    cfg = TrainConfig(dataset=dataset, hidden=8, epochs=3, partition="block", algo="1d-halo")
    return [e["loss"] for e in Trainer(cfg, comm).run(log=None)["epochs"]]


def test_ogb_folder_partitions_out_of_core(tmp_path):
    folder = write_ogb(tmp_path / "ogbn_tiny", "binary")
    out = tmp_path / "parts"
    assert main(["partition", "--out-of-core", "--dataset", str(folder), "--nparts", "2", "--method", "block",
                 "--output", str(out), "--chunk", "16"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_tiny", "parts"]       # no temporary left
    assert np.allclose(run_local(_ooc_losses, 2, str(out))[0], run_local(_ooc_losses, 2, str(folder))[0],
                       rtol=1e-6, atol=0)


# ----------------------------------------------------------------------------------------------------------
# PyTorch Geometric

needs_pyg = pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                               reason="PyTorch Geometric is not installed (pip install .[test])")


def pyg_data(seed=0):
    """A directed graph built by PyG (FakeDataset), with a split of our own."""
    from torch_geometric.datasets import FakeDataset
    torch.manual_seed(seed)
    data = FakeDataset(num_graphs=1, avg_num_nodes=120, avg_degree=5, num_channels=9, num_classes=3, task="node",
                       is_undirected=False)[0]
    perm = torch.randperm(data.num_nodes)
    for i, k in enumerate(("train", "val", "test")):
        data[f"{k}_mask"] = torch.zeros(data.num_nodes, dtype=torch.bool)
        data[f"{k}_mask"][perm[i::3]] = True
    return data


@needs_pyg
def test_from_pyg_keeps_pyg_s_edges_and_split():
    data = pyg_data()
    g = from_pyg(data, name="fake")
    assert not data.is_undirected() and not g.is_symmetric
    theirs = set(map(tuple, data.edge_index.T.tolist()))              # self-loops too, as PyG's layers see them
    ours = {(s, d) for d, s in zip(*g.adj.nonzero())}
    assert ours == theirs
    assert np.array_equal(g.x, data.x.numpy()) and np.array_equal(g.y, data.y.numpy())
    for k in ("train", "val", "test"):
        assert np.array_equal(getattr(g, f"{k}_mask"), data[f"{k}_mask"].numpy())
    assert from_pyg(data, symmetric=True).is_symmetric

    data.train_mask = torch.stack([data.train_mask, ~data.train_mask], 1)      # PyG's [N, S] fixed splits
    with allow_overlap():                                               # split 1 shares nodes with val/test
        assert np.array_equal(from_pyg(data, split=1).train_mask, ~g.train_mask)
    with pytest.raises(SpgnnError, match=r"has 2 fixed splits \(0\.\.1\), asked for split 2"):
        from_pyg(data, split=2)
    del data.x
    with pytest.raises(SpgnnError, match="the PyG Data has no x"):
        from_pyg(data)


@needs_pyg
def test_a_pyg_data_with_sparse_features_is_read_dense():
    """from_pyg on a sparse x was "can't convert Sparse layout tensor to numpy"."""
    data = pyg_data()
    dense = from_pyg(data).x
    data.x = data.x.to_sparse()
    assert np.array_equal(from_pyg(data).x, dense)


@needs_pyg
def test_to_pyg_round_trips():
    g = small_graph(n=50, directed=True, seed=4)
    data = to_pyg(g)
    data.validate()
    assert data.num_nodes == g.n and not data.is_undirected()
    back = from_pyg(data, name=g.name)
    assert (back.adj != g.adj).nnz == 0 and back.num_classes == g.num_classes
    for k in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(back, k), getattr(g, k)), k


def test_to_pyg_refuses_what_is_no_graph_and_names_itself_without_pyg(monkeypatch):
    """to_pyg of a PyG Data (or anything but a Graph) was an AttributeError traceback; without PyTorch Geometric it
    named Graph.to_pyg, which does not exist."""
    with pytest.raises(SpgnnError, match=r"^spgnn.to_pyg takes a spgnn Graph \(as load_dataset or from_pyg gives "
                                         r"it\), got SimpleNamespace$"):
        to_pyg(SimpleNamespace(edge_index=np.zeros((2, 0), np.int64)))
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)      # import torch_geometric.data fails
    with pytest.raises(SpgnnError, match=r"^spgnn.to_pyg needs PyTorch Geometric: pip install torch-geometric$"):
        to_pyg(small_graph(n=20, seed=1))


def _losses(comm, model, data):
    cfg = TrainConfig(model=model, hidden=8, dropout=0.0, epochs=3, feature_norm="none", algo="1d-halo")
    return [e["loss"] for e in Trainer(cfg, comm, graph=data).run(log=None)["epochs"]]


@needs_pyg
@pytest.mark.parametrize("copies", [False, True])
@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_trainer_on_a_pyg_data_equals_pyg_layers(model, copies):
    """The Trainer takes the Data itself: after training, its logits equal PyG's GCNConv/SAGEConv stack with the
    same weights on the same Data (directed, so the direction of edge_index counts), and the loss curve on two
    processes equals the one on one. With `copies`, edges listed twice and self-loops, which PyG's SAGEConv counts
    and takes: from_pyg merged and dropped them (logits 0.3-0.9 apart)."""
    from tests.test_reference import _pyg_twin
    data = pyg_data(1)
    if copies:
        loops = torch.tensor([[0, 5, 7], [0, 5, 7]])
        data.edge_index = torch.cat([data.edge_index, data.edge_index[:, :4], loops], 1)
    cfg = TrainConfig(model=model, hidden=8, dropout=0.0, epochs=3, feature_norm="none", algo="1d-halo")
    t = Trainer(cfg, Comm(0, 1), graph=data)
    losses = [e["loss"] for e in t.run(log=None)["epochs"]]
    ours = t.predict(gather=True)                          # in original ids
    with torch.no_grad():
        twins = [_pyg_twin(conv) for conv in t.model.layers]
        theirs = twins[1](twins[0](data.x, data.edge_index).relu(), data.edge_index)
    assert_close(ours, theirs.numpy(), "logits", rtol=1e-5)
    if model == "gcn":
        assert np.allclose(run_local(_losses, 2, model, data)[0], losses, rtol=1e-5, atol=0)


@needs_pyg
def test_a_weighted_pyg_data_trains_as_pyg_s_gcn_sees_it():
    """from_pyg dropped edge_weight without a word: GCN then differed from PyG's GCNConv(edge_weight) on the same
    Data. The weights (a duplicate edge summed, a weighted self-loop kept) now give PyG's logits, and round-trip."""
    from tests.test_reference import _pyg_twin
    data = pyg_data(2)
    loops = torch.tensor([[0, 5], [0, 5]])
    data.edge_index = torch.cat([data.edge_index, data.edge_index[:, :3], loops], 1)    # 3 duplicates, 2 loops
    data.edge_weight = torch.rand(data.edge_index.shape[1]) + 0.5
    cfg = TrainConfig(model="gcn", hidden=8, dropout=0.0, epochs=2, feature_norm="none", algo="1d-halo")
    t = Trainer(cfg, Comm(0, 1), graph=data)
    t.run(log=None)
    with torch.no_grad():
        twins = [_pyg_twin(conv) for conv in t.model.layers]
        h = twins[0](data.x, data.edge_index, data.edge_weight).relu()
        theirs = twins[1](h, data.edge_index, data.edge_weight)
    assert_close(t.predict(gather=True), theirs.numpy(), "logits", rtol=1e-5)
    g = from_pyg(data)
    back = to_pyg(g)
    assert (from_pyg(back).adj != g.adj).nnz == 0 and g.adj[0, 0] == pytest.approx(float(data.edge_weight[-2]))
    with pytest.raises(SpgnnError, match="weighted edges are not symmetrised"):
        from_pyg(data, symmetric=True)


def test_ogb_folder_out_of_core_takes_a_split_and_refuses_bad_rows(tmp_path, capsys):
    """FOLDER:TYPE picks one of several split types out of core as in memory (it was 'no edges.npy ... in this
    folder'); an edge file of three columns is one line (it was a numpy broadcast traceback)."""
    folder = write_ogb(tmp_path / "ogbn_two", "csv", splits=("a", "b"))
    out = tmp_path / "parts"
    assert main(["partition", "--out-of-core", "--dataset", f"{folder}:b", "--nparts", "2", "--method", "block",
                 "--output", str(out), "--quiet"]) == 0
    held = read_ogb(folder, split="b")
    assert PartitionedDataset(out).info.counts == {k: int(getattr(held, f"{k}_mask").sum()) for k in SPLITS}
    edges = np.loadtxt(folder / "raw" / "edge.csv.gz", delimiter=",", dtype=np.int64)
    np.savetxt(folder / "raw" / "edge.csv.gz", np.c_[edges, edges[:, :1]], fmt="%d", delimiter=",")
    capsys.readouterr()
    assert main(["partition", "--out-of-core", "--dataset", f"{folder}:a", "--nparts", "2", "--method", "block",
                 "--output", str(tmp_path / "bad")]) == 2
    assert "raw/edge.csv.gz: rows of 3 columns, expected 2" in capsys.readouterr().err


@pytest.mark.parametrize("form", ["csv", "binary"])
def test_an_ogb_folder_without_node_features_is_refused_out_of_core_at_once(tmp_path, form, capsys):
    """Out of core, a folder without node-feat (ogbn-proteins) was refused only after every edge had been streamed,
    as 'the edges or node features are missing or fewer than ... announce'."""
    folder = write_ogb(tmp_path / "ogbn_nofeat", form)
    if form == "csv":
        (folder / "raw" / "node-feat.csv.gz").unlink()
    else:
        with np.load(folder / "raw" / "data.npz") as z:
            kept = {k: z[k] for k in z.files if k != "node_feat"}
        np.savez_compressed(folder / "raw" / "data.npz", **kept)
    assert main(["partition", "--out-of-core", "--dataset", str(folder), "--nparts", "2", "--method", "block",
                 "--output", str(tmp_path / "parts")]) == 2
    assert "no node features (node-feat); out of core" in capsys.readouterr().err
