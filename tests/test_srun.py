"""``srun -n P spgnn train``: ranks started with the environment Slurm gives the tasks of a job step (no Slurm
needed) join at the step's first host on a port derived from the job id (or at MASTER_ADDR:MASTER_PORT) and
train the same run as spawned processes."""

import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spgnn import cli
from spgnn.comm.launch import detect, run_local, slurm_first_host, slurm_rendezvous, slurm_tasks_per_node
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.train.fullbatch import Trainer

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["-m", "spgnn", "train", "--epochs", "3", "--quiet", "--algo", "1d-halo"]


def _free_port_below_40000() -> int:
    """A free port p in [20000, 40000), so that job id p − 20000 derives it."""
    for _ in range(200):
        p = random.randrange(20000, 40000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    pytest.skip("no free port in [20000, 40000)")


def _launchers(name: str) -> bool:
    """Whether environment variable `name` is one a launcher sets (torchrun, mpirun, srun, spgnn's own)."""
    return name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SPGNN_LAUNCHER") \
        or name.startswith(("MASTER_", "OMPI_", "PMI", "SLURM_", "MPI_"))


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not _launchers(k)}


def _no_launcher(monkeypatch) -> None:
    """This process's environment without a launcher's variables, as from a plain shell."""
    for k in list(os.environ):
        if _launchers(k):
            monkeypatch.delenv(k)


def _srun(tmp_path, P, extra_env) -> dict:
    base = _clean_env() | {"SLURM_STEP_ID": "0", "SLURM_NTASKS": str(P), "SLURM_NODEID": "0",
                           "SLURM_STEP_TASKS_PER_NODE": str(P), "SLURM_STEP_NODELIST": "localhost"} | extra_env
    out = tmp_path / "srun.json"
    procs = [subprocess.Popen([sys.executable, *TRAIN, "--output", str(out)], cwd=ROOT, stderr=subprocess.PIPE,
                              text=True, env=base | {"SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)})
             for r in range(P)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    return json.loads(out.read_text())


def test_srun_tasks_train_as_nprocs(tmp_path):
    port = _free_port_below_40000()
    report = _srun(tmp_path, 2, {"SLURM_JOB_ID": str(port - 20000)})          # the derived address
    assert report["world_size"] == 2 and report["transport"] == "torch"
    ref = run_local(_losses, 2)[0]                                                 # the same run, spawned
    assert [e["loss"] for e in report["epochs"]] == ref


def _losses(comm):
    cfg = TrainConfig(epochs=3, algo="1d-halo")
    return [e["loss"] for e in Trainer(cfg, comm).run(log=None)["epochs"]]


def test_slurm_environment_read(monkeypatch):
    _no_launcher(monkeypatch)
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("SLURM_NTASKS", "11")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2),3")
    launched = detect()
    assert (launched.kind, launched.rank, launched.world_size, launched.local_world_size, launched.local_rank) == \
        ("srun", 5, 11, 4, 1)
    monkeypatch.setenv("RANK", "0")                          # torchrun inside an allocation: its ranks win
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert detect().kind != "srun"
    assert slurm_tasks_per_node("4(x2),3") == [4, 4, 3]
    monkeypatch.setenv("SLURM_STEP_NODELIST", "gpu[07-09]")
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    assert slurm_rendezvous() == f"tcp://gpu07:{20000 + (23456 + 3 * 9973) % 20000}"    # step 3 of the job
    ports = set()
    for step in range(64):          # steps of one job run at once (srun ... & srun ... & wait) on their own ports
        monkeypatch.setenv("SLURM_STEP_ID", str(step))
        ports.add(slurm_rendezvous())
    assert len(ports) == 64 and "tcp://gpu07:23456" in ports
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")                          # MASTER_ADDR and MASTER_PORT win
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert slurm_rendezvous() == "tcp://10.0.0.1:29500"
    assert slurm_first_host("gpu[07-09,12],cpu3") == "gpu07" and slurm_first_host("a,b") == "a"
    assert slurm_first_host("n[3]") == "n3"


def test_a_launchers_environment_that_cannot_be_right_is_refused(monkeypatch):
    """RANK and WORLD_SIZE left from another launch under mpirun ran P separate one-process jobs racing for one
    --output; WORLD_SIZE=abc was a ValueError traceback, RANK=5 WORLD_SIZE=2 a wait of --timeout."""
    _no_launcher(monkeypatch)
    for env, needle in (({"RANK": "0", "WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
                         "RANK=0 and WORLD_SIZE=1 in the environment disagree with mpirun's OMPI_COMM_WORLD_RANK=1"),
                        ({"RANK": "0", "WORLD_SIZE": "abc"}, "environment variable WORLD_SIZE='abc' is not a whole"),
                        ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK=5 lies outside WORLD_SIZE=2"),
                        ({"SLURM_STEP_ID": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "x"}, "SLURM_NTASKS='x'")):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            with pytest.raises(SpgnnError, match=re.escape(needle)):
                detect()
    with monkeypatch.context() as m:                         # a wrapper that set them from mpirun's: agreed
        for k, v in {"RANK": "1", "WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}.items():
            m.setenv(k, v)
        assert (detect().rank, detect().world_size) == (1, 2)


def test_a_torchrun_style_launch_without_its_address_is_one_line(monkeypatch, capsys):
    """RANK and WORLD_SIZE without MASTER_ADDR was "could not join the job at 127.0.0.1:?" with advice on networks."""
    _no_launcher(monkeypatch)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert cli.main(["train", "--epochs", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "spgnn: error: rank 1 of 2 (RANK and WORLD_SIZE are set), but MASTER_ADDR is not: set MASTER_ADDR to an "
        "address of rank 0's host that every host reaches and MASTER_PORT to a free port there (torchrun sets both), "
        "or unset RANK and WORLD_SIZE to run alone"]


@pytest.mark.parametrize("left, line", [
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}, "--nprocs 2 disagrees with the 1 processes mpirun "
     "started: drop --nprocs; outside mpirun, unset what it left in the environment: OMPI_COMM_WORLD_RANK"),
    ({"RANK": "0", "WORLD_SIZE": "1"}, "--nprocs 2 disagrees with the 1 processes torchrun started: drop --nprocs; "
     "outside torchrun, unset what it left in the environment: RANK, WORLD_SIZE")])
def test_a_launchers_variables_left_in_the_environment_are_named(monkeypatch, capsys, left, line):
    """Open MPI 4 started alone (a program's `from mpi4py import MPI`) leaves OMPI_COMM_WORLD_SIZE=1 to the commands
    it runs, a shell may keep RANK and WORLD_SIZE: `spgnn train --nprocs 2` there said only "drop --nprocs", which
    cannot help outside the launcher."""
    _no_launcher(monkeypatch)
    for k, v in left.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["train", "--nprocs", "2", "--epochs", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"spgnn: error: {line}"]
