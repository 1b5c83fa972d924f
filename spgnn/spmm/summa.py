"""CAGNET's 2D and 3D SpMM (SUMMA), with H split by feature columns as well as by rows.

Grid R×C×L (2D is L = 1), rank (i, j, l). The vertices are split into R·L parts, part (i, l) = i·L + l;
row block i of A is the union of parts (i, 0), …, (i, L−1). Rank (i, j, l) holds H[part (i, l), column
block j] (f columns split C ways, the first f mod C blocks one wider; a block may be empty) and the
blocks A[row block i, part (k, l)] for k ≡ j (mod C). Fiber l runs its own SUMMA over the inner parts
(k, l), k = 0 … R−1:

    A[i, (k,l)]   broadcast along the grid row (i, ·, l) from column k mod C  (one buffer: int32 row
                  pointers, or rows when the block is hypersparse, int32 column indices and float32
                  values, their bits unchanged)
    H[(k,l), j]   broadcast along the grid column (·, j, l) from row k
    Z_l        += A[i, (k,l)]·H[(k,l), j]

then Z[part (i,l), j] = the reduce-scatter of Z_l over the fiber (i, j, ·) (3D only; CAGNET all-reduced
and sliced), piece (i,l) summed at member l (`spgnn.spmm.reduce`). With ``--overlap on`` (the default) the
stages are double-buffered: stage k+1's two broadcasts are started before stage k's product, so that they are
in flight meanwhile, and the last stage's product is computed piece by piece, each piece's reduction in flight
while the next is computed. The backward dH = Aᵀ·G runs the same schedule on the blocks of Aᵀ, stored the
same way.

Per SpMM of width f, rank (i, j, l) receives about nnz(row block i)/L·(C−1)/C nonzeros (8 bytes each
plus a row pointer per row of the block, or 12 bytes each when that is less) and n/L·f/C·(R−1)/R words
of H, then moves a reduce-scatter of n/R·f/C words over the fiber.

The dense operations work on column blocks: H·W multiplies by W's rows of block j and reduce-scatters
the n_p×f_out partial over the grid row (its backward all-gathers dY there); log-softmax all-gathers each
block's row-wise log-sum-exp along the grid row; argmax all-gathers each block's (max, column). A row's
loss and accuracy are counted by the rank holding its label's column, and parameter gradients are
summed over all ranks. Each grid dimension is named after the group of ranks along it: "column" is the grid
column (·, j, l), "row" the grid row (i, ·, l), "fiber" (i, j, ·); the plane "parts" is (·, j, ·).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from ..comm import autograd as autograd_comm
from ..comm.comm import Pending, prefetched
from ..comm.exchange import exchange_blocks, exchange_cost
from ..comm.grid import divisors, format_grid, parse_grid
from ..comm.halo import owner
from ..dense import matmul
from ..errors import SpgnnError
from ..sparse.csr import CSR, row_ids
from .base import DistSpMM
from .oned import OVERLAP, product
from .reduce import reduce_cost, reduce_pieces
from .registry import Option, register


def column_sizes(f: int, C: int) -> list[int]:
    """Widths of the C column blocks of f columns: the first f mod C one wider."""
    return [f // C + (j < f % C) for j in range(C)]


def column_slice(f: int, C: int, j: int) -> slice:
    """Column block j of f columns split C ways."""
    start = j * (f // C) + min(j, f % C)
    return slice(start, start + column_sizes(f, C)[j])


def _is_grid(text) -> bool:
    try:
        return bool(parse_grid(text))
    except SpgnnError:
        return False


def _wire_bytes(rows: int, nnz: int) -> int:
    """Bytes of a rows×k block with nnz nonzeros on the wire: CSR (int32 row pointers) or, for a block
    with fewer nonzeros than rows (hypersparse, as blocks get at large P), COO (an int32 row per nonzero)."""
    return 4 * min(rows + 1 + 2 * nnz, 3 * nnz)


def _pack(a: CSR) -> torch.Tensor:
    """A block as one int32 buffer: [indptr or row of each nonzero | column indices | values' float32 bits]."""
    if a.nnz >= 2**31:
        raise SpgnnError(f"a block of A has {a.nnz} nonzeros, beyond int32 indices: use more grid rows")
    m = a.shape[0]
    rows = a.indptr if m + 1 + 2 * a.nnz <= 3 * a.nnz else row_ids(a.indptr)
    return torch.from_numpy(np.concatenate([rows.astype(np.int32), a.indices.astype(np.int32),
                                            a.data.astype(np.float32).view(np.int32)]))


def _unpack(buf: torch.Tensor, shape: tuple, nnz: int) -> CSR:
    """The inverse of `_pack` for a block of `shape` with `nnz` nonzeros."""
    b = buf.numpy()
    w = b.size - 2 * nnz
    rows = b[:w] if w == shape[0] + 1 else np.concatenate([[0], np.cumsum(np.bincount(b[:w], minlength=shape[0]))])
    return CSR(rows, b[w:w + nnz], b[w + nnz:].view(np.float32), shape, check=False)


def _broadcast(group: str, b: int, g: int, root: bool) -> tuple:
    return ("broadcast", group, b * (g - 1), 0, g - 1) if root else ("broadcast", group, 0, b, 0)


class SUMMA(DistSpMM):
    """SUMMA on an R×C×L grid: the schedule of `SUMMA2D` (L = 1) and `SUMMA3D`, which differ in the grid they
    take (``--grid RxC`` or ``RxCxL``), their default and the grids ``--algo auto`` tries."""

    options = (Option("grid", str, None, "2d: RxC, 3d: RxCxL, any shape whose product is the number of processes "
                      "(default: the most square or cubic one)", shapes=True, valid=_is_grid,
                      must="positive integers joined by x (as 4x2 or 2x2x2)"), OVERLAP)
    grid_names = ("column", "row", "fiber")
    rows_group_name = "world"
    whole_rows = False
    dims = 3

    @classmethod
    def grid_shape(cls, P, grid=None):
        if grid is None:
            return cls.default_shape(P)
        grid = parse_grid(grid)
        letters = "x".join("RCL"[:cls.dims])
        if len(grid) != cls.dims:
            raise SpgnnError(f"--algo {cls.name} takes --grid {letters}, got {format_grid(grid)}")
        if math.prod(grid) != P:
            raise SpgnnError(f"--grid {format_grid(grid)} has {math.prod(grid)} processes but the job has "
                             f"{P}: choose {letters} with product {P}")
        return grid + (1,) * (3 - cls.dims)

    @classmethod
    def default_shape(cls, P: int) -> tuple:
        """The most cube-like R×C×L with product P, a deeper fiber and then more rows on a tie."""
        shapes = [(r, c, P // (r * c)) for r in divisors(P) for c in divisors(P // r)]
        return min(shapes, key=lambda s: (max(s) - min(s), -s[2], -s[0]))

    @classmethod
    def num_parts(cls, shape):
        return shape[0] * shape[2]

    @classmethod
    def part_of(cls, shape, coord):
        return coord[0] * shape[2] + coord[2]

    @classmethod
    def planes(cls):
        return {"parts": ("column", "fiber")}

    parts_group = "parts"       # the ranks (·, j, ·): member i·L + l holds part (i, l)

    def __init__(self, block, comm, grid, device="cpu", overlap="on"):
        super().__init__(block, comm, grid, device)
        self.overlap = overlap == "on"
        R, C, L = grid.shape
        self.i, self.j, self.l = grid.coord
        self.grid_row, self.grid_col, self.fiber = grid.group("row"), grid.group("column"), grid.group("fiber")
        offsets, n = self.offsets, self.n
        if n >= 2**31:
            raise SpgnnError(f"--algo {self.name} ships blocks of A with int32 ids: the graph has {n} nodes, more "
                             "than 2^31; use --algo 1d-halo or sar")
        self.block = slice(int(offsets[self.i * L]), int(offsets[(self.i + 1) * L]))
        self.inner = [slice(int(offsets[k * L + self.l]), int(offsets[k * L + self.l + 1])) for k in range(R)]
        self.mine = [k for k in range(R) if k % C == self.j]
        self.fwd = self._held(self._row_block(block.a))
        self.bwd = self.fwd if block.symmetric else self._held(self._transposed_row_block(block.a))

    def _row_block(self, a):
        """A[row block i, columns of parts (k, l), k ≡ j]: my part's rows and those of fibre members (i, j, l'),
        gathered along the fibre (each sends the columns the receiver's blocks need)."""
        R, C, L = self.grid.shape
        if L == 1:
            return a

        coo = a.tocoo()
        col_part = owner(coo.col, self.offsets)

        def cols(l):
            m = np.isin(col_part, [k * L + l for k in self.mine])
            return sp.csr_matrix((coo.data[m], (coo.row[m], coo.col[m])), shape=a.shape)

        got = exchange_blocks(self.comm, self.fiber, {l: cols(l) for l in range(L)},
                              lambda l: (int(self.sizes[self.i * L + l]), self.n))
        return sp.vstack([got[l] for l in range(L)], format="csr")

    def _transposed_row_block(self, a):
        """Aᵀ[row block i, parts (k, l), k ≡ j] = A[part (k, l), row block i]ᵀ, each from member k of the grid
        column (·, j, l) that holds part (k, l), k ≡ j (mod C); returned as the row block i × n matrix."""
        R, C, L = self.grid.shape
        off = self.offsets
        send = {i: a[:, off[i * L]:off[(i + 1) * L]].T for i in range(R)} if self.i % C == self.j else {}
        got = exchange_blocks(self.comm, self.grid_col, send,
                              lambda k: (self.block.stop - self.block.start, int(self.sizes[k * L + self.l])))
        return {k: got[k] for k in self.mine}

    def _held(self, rows) -> tuple[list, dict]:
        """(nnz of every block k of the row block, all-gathered along the grid row when C > 1; {k: (CSR, wire
        buffer)} for the blocks k ≡ j this rank holds). `rows`: the row block (columns by new id) or {k: block}."""
        R, C, _ = self.grid.shape
        mine = {k: CSR.from_scipy(rows[k] if isinstance(rows, dict) else rows[:, self.inner[k]])
                for k in self.mine}
        if C == 1:
            return None, {k: (a, None) for k, a in mine.items()}
        nnz = torch.tensor([[mine[k].nnz if k in mine else 0 for k in range(R)]], dtype=torch.int64)
        nnz = self.comm.all_gather_v(nnz, [1] * C, self.grid_row).sum(0).tolist()
        return nnz, {k: (a, _pack(a).to(self.device)) for k, a in mine.items()}

    def graph_bytes(self):
        held = [self.fwd] if self.bwd is self.fwd else [self.fwd, self.bwd]
        return sum(a.nbytes + (buf.numel() * 4 if buf is not None else 0) for _, blocks in held
                   for a, buf in blocks.values())

    def _block(self, blocks, k: int) -> Pending:
        """A[i, (k,l)] (or Aᵀ's), broadcast along the grid row from its holder: started now, the CSR on wait()."""
        nnz, mine = blocks
        C = self.grid.shape[1]
        if C == 1:
            return Pending.done(mine[k][0])
        shape = (self.block.stop - self.block.start, self.inner[k].stop - self.inner[k].start)
        holder = k % C == self.j
        buf = mine[k][1] if holder else \
            torch.empty(_wire_bytes(shape[0], nnz[k]) // 4, dtype=torch.int32, device=self.device)
        if not buf.numel():                                             # an empty block sends nothing
            return Pending.done(mine[k][0] if holder else _unpack(buf.cpu(), shape, nnz[k]))
        sent = self.comm.broadcast_async(buf, self.grid_row.ranks[k % C], self.grid_row, not self.overlap)

        def wait():
            got = sent.wait()
            return mine[k][0] if holder else _unpack(got.cpu(), shape, nnz[k])
        return Pending(wait)

    def _stage(self, blocks, h, k: int) -> Pending:
        """Stage k's broadcasts started now: A[i, (k,l)] along the grid row and H[(k,l), j] along the grid column;
        wait() returns both."""
        R, _, L = self.grid.shape
        a = self._block(blocks, k)
        hk = h if k == self.i else h.new_empty((int(self.sizes[k * L + self.l]), h.shape[1]))
        hk = self.comm.broadcast_async(hk, self.grid_col.ranks[k], self.grid_col, not self.overlap) \
            if R > 1 and hk.numel() else Pending.done(hk)
        return Pending(lambda: (a.wait(), hk.wait()))

    def _stages(self, blocks, h):
        R, _, L = self.grid.shape
        z = h.new_zeros((self.block.stop - self.block.start, h.shape[1]))
        stages = (lambda k=k: self._stage(blocks, h, k) for k in range(R))
        for k, (a, hk) in enumerate(prefetched(stages, int(self.overlap))):
            if k < R - 1:
                product(a, hk, z)
            else:
                last = a, hk                  # the last stage: computed piece by piece below

        def finish(lo, hi):                   # the last stage's rows lo…hi−1, before their reduction starts
            product(last[0].row_slice(lo, hi), last[1], z[lo:hi])

        if L == 1:
            finish(0, z.shape[0])
            return z
        if not z.numel():     # nothing to sum (no rows, or no columns in this grid column): this member's rows, empty
            return z.new_zeros((int(self.sizes[self.i * L + self.l]), z.shape[1]))
        pieces = [int(r) for r in self.sizes[self.i * L:(self.i + 1) * L]]
        return reduce_pieces(self.comm, self.fiber, z, pieces, finish, not self.overlap)

    def _forward(self, h):
        return self._stages(self.fwd, h)

    def _backward(self, g):
        return self._stages(self.bwd, g)

    # -- dense operations on column blocks ------------------------------------------------------------
    def columns(self, f):
        return column_slice(f, self.grid.shape[1], self.j)

    def column_group(self):
        return self.grid_row

    def label_rows(self, y, f):
        cols = self.columns(f)
        return (y >= cols.start) & (y < cols.stop)

    def own_rows(self, n):
        """The ranks of a grid row hold the same rows: the first column's counts them."""
        return torch.full((n,), self.j == 0, dtype=torch.bool)

    def linear(self, h, w, b=None):
        """H·W (+ b): Σ_j H[:, block j]·W[block j, :] reduce-scattered by output column blocks."""
        y = matmul(h, w[self.columns(w.shape[0])])
        C = self.grid.shape[1]
        if C > 1 and h.shape[0]:
            y = autograd_comm.reduce_scatter(y.t(), self.comm, self.grid_row, column_sizes(w.shape[1], C)).t()
        elif C > 1:
            y = y[:, self.columns(w.shape[1])]
        return y if b is None else y + self.cols(b)

    def log_softmax(self, h):
        """h − log Σ_blocks exp(logsumexp of the block), the block sums all-gathered along the grid row."""
        C = self.grid.shape[1]
        if C == 1 or not h.shape[0]:
            return F.log_softmax(h, dim=1) if C == 1 else h
        lse = autograd_comm.all_gather(torch.logsumexp(h, dim=1).unsqueeze(0), self.comm, self.grid_row, [1] * C)
        return h - torch.logsumexp(lse, dim=0).unsqueeze(1)

    def argmax(self, h, f):
        C = self.grid.shape[1]
        if C == 1 or not h.shape[0]:
            return h.argmax(dim=1)
        if h.shape[1]:
            idx = h.argmax(dim=1)
            v = h.gather(1, idx.unsqueeze(1)).squeeze(1)
        else:
            idx = torch.zeros(h.shape[0], dtype=torch.long, device=h.device)
            v = torch.full((h.shape[0],), -math.inf, device=h.device)
        mine = torch.stack([v.double(), (idx + self.columns(f).start).double()], dim=1).unsqueeze(0)
        every = self.comm.all_gather_v(mine, [1] * C, self.grid_row)                  # C × n_p × 2
        best = every[:, :, 0].argmax(dim=0)                                            # first block on a tie
        return every[best, torch.arange(h.shape[0], device=h.device), 1].long()

    # -- cost -----------------------------------------------------------------------------------------
    @classmethod
    def spmm_cost(cls, stats, shape, rank, f):
        R, C, L = shape
        i, j, l = (int(x) for x in np.unravel_index(rank, shape))
        fj, sizes = column_sizes(f, C)[j], stats.sizes
        m = sizes[i * L:(i + 1) * L].sum()

        def schedule(nnz):            # nnz[a, b]: nonzeros of the block (part a, part b) of A or Aᵀ
            calls = []
            for k in range(R):
                p = k * L + l
                if C > 1:
                    b = _wire_bytes(m, nnz[i * L:(i + 1) * L, p].sum())
                    calls += [_broadcast("row", b, C, k % C == j)] if b else []
                if R > 1 and sizes[p] * fj:
                    calls.append(_broadcast("column", 4 * sizes[p] * fj, R, k == i))
            if L > 1 and m * fj:
                calls += reduce_cost("fiber", [int(r) for r in sizes[i * L:(i + 1) * L]], l, 4 * fj)
            return calls

        return {"forward": schedule(stats.block_nnz), "backward": schedule(stats.block_nnz.T)}

    @classmethod
    def setup_cost(cls, stats, shape, rank):
        """The fibre exchange of row pieces (L > 1), the blocks of Aᵀ along the grid column (directed A), and
        an all-gather of each held block's nnz along the grid row per direction (C > 1)."""
        R, C, L = shape
        i, j, l = (int(x) for x in np.unravel_index(rank, shape))
        N, mine = stats.block_nnz, [k * L for k in range(R) if k % C == j]
        calls = exchange_cost("fiber", L, l, np.array([N[i * L + l, [m + x for m in mine]].sum() for x in range(L)]),
                              np.array([N[i * L + x, [m + l for m in mine]].sum() for x in range(L)]))
        nnz_gather = [("all_gather", "row", 8 * R * (C - 1), 8 * R * (C - 1), C - 1)] if C > 1 else []
        calls += nnz_gather
        if not stats.symmetric:
            def to_row_block(p, r):           # nonzeros of A[part p, row block r]
                return N[p, r * L:(r + 1) * L].sum()

            sent = np.array([to_row_block(i * L + l, r) if i % C == j else 0 for r in range(R)])
            recv = np.array([to_row_block(k * L + l, i) if k % C == j else 0 for k in range(R)])
            calls += exchange_cost("column", R, i, sent, recv) + nnz_gather
        return calls

    @classmethod
    def dense_cost(cls, stats, shape, rank, op, f_in, f_out=0):
        R, C, L = shape
        i, j, l = (int(x) for x in np.unravel_index(rank, shape))
        n = stats.sizes[i * L + l]
        if C == 1 or not n:
            return {"forward": [], "backward": []}
        if op == "linear":
            fo = column_sizes(f_out, C)[j]
            return {"forward": [("reduce_scatter", "row", 4 * n * (f_out - fo), 4 * n * (C - 1) * fo, C - 1)],
                    "backward": [("all_gather", "row", 4 * n * fo * (C - 1), 4 * n * (f_out - fo),
                                  C - 1 if fo else 0)]}
        b, msgs = 4 * n * (C - 1), C - 1
        if op == "log_softmax":
            return {"forward": [("all_gather", "row", b, b, msgs)],
                    "backward": [("reduce_scatter", "row", b, b, msgs)]}
        if op == "argmax":
            return {"forward": [("all_gather", "row", 4 * b, 4 * b, msgs)], "backward": []}
        raise ValueError(f"unknown dense operation {op!r}")


@register
class SUMMA2D(SUMMA):
    """CAGNET's 2D SpMM on an R×C grid (``--grid RxC``, any R·C = P): `SUMMA` with L = 1."""

    name = "2d"
    summary = "splits H by rows and feature columns and broadcasts blocks of A and H (SUMMA)"
    dims = 2

    @classmethod
    def default_shape(cls, P):
        C = max(c for c in divisors(P) if c * c <= P)
        return (P // C, C, 1)

    @classmethod
    def candidates(cls, P):
        """Every R×C with R ≥ C ≥ 2 (C = 1 is 1D)."""
        return [{"grid": format_grid((P // c, c))} for c in divisors(P) if 2 <= c <= P // c]


@register
class SUMMA3D(SUMMA):
    """CAGNET's 3D SpMM on an R×C×L grid (``--grid RxCxL``): L fibers of 2D SUMMA summed by reduce-scatter."""

    name = "3d"
    summary = "is 2d on L fibers of the grid, summed by reduce-scatter"

    @classmethod
    def candidates(cls, P):
        """Every R×C×L with R ≥ C ≥ 2 and L ≥ 2 (C = 1 or L = 1 being 1D within fibers and 2D)."""
        return [{"grid": format_grid((P // (c * layers), c, layers))} for layers in divisors(P) if layers >= 2
                for c in divisors(P // layers) if 2 <= c <= P // (c * layers)]
