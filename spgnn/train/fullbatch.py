"""Full-batch training on a process grid: graph → partition → distributed layout → model → report.

The loss is the global mean of the cross-entropy over all training nodes, L = (1/|T|) Σ_{v∈T} ℓ_v: each
rank sums ℓ over its own training rows and divides by the global |T|, so summing parameter gradients
over ranks gives exactly the serial gradient.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .. import cost, spmm
from ..comm.agree import agree
from ..comm.comm import Comm
from ..comm.grid import ProcessGrid
from ..config import TrainConfig
from ..graph.graph import Graph, row_normalize
from ..graph.pyg import as_graph
from ..memory import SavedTensorMeter
from ..plan import open_parts
from .loop import Run, all_reduce_gradients


class Trainer(Run):
    """One rank's share of a full-batch training run. It reads only its part of the graph: from a
    partitioned dataset folder (cfg.dataset), from the cache (a named or generated dataset, partitioned once
    by rank 0), or sliced from `graph` when the caller holds one in memory (a Graph or a PyG ``Data``; `parts`
    overriding cfg.partition)."""

    def __init__(self, cfg: TrainConfig, comm: Comm, graph: Graph | None = None, parts=None):
        self.cfg, self.parts, shape, self.compared = open_parts(cfg.validate(), comm, as_graph(graph), parts)
        self.comm, self.info = comm, self.parts.info
        cfg, info = self.cfg, self.info
        algo_cls = spmm.get(cfg.algo)
        self.grid = ProcessGrid(comm, shape, algo_cls.grid_names, cfg.device, algo_cls.planes())
        self.build_model(info.num_features, info.num_classes)
        share = agree(comm, lambda: self.parts.share(algo_cls.part_of(shape, self.grid.coord)))
        self.algo = algo_cls.from_share(share, self.model.adjacency, comm, self.grid, cfg.device,
                                        **algo_cls.constructor_options(cfg))
        x = row_normalize(share.x, out=share.x) if cfg.feature_norm == "row" else share.x
        share.drop_features()
        self.x = self.algo.scatter(x)
        del x
        self.y = torch.as_tensor(share.y).to(cfg.device)
        self.node_ids = torch.as_tensor(share.node_ids)
        self.masks = {k: torch.as_tensor(share.masks[k]).to(cfg.device) for k in ("train", "val", "test")}
        self.counts = dict(info.counts)
        self.stats = None       # block statistics for the cost model's prediction, on rank 0
        if comm.rank == 0 and cfg.model in cost.MODELLED and algo_cls.has_cost_model():
            self.stats = self.parts.stats(self.model.adjacency)
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

    def epoch(self, epoch: int) -> float:
        """A full-batch epoch is one `step`."""
        return self.step(epoch)

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

    def rank_report(self) -> dict:
        mine = super().rank_report()
        mine["memory"] |= {"graph_bytes": self.graph_bytes(), "saved_for_backward_bytes": self.meter.peak_bytes}
        return mine

    def graph_report(self) -> dict:
        return super().graph_report() | {"symmetric": self.info.symmetric}

    def run_report(self, everyone, epochs) -> dict:
        g, p = self.info, self.parts.partition_info
        evals = sum("val_acc" in e for e in epochs) + 1
        return {"partition": {"method": str(p.get("method")), "sizes": np.diff(g.offsets).tolist(), "info": p,
                              "metrics": self.parts.metrics() if self.comm.rank == 0 else None},
                "grid": {"algo": self.algo.name, "shape": list(self.grid.shape), "names": list(self.grid.names)},
                "predicted": self.predicted(len(epochs), evals)}

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
                "per_rank": [{"rank": r} | led.summary(table=False, seconds=cost.seconds(led, ab))
                             for r, led in enumerate(ledgers)]}


