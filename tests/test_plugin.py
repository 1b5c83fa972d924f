"""A new algorithm is one file (tests/plugin_algorithm.py, the README's example): once registered it keeps the
contract (tests/test_contract.py, run here on it), trains with the same loss curve as the built-ins, appears
in ``spgnn train --help`` with its summary, and ``--algo auto`` weighs it by its cost model."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import spgnn.spmm as algorithms
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.train.fullbatch import Trainer
from tests import test_contract
from tests.packages import installed

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def plugin():
    """1d-allgather registered for the test (and taken out again, not to change other tests' registry)."""
    from tests.plugin_algorithm import AllGather1D

    algorithms.register(AllGather1D)
    yield AllGather1D
    algorithms.ALGORITHMS.pop(AllGather1D.name)


def _losses(comm, algo):
    cfg = TrainConfig(algo=algo, epochs=5, hidden=8, eval_every=0, model="sage")
    return [e["loss"] for e in Trainer(cfg, comm).run(log=None)["epochs"]]


def test_registered_algorithm_keeps_the_contract_and_trains_as_the_others(plugin):
    results = run_local(_contract_and_losses, 2)
    for cases, losses in results:
        mine = [r for r in cases if r["case"][0] == "1d-allgather"]
        assert mine
        for r in mine:
            np.testing.assert_allclose(r["z"], r["z_ref"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(r["dh"], r["dh_ref"], rtol=1e-5, atol=1e-6)
            assert r["measured"] == r["predicted"]
        np.testing.assert_allclose(losses["1d-allgather"], losses["1d"], rtol=1e-5)


def _contract_and_losses(comm):
    from tests import plugin_algorithm  # noqa: F401  (a spawned rank registers it too)

    return test_contract._run(comm, ["1d-allgather"]), {a: _losses(comm, a) for a in ("1d", "1d-allgather")}


def test_cli_help_and_auto_take_it_from_the_registry(plugin):
    code = ("import sys; from tests import plugin_algorithm; from spgnn.cli import main; "
            "sys.argv = ['spgnn', 'train', '--help']; main()")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True).stdout
    assert "1d-allgather" in " ".join(out.split()) and "all-gathers H" in " ".join(out.split())
    from spgnn import cost

    assert {"algo": "1d-allgather", "replication": 0, "grid": None} in cost.candidates(4)


def test_an_algorithm_registered_after_import_brings_its_option():
    """TrainConfig reads the registry when a config is made: an algorithm (with an option) registered in a user's
    script after spgnn was imported trains with its option, and runs that do not use it are unaffected."""
    from spgnn.comm.comm import Comm
    from spgnn.options import Option
    from tests.graphs import small_graph
    from tests.plugin_algorithm import AllGather1D

    class Tagged(AllGather1D):
        name, summary = "1d-allgather-tagged", "all-gathers H (with a tag option)"
        options = (Option("tag", int, 1, "1d-allgather-tagged: a tag", valid=lambda v: v >= 1, must="at least 1"),)

        def __init__(self, block, comm, grid, device="cpu", tag=1):
            super().__init__(block, comm, grid, device)
            self.tag = tag

    algorithms.register(Tagged)
    try:
        cfg = TrainConfig(algo=Tagged.name, tag=3, epochs=2, eval_every=0, hidden=4).validate()
        t = Trainer(cfg, Comm(0, 1), graph=small_graph())
        assert t.algo.tag == 3 and len(t.run(log=None)["epochs"]) == 2
        assert TrainConfig().validate().tag == 1
        with pytest.raises(SpgnnError, match="--tag must be at least 1, got 0"):
            TrainConfig(algo=Tagged.name, tag=0).validate()
    finally:
        algorithms.ALGORITHMS.pop(Tagged.name)
    with pytest.raises(AttributeError):
        _ = TrainConfig().tag


def test_an_algorithm_name_taken_is_refused():
    """Registering another algorithm under a taken name replaced the built-in one without a word; layers and tasks
    refused it already."""
    sar = algorithms.get("sar")
    with pytest.raises(SpgnnError, match="^algorithm 'sar' is registered already .*: choose another name$"):
        algorithms.register(type("MySAR", (sar,), {}))
    assert algorithms.get("sar") is sar and algorithms.register(sar) is sar


def test_an_option_that_disagrees_is_refused_where_it_is_registered():
    """A plug-in whose option another plug-in of its kind declares with another type or default was registered,
    and the clash came out only when options were merged: every later TrainConfig and command line failed."""
    from spgnn.layers import LAYERS, GINConv, register_layer
    from spgnn.options import Option
    from spgnn.tasks import TASKS, get_task, register_task

    kinds = ((algorithms.register, algorithms.ALGORITHMS, algorithms.get("sar"), "overlap", "--algo"),
             (register_layer, LAYERS, GINConv, "alpha", "--model"),
             (register_task, TASKS, type(get_task("link")), "decoder", "--task"))
    for register, registry, base, option, flag in kinds:
        clash = type("Clash", (base,), {"name": "clash", "options": (Option(option, int, 3, "a clash"),)})
        with pytest.raises(SpgnnError, match=f"^option --{option} of {flag} clash disagrees with another's: "
                                             f"int = 3 against "):
            register(clash)
        assert "clash" not in registry
    TrainConfig().validate()                     # the registries still merge


def test_an_option_of_a_name_spgnn_holds_or_of_a_kind_it_cannot_read_is_refused():
    """An algorithm option named epochs broke every spgnn train (argparse's conflicting option); one named hidden
    was silently the model's; one named heads (GAT's) took GAT's default; --my-depth never arrived (argparse stores
    my_depth); a bool option read --flag False as true; options not a tuple gave an AttributeError."""
    from spgnn.cli import build_parser
    from spgnn.config import CLI_ONLY, FIELD_NAMES
    from spgnn.options import Option

    sar = algorithms.get("sar")
    for name, needle in (("epochs", "is spgnn's own"), ("hidden", "is spgnn's own"), ("nprocs", "is spgnn's own"),
                         ("heads", "is another kind of plug-in's own")):
        clash = type("Clash", (sar,), {"name": "clash", "options": (Option(name, int, 3, "a clash"),)})
        with pytest.raises(SpgnnError, match=f"^option --{name} of --algo clash {needle}: choose another name"):
            algorithms.register(clash)
        assert "clash" not in algorithms.ALGORITHMS
    with pytest.raises(SpgnnError, match="a name is a Python identifier"):
        Option("my-depth", int, 5, "a dash")
    with pytest.raises(SpgnnError, match="type bool would read --skip False as true"):
        Option("skip", bool, False, "a bool")
    with pytest.raises(SpgnnError, match="`options` must be a tuple of spgnn.Option"):
        algorithms.register(type("Bare", (sar,), {"name": "bare", "options": Option("depth", int, 1, "one")}))
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    from spgnn.config import plugin_options

    assert {a.dest for a in train._actions} - set(FIELD_NAMES) - set(plugin_options()) <= set(CLI_ONLY)


def test_a_published_plugin_may_use_the_top_level_api(tmp_path):
    """The registries loaded entry points while spgnn was still being imported: a plug-in written against the top
    level (spgnn.register_algorithm, spgnn.Layer) was skipped with a warning ('partially initialized module')."""
    installed(tmp_path, "top_plugin", "import spgnn\n\n@spgnn.register_algorithm\n"
              "class TopAllGather(spgnn.ALGORITHMS['1d']):\n    name = 'top-allgather'\n",
              "spgnn.algorithms", "top-allgather = top_plugin:TopAllGather")
    code = "import warnings; warnings.simplefilter('error'); import spgnn; print('top-allgather' in spgnn.ALGORITHMS)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)])))
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]


def test_a_plugin_published_under_a_name_spgnn_holds_is_said_not_loaded(tmp_path):
    """A package publishing 'sar' (an algorithm) or 'block' (a partitioner) was ignored without a word."""
    installed(tmp_path, "my_sar", "import spgnn\n\nclass MySAR(spgnn.ALGORITHMS['sar']):\n    name = 'sar'\n",
              "spgnn.algorithms", "sar = my_sar:MySAR")
    installed(tmp_path, "my_block", "def block(adj, P, seed):\n    return None\n", "spgnn.partitioners",
              "block = my_block:block")
    (tmp_path / "two_impl.py").write_text(              # two algorithms a package re-exports: loading one
        "import spgnn\n\n"                               # registers both, and neither clashes
        "@spgnn.register_algorithm\nclass A(spgnn.ALGORITHMS['1d']):\n    name = 'two-a'\n\n"
        "@spgnn.register_algorithm\nclass B(spgnn.ALGORITHMS['1d']):\n    name = 'two-b'\n")
    installed(tmp_path, "two", "from two_impl import A, B\n", "spgnn.algorithms", "two-a = two:A\ntwo-b = two:B")
    code = ("import warnings; warnings.simplefilter('always'); import spgnn\n"
            "from spgnn.partition.partition import get_partitioner\n"
            "print(spgnn.ALGORITHMS['sar'].__module__, get_partitioner('block').__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)])))
    assert done.returncode == 0 and done.stdout.split() == ["spgnn.spmm.sar", "spgnn.partition.partition"]
    for what, name, ep in (("algorithm", "sar", "my_sar:MySAR"), ("partitioner", "block", "my_block:block")):
        assert f"spgnn: {what} '{name}' (entry point {ep}) was not loaded: the name is spgnn's own" in done.stderr
    assert "two-" not in done.stderr


def test_an_algorithm_without_its_products_is_refused_where_it_registers():
    """One without _backward trained its forward and then raised an empty NotImplementedError in the backward."""
    base = algorithms.DistSpMM
    forward_only = type("ForwardOnly", (base,), {"name": "forward-only", "_forward": lambda self, h: h})
    with pytest.raises(SpgnnError, match="^algorithm 'forward-only' does not define _backward"):
        algorithms.register(forward_only)
    assert "forward-only" not in algorithms.ALGORITHMS
    promised = type("Promised", (base,), {"name": "promised", "attention": True, "_forward": lambda self, h: h,
                                          "_backward": lambda self, g: g})
    with pytest.raises(SpgnnError, match="^algorithm 'promised' does not define attend"):
        algorithms.register(promised)     # it told GAT's users to use --algo promised
    assert "promised" not in algorithms.ALGORITHMS


def test_a_slip_in_a_plugins_stated_costs_names_the_plugin():
    """An op misspelt in spmm_cost (or a missing direction) ended spgnn cost and --algo auto, for every layout, in a
    bare KeyError; a group the layout does not have was taken as it was."""
    from spgnn import cost

    base = algorithms.get("1d")
    model = cost.ModelCost.of_config(TrainConfig(), 8, 3)
    for name, calls in (("typo", {"forward": [("allgather", "part", 4, 4, 1)], "backward": []}),
                        ("one-way", {"forward": []}),
                        ("no-such-group", {"forward": [("all_to_all", "row", 4, 4, 1)], "backward": []})):
        slip = type("Slip", (base,), {"name": f"slip-{name}", "spmm_cost": classmethod(lambda c, *a, k=calls: k)})
        algorithms.register(slip)
        try:
            with pytest.raises(SpgnnError, match=f"^algorithm 'slip-{name}': its spmm_cost .*gives"):
                cost.plan_table(1000, 10000, [2], model)
        finally:
            algorithms.ALGORITHMS.pop(f"slip-{name}")


def _short_rows(comm, which):
    """A 1d whose `which` (_forward or _backward) drops its last row, trained one epoch: the error's text."""
    base = algorithms.get("1d")
    wrong = {which: lambda self, x: getattr(base, which)(self, x)[:-1]}
    algorithms.ALGORITHMS.pop("short-rows", None)
    algorithms.register(type("ShortRows", (base,), {"name": "short-rows", **wrong}))
    try:
        Trainer(TrainConfig(algo="short-rows", epochs=1, hidden=8, eval_every=0, model="gcn"), comm).run(log=None)
    except SpgnnError as e:
        return str(e)
    finally:
        algorithms.ALGORITHMS.pop("short-rows")


@pytest.mark.parametrize("which", ["_forward", "_backward"])
def test_a_product_of_the_wrong_shape_is_named_where_it_is_made(which):
    """A plug-in's _forward of one row short failed later in a layer's add, its _backward in autograd's own
    check, neither naming the algorithm."""
    message, = run_local(_short_rows, 1, which)
    assert message is not None and message.startswith(f"--algo short-rows: {which} returned (")


def test_a_plugin_this_program_registered_is_refused_under_nprocs(plugin, monkeypatch, capsys):
    """The --nprocs processes (python -m spgnn) never import the program that registered it: each printed a usage
    dump with 'invalid choice', after the parent had accepted it."""
    from spgnn import cli
    from spgnn.comm import launch

    monkeypatch.setattr(launch, "spawn", lambda *a: pytest.fail("processes were started"))
    assert cli.main(["train", "--algo", plugin.name, "--nprocs", "2", "--epochs", "1"]) != 0
    err = capsys.readouterr().err
    assert f"--algo {plugin.name} is registered by this program (tests.plugin_algorithm), which the --nprocs " in err


def test_auto_picking_a_plugin_this_program_registered_is_refused_under_nprocs(monkeypatch, capsys, tmp_path):
    """--algo auto in the --nprocs parent weighed the program's own plug-in and partitioned for it; the processes,
    which never load it, picked another in silence."""
    from spgnn import cli
    from spgnn.comm import launch

    @algorithms.register
    class Free(algorithms.ALGORITHMS["1d-halo"]):
        name, summary = "free-halo", "1d-halo that claims to move nothing"

        @classmethod
        def spmm_cost(cls, stats, shape, rank, f):
            return {"forward": [], "backward": []}

    try:
        monkeypatch.setattr(launch, "spawn", lambda *a: pytest.fail("processes were started"))
        assert cli.main(["train", "--algo", "auto", "--nprocs", "2", "--epochs", "1", "--cache-dir",
                         str(tmp_path)]) != 0
        assert "--algo free-halo (--algo auto's pick) is registered by this program" in capsys.readouterr().err
    finally:
        algorithms.ALGORITHMS.pop("free-halo")


def test_what_is_no_plugin_class_is_refused_where_it_registers():
    """A class of another kind, or an instance, was registered, then failed at its first use with an
    AttributeError ('type object has no attribute check_values'); an option named as a TrainConfig method
    (validate) was admitted, and cfg.validate stayed the method."""
    import spgnn

    class NotAlgo:
        name = "not-algo"

    for register, what, base in ((spgnn.register_algorithm, "algorithm", "DistSpMM"),
                                 (spgnn.register_layer, "layer", "Layer"), (spgnn.register_task, "task", "Task")):
        for thing in (NotAlgo, NotAlgo()):
            with pytest.raises(SpgnnError, match=f"^{what} .* is not a subclass of spgnn.{base}"):
                register(thing)
    assert "not-algo" not in spgnn.ALGORITHMS
    shadow = type("Shadow", (spgnn.ALGORITHMS["1d"],), {"name": "shadow", "options": (
        spgnn.Option("validate", int, 1, "shadows TrainConfig.validate"),)})
    with pytest.raises(SpgnnError, match="option --validate of --algo shadow is spgnn's own"):
        spgnn.register_algorithm(shadow)                # cfg.validate was the method, not the value
