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
broadcast one a call (recursive doubling and trees, as MPI and NCCL do for latency); a broadcast of b bytes
costs every member, the root too, the time of 2·(g−1)/g·b (a large-message broadcast's scatter and all-gather),
with α and β per collective from `spgnn calibrate` (schema "spgnn.calibration/6") or, by default, the gloo
figures measured on a 2-core machine (`DEFAULT_ALPHA_BETA` below). Time is a model; bytes are exact.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch

from . import progress, spmm
from .comm.comm import OPS, Ledger, ring_words
from .comm.grid import format_grid
from .comm.halo import Halo
from .dense import blocked
from .errors import SpgnnError
from .graph import graph as graphs
from .graph.adjacency import ADJACENCIES, get_adjacency
from .layers.registry import AllReduce, Attend, Dense, Elementwise, Spmm
from .memory import LARGE_BYTES

# Seconds per latency step and per byte for torch.distributed/gloo over loopback at P = 2 on the 2-core development
# machine (an AMD EPYC, torch 2.13): the median of seven `spgnn calibrate --nprocs 2 --sizes 4K,64K,1M,4M,16M
# --repeats 3 --budget 3` on the idle machine (broadcast 4.1, all-reduce 1.8, all-to-all 2.0, all-gather 1.3,
# reduce-scatter 0.83 GB/s; 0.15-0.40 ms a step, an all-reduce 2 steps at P = 2).
DEFAULT_ALPHA_BETA = {"broadcast": (1.47e-4, 1 / 4.12e9), "all_reduce": (1.60e-4, 1 / 1.80e9),
                      "all_to_all": (2.51e-4, 1 / 1.98e9), "all_gather": (2.54e-4, 1 / 1.30e9),
                      "reduce_scatter": (4.03e-4, 1 / 0.83e9)}


@dataclass
class BlockStats:
    """Block statistics of the (normalised, renumbered) n×n A under a partition into B parts: `sizes[p]` rows
    in part p, `halo[i, j]` = |R_ij|, the distinct rows of part j that block row i touches (zero diagonal),
    `block_nnz[i, j]` the nonzeros of block (i, j), whether A is symmetric (no blocks of Aᵀ to ship), and whether
    each part's nodes are in a locality order (``--node-order rcm``: its own block (p, p) is banded)."""

    sizes: np.ndarray
    halo: np.ndarray
    block_nnz: np.ndarray
    symmetric: bool = True
    ordered: bool = False

    @classmethod
    def of(cls, adj, partition, symmetric: bool | None = None) -> BlockStats:
        """Exact statistics of `adj` (already renumbered by `partition`); `symmetric`: whether the layouts treat it
        as symmetric (a symmetric raw A under an adjacency that keeps it so, as `Block.of` claims: D^-½ w D^-½ of
        weighted edges is symmetric only to rounding), else whether `adj` is exactly."""
        from .partition.metrics import block_nnz, halo_rows

        k, parts = partition.P, np.repeat(np.arange(partition.P), partition.sizes())
        symmetric = graphs.is_symmetric(adj) if symmetric is None else bool(symmetric)
        return cls(partition.sizes(), halo_rows(adj, parts, k), block_nnz(adj, parts, k), symmetric,
                   partition.info.get("node_order") == "rcm")

    @classmethod
    def of_raw(cls, sizes, halo, block_nnz, diagonal, symmetric: bool, norm, ordered: bool = False) -> BlockStats:
        """The statistics of A normalised by the adjacency `norm` (`spgnn.graph.adjacency.Adjacency.block_nnz`)
        from those of the raw A (`diagonal[p]`: its self-loops in part p)."""
        adjacency = get_adjacency(norm)
        return cls(np.asarray(sizes), np.asarray(halo), adjacency.block_nnz(block_nnz, sizes, diagonal),
                   bool(symmetric) and adjacency.symmetric, ordered)

    @classmethod
    def expected(cls, n: int, nnz: int, P: int, ordered: bool = False, symmetric: bool = True) -> BlockStats:
        """Statistics of a graph known only by n and nnz, parts of equal size and columns uniformly random:
        block row i (nnz/P nonzeros) touches a row of part j with probability 1 − exp(−nnz/(P·n)); `ordered`:
        each part's nodes in a locality order, as ``--node-order rcm`` puts them; `symmetric`: whether the matrix
        is (an adjacency's normalisation of a symmetric A, `Adjacency.symmetric`). SpgnnError for a graph that
        cannot be (n below 1, or nnz outside [0, n²])."""
        if not (n >= 1 and 0 <= nnz <= n * n):
            raise SpgnnError(f"a graph of n = {n:g} nodes and nnz = {nnz:g} nonzeros cannot be: n must be at least 1 "
                             "and nnz between 0 and n²")
        sizes = np.full(P, n / P)
        halo = np.outer(np.ones(P), sizes) * -math.expm1(-nnz / (P * n))
        np.fill_diagonal(halo, 0)
        return cls(sizes, halo, np.full((P, P), nnz / P**2), symmetric, ordered)


class Undeclared(SpgnnError):
    """A model whose layers do not declare what the cost model reads (a layer's `costs` is None, no sparse product,
    parameters outside any layer): trained without a prediction. A malformed declaration is a plain SpgnnError."""


@dataclass(frozen=True)
class ModelCost:
    """What the cost model needs of a model: per layer (in ledger-layer order) the operations its layers declare
    (`spgnn.layers.Layer.costs`: `Spmm`, `Dense`, `Attend`, `AllReduce`, `Elementwise`), the width of its output
    (the classes), its trained parameters' count (the gradient all-reduce, Adam) and its frozen ones'
    (``requires_grad=False``: held, with no gradient nor optimizer state)."""

    layers: tuple
    classes: int
    n_params: int
    needs: frozenset = frozenset()
    frozen: int = 0
    features: int = 0           # the width of its input (the memory model's feature rows)
    dropped: tuple = ()         # per layer, whether training drops out its input (none where not given)
    in_place: tuple = ()        # per layer, whether its bias and activation change its result in place (no new
                                # result after its products: `spgnn.layers.stack.in_place`)
    saves: tuple = ()           # per layer, whether its backward keeps its input beyond what its dense products take
                                # (`Layer.saves_input`)

    @classmethod
    def of(cls, model, precompute: bool = True) -> ModelCost:
        """The costs `model` declares: a `spgnn.layers.GNN` (its layers and batch norms), or any module made of
        `spgnn.layers.Layer`s applied once each in the order they were registered. With `precompute` (``--precompute
        on``) and a first layer whose input training does not drop out, that input is the graph's features: the
        layer declares what it runs then (``costs(False, features=True)``, where it takes that keyword), and its
        sparse products without a backward, of the features, are made once a run (`Spmm.once`; `DistGraph.spmm`
        keeps them). SpgnnError naming the first layer that declares no cost, or a module with parameters outside
        any layer."""
        from .layers.registry import dropped_inputs, drops_features, layers_of
        from .layers.stack import GNN, in_place

        layers = layers_of(model)
        norms = list(getattr(model, "norms", None) or [])
        covered = {id(p) for m in layers + norms for p in m.parameters()}
        stray = next((k for k, p in model.named_parameters() if id(p) not in covered), None)
        if not layers or stray is not None:
            raise Undeclared(f"the cost model cannot see {'parameter ' + repr(stray) if stray else 'any layer'} of "
                             f"{type(model).__name__}: build it from spgnn.layers.Layer modules (e.g. spgnn.layers."
                             "Linear for a dense product) that declare costs()")
        features = precompute and not drops_features(model)
        out, grad = [], False
        for i, layer in enumerate(layers):
            takes = i == 0 and features and "features" in inspect.signature(layer.costs).parameters
            ops = layer.costs(grad, features=True) if takes else layer.costs(grad)
            if ops is None:
                raise Undeclared(f"layer {i} ({type(layer).__name__}{', --model ' + layer.name if layer.name else ''}) "
                                 "declares no cost (Layer.costs), so the cost model cannot predict it: --algo auto and "
                                 "spgnn cost need a model whose layers declare theirs; name an --algo to train it")
            ops = tuple(ops)
            what = f"layer {i} ({type(layer).__name__}{', --model ' + layer.name if layer.name else ''})"
            if bad := next((op for op in ops if not isinstance(op, (Spmm, Dense, Attend, AllReduce, Elementwise))),
                           None):
                raise SpgnnError(f"{what} declares {bad!r} in costs(): each cost is a spgnn.layers Spmm, Dense, "
                                 "Attend, AllReduce or Elementwise")
            own = getattr(layer, "adjacency", None)
            sparse = [op for op in ops if isinstance(op, (Spmm, Attend))]
            if sparse and own is None:
                raise SpgnnError(f"{what} declares {sparse[0]!r} in costs() but its `adjacency` is unset (None): give "
                                 "the layer class the name of the adjacency it multiplies by, e.g. adjacency = "
                                 f"\"gcn\" (registered: {', '.join(ADJACENCIES)})")
            if other := next((op for op in sparse if get_adjacency(op.adjacency).name != get_adjacency(own).name),
                             None):
                raise SpgnnError(f"{what} declares {other!r} in costs(), over adjacency {other.adjacency!r}, but "
                                 f"multiplies by {own!r} (its `adjacency`): declare its products over the adjacency "
                                 "it multiplies by")
            if i == 0 and features:
                ops = [replace(op, once=True) if isinstance(op, Spmm) and not op.backward else op for op in ops]
            if i < len(norms):
                ops = list(ops) + norms[i].costs(True)
            out.append(tuple(ops))
            grad = grad or any(p.requires_grad for p in layer.parameters())
        if not any(isinstance(op, (Spmm, Attend)) for ops in out for op in ops):
            raise Undeclared(f"the layers of {type(model).__name__} declare no sparse product (an Spmm or Attend) in "
                             "costs(), which is what the cost model predicts a layout by: declare each layer's Spmm "
                             "over its adjacency")
        normed = [bool(m.costs()) for m in norms]       # whether a batch norm follows layer i (a NoNorm: none)
        needs = frozenset().union(*(layer.needs for layer in layers)) | ({"whole_rows"} if any(normed) else set())
        own = tuple(isinstance(model, GNN) and in_place(layer, i == len(layers) - 1, i < len(normed) and normed[i])
                    for i, layer in enumerate(layers))
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return cls(tuple(out), layers[-1].f_out, trained, needs, sum(p.numel() for p in model.parameters()) - trained,
                   layers[0].f_in, dropped_inputs(model, layers), own, tuple(layer.saves_input for layer in layers))

    @classmethod
    def of_config(cls, cfg, f_in: int, classes: int) -> ModelCost:
        """The costs of the built-in model `cfg` describes (``--model``, widths, options), built on torch's meta
        device: its parameters have shapes and no storage, so that a plan takes the same time and memory whatever
        its widths (its counts and declared costs are those of the model built on the CPU). A model whose layers
        read their weights' values as they are built or costed (a plug-in's, say) is built on the CPU."""
        from .layers.stack import config_model

        with torch.random.fork_rng(devices=[]):
            try:
                with torch.device("meta"):
                    return cls.of(config_model(cfg, f_in, classes), cfg.precompute == "on")
            except Exception:   # a layer read its weights' values (.item(), .numpy(), .cpu()): its own error, if any,
                return cls.of(config_model(cfg, f_in, classes), cfg.precompute == "on")     # comes from the CPU

    @property
    def attends(self) -> bool:
        """Whether a layer attends (`Attend`): the layout must state `attend_cost` too."""
        return any(isinstance(op, Attend) for ops in self.layers for op in ops)

    def modelled_on(self, cls) -> bool:
        """Whether the layout of algorithm `cls` offers what the layers need and states the costs they run."""
        return all(getattr(cls, need) for need in self.needs) and cls.has_cost_model(self.attends)

    @property
    def adjacencies(self) -> list[str]:
        """The adjacencies its sparse products and attention multiply by, in order of first use."""
        return list(dict.fromkeys(op.adjacency for ops in self.layers for op in ops if isinstance(op, Spmm | Attend)))


def once(op) -> bool:
    """Whether a declared operation is a product made once a run and kept (`Spmm.once`), not a step's work."""
    return isinstance(op, Spmm) and op.once


def epoch_ledger(cls, stats, shape, rank, model: ModelCost, epochs=1, evals=1, setup=True) -> Ledger:
    """The ledger `rank` records for the algorithm's setup, `epochs` training steps and `evals`
    evaluations of `model`, keyed like `Comm`'s: per layer each declared operation forward and backward (a product
    made once a run, `Spmm.once`, in the first step's forward only), the log-softmax and the loss sum, then the
    gradient all-reduce; an evaluation is the forward, the argmax and the accuracy sums. `setup`: the run's one-time
    exchanges too, the layout's set-up and the products made once (else steady epochs, as a long run's). `stats`:
    the block statistics of A under each adjacency the model uses ({name: BlockStats})."""
    ledger = Ledger()
    first = next(iter(stats.values()))
    memo = {}
    g, me = cls.member(shape, cls.rows_group_name, rank)

    def reduce_calls(words, itemsize) -> list:          # one all-reduce over the rows group (Comm.all_reduce)
        b = ring_words(words, g, me) * itemsize
        return [("all_reduce", cls.rows_group_name, b, b, 2 * (g - 1))]

    def cost(op) -> dict:
        if op not in memo:
            if isinstance(op, Spmm | Attend):
                memo[op] = exchange(cls, stats, shape, rank, op)
            elif isinstance(op, Dense):
                memo[op] = cls.dense_cost(first, shape, rank, "linear", op.f_in, op.f_out)
            elif isinstance(op, Elementwise):                   # moves nothing
                memo[op] = {"forward": [], "backward": []}
            else:
                call = reduce_calls(op.words, op.itemsize)
                memo[op] = {"forward": call, "backward": call if op.backward else [], "eval": [] if op.train_only
                            else call}
        return memo[op]

    def record(phase, layer, calls):
        for op, group, sent, recv, messages in calls:
            ledger.record((phase, layer, op, group), sent, recv, messages, 0.0, group_size(cls, shape, group, rank))

    def all_reduce(phase, words, itemsize):
        record(phase, None, reduce_calls(words, itemsize))

    def forward(phase, first=False):                    # a product made once a run: in the first step's forward
        for layer, ops in enumerate(model.layers):
            for op in ops:
                if first or not once(op):
                    calls = cost(op)
                    record(phase, layer, calls["eval"] if phase == "eval" and "eval" in calls else calls["forward"])

    softmax = cls.dense_cost(first, shape, rank, "log_softmax", model.classes)
    argmax = cls.dense_cost(first, shape, rank, "argmax", model.classes)
    if setup:
        for name, s in stats.items():
            record("setup", None, setup_cost(cls, s, shape, rank, name))
        if epochs:                                      # what attention fetches once, at the first training step
            once_a_run = {op.adjacency: cost(op)["setup"] for ops in model.layers for op in ops
                          if isinstance(op, Attend) and op.dropout}
            for calls in once_a_run.values():
                record("setup", None, calls)
    for epoch in range(epochs):
        forward("forward", first=setup and epoch == 0)
        record("forward", None, softmax["forward"])
        all_reduce("forward", 1, 8)                     # the loss sum (Comm.all_sum: float64)
        record("backward", None, softmax["backward"])
        for layer, ops in enumerate(model.layers):
            for op in ops:
                if not isinstance(op, Spmm) or op.backward:
                    record("backward", layer, cost(op)["backward"])
        if g > 1 and model.n_params:                    # all_reduce_gradients skips a group of one, and no words
            all_reduce("optimizer", model.n_params, 4)
    for _ in range(evals):
        forward("eval")
        record("eval", None, argmax["forward"])
        all_reduce("eval", 3, 8)                        # correct counts: train, validation, test
    return ledger


def exchange(cls, stats: dict, shape, rank: int, op) -> dict:
    """What `rank` moves for a declared sparse product or attention (`Spmm`, `Attend`), in `spmm_cost`'s form: the
    layout's `spmm_cost` or `attend_cost` on the statistics of the op's adjacency."""
    if isinstance(op, Spmm):
        return stated(cls, cls.spmm_cost(stats[op.adjacency], shape, rank, op.width))
    return stated(cls, cls.attend_cost(stats[op.adjacency], shape, rank, op.heads, op.width, op.dropout))


def stated(cls, calls):
    """`calls` as the algorithm `cls` stated them, once checked: {"forward": [...], "backward": [...]}, each call
    (op, group, bytes sent, bytes received, messages), op a collective `Comm` records and group one of the layout's;
    else SpgnnError naming the algorithm (a plug-in's slip broke spgnn cost and --algo auto for every layout)."""
    groups = {*cls.grid_names, *cls.planes(), "world"}
    if not (isinstance(calls, dict) and {"forward", "backward"} <= calls.keys()
            and all(isinstance(c, (tuple, list)) and len(c) == 5 and c[0] in OPS and c[1] in groups
                    for way in ("forward", "backward") for c in calls[way])):
        raise SpgnnError(f"algorithm {cls.name!r}: its spmm_cost (or attend_cost) gives {{'forward': [...], "
                         "'backward': [...]}} of calls (op, group, bytes sent, bytes received, messages), op one of "
                         f"{', '.join(OPS)}, group one of {', '.join(sorted(groups))}; got {str(calls)[:200]}")
    return calls


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


def group_size(cls, shape, group: str, rank: int) -> int | None:
    """The members of `rank`'s group `group` in the layout of `cls` on grid `shape`; None for a group that is not
    one of the grid's (the size matters only to a broadcast's charge, and broadcasts run in the grid's groups)."""
    return _group_size(cls, tuple(shape), group, rank)


@functools.lru_cache(maxsize=1 << 16)       # asked once a collective a rank records: millions at P in the thousands
def _group_size(cls, shape: tuple, group: str, rank: int) -> int | None:
    return cls.member(shape, group, rank)[0] if group == "world" or group in cls.grid_names else None


def charged_bytes(op: str, sent: int, recv: int, g: int | None = None) -> float:
    """The bytes whose transfer time a collective costs a rank in a group of g. A broadcast of b bytes: 2·(g−1)/g·b
    on every member, the root too (the bandwidth term of a large-message broadcast: a scatter, then an all-gather;
    a binomial tree's rounds on cores its ranks share cost about as much). Over a ledger row of root calls (sent
    b·(g−1) each) and receiving calls (b each) that is 2·(sent + (g−1)·recv)/g; at g = 2 one transfer of b, as
    `spgnn calibrate` measures it. Any other collective: the larger of sent and received."""
    if op == "broadcast":
        g = max(g or 2, 2)
        return 2 * (sent + (g - 1) * recv) / g
    return max(sent, recv)


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


def wait_steps(op: str, calls: int, messages: int) -> float:
    """The rounds in which a rank of `calls` calls waits for its peers to be scheduled (ranks beyond the cores,
    `Rates.wait_s`): one a call for an all-to-all, whose messages to all peers are in flight at once; one a
    latency step for the others, each step needing its partner."""
    return calls if op == "all_to_all" else latency_steps(op, calls, messages)


def seconds(ledger: Ledger, alpha_beta=None, phase: str | None = None, wait_s: float = 0.0,
            sync_s: float = 0.0) -> float:
    """Predicted seconds of a ledger's collectives (of one `phase`, if given): Σ α_op·latency_steps +
    β_op·charged_bytes + wait_s·wait_steps + sync_s·calls, over the groups of more than one rank (a group of one
    calls no transport: `Comm` answers it in place)."""
    ab = alpha_beta or DEFAULT_ALPHA_BETA
    return sum(ab[op][0] * latency_steps(op, row[0], row[3])
               + ab[op][1] * charged_bytes(op, row[1], row[2], ledger.sizes.get(group))
               + wait_s * wait_steps(op, row[0], row[3]) + sync_s * row[0]
               for (ph, _, op, group), row in ledger.rows.items()
               if phase in (None, ph) and ledger.sizes.get(group) != 1)


def comm_seconds(ledger: Ledger, shape, alpha_beta=None, rates: Rates = None, ranks_per_node: int | None = None,
                 phase: str | None = None) -> float:
    """`seconds` of a rank's ledger on grid `shape` as the time model charges them: α-β for `ranks_per_node`
    processes sharing a machine (default all of the grid's), with their waits for peers (`Rates.wait_s`,
    `Rates.sync_s`)."""
    _, ab, wait, sync = _transport(rates or DEFAULT_RATES, alpha_beta, shape, ranks_per_node)
    return seconds(ledger, ab, phase, wait, sync)


def load_calibration(path) -> dict:
    """{op: (α per latency step, β)} from a ``spgnn calibrate --output`` file (α a call over the steps a call took
    there); a collective the file did not measure (``spgnn calibrate --ops`` names fewer) keeps its
    `DEFAULT_ALPHA_BETA` figures. Schemas 1 and 2 fitted a broadcast's β to the b bytes a member receives; measured
    in a group of g, that is β·g/(2(g−1)) a byte of today's `charged_bytes` (the same at g = 2)."""
    data = _calibration(path)
    with _not_a_calibration(path):
        for op, v in data["collectives"].items():
            if op not in OPS:
                raise SpgnnError(f"{path}: collective {op!r} is none spgnn models ({', '.join(OPS)}): calibrate "
                                 "again")
            if "points" in v and len({p["bytes"] for p in v["points"]}) < 2:
                raise SpgnnError(f"{path}: {op} was timed at one message size, which fits no latency α; calibrate "
                                 "again with at least two --sizes")
            if not all(_figure(v.get(k)) and v[k] >= 0 for k in ("alpha_s", "beta_s_per_byte")):
                raise SpgnnError(f"{path}: {op}'s α {v.get('alpha_s')!r} and β {v.get('beta_s_per_byte')!r} must "
                                 "be finite numbers of at least 0: calibrate again")
            if not (_figure(v.get("messages")) and v["messages"] >= 0):
                raise SpgnnError(f"{path}: {op}'s messages {v.get('messages')!r} must be a finite count of at least 0 "
                                 "(the messages a call sent): calibrate again")
        g = max(int(data.get("world_size", 2)), 2)
        old = data.get("schema") in ("spgnn.calibration/1", "spgnn.calibration/2")
        return DEFAULT_ALPHA_BETA | {op: (v["alpha_s"] / max(latency_steps(op, 1, v["messages"]), 1),
                                          v["beta_s_per_byte"] * (g / (2 * (g - 1)) if old and op == "broadcast"
                                                                  else 1))
                                     for op, v in data["collectives"].items()}


def load_rates(path=None) -> Rates:
    """The `Rates` of a ``spgnn calibrate --output`` file: its compute figures (schema 2 on; before schema 4 without
    rcm-order SpMM rates, so every nonzero at its own SpMM rates; before schema 5 with the default `sync_wait_s`;
    before schema 6 without the rates of a process alone, so such a process at the file's),
    the defaults' for a schema-1 file (which has α and β only), with the world size its α and β were measured at;
    no path: the defaults."""
    if path is None:
        return DEFAULT_RATES
    data = _calibration(path)
    with _not_a_calibration(path):
        rates = replace(DEFAULT_RATES, cores=data.get("cores", DEFAULT_RATES.cores), comm_ranks=data["world_size"])
        if "compute" in data:
            rates = with_measured(rates, {"spmm_ordered_nnz_s": None, "spmm_ordered_bytes_per_s": None,
                                          "alone": None} | data["compute"])
    if bad := next((who + b for r, who in ((rates, ""), (rates.alone, "alone's ")) if r is not None
                    for b in [implausible(r)] if b), None):
        raise SpgnnError(f"{path}: {bad} is no figure a machine could have (rates positive, seconds at least 0, "
                         "cores and ranks whole numbers of at least 1, the two spmm_ordered rates both given or both "
                         "null): calibrate again")
    return rates


def _calibration(path) -> dict:
    """The JSON of a calibration file, SpgnnError where it cannot be read, is no JSON object, or its schema is none
    this spgnn reads (a later version's)."""
    from .comm.calibrate import SCHEMA

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:      # missing, unreadable, not text, not JSON
        why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
        raise SpgnnError(f"cannot read the calibration {path} ({why}): give a file written by spgnn calibrate "
                         "--output") from None
    if not isinstance(data, dict):
        raise SpgnnError(f"{path} is not a calibration spgnn reads (JSON {type(data).__name__}, not an object): give "
                         "a file written by spgnn calibrate --output")
    (name, _, version), (ours, _, latest) = str(data.get("schema", SCHEMA)).rpartition("/"), SCHEMA.rpartition("/")
    if name != ours or not version.isdigit() or not 1 <= int(version) <= int(latest):
        raise SpgnnError(f"{path} is of schema {data.get('schema')!r}, which this spgnn does not read (it reads "
                         f"{SCHEMA} and earlier): calibrate again with this version's spgnn calibrate --output")
    return data


@contextmanager
def _not_a_calibration(path):
    """A calibration file of the wrong layout (a field missing, of the wrong type, a count too large for an
    integer) as one SpgnnError."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as e:
        raise SpgnnError(f"{path} is not a calibration spgnn reads ({type(e).__name__}: {e}): calibrate again with "
                         "this version's spgnn calibrate --output") from None


def _figure(v) -> bool:
    """Whether `v` is a finite number (not a bool, which JSON's true would be)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def implausible(rates: Rates) -> str | None:
    """The first figure of `rates` (not its `alone`) no machine could have ("flops_per_s 0"), else None: rates
    (bytes or flops a second, bytes) must be positive finite numbers, seconds (a field ending ``_s``) at least 0,
    the cores and ranks whole numbers; None (not measured) only where the field's default is None, and the two
    rcm-order SpMM rates both None or neither (`Rates.spmm_s` takes both)."""
    for f in fields(rates):
        k, v = f.name, getattr(rates, f.name)
        seconds = k.endswith("_s") and not k.endswith("_per_s")
        if k == "alone" or v is None and f.default is None:
            continue
        if not _figure(v) or not (v >= 0 if seconds else v > 0) or k in COUNTS and (v < 1 or v != int(v)):
            return f"{k} {v!r}"
    if (rates.spmm_ordered_nnz_s is None) != (rates.spmm_ordered_bytes_per_s is None):
        return next(f"{k} None" for k in ("spmm_ordered_nnz_s", "spmm_ordered_bytes_per_s")
                    if getattr(rates, k) is None)
    return None


def with_measured(rates: Rates, compute: dict) -> Rates:
    """`rates` with the figures of `compute` (a calibration's "compute", `spgnn.comm.calibrate.measure_compute`),
    its "alone" ones those of a process alone (where `compute` has no "alone", `rates`' stay)."""
    out = replace(rates, **{k: v for k, v in compute.items() if k != "alone"})
    if "alone" in compute:
        out = replace(out, alone=replace(out, **compute["alone"], alone=None) if compute["alone"] else None)
    return out


def candidates(P: int) -> list[dict]:
    """The options ``--algo auto`` compares for P processes: for every registered algorithm with a cost model,
    each set of its shape-option values it proposes (`DistSpMM.candidates`), as {"algo", every shape option}
    (the others' at their defaults)."""
    defaults = {o.name: o.default for o in spmm.options().values() if o.shapes}
    return [{"algo": name} | defaults | values for name, cls in spmm.ALGORITHMS.items() if cls.has_cost_model()
            for values in cls.candidates(P)]


def memory_limit(text) -> int | None:
    """Bytes of a ``--memory-per-rank`` value ("4G", "1.5G", "4GiB", "512M", "2T", "1000B"; K, M, G, T powers of
    2¹⁰, as `spgnn cost` prints GiB), None for none; a number without its unit ("4": bytes, surely not meant) is
    refused."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT])I?B?|B)\s*", str(text).upper())
    size = float(m[1]) * 1024 ** " KMGT".index(m[2] or " ") if m else 0
    if not 1 <= size < math.inf:
        raise SpgnnError(f"--memory-per-rank takes one size with its unit, like 4G, 1.5G, 4GiB, 512M or 1000B, got "
                         f"{text!r}")
    return int(size)


def size_text(b: float) -> str:
    """`b` bytes in the largest binary unit of which it holds at least one ("1 KiB", "512 MiB", "1.5 GiB")."""
    k = next((k for k in range(4, 0, -1) if b >= 1024 ** k), 0)
    v = b / 1024 ** k
    return f"{b:.0f} B" if k == 0 else f"{v:.0f} {('KiB', 'MiB', 'GiB', 'TiB')[k - 1]}" if v >= 100 else \
        f"{v:.3g} {('KiB', 'MiB', 'GiB', 'TiB')[k - 1]}"


def under_memory(table: list, limit: int | None, what: str, strict: bool = True) -> list:
    """The rows of `table` under the memory limit, those over it marked {"dropped": "memory"} (SpgnnError naming
    the least need when none is under, if `strict`)."""
    if limit is None:
        return table
    for r in table:
        if r["memory_bytes"] > limit:
            r["dropped"] = "memory"
    fits = [r for r in table if "dropped" not in r]
    if table and not fits and strict:
        least = min(table, key=lambda r: r["memory_bytes"])
        where = f" at P = {least['P']}" if "P" in least else ""
        raise SpgnnError(f"--memory-per-rank {size_text(limit)}: no layout fits {what}; the least needs "
                         f"{size_text(least['memory_bytes'])} a rank ({least['algo']}{where}): use more "
                         "processes or allow more memory")
    return fits


def predict_layout(cls, stats, shape, model: ModelCost, alpha_beta=None, rates: Rates = None, overlap: bool = True,
                   ranks=None, ranks_per_node: int | None = None) -> dict:
    """One row of a comparison: the predicted epoch seconds ("epoch_s": a training step, slowest rank per phase),
    its communication alone ("comm_seconds"), the largest peak memory and bytes received of a rank, over `ranks`
    (default all)."""
    ranks = range(int(np.prod(shape))) if ranks is None else ranks
    # each rank's ledger built once, for the seconds and the figures below (twice, spgnn cost took twice as long)
    ledgers = [epoch_ledger(cls, stats, shape, r, model, setup=False) for r in ranks]
    rates = rates or DEFAULT_RATES
    t = epoch_seconds(cls, stats, shape, model, alpha_beta, rates, overlap, ranks, ranks_per_node, ledgers)
    ledgers = [Ledger({k: v for k, v in led.rows.items() if k[0] != "eval"}, led.sizes) for led in ledgers]  # a step's
    return {"epoch_s": t["epoch_s"],
            "comm_seconds": max(comm_seconds(led, shape, alpha_beta, rates, ranks_per_node) for led in ledgers),
            "memory_bytes": max(memory_bytes(cls, stats, shape, r, model, rates, overlap)["total"] for r in ranks),
            "recv_bytes_per_rank": max(led.total("recv_bytes") for led in ledgers)}


def choose(cfg, P: int, stats_of, model: ModelCost, alpha_beta=None, hint: str = "",
           ranks_per_node: int | None = None) -> tuple[object, list[dict]]:
    """The config with the algorithm and grid of lowest predicted epoch seconds (`predict_layout`: compute and
    communication, P ranks, `ranks_per_node` of them on each machine like the calibrated one (default all P), rates
    from cfg.calibration; ties by `preference`) for
    `model` among those whose predicted peak memory fits cfg.memory_per_rank, and the table of what was compared
    (those dropped for memory marked "dropped"). `stats_of(cls, shape, adjacencies)`: {name: the block statistics
    of A under that adjacency} for that layout, or None when the layout does not fit the data (not compared).
    Layouts that do not offer what the model needs or state its costs are not compared. `hint` ends the error when
    nothing fits. A row's "seconds" is the epoch's, the ranking key."""
    rates, limit = load_rates(getattr(cfg, "calibration", None)), memory_limit(getattr(cfg, "memory_per_rank", None))
    table = []
    for option in candidates(P):
        cls = spmm.get(option["algo"])
        if not model.modelled_on(cls):
            continue
        shape = cls.grid_for(P, **option)
        stats = stats_of(cls, shape, model.adjacencies)
        if stats is None:
            continue
        overlap = getattr(cfg, "overlap", "on") == "on" and _overlaps(cls)
        row = predict_layout(cls, stats, shape, model, alpha_beta, rates, overlap, ranks_per_node=ranks_per_node)
        table.append(option | row | {"seconds": row["epoch_s"]})
    if not table:
        raise SpgnnError(f"--algo auto: no modelled algorithm fits on {P} processes{hint}")
    fits = under_memory(table, limit, f"on {P} processes")
    keys = ["algo", *(o.name for o in spmm.options().values() if o.shapes)]

    def order(row):                                     # `preference`, then name and option values (None last)
        return (*preference(row["seconds"], row["recv_bytes_per_rank"]),
                *((row[k] is None, row[k] if row[k] is not None else 0) for k in keys))

    best = min(fits, key=order)
    return replace(cfg, **{k: best[k] for k in keys}), table


def preference(seconds: float, recv_bytes: int) -> tuple:
    """The key `--algo auto` ranks layouts by: the predicted epoch seconds (to 12 significant digits), then, among
    layouts predicted equally fast (1d, 1d-halo and sar, whose exchanges all hide behind their products), the fewest
    bytes a rank receives: a slower network or a wrong α-β then costs it least."""
    return float(f"{seconds:.12g}"), recv_bytes


def _overlaps(cls) -> bool:
    """Whether `cls` takes ``--overlap`` (on by default: its exchanges run behind its products)."""
    return any(o.name == "overlap" for o in cls.options)


def compare(Ps, model: ModelCost, stats_of, alpha_beta=None, rates: Rates = None, memory_per_rank: int | None = None,
            ranks: int | None = None, ranks_per_node: int | None = None, strict: bool = True) -> list[dict]:
    """`predict_layout` of every modelled algorithm and grid at each P in `Ps` (`stats_of(cls, shape)`: {adjacency:
    BlockStats}), over the first `ranks` ranks (default all), with `ranks_per_node` processes sharing each machine
    like the calibrated one (default all P); "seconds" is the communication's (CAGNET's comparison), "epoch_s" the
    whole step's; layouts over `memory_per_rank` bytes marked {"dropped": "memory"} (SpgnnError when none fits at
    some P, if `strict`; else all that P's rows are marked). Layouts that do not offer what the model needs or state
    its costs are not compared, nor those `stats_of` gives None (more row blocks than the graph has nodes); a P at
    which no layout is left is an SpgnnError if `strict` or if it is every P, else that P has no rows."""
    rows, missing = [], []
    for P in Ps:
        table = []
        for option in progress.each(candidates(P), "predicting", f"the layouts at P = {P}"):
            cls = spmm.get(option["algo"])
            if not model.modelled_on(cls):
                continue
            shape = cls.grid_for(P, **option)
            if (stats := stats_of(cls, shape)) is None:
                continue
            row = predict_layout(cls, stats, shape, model, alpha_beta, rates, _overlaps(cls),
                                 range(min(P, ranks or P)), min(P, ranks_per_node or P))
            table.append({"P": P, **option, "shape": format_grid(shape), "seconds": row["comm_seconds"]} | row)
        if not table:
            missing.append(P)
            if strict or len(missing) == len(Ps):
                raise SpgnnError(f"no layout runs on {', '.join(map(str, missing))} processes with these data: "
                                 f"{NO_LAYOUT}")
        under_memory(table, memory_per_rank, f"on {P} processes", strict)
        rows += table
    return rows


NO_LAYOUT = "each needs more row blocks than the graph has nodes, or, for a partitioned folder or a --partition " \
            "file, other row blocks than its parts"      # why `compare` found no layout at some P


def plan_table(n: int, nnz: int, Ps, model: ModelCost, alpha_beta=None, ranks: int = 8, rates: Rates = None,
               memory_per_rank: int | None = None, ordered: bool = False, strict: bool = True) -> list[dict]:
    """`compare` for a graph known by n and nnz (`BlockStats.expected`, each part's nodes in a locality order if
    `ordered`; A symmetric, as an undirected graph's, and Â as each adjacency keeps it: GraphSAGE's mean D⁻¹A is
    not), on machines like the calibrated one, a rank a core: the largest over the first `ranks` ranks.
    Parts are equal, so those ranks stand for all (in 2D/3D up to the one column more that the first f mod C
    column blocks hold)."""
    rates = rates or DEFAULT_RATES

    def stats_of(cls, shape):                   # None: more row blocks than nodes (not compared)
        B = cls.num_parts(shape)
        if B > n:
            return None
        return {a: BlockStats.expected(n, min(nnz + n * get_adjacency(a).unit_diagonal, n * n), B, ordered,
                                       get_adjacency(a).symmetric)
                for a in model.adjacencies}              # Â = D^-½(A + I)D^-½ holds A's nonzeros and the n of I
    return compare(Ps, model, stats_of, alpha_beta, rates, memory_per_rank, ranks, rates.cores, strict)


# -- compute seconds and memory ---------------------------------------------------------------------------------
#
# A rank's time in a phase (forward, backward, optimizer, eval) is its communication (the ledger's rows of that
# phase, α and β scaled for ranks sharing cores) plus its computation, from the operations the layers declare:
#
#     SpMM of width f          nnz_r nonzeros at `spmm_nnz_s` each (index, value, loop) and
#                              4·f_r·(nnz_r + rows_out·(2·passes − 1)) bytes of rows gathered and written (each block
#                              product after the first adds into the output) at `spmm_bytes_per_s`; the nonzeros of
#                              the rank's own block in a locality order (`LocalShare.ordered_nnz`) and their rows at
#                              `spmm_ordered_nnz_s`, `spmm_ordered_bytes_per_s`
#     dense H·W, W f_in×f_out  2·rows·f_in,r·f_out flops at `flops_per_s` and 4·rows·(f_in,r + f_out) bytes read and
#                              written at `dense_bytes_per_s` (backward: dW, and dX past layer 0 or where the layer
#                              makes the product's input from its parameters, `Dense.grad_in`, each the same; where
#                              dW goes by blocks through oneDNN, `spgnn.dense.blocked`, also the transposed copies of
#                              the narrower operand's blocks, 8·rows·min(f_in,r, f_out) bytes at the same rate, and
#                              oneDNN's packing of the wider one as its weight, 8·rows·max(f_in,r, f_out) bytes at
#                              `pack_bytes_per_s`)
#     a layer's input dropout  where the model drops it out (`ModelCost.dropped`): one pass, 8·rows·f_in,r bytes at
#                              `dropout_bytes_per_s`; past layer 0 also dH = dY ⊙ mask in the backward, the mask
#                              made again (evaluation: no dropout)
#     attention (`Attend`)     as the layout's `attend_work` says, forward and backward: its operations, bytes an
#                              edge and an edge and head at `elementwise_bytes_per_s` (the scores' terms, scores,
#                              softmax, gathers of per-row terms), bytes a feature of the weighted sum gathers at
#                              `spmm_bytes_per_s`; in training with attention dropout also `attend_dropout_work`
#     after each dense         4·rows·f_out,r bytes (bias, activation) at `elementwise_bytes_per_s`, both ways
#     elementwise passes       4·rows·width_r bytes a tensor read or written at `dense_bytes_per_s`, and each
#     (`Elementwise`)          written a fresh block (GIN's (1 + ε)·H + Â·H: plain passes stream at a dense
#                              product's operands' rate; `elementwise_bytes_per_s` times a dropout mask's hashing,
#                              bias and ReLU together: a scale of citeseer's features ran at 47 GB/s on one core,
#                              against 5.9)
#     loss, Adam               4·rows·classes_r·2 bytes, 4·params·ADAM_WORDS bytes at the same bandwidth
#     every operation          `op_s` seconds (Python, autograd, dispatch)
#     a fresh block            each result of LARGE_BYTES or more (the C allocator maps it anew at every step, and
#                              the kernel page-faults and zeroes it: glibc's mmap threshold is at most 32 MiB) is
#                              also touched at `fresh_bytes_per_s`: an SpMM's output (backward: its dH), a dense
#                              product's and the elementwise result after it (none where the layer's bias and
#                              activation work in place, `ModelCost.in_place`; backward: their gradients, and dX
#                              where it runs), a hidden input's dropout (backward: its gradient), the loss's, an
#                              attention's results of the size of V and of X (the layout's `attend_fresh`); not the
#                              features' dropout, whose block is kept (`spgnn.memory.empty`)
#
# (nnz_r, rows, f_r: what the rank multiplies, `LocalShare`), at the calibrated one-core rates times its cores
# (P ranks on C cores: C // P each, or C/P when P > C; then every round of a collective, `wait_steps`, also waits
# `step_wait_s` for its peers to be scheduled, unless α was calibrated with ranks beyond the cores; with a core each,
# every collective call waits `sync_wait_s` for its peers to come from their computation). With
# ``--overlap on`` an SpMM hides min(its communication's latencies and waits, the product computed while that is in
# flight), C/P of that where P ranks share C < P cores (their waits are filled by each other's work already); not
# its bytes' β: the transport's copies (gloo over TCP: the kernel copies every byte, on both sides) are work for the
# cores that compute the product. Ranks wait
# for each other at every collective, so a phase takes the slowest rank's time, and an epoch the sum of its phases.

PHASES = ("forward", "backward", "optimizer", "eval")
WORK = ("spmm_nnz", "spmm_bytes", "spmm_ordered_nnz", "spmm_ordered_bytes", "flops", "dense_bytes", "pack_bytes",
        "elementwise_bytes", "dropout_bytes", "fresh_bytes", "ops")                                         # amounts
ADAM_WORDS = 8          # words Adam reads and writes a parameter (p, g, m, v read; p, m, v written; g zeroed)
COUNTS = ("cores", "comm_ranks", "threads")    # the `Rates` fields that count (whole numbers of at least 1)


@dataclass(frozen=True)
class Rates:
    """The compute side of a calibration: one core's rates, the fixed memory of a process, and the machine."""

    spmm_bytes_per_s: float         # 4·width·(nnz + rows) bytes of a local SpMM a second, one core
    flops_per_s: float              # dense products' arithmetic, one core
    elementwise_bytes_per_s: float  # dropout, bias, activation, softmax, Adam: bytes in + out a second, one core
    op_s: float                     # fixed seconds an operation costs whatever its size
    runtime_bytes: int              # resident bytes of a process with torch, spgnn and its kernels loaded, joined
    cores: int                      # cores of the machine the ranks share
    comm_ranks: int = 2             # ranks on it when α and β were measured
    spmm_nnz_s: float = 0.0         # seconds a local SpMM spends a nonzero whatever its width (index, value), one core
    dense_bytes_per_s: float = math.inf  # 4·rows·(f_in + f_out) bytes a dense product reads and writes, one core
    step_wait_s: float = 0.35e-3    # seconds a collective's round waits for its peers when ranks outnumber cores
    sync_wait_s: float = 0.0        # seconds a call waits for its peers to come from their computation, a core each
    dropout_bytes_per_s: float = math.inf   # an input's one-pass dropout (`spgnn.hashing.dropout`): 8 bytes an element
    fresh_bytes_per_s: float = math.inf     # a fresh private mapping's first touch (page faults, zeroing), one core
    pack_bytes_per_s: float = math.inf      # a weight gradient by blocks packing its wider operand, 8 bytes an element
    spmm_ordered_nnz_s: float | None = None         # the SpMM rates on a matrix in rcm order, whose gathered rows
    spmm_ordered_bytes_per_s: float | None = None   # lie close together (None: as the rates above), one core
    alone: Rates | None = None      # those of one process alone on a machine (None: these)
    threads: int | None = None      # threads a rank computes with where fewer than its share of the cores (a lower
                                    # OMP_NUM_THREADS: `spgnn.comm.launch.share_cores`); None: its share

    def spmm_s(self, nnz: float, nbytes: float, ordered: bool = False) -> float:
        """One core's seconds for an SpMM's `nnz` nonzeros and `nbytes` of rows gathered and written, in a locality
        order (`ordered`: a part's own block under ``--node-order rcm``) or not."""
        if ordered and self.spmm_ordered_nnz_s is not None:
            return nnz * self.spmm_ordered_nnz_s + nbytes / self.spmm_ordered_bytes_per_s
        return nnz * self.spmm_nnz_s + nbytes / self.spmm_bytes_per_s

    def on(self, ranks: int) -> Rates:
        """The rates of `ranks` processes on a machine: one alone computes at its `alone` rates where measured (it
        has the caches to itself: an SpMM's gathers 1.4-1.5× faster a core on the development machine)."""
        return self.alone if ranks == 1 and self.alone else self

    def cores_each(self, ranks: int) -> float:
        """Cores one of `ranks` processes sharing this machine's C cores computes with (C // P threads each,
        `spgnn.comm.launch.share_cores`, or `threads` where fewer; beyond C processes they time-share)."""
        share = self.cores // ranks if ranks <= self.cores else self.cores / ranks
        return min(share, self.threads) if self.threads else share

    def alpha_beta(self, alpha_beta, ranks: int) -> dict:
        """α and β for `ranks` processes on this machine: those measured with `comm_ranks`, slowed by the
        ranks beyond the cores (the transport's copies are the CPU's work)."""
        k = max(ranks, self.cores) / max(self.comm_ranks, self.cores)
        return {op: (a * k, b * k) for op, (a, b) in (alpha_beta or DEFAULT_ALPHA_BETA).items()}

    def wait_s(self, ranks: int) -> float:
        """Seconds a round of a collective (`wait_steps`) waits for its peers' turn on a core: `step_wait_s`
        when `ranks` outnumber the cores and the calibration's ranks did not (else the wait is in its α)."""
        return self.step_wait_s if ranks > self.cores >= self.comm_ranks else 0.0

    def sync_s(self, ranks: int, P: int) -> float:
        """Seconds each collective call of a run on P processes waits for its peers to come from their computation
        (they arrive apart, and an idle core wakes late): `sync_wait_s` where each of the `ranks` processes on this
        machine has a core of its own (beyond the cores, `wait_s` covers it), none at P = 1."""
        return self.sync_wait_s if 1 < P and ranks <= self.cores else 0.0


# One core of the 2-core development machine (torch 2.13 CPU, numba kernels then), two processes sharing it: the median
# of the seven calibrations of `DEFAULT_ALPHA_BETA` (each rate within 0.6-1.6× of its median across them). The defaults
# before these were measured under a load average of 12 and predicted 2.96× the measured step (median over 660 steps
# of `benchmarks/bench_model.py`, none within 25%); these put 617 of the 660 within 25%, the runs' own calibrations 575.
# step_wait_s: fitted to the training steps of three `benchmarks/bench_model.py` runs (90 layouts at P = 1-8; 70
# within 25% at 0.5 ms, 58 at 1.5 ms, the α per step of `spgnn calibrate --nprocs 4` less twice that of --nprocs 2,
# whose back-to-back collectives wait for a core at every step where training's mostly find their peers running);
# refitted to 0.35 ms once the dense products ran through oneDNN (five runs, 150 steps: 147 within 25% against 143 at
# 0.5 ms; on the three runs the fit did not start from, 87 of 90 against 85).
# flops_per_s and dense_bytes_per_s (both), since `spgnn.dense` takes float32 products through oneDNN: the median of
# seven later calibrations (each within 0.82-1.05× of it; torch's MKL had 102e9 and 15.7e9, alone 103e9 and 18.9e9).
# runtime_bytes: three calibrations since the kernels are C (245.9-246.5 MiB; with numba's runtime and kernels: 355).
# pack_bytes_per_s (both): the median of three calibrations (29.2-30.6e9; alone 25.4-26.7e9).
# The SpMM's four rates (both), since its float32 kernel keeps each width's tile of a row in AVX-512 registers (one
# function a width): the median of eight calibrations (each within 0.73-1.27× of it). Four calibrations of the same
# day with the kernel before, whose tile of run-time width lived on the stack, had 43.5e9, 2.19e-9, 44.3e9 and
# 1.73e-9, alone 56.5e9, 1.76e-9, 53.5e9 and 1.25e-9 (the defaults then, from seven: 44.0e9, 1.85e-9, 45.1e9 and
# 1.47e-9, alone 57.7e9, 1.63e-9, 56.7e9 and 1.16e-9); the portable loop's had 22.7e9, 2.12e-9, 26.2e9 and 1.95e-9,
# alone 31.7e9, 2.02e-9, 39.1e9 and 2.03e-9.
_SHARING = Rates(spmm_bytes_per_s=50.0e9, spmm_nnz_s=1.64e-9, spmm_ordered_bytes_per_s=49.3e9,
                 spmm_ordered_nnz_s=1.30e-9, flops_per_s=254e9, dense_bytes_per_s=22.3e9, elementwise_bytes_per_s=5.9e9,
                 dropout_bytes_per_s=23.8e9, fresh_bytes_per_s=3.26e9, op_s=1.64e-5, runtime_bytes=246 * 2**20,
                 sync_wait_s=0.82e-3, pack_bytes_per_s=29.2e9, cores=2, comm_ranks=2)
# and one process alone on it, both cores its threads' (the median of seven later calibrations' "alone" rates: an
# SpMM's gathers 1.3-1.5× faster a core, a tiny operation 2.8× faster; they put all 44 steps at P = 1 among the 660
# within 25%, against 41)
DEFAULT_RATES = replace(_SHARING, alone=replace(
    _SHARING, spmm_bytes_per_s=61.7e9, spmm_nnz_s=1.30e-9, spmm_ordered_bytes_per_s=60.3e9, spmm_ordered_nnz_s=0.91e-9,
    flops_per_s=250e9, dense_bytes_per_s=39.3e9, elementwise_bytes_per_s=6.8e9, dropout_bytes_per_s=28.8e9,
    op_s=5.8e-6, pack_bytes_per_s=26.6e9))


@dataclass(frozen=True)
class LocalShare:
    """What one rank multiplies in an SpMM of its layout: `rows` of H held (whole rows, or column block `j` of
    `C`), `out_rows` rows of its product, `nnz` nonzeros multiplied, `overlap_nnz` of them while its next exchange
    is in flight (``--overlap on``), `ordered_nnz` of them in its own block in a locality order, its blocks of A as
    stored (`blocks`: (rows, nnz) per CSR, `wire`: bytes of packed copies), and `passes`: the block products that
    write its output, each after the first adding into it."""

    rows: int
    out_rows: int
    nnz: int
    overlap_nnz: int
    blocks: tuple = ()
    wire: int = 0
    j: int = 0
    C: int = 1
    passes: int = 1
    ordered_nnz: int = 0

    def width(self, f: int) -> int:
        """The columns of an f-wide matrix this rank holds (the first f mod C column blocks one wider)."""
        return f // self.C + (self.j < f % self.C)


def local_share(cls, stats: BlockStats, shape, rank: int) -> LocalShare:
    """The `LocalShare` of `rank` in the layout of `cls` on grid `shape`, from the block statistics: 1d/1.5d
    multiply block row q's blocks j ≡ k (mod c), one stage each; 1d-halo and sar the whole block row, the local
    block A_qq (1d-halo) or all but the last ring round (sar) while the rest arrives; 2d/3d row block i's blocks of
    the inner parts (k, l), on column block j. A layout of another kind is taken to hold and multiply its whole
    block row."""
    from .spmm.halo import OneDHalo
    from .spmm.oned import OneD, pieces
    from .spmm.sar import SAR
    from .spmm.summa import SUMMA, _wire_bytes

    N, n = stats.block_nnz, stats.sizes
    coord = tuple(int(x) for x in np.unravel_index(rank, shape))
    if issubclass(cls, SUMMA):
        R, C, L = shape
        i, j, l = coord
        block = list(range(i * L, (i + 1) * L))
        m = int(n[block].sum())
        nnz = [N[block, k * L + l].sum() for k in range(R)]
        held = [k for k in range(R) if k % C == j]
        wire = sum(_wire_bytes(m, int(nnz[k])) for k in held) if C > 1 else 0
        return LocalShare(int(n[i * L + l]), m, sum(nnz), sum(nnz) - nnz[-1], tuple((m, nnz[k]) for k in held),
                          wire, j, C, max(sum(z > 0 for z in nnz), 1))
    p = cls.part_of(shape, coord)
    row = N[p]
    mine = int(row[p]) if stats.ordered else 0          # the own block's nonzeros, in a locality order
    if issubclass(cls, OneD):
        share = list(range(coord[1], shape[0], shape[1]))
        nnz = row[share].sum()
        last = row[share[-1]] if share else 0          # a replica past the last team has no stage
        if shape[1] > 1:            # the last stage by row pieces, each but the first while the previous is summed
            last //= max(len(pieces(int(n[p]))), 1)
        return LocalShare(int(n[p]), int(n[p]), nnz, nnz - last, tuple((n[p], row[j]) for j in share),
                          passes=max(sum(row[j] > 0 for j in share), 1), ordered_nnz=mine * (p in share))
    if issubclass(cls, SAR):
        P = len(n)
        last = row[(p + 1) % P] if P > 1 else 0              # round P−1 receives from (p − (P−1)) mod P
        return LocalShare(int(n[p]), int(n[p]), row.sum(), row.sum() - last,
                          tuple((n[p], row[j]) for j in range(P)), passes=max(int((row > 0).sum()), 1),
                          ordered_nnz=mine)
    halo = issubclass(cls, OneDHalo)
    own = row[p] if halo else 0
    return LocalShare(int(n[p]), int(n[p]), row.sum(), own, ((n[p], own), (n[p], row.sum() - own)),
                      passes=1 + (halo and row.sum() > own), ordered_nnz=mine)   # the halo's block after the local one


def _transport(rates: Rates, alpha_beta, shape, ranks_per_node: int | None) -> tuple:
    """(processes on a machine, their α-β, the wait of a round, the wait of a call) for a run on grid `shape` with
    `ranks_per_node` processes a machine (default all of the grid's)."""
    P = int(np.prod(shape))
    local = ranks_per_node or P
    return local, rates.alpha_beta(alpha_beta, local), rates.wait_s(local), rates.sync_s(local, P)


def _call_seconds(calls, alpha_beta, wait_s: float = 0.0, size=lambda group: None, sync_s: float = 0.0) -> float:
    """Seconds of collective calls in `spmm_cost`'s form (op, group, sent, received, messages); `size(group)`: its
    members."""
    return sum(alpha_beta[op][0] * latency_steps(op, 1, m) + alpha_beta[op][1] * charged_bytes(op, s, r, size(group))
               + wait_s * wait_steps(op, 1, m) + sync_s for op, group, s, r, m in calls)


def fresh_bytes(*sizes) -> int:
    """Bytes of the results of `sizes` bytes that are mapped anew at every step: those of LARGE_BYTES or more."""
    return sum(b for b in sizes if b >= LARGE_BYTES)


def compute_work(cls, stats: dict, shape, rank: int, model: ModelCost) -> dict:
    """{phase: {amount: ...}} for each amount of `WORK`: what `rank` computes in one training step
    (forward, backward, optimizer) and one evaluation, from the operations the layers declare (module section
    above). `stats`: {adjacency: BlockStats}."""
    shares = {a: local_share(cls, s, shape, rank) for a, s in stats.items()}
    first = next(iter(shares.values()))
    work = {ph: dict.fromkeys(WORK, 0) for ph in PHASES}

    def add(phases, **amounts):
        for ph in phases:
            for k, v in amounts.items():
                work[ph][k] += v

    for layer, ops in enumerate(model.layers):
        if layer < len(model.dropped) and model.dropped[layer]:     # the dropout of the layer's input, in one pass
            dropped = first.rows * first.width(_widths(ops)[0])
            add(("forward",), dropout_bytes=8 * dropped, fresh_bytes=fresh_bytes(4 * dropped) if layer else 0)
            if layer:                                       # and dH = dY ⊙ mask, the mask made again
                add(("backward",), dropout_bytes=8 * dropped, fresh_bytes=fresh_bytes(4 * dropped))
        for op in ops:
            if once(op):                                    # made in the first step only
                continue
            if isinstance(op, Spmm):
                s = shares[op.adjacency]
                b = 4 * s.width(op.width) * (s.nnz + s.out_rows * (2 * s.passes - 1))     # adds read and write
                o, b_o = s.ordered_nnz, 4 * s.width(op.width) * s.ordered_nnz
                sparse = {"spmm_nnz": s.nnz - o, "spmm_bytes": b - b_o, "spmm_ordered_nnz": o,
                          "spmm_ordered_bytes": b_o}
                add(("forward", "eval"), **sparse, ops=1, fresh_bytes=fresh_bytes(4 * s.out_rows * s.width(op.width)))
                add(("backward",) if op.backward else (), **sparse, ops=1,
                    fresh_bytes=fresh_bytes(4 * s.rows * s.width(op.width)))
            elif isinstance(op, Dense):
                f_in = first.width(op.f_in)
                flops = 2 * first.rows * f_in * op.f_out
                dense = 4 * first.rows * (f_in + op.f_out)
                out = 4 * first.rows * first.width(op.f_out)        # bias and activation
                own = layer < len(model.in_place) and model.in_place[layer]
                add(("forward", "eval"), flops=flops, dense_bytes=dense, elementwise_bytes=out, ops=1,
                    fresh_bytes=fresh_bytes(out, 0 if own else out))
                k = 2 if layer or op.grad_in else 1                 # dW, and dX where its input needs it
                dx = 4 * first.rows * f_in if k == 2 else 0
                copies, pack = (8 * first.rows * min(f_in, op.f_out), 8 * first.rows * max(f_in, op.f_out)) \
                    if blocked(f_in, op.f_out) else (0, 0)
                add(("backward",), flops=flops * k, dense_bytes=dense * k + copies, pack_bytes=pack,
                    elementwise_bytes=out, ops=1, fresh_bytes=fresh_bytes(out, dx))
            elif isinstance(op, Attend):
                for ph, amounts in attend_work(cls, stats, shape, rank, op).items():
                    add((ph,), **amounts)
            elif isinstance(op, Elementwise):
                b = 4 * first.rows * first.width(op.width)                       # they stream, as products'
                add(("forward", "eval"), dense_bytes=b * (op.reads + op.writes), ops=op.writes,     # operands do
                    fresh_bytes=fresh_bytes(*[b] * op.writes))
                add(("backward",), dense_bytes=b * (op.backward_reads + op.backward_writes), ops=op.backward_writes,
                    fresh_bytes=fresh_bytes(*[b] * op.backward_writes))
            else:
                add(("forward", "eval") if not op.train_only else ("forward",), ops=1)
                add(("backward",) if op.backward else (), ops=1)
    softmax = 8 * first.rows * first.width(model.classes)
    add(("forward", "backward", "eval"), elementwise_bytes=softmax, ops=1, fresh_bytes=fresh_bytes(softmax // 2))
    add(("optimizer",), elementwise_bytes=4 * ADAM_WORDS * model.n_params, ops=2 * len(model.layers))
    return work


ATTEND_TABLES = ("attend_work", "attend_dropout_work", "attend_fresh")     # a layout's constants of attention


def attend_work(cls, stats: dict, shape, rank: int, op: Attend, tables: dict | None = None) -> dict:
    """{phase: {amount: ...}} of attention `op` on `rank`, from the layout's constants (`ATTEND_TABLES`, or
    `tables`): `attend_work`'s operations and bytes forward (and in evaluation) and backward, in training where `op`
    drops out also `attend_dropout_work`'s, and the first touch of its results of the size of V and of X that are
    LARGE_BYTES or more (`attend_fresh`; the evaluation's forward as training's)."""
    tables = tables or {name: getattr(cls, name) for name in ATTEND_TABLES}
    share = local_share(cls, stats[op.adjacency], shape, rank)
    x, _, v = cls.attend_sizes(stats[op.adjacency], share, rank, op.heads, op.width)
    out = {ph: dict.fromkeys(WORK, 0) for ph in PHASES}
    ways = {"forward": ("forward", "eval"), "backward": ("backward",)}
    for table, phases in ((tables["attend_work"], ways), (tables["attend_dropout_work"] if op.dropout else {},
                                                          {"forward": ("forward",), "backward": ("backward",)})):
        for way, (n_ops, edge, head, feature) in table.items():
            for ph in phases[way]:
                out[ph]["ops"] += n_ops
                out[ph]["elementwise_bytes"] += share.nnz * (edge + head * op.heads)
                out[ph]["spmm_bytes"] += feature * share.nnz * op.heads * op.width
    for way, (n_v, n_x) in tables["attend_fresh"].items():
        for ph in ways[way]:
            out[ph]["fresh_bytes"] += n_v * fresh_bytes(v) + n_x * fresh_bytes(x)
    return out


def compute_seconds(work: dict, rates: Rates, cores: float) -> float:
    """Seconds of one phase's `compute_work` on `cores` cores."""
    return (rates.spmm_s(work["spmm_nnz"], work["spmm_bytes"])
            + rates.spmm_s(work["spmm_ordered_nnz"], work["spmm_ordered_bytes"], ordered=True)
            + work["flops"] / rates.flops_per_s + work["dense_bytes"] / rates.dense_bytes_per_s
            + work["pack_bytes"] / rates.pack_bytes_per_s
            + work["elementwise_bytes"] / rates.elementwise_bytes_per_s
            + work["dropout_bytes"] / rates.dropout_bytes_per_s
            + work["fresh_bytes"] / rates.fresh_bytes_per_s) / cores + work["ops"] * rates.op_s


def phase_seconds(cls, stats: dict, shape, rank: int, model: ModelCost, alpha_beta=None, rates: Rates = None,
                  overlap: bool = True, ranks_per_node: int | None = None, ledger: Ledger | None = None) -> dict:
    """{phase: {"comm_s", "compute_s", "hidden_s", "seconds"}} of `rank` in one training step and one
    evaluation: its ledger's seconds per phase (α-β for `ranks_per_node` processes sharing a machine, default all
    of the grid's), its compute, and what ``overlap`` hides (each SpMM: the lesser of its exchange's latencies and
    waits, the α terms, and its product's seconds computed meanwhile, times C/P where P ranks share C < P cores: the
    machine is busy with the other ranks' work during a wait anyway; the β terms stay, the transport's copies being
    the cores' work); seconds = comm + compute − hidden. `ledger`: the rank's `epoch_ledger` (setup=False), where
    the caller has it already."""
    rates = rates or DEFAULT_RATES
    local, ab, wait, sync = _transport(rates, alpha_beta, shape, ranks_per_node)
    rates, cores = rates.on(local), rates.cores_each(local)
    ledger = ledger or epoch_ledger(cls, stats, shape, rank, model, setup=False)
    work = compute_work(cls, stats, shape, rank, model)
    hidden = dict.fromkeys(PHASES, 0.0)
    if overlap:
        share = min(cores, 1.0)                         # C/P where P ranks share C < P cores
        latency = {op: (a, 0.0) for op, (a, _) in ab.items()}
        shares = {a: local_share(cls, s, shape, rank) for a, s in stats.items()}
        for ops in model.layers:
            for op in (o for o in ops if isinstance(o, Spmm) and not once(o)):
                s, calls = shares[op.adjacency], exchange(cls, stats, shape, rank, op)
                o, w = min(s.overlap_nnz, s.ordered_nnz), 4 * s.width(op.width)     # the own block among them
                during = (rates.spmm_s(s.overlap_nnz - o, w * (s.overlap_nnz - o))
                          + rates.spmm_s(o, w * o, ordered=True)) / cores
                for ph, way in (("forward", "forward"), ("eval", "forward"), ("backward", "backward")):
                    if way == "forward" or op.backward:
                        exposed = _call_seconds(calls[way], latency, wait, lambda g: group_size(cls, shape, g, rank),
                                                sync)
                        hidden[ph] += min(exposed, during) * share
    out = {}
    for ph in PHASES:
        comm = seconds(ledger, ab, ph, wait, sync)
        compute = compute_seconds(work[ph], rates, cores)
        out[ph] = {"comm_s": comm, "compute_s": compute, "hidden_s": hidden[ph], "seconds": comm + compute - hidden[ph]}
    return out


def epoch_seconds(cls, stats: dict, shape, model: ModelCost, alpha_beta=None, rates: Rates = None,
                  overlap: bool = True, ranks=None, ranks_per_node: int | None = None, ledgers=None) -> dict:
    """The predicted seconds of a training step and an evaluation: per phase the slowest rank's (ranks wait
    for each other at the collectives), over `ranks` (default all); "epoch_s" = forward + backward + optimizer,
    "eval_s"; and per phase the slowest rank's communication and compute. `ledgers`: those ranks' `epoch_ledger`s
    (setup=False), where the caller has them."""
    ranks = range(int(np.prod(shape))) if ranks is None else ranks
    per_rank = [phase_seconds(cls, stats, shape, r, model, alpha_beta, rates, overlap, ranks_per_node,
                              ledgers[i] if ledgers else None) for i, r in enumerate(ranks)]
    phases = {ph: {k: max(p[ph][k] for p in per_rank) for k in per_rank[0][ph]} for ph in PHASES}
    return {"phases": phases, "epoch_s": sum(phases[ph]["seconds"] for ph in PHASES[:3]),
            "eval_s": phases["eval"]["seconds"]}


# A rank's peak memory, reached early in the backward: the runtime (a process with torch and spgnn imported and its
# kernels loaded), the graph it holds (its blocks of Â as the layout stores them, exactly as
# `spgnn.DistGraph.graph_bytes` counts them, and its node data), the products of its features it keeps (``--precompute
# on``), what autograd keeps for the backward at the end of the forward (less the features and kept products among it,
# held already), the parameters with their gradients and Adam's two moments, the exchange buffers of its widest SpMM
# or attention, and beside them the largest of: one gradient of the widest activation (a layer's output, or an input
# a layer makes from its parameters, `Dense.grad_in`), two tensors of a layer's input's width where it keeps its input
# (`Layer.saves_input`: GIN's Â·H and (1 + ε)·H before their sum, dZ and dZ ⊙ H in the backward), an
# attention's working set (the layout's `attend_memory`: the gradients of its edges' tensors, rematerialized shards),
# a column-split layout's (2d, 3d on C > 1 columns) dense product in the forward: its full-width partial sum H_j·W_j,
# the contiguous copy the reduce-scatter takes and the column block it returns (rmat:20, 2d on 2x2: 320 MiB against
# 64). The set-up's peak (a rank holds the part it read while it builds its layout) is not modelled; the run's report
# measures it apart (`setup_peak_rss_bytes`).


def _csr_bytes(blocks) -> int:
    """Bytes of local CSR blocks (rows, nnz): int64 row pointers, int32 column ids, float32 values."""
    return int(sum(8 * (m + 1) + 8 * z for m, z in blocks))


def layout_bytes(cls, stats: BlockStats, shape, rank: int, backward: bool = True) -> int:
    """Bytes the layout of `cls` keeps for one adjacency (`DistSpMM.graph_bytes`): its blocks of Â (and of Âᵀ
    where Â is not symmetric: kept by 1d, 1.5d, 2d, 3d; the transposes 1d-halo and sar cache at an SpMM's first
    backward, where an SpMM's `backward` runs on it), the packed copies 2d/3d broadcast, and the halo plan (int32
    remote ids, int64 rows to send)."""
    from .spmm.halo import OneDHalo
    from .spmm.sar import SAR

    s = local_share(cls, stats, shape, rank)
    total = _csr_bytes(s.blocks) + s.wire
    if issubclass(cls, OneDHalo):
        p, R = cls.part_of(shape, tuple(int(x) for x in np.unravel_index(rank, shape))), stats.halo
        total += 4 * R[p].sum() + (8 * R[:, p].sum() if len(R) > 1 else 0)
        if not stats.symmetric and backward:
            cols = np.where(np.arange(len(R)) == p, s.rows, R[p]) if issubclass(cls, SAR) else [s.rows, R[p].sum()]
            total += _csr_bytes(zip(cols, (z for _, z in s.blocks)))
    elif not stats.symmetric:
        t = local_share(cls, replace(stats, block_nnz=stats.block_nnz.T), shape, rank)
        total += _csr_bytes(t.blocks) + t.wire
    return int(total)


def graph_bytes(cls, stats: dict, shape, rank: int, model: ModelCost) -> int:
    """What `spgnn.DistGraph.graph_bytes` reports on `rank`: each adjacency's `layout_bytes`, and its part's node
    data (float32 feature columns it holds, int64 labels and ids, three boolean masks)."""
    s = local_share(cls, next(iter(stats.values())), shape, rank)
    backward = {op.adjacency for ops in model.layers for op in ops if isinstance(op, Spmm) and op.backward}
    return sum(layout_bytes(cls, st, shape, rank, name in backward) for name, st in stats.items()) \
        + s.rows * (4 * s.width(model.features) + 8 + 8 + 3)


def _widths(ops) -> tuple[int, int]:
    """(input, output) width of a layer from its declared operations (its dense products, else its SpMMs)."""
    dense = [op for op in ops if isinstance(op, Dense)]
    spmms = [op for op in ops if isinstance(op, Spmm)]
    return (dense[0].f_in, dense[-1].f_out) if dense else (spmms[0].width, spmms[-1].width) if spmms else (0, 0)


def saved_bytes(cls, stats: dict, shape, rank: int, model: ModelCost) -> int:
    """Bytes autograd keeps for the backward at the end of a training forward (`spgnn.memory.SavedTensorMeter`'s
    peak): per layer each dense product's input (`_inputs`: once for products of the same input, the layer's
    input where it keeps it, `Layer.saves_input`; each input the layer makes from its parameters, `Dense.grad_in`,
    apart) and weight, what each attention keeps (`attend_memory`), the activation's output (all but the last layer),
    and the log-softmax output. A dropout keeps no mask (`spgnn.hashing.dropout` makes it again in the backward)."""
    s = local_share(cls, next(iter(stats.values())), shape, rank)
    total = 4 * s.rows * s.width(model.classes)
    for layer, ops in enumerate(model.layers):
        f_in, f_out = _widths(ops)
        dense = [op for op in ops if isinstance(op, Dense)]
        total += sum(4 * s.rows * s.width(f) * k for f, k in _inputs(ops, _saves(model, layer)).items())
        total += sum(4 * s.rows * s.width(op.f_in) for op in dense if op.grad_in)
        total += sum(4 * op.f_in * op.f_out for op in dense)
        total += sum(attend_memory(cls, stats, shape, rank, op)["saved"] for op in ops if isinstance(op, Attend))
        total += 4 * s.rows * s.width(f_out) if layer < len(model.layers) - 1 else 0
    return int(total)


def attend_memory(cls, stats: dict, shape, rank: int, op: Attend) -> dict:
    """The layout's `attend_memory` of attention `op` on `rank`."""
    return cls.attend_memory(stats[op.adjacency], local_share(cls, stats[op.adjacency], shape, rank), rank, op.heads,
                             op.width, op.dropout)


def kept_bytes(cls, stats: dict, shape, rank: int, model: ModelCost) -> int:
    """Bytes of the products of the features made once a run and kept (`Spmm.once`, `spgnn.DistGraph.kept_bytes`):
    each as the rank's block of the features, float32."""
    s = local_share(cls, next(iter(stats.values())), shape, rank)
    return sum(4 * s.rows * s.width(op.width) for ops in model.layers for op in ops if once(op))


def _inputs(ops, saves: bool = False) -> dict:
    """{width: how many distinct tensors of that width} a layer keeps of its input and its input's products: its
    dense products' inputs but those it makes (`Dense.grad_in`), products of one H sharing it (a layer with kept
    products of its input, `Spmm.once`, multiplies them and the input itself), and its input where it `saves` it
    (`Layer.saves_input`)."""
    dense = [op.f_in for op in ops if isinstance(op, Dense) and not op.grad_in]
    kept = [op.width for op in ops if once(op)]
    out = {f: min(dense.count(f), 1 + kept.count(f)) for f in set(dense)}
    f_in = _widths(ops)[0]
    return out | ({f_in: out.get(f_in, 0) + 1} if saves else {})


def _saves(model: ModelCost, layer: int) -> bool:
    """Whether `layer` keeps its input beyond what its dense products take (`ModelCost.saves`)."""
    return layer < len(model.saves) and model.saves[layer]


def held_inputs(cls, stats: dict, shape, rank: int, model: ModelCost) -> int:
    """Of `saved_bytes`, what the rank holds anyway: where training does not drop out the features, what the first
    layer keeps of them and their kept products (`_inputs`; in `graph_bytes` and `kept_bytes`), not copies."""
    if not model.layers or (model.dropped and model.dropped[0]):
        return 0
    s = local_share(cls, next(iter(stats.values())), shape, rank)
    return 4 * s.rows * s.width(model.features) * _inputs(model.layers[0], _saves(model, 0)).get(model.features, 0)


def buffer_bytes(cls, stats: dict, shape, rank: int, model: ModelCost, overlap: bool = True) -> int:
    """The exchange buffers of the widest SpMM or attention: per call what arrives (a broadcast's block) or what is
    sent and received (the others), the largest call, twice when ``overlap`` keeps the next one in flight. A product
    made once a run counts too: it is the features' width, often the widest, and the C allocator keeps what it frees
    (RSS does not fall back after it; measured: amazon-computers' 2-layer GCN at P = 4, 55 MiB above ``--precompute
    off``)."""
    out = 0
    for op in (o for ops in model.layers for o in ops if isinstance(o, Spmm | Attend)):
        calls = exchange(cls, stats, shape, rank, op)["forward"]
        each = [r if kind == "broadcast" else s + r for kind, _, s, r, _ in calls]
        out = max(out, max(each, default=0) * (2 if overlap and len(each) > 1 else 1))
    return int(out)


def working_bytes(s: LocalShare, model: ModelCost, widest: int) -> int:
    """The largest transient beside what autograd keeps (module section above) for a rank of `LocalShare` s: one
    gradient of the `widest` activation or of an input a layer makes (`Dense.grad_in`), two of a layer's input's
    width where it keeps its input (`Layer.saves_input`: GIN's Â·H and (1 + ε)·H before their sum, dZ and dZ ⊙ H
    in the backward), or a column-split dense product's partial sum, copy and block."""
    split = max((4 * s.rows * (2 * op.f_out + s.width(op.f_out)) for ops in model.layers for op in ops
                 if isinstance(op, Dense)), default=0) if s.C > 1 else 0
    made = [s.width(op.f_in) for ops in model.layers for op in ops if isinstance(op, Dense) and op.grad_in]
    saves = [2 * s.width(_widths(ops)[0]) for layer, ops in enumerate(model.layers) if _saves(model, layer)]
    return max(4 * s.rows * max([s.width(widest), *made, *saves]), split)


def memory_bytes(cls, stats: dict, shape, rank: int, model: ModelCost, rates: Rates = None,
                 overlap: bool = True) -> dict:
    """The predicted peak resident bytes of `rank` while training, by part (module section above) and "total"."""
    rates = rates or DEFAULT_RATES
    s = local_share(cls, next(iter(stats.values())), shape, rank)
    widest = max([model.classes, *(_widths(ops)[1] for ops in model.layers)])
    attention = [attend_memory(cls, stats, shape, rank, op)["working"] for ops in model.layers for op in ops
                 if isinstance(op, Attend)]
    out = {"runtime": rates.runtime_bytes, "graph": graph_bytes(cls, stats, shape, rank, model),
           "kept": kept_bytes(cls, stats, shape, rank, model),
           "saved": saved_bytes(cls, stats, shape, rank, model) - held_inputs(cls, stats, shape, rank, model),
           "params": 16 * model.n_params + 4 * model.frozen,
           "buffers": buffer_bytes(cls, stats, shape, rank, model, overlap),
           "working": max([working_bytes(s, model, widest), *attention])}
    return out | {"total": int(sum(out.values()))}
