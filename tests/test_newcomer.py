"""The extension points as a newcomer meets them, from the guide alone: its adjacency example multiplies as its `of`
does at P = 1 and 2, forward and backward; the signature it gives `spgnn.Option` is Option's; and the mistakes a
first plug-in makes are one line, not a traceback, a report lost at the end of the run or a prediction silently
dropped: a layer's malformed costs(), a task without loss or evaluate, a task whose figures are tensors, and
`spgnn.run` called where the processes it starts import the program again."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import spgnn
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.adjacency import ADJACENCIES
from spgnn.layers import LAYERS, Layer, register_layer
from spgnn.layers.init import glorot
from spgnn.layers.registry import Dense, Spmm
from spgnn.tasks import TASKS, Task, register_task
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "guide" / "your-model.md").read_text()
G = small_graph(n=41, f=7, classes=3, directed=True, seed=5)


def _guide_adjacency():
    """The guide's adjacency (`MeanSelf`), registered in this process where it is not yet."""
    block = GUIDE.split("## A new adjacency")[1].split("```python\n")[1].split("```")[0]
    if "mean-self" not in ADJACENCIES:
        exec(compile(block, "your-model.md", "exec"), {})
    return ADJACENCIES["mean-self"]


def _weights(ids, f):
    """W, the weights of Σ(Â·H ⊙ W): a function of the original node ids `ids` (f columns)."""
    return ((ids[:, None] + np.arange(f)) % 5).astype(np.float32)


def _mean_self_product(comm):
    """This rank's ids, its rows of Â·H and of ∂Σ(Â·H ⊙ W)/∂H = Âᵀ·W, Â the guide's D⁻¹(A + I), on 1d-halo."""
    _guide_adjacency()
    g = spgnn.DistGraph(comm, graph=G, algo="1d-halo", adjacency="mean-self", feature_norm="none")
    ids = g.node_ids.numpy()
    h = torch.as_tensor(G.x[ids]).requires_grad_(True)
    z = g.spmm(h, "mean-self")
    (z * torch.as_tensor(_weights(ids, z.shape[1]))).sum().backward()
    return ids, z.detach().numpy(), h.grad.numpy()


@pytest.mark.parametrize("P", [1, 2])
def test_the_guides_adjacency_multiplies_as_its_whole_matrix_does(P):
    try:
        a = _guide_adjacency().of(G.adj)
        assert not np.allclose(a.toarray(), spgnn.graph.adjacency.normalize(G.adj, "mean").toarray())
        w = _weights(np.arange(G.n), G.x.shape[1])
        results = [_mean_self_product(Comm(0, 1))] if P == 1 else run_local(_mean_self_product, P)
        assert sorted(np.concatenate([ids for ids, _, _ in results])) == list(range(G.n))
        for ids, z, grad in results:
            np.testing.assert_allclose(z, (a @ G.x)[ids], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(grad, (a.T @ w)[ids], rtol=1e-5, atol=1e-5)
    finally:
        ADJACENCIES.pop("mean-self", None)


def test_the_guide_gives_options_the_arguments_option_takes():
    """The guide said an Option was "a name, type, default, help and check": Option(..., check=...) is a TypeError."""
    shown = re.findall(r"spgnn\.Option\(([^)]*)\)", GUIDE)
    assert shown, "the guide shows no spgnn.Option signature"
    takes = inspect.signature(spgnn.Option).parameters
    for args in shown:
        names = [a.split("=")[0].strip() for a in args.split(",")]
        assert all(n in takes for n in names), f"spgnn.Option({args}) names what Option does not take"


def _layer(name, declared):
    """A GCN layer `name` whose costs() returns `declared` ("ok": its true costs)."""

    class Mine(Layer):
        adjacency, summary = "gcn", "a test layer"

        def __init__(self, f_in, f_out, init="auto"):
            super().__init__(f_in, f_out)
            self.initialise(init, f_in, f_out)

        @staticmethod
        def draw(scheme, f_in, f_out):
            return {"weight": glorot(f_in, f_out)}

        def forward(self, g, h):
            return g.linear(g.spmm(h, self.adjacency), self.weight)

        def costs(self, grad_in):
            return [Spmm(self.f_in, "gcn", grad_in), Dense(self.f_in, self.f_out)] if declared == "ok" else declared

    Mine.name = name
    return register_layer(Mine)


def test_malformed_costs_are_refused_and_undeclared_ones_train_unpredicted():
    """The Trainer took every SpgnnError of the cost model as "declares no cost": a costs() of tuples trained with no
    prediction and no word of the mistake."""
    try:
        _layer("bad-costs", [("spmm", 3)])
        with pytest.raises(SpgnnError, match=r"declares \('spmm', 3\) in costs\(\): each cost is a spgnn.layers Spmm"):
            Trainer(TrainConfig(model="bad-costs", epochs=1), Comm(0, 1), graph=G)
        _layer("no-costs", None)
        assert Trainer(TrainConfig(model="no-costs", epochs=1), Comm(0, 1), graph=G).costs is None
        _layer("good-costs", "ok")
        assert Trainer(TrainConfig(model="good-costs", epochs=1), Comm(0, 1), graph=G).costs is not None
    finally:
        for name in ("bad-costs", "no-costs", "good-costs"):
            LAYERS.pop(name, None)


class _LogProb(Task):
    name, summary, metric, metric_label = "logprob-test", "a test task", "logprob", "log-likelihood"

    def loss(self, g, out, mask="train"):
        return g.cross_entropy(out, mask)

    def evaluate(self, g, out, splits=("train", "val", "test")):
        return {f"{s}_logprob": -g.cross_entropy(out, s) for s in splits}        # tensors, not float(...)


def test_a_task_defines_loss_and_evaluate():
    """A task that left out evaluate failed at its first evaluation with an empty NotImplementedError."""
    lacking = type("Lacking", (Task,), {"name": "lacking", "loss": _LogProb.loss})
    with pytest.raises(SpgnnError, match="^task 'lacking' does not define evaluate"):
        register_task(lacking)
    assert "lacking" not in TASKS


def test_a_tasks_figures_are_numbers(tmp_path):
    """Figures that were tensors trained every epoch, then lost the run at writing the report (TypeError: Object of
    type Tensor is not JSON serializable)."""
    register_task(_LogProb)
    try:
        t = Trainer(TrainConfig(task="logprob-test", epochs=3, eval_every=1,
                                output=str(tmp_path / "report.json")), Comm(0, 1), graph=G)
        with pytest.raises(SpgnnError, match=r"evaluate gave train_logprob = tensor\(.*\), not a number"):
            t.run(log=None)
    finally:
        TASKS.pop("logprob-test", None)


def test_run_outside_the_main_guard_says_so(tmp_path):
    """A program that calls spgnn.run at its top level, as a first script does: each local process imports the
    program again and called spgnn.run in turn, which ended in two tracebacks of multiprocessing's bootstrap."""
    script = tmp_path / "unguarded.py"
    script.write_text("import spgnn\n\n\ndef main(comm):\n    return comm.rank\n\n\nprint(spgnn.run(main, nprocs=2))\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last == "spgnn.errors.SpgnnError: spgnn.run was called again as the processes it started imported the " \
                   "program: call it under `if __name__ == \"__main__\":`", res.stderr[-2000:]
    assert "bootstrapping phase" not in res.stderr and "rank 0 failed" not in res.stderr
    assert res.stderr.count("Traceback") == 1, res.stderr[-2000:]          # the caller's own, of one exception


def test_an_algorithm_that_skips_distspmms_init_is_refused_where_it_is_made():
    """A plug-in algorithm whose __init__ left out super().__init__ was made, then failed at its first product with
    AttributeError: 'Mine' object has no attribute 'comm'."""
    from spgnn.comm.grid import ProcessGrid
    from spgnn.graph.graph import gcn_norm
    from spgnn.partition.partition import Partition
    from spgnn.spmm import DistSpMM

    class Mine(DistSpMM):
        name = "mine"

        def __init__(self, block, comm, grid, device="cpu"):
            self.a = block.a

    a, comm = gcn_norm(G.adj), Comm(0, 1)
    with pytest.raises(SpgnnError, match=r"^algorithm 'mine': its __init__ does not call super\(\).__init__\(block"):
        Mine.from_matrix(a, Partition(np.zeros(G.n, np.int64), 1), comm, ProcessGrid(comm, (1,), Mine.grid_names))


def test_a_notebook_cell_run_again_replaces_its_plug_ins():
    """Running the cell that defines a layer, task or algorithm again (a new class, defined at the same place) was
    refused as 'registered already (by __main__.Mine)': only a restart of the kernel let one edit a plug-in. It now
    replaces the one before, as partitioners did; another definition of the name is still refused."""
    from spgnn.spmm.registry import ALGORITHMS

    def cell(base, name):           # the class statement of one notebook cell, run once
        class Mine(base):
            pass
        Mine.name = name
        if base is Task:
            Mine.loss = Mine.evaluate = lambda self, *a: None
        if base is Layer:
            Mine.forward = lambda self, g, h: h
        return Mine

    for kind, base, register, registry in (("layer", Layer, register_layer, LAYERS),
                                           ("task", Task, register_task, TASKS),
                                           ("algorithm", ALGORITHMS["1d"], spgnn.register_algorithm, ALGORITHMS)):
        name = f"cell-{kind}"
        try:
            register(cell(base, name))
            again = register(cell(base, name))
            held = registry[name]
            assert (held if isinstance(held, type) else type(held)) is again, kind
            other = type("Other", (base,), {"name": name})
            with pytest.raises(SpgnnError, match=f"'{name}' is registered already .*Mine\\): choose another name"):
                register(other)
        finally:
            registry.pop(name, None)
