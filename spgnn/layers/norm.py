"""Distributed batch normalization over the rows of a layer's output, which the ranks hold disjointly.

    y = γ·(x − μ)/√(σ² + ε) + β,   μ = (1/n) Σ_v x_v,   σ² = (1/n) Σ_v (x_v − μ)²   (per column, all n rows)

Each sum is a local column sum all-reduced over `algo.rows_group()`; the all-reduce is differentiable (its
backward all-reduces the gradient), so the gradients are the serial ones at any P. μ is taken in two passes: a
first estimate s = (1/n) Σ_v x_v (forward only), then μ = s + (1/n) Σ_v (x_v − s). A column constant over all nodes
then has μ exactly its value and y exactly β (x_v − s is exact and so is its sum; one pass left rounding noise that
1/√ε scaled up, its sign changing with P, and a ReLU after it let other columns through at each P). Float64 sums do
the same at 10-20× the time of float32's on the CPU. Evaluation uses running
averages (unbiased variance), updated identically on every rank, as torch.nn.BatchNorm1d.
"""

from __future__ import annotations

import torch
from torch import nn

from ..comm.autograd import all_reduce
from .registry import AllReduce


class BatchNorm(nn.Module):
    """Batch normalization of an n×f layer output with global statistics (as torch.nn.BatchNorm1d)."""

    def __init__(self, f: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(f))
        self.bias = nn.Parameter(torch.zeros(f))
        self.register_buffer("running_mean", torch.zeros(f))
        self.register_buffer("running_var", torch.ones(f))

    def costs(self, grad_in: bool = True) -> list:
        """The row count (float64) and the first estimate of the means (forward only), then the corrections of the
        means and the variances (forward and backward)."""
        f = self.weight.numel()
        return [AllReduce(1, 8, backward=False), AllReduce(f, backward=False), AllReduce(f), AllReduce(f)]

    def forward(self, algo, x: torch.Tensor) -> torch.Tensor:
        algo.require("whole_rows", "batch normalization")
        if not self.training:
            return (x - self.running_mean) * torch.rsqrt(self.running_var + self.eps) * self.weight + self.bias
        group = algo.rows_group()
        (n,) = algo.comm.all_sum([x.shape[0]], group)
        shift = algo.comm.all_reduce(x.detach().sum(0), group) / n
        mean = shift + all_reduce((x - shift).sum(0), algo.comm, group) / n
        xc = x - mean
        var = all_reduce((xc * xc).sum(0), algo.comm, group) / n
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / max(n - 1, 1), self.momentum)
        return xc * torch.rsqrt(var + self.eps) * self.weight + self.bias


class NoNorm(nn.Module):
    """The place of a batch norm after a layer no activation follows (APPNP's class-width Linear before its
    propagation): the output as it is."""

    def costs(self, grad_in: bool = True) -> list:
        return []

    def forward(self, algo, x: torch.Tensor) -> torch.Tensor:
        return x
