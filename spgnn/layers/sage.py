"""GraphSAGE (Hamilton et al.), mean aggregator with a root weight: H' = (D⁻¹A)·H·W_n + b + H·W_s
(PyG's SAGEConv(aggr="mean", root_weight=True), DGL's SAGEConv("mean"))."""

from __future__ import annotations

from . import init as inits
from .linear import aggregate_then_transform, spmm_width
from .registry import Dense, Layer, Spmm, register_layer


@register_layer
class SAGEConv(Layer):
    """H' = mean_{j→i} H_j·W_n + b + H_i·W_s; W_n, W_s f_in×f_out."""

    name, summary, adjacency, sampled = "sage", "GraphSAGE, mean over in-neighbours plus a root weight", "mean", True
    default_init = "dgl"
    draw = staticmethod(lambda scheme, f_in, f_out: inits.sage(f_in, f_out, scheme))

    def __init__(self, f_in: int, f_out: int, init: str = "auto"):
        super().__init__(f_in, f_out)
        self.initialise(init, f_in, f_out)

    def forward(self, g, h):
        z = aggregate_then_transform(g, h, self.weight_neigh, self.bias, self.adjacency)
        return z + g.linear(h[:z.shape[0]], self.weight_self)     # a sampled block's outputs lead its inputs

    def costs(self, grad_in):
        w = spmm_width(self.f_in, self.f_out)
        return [Spmm(w, self.adjacency, grad_in or w < self.f_in), Dense(self.f_in, self.f_out),
                Dense(self.f_in, self.f_out)]
