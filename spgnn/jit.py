"""numba's ``njit``, ``prange`` and module, or plain-Python stand-ins when numba is missing (the torch paths
need none of it), and `kernel`: ``njit`` for a kernel called from Python, with the time numba takes to make
it ready counted apart (`compile_seconds`), so that epoch times leave it out.

A kernel's first call with new argument types compiles it (a few seconds on a fresh install) or loads it
from numba's on-disk cache (later runs; tenths of a second), and the first parallel kernel starts numba's
thread pool. All of that is one-time start-up, not training.

`warm_up` makes a run's kernels ready ahead of it, so that they are compiled once per machine, not once per
process; `warm_up_once` does so under `machine_lock` unless a process of this machine has done it already. The
``--nprocs`` parent calls it before starting the processes, which then load the kernels from numba's cache; under
mpirun, torchrun or srun every process calls it, so the first to get the lock compiles and the others, waiting
on it, find the kernels compiled and load them on first use, at once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

try:
    import numba
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a dependency; this keeps imports working without it
    numba = None
    prange = range

    def njit(*args, **kwargs):
        return lambda fn: fn

_compile_s = 0.0
_dispatchers = []


def compile_seconds() -> float:
    """Seconds this process has spent in calls of `kernel`s that added a compiled signature (compiling it,
    or loading it from numba's cache)."""
    return _compile_s


def compiled() -> int:
    """Signatures of `kernel`s this process compiled rather than loaded from numba's on-disk cache."""
    return sum(sum(d.stats.cache_misses.values()) for d in _dispatchers)


def kernel(**options):
    """``njit(**options)`` for a function called from Python (not from other jitted code): each call that
    makes numba compile or load a new signature adds its duration to `compile_seconds`."""
    def wrap(fn):
        dispatcher = njit(**options)(fn)
        if numba is None:
            return dispatcher
        _dispatchers.append(dispatcher)

        @functools.wraps(fn)
        def call(*args):
            global _compile_s
            known, t0 = len(dispatcher.overloads), time.perf_counter()
            out = dispatcher(*args)
            if len(dispatcher.overloads) != known:
                _compile_s += time.perf_counter() - t0
            return out
        call.dispatcher = dispatcher
        return call
    return wrap


LOCK_NAME = "spgnn-kernels.lock"


def lock_path() -> Path:
    """The lock file in numba's cache folder: $NUMBA_CACHE_DIR, else the package's __pycache__ (where numba
    caches the kernels), else the temporary folder when that is not writable."""
    folder = Path(numba.config.CACHE_DIR or Path(__file__).parent / "__pycache__") if numba else None
    if folder is None or not os.access(folder if folder.is_dir() else folder.parent, os.W_OK):
        folder = Path(tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    return folder / LOCK_NAME


@contextmanager
def machine_lock():
    """Hold an exclusive lock on `lock_path` (shared by every process of this machine) inside the block."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock, each process compiles what it needs
        yield
        return
    with open(lock_path(), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def warm_up(sampler: str | None = None) -> None:
    """Make ready (compile, or load from numba's cache) the kernels a CPU training run calls, with the argument
    types it calls them with, by calling them on a 4-node ring: the SpMM Z = A·H (float32), the dropout mask, an
    input's one-pass dropout and attention's weighted sum, and with `sampler` ("sage" or "ladies", optionally
    with ":SIZES") that sampler's kernels."""
    if numba is None:
        return
    import numpy as np
    import scipy.sparse as sp
    import torch

    from .hashing import dropout, dropout_mask
    from .sampling.sampler import make_sampler
    from .sparse.attention import weighted_sum
    from .sparse.csr import CSR
    from .sparse.kernels import spmm

    n = 4
    ring = sp.csr_matrix((np.ones(2 * n), (np.r_[np.arange(n), np.arange(n)],
                                           np.r_[np.arange(1, n + 1) % n, np.arange(-1, n - 1) % n])))
    spmm(CSR.from_scipy(ring), torch.ones(n, 2))
    dropout_mask(np.arange(n), 2, 0.5, key=1)
    dropout(torch.ones(n, 2), np.arange(n), 0.5, key=1)     # an input's dropout in one pass
    edges = ring.tocoo()                                    # attention's weighted sum, forward and backward
    p, v = torch.ones(ring.nnz, 1, requires_grad=True), torch.ones(n, 1, 2, requires_grad=True)
    weighted_sum(p, torch.as_tensor(edges.row), torch.as_tensor(edges.col), v, n).sum().backward()
    if sampler:
        make_sampler(f"{sampler.partition(':')[0]}:2", ring).sample([np.arange(2)], [1])


def _ready_marker(sampler: str | None) -> Path:
    """The file beside `lock_path` saying `warm_up(sampler)` has run for these kernels: keyed by numba's and
    Python's versions, numba's cache folder and the kernels' source files (numba recompiles when they change)."""
    from . import hashing  # noqa: F401 - importing the kernels' modules registers them
    from .sampling import sampler as _  # noqa: F401
    from .sparse import attention, kernels  # noqa: F401

    files = sorted({d.py_func.__code__.co_filename for d in _dispatchers})
    key = json.dumps([numba.__version__, sys.version, numba.config.CACHE_DIR, (sampler or "").partition(":")[0],
                      [(f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in files]])
    return lock_path().with_name(f"spgnn-kernels-{hashlib.sha256(key.encode()).hexdigest()[:16]}.ready")


def warm_up_once(sampler: str | None = None) -> bool:
    """`warm_up(sampler)` holding `machine_lock`, unless a process of this machine has done it for these kernels
    (then return at once: the kernels are in numba's cache); True when it ran here."""
    if numba is None:
        return False
    with machine_lock():
        marker = _ready_marker(sampler)
        if marker.exists():
            return False
        warm_up(sampler)
        marker.touch()
        return True


__all__ = ["compile_seconds", "compiled", "kernel", "lock_path", "machine_lock", "njit", "numba", "prange", "warm_up",
           "warm_up_once"]
