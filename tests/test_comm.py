"""The communication layer moves the right data and records exactly the bytes its formulas state;
the saved-tensor meter counts what autograd holds."""

import os
import uuid

import numpy as np
import torch

from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.memory import SavedTensorMeter


def _ops(comm):
    r, P, L = comm.rank, comm.world_size, comm.ledger
    out = {}
    with comm.phase("forward", layer=1):
        t = torch.full((r + 2, 3), float(r))                  # member j holds j+2 rows of width 3
        out["gather"] = comm.all_gather_v(t, [j + 2 for j in range(P)]).numpy()
        send_rows = [(r + j) % 3 for j in range(P)]          # rows r sends to j
        recv_rows = [(j + r) % 3 for j in range(P)]
        send = torch.cat([torch.full((k, 2), 10.0 * r + j) for j, k in enumerate(send_rows)])
        out["a2a"] = comm.all_to_all_v(send, send_rows, recv_rows).numpy()
        b = torch.arange(5.0) if r == 1 else torch.zeros(5)
        out["bcast"] = comm.broadcast(b, src=1).numpy()
        out["sum"] = comm.all_reduce(torch.full((7,), float(r + 1))).numpy()
        out["rs"] = comm.reduce_scatter(torch.arange(4.0 * P) + r).numpy()
    out["ledger"] = {op: (L.total("sent_bytes", op=op), L.total("recv_bytes", op=op), L.total("messages", op=op))
                     for op in ("all_gather", "all_to_all", "broadcast", "all_reduce", "reduce_scatter")}
    out["phases"] = {k for k in L.rows}
    return out


def _threads_and_mark(comm):
    import numba

    return torch.get_num_threads(), numba.get_num_threads(), os.environ.get("SPGNN_TEST_MARK")


def test_local_ranks_share_the_cores_and_see_the_environment_now(monkeypatch):
    """run_local's ranks (forked from a fork server started before) each compute with C // P threads, torch's and
    numba's, and see the environment as it is when run_local is called, not as it was when the server started."""
    monkeypatch.delenv("SPGNN_TEST_MARK", raising=False)
    run_local(_threads_and_mark, 2)                     # the fork server is up from here on
    mark = uuid.uuid4().hex
    monkeypatch.setenv("SPGNN_TEST_MARK", mark)
    threads = max(1, (os.cpu_count() or 1) // 2)
    assert run_local(_threads_and_mark, 2) == [(threads, threads, mark)] * 2


def test_collectives_data_and_bytes():
    P = 3
    res = run_local(_ops, P)
    for r, o in enumerate(res):
        np.testing.assert_array_equal(o["gather"][:, 0], np.repeat(np.arange(P), np.arange(P) + 2))
        expect = np.concatenate([np.full((j + r) % 3, 10.0 * j + r) for j in range(P)])
        np.testing.assert_array_equal(o["a2a"][:, 0], expect)
        np.testing.assert_array_equal(o["bcast"], np.arange(5.0))
        np.testing.assert_array_equal(o["sum"], np.full(7, sum(range(1, P + 1))))
        np.testing.assert_array_equal(o["rs"], P * (np.arange(4.0 * r, 4.0 * r + 4)) + sum(range(P)))
        L, f = o["ledger"], 4
        assert L["all_gather"] == ((r + 2) * 3 * f * (P - 1), sum((j + 2) * 3 * f for j in range(P) if j != r), P - 1)
        sent = sum((r + j) % 3 for j in range(P) if j != r) * 2 * f
        recv = sum((j + r) % 3 for j in range(P) if j != r) * 2 * f
        assert L["all_to_all"] == (sent, recv, sum((r + j) % 3 > 0 for j in range(P) if j != r))
        assert L["broadcast"] == ((5 * f * (P - 1), 0, P - 1) if r == 1 else (0, 5 * f, 0))
        c = len(np.array_split(np.arange(7), P)[r])            # ring all-reduce of 7 words
        assert L["all_reduce"] == ((7 - c + (P - 1) * c) * f,) * 2 + (2 * (P - 1),)
        assert L["reduce_scatter"] == (4 * f * (P - 1), 4 * f * (P - 1), P - 1)
        assert o["phases"] == {("forward", 1, op, "world") for op in L}


def test_single_process_comm_needs_no_process_group():
    c = Comm()
    x = torch.arange(6.0).reshape(3, 2)
    assert torch.equal(c.all_gather_v(x, [3]), x) and torch.equal(c.all_reduce(x.clone()), x)
    assert c.ledger.total("sent_bytes") == 0 and c.ledger.total("calls") == 2


def test_saved_tensor_meter_counts_and_releases():
    m = SavedTensorMeter()
    w = torch.randn(100, 50, requires_grad=True)
    x = torch.randn(1000, 100)
    with m.hooks():
        y = torch.relu(x @ w)          # saves x (for dW = xᵀ·G; x needs no gradient, so w is not saved)
        z = y[:10]                     # and y (for relu): a view of it saves nothing new
    assert m.current == x.nbytes + y.nbytes
    (y.sum() + z.sum()).backward()
    del y, z
    assert m.current == 0 and m.peak_bytes == x.nbytes + 1000 * 50 * 4
