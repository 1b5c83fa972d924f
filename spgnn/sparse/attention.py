"""Graph attention on an edge list: the edge softmax and weighted sum GAT aggregates with.

Edges e = (j → i) are given as ``rows`` (destinations i) and ``cols`` (sources j), int64 (nnz,). With H
heads of F features, V (n_src×H×F) the transformed source rows, s_src (n_src×H), s_dst (n×H) the two
score terms:

    score  e_ij = LeakyReLU(s_src[j] + s_dst[i])                   (nnz×H)
    α_ij   = exp(e_ij − L_i),  L_i = log Σ_{j→i} exp(e_ij)         softmax over i's in-edges
    out_i  = Σ_{j→i} α_ij·m_ij·V_j                                 (n×H×F)

m_ij is the attention dropout mask (1 without dropout), a hash of (key, i, j, head) on the original node
ids, so any split of the edges into shards draws the same mask. Rows without in-edges get out_i = 0 and
L_i = −inf. `attend` is the plain autograd form; `spgnn.spmm.sar` computes the same sums shard by shard.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import native
from ..hashing import dropout_mask
from .segment import as_index, gather, outside, segment_max, segment_sum


def scores(rows, cols, s_src, s_dst, slope: float) -> torch.Tensor:
    """e = LeakyReLU(s_src[cols] + s_dst[rows]), nnz×H."""
    return F.leaky_relu(gather(s_src, cols) + gather(s_dst, rows), slope)


def _kernel(name: str, dtype: torch.dtype, arrays: int):
    """The C kernel `name` for `dtype` (`spgnn/csrc/attention.c`): (nnz, heads, f, rows of the result and of v) and
    `arrays` addresses; it returns how many rows and cols it met outside those (and skipped)."""
    i64 = native.i64
    return native.function(f"{name}_{native.suffix(dtype)}", i64, i64, i64, i64, i64, *[native.addr] * arrays,
                           restype=i64)


def _call(name: str, p, rows, cols, v, n: int, *arrays) -> None:
    """The kernel `name` on (p, rows, cols, v, *arrays); SpgnnError where it met indices out of range."""
    if _kernel(name, v.dtype, 4 + len(arrays))(*p.shape, v.shape[2], n, v.shape[0],
                                               *map(native.ptr, (p, rows, cols, v, *arrays))):
        bad = rows.lt(0) | rows.ge(n)
        raise outside("weighted_sum", *((rows, n, "row") if bad.any() else (cols, v.shape[0], "column")))


class _WeightedSum(torch.autograd.Function):
    """out[i] = Σ_{j→i} p_ij·V_j by the C kernels: no nnz×H×F product is formed, forward or backward.
    rows, cols: contiguous int64 CPU tensors."""

    @staticmethod
    def forward(ctx, p, rows, cols, v, n):
        p, v = p.contiguous(), v.contiguous()
        ctx.save_for_backward(p, v, rows, cols)       # rows, cols changed in place before the backward: refused
        out = v.new_zeros((n, *v.shape[1:]))
        _call("weighted_sum", p, rows, cols, v, n, out)
        return out

    @staticmethod
    def backward(ctx, g):
        p, v, rows, cols = ctx.saved_tensors
        g = g.contiguous()              # held here: a copy made inside the call's arguments is freed before it runs
        dp, dv = torch.empty_like(p), torch.zeros_like(v)
        _call("weighted_sum_grad", p, rows, cols, v, g.shape[0], g, dp, dv)
        return dp, None, None, dv, None


def weighted_sum(p: torch.Tensor, rows, cols, v: torch.Tensor, n: int) -> torch.Tensor:
    """out[i] = Σ_{j→i} p_ij·V_j, n×H×F (p: nnz×H): by the C kernels on CPU, else by gather and index_add."""
    rows, cols = as_index(rows, v.device), as_index(cols, v.device)
    if v.dim() != 3:
        raise ValueError(f"weighted_sum: v must be n_src×H×F, not {tuple(v.shape)}")
    if p.shape != (rows.shape[0], v.shape[1]) or cols.shape != rows.shape:
        raise ValueError(f"weighted_sum: p {tuple(p.shape)} must be nnz×H = ({rows.shape[0]}, {v.shape[1]}) for "
                         f"rows and cols of {rows.shape[0]} and {cols.shape[0]} edges")
    if v.device.type == "cpu" and p.dtype == v.dtype and v.dtype in (torch.float32, torch.float64) \
            and native.available():
        return _WeightedSum.apply(p, rows.to(torch.int64).contiguous(), cols.to(torch.int64).contiguous(), v, n)
    return segment_sum(p.unsqueeze(-1) * gather(v, cols), rows, n)


def logsumexp(e: torch.Tensor, rows, n: int) -> torch.Tensor:
    """L_i = log Σ_{j→i} exp(e_ij), n×H, shifted by the row maximum for range."""
    m = segment_max(e, rows, n)
    return m + torch.log(segment_sum(torch.exp(e - m[rows]), rows, n))


def edge_mask(dst_ids, src_ids, n: int, heads: int, p: float, key: int, dtype=torch.float32, device="cpu"):
    """The nnz×H attention dropout mask (0 or 1/(1−p)) of edges src_ids → dst_ids (original ids in [0, n)), on
    `device`."""
    edge_ids = torch.as_tensor(dst_ids, dtype=torch.int64) * n + torch.as_tensor(src_ids, dtype=torch.int64)
    return dropout_mask(edge_ids, heads, p, key).to(device, dtype)


def attend(rows, cols, v, s_src, s_dst, slope: float, mask=None) -> torch.Tensor:
    """out (n×H×F) for n = s_dst.shape[0] destinations, by plain autograd (everything it needs is saved)."""
    return aggregate(scores(rows, cols, s_src, s_dst, slope), rows, cols, v, s_dst.shape[0], mask)


def aggregate(e, rows, cols, v, n: int, mask=None) -> torch.Tensor:
    """out (n×H×F) from the scores e (nnz×H) of the edges: the softmax over each row's edges, then the sum."""
    alpha = torch.exp(e - gather(logsumexp(e, rows, n), rows))
    return weighted_sum(alpha if mask is None else alpha * mask, rows, cols, v, n)
