"""Sampling with the adjacency split by rows over the ranks (1D: the c = 1 case of DESIGN.md §1's 1.5D layout).

Rank i holds rows [bounds[i], bounds[i+1]) of N_off. The SpGEMM R = Q·N_off that both samplers start from
(`Sampler.frontier_rows`) is done distributed, fetching only the rows the frontier needs:

    1. each rank sends every owner the frontier vertices it needs from it        (all-to-all, ids)
    2. owner i computes R_i = Q_i·N_off[rows of i] for the ids it received      (local SpGEMM)
    3. R_i goes back: row lengths, then column indices and values               (three all-to-alls)

The bytes are counted in the ledger phase "sampling". Everything else (draws, blocks) is local and keyed as
in `spgnn.sampling`, so a minibatch is the same as a single process draws under the same key. Every rank must
call `sample` the same number of times (possibly with no seeds): the fetches are collectives.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from .comm import Comm
from .sampling import SAMPLERS, Sampler, parse_sampler, selection


class RowFetcher:
    """Rows of N_off on demand from their owners; this rank keeps only its own block of rows."""

    def __init__(self, off: sp.csr_matrix, comm: Comm):
        P, n = comm.world_size, off.shape[0]
        self.comm, self.n = comm, n
        self.bounds = np.linspace(0, n, P + 1).astype(np.int64)
        lo, hi = self.bounds[comm.rank], self.bounds[comm.rank + 1]
        self.lo, self.mine = lo, sp.csr_matrix(off[lo:hi])

    def _exchange(self, values: np.ndarray, send_counts, recv_counts, dtype) -> np.ndarray:
        out = self.comm.all_to_all_v(torch.as_tensor(np.ascontiguousarray(values, dtype)), send_counts, recv_counts)
        return out.numpy()

    def __call__(self, want: np.ndarray) -> sp.csr_matrix:
        """N_off[want] (len(want)×n CSR), rows fetched from their owners."""
        P = self.comm.world_size
        with self.comm.phase("sampling"):
            owner = np.searchsorted(self.bounds, want, side="right") - 1
            order = np.argsort(owner, kind="stable")
            send = np.bincount(owner, minlength=P)
            asked = self._exchange(send, [1] * P, [1] * P, np.int64)                  # ids each rank wants from me
            req = self._exchange(want[order], send, asked, np.int64) - self.lo
            rows = selection(req, self.mine.shape[0]) @ self.mine                       # R_i = Q_i·N_off[mine]
            deg = np.diff(rows.indptr)
            got_deg = self._exchange(deg, asked, send, np.int64)
            out_nnz = np.bincount(np.repeat(np.arange(P), asked), weights=deg, minlength=P).astype(np.int64)
            in_nnz = np.bincount(np.repeat(np.arange(P), send), weights=got_deg, minlength=P).astype(np.int64)
            cols = self._exchange(rows.indices, out_nnz, in_nnz, np.int64)
            vals = self._exchange(rows.data, out_nnz, in_nnz, np.float64)
        ptr = np.concatenate([[0], np.cumsum(got_deg)])
        fetched = sp.csr_matrix((vals, cols, ptr), shape=(len(want), self.n))
        return fetched[np.argsort(order)]


def make_distributed_sampler(spec: str, norm_adj: sp.spmatrix, comm: Comm) -> Sampler:
    """The `--sampler` spec's sampler whose frontier rows come from a `RowFetcher` (the full N_off is dropped)."""
    kind, sizes = parse_sampler(spec)
    sampler = SAMPLERS[kind](norm_adj, sizes)
    sampler.frontier_rows = RowFetcher(sampler.off, comm)
    sampler.off = None
    return sampler
