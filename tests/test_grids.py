"""Process grids beyond 1D: 1.5D (c = 1, 2), 2D (R×C) and 3D (R×C×L), P = 1, 2, 4, 6, 8, on a symmetric
graph (GCN) and a directed one (GraphSAGE):

- the SpMM Z = A·H and dH = Aᵀ·G equal scipy's, and the bytes each rank receives are those of the blocks
  it is sent, counted here from the matrix (int32 indptr or rows, int32 indices and float32 values of
  A's blocks, float32 blocks of H, the fiber's reduce-scatter);
- logits, input and weight gradients equal the single-process reference (relative 1e-5), and so does
  the loss curve of `EPOCHS` epochs (each its own dropout masks, Adam past its first step);
- the whole run's ledger (`EPOCHS` steps and an evaluation) equals the cost model's prediction, every
  rank, every collective;
- bad grid input fails with a clear message before any process starts.
"""

import math
import re
from collections import defaultdict

import numpy as np
import pytest
import torch

import spgnn.spmm as algorithms
from spgnn.comm.comm import Comm
from spgnn.comm.grid import ProcessGrid
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.graph import gcn_norm
from spgnn.partition.partition import Partition, make_parts
from spgnn.plan import plan, predict
from spgnn.spmm.summa import column_slice
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close, reference_grads

GRAPHS = {"sym": small_graph(n=45, f=7, seed=21), "dir": small_graph(n=45, f=7, seed=22, directed=True)}
MODELS = {"sym": ("gcn", 5), "dir": ("sage", 9)}      # (model, hidden): GCN multiplies by W first, SAGE after
SHAPES = {1: ["2d:1x1", "3d:1x1x1"], 2: ["2d:1x2", "2d:2x1", "3d:1x1x2"],
          4: ["2d:1x4", "2d:2x2", "3d:2x1x2"], 6: ["2d:1x6", "2d:2x3", "3d:1x2x3"],
          8: ["2d:1x8", "2d:4x2", "3d:2x2x2"]}
F = 5                                                  # SpMM test width: 1x6 and 1x8 leave empty column blocks
EPOCHS = 3      # of the loss curve and the ledger: a step repeats the last one's products and collectives (10 epochs,
                # as before, were half the test's time at P = 8 on 2 cores)


def _options(P):
    """(algo, grid, replication) for every shape tested at P."""
    out = [(s.split(":")[0], s.split(":")[1], 0) for s in SHAPES[P]]
    return out + [("1.5d", None, c) for c in (1, 2) if P % c == 0]


def _config(gname, algo, grid, c, **kw):
    model, hidden = MODELS[gname]
    return TrainConfig(model=model, hidden=hidden, layers=2, dropout=0.5, seed=3, algo=algo, grid=grid,
                       replication=c, partition="random", feature_norm="none", **kw)


def _spmm(comm, gname, algo, grid):
    """Z and dH of one SpMM on this rank's block, and what the ledger recorded."""
    a = gcn_norm(GRAPHS[gname].adj)
    cls = algorithms.get(algo)
    shape = cls.grid_for(comm.world_size, grid=grid)
    part = Partition(make_parts("random", a, cls.num_parts(shape), seed=5), cls.num_parts(shape))
    op = cls.from_matrix(a, part, comm, ProcessGrid(comm, shape, cls.grid_names))
    rng = np.random.default_rng(0)
    h_all, g_all = rng.standard_normal((2, a.shape[0], F)).astype(np.float32)
    rows, cols = part.perm[op.rows], op.columns(F)
    h = torch.tensor(h_all[rows][:, cols], requires_grad=True)
    comm.ledger.reset()
    with comm.phase("forward", layer=0):
        z = op.spmm(h)
    z.backward(torch.tensor(g_all[rows][:, cols]))
    ledger = {k: tuple(v) for k, v in comm.ledger.rows.items()}
    return rows, cols, z.detach().numpy(), h.grad.numpy(), ledger, part.parts, shape


def _rank(comm):
    out = []
    for gname in GRAPHS:
        for algo, grid, c in _options(comm.world_size):
            spmm = _spmm(comm, gname, algo, grid) if algo != "1.5d" else None
            t = Trainer(_config(gname, algo, grid, c, epochs=EPOCHS, eval_every=0), comm, graph=GRAPHS[gname])
            t.x.requires_grad_(True)
            _, logits = t.forward_backward(epoch=2)            # gradients only: no optimizer step
            grads = {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()}
            step = (t.node_ids.numpy(), t.algo.columns(t.info.num_classes), t.algo.columns(t.info.num_features),
                    logits.numpy(), t.x.grad.numpy(), grads)
            t.x.requires_grad_(False)
            comm.ledger.reset()
            losses = [e["loss"] for e in t.run(log=None)["epochs"]]
            ledger = {k: tuple(v[:4]) for k, v in comm.ledger.rows.items()}
            out.append((spmm, step, losses, ledger))
    return out


def _expected_bytes(a, parts, shape, rank):
    """{(phase, op, group): received bytes} of one SpMM of width F, from the renumbered matrix."""
    R, C, L = shape
    i, j, l = np.unravel_index(rank, shape)
    part = Partition(parts, R * L)
    m, off, fj = part.renumber(a), part.offsets, len(range(F)[column_slice(F, C, j)])
    block = slice(off[i * L], off[(i + 1) * L])
    out = defaultdict(int)
    for phase, mat in (("forward", m), ("backward", m.T.tocsr())):
        for k in range(R):
            p = k * L + l
            if C > 1 and k % C != j:
                nnz = mat[block, off[p]:off[p + 1]].nnz          # CSR, or COO when sparser than a row each
                out[(phase, "broadcast", "row")] += min(4 * (block.stop - block.start + 1) + 8 * nnz, 12 * nnz)
            if R > 1 and k != i:
                out[(phase, "broadcast", "column")] += 4 * (off[p + 1] - off[p]) * fj
        if L > 1:
            out[(phase, "all_to_all", "fiber")] += 4 * (L - 1) * (off[i * L + l + 1] - off[i * L + l]) * fj
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("P", sorted(SHAPES))
def test_grids_match_reference_and_cost_model(P):
    results = run_local(_rank, P)
    k = 0
    for gname, g in GRAPHS.items():
        model, hidden = MODELS[gname]
        logits_ref, dx_ref, grads_ref = reference_grads(g, model, 2, hidden)
        curve_ref = [e["loss"] for e in Trainer(_config(gname, "1d", None, 0, epochs=EPOCHS, eval_every=0),
                                                 Comm(), graph=g).run(log=None)["epochs"]]
        for algo, grid, c in _options(P):
            what = f"{algo} {grid or c} {model} on {gname}, P={P}"
            cfg = _config(gname, algo, grid, c, epochs=EPOCHS, eval_every=0)
            predicted = predict(cfg, g, P, epochs=EPOCHS, evals=1, setup=False)
            logits, dx = np.zeros_like(logits_ref), np.zeros_like(dx_ref)
            for rank, (spmm, step, losses, ledger) in enumerate(res[k] for res in results):
                ids, ycols, xcols, lg, gx, grads = step
                logits[ids, ycols], dx[ids, xcols] = lg, gx
                for name, ref in grads_ref.items():
                    assert_close(grads[name], ref, f"d{name} {what}")
                np.testing.assert_allclose(losses, curve_ref, rtol=1e-5, err_msg=what)
                assert ledger == {key: tuple(v[:4]) for key, v in predicted[rank].rows.items()}, f"{what} rank {rank}"
                if spmm is not None:
                    _check_spmm(spmm, g, rank, what)
            assert_close(logits, logits_ref, f"logits {what}")
            assert_close(dx, dx_ref, f"dX {what}")
            k += 1


def _check_spmm(spmm, g, rank, what):
    rows, cols, z, dh, ledger, parts, shape = spmm
    a = gcn_norm(g.adj)
    rng = np.random.default_rng(0)
    h_all, g_all = rng.standard_normal((2, a.shape[0], F)).astype(np.float32)
    assert_close(z, (a @ h_all)[rows][:, cols], f"Z {what} rank {rank}")
    assert_close(dh, (a.T @ g_all)[rows][:, cols], f"dH {what} rank {rank}")
    received = {(phase, op, group): row[2] for (phase, _, op, group), row in ledger.items() if row[2]}
    assert received == _expected_bytes(a, parts, shape, rank), f"bytes {what} rank {rank}"


@pytest.mark.parametrize("algo,grid,replication,P,message", [
    ("2d", "2x3", 0, 4, "has 6 processes but the job has 4"),
    ("3d", "2x2", 0, 4, "takes --grid RxCxL"),
    ("2d", "2by2", 0, 4, "positive integers joined by x"),
    ("2d", "0x4", 0, 4, "positive integers joined by x"),
    ("1.5d", None, 3, 4, "must divide the number of processes 4"),
    ("1d", "2x2", 0, 4, "--grid applies to --algo 2d and 3d"),
    ("2d", "64x1", 0, 64, "row blocks but it has only 45 nodes"),
    ("4d", None, 0, 4, "unknown algorithm '4d'"),
])
def test_bad_grids_fail_before_running(algo, grid, replication, P, message):
    cfg = TrainConfig(algo=algo, grid=grid, replication=replication)
    with pytest.raises(SpgnnError, match=message.replace("(", r"\(")):
        plan(cfg.validate(), P, graph=GRAPHS["sym"])


def test_default_grids_are_square_or_cubic():
    assert algorithms.get("2d").grid_shape(8) == (4, 2, 1)
    assert algorithms.get("2d").grid_shape(6) == (3, 2, 1)
    assert algorithms.get("3d").grid_shape(8) == (2, 2, 2)
    assert all(math.prod(algorithms.get("3d").grid_shape(P)) == P for P in range(1, 30))


@pytest.mark.parametrize("names, planes, said", [
    (("row", "row"), None, "must be distinct"),                  # group("row") was one rank's, not the row's
    (("row", "col"), {"row": ("row", "col")}, "must be distinct"),   # a plane replaced the dimension's group
    (("row", "world"), None, "not 'world'"),                       # group("world") ignored it
    (("row", "col"), {"both": ("row", "fiber")}, "span dimensions ['fiber']"),
])
def test_grid_names_that_would_name_the_wrong_group_are_refused(names, planes, said):
    with pytest.raises(SpgnnError, match=re.escape(said)):
        ProcessGrid(Comm(), (1, 1), names, planes=planes)
    assert ProcessGrid(Comm(), (1, 1), ("row", "col"), planes={"both": ("row", "col")}).group("both").size == 1
