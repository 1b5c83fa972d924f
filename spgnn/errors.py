"""The one exception type users see: a one-line message naming the problem and what to do."""

import sys


class SpgnnError(Exception):
    """Bad input or configuration. The command line prints ``spgnn: error: <message>`` and exits 2."""


def say(message: str) -> None:
    """``spgnn: error: message`` on stderr as one write, flushed, so that the lines of ranks sharing a stderr
    (--nprocs, mpirun) never interleave, even unbuffered, and a process that ends next has said it."""
    sys.stderr.write(f"spgnn: error: {message}\n")
    sys.stderr.flush()


def out_of_memory(e: BaseException) -> bool:
    """Whether `e` is a process running out of memory: numpy's MemoryError, torch's OutOfMemoryError, or a
    RuntimeError of an allocation that failed (torch's CPU allocator, a C++ ``std::bad_alloc``)."""
    import torch

    first = (str(e).strip().splitlines() or [""])[0]
    return isinstance(e, MemoryError | torch.OutOfMemoryError) or isinstance(e, RuntimeError) and (
        "allocate memory" in first or "out of memory" in first.lower())
