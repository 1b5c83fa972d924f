"""CAGNET's broadcast algorithms, 1D and 1.5D: P processes as a (P/c)×c grid; block row q of A and of H
is replicated on the c members of team q (grid row q). 1D is the case c = 1.

Replica k of team q computes the partial sum Σ_{j ∈ S_k} A_qj·H_j over its share S_k = {j : j mod c = k}
of the P/c column blocks, H_j broadcast by team j's replica k along grid column k ("block" group, P/c
members), one block live at a time; the team then all-reduces its partials ("replica" group, c members),
so every replica holds Z_q. The backward runs the same stages on G with block row q of Aᵀ. Per SpMM of
width f, replica (q, k) receives Σ_{j∈S_k, j≠q} n_j·f words by broadcast and moves a ring all-reduce of
n_q·f words: about n·f/c + 2·n·f·(c−1)/P words, against n·f·(P−1)/P for 1D.
"""

from __future__ import annotations

import math

from .. import kernels
from ..comm import ring_words
from ..errors import SpgnnError
from ..graph import is_symmetric
from .base import DistSpMM
from .oned import column_blocks


class OneFiveD(DistSpMM):
    """CAGNET's 1.5D SpMM with replication factor c (``--replication``, default the divisor of P
    nearest √P)."""

    name = "1.5d"
    grid_names = ("block", "replica")

    @classmethod
    def grid_shape(cls, P: int, replication: int = 0, grid=None) -> tuple:
        super().grid_shape(P, 0, grid)                      # rejects --grid
        c = replication or _default_replication(P)
        if c < 1 or P % c:
            raise SpgnnError(f"--replication {c} must divide the number of processes {P}")
        return (P // c, c)

    def __init__(self, adj, partition, comm, grid, device="cpu"):
        super().__init__(adj, partition, comm, grid, device)
        self.team, self.column = grid.group("replica"), grid.group("block")
        self.sizes = partition.sizes()
        self.share = [j for j in range(grid.shape[0]) if j % grid.shape[1] == grid.coord[1]]
        self.blocks = column_blocks(adj[self.rows], partition.offsets)
        # Block row q of Aᵀ; for a symmetric A (GCN on an undirected graph) it is A's own.
        self.blocks_t = self.blocks if is_symmetric(adj) else \
            column_blocks(adj[:, self.rows].T.tocsr(), partition.offsets)

    rows_group_name = "block"

    @classmethod
    def spmm_cost(cls, stats, shape, rank, f):
        teams, c = shape
        q, k = divmod(rank, c)
        rows = stats.sizes * f * 4                                 # bytes of each block of H
        calls = [("broadcast", "block", rows[q] * (teams - 1), 0, teams - 1) if j == q else
                 ("broadcast", "block", 0, rows[j], 0) for j in range(k, teams, c)]
        if c > 1:
            b = ring_words(int(stats.sizes[q]) * f, c, k) * 4
            calls.append(("all_reduce", "replica", b, b, 2 * (c - 1)))
        return {"setup": [], "forward": calls, "backward": calls}

    def _stages(self, blocks, h):
        z = h.new_zeros((self.rows.stop - self.rows.start, h.shape[1]))
        for j in self.share:
            buf = h if j == self.part else h.new_empty((int(self.sizes[j]), h.shape[1]))
            self.comm.broadcast(buf, self.column.ranks[j], self.column)
            if blocks[j].nnz:
                kernels.spmm(blocks[j], buf, out=z, accumulate=True)
        return self.comm.all_reduce(z, self.team) if self.team.size > 1 else z

    def _forward(self, h):
        return self._stages(self.blocks, h)

    def _backward(self, g):
        return self._stages(self.blocks_t, g)


class OneD(OneFiveD):
    """CAGNET's 1D SpMM: P broadcast stages, one block of H live at a time (1.5D with c = 1)."""

    name = "1d"

    @classmethod
    def grid_shape(cls, P: int, replication: int = 0, grid=None) -> tuple:
        return super(OneFiveD, cls).grid_shape(P, replication, grid) + (1,)     # DistSpMM's: (P,)


def _default_replication(P: int) -> int:
    """The divisor of P nearest √P (CAGNET's best c), the smaller one on a tie."""
    return min((c for c in range(1, P + 1) if P % c == 0), key=lambda c: (abs(c - math.sqrt(P)), c))
