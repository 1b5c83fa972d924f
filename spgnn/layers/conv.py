"""GNN layers written once against the distributed-SpMM interface (`spgnn.spmm.DistSpMM`).

Each layer names the normalised adjacency it aggregates with (`adjacency`), and computes, on the rows
the algorithm's layout gives this rank:

    GCN        H' = Â·H·W + b,              Â = D^-½ (A + I) D^-½
    GraphSAGE  H' = (D⁻¹A)·H·W_n + b + H·W_s   (mean over in-neighbours, root weight W_s)
    GAT        H' = ‖_k Σ_{j→i} α^k_ij·W^k·h_j + b   (or the mean over heads k), over A + I
               α^k_ij = softmax_j LeakyReLU(a^k_src·W^k h_j + a^k_dst·W^k h_i)   (`algo.attend`)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import SpgnnError
from ..hashing import dropout_mask, mix_key
from . import init as inits
from .init import CHOSEN, SCHEMES
from .norm import BatchNorm


def initialise(layer: nn.Module, kind: str, init: str, *shape) -> None:
    """Set `layer`'s parameters as the peer library `init` draws them ("pyg", "dgl", or "auto": the scheme
    `spgnn.layers.init.CHOSEN` picks for this kind), in the order the layer registers them."""
    scheme = CHOSEN[kind] if init == "auto" else init
    if scheme not in SCHEMES:
        raise SpgnnError(f"--init must be auto, {' or '.join(SCHEMES)}, got {init!r}")
    for name, value in getattr(inits, kind)(*shape, scheme).items():
        setattr(layer, name, nn.Parameter(value.contiguous()))


def spmm_width(f_in: int, f_out: int) -> int:
    """Columns of the sparse product in Â·H·W with W f_in×f_out: Â·(H·W) when that is narrower."""
    return min(f_in, f_out)


def _aggregate_then_transform(algo, h, w, b=None):
    """Â·H·W (+ b), multiplying in the order that keeps the sparse product narrow (`spmm_width`)."""
    if spmm_width(*w.shape) < w.shape[0]:
        z = algo.spmm(algo.linear(h, w))
        return z if b is None else z + algo.cols(b)
    return algo.linear(algo.spmm(h), w, b)


class GCNConv(nn.Module):
    """H' = Â·H·W + b. Weight W is f_in×f_out (PyG's ``lin.weight`` transposed); `init` as `initialise`."""

    adjacency = "gcn"

    def __init__(self, f_in: int, f_out: int, init: str = "auto"):
        super().__init__()
        initialise(self, "gcn", init, f_in, f_out)

    def forward(self, algo, h):
        return _aggregate_then_transform(algo, h, self.weight, self.bias)


class SAGEConv(nn.Module):
    """H' = mean_{j→i} H_j·W_n + b + H_i·W_s (PyG's SAGEConv, aggr="mean", root_weight=True)."""

    adjacency = "mean"

    def __init__(self, f_in: int, f_out: int, init: str = "auto"):
        super().__init__()
        initialise(self, "sage", init, f_in, f_out)

    def forward(self, algo, h):
        z = _aggregate_then_transform(algo, h, self.weight_neigh, self.bias)
        return z + algo.linear(h[:z.shape[0]], self.weight_self)    # a sampled block's outputs lead its inputs


class GATConv(nn.Module):
    """PyG's GATConv (add_self_loops=True): W is f_in×(H·f_out) (PyG's ``lin.weight`` transposed), a_src and
    a_dst are H×f_out; heads concatenated (H·f_out columns) or averaged (f_out); attention dropout `dropout`."""

    adjacency = "self-loops"
    activation = staticmethod(F.elu)

    def __init__(self, f_in: int, f_out: int, heads: int = 1, concat: bool = True, dropout: float = 0.0,
                 negative_slope: float = 0.2, init: str = "auto"):
        super().__init__()
        self.heads, self.f_out, self.concat = heads, f_out, concat
        self.dropout, self.negative_slope = dropout, negative_slope
        initialise(self, "gat", init, f_in, f_out, heads, heads * f_out if concat else f_out)

    def forward(self, algo, h, key: int = 0):
        v = algo.linear(h, self.weight).view(-1, self.heads, self.f_out)
        out = algo.attend(v, (v * self.att_src).sum(-1), (v * self.att_dst).sum(-1), self.negative_slope,
                          self.dropout if self.training else 0.0, key)
        return (out.flatten(1) if self.concat else out.mean(1)) + self.bias


LAYERS = {"gcn": GCNConv, "sage": SAGEConv, "gat": GATConv}


class GNN(nn.Module):
    """L layers of one kind with ReLU between them and dropout before each.

    Dropout masks are a hash of (seed, epoch, layer, global node id, column), so the training curve does
    not depend on the number of processes or the partition."""

    def __init__(self, kind: str, f_in: int, hidden: int, classes: int, layers: int = 2,
                 dropout: float = 0.5, seed: int = 0, heads: int = 1, out_heads: int = 1,
                 batch_norm: bool = False, init: str = "auto"):
        """GAT: hidden layers concatenate `heads` heads of `hidden` features, the last averages `out_heads`,
        attention dropout `dropout`, ELU between layers. `batch_norm`: global batch norm after each
        hidden layer. `init`: the peer library whose initial parameters each layer takes (`initialise`)."""
        super().__init__()
        cls = LAYERS[kind]
        if cls is GATConv:
            widths = [f_in] + [hidden * heads] * (layers - 1)
            self.convs = nn.ModuleList([GATConv(a, hidden, heads, True, dropout, init=init) for a in widths[:-1]]
                                       + [GATConv(widths[-1], classes, out_heads, False, dropout, init=init)])
        else:
            widths = [f_in] + [hidden] * (layers - 1) + [classes]
            self.convs = nn.ModuleList(cls(a, b, init) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = nn.ModuleList(BatchNorm(w) for w in widths[1:layers]) if batch_norm else None
        self.in_widths = widths[:layers]
        self.adjacency, self.activation = cls.adjacency, getattr(cls, "activation", torch.relu)
        self.dropout, self.seed = dropout, seed

    def forward(self, algo, h, node_ids, epoch: int = 0):
        """Logits for the local rows; `node_ids` are their original (global) ids, for the dropout masks.
        Minibatch (`spgnn.train.minibatch`): `algo` and `node_ids` are per-layer lists (layer i's block, its input
        nodes)."""
        algos, ids = (algo, node_ids) if isinstance(algo, list) else ([algo] * len(self.convs),
                                                                        [node_ids] * len(self.convs))
        for i, conv in enumerate(self.convs):
            algo, node_ids = algos[i], ids[i]
            if self.training and self.dropout > 0:
                key, cols = mix_key(self.seed, epoch, i), algo.columns(self.in_widths[i])
                mask = dropout_mask(node_ids, cols.stop - cols.start, self.dropout, key, cols.start)
                h = h * mask.to(h.device, h.dtype)
            with algo.layer(i):
                h = conv(algo, h, mix_key(self.seed, epoch, i, 1)) if isinstance(conv, GATConv) \
                    else conv(algo, h)
                if i < len(self.convs) - 1:
                    h = self.activation(h if self.norms is None else self.norms[i](algo, h))
        return h
