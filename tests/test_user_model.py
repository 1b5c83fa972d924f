"""A model of the user's own on any layout (algorithms/your_model.py, shown in the README): a GCN with residual
connections and jumping knowledge, an ordinary loop and torch.optim.Adam on spgnn's public API. Its loss curve is
the same on 1d-halo, 1.5d, 2d, 3d and sar at P = 4 as on one process, and equal to the same model written in
plain PyTorch on the whole graph; what it does wrong is refused with one line."""

import importlib.util
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import spgnn
from spgnn.comm.comm import Comm, ring_words
from spgnn.comm.launch import run_local
from spgnn.errors import SpgnnError
from spgnn.graph.adjacency import normalize
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import row_normalize

PROGRAM = Path(__file__).parent.parent / "algorithms" / "your_model.py"
LAYOUTS = [("1d-halo", None), ("1.5d", None), ("2d", "2x2"), ("3d", "1x2x2"), ("sar", None)]
EPOCHS = 6


def _program():
    spec = importlib.util.spec_from_file_location("your_model", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(algo, grid=None, predictions=None):
    return Namespace(dataset="cora", algo=algo, grid=grid, hidden=8, epochs=EPOCHS, nprocs=1, predictions=predictions)


def _rank(comm, folder):
    program = _program()
    return {algo: program.main(comm, _args(algo, grid, f"{folder}/{algo}.npy")) for algo, grid in LAYOUTS}


def _plain_pytorch() -> list[float]:
    """The same model and loop in plain PyTorch on the whole graph (torch.sparse, torch.cat, F.cross_entropy)."""
    g = load_dataset("cora")
    a = normalize(g.adj, "gcn").tocoo()
    a = torch.sparse_coo_tensor(np.vstack([a.row, a.col]), a.data, a.shape, check_invariants=True).coalesce()
    x, y, train = torch.as_tensor(row_normalize(g.x)), torch.as_tensor(g.y), torch.as_tensor(g.train_mask)
    torch.manual_seed(0)
    mine = _program().JKResGCN(g.num_features, 8, g.num_classes)           # only for its initial weights
    ws = [(c.weight.detach().clone(), c.bias.detach().clone()) for c in mine.convs]
    params = [torch.nn.Parameter(t) for w in ws for t in w]
    params += [torch.nn.Parameter(mine.out.weight.detach().clone()), torch.nn.Parameter(mine.out.bias.detach().clone())]
    opt = torch.optim.Adam(params, lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(EPOCHS):
        opt.zero_grad()
        hs, h = [], x
        for i in range(3):
            z = torch.relu(torch.sparse.mm(a, h @ params[2 * i]) + params[2 * i + 1])
            h = z + h if i else z
            hs.append(h)
        loss = F.cross_entropy((torch.cat(hs, 1) @ params[6] + params[7])[train], y[train])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_your_model_has_one_loss_curve_on_every_layout(tmp_path):
    single = _program().main(Comm(0, 1), _args("1d-halo", predictions=tmp_path / "one.npy"))[0]
    plain = _plain_pytorch()
    np.testing.assert_allclose(single, plain, rtol=2e-5, err_msg="one process against plain PyTorch")
    logits = np.load(tmp_path / "one.npy")
    assert logits.shape == (2708, 7)
    for algo, (losses, acc) in run_local(_rank, 4, tmp_path, timeout_s=600)[0].items():
        np.testing.assert_allclose(losses, single, rtol=2e-5, err_msg=f"{algo} at P = 4 against one process")
        assert 0 < acc["train_acc"] <= 1
        # every node's logits, in original order, from the rows (and on 2D/3D column blocks) of four ranks
        np.testing.assert_allclose(np.load(tmp_path / f"{algo}.npy"), logits, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{algo}: g.gather")


class RowWise(spgnn.Layer):
    """A layer that needs whole rows (a row-wise normalisation, say)."""

    needs = frozenset({"whole_rows"})


PLAIN = {"torch linear": lambda: torch.nn.Linear(4, 3), "batch norm": lambda: torch.nn.BatchNorm1d(4),
         "dropout": lambda: torch.nn.Dropout(0.5)}


def _prepared(comm, what):
    g = spgnn.DistGraph(comm, dataset="cora", algo="2d" if what in ("whole rows", "torch linear") else "1d-halo")
    torch.manual_seed(comm.rank if what == "differ" else 0)
    if what == "whole rows":
        model = torch.nn.ModuleList([spgnn.GCNConv(g.num_features, 4), RowWise(4, 4)])
    elif what in PLAIN:                                 # torch's errors of shapes on 2D; on 1D a P-dependent run
        model = torch.nn.ModuleList([spgnn.GCNConv(g.num_features, 4), PLAIN[what]()])
    else:
        model = _program().JKResGCN(g.num_features, 4, g.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        if what == "not prepared":          # (stepped silently on each rank's share of the gradient: weights apart)
            g.cross_entropy(model(g, g.x)).backward()
        model = g.prepare(model, None if what == "unsummed, prepared without the optimizer" else opt)
        if what in PLAIN:                   # refused when used, in training
            model[1](model[0](g, g.x))
        if what.startswith("unsummed"):        # (without the optimizer: stepped silently, P-dependent losses)
            g.cross_entropy(model(g, g.x)).backward()
            opt.step()
        if what == "adjacency":
            g.spmm(g.x, "mean")
        if what == "fine loops":    # autograd.grad after a sum, two models of one graph, a sum of zeroed gradients
            other = g.prepare(spgnn.Linear(g.num_features, 3), opt)
            for _ in range(2):
                opt.zero_grad()
                other.zero_grad()
                loss = g.cross_entropy(model(g, g.x))
                loss.backward()
                g.sync_gradients(model)
                torch.autograd.grad(g.cross_entropy(model(g, g.x)), model.out.weight)
                g.linear(g.x, other.weight).sum().backward()
                g.sync_gradients(other)
                opt.step()
                g.cross_entropy(model(g, g.x)).backward()    # a GAN's G loss through D: D's zeroed next step
            opt.zero_grad()
            g.sync_gradients(model)
        if what in ("twice", "added to", "accumulated"):      # accumulated: two backwards, one sum (allowed)
            for step in range(2):
                opt.zero_grad(set_to_none=step == 0)
                g.cross_entropy(model(g, g.x)).backward()
                if what != "accumulated":
                    g.sync_gradients(model)
                if what != "twice":
                    g.cross_entropy(model(g, g.x)).backward()
                g.sync_gradients(model)
                opt.step()
        if what == "widths":
            g.cat([g.x[:, :12], g.x[:, :10]], widths=[10, 10])
        if what == "globally":
            g.globally(g.x[:, 0].sum(0, keepdim=True).expand(2))
        if what == "gather":
            g.gather(g.x[:, 0])
        if what == "numpy":
            g.spmm(g.x.numpy())
        if what == "float64":                                   # a page of torch's "must have the same dtype"
            g.prepare(spgnn.Linear(g.num_features, 3).double())
        if what == "mask None":                                 # "Could not infer dtype of NoneType"
            g.cross_entropy(model(g, g.x), None)
        if what == "linear":
            g.linear(g.x, torch.ones(g.num_features - 1, 3))
    except SpgnnError as e:
        return str(e)
    return None


REFUSED = {
    "differ": "parameter 'convs.0.weight' of the model differs between ranks",
    "unsummed": "the gradient of parameter 'convs.0.weight' was not summed over the ranks: call g.sync_gradients",
    "unsummed, prepared without the optimizer": "the gradient of parameter 'convs.0.weight' was not summed over the "
                                                "ranks: call g.sync_gradients",
    "not prepared": "a loss to train a parameter of shape (",
    "adjacency": "adjacency 'mean' was not laid out: build the DistGraph with adjacency=['gcn', 'mean']",
    "whole rows": "layer 1 (RowWise) needs whole rows, which --algo 2d does not offer: use --algo",
    "twice": "sync_gradients: the gradient of parameter 'convs.0.weight' was summed already and has not changed "
             "since, so summing it again would count it once a rank",
    "added to": "sync_gradients: a backward added to the gradient of parameter 'convs.0.weight' after it was summed",
    "accumulated": None,
    "fine loops": None,
    "widths": "widths [10, 10] do not fit the 2 matrices given, of which this rank holds [12, 10] columns",
    "globally": "globally takes this rank's partial sum, a one-element tensor, got a tensor of shape (2,)",
    "gather": "gather takes this rank's rows of an n×f matrix, a tensor of ",
    "numpy": "spmm takes this rank's rows of an n×f matrix, a tensor of ",
    "float64": "parameter 'weight' of the model is torch.float64, but the features are torch.float32: build the",
    "mask None": "a mask is a split's name (train, val, test) or a boolean tensor of shape",
    "linear": "linear: W of shape (1432, 3) needs H's columns as its rows: give W (H's width)×(outputs)",
    "torch linear": "module '1' (torch.nn.Linear), which spgnn.Linear, g.linear and g.log_softmax replace on any "
                    "layout, needs whole rows, which --algo 2d does not offer",
    "batch norm": "module '1' (torch.nn.BatchNorm1d) normalizes by this rank's rows, and keeps its statistics per "
                  "rank: use spgnn.BatchNorm",
    "dropout": "module '1' (torch.nn.Dropout) draws its masks per rank, so the run would change with P",
}


def _refused(comm):
    return {what: _prepared(comm, what) for what in REFUSED}


def test_what_a_user_gets_wrong_is_refused_with_one_line():
    mine, theirs = run_local(_refused, 2, timeout_s=300)
    for what, expected in REFUSED.items():
        if expected is None:
            assert mine[what] is None and theirs[what] is None, (what, mine[what], theirs[what])
            continue
        assert mine[what] is not None and mine[what].startswith(expected), (what, mine[what])
        assert theirs[what].split(", a tensor of")[0] == mine[what].split(", a tensor of")[0], what


def test_a_loss_is_refused_only_for_parameters_no_graph_prepared():
    """A model prepared on one graph trains on another (another layout), and a gradient of the inputs alone (a
    saliency map) needs no model; a parameter no graph prepared is refused, at P = 1 as at any P."""
    first, second = spgnn.DistGraph(dataset="cora"), spgnn.DistGraph(dataset="cora", algo="1d")
    torch.manual_seed(0)
    model = first.prepare(spgnn.GCNConv(first.num_features, first.num_classes))
    second.cross_entropy(model(second, second.x)).backward()
    x = second.x.clone().requires_grad_()
    second.cross_entropy(second.spmm(x)[:, :7]).backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    other = spgnn.GCNConv(first.num_features, first.num_classes)
    with pytest.raises(SpgnnError, match=r"^a loss to train a parameter of shape \(1433, 7\) that no DistGraph "):
        second.cross_entropy(other(second, second.x))


def test_a_model_prepared_on_a_second_graph_steps_once_that_graph_summed():
    """The check of every optimizer's step was a hook of the first graph, kept alive by its hooks on the model's
    parameters: once the model was prepared on a second graph (another layout), a step that graph had summed was
    refused. The pending sum is now marked on the parameter, which any graph's sum clears."""
    comm = Comm(0, 1)
    torch.manual_seed(0)
    first = spgnn.DistGraph(comm, dataset="sbm:60:3")
    model = first.prepare(spgnn.GCNConv(first.num_features, 3))
    first.cross_entropy(model(first, first.x)).backward()
    second = spgnn.DistGraph(comm, dataset="sbm:60:3", algo="sar")
    model = second.prepare(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    second.cross_entropy(model(second, second.x)).backward()
    with pytest.raises(SpgnnError, match="^the gradient of parameter 'weight' was not summed over the ranks"):
        opt.step()
    second.sync_gradients(model)
    opt.step()


def test_layouts_refuse_what_they_cannot_do():
    comm = Comm(0, 1)
    g = spgnn.DistGraph(comm, dataset="cora", algo="1d")
    with pytest.raises(SpgnnError, match="attention needs attention, which --algo 1d does not offer"):
        g.attend(g.x.view(g.x.shape[0], 1, -1), g.x[:, :1], g.x[:, :1], 0.2)
    with pytest.raises(SpgnnError, match="unknown adjacency 'nope'"):
        g.spmm(g.x, "nope")
    with pytest.raises(SpgnnError, match="algo='auto' ranks the layouts by the model's declared costs"):
        spgnn.DistGraph(comm, dataset="cora", algo="auto")
    with pytest.raises(SpgnnError, match="batch normalization needs whole rows, which --algo 2d does not offer"):
        spgnn.DistGraph(comm, dataset="cora", algo="2d").require("whole_rows", "batch normalization")
    torch.manual_seed(0)
    alone = torch.nn.Sequential(torch.nn.Linear(g.num_features, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5))
    assert g.prepare(alone)(g.x).shape == (g.n, 4)         # one process holds every row, whole
    grid = spgnn.DistGraph(comm, dataset="cora", algo="2d")
    held = grid.prepare(torch.nn.Linear(grid.num_features, 3))    # its parameters used by g.linear: on any layout
    with torch.no_grad():
        assert torch.allclose(grid.linear(grid.x, held.weight.t(), held.bias), g.x @ held.weight.t() + held.bias,
                              atol=1e-6)
    with pytest.raises(SpgnnError, match=r"^the model \(torch.nn.Linear\), which spgnn.Linear, g.linear and "):
        held(grid.x)                                            # run itself: refused


def _steps(g, model, opt, epochs, schedule=None) -> list[float]:
    """The user's training step (the guide's loop) for each of `epochs`, then `schedule`'s step: their losses."""
    losses = []
    for _ in epochs:
        opt.zero_grad()
        loss = g.cross_entropy(model(g, g.x))
        loss.backward()
        g.sync_gradients(model)
        opt.step()
        if schedule is not None:
            schedule.step()
        losses.append(loss.item())
    return losses


def _train(comm, folder, epochs, resume):
    """The user's loop with checkpoints through the public API: resume from `folder` when asked, train to
    `epochs` in all, save at the end; returns the losses of the epochs run here."""
    g = spgnn.DistGraph(comm, dataset="cora", algo="1d-halo" if comm.world_size < 3 else "2d")
    torch.manual_seed(0)
    model = _program().JKResGCN(g.num_features, 8, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)     # its state saved as an extra
    model = g.prepare(model, opt)
    start = 0
    if resume:
        epoch, extra = g.load_checkpoint(folder, model, opt)
        schedule.load_state_dict(extra["schedule"])
        start = epoch + 1
    losses = _steps(g, model, opt, range(start, epochs), schedule)
    g.save_checkpoint(folder, model, opt, epochs - 1, note="user loop", schedule=schedule.state_dict())
    return losses


def test_a_users_model_and_optimizer_resume_on_another_p(tmp_path):
    """Saved at P = 2 after 3 epochs, resumed at P = 4 (on 2D) to 6, the learning rate halved every 2 epochs by a
    scheduler saved with it: the loss curve of an uninterrupted run."""
    whole = _train(Comm(0, 1), tmp_path / "whole", 6, False)
    first = run_local(_train, 2, tmp_path / "ckpt", 3, False, timeout_s=300)[0]
    rest = run_local(_train, 4, tmp_path / "ckpt", 6, True, timeout_s=300)[0]
    np.testing.assert_allclose(first + rest, whole, rtol=2e-5)
    assert len(rest) == 3
    with pytest.raises(SpgnnError, match="is of another model"):
        g = spgnn.DistGraph(Comm(0, 1), dataset="cora")
        other = _program().JKResGCN(g.num_features, 4, g.num_classes)
        g.load_checkpoint(tmp_path / "ckpt", other, torch.optim.Adam(other.parameters()))


def _unused_in_second_step(comm):
    """Two Adam steps of the user's model plus a parameter only the first step's loss uses: its parameters after."""
    g = spgnn.DistGraph(comm, dataset="cora", algo="1d-halo")
    torch.manual_seed(0)
    model = _program().JKResGCN(g.num_features, 8, g.num_classes)
    model.extra = torch.nn.Parameter(torch.ones(3))
    model.frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1)
    model = g.prepare(model, opt)
    sent = []
    for step in range(2):
        opt.zero_grad()
        loss = g.cross_entropy(model(g, g.x))
        (loss + model.extra.sum() / comm.world_size if step == 0 else loss).backward()
        before = comm.ledger.total("sent_bytes", op="all_reduce")
        g.sync_gradients(model)
        sent.append(comm.ledger.total("sent_bytes", op="all_reduce") - before)
        opt.step()
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert sent == [4 * ring_words(trained, comm.world_size, comm.rank)] * 2, "the all-reduce sends frozen words"
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_a_missing_gradient_is_zero_at_every_p():
    """sync_gradients sets a gradient the backward left missing to zero on one process as on several, so Adam steps
    the same parameters at every P (here `extra`, which the second step's loss does not reach, still moves by its
    momentum and weight decay); a frozen parameter gets no gradient, so weight decay leaves it as it was, and the
    all-reduce sends the trained parameters' words alone."""
    one = _unused_in_second_step(Comm(0, 1))
    two = run_local(_unused_in_second_step, 2, timeout_s=300)[0]
    assert not torch.equal(one["extra"], torch.ones(3) - 0.01)      # where the first step alone left it
    assert torch.equal(one["frozen"], torch.ones(2)) and torch.equal(two["frozen"], torch.ones(2))
    for name, p in one.items():
        torch.testing.assert_close(two[name], p, rtol=2e-5, atol=1e-6)


def _row_sums(comm):
    """Per layout: Σ of own_rows, of the train mask over own_rows, and Σ_ij (j + 1)·dropout(X)_ij over all entries."""
    out = {}
    for algo, grid in LAYOUTS + [("2d", "1x4")]:
        g = spgnn.DistGraph(comm, dataset="cora", algo=algo, grid=grid if comm.world_size == 4 else None)
        cols = g.columns(g.num_features)
        dropped = g.dropout(g.x, 0.5, key=7).double() * torch.arange(cols.start + 1, cols.stop + 1)
        out[algo, grid] = g.all_sum([float(g.own_rows.sum()), float((g.masks["train"] & g.own_rows).sum()),
                                     float(dropped.sum())])
    return out


def test_own_rows_count_each_row_once_and_dropout_is_the_same_at_every_p():
    """all_sum of a mask of one's own counted each row once a grid column on 2D/3D (the ranks of a grid row hold the
    same rows), so own_rows; g.dropout draws the same entries on every layout and P (torch's draws per rank)."""
    one = _row_sums(Comm(0, 1))
    n, train = one["1d-halo", None][:2]
    assert (n, train) == (2708, 140)
    for key, (rows, counted, dropped) in run_local(_row_sums, 4, timeout_s=300)[0].items():
        assert (rows, counted) == (n, train), key
        np.testing.assert_allclose(dropped, one["1d-halo", None][2], rtol=1e-9, err_msg=str(key))


def test_a_checkpoint_of_another_run_or_optimizer_is_refused(tmp_path):
    """save_checkpoint overwrote another run's checkpoint without a word (spgnn train refuses it); loading into
    another optimizer ended in torch's KeyError: 'step'."""
    g = spgnn.DistGraph(Comm(0, 1), dataset="cora")
    torch.manual_seed(0)
    model = _program().JKResGCN(g.num_features, 4, g.num_classes)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g.save_checkpoint(tmp_path, model, sgd, 0)
    g.save_checkpoint(tmp_path, model, sgd, 1)               # its own: overwritten
    other = spgnn.DistGraph(Comm(0, 1), dataset="cora")
    with pytest.raises(SpgnnError, match="holds a checkpoint that this run neither wrote nor loaded"):
        other.save_checkpoint(tmp_path, model, sgd, 0)
    with pytest.raises(SpgnnError, match="holds the state of a SGD optimizer, not of AdamW"):
        other.load_checkpoint(tmp_path, model, torch.optim.AdamW(model.parameters()))
    assert other.load_checkpoint(tmp_path, model, sgd)[0] == 1
    other.save_checkpoint(tmp_path, model, sgd, 2)           # loaded here: continued
    with pytest.raises(SpgnnError, match="DistGraph's second argument is a TrainConfig, not str 'cora'"):
        spgnn.DistGraph(Comm(0, 1), "cora")


def _gat_forwards(comm):
    """Two training forwards and one evaluation of a GATConv with attention dropout, no key given: Σ (j + 1)·out_ij."""
    g = spgnn.DistGraph(comm, dataset="cora", algo="1d-halo", adjacency="self-loops")
    torch.manual_seed(0)
    layer = g.prepare(spgnn.GATConv(g.num_features, 4, heads=2, dropout=0.5))
    sums = []
    for training in (True, True, False):
        layer.train(training)
        with torch.no_grad():
            out = layer(g, g.x).double() * torch.arange(1, 9)
        sums.append(g.all_sum([float(out.sum())])[0])
    return sums


def test_a_gat_of_ones_own_draws_a_fresh_attention_dropout_each_forward():
    """Without the stack's key, every forward drew the key-0 mask, the same at every step."""
    one = run_local(_gat_forwards, 1)[0]
    assert one[0] != one[1] and len(set(one)) == 3
    here = _gat_forwards(Comm(0, 1))
    assert _gat_forwards(Comm(0, 1)) == here                  # not on how many were built before in the process
    np.testing.assert_allclose(here, one, rtol=1e-6)
    for sums in run_local(_gat_forwards, 2):
        np.testing.assert_allclose(sums, one, rtol=1e-6)


def _normalised_constant(comm):
    """spgnn.BatchNorm of a column constant over all nodes (0.1), beside one that is not: the first column out."""
    g = spgnn.DistGraph(comm, dataset="cora", algo="1d")
    x = torch.stack([torch.full((len(g.node_ids),), 0.1), g.node_ids.float()], 1).requires_grad_()
    out = spgnn.BatchNorm(2)(g, x)
    return out[:, 0].detach()


def test_batch_norm_of_a_constant_column_is_exactly_its_shift_at_every_p():
    """Its mean, a float32 sum over the ranks, left rounding noise that 1/√ε scaled to ±1e-4, its sign changing with
    P: a ReLU after it let other columns through at each P."""
    for out in [_normalised_constant(Comm(0, 1)), *run_local(_normalised_constant, 3)]:
        assert torch.equal(out, torch.zeros_like(out))


class _Dropping(torch.nn.Module):
    """The built-in GraphSAGE stack and a GATConv of one's own, both with dropout and called without keys."""

    def __init__(self, f_in, classes):
        super().__init__()
        self.gnn = spgnn.build_model("sage", f_in, 8, hidden=8, layers=2, dropout=0.5)
        self.gat = spgnn.GATConv(8, classes, heads=1, dropout=0.5)

    def forward(self, g, h):
        return self.gat(g, torch.relu(self.gnn(g, h)))


def _dropping_losses(folder, seed, start, stop):
    """Epochs start..stop-1 of `_Dropping` (weights drawn after `seed`, then the checkpoint in `folder` loaded
    when start > 0), saved at the end: their losses."""
    g = spgnn.DistGraph(Comm(0, 1), dataset="cora", adjacency=["mean", "self-loops"])
    torch.manual_seed(seed)
    model = _Dropping(g.num_features, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model = g.prepare(model, opt)
    if start:
        assert g.load_checkpoint(folder, model, opt)[0] == start - 1
    losses = _steps(g, model, opt, range(start, stop))
    g.save_checkpoint(folder, model, opt, stop - 1)
    return losses


def test_dropout_without_keys_continues_on_resume(tmp_path):
    """GNN's and GATConv's counts of keyless training forwards were not in the checkpoint: a resumed run drew
    epoch 0's masks again. The resumed run, its weights first drawn from another seed, now equals the whole."""
    whole = _dropping_losses(tmp_path / "whole", 0, 0, 4)
    assert _dropping_losses(tmp_path / "part", 0, 0, 2) + _dropping_losses(tmp_path / "part", 1, 2, 4) == whole


def test_an_unwritable_predictions_file_is_refused_before_training(tmp_path):
    """--predictions is tried at start (as numpy.save writes it, .npy added): a folder in its place is one line, and
    no rank starts (no loss printed)."""
    import subprocess
    import sys

    (tmp_path / "taken.npy").mkdir()
    out = subprocess.run([sys.executable, str(PROGRAM), "--epochs", "1", "--predictions", str(tmp_path / "taken")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out
    assert "cannot write --predictions" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert "test accuracy" not in out.stdout
