"""SAR: GCN, GraphSAGE and GAT outputs and gradients equal the single-process reference at P = 1…4 (block
and random partitions, an empty shard pair, a rank without in-edges), whatever the prefetch depth; the
rematerializing attention backward equals central differences in float64; losses do not depend on P; the
bytes held for the backward per rank fall as 1/P; asynchronous all-to-alls move and count what the
blocking ones do."""

import functools

import numpy as np
import pytest
import torch

from spgnn.comm.comm import Comm
from spgnn.comm.grid import ProcessGrid
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.graph.graph import Graph, add_self_loops, edges_to_adj
from spgnn.partition.partition import Partition
from spgnn.spmm.sar import SAR
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close, reference_grads


def holes_graph(n=48, f=7, seed=6) -> Graph:
    """Directed; under block partitions at P = 2…4 the last part's nodes have no in-edges (P = 4: a rank
    without any) and no edge runs from the first part into the second (an empty shard pair)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 6 * n), rng.integers(0, n, 6 * n)
    keep = (src != dst) & (dst < 3 * n // 4) & ~((src < n // 4) & (dst >= n // 4) & (dst < n // 2))
    adj = edges_to_adj(src[keep], dst[keep], n)
    y = np.arange(n) % 3
    masks = [np.arange(n) % 2 == 0, np.arange(n) % 4 == 1, np.arange(n) % 4 == 3]
    return Graph(adj, rng.standard_normal((n, f)).astype(np.float32), y, *masks, name="holes")


GRAPHS = {"sym": small_graph(n=53, f=9, seed=4), "dir": small_graph(n=53, f=9, seed=5, directed=True),
          "holes": holes_graph()}
MODELS = {"gcn": {}, "sage": {}, "gat": {"heads": 3, "out_heads": 2}, "gat-bn": {"heads": 2, "batch_norm": True},
          "sage-bn": {"batch_norm": True}}
CASES = [(gname, model, part) for gname in GRAPHS for model in MODELS for part in ("block", "random")
         if gname != "holes" or part == "block"]
MEMORY_GRAPH = small_graph(n=2400, f=24, seed=8, avg_degree=8)


def _config(model, **kw):
    opts = dict(model=model.split("-")[0], hidden=8, dropout=0.5, seed=3, feature_norm="none") | MODELS[model]
    return TrainConfig(**opts | kw)


def _run(comm, cfg, graph, parts=None):
    t = Trainer(cfg, comm, graph=graph, parts=parts)
    t.x.requires_grad_(True)
    _, logits = t.forward_backward(epoch=2)
    grads = {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()}
    return t, (t.node_ids.numpy(), logits.numpy(), t.x.grad.numpy(), grads)


def _rank(comm):
    out = {"cases": [_run(comm, _config(model, algo="sar", partition=part), GRAPHS[g])[1]
                     for g, model, part in CASES]}
    # prefetch depth 0 and 3 and 1d-halo's GAT give the same numbers
    out["depth"] = [_run(comm, _config("gat", algo=a, partition="random", prefetch=d), GRAPHS["dir"])[1]
                    for a, d in (("sar", 0), ("sar", 3), ("1d-halo", 1))]
    out["memory"] = _memory(comm)
    return out


def _memory(comm):
    """Peak bytes autograd holds for one forward/backward on MEMORY_GRAPH, per (model, algo)."""
    return {(model, algo): _run(comm, _config(model, algo=algo, hidden=16, **({"heads": 4} if model == "gat" else {})),
                                MEMORY_GRAPH)[0].meter.peak_bytes
            for model in ("gcn", "sage", "gat") for algo in ("sar", "1d-halo")}


@functools.cache
def _memory_p1():
    return _memory(Comm(0, 1))


def _check(results, k, g, what, **options):
    logits_ref, dx_ref, grads_ref = reference_grads(g, **options)
    logits, dx = np.zeros_like(logits_ref), np.zeros_like(dx_ref)
    largest = max(float(np.abs(ref).max()) for ref in grads_ref.values())
    for ids, lg, gx, grads in (res[k] for res in results):
        logits[ids], dx[ids] = lg, gx
        for name, ref in grads_ref.items():
            if np.abs(ref).max() < 1e-6:     # a bias before batch norm: zero up to rounding
                assert np.abs(grads[name]).max() < 1e-6, f"d{name} {what}"
            else:                            # attention vectors' gradients cancel as a whole over the edges
                assert_close(grads[name], ref, f"d{name} {what}", rtol=2e-5, scale=largest if ".att_" in name else None)
    assert_close(logits, logits_ref, f"logits {what}")
    assert_close(dx, dx_ref, f"dX {what}", rtol=2e-5)


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_sar_matches_reference_and_memory_falls(P):
    results = run_local(_rank, P, timeout_s=300)
    for k, (gname, model, part) in enumerate(CASES):
        _check([r["cases"] for r in results], k, GRAPHS[gname], f"{model} {part} {gname} P={P}",
               model=model.split("-")[0], **MODELS[model])
    depth = [r["depth"] for r in results]
    for rank in range(P):      # logits and dX: bit-identical for any depth, 1d-halo's equal to rounding
        for a, b, c in zip(*(depth[rank][k][1:3] for k in range(3))):
            np.testing.assert_array_equal(a, b)
            assert_close(c, a, f"1d-halo GAT rank {rank}")
    memory = {key: max(r["memory"][key] for r in results) for key in results[0]["memory"]}
    p1 = _memory_p1()
    for model in ("gcn", "sage", "gat"):
        assert memory[model, "sar"] <= 1.15 * p1[model, "sar"] / P, (model, P, memory, p1)
    if P > 1:
        assert memory["gat", "1d-halo"] > 1.3 * memory["gat", "sar"], memory


def _finite_differences(comm, dropout):
    """Analytic gradients of L = Σ_ranks Σ R·attend(V, s_src, s_dst) through SAR's rematerializing backward,
    and central differences of L in float64, element by element of the global inputs (every rank steps
    through all of them in lockstep; the owner perturbs)."""
    g = holes_graph(n=9, f=2, seed=1)
    part = Partition(np.arange(9) % comm.world_size, comm.world_size)
    op = SAR.from_matrix(add_self_loops(g.adj), part, comm, ProcessGrid(comm, (comm.world_size,), ("part",)))
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(9, *shape, generator=gen, dtype=torch.float64) for shape in ((2, 3), (2,), (2,))]
    r = torch.randn(9, 2, 3, generator=gen, dtype=torch.float64)
    mine = torch.as_tensor(part.perm[op.rows])
    local = [t[mine].clone().requires_grad_(True) for t in inputs]

    def loss(*xs):
        return comm.all_sum([float((op.attend(*xs, 0.2, dropout, key=5) * r[mine]).sum())])[0]

    (op.attend(*local, 0.2, dropout, key=5) * r[mine]).sum().backward()
    numeric, eps = [], 1e-6
    for which, t in enumerate(inputs):
        d = torch.zeros_like(t)
        for k in range(t.numel()):
            idx = np.unravel_index(k, t.shape)
            owned = np.flatnonzero(mine.numpy() == idx[0])
            vals = []
            for sign in (1, -1):
                xs = [y.detach().clone() for y in local]
                if owned.size:
                    xs[which][(int(owned[0]), *idx[1:])] += sign * eps
                vals.append(loss(*xs))
            d[idx] = (vals[0] - vals[1]) / (2 * eps)
        numeric.append(d[mine].numpy())
    return [x.grad.numpy() for x in local], numeric


@pytest.mark.parametrize("P,dropout", [(1, 0.0), (2, 0.0), (2, 0.5)])
def test_rematerialized_attention_gradient_equals_finite_differences(P, dropout):
    for rank, (analytic, numeric) in enumerate(run_local(_finite_differences, P, dropout)):
        for name, a, n in zip(("dV", "ds_src", "ds_dst"), analytic, numeric):
            np.testing.assert_allclose(a, n, rtol=1e-6, atol=1e-8, err_msg=f"{name} rank {rank} P={P}")


def _async_exchange(comm):
    P, r = comm.world_size, comm.rank
    send_rows = [(r + j) % 3 for j in range(P)]
    recv_rows = [(j + r) % 3 for j in range(P)]
    send = torch.cat([torch.full((k, 2), 10.0 * r + j) for j, k in enumerate(send_rows)])
    with comm.phase("forward", layer=0):
        blocking = comm.all_to_all_v(send, send_rows, recv_rows)
        pending = [comm.all_to_all_v_async(send, send_rows, recv_rows) for _ in range(2)]
    with comm.phase("backward", layer=0):           # recorded in the phase it started in
        results = [p.wait() for p in pending]
    fields = ("calls", "sent_bytes", "recv_bytes", "messages")
    return ([torch.equal(blocking, x) for x in results],
            [comm.ledger.total(f, phase="forward") for f in fields], comm.ledger.total("calls", phase="backward"))


def test_async_all_to_all_moves_and_counts_like_blocking():
    for rank, (same, (calls, sent, recv, messages), backward_calls) in enumerate(run_local(_async_exchange, 3)):
        assert all(same) and calls == 3 and backward_calls == 0
        one_sent = sum((rank + j) % 3 for j in range(3) if j != rank) * 2 * 4
        one_recv = sum((j + rank) % 3 for j in range(3) if j != rank) * 2 * 4
        assert (sent, recv) == (3 * one_sent, 3 * one_recv)
        assert messages == 3 * sum((rank + j) % 3 > 0 for j in range(3) if j != rank)


def _losses(comm, model):
    cfg = TrainConfig(model=model, algo="sar", partition="random", epochs=5, eval_every=0, hidden=8, seed=1,
                      batch_norm=model == "sage", **({"heads": 2} if model == "gat" else {}))
    return [e["loss"] for e in Trainer(cfg, comm).run(log=None)["epochs"]]


def test_losses_independent_of_P():
    """5 epochs on Cora with dropout (each its own masks, Adam past its first steps): the same losses at P = 1, 2
    and 4 (GCN, GraphSAGE with batch norm, GAT). (10 epochs, as before, repeated the same steps at twice the cost.)"""
    curves = {P: run_local(_run_all_losses, P)[0] for P in (1, 2, 4)}
    for P in (2, 4):
        for model in curves[1]:
            np.testing.assert_allclose(curves[P][model], curves[1][model], rtol=1e-5, err_msg=f"{model} P={P}")


def _run_all_losses(comm):
    return {model: _losses(comm, model) for model in ("gcn", "sage", "gat")}
