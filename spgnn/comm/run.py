"""`run`: a user's program ``main(comm, *args)`` on every rank, however the job was launched."""

from __future__ import annotations

from dataclasses import replace

from ..config import MAX_TIMEOUT_S
from ..errors import SpgnnError
from . import launch


def run(main, *args, nprocs: int = 1, device: str = "cpu", timeout: float = 300.0, transport: str = "auto"):
    """``main(comm, *args)`` on every rank of the job: under mpirun, torchrun or srun each process is a rank and
    this one's result is returned; launched plainly, on `nprocs` local processes (rank 0's result is returned;
    `main` must then be a module-level function and `args` picklable) or, with nprocs 1, in this process.
    `timeout`: seconds before a stalled collective fails (a rank that dies ends the run; no limit on its length).
    A device or transport the job cannot have is refused in one line before any process starts."""
    launched = launch.detect()
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise SpgnnError(f"run: nprocs must be a whole number of at least 1, got {nprocs!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 1 <= timeout <= MAX_TIMEOUT_S:
        raise SpgnnError(f"run: timeout must be a number of seconds of at least 1 and at most {MAX_TIMEOUT_S:.0f} "
                         f"(how long a rank waits for the others before the job ends), got {timeout!r}")
    if launched.kind == "single" and nprocs > 1:
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
    except BaseException:
        launch.abort(1)
        launch.leave()
        raise
    launch.shutdown()
    return out
