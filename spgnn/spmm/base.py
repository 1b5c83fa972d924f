"""The distributed-SpMM interface every parallel algorithm implements.

An algorithm owns a data layout (which rows and columns of the n×n sparse A and of an n×f dense H each
rank holds), the forward Z = A·H and the backward dL/dH = Aᵀ·dL/dZ, and the dense operations whose
distributed form depends on the layout (H·W, row-wise log-softmax, the weight-gradient group). Layers are
written once against this interface.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .. import attention, autograd_comm
from ..comm import Comm, Group
from ..errors import SpgnnError
from ..grid import ProcessGrid
from ..partition import Partition


class RowLayout:
    """The layout hooks of a rank holding whole rows of H (every column): the defaults of every algorithm
    but 2D/3D, which split the columns too (`spgnn.spmm.summa`)."""

    def columns(self, f: int) -> slice:
        """The columns of an n×f dense matrix that this rank holds."""
        return slice(0, f)

    def cols(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's columns of a per-column vector (a bias): t[..., columns(len)]."""
        return t[..., self.columns(t.shape[-1])]

    def label_rows(self, y: torch.Tensor, f: int) -> torch.Tensor:
        """Which local rows' label (a column of f) this rank holds: the rows whose loss and accuracy it counts."""
        return torch.ones_like(y, dtype=torch.bool)

    def argmax(self, h: torch.Tensor, f: int) -> torch.Tensor:
        """The (global) column of each local row's largest entry among f, the first on a tie."""
        return h.argmax(dim=1)


class DistSpMM(RowLayout):
    """Z = A·H over a process grid. Subclasses implement `_forward` and `_backward` (both on local
    blocks, without autograd) and may override the layout hooks."""

    name = ""
    grid_names: tuple = ("part",)
    whole_rows = True           # each rank holds whole rows of H (False: split by columns too)

    @classmethod
    def grid_shape(cls, P: int, replication: int = 0, grid: tuple | None = None) -> tuple:
        """The grid shape this algorithm runs on for P processes. `replication` 0 and `grid` None mean
        the algorithm's default. Raises SpgnnError for options it cannot honour."""
        if replication not in (0, 1):
            raise SpgnnError(f"--replication {replication} applies to --algo 1.5d only")
        if grid is not None:
            raise SpgnnError(f"--grid applies to --algo 2d and 3d, not {cls.name}")
        return (P,)

    @classmethod
    def num_parts(cls, shape: tuple) -> int:
        """How many vertex parts (row blocks of H) a grid of `shape` splits the graph into."""
        return shape[0]

    @classmethod
    def part_of(cls, shape: tuple, coord: tuple) -> int:
        """The vertex part whose rows the rank at `coord` holds."""
        return coord[0]

    def __init__(self, adj, partition: Partition, comm: Comm, grid: ProcessGrid, device: str = "cpu"):
        """`adj`: the global n×n scipy CSR A, already renumbered by `partition`; this rank holds the rows
        of part ``part_of(grid.shape, grid.coord)``."""
        self.comm, self.grid, self.partition, self.device = comm, grid, partition, device
        self.n = adj.shape[0]
        self.part = self.part_of(grid.shape, grid.coord)
        offsets = partition.offsets
        self.rows = slice(int(offsets[self.part]), int(offsets[self.part + 1]))

    # -- layout ---------------------------------------------------------------------------------------
    def local_rows(self, x: np.ndarray) -> np.ndarray:
        """The rows of a global (renumbered) n-row array that this rank holds."""
        return x[self.rows]

    def rows_group(self) -> Group:
        """The group over which per-rank partial sums add up to global ones (the loss, the correct counts):
        its members' rows cover every row exactly once, each row counted where `label_rows` says."""
        return self.grid.group(self.rows_group_name)

    def grad_group(self) -> Group:
        """Ranks over which parameter gradients are summed."""
        return self.rows_group()

    # -- cost -----------------------------------------------------------------------------------------
    rows_group_name = "world"

    @classmethod
    def spmm_cost(cls, stats, shape: tuple, rank: int, f: int) -> dict:
        """What `rank` moves for one SpMM of width f (float32), exactly as its ledger records it:
        {"setup" | "forward" | "backward": [(op, group name, sent bytes, received bytes, messages), …]},
        one tuple a collective call. `stats` gives the partition's block statistics (`spgnn.cost.BlockStats`)."""
        raise NotImplementedError(f"{cls.name} has no cost model")

    @classmethod
    def dense_cost(cls, stats, shape: tuple, rank: int, op: str, f_in: int, f_out: int = 0) -> dict:
        """What `rank` moves for one dense operation of the layout, in `spmm_cost`'s form
        ({"forward" | "backward": [...]}): op "linear" (H·W, W f_in×f_out), "log_softmax" and "argmax"
        (row-wise over f_in columns). Row layouts move nothing."""
        return {"forward": [], "backward": []}

    @classmethod
    def has_cost_model(cls) -> bool:
        """Whether this algorithm states its `spmm_cost` (a subclass with another schedule resets it to
        ``DistSpMM.spmm_cost``)."""
        return cls.spmm_cost.__func__ is not DistSpMM.spmm_cost.__func__

    @classmethod
    def member(cls, shape: tuple, group: str, rank: int) -> tuple[int, int]:
        """(size, position of `rank`) of the group `group` in a grid of `shape` (row-major ranks)."""
        if group == "world":
            return int(np.prod(shape)), rank
        d = cls.grid_names.index(group)
        return shape[d], int(np.unravel_index(rank, shape)[d])

    # -- products -------------------------------------------------------------------------------------
    def spmm(self, h: torch.Tensor) -> torch.Tensor:
        """Z = A·H for the local rows; differentiable (backward dH = Aᵀ·dZ)."""
        return autograd_comm.linear_map(h, self.comm, self._forward, self._backward)

    def linear(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        """H·W (+ b) with W (f_in×f_out) replicated."""
        return h @ w if b is None else torch.addmm(b, h, w)

    def log_softmax(self, h: torch.Tensor) -> torch.Tensor:
        """Row-wise log-softmax over the class columns."""
        return F.log_softmax(h, dim=1)

    # -- attention (GAT) --------------------------------------------------------------------------------
    def attend(self, v: torch.Tensor, s_src: torch.Tensor, s_dst: torch.Tensor, slope: float,
               dropout: float = 0.0, key: int = 0) -> torch.Tensor:
        """out_i = Σ_{j→i} softmax_j(LeakyReLU(s_src[j] + s_dst[i]))·V_j over the in-edges of A's pattern
        (`spgnn.attention`), for the local rows: v (n_i×H×F), s_src and s_dst (n_i×H) → n_i×H×F;
        differentiable in all three. `dropout`, `key`: attention dropout drawn by `attention.edge_mask`."""
        from . import attention_algorithms

        raise SpgnnError(f"--algo {self.name} does not support attention (GAT): use "
                         f"{' or '.join(attention_algorithms())}")

    def _edge_mask(self, rows, cols_global, heads: int, p: float, key: int, dtype):
        """Attention dropout mask of local-row edges rows ← cols_global (renumbered global ids)."""
        perm = self.partition.perm
        return attention.edge_mask(perm[self.rows.start + rows], perm[cols_global], self.n, heads, p, key, dtype)

    @classmethod
    def options(cls, cfg) -> dict:
        """Constructor keyword options this algorithm takes from a run's TrainConfig."""
        return {}

    def _forward(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _backward(self, g: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
