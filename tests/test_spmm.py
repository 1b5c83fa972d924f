"""Each distributed SpMM algorithm computes Z = A·H and dH = Aᵀ·G exactly, on P = 1…4 processes, block
and random partitions, symmetric and directed graphs; and moves exactly the bytes its formula says,
computed here from the partition alone."""

import numpy as np
import pytest
import torch

import spgnn.spmm as algorithms
from spgnn.comm.grid import ProcessGrid
from spgnn.comm.launch import run_local
from spgnn.graph.graph import gcn_norm, mean_norm
from spgnn.partition.partition import Partition, make_parts
from tests.graphs import small_graph

F, W = 5, 4          # feature width, bytes a word
GRAPHS = {"sym": small_graph(n=41, seed=1), "dir": small_graph(n=41, seed=2, directed=True)}
ALGOS = [("1d", 0), ("1d-halo", 0), ("sar", 0), ("1.5d", 1), ("1.5d", 2)]


def _inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, F, generator=g), torch.randn(n, F, generator=g)


def _cases(P):
    for gname, g in GRAPHS.items():
        for norm in (gcn_norm, mean_norm):
            for method in ("block", "random"):
                for algo, c in ALGOS:
                    if P % max(c, 1) == 0:
                        shape = algorithms.get(algo).grid_for(P, replication=c)
                        yield gname, norm(g.adj), make_parts(method, g.adj, shape[0], seed=7), algo, shape


def _rank(comm):
    out = []
    for gname, a, parts, algo, shape in _cases(comm.world_size):
        part = Partition(parts, shape[0])
        cls = algorithms.get(algo)
        op = cls.from_matrix(a, part, comm, ProcessGrid(comm, shape, cls.grid_names))
        h_all, g_all = _inputs(a.shape[0], 3)
        mine = part.perm[op.rows]
        h = h_all[mine].clone().requires_grad_(True)
        comm.ledger.reset()
        with comm.phase("forward", layer=0):
            z = op.spmm(h)
        z.backward(g_all[mine])
        moved = {(phase, op_): (comm.ledger.total("sent_bytes", phase=phase, op=op_),
                                comm.ledger.total("recv_bytes", phase=phase, op=op_))
                 for phase, _, op_, _ in comm.ledger.rows}
        out.append((gname, algo, mine, z.detach().numpy(), h.grad.numpy(), moved))
    return out


def _ring(words, g, me):
    """Bytes one member sends (and receives) in a ring all-reduce of `words` words over g members."""
    c = len(np.array_split(np.arange(words), g)[me])
    return (words - c + (g - 1) * c) * W if g > 1 else 0


def _expected(algo, a, parts, shape, rank):
    """{(phase, op): (sent, received)} bytes for one SpMM forward and backward, from the partition."""
    if algo in ("1d-halo", "sar"):     # sar moves the same rows, one shard a round
        rows = np.flatnonzero(parts == rank)
        remote = np.count_nonzero(parts[np.unique(a[rows].indices)] != rank) * F * W
        sent = sum(np.count_nonzero(parts[np.unique(a[parts == j].indices)] == rank) * F * W
                   for j in range(shape[0]) if j != rank)
        symmetric = (a != a.T).nnz == 0          # the backward is the forward on G: the same rows
        return {("forward", "all_to_all"): (sent, remote),
                ("backward", "all_to_all"): (sent, remote) if symmetric else (remote, sent)}
    teams, c = shape
    q, k = divmod(rank, c)
    sizes = np.bincount(parts, minlength=teams)
    share = [j for j in range(teams) if j % c == k]
    bcast = (sizes[q] * F * W * (teams - 1) if q in share else 0,
             sum(sizes[j] for j in share if j != q) * F * W)
    out = {(phase, "broadcast"): bcast for phase in ("forward", "backward")}
    if c > 1:
        ring = _ring(sizes[q] * F, c, k)
        out |= {(phase, "all_reduce"): (ring, ring) for phase in ("forward", "backward")}
    return out


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_spmm_exact_and_bytes(P):
    results = run_local(_rank, P)
    for k, (gname, a, parts, algo, shape) in enumerate(_cases(P)):
        h_all, g_all = (t.numpy() for t in _inputs(a.shape[0], 3))
        z_ref, dh_ref = a @ h_all, a.T @ g_all
        for rank, res in enumerate(results):
            _, name, mine, z, dh, moved = res[k]
            assert name == algo
            where = f"{algo} {shape} on {gname}, P={P}, rank {rank}"
            np.testing.assert_allclose(z, z_ref[mine], rtol=1e-5, atol=1e-6, err_msg=where)
            np.testing.assert_allclose(dh, dh_ref[mine], rtol=1e-5, atol=1e-6, err_msg=where)
            expected = _expected(algo, a, parts, shape, rank)
            assert _nonzero(moved) == _nonzero(expected), where


def _nonzero(moved):
    return {key: v for key, v in moved.items() if v != (0, 0)}
