"""A new algorithm is one file (tests/plugin_algorithm.py, the README's example): once registered it keeps the
contract (tests/test_contract.py, run here on it), trains with the same loss curve as the built-ins, appears
in ``spgnn train --help`` with its summary, and ``--algo auto`` weighs it by its cost model."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import spgnn.spmm as algorithms
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.train.fullbatch import Trainer
from tests import test_contract

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
