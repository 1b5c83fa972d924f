"""Agreement on errors: a function run on every rank (or on rank 0 alone) whose SpgnnError, raised on any
rank, is raised on every rank, so that bad input on one rank stops all with the same one line."""

from __future__ import annotations

from ..errors import SpgnnError
from .comm import Comm


def on_rank0(comm: Comm, fn):
    """fn() run by rank 0 alone, its result (or its SpgnnError) handed to every rank."""
    return agree(comm, fn, everyone=False)


def agree(comm: Comm, fn, everyone: bool = True):
    """fn() run on every rank (or on rank 0 alone, its result handed to all); when it raises SpgnnError on
    any rank, every rank raises the first such error, so that bad input on one rank stops all with one line."""
    if comm.world_size == 1:
        return fn()
    result = ("ok", None)
    if everyone or comm.rank == 0:
        try:
            result = ("ok", fn())
        except SpgnnError as e:
            result = ("error", str(e))
        except Exception as e:
            comm.all_gather_object(("error", f"rank {comm.rank} failed: {type(e).__name__}: {e}"))
            raise
    shared = result if not everyone else (result[0], result[1] if result[0] == "error" else None)
    results = comm.all_gather_object(shared)                 # statuses (and rank 0's result when it alone ran)
    error = next((value for kind, value in results if kind == "error"), None)
    if error is not None:
        raise SpgnnError(error)
    return result[1] if everyone else results[0][1]
