"""Unusual graphs and data brought to every layout (found by the graph audit): each case a graph the other suites do
not hold, trained through the public API and compared with the single-process reference and the cost model.

- a symmetric weighted A: GCN's D^-½ A D^-½ is symmetric only to float rounding, and the layouts take the
  symmetric path (the backward is the forward on G) from A's symmetry; the cost model must too, else it predicts
  the transpose's bytes, sent and received swapped, on every rank with an unequal halo;
- features and targets as torch tensors of bfloat16 (numpy has no such type): read as the float32 they equal;
- labels -1 for the nodes without one (a common convention): the refusal says where, and what to do instead;
- an edge-list text file of 'src dst weight' lines, or with a header: the refusal says what a line holds;
- --algo auto where no layout it compares fits the graph (fewer nodes than row blocks, a partition given of other
  parts): the refusal says why and what to do;
- an adjacency given as a torch sparse tensor (COO or CSR): read through its entries, as scipy's matrix is;
- edge weights, each finite, whose sum at a node overflows the float32 normalisation computes in: refused;
- one feature column under the default --feature-norm row, which made every nonzero value 1: refused, full-batch
  and sampled, unless the column is 0/1 (np.ones((N, 1)) for a graph without features);
- labels of one class: a node task with nothing to learn (loss 0, accuracy 1), refused full-batch and sampled.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spgnn import Graph, from_pyg
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import gcn_norm, is_symmetric
from spgnn.partition.ooc import partition_edge_folder
from spgnn.plan import choose, predict
from spgnn.train.fullbatch import Trainer
from spgnn.train.minibatch import MinibatchTrainer


def _config(algo: str, model: str = "gcn", epochs: int = 2, partition: str = "block", **values) -> TrainConfig:
    return TrainConfig(model=model, hidden=3, layers=2, dropout=0.5, seed=3, algo=algo, partition=partition,
                       feature_norm="none", epochs=epochs, eval_every=0, **values).validate()


def _ledgers(comm, cfgs, graph) -> list[dict]:
    """This rank's ledger of each config's epochs on `graph` (set-up excluded): {(phase, layer, op, group): (calls,
    sent, received, messages)}."""
    out = []
    for cfg in cfgs:
        t = Trainer(cfg, comm, graph=graph)
        comm.ledger.reset()
        t.run(log=None)
        out.append({k: tuple(v[:4]) for k, v in comm.ledger.rows.items()})
    return out


def _predicted(cfg, graph, P: int) -> list[dict]:
    return [{k: tuple(v[:4]) for k, v in led.rows.items()}
            for led in predict(cfg, graph, P, epochs=cfg.epochs, evals=1, setup=False)]


def _weighted_star() -> Graph:
    """Nodes 0..2 (part 0) each joined to node 3 (part 1) by an undirected edge of weight 0.3, 0.7, 2.5; 4, 5 a
    weighted pair: part 0 needs one row of part 1, part 1 three rows of part 0."""
    src, dst, w = np.array([0, 1, 2, 4]), np.array([3, 3, 3, 5]), np.array([0.3, 0.7, 2.5, 1.3], np.float32)
    a = sp.coo_matrix((np.r_[w, w], (np.r_[dst, src], np.r_[src, dst])), shape=(6, 6))
    x = np.arange(12, dtype=np.float32).reshape(6, 2) / 7
    return Graph(a, x, np.array([0, 1, 0, 1, 0, 1]), np.arange(6) < 4, np.arange(6) == 4, np.arange(6) == 5)


def test_a_weighted_symmetric_graph_s_bytes_are_predicted():
    """`predict` took Â as directed (D^-½ w D^-½ differs from its transpose in the last bit): rank 0's backward
    all-to-all was predicted to send 3 rows and receive 1, where the layout sends 1 and receives 3."""
    g = _weighted_star()
    assert g.is_symmetric and not is_symmetric(gcn_norm(g.adj))        # the case: Â asymmetric in rounding alone
    cfgs = [_config(algo) for algo in ("1d-halo", "sar")]
    measured = run_local(_ledgers, 2, cfgs, g)
    for k, cfg in enumerate(cfgs):
        assert [mine[k] for mine in measured] == _predicted(cfg, g, 2), cfg.algo


def test_bfloat16_features_and_targets_are_read_as_float32():
    """Graph(x=a bfloat16 tensor) and from_pyg of one (a PyG Data's fields) ended in numpy's TypeError 'Got
    unsupported ScalarType BFloat16'."""
    g = _weighted_star()
    x = torch.tensor(g.x).bfloat16()
    y = torch.tensor([[0.0], [1.0], [float("nan")], [1.0], [0.0], [1.0]]).bfloat16()
    masks = (g.train_mask, g.val_mask, g.test_mask)
    data = SimpleNamespace(edge_index=torch.tensor(np.stack(g.adj.nonzero()[::-1])), x=x, y=y,
                           train_mask=torch.tensor(g.train_mask))            # a PyG Data's fields
    for h in (Graph(g.adj, x, y, *masks), from_pyg(data)):
        assert h.x.dtype == np.float32 and np.array_equal(h.x, x.float().numpy())
        assert h.targets == 1 and np.array_equal(h.y, y.float().numpy(), equal_nan=True)


def test_labels_of_minus_one_say_how_to_leave_a_node_unlabelled():
    """y = -1 for unknown was refused with 'labels must be class ids >= 0, found -1' alone: not which node, nor
    how a node without a label is given."""
    g = _weighted_star()
    y = np.array([0, 1, -1, 1, -1, 1])
    data = SimpleNamespace(edge_index=torch.tensor(np.stack(g.adj.nonzero()[::-1])), x=torch.tensor(g.x),
                           y=torch.tensor(y))
    for make in (lambda: Graph(g.adj, g.x, y, g.train_mask, g.val_mask, g.test_mask), lambda: from_pyg(data)):
        with pytest.raises(SpgnnError, match=r"found -1 \(2 nodes, first at node 2\); a node without a label: give it "
                                             "any class id and leave it out of the train, val and test masks"):
            make()


@pytest.mark.parametrize("lines, said", [
    ("0 1 0.5\n1 2 0.7\n", "could not convert string '0.5' to int64 at row 0, column 3"),
    ("src dst\n0 1\n", "could not convert string 'src' to int64 at row 0, column 1"),
    ("0 1\n1 2 3\n", "the number of columns changed from 2 to 3 at row 2"),
    ("0 1 1\n1 2 1\n", "found 3 columns")])
def test_an_edge_list_of_weights_or_a_header_is_refused_in_its_own_words(tmp_path, lines, said):
    """A weight column or a header line gave numpy's ValueError alone ('... use `usecols` to select a subset'): not
    what a line must hold, nor where weights go."""
    (tmp_path / "edges.txt").write_text(lines)
    np.save(tmp_path / "features.npy", np.ones((3, 1), np.float32))
    np.save(tmp_path / "labels.npy", np.array([0, 1, 0]))
    with pytest.raises(SpgnnError) as e:
        load_dataset(str(tmp_path))
    with pytest.raises(SpgnnError) as ooc:              # the out-of-core reader, a chunk at a time, in the same words
        partition_edge_folder(tmp_path, tmp_path / "parts", 2, "block", chunk=1)
    for line, says in ((str(e.value), (said,)), (str(ooc.value), (said, "found 3 columns"))):   # (a line of 3 alone)
        assert "expected two columns, integer node ids 'src dst' or 'src,dst' a line" in line
        assert any(s in line for s in says) and "usecols" not in line and "no header and no weights" in line
    (tmp_path / "edges.txt").write_text("0 1\n1 2\n2 x\n")     # out of core, the file's row, not its chunk's
    for read in (lambda: load_dataset(str(tmp_path)),
                 lambda: partition_edge_folder(tmp_path, tmp_path / "parts", 2, "block", chunk=2)):
        with pytest.raises(SpgnnError, match="could not convert string 'x' to int64 at row 2, column 2"):
            read()


def test_auto_says_why_no_layout_fits_a_small_graph(tmp_path):
    """--algo auto on 5 processes for a graph of 3 nodes (GAT on 4: only 1d-halo and sar run it), or with a partition
    file of 2 parts for GAT on 3, said 'no modelled algorithm fits on 5 processes' and no more."""
    star = _weighted_star()
    tiny = Graph(star.adj[:3, :3], star.x[:3], np.array([0, 1, 0]), np.array([True, True, False]),
                 np.array([False, False, True]), np.zeros(3, bool))
    for model, P in (("gcn", 5), ("gat", 4)):
        with pytest.raises(SpgnnError, match=rf"fits on {P} processes: the graph has 3 nodes, fewer than the row "
                                             rf"blocks of every layout it compares that runs --model {model}; use at "
                                             "most 3"):
            choose(_config("auto", model), tiny, P)
    np.save(tmp_path / "two.npy", np.arange(6) % 2)
    with pytest.raises(SpgnnError, match="the partition given holds 2 parts, and no layout it compares that runs "
                                         "--model gat has 2 row blocks; run on 2 processes"):
        choose(_config("auto", "gat", partition=str(tmp_path / "two.npy")), star, 3)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")   # (torch's, of the input made)
def test_a_torch_sparse_adjacency_is_read_as_its_entries():
    """Graph(adj=a torch sparse COO or CSR tensor) ended in scipy's 'unrecognized csr_matrix constructor input'."""
    g = _weighted_star()
    dense = torch.tensor(g.adj.toarray())
    for adj in (dense.to_sparse(), dense.to_sparse_csr(), dense):
        h = Graph(adj, g.x, g.y, g.train_mask, g.val_mask, g.test_mask)
        assert (h.adj != g.adj).nnz == 0 and h.adj.dtype == g.adj.dtype
    with pytest.raises(SpgnnError, match=r"adjacency must be an n×n matrix \(scipy sparse, a dense array or a torch "
                                         r"tensor\), got dict"):
        Graph({"edges": []}, g.x, g.y, g.train_mask, g.val_mask, g.test_mask)


def test_weights_whose_degree_overflows_float32_are_refused():
    """Two in-edges of weight 2e38 made node 0's degree inf in float32: GCN's D^-½ zeroed its row silently, and GIN's
    loss was 7e36."""
    g = _weighted_star()
    heavy = g.adj.copy()
    heavy.data[heavy.indices == 3] = 2e38 * np.array([1, 1, 0.1], np.float32)     # node 3's row: 2e38 + 2e38 + 2e37
    with pytest.raises(SpgnnError, match=r"the weighted in-degree .* of 1 nodes exceeds float32's 3.4e38 \(first at "
                                         r"node 3\), in which normalisation computes: scale the edge weights down"):
        Graph(heavy.T, g.x, g.y, g.train_mask, g.val_mask, g.test_mask)
    assert Graph(heavy, g.x, g.y, g.train_mask, g.val_mask, g.test_mask).n == 6   # each row of A a sum below it


def test_signed_features_are_row_normalised_by_their_l1_norm():
    """--feature-norm row divided each row by its sum: signed values that nearly cancel grew without bound (sbm's
    Gaussian features reached |x| ≈ 1800). By the L1 norm each row's |values| sum to 1, and features of no negative
    value (bags of words) are divided by their sum as before, bit for bit."""
    from spgnn.graph import graph

    x = np.array([[1.0, -0.999, 0.0], [0.0, 0.0, 0.0], [2.0, 2.0, 4.0]], np.float32)
    assert np.allclose(graph.row_normalize(x), x / np.array([[1.999], [1.0], [8.0]]), rtol=1e-6, atol=0)
    bags = np.random.default_rng(0).integers(0, 3, (300, 40)).astype(np.float32)
    sums = bags.sum(axis=1, keepdims=True)
    assert np.array_equal(graph.row_normalize(bags), bags / np.where(sums == 0, 1, sums))
    for dtype in (bool, np.int8, np.uint8):                     # sums of 300 ones in the input's type overflowed
        assert np.allclose(graph.row_normalize(np.ones((2, 300), dtype)), 1 / 300)
    sbm = load_dataset("sbm:2000:4")
    normed = Trainer(TrainConfig(dataset="sbm:2000:4", epochs=1, algo="1d")).x.numpy()
    assert sbm.x.min() < 0 and np.allclose(np.abs(normed).sum(axis=1), 1, rtol=1e-5)


def test_one_feature_column_is_not_row_normalised_away():
    """x / (its row L1 norm) of a single column is ±1 wherever x ≠ 0: with the default --feature-norm row every node
    had the same feature (but its sign) and the run learnt from the graph alone, silently."""
    g = _weighted_star()
    one = Graph(g.adj, g.x[:, :1] * 3 - 1, g.y, g.train_mask, g.val_mask, g.test_mask)
    said = "the features have one column, which --feature-norm row .* pass --feature-norm none"
    with pytest.raises(SpgnnError, match=said):
        Trainer(TrainConfig(epochs=1, algo="1d"), graph=one)
    with pytest.raises(SpgnnError, match=said):
        MinibatchTrainer(TrainConfig(model="sage", epochs=1), None, "sage:2", 2, graph=one)
    ones = Graph(g.adj, np.ones((6, 1), np.float32), g.y, g.train_mask, g.val_mask, g.test_mask)
    assert Trainer(TrainConfig(epochs=1, algo="1d"), graph=ones).x.tolist() == [[1.0]] * 6
    kept = Trainer(TrainConfig(epochs=1, algo="1d", feature_norm="none"), graph=one)
    assert np.array_equal(kept.x.numpy()[np.argsort(kept.node_ids.numpy())], one.x)


def test_a_graph_of_one_class_is_refused():
    """Labels all 0 trained 'successfully': loss 0 and accuracy 1 from the first epoch, whatever the model."""
    g = _weighted_star()
    one = Graph(g.adj, g.x, np.zeros(6, np.int64), g.train_mask, g.val_mask, g.test_mask)
    said = "has one class: every prediction is that class .* a node task needs two classes at least"
    with pytest.raises(SpgnnError, match=said):
        Trainer(TrainConfig(epochs=1, algo="1d"), graph=one)
    with pytest.raises(SpgnnError, match=said):
        MinibatchTrainer(TrainConfig(model="sage", epochs=1), None, "sage:2", 2, graph=one)


def test_edge_weights_are_never_lost_through_an_npz(tmp_path):
    """read_npz read a weighted adj_data as ones, and save_npz wrote a weighted graph (or one with self-loops) as a
    binary one without them: a weighted graph became unweighted, silently. Both refuse in one line."""
    from spgnn.graph.datasets import read_npz, save_npz

    g = _weighted_star()
    with pytest.raises(SpgnnError, match=r"save_npz writes binary graphs without self-loops, and .* has edge weights"):
        save_npz(g, tmp_path / "w.npz")
    a = sp.csr_matrix(g.adj)
    np.savez(tmp_path / "r.npz", adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr, adj_shape=a.shape,
             attr_matrix=g.x, labels=g.y)
    with pytest.raises(SpgnnError, match=r"r\.npz: its adj_data holds edge weights \(values other than 0 and 1\)"):
        read_npz(tmp_path / "r.npz")
    np.savez(tmp_path / "b.npz", adj_data=np.ones_like(a.data), adj_indices=a.indices, adj_indptr=a.indptr,
             adj_shape=a.shape, attr_matrix=g.x, labels=g.y)
    assert read_npz(tmp_path / "b.npz").n == g.n                  # ones: read as before
