"""GraphSAGE (Hamilton et al.), mean aggregator with a root weight: H' = (D⁻¹A)·H·W_n + b + H·W_s
(PyG's SAGEConv(aggr="mean", root_weight=True), DGL's SAGEConv("mean")).

The mean is linear, so (D⁻¹A)·H·W_n = (D⁻¹A)·(H·W_n): when f_out ≤ f_in the layer multiplies first, and on a
full-batch layout holding whole rows it makes both products of H together (`spgnn.dense.matmuls`: H·W_n and
H·W_s + b each a contiguous n×f_out result, one backward for H·[W_n | W_s]), then aggregates H·W_n. Otherwise, or
where the layout keeps the aggregation of H (`DistGraph.kept`: H the graph's features, aggregated once a run), it
aggregates first (f_in columns) and adds H·W_s by addmm.
"""

from __future__ import annotations

from ..dense import matmul, matmuls
from . import init as inits
from .registry import Dense, Layer, Spmm, register_layer


def _full_rows(g, h) -> bool:
    """Whether layout `g` holds whole rows of H (not the column blocks of 2D/3D) and its outputs are h's rows
    (full batch: its `node_ids` are h's; a sampled block's outputs are only the first of its inputs)."""
    return g.whole_rows and len(getattr(g, "node_ids", ())) == h.shape[0]


@register_layer
class SAGEConv(Layer):
    """H' = mean_{j→i} H_j·W_n + b + H_i·W_s; W_n, W_s f_in×f_out."""

    name, summary, adjacency, sampled = "sage", "GraphSAGE, mean over in-neighbours plus a root weight", "mean", True
    shift = "bias"
    fresh_output = True
    default_init = "dgl"
    draw = staticmethod(lambda scheme, f_in, f_out: inits.sage(f_in, f_out, scheme))

    def __init__(self, f_in: int, f_out: int, init: str = "auto"):
        super().__init__(f_in, f_out)
        self.initialise(init, f_in, f_out)

    @property
    def transform_first(self) -> bool:
        """Aggregate H·W_n (f_out columns) rather than H (f_in): when f_out ≤ f_in."""
        return self.f_out <= self.f_in

    def forward(self, g, h):
        wn, ws, b, adj = self.weight_neigh, self.weight_self, self.bias, self.adjacency
        first = self.transform_first and not g.kept(h, adj)
        if first and _full_rows(g, h):
            y_n, y_s = matmuls(h, (wn, ws), b)
            return g.spmm(y_n, adj).add_(y_s)
        z = g.spmm(g.linear(h, wn), adj).add_(g.cols(b)) if first else g.linear(g.spmm(h, adj), wn, b)
        h_self = h if h.shape[0] == z.shape[0] else h[:z.shape[0]]     # a sampled block's outputs lead its inputs
        return matmul(h_self, ws, z) if g.whole_rows else z.add_(g.linear(h_self, ws))

    def costs(self, grad_in, features=False):
        first = self.transform_first and not features
        return [Spmm(self.f_out if first else self.f_in, self.adjacency, grad_in or first),
                Dense(self.f_in, self.f_out), Dense(self.f_in, self.f_out)]
