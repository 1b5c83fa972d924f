"""The --nprocs supervisor's handling of its ranks (`spgnn.comm.launch`), on plain processes that stand for them, and
`spgnn.run`'s of the failures of its local ranks."""

import os
import signal
import subprocess
import sys
import time

import pytest

from spgnn.comm import launch
from spgnn.train import interrupt
from tests.launchers import state

# a rank that has taken SIGTERM over (as `spgnn.train.interrupt.handled` does): it ends with code 7 when it acts on it
HANDLES_SIGTERM = """import signal, sys
signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))
print("ready", flush=True)
while True:
    signal.pause()
"""


def test_a_stopped_rank_acts_on_the_sigterm_that_ends_it():
    """A rank stopped (SIGSTOP: a stall, Ctrl-Z) holds a SIGTERM it handles until it is continued: the supervisor
    waited out its grace, then killed it (SIGKILL), where it could have ended as it does on SIGTERM."""
    rank = subprocess.Popen([sys.executable, "-S", "-c", HANDLES_SIGTERM], stdout=subprocess.PIPE, text=True)
    try:
        assert rank.stdout.readline() == "ready\n"
        os.kill(rank.pid, signal.SIGSTOP)
        while state(rank.pid) != "T":
            time.sleep(0.01)
        launch._end([rank], grace_s=60.0)
        assert rank.returncode == 7
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()


def test_a_ctrl_c_pressed_twice_at_once_is_one_request(monkeypatch):
    """The ranks take a SIGINT within `interrupt.AGAIN_S` of the first for the same request and finish their epoch;
    the supervisor took it for a second Ctrl-C and killed them `grace_s` later, losing the epoch, its checkpoint
    and the report. A SIGINT later than that is a second one to both."""
    now = [100.0]
    monkeypatch.setattr(launch.time, "monotonic", lambda: now[0])
    stops = launch._Stops([], stop_s=300.0, grace_s=5.0)
    stops.heard(signal.SIGINT, None)
    now[0] += interrupt.AGAIN_S / 2
    stops.heard(signal.SIGINT, None)
    assert stops.signals == [signal.SIGINT] and stops.until == 100.0 + 300.0
    now[0] += interrupt.AGAIN_S
    stops.heard(signal.SIGINT, None)
    assert stops.signals == [signal.SIGINT] * 2 and stops.until == now[0] + 5.0


class _Gathers:
    """A comm whose all-gathers return `world` (what each rank sent) and are counted."""

    def __init__(self, world):
        self.world, self.calls, self.sent = world, 0, None

    def all_gather_object(self, obj):
        self.calls, self.sent = self.calls + 1, obj
        return self.world


def test_the_cores_a_machine_has_and_the_ranks_sharing_them_come_of_one_gather(monkeypatch):
    """`spgnn calibrate` asked for the machine's cores and for the ranks sharing this one's, each with an all-gather
    of its own; both now read one `peers` list. Here: this rank, one on the same cores, one on other cores of this
    machine, one on the same cores of another machine."""
    monkeypatch.setattr(launch, "_machine", lambda: ("here", 1))
    monkeypatch.setattr(launch, "_affinity", lambda: {0, 1})
    world = [(("here", 1), (0, 1)), (("here", 1), (0, 1)), (("here", 1), (2, 3, 4)), (("there", 1), (0, 1))]
    comm = _Gathers(world)
    gathered = launch.peers(comm)
    assert comm.calls == 1 and gathered == world and comm.sent == (("here", 1), (0, 1))
    assert launch.machine_cores(comm, gathered) == 5 and launch.sharing(comm, gathered) == 2 and comm.calls == 1
    assert launch.machine_cores(comm) == 5 and launch.sharing(comm) == 2 and comm.calls == 3   # alone: a gather each


# a program of one's own whose rank 1 fails with an SpgnnError (`error`), rank 0 returning its result
FAILS_ON_RANK_1 = """import sys
import spgnn
from spgnn.comm.launch import JoinError


def main(comm, error):
    if comm.rank == 1:
        raise {"SpgnnError": spgnn.SpgnnError, "JoinError": JoinError}[error]("the input is bad: fix it")
    return comm.rank


if __name__ == "__main__":
    try:
        spgnn.run(main, sys.argv[1], nprocs=2, timeout=60)
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
"""


@pytest.mark.parametrize("error", ["SpgnnError", "JoinError"])
def test_a_ranks_spgnn_error_in_run_is_one_line(error, tmp_path):
    """`spgnn.run(main, nprocs=2)` whose rank 1 raised an SpgnnError: rank 0, done, printed a traceback of its
    leaving (the barrier its failed peer never reached) above the error's one line; and an SpgnnError of a subclass
    (JoinError) came as a RuntimeError holding the rank's traceback, where SpgnnError's one line was due."""
    script = tmp_path / "program.py"
    script.write_text(FAILS_ON_RANK_1)
    done = subprocess.run([sys.executable, str(script), error], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.stdout == "SpgnnError: rank 1: the input is bad: fix it\n", done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
