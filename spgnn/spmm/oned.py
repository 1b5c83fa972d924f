"""CAGNET's broadcast algorithms, 1D (`OneD`) and 1.5D (`OneFiveD`): P processes as a (P/c)×c grid; block row q
of A and of H is replicated on the c members of team q (grid row q). 1D is the case c = 1.

Replica k of team q computes the partial sum Σ_{j ∈ S_k} A_qj·H_j over its share S_k = {j : j mod c = k}
of the P/c column blocks, H_j broadcast by team j's replica k along grid column k ("block" group, P/c
members), one block live at a time; the team then all-reduces its partials ("replica" group, c members) in
`PIECES` row pieces, so every replica holds Z_q. The backward runs the same stages on G with block row q of Aᵀ.
Per SpMM of width f, replica (q, k) receives Σ_{j∈S_k, j≠q} n_j·f words by broadcast and moves ring
all-reduces of n_q·f words in all: about n·f/c + 2·n·f·(c−1)/P words, against n·f·(P−1)/P for 1D.

With ``--overlap on`` (the default) the stages are double-buffered: stage j+1's broadcast is started before
stage j's product, so that it is in flight meanwhile (two blocks of H live instead of one), and the last stage
is computed piece by piece, each piece's all-reduce in flight while the next piece is computed (with ``off``
each piece's all-reduce completes before the next: the same calls and sums).
"""

from __future__ import annotations

import math

import numpy as np

from ..comm.comm import prefetched, ring_words
from ..comm.exchange import exchange_blocks, exchange_cost
from ..comm.grid import divisors
from ..errors import SpgnnError
from ..sparse import kernels
from ..sparse.csr import CSR, column_blocks, csr_bytes
from .base import DistSpMM
from .registry import Option, register

OVERLAP = Option("overlap", str, "on", "1d, 1d-halo, sar, 1.5d, 2d, 3d: on: each SpMM computes while its next "
                 "communication is in flight (the local block during the halo exchange, a stage during the next "
                 "stage's broadcasts); off: every exchange completes before the product that needs it (same bytes "
                 "and results)", valid=lambda v: v in ("on", "off"), must="on or off", inert=("off",))


PIECES = 4     # row pieces of the team's all-reduce (1.5D)


def pieces(m: int) -> list[tuple[int, int]]:
    """The non-empty row ranges [lo, hi) of Z's m rows that the team all-reduces one at a time (`PIECES`, their
    sizes differing by one at most)."""
    bounds = [m * k // PIECES for k in range(PIECES + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def product(a, h, z) -> None:
    """z += A·H (nothing for an empty block)."""
    if a.nnz and h.shape[1]:
        kernels.spmm(a, h, out=z, accumulate=True)


@register
class OneD(DistSpMM):
    """CAGNET's 1D SpMM: P broadcast stages, one block of H live at a time. The schedule is written for a
    (P/c)×c grid, of which 1D is c = 1 and `OneFiveD` the rest."""

    name = "1d"
    summary = "broadcasts whole blocks of H (CAGNET)"
    grid_names = ("block", "replica")
    options = (OVERLAP,)

    @classmethod
    def grid_shape(cls, P: int) -> tuple:
        return (P, 1)

    def __init__(self, block, comm, grid, device="cpu", overlap="on"):
        super().__init__(block, comm, grid, device)
        self.overlap = overlap == "on"
        self.team, self.column = grid.group("replica"), grid.group("block")
        teams, c = grid.shape
        k, q, off = grid.coord[1], self.part, self.offsets
        self.share = [j for j in range(teams) if j % c == k]
        self.blocks = column_blocks(block.a, off, self.share)
        # Block row q of Aᵀ: for a symmetric A (GCN on an undirected graph) A's own; else A_jqᵀ comes from
        # team j's replica k for each j in the share, in one exchange along the grid column.
        if block.symmetric:
            self.blocks_t = self.blocks
        else:
            send = {j: block.a[:, off[j]:off[j + 1]].T for j in range(teams)} if q % c == k else {}
            got = exchange_blocks(comm, self.column, send, lambda j: (self.sizes[q], self.sizes[j]))
            self.blocks_t = {j: CSR.from_scipy(got[j]) for j in self.share}

    rows_group_name = "block"
    parts_group = "block"

    def graph_bytes(self):
        return csr_bytes(self.blocks.values()) + (csr_bytes(self.blocks_t.values()) if self.blocks_t is not self.blocks
                                                  else 0)

    @classmethod
    def setup_cost(cls, stats, shape, rank):
        """Directed A: team j's replica k sends A_jqᵀ to team q for every j in replica k's share."""
        teams, c = shape
        q, k = divmod(rank, c)
        if stats.symmetric:
            return []
        N = stats.block_nnz
        sent = N[q] if q % c == k else np.zeros(teams, np.int64)
        recv = np.array([N[j, q] if j % c == k else 0 for j in range(teams)])
        return exchange_cost("block", teams, q, sent, recv)

    @classmethod
    def spmm_cost(cls, stats, shape, rank, f):
        teams, c = shape
        q, k = divmod(rank, c)
        rows = stats.sizes * f * 4                                 # bytes of each block of H
        calls = [("broadcast", "block", rows[q] * (teams - 1), 0, teams - 1) if j == q else
                 ("broadcast", "block", 0, rows[j], 0) for j in range(k, teams, c)]
        for lo, hi in pieces(int(stats.sizes[q])) if c > 1 else ():
            b = ring_words((hi - lo) * f, c, k) * 4
            calls.append(("all_reduce", "replica", b, b, 2 * (c - 1)))
        return {"forward": calls, "backward": calls}

    def _stages(self, blocks, h):
        z = h.new_zeros((self.rows.stop - self.rows.start, h.shape[1]))

        def start(j):
            buf = h if j == self.part else h.new_empty((int(self.sizes[j]), h.shape[1]))
            return lambda: self.comm.broadcast_async(buf, self.column.ranks[j], self.column, not self.overlap)

        last = None
        for j, buf in zip(self.share, prefetched(map(start, self.share), int(self.overlap))):
            if self.team.size > 1 and j == self.share[-1]:
                last = blocks[j], buf                   # the last stage: computed piece by piece below
            else:
                product(blocks[j], buf, z)
        if self.team.size == 1:
            return z
        pending = []
        for lo, hi in pieces(z.shape[0]):               # the last stage by rows, each piece summed as it is done
            if last is not None:
                product(last[0].row_slice(lo, hi), last[1], z[lo:hi])
            pending.append(self.comm.all_reduce_async(z[lo:hi], self.team, not self.overlap))
        for p in pending:
            p.wait()
        return z

    def _forward(self, h):
        return self._stages(self.blocks, h)

    def _backward(self, g):
        return self._stages(self.blocks_t, g)


@register
class OneFiveD(OneD):
    """CAGNET's 1.5D SpMM with replication factor c (``--replication``, default the divisor of P nearest √P)."""

    name = "1.5d"
    summary = "replicates block rows c times to cut the broadcast volume by c"
    options = OneD.options + (Option(
        "replication", int, 0, "1.5d: replication factor c, dividing the number of processes (0: the divisor nearest "
        "its square root); --sampler --split-graph: each of the P/c row blocks of the graph is held by c processes "
        "(0: 1)", shapes=True, valid=lambda c: c >= 0, must="non-negative", inert=(1,)),)

    @classmethod
    def grid_shape(cls, P: int, replication: int = 0) -> tuple:
        c = replication or _default_replication(P)
        if P % c:
            raise SpgnnError(f"--replication {c} must divide the number of processes {P}: give one of "
                             f"{', '.join(map(str, divisors(P)))}, or 0 for the divisor nearest √P")
        return (P // c, c)

    @classmethod
    def candidates(cls, P: int) -> list[dict]:
        """Each c > 1 dividing P with c² ≤ P (beyond, a replica has less than one broadcast stage: CAGNET's
        range)."""
        return [{"replication": c} for c in divisors(P) if 2 <= c and c * c <= P]


def _default_replication(P: int) -> int:
    """The divisor of P nearest √P (CAGNET's best c), the smaller one on a tie."""
    return min(divisors(P), key=lambda c: (abs(c - math.sqrt(P)), c))
