"""Memory measurements (bytes autograd holds for the backward, peak resident set size) and how a process keeps
the memory its steps reuse (freed blocks kept by the C allocator, large result blocks kept by `empty`)."""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import sys
from contextlib import contextmanager

import numpy as np
import torch


class SavedTensorMeter:
    """Counts the bytes of tensors autograd saves for the backward while the context is active.

    Storages are counted once however many saved tensors view them; `peak_bytes` is the largest total
    alive at any moment (saved tensors are released as the backward consumes them)."""

    def __init__(self):
        self.live = {}            # storage pointer -> [references, bytes]
        self.current = 0
        self.peak_bytes = 0

    def _pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t.device.type)
        entry = self.live.setdefault(key, [0, storage.nbytes()])
        if entry[0] == 0:
            self.current += entry[1]
            self.peak_bytes = max(self.peak_bytes, self.current)
        entry[0] += 1
        return _Handle(self, key, t)

    def _release(self, key):
        entry = self.live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.current -= entry[1]
            del self.live[key]

    def hooks(self):
        """The context manager to wrap a forward pass in."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda handle: handle.tensor)


class _Handle:
    """What autograd stores instead of the tensor; releasing it uncounts the storage."""

    __slots__ = ("meter", "key", "tensor")

    def __init__(self, meter, key, tensor):
        self.meter, self.key, self.tensor = meter, key, tensor

    def __del__(self):
        self.meter._release(self.key)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3        # glibc's mallopt parameters
LARGE_BYTES = 32 << 20          # glibc's largest mmap threshold: larger blocks always get a mapping of their own
_KEPT: list = []                # the large blocks `empty` handed out, most recently used last


def held_bytes(*objs) -> int:
    """Bytes of the arrays among `objs` (numpy arrays, tensors, scipy sparse matrices; anything else counts 0),
    each buffer once however many of them view it."""
    seen, total = set(), 0
    for a in objs:
        parts = (a.data, a.indices, a.indptr) if hasattr(a, "indptr") and hasattr(a, "indices") else (a,)
        for p in parts:
            if isinstance(p, torch.Tensor):
                key, size = p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()
            elif isinstance(p, np.ndarray):
                while isinstance(p.base, np.ndarray):            # a view: the array it views
                    p = p.base
                key, size = p.__array_interface__["data"][0], p.nbytes
            else:
                continue
            if key not in seen:
                seen.add(key)
                total += size
    return total


def empty(shape, dtype=np.float32) -> torch.Tensor:
    """An uninitialised CPU tensor of `shape` for a kernel to write, on numpy's memory (madvised to huge pages).
    A block of `LARGE_BYTES` or more is kept once the last tensor on it is freed, and handed out again to the
    next request of the same size; a request of a size no free block has lets the free ones go (a minibatch's
    sizes change, and nothing stale stays). The C allocator maps each such block anew, so a training step would
    page-fault and zero it at every step: amazon-computers' 42 MB of dropped features take 2.5 ms to write when
    resident and up to 45 ms when fresh (2 threads faulting huge pages here), and the GCN step went from 75 to
    40 ms. Meant for what is remade at every step and held to the end of the backward (the features' dropout,
    `spgnn.hashing.dropout`): a kept block that is free while the rest of the backward runs would add to its
    peak. A block is reused only when nothing refers to it any more."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < LARGE_BYTES:
        return torch.from_numpy(np.empty(shape, dtype))
    free = [b for b in _KEPT if sys.getrefcount(b) == 3]            # referred to by _KEPT, b and the argument only
    block = next((b for b in free if b.nbytes == nbytes), None)
    drop, block = (free, np.empty(nbytes, np.uint8)) if block is None else ([block], block)
    del free
    _KEPT[:] = [b for b in _KEPT if not any(b is d for d in drop)] + [block]
    return torch.from_numpy(block.view(dtype).reshape(shape))


def release_kept() -> None:
    """Stop keeping the blocks `empty` kept (each is freed with the last tensor on it): before work that does not
    remake them, such as an evaluation, so that they do not add to its memory."""
    _KEPT.clear()


def keep_freed_memory() -> bool:
    """Have the C allocator keep what this process frees for its next allocations instead of handing it back to
    the system: blocks up to 32 MiB come from the heap rather than a mapping of their own, and up to 2 GiB free at
    the heap's top stay (glibc's ``mallopt``). A training step allocates the same tensors every time; handed back,
    each would be page-faulted in and zeroed anew, 4 KiB at a time (13,700 faults and about 25 ms of a 260 ms
    GraphSAGE step on amazon-computers here). Larger blocks keep their own mapping, so that freeing one returns it
    whole and the heap does not fragment around it (with 1 GiB, rmat:20's training peak grew by up to 1.7×).
    Called by `spgnn.comm.launch.init` in every process; returns whether it applied (False where the C library is
    not glibc)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, LARGE_BYTES) and libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1))


_PEAK_BEFORE_RESET = [0]       # the high-water mark `rss_growth` cleared, so that `peak_rss_bytes` still sees it


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far: the kernel's high-water mark of its address space
    (VmHWM). Not getrusage's ru_maxrss, which Linux carries across fork and exec: a process started by one
    that held a whole graph would report the parent's peak as its own."""
    try:
        peak = _status_bytes("VmHWM")
    except (OSError, StopIteration):         # no /proc (macOS): ru_maxrss, in bytes there
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return max(int(peak), _PEAK_BEFORE_RESET[0])


def physical_memory_bytes() -> int | None:
    """The machine's physical memory: its pages times the page size (None where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):      # a name the system does not know; no sysconf (Windows)
        return None


def rss_bytes() -> int:
    """Resident set size of this process now (VmRSS; the peak where /proc is missing)."""
    try:
        return _status_bytes("VmRSS")
    except (OSError, StopIteration):
        return peak_rss_bytes()


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


_RESTARTED = [False]           # whether the last `restart_peak` reset the kernel's high-water mark


def restart_peak() -> int:
    """The peak RSS so far (`peak_rss_bytes`); then the kernel's high-water mark is reset to the RSS now
    (``/proc/self/clear_refs``, Linux), so that `peak_rss_since_restart` measures what follows: a run's set-up
    apart from its training. `peak_rss_bytes` still sees the earlier peak."""
    peak = _PEAK_BEFORE_RESET[0] = peak_rss_bytes()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _RESTARTED[0] = True
    except OSError:
        _RESTARTED[0] = False
    return peak


def peak_rss_since_restart() -> int | None:
    """The high-water RSS since the last `restart_peak` (None where it could not be reset)."""
    try:
        return _status_bytes("VmHWM") if _RESTARTED[0] else None
    except (OSError, StopIteration):
        return None


@contextmanager
def rss_growth():
    """Peak RSS growth of the block: its high-water RSS minus the RSS at its start, i.e. the memory it had to
    take from the OS (memory the allocator reuses from earlier frees does not show: a lower bound on what
    the block allocated). Linux only (`restart_peak`), so what C libraries allocate counts too. Yields a dict
    whose ``bytes`` is set on exit (None where /proc cannot do this)."""
    out = {"bytes": None}
    restart_peak()
    start = rss_bytes() if _RESTARTED[0] else None
    yield out
    peak = peak_rss_since_restart()
    if start is not None and peak is not None:
        out["bytes"] = max(0, peak - start)
