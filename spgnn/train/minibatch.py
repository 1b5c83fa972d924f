"""Data-parallel minibatch training on sampled blocks (`spgnn.sampling`), the graph replicated on every rank
(`--replicate-graph`, the default) or split 1.5D (`--split-graph --replication c`: P/c row blocks of the adjacency
and of the features, each held by c ranks and read from the shares of a block partition; rows fetched from
their owners, `spgnn.sampling.distributed`).

An epoch shuffles the training nodes (seeded by (seed, epoch)) into minibatches of `batch_size` seeds,
minibatch j keyed mix_key(seed, epoch, j). Step t trains on minibatches t·P … t·P+P−1, rank r on t·P+r;
a bulk call samples `bulk` steps' minibatches of one rank at once. The loss of a step is the mean
cross-entropy over all its seeds (every rank divides its sum by the step's global seed count), so the summed
gradient is that of one minibatch of P·batch_size seeds. A minibatch depends only on its key: which rank or
bulk call draws it does not change it. `batch_size` None is the default, min(1024, |train|).

Layer l of the model runs on minibatch block B_l (|nodes[l+1]|×|nodes[l]|) through a `LocalSpMM`; the same
GCN / GraphSAGE layers as full-batch training. Evaluation is full-graph, exact: the model on the whole
normalised adjacency, replicated: one `LocalSpMM` of n rows on every rank; split: a 1d-halo layout over the
shares in each replica column.

Ledger phases: "sampling" (the SpGEMM sampling; split: with the bytes of the row fetches), "features" (the
input features of each step's minibatch: a local gather when replicated, an all-to-all from their owners when
split), "forward", "optimizer" (the gradient all-reduce, bytes counted), "eval". The local rows ("local"
group) hold the seconds not spent inside that phase's collectives.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from ..comm.agree import agree
from ..comm.comm import Comm
from ..comm.grid import ProcessGrid, divisors
from ..comm.halo import Halo
from ..config import TrainConfig
from ..distgraph import all_reduce_gradients
from ..errors import SpgnnError
from ..graph.adjacency import normalize
from ..graph.datasets import load_dataset
from ..graph.graph import normalized_features
from ..graph.pyg import given_graph
from ..hashing import mix_key
from ..layers.registry import LAYERS, get_layer
from ..memory import held_bytes
from ..options import is_int
from ..partition import partitioned
from ..plan import split_parts
from ..sampling.distributed import FeatureFetcher, RowBlocks, make_distributed_sampler
from ..sampling.sampler import Minibatch, make_sampler, parse_sampler
from ..spmm import options as algorithm_options
from ..spmm.base import Block, DistSpMM
from ..spmm.halo import OneDHalo
from ..spmm.local import LocalSpMM
from ..tasks import get_task
from ..tasks.node import unlabelled
from .loop import Run


def epoch_batches(train_ids: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The epoch's minibatches: a (seed, epoch)-seeded shuffle of the training nodes cut every batch_size."""
    perm = np.random.default_rng([seed, epoch]).permutation(train_ids)
    return [perm[i:i + batch_size] for i in range(0, len(perm), batch_size)]


def shown(v) -> str:
    """v as an error message names it: an integer as a number, anything else as its repr."""
    return str(int(v)) if is_int(v) else repr(v)


DEFAULT_BATCH_SIZE = 1024
FULL_BATCH = ("algo", "partition", "node_order", "precompute", "memory_per_rank", "calibration")   # not read here


def full_batch_flags(cfg: TrainConfig) -> list[str]:
    """The flags of cfg's settings that only full-batch training reads (its layout, its algorithm's options but
    --replication, which splits the graph here too) set to other than their defaults (or an inert value)."""
    flags = ["--" + k.replace("_", "-") for k in FULL_BATCH if getattr(cfg, k) != getattr(TrainConfig, k)]
    return flags + [o.flag for o in algorithm_options().values() if o.name != "replication"
                    and o.is_set(getattr(cfg, o.name))]


def sampler_config(cfg: TrainConfig, sampler: str, bulk: int, nprocs: int | None = None,
                   split_graph: bool = False) -> TrainConfig:
    """cfg with one layer per sampler size; SpgnnError for options no run can use, and for those only full-batch
    training reads (`nprocs`, when known, is checked against the replication of a split graph and --batch-norm)."""
    _, sizes = parse_sampler(sampler)
    if cfg.layers not in (TrainConfig.layers, len(sizes)):
        raise SpgnnError(f"--layers {cfg.layers} but --sampler {sampler} samples {len(sizes)} hop"
                         f"{'s' if len(sizes) > 1 else ''}: the sampler sets the layers, one per size; give "
                         f"{cfg.layers} sizes, or drop --layers")
    cfg = replace(cfg, layers=len(sizes)).validate()
    if not get_layer(cfg.model).sampled:
        raise SpgnnError(f"--sampler trains models whose layers run on sampled blocks "
                         f"({', '.join(k for k, c in LAYERS.items() if c.sampled)}), not {cfg.model!r}")
    if not is_int(bulk) or bulk < 1:
        raise SpgnnError(f"--bulk must be an integer of at least 1, got {shown(bulk)}")
    if flags := full_batch_flags(cfg):
        raise SpgnnError(f"{' and '.join(flags)} appl{'y' if len(flags) > 1 else 'ies'} to full-batch training, not "
                         f"--sampler (minibatches are sampled from the whole graph, or its row blocks with "
                         f"--split-graph): drop {'them' if len(flags) > 1 else 'it'}")
    if cfg.batch_norm and (nprocs or 1) > 1:
        raise SpgnnError(f"--batch-norm with --sampler trains on one process only: on {nprocs} each would normalise by "
                         "its own minibatch's statistics and keep running statistics of its own (drop --batch-norm, "
                         "or train full-batch)")
    if not split_graph and cfg.replication > 1:
        raise SpgnnError(f"--replication {cfg.replication} with --sampler needs --split-graph (a replicated graph "
                         "is whole on every process)")
    if split_graph and nprocs and nprocs % (cfg.replication or 1):
        raise SpgnnError(f"--replication {cfg.replication} must divide the number of processes {nprocs} "
                         f"(--split-graph holds P/c row blocks, each on c processes): give one of "
                         f"{', '.join(map(str, divisors(nprocs)))}")
    return cfg


def check_options(cfg: TrainConfig, sampler: str, batch_size: int | None, bulk: int, graph=None,
                  nprocs: int | None = None, split_graph: bool = False):
    """(`sampler_config`, the graph, the batch size: None → min(1024, |train|)). `graph`: a Graph, a
    `spgnn.partition.share.GraphInfo` (of a split graph's parts), or None to load cfg.dataset."""
    cfg = sampler_config(cfg, sampler, bulk, nprocs, split_graph)
    if cfg.task not in ("auto", "multiclass"):
        raise SpgnnError(f"--sampler trains the multiclass node task only, not --task {cfg.task}: train it full-batch "
                         "(drop --sampler)")
    if graph is None and partitioned.is_partitioned(cfg.dataset):
        if not split_graph:
            raise SpgnnError(f"{cfg.dataset} is a partitioned folder: a replicated graph (--sampler without "
                             "--split-graph) is read whole from the dataset itself; add --split-graph, or give the "
                             "dataset")
        graph = partitioned.PartitionedDataset(cfg.dataset).info        # its parts are read by the ranks alone
    g = graph if graph is not None else load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
    unlabelled(g, "train it full-batch with --task link (drop --sampler)")
    if getattr(g, "targets", 0):
        raise SpgnnError(f"--sampler trains the multiclass node task only; dataset {g.name!r} has {g.targets} binary "
                         "targets per node: train it full-batch (drop --sampler)")
    if g.num_classes < 2:
        get_task("multiclass").check(g)             # (its line for one class)
    train = int(g.train_mask.sum()) if hasattr(g, "train_mask") else int(g.counts["train"])
    if not train:
        raise SpgnnError(f"{g.name} has no training nodes: minibatches are drawn from them; give it a training mask "
                         "with at least one node")
    if batch_size is None:
        batch_size = min(DEFAULT_BATCH_SIZE, train)
    if not is_int(batch_size) or not 1 <= batch_size <= train:
        raise SpgnnError(f"--batch-size must be an integer in [1, {train}] (the training nodes of {g.name}), got "
                         f"{shown(batch_size)}")
    return cfg, g, batch_size


class MinibatchTrainer(Run):
    """One rank's share of a sampled minibatch training run (`sampler` as `--sampler`, e.g. 'sage:15,10,5';
    the model gets one layer per sampler size, and cfg.layers must be its default or that many). `split_graph`:
    the adjacency's rows (for sampling) and the features (for training) split 1.5D with replication
    c = cfg.replication (0 means 1) and fetched from their owners (`spgnn.sampling.distributed`); else both
    replicated."""

    def __init__(self, cfg: TrainConfig, comm: Comm | None, sampler: str, batch_size: int | None = None, bulk: int = 1,
                 graph=None, split_graph: bool = False):
        comm, graph = comm if comm is not None else Comm(), given_graph(graph, cfg)
        parts = split_parts(sampler_config(cfg, sampler, bulk, comm.world_size, split_graph), comm, graph) \
            if split_graph else None
        cfg, g, batch_size = check_options(cfg, sampler, batch_size, bulk, graph if parts is None else parts.info,
                                           comm.world_size, split_graph)
        self.cfg, self.comm, self.info = cfg, comm, g
        self.spec, self.batch_size, self.bulk = sampler, batch_size, bulk
        self.build_model(g.num_features, g.num_classes)
        self.adjacency = self.model.adjacencies[0]      # sampled layers share one (the sampler's)
        if split_graph:
            self._split(parts)
        else:
            self.layout, self.full = None, None       # the full-graph operator, made at the first evaluation
            self.adj = normalize(g.adj, self.adjacency)
            x = normalized_features(g.x, cfg.feature_norm, f"dataset {g.name!r}")     # (a copy: g is the caller's)
            self.x, self.y = torch.as_tensor(x).to(cfg.device), torch.as_tensor(g.y).to(cfg.device)
            self.sampler = make_sampler(sampler, self.adj)
            self.features = lambda ids: self.x[torch.as_tensor(ids)]
            self.train_ids = np.flatnonzero(g.train_mask)
        self.steps_done, self.sampled = 0, 0

    def _split(self, parts) -> None:
        """The split graph from this rank's share (a block partition, so ids are the original ones): its block
        row of N for the sampler, its feature rows for the fetches and a 1d-halo layout for evaluation; the
        training nodes and their labels all-gathered over the replica column (phase setup)."""
        cfg, comm, info, kind = self.cfg, self.comm, parts.info, self.adjacency
        self.layout = RowBlocks(info.n, comm, cfg.replication or 1, bounds=info.offsets)
        share = agree(comm, lambda: parts.share(self.layout.block))
        agree(comm, lambda: normalized_features(share.x, cfg.feature_norm, f"dataset {info.name!r}", out=share.x))
        column = self.layout.column
        grid = ProcessGrid(comm, self.layout.grid.shape, ("part", "replica"), cfg.device)    # "part" = column
        with comm.phase("setup"):
            halo = Halo(share.indices, info.offsets, share.part, comm, grid.group("part"))
            block = Block.of(share, kind, halo)                  # one block row of N: sampler and evaluation
            self.full = OneDHalo(block, comm, grid, cfg.device)
            self.sampler = make_distributed_sampler(self.spec, block.a, comm, layout=self.layout)
            mine = share.node_ids[share.masks["train"]]
            both = torch.from_numpy(np.stack([mine, share.y[share.masks["train"]]], 1))
            counts = comm.all_gather_v(torch.tensor([[len(mine)]]), [1] * column.size, column).ravel().tolist()
            train = comm.all_gather_v(both, counts, column).numpy()
        self.train_ids, self.y = train[:, 0], torch.as_tensor(train[:, 1]).to(cfg.device)   # sorted: blocks in order
        self.x = torch.as_tensor(share.x).to(cfg.device)        # (normalised in place above)
        self.features = FeatureFetcher(self.x, self.layout)
        self.local = {"node_ids": torch.as_tensor(share.node_ids), "y": torch.as_tensor(share.y),
                      "masks": {k: torch.as_tensor(m) for k, m in share.masks.items()}}

    def labels(self, seeds: np.ndarray) -> torch.Tensor:
        """The labels of training nodes `seeds`."""
        if self.layout is None:
            return self.y[torch.as_tensor(seeds)]
        return self.y[torch.as_tensor(np.searchsorted(self.train_ids, seeds))]

    def _timed(self, phase: str, op: str, work):
        """work(), its seconds outside the collectives it records in `phase` booked as a local `op` row there."""
        led, t0 = self.comm.ledger, time.perf_counter()
        in_comm = led.total("seconds", phase=phase)
        out = work()
        in_comm = led.total("seconds", phase=phase) - in_comm
        led.record((phase, None, op, "local"), 0, 0, 0, time.perf_counter() - t0 - in_comm)
        return out

    def sample(self, batches: list, js: list[int], epoch: int) -> list[Minibatch]:
        """Minibatches j ∈ js of the epoch, in one bulk call (ledger phase "sampling")."""
        out = self._timed("sampling", "spgemm", lambda: self.sampler.sample(
            [batches[j] for j in js], [mix_key(self.cfg.seed, epoch, j) for j in js]))
        self.sampled += len(js)
        return out

    def step(self, mb: Minibatch | None, total: int) -> float:
        """Forward and backward of this rank's minibatch (none: a zero gradient), gradient all-reduce, Adam.
        Returns this rank's loss sum."""
        self.model.train()
        self.opt.zero_grad()
        loss_sum = torch.zeros(())
        inputs = mb.inputs if mb is not None else np.zeros(0, np.int64)     # split: a collective, so every rank
        x = self._timed("features", "gather", lambda: self.features(inputs))
        if mb is not None:
            y = self.labels(mb.seeds)
            algos = [LocalSpMM(b, self.comm, self.cfg.device, self.adjacency) for b in mb.blocks]
            ids = [torch.as_tensor(v) for v in mb.nodes[:-1]]
            with self.comm.phase("forward"):
                logits = self.model(algos, x, ids, self.steps_done)
                loss_sum = F.nll_loss(torch.log_softmax(logits, 1), y, reduction="sum")
            (loss_sum / total).backward()
        with self.comm.phase("optimizer"):
            all_reduce_gradients(self.model, self.comm, self.comm.world)
            self.opt.step()
        self.steps_done += 1
        return float(loss_sum.detach())

    def schedule(self, epoch: int):
        """This rank's steps of the epoch: yields (global seed count of the step, its minibatch or None),
        sampling `bulk` steps ahead in one call."""
        P, r = self.comm.world_size, self.comm.rank
        batches = epoch_batches(self.train_ids, self.batch_size, self.cfg.seed, epoch)
        steps = math.ceil(len(batches) / P)
        for t0 in range(0, steps, self.bulk):
            ts = range(t0, min(t0 + self.bulk, steps))
            mine = [t * P + r for t in ts if t * P + r < len(batches)]
            drawn = dict(zip(mine, self.sample(batches, mine, epoch)))
            for t in ts:
                yield sum(len(b) for b in batches[t * P:(t + 1) * P]), drawn.get(t * P + r)

    def epoch(self, epoch: int) -> float:
        """One pass over the training nodes; returns the mean training loss over them."""
        loss = sum(self.step(mb, total) for total, mb in self.schedule(epoch))
        with self.comm.phase("optimizer"):
            (loss,) = self.comm.all_sum([loss])
        return loss / len(self.train_ids)

    @torch.no_grad()
    def logits(self) -> torch.Tensor:
        """Full-graph logits (no dropout) of this rank's rows: the model on the whole normalised adjacency,
        replicated, or split: through a 1d-halo layout over the shares (each replica column alike)."""
        self.model.eval()
        with self.comm.phase("eval"):
            if self.layout is not None:
                return self.model(self.full, self.x, self.local["node_ids"])
            if self.full is None:
                self.full = LocalSpMM(self.adj, self.comm, self.cfg.device, self.adjacency)
            return self.model(self.full, self.x, torch.arange(self.info.n))

    def evaluate(self) -> dict:
        pred = self.logits().argmax(1)
        if self.layout is not None:
            y, masks, pred = self.local["y"], self.local["masks"], pred.cpu()     # the rank's rows, on the CPU
            correct = [float((pred[m] == y[m]).sum()) for m in masks.values()]
            with self.comm.phase("eval"):
                totals = self.comm.all_sum(correct, self.layout.column)
            return {f"{k}_acc": c / self.info.counts[k] if self.info.counts[k] else float("nan")
                    for k, c in zip(masks, totals)}
        g, pred = self.info, pred.cpu().numpy()
        return {f"{k}_acc": float((pred[m] == g.y[m]).mean()) if m.any() else float("nan")   # no share: as full-batch
                for k, m in (("train", g.train_mask), ("val", g.val_mask), ("test", g.test_mask))}

    def training(self) -> dict:
        """The sampler and batch size (they fix the minibatches; bulk and where the graph lives do not)."""
        return {"training": f"sampler {self.spec}, batch size {self.batch_size}"}

    def counters(self) -> dict:
        """Steps taken: they key the dropout masks of the next ones."""
        return {"steps_done": self.steps_done}

    def restore(self, counters: dict) -> None:
        if "steps_done" not in counters:        # a checkpoint from before runs recorded how they train
            raise SpgnnError("the checkpoint is of a full-batch run: resume it without --sampler")
        self.steps_done = counters["steps_done"]

    def graph_bytes(self) -> int:
        """Bytes of the graph this rank holds: the sampler's N (replicated: and the normalised A it was made from;
        split: its block row, the frontier rows it fetches from, the evaluation's layout), the feature rows, labels,
        training ids and, split, its rows' ids and masks."""
        sampler = self.sampler
        fetched = vars(sampler.frontier_rows).values() if "frontier_rows" in vars(sampler) else ()
        local = [*self.local.values(), *self.local["masks"].values()] if self.layout is not None else []
        full = self.full if isinstance(self.full, DistSpMM) else None      # its layout's own blocks, else N whole
        mine = vars(self.full).values() if self.full is not None and full is None else ()
        return held_bytes(self.x, self.y, self.train_ids, getattr(self, "adj", None), *vars(sampler).values(),
                          *fetched, *local, *mine) + (full.graph_bytes() if full is not None else 0)

    def rank_report(self) -> dict:
        mine = super().rank_report()
        mine["memory"] |= {"graph_bytes": self.graph_bytes()}
        led = self.comm.ledger
        mine["comm"] |= {"sampling_s": led.total("seconds", phase="sampling"), "minibatches": self.sampled,
                         "peak_rss_bytes": mine["memory"]["peak_rss_bytes"]}
        return mine

    def run_report(self, everyone, epochs) -> dict:
        split, ranks = self.layout is not None, [r["comm"] for r in everyone]
        sampled = sum(r["minibatches"] for r in ranks)
        return {
            "config": self.config_report() | {"sampler": self.spec, "batch_size": self.batch_size, "bulk": self.bulk,
                                          "split_graph": split, "replication": self.layout.c if split else None},
            "grid": {"algo": "minibatch, graph " + ("split 1.5D (P/c row blocks × c replicas)" if split else
                                                    "replicated"),
                     "shape": list(self.layout.grid.shape) if split else [self.comm.world_size]},
            "sampling": {"minibatches": sampled, "seconds_per_rank": [r["sampling_s"] for r in ranks],
                         "minibatches_per_s": sampled / max(max(r["sampling_s"] for r in ranks), 1e-12)},
        }
