"""Sparsity-aware 1D: rank i owns block row i of A (the in-edges of its nodes) and rows H_i of H.

``1d-halo``: rank i receives from each j only the rows R_ij of H_j that A_ij touches
(one all-to-all) and computes Z_i = [A_ii A_i,halo]·[H_i; H_halo]. The backward computes
[A_ii A_i,halo]ᵀ·G_i locally and returns the halo rows' share to their owners, who add it in: the
forward's exchange reversed. Per SpMM rank i receives Σ_{j≠i} |R_ij|·f words forward and sends them back
in the backward.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import attention, autograd_comm, kernels
from .base import DistSpMM


def _owner(cols: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.searchsorted(offsets, cols, side="right") - 1


def column_blocks(m, offsets) -> list:
    """[M[:, offsets[j]:offsets[j+1]] for each part j] as local CSR blocks."""
    return [kernels.CSR.from_scipy(m[:, offsets[j]:offsets[j + 1]])
            for j in range(len(offsets) - 1)]


class OneDHalo(DistSpMM):
    """Sparsity-aware 1D SpMM: one all-to-all of the H rows each block actually touches."""

    name = "1d-halo"

    def __init__(self, adj, partition, comm, grid, device="cpu"):
        super().__init__(adj, partition, comm, grid, device)
        self.group = grid.group("part")
        P, offs, me = partition.P, partition.offsets, self.group.ranks.index(comm.rank)
        a = adj[self.rows]
        n_i = a.shape[0]
        cols = np.unique(a.indices)
        remote = cols[_owner(cols, offs) != me]                  # sorted, hence grouped by owner
        owner = _owner(remote, offs)
        self.recv_rows = np.bincount(owner, minlength=P)         # |R_ij| for each owner j
        local_col = np.where(_owner(a.indices, offs) == me, a.indices - offs[me],
                             n_i + np.searchsorted(remote, a.indices))
        self.a = kernels.CSR(a.indptr, local_col, a.data, (n_i, n_i + remote.size))
        self.cols_global = np.concatenate([np.arange(self.rows.start, self.rows.stop), remote])  # of a's columns
        self.a_t = self.a.transpose()
        # Tell each owner which of its rows this rank needs (setup phase, counted).
        counts = torch.as_tensor(self.recv_rows, dtype=torch.int64)
        self.send_rows = comm.all_to_all_v(counts, [1] * P, [1] * P, self.group).numpy()
        wanted = torch.as_tensor(remote - offs[owner], dtype=torch.int64)
        self.send_idx = comm.all_to_all_v(wanted, self.recv_rows, self.send_rows, self.group).to(device)

    @classmethod
    def spmm_cost(cls, stats, shape, rank, f):
        R = stats.halo                        # R[i, j] = |R_ij|: rows of part j that block row i needs
        need, give, P, word = R[rank], R[:, rank], len(R), 8      # setup exchanges int64 counts and ids
        return {"setup": [("all_to_all", "part", (P - 1) * word, (P - 1) * word, P - 1),
                          ("all_to_all", "part", need.sum() * word, give.sum() * word, np.count_nonzero(need))],
                "forward": [("all_to_all", "part", give.sum() * f * 4, need.sum() * f * 4, np.count_nonzero(give))],
                "backward": [("all_to_all", "part", need.sum() * f * 4, give.sum() * f * 4, np.count_nonzero(need))]}

    def _with_halo(self, h):
        """[H_i; H_halo]: the local rows and the remote rows A_i touches, in the order of a's columns."""
        return torch.cat([h, self.comm.all_to_all_v(h[self.send_idx], self.send_rows, self.recv_rows, self.group)])

    def _fold_halo(self, gx):
        """The reverse of `_with_halo`: halo rows' gradients returned to their owners and added in."""
        n_i = self.rows.stop - self.rows.start
        back = self.comm.all_to_all_v(gx[n_i:], self.recv_rows, self.send_rows, self.group)
        return gx[:n_i].index_add_(0, self.send_idx, back)

    def _forward(self, h):
        return kernels.spmm(self.a, self._with_halo(h))

    def _backward(self, g):
        return self._fold_halo(kernels.spmm(self.a_t, g))

    def attend(self, v, s_src, s_dst, slope, dropout=0.0, key=0):
        """Attention over [A_ii A_i,halo] by plain autograd after one halo exchange of [V | s_src] rows:
        the halo rows and the edges×heads coefficients stay saved for the backward."""
        n_i, heads, f = v.shape
        rows = torch.as_tensor(np.repeat(np.arange(n_i), np.diff(self.a.indptr)))
        cols = torch.as_tensor(self.a.indices, dtype=torch.int64)
        x = autograd_comm.linear_map(torch.cat([v.reshape(n_i, -1), s_src], 1), self.comm, self._with_halo,
                                     lambda g: self._fold_halo(g.clone()))
        mask = self._edge_mask(rows.numpy(), self.cols_global[cols.numpy()], heads, dropout, key, v.dtype) \
            if dropout > 0 else None
        return attention.attend(rows, cols, x[:, :-heads].view(-1, heads, f), x[:, -heads:], s_dst, slope, mask)
