"""Rows by index and sums by index, the adjoint pair an edge list is computed with: Y = X[index] (`gather`) and
out_i = Σ_{e: rows[e] = i} X_e (`segment_sum`), each the other's backward; and out_i = max_{e: rows[e] = i} X_e
(`segment_max`, no gradient).

On the CPU, for float32 and float64, the sums and maxima are spgnn's C kernels (`spgnn/csrc/attention.c`): each row
of the result is summed by one thread over its edges in their order, so the bits are those of torch's serial
``index_add_`` whatever the number of threads (torch's own ``index_add_`` and ``scatter_reduce_`` run on one thread
here). Elsewhere they are torch's ``index_add_`` and ``scatter_reduce_``: on the CPU these also sum in a fixed
order (the backward of ``x[index]`` there adds with atomics, so repeated runs would differ in the last bits); on
CUDA they add with atomics, so a GPU's sums are equal to the CPU's, and to each other run to run, to rounding only.
"""

from __future__ import annotations

import torch

from .. import native
from ..errors import SpgnnError

__all__ = ["gather", "segment_max", "segment_sum"]


def _native(x: torch.Tensor) -> bool:
    """Whether x's sums by index go through the C kernels."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and native.available()


def as_index(index, device) -> torch.Tensor:
    """`index` as a tensor on `device`; integers of one dimension (a float or bool index is refused, not cast; an
    empty one, such as [], is int64)."""
    index = torch.as_tensor(index, device=device)
    if index.shape == (0,):
        index = index.to(torch.int64)
    if index.dim() != 1 or index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise SpgnnError(f"an index of rows must be one dimension of integers, not {tuple(index.shape)} {index.dtype}")
    return index


def outside(name: str, index: torch.Tensor, n: int, what: str = "row") -> SpgnnError:
    """The error of a C kernel that met entries of `index` outside [0, n) (and skipped them)."""
    return SpgnnError(f"{name}: {what} indices must lie in [0, {n}), got some in [{int(index.min())}, "
                      f"{int(index.max())}]")


def _reduce(name: str, x: torch.Tensor, rows: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out[rows[e]] (+= or max=) x[e] by the C kernel `name` (segment_sum, segment_max), in place; rows in [0, n)
    (a row outside is skipped by the kernel, which counts them: then SpgnnError)."""
    if rows.shape[0] != x.shape[0]:
        raise ValueError(f"{name}: {rows.shape[0]} row indices for {x.shape[0]} rows of x")
    x, rows = x.contiguous(), rows.to(torch.int64).contiguous()
    i64, a = native.i64, native.addr
    if native.function(f"{name}_{native.suffix(x.dtype)}", i64, i64, i64, a, a, a, restype=i64)(
            rows.shape[0], x[0].numel() if x.shape[0] else 0, out.shape[0], *map(native.ptr, (rows, x, out))):
        raise outside(name, rows, out.shape[0])
    return out


class _Gather(torch.autograd.Function):
    """Y = X[index]; dX = segment_sum(dY, index, n)."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.index, ctx.n = index, x.shape[0]
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, g):
        return segment_sum(g, ctx.index, ctx.n), None


class _SegmentSum(torch.autograd.Function):
    """out_i = Σ_{rows[e] = i} X_e by the C kernel; dX = dout[rows]."""

    @staticmethod
    def forward(ctx, x, rows, n):
        ctx.rows = rows
        return _reduce("segment_sum", x, rows, x.new_zeros((n, *x.shape[1:])))

    @staticmethod
    def backward(ctx, g):
        return gather(g, ctx.rows), None, None


def gather(x: torch.Tensor, index) -> torch.Tensor:
    """X[index] along the first dimension (``index_select``), whose backward sums by index in a fixed order."""
    index = as_index(index, x.device)
    if _native(x) and torch.is_grad_enabled() and x.requires_grad:
        return _Gather.apply(x, index)
    return x.index_select(0, index)


def segment_sum(x: torch.Tensor, rows, n: int) -> torch.Tensor:
    """out_i = Σ_{e: rows[e] = i} x_e, n×(x's other dimensions), for rows in [0, n)."""
    rows = as_index(rows, x.device)
    if _native(x):
        return _SegmentSum.apply(x, rows, n)
    return x.new_zeros((n, *x.shape[1:])).index_add_(0, rows, x)


def segment_max(x: torch.Tensor, rows, n: int) -> torch.Tensor:
    """out_i = max_{e: rows[e] = i} x_e (−inf for rows without edges, NaN where an edge's is), n×(x's other
    dimensions); no gradient."""
    x, rows = x.detach(), as_index(rows, x.device)
    out = x.new_full((n, *x.shape[1:]), float("-inf"))
    if _native(x):
        return _reduce("segment_max", x, rows, out)
    index = rows.view(-1, *[1] * (x.dim() - 1)).expand_as(x)
    return out.scatter_reduce_(0, index, x, "amax")
