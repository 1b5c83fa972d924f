"""Stopping a run on SIGINT or SIGTERM (Ctrl-C; a job cancelled or out of time under Slurm, torchrun or --nprocs)
without losing what it computed.

Once the epochs begin (`graceful`), the first signal only asks for a stop (`requested`): the epoch under way finishes,
and at each epoch boundary the ranks agree whether any of them was asked (`agreed`: a signal may reach only some ranks,
or reach them at different moments), so that all stop after the same epoch; the run then ends as a finished one does,
its report marked. Outside the epochs (reading, partitioning, set-up), where no epoch's work would be kept, a signal
stops the command at once (`Interrupted`). Once a stop was asked, a second SIGINT (Ctrl-C again, a second or more after
the first) stops it at once; SIGTERM again does not: launchers deliver one request more than once (Slurm signals every
process of a job, and an --nprocs supervisor passes its own signal on besides) and follow it with SIGKILL when they will
wait no longer. Once the command is leaving, a SIGINT ends the process at once and silently (no traceback from an atexit
handler), and SIGTERM is ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import torch

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A signal that stops the command at once: `signum` the signal, `code` the exit status (128 + signum)."""

    def __init__(self, signum: int, what: str):
        super().__init__(what)
        self.signum = signum

    @property
    def code(self) -> int:
        return 128 + self.signum


_state = {"handled": False, "graceful": False, "leaving": False, "request": None, "at": 0.0, "say": False}
AGAIN_S = 1.0       # a SIGINT this soon after the first request is that request again (sent to a rank and its
                    # supervisor both, which passes its own on: Slurm's scancel --signal=INT, pkill -INT)


def _name(signum: int) -> str:
    return signal.Signals(signum).name


def _on_signal(signum, frame):
    state = _state
    if state["leaving"]:                        # its exit is under way: Ctrl-C again ends it now, silently
        if signum == signal.SIGINT:
            os._exit(128 + signum)
        return
    if state["request"] is not None:
        if signum != signal.SIGINT or time.monotonic() - state["at"] < AGAIN_S:    # the same request, again
            return
        state["leaving"] = True
        raise Interrupted(signum, f"stopped at once by a second {_name(signum)}: what the run had not written yet is "
                                  "lost (its last checkpoint, if any, is kept)")
    if state["graceful"]:
        state["request"], state["at"] = signum, time.monotonic()
        if state["say"] and os.isatty(2):       # a person at a terminal sees that it was heard
            again = "; Ctrl-C again stops it at once" if signum == signal.SIGINT else ""
            os.write(2, f"spgnn: {_name(signum)}: the run stops once the epoch under way ends{again}\n".encode())
        return
    state["leaving"] = True
    raise Interrupted(signum, f"interrupted by {_name(signum)}")


@contextlib.contextmanager
def handled(say: bool = False, keep: bool = False):
    """Within the block (a command), SIGINT and SIGTERM are handled as the module describes (where signal handlers
    can be set: in the main thread); `say`: this process tells a terminal that it heard a stop asked for (rank 0).
    Signals that an --nprocs supervisor kept blocked until now (`spgnn.comm.launch.spawn`) arrive here: as an
    `Interrupted` raised on entering, which the caller catches around the block. After the block the handlers before
    it are back, or, with `keep` (the process ends with the block), the command is leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    _state.update(handled=True, graceful=False, leaving=False, request=None, say=say)
    try:
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        yield
    finally:
        if keep:
            _state["leaving"] = True
        else:
            _state.update(handled=False, graceful=False, leaving=False, request=None)
            for s, handler in before.items():
                signal.signal(s, handler)


def graceful() -> None:
    """From now on (a run's epochs begin) until the command ends, the first signal asks for a stop at the next epoch
    boundary instead of stopping the command: one that comes after the last epoch lets the finished run end as it
    is (its final evaluation, report and the ranks' leaving together)."""
    _state["graceful"] = True


def requested() -> str | None:
    """The signal (its name) that asked this process to stop, None where none did."""
    return _name(_state["request"]) if _state["request"] is not None else None


def agreed(comm) -> str | None:
    """The signal (its name) that asked some rank of `comm` to stop, the same on every rank (SIGINT where ranks were
    asked by both); None where none was. Every rank calls it at the same point: one all-reduce of two numbers
    straight through the transport, outside the ledger, which counts the run's own bytes (bookkeeping, as the
    objects `spgnn.comm.agree` gathers): 0.4 to 0.6 ms at P = 2 on 2 cores, where an all-gather of the name takes
    2 ms. Where no command handles the signals (a program of one's own training through the library: the same on
    every rank), there is nothing to agree on, and no all-reduce."""
    if comm.world_size == 1 or not _state["handled"]:
        return requested()
    asked = torch.tensor([float(_state["request"] == s) for s in SIGNALS], dtype=torch.float64)
    comm.transport.all_reduce(asked, comm.world)
    return next((_name(s) for s, n in zip(SIGNALS, asked.tolist()) if n), None)


__all__ = ["Interrupted", "agreed", "graceful", "handled", "requested"]
