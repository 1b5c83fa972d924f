"""Distributed equals serial on a graph that is not small and not tidy: an R-MAT graph of 2,048 nodes (power-law
degrees) made directed and weighted, with self-loops, duplicate entries (summed into weights) and an isolated
node. For every algorithm at P = 1…8 (2d and 3d on non-square grids, 1.5d with c = 1, 2, 3, 4 and P), the
logits, the input gradient dL/dX and every weight gradient of one training step (dropout on) equal the
single-process reference's to relative 1e-5; batch norm is checked on every whole-row layout. Eight processes
are launched once for every P and case (`tests.worlds`)."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import spgnn.spmm as algorithms
from spgnn.comm.comm import Comm
from spgnn.config import TrainConfig
from spgnn.graph.datasets import rmat
from spgnn.graph.graph import Graph
from spgnn.train.fullbatch import Trainer
from tests.reference_model import assert_close, reference_grads
from tests.worlds import errors, run_worlds

F, C, HIDDEN, LAYERS = 6, 4, 5, 2


def awkward_rmat(scale=11, seed=7) -> Graph:
    """rmat(scale) with a third of its entries dropped one way (directed), weights in [0.5, 2), 64 self-loops,
    128 entries repeated (summed into their weight) and the last node cut off from every other."""
    g = rmat(scale, 8, seed=seed, num_features=F, num_classes=C)
    rng = np.random.default_rng(seed)
    a = sp.triu(g.adj, k=1).tocoo()
    keep_fwd, keep_bwd = rng.random(a.nnz) < 0.8, rng.random(a.nnz) < 0.8
    row = np.concatenate([a.row[keep_fwd], a.col[keep_bwd]])
    col = np.concatenate([a.col[keep_fwd], a.row[keep_bwd]])
    loops = rng.choice(g.n, 64, replace=False)
    dup = rng.choice(row.size, 128, replace=False)
    row, col = np.concatenate([row, loops, row[dup]]), np.concatenate([col, loops, col[dup]])
    w = rng.uniform(0.5, 2.0, row.size).astype(np.float32)
    keep = (row != g.n - 1) & (col != g.n - 1)
    adj = sp.csr_matrix((w[keep], (row[keep], col[keep])), shape=(g.n, g.n))
    return Graph(adj, g.x, g.y, g.train_mask, g.val_mask, g.test_mask, name="awkward-rmat", num_classes=C)


GRAPH = awkward_rmat()
PROCS = range(1, 9)
GRID2 = {1: "1x1", 2: "2x1", 3: "1x3", 4: "4x1", 5: "5x1", 6: "2x3", 7: "1x7", 8: "2x4"}
GRID3 = {1: "1x1x1", 2: "1x1x2", 3: "1x1x3", 4: "2x1x2", 5: "1x1x5", 6: "1x2x3", 7: "7x1x1", 8: "2x2x2"}
REPLICATION = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 3, 7: 7, 8: 4}


def cases(P: int) -> list[dict]:
    """Every algorithm at P, as TrainConfig options; models and batch norm alternate with P's parity so that over
    the sweep each whole-row layout runs batch norm and 2d, 3d and sar run two models each."""
    even = P % 2 == 0
    two = ("gcn", "sage") if even else ("sage", "gcn")
    return [dict(algo="2d", model=two[0], grid=GRID2[P]), dict(algo="3d", model=two[1], grid=GRID3[P]),
            dict(algo="1.5d", model="gcn", replication=REPLICATION[P], batch_norm=True),
            dict(algo="1d", model="gcn", batch_norm=even), dict(algo="1d-halo", model="sage", batch_norm=not even),
            dict(algo="sar", model="gat", heads=2) if even else dict(algo="sar", model="sage", batch_norm=True)]


def _config(case: dict) -> TrainConfig:
    return TrainConfig(hidden=HIDDEN, layers=LAYERS, dropout=0.5, seed=3, partition="random", feature_norm="none",
                       epochs=1, eval_every=0, **case).validate()


def _rank(comm):
    """Each case's (node ids, class columns, feature columns, logits, dL/dX, weight gradients) on this rank."""
    out = []
    for case in cases(comm.world_size):
        t = Trainer(_config(case), comm, graph=GRAPH)
        t.x.requires_grad_(True)
        _, logits = t.forward_backward(epoch=2)
        out.append((t.node_ids.numpy(), t.algo.columns(C), t.algo.columns(F), logits.numpy(), t.x.grad.numpy(),
                    {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()}))
    return out


_REFERENCE = {}


def reference(model: str, batch_norm: bool, heads: int):
    key = (model, batch_norm, heads)
    if key not in _REFERENCE:
        _REFERENCE[key] = reference_grads(GRAPH, model, LAYERS, HIDDEN, batch_norm=batch_norm, heads=heads)
    return _REFERENCE[key]


def test_the_graph_is_awkward():
    a = GRAPH.adj
    assert GRAPH.n >= 2000 and (a != a.T).nnz > 0 and a.diagonal().astype(bool).sum() >= 60
    assert len(set(a.data.tolist())) > 100 and a.data.max() >= 2.5                 # weights, summed duplicates
    assert a[-1].nnz == 0 and a[:, -1].nnz == 0                                        # an isolated node
    degrees = np.diff(a.indptr)
    assert degrees.max() > 20 * max(1, np.median(degrees))                             # power-law: a hub


def test_every_algorithm_is_a_case():
    for P in PROCS:
        assert {c["algo"] for c in cases(P)} == set(algorithms.ALGORITHMS), P
    assert {c.get("replication") for P in PROCS for c in cases(P)} >= {1, 2, 3, 4}
    assert {c.get("grid") for P in PROCS for c in cases(P)} >= {"2x3", "1x7", "2x4", "1x2x3", "7x1x1"}
    for algo in ("2d", "3d", "sar"):
        assert len({c["model"] for P in PROCS for c in cases(P) if c["algo"] == algo}) >= 2, algo
    assert {c["algo"] for P in PROCS for c in cases(P) if c.get("batch_norm")} == \
        {name for name, cls in algorithms.ALGORITHMS.items() if cls.whole_rows}


_RESULTS = {}


def results(P: int) -> list:
    """Every rank's `_rank` at P, all P from one launch (`tests.worlds.run_worlds`)."""
    if not _RESULTS:
        _RESULTS.update(run_worlds(_rank, PROCS))
    return _RESULTS[P]


@pytest.mark.parametrize("P", PROCS)
def test_distributed_equals_serial(P):
    results_ = results(P)
    assert not errors(results_), f"P={P}: {errors(results_)[0]}"
    for k, case in enumerate(cases(P)):
        what = f"{case} P={P}"
        logits_ref, dx_ref, grads_ref = reference(case["model"], case.get("batch_norm", False), case.get("heads", 8))
        logits, dx = np.zeros_like(logits_ref), np.zeros_like(dx_ref)
        scale = max(float(np.abs(g).max()) for g in grads_ref.values())
        for rank, res in enumerate(results_):
            ids, ycols, xcols, lg, gx, grads = res[k]
            logits[ids, ycols], dx[ids, xcols] = lg, gx
            assert grads.keys() == grads_ref.keys(), what
            for name, ref in grads_ref.items():      # a bias before batch norm has a gradient of ~0: its scale
                assert_close(grads[name], ref, f"d{name} {what} rank {rank}", scale=scale)
        assert_close(logits, logits_ref, f"logits {what}")
        assert_close(dx, dx_ref, f"dX {what}")
        assert np.abs(dx_ref).max() > 0 and torch.isfinite(torch.as_tensor(logits)).all(), what


def test_gcn_keeps_edge_weights():
    t = Trainer(_config(dict(algo="1d", model="gcn")), Comm(), graph=GRAPH)
    _, logits = t.forward_backward(epoch=2)
    logits_ref = reference_grads(GRAPH, "gcn", LAYERS, HIDDEN)[0]
    assert_close(logits.numpy(), logits_ref[t.node_ids.numpy()], "GCN logits on a weighted graph")
