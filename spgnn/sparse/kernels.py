"""Local SpMM kernels, Z = A·H for a `spgnn.sparse.csr.CSR` A and a dense H.

Backends (``set_backend``): "numba" (default when numba imports; a row-parallel kernel that
splits rows into one chunk per thread balanced by nnz + rows), "torch" (``torch.sparse.mm`` on a
CSR tensor) and "torch-sparse" (``torch_sparse.matmul``). The environment variable
``SPGNN_SPMM_BACKEND`` picks the default. Tensors on a non-CPU device always use torch's sparse CSR
tensor on that device. Nothing here records autograd history: callers wrap ``spmm`` in their own
autograd Functions.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import torch

from ..errors import SpgnnError
from ..jit import kernel, njit, numba, prange
from .csr import CSR, TORCH_DTYPES

_JIT = dict(parallel=True, fastmath=True, cache=True, nogil=True, boundscheck=False)
_NUMPY_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


# ---------------------------------------------------------------------------------------- backends

_BACKENDS = ("numba", "torch", "torch-sparse")
_backend: str | None = None


def _torch_sparse_module():
    try:
        return importlib.import_module("torch_sparse")
    except ImportError as e:
        raise SpgnnError(
            "SpMM backend 'torch-sparse' needs the torch_sparse package, which is not installed; "
            "use 'numba' or 'torch'"
        ) from e


def set_backend(name: str) -> None:
    """Choose the CPU SpMM backend: "numba", "torch" or "torch-sparse"."""
    global _backend
    if name not in _BACKENDS:
        raise SpgnnError(f"unknown SpMM backend {name!r}; choose one of {', '.join(_BACKENDS)}")
    if name == "numba" and numba is None:
        raise SpgnnError("SpMM backend 'numba' needs the numba package, which is not installed; use 'torch'")
    if name == "torch-sparse":
        _torch_sparse_module()
    _backend = name


def get_backend() -> str:
    """The current SpMM backend (first call: $SPGNN_SPMM_BACKEND, else "numba" if available, else "torch")."""
    if _backend is None:
        set_backend(os.environ.get("SPGNN_SPMM_BACKEND") or ("numba" if numba is not None else "torch"))
    return _backend


def set_num_threads(n: int) -> None:
    """Use n threads in numba kernels (for the calling thread; capped at NUMBA_NUM_THREADS) and in torch."""
    n = max(1, int(n))
    if numba is not None:
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(n)


# -------------------------------------------------------------------------------------------- SpMM


@njit(inline="always")
def _row_at(indptr, t):
    """The first row i with indptr[i] + i ≥ t (work before row i, counting 1 per row and per nonzero)."""
    lo, hi = 0, indptr.shape[0] - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[mid] + mid < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel(**_JIT)
def _spmm_kernel(indptr, indices, data, h, out, accumulate, nchunks):
    """out[i] (+)= Σ_p data[p]·h[indices[p]] over p in row i; rows in nchunks chunks of equal nnz + rows.

    Eight nonzeros per pass over the features, so the row accumulator is loaded/stored once per eight
    gathered rows of h (the loop over k vectorises).
    """
    m, f = out.shape
    work = indptr[m] + m
    for c in prange(nchunks):
        lo = _row_at(indptr, c * work // nchunks)
        hi = _row_at(indptr, (c + 1) * work // nchunks)
        acc = np.empty(f, out.dtype)
        for i in range(lo, hi):
            for k in range(f):
                acc[k] = out[i, k] if accumulate else 0
            p, end = indptr[i], indptr[i + 1]
            while p + 8 <= end:
                h0, h1, h2, h3 = h[indices[p]], h[indices[p + 1]], h[indices[p + 2]], h[indices[p + 3]]
                h4, h5, h6, h7 = h[indices[p + 4]], h[indices[p + 5]], h[indices[p + 6]], h[indices[p + 7]]
                v0, v1, v2, v3 = data[p], data[p + 1], data[p + 2], data[p + 3]
                v4, v5, v6, v7 = data[p + 4], data[p + 5], data[p + 6], data[p + 7]
                for k in range(f):
                    acc[k] += (v0 * h0[k] + v1 * h1[k] + v2 * h2[k] + v3 * h3[k]) + (
                        v4 * h4[k] + v5 * h5[k] + v6 * h6[k] + v7 * h7[k]
                    )
                p += 8
            while p < end:
                hp, vp = h[indices[p]], data[p]
                for k in range(f):
                    acc[k] += vp * hp[k]
                p += 1
            for k in range(f):
                out[i, k] = acc[k]


def _numba_spmm(a: CSR, h: torch.Tensor, out: torch.Tensor | None, accumulate: bool) -> torch.Tensor:
    """out (+)= A·h with the numba kernel; out: a contiguous CPU tensor of h's dtype, or None (new)."""
    dtype = _NUMPY_DTYPES.get(h.dtype)
    if dtype is None:
        raise TypeError(f"spmm: the numba backend supports float32 and float64, not {h.dtype}")
    if out is None:  # numpy's allocator madvises huge pages: far fewer page faults than torch.empty
        out, accumulate = torch.from_numpy(np.empty((a.shape[0], h.shape[1]), dtype)), False
    zn = out.detach().numpy()
    if zn.size:
        a = a.astype(dtype)
        hn = h.contiguous().numpy()
        _spmm_kernel(a.indptr, a.indices, a.data, hn, zn, bool(accumulate), numba.get_num_threads())
    return out


def spmm(a: CSR, h: torch.Tensor, out: torch.Tensor | None = None, accumulate: bool = False) -> torch.Tensor:
    """Z = A·H for A (m×k CSR) and H (k×f); returns Z (m×f, H's dtype and device).

    With ``out`` (m×f, H's dtype) the result is written into it, or added to it when ``accumulate``,
    and ``out`` is returned; this sums Σ_j A_ij·H_j over blocks j without temporaries (on the
    numba backend, when ``out`` is contiguous). No autograd history is recorded.
    """
    m, k = a.shape
    if h.dim() != 2 or h.shape[0] != k:
        raise ValueError(f"spmm: A is {m}×{k} but H has shape {tuple(h.shape)}")
    if out is not None and (out.shape != (m, h.shape[1]) or out.dtype != h.dtype or out.device != h.device):
        raise ValueError(
            f"spmm: out is {tuple(out.shape)} {out.dtype} on {out.device}, expected "
            f"{(m, h.shape[1])} {h.dtype} on {h.device}"
        )
    h = h.detach()
    backend = get_backend() if h.device.type == "cpu" else "torch"
    if backend == "numba" and (out is None or out.is_contiguous()):
        return _numba_spmm(a, h, out, accumulate)
    with torch.no_grad():
        if backend == "numba":
            z = _numba_spmm(a, h, None, False)
        elif backend == "torch-sparse" and (a.nnz == 0 or h.shape[1] == 0):
            z = h.new_zeros((m, h.shape[1]))            # torch_sparse's kernel dies of SIGFPE on these
        elif backend == "torch-sparse":
            z = _torch_sparse_module().matmul(_torch_sparse(a, h.device, h.dtype), h)
        else:
            z = torch.sparse.mm(a.to(h.device, h.dtype), h)
        if out is None:
            return z
        return out.add_(z) if accumulate else out.copy_(z)


def _torch_sparse(a: CSR, device: torch.device, dtype: torch.dtype):
    """A as a ``torch_sparse.SparseTensor`` (cached on `a`)."""
    key = ("torch_sparse", str(device), dtype)
    if key not in a._cache:
        t = a.to(device, dtype)
        a._cache[key] = _torch_sparse_module().SparseTensor(
            rowptr=t.crow_indices(), col=t.col_indices(), value=t.values(), sparse_sizes=a.shape
        )
    return a._cache[key]
