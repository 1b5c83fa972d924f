"""1D algorithms: rank i owns block row i of A (the in-edges of its nodes) and rows H_i of H.

``1d`` (CAGNET): Z_i = Σ_j A_ij·H_j, H_j broadcast by rank j in stage j, one block live at a time; the
backward runs the same stages on G with the block row i of Aᵀ. Per SpMM rank i sends |H_i|·(P−1) and
receives Σ_{j≠i} |H_j| (n − n_i rows of f words).

``1d-halo`` (sparsity-aware): rank i receives from each j only the rows R_ij of H_j that A_ij touches
(one all-to-all) and computes Z_i = [A_ii A_i,halo]·[H_i; H_halo]. The backward computes
[A_ii A_i,halo]ᵀ·G_i locally and returns the halo rows' share to their owners, who add it in: the
forward's exchange reversed. Per SpMM rank i receives Σ_{j≠i} |R_ij|·f words forward and sends them back
in the backward.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import kernels
from ..graph import is_symmetric
from .base import DistSpMM


def _owner(cols: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.searchsorted(offsets, cols, side="right") - 1


def _column_blocks(m, offsets) -> list:
    """[M[:, offsets[j]:offsets[j+1]] for each part j] as local CSR blocks."""
    return [kernels.CSR.from_scipy(m[:, offsets[j]:offsets[j + 1]])
            for j in range(len(offsets) - 1)]


class OneD(DistSpMM):
    """CAGNET's 1D SpMM: P broadcast stages, one block of H live at a time."""

    name = "1d"

    def __init__(self, adj, partition, comm, grid, device="cpu"):
        super().__init__(adj, partition, comm, grid, device)
        self.group = grid.group("part")
        self.sizes = partition.sizes()
        self.blocks = _column_blocks(adj[self.rows], partition.offsets)
        # Block row i of Aᵀ; for a symmetric A (GCN on an undirected graph) it is A's own.
        self.blocks_t = self.blocks if is_symmetric(adj) else \
            _column_blocks(adj[:, self.rows].T.tocsr(), partition.offsets)

    def _stages(self, blocks, h):
        z = h.new_zeros((self.rows.stop - self.rows.start, h.shape[1]))
        me = self.group.ranks.index(self.comm.rank)
        for j, src in enumerate(self.group.ranks):
            buf = h if j == me else h.new_empty((int(self.sizes[j]), h.shape[1]))
            self.comm.broadcast(buf, src, self.group)
            if blocks[j].nnz:
                kernels.spmm(blocks[j], buf, out=z, accumulate=True)
        return z

    def _forward(self, h):
        return self._stages(self.blocks, h)

    def _backward(self, g):
        return self._stages(self.blocks_t, g)


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
        self.a_t = self.a.transpose()
        # Tell each owner which of its rows this rank needs (setup phase, counted).
        counts = torch.as_tensor(self.recv_rows, dtype=torch.int64)
        self.send_rows = comm.all_to_all_v(counts, [1] * P, [1] * P, self.group).numpy()
        wanted = torch.as_tensor(remote - offs[owner], dtype=torch.int64)
        self.send_idx = comm.all_to_all_v(wanted, self.recv_rows, self.send_rows, self.group).to(device)

    def _forward(self, h):
        halo = self.comm.all_to_all_v(h[self.send_idx], self.send_rows, self.recv_rows, self.group)
        return kernels.spmm(self.a, torch.cat([h, halo]))

    def _backward(self, g):
        gx = kernels.spmm(self.a_t, g)
        n_i = g.shape[0]
        back = self.comm.all_to_all_v(gx[n_i:], self.recv_rows, self.send_rows, self.group)
        return gx[:n_i].index_add_(0, self.send_idx, back)
