"""Full-batch training on a process grid: graph → partition → distributed layout → model → report, written on
the public `spgnn.DistGraph` (the built-in trainer is one user of it).

The loss is the task's (`spgnn.tasks`) global mean over all training nodes, L = (1/|T|) Σ_{v∈T} ℓ_v (cross-entropy;
or BCE over the known binary targets): each rank sums ℓ over its own training rows and divides by the global |T|,
so summing parameter gradients over ranks gives exactly the serial gradient.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from .. import cost
from ..comm import launch
from ..comm.comm import Comm
from ..config import TrainConfig
from ..distgraph import DistGraph
from ..errors import SpgnnError
from ..graph.graph import Graph
from ..layers.stack import config_model
from ..memory import SavedTensorMeter
from ..tasks import get_task
from .loop import Run


class Trainer(Run):
    """One rank's share of a full-batch training run of the built-in model ``cfg.model``. It reads only its part of
    the graph: from a partitioned dataset folder (cfg.dataset), from the cache (a named or generated dataset,
    partitioned once by rank 0), or sliced from `graph` when the caller holds one in memory (a Graph or a PyG
    ``Data``; `parts` overriding cfg.partition)."""

    def __init__(self, cfg: TrainConfig, comm: Comm | None = None, graph: Graph | None = None, parts=None):
        if cfg.task != "auto" and not (task := get_task(cfg.task)).node:     # before any partitioning
            raise SpgnnError(f"spgnn.Trainer trains node tasks, not --task {cfg.task}: train it with "
                             f"spgnn.{task.trainer().__name__}")
        self.g = DistGraph(comm, cfg.validate(), graph=graph, parts=parts,
                           model=lambda f, c: config_model(cfg, f, c))
        self.task = self.g.task
        self.cfg, self.comm, self.info, self.parts, self.compared = self.g.cfg, self.g.comm, self.g.info, \
            self.g.parts, self.g.compared
        self.grid, self.algo = self.g.grid, self.g.algo
        self.build_model(self.info.num_features, self.g.num_outputs)
        self.model = self.g.prepare(self.model)
        self.costs = None       # the model's costs and block statistics for the prediction, on rank 0
        try:                    # on every rank, so that a malformed declaration stops them all
            model = cost.ModelCost.of(self.model, self.g.precompute)
        except cost.Undeclared:     # a layer that declares no cost: no prediction in the report
            model = None
        if self.comm.rank == 0 and model is not None and model.modelled_on(type(self.algo)):  # nor where the algorithm
            self.costs = model, {a: self.parts.stats(a) for a in model.adjacencies}     # states none
        self.meter = SavedTensorMeter()

    x = property(lambda self: self.g.x, doc="This rank's block of the input features (`DistGraph.x`).")
    y = property(lambda self: self.g.y, doc="Its rows' labels.")
    node_ids = property(lambda self: self.g.node_ids, doc="Its rows' original ids.")
    masks = property(lambda self: self.g.masks, doc="Its rows' split masks (train, val, test).")
    counts = property(lambda self: self.g.counts, doc="The global size of each split.")

    def graph_bytes(self) -> int:
        """Bytes of the graph this rank holds (`DistGraph.graph_bytes`)."""
        return self.g.graph_bytes()

    def logits(self, epoch: int = 0) -> torch.Tensor:
        return self.model(self.g, self.g.x, self.g.node_ids, epoch)

    def forward_backward(self, epoch: int):
        """Forward with dropout, backward of the global mean loss, gradients summed over ranks.
        Returns (the global mean training loss, this rank's logits)."""
        self.model.train()
        self.opt.zero_grad()
        with self.comm.phase("forward"), self.meter.hooks():
            logits = self.logits(epoch)
            loss = self.g.loss(logits, "train")
        loss.backward()
        with self.comm.phase("optimizer"):
            self.g.sync_gradients(self.model)
        return loss.detach(), logits.detach()

    def step(self, epoch: int) -> float:
        """One forward, backward and Adam step; returns the global mean training loss."""
        loss, _ = self.forward_backward(epoch)
        with self.comm.phase("optimizer"):
            self.opt.step()
        return float(loss)

    def epoch(self, epoch: int) -> float:
        """A full-batch epoch is one `step`."""
        return self.step(epoch)

    @torch.no_grad()
    def evaluate(self) -> dict:
        """The task's global figure (accuracy, ROC-AUC) on the train, validation and test nodes (no dropout)."""
        self.model.eval()
        with self.comm.phase("eval"):
            return self.g.evaluate(self.logits())

    @torch.no_grad()
    def predict(self, gather: bool = False):
        """Logits (no dropout) of this rank's rows: (original node ids, the columns it holds, n_p×|columns|).
        `gather`: the n×outputs logits of every node in original order, assembled on every rank
        (`DistGraph.gather`: O(n·classes) a rank, for graphs that allow it)."""
        self.model.eval()
        with self.comm.phase("eval"):
            logits = self.logits()
            if gather:
                return self.g.gather(logits, self.g.num_outputs)
            return self.g.node_ids.numpy(), self.g.columns(self.g.num_outputs), logits.cpu().numpy()

    def rank_report(self) -> dict:
        mine = super().rank_report()
        mine["memory"] |= {"graph_bytes": self.graph_bytes(), "kept_bytes": self.g.kept_bytes(),
                           "saved_for_backward_bytes": self.meter.peak_bytes}
        return mine

    def graph_report(self) -> dict:
        return super().graph_report() | {"symmetric": self.info.symmetric}

    def run_report(self, everyone, epochs) -> dict:
        g, p = self.info, self.parts.partition_info
        evals = sum(f"val_{self.task.metric}" in e for e in epochs) + 1       # and the final one
        return {"partition": {"method": str(p.get("method")), "sizes": np.diff(g.offsets).tolist(), "info": p,
                              "metrics": self.parts.metrics() if self.comm.rank == 0 else None},
                "grid": {"algo": self.algo.name, "shape": list(self.grid.shape), "names": list(self.grid.names)},
                "predicted": self.predicted(len(epochs), evals)}

    def predicted(self, epochs: int, evals: int) -> dict | None:
        """The cost model's figures for this run (setup, `epochs` steps, `evals` evaluations), to set beside the
        measured `comm`, `median_epoch_s` and `memory` (a step's seconds per phase, slowest rank, beside rank 0's
        measured communication; the epoch's; each rank's peak memory) (on rank 0, for multiclass runs of models whose
        layers declare their costs and algorithms with a cost model; else None)."""
        if self.costs is None or self.task.name != "multiclass":     # the model predicts the multiclass run's bytes
            return None
        model, stats = self.costs
        ab = cost.load_calibration(self.cfg.calibration) if self.cfg.calibration else None
        ledgers = [cost.epoch_ledger(type(self.algo), stats, self.grid.shape, r, model, epochs, evals)
                   for r in range(self.comm.world_size)]
        cls, shape = type(self.algo), self.grid.shape
        rates = replace(cost.load_rates(self.cfg.calibration), threads=torch.get_num_threads())     # as it ran
        overlap, local = self.algo.hides_comm, launch.detect().local_world_size
        time = cost.epoch_seconds(cls, stats, shape, model, ab, rates, overlap, ranks_per_node=local)
        per = {"eval": max(evals, 1)}                  # rank 0's measured communication a step (an evaluation)
        measured = {ph: self.comm.ledger.total("seconds", phase=ph) / per.get(ph, max(epochs, 1)) for ph in cost.PHASES}
        return {"alpha_beta": self.cfg.calibration or "default: gloo on 2 cores",
                "auto_compared": self.compared,
                "epoch_s": time["epoch_s"], "eval_s": time["eval_s"], "phases": time["phases"],
                "measured_comm_s_rank0": measured,
                "memory_per_rank": [cost.memory_bytes(cls, stats, shape, r, model, rates, overlap)
                                    for r in range(self.comm.world_size)],
                "per_rank": [{"rank": r} | led.summary(table=False,
                                                       seconds=cost.comm_seconds(led, shape, ab, rates, local))
                             for r, led in enumerate(ledgers)]}
