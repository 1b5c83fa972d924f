"""Every command the README shows runs, so that none can rot. Each line of its ```bash blocks (comments dropped,
`&&` chains split) is one case. What is changed to keep the whole module near a minute on 2 cores, and why:
- `spgnn train` and `python algorithms/...` get `--epochs 1` (the README's runs train the default 200 or 100),
  and every launch starts 2 processes instead of the README's 4 (the same code paths at half the start-up);
- `mpirun` gets `--allow-run-as-root --oversubscribe` (CI runs as root, with fewer cores than ranks);
- `srun` is a stand-in on PATH that starts the tasks on this machine with the environment Slurm gives them;
- `torchrun` gets `--master-port` of a free port (other jobs on the machine may hold its default);
- the documentation build runs where Sphinx is installed (`.[docs]`, which `.ci/run` installs), else skips;
- `pip install ...` and `python -m pytest -q` are not run here (a test cannot reinstall the package or run the
  suite it belongs to): they must be what `.ci/run` runs.
The commands run in a temporary folder that links to the repository's `algorithms/` and `docs/`, so that what
they write (reports, the built site) lands there."""

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = (ROOT / ".ci" / "run").read_text()


def _commands(text: str) -> list[str]:
    """The README's shell commands, each once: a line of a ```bash block, comments dropped, split at `&&`."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                out += [c.strip() for c in line.split("&&")]
    return list(dict.fromkeys(out))


COMMANDS = _commands((ROOT / "README.md").read_text())
CI_INSTALLS = [" ".join(a for a in shlex.split(c) if a != "-q")
               for c in re.findall(r"^python -m pip install (.*?)\s*(?:#.*)?$", CI, re.M)]

SRUN = '''#!{python}
"""srun -n P CMD...: P tasks of one job step on this machine, each with the environment Slurm gives it."""
import os, subprocess, sys
P, cmd = int(sys.argv[2]), sys.argv[3:]
assert sys.argv[1] == "-n", sys.argv
env = dict(os.environ, SLURM_STEP_ID="0", SLURM_NTASKS=str(P), SLURM_NODEID="0", SLURM_STEP_TASKS_PER_NODE=str(P),
           SLURM_STEP_NODELIST="localhost", SLURM_JOB_ID="1")
procs = [subprocess.Popen(cmd, env=env | {{"SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)}}) for r in range(P)]
sys.exit(max(p.wait() for p in procs))
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# the flag giving the number of processes, per launcher
LAUNCH_COUNTS = {"mpirun": "-np", "srun": "-n", "torchrun": "--nproc-per-node"}


def _as_run(cmd: str, bin_dir: Path) -> tuple[list[str], dict]:
    """The command as this test runs it (the substitutions of the module docstring), and the environment it adds."""
    argv, env = shlex.split(cmd), {}
    trains = "train" in argv and "spgnn" in argv[:argv.index("train")] or any(a.startswith("algorithms/") for a in argv)
    if trains:
        argv += ["--epochs", "1"]
        for k, a in enumerate(argv[:-1]):
            if a in ("--nprocs", LAUNCH_COUNTS.get(argv[0])):
                argv[k + 1] = "2"
    if argv[0] == "mpirun":
        argv[1:1] = ["--allow-run-as-root", "--oversubscribe"]
    if argv[0] == "torchrun":
        argv[1:1] = ["--master-port", str(_free_port())]
    if argv[0] == "srun":
        (bin_dir / "srun").write_text(SRUN.format(python=sys.executable))
        (bin_dir / "srun").chmod(0o755)
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    if argv[0] == "python":
        argv[0] = sys.executable
    return argv, env


@pytest.mark.parametrize("cmd", COMMANDS)
def test_readme_command_runs(cmd, tmp_path, monkeypatch):
    argv = shlex.split(cmd)
    if argv[:2] == ["pip", "install"]:
        args = " ".join(argv[2:])
        assert args in CI_INSTALLS or (args == "-e ." and any(a.startswith('-e .[') for a in CI_INSTALLS)), \
            f"README installs {args!r}; .ci/run installs {CI_INSTALLS}"
        return
    if argv[:3] == ["python", "-m", "pytest"]:
        assert re.search(rf"^{re.escape(cmd)}$", CI, re.M), f"README runs {cmd!r}, which .ci/run does not"
        return
    if argv[:3] == ["python", "-m", "sphinx"]:
        pytest.importorskip("sphinx", reason="the docs build needs pip install -e '.[docs]'")
        pytest.importorskip("myst_parser", reason="the docs build needs pip install -e '.[docs]'")
    for tool in ("mpirun", "torchrun"):
        if argv[0] == tool and not shutil.which(tool):
            pytest.skip(f"{tool} absent")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("algorithms", "docs"):
        (tmp_path / name).symlink_to(ROOT / name)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    run, env = _as_run(cmd, bin_dir)
    done = subprocess.run(run, cwd=tmp_path, env=os.environ | env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, \
        f"{shlex.join(run)}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
