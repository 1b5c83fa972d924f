"""The single-process reference: the same layers on the whole graph, with the sparse product and its
gradient left to torch.sparse autograd (no partition, no communication, no hand-written backward)."""

from __future__ import annotations

import numpy as np
import torch

from .comm.comm import Comm
from .sparse import attention
from .spmm.base import RowLayout


class SerialSpMM(RowLayout):
    """Z = A·H on one process for the whole n×n A (scipy CSR), via ``torch.sparse.mm``."""

    name = "serial"

    def __init__(self, adj, dtype=torch.float32):
        coo = adj.tocoo()
        idx = torch.as_tensor(np.vstack([coo.row, coo.col]), dtype=torch.int64)
        self.a = torch.sparse_coo_tensor(idx, torch.as_tensor(coo.data), coo.shape, dtype=dtype,
                                         check_invariants=True).coalesce()
        self.edges = self.a.indices()                  # (rows i, cols j) of the edges j → i
        self.comm = Comm(0, 1)
        self.n = adj.shape[0]
        self.rows = slice(0, self.n)

    def spmm(self, h):
        return torch.sparse.mm(self.a.to(h.dtype), h)

    def linear(self, h, w, b=None):
        return h @ w if b is None else h @ w + b

    def log_softmax(self, h):
        return torch.log_softmax(h, dim=1)

    def rows_group(self):
        return self.comm.world

    def attend(self, v, s_src, s_dst, slope, dropout=0.0, key=0):
        rows, cols = self.edges
        mask = attention.edge_mask(rows, cols, self.n, v.shape[1], dropout, key, v.dtype) if dropout > 0 else None
        return attention.attend(rows, cols, v, s_src, s_dst, slope, mask)
