"""The launchers the tests start jobs with, found beside this interpreter (a virtual environment's bin/, also
when it is not activated) before PATH, and an environment in which they find their own helpers."""

import os
import shutil
import sys
from importlib.util import find_spec

BIN = os.path.dirname(sys.executable)


def find(name: str) -> str | None:
    """`name` beside the interpreter, else on PATH, else None."""
    beside = os.path.join(BIN, name)
    return beside if os.access(beside, os.X_OK) else shutil.which(name)


MPIRUN, TORCHRUN = find("mpirun"), find("torchrun")
MPIRUN_ARGS = [MPIRUN or "mpirun", "--allow-run-as-root"]
# found, not imported: importing mpi4py.MPI starts MPI in the test process, and Open MPI 4's singleton start leaves
# OMPI_COMM_WORLD_SIZE=1 in the environment of every command a test starts after it (`spgnn train --nprocs 2`
# then reads as a launch by mpirun of one process)
MPI4PY = find_spec("mpi4py") is not None


def env(**extra) -> dict:
    """os.environ with the interpreter's bin/ first on PATH (mpirun starts its daemons from there)."""
    return dict(os.environ, PATH=os.pathsep.join([BIN, os.environ.get("PATH", "")]), **extra)


def state(pid: int) -> str:
    """Process `pid`'s state letter from /proc (R, S, T: stopped, Z: ended, not yet waited for), X where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except OSError:
        return "X"
