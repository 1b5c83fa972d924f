"""More than one host: two network namespaces joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24, addresses
private to them: nothing else is a target) stand for two machines, one rank on each. One training across them,
started in the torchrun and srun environments and by mpirun with a host file (its ssh replaced by a script that
enters the host's namespace, with a host name of its own), gives the loss curve of the one-host run, with no
GLOO_SOCKET_IFNAME set: spgnn picks the interface that routes to the rendezvous address. An explicit
GLOO_SOCKET_IFNAME still wins (here a wrong one, lo), and then, as for a rank that has no route to the rendezvous,
each rank fails within --timeout with one line naming the address it tried and the settings to change. A
partition cache, partitioned dataset or checkpoint folder that the second host cannot read ends the job with one
line naming the folder.

Needs root and iproute2's ``ip netns``; skipped, saying which is missing, elsewhere."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spgnn import cli
from tests import launchers

ROOT = Path(__file__).resolve().parents[1]
PORTS = itertools.count(20000 + os.getpid() % 10000)   # inside the namespaces every port is free; srun's from a job id
ADDRESSES = ("10.77.0.1", "10.77.0.2")
TRAIN = [sys.executable, "-m", "spgnn", "train", "--epochs", "3", "--eval-every", "0", "--quiet", "--timeout", "30"]


def _missing() -> str | None:
    """Why two hosts cannot be made here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2's ip (apt-get install iproute2)"
    probe = f"spgnn-probe-{os.getpid()}"
    res = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return f"ip netns add fails here: {res.stderr.strip()}" if res.returncode else None


pytestmark = pytest.mark.skipif(bool(_missing()), reason=_missing() or "")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def hosts():
    """Two namespaces with one end of a veth pair each, and a third with only loopback (no route anywhere)."""
    tag = os.getpid() % 100000
    names = [f"spgnn-{tag}-{i}" for i in range(3)]
    links = (f"sg{tag}a", f"sg{tag}b")
    try:
        for n in names:
            ip("netns", "add", n)
            ip("-n", n, "link", "set", "lo", "up")
        ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for n, link, addr in zip(names, links, ADDRESSES):
            ip("link", "set", link, "netns", n)
            ip("-n", n, "addr", "add", f"{addr}/24", "dev", link)
            ip("-n", n, "link", "set", link, "up")
        yield names
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def on_hosts(commands: list[tuple[str, list[str], dict]], timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Run each (namespace, command, environment) at once, each in its namespace; wait for all."""
    procs = [subprocess.Popen(["ip", "netns", "exec", ns, *cmd], env=_environment(env), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for ns, cmd, env in commands]
    out = []
    try:
        for p, (_, cmd, _) in zip(procs, commands):
            stdout, stderr = p.communicate(timeout=timeout)          # a hang fails here
            out.append(subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            p.kill()
    return out


def _environment(changes: dict) -> dict:
    """This process's environment with `changes` (None: removed)."""
    env = launchers.env(PYTHONPATH=str(ROOT)) | changes
    return {k: v for k, v in env.items() if v is not None}


def rank_env(launcher: str, rank: int, port: int) -> dict:
    """What `launcher` sets for rank `rank` of 2, one rank a host, the first host holding the rendezvous."""
    base = {"GLOO_SOCKET_IFNAME": None, "MASTER_ADDR": None, "MASTER_PORT": None}   # spgnn picks the interface
    if launcher == "torchrun":
        return base | dict(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                           MASTER_ADDR=ADDRESSES[0], MASTER_PORT=str(port), TORCHELASTIC_RUN_ID="hosts")
    return base | dict(SLURM_STEP_ID="0", SLURM_PROCID=str(rank), SLURM_NTASKS="2", SLURM_LOCALID="0",
                       SLURM_NODEID=str(rank), SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_JOB_ID=str(port - 20000),
                       SLURM_STEP_NODELIST=",".join(ADDRESSES))            # the port derives from the job id


@pytest.fixture(scope="module")
def one_host(tmp_path_factory) -> list[float]:
    out = tmp_path_factory.mktemp("one") / "r.json"
    assert cli.main(TRAIN[3:] + ["--output", str(out)]) == 0
    return _losses(out)


def _losses(path: Path) -> list[float]:
    return [e["loss"] for e in json.loads(path.read_text())["epochs"]]


AGENT = """#!/bin/sh
# ssh for mpirun: run the command on "host" $1 (options before it skipped) = in its namespace, under its own name
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case $host in
%s
  *) echo "no such host: $host" >&2; exit 255;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
"""


def test_mpirun_with_a_host_file_trains_as_one(hosts, one_host, tmp_path):
    if not launchers.MPI4PY:
        pytest.skip("needs mpi4py (pip install 'spgnn[mpi]')")
    if not launchers.MPIRUN or not shutil.which("unshare"):
        pytest.skip("needs mpirun (pip install 'spgnn[mpi]') and util-linux's unshare")
    version = subprocess.run([launchers.MPIRUN, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    if "(Open MPI) 5." not in version:
        pytest.skip(f"needs Open MPI 5's mpirun (its ssh agent is set with --prtemca plm_ssh_agent); found {version!r}")
    (tmp_path / "hosts").write_text("".join(f"{a} slots=1\n" for a in ADDRESSES))
    agent = tmp_path / "agent.sh"
    agent.write_text(AGENT % "\n".join(f"  {a}) ns={n};;" for a, n in zip(ADDRESSES, hosts)))
    agent.chmod(0o755)
    mpirun = [*launchers.MPIRUN_ARGS, "--hostfile", str(tmp_path / "hosts"), "--prtemca", "plm_ssh_agent", str(agent),
              "-x", "PYTHONPATH", "-x", "SPGNN_CACHE_DIR", "-np", "2", *TRAIN, "--output", str(tmp_path / "r.json")]
    shell = f"hostname {hosts[0]}; exec {' '.join(mpirun)}"
    [p] = on_hosts([(hosts[0], ["unshare", "--uts", "sh", "-c", shell], {"GLOO_SOCKET_IFNAME": None})])
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["world_size"] == 2 and report["transport"] == "mpi"
    np.testing.assert_allclose(_losses(tmp_path / "r.json"), one_host, rtol=1e-5)


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_two_hosts_train_as_one(hosts, one_host, launcher, tmp_path):
    port = next(PORTS)
    res = on_hosts([(hosts[r], TRAIN + ["--output", str(tmp_path / f"r{r}.json")], rank_env(launcher, r, port))
                    for r in range(2)])
    for r, p in enumerate(res):
        assert p.returncode == 0, f"rank {r}: {p.stderr[-3000:]}"
    report = json.loads((tmp_path / "r0.json").read_text())
    assert report["world_size"] == 2 and report["transport"] == "torch"
    np.testing.assert_allclose(_losses(tmp_path / "r0.json"), one_host, rtol=1e-5)


def _one_clear_line(p: subprocess.CompletedProcess, rank: int, address: str) -> str:
    lines = [x for x in p.stderr.splitlines() if x.startswith("spgnn: error:")]
    assert p.returncode == 2 and len(lines) == 1, f"rank {rank}: {p.returncode} {p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert address in lines[0] and "MASTER_ADDR" in lines[0] and "GLOO_SOCKET_IFNAME" in lines[0], lines[0]
    return lines[0]


def test_an_explicit_interface_wins_and_a_wrong_one_is_one_clear_line(hosts):
    """GLOO_SOCKET_IFNAME=lo: both ranks advertise 127.0.0.1, so neither reaches the other; both end within
    --timeout (gloo alone would wait minutes) with the line."""
    port = next(PORTS)
    envs = [rank_env("torchrun", r, port) | {"GLOO_SOCKET_IFNAME": "lo"} for r in range(2)]
    res = on_hosts([(hosts[r], TRAIN + ["--timeout", "5"], envs[r]) for r in range(2)], timeout=120)
    for r, p in enumerate(res):
        assert "over interface lo" in _one_clear_line(p, r, f"{ADDRESSES[0]}:{port}")


def test_a_rank_without_a_route_is_one_clear_line(hosts):
    port = next(PORTS)
    [p] = on_hosts([(hosts[2], TRAIN + ["--timeout", "5"], rank_env("torchrun", 1, port))], timeout=120)
    _one_clear_line(p, 1, f"{ADDRESSES[0]}:{port}")


@pytest.mark.parametrize("what", ["partition cache", "partitioned dataset", "checkpoint"])
def test_a_folder_another_host_cannot_read_is_one_clear_line(hosts, tmp_path, what):
    """The folder exists on the first host; the second sees an empty one in its place (a tmpfs mounted over it in a
    mount namespace of its own). The job ends, not hangs, with one line naming the folder and no traceback."""
    folder, args = tmp_path / "folder", []
    if what == "partition cache":
        folder.mkdir()
        env = {"SPGNN_CACHE_DIR": str(folder)}
    elif what == "partitioned dataset":
        assert cli.main(["partition", "--nparts", "2", "--method", "block", "--output", str(folder)]) == 0
        env, args = {}, ["--dataset", str(folder)]
    else:
        assert cli.main(TRAIN[3:] + ["--epochs", "1", "--checkpoint", str(folder)]) == 0
        env, args = {}, ["--resume", str(folder)]
    port = next(PORTS)
    hide = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs tmpfs "{folder}" && exec "$@"', "sh"]
    res = on_hosts([(hosts[r], (hide if r else []) + TRAIN + args, rank_env("torchrun", r, port) | env)
                    for r in range(2)], timeout=120)
    said = [x for p in res for x in p.stderr.splitlines() if x.startswith("spgnn: error:")]
    assert all(p.returncode == 2 for p in res), [(p.returncode, p.stderr[-1500:]) for p in res]
    assert len(said) >= 1 and all(str(folder) in x for x in said), said
    assert not any("Traceback" in p.stderr or "communication failed" in p.stderr for p in res)
