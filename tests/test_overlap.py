"""Communication hidden behind computation (``--overlap on|off``): for 1d, 1d-halo, sar (prefetch 1 and 2), 1.5d,
2d and 3d at P = 4, on a symmetric (GCN-normalised) and a directed (mean-normalised) graph, with overlap on and
off, one SpMM's Z = A·H and dH = Aᵀ·G equal scipy's, on and off give the same numbers bit for bit, and the ledger
equals the cost model's calls, bytes and messages; on the torch transport (gloo) and, under mpirun, on mpi4py's.
Overlap does happen where it is on: a recording transport sees products run while a non-blocking exchange is in
flight (between its start and its wait), and with it off sees no non-blocking exchange at all; for 3d that
includes the last stage's pieces computed while the fibre's reduction of the previous ones is in flight.
1d-halo's attention (GAT, dropout on) equals the serial attention on the whole graph, on and off bit for bit,
its ledger the cost model's halo exchange each way, and with overlap on the local edges' scores are computed
while the halo rows are in flight. A value other than on or off is one clear error.

Under mpirun this module is the rank program: ``mpirun -np 4 python -m tests.test_overlap OUT``.
"""

import pickle
import sys
from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest
import torch

import spgnn.spmm as algorithms
from spgnn.comm.comm import Comm, TorchTransport
from spgnn.comm.grid import ProcessGrid
from spgnn.comm.launch import run_local
from spgnn.cost import BlockStats
from spgnn.graph.graph import gcn_norm, mean_norm
from spgnn.partition.partition import Partition, make_parts
from spgnn.sparse import attention, kernels
from tests.graphs import small_graph
from tests.launchers import MPI4PY, MPIRUN
from tests.test_mpi_transport import mpirun

P, F = 4, 6
MATRICES = {"sym": gcn_norm(small_graph(n=47, seed=31).adj),
            "dir": mean_norm(small_graph(n=47, seed=32, directed=True).adj)}
CASES = [("1d", {}), ("1d-halo", {}), ("sar", {}), ("sar", {"prefetch": 2}), ("1.5d", {"replication": 2}),
         ("2d", {"grid": "2x2"}), ("3d", {"grid": "2x1x2"}), ("3d", {"grid": "1x2x2"})]


class Recording:
    """A transport that moves data as `inner` does and logs each exchange: ("blocking",) for a blocking call,
    ("start", id) and ("wait", id) for a non-blocking one."""

    def __init__(self, inner, log):
        self.inner, self.log, self.name = inner, log, inner.name

    def __getattr__(self, name):
        fn = getattr(self.inner, name)
        if name.endswith("_async"):
            def start(*args):
                work, key = fn(*args), len(self.log)
                self.log.append(("start", key))
                return _Logged(work, self.log, key)
            return start

        def blocking(*args):
            self.log.append(("blocking",))
            return fn(*args)
        return blocking


class _Logged:
    def __init__(self, work, log, key):
        self.work, self.log, self.key = work, log, key

    def wait(self):
        self.work.wait()
        self.log.append(("wait", self.key))


def _overlapped(log) -> tuple[int, int]:
    """(products run while a non-blocking exchange was in flight, non-blocking exchanges started)."""
    flying, hidden, started = set(), 0, 0
    for event in log:
        if event[0] == "start":
            flying.add(event[1])
            started += 1
        elif event[0] == "wait":
            flying.discard(event[1])
        elif event[0] == "product":
            hidden += bool(flying)
    return hidden, started


def _inputs(n):
    return np.random.default_rng(0).standard_normal((2, n, F)).astype(np.float32)


def _one(comm, log, gname, algo, options, overlap):
    """Z, dH, the ledger's (calls, sent, received, messages) per (phase, op, group), and the overlap counts."""
    a, cls = MATRICES[gname], algorithms.get(algo)
    shape = cls.grid_for(comm.world_size, **options)
    B = cls.num_parts(shape)
    part = Partition(make_parts("random", a, B, seed=5), B)
    ctor = {k: v for k, v in options.items() if k in cls.constructor_options(options)}
    op = cls.from_matrix(a, part, comm, ProcessGrid(comm, shape, cls.grid_names), overlap=overlap, **ctor)
    h_all, g_all = _inputs(a.shape[0])
    rows, cols = part.perm[op.rows], op.columns(F)
    h = torch.tensor(h_all[rows][:, cols], requires_grad=True)
    comm.ledger.reset()
    log.clear()
    with comm.phase("forward", layer=0):
        z = op.spmm(h)
    z.backward(torch.tensor(g_all[rows][:, cols]))
    ledger = defaultdict(lambda: np.zeros(4, np.int64))
    for (phase, _, name, group), row in comm.ledger.rows.items():
        ledger[phase, name, group] += np.array(row[:4], np.int64)
    return rows, cols, z.detach().numpy(), h.grad.numpy(), {k: tuple(v) for k, v in ledger.items()}, \
        _overlapped(log), shape


HEADS, CH = 2, 3


def _attention_inputs(n):
    r = np.random.default_rng(1)
    return (r.standard_normal((n, HEADS, CH)).astype(np.float32), r.standard_normal((n, HEADS)).astype(np.float32),
            r.standard_normal((n, HEADS)).astype(np.float32), r.standard_normal((n, HEADS, CH)).astype(np.float32))


def _attend(comm, log, gname, overlap):
    """1d-halo's attention (dropout 0.3) on the pattern of `gname`: rows, out, the gradients of V, s_src and s_dst,
    the ledger and the overlap counts."""
    a, cls = MATRICES[gname], algorithms.get("1d-halo")
    part = Partition(make_parts("random", a, P, seed=5), P)
    op = cls.from_matrix(a, part, comm, ProcessGrid(comm, (P,), cls.grid_names), overlap=overlap)
    rows = part.perm[op.rows]
    v, s_src, s_dst, g = (torch.tensor(x[rows]) for x in _attention_inputs(a.shape[0]))
    assert len(op.col_ids) >= len(rows)                 # fetched once (phase setup), as a first call would
    for t in (v, s_src, s_dst):
        t.requires_grad_()
    comm.ledger.reset()
    log.clear()
    with comm.phase("forward", layer=0):
        out = op.attend(v, s_src, s_dst, 0.2, dropout=0.3, key=7)
    out.backward(g)
    return rows, out.detach().numpy(), [t.grad.numpy() for t in (v, s_src, s_dst)], dict(comm.ledger.rows), \
        _overlapped(log)


def _rank(base, transport=None):
    log = []
    comm = Comm(base.rank, base.world_size, Recording(transport or TorchTransport(), log))
    real, real_scores = kernels.spmm, attention.scores

    def product(*args, **kw):
        log.append(("product",))
        return real(*args, **kw)

    def scores(*args, **kw):
        log.append(("product",))
        return real_scores(*args, **kw)

    kernels.spmm, attention.scores = product, scores
    try:
        return {"spmm": [_one(comm, log, gname, algo, options, overlap)
                         for gname in MATRICES for algo, options in CASES for overlap in ("on", "off")],
                "attend": [_attend(comm, log, gname, overlap) for gname in MATRICES for overlap in ("on", "off")]}
    finally:
        kernels.spmm, attention.scores = real, real_scores


def _predicted(gname, algo, shape, rank):
    """The cost model's (calls, sent, received, messages) per (phase, op, group) for one SpMM of width F."""
    a, cls = MATRICES[gname], algorithms.get(algo)
    B = cls.num_parts(shape)
    part = Partition(make_parts("random", a, B, seed=5), B)
    out = defaultdict(lambda: np.zeros(4, np.int64))
    for phase, calls in cls.spmm_cost(BlockStats.of(part.renumber(a), part), shape, rank, F).items():
        for name, group, sent, recv, messages in calls:
            out[phase, name, group] += np.array([1, sent, recv, messages], np.int64)
    return {k: tuple(v) for k, v in out.items()}


def _check(results, transport):
    _check_spmm([r["spmm"] for r in results], transport)
    _check_attend([r["attend"] for r in results], transport)


def _check_attend(results, transport):
    """1d-halo's attention equals the serial one on the whole graph (same dropout mask), on and off bit for bit
    with the same ledger, and with overlap on the scores of the local edges are computed during the exchange."""
    k = 0
    for gname, a in MATRICES.items():
        part = Partition(make_parts("random", a, P, seed=5), P)
        coo = a.tocoo()
        rows, cols = torch.as_tensor(coo.row, dtype=torch.int64), torch.as_tensor(coo.col, dtype=torch.int64)
        v, s_src, s_dst, g = (torch.tensor(x, requires_grad=i < 3) for i, x in enumerate(_attention_inputs(a.shape[0])))
        mask = attention.edge_mask(coo.row, coo.col, a.shape[0], HEADS, 0.3, 7)
        out = attention.attend(rows, cols, v, s_src, s_dst, 0.2, mask)
        out.backward(g)
        ref = [out.detach().numpy()] + [t.grad.numpy() for t in (v, s_src, s_dst)]
        on = {}
        for overlap in ("on", "off"):
            for rank, res in enumerate(results):
                ids, got, grads, ledger, (hidden, started) = res[k]
                where = f"1d-halo attention, overlap {overlap} on {gname}, {transport}, rank {rank}"
                for x, want in zip([got] + grads, ref):
                    np.testing.assert_allclose(x, want[ids], rtol=1e-4, atol=1e-5, err_msg=where)
                stats = replace(BlockStats.of(part.renumber(a), part), symmetric=False)   # the fold: the reverse
                width = HEADS * CH + HEADS                  # a row of [V | s_src]
                want = algorithms.get("1d-halo").spmm_cost(stats, (P,), rank, width)
                assert {key[0]: tuple(row[:4]) for key, row in ledger.items()} == \
                    {phase: (1, *calls[0][2:]) for phase, calls in want.items()}, where
                if overlap == "on":
                    on[rank] = got, grads, ledger
                    assert hidden >= 1 and started >= 1, (where, hidden, started)
                else:
                    assert started == 0, where
                    for x, y in zip([got] + grads, [on[rank][0]] + on[rank][1]):
                        np.testing.assert_array_equal(x, y, err_msg=where)
                    assert {key: row[:4] for key, row in ledger.items()} == \
                        {key: row[:4] for key, row in on[rank][2].items()}, where
            k += 1


def _check_spmm(results, transport):
    k = 0
    for gname, a in MATRICES.items():
        h_all, g_all = _inputs(a.shape[0])
        z_ref, dh_ref = a @ h_all, a.T @ g_all
        for algo, options in CASES:
            both = {}
            for overlap in ("on", "off"):
                for rank, res in enumerate(results):
                    rows, cols, z, dh, ledger, (hidden, started), shape = res[k]
                    where = f"{algo} {options} overlap {overlap} on {gname}, {transport}, rank {rank}"
                    np.testing.assert_allclose(z, z_ref[rows][:, cols], rtol=1e-5, atol=1e-6, err_msg=where)
                    np.testing.assert_allclose(dh, dh_ref[rows][:, cols], rtol=1e-5, atol=1e-6, err_msg=where)
                    assert ledger == _predicted(gname, algo, shape, rank), where
                    if overlap == "off":
                        assert started == 0, where
                        np.testing.assert_array_equal(z, both[rank][0], err_msg=where)
                        np.testing.assert_array_equal(dh, both[rank][1], err_msg=where)
                    else:
                        both[rank] = z, dh
                        if any(v[1] or v[2] for v in ledger.values()) and _stages(algo, shape, rank) > 1:
                            assert hidden >= 1 and started >= 1, (where, hidden, started)
                k += 1


def _stages(algo, shape, rank) -> int:
    """Products per SpMM direction on `rank`: the local block and the rest (1d-halo, sar), or the stages, the
    last one computed in as many pieces as 3d's fibre has members."""
    if algo in ("1d-halo", "sar"):
        return 2
    if algo in ("2d", "3d"):
        return shape[0] - 1 + shape[2]
    teams, c = shape
    return len(range(rank % c, teams, c))


def test_overlap_on_and_off_match_reference_and_cost_model():
    _check(run_local(_rank, P, timeout_s=300), "torch")


@pytest.mark.skipif(not (MPIRUN and MPI4PY),
                    reason="needs mpirun and mpi4py (pip install 'spgnn[mpi]')")
def test_overlap_on_and_off_on_the_mpi_transport(tmp_path):
    out = tmp_path / "overlap.pkl"
    res = mpirun(P, ["-m", "tests.test_overlap", str(out)], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    _check(pickle.loads(out.read_bytes()), "mpi")


def main(out: str) -> None:
    from spgnn.comm import launch
    from spgnn.comm.mpi import MPITransport

    base = launch.init(transport="torch", timeout_s=600)      # torch.distributed for the grids' DeviceMesh
    results = base.all_gather_object(_rank(base, MPITransport()))
    if base.rank == 0:
        with open(out, "wb") as f:
            pickle.dump(results, f)
    launch.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])


def test_bad_overlap_is_one_clear_line(capsys):
    """--overlap takes on or off: anything else is one ``spgnn: error:`` line, before any work."""
    from spgnn import cli

    assert cli.main(["train", "--overlap", "yes", "--epochs", "1"]) != 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert lines == ["spgnn: error: --overlap must be on or off, got 'yes'"], lines


def _predicted_hidden(comm, prefetch):
    from spgnn.config import TrainConfig
    from spgnn.train.fullbatch import Trainer

    t = Trainer(TrainConfig(algo="sar", epochs=1, hidden=8, prefetch=prefetch, eval_every=0), comm)
    predicted = t.run(log=None)["predicted"]                   # rank 0's report holds it
    return predicted and predicted["phases"]["forward"]["hidden_s"]


def test_sar_without_rounds_in_flight_is_predicted_without_overlap():
    """--prefetch 0 starts each ring round as it is consumed, so nothing is in flight behind a product: the report
    predicted hidden seconds as for --prefetch 1."""
    assert run_local(_predicted_hidden, 2, 1)[0] > 0
    assert run_local(_predicted_hidden, 2, 0)[0] == 0
