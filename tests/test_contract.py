"""The contract every registered algorithm keeps, on its default grid and on each grid ``--algo auto`` would try
(`DistSpMM.candidates`): Z = A·H and dH = Aᵀ·G equal the single-process reference's on this rank's rows and
columns; the bytes and messages of its set-up, forward and backward equal its cost model's, call for call; and
an option value it cannot honour is refused with a clear error. A new algorithm is checked by registering it."""

import numpy as np
import pytest
import torch

import spgnn.spmm as algorithms
from spgnn import cost
from spgnn.comm.grid import ProcessGrid
from spgnn.comm.launch import run_local
from spgnn.errors import SpgnnError
from spgnn.graph.graph import mean_norm
from spgnn.partition.partition import Partition, make_parts
from spgnn.reference import SerialSpMM
from tests.graphs import small_graph

F = 5
PROCS = (2, 4)
GRAPH = small_graph(n=43, seed=4, directed=True)        # mean normalisation of a directed graph: Aᵀ ≠ A
ADJ = mean_norm(GRAPH.adj)


def cases(P: int) -> list[tuple]:
    """(algorithm, its option values) for its default grid and each candidate grid on P processes."""
    out = []
    for name, cls in algorithms.ALGORITHMS.items():
        seen = set()
        for values in [{}, *cls.candidates(P)]:
            shape = cls.grid_for(P, **values)
            if shape not in seen:
                seen.add(shape)
                out.append((name, values))
    return out


def contract_case(comm, cls, values: dict, adj, partition: Partition, f: int, norm: str = "mean") -> dict:
    """One SpMM of `cls` (option `values`) on the n×n `adj` (normalised by `norm`) split by `partition`, width f:
    this rank's Z and dH, the single-process reference's on the same rows and columns, and the measured and
    predicted calls (phase, op, group, calls, sent, received, messages) of its set-up, forward and backward."""
    g = torch.Generator().manual_seed(11)
    h_all, g_all = torch.randn(adj.shape[0], f, generator=g), torch.randn(adj.shape[0], f, generator=g)
    h_ref = h_all.clone().requires_grad_(True)
    z_ref = SerialSpMM(adj).spmm(h_ref)
    z_ref.backward(g_all)
    shape = cls.grid_for(comm.world_size, **values)
    comm.ledger.reset()
    grid = ProcessGrid(comm, shape, cls.grid_names, "cpu", cls.planes())
    op = cls.from_matrix(adj, partition, comm, grid, **cls.constructor_options(values))
    ids = op.node_ids
    h = op.scatter(h_all[ids]).requires_grad_(True)
    with comm.phase("forward", layer=0):
        z = op.spmm(h)
    z.backward(op.scatter(g_all[ids]))
    cols = op.columns(f)
    measured = sorted((k[0], k[2], k[3], *v[:4]) for k, v in comm.ledger.rows.items())
    stats = cost.BlockStats.of(partition.renumber(adj), partition)
    calls = {"setup": cost.setup_cost(cls, stats, shape, comm.rank, norm)} | \
        (cls.spmm_cost(stats, shape, comm.rank, f) if cls.has_cost_model() else {})
    predicted = {}
    for phase, rows in calls.items():
        for op_, group, sent, recv, msgs in rows:
            row = predicted.setdefault((phase, op_, group), [0, 0, 0, 0])
            for i, v in enumerate((1, sent, recv, msgs)):
                row[i] += int(v)
    return {"case": (cls.name, tuple(sorted(values.items()))), "z": z.detach().numpy(),
            "z_ref": z_ref.detach()[ids][:, cols].numpy(), "dh": h.grad.numpy(),
            "dh_ref": h_ref.grad[ids][:, cols].numpy(),
            "measured": measured, "predicted": sorted((*k, *v) for k, v in predicted.items())}


def _run(comm, names=None):
    """Each case's `contract_case` (of the algorithms `names`, default all) on a random partition."""
    out = []
    for name, values in cases(comm.world_size):
        if names is not None and name not in names:
            continue
        cls = algorithms.get(name)
        B = cls.num_parts(cls.grid_for(comm.world_size, **values))
        out.append(contract_case(comm, cls, values, ADJ, Partition(make_parts("random", GRAPH.adj, B, seed=3), B), F))
    return out


_RESULTS = {}


def results(P: int) -> list:
    """`_run` on P processes, once for all the cases of P."""
    if P not in _RESULTS:
        _RESULTS[P] = run_local(_run, P)
    return _RESULTS[P]


BUILT_IN = {"1d", "1d-halo", "1.5d", "sar", "2d", "3d"}


def test_every_registered_algorithm_is_a_case():
    """The built-in algorithms are registered, and every registered one was checked on every rank of each P (an
    algorithm whose cases were dropped, or a rank that skipped one, fails here)."""
    assert BUILT_IN <= set(algorithms.ALGORITHMS)
    for P in PROCS:
        for rank, mine in enumerate(results(P)):
            checked = {r["case"][0] for r in mine if r["z"].size and r["dh"].shape == r["dh_ref"].shape}
            assert checked == set(algorithms.ALGORITHMS), f"rank {rank} of {P}"


def _id(v) -> str:
    return ",".join(f"{k}={x}" for k, x in v.items()) or "default" if isinstance(v, dict) else str(v)


@pytest.mark.parametrize("P, name, values", [(P, name, values) for P in PROCS for name, values in cases(P)], ids=_id)
def test_contract(P, name, values):
    case = (name, tuple(sorted(values.items())))
    for rank, mine in enumerate(results(P)):
        r = next(r for r in mine if r["case"] == case)
        where = f"{case} rank {rank} of {P}"
        np.testing.assert_allclose(r["z"], r["z_ref"], rtol=1e-5, atol=1e-6, err_msg=f"Z = A·H, {where}")
        np.testing.assert_allclose(r["dh"], r["dh_ref"], rtol=1e-5, atol=1e-6, err_msg=f"dH = Aᵀ·G, {where}")
        if algorithms.get(name).has_cost_model():           # (phase, op, group, calls, sent, recv, messages)
            assert r["measured"] == r["predicted"], where


@pytest.mark.parametrize("name", sorted(algorithms.ALGORITHMS))
def test_a_grid_it_cannot_honour_is_refused(name):
    """Every shape option set to a value no grid of 4 processes fits: the algorithm that declares it says what
    fits, the others say whose option it is."""
    cls = algorithms.get(name)
    for option, value in {"grid": "3x3", "replication": 3}.items():
        with pytest.raises(SpgnnError, match=f"--{option} "):
            cls.grid_for(4, **{option: value})


def test_candidates_are_grids_of_P():
    for P in (1, 4, 6, 8, 12):
        for name, values in cases(P):
            assert np.prod(algorithms.get(name).grid_for(P, **values)) == P
