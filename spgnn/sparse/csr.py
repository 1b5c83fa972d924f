"""`CSR`: a local sparse matrix in compressed sparse row form, with its cached transpose and torch forms."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


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
        indices = np.asarray(indices)
        if check and indices.size and (indices.dtype.kind not in "iu" or indices.min() < 0 or indices.max() >= k):
            raise ValueError(f"CSR: column indices must be integers in [0, {k}), got {indices.dtype} in "
                             f"[{indices.min()}, {indices.max()}]")
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

    def row_slice(self, lo: int, hi: int) -> CSR:
        """Rows lo…hi−1 (a (hi−lo)×k CSR sharing indices and data; all rows: itself); cached."""
        if not 0 <= lo <= hi <= self.shape[0]:
            raise ValueError(f"CSR row_slice({lo}, {hi}) of {self.shape[0]} rows: need 0 <= lo <= hi <= "
                             f"{self.shape[0]}")
        if (lo, hi) == (0, self.shape[0]):
            return self
        key = ("rows", lo, hi)
        if key not in self._cache:
            a, b = self.indptr[lo], self.indptr[hi]
            self._cache[key] = CSR(self.indptr[lo:hi + 1] - a, self.indices[a:b], self.data[a:b],
                                   (hi - lo, self.shape[1]), check=False)
        return self._cache[key]

    def astype(self, dtype) -> CSR:
        """The same matrix with ``data`` of the given dtype (shares indptr/indices); cached."""
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"CSR values are float32 or float64, not {dtype}")
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
        dtype = dtype or TORCH_DTYPES[self.data.dtype]
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


def row_ids(indptr: np.ndarray, dtype=np.int64) -> np.ndarray:
    """The row of each nonzero of a CSR matrix with row pointers `indptr` (its COO row indices)."""
    return np.repeat(np.arange(len(indptr) - 1, dtype=dtype), np.diff(indptr))


def column_blocks(m, offsets, which=None) -> dict:
    """{j: M[:, offsets[j]:offsets[j+1]] as a local CSR block} for each part j in `which` (default all)."""
    which = range(len(offsets) - 1) if which is None else which
    return {j: CSR.from_scipy(m[:, offsets[j]:offsets[j + 1]]) for j in which}


def csr_bytes(blocks) -> int:
    """Bytes of local CSR blocks and of the transposes cached on them."""
    return sum(b.nbytes + (b._cache["T"].nbytes if "T" in b._cache else 0) for b in blocks if b is not None)


def with_unit_diagonal(a: sp.csr_matrix, first: int) -> sp.csr_matrix:
    """Block row `a` (rows first, first+1, … of the square matrix; sorted indices) with a diagonal entry of one
    inserted in place where it has none (no COO round trip of the block); present ones keep their weight, as PyG's
    ``add_remaining_self_loops``."""
    m, indptr = a.shape[0], a.indptr.astype(np.int64)
    diag = (first + np.arange(m)).astype(a.indices.dtype)
    row = row_ids(indptr, np.int32 if m < 2**31 else np.int64)
    below = np.bincount(row, weights=a.indices < diag[row], minlength=m).astype(np.int64)   # entries left of it
    del row
    at = indptr[:-1] + below                                   # where the diagonal entry is or goes
    present = np.zeros(m, bool)
    inside = at < indptr[1:]
    present[inside] = a.indices[at[inside]] == diag[inside]
    data = a.data.astype(np.float32, copy=True)
    missing = np.flatnonzero(~present)
    indices = np.insert(a.indices, at[missing], diag[missing])
    data = np.insert(data, at[missing], np.float32(1.0))
    indptr = indptr + np.concatenate([[0], np.cumsum(~present)])
    return sp.csr_matrix((data, indices, indptr), shape=a.shape)
