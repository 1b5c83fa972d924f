"""GIN (Xu et al.): H' = MLP((1 + ε)·H + A·H), the sum over in-neighbours, ε learnable (initially 0), the MLP
Linear(f_in, f_out) → ReLU → Linear(f_out, f_out) (PyG's GINConv(mlp, train_eps=True) as its GIN model builds it).
"""

from __future__ import annotations

import torch

from .init import fan_in_uniform, kaiming_uniform
from .registry import Dense, Elementwise, Layer, Spmm, register_layer


@register_layer
class GINConv(Layer):
    """H' = (ReLU(((1 + ε)·H + A·H)·W1 + b1))·W2 + b2; W1 f_in×f_out, W2 f_out×f_out (torch Linear's draws, the
    same in both schemes: DGL's GINConv takes the user's MLP as it is)."""

    name, summary, adjacency = "gin", "graph isomorphism network, sum aggregation and an MLP (Xu et al.)", "sum"
    shift = "bias2"
    saves_input = True                      # (1 + ε)·H keeps H for ε's gradient

    def __init__(self, f_in: int, f_out: int, init: str = "auto"):
        super().__init__(f_in, f_out)
        self.initialise(init, f_in, f_out)

    @staticmethod
    def draw(scheme, f_in, f_out):
        return {"weight1": kaiming_uniform(f_out, f_in, fan_in=f_in).T, "bias1": fan_in_uniform(f_out, fan_in=f_in),
                "weight2": kaiming_uniform(f_out, f_out, fan_in=f_out).T,
                "bias2": fan_in_uniform(f_out, fan_in=f_out), "eps": torch.zeros(1)}

    def forward(self, g, h):
        z = g.spmm(h, self.adjacency) + (1 + self.eps) * h
        return g.linear(torch.relu(g.linear(z, self.weight1, self.bias1)), self.weight2, self.bias2)

    def costs(self, grad_in):
        return [Spmm(self.f_in, self.adjacency, grad_in),
                Elementwise(self.f_in, 3, 2, 3 + 3 * grad_in, 1 + 2 * grad_in),     # (1 + ε)·H + Â·H
                Dense(self.f_in, self.f_out, grad_in=True), Dense(self.f_out, self.f_out, grad_in=True)]
