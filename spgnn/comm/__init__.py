"""Communication: `Comm` (every collective, counted in a `Ledger`) over torch.distributed or MPI (`mpi`), how
processes are launched (`launch`), the process grid (`grid`), differentiable collectives (`autograd`), the
halo exchange plan (`halo`), sparse blocks between ranks (`exchange`), agreement on errors (`agree`) and the
α-β calibration of the collectives (`calibrate`)."""

from .comm import Comm, Group, Ledger

__all__ = ["Comm", "Group", "Ledger"]
