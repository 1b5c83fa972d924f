"""The α-β communication cost model: what each rank moves in a training run, predicted exactly for the
schedule the code runs, and how long that takes.

Bytes and messages: every algorithm states what one SpMM of width f costs each rank
(`DistSpMM.spmm_cost`), and what its dense operations cost (`DistSpMM.dense_cost`: H·W, log-softmax and
argmax, which move data only in the column-split 2D/3D layouts), from the partition's block statistics
(`BlockStats`: rows per part, the matrix of halo rows |R_ij|, the nonzeros of each block, under each adjacency).
A model states what its layers do (`ModelCost`, from each `spgnn.layers.Layer.costs`: sparse products with their
widths and adjacency, dense products, global sums); `epoch_ledger` assembles a run from both the way `Trainer`
executes it (setup; per epoch the forward layer by layer, the loss sum, the backward, the gradient all-reduce;
evaluations) into one `Ledger` per rank, keyed like the measured ledger, so a test can demand equality. A layer
that declares no cost is refused, never modelled as another.

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
import torch
from torch import nn

from . import spmm
from .comm.comm import Ledger, ring_words
from .comm.grid import format_grid
from .comm.halo import Halo
from .errors import SpgnnError
from .graph import graph as graphs
from .graph.adjacency import get_adjacency
from .layers.registry import Dense, Spmm

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
    def of_raw(cls, sizes, halo, block_nnz, diagonal, symmetric: bool, norm) -> BlockStats:
        """The statistics of A normalised by the adjacency `norm` (`spgnn.graph.adjacency.Adjacency.block_nnz`)
        from those of the raw A (`diagonal[p]`: its self-loops in part p)."""
        adjacency = get_adjacency(norm)
        return cls(np.asarray(sizes), np.asarray(halo), adjacency.block_nnz(block_nnz, sizes, diagonal),
                   bool(symmetric) and adjacency.symmetric)

    @classmethod
    def expected(cls, n: int, nnz: int, P: int) -> BlockStats:
        """Statistics of a graph known only by n and nnz, parts of equal size and columns uniformly random:
        block row i (nnz/P nonzeros) touches a row of part j with probability 1 − exp(−nnz/(P·n))."""
        sizes = np.full(P, n / P)
        halo = np.outer(np.ones(P), sizes) * -math.expm1(-nnz / (P * n))
        np.fill_diagonal(halo, 0)
        return cls(sizes, halo, np.full((P, P), nnz / P**2))


@dataclass(frozen=True)
class ModelCost:
    """What the cost model needs of a model: per layer (in ledger-layer order) the operations its layers declare
    (`spgnn.layers.Layer.costs`: `Spmm`, `Dense`, `AllReduce`), the width of its output (the classes) and its
    parameter count (the gradient all-reduce)."""

    layers: tuple
    classes: int
    n_params: int
    needs: frozenset = frozenset()

    @classmethod
    def of(cls, model) -> ModelCost:
        """The costs `model` declares: a `spgnn.layers.GNN` (its layers and batch norms), or any module made of
        `spgnn.layers.Layer`s applied once each in the order they were registered. SpgnnError naming the first
        layer that declares no cost, or a module with parameters outside any layer."""
        from .layers.registry import Layer

        layers = list(model.layers) if hasattr(model, "layers") and isinstance(model.layers, nn.ModuleList) \
            else [m for m in model.modules() if isinstance(m, Layer)]
        norms = list(getattr(model, "norms", None) or [])
        covered = {id(p) for m in layers + norms for p in m.parameters()}
        stray = next((k for k, p in model.named_parameters() if id(p) not in covered), None)
        if not layers or stray is not None:
            raise SpgnnError(f"the cost model cannot see {'parameter ' + repr(stray) if stray else 'any layer'} of "
                             f"{type(model).__name__}: build it from spgnn.layers.Layer modules (e.g. spgnn.layers."
                             "Linear for a dense product) that declare costs()")
        out, grad = [], False
        for i, layer in enumerate(layers):
            ops = layer.costs(grad)
            if ops is None:
                raise SpgnnError(f"layer {i} ({type(layer).__name__}{', --model ' + layer.name if layer.name else ''}) "
                                 "declares no cost (Layer.costs), so the cost model cannot predict it: --algo auto and "
                                 "spgnn cost need a model whose layers declare theirs; name an --algo to train it")
            if i < len(norms):
                ops = list(ops) + norms[i].costs(True)
            out.append(tuple(ops))
            grad = grad or any(p.requires_grad for p in layer.parameters())
        needs = frozenset().union(*(layer.needs for layer in layers)) | ({"whole_rows"} if norms else set())
        return cls(tuple(out), layers[-1].f_out, sum(p.numel() for p in model.parameters()), needs)

    @classmethod
    def of_config(cls, cfg, f_in: int, classes: int) -> ModelCost:
        """The costs of the built-in model `cfg` describes (``--model``, widths, options)."""
        from .layers.stack import config_model

        with torch.random.fork_rng():
            return cls.of(config_model(cfg, f_in, classes))

    @property
    def adjacencies(self) -> list[str]:
        """The adjacencies its sparse products multiply by, in order of first use."""
        return list(dict.fromkeys(op.adjacency for ops in self.layers for op in ops if isinstance(op, Spmm)))


def epoch_ledger(cls, stats, shape, rank, model: ModelCost, epochs=1, evals=1, setup=True) -> Ledger:
    """The ledger `rank` records for the algorithm's setup, `epochs` training steps and `evals`
    evaluations of `model`, keyed like `Comm`'s: per layer each declared operation forward and backward, the
    log-softmax and the loss sum, then the gradient all-reduce; an evaluation is the forward, the argmax and
    the accuracy sums. `stats`: the block statistics of A under each adjacency the model uses ({name: BlockStats})."""
    ledger = Ledger()
    first = next(iter(stats.values()))
    memo = {}
    g, me = cls.member(shape, cls.rows_group_name, rank)

    def reduce_calls(words, itemsize) -> list:          # one all-reduce over the rows group (Comm.all_reduce)
        b = ring_words(words, g, me) * itemsize
        return [("all_reduce", cls.rows_group_name, b, b, 2 * (g - 1))]

    def cost(op) -> dict:
        if op not in memo:
            if isinstance(op, Spmm):
                memo[op] = cls.spmm_cost(stats[op.adjacency], shape, rank, op.width)
            elif isinstance(op, Dense):
                memo[op] = cls.dense_cost(first, shape, rank, "linear", op.f_in, op.f_out)
            else:
                call = reduce_calls(op.words, op.itemsize)
                memo[op] = {"forward": call, "backward": call if op.backward else [], "eval": [] if op.train_only
                            else call}
        return memo[op]

    def record(phase, layer, calls):
        for op, group, sent, recv, messages in calls:
            ledger.record((phase, layer, op, group), sent, recv, messages, 0.0)

    def all_reduce(phase, words, itemsize):
        record(phase, None, reduce_calls(words, itemsize))

    def forward(phase):
        for layer, ops in enumerate(model.layers):
            for op in ops:
                calls = cost(op)
                record(phase, layer, calls["eval"] if phase == "eval" and "eval" in calls else calls["forward"])

    softmax = cls.dense_cost(first, shape, rank, "log_softmax", model.classes)
    argmax = cls.dense_cost(first, shape, rank, "argmax", model.classes)
    if setup:
        for name, s in stats.items():
            record("setup", None, setup_cost(cls, s, shape, rank, name))
    for _ in range(epochs):
        forward("forward")
        record("forward", None, softmax["forward"])
        all_reduce("forward", 1, 8)                     # the loss sum (Comm.all_sum: float64)
        record("backward", None, softmax["backward"])
        for layer, ops in enumerate(model.layers):
            for op in ops:
                if not isinstance(op, Spmm) or op.backward:
                    record("backward", layer, cost(op)["backward"])
        if g > 1:                                       # all_reduce_gradients skips a group of one
            all_reduce("optimizer", model.n_params, 4)
    for _ in range(evals):
        forward("eval")
        record("eval", None, argmax["forward"])
        all_reduce("eval", 3, 8)                        # correct counts: train, validation, test
    return ledger


def setup_cost(cls, stats, shape, rank, norm) -> list:
    """What `rank` moves to build the layout of adjacency `norm` from its block row: the `Halo` set-up in the
    algorithm's parts group (when it uses it or the adjacency needs remote degrees), the degrees (float32), then
    its own redistribution."""
    part, group = cls.part_of(shape, tuple(int(x) for x in np.unravel_index(rank, shape))), cls.parts_group
    remote = get_adjacency(norm).remote_degrees
    calls = Halo.cost(stats.halo, part, group) if cls.uses_halo or remote else []
    if remote:
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


def choose(cfg, P: int, stats_of, model: ModelCost, alpha_beta=None, hint: str = "") -> tuple[object, list[dict]]:
    """The config with the algorithm and grid of lowest predicted communication time per epoch (slowest
    rank) for `model`, and the table of what was compared. `stats_of(cls, shape, adjacencies)`: {name: the block
    statistics of A under that adjacency} for that layout, or None when the layout does not fit the data (not
    compared). Layouts that do not offer what the model needs are not compared. `hint` ends the error when
    nothing fits."""
    table = []
    for option in candidates(P):
        cls = spmm.get(option["algo"])
        if any(not getattr(cls, need) for need in model.needs):
            continue
        shape = cls.grid_for(P, **option)
        stats = stats_of(cls, shape, model.adjacencies)
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


def plan_table(n: int, nnz: int, Ps, model: ModelCost, alpha_beta=None, ranks: int = 8) -> list[dict]:
    """Predicted per-epoch communication (one training step) of every modelled algorithm and grid for a
    graph known by n and nnz (`BlockStats.expected`), at each P in `Ps`: the largest over the first
    `ranks` ranks of bytes received and of seconds. Parts are equal, so those ranks stand for all
    (in 2D/3D up to the one column more that the first f mod C column blocks hold)."""
    rows = []
    for P in Ps:
        for option in candidates(P):
            cls = spmm.get(option["algo"])
            shape = cls.grid_for(P, **option)
            stats = dict.fromkeys(model.adjacencies, BlockStats.expected(n, nnz, cls.num_parts(shape)))
            ledgers = [epoch_ledger(cls, stats, shape, r, model, evals=0, setup=False) for r in range(min(P, ranks))]
            rows.append({"P": P, **option, "shape": format_grid(shape),
                         "recv_bytes_per_rank": max(led.total("recv_bytes") for led in ledgers),
                         "seconds": max(seconds(led, alpha_beta) for led in ledgers)})
    return rows
