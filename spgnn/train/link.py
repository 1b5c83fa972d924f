"""Full-graph link prediction on a process grid (``--task link``, see `spgnn.tasks.link`): the encoder the layer
registry builds (``--model``, output width ``--embedding``, else ``--hidden``) on the message-passing graph, a score
per pair, the mean binary cross-entropy over the training positives and as many negatives, and ROC-AUC and average
precision; on an OGB link folder (`spgnn.graph.ogbl`) also OGB's figure of its validation and test pairs, Hits@K or
MRR (`spgnn.metrics.hits_at_k`, `spgnn.metrics.mrr`), the one that picks the best epoch.

    L = −(1/2|T|) Σ_{(u,v)∈T} [log σ(s(u,v)) + log(1 − σ(s(u,w_uv)))],   s(u,v) = z_u·z_v  or  MLP(z_u ⊙ z_v)

Each rank scores the pairs of its own rows; summing parameter gradients over ranks gives the serial gradient.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..comm import autograd as autograd_comm
from ..comm.agree import agree, on_rank0
from ..comm.comm import Comm
from ..comm.halo import Halo
from ..cost import ModelCost
from ..distgraph import DistGraph
from ..errors import SpgnnError
from ..graph.ogbl import FINGERPRINT, fingerprint, ogbl_folder, read_held_out
from ..graph.pyg import given_graph
from ..layers.registry import Layer
from ..layers.stack import config_model
from ..memory import SavedTensorMeter
from ..metrics import hits_at_k, mrr, ranking
from ..plan import open_parts
from ..sparse import gather
from ..tasks.link import EdgeSplit, LinkShare, node_order, train_edges
from ..tasks.registry import SPLITS, get_task
from .loop import Run
from .optim import Adam


class LinkModel(nn.Module):
    """The encoder (node embeddings z, `width` columns) and the decoder: none for ``dot`` (s = z_u·z_v), a
    two-layer MLP on z_u ⊙ z_v for ``mlp``."""

    def __init__(self, encoder: nn.Module, width: int, decoder: str = "dot"):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        if decoder == "mlp":
            self.mlp = nn.ModuleList([nn.Linear(width, width), nn.Linear(width, 1)])

    def score(self, g, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        """s(u, v) of each pair from this rank's columns of z_u and z_v (on 2D/3D the dot's partial sum)."""
        if self.decoder == "dot":
            return (zu * zv).sum(1)
        first, last = self.mlp
        h = torch.relu(g.linear(zu * zv, first.weight.t(), first.bias))
        return g.linear(h, last.weight.t(), last.bias).squeeze(1)

    def load_state_dict(self, state, *args, **kwargs):
        theirs = "mlp" if any(k.startswith("mlp.") for k in state) else "dot"
        if theirs != self.decoder:
            raise SpgnnError(f"the checkpoint is of --decoder {theirs}, this run's is {self.decoder}: resume with "
                             f"--decoder {theirs}")
        return super().load_state_dict(state, *args, **kwargs)


class LinkTrainer(Run):
    """One rank's share of a link-prediction run (see the module docstring): the graph as `spgnn.Trainer` takes
    it (cfg.dataset, or `graph` in memory with `parts`); the link task's options in cfg: ``decoder`` ("dot" or
    "mlp"), ``val_edges`` and ``test_edges`` (the fractions held out; refused on an OGB link folder, whose split
    is its own), ``embedding`` (z's width, 0: ``hidden``), ``ogb_split`` (the OGB link folder whose split the run
    takes: that of a partitioned --dataset or of the `graph` given)."""

    task = get_task("link")

    def __init__(self, cfg, comm=None, graph=None, parts=None):
        cfg = replace(cfg, task="link").validate()         # the link options together too (`Link.check_options`)
        comm = comm if comm is not None else Comm()         # (None: one process)
        folder = ogbl_folder(cfg.ogb_split) if cfg.ogb_split else \
            ogbl_folder(cfg.dataset) if graph is None and parts is None else None
        given = agree(comm, lambda: read_held_out(*folder)) if folder else None     # its own pairs: LinkShare
        self.split = EdgeSplit(0.0, 0.0, cfg.seed) if given else EdgeSplit(cfg.val_edges, cfg.test_edges,
                                                                            cfg.seed).check()
        decoder, width = cfg.decoder, cfg.embedding or cfg.hidden
        graph = given_graph(graph, cfg)

        def costs_of(info):     # what --algo auto weighs: the encoder, on layouts of whole rows for the MLP decoder
            costs = ModelCost.of_config(cfg, info.num_features, width)
            return replace(costs, needs=costs.needs | {"whole_rows"}) if decoder == "mlp" else costs

        cfg, opened, _, _ = open_parts(cfg, comm, graph, parts, costs_of)
        perm = node_order(opened)
        source = getattr(opened.info, "source", "")         # "" for a folder that does not say (written before)
        if not given and source.startswith("ogbl:"):        # (a hashed split of it held out training edges)
            raise SpgnnError(f"--task link: dataset {opened.info.name!r} is the graph of an OGB link folder (its "
                             "training edges), judged on the folder's own split: give --ogb-split FOLDER, the OGB "
                             "folder it was made from")
        made_from = source if source.startswith(FINGERPRINT) else ""     # nor an older kind of digest
        if given and (given.n != opened.info.n or made_from and made_from != on_rank0(comm, lambda: fingerprint(
                folder[0]))):
            raise SpgnnError(f"--ogb-split {cfg.ogb_split}: its graph is not --dataset {cfg.dataset}'s ({given.n} "
                             f"against {opened.info.n} nodes{'' if given.n != opened.info.n else ', other edges'}): "
                             "give the partitioned folder of that OGB folder's graph")
        torch.manual_seed(cfg.seed)
        encoder = config_model(cfg, opened.info.num_features, width)
        for layer in encoder.modules():         # an OGB folder's graph is its training edges: nothing to hold out
            if isinstance(layer, Layer) and layer.adjacency is not None and not given:
                layer.adjacency = train_edges(layer.adjacency, self.split, perm)
        self.model = LinkModel(encoder, width, decoder)
        self.opt = Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        if graph is not None:
            self.g = DistGraph(comm, cfg, graph=graph, parts=opened.partition.parts, model=encoder)
        else:
            self.g = DistGraph(comm, cfg, dataset=str(opened.path), model=encoder)
        self.cfg, self.comm, self.parts, self.decoder = self.g.cfg, comm, self.g.parts, decoder
        self.model = self.g.prepare(self.model)
        share = self.g.parts.share(self.g.algo.part_of(self.g.grid.shape, self.g.grid.coord))
        share.drop_features()
        self.edges = agree(comm, lambda: LinkShare(share, perm, self.split, given, cfg.self_pairs == "on"))
        self.given = given and replace(given, pairs={})       # this rank's pairs are in self.edges.held
        columns = self.g.algo.column_group()
        self.columns = columns if columns is not None and columns.size > 1 else None
        self.counts = {s: int(c) for s, c in zip(SPLITS, self._sum([c * self.counting for c in self.edges.counted()]))}
        empty = [s for s in SPLITS if not self.counts[s]]
        if empty:                       # (larger fractions held out leave the training split fewer edges)
            fix = "lower --val-edges and --test-edges, or " if empty == ["train"] else "" if "train" in empty else \
                f"raise {' and '.join(f'--{s}-edges' for s in empty)}, or "
            so = "nothing trains" if "train" in empty else "its ROC-AUC is undefined"
            raise SpgnnError(f"--task link: the {' and '.join(empty)} split of {self.g.info.name!r} holds no edge "
                             f"({self.counts}), so {so}: {fix}use a graph with more edges")
        self.info = replace(self.g.info, counts={f"{s}_edges": c for s, c in self.counts.items()})
        self.positives = self.counts["train"] + self.g.info.n * self.edges.self_pairs   # training positives
        self.meter, self._eval = SavedTensorMeter(), None

    def training(self) -> dict:
        """Full-batch, with whether pairs of a node with itself train (the objective) and z's width."""
        return {"training": "full-batch", "self_pairs": self.cfg.self_pairs,
                "embedding": self.cfg.embedding or self.cfg.hidden}

    @property
    def metric(self) -> str:
        """The figure that picks the best epoch: "rocauc", or an OGB folder's "hits@K" or "mrr"."""
        return self.given.label if self.given else self.task.metric

    # -- pieces ------------------------------------------------------------------------------------------
    @property
    def counting(self) -> bool:
        """Whether this rank's pairs count in the loss and the metrics (one rank of a grid row on 2D/3D)."""
        return self.columns is None or self.columns.ranks.index(self.comm.rank) == 0

    def _sum(self, values) -> list[float]:
        """Σ over the rows group of each value (phase edges)."""
        with self.comm.phase("edges"):
            return self.g.all_sum(values)

    def embeddings(self, epoch: int = 0) -> torch.Tensor:
        """z: this rank's rows (and columns) of the encoder's output."""
        return self.model.encoder(self.g, self.g.x, self.g.node_ids, epoch)

    def halo(self, dst: np.ndarray) -> Halo | None:
        """The `Halo` of the remote rows pairs ending at `dst` (new ids) need (phase edges; None on one part)."""
        group = self.g.grid.group(type(self.g.algo).parts_group)
        if group.size == 1:
            return None
        with self.comm.phase("edges"):
            return Halo(dst, self.g.info.offsets, self.edges.part, self.comm, group)

    def endpoints(self, z: torch.Tensor, dst: np.ndarray, halo: Halo | None) -> torch.Tensor:
        """z_v of each pair's end v: local rows, or remote ones fetched from their owners (differentiable; the
        exchanges in phase edges, forward and backward)."""
        first = self.edges.first
        if halo is None:
            return gather(z, dst - first)

        def fetch(t):
            with self.comm.phase("edges"):
                return torch.cat([t, halo.gather(t)])

        def give_back(t):
            with self.comm.phase("edges"):
                return halo.scatter_add(t[z.shape[0]:], t[:z.shape[0]].clone())
        return gather(autograd_comm.linear_map(z, self.comm, fetch, give_back), halo.local_columns(dst))

    def scores(self, z: torch.Tensor, src: np.ndarray, dst: np.ndarray, halo: Halo | None) -> torch.Tensor:
        """s(u, v) of the pairs (src local rows, dst new ids), summed along the grid row on 2D/3D."""
        s = self.model.score(self.g, gather(z, src), self.endpoints(z, dst, halo))
        if self.columns is None:
            return s

        def total(t):
            with self.comm.phase("edges"):
                return self.comm.all_reduce(t.clone(), self.columns)
        return autograd_comm.linear_map(s, self.comm, total, total)

    def forward(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(the global mean training loss, its gradient this rank's share; z) at `epoch`, with dropout."""
        self.model.train()
        with self.comm.phase("forward"), self.meter.hooks():
            z = self.embeddings(epoch)
        src, dst, pos = self.edges.training(epoch)
        s = self.scores(z, src, dst, self.halo(dst))
        y = torch.cat([torch.ones(pos), torch.zeros(src.size - pos)]).to(s)
        local = F.binary_cross_entropy_with_logits(s, y, reduction="sum") * (self.counting / (2 * self.positives))
        with self.comm.phase("edges"):
            return self.g.globally(local), z

    def epoch(self, epoch: int) -> float:
        """One forward, backward and Adam step; returns the global mean training loss."""
        self.opt.zero_grad()
        loss, _ = self.forward(epoch)
        loss.backward()
        with self.comm.phase("optimizer"):
            self.g.sync_gradients(self.model)
            self.opt.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self) -> dict:
        """{"<split>_rocauc", "<split>_ap"} of each split's positives against its negatives (one fixed hashed one
        each, or an OGB folder's), and for an OGB folder {"val_<metric>", "test_<metric>"} (Hits@K or MRR)."""
        self.model.eval()
        with self.comm.phase("eval"):
            z = self.embeddings()
        if self._eval is None:
            src, dst, label, code = self.edges.evaluation()
            self._eval = src, dst, torch.as_tensor(label), torch.as_tensor(code), self.halo(dst)
        src, dst, label, code, halo = self._eval
        s = self.scores(z, src, dst, halo)
        if not self.counting:
            s, label, code = s[:0], label[:0], code[:0]
        with self.comm.phase("eval"):
            figures = ranking(s, label, self.comm, self.g.rows_group(), code, len(SPLITS))
            out = {f"{split}_{m}": figures[m][k] for m in ("rocauc", "ap") for k, split in enumerate(SPLITS)}
            if self.given:
                out |= self.ogb_figures(s.detach().cpu().numpy(), label.numpy(), code.numpy())
        return out

    def ogb_figures(self, s: np.ndarray, label: np.ndarray, code: np.ndarray) -> dict:
        """{"val_<metric>", "test_<metric>"}: OGB's Hits@K or MRR of the folder's pairs, from their scores `s` (none for
        a ROC-AUC folder, ogbl-vessel: `ranking`'s val and test ROC-AUC are of the file's pairs already)."""
        out, given, group = {}, self.given, self.g.rows_group()
        if given.metric == "rocauc":
            return out
        for k, split in enumerate(SPLITS[1:], 1):
            pos, neg = s[(code == k) & (label == 1)], s[(code == k) & (label == 0)]
            out[f"{split}_{given.label}"] = hits_at_k(pos, neg, given.k, self.comm, group) \
                if given.metric == "hits" else mrr(pos, neg.reshape(-1, given.k), self.comm, group)
        return out

    # -- the report --------------------------------------------------------------------------------------
    def rank_report(self) -> dict:
        mine = super().rank_report()
        mine["memory"] |= {"graph_bytes": self.g.graph_bytes(), "saved_for_backward_bytes": self.meter.peak_bytes,
                           "edge_bytes": self.edges_bytes()}
        return mine

    def edges_bytes(self) -> int:
        """Bytes of the link task's own arrays on this rank: node order and its inverse, its rows' ids, pairs,
        block-row keys, and the evaluation's pairs once made."""
        e = self.edges
        kept = [e.perm, e.inv, e.node_ids, e.offsets, e.src, e.dst, e.code, e.keys,
                *(b[k] for b in e.held for k in (0, 1))]
        kept += list(self._eval[:4]) if self._eval is not None else []
        return sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in kept)

    def graph_report(self) -> dict:
        return super().graph_report() | {"symmetric": self.g.info.symmetric, "edges": self.counts}

    def run_report(self, everyone, epochs) -> dict:
        given, label = self.given, {"rocauc": self.task.metric_label, "mrr": "MRR"}
        ogb = {"ogb": {"name": given.name, "split": given.kind, "metric": self.metric}} if given else {}
        return {"task": {"name": self.task.name, "metric": self.metric,
                         "label": label.get(self.metric, self.metric.capitalize()),
                         "higher_is_better": self.task.higher_is_better},
                "link": {"decoder": self.decoder, "val": self.split.val, "test": self.split.test} | ogb,
                "grid": {"algo": self.g.algo.name, "shape": list(self.g.grid.shape)}}


