"""`LocalSpMM`: Z = B·H on one process for a whole m×k sparse B (a sampled minibatch block, or the whole
normalised adjacency where every rank holds the graph), with the CSR kernels; backward ∂H = Bᵀ·G through the
transpose built once. Nothing is communicated; row-wise operations see this rank's rows."""

from __future__ import annotations

import scipy.sparse as sp
import torch

from ..comm.autograd import linear_map
from ..comm.comm import Comm, Group
from ..sparse import kernels
from ..sparse.csr import CSR
from .base import RowLayout


class LocalSpMM(RowLayout):
    """Z = B·H for one process's m×k B (scipy sparse)."""

    name = "local"

    def __init__(self, block, comm: Comm, device: str = "cpu", adjacency: str | None = None):
        """`adjacency`: the name of the adjacency B was sampled or built from (None: not checked)."""
        self.b, self.comm, self.device = CSR.from_scipy(sp.csr_matrix(block)), comm, device
        self.n, self.rows, self.adjacency = block.shape[0], slice(0, block.shape[0]), adjacency

    def spmm(self, h: torch.Tensor, adjacency=None) -> torch.Tensor:
        self.check_adjacency(adjacency)
        return linear_map(h, self.comm, lambda t: kernels.spmm(self.b, t), lambda g: kernels.spmm(self.b.T, g))

    def rows_group(self) -> Group:
        return Group("self", (self.comm.rank,))
