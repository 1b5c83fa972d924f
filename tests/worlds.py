"""Several world sizes from one launch: `run_worlds` starts max(P) local processes once and re-forms a
torch.distributed world of the first P of them for each P in turn (launching costs seconds a process; the work
of a small case costs less)."""

import os

from spgnn.comm import launch
from spgnn.comm.comm import Comm


def _worlds(comm, fn, ports: dict, args: tuple) -> dict:
    """On each launched process: leave the launch's world, then for each P (largest first) join the world of the
    first P processes at `ports[P]` and run ``fn(world, *args)``. {P: its result, or the error that stopped it}."""
    launch.leave()
    out = {}
    for P, port in sorted(ports.items(), reverse=True):
        if comm.rank >= P:
            continue
        os.environ.update(RANK=str(comm.rank), WORLD_SIZE=str(P), LOCAL_WORLD_SIZE=str(P), MASTER_PORT=str(port))
        world = launch.init(timeout_s=120)
        try:
            out[P] = fn(world, *args)
        except Exception as e:      # reported by the caller for this P; the other P still run
            out[P] = f"{type(e).__name__}: {e}"
        launch.shutdown()
    return out


def run_worlds(fn, procs, *args, timeout_s: float = 900) -> dict:
    """{P: [fn(comm, *args) on each rank of a world of P]} for each P in `procs` (P = 1 in this process, the others
    from one launch); a rank whose fn raised gives the error's text in its place."""
    out = {1: [fn(Comm(), *args)]} if 1 in procs else {}
    ports = {P: launch.free_port() for P in procs if P > 1}
    if ports:
        per_rank = launch.run_local(_worlds, max(ports), fn, ports, args, timeout_s=timeout_s)
        out |= {P: [r[P] for r in per_rank[:P]] for P in ports}
    return out


def errors(results: list) -> list[str]:
    """The error texts among one world's results."""
    return [r for r in results if isinstance(r, str)]
