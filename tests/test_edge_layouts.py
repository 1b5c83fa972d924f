"""Layouts at their edges, P = 3 and 4 (not a power of two, and grids of one row, column or fiber):

- every algorithm's SpMM contract (`tests.test_contract.contract_case`: Z = A·H and dH = Aᵀ·G equal the reference's,
  set-up, forward and backward bytes equal the cost model's) with a part that is empty, one that holds a single
  node, or one that holds all nodes but one a part; on a graph without edges, a star (the hub's halo is every
  other node, the others' one node or none) and its directed half; at widths below the column blocks; sar with
  --prefetch 0, 1, P−1, P and beyond;
- training on a partition file that gives one part 95% of the nodes, at feature, hidden and class widths that
  2×2 and 2×1×2 grids do not divide: logits, dL/dX and weight gradients equal the single-process reference's,
  the 3-epoch loss curve too, and the run's ledger equals the cost model's prediction;
- a --grid that is not ASCII digits joined by x is refused.
"""

import numpy as np
import pytest
import scipy.sparse as sp

import spgnn.spmm as algorithms
from spgnn.comm.comm import Comm
from spgnn.comm.grid import parse_grid
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.graph import mean_norm
from spgnn.partition.partition import Partition
from spgnn.plan import predict
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close, reference_grads
from tests.test_contract import contract_case

N = 20


def _star(directed: bool):
    """Node 0 joined to every other node (both ways, or as the source of every edge)."""
    leaves = np.arange(1, N)
    rows, cols = (leaves, np.zeros_like(leaves)) if directed else \
        (np.r_[leaves, np.zeros_like(leaves)], np.r_[np.zeros_like(leaves), leaves])
    return sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(N, N))


MATRICES = {"directed": mean_norm(small_graph(n=N, seed=4, directed=True).adj),
            "no edges": sp.csr_matrix((N, N), dtype=np.float32), "star": _star(False), "half star": _star(True)}
SPMM_CASES = [("1d", {}), ("1d", {"overlap": "off"}), ("1.5d", {"replication": 3}), ("1d-halo", {}),
              *(("sar", {"prefetch": k}) for k in (0, 1, 2, 3, 5)), ("sar", {"overlap": "off"}),
              ("2d", {"grid": "1x3"}), ("2d", {"grid": "3x1"}), ("3d", {"grid": "1x1x3"}), ("3d", {"grid": "3x1x1"})]


def _parts(kind: str, B: int) -> np.ndarray:
    """A part vector of N nodes: part 0 "empty", part B−1 holding "one" node, or part 0 holding all nodes "but one"
    a part (node 0, the star's hub, in part 0 unless it is empty)."""
    p = np.arange(N) % B
    if kind == "empty":
        p = 1 + np.arange(N) % (B - 1)
    elif kind == "one":
        p = np.where(p == B - 1, 0, p)
        p[N - 1] = B - 1
    elif kind == "but one":
        p = np.zeros(N, np.int64)
        p[N - B + 1:] = np.arange(1, B)
    return p


def _spmm(comm):
    out = []
    for name, values in SPMM_CASES:
        cls = algorithms.get(name)
        B = cls.num_parts(cls.grid_for(comm.world_size, **values))
        for graph, adj in MATRICES.items():
            for kind in ("empty", "one", "but one") if B > 1 else ("but one",):
                out.append((name, values, graph, kind, contract_case(comm, cls, values, adj, Partition(
                    _parts(kind, B), B), 1 if kind == "one" else 4)))
    return out


def test_spmm_contract_at_the_edges():
    for rank, mine in enumerate(run_local(_spmm, 3)):
        assert len(mine) == sum(3 if algorithms.get(n).num_parts(algorithms.get(n).grid_for(3, **v)) > 1 else 1
                                for n, v in SPMM_CASES) * len(MATRICES)
        for name, values, graph, kind, r in mine:
            where = f"{name} {values} on {graph}, part {kind}, rank {rank} of 3"
            np.testing.assert_allclose(r["z"], r["z_ref"], rtol=1e-5, atol=1e-6, err_msg=f"Z = A·H, {where}")
            np.testing.assert_allclose(r["dh"], r["dh_ref"], rtol=1e-5, atol=1e-6, err_msg=f"dH = Aᵀ·G, {where}")
            assert r["measured"] == r["predicted"], where


GRAPH = small_graph(n=60, f=3, classes=3, seed=24, directed=True)
TRAIN_CASES = [("2d", {"grid": "2x2"}, "gcn", 1), ("3d", {"grid": "2x1x2"}, "sage", 3),
               ("1.5d", {"replication": 2}, "gcn", 3), ("1.5d", {"replication": 4}, "sage", 1),
               ("sar", {"prefetch": 4}, "gcn", 3), ("1d-halo", {}, "gat", 2)]


def _config(algo, values, model, hidden, partition, epochs=3):
    heads = {"heads": 2} if model == "gat" else {}
    return TrainConfig(model=model, hidden=hidden, layers=2, dropout=0.5, seed=3, algo=algo, partition=partition,
                       feature_norm="none", epochs=epochs, eval_every=0, **values, **heads).validate()


def _heavy(path, B: int) -> str:
    """A partition file of GRAPH's nodes, 95% in part 0 and one node in each other part."""
    p = np.zeros(GRAPH.n, np.int64)
    p[GRAPH.n - B + 1:] = np.arange(1, B)
    np.save(path, p)
    return str(path)


def _train(comm, cases):
    out = []
    for case in cases:
        t = Trainer(_config(*case), comm, graph=GRAPH)
        t.x.requires_grad_(True)
        _, logits = t.forward_backward(epoch=2)
        step = (t.node_ids.numpy(), t.algo.columns(GRAPH.num_classes), t.algo.columns(GRAPH.num_features),
                logits.numpy(), t.x.grad.numpy(), {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()})
        t.x.requires_grad_(False)
        comm.ledger.reset()
        losses = [e["loss"] for e in t.run(log=None)["epochs"]]
        out.append((step, losses, {k: tuple(v[:4]) for k, v in comm.ledger.rows.items()}))
    return out


def test_training_on_an_unbalanced_partition(tmp_path):
    P = 4
    cases = []
    for algo, values, model, hidden in TRAIN_CASES:
        B = algorithms.get(algo).num_parts(algorithms.get(algo).grid_for(P, **values))
        cases.append((algo, values, model, hidden, _heavy(tmp_path / f"heavy{B}.npy", B)))
    heavy = np.load(cases[1][-1])                       # 3d 2x1x2: four parts
    assert np.bincount(heavy).tolist() == [57, 1, 1, 1] and 57 >= 0.95 * GRAPH.n
    results = run_local(_train, P, cases)
    for k, (algo, values, model, hidden, path) in enumerate(cases):
        what = f"{algo} {values} {model} hidden {hidden} on a 95% part"
        logits_ref, dx_ref, grads_ref = reference_grads(GRAPH, model, 2, hidden, **({"heads": 2} if model == "gat"
                                                                                    else {}))
        scale = max(float(np.abs(g).max()) for g in grads_ref.values())
        curve = [e["loss"] for e in Trainer(_config("1d-halo", {}, model, hidden, "random"), Comm(),
                                            graph=GRAPH).run(log=None)["epochs"]]
        predicted = predict(_config(algo, values, model, hidden, path), GRAPH, P, epochs=3, evals=1, setup=False)
        logits, dx = np.zeros_like(logits_ref), np.zeros_like(dx_ref)
        for rank, res in enumerate(results):
            (ids, ycols, xcols, lg, gx, grads), losses, ledger = res[k]
            logits[ids, ycols], dx[ids, xcols] = lg, gx
            for name, ref in grads_ref.items():      # GAT's attention vectors' gradients cancel: their model's scale
                assert_close(grads[name], ref, f"d{name} {what} rank {rank}", scale=scale)
            np.testing.assert_allclose(losses, curve, rtol=1e-5, err_msg=what)
            assert ledger == {key: tuple(v[:4]) for key, v in predicted[rank].rows.items()}, f"{what} rank {rank}"
        assert_close(logits, logits_ref, f"logits {what}")
        assert_close(dx, dx_ref, f"dX {what}")


@pytest.mark.parametrize("text", ["1_0x1", " 2x2", "2x2\n", "+2x2", "٢x2", "2x 2", "2xx2", "0x4"])
def test_grid_text_is_ascii_digits_joined_by_x(text):
    with pytest.raises(SpgnnError, match="positive integers joined by x"):
        parse_grid(text)
    assert parse_grid("2X3") == (2, 3) and parse_grid("10x1x2") == (10, 1, 2)
