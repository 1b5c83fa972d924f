"""Full-batch training on a process grid: graph → partition → distributed layout → model → report.

The loss is the global mean of the cross-entropy over all training nodes, L = (1/|T|) Σ_{v∈T} ℓ_v: each
rank sums ℓ over its own training rows and divides by the global |T|, so summing parameter gradients
over ranks gives exactly the serial gradient.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from . import cost, spmm
from . import graph as graphs
from .comm import Comm
from .datasets import load_dataset
from .errors import SpgnnError
from .grid import ProcessGrid
from .launch import TRANSPORTS
from .layers import GNN, LAYERS
from .memory import SavedTensorMeter, peak_rss_bytes
from .optim import Adam
from .partition import make_partition
from .partition_metrics import partition_metrics
from .spmm.summa import parse_grid


@dataclass
class TrainConfig:
    """Everything that defines a training run (the ``spgnn train`` options)."""

    dataset: str = "cora"
    data_dir: str | None = None
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


def row_normalize(x: np.ndarray) -> np.ndarray:
    """Each feature row divided by its sum (rows summing to zero are left as they are)."""
    s = x.sum(axis=1, keepdims=True)
    return x / np.where(s == 0, 1, s)


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


def plan(cfg: TrainConfig, P: int, graph=None, parts=None) -> Plan:
    """The run's `Plan` (`parts` overrides cfg.partition). Raises SpgnnError for bad data, options or
    partitions, before any communication."""
    g = graph if graph is not None else load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
    compared = None
    if cfg.algo == "auto":
        cfg, compared = cost.choose(cfg, g, P, cost.load_calibration(cfg.calibration) if cfg.calibration else None)
    cls = spmm.get(cfg.algo)
    shape = cls.grid_shape(P, cfg.replication, parse_grid(cfg.grid) if cfg.grid else None)
    if cls.num_parts(shape) > g.n:
        raise SpgnnError(f"--algo {cfg.algo} on grid {'x'.join(map(str, shape))} splits the graph into "
                         f"{cls.num_parts(shape)} row blocks but it has only {g.n} nodes: use fewer processes")
    partition = make_partition(cfg.partition if parts is None else parts, g.adj, cls.num_parts(shape), cfg.seed)
    return Plan(g, cfg, partition, shape, compared)


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
    """One rank's share of a full-batch training run."""

    def __init__(self, cfg: TrainConfig, comm: Comm, graph: graphs.Graph | None = None, parts=None):
        self.plan = plan(cfg.validate(), comm.world_size, graph, parts)
        self.comm, self.cfg, g, self.partition, shape = comm, self.plan.cfg, self.plan.graph, \
            self.plan.partition, self.plan.shape
        cfg = self.cfg
        self.graph = g
        algo_cls = spmm.get(cfg.algo)
        self.grid = ProcessGrid(comm, shape, algo_cls.grid_names, cfg.device)
        torch.manual_seed(cfg.seed)
        self.model = GNN(cfg.model, g.num_features, cfg.hidden, g.num_classes, cfg.layers, cfg.dropout,
                         cfg.seed, cfg.heads, cfg.out_heads, cfg.batch_norm).to(cfg.device)
        adj = self.partition.renumber(graphs.NORMALIZATIONS[self.model.adjacency](g.adj))
        self.algo = algo_cls(adj, self.partition, comm, self.grid, cfg.device, **algo_cls.options(cfg))
        self.stats = None       # block statistics for the cost model's prediction, made on rank 0
        if comm.rank == 0 and cfg.model in cost.MODELLED and algo_cls.has_cost_model():
            self.stats = cost.BlockStats.of(adj, self.partition)
            _ = self.stats.halo, self.stats.block_nnz       # computed now, so that the adjacency can be freed
            self.stats.adj = None
        x = row_normalize(g.x) if cfg.feature_norm == "row" else g.x
        self.x, self.y = self.local(x)[:, self.algo.columns(g.num_features)].contiguous(), self.local(g.y)
        self.node_ids = torch.as_tensor(self.algo.local_rows(self.partition.perm))
        self.masks = {k: self.local(getattr(g, f"{k}_mask")) for k in ("train", "val", "test")}
        self.counts = {k: int(getattr(g, f"{k}_mask").sum()) for k in self.masks}
        self.opt = Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.meter = SavedTensorMeter()

    def local(self, a: np.ndarray) -> torch.Tensor:
        """This rank's rows of a per-node array given in original node order."""
        return torch.as_tensor(self.algo.local_rows(a[self.partition.perm])).to(self.cfg.device)

    def logits(self, epoch: int = 0) -> torch.Tensor:
        return self.model(self.algo, self.x, self.node_ids, epoch)

    def forward_backward(self, epoch: int):
        """Forward with dropout, backward of the global mean loss, gradients summed over ranks.
        Returns (this rank's training-loss sum as a tensor, its logits)."""
        self.model.train()
        self.opt.zero_grad(set_to_none=False)
        m = self.masks["train"] & self.algo.label_rows(self.y, self.graph.num_classes)
        first = self.algo.columns(self.graph.num_classes).start
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
            pred = self.algo.argmax(self.logits(), self.graph.num_classes)
            mine = self.algo.label_rows(self.y, self.graph.num_classes)
            correct = [float((pred[m & mine] == self.y[m & mine]).sum()) for m in self.masks.values()]
            totals = self.comm.all_sum(correct, self.algo.rows_group())
        return {f"{k}_acc": c / max(self.counts[k], 1) for k, c in zip(self.masks, totals)}

    @torch.no_grad()
    def predict(self) -> np.ndarray:
        """Logits of every node (no dropout), rows in original node ids, on every rank."""
        self.model.eval()
        with self.comm.phase("eval"):
            cols = self.algo.columns(self.graph.num_classes)
            everyone = self.comm.all_gather_object((self.node_ids.numpy(), cols, self.logits().cpu().numpy()))
        out = np.empty((self.graph.n, self.graph.num_classes), np.float32)
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
                       "saved_for_backward_bytes": self.meter.peak_bytes},
        }
        everyone = self.comm.all_gather_object(mine)
        times = [e["time_s"] for e in epochs]
        evals = sum("val_acc" in e for e in epochs) + 1
        g = self.graph
        return {
            "config": asdict(self.cfg),
            "world_size": self.comm.world_size,
            "transport": self.comm.transport.name,
            "graph": {"name": g.name, "n": g.n, "nnz": g.nnz, "features": g.num_features,
                      "classes": g.num_classes, "symmetric": bool(g.is_symmetric)},
            "partition": {"method": str(self.cfg.partition), "sizes": self.partition.sizes().tolist(),
                          "info": self.partition.info,
                          "metrics": partition_metrics(g.adj, self.partition, g.train_mask)},
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
        model = cost.ModelShape.of(self.cfg, self.graph)
        ledgers = [cost.epoch_ledger(type(self.algo), self.stats, self.grid.shape, r, model, epochs, evals)
                   for r in range(self.comm.world_size)]
        return {"alpha_beta": self.cfg.calibration or "default: gloo on 2 cores (DESIGN.md section 4)",
                "auto_compared": self.plan.compared,
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
