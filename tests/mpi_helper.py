"""Run under mpirun by tests/test_mpi_transport.py: ``mpirun -np P python -m tests.mpi_helper MODE OUT``.

compare  every rank runs the same work twice, once on each transport (torch.distributed and mpi4py, in the
         same processes): the collectives of tests/test_comm.py over the world, the collectives over the
         rows and columns of a 2×(P/2) grid, and for every algorithm a forward/backward and a short training
         run. Rank 0 pickles {"collectives": [per rank], "training": [per rank]} to OUT.
die      training on the mpi transport where rank 1 calls os._exit(3) in epoch 3.
raise    ``spgnn train --transport mpi`` where rank 1 raises ValueError in epoch 3.
stall    rank 1 never joins a non-blocking broadcast that rank 0 waits on.
group    as stall, in a group of ranks 0 and 1 used first by that broadcast (3 ranks): its communicator's creation
         waits for rank 1.
"""

from __future__ import annotations

import os
import pickle
import sys
import time

import torch

from spgnn import spmm
from spgnn.comm import launch
from spgnn.comm.comm import Comm, TorchTransport
from spgnn.comm.grid import ProcessGrid
from spgnn.comm.mpi import MPITransport
from spgnn.config import TrainConfig
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.test_comm import _ops

EPOCHS = 4


def comms(torch_comm: Comm) -> dict[str, Comm]:
    """The same ranks on each transport, each with its own ledger."""
    r, P = torch_comm.rank, torch_comm.world_size
    return {"torch": Comm(r, P, TorchTransport()), "mpi": Comm(r, P, MPITransport())}


def group_ops(comm: Comm) -> dict:
    """Collectives over the rows and columns of a 2×(P/2) grid (group ranks not contiguous for columns)."""
    grid = ProcessGrid(comm, (2, comm.world_size // 2), ("row", "col"))
    out = {}
    for name in ("row", "col"):
        g = grid.group(name)
        me = g.ranks.index(comm.rank)
        with comm.phase("groups", layer=name):
            out[f"{name}/bcast"] = comm.broadcast(torch.full((3, 2), float(comm.rank)), g.ranks[-1], g).numpy()
            out[f"{name}/sum"] = comm.all_reduce(torch.arange(5.0) * (comm.rank + 1), g).numpy()
            out[f"{name}/a2a"] = comm.all_to_all_v(torch.arange(2.0 * g.size) + 100 * comm.rank, [2] * g.size,
                                                   [2] * g.size, g).numpy()
            out[f"{name}/gather"] = comm.all_gather_v(torch.full((me + 1, 2), float(comm.rank)),
                                                      list(range(1, g.size + 1)), g).numpy()
            out[f"{name}/rs"] = comm.reduce_scatter(torch.arange(3.0 * g.size) * (comm.rank + 1), g).numpy()
    out["ledger"] = ledger_counts(comm)
    return out


def strided_ops(comm: Comm) -> dict:
    """Broadcast into and all-reduce a non-contiguous view (the mpi transport copies it once)."""
    view = (torch.arange(12.0).reshape(4, 3) * float(comm.rank == 0)).t()
    return {"strided/bcast": comm.broadcast(view, 0).numpy(),
            "strided/sum": comm.all_reduce(torch.ones(4, 3).t()).numpy()}


def ledger_counts(comm: Comm) -> list:
    """The ledger without the seconds: what must be equal on both transports."""
    return [{k: v for k, v in row.items() if k != "seconds"} for row in comm.ledger.table()]


TRAINING = dict(hidden=8, epochs=EPOCHS, eval_every=0, seed=3)
TRAINING_GRAPH = dict(n=53, seed=5)


def training(comm: Comm, algo: str) -> dict:
    """The loss curve of EPOCHS steps and the ledger's (calls, sent, received, messages) per row over the set-up
    and those steps, then the logits and parameter gradients of one more forward/backward."""
    t = Trainer(TrainConfig(algo=algo, **TRAINING), comm, graph=small_graph(**TRAINING_GRAPH))
    losses = [t.step(e) for e in range(EPOCHS)]
    ledger = {k: tuple(v[:4]) for k, v in comm.ledger.rows.items()}
    _, logits = t.forward_backward(EPOCHS)
    grads = [p.grad.clone().numpy() for p in t.model.parameters()]
    return {"rows": t.node_ids.numpy(), "logits": logits.numpy(), "grads": grads, "losses": losses,
            "ledger": ledger}


def compare(base: Comm, out: str) -> None:
    both = comms(base)
    res = {"collectives": {}, "training": {}}
    for name, comm in both.items():
        res["collectives"][name] = _ops(comm) | group_ops(comm)
    res["collectives"]["mpi"] |= strided_ops(both["mpi"])
    for algo in spmm.ALGORITHMS:
        for name, comm in both.items():
            comm.ledger.reset()
            res["training"][(algo, name)] = training(comm, algo)
    everyone = base.all_gather_object(res)
    if base.rank == 0:
        with open(out, "wb") as f:
            pickle.dump(everyone, f)


def die(base: Comm) -> None:
    comm = comms(base)["mpi"]
    t = Trainer(TrainConfig(algo="1d-halo", hidden=8, epochs=1000, eval_every=0), comm,
                graph=small_graph(n=200, seed=1))
    for epoch in range(1000):
        if epoch == 3 and comm.rank == 1:
            os._exit(3)
        t.step(epoch)


def stall(base: Comm) -> None:
    """Rank 0 waits on a broadcast from rank 1, which never makes it: the transport's watchdog must end rank 0 after
    its timeout (3 s) with one line, not leave it waiting."""
    comm = Comm(base.rank, base.world_size, MPITransport(timeout_s=3.0))
    if comm.rank == 1:
        time.sleep(12)
        os._exit(0)
    comm.broadcast_async(torch.zeros(4), 1).wait()


def stall_in_group(base: Comm) -> None:
    """As `stall`, in a group {0, 1} whose first use is rank 0's non-blocking broadcast: the creation of its
    communicator waits for rank 1, and the watchdog must see that wait too."""
    comm = Comm(base.rank, base.world_size, MPITransport(timeout_s=3.0))
    pair = comm.group("pair", [0, 1])
    if comm.rank == 1:
        time.sleep(12)
        os._exit(0)
    if comm.rank == 0:
        comm.broadcast_async(torch.zeros(4), 1, pair).wait()


def raise_in_cli() -> int:
    """``spgnn train`` where rank 1's epoch 3 raises an ordinary exception: cli.main must end the job."""
    from spgnn import cli

    step = Trainer.step

    def failing_step(self, epoch):
        if epoch == 3 and self.comm.rank == 1:
            raise ValueError("injected failure")
        return step(self, epoch)

    Trainer.step = failing_step
    return cli.main(["train", "--transport", "mpi", "--epochs", "1000", "--quiet", "--eval-every", "0"])


def main(mode: str, out: str) -> None:
    if mode == "raise":
        sys.exit(raise_in_cli())
    base = launch.init(transport="torch", timeout_s=600)      # torch.distributed for the grids' DeviceMesh
    assert launch.detect().kind == "mpirun", "run me under mpirun"
    if mode == "compare":
        compare(base, out)
    elif mode == "die":
        die(base)
    elif mode == "stall":
        stall(base)
    elif mode == "group":
        stall_in_group(base)
    launch.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:3])
