"""Local SpMM kernels, Z = A·H for a `spgnn.sparse.csr.CSR` A and a dense H.

Backends (``set_backend``): "native" (default where spgnn's C kernels are built, `spgnn.native`; a row-parallel
kernel on torch's threads, the rows split into one chunk a thread of equal nnz + rows), "torch"
(``torch.sparse.mm`` on a CSR tensor) and "torch-sparse" (``torch_sparse.matmul``). The environment variable
``SPGNN_SPMM_BACKEND`` picks the default ("numba", this backend's name before its kernel was C, still means
"native"). Tensors on a non-CPU device always use torch's sparse CSR tensor on that device. Nothing here records
autograd history: callers wrap ``spmm`` in their own autograd Functions.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import torch

from .. import native
from ..errors import SpgnnError
from .csr import CSR, TORCH_DTYPES

_NUMPY_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


# ---------------------------------------------------------------------------------------- backends

_BACKENDS = ("native", "torch", "torch-sparse")
_ALIASES = {"numba": "native"}
_backend: str | None = None


def _torch_sparse_module():
    try:
        return importlib.import_module("torch_sparse")
    except ImportError as e:
        raise SpgnnError(
            "SpMM backend 'torch-sparse' needs the torch_sparse package, which is not installed; "
            "use 'native' or 'torch'"
        ) from e


def set_backend(name: str) -> None:
    """Choose the CPU SpMM backend: "native", "torch" or "torch-sparse"."""
    global _backend
    name = _ALIASES.get(name, name)
    if name not in _BACKENDS:
        raise SpgnnError(f"unknown SpMM backend {name!r}; choose one of {', '.join(_BACKENDS)}")
    if name == "native":
        native.library()
    if name == "torch-sparse":
        _torch_sparse_module()
    _backend = name


def get_backend() -> str:
    """The current SpMM backend (first call: $SPGNN_SPMM_BACKEND, else "native" if built, else "torch")."""
    if _backend is None:
        set_backend(os.environ.get("SPGNN_SPMM_BACKEND") or ("native" if native.available() else "torch"))
    return _backend


# -------------------------------------------------------------------------------------------- SpMM

def _kernel(indices: np.dtype, values: np.dtype):
    """The C kernel for these index and value types (`spgnn/csrc/spmm.c`)."""
    a = native.addr
    return native.function(f"spmm_{native.suffix(indices)}_{native.suffix(values)}", native.i64, native.i64,
                           a, a, a, a, a, native.i32)


def _native_spmm(a: CSR, h: torch.Tensor, out: torch.Tensor | None, accumulate: bool) -> torch.Tensor:
    """out (+)= A·h with the C kernel; out: a contiguous CPU tensor of h's dtype, or None (new)."""
    dtype = _NUMPY_DTYPES.get(h.dtype)
    if dtype is None:
        raise TypeError(f"spmm: the native backend supports float32 and float64, not {h.dtype}")
    if out is None:  # numpy's allocator madvises huge pages: far fewer page faults than torch.empty
        out, accumulate = torch.from_numpy(np.empty((a.shape[0], h.shape[1]), dtype)), False
    if out.numel():
        a = a.astype(dtype)
        hn = h.contiguous()
        _kernel(a.indices.dtype, a.data.dtype)(a.shape[0], h.shape[1], *map(native.ptr, (a.indptr, a.indices, a.data,
                                                                                    hn, out)), int(accumulate))
    return out


def spmm(a: CSR, h: torch.Tensor, out: torch.Tensor | None = None, accumulate: bool = False) -> torch.Tensor:
    """Z = A·H for A (m×k CSR) and H (k×f); returns Z (m×f, H's dtype and device).

    With ``out`` (m×f, H's dtype) the result is written into it, or added to it when ``accumulate``,
    and ``out`` is returned; this sums Σ_j A_ij·H_j over blocks j without temporaries (on the
    native backend, when ``out`` is contiguous). No autograd history is recorded.
    """
    m, k = a.shape
    if h.dim() != 2 or h.shape[0] != k:
        raise ValueError(f"spmm: A is {m}×{k} but H has shape {tuple(h.shape)}")
    if out is not None and (out.shape != (m, h.shape[1]) or out.dtype != h.dtype or out.device != h.device):
        raise ValueError(
            f"spmm: out is {tuple(out.shape)} {out.dtype} on {out.device}, expected "
            f"{(m, h.shape[1])} {h.dtype} on {h.device}"
        )
    if out is not None and out.numel() and h.numel() and \
            out.untyped_storage().data_ptr() == h.untyped_storage().data_ptr():     # empty ones share nothing
        raise ValueError("spmm: out shares its memory with H, which the product still reads: give another out")
    h = h.detach()
    # an empty block (a part with no halo, P = 1's remote shard): no kernel call (torch_sparse's dies of SIGFPE)
    if a.nnz == 0 or h.shape[1] == 0:
        with torch.no_grad():
            return h.new_zeros((m, h.shape[1])) if out is None else out if accumulate else out.zero_()
    backend = get_backend() if h.device.type == "cpu" else "torch"
    if backend == "native" and (out is None or out.is_contiguous()):
        return _native_spmm(a, h, out, accumulate)
    with torch.no_grad():
        if backend == "native":
            z = _native_spmm(a, h, None, False)
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
