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

from ..comm import Comm, Group
from ..grid import ProcessGrid
from ..partition import Partition


class DistSpMM:
    """Z = A·H over a process grid. Subclasses implement `_forward` and `_backward` (both on local
    blocks, without autograd) and may override the layout hooks."""

    name = ""
    grid_names: tuple = ("part",)

    @classmethod
    def grid_shape(cls, P: int, **options) -> tuple:
        """The grid shape this algorithm runs on for P processes."""
        return (P,)

    def __init__(self, adj, partition: Partition, comm: Comm, grid: ProcessGrid, device: str = "cpu"):
        """`adj`: the global n×n scipy CSR A, already renumbered by `partition`."""
        self.comm, self.grid, self.partition, self.device = comm, grid, partition, device
        self.n = adj.shape[0]
        offsets = partition.offsets
        self.rows = slice(int(offsets[comm.rank]), int(offsets[comm.rank + 1]))

    # -- layout ---------------------------------------------------------------------------------------
    def local_rows(self, x: np.ndarray) -> np.ndarray:
        """The rows of a global (renumbered) n-row array that this rank holds."""
        return x[self.rows]

    def grad_group(self) -> Group:
        """Ranks over which parameter gradients are summed (the ranks holding disjoint rows)."""
        return self.comm.world

    # -- products -------------------------------------------------------------------------------------
    def spmm(self, h: torch.Tensor) -> torch.Tensor:
        """Z = A·H for the local rows; differentiable (backward dH = Aᵀ·dZ)."""
        return _SpMM.apply(h, self)

    def linear(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        """H·W (+ b) with W (f_in×f_out) replicated."""
        return h @ w if b is None else torch.addmm(b, h, w)

    def log_softmax(self, h: torch.Tensor) -> torch.Tensor:
        """Row-wise log-softmax over the class columns."""
        return F.log_softmax(h, dim=1)

    def _forward(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _backward(self, g: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class _SpMM(torch.autograd.Function):
    """Autograd glue: forward in the caller's phase, backward recorded as phase "backward" of the same layer."""

    @staticmethod
    def forward(ctx, h, op):
        ctx.op, ctx.layer = op, op.comm.layer
        return op._forward(h.contiguous())

    @staticmethod
    def backward(ctx, g):
        with ctx.op.comm.phase("backward", ctx.layer):
            return ctx.op._backward(g.contiguous()), None
