"""A run that is interrupted keeps what it computed: on SIGINT (Ctrl-C) or SIGTERM (a job cancelled or out of time)
every rank finishes the epoch under way, all stop after the same one, and the run ends as a finished run of those
epochs: its report (valid JSON, marked "interrupted"), a checkpoint that --resume continues, one line, and exit
status 128 + the signal. A second SIGINT stops it at once in one line, as does a signal before the epochs; an
--nprocs supervisor passes the signal on once and kills ranks that do not stop within --timeout.

Each run is a real ``spgnn train`` process on cora; a test waits for its epoch lines (or, where it must hold a rank at
a known point, for a file the `HOOK` writes there), never for a fixed time."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from spgnn import plot
from spgnn.comm import launch
from spgnn.train import interrupt
from tests.launchers import MPI4PY, MPIRUN, MPIRUN_ARGS, env, state
from tests.test_faults import rank_pid

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["-m", "spgnn", "train", "--dataset", "cora", "--hidden", "16", "--eval-every", "2"]
EPOCHS = 100000                 # more than any test waits for: each stops its run

# Loaded by every Python process of a run (as sitecustomize, through PYTHONPATH) where SPGNN_TEST_HOLD names a
# folder: rank r holds at the start of epoch SPGNN_TEST_HOLD_AT (or in its set-up, "setup"), writes held<r> there,
# writes asked<r> once a signal asked it to stop, and goes on once the folder holds "go".
HOOK = """
import os
if os.environ.get("SPGNN_TEST_HOLD"):
    import time
    from pathlib import Path

    from spgnn.train import interrupt
    from spgnn.train.fullbatch import Trainer

    folder, at = Path(os.environ["SPGNN_TEST_HOLD"]), os.environ["SPGNN_TEST_HOLD_AT"]

    def hold(rank):
        (folder / f"held{rank}").touch()
        while not (folder / "go").exists():
            if interrupt.requested():
                (folder / f"asked{rank}").touch()
            time.sleep(0.01)

    step, build = Trainer.epoch, Trainer.build_model

    def epoch(self, e):
        if str(e) == at:
            hold(self.comm.rank)
        return step(self, e)

    def build_model(self, *args):
        if at == "setup":
            hold(self.comm.rank)
        return build(self, *args)

    Trainer.epoch, Trainer.build_model = epoch, build_model
"""


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _end_the_jobs():
    """Each job a test started is ended with it, also where the test failed or pytest was stopped (a job runs
    EPOCHS epochs, or holds, in a session of its own): SIGKILL to its session; its --nprocs ranks, in sessions of
    their own, end as their supervisor does (`spgnn.comm.launch.watch_parent`)."""
    yield
    while STARTED:
        job = STARTED.pop()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()


def start(args: list[str], tmp_path: Path, hold: str | None = None, launcher: list[str] = ()) -> subprocess.Popen:
    """``spgnn train ARGS`` (under `launcher`) in a session of its own, as a shell starts a job; `hold`: the epoch
    (or "setup") where each rank waits for the test (`HOOK`)."""
    extra = {}
    if hold is not None:
        (tmp_path / "hook").mkdir(exist_ok=True)
        (tmp_path / "hook" / "sitecustomize.py").write_text(HOOK)
        extra = {"SPGNN_TEST_HOLD": str(tmp_path), "SPGNN_TEST_HOLD_AT": hold,
                 "PYTHONPATH": os.pathsep.join([str(tmp_path / "hook"), str(ROOT)])}
    job = subprocess.Popen([*launcher, sys.executable, *TRAIN, "--epochs", str(EPOCHS), *args], cwd=ROOT,
                           env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    watch = threading.Timer(300, job.kill)                                   # a hang fails, not waits for ever
    watch.daemon = True
    watch.start()
    STARTED.append(job)
    return job


def after_epoch(job: subprocess.Popen, epoch: int) -> None:
    """Read the run's output until rank 0 has logged `epoch`."""
    for line in job.stdout:
        if re.match(rf"epoch +{epoch} ", line):
            return
    pytest.fail(f"the run ended before epoch {epoch}: {job.communicate()[1][-2000:]}")


def wait_for(job: subprocess.Popen, *files: Path) -> None:
    while not all(f.exists() for f in files):
        assert job.poll() is None, job.communicate()[1][-2000:]
        time.sleep(0.02)


def finish(job: subprocess.Popen) -> tuple[str, str]:
    out, err = job.communicate(timeout=300)
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    return out, err


def check_stopped(out: str, err: str, report: Path, signame: str, first: int, folder: Path | None = None) -> int:
    """The run stopped after an epoch k ≥ `first` as a finished run of k + 1 epochs: its report valid JSON with
    every epoch done, the final evaluation and the mark, one line naming them, a checkpoint of epoch k in
    `folder`; returns k."""
    assert report.exists(), f"no report written; the run's output ends: {out[-1500:]}\n{err[-3000:]}"
    r = json.loads(report.read_text())
    k = r["interrupted"]["epoch"]
    assert r["interrupted"] == {"signal": signame, "epoch": k} and k >= first
    assert [e["epoch"] for e in r["epochs"]] == list(range(k + 1)) and {"train_acc", "test_acc"} <= r["final"].keys()
    assert plot.mismatch(r, plot.REPORT) is None                             # spgnn plot reads it
    resume = f"continue with the same command and --resume {folder}" if folder else \
        "it cannot be continued (no --checkpoint)"
    assert re.findall(r"spgnn: .*", err) == [f"spgnn: interrupted by {signame} after epoch {k} ({k + 1} of {EPOCHS} "
                                              f"epochs done): report written to {report}; {resume}"], err[-3000:]
    assert out.rstrip().splitlines()[-1].startswith("final accuracy")
    if folder:
        assert torch.load(folder / "checkpoint.pt", weights_only=True)["epoch"] == k
    return k


def test_ctrl_c_stops_a_run_after_its_epoch_and_resume_finishes_it(tmp_path):
    report, folder = tmp_path / "r.json", tmp_path / "ckpt"
    job = start(["--output", str(report), "--checkpoint", str(folder), "--checkpoint-every", "1000"], tmp_path)
    after_epoch(job, 2)
    os.killpg(job.pid, signal.SIGINT)
    out, err = finish(job)
    assert job.returncode == 130
    k = check_stopped(out, err, report, "SIGINT", 2, folder)
    again = tmp_path / "again.json"
    done = subprocess.run([sys.executable, *TRAIN, "--epochs", str(k + 3), "--resume", str(folder), "--checkpoint",
                           str(folder), "--output", str(again)], cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    whole, cut = json.loads(again.read_text()), json.loads(report.read_text())
    assert "interrupted" not in whole and [e["epoch"] for e in whole["epochs"]] == list(range(k + 3))
    assert [e["loss"] for e in whole["epochs"][:k + 1]] == [e["loss"] for e in cut["epochs"]]


@pytest.mark.parametrize("how", ["ctrl-c", "one rank", "every process"])
def test_the_ranks_of_nprocs_agree_on_the_epoch_they_stop_after(how, tmp_path):
    """Ctrl-C reaches the supervisor, which passes it on to each rank once; SIGTERM to rank 1 alone reaches no
    other process: rank 0 learns of it at the epoch boundary. A SIGINT sent to the supervisor and to each rank
    (Slurm's scancel --signal=INT, pkill -INT) reaches each rank twice, once passed on: one request, not a second
    Ctrl-C that would stop the run at once and lose its report."""
    report, folder = tmp_path / "r.json", tmp_path / "ckpt"
    job = start(["--nprocs", "2", "--output", str(report), "--checkpoint", str(folder)], tmp_path)
    after_epoch(job, 2)
    if how == "ctrl-c":
        os.killpg(job.pid, signal.SIGINT)
    elif how == "one rank":
        os.kill(rank_pid(str(report), "RANK", 1), signal.SIGTERM)
    else:
        for pid in [job.pid] + [rank_pid(str(report), "RANK", r) for r in (0, 1)]:
            os.kill(pid, signal.SIGINT)
    out, err = finish(job)
    signame = "SIGTERM" if how == "one rank" else "SIGINT"
    assert job.returncode == 128 + signal.Signals[signame]
    check_stopped(out, err, report, signame, 2, folder)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_a_second_ctrl_c_stops_it_at_once(nprocs, tmp_path):
    report, folder = tmp_path / "r.json", tmp_path / "ckpt"
    job = start(["--nprocs", str(nprocs), "--output", str(report), "--checkpoint", str(folder),
                 "--checkpoint-every", "1"], tmp_path, hold="3")
    wait_for(job, *(tmp_path / f"held{r}" for r in range(nprocs)))          # in epoch 3, which never ends
    os.killpg(job.pid, signal.SIGINT)
    wait_for(job, *(tmp_path / f"asked{r}" for r in range(nprocs)))
    time.sleep(interrupt.AGAIN_S + 0.1)       # past the time in which a SIGINT is taken for the first one again
    os.killpg(job.pid, signal.SIGINT)
    _, err = finish(job)
    assert job.returncode == 130
    assert re.findall(r"spgnn: .*", err) == ["spgnn: error: stopped at once by a second SIGINT: what the run had not "
                                             "written yet is lost (its last checkpoint, if any, is kept)"], err[-3000:]
    assert not report.exists() and torch.load(folder / "checkpoint.pt", weights_only=True)["epoch"] == 2


def test_a_signal_before_the_epochs_stops_the_run_at_once(tmp_path):
    report = tmp_path / "r.json"
    job = start(["--output", str(report)], tmp_path, hold="setup")
    wait_for(job, tmp_path / "held0")
    os.kill(job.pid, signal.SIGTERM)
    _, err = finish(job)
    assert job.returncode == 143 and not report.exists()
    assert re.findall(r"spgnn: .*", err) == ["spgnn: error: interrupted by SIGTERM"], err[-3000:]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_passed_on_while_a_rank_starts_stops_it_in_one_line(signum, tmp_path):
    """An --nprocs rank starts with SIGINT and SIGTERM held (`spgnn.comm.launch.spawn`), so that a Ctrl-C passed on
    while it imports is not lost; it arrived as the command took the signals over, outside the command's handling of
    them: a traceback of every rank, exit status 1. Here the rank's signal is sent before it can take it."""
    with launch._blocked(interrupt.SIGNALS):                # as the supervisor starts its ranks
        job = start([], tmp_path)
    job.send_signal(signum)
    _, err = finish(job)
    assert job.returncode == 128 + signum
    assert re.findall(r"spgnn: .*", err) == [f"spgnn: error: interrupted by {signum.name}"], err[-3000:]


@pytest.mark.parametrize("then", ["fg", "kill -9"])
def test_ctrl_z_stops_the_ranks_of_nprocs_and_fg_continues_them(then, tmp_path):
    """Ctrl-Z (SIGTSTP to the job's group) stopped the supervisor alone: its ranks, in sessions of their own, went on
    training. It stops them, then itself; SIGCONT (fg) to it continues them, and the run goes on to a clean stop. A
    stopped job killed (kill -9 %1) leaves no rank stopped for ever: each is continued as its parent dies, and ends."""
    report = tmp_path / "r.json"
    job = start(["--nprocs", "2", "--output", str(report)], tmp_path)
    after_epoch(job, 2)
    ranks = [rank_pid(str(report), "RANK", r) for r in (0, 1)]
    os.killpg(job.pid, signal.SIGTSTP)
    for pid in (*ranks, job.pid):
        while state(pid) != "T":
            assert job.poll() is None, job.communicate()[1][-2000:]
            time.sleep(0.02)
    if then == "kill -9":
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        for pid in ranks:
            while state(pid) not in "ZX":
                time.sleep(0.05)
        return
    os.killpg(job.pid, signal.SIGCONT)
    for pid in ranks:
        while state(pid) == "T":
            time.sleep(0.02)
    after_epoch(job, 4)
    os.killpg(job.pid, signal.SIGINT)
    out, err = finish(job)
    assert job.returncode == 130
    check_stopped(out, err, report, "SIGINT", 4)


def test_ranks_that_do_not_stop_are_killed_after_the_timeout(tmp_path):
    """The supervisor waits --timeout seconds for its ranks to finish their epoch; here they hold in it for ever."""
    job = start(["--nprocs", "2", "--timeout", "5"], tmp_path, hold="2")
    wait_for(job, tmp_path / "held0", tmp_path / "held1")
    job.send_signal(signal.SIGTERM)                                           # the supervisor alone
    wait_for(job, tmp_path / "asked0", tmp_path / "asked1")                  # passed on
    _, err = finish(job)
    assert re.findall(r"spgnn: .*", err) == ["spgnn: error: ranks 0, 1 did not stop within 5 s of SIGTERM: killed"], \
        err[-3000:]
    assert job.returncode == 128 + signal.SIGKILL


@pytest.mark.skipif(not (MPIRUN and MPI4PY), reason="needs mpirun and mpi4py (pip install 'spgnn[mpi]')")
def test_under_mpirun_a_signal_to_one_rank_stops_them_all(tmp_path):
    """mpirun itself ends its ranks within a second of its own SIGINT or SIGTERM; a signal to a rank (as Slurm sends
    one to each) stops the job at an epoch boundary."""
    report = tmp_path / "r.json"
    job = start(["--output", str(report)], tmp_path, launcher=[*MPIRUN_ARGS, "--oversubscribe", "-np", "2"])
    after_epoch(job, 2)
    os.kill(rank_pid(str(report), "OMPI_COMM_WORLD_RANK", 1), signal.SIGTERM)
    out, err = finish(job)
    assert job.returncode != 0
    check_stopped(out, err, report, "SIGTERM", 2)
