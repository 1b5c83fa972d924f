"""GCN (Kipf & Welling): H' = Â·H·W + b, Â = D^-½ (A + I) D^-½ (PyG's GCNConv, DGL's GraphConv)."""

from __future__ import annotations

from . import init as inits
from .linear import aggregate_then_transform, spmm_width
from .registry import Dense, Layer, Spmm, register_layer


@register_layer
class GCNConv(Layer):
    """H' = Â·H·W + b. W is f_in×f_out (PyG's ``lin.weight`` transposed); `init` as `Layer.initialise`."""

    name, summary, adjacency, sampled = "gcn", "graph convolution (Kipf & Welling)", "gcn", True
    shift = "bias"
    fresh_output = True
    draw = staticmethod(lambda scheme, f_in, f_out: inits.gcn(f_in, f_out, scheme))

    def __init__(self, f_in: int, f_out: int, init: str = "auto"):
        super().__init__(f_in, f_out)
        self.initialise(init, f_in, f_out)

    def forward(self, g, h):
        return aggregate_then_transform(g, h, self.weight, self.bias, self.adjacency)

    def costs(self, grad_in, features=False):
        w = self.f_in if features else spmm_width(self.f_in, self.f_out)
        return [Spmm(w, self.adjacency, grad_in or w < self.f_in), Dense(self.f_in, self.f_out)]
