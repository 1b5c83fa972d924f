"""Local sparse kernels: a CSR container, Z = A·H (SpMM) and partition-independent dropout masks.

SpMM backends (``set_backend``): "numba" (default when numba imports; a row-parallel kernel that
splits rows into one chunk per thread balanced by nnz + rows), "torch" (``torch.sparse.mm`` on a
CSR tensor) and "torch-sparse" (``torch_sparse.matmul``). The environment variable
``SPGNN_SPMM_BACKEND`` picks the default. Tensors on a non-CPU device always use torch's sparse CSR
tensor on that device. Nothing here records autograd history: callers wrap ``spmm`` in their own
autograd Functions.
"""

from __future__ import annotations

import importlib
import os
import warnings

import numpy as np
import scipy.sparse as sp
import torch

from .errors import SpgnnError

try:
    import numba
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is optional; the torch paths need none of this
    numba = None
    prange = range

    def njit(*args, **kwargs):
        return lambda fn: fn


_JIT = dict(parallel=True, fastmath=True, cache=True, nogil=True, boundscheck=False)
_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}
_NUMPY_DTYPES = {v: k for k, v in _TORCH_DTYPES.items()}


class CSR:
    """A local m×k sparse matrix A in compressed sparse row form; treat it as immutable.

    ``indptr`` (int64, m+1), ``indices`` (int32 when k < 2³¹, else int64; any order within a row),
    ``data`` (float32 or float64). The arrays may share memory with the caller's. Derived forms
    (transpose, other dtypes, torch tensors) are computed on first use and cached on the object.
    """

    def __init__(self, indptr, indices, data, shape, *, check: bool = True):
        m, k = (int(s) for s in shape)
        self.shape = (m, k)
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int32 if k < 2**31 else np.int64)
        data = np.asarray(data)
        self.data = np.ascontiguousarray(data, dtype=data.dtype if data.dtype == np.float64 else np.float32)
        self._cache = {}
        if check:
            self._check()

    def _check(self) -> None:
        m, k = self.shape
        ip, nnz = self.indptr, self.indices.shape[0]
        if ip.shape != (m + 1,) or ip[0] != 0 or ip[-1] != nnz or self.data.shape != (nnz,):
            raise ValueError(
                f"CSR {m}×{k}: indptr {ip.shape}, indices ({nnz},), data {self.data.shape} differ"
            )
        if np.any(ip[1:] < ip[:-1]):
            raise ValueError("CSR: indptr must be non-decreasing")
        if nnz and (self.indices.min() < 0 or self.indices.max() >= k):
            raise ValueError(f"CSR: column indices must lie in [0, {k})")

    @classmethod
    def from_scipy(cls, mat, dtype=np.float32) -> CSR:
        """The CSR of a scipy sparse matrix (or dense array); duplicates are kept and summed by spmm."""
        mat = sp.csr_matrix(mat)
        return cls(mat.indptr, mat.indices, mat.data.astype(dtype, copy=False), mat.shape)

    def to_scipy(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by indptr, indices and data."""
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    def __repr__(self) -> str:
        return f"CSR(shape={self.shape}, nnz={self.nnz}, dtype={self.data.dtype})"

    def transpose(self) -> CSR:
        """The CSR of Aᵀ (k×m), by an O(nnz + m + k) counting sort (CSC of A); cached."""
        t = self._cache.get("T")
        if t is None:
            csc = self.to_scipy().tocsc()
            t = self._cache["T"] = CSR(csc.indptr, csc.indices, csc.data, self.shape[::-1], check=False)
        return t

    @property
    def T(self) -> CSR:
        return self.transpose()

    def astype(self, dtype) -> CSR:
        """The same matrix with ``data`` of the given dtype (shares indptr/indices); cached."""
        dtype = np.dtype(dtype)
        if dtype == self.data.dtype:
            return self
        key = ("astype", dtype)
        if key not in self._cache:
            data = self.data.astype(dtype)
            self._cache[key] = CSR(self.indptr, self.indices, data, self.shape, check=False)
        return self._cache[key]

    def to(self, device="cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
        """A as a torch sparse CSR tensor on ``device`` (data of ``dtype``, default data's); cached."""
        device = torch.device(device)
        dtype = dtype or _TORCH_DTYPES[self.data.dtype]
        key = ("torch", str(device), dtype)
        t = self._cache.get(key)
        if t is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta state"
                t = torch.sparse_csr_tensor(
                    torch.from_numpy(self.indptr).to(device),
                    torch.from_numpy(self.indices.astype(np.int64)).to(device),
                    torch.from_numpy(self.data).to(device, dtype),
                    self.shape,
                    check_invariants=False,
                )
            self._cache[key] = t
        return t

    def _torch_sparse(self, device: torch.device, dtype: torch.dtype):
        """A as a ``torch_sparse.SparseTensor`` (cached)."""
        key = ("torch_sparse", str(device), dtype)
        if key not in self._cache:
            t = self.to(device, dtype)
            self._cache[key] = _torch_sparse_module().SparseTensor(
                rowptr=t.crow_indices(), col=t.col_indices(), value=t.values(), sparse_sizes=self.shape
            )
        return self._cache[key]


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


@njit(**_JIT)
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
            z = _torch_sparse_module().matmul(a._torch_sparse(h.device, h.dtype), h)
        else:
            z = torch.sparse.mm(a.to(h.device, h.dtype), h)
        if out is None:
            return z
        return out.add_(z) if accumulate else out.copy_(z)


# ----------------------------------------------------------------------------------------- dropout

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


@njit(parallel=True, cache=True, nogil=True)
def _dropout_kernel(nodes, key, threshold, scale, first, out):
    """out[i, j] = scale if fmix(s_i + (first+j+1)·φ) >> 11 ≥ threshold else 0, s_i = fmix(key + node_i·φ)."""
    m, c = out.shape
    for i in prange(m):
        s = _fmix(key + nodes[i] * _U_GOLDEN)
        for j in range(c):
            out[i, j] = scale if _fmix(s + np.uint64(first + j + 1) * _U_GOLDEN) >> _U11 >= threshold else 0


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
    key, threshold, scale = int(key) & _MASK64, int(p * 2.0**53), np.float32(1.0 / (1.0 - p))
    if device.type == "cpu" and get_backend() == "numba":
        nodes = np.ascontiguousarray(node_ids, dtype=np.int64)
        out = np.empty((m, c), dtype=np.float32)
        _dropout_kernel(nodes.view(np.uint64), np.uint64(key), np.uint64(threshold), scale, np.uint64(first_col), out)
        return torch.from_numpy(out)
    nodes = torch.as_tensor(node_ids, dtype=torch.int64, device=device)
    s = _fmix_torch(nodes * _signed(_GOLDEN) + _signed(key))
    cols = torch.arange(first_col + 1, first_col + c + 1, dtype=torch.int64, device=device) * _signed(_GOLDEN)
    keep = _srl(_fmix_torch(s[:, None] + cols[None, :]), 11) >= threshold
    return keep.to(torch.float32) * float(scale)
