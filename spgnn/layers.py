"""GNN layers written once against the distributed-SpMM interface (`spgnn.spmm.DistSpMM`).

Each layer names the normalised adjacency it aggregates with (`adjacency`), and computes, on the rows
the algorithm's layout gives this rank:

    GCN        H' = Â·H·W + b,              Â = D^-½ (A + I) D^-½
    GraphSAGE  H' = (D⁻¹A)·H·W_n + b + H·W_s   (mean over in-neighbours, root weight W_s)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import kernels


def glorot_(w: torch.Tensor) -> torch.Tensor:
    bound = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
    return nn.init.uniform_(w, -bound, bound)


def _aggregate_then_transform(algo, h, w, b=None):
    """Â·H·W (+ b), multiplying in the order that keeps the sparse product narrow."""
    if w.shape[1] < w.shape[0]:
        z = algo.spmm(algo.linear(h, w))
        return z if b is None else z + b
    return algo.linear(algo.spmm(h), w, b)


class GCNConv(nn.Module):
    """H' = Â·H·W + b. Weight W is f_in×f_out (PyG's ``lin.weight`` transposed)."""

    adjacency = "gcn"

    def __init__(self, f_in: int, f_out: int):
        super().__init__()
        self.weight = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.bias = nn.Parameter(torch.zeros(f_out))

    def forward(self, algo, h):
        return _aggregate_then_transform(algo, h, self.weight, self.bias)


class SAGEConv(nn.Module):
    """H' = mean_{j→i} H_j·W_n + b + H_i·W_s (PyG's SAGEConv, aggr="mean", root_weight=True)."""

    adjacency = "mean"

    def __init__(self, f_in: int, f_out: int):
        super().__init__()
        self.weight_neigh = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.bias = nn.Parameter(torch.zeros(f_out))
        self.weight_self = nn.Parameter(glorot_(torch.empty(f_in, f_out)))

    def forward(self, algo, h):
        return _aggregate_then_transform(algo, h, self.weight_neigh, self.bias) + algo.linear(h, self.weight_self)


LAYERS = {"gcn": GCNConv, "sage": SAGEConv}


class GNN(nn.Module):
    """L layers of one kind with ReLU between them and dropout before each.

    Dropout masks are a hash of (seed, epoch, layer, global node id, column), so the training curve does
    not depend on the number of processes or the partition."""

    def __init__(self, kind: str, f_in: int, hidden: int, classes: int, layers: int = 2,
                 dropout: float = 0.5, seed: int = 0):
        super().__init__()
        widths = [f_in] + [hidden] * (layers - 1) + [classes]
        self.convs = nn.ModuleList(LAYERS[kind](a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.adjacency = LAYERS[kind].adjacency
        self.dropout, self.seed = dropout, seed

    def forward(self, algo, h, node_ids, epoch: int = 0):
        """Logits for the local rows; `node_ids` are their original (global) ids, for the dropout masks."""
        for i, conv in enumerate(self.convs):
            if self.training and self.dropout > 0:
                key = kernels.mix_key(self.seed, epoch, i)
                h = h * kernels.dropout_mask(node_ids, h.shape[1], self.dropout, key).to(h.device, h.dtype)
            with algo.comm.phase(algo.comm.phase_name, layer=i):
                h = conv(algo, h)
            if i < len(self.convs) - 1:
                h = torch.relu(h)
        return h
