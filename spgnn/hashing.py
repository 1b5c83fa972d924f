"""Counter-based hashing (splitmix64): keys mixed from integers (`mix_key`) and partition-independent
dropout masks (`dropout_mask`), a pure function of (key, node id, column) so that no result depends on P."""

from __future__ import annotations

import numpy as np
import torch

from .jit import kernel, njit, prange
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


@njit(inline="always")
def _fmix(z):
    z = (z ^ (z >> _U30)) * _U_MIX1
    z = (z ^ (z >> _U27)) * _U_MIX2
    return z ^ (z >> _U31)


_fmix_array = getattr(_fmix, "py_func", _fmix)       # the same finaliser, on numpy arrays


@njit(inline="always")
def hash_uniform(key, row, col):
    """u ∈ (0, 1): splitmix64 of (key, row, col), 53 bits."""
    z = _fmix(_fmix(key + np.uint64(row) * _U_GOLDEN) + np.uint64(col + 1) * _U_GOLDEN)
    return (np.float64(z >> _U11) + 0.5) * 2.0 ** -53


def hash_uniform_array(key: int, rows, cols) -> np.ndarray:
    """`hash_uniform` of each pair (rows[i], cols[i]) of non-negative ints, vectorised with numpy (float64)."""
    rows, cols = (np.asarray(a, np.int64).astype(np.uint64) for a in (rows, cols))
    with np.errstate(over="ignore"):
        z = _fmix_array(np.uint64(int(key) & _MASK64) + rows * _U_GOLDEN)
        z = _fmix_array(z + (cols + np.uint64(1)) * _U_GOLDEN)
    return ((z >> _U11).astype(np.float64) + 0.5) * 2.0 ** -53


@njit(inline="always")
def _mask_entry(s, col, threshold, scale):
    """Entry (i, col) of the dropout mask: scale if fmix(s_i + (col+1)·φ) >> 11 ≥ threshold else 0."""
    return scale if _fmix(s + np.uint64(col + 1) * _U_GOLDEN) >> _U11 >= threshold else np.float32(0.0)


@kernel(parallel=True, cache=True, nogil=True)
def _dropout_kernel(nodes, key, threshold, scale, first, out):
    """out[i, j] = `_mask_entry` (s_i, first + j), s_i = fmix(key + node_i·φ)."""
    m, c = out.shape
    for i in prange(m):
        s = _fmix(key + nodes[i] * _U_GOLDEN)
        for j in range(c):
            out[i, j] = _mask_entry(s, first + j, threshold, scale)


@kernel(parallel=True, cache=True, nogil=True)
def _dropped_kernel(nodes, key, threshold, scale, first, h, out):
    """out[i, j] = h[i, j]·(`_dropout_kernel`'s entry (i, j)), the mask never stored."""
    m, c = out.shape
    for i in prange(m):
        s = _fmix(key + nodes[i] * _U_GOLDEN)
        for j in range(c):
            out[i, j] = h[i, j] * _mask_entry(s, first + j, threshold, scale)


def _kernel_args(node_ids, p: float, key: int, first_col: int) -> tuple:
    """(nodes, key, threshold, scale, first) as the numba kernels take them."""
    return (np.ascontiguousarray(node_ids, dtype=np.int64).view(np.uint64), np.uint64(int(key) & _MASK64),
            np.uint64(int(p * 2.0**53)), np.float32(1.0 / (1.0 - p)), np.uint64(first_col))


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
    if device.type == "cpu" and get_backend() == "numba":
        out = np.empty((m, c), dtype=np.float32)
        _dropout_kernel(*_kernel_args(node_ids, p, key, first_col), out)
        return torch.from_numpy(out)
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
    CPU (float32, the numba backend) either is one pass of `_dropped_kernel`, the mask never stored at all."""
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
    """x ⊙ `dropout_mask` (nodes, x's columns, p, key), into a new tensor (`alloc(shape)` on the CPU kernel's path)."""
    if (x.device.type != "cpu" or x.dtype != torch.float32 or get_backend() != "numba"
            or isinstance(nodes, torch.Tensor) and nodes.device.type != "cpu"):
        return x * dropout_mask(nodes, x.shape[1], p, key, first_col).to(x.device, x.dtype)
    out = alloc(x.shape)
    _dropped_kernel(*_kernel_args(nodes, p, key, first_col), x.contiguous().numpy(), out.numpy())
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
