"""`run`: a user's program ``main(comm, *args)`` on every rank, however the job was launched."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import traceback
from dataclasses import replace

from ..config import timeout_fits, timeout_rule
from ..errors import SpgnnError, say
from . import launch


def run(main, *args, nprocs: int = 1, device: str = "cpu", timeout: float = 300.0, transport: str = "auto"):
    """``main(comm, *args)`` on every rank of the job: under mpirun, torchrun or srun each process is a rank and
    this one's result is returned; launched plainly, on `nprocs` local processes (rank 0's result is returned;
    `main` must then be a module-level function and `args` picklable) or, with nprocs 1, in this process.
    `timeout`: seconds before a stalled collective fails (a rank that dies ends the run; no limit on its length).
    A device or transport the job cannot have is refused in one line before any process starts."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):   # a local rank importing the program
        os._exit(launch.UNGUARDED)      # run_local says so, once (the start method would print an exception here)
    launched = launch.detect()
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise SpgnnError(f"run: nprocs must be a whole number of at least 1, got {nprocs!r}")
    if not timeout_fits(timeout):
        raise SpgnnError(timeout_rule("run: timeout", timeout))
    if launched.kind == "single" and nprocs > 1:
        try:
            pickle.dumps(main)          # how each local process is given it: by its module and name
        except (pickle.PicklingError, AttributeError, TypeError):
            raise SpgnnError(f"run: with nprocs {nprocs}, main ({getattr(main, '__qualname__', main)!r}) must be a "
                             "function defined at the top level of a module, which each process is given by its name: "
                             "not a lambda, nor a function defined inside another") from None
        launch.check_device(device)
        launch.resolve_transport(transport, replace(launched, kind="spawn"), device)
        return launch.run_local(main, nprocs, *args, timeout_s=timeout, deadline_s=float("inf"), device=device,
                                transport=transport)[0]
    if launched.kind != "single" and nprocs not in (1, launched.world_size):
        raise SpgnnError(f"run: nprocs={nprocs}, but {launched.kind} launched a job of {launched.world_size} "
                         f"processes: launch {nprocs}, or leave nprocs out under a launcher")
    comm = launch.init(device, timeout, transport)
    try:
        out = main(comm, *args)
    except BaseException as e:
        line = launch.stalled(e, timeout)
        if launched.kind == "mpirun":   # MPI_Abort ends the process before Python would say why it failed
            if isinstance(line or e, SpgnnError):
                say(f"rank {comm.rank}: {line or e}")
            elif not isinstance(e, SystemExit):
                traceback.print_exc()
        launch.abort(1)
        launch.leave()
        if line is not None:
            raise line from None
        raise
    launch.shutdown()
    return out
