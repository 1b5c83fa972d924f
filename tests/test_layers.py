"""Layers that describe themselves: GIN, APPNP and GCNII equal PyTorch Geometric's GINConv (train_eps), APPNP and
GCN2Conv on the same weights, forward and backward; every registered layer, on every algorithm whose layout
offers what it needs, gives the single-process reference's logits, input and weight gradients, and its bytes
equal the cost model's, call for call; the registry refuses what it cannot honour with one line."""

import numpy as np
import pytest
import torch

from spgnn import cost, spmm
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.layers import APPNP, LAYERS, GCN2Conv, GINConv, Layer, SAGEConv, register_layer
from spgnn.layers.registry import Dense, Spmm
from spgnn.reference import SerialSpMM
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close, reference_grads

G = small_graph(n=41, f=7, classes=3, directed=True, seed=5)
ALGOS = [("1d", {}), ("1d-halo", {}), ("1.5d", {"replication": 2}), ("2d", {"grid": "2x2"}), ("3d", {"grid": "1x2x2"}),
         ("sar", {})]
OPTIONS = {"gat": {"heads": 2}, "appnp": {"steps": 3}, "gcnii": {"alpha": 0.2}}


def _edge_index(adj):
    coo = adj.tocoo()      # A[dst, src]
    return torch.as_tensor(np.vstack([coo.col, coo.row]), dtype=torch.int64)


def _pyg_case(kind):
    """(spgnn layer, its PyG twin with the same weights, a function calling either on x)."""
    pyg = pytest.importorskip("torch_geometric.nn", reason="PyTorch Geometric is not installed (pip install .[test])")
    ei, f = _edge_index(G.adj), G.num_features
    torch.manual_seed(0)
    if kind == "gin":
        layer = GINConv(f, 5)
        layer.eps.data.fill_(0.3)
        mlp = torch.nn.Sequential(torch.nn.Linear(f, 5), torch.nn.ReLU(), torch.nn.Linear(5, 5))
        twin = pyg.GINConv(mlp, train_eps=True)
        for lin, i in ((mlp[0], 1), (mlp[2], 2)):
            lin.weight.data = getattr(layer, f"weight{i}").data.T.clone()
            lin.bias.data = getattr(layer, f"bias{i}").data.clone()
        twin.eps.data.fill_(0.3)
        return layer, twin, lambda m, x, x0: m(SerialSpMM(G.adj, raw=True), x) if m is layer else m(x, ei)
    if kind == "appnp":
        layer, twin = APPNP(f, steps=4, alpha=0.2), pyg.APPNP(K=4, alpha=0.2)
        return layer, twin, lambda m, x, x0: m(SerialSpMM(G.adj, raw=True), x) if m is layer else m(x, ei)
    layer = GCN2Conv(f, alpha=0.2, theta=0.5, layer=2)
    twin = pyg.GCN2Conv(f, alpha=0.2, theta=0.5, layer=2, shared_weights=True)
    twin.weight1.data = layer.weight.data.clone()
    return layer, twin, lambda m, x, x0: m(SerialSpMM(G.adj, raw=True), x, x0) if m is layer else m(x, x0, ei)


@pytest.mark.parametrize("kind", ["gin", "appnp", "gcnii"])
def test_new_layers_equal_pyg(kind):
    layer, twin, call = _pyg_case(kind)
    x0 = torch.randn(G.n, G.num_features)
    out = {}
    for m in (layer, twin):
        x = torch.as_tensor(G.x).clone().requires_grad_(True)
        y = call(m, x, x0)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        out[m is layer] = (y.detach().numpy(), x.grad.numpy(), sorted(p.grad.abs().sum().item()
                                                                       for p in m.parameters()))
    assert_close(out[True][0], out[False][0], f"{kind} output")
    assert_close(out[True][1], out[False][1], f"{kind} input gradient")
    assert np.allclose(out[True][2], out[False][2], rtol=1e-4), f"{kind} parameter gradients"


def _cases():
    """(layer, algorithm, options) for every registered layer on every algorithm that offers its needs."""
    return [(name, algo, opts) for name, cls in LAYERS.items() for algo, opts in ALGOS
            if all(getattr(spmm.get(algo), need) for need in cls.needs)]


def _rank(comm):
    out = []
    for name, algo, opts in _cases():
        cfg = TrainConfig(model=name, layers=2, hidden=6, dropout=0.5, seed=3, algo=algo, feature_norm="none",
                          epochs=2, **opts, **OPTIONS.get(name, {}))
        t = Trainer(cfg, comm, graph=G)
        t.x.requires_grad_(True)
        _, logits = t.forward_backward(epoch=2)
        grads = {k: p.grad.numpy().copy() for k, p in t.model.named_parameters()}
        cols, dx = (t.g.columns(G.num_features), t.g.columns(G.num_classes)), t.x.grad.numpy()
        comm.ledger.reset()
        t = Trainer(cfg, comm, graph=G)
        t.run(log=None)
        measured = sorted((*map(str, key), *row[:4]) for key, row in comm.ledger.rows.items())
        predicted = None
        if comm.rank == 0 and t.costs is not None:
            model, stats = t.costs
            predicted = [sorted((*map(str, key), *row[:4]) for key, row in cost.epoch_ledger(
                type(t.algo), stats, t.grid.shape, r, model, 2, 3).rows.items()) for r in range(comm.world_size)]
        out.append((t.node_ids.numpy(), cols, logits.numpy(), dx, grads, measured, predicted))
    return out


@pytest.fixture(scope="module")
def runs():
    return run_local(_rank, 4, timeout_s=600)


def test_every_layer_on_every_algorithm_equals_the_reference(runs):
    cases = _cases()
    assert {name for name, _, _ in cases} == set(LAYERS)
    for i, (name, algo, _) in enumerate(cases):
        ref_logits, ref_dx, ref_grads = reference_grads(G, name, layers=2, hidden=6, dropout=0.5, seed=3, epoch=2,
                                                        **OPTIONS.get(name, {}))
        for ids, (fcols, ccols), logits, dx, grads, _, _ in (r[i] for r in runs):
            where = f"{name} on {algo}"
            assert_close(logits, ref_logits[ids][:, ccols], f"{where}: logits")
            assert_close(dx, ref_dx[ids][:, fcols], f"{where}: input gradient", rtol=1e-4)
            for k, gk in grads.items():
                assert_close(gk, ref_grads[k], f"{where}: gradient of {k}", rtol=1e-4)


def test_every_layer_moves_the_bytes_the_cost_model_predicts(runs):
    for i, (name, algo, _) in enumerate(_cases()):
        predicted = runs[0][i][6]
        if LAYERS[name].costs is Layer.costs:
            assert predicted is None, f"{name} declares no cost, yet the report predicts one"
            continue
        assert predicted is not None, f"{name} on {algo}: no prediction"
        for r, run in enumerate(runs):
            assert run[i][5] == predicted[r], f"{name} on {algo}, rank {r}: measured ≠ predicted"


def test_registry_refuses_bad_declarations():
    with pytest.raises(SpgnnError, match="layer 'gcn' is registered already"):
        @register_layer
        class Twice(Layer):
            name = "gcn"
    with pytest.raises(SpgnnError, match="unknown adjacency 'nope'"):
        @register_layer
        class Nowhere(Layer):
            name, adjacency = "nowhere", "nope"
    assert "nowhere" not in LAYERS
    with pytest.raises(SpgnnError, match="unknown model 'nope'"):
        TrainConfig(model="nope").validate()
    with pytest.raises(SpgnnError, match="--model gat needs attention, which --algo 2d does not offer"):
        TrainConfig(model="gat", algo="2d").validate()
    with pytest.raises(SpgnnError, match="--steps applies to --model appnp, not gcn"):
        TrainConfig(model="gcn", steps=3).validate()
    silent = Layer(5, 3)                             # a layer that declares no cost (costs() returns None)
    silent.weight = torch.nn.Parameter(torch.ones(5, 3))
    with pytest.raises(SpgnnError, match=r"layer 0 \(Layer\) declares no cost"):
        cost.ModelCost.of(torch.nn.Sequential(silent))


@pytest.mark.parametrize("declared", ["gcn", "mean"])
def test_costs_over_another_adjacency_are_refused(declared):
    """A layer multiplying by D⁻¹A that declared its product over gcn's Â (which adds the diagonal) was modelled with
    the other matrix's nonzeros: the model's bytes could no longer equal the ledger's."""
    layer = SAGEConv(5, 3) if declared == "gcn" else GINConv(5, 3)
    layer.costs = lambda grad_in, features=False: [Spmm(3, declared, grad_in), Dense(5, 3)]
    with pytest.raises(SpgnnError, match=f"declares Spmm.* over adjacency '{declared}', but multiplies by "):
        cost.ModelCost.of(torch.nn.Sequential(layer))


def test_costs_of_a_layer_without_adjacency_say_it_is_unset():
    """A layer whose `adjacency` is None but whose costs() declare a product was told it "multiplies by None" while
    declaring a product over None: the line says what is missing and how to give it."""
    layer = GINConv(5, 3)
    layer.adjacency = None
    layer.costs = lambda grad_in, features=False: [Spmm(3, None, grad_in), Dense(5, 3)]
    with pytest.raises(SpgnnError, match=r"declares Spmm.* but its `adjacency` is unset \(None\): give the layer "
                                         r"class the name of the adjacency it multiplies by, e.g. adjacency = \"gcn\""):
        cost.ModelCost.of(torch.nn.Sequential(layer))


def test_a_layer_registered_later_brings_its_options():
    """TrainConfig reads the registries when a config is made, so a layer (with an option) registered after
    spgnn was imported runs from the config and the trainer like a built-in one."""
    from spgnn.options import Option

    @register_layer
    class Scaled(GINConv):
        name, summary = "scaled-gin", "GIN with its input scaled (a test's plug-in)"
        options = (Option("scale", float, 1.0, "scaled-gin: input scale"),)

        def __init__(self, f_in, f_out, init="auto", scale=1.0):
            super().__init__(f_in, f_out, init)
            self.scale = scale

        def forward(self, g, h):
            return super().forward(g, self.scale * h)

    try:
        cfg = TrainConfig(model="scaled-gin", scale=2.0, epochs=2, eval_every=0, hidden=4).validate()

        t = Trainer(cfg, Comm(0, 1), graph=G)
        assert t.model.layers[0].scale == 2.0
        assert np.isfinite(t.run(log=None)["final"]["loss"])
    finally:
        LAYERS.pop("scaled-gin")


def test_an_adjacency_of_ones_own():
    """A user's adjacency (here D⁻¹(A + I), a random walk with self-loops) registered with register_adjacency is laid
    out from each rank's block row and multiplies as the same normalisation of the whole matrix does; a name another
    definition holds is refused, and the same definition run again (a notebook cell) replaces it."""
    import scipy.sparse as sp

    from spgnn import Adjacency, DistGraph, register_adjacency
    from spgnn.graph.adjacency import ADJACENCIES, normalize
    from spgnn.graph.graph import add_self_loops, mean_dinv
    from spgnn.sparse.csr import with_unit_diagonal

    class RandomWalk(Adjacency):
        name, unit_diagonal, symmetric = "random-walk", True, False

        def of(self, adj):
            a = add_self_loops(adj)
            return sp.csr_matrix(sp.diags(mean_dinv(np.asarray(a.sum(axis=1)).ravel())) @ a, dtype=np.float32)

        def block_row(self, share, halo=None):
            a = with_unit_diagonal(share.adj, share.rows.start)
            return sp.csr_matrix(sp.diags(mean_dinv(np.asarray(a.sum(axis=1)).ravel())) @ a, dtype=np.float32)

    register_adjacency(RandomWalk())
    try:
        other = type("Other", (RandomWalk,), {})     # another definition of the name: refused
        with pytest.raises(SpgnnError, match="adjacency 'random-walk' is registered already"):
            register_adjacency(other())
        with pytest.raises(SpgnnError, match="adjacency 'random-walk' is registered already"):
            register_adjacency(other)                    # as a class decorator: the same name
        again = type("RandomWalk", (Adjacency,), dict(vars(RandomWalk)))     # the cell run again: replaces it
        again.__qualname__ = RandomWalk.__qualname__
        assert register_adjacency(again) is again and type(ADJACENCIES["random-walk"]) is again
        register_adjacency(RandomWalk())
        with pytest.raises(SpgnnError, match="^register_adjacency takes an spgnn.Adjacency"):
            register_adjacency(normalize)               # it was registered, then refused as 'unknown adjacency'
        g = DistGraph(Comm(0, 1), graph=G, algo="1d-halo", adjacency="random-walk", feature_norm="none")
        x = torch.as_tensor(G.x)
        ours = g.spmm(g.x, "random-walk").numpy()
        theirs = normalize(G.adj, "random-walk") @ x.numpy()
        assert_close(ours, theirs[g.node_ids.numpy()], "Â·X with a registered adjacency")
        assert not np.allclose(theirs, normalize(G.adj, "mean") @ x.numpy())     # not another normalisation
        ADJACENCIES.pop("random-walk")
        assert register_adjacency(RandomWalk) is RandomWalk and isinstance(ADJACENCIES["random-walk"], RandomWalk)
    finally:
        ADJACENCIES.pop("random-walk")


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_a_stack_applies_relu_in_place_to_a_result_of_its_own(name, monkeypatch):
    """GCN's and GraphSAGE's outputs are their own (`Layer.fresh_output`): the stack's ReLU overwrites the first
    layer's result, and the logits and gradients are those of the ReLU out of place, bit for bit."""

    out = {}
    for own in (True, False):
        monkeypatch.setattr(LAYERS[name], "fresh_output", own)
        cfg = TrainConfig(model=name, layers=3, hidden=6, dropout=0.0, seed=3, feature_norm="none")
        t = Trainer(cfg, Comm(0, 1), graph=G)
        results = []
        t.model.layers[0].register_forward_hook(lambda module, args, result, seen=results: seen.append(result))
        _, logits = t.forward_backward(epoch=0)
        out[own] = (logits, [p.grad.clone() for p in t.model.parameters()], results[0].detach().min().item())
    assert out[True][2] >= 0 > out[False][2]
    assert torch.equal(out[True][0], out[False][0])
    assert all(torch.equal(a, b) for a, b in zip(out[True][1], out[False][1]))


UNDIRECTED = small_graph(n=41, f=7, classes=3, seed=6)


class _RowStochastic:
    """D⁻¹(A + I), not symmetric: a user's adjacency that does not say whether it keeps A symmetric."""

    @staticmethod
    def make():
        import scipy.sparse as sp

        from spgnn import Adjacency
        from spgnn.graph.graph import add_self_loops, mean_dinv
        from spgnn.sparse.csr import with_unit_diagonal

        def row_normal(a):
            return sp.csr_matrix(sp.diags(mean_dinv(np.asarray(a.sum(axis=1)).ravel())) @ a, dtype=np.float32)

        return type("RowStochastic", (Adjacency,), {
            "name": "row-stochastic", "unit_diagonal": True,
            "of": lambda self, adj: row_normal(add_self_loops(adj)),
            "block_row": lambda self, share, halo=None: row_normal(with_unit_diagonal(share.adj, share.rows.start))})()


def _input_gradient(comm):
    from spgnn import DistGraph, register_adjacency
    from spgnn.graph.adjacency import ADJACENCIES

    ADJACENCIES.pop("row-stochastic", None)
    register_adjacency(_RowStochastic.make())
    g = DistGraph(comm, graph=UNDIRECTED, algo="1d-halo", adjacency="row-stochastic", feature_norm="none")
    h = g.x.clone().requires_grad_(True)
    g.spmm(h, "row-stochastic").sum().backward()
    return g.node_ids.numpy(), h.grad.numpy()


def test_a_users_adjacency_is_not_taken_as_symmetric_unless_it_says_so():
    """Adjacency.symmetric defaulted to True: a user's D⁻¹(A + I) that left it unset multiplied the backward by Â
    instead of Âᵀ on every layout (dH off by 4.4)."""
    from spgnn.graph.adjacency import ADJACENCIES

    try:
        a = _RowStochastic.make().of(UNDIRECTED.adj)         # A symmetric, Â = D⁻¹(A + I) not
        want = a.T @ np.ones((UNDIRECTED.n, UNDIRECTED.x.shape[1]), np.float32)        # ∂ΣZ/∂H = Âᵀ·1
        for ids, grad in run_local(_input_gradient, 2):
            assert_close(grad, want[ids], "the input gradient of a user's row-stochastic adjacency")
    finally:
        ADJACENCIES.pop("row-stochastic", None)


def test_a_layer_whose_costs_hold_no_sparse_product_trains_without_a_prediction():
    """A layer declaring only Dense costs trained every epoch, then the report's prediction ended the run in a bare
    StopIteration; costs() of another kind of object gave a traceback as deep."""

    class DenseOnly(Layer):
        name, summary, adjacency = "dense-only", "a layer whose costs name no sparse product", "gcn"

        def __init__(self, f_in, f_out, init="auto"):
            super().__init__(f_in, f_out)
            self.weight = torch.nn.Parameter(torch.full((f_in, f_out), 0.01))

        def forward(self, g, h):
            return g.linear(g.spmm(h, self.adjacency), self.weight)

        def costs(self, grad_in, features=False):
            return [Dense(self.f_in, self.f_out)]

    register_layer(DenseOnly)
    try:
        report = Trainer(TrainConfig(model="dense-only", epochs=2, hidden=8), Comm(0, 1)).run(log=None)
        assert len(report["epochs"]) == 2 and report["predicted"] is None
        with pytest.raises(SpgnnError, match="declare no sparse product .* in costs\\(\\)"):
            cost.ModelCost.of_config(TrainConfig(model="dense-only"), 5, 3)
        DenseOnly.costs = lambda self, grad_in, features=False: [("spmm", 8)]
        with pytest.raises(SpgnnError, match=r"^layer 0 \(DenseOnly, --model dense-only\) declares \('spmm', 8\) in "):
            cost.ModelCost.of_config(TrainConfig(model="dense-only"), 5, 3)
    finally:
        LAYERS.pop("dense-only")


def test_a_model_of_dense_layers_only_trains():
    """Layers with adjacency None (which the docs allow) were refused with 'pass adjacency=...', which a Trainer's
    user cannot do; the layout's default adjacency is laid out instead."""

    class DenseLayer(Layer):
        name, summary, adjacency = "dense-layer", "H·W, no aggregation", None

        def __init__(self, f_in, f_out, init="auto"):
            super().__init__(f_in, f_out)
            self.weight = torch.nn.Parameter(torch.full((f_in, f_out), 0.01))

        def forward(self, g, h):
            return g.linear(h, self.weight)

        def costs(self, grad_in, features=False):
            return [Dense(self.f_in, self.f_out)]

    register_layer(DenseLayer)
    try:
        report = Trainer(TrainConfig(model="dense-layer", epochs=2, hidden=8), Comm(0, 1)).run(log=None)
        assert len(report["epochs"]) == 2 and report["final"]["test_acc"] >= 0
    finally:
        LAYERS.pop("dense-layer")


def test_a_layer_that_stack_cannot_build_or_train_is_refused_in_one_line():
    """A registered layer whose __init__ takes no init= ended `spgnn train --model` in a TypeError; one with no
    parameters in Adam's 'empty parameter list'."""
    class NoInit(Layer):
        name, summary, adjacency = "no-init", "a test's layer without init=", "gcn"

        def __init__(self, f_in, f_out):
            super().__init__(f_in, f_out)

        def forward(self, g, h):
            return g.spmm(h, self.adjacency)

    class Propagate(Layer):
        name, summary, adjacency = "propagate", "a test's layer without parameters", "gcn"

        def __init__(self, f_in, f_out, init="auto"):
            super().__init__(f_in, f_out)

        def forward(self, g, h):
            return g.spmm(h, self.adjacency)

    for cls in (NoInit, Propagate):
        register_layer(cls)
    try:
        with pytest.raises(SpgnnError, match=r"^--model no-init builds NoInit\(f_in, f_out, init=…\) \(Layer.stack\), "
                                             "but its __init__ takes no 'init'"):
            Trainer(TrainConfig(model="no-init", epochs=1), Comm(0, 1))
        with pytest.raises(SpgnnError, match="^--model propagate has no parameters to train"):
            Trainer(TrainConfig(model="propagate", epochs=1, hidden=7, layers=1), Comm(0, 1))
    finally:
        LAYERS.pop("no-init")
        LAYERS.pop("propagate")
