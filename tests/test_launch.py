"""The --nprocs supervisor's handling of its ranks (`spgnn.comm.launch`), on plain processes that stand for them."""

import os
import signal
import subprocess
import sys
import time

from spgnn.comm import launch

# a rank that has taken SIGTERM over (as `spgnn.train.interrupt.handled` does): it ends with code 7 when it acts on it
HANDLES_SIGTERM = """import signal, sys
signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))
print("ready", flush=True)
while True:
    signal.pause()
"""


def state(pid: int) -> str:
    """The process's state letter (R, S, T for stopped, Z...), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


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
