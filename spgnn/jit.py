"""numba's ``njit``, ``prange`` and module, or plain-Python stand-ins when numba is missing (the torch paths
need none of it)."""

try:
    import numba
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a dependency; this keeps imports working without it
    numba = None
    prange = range

    def njit(*args, **kwargs):
        return lambda fn: fn


__all__ = ["njit", "numba", "prange"]
