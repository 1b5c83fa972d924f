"""Each distributed SpMM algorithm computes Z = A·H and dH = Aᵀ·G exactly, on P = 1…4 processes, block
and random partitions, symmetric and directed graphs; and moves exactly the bytes its formula says."""

import numpy as np
import pytest
import torch

import spgnn.spmm as algorithms
from spgnn.graph import gcn_norm, mean_norm
from spgnn.grid import ProcessGrid
from spgnn.launch import run_local
from spgnn.partition import Partition, make_parts
from tests.graphs import small_graph

F = 5
GRAPHS = {"sym": small_graph(n=41, seed=1), "dir": small_graph(n=41, seed=2, directed=True)}


def _inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, F, generator=g), torch.randn(n, F, generator=g)


def _cases(P):
    for gname, g in GRAPHS.items():
        for norm in (gcn_norm, mean_norm):
            for method in ("block", "random"):
                for algo in algorithms.ALGORITHMS:
                    yield gname, norm(g.adj), make_parts(method, g.adj, P, seed=7), algo


def _rank(comm):
    out = []
    for gname, a, parts, algo in _cases(comm.world_size):
        part = Partition(parts, comm.world_size)
        cls = algorithms.get(algo)
        grid = ProcessGrid(comm, cls.grid_shape(comm.world_size), cls.grid_names)
        op = cls(part.renumber(a), part, comm, grid)
        h_all, g_all = _inputs(a.shape[0], 3)
        mine = part.perm[op.rows]
        h = h_all[mine].clone().requires_grad_(True)
        comm.ledger.reset()
        with comm.phase("forward", layer=0):
            z = op.spmm(h)
        z.backward(g_all[mine])
        fwd = {k: comm.ledger.total(k, phase="forward") for k in ("sent_bytes", "recv_bytes")}
        bwd = {k: comm.ledger.total(k, phase="backward") for k in ("sent_bytes", "recv_bytes")}
        out.append((gname, algo, mine, z.detach().numpy(), h.grad.numpy(), fwd, bwd))
    return out


def _expected_bytes(algo, a, parts, P, rank):
    """Bytes rank `rank` receives in the forward, computed from the partition alone."""
    rows = np.flatnonzero(parts == rank)
    if algo == "1d":
        return (a.shape[0] - rows.size) * F * 4, rows.size * F * 4 * (P - 1)
    cols = np.unique(a[rows].indices)
    remote = np.count_nonzero(parts[cols] != rank)
    return remote * F * 4, None


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_spmm_exact_and_bytes(P):
    results = run_local(_rank, P)
    cases = list(_cases(P))
    for k, (gname, a, parts, algo) in enumerate(cases):
        h_all, g_all = (t.numpy() for t in _inputs(a.shape[0], 3))
        z_ref, dh_ref = a @ h_all, a.T @ g_all
        for rank, res in enumerate(results):
            _, name, mine, z, dh, fwd, bwd = res[k]
            assert name == algo
            where = f"{algo} on {gname}, P={P}, rank {rank}"
            np.testing.assert_allclose(z, z_ref[mine], rtol=1e-5, atol=1e-6, err_msg=where)
            np.testing.assert_allclose(dh, dh_ref[mine], rtol=1e-5, atol=1e-6, err_msg=where)
            recv, sent = _expected_bytes(algo, a, parts, P, rank)
            assert fwd["recv_bytes"] == recv, where
            if algo == "1d":
                assert fwd["sent_bytes"] == sent and bwd == fwd, where
            else:   # the backward returns exactly the rows the forward brought in
                assert bwd["sent_bytes"] == recv and bwd["recv_bytes"] == fwd["sent_bytes"], where
