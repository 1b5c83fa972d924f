"""An mpi4py transport for `spgnn.comm.Comm`: the same collectives as `TorchTransport`, moved by MPI.

For mpirun jobs on CPU. Tensors are handed to MPI through the buffer protocol (``tensor.numpy()`` views of
contiguous CPU tensors: no copy; a non-contiguous tensor goes through one contiguous copy). Counts and
displacements are in elements of the tensor's dtype. A `Group` (global ranks, in group order) maps to an
MPI communicator made on first use with ``COMM_WORLD.Create_group`` (collective over the group's members
only) and cached by its ranks; the group of all ranks is ``COMM_WORLD`` itself. Member k of a group is
rank k of its communicator, so splits and chunks are ordered as on the torch transport.

MPI collectives have no timeout of their own: a watchdog thread ends this process (one ``spgnn: error:`` line,
exit 1, after which mpirun ends the job) when a call has waited longer than `timeout_s` (``--timeout``), so
that a stalled or dead peer cannot leave the job waiting forever.

torch.distributed stays initialised alongside for the launch's barriers, with no group of a grid made there; the
data moved by `Comm` goes through MPI. `Comm` does the byte accounting, so the ledger is the same on both transports.
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from contextlib import contextmanager

import numpy as np
import torch

from ..errors import SpgnnError, say


def mpi():
    """mpi4py's MPI module (its import starts MPI), or SpgnnError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise SpgnnError("launched by an MPI launcher but mpi4py is not importable: pip install 'spgnn[mpi]' (or "
                         "mpi4py)") from e
    return MPI


class MPITransport:
    """Moves CPU tensors with mpi4py collectives over the communicator of each `Group`."""

    name = "mpi"

    def __init__(self, timeout_s: float = 300.0):
        self.MPI = MPI = mpi()
        self._comms = {tuple(range(MPI.COMM_WORLD.Get_size())): MPI.COMM_WORLD}
        self.timeout_s = timeout_s
        self._waiting: tuple[float, str] | None = None      # (when, what) of the call under way
        threading.Thread(target=self._watch, daemon=True, name="spgnn-mpi-watchdog").start()

    @contextmanager
    def _watched(self, what: str):
        """The block is one MPI call that `_watch` ends the process for if it lasts beyond `timeout_s` (inside
        another watched block it is part of that call: the outer one's clock runs on, and is watched after it)."""
        outer = self._waiting
        self._waiting = outer or (time.monotonic(), what)
        try:
            yield
        finally:
            self._waiting = outer

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            waiting = self._waiting
            if waiting is not None and time.monotonic() - waiting[0] > self.timeout_s:
                say(f"rank {self.MPI.COMM_WORLD.Get_rank()}: communication failed ({waiting[1]} waited beyond "
                    f"--timeout {self.timeout_s:g} s); another process probably exited or stalled (see its output), "
                    "or never called it: every rank must call the same collectives in the same order (a DistGraph "
                    "operation under `if comm.rank == 0` waits for ranks that never call it)")
                os._exit(1)

    def new_group(self, ranks):
        """None: a group's communicator is made from its ranks where it is first used (`communicator`)."""
        return None

    def communicator(self, group):
        """The MPI communicator whose rank k is ``group.ranks[k]`` (created on first use, then cached; the creation
        waits for every member, so it is watched: a non-blocking call's first use was not)."""
        ranks = tuple(int(r) for r in group.ranks)
        if ranks not in self._comms:
            world = self.MPI.COMM_WORLD
            tag = zlib.crc32(np.asarray(ranks, np.int64).tobytes()) % 32768   # tells concurrent creations apart
            with self._watched(f"making the communicator of ranks {list(ranks)}"):
                self._comms[ranks] = world.Create_group(world.Get_group().Incl(list(ranks)), tag)
        return self._comms[ranks]

    def broadcast(self, t, src, group):
        """`t` (any shape) from global rank `src` to every member, in place."""
        with _buffer(t) as buf, self._watched("broadcast"):
            self.communicator(group).Bcast(buf, root=group.ranks.index(src))

    def broadcast_async(self, t, src, group):
        """`broadcast` started now (MPI_Ibcast) on contiguous `t`; the returned request's ``wait()`` completes it
        (watched, as every wait, against --timeout)."""
        return _Request(self, self.communicator(group).Ibcast(_view(t), root=group.ranks.index(src)), "broadcast")

    def all_to_all_v(self, out, inp, out_splits, in_splits, group):
        """Rows inp[Σ_{k<j} in_splits_k : …] go to member j; `out` (Σ out_splits rows) receives by source."""
        with _buffer(inp) as send, _buffer(out) as recv, self._watched("all-to-all"):
            self.communicator(group).Alltoallv(_rows(send, in_splits, inp), _rows(recv, out_splits, out))

    def all_to_all_v_async(self, out, inp, out_splits, in_splits, group):
        """`all_to_all_v` started now (MPI_Ialltoallv) on contiguous `out` and `inp`; the returned request's
        ``wait()`` completes it."""
        return _Request(self, self.communicator(group).Ialltoallv(_rows(_view(inp), in_splits, inp),
                                                                  _rows(_view(out), out_splits, out)), "all-to-all")

    def all_reduce(self, t, group):
        """Sum of `t` over the members, in place."""
        with _buffer(t) as buf, self._watched("all-reduce"):
            self.communicator(group).Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def all_reduce_async(self, t, group):
        """`all_reduce` started now (MPI_Iallreduce) on contiguous `t`; the returned request's ``wait()`` completes
        it."""
        return _Request(self, self.communicator(group).Iallreduce(self.MPI.IN_PLACE, _view(t), op=self.MPI.SUM),
                        "all-reduce")

    def reduce_scatter(self, out, inp, group):
        """Member j gets chunk j (``out``-sized, along dim 0) of the sum over members of `inp`."""
        with _buffer(inp) as send, _buffer(out) as recv, self._watched("reduce-scatter"):
            self.communicator(group).Reduce_scatter_block(send, recv, op=self.MPI.SUM)

    def all_gather_object(self, obj, group):
        """Every member's picklable `obj`, in group order."""
        with self._watched("all-gather"):
            return self.communicator(group).allgather(obj)


class _Request:
    """An MPI request (of collective `what`) whose ``wait()`` the transport's watchdog watches."""

    def __init__(self, transport: MPITransport, request, what: str):
        self.transport, self.request, self.what = transport, request, what

    def wait(self):
        with self.transport._watched(self.what):
            return self.request.wait()


def _rows(buf: np.ndarray, rows, like: torch.Tensor) -> list:
    """MPI's vector buffer ``[buf, (counts, displacements)]`` in elements, for row counts `rows` of `like`."""
    counts = np.asarray(rows, np.int64) * int(np.prod(like.shape[1:], dtype=np.int64))
    return [buf, (counts.tolist(), (np.cumsum(counts) - counts).tolist())]


def _view(t: torch.Tensor) -> np.ndarray:
    """The memory of a contiguous CPU tensor as a flat numpy array (no copy)."""
    if t.device.type != "cpu":
        raise SpgnnError(f"the mpi transport moves CPU tensors only, got one on {t.device}: use --transport torch")
    if not t.is_contiguous():
        raise ValueError("the mpi transport needs a contiguous tensor here")
    return t.detach().numpy().reshape(-1)


@contextmanager
def _buffer(t: torch.Tensor):
    """`_view` of `t` for MPI to read or write; for a non-contiguous `t`, of a contiguous copy whose
    contents are written back into `t` afterwards."""
    if t.is_contiguous():
        yield _view(t)
        return
    c = t.detach().contiguous()
    yield _view(c)
    t.detach().copy_(c)
