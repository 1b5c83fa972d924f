"""The α-β communication cost model: what each rank moves in a training run, predicted exactly for the
schedule the code runs, and how long that takes.

Bytes and messages: every algorithm states what one SpMM of width f costs each rank
(`DistSpMM.spmm_cost`) from the partition's block statistics (`BlockStats`: rows per part, and the
P×P matrix of halo rows |R_ij|). `predict` assembles a run from them the way `Trainer` executes it
(setup; per epoch the forward SpMMs layer by layer, the backward in reverse, the gradient all-reduce and
the loss sum; evaluations) into one `Ledger` per rank, keyed like the measured ledger, so a test can
demand equality.

Seconds: t = Σ over ledger rows of α_op·calls + β_op·`charged_bytes`, with α and β per collective from
`spgnn calibrate` (schema "spgnn.calibration/1") or, by default, the gloo figures DESIGN.md §4 measured on
a 2-core machine. Time is a model; bytes are exact.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from . import graph as graphs
from . import spmm
from .comm import Ledger, ring_words
from .errors import SpgnnError
from .layers import GNN, LAYERS, spmm_width

MODELLED = ("gcn", "sage")      # models whose layers communicate only through `DistSpMM.spmm`

# Seconds per call and per byte for torch.distributed/gloo over loopback (DESIGN.md §4, P = 2, 64 MB).
DEFAULT_ALPHA_BETA = {"broadcast": (1e-4, 1 / 0.96e9), "all_reduce": (1e-4, 1 / 0.38e9),
                      "all_to_all": (1e-4, 1 / 0.57e9), "all_gather": (1e-4, 1 / 0.15e9),
                      "reduce_scatter": (1e-4, 1 / 0.38e9)}


@dataclass
class BlockStats:
    """Block statistics of the (renumbered) n×n A under a partition: `sizes[p]` rows in part p, and
    `halo[i, j]` = |R_ij|, the distinct rows of part j that block row i touches (zero diagonal)."""

    sizes: np.ndarray
    adj: object = None
    parts: np.ndarray | None = None
    expected_halo: np.ndarray | None = None

    @classmethod
    def of(cls, adj, partition) -> BlockStats:
        """Exact statistics of `adj` (already renumbered by `partition`)."""
        return cls(partition.sizes(), adj, np.repeat(np.arange(partition.P), partition.sizes()))

    @classmethod
    def expected(cls, n: int, nnz: int, P: int) -> BlockStats:
        """Statistics of a graph known only by n and nnz, parts of equal size and columns uniformly random:
        block row i (nnz/P nonzeros) touches a row of part j with probability 1 − exp(−nnz/(P·n))."""
        sizes = np.full(P, n / P)
        halo = np.outer(np.ones(P), sizes) * -math.expm1(-nnz / (P * n))
        np.fill_diagonal(halo, 0)
        return cls(sizes, expected_halo=halo)

    @cached_property
    def halo(self) -> np.ndarray:
        if self.expected_halo is not None:
            return self.expected_halo
        from .partition_metrics import halo_rows

        return halo_rows(self.adj, self.parts, len(self.sizes))


def spmm_widths(widths) -> list[int]:
    """Columns of each layer's sparse product, for layer widths [f_0, f_1, …, f_L]."""
    return [spmm_width(a, b) for a, b in zip(widths[:-1], widths[1:])]


def input_has_backward(layer_widths) -> bool:
    """Whether layer 0's sparse product has a backward: only when it multiplies by W first (Â·(X·W)); Â·X
    needs no gradient, the features X being data."""
    return spmm_width(layer_widths[0], layer_widths[1]) < layer_widths[0]


def epoch_ledger(cls, stats, shape, rank, widths, n_params, epochs=1, evals=1, setup=True,
                 input_backward=True) -> Ledger:
    """The ledger `rank` records for the algorithm's setup, `epochs` training steps and `evals`
    evaluations of a model with SpMM widths `widths` and `n_params` float32 parameters
    (`input_backward`: whether layer 0's product has a backward, `input_has_backward`)."""
    ledger = Ledger()
    cost = {w: cls.spmm_cost(stats, shape, rank, w) for w in set(widths)}

    def record(phase, layer, calls):
        for op, group, sent, recv, messages in calls:
            ledger.record((phase, layer, op, group), sent, recv, messages, 0.0)

    def all_sum(phase, words):   # Comm.all_sum: one float64 all-reduce over the rows group
        g, me = cls.member(shape, cls.rows_group_name, rank)
        b = ring_words(words, g, me) * 8
        record(phase, None, [("all_reduce", cls.rows_group_name, b, b, 2 * (g - 1))])

    if setup and widths:
        record("setup", None, cost[widths[0]]["setup"])
    for _ in range(epochs):
        for layer, w in enumerate(widths):
            record("forward", layer, cost[w]["forward"])
        for layer, w in reversed(list(enumerate(widths))):
            if layer or input_backward:
                record("backward", layer, cost[w]["backward"])
        g, me = cls.member(shape, cls.rows_group_name, rank)       # the gradient group
        if g > 1:
            b = ring_words(n_params, g, me) * 4
            record("optimizer", None, [("all_reduce", cls.rows_group_name, b, b, 2 * (g - 1))])
        all_sum("optimizer", 1)
    for _ in range(evals):
        for layer, w in enumerate(widths):
            record("eval", layer, cost[w]["forward"])
        all_sum("eval", 3)
    return ledger


def model_shape(cfg, graph) -> tuple[list[int], int, bool]:
    """(SpMM widths per layer, number of parameters, whether layer 0's product has a backward) of the
    model `cfg` describes on `graph`."""
    net = GNN(cfg.model, graph.num_features, cfg.hidden, graph.num_classes, cfg.layers, cfg.dropout, cfg.seed)
    widths = [graph.num_features] + [cfg.hidden] * (cfg.layers - 1) + [graph.num_classes]
    return spmm_widths(widths), sum(p.numel() for p in net.parameters()), input_has_backward(widths)


def predict(cfg, graph, P: int, epochs: int = 1, evals: int = 1, setup: bool = True) -> list[Ledger]:
    """One predicted ledger per rank for `cfg` trained on `graph` with P processes."""
    from .trainer import plan

    p = plan(cfg, P, graph)
    g, partition, shape, cfg = p.graph, p.partition, p.shape, p.cfg
    cls = spmm.get(cfg.algo)
    if cfg.model not in MODELLED:
        raise SpgnnError(f"the cost model covers --model {' or '.join(MODELLED)}, not {cfg.model}")
    adj = graphs.NORMALIZATIONS[LAYERS[cfg.model].adjacency](g.adj)
    stats = BlockStats.of(partition.renumber(adj), partition)
    widths, n_params, input_backward = model_shape(cfg, g)
    return [epoch_ledger(cls, stats, shape, r, widths, n_params, epochs, evals, setup, input_backward)
            for r in range(P)]


def charged_bytes(op: str, sent: int, recv: int) -> int:
    """The bytes whose transfer time a collective costs a rank: what it receives for a broadcast (the
    ledger charges the root b·(g−1) logically, but a tree or pipelined broadcast costs it about b, like a
    receiver), the larger of sent and received otherwise."""
    return recv if op == "broadcast" else max(sent, recv)


def seconds(ledger: Ledger, alpha_beta=None) -> float:
    """Predicted seconds of a ledger's collectives: Σ α_op·calls + β_op·charged_bytes."""
    ab = alpha_beta or DEFAULT_ALPHA_BETA
    return sum(ab[op][0] * row[0] + ab[op][1] * charged_bytes(op, row[1], row[2])
               for (_, _, op, _), row in ledger.rows.items())


def load_calibration(path) -> dict:
    """{op: (α, β)} from a ``spgnn calibrate --output`` file."""
    data = json.loads(open(path).read())
    return {op: (v["alpha_s"], v["beta_s_per_byte"]) for op, v in data["collectives"].items()}


def candidates(P: int) -> list[tuple[str, int]]:
    """(algorithm, replication) pairs `--algo auto` compares for P processes: every algorithm with a
    cost model, 1.5D with each replication c > 1 dividing P with c² ≤ P (beyond that a replica has less
    than one broadcast stage and holds more than n/√P rows of A: CAGNET's range)."""
    modelled = [name for name, cls in spmm.ALGORITHMS.items() if cls.has_cost_model()]
    return [(name, 0) for name in modelled if name != "1.5d"] + \
        [("1.5d", c) for c in range(2, math.isqrt(P) + 1) if P % c == 0 and "1.5d" in modelled]


def choose(cfg, graph, P: int, alpha_beta=None) -> tuple[object, list[dict]]:
    """The config with the algorithm and grid of lowest predicted communication time per epoch (slowest
    rank), and the table of what was compared."""
    table = []
    for algo, c in candidates(P):
        trial = replace(cfg, algo=algo, replication=c)
        ledgers = predict(trial, graph, P, setup=False)
        t = max(seconds(led, alpha_beta) for led in ledgers)
        table.append({"algo": algo, "replication": c, "seconds": t,
                      "max_recv_bytes": max(led.total("recv_bytes") for led in ledgers)})
    best = min(table, key=lambda row: (row["seconds"], row["algo"], row["replication"]))
    return replace(cfg, algo=best["algo"], replication=best["replication"]), table


def plan_table(n: int, nnz: int, Ps, layer_widths, n_params: int, alpha_beta=None, ranks: int = 8) -> list[dict]:
    """Predicted per-epoch communication (one training step) of every modelled algorithm and grid for a
    graph known by n and nnz (`BlockStats.expected`), at each P in `Ps`: the largest over the first
    `ranks` ranks of bytes received and of seconds, for layer widths [f_0, …, f_L]. Parts are equal, so
    those ranks stand for all."""
    widths, input_backward = spmm_widths(layer_widths), input_has_backward(layer_widths)
    rows = []
    for P in Ps:
        for algo, c in candidates(P):
            cls = spmm.get(algo)
            shape = cls.grid_shape(P, c)
            stats = BlockStats.expected(n, nnz, shape[0])
            ledgers = [epoch_ledger(cls, stats, shape, r, widths, n_params, evals=0, setup=False,
                                    input_backward=input_backward) for r in range(min(P, ranks))]
            rows.append({"P": P, "algo": algo, "replication": shape[1] if len(shape) > 1 else 1,
                         "recv_bytes_per_rank": max(led.total("recv_bytes") for led in ledgers),
                         "seconds": max(seconds(led, alpha_beta) for led in ledgers)})
    return rows
