"""What a partition changes in a distributed run, and what it must not: the bytes 1d-halo (and SAR) move
per SpMM are exactly comm_volume·f·4, for every partitioner; the training curve, accuracies and predictions
(in original node ids) are the same for every partitioner."""

import importlib.util

import numpy as np
import pytest
import torch

import spgnn.spmm as algorithms
from spgnn.comm.grid import ProcessGrid
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import gcn_norm, mean_norm
from spgnn.partition.metrics import halo_rows
from spgnn.partition.partition import make_partition
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph

F, P = 6, 3
OPTIONAL = {"metis": "pymetis", "kahip": "kahip", "kaminpar": "kaminpar"}
METHODS = [m for m in ("block", "random", "ldg", "fennel", "metis", "kahip", "kaminpar")
           if importlib.util.find_spec(OPTIONAL.get(m, "numpy"))]
HALO_ALGOS = [a for a in ("1d-halo", "sar") if a in algorithms.ALGORITHMS]
GRAPHS = {"sym": (small_graph(n=70, seed=11), gcn_norm), "dir": (small_graph(n=70, seed=12, directed=True), mean_norm)}


def _bytes_rank(comm):
    out = []
    for gname, (g, norm) in GRAPHS.items():
        for method in METHODS:
            part = make_partition(method, g.adj, comm.world_size, seed=1)
            for algo in HALO_ALGOS:
                cls = algorithms.get(algo)
                op = cls.from_matrix(norm(g.adj), part, comm, ProcessGrid(comm, (comm.world_size,), cls.grid_names))
                h = torch.randn(op.rows.stop - op.rows.start, F, requires_grad=True)
                comm.ledger.reset()
                with comm.phase("forward", layer=0):
                    z = op.spmm(h)
                z.backward(torch.ones_like(z))
                out.append((gname, method, algo, part.parts,
                            {ph: (comm.ledger.total("sent_bytes", phase=ph), comm.ledger.total("recv_bytes", phase=ph))
                             for ph in ("forward", "backward")}))
    return out


def _rank(comm):
    return _bytes_rank(comm), _train_rank(comm)


@pytest.fixture(scope="module")
def results():
    """Both studies in one set of P processes (starting them is the slow part)."""
    return run_local(_rank, P, timeout_s=300)


def test_halo_bytes_equal_volume(results):
    results = [r[0] for r in results]
    assert len(results[0]) == len(GRAPHS) * len(METHODS) * len(HALO_ALGOS)
    for k, (gname, method, algo, parts, _) in enumerate(results[0]):
        halo = halo_rows(GRAPHS[gname][0].adj, parts, P)          # metrics on the raw graph, not on Â
        where = f"{algo}, {method} partition, {gname}"
        for rank, res in enumerate(results):
            fwd, bwd = res[k][4]["forward"], res[k][4]["backward"]
            assert fwd[1] == halo[rank].sum() * F * 4, where            # receives Σ_j |R_ij| rows
            assert fwd[0] == halo[:, rank].sum() * F * 4, where         # sends Σ_j |R_ji| rows
            # the backward returns them, or (symmetric Â) fetches G's halo rows as the forward fetched H's
            assert bwd == (fwd if gname == "sym" else (fwd[1], fwd[0])), where
        assert sum(res[k][4]["forward"][1] for res in results) == halo.sum() * F * 4


def _train_rank(comm):
    g = load_dataset("cora")
    out = {}
    for method in METHODS:
        cfg = TrainConfig(partition=method, epochs=6, eval_every=0, hidden=16, dropout=0.5, seed=2)
        t = Trainer(cfg, comm, graph=g)
        report = t.run(log=None)
        metrics = report["partition"]["metrics"]                # complete on rank 0
        out[method] = ([e["loss"] for e in report["epochs"]], report["final"], t.predict(gather=True),
                       metrics and metrics["comm_volume"], t.parts.partition.parts)
    return out


def test_training_independent_of_partitioner(results):
    """6 epochs of GCN on Cora with dropout at P = 3: same losses, accuracies and logits for every method."""
    results = [r[1] for r in results]
    ref_losses, ref_final, ref_logits, _, _ = results[0]["block"]
    volumes = {}
    for method in METHODS:
        for rank, res in enumerate(results):
            losses, final, logits, _, parts = res[method]
            np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, err_msg=f"{method} rank {rank}")
            np.testing.assert_allclose(logits, ref_logits, rtol=1e-3, atol=1e-4, err_msg=f"{method} rank {rank}")
            for key in ("train_acc", "val_acc", "test_acc"):
                assert abs(final[key] - ref_final[key]) <= 1e-3, (method, key)
            np.testing.assert_array_equal(parts, results[0][method][4])       # every rank: the same partition
        volumes[method] = results[0][method][3]
    assert ref_losses[-1] < ref_losses[0]
    if "metis" in volumes:
        assert volumes["metis"] < volumes["random"]
