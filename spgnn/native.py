"""spgnn's C kernels (spgnn/csrc, built with the package into ``spgnn._native``), called through ctypes.

The kernels are plain C compiled when the package is installed: nothing is compiled when a run starts, and a
process that loads them adds well under a MiB to its resident memory. A parallel kernel is an OpenMP region on
torch's own threads (the library links the libgomp torch has loaded), as many as ``torch.set_num_threads`` says,
each on its own rows; a ctypes call lets go of the GIL. Arrays are passed as addresses (`ptr`): callers hand over
contiguous arrays of the kernels' types.
"""

from __future__ import annotations

import ctypes
import functools
import importlib

import torch

from .errors import SpgnnError

i32, i64, u64, addr = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p
f32, f64 = ctypes.c_float, ctypes.c_double


@functools.cache
def library() -> ctypes.CDLL:
    """The shared library of the kernels (loaded once)."""
    try:
        path = importlib.import_module(f"{__package__}._native").__file__
    except ImportError as e:
        raise SpgnnError("spgnn's C kernels are not built: install the package from its folder with "
                         "`pip install -e .` (needs a C compiler), or choose the SpMM backend 'torch'") from e
    return ctypes.CDLL(path)


def available() -> bool:
    """Whether the kernels are built and load."""
    try:
        library()
    except (SpgnnError, OSError):
        return False
    return True


@functools.cache
def function(name: str, *argtypes, restype=None):
    """The kernel `name` of the library, taking `argtypes` (ctypes types) and returning `restype` (None: nothing)."""
    fn = getattr(library(), name)
    fn.argtypes, fn.restype = list(argtypes), restype
    return fn


def suffix(dtype) -> str:
    """The suffix of a kernel's variant for a numpy or torch dtype: i32, i64, f32 or f64 (``spmm_i32_f32``)."""
    return _SUFFIX[str(dtype).removeprefix("torch.")]


_SUFFIX = {"int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}


def ptr(x) -> int:
    """The address of a C-contiguous numpy array's or CPU tensor's first element (any other is refused: a kernel
    would read it as one)."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or not x.is_contiguous():
            raise SpgnnError(f"a C kernel takes contiguous CPU tensors, not a {tuple(x.shape)} tensor of strides "
                             f"{x.stride()} on {x.device}")
        return x.data_ptr()
    if not x.flags.c_contiguous:
        raise SpgnnError(f"a C kernel takes C-contiguous arrays, not a {x.shape} array of strides {x.strides}")
    return x.ctypes.data


__all__ = ["addr", "available", "f32", "f64", "function", "i32", "i64", "library", "ptr", "suffix", "u64"]
