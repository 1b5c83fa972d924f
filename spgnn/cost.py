"""The α-β communication cost model: what each rank moves in a training run, predicted exactly for the
schedule the code runs, and how long that takes.

Bytes and messages: every algorithm states what one SpMM of width f costs each rank
(`DistSpMM.spmm_cost`), and what its dense operations cost (`DistSpMM.dense_cost`: H·W, log-softmax and
argmax, which move data only in the column-split 2D/3D layouts), from the partition's block statistics
(`BlockStats`: rows per part, the matrix of halo rows |R_ij|, the nonzeros of each block). `predict`
assembles a run from them the way `Trainer` executes it (setup; per epoch the forward layer by layer, the
backward, the gradient all-reduce and the loss sum; evaluations) into one `Ledger` per rank, keyed like
the measured ledger, so a test can demand equality.

Seconds: t = Σ over ledger rows of α_op·`latency_steps` + β_op·`charged_bytes`: an all-to-all pays α for
each peer it sends to, an all-reduce 2·⌈log₂ g⌉ steps, an all-gather or reduce-scatter ⌈log₂ g⌉, a
broadcast one a call (recursive doubling and trees, as MPI and NCCL do for latency), with α and β per
collective from `spgnn calibrate` (schema "spgnn.calibration/1") or, by default, the gloo figures
measured on a 2-core machine (`DEFAULT_ALPHA_BETA` below). Time is a model; bytes are exact.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import numpy as np

from . import spmm
from .comm.comm import Ledger, ring_words
from .comm.grid import format_grid
from .comm.halo import Halo
from .errors import SpgnnError
from .graph import graph as graphs
from .layers.conv import LAYERS, spmm_width

MODELLED = ("gcn", "sage")      # models whose layers communicate only through `DistSpMM.spmm`

# Seconds per latency step and per byte for torch.distributed/gloo over loopback, measured on 2 cores with 64 MB
# a rank at P = 2 (broadcast 0.96, all-reduce 0.38, all-to-all 0.57, all-gather 0.15 GB/s; 100 µs a call, where
# an all-reduce takes 2 steps and the others 1).
DEFAULT_ALPHA_BETA = {"broadcast": (1e-4, 1 / 0.96e9), "all_reduce": (5e-5, 1 / 0.38e9),
                      "all_to_all": (1e-4, 1 / 0.57e9), "all_gather": (1e-4, 1 / 0.15e9),
                      "reduce_scatter": (1e-4, 1 / 0.38e9)}


@dataclass
class BlockStats:
    """Block statistics of the (normalised, renumbered) n×n A under a partition into B parts: `sizes[p]` rows
    in part p, `halo[i, j]` = |R_ij|, the distinct rows of part j that block row i touches (zero diagonal),
    `block_nnz[i, j]` the nonzeros of block (i, j), and whether A is symmetric (no blocks of Aᵀ to ship)."""

    sizes: np.ndarray
    halo: np.ndarray
    block_nnz: np.ndarray
    symmetric: bool = True

    @classmethod
    def of(cls, adj, partition) -> BlockStats:
        """Exact statistics of `adj` (already renumbered by `partition`)."""
        from .partition.metrics import block_nnz, halo_rows

        k, parts = partition.P, np.repeat(np.arange(partition.P), partition.sizes())
        return cls(partition.sizes(), halo_rows(adj, parts, k), block_nnz(adj, parts, k), graphs.is_symmetric(adj))

    @classmethod
    def of_raw(cls, sizes, halo, block_nnz, diagonal, symmetric: bool, norm: str) -> BlockStats:
        """The statistics of the normalised A from those of the raw A (`diagonal[p]`: its self-loops in part
        p): GCN and self-loops fill the diagonal; mean normalisation is not symmetric."""
        block_nnz = np.array(block_nnz, dtype=np.int64)
        if norm in ("gcn", "self-loops"):
            block_nnz[np.diag_indices_from(block_nnz)] += np.asarray(sizes) - np.asarray(diagonal)
        return cls(np.asarray(sizes), np.asarray(halo), block_nnz, bool(symmetric) and norm != "mean")

    @classmethod
    def expected(cls, n: int, nnz: int, P: int) -> BlockStats:
        """Statistics of a graph known only by n and nnz, parts of equal size and columns uniformly random:
        block row i (nnz/P nonzeros) touches a row of part j with probability 1 − exp(−nnz/(P·n))."""
        sizes = np.full(P, n / P)
        halo = np.outer(np.ones(P), sizes) * -math.expm1(-nnz / (P * n))
        np.fill_diagonal(halo, 0)
        return cls(sizes, halo, np.full((P, P), nnz / P**2))


@dataclass(frozen=True)
class ModelShape:
    """What the cost model needs to know of a GCN or GraphSAGE model: layer widths [f_0, f_1, …, f_L], the
    dense products H·W each layer makes (GCN 1, GraphSAGE 2: neighbours and root) and the normalisation of A
    (GCN's needs the degrees of remote columns at set-up)."""

    widths: tuple
    linears: int = 1
    norm: str = "gcn"

    @classmethod
    def of(cls, cfg, graph) -> ModelShape:
        """The model `cfg` describes on `graph` (a Graph or a `spgnn.partition.share.GraphInfo`)."""
        widths = (graph.num_features,) + (cfg.hidden,) * (cfg.layers - 1) + (graph.num_classes,)
        return cls(widths, 2 if cfg.model == "sage" else 1, LAYERS[cfg.model].adjacency)

    @property
    def spmm_widths(self) -> list[int]:
        """Columns of each layer's sparse product."""
        return [spmm_width(a, b) for a, b in zip(self.widths[:-1], self.widths[1:])]

    @property
    def input_backward(self) -> bool:
        """Whether layer 0's sparse product has a backward: only when it multiplies by W first (Â·(X·W));
        Â·X needs no gradient, the features X being data."""
        return spmm_width(*self.widths[:2]) < self.widths[0]

    @property
    def n_params(self) -> int:
        """float32 parameters: W (f_in×f_out, `linears` of them) and b (f_out) a layer."""
        return sum(self.linears * a * b + b for a, b in zip(self.widths[:-1], self.widths[1:]))


def epoch_ledger(cls, stats, shape, rank, model: ModelShape, epochs=1, evals=1, setup=True) -> Ledger:
    """The ledger `rank` records for the algorithm's setup, `epochs` training steps and `evals`
    evaluations of `model`, keyed like `Comm`'s: per layer its SpMM and dense products forward and
    backward, then the log-softmax, the gradient all-reduce and the loss sum; an evaluation is the
    forward, the argmax and the accuracy sums."""
    ledger = Ledger()
    widths, classes = model.spmm_widths, model.widths[-1]
    spmm_cost = {w: cls.spmm_cost(stats, shape, rank, w) for w in set(widths)}
    linear = [cls.dense_cost(stats, shape, rank, "linear", a, b) for a, b in zip(model.widths[:-1], model.widths[1:])]
    softmax = cls.dense_cost(stats, shape, rank, "log_softmax", classes)
    argmax = cls.dense_cost(stats, shape, rank, "argmax", classes)

    def record(phase, layer, calls, times=1):
        for op, group, sent, recv, messages in calls * times:
            ledger.record((phase, layer, op, group), sent, recv, messages, 0.0)

    g, me = cls.member(shape, cls.rows_group_name, rank)

    def all_reduce(phase, words, itemsize):
        b = ring_words(words, g, me) * itemsize
        record(phase, None, [("all_reduce", cls.rows_group_name, b, b, 2 * (g - 1))])

    def forward(phase):
        for layer, w in enumerate(widths):
            record(phase, layer, spmm_cost[w]["forward"])
            record(phase, layer, linear[layer]["forward"], model.linears)

    if setup:
        record("setup", None, setup_cost(cls, stats, shape, rank, model.norm))
    for _ in range(epochs):
        forward("forward")
        record("forward", None, softmax["forward"])
        record("backward", None, softmax["backward"])
        for layer, w in enumerate(widths):
            if layer or model.input_backward:
                record("backward", layer, spmm_cost[w]["backward"])
            record("backward", layer, linear[layer]["backward"], model.linears)
        if g > 1:                                       # all_reduce_gradients skips a group of one
            all_reduce("optimizer", model.n_params, 4)
        all_reduce("optimizer", 1, 8)                   # the loss sum (Comm.all_sum: float64)
    for _ in range(evals):
        forward("eval")
        record("eval", None, argmax["forward"])
        all_reduce("eval", 3, 8)                        # correct counts: train, validation, test
    return ledger


def setup_cost(cls, stats, shape, rank, norm: str) -> list:
    """What `rank` moves to build the layout from its block row: the `Halo` set-up in the algorithm's parts
    group (when it uses it or GCN needs remote degrees), the degrees (float32), then its own redistribution."""
    part, group = cls.part_of(shape, tuple(int(x) for x in np.unravel_index(rank, shape))), cls.parts_group
    calls = Halo.cost(stats.halo, part, group) if cls.uses_halo or norm == "gcn" else []
    if norm == "gcn":
        calls += Halo.gather_cost(stats.halo, part, group, 4)
    return calls + cls.setup_cost(stats, shape, rank)


def charged_bytes(op: str, sent: int, recv: int) -> int:
    """The bytes whose transfer time a collective costs a rank: what it receives for a broadcast (the
    ledger charges the root b·(g−1) logically, but a tree or pipelined broadcast costs it about b, like a
    receiver), the larger of sent and received otherwise."""
    return recv if op == "broadcast" else max(sent, recv)


def latency_steps(op: str, calls: int, messages: int) -> float:
    """The latencies a rank pays for a ledger row of `calls` calls that sent `messages` messages: an
    all-to-all one a peer it sends to (at least one a call: a receiver waits for a message); an all-reduce
    2·⌈log₂ g⌉, an all-gather or reduce-scatter ⌈log₂ g⌉ (recursive halving and doubling move the ring's
    bytes in that many steps), g read from the ring's messages a call (2(g−1), g−1); a broadcast one."""
    if op == "all_to_all":
        return max(calls, messages)
    if op == "broadcast" or not calls:
        return calls
    if op == "all_reduce":
        return calls * 2 * math.ceil(math.log2(messages / (2 * calls) + 1))
    return calls * max(1, math.ceil(math.log2(messages / calls + 1)))


def seconds(ledger: Ledger, alpha_beta=None) -> float:
    """Predicted seconds of a ledger's collectives: Σ α_op·latency_steps + β_op·charged_bytes."""
    ab = alpha_beta or DEFAULT_ALPHA_BETA
    return sum(ab[op][0] * latency_steps(op, row[0], row[3]) + ab[op][1] * charged_bytes(op, row[1], row[2])
               for (_, _, op, _), row in ledger.rows.items())


def load_calibration(path) -> dict:
    """{op: (α per latency step, β)} from a ``spgnn calibrate --output`` file (α a call over the steps a
    call took there)."""
    data = json.loads(open(path).read())
    return {op: (v["alpha_s"] / max(latency_steps(op, 1, v["messages"]), 1), v["beta_s_per_byte"])
            for op, v in data["collectives"].items()}


def candidates(P: int) -> list[dict]:
    """The options ``--algo auto`` compares for P processes: for every registered algorithm with a cost model,
    each set of its shape-option values it proposes (`DistSpMM.candidates`), as {"algo", every shape option}
    (the others' at their defaults)."""
    defaults = {o.name: o.default for o in spmm.options().values() if o.shapes}
    return [{"algo": name} | defaults | values for name, cls in spmm.ALGORITHMS.items() if cls.has_cost_model()
            for values in cls.candidates(P)]


def choose(cfg, graph, P: int, stats_of, alpha_beta=None, hint: str = "") -> tuple[object, list[dict]]:
    """The config with the algorithm and grid of lowest predicted communication time per epoch (slowest
    rank), and the table of what was compared. `graph`: a Graph or `spgnn.partition.share.GraphInfo` (for the
    widths); `stats_of(cls, shape, model)`: the block statistics of the normalised A for that layout, or None
    when the layout does not fit the data (not compared). `hint` ends the error when nothing fits."""
    table = []
    for option in candidates(P):
        c, cls = replace(cfg, **option), spmm.get(option["algo"])
        if cfg.batch_norm and not cls.whole_rows:
            continue                                    # batch norm needs whole rows
        shape, model = cls.grid_for(P, **option), ModelShape.of(c, graph)
        stats = stats_of(cls, shape, model)
        if stats is None:
            continue
        ledgers = [epoch_ledger(cls, stats, shape, r, model, setup=False) for r in range(P)]
        table.append(option | {"seconds": max(seconds(led, alpha_beta) for led in ledgers),
                               "max_recv_bytes": max(led.total("recv_bytes") for led in ledgers)})
    if not table:
        raise SpgnnError(f"--algo auto: no modelled algorithm fits on {P} processes{hint}")
    keys = ["algo", *(o.name for o in spmm.options().values() if o.shapes)]

    def order(row):                                     # fastest; ties by name, then option values (None last)
        return (row["seconds"], *((row[k] is None, row[k] if row[k] is not None else 0) for k in keys))

    best = min(table, key=order)
    return replace(cfg, **{k: best[k] for k in keys}), table


def plan_table(n: int, nnz: int, Ps, model: ModelShape, alpha_beta=None, ranks: int = 8) -> list[dict]:
    """Predicted per-epoch communication (one training step) of every modelled algorithm and grid for a
    graph known by n and nnz (`BlockStats.expected`), at each P in `Ps`: the largest over the first
    `ranks` ranks of bytes received and of seconds. Parts are equal, so those ranks stand for all
    (in 2D/3D up to the one column more that the first f mod C column blocks hold)."""
    rows = []
    for P in Ps:
        for option in candidates(P):
            cls = spmm.get(option["algo"])
            shape = cls.grid_for(P, **option)
            stats = BlockStats.expected(n, nnz, cls.num_parts(shape))
            ledgers = [epoch_ledger(cls, stats, shape, r, model, evals=0, setup=False) for r in range(min(P, ranks))]
            rows.append({"P": P, **option, "shape": format_grid(shape),
                         "recv_bytes_per_rank": max(led.total("recv_bytes") for led in ledgers),
                         "seconds": max(seconds(led, alpha_beta) for led in ledgers)})
    return rows
