"""A killed job resumes to the same weights: under mpirun and under --nprocs, with P = 4, one rank is killed
(SIGKILL) mid-epoch; the job ends with a non-zero code within 60 s, each surviving rank that reports says so
in one line, and ``--resume`` from the last checkpoint finishes with the weights of an uninterrupted run. A
stalled rank (SIGSTOP: alive, silent) ends the job after --timeout on both transports."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from spgnn import cli
from tests.launchers import MPI4PY, MPIRUN, MPIRUN_ARGS, env

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 40
TRAIN = ["-m", "spgnn", "train", "--dataset", "sbm:2000:6", "--hidden", "32", "--epochs", str(EPOCHS),
         "--checkpoint-every", "2", "--eval-every", "0", "--transport", "torch", "--quiet"]
RANK_VARS = {"mpirun": "OMPI_COMM_WORLD_RANK", "nprocs": "RANK"}


def command(how: str, *args: str) -> list[str]:
    if how == "mpirun":
        if MPIRUN is None:
            pytest.skip(f"mpirun is neither beside {sys.executable} nor on PATH (pip install 'spgnn[mpi]')")
        return [*MPIRUN_ARGS, "--oversubscribe", "-np", "4", sys.executable, *TRAIN, *args]
    return [sys.executable, *TRAIN, "--nprocs", "4", *args]


def rank_pid(marker: str, var: str, rank: int) -> int | None:
    """The pid of the Python process whose command line holds `marker` and whose environment sets var=rank."""
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            env = (d / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if marker.encode() in cmd and b"spgnn" in cmd and f"{var}={rank}".encode() in env and b"python" in cmd[0]:
            return int(d.name)
    return None


def weights(folder: Path) -> dict:
    return torch.load(folder / "checkpoint.pt", weights_only=True)["model"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The weights of the run uninterrupted, its --nprocs supervisor `cli.main` called here (a process of its own would
    only import torch once more)."""
    folder = tmp_path_factory.mktemp("whole")
    assert cli.main([*TRAIN[2:], "--nprocs", "4", "--checkpoint", str(folder)]) == 0
    return weights(folder)


@pytest.mark.parametrize("how", ["mpirun", "nprocs"])
def test_killed_rank_ends_the_job_and_resume_finishes_it(how, tmp_path, uninterrupted):
    folder = tmp_path / "ckpt"
    job = subprocess.Popen(command(how, "--checkpoint", str(folder)), cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (folder / "checkpoint.pt").exists():                    # two epochs done
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-2000:]
        time.sleep(0.1)
    pid = rank_pid(str(folder), RANK_VARS[how], 2)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    _, err = job.communicate(timeout=120)
    assert job.returncode != 0 and time.monotonic() - t0 < 60, err[-2000:]
    reports = set(re.findall(r"spgnn: error: rank (\d+):", err))     # mpirun may run its own text into a line
    # --nprocs: every survivor says why in one line; mpirun ends the survivors itself, some maybe before they do
    assert reports == {"0", "1", "3"} if how == "nprocs" else reports <= {"0", "1", "3"} and reports, err[-2000:]
    assert how != "nprocs" or "spgnn: error: rank 2 was killed by signal 9 (SIGKILL)" in err, err[-2000:]
    assert 0 < job.returncode < 128 or job.returncode == 128 + signal.SIGKILL     # a shell's code (not 256 − 9)
    done = torch.load(folder / "checkpoint.pt", weights_only=True)["epoch"]
    assert done < EPOCHS - 1                                          # killed before the end
    resume = ["--resume", str(folder), "--checkpoint", str(folder)]
    if how == "nprocs":                     # the supervisor here, as the fixture's
        assert cli.main([*TRAIN[2:], "--nprocs", "4", *resume]) == 0
    else:
        subprocess.run(command(how, *resume), cwd=ROOT, env=env(), check=True, timeout=600, capture_output=True)
    resumed = weights(folder)
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)


def mpirun_with_mpi4py() -> str:
    """mpirun beside this interpreter (a venv that is not activated) or on PATH, once mpi4py imports; else skip
    naming what is missing."""
    mpirun = MPIRUN
    if mpirun is None:
        pytest.skip(f"mpirun is neither beside {sys.executable} nor on PATH (pip install 'spgnn[mpi]')")
    if not MPI4PY:
        pytest.skip("mpi4py is not installed (pip install 'spgnn[mpi]')")
    return mpirun


@pytest.mark.parametrize("transport, algo, P", [("mpi", "1d-halo", 2), ("torch", "1d-halo", 2), ("torch", "2d", 4)])
def test_stalled_rank_ends_the_job_after_the_timeout(transport, algo, P, tmp_path):
    """2d at P = 4 communicates in groups smaller than the world, whose collectives waited torch's 30 minutes."""
    folder = tmp_path / "ckpt"
    train = ["-m", "spgnn", "train", "--dataset", "sbm:400:4", "--hidden", "8", "--epochs", "1000000", "--algo", algo,
             "--eval-every", "0", "--quiet", "--timeout", "5", "--checkpoint", str(folder), "--checkpoint-every", "1"]
    if transport == "mpi":
        cmd = [mpirun_with_mpi4py(), "--allow-run-as-root", "--oversubscribe", "-np", str(P), sys.executable, *train,
               "--transport", "mpi"]
    else:
        cmd = [sys.executable, *train, "--nprocs", str(P), "--transport", "torch"]
    job = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        while not (folder / "checkpoint.pt").exists():                # training is under way
            assert job.poll() is None, job.communicate()[1][-2000:]
            time.sleep(0.1)
        pid = rank_pid(str(folder), RANK_VARS["mpirun" if transport == "mpi" else "nprocs"], 1)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        _, err = job.communicate(timeout=300)                         # a hang fails here
        assert job.returncode != 0
        lines = re.findall(r"spgnn: error: .*", err)                 # anywhere in a line mpirun may have joined
        assert lines and all(re.match(r"spgnn: error: rank [0-9]+: communication failed", x) for x in lines), \
            err[-2000:]
        if transport == "mpi":
            assert "waited beyond --timeout 5 s" in lines[0]
    finally:
        job.kill()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _fill_cache(cache, barrier, seeds, delay):
    """What a run does with the cache: partition a small graph into `cache` (taking `delay` seconds), then read
    the folder's parts for a second, as its ranks would; under each seed. The other process does the same
    with another delay, so that it writes the same folder while this one reads it."""
    from spgnn.partition.partition import make_partition
    from spgnn.partition.partitioned import PartitionedDataset, cached
    from tests.graphs import small_graph

    g = small_graph(n=57, seed=2)

    def slow(seed):
        time.sleep(delay)
        return make_partition("random", g.adj, 3, seed=seed)

    barrier.wait()
    folders = []
    for s in seeds:
        folders.append(str(cached(g, lambda s=s: slow(s), "random", {}, s, 3, cache)))
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            ds = PartitionedDataset(folders[-1])
            for p in range(3):
                ds.share(p)
    return folders


def test_two_runs_filling_one_partition_cache_at_once(tmp_path):
    import multiprocessing

    import numpy as np

    from spgnn.partition.partition import make_partition
    from spgnn.partition.partitioned import InMemoryParts, PartitionedDataset, write_parts
    from tests.graphs import small_graph

    ctx = multiprocessing.get_context("spawn")
    barrier, seeds = ctx.Manager().Barrier(2), [0, 1]
    with ctx.Pool(2) as pool:
        folders = pool.starmap(_fill_cache, [(str(tmp_path), barrier, seeds, delay) for delay in (0.2, 0.6)])
    assert folders[0] == folders[1] and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        Path(f).name for f in folders[0])                                 # no temporary folder left behind
    g = small_graph(n=57, seed=2)
    for seed, folder in zip(seeds, folders[0]):
        memory = InMemoryParts(g, make_partition("random", g.adj, 3, seed=seed))
        disk = PartitionedDataset(folder)
        for p in range(3):
            a, b = memory.share(p), disk.share(p)
            for name in ("indptr", "indices", "data", "degree", "x", "y", "node_ids"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), (seed, p, name)
    # the run that finishes second keeps the first one's folder as it is
    meta = Path(folders[0][0]) / "meta.json"
    before = meta.stat().st_mtime_ns
    write_parts(folders[0][0], InMemoryParts(g, make_partition("random", g.adj, 3, seed=0)), overwrite=False)
    assert meta.stat().st_mtime_ns == before and len(list(tmp_path.iterdir())) == len(seeds)


@pytest.mark.parametrize("busy", [1, 2])
def test_a_job_that_could_not_form_is_formed_again(busy, monkeypatch, capfd):
    """`--nprocs`: the rendezvous port taken by another program after it was picked (here a socket that listens and
    never answers) makes rank 0 fail to join, before anything has run. The job is started again on a fresh port,
    silently; when every attempt fails, each rank that could tell says why in one line and the code is 2."""
    from spgnn.comm import launch

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        ports, real = [taken.getsockname()[1]] * busy, launch.free_port
        monkeypatch.setattr(launch, "free_port", lambda: ports.pop(0) if ports else real())
        code = launch.spawn(["train", "--epochs", "2", "--hidden", "8", "--quiet", "--timeout", "30"], 2, grace_s=1.0)
    err = [x for x in capfd.readouterr().err.splitlines() if x.strip()]
    if busy < launch.JOIN_ATTEMPTS:
        assert code == 0 and err == [], err
    else:
        assert code == 2 and len(err) == 1 and "rank 0 could not join the job" in err[0], err
        assert "address already in use" in err[0], err


def test_only_a_join_refused_at_once_is_tried_again():
    """A join refused at once (`quick`) is worth another attempt; one that failed only after most of --timeout (a
    rendezvous that waited for its peers) is reported at once, so that a run never waits out --timeout twice."""
    from spgnn.comm import launch

    def refused():
        raise RuntimeError("address already in use")

    def waited():
        time.sleep(2.2)
        raise RuntimeError("timed out waiting for the other processes")

    for connect, quick in ((refused, True), (waited, False)):
        with pytest.raises(launch.JoinError, match="could not join the job at 127.0.0.1:1") as e:
            launch.join(connect, 0, "127.0.0.1:1", timeout_s=4.0)
        assert e.value.quick is quick, connect.__name__


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


CALLER = """
import os, sys, time
import spgnn

def main(comm, folder):
    with open(os.path.join(folder, f"rank{comm.rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)

if __name__ == "__main__":
    spgnn.run(main, sys.argv[1], nprocs=2)
"""


@pytest.mark.parametrize("how", ["nprocs", "run"])
def test_the_ranks_of_a_killed_parent_end_too(how, tmp_path):
    """SIGKILL of the --nprocs parent, or of the program calling spgnn.run (which cannot stop their ranks), left the
    ranks working as orphans: a run's ranks are the fork server's children, which outlives its caller."""
    marker = str(tmp_path / "report.json")
    if how == "nprocs":
        cmd = [sys.executable, *TRAIN[:7], "--epochs", "100000", "--eval-every", "0", "--quiet", "--nprocs", "2",
               "--output", marker]
    else:
        (tmp_path / "caller.py").write_text(CALLER)
        cmd = [sys.executable, str(tmp_path / "caller.py"), str(tmp_path)]
    job = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, pids = time.monotonic() + 120, [None, None]
    while None in pids:
        assert job.poll() is None and time.monotonic() < deadline
        pids = [rank_pid(marker, "RANK", r) if how == "nprocs" else
                int(f.read_text() or 0) or None if (f := tmp_path / f"rank{r}.pid").exists() else None
                for r in range(2)]
        time.sleep(0.2)
    job.kill()
    job.wait()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in pids:
        if _alive(p):
            os.kill(p, signal.SIGKILL)
    assert not any(_alive(p) for p in pids), f"a rank outlived its parent ({how})"


def test_a_reader_that_goes_away_does_not_end_the_run(tmp_path):
    """spgnn train … | head -1 ended the run in a BrokenPipeError at the next epoch line, its report never written."""
    out = tmp_path / "report.json"
    job = subprocess.Popen([sys.executable, "-m", "spgnn", "train", "--dataset", "sbm:500:4", "--hidden", "8",
                            "--epochs", "30", "--output", str(out)], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    job.stdout.readline()
    job.stdout.close()                                   # as head -1 does
    err = job.stderr.read().decode()
    assert job.wait(timeout=300) == 0, err[-2000:]
    assert "Traceback" not in err and len(json.loads(out.read_text())["epochs"]) == 30


def test_an_ascii_stdout_takes_the_greek_letters_as_escapes(tmp_path):
    """With an ASCII stdout (PYTHONIOENCODING=ascii, a C locale without UTF-8 mode), --help, which prints α, ended
    in UnicodeEncodeError."""
    done = subprocess.run([sys.executable, "-m", "spgnn", "cost", "--help"], cwd=ROOT, capture_output=True,
                          env=env() | {"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
    assert b"\\u03b1" in done.stdout and max(done.stdout) < 128


def test_a_rank_stalled_before_mpi_starts_does_not_hang_the_job(tmp_path):
    """A rank stalled before MPI's set-up (in its imports, say) left the others waiting in MPI_Init, which holds
    the GIL and knows no timeout, for ever: now they give up after --timeout and mpirun ends the job."""
    if MPIRUN is None:
        pytest.skip(f"mpirun is neither beside {sys.executable} nor on PATH (pip install 'spgnn[mpi]')")
    stall = ("import os, sys, time\nif os.environ.get('OMPI_COMM_WORLD_RANK') == '1':\n    time.sleep(600)\n"
             "from spgnn.cli import main\nsys.exit(main())")
    job = subprocess.run([*MPIRUN_ARGS, "--oversubscribe", "-np", "2", sys.executable, "-c", stall, "train",
                          "--dataset", "sbm:200:4", "--epochs", "2", "--timeout", "5", "--output",
                          str(tmp_path / "r.json")], cwd=ROOT, env=env(), capture_output=True, timeout=300)
    err = job.stderr.decode()
    assert job.returncode != 0 and "not every process of the mpirun job reached MPI's set-up within --timeout 5 s" \
        in err, err[-2000:]


@pytest.mark.parametrize("error, said", [("ValueError", "ValueError: the width of W is wrong"),
                                         ("spgnn.SpgnnError", "spgnn: error: rank 1: the width of W is wrong\n")])
def test_a_programs_error_under_mpirun_is_said(error, said, tmp_path):
    """A program's own failure in `spgnn.run` under mpirun: MPI_Abort, which ends the job, ended the process before
    Python printed the exception, so nothing said what failed. An SpgnnError (bad input) is one line."""
    if MPIRUN is None or not MPI4PY:
        pytest.skip(f"mpirun and mpi4py are needed beside {sys.executable} (pip install 'spgnn[mpi]')")
    program = tmp_path / "program.py"
    program.write_text(f"import spgnn\n\ndef main(comm):\n    if comm.rank == 1:\n"
                       f"        raise {error}('the width of W is wrong')\n    comm.all_gather_object(0)\n\n"
                       "if __name__ == '__main__':\n    spgnn.run(main, timeout=60)\n")
    job = subprocess.run([*MPIRUN_ARGS, "--oversubscribe", "-np", "2", sys.executable, str(program)], cwd=ROOT,
                         env=env(), capture_output=True, text=True, timeout=300)
    assert job.returncode != 0 and said in job.stderr, job.stderr[-2000:]
    assert ("Traceback" in job.stderr) == (error == "ValueError"), job.stderr[-2000:]


def test_mpirun_without_mpi4py_is_one_line():
    """detect() reads mpirun's rank from its variables, so mpi4py is first imported at the join: a missing mpi4py
    was a ModuleNotFoundError traceback there."""
    code = ("import sys; sys.modules['mpi4py'] = None\nfrom spgnn.cli import main\n"
            "sys.exit(main(['train', '--dataset', 'sbm:200:4', '--epochs', '1', '--timeout', '5']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="2"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "launched by an MPI launcher but mpi4py is not importable: pip install 'spgnn[mpi]'" in done.stderr
