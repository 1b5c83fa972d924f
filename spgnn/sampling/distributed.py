"""Sampling and feature fetches with the graph split 1.5D over the ranks.

Layout: P = (P/c)·c ranks on a (P/c)×c `ProcessGrid` (dims "block", "replica"), rank r = (i, j) with
i = r // c its block and j = r mod c its replica column. Block i is rows [bounds[i], bounds[i+1]) of N_off
(the sampler's adjacency) and of X (the features), held by the c ranks (i, 0), …, (i, c−1). c = 1 is the 1D row
split, c = P full replication. A rank fetches rows from the owner in its own replica column (group "block":
ranks (0, j), …, (P/c−1, j), member i owning block i), so the c replicas of a block serve disjoint requesters.

Fetching rows M[want] (M = N_off or X), duplicates removed first (u = the distinct ids of `want`, sorted):

    1. every member learns how many ids each other member wants from it       (all-to-all, one count each)
    2. the ids go to their owners                                             (all-to-all, int64)
    3. owner i answers Q_i·M_i, Q_i the selection of the ids it received:
       sparse N_off: the SpGEMM's row lengths, column indices, values       (three all-to-alls)
       dense X: the rows                                                    (one all-to-all, f floats a row)

so rank r moves, in a group of g = P/c members, 8·(g−1) bytes of counts each way, 8 bytes per id it asks others
for (received: per id others ask of it) and the rows themselves the other way; its own block's rows are copied
locally. The sampler's fetches are ledger phase "sampling", the feature fetches phase "features". Draws and
blocks stay local and keyed as in `spgnn.sampling`, so a minibatch is the one a single process draws under the
same key. Fetches are collectives over the column: every rank calls them equally often (with no ids if it has
no minibatch).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..comm.comm import Comm
from ..comm.grid import ProcessGrid
from ..errors import SpgnnError
from .sampler import SAMPLERS, Sampler, parse_sampler, select_rows


def block_bounds(n: int, blocks: int) -> np.ndarray:
    """Row bounds of `blocks` near-equal contiguous blocks of n rows: block i = [b[i], b[i+1])."""
    return np.linspace(0, n, blocks + 1).astype(np.int64)


class RowBlocks:
    """The 1.5D row layout of an n-row matrix over `comm`'s P ranks with replication c (c divides P)."""

    def __init__(self, n: int, comm: Comm, replication: int = 1, bounds=None):
        """`bounds`: the row bounds of the P/c blocks (default `block_bounds`; a partitioned dataset's offsets)."""
        P, c = comm.world_size, int(replication)
        if c < 1 or P % c:
            raise SpgnnError(f"--replication {replication} must be a positive divisor of the number of processes "
                             f"{P} (the graph is split into P/c row blocks, each held by c processes)")
        self.comm, self.n, self.c = comm, n, c
        self.grid = ProcessGrid(comm, (P // c, c), ("block", "replica"))
        self.column = self.grid.group("block")                  # my replica column, member i owns block i
        self.bounds = block_bounds(n, P // c) if bounds is None else np.asarray(bounds, np.int64)
        b = self.bounds
        if b.shape != (P // c + 1,) or b[0] != 0 or b[-1] != n or np.any(np.diff(b) < 0):
            raise SpgnnError(f"row bounds {b.tolist()} must be P/c + 1 = {P // c + 1} non-decreasing offsets from 0 to "
                             f"n = {n}, one block of rows for each of the {P // c} replica groups")
        self.block = self.grid.coord[0]
        self.lo, self.hi = int(self.bounds[self.block]), int(self.bounds[self.block + 1])

    def exchange(self, values, send_counts, recv_counts, dtype=None) -> torch.Tensor:
        """`Comm.all_to_all_v` over the replica column of a numpy array (as `dtype`) or a tensor."""
        t = values if isinstance(values, torch.Tensor) else torch.as_tensor(np.ascontiguousarray(values, dtype))
        return self.comm.all_to_all_v(t, send_counts, recv_counts, self.column)

    def request(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Steps 1–2 for sorted distinct `ids`: (ids asked per owner, ids others asked of me per member,
        those ids as local row positions)."""
        g = self.column.size
        send = np.bincount(np.searchsorted(self.bounds, ids, side="right") - 1, minlength=g)
        asked = self.exchange(send, [1] * g, [1] * g, np.int64).numpy()
        local = self.exchange(ids, send, asked, np.int64).numpy() - self.lo
        return send, asked, local


class Fetcher:
    """M[want] for a row-split M, rows fetched from their owners (ledger phase `phase`); subclasses say how
    owner i answers (`answer`: local positions → the rows, sent back with `send`/`asked` row counts)."""

    phase = ""

    def __init__(self, layout: RowBlocks):
        self.layout = layout

    def __call__(self, want: np.ndarray):
        ids, inverse = np.unique(np.asarray(want, dtype=np.int64), return_inverse=True)
        with self.layout.comm.phase(self.phase):
            send, asked, local = self.layout.request(ids)
            rows = self.answer(local, asked, send)
        return rows[inverse]

    def answer(self, local: np.ndarray, asked: np.ndarray, send: np.ndarray):
        raise NotImplementedError


class RowFetcher(Fetcher):
    """Rows of N_off (n×n CSR) on demand: this rank keeps only its block, N_off[lo:hi]; owner i answers
    R_i = Q_i·N_off[block i] (the distributed form of `Sampler.frontier_rows`)."""

    phase = "sampling"

    def __init__(self, off: sp.csr_matrix, layout: RowBlocks):
        """`off`: N_off whole, or this rank's block of it (rows lo:hi)."""
        super().__init__(layout)
        self.mine = sp.csr_matrix(off if off.shape[0] == layout.hi - layout.lo else off[layout.lo:layout.hi])

    def answer(self, local, asked, send):
        lay, g = self.layout, len(asked)
        rows = select_rows(self.mine, local)                                        # R_i = Q_i·N_off[mine]
        deg = np.diff(rows.indptr)
        got_deg = lay.exchange(deg, asked, send, np.int64).numpy()
        out_nnz = np.bincount(np.repeat(np.arange(g), asked), weights=deg, minlength=g).astype(np.int64)
        in_nnz = np.bincount(np.repeat(np.arange(g), send), weights=got_deg, minlength=g).astype(np.int64)
        cols = lay.exchange(rows.indices, out_nnz, in_nnz, np.int64).numpy()
        vals = lay.exchange(rows.data, out_nnz, in_nnz, np.float64).numpy()
        ptr = np.concatenate([[0], np.cumsum(got_deg)])
        return sp.csr_matrix((vals, cols, ptr), shape=(len(ptr) - 1, lay.n))


class FeatureFetcher(Fetcher):
    """Rows of the features X (n×f) on demand: this rank keeps X[lo:hi]; owner i answers X[block i][Q_i]."""

    phase = "features"

    def __init__(self, x: torch.Tensor, layout: RowBlocks):
        """`x`: the features whole, or this rank's block of them (rows lo:hi)."""
        super().__init__(layout)
        self.mine = (x if x.shape[0] == layout.hi - layout.lo else x[layout.lo:layout.hi]).contiguous()

    def answer(self, local, asked, send):
        return self.layout.exchange(self.mine[torch.as_tensor(local)], asked, send)


def make_distributed_sampler(spec: str, norm_adj: sp.spmatrix, comm: Comm, replication: int = 1,
                             layout: RowBlocks | None = None) -> Sampler:
    """The `--sampler` spec's sampler whose frontier rows come from a `RowFetcher` over the 1.5D layout with
    replication c (or the given `layout`). `norm_adj`: N whole, or this rank's block row of it (rows lo:hi of
    `layout`, which must then be given): N's diagonal and row sums of every node, two O(n) vectors each sampled
    block scales its rows by, are then all-gathered over the replica column (phase setup). N_off is dropped."""
    kind, sizes = parse_sampler(spec)
    if layout is not None and replication not in (1, layout.c):
        raise SpgnnError(f"make_distributed_sampler: replication {replication} but the layout given has c = "
                         f"{layout.c}: give one or the other")
    layout = layout or RowBlocks(norm_adj.shape[1], comm, replication)
    block = norm_adj.shape[0] != norm_adj.shape[1]               # a block row (one block of all n is N whole)
    sampler = SAMPLERS[kind](norm_adj, sizes, layout.lo if block else 0)
    if block:
        rows = np.diff(layout.bounds)
        with comm.phase("setup"):
            both = torch.from_numpy(np.stack([sampler.diag, sampler.row_sum], 1))
            sampler.diag, sampler.row_sum = comm.all_gather_v(both, rows, layout.column).numpy().T.copy()
    sampler.frontier_rows = RowFetcher(sampler.off, layout)
    sampler.off = None
    return sampler
