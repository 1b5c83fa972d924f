"""numba's ``njit``, ``prange`` and module, or plain-Python stand-ins when numba is missing (the torch paths
need none of it), and `kernel`: ``njit`` for a kernel called from Python, with the time numba takes to make
it ready counted apart (`compile_seconds`), so that epoch times leave it out.

A kernel's first call with new argument types compiles it (a few seconds on a fresh install) or loads it
from numba's on-disk cache (later runs; tenths of a second), and the first parallel kernel starts numba's
thread pool. All of that is one-time start-up, not training.
"""

from __future__ import annotations

import functools
import time

try:
    import numba
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a dependency; this keeps imports working without it
    numba = None
    prange = range

    def njit(*args, **kwargs):
        return lambda fn: fn

_compile_s = 0.0


def compile_seconds() -> float:
    """Seconds this process has spent in calls of `kernel`s that added a compiled signature (compiling it,
    or loading it from numba's cache)."""
    return _compile_s


def kernel(**options):
    """``njit(**options)`` for a function called from Python (not from other jitted code): each call that
    makes numba compile or load a new signature adds its duration to `compile_seconds`."""
    def wrap(fn):
        dispatcher = njit(**options)(fn)
        if numba is None:
            return dispatcher

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


__all__ = ["compile_seconds", "kernel", "njit", "numba", "prange"]
