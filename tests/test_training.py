"""Distributed models equal the single-process reference (outputs, input and weight gradients, dropout
on), for every algorithm, P = 1…4, block and random partitions; training curves do not depend on P."""

import numpy as np
import pytest
import torch

from spgnn import DistGraph, build_model
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close, reference_grads

GRAPHS = {"sym": small_graph(n=53, f=9, seed=4), "dir": small_graph(n=53, f=9, seed=5, directed=True)}
CASES = [(gname, model, layers, algo, part)
         for gname in GRAPHS for model in ("gcn", "sage") for layers in (1, 2)
         for algo in ("1d", "1d-halo", "1.5d") for part in ("block", "random")]


def _rank(comm):
    out = []
    for gname, model, layers, algo, part in CASES:
        cfg = TrainConfig(model=model, layers=layers, hidden=8, dropout=0.5, seed=3, algo=algo, partition=part,
                          feature_norm="none", replication=2 if algo == "1.5d" and comm.world_size % 2 == 0 else 0)
        t = Trainer(cfg, comm, graph=GRAPHS[gname])
        t.x.requires_grad_(True)
        _, logits = t.forward_backward(epoch=2)
        grads = {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()}
        out.append((t.node_ids.numpy(), logits.numpy(), t.x.grad.numpy(), grads))
    return out


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_models_match_reference(P):
    results = run_local(_rank, P)
    for k, (gname, model, layers, algo, part) in enumerate(CASES):
        logits_ref, dx_ref, grads_ref = reference_grads(GRAPHS[gname], model, layers)
        logits = np.zeros_like(logits_ref)
        dx = np.zeros_like(dx_ref)
        for ids, lg, gx, grads in (res[k] for res in results):
            logits[ids], dx[ids] = lg, gx
            for name, ref in grads_ref.items():    # every rank holds the same, fully summed gradient
                assert_close(grads[name], ref, f"d{name} {model}/{layers} {algo} {part} {gname} P={P}")
        what = f"{model}/{layers} layers, {algo}, {part}, {gname}, P={P}"
        assert_close(logits, logits_ref, f"logits {what}")
        assert_close(dx, dx_ref, f"dX {what}")


def _curve(comm, model, algo):
    cfg = TrainConfig(model=model, algo=algo, partition="random", epochs=20, eval_every=0, dropout=0.5,
                      hidden=16, seed=1)
    return [e["loss"] for e in Trainer(cfg, comm).run(log=None)["epochs"]]


@pytest.mark.parametrize("model,algo", [("gcn", "1d-halo"), ("sage", "1.5d")])
def test_loss_curve_independent_of_P(model, algo):
    """20 epochs on Cora with dropout: the same losses at P = 1, 2 and 4."""
    curves = {P: run_local(_curve, P, model, algo)[0] for P in (1, 2, 4)}
    assert curves[1][-1] < curves[1][0] - 0.1       # it trains
    for P in (2, 4):
        np.testing.assert_allclose(curves[P], curves[1], rtol=1e-5, err_msg=f"P={P}")


def test_gradients_not_averaged_twice():
    """The global-mean loss: P=2 with one training node per rank must give the serial gradient."""
    g = small_graph(n=20, f=4, seed=9)
    g.train_mask[:] = False
    g.train_mask[[0, 19]] = True
    res = run_local(_one, 2, g)
    _, _, grads_ref = reference_grads(g, "gcn", 2, dropout=0.0)
    for grads in res:
        for name, ref in grads_ref.items():
            assert_close(grads[name], ref, name)


def _one(comm, g):
    t = Trainer(TrainConfig(hidden=8, dropout=0.0, seed=3, feature_norm="none"), comm, graph=g)
    t.forward_backward(epoch=2)
    return {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()}


def test_weights_identical_after_training():
    res = run_local(_weights, 3)
    for w in res[1:]:
        for k in w:
            assert torch.equal(torch.as_tensor(w[k]), torch.as_tensor(res[0][k])), k


def _weights(comm):
    t = Trainer(TrainConfig(epochs=5, eval_every=0, partition="random"), comm)
    t.run(log=None)
    return {k: p.detach().numpy().copy() for k, p in t.model.state_dict().items()}


def test_best_epoch_without_evaluations_during_training():
    """--eval-every 0 evaluates at the end only: that evaluation is the best one (the report's best was empty)."""
    report = Trainer(TrainConfig(epochs=2, hidden=8, eval_every=0), Comm()).run(log=None)
    final = report["final"]
    assert report["best"] == {"epoch": 1, "val_acc": final["val_acc"], "test_acc": final["test_acc"]}
    assert all("val_acc" not in e for e in report["epochs"])


def test_a_loop_that_passes_no_epoch_draws_fresh_dropout_masks():
    """model(g, x) in training, without an epoch, keys its dropout masks by the count of such forwards (they were
    epoch 0's every time); an epoch given keys them as before."""
    g = DistGraph(dataset="cora")
    torch.manual_seed(0)
    model = build_model("gcn", g.num_features, g.num_classes, 16, 2, dropout=0.5)
    first, second = model(g, g.x), model(g, g.x)
    assert not torch.equal(first, second)
    assert torch.equal(model(g, g.x, epoch=0), first) and torch.equal(model(g, g.x, epoch=1), second)
    model.eval()
    assert torch.equal(model(g, g.x), model(g, g.x)) and model.forwards == 2


def _batch_norm_run(comm, model):
    cfg = TrainConfig(model=model, layers=3, hidden=16, epochs=4, batch_norm=True, eval_every=0, algo="1d-halo",
                      weight_decay=0.0)                       # else the decay alone moves a bias
    t = Trainer(cfg, comm)
    before = {k: p.detach().clone() for k, p in t.model.named_parameters()}
    final = t.run(log=None)["final"]
    moved = {k for k, p in t.model.named_parameters() if not torch.equal(p.detach(), before[k])}
    return final, moved


@pytest.mark.parametrize("model", ["gcn", "gin"])
def test_batch_norm_evaluates_alike_at_every_P(model):
    """The bias a layer adds before a batch norm changes no output, so its gradient is 0; computed, it was rounding
    noise that depended on P, which Adam scaled up to full steps: the same loss curve, accuracies 7 points apart."""
    (one, moved), *_ = run_local(_batch_norm_run, 1, model)
    (two, _), *_ = run_local(_batch_norm_run, 2, model)
    assert one == pytest.approx(two, rel=1e-5, abs=1e-6)
    shift = "bias" if model == "gcn" else "bias2"
    assert {f"layers.{i}.{shift}" for i in range(2)}.isdisjoint(moved) and f"layers.2.{shift}" in moved
    assert {f"layers.{i}.weight{'' if model == 'gcn' else '2'}" for i in range(3)} <= moved


def test_batch_norm_follows_hidden_layers_only():
    """APPNP's class-width Linear, which only the propagation follows, had a batch norm of its logits, and that
    Linear's bias a gradient taken as 0: it never trained."""
    (_, moved), *_ = run_local(_batch_norm_run, 1, "appnp")
    model = build_model("appnp", 10, 3, hidden=16, layers=3, batch_norm=True)
    assert [type(m).__name__ for m in model.norms] == ["BatchNorm", "BatchNorm", "NoNorm"]
    assert "layers.2.bias" in moved and "layers.1.bias" not in moved


def test_a_library_run_writes_its_report_to_output(tmp_path):
    """TrainConfig(output=...) is every flag's field, yet only the command line wrote the report; a diverged run's
    report is written too."""
    import json

    for name, changes in (("ok", {}), ("diverged", {"lr": 1e30})):
        out = tmp_path / name / "r.json"
        report = Trainer(TrainConfig(epochs=2, hidden=4, eval_every=0, output=str(out), **changes), Comm(0, 1)) \
            .run(log=None)
        written = json.loads(out.read_text())
        assert written["epochs"] == report["epochs"] and ("stopped" in written) == (name == "diverged")
