"""Collectives as differentiable functions: each backward is the forward's adjoint, run under phase
"backward" of the layer the forward ran in.

    all_reduce     S = Σ_r s_r            →  ds_r = Σ_q dS_q          (all-reduce)
    all_gather     Y = [x_0; …; x_{g−1}]  →  dx_r = Σ_q dY_q[block r]  (reduce-scatter)
    reduce_scatter y_r = (Σ_q X_q)[block r] →  dX_r = [dy_0; …; dy_{g−1}] (all-gather)

(every rank's loss may depend on every rank's output, so the adjoint sums over the group). Blocks are
along dim 0, `rows[j]` rows from member j.
"""

from __future__ import annotations

import torch

from .comm import Comm, Group


class _Collective(torch.autograd.Function):
    """forward(x, comm, group, rows) = FORWARD(x); backward = BACKWARD(dy), in phase "backward"."""

    FORWARD = BACKWARD = None

    @classmethod
    def forward(cls, ctx, x, comm, group, rows):
        ctx.comm, ctx.group, ctx.rows, ctx.layer = comm, group, rows, comm.layer
        return cls.FORWARD(comm, x.contiguous(), group, rows)

    @classmethod
    def backward(cls, ctx, dy):
        with ctx.comm.phase("backward", ctx.layer):
            return cls.BACKWARD(ctx.comm, dy.contiguous(), ctx.group, ctx.rows), None, None, None


def _all_reduce(comm, x, group, rows):
    return comm.all_reduce(x.clone(), group)


def _all_gather(comm, x, group, rows):
    return comm.all_gather_v(x, rows, group)


def _reduce_scatter(comm, x, group, rows):
    return comm.reduce_scatter(x, group, rows)


class _AllReduce(_Collective):
    FORWARD = BACKWARD = staticmethod(_all_reduce)


class _AllGather(_Collective):
    FORWARD, BACKWARD = staticmethod(_all_gather), staticmethod(_reduce_scatter)


class _ReduceScatter(_Collective):
    FORWARD, BACKWARD = staticmethod(_reduce_scatter), staticmethod(_all_gather)


def all_reduce(x: torch.Tensor, comm: Comm, group: Group) -> torch.Tensor:
    """Σ over `group` of x (every member gets the sum); differentiable."""
    return _AllReduce.apply(x, comm, group, None)


def all_gather(x: torch.Tensor, comm: Comm, group: Group, rows) -> torch.Tensor:
    """Members' x stacked along dim 0 (member j contributes rows[j] rows); differentiable."""
    return _AllGather.apply(x, comm, group, list(rows))


def reduce_scatter(x: torch.Tensor, comm: Comm, group: Group, rows) -> torch.Tensor:
    """Block `me` (rows[me] rows of dim 0) of the sum over `group` of x; differentiable."""
    return _ReduceScatter.apply(x, comm, group, list(rows))
