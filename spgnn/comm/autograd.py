"""Linear maps that communicate, as differentiable functions: `linear_map(x, comm, f, fᵀ)` runs f in the
caller's phase and its adjoint fᵀ under phase "backward" of the layer the forward ran in (the distributed
SpMMs, the halo rows of attention). The collectives built on it:

    all_reduce     S = Σ_r s_r            →  ds_r = Σ_q dS_q          (all-reduce)
    all_gather     Y = [x_0; …; x_{g−1}]  →  dx_r = Σ_q dY_q[block r]  (reduce-scatter)
    reduce_scatter y_r = (Σ_q X_q)[block r] →  dX_r = [dy_0; …; dy_{g−1}] (all-gather)

(every rank's loss may depend on every rank's output, so the adjoint sums over the group). Blocks are
along dim 0, `rows[j]` rows from member j.
"""

from __future__ import annotations

import torch

from .comm import Comm, Group


class _LinearMap(torch.autograd.Function):
    """y = f(x) for a linear map f that communicates; dx = fᵀ(dy), recorded as phase "backward" of the
    layer the forward ran in."""

    @staticmethod
    def forward(ctx, x, comm, f, f_t):
        ctx.comm, ctx.f_t, ctx.layer = comm, f_t, comm.layer
        return f(x.contiguous())

    @staticmethod
    def backward(ctx, dy):
        with ctx.comm.phase("backward", ctx.layer):
            return ctx.f_t(dy.contiguous()), None, None, None


def linear_map(x: torch.Tensor, comm: Comm, f, f_t) -> torch.Tensor:
    """f(x), differentiable through the adjoint f_t (both take and return tensors, no autograd inside)."""
    return _LinearMap.apply(x, comm, f, f_t)


def all_reduce(x: torch.Tensor, comm: Comm, group: Group) -> torch.Tensor:
    """Σ over `group` of x (every member gets the sum); differentiable."""
    def f(t):
        return comm.all_reduce(t.clone(), group)
    return linear_map(x, comm, f, f)


def all_gather(x: torch.Tensor, comm: Comm, group: Group, rows) -> torch.Tensor:
    """Members' x stacked along dim 0 (member j contributes rows[j] rows); differentiable."""
    return linear_map(x, comm, lambda t: comm.all_gather_v(t, rows, group),
                      lambda t: comm.reduce_scatter(t, group, rows))


def reduce_scatter(x: torch.Tensor, comm: Comm, group: Group, rows) -> torch.Tensor:
    """Block `me` (rows[me] rows of dim 0) of the sum over `group` of x; differentiable."""
    return linear_map(x, comm, lambda t: comm.reduce_scatter(t, group, rows),
                      lambda t: comm.all_gather_v(t, rows, group))
