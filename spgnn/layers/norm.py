"""Distributed batch normalization over the rows of a layer's output, which the ranks hold disjointly.

    y = γ·(x − μ)/√(σ² + ε) + β,   μ = (1/n) Σ_v x_v,   σ² = (1/n) Σ_v (x_v − μ)²   (per column, all n rows)

Each sum is a local column sum in float64 all-reduced over `algo.rows_group()`; the all-reduce is differentiable
(its backward all-reduces the gradient), so the gradients are the serial ones at any P. In float64 a column that is
constant over all nodes has μ exactly its value and y exactly β (float32 sums left rounding noise, scaled by 1/√ε,
whose sign changed with P, and a ReLU after it let through other columns at each P). Evaluation uses running
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
        """The row count, then the column sums and the variances (forward and backward), all float64."""
        f = self.weight.numel()
        return [AllReduce(1, 8, backward=False), AllReduce(f, 8), AllReduce(f, 8)]

    def forward(self, algo, x: torch.Tensor) -> torch.Tensor:
        algo.require("whole_rows", "batch normalization")
        if not self.training:
            return (x - self.running_mean) * torch.rsqrt(self.running_var + self.eps) * self.weight + self.bias
        group = algo.rows_group()
        (n,) = algo.comm.all_sum([x.shape[0]], group)
        mean = all_reduce(x.sum(0, dtype=torch.float64), algo.comm, group) / n
        xc = x - mean.to(x.dtype)
        var = all_reduce((xc * xc).sum(0, dtype=torch.float64), algo.comm, group) / n
        with torch.no_grad():
            self.running_mean.lerp_(mean.to(x.dtype), self.momentum)
            self.running_var.lerp_((var * n / max(n - 1, 1)).to(x.dtype), self.momentum)
        return xc * torch.rsqrt(var.to(x.dtype) + self.eps) * self.weight + self.bias
