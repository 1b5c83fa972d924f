"""GCNII (Chen et al.): initial residual and identity mapping, for deep models,
H' = ((1 − α)·Â·H + α·H₀)·((1 − β_l)·I + β_l·W),  β_l = log(θ/l + 1),  Â = D^-½ (A + I) D^-½
(PyG's GCN2Conv with shared weights). ``--model gcnii`` is PyG's example: Linear(f_in, hidden) → ReLU, ``--layers``
GCNII layers (ReLU after each; H₀ the first Linear's output), Linear(hidden, classes)."""

from __future__ import annotations

import math

from ..errors import SpgnnError
from ..options import Option
from . import init as inits
from .linear import Linear
from .registry import Dense, Layer, Spmm, register_layer


@register_layer
class GCN2Conv(Layer):
    """Layer l (from 1) of f channels; W f×f drawn Glorot-uniform (PyG's; ``--init dgl`` draws the same)."""

    name, summary, adjacency, initial = "gcnii", "deep GCN with initial residual and identity mapping", "gcn", True
    options = (Option("alpha", float, 0.1, "appnp: teleport probability α; gcnii: initial-residual weight α",
                      valid=lambda v: 0.0 <= v <= 1.0, must="in [0, 1]"),
               Option("theta", float, 0.5, "gcnii: θ of the identity mapping, β_l = log(θ/l + 1)",
                      valid=lambda v: v > 0, must="positive"))
    draw = staticmethod(lambda scheme, f: {"weight": inits.glorot(f, f)})

    def __init__(self, f: int, alpha: float = 0.1, theta: float = 0.5, layer: int = 1, init: str = "auto"):
        if not (layer >= 1 and theta > 0 and 0 <= alpha <= 1):
            raise SpgnnError(f"GCN2Conv: layer must be at least 1, theta positive and alpha in [0, 1], got layer "
                             f"{layer}, theta {theta}, alpha {alpha}")
        super().__init__(f, f)
        self.alpha, self.beta = alpha, math.log(theta / layer + 1)
        self.initialise(init, f)

    def forward(self, g, h, h0):
        z = (1 - self.alpha) * g.spmm(h, self.adjacency) + self.alpha * h0[:h.shape[0]]
        return (1 - self.beta) * z + self.beta * g.linear(z, self.weight)

    def costs(self, grad_in):
        return [Spmm(self.f_in, self.adjacency, grad_in), Dense(self.f_in, self.f_in)]

    @classmethod
    def stack(cls, f_in, hidden, classes, layers, init="auto", dropout=0.0, alpha=0.1, theta=0.5, **options):
        return [Linear(f_in, hidden, init=init)] + [cls(hidden, alpha, theta, l + 1, init) for l in range(layers)] + \
            [Linear(hidden, classes, init=init)]
