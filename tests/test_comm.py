"""The communication layer moves the right data and records exactly the bytes its formulas state;
the saved-tensor meter counts what autograd holds."""

import os
import sys
import uuid

import numpy as np
import pytest
import torch

import spgnn
from spgnn.comm import launch
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.comm.staged import Staged
from spgnn.errors import SpgnnError
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
    from spgnn import native

    kernels = native.library().omp_get_max_threads()     # the OpenMP threads a region of spgnn's kernels gets
    return torch.get_num_threads(), kernels, os.environ.get("SPGNN_TEST_MARK")


def test_local_ranks_share_the_cores_and_see_the_environment_now(monkeypatch):
    """run_local's ranks (forked from a fork server started before) each compute with C // P threads (torch's, which
    spgnn's kernels use too), C the cores they may run on, and see the environment as it is when run_local is
    called, not as it was when the server started: an OMP_NUM_THREADS set then lowers the threads each computes with."""
    monkeypatch.delenv("SPGNN_TEST_MARK", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    run_local(_threads_and_mark, 2)                     # the fork server is up from here on
    mark = uuid.uuid4().hex
    monkeypatch.setenv("SPGNN_TEST_MARK", mark)
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    assert run_local(_threads_and_mark, 2) == [(threads, threads, mark)] * 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert run_local(_threads_and_mark, 1) == [(1, 1, mark)]


@pytest.mark.parametrize("omp,allowed,P,threads", [(None, 8, 1, 8), (None, 8, 3, 2), (None, 2, 4, 1), ("3", 8, 1, 3),
                                                   ("5", 8, 4, 2), ("0", 8, 2, 4), ("two", 8, 2, 4), (" 1 ", 8, 2, 1)])
def test_a_rank_takes_the_threads_it_is_given_else_its_share_of_the_cores_it_may_use(monkeypatch, omp, allowed, P,
                                                                                      threads):
    """`share_cores` divides the cores this process may run on (its affinity: 8 cores of a Slurm allocation on a node
    of 128 give 8 threads, not 128) among the node's P processes; an OMP_NUM_THREADS the environment sets (the
    user's, or torchrun's 1) lowers the share, never raises it (threads beyond the cores wait on each other). It
    used to take the machine's cores whatever was set, so test workers given 2 threads each on a 16-core machine
    ran ranks of 16 threads each."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(allowed)))
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    before = torch.get_num_threads()
    try:
        assert launch.cores() == allowed
        assert launch.share_cores(P) == threads == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def _threads_on(comm, masks):
    """This rank's `sharing` and threads once it runs on the cores masks[rank]."""
    os.sched_setaffinity(0, masks[comm.rank])
    n = launch.sharing(comm)
    return n, launch.share_cores(n)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to run on")
def test_ranks_share_the_cores_they_run_on_alike_and_keep_their_own(monkeypatch):
    """A rank's threads are the cores it may run on, divided among the ranks on its machine that run on the same
    cores: under --nprocs or torchrun all of them; under srun --cpus-per-task or mpirun's binding, each has cores of
    its own (or its package's, shared with the ranks bound alike). Dividing by the launcher's count of local ranks,
    as before, gave a Slurm task of 8 cores among 8 tasks a node one thread."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    both = set(sorted(os.sched_getaffinity(0))[:2])
    one, other = ({c} for c in sorted(both))
    assert run_local(_threads_on, 2, [both, both]) == [(2, 1), (2, 1)]
    assert run_local(_threads_on, 2, [one, other]) == [(1, 1), (1, 1)]
    assert run_local(_threads_on, 2, [both, other]) == [(1, 2), (1, 1)]


def _rank(comm):
    return comm.rank


def _fails_on_1(comm, how):
    if comm.rank == 1 and how == "raises":
        raise ValueError("rank 1's own fault")
    if comm.rank == 1:
        os._exit(3)                                     # dies without a word
    comm.all_reduce(torch.zeros(1))                     # rank 0 waits on rank 1, which never comes
    return comm.rank


@pytest.fixture
def launches(monkeypatch):
    """The launches `run_local` makes: a list of their failures, the first launch made to fail as a world that did
    not form (each rank's join refused, as gloo's connectFullMesh rarely does over loopback)."""
    real, seen = launch._launch_local, []

    def counted(*args):
        results, failures = ({}, {r: ("join", 0.0, "JoinError: closed by peer") for r in range(args[1])}) \
            if not seen else real(*args)
        seen.append(failures)
        return results, failures

    monkeypatch.setattr(launch, "_launch_local", counted)
    return seen


def test_a_world_that_did_not_form_is_formed_again(launches):
    assert run_local(_rank, 3) == [0, 1, 2]
    assert len(launches) == 2 and launches[1] == {}


@pytest.mark.parametrize("how, said", [("raises", "ValueError: rank 1's own fault"),
                                       ("exits", "exited with code 3 and no report")])
def test_a_failure_in_fn_is_not_run_again_and_names_its_rank(launches, how, said):
    """fn failed on rank 1 (after every rank joined): no new launch; the error names rank 1's fault first, before
    rank 0's, which came of it (its peer gone)."""
    with pytest.raises(RuntimeError, match=f"^rank 1 failed: {said}"):
        run_local(_fails_on_1, 2, how, timeout_s=60)
    assert len(launches) == 2 and launches[1][1][0] == {"raises": "run", "exits": "exit"}[how]


def test_a_world_that_never_forms_says_why(monkeypatch):
    """Every launch fails to join (an interface that does not exist): after `JOIN_ATTEMPTS` launches, the error is
    the join's own, naming the interface, in one line that names the rank once."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "spgnn-none0")
    with pytest.raises(SpgnnError, match="^rank [01] could not join the job .* over interface spgnn-none0[^\\n]*$"):
        run_local(_rank, 2, timeout_s=30)


def _transport(comm):
    return comm.rank, comm.world_size, comm.transport.name


def test_run_sets_up_local_ranks_as_asked(monkeypatch):
    """`spgnn.run` on local processes returns rank 0's result; the ranks are set up with the transport asked for
    (`run_local` hands it to each rank's `init`: mpi, which a job not started by mpirun cannot have, fails there);
    a device, transport or process count the job cannot have is one line before any process starts."""
    assert spgnn.run(_transport, nprocs=2, transport="torch") == (0, 2, "torch")
    with pytest.raises(SpgnnError, match="^rank [01]: --transport mpi needs a job started by mpirun [^\\n]*$"):
        # (one line, where a RuntimeError held the rank's traceback)
        run_local(_transport, 2, transport="mpi", timeout_s=60)
    monkeypatch.setattr(launch, "_launch_local", lambda *a: pytest.fail("a process was started"))
    with pytest.raises(SpgnnError, match="^--transport mpi needs a job started by mpirun .* not by --nprocs"):
        spgnn.run(_transport, nprocs=2, transport="mpi")
    for nprocs in (0, 2.5):
        with pytest.raises(SpgnnError, match=f"^run: nprocs must be a whole number of at least 1, got {nprocs}$"):
            spgnn.run(_transport, nprocs=nprocs)
    def inner(comm):
        return comm.rank

    for main in (lambda comm: comm.rank, inner):                    # pickle's traceback, before
        with pytest.raises(SpgnnError, match=r"^run: with nprocs 2, main \('[^']*(<lambda>|<locals>\.inner)'\) must be "
                                             "a function defined at the top level of a module"):
            spgnn.run(main, nprocs=2)
    for timeout in (0, float("inf"), float("nan"), 1e13):  # (joined, the ranks blamed the network for them)
        with pytest.raises(SpgnnError, match=f"^run: timeout must be a number of seconds of at least 1 and at most "
                                             f"2592000 .*, got {timeout}$"):
            spgnn.run(_transport, nprocs=2, timeout=timeout)
    if not torch.cuda.is_available():
        with pytest.raises(SpgnnError, match="^--device cuda: "):
            spgnn.run(_transport, nprocs=2, device="cuda")
    monkeypatch.setattr(launch, "init", lambda *a: pytest.fail("the job was joined"))
    with monkeypatch.context() as env:              # under torchrun of 2 processes, nprocs=4 was run at P = 2
        env.setenv("RANK", "0")
        env.setenv("WORLD_SIZE", "2")
        env.setenv("TORCHELASTIC_RUN_ID", "x")
        with pytest.raises(SpgnnError, match="^run: nprocs=4, but torchrun launched a job of 2 processes"):
            spgnn.run(_transport, nprocs=4)


def _unpicklable(comm):
    return lambda: comm.rank


def test_a_result_that_cannot_be_sent_back_is_named():
    """A main returning a lambda ended in 'exited with code 1 and no report', some seconds later."""
    with pytest.raises(RuntimeError, match="^rank [01] failed: its result cannot be sent back to the launching "):
        run_local(_unpicklable, 2, timeout_s=60)


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


def _sparse_exchange(comm):
    """An all-to-all in each group of a 3×2 grid and in the world, member j getting j·(m + 1) rows from member m
    (member 0 none; none to itself beyond two members)."""
    from spgnn.comm.grid import ProcessGrid

    grid, out = ProcessGrid(comm, (3, 2), ("row", "col")), {}
    for group in (grid.group("row"), grid.group("col"), comm.world):
        me, g = group.ranks.index(comm.rank), group.size
        send_rows = [0 if j == me and g > 2 else j * (me + 1) for j in range(g)]
        recv_rows = [0 if j == me and g > 2 else me * (j + 1) for j in range(g)]
        send = torch.cat([torch.full((k, 2), 100.0 * comm.rank + group.ranks[j]) for j, k in enumerate(send_rows)])
        out[group.name] = (group.ranks, comm.all_to_all_v(send, send_rows, recv_rows, group).numpy())
    return out


def test_sparse_all_to_all_in_subgroups():
    """Exchanges where some members send nothing to some others (sent point to point on gloo beyond two members,
    to and from those with rows only) deliver each member's rows from each source in group order: in a grid's
    groups of 3 and of 2 members (ranks apart in the world) as in the world of 6."""
    for r, o in enumerate(run_local(_sparse_exchange, 6)):
        assert sorted(len(ranks) for ranks, _ in o.values()) == [2, 3, 6]
        for ranks, got in o.values():
            me, g = ranks.index(r), len(ranks)
            expect = [np.full(0 if j == me and g > 2 else me * (j + 1), 100.0 * ranks[j] + r) for j in range(g)]
            np.testing.assert_array_equal(got[:, 0], np.concatenate(expect))
            assert got.shape == (sum(map(len, expect)), 2)


def _shared_groups(comm):
    """Four grids on 4 ranks (4x1, 2x2 twice, 1x4 with a plane), a sum in every group of each, and which groups
    share a process group."""
    import torch.distributed as dist

    from spgnn.comm.grid import ProcessGrid

    before = len(dist.distributed_c10d._world.pg_map)
    grids = [ProcessGrid(comm, (4, 1), ("block", "replica")), ProcessGrid(comm, (2, 2), ("row", "col")),
             ProcessGrid(comm, (2, 2), ("row", "col")), ProcessGrid(comm, (1, 4), ("a", "b"), planes={"ab": "ab"})]
    made = len(dist.distributed_c10d._world.pg_map) - before
    sums = {(k, name): (grid.group(name).ranks, comm.all_sum([comm.rank + 1], grid.group(name))[0])
            for k, grid in enumerate(grids) for name in grid._groups}
    g = [grid._groups for grid in grids]
    return {"made": made, "sums": sums, "coords": [grid.coord for grid in grids],
            "same_rows": g[1]["row"].pg is g[2]["row"].pg, "same_cols": g[1]["col"].pg is g[2]["col"].pg,
            "none": [g[0]["block"].pg, g[0]["replica"].pg, g[3]["b"].pg, g[3]["ab"].pg, g[3]["a"].pg]}


def test_groups_of_the_same_ranks_share_one_process_group():
    """A group's process group is made once for its ranks: a second grid of the same shape makes none, the world's
    ranks use the default group and one rank needs none (each gloo group costs sockets and a thread waking 100
    times a second); sums in every group still cover its members, in row-major coordinates."""
    for r, o in enumerate(run_local(_shared_groups, 4)):
        assert o["made"] == 2                    # its row and its column of 2x2 (pg_map holds a member's), no more
        assert o["same_rows"] and o["same_cols"] and o["none"] == [None] * 5
        assert o["coords"] == [(r, 0), divmod(r, 2), divmod(r, 2), (0, r)]
        for ranks, total in o["sums"].values():
            assert r in ranks and total == sum(m + 1 for m in ranks)
        assert o["sums"][(1, "row")][0] == (r % 2, r % 2 + 2) and o["sums"][(1, "col")][0] == (r - r % 2, r - r % 2 + 1)
    with pytest.raises(ValueError, match="ascending"):
        Comm(0, 4).group("row", (2, 1))


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


class _Lazy:
    """A transport whose collectives act on the tensors it is given only when waited for, noting what it got."""

    name = "lazy"

    def __init__(self):
        self.given = []

    def _later(self, act, *tensors):
        self.given.extend(tensors)
        return type("Work", (), {"wait": lambda _: act()})()

    def broadcast_async(self, t, src, group):
        return self._later(lambda: t.add_(1), t)

    def all_to_all_v_async(self, out, inp, out_splits, in_splits, group):
        return self._later(lambda: out.copy_(inp * 2), out, inp)

    def all_reduce_async(self, t, group):
        return self._later(lambda: t.mul_(3), t)

    def broadcast(self, t, src, group):
        self.broadcast_async(t, src, group).wait()

    def all_to_all_v(self, out, inp, out_splits, in_splits, group):
        self.all_to_all_v_async(out, inp, out_splits, in_splits, group).wait()

    def all_reduce(self, t, group):
        self.all_reduce_async(t, group).wait()

    def reduce_scatter(self, out, inp, group):
        self.all_to_all_v(out, inp, None, None, group)


class _Copying(Staged):
    """`Staged` as it is where the caller's device is not the backend's: every tensor handed over is a copy."""

    def _there(self, t):
        return t.clone()

    def _space(self, out):
        return torch.empty_like(out)


@pytest.mark.parametrize("stage", [Staged, _Copying])
def test_staged_transport_hands_results_back_when_done(stage):
    """The caller's tensors hold each collective's result once it is waited for (not before, for the ``_async``
    ones), inputs stay as they were, and a tensor already on the backend's device is handed over as it is."""
    inner = _Lazy()
    mover = stage(inner, "cpu")
    t, out, inp = torch.ones(3), torch.zeros(4), torch.arange(4.0)
    pending = mover.broadcast_async(t, 0, None)
    assert torch.equal(t, torch.ones(3))
    pending.wait()
    assert torch.equal(t, torch.full((3,), 2.0))
    pending = mover.all_to_all_v_async(out, inp, [4], [4], None)
    assert not out.any()
    pending.wait()
    assert torch.equal(out, inp * 2) and torch.equal(inp, torch.arange(4.0))
    mover.all_reduce(t, None)
    more = inp + 1
    mover.reduce_scatter(out, more, None)
    mover.broadcast(t, 0, None)
    assert torch.equal(t, torch.full((3,), 7.0)) and torch.equal(out, more * 2)
    handed_as_is = [any(g is x for x in (t, out, inp, more)) for g in inner.given]
    assert all(handed_as_is) if stage is Staged else not any(handed_as_is)


def test_counts_and_ranks_a_group_cannot_have_are_refused_in_a_group_of_one_too():
    """A group of one took a shortcut past the checks torch makes in larger groups: rows of another length came back
    repeated (all_gather_v, all_to_all_v) or whole (reduce_scatter), a source outside the group was taken, and a
    negative rank made a group."""
    comm = Comm()
    one = torch.ones(1, 2)
    with pytest.raises(ValueError, match=r"^all_gather_v rows: 2 counts for the 1 members of group 'world'$"):
        comm.all_gather_v(one, [1, 1])
    with pytest.raises(ValueError, match=r"^all_gather_v: this member gives 1 rows, rows says 3$"):
        comm.all_gather_v(one, [3])
    with pytest.raises(ValueError, match=r"^all_to_all_v: send_rows \[1\] must cover the 1 rows sent, and keep as "):
        comm.all_to_all_v(one, [1], [4])
    with pytest.raises(ValueError, match=r"^reduce_scatter rows: 2 counts for the 1 members"):
        comm.reduce_scatter(torch.ones(4, 2), rows=[2, 2])
    with pytest.raises(ValueError, match=r"^broadcast: the source rank 3 is not a member of group 'world' \(0,\)$"):
        comm.broadcast(one, 3)
    with pytest.raises(ValueError, match=r"ranks \(-1, 0\) must be distinct, ascending and in \[0, 2\)"):
        Comm(0, 2).group("bad", [-1, 0])
    assert torch.equal(comm.all_gather_v(one, [1]), one) and comm.ledger.total("recv_bytes") == 0


def test_a_ledger_total_of_what_it_does_not_record_is_refused():
    """total(op="all_to_all_v") (a method's name, not the op the ledger records) summed nothing: 0."""
    comm = Comm()
    comm.all_to_all_v(torch.ones(2, 3), [2], [2])
    assert comm.ledger.total("calls", op="all_to_all") == 1
    for bad in ({"op": "all_to_all_v"}, {"ops": "all_to_all"}):
        with pytest.raises(ValueError, match="^ledger total of 'calls' where .*: fields are calls, "):
            comm.ledger.total("calls", **bad)
    with pytest.raises(ValueError, match="^ledger total of 'bytes'"):
        comm.ledger.total("bytes")


def _rank0_works_long(comm, beat_s, fail):
    """Rank 0 works 2 s alone (its collectives time out after 1 s) while the others wait: what every rank gets."""
    import time

    from spgnn.comm.agree import on_rank0

    def work():
        time.sleep(2.0)
        if fail:
            raise SpgnnError("the graph is bad")
        return "cached/folder"

    try:
        return on_rank0(comm, work, beat_s=beat_s)
    except (SpgnnError, RuntimeError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"


def test_the_others_wait_as_long_as_rank_0_works_alone():
    """Under mpirun or torchrun rank 0 reads and partitions into the cache while the others wait in a collective:
    a graph that took longer than --timeout ended the job, 'communication failed'."""
    assert run_local(_rank0_works_long, 2, 0.25, False, timeout_s=1, deadline_s=60) == ["cached/folder"] * 2
    failed = run_local(_rank0_works_long, 2, 0.25, True, timeout_s=1, deadline_s=60)
    assert failed == ["SpgnnError: the graph is bad"] * 2
    impatient = run_local(_rank0_works_long, 2, None, False, timeout_s=1, deadline_s=60)
    assert impatient[0] != "cached/folder" or impatient[1] != "cached/folder"     # what the beats are for


def _outlives_a_beat(comm):
    import time

    time.sleep(2.5)                                 # past the parent watch's first look (every second)
    return comm.rank


def test_local_ranks_inside_a_spawned_rank_watch_their_own_parent(monkeypatch):
    """run_local inside a rank that --nprocs started would have its processes watch that rank's parent, which is not
    theirs (the fork server is): each ended itself at once."""
    monkeypatch.setenv("SPGNN_LAUNCHER", "spawn")
    monkeypatch.setenv("SPGNN_PARENT_PID", str(os.getpid()))
    assert run_local(_outlives_a_beat, 2, timeout_s=60) == [0, 1]


def _local_rank(comm):
    return os.environ["LOCAL_RANK"]


def test_run_local_gives_each_rank_its_local_rank(monkeypatch):
    """A LOCAL_RANK in the caller's environment reached every rank, so each would pick the same GPU."""
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert run_local(_local_rank, 2) == ["0", "1"]


def test_an_mpi_launch_without_size_variables_asks_mpi4py(monkeypatch):
    """Where mpirun sets no rank and size variables spgnn reads (PMIX_RANK alone), detect() asks mpi4py: that
    branch died of UnboundLocalError (a local named as the function it calls); without mpi4py it is one line."""
    for var in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMIX_RANK", "0")
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(SpgnnError, match="^launched by an MPI launcher but mpi4py is not importable"):
        launch.detect()
