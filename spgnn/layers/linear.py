"""Dense products on the layout: the `Linear` layer (H' = H·W + b) and Â·H·W in the cheaper order.

On a layout that splits H by columns (2D/3D), H·W is `g.linear`, which sums the column blocks' partial
products; a plain ``h @ w`` there would multiply a block of H by all of W.
"""

from __future__ import annotations

import torch

from .init import fan_in_uniform, kaiming_uniform
from .registry import Dense, Layer


def spmm_width(f_in: int, f_out: int) -> int:
    """Columns of the sparse product in Â·H·W with W f_in×f_out: Â·(H·W) when that is narrower."""
    return min(f_in, f_out)


def aggregate_then_transform(g, h, w, b, adjacency):
    """Â·H·W (+ b), multiplying in the order that keeps the sparse product narrow (`spmm_width`), or aggregating
    first where the layout keeps Â·H (`DistGraph.kept`: H the graph's features, aggregated once a run)."""
    if spmm_width(*w.shape) < w.shape[0] and not g.kept(h, adjacency):
        z = g.spmm(g.linear(h, w), adjacency)
        return z if b is None else z.add_(g.cols(b))        # in place: the product is new, and kept by no one
    return g.linear(g.spmm(h, adjacency), w, b)


class Linear(Layer):
    """H' = H·W + b, W f_in×f_out (torch's ``nn.Linear.weight`` transposed), drawn as torch's Linear (both
    schemes): U(±1/√f_in)."""

    shift = "bias"

    def __init__(self, f_in: int, f_out: int, bias: bool = True, init: str = "auto", activation=torch.relu):
        super().__init__(f_in, f_out)
        self.initialise(init, f_in, f_out, bias)
        if not bias:
            self.register_parameter("bias", None)
        self.activation = activation

    @staticmethod
    def draw(scheme, f_in, f_out, bias):
        w = kaiming_uniform(f_out, f_in, fan_in=f_in).T
        return {"weight": w} | ({"bias": fan_in_uniform(f_out, fan_in=f_in)} if bias else {})

    def forward(self, g, h):
        return g.linear(h, self.weight, self.bias)

    def costs(self, grad_in):
        return [Dense(self.f_in, self.f_out)]
