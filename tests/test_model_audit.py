"""A researcher's own model, loss and loop on every layout (the model audit): what they write against spgnn's public
API trains the same at every P and layout, and what they get wrong is refused with one line. Every P > 1 case runs
in one launch (`tests.worlds.run_worlds`), each test reading its own."""

import numpy as np
import pytest
import torch

import spgnn
from tests.worlds import errors, run_worlds

PROCS = [1, 2, 4]
LAYOUTS = [("1d", None), ("1.5d", None), ("2d", None), ("3d", None), ("1d-halo", None), ("sar", None)]
DATA = "sbm:60:3"


class Regularised(torch.nn.Module):
    """logits = Â·ReLU(Â·X·W_1 + b_1)·W_2 + b_2 (GCN layers)."""

    def __init__(self, f_in, classes):
        super().__init__()
        self.first, self.second = spgnn.GCNConv(f_in, 6), spgnn.GCNConv(6, classes)

    def forward(self, g, x):
        return self.second(g, torch.relu(self.first(g, x)))


def _trained(g, case: str) -> dict:
    """Three steps of `Regularised`: SGD with momentum on cross-entropy + g.replicated(0.05·Σ‖θ‖²) ("regulariser"),
    or AdamW with the gradient clipped to a global norm of 0.05 after its sum ("clipped") or before it ("clipped
    before"): the parameters after."""
    torch.manual_seed(0)
    model = Regularised(g.num_features, g.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9) if case == "regulariser" else \
        torch.optim.AdamW(model.parameters(), lr=0.05)
    model = g.prepare(model, opt)
    for _ in range(3):
        opt.zero_grad()
        loss = g.cross_entropy(model(g, g.x))
        if case == "regulariser":
            loss = loss + g.replicated(0.05 * sum((p ** 2).sum() for p in model.parameters()))
        loss.backward()
        if case == "clipped before":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        g.sync_gradients(model)
        if case == "clipped":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        opt.step()
    return {k: p.detach().clone() for k, p in model.named_parameters()}


def _clipped_before(g) -> str | None:
    try:
        _trained(g, "clipped before")
    except spgnn.SpgnnError as e:
        return str(e)
    return None


class Normalised(Regularised):
    """logits = Â·ReLU(BN(Â·X·W_1))·W_2 + b_2, dropout g.dropout(·, 0.5) after the ReLU in training; b_1 frozen (a
    batch norm cancels it)."""

    def __init__(self, f_in, classes):
        super().__init__(f_in, classes)
        self.norm = spgnn.BatchNorm(6)
        self.first.bias.requires_grad_(False)

    def forward(self, g, x, key=None):
        h = torch.relu(self.norm(g, self.first(g, x)))
        return self.second(g, g.dropout(h, 0.5, key) if self.training else h)


def _normalised(g) -> dict | None:
    """Three Adam steps of `Normalised`, each followed by an evaluation (eval mode: no dropout, the running
    statistics): the parameters and buffers after, and the validation accuracies (None: a layout without whole rows,
    which batch norm needs)."""
    if not g.whole_rows:
        return None
    torch.manual_seed(0)
    model = Normalised(g.num_features, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    model = g.prepare(model, opt)
    accuracies = []
    for step in range(3):
        model.train()
        opt.zero_grad()
        g.cross_entropy(model(g, g.x, key=step)).backward()
        g.sync_gradients(model)
        opt.step()
        model.eval()
        with torch.no_grad():
            accuracies.append(g.accuracy(model(g, g.x))["val_acc"])
    return {k: v.clone() for k, v in model.state_dict().items()} | {"val_acc": torch.tensor(accuracies)}


CASES = {"regulariser": lambda g: _trained(g, "regulariser"), "clipped": lambda g: _trained(g, "clipped"),
         "clipped before": _clipped_before,
         "batch norm": _normalised}


def _rank(comm) -> dict:
    """{(case, algo): its result on this rank}, for every case and layout (at P = 1, where every layout is the one
    process's product, the first alone: the reference)."""
    out = {}
    for algo, grid in LAYOUTS if comm.world_size > 1 else LAYOUTS[:1]:
        g = spgnn.DistGraph(comm, dataset=DATA, algo=algo, grid=grid)
        out |= {(case, algo): fn(g) for case, fn in CASES.items()}
    return out


_RESULTS = {}


def results() -> dict:
    """{P: every rank's `_rank`}, all P from one launch."""
    if not _RESULTS:
        _RESULTS.update(run_worlds(_rank, PROCS, timeout_s=300))
    for P, ranks in _RESULTS.items():
        assert not errors(ranks), f"P={P}: {errors(ranks)[0]}"
    return _RESULTS


@pytest.mark.parametrize("case", ["regulariser", "clipped", "batch norm"])
def test_a_case_trains_the_same_at_every_p_and_layout(case):
    """A regulariser of the replicated parameters, added as g.replicated(term), counts once in the summed gradient
    (added as it was, each rank's copy was summed, k·λ at P = k, and the weights changed with P); a gradient clipped
    by its global norm after sync_gradients is clipped alike at every P; a batch norm after a layer whose bias is
    frozen evaluates alike at every P (a bias Adam trained there drifted by a noise that changed with P)."""
    res = results()
    reference = res[1][0][case, "1d"]
    for P, ranks in res.items():
        for rank, out in enumerate(ranks):
            for algo in dict.fromkeys(a for _, a in out):
                if out[case, algo] is None:
                    assert case == "batch norm" and algo in ("2d", "3d"), (case, algo, P)
                    continue
                for name, p in out[case, algo].items():
                    where = f"{case} {algo} P={P} rank {rank} {name}"
                    torch.testing.assert_close(p, reference[name], rtol=1e-5, atol=1e-6,
                                               msg=lambda m, w=where: f"{w}: {m}")


def test_a_layer_without_forward_is_refused_where_it_is_registered():
    """It was registered, and `--model NAME` ended in torch's NotImplementedError traceback at the first forward
    (the algorithm registry refused an algorithm without _forward already)."""
    from spgnn.layers.registry import LAYERS

    class Unfinished(spgnn.Layer):
        name, adjacency = "audit-unfinished", "gcn"

        def __init__(self, f_in, f_out, init="auto"):
            super().__init__(f_in, f_out)

    with pytest.raises(spgnn.SpgnnError, match=r"^layer 'audit-unfinished' does not define forward\(g, h\)"):
        spgnn.register_layer(Unfinished)
    assert "audit-unfinished" not in LAYERS


def test_a_gradient_clipped_before_its_sum_is_refused_at_every_p():
    """Clipped before sync_gradients, each rank's share was clipped by its own norm, and the steps changed with P,
    silently; now every rank of every P and layout says so in one line (at P = 1 too, where it computed right)."""
    for P, ranks in results().items():
        for rank, out in enumerate(ranks):
            for algo in dict.fromkeys(a for _, a in out):
                assert (out["clipped before", algo] or "").startswith(
                    "sync_gradients: the gradient of parameter 'first.weight' was changed in place after the "
                    "backward, before its sum (clipped, rescaled, zeroed)"), (P, rank, algo,
                                                                              out["clipped before", algo])


def test_a_gradient_added_to_by_a_second_backward_is_summed_and_one_zeroed_before_it_refused():
    """What sync_gradients takes: a gradient that two backwards added to (accumulation). A gradient zeroed (or
    changed otherwise) in place after the backward is refused by its version alone, not by its values: a verdict of
    the values (a zeroed share passed) differs by rank, and the ranks that passed waited in the sum for the others."""
    g = spgnn.DistGraph(dataset=DATA)
    torch.manual_seed(0)
    model = g.prepare(Regularised(g.num_features, g.num_classes))
    for _ in range(2):
        g.cross_entropy(model(g, g.x)).backward()
    g.sync_gradients(model)
    model.zero_grad(set_to_none=False)
    g.cross_entropy(model(g, g.x)).backward()
    model.zero_grad(set_to_none=False)
    with pytest.raises(spgnn.SpgnnError, match=r"was changed in place after the backward, before its sum \(clipped, "
                                               r"rescaled, zeroed\)"):
        g.sync_gradients(model)


def _evaluated_on_rank_0(comm) -> None:
    """The slip of printing a figure on one rank: its collective is called on rank 0 alone."""
    g = spgnn.DistGraph(comm, dataset=DATA)
    if comm.rank == 0:
        print(g.accuracy(g.x[:, :g.num_classes]))


def test_a_collective_called_on_some_ranks_only_is_named_in_one_line():
    """It ended, after the timeout, in gloo's "Timed out waiting 2000ms for recv operation to complete" traceback,
    which named neither the cause nor the remedy."""
    from spgnn.comm.launch import run_local

    with pytest.raises(spgnn.SpgnnError, match=r"^rank 0: a collective waited beyond the timeout \(2 s\) for its "
                                               r"peers: every rank must call the same collectives in the same order"):
        run_local(_evaluated_on_rank_0, 2, timeout_s=2, deadline_s=60)


MISUSED = {
    "logits of the training rows": (lambda g, z: g.cross_entropy(z[g.masks["train"]], "train"),
                                    "logits of shape (36, 3): this rank holds 60 rows, and a loss or a figure takes"),
    "accuracy of the training rows": (lambda g, z: g.accuracy(z[g.masks["train"]]), "logits of shape (36, 3): this "),
    "dropout without a key": (lambda g, z: g.dropout(z, 0.5, None), "dropout: key is an int, a fresh one for each"),
    "log-softmax of a vector": (lambda g, z: g.log_softmax(z[:, 0]), "log_softmax takes a matrix (a 2-D tensor), got"),
    "cat of one matrix": (lambda g, z: g.cat(z), None),
    "a bias of another width": (lambda g, z: g.linear(g.x, torch.ones(g.num_features, 3), torch.ones(4)),
                                "linear: b, a tensor of shape (4,), does not fit W of shape (64, 3): give b of W's 3 "),
    "all_sum of a number": (lambda g, z: g.all_sum(3.0), "all_sum takes a list of numbers, one sum each, got float"),
    "all_sum of a one-element tensor": (lambda g, z: g.all_sum(z.sum()), "all_sum takes a list of numbers, one sum "
                                        "each, got a tensor of shape ()"),
    "all_sum of a string": (lambda g, z: g.all_sum("3"), "all_sum takes a list of numbers, one sum each, got str"),
    "prepare of a function": (lambda g, z: g.prepare(lambda g, x: x), "prepare takes the model, a torch.nn.Module"),
}


@pytest.mark.parametrize("algo", ["1d", "2d"])
def test_a_misused_operation_is_refused_in_one_line(algo):
    """Each ended in torch's IndexError, TypeError or RuntimeError (a bias of another width on 2D), or python's, from
    deep inside the operation; the logits of the training rows alone too, where the mask argument selects them. A
    single matrix given to cat is its own concatenation, as select takes it."""
    g = spgnn.DistGraph(dataset=DATA, algo=algo)
    torch.manual_seed(0)
    conv = g.prepare(spgnn.GCNConv(g.num_features, g.num_classes))
    z = conv(g, g.x).detach()
    for what, (call, refusal) in MISUSED.items():
        if refusal is None:
            assert torch.equal(call(g, z), z), what
            continue
        with pytest.raises(spgnn.SpgnnError) as e:
            call(g, z)
        assert str(e.value).startswith(refusal), (what, str(e.value))
    assert torch.equal(g.cat(h for h in (z, z)), g.cat([z, z]))        # a generator was read twice: empty
    for key in (np.int64(3), torch.tensor(3)):                 # integers of other types are the same key
        assert torch.equal(g.dropout(z, 0.5, key), g.dropout(z, 0.5, 3)), key


def test_a_model_of_another_dtype_than_the_features_is_told_either_way():
    """A float32 model on features made float64 was told to build the model in float64 by model.float(), which
    makes float32; the line now names the conversion each way, and a float64 model on float64 features trains as
    the float32 one does."""
    g = spgnn.DistGraph(dataset=DATA)
    torch.manual_seed(0)
    single = spgnn.GCNConv(g.num_features, g.num_classes)
    double = spgnn.GCNConv(g.num_features, g.num_classes).double()
    double.load_state_dict(single.state_dict())
    with pytest.raises(spgnn.SpgnnError, match=r"^parameter 'weight' of the model is torch.float64, but the features "
                                               r"are torch.float32: build the model in torch.float32 \(model.to\("
                                               r"torch.float32\)\), or give the features the model's \(g.x = g.x.to\("
                                               r"torch.float64\)\)$"):
        g.prepare(double)
    x32 = g.x
    g.x = g.x.to(torch.float64)
    with pytest.raises(spgnn.SpgnnError, match=r"build the model in torch.float64 \(model.to\(torch.float64\)\)"):
        g.prepare(single)
    losses = []
    for model, x in ((g.prepare(double), g.x), (single, x32)):
        g.x = x
        model = g.prepare(model)
        loss = g.cross_entropy(model(g, g.x))
        loss.backward()
        g.sync_gradients(model)
        losses.append((loss.item(), model.weight.grad.double()))
    assert losses[0][0] == pytest.approx(losses[1][0], rel=1e-6)
    torch.testing.assert_close(losses[0][1], losses[1][1], rtol=1e-4, atol=1e-6)
