"""Sparsity-aware 1D: rank i owns block row i of A (the in-edges of its nodes) and rows H_i of H.

``1d-halo``: rank i receives from each j only the rows R_ij of H_j that A_ij touches
(one all-to-all) and computes Z_i = [A_ii A_i,halo]·[H_i; H_halo]. The backward computes
[A_ii A_i,halo]ᵀ·G_i locally and returns the halo rows' share to their owners, who add it in: the
forward's exchange reversed. Per SpMM rank i receives Σ_{j≠i} |R_ij|·f words forward and sends them back
in the backward. For a symmetric Â (GCN on an undirected graph) the backward is the forward applied to G
instead (Âᵀ = Â): the same words, no transpose of the block kept.

The block is kept as two shards, A_ii (local columns) and A_i,halo, so that with ``--overlap on`` (the
default) Z_i = A_ii·H_i is computed while the halo rows are in flight and A_i,halo·H_halo added on arrival;
the backward starts returning A_i,haloᵀ·G_i and computes A_iiᵀ·G_i meanwhile.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.sparse as sp
import torch

from ..comm import autograd as autograd_comm
from ..comm.halo import Halo
from ..sparse import attention, kernels
from ..sparse.csr import CSR, csr_bytes, row_ids
from .base import DistSpMM
from .oned import OVERLAP
from .registry import register


@register
class OneDHalo(DistSpMM):
    """Sparsity-aware 1D SpMM: one all-to-all of the H rows each block actually touches."""

    name = "1d-halo"
    summary = "exchanges only the rows of H each block touches"
    uses_halo = True
    attention = True

    options = (OVERLAP,)

    def __init__(self, block, comm, grid, device="cpu", overlap="on"):
        super().__init__(block, comm, grid, device)
        self.halo, a, n_i = block.halo, block.a, self.rows.stop - self.rows.start
        self.overlap = overlap == "on"
        a = sp.csr_matrix((a.data, self.halo.local_columns(a.indices), a.indptr), shape=(n_i, n_i + self.halo.size))
        self.lo, self.hi = self._bounds(n_i)
        self.shards = [CSR.from_scipy(a[:, lo:hi], a.dtype) for lo, hi in zip(self.lo, self.hi)]
        self._col_ids, self._edge_list, self.symmetric = None, {}, block.symmetric

    def _bounds(self, n_i):
        """(lo, hi): shard k is the columns lo[k]:hi[k] of [A_ii A_i,halo] (local numbering): here A_ii, then
        A_i,halo."""
        return np.array([0, n_i]), np.array([n_i, n_i + self.halo.size])

    def graph_bytes(self):
        return csr_bytes(self.shards) + self.halo.nbytes

    @property
    def col_ids(self) -> np.ndarray:
        """Original node ids of the local columns [own rows | halo rows], fetched once (phase setup)."""
        if self._col_ids is None:
            with self.comm.phase("setup"):
                self._col_ids = np.concatenate([self.node_ids, self.halo.fetch(self.node_ids)])
        return self._col_ids

    @classmethod
    def spmm_cost(cls, stats, shape, rank, f):
        R = stats.halo                        # R[i, j] = |R_ij|: rows of part j that block row i needs
        need, give = R[rank], R[:, rank]
        forward = [("all_to_all", "part", give.sum() * f * 4, need.sum() * f * 4, np.count_nonzero(give))]
        return {"forward": forward, "backward": forward if stats.symmetric else
                [("all_to_all", "part", need.sum() * f * 4, give.sum() * f * 4, np.count_nonzero(need))]}

    # attention's work (`spgnn.cost.attend_work`), without and added by attention dropout: its torch operations
    # (counted), and bytes an edge, an edge and head, and a feature gathered, charged at the elementwise, elementwise
    # and SpMM rates (fitted to GAT's attention alone, its scores' terms included, at P = 1 on amazon-computers, 8
    # heads of 64, 4 of 16, 1 of 10, on the development machine with the built-in rates: each the median of three runs
    # of ``python benchmarks/fit_attention.py --rounds 15``)
    attend_work = {"forward": (43, 113, 49, 7), "backward": (52, 127, 43, 20)}
    attend_dropout_work = {"forward": (9, 42, 4, 1), "backward": (1, 1, 3, 0)}
    attend_fresh = {"forward": (4, 2), "backward": (7, 2)}      # counted by the same command

    @staticmethod
    def attend_sizes(stats, share, rank, heads, f):
        """`DistSpMM.attend_sizes`, X with the halo's rows."""
        _, e, v = DistSpMM.attend_sizes(stats, share, rank, heads, f)
        return int(4 * (share.rows + int(stats.halo[rank].sum())) * heads * (f + 1)), int(e), int(v)

    @classmethod
    def attend_memory(cls, stats, share, rank, heads, f, dropout=False):
        """Saved: V, [V | s_src] with the halo's rows (X), three edges×heads tensors (E each; five with the dropout
        mask), the edge lists (int64). Working: 3·X + 4·(E + V), fitted to the peak RSS of GAT (8 heads of 64) at
        P = 1, 2, 4 on amazon-computers (the gradients of X, of the edges' tensors and of V, alive at once in the
        backward)."""
        x, e, v = cls.attend_sizes(stats, share, rank, heads, f)
        return {"saved": v + x + e * (3 + 2 * dropout) + 16 * int(share.nnz), "working": 3 * x + 4 * (e + v)}

    @classmethod
    def attend_cost(cls, stats, shape, rank, heads, f, dropout=False):
        """Forward, one halo exchange of [V | s_src] rows (heads·(f + 1) columns); backward, their gradients sent
        home (the exchange's adjoint, whatever A's symmetry); once a run, for `dropout`, the halo's original ids."""
        calls = cls.spmm_cost(replace(stats, symmetric=False), shape, rank, heads * (f + 1))
        ids = Halo.gather_cost(stats.halo, rank, cls.parts_group, 8) if dropout else []
        return calls | {"setup": ids}

    def _fold_halo(self, gx):
        """The adjoint of [H_i; H_halo]: halo rows' gradients returned to their owners and added in."""
        n_i = self.rows.stop - self.rows.start
        return self.halo.scatter_add(gx[n_i:], gx[:n_i])

    def _forward(self, h):
        own, remote = self.shards
        halo = self.halo.gather_async(h, blocking=not self.overlap)        # in flight during A_ii·H_i
        z = kernels.spmm(own, h)
        return kernels.spmm(remote, halo.wait(), out=z, accumulate=True)

    def _backward(self, g):
        if self.symmetric:                     # Âᵀ·G = Â·G: the forward on G, no transpose kept
            return self._forward(g)
        own, remote = self.shards
        back = self.halo.scatter_async(kernels.spmm(remote.T, g), blocking=not self.overlap)
        return kernels.spmm(own.T, g).index_add_(0, self.halo.send_idx_on(g.device), back.wait())

    def attend(self, v, s_src, s_dst, slope, dropout=0.0, key=0):
        """Attention over [A_ii A_i,halo] by plain autograd after one halo exchange of [V | s_src] rows: the halo
        rows and the edges×heads coefficients stay saved for the backward. With ``--overlap on`` the exchange is in
        flight while the dropout mask and the scores of A_ii's edges are computed."""
        n_i, heads, f = v.shape
        (rows, cols), own = self._edge_lists(v.device), self.shards[0].nnz
        col_ids = self.col_ids if dropout > 0 else None            # fetched once, before the exchange starts
        x_own = torch.cat([v.reshape(n_i, -1), s_src], 1)
        halo = self.halo.gather_async(x_own.detach(), blocking=not self.overlap)
        if dropout > 0:                                            # drawn from the edges' ids, on the CPU
            rows_c, cols_c = self._edge_lists()
            mask = self._edge_mask(rows_c.numpy(), col_ids[cols_c.numpy()], heads, dropout, key, v.dtype, v.device)
        else:
            mask = None
        e_own = attention.scores(rows[:own], cols[:own], s_src, s_dst, slope)
        x = autograd_comm.linear_map(x_own, self.comm, lambda t: torch.cat([t, halo.wait()]),
                                     lambda g: self._fold_halo(g.clone()))
        v_x, s_x = x.split([heads * f, heads], 1)           # one backward (a cat), not two zero-filled copies
        e = torch.cat([e_own, attention.scores(rows[own:], cols[own:], s_x, s_dst, slope)])
        return attention.aggregate(e, rows, cols, v_x.view(-1, heads, f), n_i, mask)

    def _edge_lists(self, device="cpu"):
        """(rows, cols) of the edges of [A_ii A_i,halo], A_ii's first, as int64 tensors on `device` (local
        numbering); cached."""
        device = torch.device(device)
        if device in self._edge_list:
            return self._edge_list[device]
        if device.type == "cpu":
            edges = (torch.as_tensor(np.concatenate([row_ids(a.indptr) for a in self.shards])),
                     torch.as_tensor(np.concatenate([a.indices + lo for a, lo in zip(self.shards, self.lo)]),
                                     dtype=torch.int64))
        else:
            edges = tuple(t.to(device) for t in self._edge_lists())
        self._edge_list[device] = edges
        return edges
