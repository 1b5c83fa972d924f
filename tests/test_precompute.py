"""``--precompute on``: the sparse products of the features, made once a run and kept (`DistGraph.spmm`,
`DistGraph.kept`). For every layer that aggregates its input (GCN, GraphSAGE, GIN) on every layout, with dropout 0:
the first step's logits and gradients equal the single-process reference's, a second forward on the kept product
gives the same logits bit for bit, the loss curve is that of ``--precompute off``, the bytes equal the cost model's
(the product of the features in the first step only, and no more), and the kept bytes its `kept_bytes`. A kept
product changed in place is one line; changed features are multiplied again; a model that drops out its input,
or ``--precompute off``, keeps nothing."""

import numpy as np
import pytest
import torch

from spgnn import cost, plan
from spgnn.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.distgraph import DistGraph
from spgnn.errors import SpgnnError
from spgnn.graph.adjacency import get_adjacency
from spgnn.layers import build_model
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close, reference_grads

G = small_graph(n=41, f=7, classes=3, directed=True, seed=5)
ALGOS = [("1d", {}), ("1d-halo", {}), ("1.5d", {"replication": 2}), ("2d", {"grid": "2x2"}), ("3d", {"grid": "1x2x2"}),
         ("sar", {})]
CASES = [(model, hidden, algo, opts) for model, hidden in (("gcn", 6), ("sage", 6), ("gin", 5), ("gcn", 9))
         for algo, opts in ALGOS]      # hidden < 7 features: GCN's and SAGE's first products change order when kept


def _config(model, hidden, algo, opts, precompute="on"):
    return TrainConfig(model=model, layers=2, hidden=hidden, dropout=0.0, seed=3, algo=algo, feature_norm="none",
                       epochs=2, precompute=precompute, **opts)


def _rank(comm):
    out = []
    for model, hidden, algo, opts in CASES:
        cfg = _config(model, hidden, algo, opts)
        t = Trainer(cfg, comm, graph=G)
        _, logits = t.forward_backward(epoch=0)
        grads = {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()}
        _, again = t.forward_backward(epoch=0)
        kept = t.g.kept_bytes()
        comm.ledger.reset()
        t = Trainer(cfg, comm, graph=G)
        losses = [e["loss"] for e in t.run(log=None)["epochs"]]
        measured = sorted((*map(str, key), *row[:4]) for key, row in comm.ledger.rows.items())
        off = Trainer(_config(model, hidden, algo, opts, "off"), comm, graph=G)
        out.append((t.node_ids.numpy(), t.g.columns(G.num_classes), logits.numpy(), torch.equal(logits, again),
                    grads, kept, losses, [e["loss"] for e in off.run(log=None)["epochs"]], measured))
    return out


@pytest.fixture(scope="module")
def runs():
    return run_local(_rank, 4, timeout_s=600)


def test_kept_products_give_the_reference_and_the_same_curve(runs):
    for i, (model, hidden, algo, _) in enumerate(CASES):
        ref_logits, _, ref_grads = reference_grads(G, model, layers=2, hidden=hidden, dropout=0.0, seed=3, epoch=0)
        for ids, cols, logits, same, grads, _, losses, off, _ in (r[i] for r in runs):
            where = f"{model} (hidden {hidden}) on {algo}"
            assert_close(logits, ref_logits[ids][:, cols], f"{where}: logits")
            for k, gk in grads.items():
                assert_close(gk, ref_grads[k], f"{where}: gradient of {k}", rtol=1e-4)
            assert same, f"{where}: the second forward, on the kept product, changed the logits"
            np.testing.assert_allclose(losses, off, rtol=1e-5, err_msg=f"{where}: --precompute on and off")


def test_kept_products_move_and_hold_what_the_cost_model_predicts(runs):
    """Measured bytes equal the predicted, call for call, and are fewer than without the kept product (two epochs:
    its exchange once at the features' width against two forwards and backwards of the layer's product); the kept
    bytes equal `cost.kept_bytes`."""
    for i, (model, hidden, algo, opts) in enumerate(CASES):
        cfg = _config(model, hidden, algo, opts)
        p = plan.plan(cfg, 4, G)
        mc = plan.model_cost(p.cfg, p.graph)
        stats = {a: plan.block_stats(p.graph, p.partition, a) for a in mc.adjacencies}
        predicted = plan.predict(cfg, G, 4, epochs=2, evals=3)
        off = plan.predict(_config(model, hidden, algo, opts, "off"), G, 4, epochs=2, evals=3)
        for r, run in enumerate(runs):
            where = f"{model} (hidden {hidden}) on {algo}, rank {r}"
            assert run[i][8] == sorted((*map(str, k), *v[:4]) for k, v in predicted[r].rows.items()), where
            held = cost.kept_bytes(cost.spmm.get(algo), stats, p.shape, r, mc)
            assert run[i][5] == held > 0, (where, run[i][5], held)
        where = f"{model} (hidden {hidden}) on {algo}"
        assert sum(led.total() for led in predicted) < sum(led.total() for led in off), where


def _graph(**options):
    return DistGraph(Comm(), graph=G, adjacency="mean", feature_norm="none", **options)


def test_a_kept_product_is_made_once_and_guarded():
    g = _graph()
    z = g.spmm(g.x, "mean")
    assert g.kept(g.x, "mean") and g.kept(z, "mean") and g.spmm(g.x, "mean") is z and g.kept_bytes() == z.nbytes
    assert g.spmm(z, "mean") is g.spmm(z, "mean")                  # Â·(Â·X): a product of a kept product
    assert not g.kept(g.x.clone(), "mean") and not g.kept(g.x.clone().requires_grad_(), "mean")
    mean = get_adjacency("mean").of(G.adj).toarray()
    expected = torch.as_tensor(mean @ G.x, dtype=torch.float32)[g.node_ids]
    torch.testing.assert_close(z, expected)
    z.mul_(2)
    with pytest.raises(SpgnnError, match="was changed in place: change a copy"):
        g.spmm(g.x, "mean")
    g.x.mul_(3)                                                     # new features: multiplied again
    torch.testing.assert_close(g.spmm(g.x, "mean"), 3 * expected)
    assert g.kept_bytes() == z.nbytes


def test_nothing_is_kept_with_precompute_off_or_a_model_that_drops_its_input():
    off = _graph(precompute="off")
    assert not off.kept(off.x, "mean") and off.spmm(off.x, "mean") is not off.spmm(off.x, "mean")
    assert off.kept_bytes() == 0
    for dropout, kept in ((0.5, False), (0.0, True)):
        g = _graph()
        g.prepare(build_model("sage", G.num_features, G.num_classes, 4, 2, dropout))
        assert g.kept(g.x, "mean") is kept and g.precompute is kept
    with pytest.raises(SpgnnError, match="--precompute must be on or off, got 'yes'"):
        TrainConfig(precompute="yes").validate()


def test_a_link_model_whose_encoder_drops_its_input_keeps_nothing():
    """The link task's model holds the built-in stack as its encoder: its dropout turns keeping off as the stack's
    own does (else its evaluations would keep Â·X through every later step)."""
    from spgnn.train.link import LinkModel

    for dropout, kept in ((0.5, False), (0.0, True)):
        g = _graph()
        g.prepare(LinkModel(build_model("sage", G.num_features, 8, 8, 2, dropout), 8, "dot"))
        assert g.precompute is kept
