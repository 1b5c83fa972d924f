"""Counter-based hashing (splitmix64): keys mixed from integers (`mix_key`) and partition-independent
dropout masks (`dropout_mask`), a pure function of (key, node id, column) so that no result depends on P."""

from __future__ import annotations

import numpy as np
import torch

from . import native
from .memory import empty
from .sparse.kernels import get_backend

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _fmix_int(z: int) -> int:
    """splitmix64's finaliser on a Python int (mod 2⁶⁴)."""
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def mix_key(*ints: int) -> int:
    """Combine integers such as (seed, epoch, layer) into one 64-bit key: h ← fmix((h ⊕ x) + φ)."""
    h = 0
    for x in ints:
        h = _fmix_int(((h ^ (int(x) & _MASK64)) + _GOLDEN) & _MASK64)
    return h


_U_GOLDEN, _U_MIX1, _U_MIX2 = np.uint64(_GOLDEN), np.uint64(_MIX1), np.uint64(_MIX2)
_U30, _U27, _U31, _U11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def fmix64(z):
    """splitmix64's finaliser on uint64 numpy arrays (wrapping)."""
    z = (z ^ (z >> _U30)) * _U_MIX1
    z = (z ^ (z >> _U27)) * _U_MIX2
    return z ^ (z >> _U31)


def hash_uniform_array(key: int, rows, cols) -> np.ndarray:
    """u ∈ (0, 1) for each pair (rows[i], cols[i]) of non-negative ints: splitmix64 of (key, row, col), 53 bits
    (float64; the samplers' C kernels compute the same u)."""
    rows, cols = (np.asarray(a, np.int64).astype(np.uint64) for a in (rows, cols))
    with np.errstate(over="ignore"):
        z = fmix64(np.uint64(int(key) & _MASK64) + rows * _U_GOLDEN)
        z = fmix64(z + (cols + np.uint64(1)) * _U_GOLDEN)
    return ((z >> _U11).astype(np.float64) + 0.5) * 2.0 ** -53


def _dropout_kernel(nodes, p: float, key: int, first_col: int, h, out) -> None:
    """out = h ⊙ mask, or the mask when h is None (`spgnn/csrc/dropout.c`): mask[i, j] = 1/(1−p) when
    fmix(s_i + (first_col + j + 1)·φ) >> 11 ≥ p·2⁵³ with s_i = fmix(key + node_i·φ), else 0."""
    a = native.addr
    fn = native.function("dropout", native.i64, native.i64, a, native.u64, native.u64, native.f32, native.u64, a, a)
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    m, c = out.shape
    fn(m, c, native.ptr(nodes), int(key) & _MASK64, int(p * 2.0**53), float(np.float32(1 / (1 - p))),
       int(first_col) & _MASK64, None if h is None else native.ptr(h), native.ptr(out))


def _signed(x: int) -> int:
    """The int64 with the same 64 bits as x."""
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def _srl(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _fmix_torch(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (wrapping multiplication gives the uint64 bits)."""
    z = (z ^ _srl(z, 30)) * _signed(_MIX1)
    z = (z ^ _srl(z, 27)) * _signed(_MIX2)
    return z ^ _srl(z, 31)


def dropout_mask(node_ids, num_cols: int, p: float, key: int, first_col: int = 0) -> torch.Tensor:
    """The m×num_cols float32 dropout mask (0 or 1/(1-p)) for the rows of global nodes ``node_ids`` and
    the columns first_col … first_col + num_cols − 1.

    Entry (i, j) depends only on (key, node_ids[i], column) through a counter-based hash (splitmix64), so a
    node's mask is the same whichever subset or order of nodes, or block of columns, is generated;
    P(entry = 0) = p. The result lies on node_ids' device (CPU for numpy input).
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    device = node_ids.device if isinstance(node_ids, torch.Tensor) else torch.device("cpu")
    if np.ndim(node_ids) != 1:
        raise ValueError("dropout_mask: node_ids must be one-dimensional")
    m, c = len(node_ids), int(num_cols)
    if p == 0.0:
        return torch.ones((m, c), dtype=torch.float32, device=device)
    if device.type == "cpu" and get_backend() == "native":
        out = torch.from_numpy(np.empty((m, c), dtype=np.float32))
        _dropout_kernel(node_ids, p, key, first_col, None, out)
        return out
    key, threshold, scale = int(key) & _MASK64, int(p * 2.0**53), np.float32(1.0 / (1.0 - p))
    nodes = torch.as_tensor(node_ids, dtype=torch.int64, device=device)
    s = _fmix_torch(nodes * _signed(_GOLDEN) + _signed(key))
    cols = torch.arange(first_col + 1, first_col + c + 1, dtype=torch.int64, device=device) * _signed(_GOLDEN)
    keep = _srl(_fmix_torch(s[:, None] + cols[None, :]), 11) >= threshold
    return keep.to(torch.float32) * float(scale)


def dropout(h: torch.Tensor, node_ids, p: float, key: int, first_col: int = 0) -> torch.Tensor:
    """H ⊙ `dropout_mask` (node_ids, H's columns first_col …, p, key): the same values. The mask is never kept: an
    H that needs a gradient gets dH = dY ⊙ mask with the mask made again in the backward (`_Dropout`), so autograd
    holds no m×f mask; an H that needs none (a layer's input features) is written into `empty`'s kept block. On the
    CPU (float32, the native backend) either is one pass of `_dropout_kernel`, the mask never stored at all."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    nodes = node_ids if isinstance(node_ids, torch.Tensor) else np.asarray(node_ids)
    if len(nodes) != h.shape[0]:
        raise ValueError(f"dropout: {len(nodes)} node ids for {h.shape[0]} rows")
    if p == 0.0:
        return h * 1.0
    if h.requires_grad:     # the key as the int64 of its bits: torch's profiler casts apply's arguments to C++ types
        return _Dropout.apply(h, nodes, p, _signed(key), first_col)
    return _dropped(h.detach(), nodes, p, key, first_col, empty)


def _dropped(x: torch.Tensor, nodes, p: float, key: int, first_col: int, alloc) -> torch.Tensor:
    """x ⊙ `dropout_mask` (nodes, x's columns, p, key), into a new tensor (`alloc(shape)` on the CPU kernel's path).
    Off the CPU the mask is drawn on x's device, from the node ids copied there."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or get_backend() != "native" \
            or isinstance(nodes, torch.Tensor) and nodes.device != x.device:
        return x * dropout_mask(torch.as_tensor(nodes, device=x.device), x.shape[1], p, key, first_col).to(x.dtype)
    out = alloc(x.shape)
    _dropout_kernel(nodes, p, key, first_col, x.contiguous(), out)
    return out


def _fresh(shape) -> torch.Tensor:
    return torch.from_numpy(np.empty(shape, np.float32))     # numpy's blocks are madvised to huge pages


class _Dropout(torch.autograd.Function):
    """Y = H ⊙ M with M = `dropout_mask` (nodes, columns, p, key) made again in the backward (dH = dY ⊙ M): what
    autograd keeps is the node ids and the key, not M."""

    @staticmethod
    def forward(ctx, h, nodes, p, key, first_col):
        ctx.mask = (nodes, p, key, first_col)
        return _dropped(h.detach(), nodes, p, key, first_col, _fresh)

    @staticmethod
    def backward(ctx, grad):
        return _dropped(grad, *ctx.mask, _fresh), None, None, None, None
