"""Where rank and world size come from, and torch.distributed set-up.

Launchers understood: ``mpirun``/``mpiexec`` (Open MPI, MPICH: rank and size from their variables, else from
mpi4py; the rendezvous address chosen by rank 0 and broadcast over MPI, MPI's set-up given --timeout),
``torchrun`` and `spawn` below (the ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` environment),
Slurm's ``srun`` (rank, size and local rank from ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the
rendezvous at ``MASTER_ADDR``:``MASTER_PORT`` when set, else at the step's first host and a port derived from the
job id), and a plain single process.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import math
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from ..errors import SpgnnError, say
from ..memory import keep_freed_memory
from .comm import Comm, TorchTransport
from .mpi import mpi
from .staged import Staged

MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MPI_LOCALRANKID")
MPI_SIZE_VARS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"))   # Open MPI's, Hydra's
MPIRUN_VARS = ("OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID")      # set by mpirun/mpiexec themselves, not by srun
SLURM_VARS = ("SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NTASKS")  # a task of an srun job step


@dataclass(frozen=True)
class Launch:
    """How this process was started: launcher `kind`, global `rank`/`world_size`, the number of processes on
    this node (`local_world_size`, used to share the cores) and this one's place among them (`local_rank`, which
    picks its GPU)."""

    kind: str
    rank: int
    world_size: int
    local_world_size: int
    local_rank: int = 0


def detect() -> Launch:
    """Read the launcher's environment (no communication)."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        kind = "torchrun" if "TORCHELASTIC_RUN_ID" in env else env.get("SPGNN_LAUNCHER", "env")
        rank, world = (_int_env(k) for k in ("RANK", "WORLD_SIZE"))
        var = next((k for k in ("OMPI_COMM_WORLD_RANK", "PMI_RANK") if k in env), None)   # the global MPI rank
        sizes = {env.get(k, str(world)) for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")}
        if "SPGNN_LAUNCHER" not in env and kind == "env" and var and (_int_env(var) != rank or sizes != {str(world)}):
            raise SpgnnError(f"RANK={rank} and WORLD_SIZE={world} in the environment disagree with mpirun's "
                             f"{var}={env[var]}: unset RANK and WORLD_SIZE (left from another launch) under mpirun, "
                             "or set SPGNN_LAUNCHER=env where they are meant")
        if not 0 <= rank < world:
            raise SpgnnError(f"RANK={rank} lies outside WORLD_SIZE={world}: the launcher's environment is wrong")
        return Launch(kind, rank, world, _int_env("LOCAL_WORLD_SIZE", world), _int_env("LOCAL_RANK", rank))
    if all(v in env for v in SLURM_VARS) and not any(v in env for v in MPIRUN_VARS):
        per_node = slurm_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", ""))
        node = _int_env("SLURM_NODEID", 0)
        world = _int_env("SLURM_NTASKS")
        return Launch("srun", _int_env("SLURM_PROCID"), world, per_node[node] if node < len(per_node) else world,
                      _int_env("SLURM_LOCALID", 0))
    if any(v in env for v in MPI_RANK_VARS):
        # rank and size from the launcher's variables where it sets them: MPI's set-up waits for every process
        # of the job, and `init` gives that wait --timeout (`_mpi_join`)
        pair = next(((r, n) for r, n in MPI_SIZE_VARS if r in env and n in env), None)
        if pair is not None:
            rank, world = (_int_env(k) for k in pair)
        else:
            world_comm = mpi().COMM_WORLD
            rank, world = world_comm.Get_rank(), world_comm.Get_size()
        local = int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE", env.get("MPI_LOCALNRANKS", world)))
        local_rank = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("MPI_LOCALRANKID", rank)))
        return Launch("mpirun", rank, world, local, local_rank)
    return Launch("single", 0, 1, 1)


def _int_env(name: str, default: int | None = None) -> int:
    """The whole number in environment variable `name` (`default` where unset); SpgnnError naming it otherwise."""
    value = os.environ.get(name)
    if value is None and default is not None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SpgnnError(f"environment variable {name}={value!r} is not a whole number: the launcher's environment "
                         "is wrong") from None


def slurm_tasks_per_node(text: str) -> list[int]:
    """Slurm's tasks per node, "4(x2),3" → [4, 4, 3]."""
    out = []
    for item in filter(None, text.split(",")):
        count, _, times = item.partition("(x")
        out += [int(count)] * int(times.rstrip(")") or 1)
    return out


def slurm_first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: "gpu[07-09,12],cpu3" → "gpu07"."""
    name, bracket, ranges = nodelist.split(",")[0].partition("[")
    return name + ranges.split("]")[0].split("-")[0] if bracket else name


STEP_STRIDE = 9973      # a prime, so that the steps of one job (srun ... & srun ... & wait) take different ports


def slurm_rendezvous() -> str:
    """The torch.distributed address of an srun job step: MASTER_ADDR and MASTER_PORT when set, else the step's
    first host and port 20000 + (job id + step id · 9973) mod 20000 (the same on every task, no communication
    needed; step 0 on 20000 + job id mod 20000)."""
    env = os.environ
    addr = env.get("MASTER_ADDR") or slurm_first_host(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
                                                      or "127.0.0.1")
    step = int(env.get("SLURM_STEP_ID", 0)) if env.get("SLURM_STEP_ID", "").isdigit() else 0   # (a batch step's name)
    port = env.get("MASTER_PORT") or str(20000 + (int(env.get("SLURM_JOB_ID", 0)) + step * STEP_STRIDE) % 20000)
    return f"tcp://{addr}:{port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpi_rendezvous() -> str:
    """Rank 0 picks an address and a free port; MPI broadcasts them (no shared file). The address: loopback when
    every rank is on this machine (same host name and network namespace), else MASTER_ADDR when set, else
    rank 0's host name when it resolves to an address other than loopback, else the first address of rank 0's
    interfaces that every rank has a route to."""
    comm = mpi().COMM_WORLD
    hosts = comm.allgather(_machine())
    if len(set(hosts)) == 1:
        addr = "127.0.0.1"
    else:
        addr = (os.environ.get("MASTER_ADDR") or _resolved(socket.gethostname())) if comm.Get_rank() == 0 else None
        addr = comm.bcast(addr, root=0)
        if not addr:
            mine = comm.bcast(_ipv4_addresses() if comm.Get_rank() == 0 else None, root=0)
            routed = comm.allgather([a for a in mine if interface_to(a)])
            addr = next((a for a in mine if all(a in r for r in routed)), None)
        if not addr:
            raise JoinError(f"rank {comm.Get_rank()}: no address of rank 0's host ({hosts[0][0]}) is routed from every "
                            "host: set MASTER_ADDR to an address of rank 0's host that all hosts reach (mpirun -x "
                            "MASTER_ADDR=...)")
    url = f"tcp://{addr}:{free_port()}" if comm.Get_rank() == 0 else None
    return comm.bcast(url, root=0)


def _mpi_join(rank: int, timeout_s: float) -> str:
    """`_mpi_rendezvous`, within `timeout_s` (`deadline`): MPI's set-up and its first collective wait without end
    for a process of the job that has not started them (stalled in its imports, say), whatever --timeout says."""
    with deadline(timeout_s, f"spgnn: error: rank {rank}: not every process of the mpirun job reached MPI's set-up "
                  f"within --timeout {timeout_s:g} s: one stalled before it (see its output), or its start takes "
                  "longer than --timeout allows"):
        return _mpi_rendezvous()


_WATCH = """import os, select, signal, sys, time
pid, seconds, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if not select.select([sys.stdin], [], [], seconds)[0]:
    sys.stderr.write(message + "\\n")
    sys.stderr.flush()
    os.kill(pid, signal.SIGTERM)
    time.sleep(5)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


@contextlib.contextmanager
def deadline(seconds: float, message: str):
    """Within the block, a watching process ends this one (SIGTERM, then SIGKILL) after `seconds`, having written
    `message` to stderr. For waits in C that hold the GIL (MPI's set-up does), which no thread of this process, nor
    a signal handler in Python, could interrupt. The watcher leaves as the block does, or as this process ends."""
    watcher = subprocess.Popen([sys.executable, "-S", "-c", _WATCH, str(os.getpid()), str(seconds), message],
                               stdin=subprocess.PIPE)
    try:
        yield
    finally:
        watcher.stdin.close()
        watcher.wait()


def _machine() -> tuple[str, int]:
    """This machine as its peers see it: host name and network namespace (namespaces on one host are hosts)."""
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return socket.gethostname(), netns


def _resolved(name: str) -> str | None:
    """The IPv4 address `name` resolves to, None when it does not or when it is loopback (Debian's default)."""
    try:
        addr = socket.gethostbyname(name)
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def _ipv4_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback, in interface order."""
    found = (_ipv4_address(name) for _, name in socket.if_nameindex())
    return [a for a in found if a and not a.startswith("127.")]


def _affinity() -> set[int]:
    """The cores this process may run on: its CPU affinity (a Slurm allocation's, a cpuset's, taskset's, mpirun's
    binding), not all of the machine's."""
    try:
        return os.sched_getaffinity(0) or {0}
    except (AttributeError, OSError):                    # no affinity on this platform
        return set(range(os.cpu_count() or 1))


def cores() -> int:
    """How many cores this process may run on (`_affinity`)."""
    return len(_affinity())


def share_cores(processes: int) -> int:
    """Set torch's threads (which spgnn's kernels use too) for one of `processes` that run on the same cores: an
    equal share of `cores`, at least one, or fewer where ``OMP_NUM_THREADS`` says so (the user's or the launcher's
    choice: torchrun sets 1 unless told); never more, which would only make the threads wait on each other (an
    ``OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK`` given to each of several processes of one task). Return the threads."""
    threads = max(1, cores() // max(1, processes))
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isascii() and given.isdigit() and int(given) > 0:
        threads = min(threads, int(given))
    torch.set_num_threads(threads)
    return threads


def _here() -> tuple:
    """This process's machine (`_machine`) and the cores it may run on (`_affinity`), as `peers` gathers them."""
    return _machine(), tuple(sorted(_affinity()))


def peers(comm: Comm) -> list:
    """`_here` of each process of `comm`'s job, in one all-gather of some bytes a rank (not counted: bookkeeping),
    which `machine_cores` and `sharing` read."""
    return comm.all_gather_object(_here())


def machine_cores(comm: Comm, gathered: list | None = None) -> int:
    """The cores the job's processes on this machine may run on together (the union of their affinities): its cores
    as the cost model counts them (`spgnn.cost.Rates.cores`, C // P each of P processes that share them all).
    `gathered`: `peers(comm)` where the caller has it, else gathered here."""
    here = _machine()
    return len(set().union(*(mask for machine, mask in gathered or peers(comm) if machine == here)))


def sharing(comm: Comm, gathered: list | None = None) -> int:
    """The processes of `comm`'s job that run on this process's cores, itself included: those on this machine whose
    affinity is this one's (`peers`, or `gathered` where the caller has it). Each process of an --nprocs or
    torchrun job, or of mpirun --bind-to none, may run on every core of the node: they share them all; srun
    --cpus-per-task gives each its own cores, and mpirun's default binding (by core or package) its core or
    package, which those bound alike share."""
    mine = _here()
    return sum(peer == mine for peer in gathered or peers(comm))


def check_device(device: str) -> None:
    """SpgnnError unless `device` (cpu, cuda or cuda:N) exists in this process."""
    if device == "cpu":
        return
    if not device.startswith("cuda"):
        raise SpgnnError(f"--device must be cpu or cuda[:N], got {device!r}")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = device.partition(":")[2]
    if not count:
        why = "this torch was built without CUDA" if torch.version.cuda is None else "no GPU is visible"
        raise SpgnnError(f"--device {device}: {why} (torch {torch.__version__}): use --device cpu, or install a CUDA "
                         "build of torch on a machine with a GPU")
    if index and (not index.isdigit() or int(index) >= count):
        raise SpgnnError(f"--device {device}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}")


TRANSPORTS = ("auto", "torch", "mpi")


def resolve_transport(name: str, launched: Launch, device: str = "cpu") -> str:
    """The transport `name` stands for in this launch: ``auto`` is mpi when mpirun started the job and the device
    is the CPU, else torch. SpgnnError where mpi cannot work."""
    if name not in TRANSPORTS:
        raise SpgnnError(f"--transport must be one of {', '.join(TRANSPORTS)}, got {name!r}")
    if name == "auto":
        return "mpi" if launched.kind == "mpirun" and not device.startswith("cuda") else "torch"
    if name == "mpi" and launched.kind != "mpirun":
        how = {"single": "a plain process or --nprocs", "spawn": "--nprocs", "env": "a RANK/WORLD_SIZE environment",
               "srun": "srun"}
        raise SpgnnError(f"--transport mpi needs a job started by mpirun (mpirun -np N spgnn ...), not by "
                         f"{how.get(launched.kind, launched.kind)}: use --transport torch or auto")
    return name


def make_transport(name: str, timeout_s: float = 300.0):
    """A transport object for a resolved name (``torch`` or ``mpi``)."""
    if name == "mpi":
        from .mpi import MPITransport

        return MPITransport(timeout_s)
    return TorchTransport(timeout_s)


def backend(device: str, local_world_size: int) -> str:
    """torch.distributed's backend for a job on `device`: nccl where each process on this node has a GPU of its
    own, else gloo (on CPU, and for processes sharing a GPU, which nccl refuses)."""
    cuda = device.startswith("cuda")
    return "nccl" if cuda and local_world_size <= torch.cuda.device_count() else "gloo"


def staged(mover, name: str, device: str, local_world_size: int):
    """`mover` fed on the device its backend takes: nccl's tensors on this process's GPU (the set-up's CPU tensors
    are copied there), gloo's and MPI's on the host (a CUDA job's tensors are copied through host memory)."""
    if not device.startswith("cuda"):
        return mover
    if name == "nccl" and mover.name == "torch":
        return Staged(mover, torch.device("cuda", torch.cuda.current_device()))
    shared = f"{local_world_size} processes share {torch.cuda.device_count()} GPU(s), " if name == "gloo" else ""
    return Staged(mover, "cpu", note=f"{shared}CUDA tensors moved through host memory")


def init(device: str = "cpu", timeout_s: float = 300.0, transport: str = "auto") -> Comm:
    """Set up torch.distributed for this process (`backend`: gloo on CPU, nccl on CUDA) and return its `Comm`,
    whose collectives go through `transport` (see `resolve_transport`; torch.distributed is set up either way), on
    the device that transport takes (`staged`).

    Gloo talks over the interface that routes to the rendezvous address (`interface_to`) unless
    ``GLOO_SOCKET_IFNAME`` names one. Joining (the rendezvous and gloo's connections) and every torch collective
    fail after `timeout_s` seconds, so a rank that dies or cannot reach its peers cannot leave the others waiting
    forever (under mpirun, mpirun itself ends the job when a rank dies). Each process keeps the memory it frees for
    its next allocations (`spgnn.memory.keep_freed_memory`)."""
    check_device(device)
    launch = detect()
    if launch.kind == "spawn":
        watch_parent()
    share_cores(launch.local_world_size)
    keep_freed_memory()
    # under mpirun, MPI's set-up first (the rendezvous's first step), under --timeout, then the MPI transport's
    url = _mpi_join(launch.rank, timeout_s) if launch.kind == "mpirun" and launch.world_size > 1 else None
    mover = make_transport(resolve_transport(transport, launch, device), timeout_s)
    if launch.world_size == 1:
        return Comm(0, 1, mover)
    if device.startswith("cuda"):
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
    name = backend(device, launch.local_world_size)
    url = url or (slurm_rendezvous() if launch.kind == "srun" else "env://")
    if url == "env://" and (missing := [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]):
        raise JoinError(f"rank {launch.rank} of {launch.world_size} (RANK and WORLD_SIZE are set), but "
                         f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: set MASTER_ADDR to an "
                         "address of rank 0's host that every host reaches and MASTER_PORT to a free port there "
                         "(torchrun sets both), or unset RANK and WORLD_SIZE to run alone")
    host, port = rendezvous_address(url)
    if name == "gloo" and not os.environ.get("GLOO_SOCKET_IFNAME") and (iface := interface_to(host)):
        os.environ["GLOO_SOCKET_IFNAME"] = iface
    def connect():
        dist.init_process_group(name, init_method=url, rank=launch.rank, world_size=launch.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        if name == "gloo":          # a mesh wired wrong can pass the set-up (ranks on different hosts each dialling
            dist.all_reduce(torch.zeros(1))     # its own loopback): its first message fails here, as joining
    join(connect, launch.rank, f"{host}:{port}", timeout_s)
    comm = Comm(launch.rank, launch.world_size, staged(mover, name, device, launch.local_world_size))
    share_cores(sharing(comm))         # (the launcher's count of local processes, above, only until they have met)
    return comm


def watch_parent(pid: int | None = None, every_s: float = 1.0) -> None:
    """End this process (exit status 143, as by SIGTERM) once the process that started it (`pid`, else its parent) is
    gone: the ranks of an --nprocs parent, or of a `run` caller, killed by SIGKILL, which could not stop them, went on
    training as orphans. Watched through a pidfd, which a process that died (a zombie, too) makes readable, where Linux
    has them; else by the parent's id (a --nprocs rank is then re-parented) or, for a `run` caller, by signal 0."""
    parent = pid or int(os.environ.get("SPGNN_PARENT_PID") or os.getppid())
    poll = select.poll()                # (select.select refuses a descriptor numbered 1024 or more)
    try:
        fd = os.pidfd_open(parent)
        poll.register(fd, select.POLLIN)
    except ProcessLookupError:                                          # gone already: ends at once
        fd = -1
    except (AttributeError, OSError):
        fd = None

    def alive() -> bool:
        if fd is not None:
            return fd >= 0 and not poll.poll(every_s * 1000)
        time.sleep(every_s)
        if parent != os.getppid() and pid is None:
            return False
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    def watch():
        while alive():
            pass
        os._exit(128 + signal.SIGTERM)      # as SIGTERM's default would: no one is left to report to, and a handled
                                            # SIGTERM waits for an epoch's end (or a collective's timeout)

    threading.Thread(target=watch, daemon=True, name="spgnn-parent-watch").start()
    if pid is None and sys.platform.startswith("linux"):
        # a rank its supervisor stopped (Ctrl-Z: `_Stops.pause`) would not watch: continued (SIGCONT) as its parent
        # dies (prctl PR_SET_PDEATHSIG), it ends as above, not stopped for ever after a kill -9 of the job
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGCONT)


class JoinError(SpgnnError):
    """A rank could not join the job; each rank says so, naming what it tried (`every_rank`). Where the set-up
    failed at once (`quick`, not after --timeout) under a `spawn` attempt that will be made again
    (``SPGNN_JOIN_AGAIN`` set), the rank says nothing and exits `JOIN_FAILED`."""

    every_rank = True
    quick = False


JOIN_FAILED = 3
JOIN_ATTEMPTS = 2      # of `run_local` and `spawn`: gloo's mesh over loopback rarely breaks while it forms, and
                       # another program can take the rendezvous port between its choice and its use


def join(connect, rank: int, address: str, timeout_s: float) -> None:
    """Run `connect` (torch.distributed's set-up), but give up after `timeout_s` seconds: gloo waits minutes for a
    peer that never connects, whatever the timeout. Failure or timeout is a `JoinError` naming `address` and the
    interface gloo used, and what to set."""
    done, failure = threading.Event(), []

    def run():
        try:
            connect()
        except Exception as e:  # reported below, in the caller's thread
            failure.append(e)
        done.set()

    start = time.monotonic()
    threading.Thread(target=run, daemon=True, name="spgnn-join").start()
    if done.wait(timeout_s + 5) and not failure:      # the rendezvous says why when it gives up itself
        return
    what = (str(failure[0]).strip().splitlines() or [type(failure[0]).__name__])[0][:300] if failure else \
        f"not every process connected within --timeout {timeout_s:g} s"
    interface = os.environ.get("GLOO_SOCKET_IFNAME", "chosen by gloo")
    error = JoinError(f"rank {rank} could not join the job at {address} over interface {interface} ({what}): every "
                      "host must reach MASTER_ADDR:MASTER_PORT and each other; set MASTER_ADDR to an address all hosts "
                      "reach, or GLOO_SOCKET_IFNAME to the interface they share")
    # refused at once (a port taken, a mesh broken), not --timeout's seconds waited out, which are not spent twice
    error.quick = bool(failure) and time.monotonic() - start < timeout_s / 2
    raise error from (failure[0] if failure else None)


def rendezvous_address(url: str) -> tuple[str, str]:
    """(host, port) of a torch.distributed init URL (``env://`` reads MASTER_ADDR and MASTER_PORT)."""
    if url.startswith("env://"):
        return os.environ.get("MASTER_ADDR", "127.0.0.1"), os.environ.get("MASTER_PORT", "?")
    host, _, port = url.split("://", 1)[-1].rpartition(":")
    return host.strip("[]"), port


def interface_to(host: str) -> str | None:
    """The name of this machine's network interface that holds the address the kernel sends from to reach `host`
    (a UDP connect picks the route and sends nothing); None when that cannot be told (no route, no such host,
    not Linux)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(host), 9))
            local = s.getsockname()[0]
        return next((name for _, name in socket.if_nameindex() if _ipv4_address(name) == local), None)
    except (OSError, UnicodeError):
        return None


def _ipv4_address(interface: str) -> str | None:
    """The IPv4 address of `interface` (Linux's SIOCGIFADDR), None when it has none or this is not Unix."""
    import struct

    try:
        import fcntl
    except ImportError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", interface.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def shutdown() -> None:
    """Leave torch.distributed once every rank is done (a rank tearing down while a peer is still in
    its last collective makes the peer abort), the collectives' objects that reference cycles still hold freed first:
    freed later, as the interpreter exits, a gloo thread releasing a tensor aborts the process ("terminate called
    without an active exception")."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        gc.collect()
        dist.destroy_process_group()


def leave() -> None:
    """Leave torch.distributed at once, without waiting for peers (after an error every rank raised alike):
    the process then exits cleanly instead of tearing down a live process group."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def abort(code: int) -> None:
    """Under mpirun, end every rank of the job now (MPI_Abort); elsewhere do nothing. A rank leaving after an
    error would otherwise wait in MPI_Finalize for peers that wait for it in a collective: a hang."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized() and detect().kind == "mpirun":
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(code)


def spawn(argv: list[str], nprocs: int, grace_s: float = 5.0, stop_s: float = 300.0) -> int:
    """Run ``python -m spgnn ARGV`` as `nprocs` local processes (the torchrun environment) and wait.

    When one exits with an error the others get `grace_s` seconds to report theirs, then are terminated.
    Returns the first non-zero exit code. A job whose
    first failure is a rank refused at the join (exit `JOIN_FAILED`: gloo's mesh over loopback rarely breaks
    while it forms, or another program took the port between `free_port` and the rendezvous) has run nothing yet:
    it is started again, with fresh processes and port, up to `JOIN_ATTEMPTS` times, the failed attempts silent.
    A join that timed out is reported at once.

    The ranks run in sessions of their own, so that a signal to this process's group (Ctrl-C) reaches each of them
    once: as this process passes it on (`_Stops`), waiting `stop_s` seconds for them to finish their epoch and
    exit (`spgnn.train.interrupt`); they start with SIGINT and SIGTERM blocked, which they take once they handle
    them (`interrupt.handled`), so that one passed on while they start is neither lost nor a traceback. Ctrl-Z
    stops them with this process, and fg continues them (`_Stops.pause`)."""
    if nprocs < 1:
        raise SpgnnError(f"--nprocs must be at least 1, got {nprocs}")
    for attempt in range(1, JOIN_ATTEMPTS + 1):
        again = {"SPGNN_JOIN_AGAIN": "1"} if attempt < JOIN_ATTEMPTS else {}
        code = _spawn_once(argv, nprocs, grace_s, stop_s, again)
        if code != JOIN_FAILED:
            break
    return code


class _Stops:
    """The SIGINT and SIGTERM an --nprocs supervisor got (`heard`, its handler), each passed on to every rank of
    `procs` (the list the supervisor fills as it starts them) once
    (`forward`), and until when it waits for the ranks (`until`): `stop_s` after the first (they finish the epoch
    under way), `grace_s` after a SIGINT that follows (Ctrl-C again: they stop at once), no longer after a third.
    SIGTERM after the first is the same request delivered again (`timeout` sends it to the process and to its
    group), not passed on; so is a SIGINT within `spgnn.train.interrupt.AGAIN_S` of the one before, as the ranks
    take it (a Ctrl-C pressed twice at once: killed after `grace_s`, ranks finishing their epoch lost it)."""

    def __init__(self, procs: list, stop_s: float, grace_s: float):
        from ..train.interrupt import AGAIN_S

        self.procs, self.signals, self.until, self.waits, self.told = procs, [], math.inf, (stop_s, grace_s, 0.0), {}
        self.again_s, self.at = AGAIN_S, -math.inf

    def heard(self, signum, frame) -> None:
        again = signum != signal.SIGINT or time.monotonic() - self.at < self.again_s
        if self.signals and again or len(self.signals) == len(self.waits):
            return
        self.signals.append(signum)
        self.at = time.monotonic()
        self.until = min(self.until, time.monotonic() + self.waits[len(self.signals) - 1])

    def listen(self) -> dict:
        """`heard` made the handler of SIGINT and SIGTERM, `pause` and `resume` those of SIGTSTP and SIGCONT (in the
        main thread only: elsewhere they are left alone); returns the handlers before, to set back."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        handlers = {signal.SIGINT: self.heard, signal.SIGTERM: self.heard}
        if hasattr(signal, "SIGTSTP"):
            handlers |= {signal.SIGTSTP: self.pause, signal.SIGCONT: self.resume}
        return {s: signal.signal(s, handler) for s, handler in handlers.items()}

    def pause(self, signum, frame) -> None:
        """Ctrl-Z (SIGTSTP), which the ranks, in sessions of their own, do not get: each stopped (SIGSTOP: a SIGTSTP
        to a process whose group has no parent in its session is discarded), then this process, as SIGTSTP's
        default would (SIGSTOP where that too would be discarded); `resume` continues them."""
        self.tell(signal.SIGSTOP)
        parent = os.getppid()
        try:
            alone = os.getpgid(parent) == os.getpgrp() or os.getsid(parent) != os.getsid(0)   # (an orphaned group)
        except OSError:
            alone = True
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), signal.SIGSTOP if alone else signal.SIGTSTP)
        finally:
            signal.signal(signal.SIGTSTP, self.pause)

    def resume(self, signum, frame) -> None:
        """SIGCONT (fg, bg, kill -CONT): the ranks `pause` stopped continued too."""
        self.tell(signal.SIGCONT)

    def tell(self, signum: int) -> None:
        """`signum` to each rank still running."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signum)

    def forward(self) -> None:
        """Each signal not yet passed on to each rank still running (`told`: how many each was given)."""
        for p in self.procs:
            while self.told.get(p.pid, 0) < len(self.signals) and p.poll() is None:
                p.send_signal(self.signals[self.told.get(p.pid, 0)])
                self.told[p.pid] = self.told.get(p.pid, 0) + 1

    def expected(self, returncode: int) -> bool:
        """Whether a rank's exit is one the signals passed on asked for: stopped by one (128 + N), or ended by it
        before it handled signals (−N)."""
        return any(returncode in (128 + s, -s) for s in self.signals)

    def late(self) -> str | None:
        """Where the wait for the ranks is over and some still run: those ranks killed, and the line that says so."""
        running = [r for r, p in enumerate(self.procs) if p.poll() is None]
        if not running or time.monotonic() < self.until:
            return None
        for r in running:
            self.procs[r].kill()
        n, name = len(self.signals), signal.Signals(self.signals[-1]).name
        when = f"within {self.waits[n - 1]:g} s of {'the second ' if n == 2 else ''}{name}" if n < 3 else \
            f"before a third signal ({name})"
        return f"rank{'s' if len(running) > 1 else ''} {', '.join(map(str, running))} did not stop {when}: killed"


@contextlib.contextmanager
def _blocked(signals):
    """Within the block, `signals` are held (pending) in this thread, and in the processes it starts, which inherit
    the mask."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _spawn_once(argv: list[str], nprocs: int, grace_s: float, stop_s: float, extra: dict) -> int:
    """One launch of `spawn`: its first non-zero exit code, else 0."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nprocs),
               LOCAL_WORLD_SIZE=str(nprocs), SPGNN_LAUNCHER="spawn", SPGNN_PARENT_PID=str(os.getpid()), **extra)
    procs, code, failed_at, late = [], 0, None, None
    stops = _Stops(procs, stop_s, grace_s)
    previous = stops.listen()
    try:
        for r in range(nprocs):
            with _blocked((signal.SIGINT, signal.SIGTERM)):
                procs.append(subprocess.Popen([sys.executable, "-m", "spgnn", *argv], start_new_session=True,
                                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r))))
        while any(p.poll() is None for p in procs):
            stops.forward()
            if failed_at is None and (bad := [p.returncode for p in procs
                                              if p.returncode and not stops.expected(p.returncode)]):
                code, failed_at = _shell_code(bad[0]), time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > grace_s or (late := stops.late()):
                break
            time.sleep(0.05)
    finally:
        for r, p in enumerate(procs):           # killed by another's hand, before ours: it could not say so itself
            if p.returncode is not None and p.returncode < 0 and not stops.expected(p.returncode) and not late:
                try:
                    name = f" ({signal.Signals(-p.returncode).name})"
                except ValueError:      # a real-time signal has no name
                    name = ""
                say(f"rank {r} was killed by signal {-p.returncode}{name}")
        if late:
            say(late)
        _end(procs, grace_s)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code or next((_shell_code(p.returncode) for p in procs if p.returncode), 0)


def _end(procs: list, grace_s: float) -> None:
    """SIGTERM to each of `procs` still running, then SIGKILL to those still running `grace_s` seconds later. SIGCONT
    follows the SIGTERM: a stopped process (Ctrl-Z, a stalled rank) acts on a signal it handles only once continued,
    and would wait out `grace_s` for the SIGKILL."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()


def _shell_code(returncode: int) -> int:
    """The exit code a shell gives a process that ended with `returncode`: 128 + N for one killed by signal N
    (subprocess's −N, which sys.exit would wrap to 256 − N)."""
    return 128 - returncode if returncode < 0 else returncode


def communicating(e: BaseException, world_size: int) -> bool:
    """Whether `e` was raised by a collective among `world_size` processes (at 1, none is: no peer to blame):
    torch.distributed's own error, or one whose innermost Python frame is torch.distributed's or a transport's of
    spgnn.comm (not a computation that merely ran under it, as an SpMM inside its autograd wrapper or a partitioning
    inside `agree`)."""
    if world_size <= 1:
        return False
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = Path(tb.tb_frame.f_code.co_filename) if tb is not None else Path()
    comm = Path(__file__).parent
    return (isinstance(e, getattr(dist, "DistError", ())) or Path(dist.__file__).parent in where.parents
            or where.parent == comm and where.name not in ("autograd.py", "agree.py"))


def stalled(e: BaseException, timeout_s: float) -> SpgnnError | None:
    """The one line for `e` where it is a collective's timeout (gloo's "Timed out waiting …"), else None: a rank
    waited `timeout_s` for peers that never called that collective, most often a program's own operation called
    on some ranks only."""
    if not isinstance(e, RuntimeError) or "Timed out waiting" not in str(e):
        return None
    return SpgnnError(f"a collective waited beyond the timeout ({timeout_s:g} s) for its peers: every rank must call "
                      "the same collectives in the same order, so a DistGraph operation (accuracy, cross_entropy, "
                      "all_sum, gather, prepare, sync_gradients, …) under `if comm.rank == 0` waits for ranks that "
                      "never call it; call it on every rank and print on one (or a peer stalled: raise the timeout)")


def _run_rank(fn, rank, nprocs, port, timeout_s, args, queue, environ, device, transport, caller):
    os.environ.clear()                 # the caller's environment now, not the fork server's when it started
    os.environ.update(environ, RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs),
                      LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.pop("SPGNN_PARENT_PID", None)     # a --nprocs rank's: this process's parent is the fork server
    watch_parent(caller)                         # which outlives a caller killed by SIGKILL
    stage = "join"
    try:
        comm = init(device, timeout_s, transport)
        if nprocs > 1:
            dist.barrier()             # fn starts on no rank before every rank has joined (`run_local` may retry)
        stage = "run"
        result = fn(comm, *args)
        stage = "result"
        result = pickle.dumps(result)  # tensors by value: a rank that exits cannot share an fd late
    except BaseException as e:  # report the failure at once (a shutdown could wait for peers), exit non-zero
        import traceback

        e = stalled(e, timeout_s) or e if stage == "run" else e
        kind = SpgnnError.__name__ if isinstance(e, SpgnnError) else type(e).__name__   # (a JoinError is bad input too)
        why = f"{kind}: {e}\n{traceback.format_exc()}"
        if stage == "result":
            why = (f"its result cannot be sent back to the launching process ({type(e).__name__}: {e}): return "
                   "what pickle can send (numbers, strings, lists, dicts, tensors, arrays)")
        queue.put((rank, stage, (time.time(), why)))
        sys.exit(1)
    queue.put((rank, "done", result))
    with contextlib.suppress(Exception):    # a peer failed after this rank's result: that peer's report says why
        shutdown()


PRELOAD = ["spgnn.train.fullbatch", "spgnn.train.minibatch"]    # what `run_local`'s fork server imports once
POLL_S = 0.5        # how often `run_local` looks for ranks that exited without a report
BAD_INPUT = f"{SpgnnError.__name__}: "     # how a rank's report of an SpgnnError begins (`_run_rank`)
UNGUARDED = 86      # the exit code of a rank whose program, as the rank imported it, called `spgnn.run` again


def run_local(fn, nprocs: int, *args, timeout_s: float = 120.0, deadline_s: float | None = None,
              device: str = "cpu", transport: str = "auto") -> list:
    """Run ``fn(comm, *args)`` on `nprocs` fresh local processes joined as a job on `device`, its collectives through
    `transport` (`init`); return the results by rank. `fn` and its results must be picklable. A failure on any rank
    raises here: where the first is an SpgnnError (bad input), that error, in one line naming its rank; else a
    RuntimeError naming every rank that failed; a collective fails after `timeout_s`, and the whole call after
    `deadline_s` (default `timeout_s`) rather than hang. A world that fails to form is formed again, with fresh
    processes and port, up to `JOIN_ATTEMPTS` times: `fn` starts on no rank before all have joined, so it has run
    nowhere.

    The processes are forked from multiprocessing's fork server, which has imported torch and spgnn once (`PRELOAD`):
    each starts in a tenth of a second, not the two seconds of importing them (a spawned process's cost), and
    shares no threads or state with this one; each gets this process's environment as it is now."""
    for attempt in range(1, JOIN_ATTEMPTS + 1):
        results, failures = _launch_local(fn, nprocs, args, timeout_s, timeout_s if deadline_s is None else deadline_s,
                                          device, transport)
        if not failures:
            return [results[r] for r in range(nprocs)]
        if attempt == JOIN_ATTEMPTS or any(stage != "join" for stage, *_ in failures.values()):
            break
    if any(text.endswith(f"code {UNGUARDED} and no report") for _, _, text in failures.values()):
        raise SpgnnError("spgnn.run was called again as the processes it started imported the program: call it "
                         "under `if __name__ == \"__main__\":`")
    order = sorted(failures, key=lambda r: (failures[r][0] != "exit", failures[r][1]))  # a cause before its echoes
    first = failures[order[0]][2]
    if first.startswith(BAD_INPUT):      # bad input: its one line, as `spgnn train` says it
        line = first.splitlines()[0][len(BAD_INPUT):]
        raise SpgnnError(line if line.startswith(f"rank {order[0]} ") else f"rank {order[0]}: {line}")
    echoes = "; ".join(f"rank {r}: {failures[r][2].splitlines()[0]}" for r in order[1:])
    raise RuntimeError(f"rank {order[0]} failed: {failures[order[0]][2]}" + (f"\n(then {echoes})" if echoes else ""))


def _launch_local(fn, nprocs: int, args: tuple, timeout_s: float, limit_s: float, device: str,
                  transport: str) -> tuple[dict, dict]:
    """One launch of `run_local`: ({rank: result}, {rank: (stage, time, error text)}), where stage is "join" or
    "run", and a rank that exited without a word fails at "exit". Once a rank fails, the others have 5 s to report
    (a peer's failure makes theirs: each is timed, so the first names the cause)."""
    import multiprocessing as mp
    import queue as queues

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    q = ctx.Queue()
    port = free_port()
    environ = dict(os.environ)
    procs = [ctx.Process(target=_run_rank, daemon=True,
                         args=(fn, r, nprocs, port, timeout_s, args, q, environ, device, transport, os.getpid()))
             for r in range(nprocs)]
    for p in procs:
        p.start()
    results, failures, until, dead = {}, {}, time.monotonic() + limit_s, set()
    try:
        while len(results) + len(failures) < nprocs:
            try:     # every POLL_S: a rank that dies without a word (os._exit, a signal) is seen within it
                rank, stage, value = q.get(timeout=min(POLL_S, max(0.1, until - time.monotonic())))
            except queues.Empty:
                waiting = [r for r in range(nprocs) if r not in results and r not in failures]
                # a rank's exit seen at one poll fails it at the next, so that a report it sent just before is read
                if silent := {r: ("exit", time.time(), f"exited with code {procs[r].exitcode} and no report")
                              for r in waiting if r in dead}:
                    failures |= silent
                    until = min(until, time.monotonic() + 5.0)
                dead = {r for r in waiting if r not in failures and procs[r].exitcode not in (None, 0)}
                if dead or time.monotonic() < until:
                    continue
                if not failures:
                    failures = {r: ("run", time.time(), f"no result within {limit_s} s (run_local's deadline_s; "
                                                  "spgnn.run sets none)") for r in waiting}
                break
            if stage == "done":
                results[rank] = pickle.loads(value)
            else:
                failures[rank] = (stage, *value)
                until = min(until, time.monotonic() + 5.0)
    finally:            # ranks that finished leave the world together; ranks left waiting on a failed one are killed
        end = time.monotonic() + (0.5 if failures else 5.0)
        for p in procs:
            p.join(timeout=max(0.0, end - time.monotonic()))
            if p.is_alive():
                p.kill()
    return results, failures
