"""The launchers the tests start jobs with, found beside this interpreter (a virtual environment's bin/, also
when it is not activated) before PATH, and an environment in which they find their own helpers."""

import os
import shutil
import sys

BIN = os.path.dirname(sys.executable)


def find(name: str) -> str | None:
    """`name` beside the interpreter, else on PATH, else None."""
    beside = os.path.join(BIN, name)
    return beside if os.access(beside, os.X_OK) else shutil.which(name)


MPIRUN, TORCHRUN = find("mpirun"), find("torchrun")
MPIRUN_ARGS = [MPIRUN or "mpirun", "--allow-run-as-root"]


def env(**extra) -> dict:
    """os.environ with the interpreter's bin/ first on PATH (mpirun starts its daemons from there)."""
    return dict(os.environ, PATH=os.pathsep.join([BIN, os.environ.get("PATH", "")]), **extra)
