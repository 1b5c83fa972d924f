"""APPNP (Gasteiger et al.): K steps of personalised-PageRank propagation with teleport α,
Z⁰ = H, Z^{k+1} = (1 − α)·Â·Z^k + α·H, Â = D^-½ (A + I) D^-½ (PyG's APPNP). ``--model appnp`` is PyG's
example: an MLP of ``--layers`` Linear layers (ReLU between), then the propagation."""

from __future__ import annotations

from ..errors import SpgnnError
from ..options import Option
from .linear import Linear
from .registry import Layer, Spmm, register_layer


@register_layer
class APPNP(Layer):
    """K propagation steps of f columns with teleport α; no parameters."""

    name, summary, adjacency = "appnp", "MLP then K personalised-PageRank steps (Gasteiger et al.)", "gcn"
    dropout_before = False
    options = (Option("steps", int, 10, "appnp: propagation steps K", valid=lambda v: v >= 1, must="at least 1"),
               Option("alpha", float, 0.1, "appnp: teleport probability α; gcnii: initial-residual weight α",
                      valid=lambda v: 0.0 <= v <= 1.0, must="in [0, 1]"))

    def __init__(self, f: int, steps: int = 10, alpha: float = 0.1):
        if not (steps >= 1 and 0 <= alpha <= 1):
            raise SpgnnError(f"APPNP: steps must be at least 1 and alpha in [0, 1], got steps {steps}, alpha {alpha}")
        super().__init__(f, f)
        self.steps, self.alpha = steps, alpha

    def forward(self, g, h):
        z = h
        for _ in range(self.steps):
            z = (1 - self.alpha) * g.spmm(z, self.adjacency) + self.alpha * h
        return z

    def costs(self, grad_in):
        return [Spmm(self.f_in, self.adjacency, grad_in)] * self.steps

    @classmethod
    def stack(cls, f_in, hidden, classes, layers, init="auto", dropout=0.0, steps=10, alpha=0.1, **options):
        widths = [f_in] + [hidden] * (layers - 1) + [classes]
        mlp = [Linear(a, b, init=init) for a, b in zip(widths[:-1], widths[1:])]
        mlp[-1].activation = None
        return mlp + [cls(classes, steps, alpha)]
