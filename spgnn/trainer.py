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

from . import graph as graphs
from . import spmm
from .comm import Comm
from .datasets import load_dataset
from .errors import SpgnnError
from .grid import ProcessGrid
from .layers import GNN, LAYERS
from .memory import SavedTensorMeter, peak_rss_bytes
from .partition import Partition, make_parts


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
    device: str = "cpu"
    feature_norm: str = "row"
    eval_every: int = 1
    timeout: float = 300.0
    output: str | None = None

    def validate(self) -> TrainConfig:
        """Raise SpgnnError for option values no run can use (before any process starts)."""
        checks = [
            (self.model in LAYERS, f"--model must be one of {', '.join(LAYERS)}, got {self.model!r}"),
            (self.layers >= 1, f"--layers must be at least 1, got {self.layers}"),
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
        ]
        for ok, message in checks:
            if not ok:
                raise SpgnnError(message)
        spmm.get(self.algo)
        return self


def row_normalize(x: np.ndarray) -> np.ndarray:
    """Each feature row divided by its sum (rows summing to zero are left as they are)."""
    s = x.sum(axis=1, keepdims=True)
    return x / np.where(s == 0, 1, s)


def load_and_partition(cfg: TrainConfig, P: int, graph=None, parts=None) -> tuple[graphs.Graph, Partition]:
    """The run's graph (loaded unless given) and its checked P-way partition (`parts` overrides
    cfg.partition). Raises SpgnnError for bad data or a partition that cannot work."""
    g = graph if graph is not None else load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
    return g, Partition(make_parts(cfg.partition if parts is None else parts, g.adj, P, cfg.seed), P)


class Trainer:
    """One rank's share of a full-batch training run."""

    def __init__(self, cfg: TrainConfig, comm: Comm, graph: graphs.Graph | None = None, parts=None):
        self.cfg, self.comm = cfg.validate(), comm
        g, self.partition = load_and_partition(cfg, comm.world_size, graph, parts)
        self.graph, P = g, comm.world_size
        algo_cls = spmm.get(cfg.algo)
        self.grid = ProcessGrid(comm, algo_cls.grid_shape(P), algo_cls.grid_names, cfg.device)
        torch.manual_seed(cfg.seed)
        self.model = GNN(cfg.model, g.num_features, cfg.hidden, g.num_classes, cfg.layers, cfg.dropout,
                         cfg.seed).to(cfg.device)
        adj = self.partition.renumber(graphs.NORMALIZATIONS[self.model.adjacency](g.adj))
        self.algo = algo_cls(adj, self.partition, comm, self.grid, cfg.device)
        x = row_normalize(g.x) if cfg.feature_norm == "row" else g.x
        self.x, self.y = self.local(x), self.local(g.y)
        self.node_ids = torch.as_tensor(self.algo.local_rows(self.partition.perm))
        self.masks = {k: self.local(getattr(g, f"{k}_mask")) for k in ("train", "val", "test")}
        self.counts = {k: int(getattr(g, f"{k}_mask").sum()) for k in self.masks}
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
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
        m = self.masks["train"]
        with self.comm.phase("forward"), self.meter.hooks():
            logits = self.logits(epoch)
            loss_sum = F.nll_loss(self.algo.log_softmax(logits)[m], self.y[m], reduction="sum")
        (loss_sum / self.counts["train"]).backward()
        with self.comm.phase("optimizer"):
            self.sync_gradients()
        return loss_sum.detach(), logits.detach()

    def step(self, epoch: int) -> float:
        """One forward, backward and Adam step; returns the global mean training loss."""
        loss_sum, _ = self.forward_backward(epoch)
        with self.comm.phase("optimizer"):
            self.opt.step()
            (total,) = self.comm.all_sum([loss_sum.item()])
        return total / self.counts["train"]

    def sync_gradients(self) -> None:
        """Sum parameter gradients over the ranks that hold disjoint rows (one all-reduce)."""
        group = self.algo.grad_group()
        if group.size == 1:
            return
        params = list(self.model.parameters())
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        self.comm.all_reduce(flat, group)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Global accuracy on the train, validation and test nodes (no dropout)."""
        self.model.eval()
        with self.comm.phase("eval"):
            pred = self.logits().argmax(dim=1)
            correct = [float((pred[m] == self.y[m]).sum()) for m in self.masks.values()]
            totals = self.comm.all_sum(correct)
        return {f"{k}_acc": c / max(self.counts[k], 1) for k, c in zip(self.masks, totals)}

    def run(self, log=print) -> dict:
        """Train for cfg.epochs; returns the report (complete on rank 0, this rank's part elsewhere)."""
        epochs, best = [], {"val_acc": -1.0}
        for epoch in range(self.cfg.epochs):
            t0 = time.perf_counter()
            loss = self.step(epoch)
            record = {"epoch": epoch, "loss": loss, "time_s": time.perf_counter() - t0}
            if self.cfg.eval_every and (epoch % self.cfg.eval_every == 0 or epoch == self.cfg.epochs - 1):
                record |= self.evaluate()
                if record["val_acc"] > best["val_acc"]:
                    best = {"epoch": epoch, "val_acc": record["val_acc"], "test_acc": record["test_acc"]}
            epochs.append(record)
            if self.comm.rank == 0 and log:
                log(format_epoch(record))
        final = self.evaluate()
        return self.report(epochs, final, best)

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
        g = self.graph
        return {
            "config": asdict(self.cfg),
            "world_size": self.comm.world_size,
            "graph": {"name": g.name, "n": g.n, "nnz": g.nnz, "features": g.num_features,
                      "classes": g.num_classes, "symmetric": bool(g.is_symmetric)},
            "partition": {"method": str(self.cfg.partition), "sizes": self.partition.sizes().tolist()},
            "grid": {"algo": self.algo.name, "shape": list(self.grid.shape), "names": list(self.grid.names)},
            "epochs": epochs,
            "final": final | {"loss": epochs[-1]["loss"] if epochs else None},
            "best": best,
            "median_epoch_s": float(np.median(times)) if times else None,
            "comm": {"per_rank": [r["comm"] for r in everyone]},
            "memory": {"per_rank": [r["memory"] for r in everyone]},
        }


def format_epoch(r: dict) -> str:
    acc = "".join(f"  {k[:-4]} {r[k]:.4f}" for k in ("train_acc", "val_acc", "test_acc") if k in r)
    return f"epoch {r['epoch']:4d}  loss {r['loss']:.4f}{acc}  time {r['time_s'] * 1e3:.1f} ms"
