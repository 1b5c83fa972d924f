"""Full-batch training on a process grid: graph → partition → distributed layout → model → report.

The loss is the global mean of the cross-entropy over all training nodes, L = (1/|T|) Σ_{v∈T} ℓ_v: each
rank sums ℓ over its own training rows and divides by the global |T|, so summing parameter gradients
over ranks gives exactly the serial gradient.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import cost, partitioned, spmm
from . import graph as graphs
from .comm import Comm
from .datasets import load_dataset
from .errors import SpgnnError
from .grid import ProcessGrid
from .launch import TRANSPORTS
from .layers import GNN, LAYERS
from .memory import SavedTensorMeter, peak_rss_bytes
from .optim import Adam
from .partition import get_partitioner, make_partition
from .spmm.summa import parse_grid


@dataclass
class TrainConfig:
    """Everything that defines a training run (the ``spgnn train`` options)."""

    dataset: str = "cora"
    data_dir: str | None = None
    cache_dir: str | None = None
    model: str = "gcn"
    algo: str = "1d-halo"
    partition: str = "block"
    layers: int = 2
    hidden: int = 16
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    seed: int = 0
    replication: int = 0
    grid: str | None = None
    heads: int = 8
    out_heads: int = 1
    batch_norm: bool = False
    prefetch: int = 1
    device: str = "cpu"
    feature_norm: str = "row"
    eval_every: int = 1
    timeout: float = 300.0
    transport: str = "auto"
    calibration: str | None = None
    output: str | None = None

    def validate(self) -> TrainConfig:
        """Raise SpgnnError for option values no run can use (before any process starts)."""
        checks = [
            (self.model in LAYERS, f"--model must be one of {', '.join(LAYERS)}, got {self.model!r}"),
            (self.replication >= 0, f"--replication must be non-negative, got {self.replication}"),
            (self.layers >= 1, f"--layers must be at least 1, got {self.layers}"),
            (min(self.heads, self.out_heads) >= 1, f"--heads and --out-heads must be at least 1, got "
                                                   f"{self.heads} and {self.out_heads}"),
            (self.prefetch >= 0, f"--prefetch must be non-negative, got {self.prefetch}"),
            (self.hidden >= 1, f"--hidden must be at least 1, got {self.hidden}"),
            (0.0 <= self.dropout < 1.0, f"--dropout must lie in [0, 1), got {self.dropout}"),
            (self.lr > 0, f"--lr must be positive, got {self.lr}"),
            (self.weight_decay >= 0, f"--weight-decay must be non-negative, got {self.weight_decay}"),
            (self.epochs >= 0, f"--epochs must be non-negative, got {self.epochs}"),
            (self.eval_every >= 0, f"--eval-every must be non-negative, got {self.eval_every}"),
            (self.feature_norm in ("row", "none"), f"--feature-norm must be row or none, got {self.feature_norm!r}"),
            (self.timeout > 0, f"--timeout must be positive, got {self.timeout}"),
            (self.device == "cpu" or self.device.startswith("cuda"),
             f"--device must be cpu or cuda[:N], got {self.device!r}"),
            (self.transport in TRANSPORTS,
             f"--transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise SpgnnError(message)
        if self.algo != "auto":
            spmm.get(self.algo)
        if self.grid is not None:
            parse_grid(self.grid)
        if self.batch_norm and self.algo != "auto" and not spmm.get(self.algo).whole_rows:
            raise SpgnnError(f"--batch-norm needs whole rows, which --algo {self.algo} splits by columns: "
                             "use another --algo")
        if self.model == "gat" and self.algo not in spmm.attention_algorithms():
            raise SpgnnError(f"--model gat needs attention, which --algo {self.algo} does not support: use "
                             f"--algo {' or '.join(spmm.attention_algorithms())}")
        return self


def row_normalize(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Each feature row divided by its sum (rows summing to zero are left as they are); `out=x` in place."""
    s = x.sum(axis=1, keepdims=True)
    return np.divide(x, np.where(s == 0, 1, s), out=out)


@dataclass
class Plan:
    """What a run on P processes will be: the graph, the config with ``--algo auto`` resolved (and the
    candidates it compared), the checked partition into as many parts as the grid has block rows, and
    the grid shape."""

    graph: graphs.Graph
    cfg: TrainConfig
    partition: object
    shape: tuple
    compared: list | None = None


def resolve(cfg: TrainConfig, P: int, g) -> tuple[TrainConfig, tuple, list | None]:
    """(cfg with --algo auto resolved, the grid shape, what auto compared) for graph `g` on P processes."""
    compared = None
    if cfg.algo == "auto":
        cfg, compared = cost.choose(cfg, g, P, cost.load_calibration(cfg.calibration) if cfg.calibration else None)
    cls = spmm.get(cfg.algo)
    shape = cls.grid_shape(P, cfg.replication, parse_grid(cfg.grid) if cfg.grid else None)
    if cls.num_parts(shape) > g.n:
        raise SpgnnError(f"--algo {cfg.algo} on grid {'x'.join(map(str, shape))} splits the graph into "
                         f"{cls.num_parts(shape)} row blocks but it has only {g.n} nodes: use fewer processes")
    return cfg, shape, compared


def plan(cfg: TrainConfig, P: int, graph=None, parts=None) -> Plan:
    """The run's `Plan` for a graph held in memory (`parts` overrides cfg.partition). Raises SpgnnError for
    bad data, options or partitions, before any communication."""
    g = graph if graph is not None else load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
    cfg, shape, compared = resolve(cfg, P, g)
    partition = make_partition(cfg.partition if parts is None else parts, g.adj,
                               spmm.get(cfg.algo).num_parts(shape), cfg.seed)
    return Plan(g, cfg, partition, shape, compared)


def partition_to_cache(cfg: TrainConfig, P: int) -> Path:
    """Load cfg.dataset, resolve --algo auto, partition it into the algorithm's row blocks and write it to
    the cache (`spgnn.partitioned.cached`; reused when there); returns the folder. The one place a process
    holds the whole graph."""
    g = load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
    cfg, shape, _ = resolve(cfg, P, g)
    return cached_partition(cfg, g, cfg.partition, spmm.get(cfg.algo).num_parts(shape))


def cached_partition(cfg: TrainConfig, g, method, B: int) -> Path:
    """The cache folder of graph `g` partitioned by `method` into B parts (written unless there)."""
    return partitioned.cached(g, lambda: make_partition(method, g.adj, B, cfg.seed), method, {}, cfg.seed, B,
                              cfg.cache_dir)


def split_parts(cfg: TrainConfig, comm: Comm, graph=None):
    """The parts of a graph split for sampled training (`--split-graph`): a block partition into P/c parts, so
    that the renumbering is the identity and a node keeps its id; of `graph` in memory, of a partitioned
    folder, or of cfg.dataset through the cache (rank 0 partitions)."""
    B = comm.world_size // (cfg.replication or 1)
    if graph is not None:
        return partitioned.InMemoryParts(graph, make_partition("block", graph.adj, B))
    folder = cfg.dataset if partitioned.is_partitioned(cfg.dataset) else on_rank0(
        comm, lambda: str(cached_partition(cfg, load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed), "block", B)))
    ds = partitioned.PartitionedDataset(folder)
    if ds.nparts != B or ds.partition_info["method"] != "block":
        raise SpgnnError(f"--split-graph reads a block partition into P/c = {B} parts, but {folder} holds "
                         f"{ds.nparts} parts by {ds.partition_info['method']}: partition with spgnn partition "
                         f"--method block --nparts {B} --output DIR")
    return ds


def fit_parts(cfg: TrainConfig, P: int, parts) -> tuple[TrainConfig, tuple, list | None]:
    """(cfg with --algo auto resolved among the options whose row blocks are the parts, grid shape, what auto
    compared) for a partitioned dataset on P processes; SpgnnError saying what fits when nothing does."""
    compared, K = None, parts.nparts
    method = parts.partition_info.get("method")
    if cfg.partition not in (TrainConfig.partition, method) and get_partitioner(cfg.partition) is not None:
        raise SpgnnError(f"{getattr(parts, 'path', 'the dataset')} is partitioned already (by {method}): --partition "
                         f"{cfg.partition} does not apply to it; drop --partition or partition anew with spgnn "
                         "partition --output")
    if cfg.algo == "auto":
        cfg, compared = cost.choose(cfg, None, P, cost.load_calibration(cfg.calibration) if cfg.calibration else None,
                                    parts=parts)
    cls = spmm.get(cfg.algo)
    shape = cls.grid_shape(P, cfg.replication, parse_grid(cfg.grid) if cfg.grid else None)
    if cls.num_parts(shape) != K:
        raise SpgnnError(f"{getattr(parts, 'path', 'the dataset')} holds {K} parts but --algo {cfg.algo} on grid "
                         f"{'x'.join(map(str, shape))} needs {cls.num_parts(shape)} row blocks. What fits {K} parts: "
                         f"1d, 1d-halo or sar on {K} processes; 1.5d --replication c on {K}·c processes; 2d --grid "
                         f"{K}xC; 3d --grid RxCxL with R·L = {K}. Or partition anew: spgnn partition --nparts "
                         f"{cls.num_parts(shape)} --output DIR")
    return cfg, shape, compared


def open_parts(cfg: TrainConfig, comm: Comm, graph=None, parts=None):
    """(cfg resolved, the parts: `InMemoryParts` of `graph` or a `PartitionedDataset`, grid shape, what auto
    compared). A dataset that is no partitioned folder is partitioned by rank 0 into the cache while the
    others wait (`partition_to_cache`), then every rank opens the folder."""
    P = comm.world_size
    if graph is not None:
        p = plan(cfg, P, graph, parts)
        return p.cfg, partitioned.InMemoryParts(graph, p.partition), p.shape, p.compared
    if parts is not None:
        raise SpgnnError("a partition (parts) goes with a graph in memory; a dataset on disk is partitioned by "
                         "cfg.partition")
    folder = cfg.dataset if partitioned.is_partitioned(cfg.dataset) else \
        on_rank0(comm, lambda: str(partition_to_cache(cfg, P)))
    ds = partitioned.PartitionedDataset(folder)
    cfg, shape, compared = fit_parts(cfg, P, ds)
    return cfg, ds, shape, compared


def on_rank0(comm: Comm, fn):
    """fn() run by rank 0 alone, its result (or its SpgnnError) handed to every rank."""
    return agree(comm, fn, everyone=False)


def agree(comm: Comm, fn, everyone: bool = True):
    """fn() run on every rank (or on rank 0 alone, its result handed to all); when it raises SpgnnError on
    any rank, every rank raises the first such error, so that bad input on one rank stops all with one line."""
    if comm.world_size == 1:
        return fn()
    result = ("ok", None)
    if everyone or comm.rank == 0:
        try:
            result = ("ok", fn())
        except SpgnnError as e:
            result = ("error", str(e))
        except Exception as e:
            comm.all_gather_object(("error", f"rank {comm.rank} failed: {type(e).__name__}: {e}"))
            raise
    shared = result if not everyone else (result[0], result[1] if result[0] == "error" else None)
    results = comm.all_gather_object(shared)                 # statuses (and rank 0's result when it alone ran)
    error = next((value for kind, value in results if kind == "error"), None)
    if error is not None:
        raise SpgnnError(error)
    return result[1] if everyone else results[0][1]


def all_reduce_gradients(model: torch.nn.Module, comm: Comm, group) -> None:
    """Sum the parameter gradients over `group` in one flat all-reduce (missing gradients count as zero)."""
    if group.size == 1:
        return
    params = list(model.parameters())
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    comm.all_reduce(flat, group)
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()


class Trainer:
    """One rank's share of a full-batch training run. It reads only its part of the graph: from a
    partitioned dataset folder (cfg.dataset), from the cache (a named or generated dataset, partitioned once
    by rank 0), or sliced from `graph` when the caller holds one in memory (`parts` overriding cfg.partition)."""

    def __init__(self, cfg: TrainConfig, comm: Comm, graph: graphs.Graph | None = None, parts=None):
        self.cfg, self.parts, shape, self.compared = open_parts(cfg.validate(), comm, graph, parts)
        self.comm, self.info = comm, self.parts.info
        cfg, info = self.cfg, self.info
        algo_cls = spmm.get(cfg.algo)
        self.grid = ProcessGrid(comm, shape, algo_cls.grid_names, cfg.device, algo_cls.planes())
        torch.manual_seed(cfg.seed)
        self.model = GNN(cfg.model, info.num_features, cfg.hidden, info.num_classes, cfg.layers, cfg.dropout,
                         cfg.seed, cfg.heads, cfg.out_heads, cfg.batch_norm).to(cfg.device)
        share = agree(comm, lambda: self.parts.share(algo_cls.part_of(shape, self.grid.coord)))
        self.algo = algo_cls.from_share(share, self.model.adjacency, comm, self.grid, cfg.device,
                                        **algo_cls.options(cfg))
        x = row_normalize(share.x, out=share.x) if cfg.feature_norm == "row" else share.x
        share.drop_features()
        self.x = torch.as_tensor(x[:, self.algo.columns(info.num_features)]).contiguous().to(cfg.device)
        del x
        self.y = torch.as_tensor(share.y).to(cfg.device)
        self.node_ids = torch.as_tensor(share.node_ids)
        self.masks = {k: torch.as_tensor(share.masks[k]).to(cfg.device) for k in ("train", "val", "test")}
        self.counts = dict(info.counts)
        self.stats = None       # block statistics for the cost model's prediction, on rank 0
        if comm.rank == 0 and cfg.model in cost.MODELLED and algo_cls.has_cost_model():
            self.stats = self.parts.stats(self.model.adjacency)
        self.opt = Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.meter = SavedTensorMeter()

    def graph_bytes(self) -> int:
        """Bytes of the graph this rank holds: its layout's blocks of A and halo plans, its feature rows (and
        columns), labels, masks and node ids."""
        kept = [self.x, self.y, self.node_ids, *self.masks.values()]
        return self.algo.graph_bytes() + sum(t.numel() * t.element_size() for t in kept)

    def logits(self, epoch: int = 0) -> torch.Tensor:
        return self.model(self.algo, self.x, self.node_ids, epoch)

    def forward_backward(self, epoch: int):
        """Forward with dropout, backward of the global mean loss, gradients summed over ranks.
        Returns (this rank's training-loss sum as a tensor, its logits)."""
        self.model.train()
        self.opt.zero_grad(set_to_none=False)
        m = self.masks["train"] & self.algo.label_rows(self.y, self.info.num_classes)
        first = self.algo.columns(self.info.num_classes).start
        with self.comm.phase("forward"), self.meter.hooks():
            logits = self.logits(epoch)
            loss_sum = F.nll_loss(self.algo.log_softmax(logits)[m], self.y[m] - first, reduction="sum")
        (loss_sum / self.counts["train"]).backward()
        with self.comm.phase("optimizer"):
            self.sync_gradients()
        return loss_sum.detach(), logits.detach()

    def step(self, epoch: int) -> float:
        """One forward, backward and Adam step; returns the global mean training loss."""
        loss_sum, _ = self.forward_backward(epoch)
        with self.comm.phase("optimizer"):
            self.opt.step()
            (total,) = self.comm.all_sum([loss_sum.item()], self.algo.rows_group())
        return total / self.counts["train"]

    def sync_gradients(self) -> None:
        """Sum parameter gradients over the ranks that hold disjoint rows (one all-reduce)."""
        all_reduce_gradients(self.model, self.comm, self.algo.grad_group())

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Global accuracy on the train, validation and test nodes (no dropout)."""
        self.model.eval()
        with self.comm.phase("eval"):
            pred = self.algo.argmax(self.logits(), self.info.num_classes)
            mine = self.algo.label_rows(self.y, self.info.num_classes)
            correct = [float((pred[m & mine] == self.y[m & mine]).sum()) for m in self.masks.values()]
            totals = self.comm.all_sum(correct, self.algo.rows_group())
        return {f"{k}_acc": c / max(self.counts[k], 1) for k, c in zip(self.masks, totals)}

    @torch.no_grad()
    def predict(self, gather: bool = False):
        """Logits (no dropout) of this rank's rows: (original node ids, the columns it holds, n_p×|columns|).
        `gather`: the n×classes logits of every node in original order, assembled on every rank (O(n·classes)
        a rank: for graphs that allow it)."""
        self.model.eval()
        with self.comm.phase("eval"):
            mine = (self.node_ids.numpy(), self.algo.columns(self.info.num_classes), self.logits().cpu().numpy())
            if not gather:
                return mine
            everyone = self.comm.all_gather_object(mine)
        out = np.empty((self.info.n, self.info.num_classes), np.float32)
        for ids, cols, block in everyone:
            out[ids, cols] = block
        return out

    def run(self, log=print) -> dict:
        """Train for cfg.epochs; returns the report (complete on rank 0, this rank's part elsewhere)."""
        epochs, best = epoch_loop(self.step, self.evaluate, self.cfg, log if self.comm.rank == 0 else None)
        return self.report(epochs, self.evaluate(), best)

    def report(self, epochs, final, best) -> dict:
        mine = {
            "comm": {"rank": self.comm.rank, "sent_bytes": self.comm.ledger.total("sent_bytes"),
                     "recv_bytes": self.comm.ledger.total("recv_bytes"),
                     "messages": self.comm.ledger.total("messages"),
                     "seconds": self.comm.ledger.total("seconds"), "table": self.comm.ledger.table()},
            "memory": {"rank": self.comm.rank, "peak_rss_bytes": peak_rss_bytes(),
                       "graph_bytes": self.graph_bytes(), "saved_for_backward_bytes": self.meter.peak_bytes},
        }
        everyone = self.comm.all_gather_object(mine)
        times = [e["time_s"] for e in epochs]
        evals = sum("val_acc" in e for e in epochs) + 1
        g, p = self.info, self.parts.partition_info
        return {
            "config": asdict(self.cfg),
            "world_size": self.comm.world_size,
            "transport": self.comm.transport.name,
            "graph": {"name": g.name, "n": g.n, "nnz": g.nnz, "features": g.num_features,
                      "classes": g.num_classes, "symmetric": g.symmetric},
            "partition": {"method": str(p.get("method")), "sizes": np.diff(g.offsets).tolist(), "info": p,
                          "metrics": self.parts.metrics() if self.comm.rank == 0 else None},
            "grid": {"algo": self.algo.name, "shape": list(self.grid.shape), "names": list(self.grid.names)},
            "epochs": epochs,
            "final": final | {"loss": epochs[-1]["loss"] if epochs else None},
            "best": best,
            "median_epoch_s": float(np.median(times)) if times else None,
            "comm": {"per_rank": [r["comm"] for r in everyone]},
            "memory": {"per_rank": [r["memory"] for r in everyone]},
            "predicted": self.predicted(len(epochs), evals),
        }

    def predicted(self, epochs: int, evals: int) -> dict | None:
        """The cost model's figures for this run (setup, `epochs` steps, `evals` evaluations), to set
        beside the measured `comm` (on rank 0, for models and algorithms the model covers; else None)."""
        if self.stats is None:
            return None
        ab = cost.load_calibration(self.cfg.calibration) if self.cfg.calibration else None
        model = cost.ModelShape.of(self.cfg, self.info)
        ledgers = [cost.epoch_ledger(type(self.algo), self.stats, self.grid.shape, r, model, epochs, evals)
                   for r in range(self.comm.world_size)]
        return {"alpha_beta": self.cfg.calibration or "default: gloo on 2 cores",
                "auto_compared": self.compared,
                "per_rank": [{"rank": r, "sent_bytes": led.total("sent_bytes"), "recv_bytes": led.total("recv_bytes"),
                              "messages": led.total("messages"), "seconds": cost.seconds(led, ab)}
                             for r, led in enumerate(ledgers)]}


def epoch_loop(step, evaluate, cfg: TrainConfig, log=None) -> tuple[list[dict], dict]:
    """Run `step(epoch)` (returning the loss) for cfg.epochs, `evaluate()` every cfg.eval_every epochs and
    at the last; returns the per-epoch records and the best-validation record. `log` gets one line an epoch."""
    epochs, best = [], {"val_acc": -1.0}
    for epoch in range(cfg.epochs):
        t0 = time.perf_counter()
        record = {"epoch": epoch, "loss": step(epoch), "time_s": time.perf_counter() - t0}
        if cfg.eval_every and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs - 1):
            record |= evaluate()
            if record["val_acc"] > best["val_acc"]:
                best = {"epoch": epoch, "val_acc": record["val_acc"], "test_acc": record["test_acc"]}
        epochs.append(record)
        if log:
            log(format_epoch(record))
    return epochs, best


def format_epoch(r: dict) -> str:
    acc = "".join(f"  {k[:-4]} {r[k]:.4f}" for k in ("train_acc", "val_acc", "test_acc") if k in r)
    return f"epoch {r['epoch']:4d}  loss {r['loss']:.4f}{acc}  time {r['time_s'] * 1e3:.1f} ms"
