"""The single-process reference: the same layers on the whole graph, with the sparse product and its
gradient left to torch.sparse autograd (no partition, no communication, no hand-written backward)."""

from __future__ import annotations

import numpy as np
import torch

from .comm.comm import Comm
from .graph.adjacency import get_adjacency
from .sparse import attention
from .spmm.base import RowLayout


def _sparse(adj, dtype) -> torch.Tensor:
    coo = adj.tocoo()
    idx = torch.as_tensor(np.vstack([coo.row, coo.col]), dtype=torch.int64)
    return torch.sparse_coo_tensor(idx, torch.as_tensor(coo.data), coo.shape, dtype=dtype,
                                   check_invariants=True).coalesce()


class SerialSpMM(RowLayout):
    """Z = Â·H on one process for the whole n×n A (scipy CSR), via ``torch.sparse.mm``. `raw`: A is the raw
    adjacency, normalised per layer by the adjacency it names; else A is used as given, whatever it names."""

    name = "serial"
    attention = True

    def __init__(self, adj, dtype=torch.float32, raw: bool = False):
        self.adj, self.raw, self.dtype, self.cache = adj, raw, dtype, {}
        self.a = None if raw else _sparse(adj, dtype)
        self.edges = None if raw else self.a.indices()          # (rows i, cols j) of the edges j → i
        self.comm = Comm(0, 1)
        self.n = adj.shape[0]
        self.rows = slice(0, self.n)
        self.node_ids = torch.arange(self.n)

    def matrix(self, adjacency) -> torch.Tensor:
        """The sparse matrix the product with `adjacency` multiplies by."""
        if not self.raw:
            return self.a
        name = get_adjacency(adjacency).name
        if name not in self.cache:
            self.cache[name] = _sparse(get_adjacency(name).of(self.adj), self.dtype)
        return self.cache[name]

    def spmm(self, h, adjacency=None):
        return torch.sparse.mm(self.matrix(adjacency).to(h.dtype), h)

    def linear(self, h, w, b=None):
        return h @ w if b is None else h @ w + b

    def log_softmax(self, h):
        return torch.log_softmax(h, dim=1)

    def rows_group(self):
        return self.comm.world

    def attend(self, v, s_src, s_dst, slope, dropout=0.0, key=0, adjacency="self-loops"):
        rows, cols = self.matrix(adjacency).indices()
        mask = attention.edge_mask(rows, cols, self.n, v.shape[1], dropout, key, v.dtype, v.device) \
            if dropout > 0 else None
        return attention.attend(rows, cols, v, s_src, s_dst, slope, mask)
