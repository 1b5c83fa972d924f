"""α-β calibration of the transport in force: t = α + β·x for one call of each collective, where x is the
bytes the ledger records for that call, so that a cost model predicting ledger bytes predicts seconds.

For each collective and each message size s (the bytes of the tensor every rank passes in), the timed
call is, in a group of all P ranks (float32):

    broadcast       a tensor of s bytes from rank 0
    all_reduce      the sum of a tensor of s bytes
    all_to_all      s bytes per rank, s/P to each member (``Comm.all_to_all_v``)
    all_gather      a block of s bytes per rank, P·s gathered (``Comm.all_gather_v``)
    reduce_scatter  a tensor of s bytes, member j gets chunk j (s/P) of the sum

Each call is preceded by a small all-reduce (so the ranks start together) and timed by the ledger itself
(``Comm`` measures every collective). Per repetition, x and t are the largest over ranks of the bytes
the cost model charges (`spgnn.cost.charged_bytes`: 2·(P−1)/P·s for a broadcast, on the root too, max(sent,
received) otherwise) and of seconds; per size, t is the median over repetitions. α ≥ 0 and β ≥ 0
are fitted by least squares on the relative error, Σ_s ((α + β·x_s − t_s)/t_s)², so the small sizes fix α
and the large ones β.

Compute (`measure_compute`), timed on every rank at once (so with the cores shared as in a run) and divided by
the cores each rank has, then the median over ranks: a local SpMM (`spgnn.sparse.kernels.spmm` on a power-law
R-MAT matrix at two widths: seconds a nonzero and 4·f·(nnz + rows) bytes a second), dense products (`spgnn.dense`:
2·m·k·n flops in cache, 4·m·(k + n) bytes over many rows for H·W, Hᵀ·G and G·Wᵀ, and the weight gradient by
blocks' packing of its wider operand: 8 bytes an element of H, of Hᵀ·G less H·W and the narrower operand's copies,
H 8192×1024 and G 8192×64), the elementwise work around
a dense product (a dropout mask, bias and ReLU: 8 bytes an element in and out), an input's one-pass dropout
(`spgnn.hashing.dropout`, 8 bytes an element), the first touch of a fresh mapping (page faults and zeroing), the
fixed seconds of a tiny autograd operation, the resident bytes of this process (torch and spgnn imported, its
kernels loaded, joined to its peers), and the wait of a collective entered from computation (`measure_sync_wait`);
then the same rates of one process alone on the machine with every core ("alone").

JSON written by ``spgnn calibrate --output FILE`` (schema "spgnn.calibration/6"; files without
"pack_bytes_per_s", written before it was measured, take the default's; /5 files, without the rates of a
process alone, /4 files, also without the sync wait, /3 files, also without rcm-order SpMM rates, /2 files, whose
broadcast β is a byte received, and /1 files, also without "compute" and "cores", are still read:
`spgnn.cost.load_calibration`, `spgnn.cost.load_rates`):

    {"schema": "spgnn.calibration/6",
     "transport": "mpi" | "torch",          # the transport measured
     "world_size": P,                       # group size the fits hold for
     "device": "cpu" | "cuda[:N]",
     "repeats": R,                          # timed calls per size (at least)
     "model": "seconds = alpha_s + beta_s_per_byte * bytes",
     "collectives": {
       "<op>": {                            # broadcast | all_reduce | all_to_all | all_gather | reduce_scatter
         "alpha_s": α,                      # seconds per call, the intercept
         "beta_s_per_byte": β,              # seconds per ledger byte
         "messages": m,                     # ledger messages per call (largest over ranks)
         "alpha_per_message_s": α / m,      # the per-message latency (null when m = 0)
         "bandwidth_bytes_per_s": 1 / β,    # null when β = 0
         "rms_relative_error": e,           # of the fit over the sizes
         "points": [{"size_bytes": s, "bytes": x, "seconds": t, "samples_s": [t per repetition]}, ...]}},
     "cores": C,                            # cores the processes on the machine may run on, together
     "compute": {"spmm_bytes_per_s": ..., "spmm_nnz_s": ..., "spmm_ordered_bytes_per_s": ...,
                 "spmm_ordered_nnz_s": ..., "flops_per_s": ..., "dense_bytes_per_s": ...,
                 "elementwise_bytes_per_s": ..., "dropout_bytes_per_s": ..., "fresh_bytes_per_s": ..., "op_s": ...,
                 "pack_bytes_per_s": ...,
                 "runtime_bytes": ..., "sync_wait_s": ...,                                      # one core
                 "alone": {"spmm_bytes_per_s": ..., ..., "op_s": ...}},   # one process with every core, a core's;
                                                                               # not fresh_bytes_per_s
     "warnings": [line, ...]}               # `doubts`: β = 0, or a poor fit (also said on stderr)
"""

from __future__ import annotations

import json
import math
import mmap
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp
import torch

from .. import dense
from ..cost import charged_bytes
from ..errors import SpgnnError
from ..memory import LARGE_BYTES, keep_freed_memory, physical_memory_bytes, rss_bytes
from .comm import Comm
from .launch import cores, machine_cores, peers, share_cores, sharing

SCHEMA = "spgnn.calibration/6"
OPS = ("broadcast", "all_reduce", "all_to_all", "all_gather", "reduce_scatter")
# Timed calls of each compute kernel at least, whatever --repeats: they take milliseconds, and with 3 the median still
# holds the first calls' page faults and heap growth (elementwise and dense rates 1.2-1.6× slower, op_s 1.5× longer).
COMPUTE_REPEATS = 11
ALONE_TIMEOUT_S = 600       # a process timing the kernels alone takes 5-10 s here; the others wait for it
DEFAULT_SIZES = "4K,16K,64K,256K,1M,4M,16M"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_sizes(text: str, what: str = "message size") -> list[int]:
    """'4K,1M,64M' → byte counts (K, M, G are powers of 2¹⁰); `what` names them in the error."""
    sizes = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)I?B?\s*", item.upper())
        if not m or int(m[1]) == 0:
            raise SpgnnError(f"bad {what} {item!r} in {text!r}: give positive sizes like 4K,1M,64M")
        sizes.append(int(m[1]) * _UNITS[m[2]])
    return sizes


def buffer_bytes(sizes, P: int, ops, local: int) -> int:
    """Bytes the `local` ranks on a machine hold for the largest of `sizes` on P processes: each its message of s
    bytes and the result, P·s for an all-gather, at most s for the others (`collective`)."""
    return local * max(sizes) * (1 + (P if "all_gather" in ops else 1))


def check_memory(text: str, sizes, P: int, ops, local: int) -> None:
    """SpgnnError where the buffers of the largest of `sizes` (--sizes `text`; `buffer_bytes`) exceed the machine's
    physical memory, so that no rank starts to run out of it."""
    need, have = buffer_bytes(sizes, P, ops, local), physical_memory_bytes()
    if have is not None and need > have:
        raise SpgnnError(f"--sizes {text}: messages of {max(sizes) / 2**30:.3g} GiB take {need / 2**30:.3g} GiB of "
                         f"buffers on this machine ({local} rank(s), each its message and "
                         f"{'an all-gather of P of them' if 'all_gather' in ops else 'the result'}), which has "
                         f"{have / 2**30:.3g} GiB: give smaller --sizes")


def parse_ops(text: str) -> list[str]:
    ops = [o.strip() for o in text.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise SpgnnError(f"unknown collective(s) {', '.join(bad) or text!r}: choose from {', '.join(OPS)}")
    return ops


def words_per_member(size_bytes: int, P: int) -> int:
    """The float32 words a member's part of a message of about `size_bytes` holds on P processes: rounded down to a
    multiple of 4·P bytes, one word at least."""
    return max(1, size_bytes // (4 * P))


def collective(comm: Comm, op: str, size_bytes: int, device: str = "cpu"):
    """A function making one call of `op` on a message of about `size_bytes` per rank (float32, rounded
    down to a multiple of 4·P bytes) over all ranks; its tensors are allocated here, once."""
    P = comm.world_size
    per = words_per_member(size_bytes, P)
    t = torch.ones(per * P, device=device)
    if op == "broadcast":
        return lambda: comm.broadcast(t, 0)
    if op == "all_reduce":
        return lambda: comm.all_reduce(t)
    if op == "all_to_all":
        return lambda: comm.all_to_all_v(t, [per] * P, [per] * P)
    if op == "all_gather":
        return lambda: comm.all_gather_v(t, [t.shape[0]] * P)
    if op == "reduce_scatter":
        return lambda: comm.reduce_scatter(t)
    raise SpgnnError(f"unknown collective {op!r}: choose from {', '.join(OPS)}")


def measure(comm: Comm, op: str, size_bytes: int, repeats: int = 5, warmup: int = 1, budget_s: float | None = None,
            device: str = "cpu") -> dict:
    """Time `op` at `size_bytes`: `warmup` untimed calls, then `repeats` timed ones (fewer, but at least 3,
    once `budget_s` has passed on rank 0). Returns {"size_bytes", "bytes", "messages", "seconds",
    "samples_s"} with x, m and t as in the module docstring (the same on every rank)."""
    call = collective(comm, op, size_bytes, device)
    with comm.phase("calibrate-warmup"):
        for _ in range(warmup):
            call()
    fields = ("seconds", "sent_bytes", "recv_bytes", "messages")
    samples, start = [], time.perf_counter()
    while len(samples) < repeats:
        late = budget_s is not None and len(samples) >= 3 and time.perf_counter() - start > budget_s
        with comm.phase("calibrate-sync"):                    # lines the ranks up; rank 0's clock decides
            (stop,) = comm.all_sum([float(late and comm.rank == 0)])
        if stop:
            break
        before = [comm.ledger.total(f, phase="calibrate", op=op) for f in fields]
        with comm.phase("calibrate"):
            call()
        samples.append([comm.ledger.total(f, phase="calibrate", op=op) - b for f, b in zip(fields, before)])
    per_rank = np.array(comm.all_gather_object(samples))          # ranks × repetitions × fields
    worst = per_rank.max(axis=0)
    seconds = worst[:, 0].tolist()
    charged = max(charged_bytes(op, sent, recv, comm.world_size) for rank in per_rank for _, sent, recv, _ in rank)
    return {"size_bytes": int(size_bytes), "bytes": int(charged), "messages": int(worst[:, 3].max()),
            "seconds": statistics.median(seconds), "samples_s": seconds}


def _nnls(a, b):
    """scipy.optimize.nnls, imported here: scipy.optimize brings about 20 MB of modules that every training
    process would otherwise hold."""
    from scipy.optimize import nnls

    return nnls(a, b)


def fit_alpha_beta(x, t) -> tuple[float, float, float]:
    """(α, β, rms relative error) of t ≈ α + β·x with α, β ≥ 0, minimising the relative error."""
    x, t = np.asarray(x, np.float64), np.asarray(t, np.float64)
    (alpha, beta), _ = _nnls(np.stack([1 / t, x / t], axis=1), np.ones_like(t))
    rel = (alpha + beta * x - t) / t
    return float(alpha), float(beta), float(np.sqrt(np.mean(rel ** 2)))


def calibrate(comm: Comm, sizes, ops=OPS, repeats: int = 5, device: str = "cpu", budget_s: float = 10.0) -> dict:
    """α and β of each collective in `ops` over all ranks, from timings at `sizes` (bytes per rank);
    the schema of the result is the module docstring's."""
    if comm.world_size < 2:
        raise SpgnnError("calibrate needs at least 2 processes (mpirun -np N, torchrun or --nprocs N)")
    if len({words_per_member(s, comm.world_size) for s in sizes}) < 2:     # as `collective` rounds them
        raise SpgnnError(f"--sizes {', '.join(map(str, sizes))} bytes are one message size on {comm.world_size} "
                         f"processes (rounded down to multiples of 4·P = {4 * comm.world_size} bytes): give sizes "
                         "further apart, e.g. 4K,1M")
    gathered = peers(comm)                  # the ranks' machines and cores, read by both: one all-gather
    result = {"schema": SCHEMA, "transport": comm.transport.name, "world_size": comm.world_size,
              "device": device, "repeats": repeats, "model": "seconds = alpha_s + beta_s_per_byte * bytes",
              "cores": machine_cores(comm, gathered),
              "compute": measure_compute(comm, max(repeats, COMPUTE_REPEATS), gathered=gathered), "collectives": {}}
    for op in ops:
        points = [measure(comm, op, s, repeats, budget_s=budget_s, device=device) for s in sizes]
        alpha, beta, err = fit_alpha_beta([p["bytes"] for p in points], [p["seconds"] for p in points])
        m = points[0]["messages"]
        result["collectives"][op] = {
            "alpha_s": alpha, "beta_s_per_byte": beta, "messages": m,
            "alpha_per_message_s": alpha / m if m else None,
            "bandwidth_bytes_per_s": 1 / beta if beta > 0 else None,
            "rms_relative_error": err, "points": points}
    result["warnings"] = doubts(result)
    return result


POOR_FIT = 0.25     # rms relative error above which a fit is doubted


def doubts(result: dict) -> list[str]:
    """What makes a calibration's fits doubtful: β = 0 (the times did not grow with the bytes, so a prediction
    would count bytes as free) or an rms relative error above `POOR_FIT`; one line each."""
    out = []
    for op, c in result["collectives"].items():
        if c["beta_s_per_byte"] <= 0:
            out.append(f"{op}: the times did not grow with the bytes, so β = 0 and a prediction counts its bytes as "
                       "free: give --sizes further apart (e.g. 4K,1M,16M)")
        if c["rms_relative_error"] > POOR_FIT:
            out.append(f"{op}: α + β·bytes misses the times by {c['rms_relative_error']:.0%} (rms): calibrate again "
                       "on a quieter machine, or with more --repeats")
    return out


def _median_seconds(fn, repeats: int, sync=lambda: None) -> float:
    """The median seconds of `fn()` over `repeats` calls (at least 3) after one untimed, each after `sync()`."""
    fn()
    times = []
    for _ in range(max(repeats, 3)):
        sync()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _touch_fresh(nbytes: int) -> None:
    """Write all of a fresh private anonymous mapping of `nbytes`, as glibc gives each block of LARGE_BYTES or more,
    with torch's threads: page faults and zeroing, then the write. (Python's default anonymous mapping is shared,
    whose pages the kernel faults in as shared memory: 1.5-2× slower here than the private pages a tensor gets.)"""
    with mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as m:
        torch.frombuffer(m, dtype=torch.float32).fill_(1.0)


PACK_ROWS, PACK_WIDTH = 1 << 13, 1024     # H of the weight gradient `pack_bytes_per_s` is timed on (32 MiB)
RATE_KEYS = ("spmm_bytes_per_s", "spmm_nnz_s", "spmm_ordered_bytes_per_s", "spmm_ordered_nnz_s", "flops_per_s",
             "dense_bytes_per_s", "elementwise_bytes_per_s", "dropout_bytes_per_s", "fresh_bytes_per_s", "op_s",
             "pack_bytes_per_s")


def kernel_rates(timed, cores: float, seed: int = 0, scale: int = 17, degree: int = 16, f: int = 64) -> dict:
    """One core's rates (`RATE_KEYS`) of this process's kernels on `cores` cores, from `timed(fn)`: the seconds of a
    call of fn (`measure_compute`'s docstring says what each times)."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    from ..graph.datasets import rmat_edges
    from ..hashing import dropout, dropout_mask
    from ..sparse import kernels
    from ..sparse.csr import CSR

    n = 1 << scale
    rows, cols = rmat_edges(scale, degree, np.random.default_rng(seed))
    raw = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(n, n))
    rcm = reverse_cuthill_mckee(raw, symmetric_mode=True)        # as `spgnn.partition.order` orders a part
    widths = (8, f)
    hs = [torch.rand(n, w) for w in widths]
    # Results are written into blocks already resident (or under LARGE_BYTES, which the heap keeps): the first
    # touch of a fresh block is a term of its own.
    outs = [torch.empty(n, w) for w in widths]

    def fit(m):                                          # (seconds a nonzero, seconds a byte) of SpMMs by m
        spmm_s = [timed(lambda h=h, z=z: kernels.spmm(m, h, out=z)) for h, z in zip(hs, outs)]
        return _nnls(np.array([[m.nnz, 4 * w * (m.nnz + n)] for w in widths], np.float64), np.array(spmm_s))[0]

    (nnz_s, per_byte), (ordered_nnz_s, ordered_per_byte) = (fit(CSR.from_scipy(m)) for m in (raw, raw[rcm][:, rcm]))
    small, narrow = torch.rand(2**12, 256), f // 4
    flops = 2 * 2**12 * 256 * 256 / timed(lambda: dense.product(small, small[:256]))
    h, w, b, ids = torch.rand(n, f), torch.rand(f, narrow), torch.rand(f), np.arange(n)
    half, g = h[: n // 2], torch.rand(n // 2, narrow)    # results under LARGE_BYTES, blocks the heap keeps
    dense_s = sum(timed(fn) for fn in (lambda: dense.product(half, w), lambda: dense.weight_grad(half, g),
                                       lambda: dense.product(g, w.t())))
    dense_s = max(dense_s - 3 * 2 * (n // 2) * f * narrow / flops, 1e-3 * dense_s)
    wide, tall, w_wide = torch.rand(PACK_ROWS, PACK_WIDTH), torch.rand(PACK_ROWS, f), torch.rand(PACK_WIDTH, f)
    dense_bytes_s = 3 * 4 * (n // 2) * (f + narrow) / dense_s          # the process's, all its cores
    grad_s = timed(lambda: dense.weight_grad(wide, tall))
    pack_s = max(grad_s - timed(lambda: dense.product(wide, w_wide)) - 8 * PACK_ROWS * f / dense_bytes_s,
                 1e-3 * grad_s)
    elementwise_s = timed(lambda: torch.relu(half * dropout_mask(ids[: n // 2], f, 0.5, 1) + b))
    dropout_s = timed(lambda: dropout(h, ids, 0.5, 1))
    x = torch.rand(4, 4, requires_grad=True)
    op_s = timed(lambda: (x @ x).sum().backward()) / 4
    fresh = 2 * LARGE_BYTES                              # a block glibc maps anew, against one kept
    resident = torch.zeros(fresh // 4)
    fresh_s = max(timed(lambda: _touch_fresh(fresh)) - timed(lambda: resident.fill_(1.0)), 1e-9)
    return dict(zip(RATE_KEYS, (1 / max(per_byte, 1e-15) / cores, nnz_s * cores,
                                1 / max(ordered_per_byte, 1e-15) / cores, ordered_nnz_s * cores, flops / cores,
                                dense_bytes_s / cores, 4 * n * f / elementwise_s / cores,
                                8 * n * f / dropout_s / cores, fresh / fresh_s / cores, op_s,
                                8 * PACK_ROWS * PACK_WIDTH / pack_s / cores)))


def alone_rates(repeats: int, scale: int = 17, degree: int = 16, f: int = 64) -> dict:
    """`kernel_rates` of one process alone on this machine with every core, but the first touch of fresh memory: a
    Python process started for it, set up as a run's (`spgnn.comm.launch.share_cores`,
    `spgnn.memory.keep_freed_memory`). The first touch is left out: it depends on what else the machine holds, not
    on the process (here 2.2-2.4 GB/s a core with nothing else running, 0.36 beside two idle processes holding
    512 MiB each, as the group's ranks are while this one runs)."""
    code = "import sys; from spgnn.comm.calibrate import _alone; _alone(*map(int, sys.argv[1:]))"
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_WORLD_SIZE", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    try:
        done = subprocess.run([sys.executable, "-c", code, str(repeats), str(scale), str(degree), str(f)], env=env,
                              capture_output=True, text=True, timeout=ALONE_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise SpgnnError(f"calibrate: timing a process alone took over {ALONE_TIMEOUT_S} s; is the machine "
                         "overloaded?") from e
    if done.returncode:
        raise SpgnnError(f"calibrate: timing a process alone failed:\n{done.stderr[-2000:]}")
    rates = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: v for k, v in rates.items() if k != "fresh_bytes_per_s"}


def _alone(repeats: int, scale: int, degree: int, f: int) -> None:
    """`alone_rates`' process: prints its `kernel_rates` as JSON."""
    keep_freed_memory()
    threads = share_cores(1)
    print(json.dumps(kernel_rates(lambda fn: _median_seconds(fn, repeats), threads, 0, scale, degree, f)))


def measure_compute(comm: Comm, repeats: int = 5, scale: int = 17, degree: int = 16, f: int = 64,
                    gathered: list | None = None) -> dict:
    """One core's compute rates and this process's resident bytes (module docstring), measured on every rank
    at once: the median over ranks of each rank's rate divided by the cores it computes with (its threads, or its
    share of `cores` where the ranks outnumber them: `spgnn.cost.Rates.cores_each`).
    The SpMM multiplies an R-MAT matrix (2^scale rows, `degree` draws a row: power-law rows and columns, as real
    graphs have; in R-MAT's own order, not ``--node-order rcm``: past one process much of an SpMM reads halo rows,
    which the order of a part's own nodes does not bring together) at widths 8 and f; t = nnz·spmm_nnz_s +
    4·w·(nnz + rows)/spmm_bytes_per_s fitted to the two. The same matrix in reverse Cuthill-McKee order gives the
    `spmm_ordered_*` rates: a part's own block under ``--node-order rcm``, whose gathered rows lie close together.
    Dense: the arithmetic rate of a product that fits in cache, and the bytes rate of the three products a layer
    runs over many rows (H·W, Hᵀ·G, G·Wᵀ, W f×f/4), less their arithmetic. Each writes into memory already
    resident; the first touch of a fresh mapping (page faults and zeroing: what a result of LARGE_BYTES or more
    costs at every step) is timed apart, as the writing of a fresh 64 MiB mapping less that of a resident one.

    "alone": the same rates of one process alone on the machine (`alone_rates`, started by rank 0 while the others
    wait): it has the caches to itself, and gathers an SpMM's rows about 1.4× faster a core here
    (`spgnn.cost.Rates.on`). Left out under MPI, whose waiting ranks poll a core. `gathered`: the ranks' machines and
    cores (`spgnn.comm.launch.peers`) where the caller has them."""
    from .. import native

    native.available()                                   # spgnn's kernels loaded (under a MiB)
    dense.product(torch.rand(256, 256), torch.rand(256, 256))  # and oneDNN's, where it takes the products: ~7 MiB
    runtime = rss_bytes()
    each = min(torch.get_num_threads(), cores() / sharing(comm, gathered))
    # every rank at once: the cores shared as in a run
    mine = kernel_rates(lambda fn: _median_seconds(fn, repeats, lambda: comm.all_sum([0.0])), each, comm.rank,
                        scale, degree, f)
    med = np.median(np.array(comm.all_gather_object([mine[k] for k in RATE_KEYS] + [runtime])), axis=0)
    out = {k: float(v) for k, v in zip(RATE_KEYS, med)} | {
        "runtime_bytes": int(med[-1]), "sync_wait_s": measure_sync_wait(comm, 60, torch.rand(2**12, 256))}
    if comm.transport.name == "mpi":
        return out
    alone = alone_rates(repeats, scale, degree, f) if comm.rank == 0 else None
    return out | {"alone": comm.all_gather_object(alone)[0]}          # the others wait here meanwhile


def measure_sync_wait(comm: Comm, repeats: int, h: torch.Tensor) -> float:
    """Seconds a collective entered from computation waits beyond one its peers enter with it: every rank
    multiplies h·h[:256] (a layer's dense product, some milliseconds) and then sums one word over all ranks; the
    mean over ranks and `repeats` of that sum's seconds, less the median of the same sum called back to back.
    The ranks arrive apart and a core left idle by a waiting rank wakes late: a cost per call that α, timed back to
    back, does not hold (0.14-1.23 ms here at P = 2, against 0.2 ms back to back)."""
    def call_s():
        t0 = time.perf_counter()
        comm.all_sum([0.0])
        return time.perf_counter() - t0

    comm.all_sum([0.0])
    back_to_back = statistics.median(call_s() for _ in range(max(repeats, 3)))
    after = []
    for _ in range(max(repeats, 3)):
        comm.all_sum([0.0])
        h @ h[:256]
        after.append(call_s())
    return max(float(np.mean(comm.all_gather_object(after))) - back_to_back, 0.0)


def format_table(result: dict) -> str:
    """The fits as a Markdown table."""
    lines = [f"transport {result['transport']}, P = {result['world_size']}: seconds = α + β·bytes (ledger bytes)",
             "", "| collective | α (µs) | α per message (µs) | 1/β (GB/s) | rms rel. error | sizes |",
             "|---|---|---|---|---|---|"]
    c = result.get("compute")
    if c:
        lines[:0] = [f"compute, one core: SpMM {c['spmm_bytes_per_s'] / 1e9:.2f} GB/s and "
                     f"{c.get('spmm_nnz_s', 0) * 1e9:.1f} ns a nonzero (in rcm order "
                     f"{c.get('spmm_ordered_bytes_per_s', math.nan) / 1e9:.2f} GB/s and "
                     f"{c.get('spmm_ordered_nnz_s', math.nan) * 1e9:.1f} ns), "
                     f"dense {c['flops_per_s'] / 1e9:.1f} GFlop/s and "
                     f"{c.get('dense_bytes_per_s', math.inf) / 1e9:.2f} GB/s (a blocked weight gradient's packing "
                     f"{c.get('pack_bytes_per_s', math.inf) / 1e9:.2f} GB/s), elementwise "
                     f"{c['elementwise_bytes_per_s'] / 1e9:.2f} GB/s, an input's dropout "
                     f"{c.get('dropout_bytes_per_s', math.inf) / 1e9:.2f} GB/s, a fresh mapping's first touch "
                     f"{c.get('fresh_bytes_per_s', math.inf) / 1e9:.2f} GB/s, {c['op_s'] * 1e6:.0f} µs an operation; "
                     "a process holds "
                     f"{c['runtime_bytes'] / 2**20:.0f} MiB before any data; a collective entered from computation "
                     f"waits {c.get('sync_wait_s', math.nan) * 1e3:.2f} ms more than back to back", ""]
        if c.get("alone"):
            a = c["alone"]
            lines[1:1] = [f"one process alone with every core, a core's: SpMM {a['spmm_bytes_per_s'] / 1e9:.2f} GB/s "
                            f"and {a['spmm_nnz_s'] * 1e9:.1f} ns a nonzero, dense {a['flops_per_s'] / 1e9:.1f} "
                            f"GFlop/s, elementwise {a['elementwise_bytes_per_s'] / 1e9:.2f} GB/s, "
                            f"{a['op_s'] * 1e6:.0f} µs an operation"]
    for op, c in result["collectives"].items():
        per_msg = f"{c['alpha_per_message_s'] * 1e6:.1f}" if c["alpha_per_message_s"] is not None else "-"
        bw = f"{c['bandwidth_bytes_per_s'] / 1e9:.3f}" if c["bandwidth_bytes_per_s"] else "inf"
        lines.append(f"| {op} | {c['alpha_s'] * 1e6:.1f} | {per_msg} | {bw} | {c['rms_relative_error']:.2f} | "
                     f"{len(c['points'])} |")
    return "\n".join(lines)
