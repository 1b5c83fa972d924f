"""`DistGraph`: a rank's share of a graph laid out for a distributed SpMM algorithm, and the operations a layer,
a loss and a training loop need on that layout, so that a user's own ``nn.Module`` and loop run on any layout.

Whatever the layout, a rank holds the rows ``node_ids`` (original ids) of the graph; on 2D/3D layouts only a block
of the columns of every n×f matrix (``columns(f)``), so that H·W is ``linear`` (the blocks' partial products
summed), a row-wise operation (log-softmax, the loss, the argmax, concatenation, slicing) communicates along the
grid row, and a row's loss is counted by the rank holding its label's column. Each operation here does that, or
refuses the layout with one line (attention on a layout without it, whole rows on 2D/3D); none is silently wrong.

    g = DistGraph(comm, dataset="cora", algo="2d", adjacency="gcn")      # every rank, collectively
    torch.manual_seed(0)
    model = MyModel(g.num_features, 64, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model = g.prepare(model, opt)          # same weights everywhere (checked); a step not summed refused
    for epoch in range(200):
        opt.zero_grad()
        loss = g.cross_entropy(model(g, g.x), "train")    # the global mean over the training nodes
        loss.backward()
        g.sync_gradients(model)                           # sum over the ranks that hold disjoint rows
        opt.step()

The loss's value is the global one on every rank; its gradient is this rank's share, so that the summed
parameter gradients are the single-process ones.
"""

from __future__ import annotations

import hashlib
import operator
import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

from . import hashing, progress, spmm
from .comm import autograd as autograd_comm
from .comm.agree import agree
from .comm.comm import Comm
from .comm.grid import ProcessGrid
from .config import TrainConfig
from .errors import SpgnnError
from .graph.adjacency import ADJACENCIES, Adjacency, get_adjacency
from .graph.graph import normalized_features
from .graph.pyg import given_graph
from .layers.registry import options as layer_options
from .plan import open_parts
from .spmm.base import check_attend
from .tasks import resolve as resolve_task
from .tasks.node import target_counts

SPLITS = ("train", "val", "test")


def _scalar(x) -> bool:
    """Whether `x` is a one-element tensor (a loss, a partial sum)."""
    return isinstance(x, torch.Tensor) and x.numel() == 1


def _described(x) -> str:
    """What `x` is, for a refusal: "a tensor of shape (…)" or its type's name."""
    return f"a tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def _registered(adjacency) -> str:
    """The registered name of `adjacency` (a name, or the instance registered under its name: another instance of
    that name would be laid out as the registered one)."""
    name = get_adjacency(adjacency).name
    if isinstance(adjacency, Adjacency) and ADJACENCIES.get(name) is not adjacency:
        raise SpgnnError(f"the adjacency {name!r} given is not the one registered under that name: register it "
                         "(spgnn.register_adjacency) under a name of its own, or pass the registered name")
    return name


# TrainConfig fields of the model, its training and the launch, which DistGraph never reads
TRAINING = frozenset({"layers", "hidden", "dropout", "lr", "weight_decay", "epochs", "batch_norm", "init",
                      "eval_every", "output", "checkpoint", "checkpoint_every", "resume", "timeout", "transport"})


def _refuse_unsummed(optimizer, args, kwargs) -> None:
    """Before any torch optimizer's step: SpgnnError where it would step a parameter of a prepared model whose
    gradient a backward added to since `DistGraph.sync_gradients` last summed it."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None and (name := getattr(p, "_spgnn_unsummed", None)):
                raise SpgnnError(f"the gradient of parameter {name!r} was not summed over the ranks: call "
                                 "g.sync_gradients(model) after loss.backward() and before optimizer.step()")


register_optimizer_step_pre_hook(_refuse_unsummed)


def _unprepared(t: torch.Tensor) -> str | None:
    """The shape of the first ``nn.Parameter`` the autograd graph of `t` reaches that no `DistGraph.prepare` saw
    (marked ``_spgnn_prepared``), else None: inputs that require a gradient (a saliency map) are no parameters."""
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        p = getattr(fn, "variable", None)
        if isinstance(p, torch.nn.Parameter) and not getattr(p, "_spgnn_prepared", False):
            return f"of shape {tuple(p.shape)}"
        stack.extend(f for f, _ in fn.next_functions)
    return None


def _loss_term(t, what: str, takes: str) -> None:
    """SpgnnError unless `t` is a one-element tensor whose gradient reaches only parameters a graph prepared (at
    P > 1 each rank would step on its own share of another's gradient)."""
    if not _scalar(t):
        raise SpgnnError(f"{what} takes {takes}, a one-element tensor, got {_described(t)}: sum it first")
    if t.requires_grad and (name := _unprepared(t)):
        raise SpgnnError(f"a loss to train a parameter {name} that no DistGraph prepared, so nothing sums its "
                         "gradient over the ranks: call model = g.prepare(model, opt) before training, and "
                         "g.sync_gradients(model) after each backward")


ROW_WISE = (torch.nn.Linear, torch.nn.Bilinear, torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.Softmax,
            torch.nn.LogSoftmax)    # torch modules that take each row whole


def _guard(module: torch.nn.Module, why: str | None) -> None:
    """Have torch `module` raise SpgnnError(`why`) when it runs (batch norm and dropout: in training), where `why`
    is not None; the verdict of the graph that prepared it last holds. Refused when used, not when present: a
    module that only holds parameters (an nn.Linear multiplied by `g.linear`) computes nothing wrong."""
    module._spgnn_refusal = why
    if why is not None and not getattr(module, "_spgnn_guarded", False):
        module.register_forward_pre_hook(_refuse)
        module._spgnn_guarded = True


def _refuse(module: torch.nn.Module, args) -> None:
    if module._spgnn_refusal and (module.training or isinstance(module, ROW_WISE)):
        raise SpgnnError(module._spgnn_refusal)


class DistGraph:
    """This rank's share of a graph on the layout of ``cfg.algo`` (every rank constructs it together).

    The graph comes as `TrainConfig` says (a partitioned folder, a named or generated dataset through the partition
    cache) or from `graph` in memory (a `spgnn.Graph` or PyG ``Data``, `parts` overriding cfg.partition); keyword
    `options` override cfg's fields (``DistGraph(comm, dataset="cora", algo="2d")``). `adjacency`: the adjacencies
    the model multiplies by (a name, an `Adjacency`, or a list; default: those of `model`, else "gcn"), each laid
    out at set-up. `model`: an ``nn.Module`` or a function (features, outputs) → module, whose layers' declared
    costs ``algo="auto"`` ranks the layouts by (outputs: what the task needs, `num_outputs`). ``cfg.task`` (default:
    found from the labels) gives `loss` and `evaluate` (`spgnn.tasks`)."""

    def __init__(self, comm: Comm | None = None, cfg: TrainConfig | None = None, *, graph=None, parts=None,
                 adjacency=None, model=None, **options):
        if unread := sorted(set(options) & (TRAINING | set(layer_options()))):
            raise SpgnnError(f"DistGraph does not read {', '.join(unread)}: options of the model, its training or the "
                             "launch; give them to TrainConfig and spgnn.Trainer, or to your own model and loop")
        if cfg is not None and not isinstance(cfg, TrainConfig):
            raise SpgnnError(f"DistGraph's second argument is a TrainConfig, not {type(cfg).__name__} {cfg!r}: name "
                             "the graph as a keyword, DistGraph(comm, dataset='cora')")
        self.comm = comm = comm if comm is not None else Comm(0, 1)
        cfg = TrainConfig(**options) if cfg is None else replace(cfg, **options)
        self._model, self._costs, self._loss_checked = model, None, False
        names = self._adjacencies(adjacency) if adjacency is not None else None      # checked before any work
        for what, given in (("algo='auto' ranks the layouts", cfg.algo == "auto"),
                            ("memory_per_rank predicts each rank's peak memory", cfg.memory_per_rank is not None)):
            if given and model is None:
                raise SpgnnError(f"{what} by the model's declared costs: pass DistGraph(..., model=your model, or a "
                                 "function (features, outputs) → model)")
        self.cfg = cfg.validate()                  # its task builds the model whose costs --algo auto compares
        graph = given_graph(graph, cfg)
        self.cfg, self.parts, shape, self.compared = open_parts(self.cfg, comm, graph, parts,
                                                                self.model_cost if model is not None else None)
        cfg, self.info = self.cfg, self.parts.info
        self.task = resolve_task(cfg.task, self.info)
        names = names or self._adjacencies(None)
        cls = spmm.get(cfg.algo)
        self.grid = ProcessGrid(comm, shape, cls.grid_names, cfg.device, cls.planes())
        share = agree(comm, lambda: self.parts.share(cls.part_of(shape, self.grid.coord)))
        where = f"dataset {self.info.name!r}"          # (normalised in place, before any work is spent)
        agree(comm, lambda: normalized_features(share.x, cfg.feature_norm, where, out=share.x))
        with progress.stage("set-up exchanges", f"({cfg.algo}: {', '.join(names)})"):
            self.layouts = {a: cls.from_share(share, a, comm, self.grid, cfg.device, **cls.constructor_options(cfg))
                            for a in names}
        self.algo = self.layouts[names[0]]
        x = share.x
        share.drop_features()
        self.x = self.algo.scatter(x)
        del x
        self.y = torch.as_tensor(share.y).to(cfg.device)
        self.node_ids = torch.as_tensor(share.node_ids)
        self.masks = {k: torch.as_tensor(share.masks[k]).to(cfg.device) for k in SPLITS}
        self.counts = dict(self.info.counts)
        self._prepared = {}                         # id of a parameter `prepare` saw → its name
        self._summed, self._added = {}, {}          # id → (gradient, its version) as summed; → backwards added since
        self._backward = {}             # id of a parameter → (its gradient, that one's version) as a backward left it
        self._checkpoints = {}          # folders this graph wrote or loaded a checkpoint in: that file's stamp
        self.precompute = cfg.precompute == "on"     # keep the products of the features (`kept`)
        self._kept, self._kept_x = {}, None    # (adjacency, id of H) → (H, Â·H, its version); (x, its version) then

    # -- what it holds ----------------------------------------------------------------------------------
    @property
    def num_features(self) -> int:
        return self.info.num_features

    @property
    def num_classes(self) -> int:
        return self.info.num_classes

    @property
    def num_outputs(self) -> int:
        """The width of the model's output the task needs (classes, or binary targets)."""
        return self.task.out_dim(self.info)

    @property
    def n(self) -> int:
        return self.info.n

    @property
    def device(self) -> str:
        return self.cfg.device

    def graph_bytes(self) -> int:
        """Bytes of the graph this rank holds: each layout's blocks of A and halo plans, its feature rows (and
        columns), labels, masks and node ids."""
        kept = [self.x, self.y, self.node_ids, *self.masks.values()]
        return sum(a.graph_bytes() for a in self.layouts.values()) + sum(t.numel() * t.element_size() for t in kept)

    def _built(self, info=None) -> torch.nn.Module:
        """The model given at construction, or one built by the function given (torch's random state left as it
        was), not kept: its costs and adjacencies are (`model_cost`, `_adjacencies`), and a second copy of the
        trained model's weights would be held for nothing."""
        if isinstance(self._model, torch.nn.Module):
            return self._model
        info = info or self.info
        with torch.random.fork_rng(devices=[]):     # the CPU's state: CUDA's would be initialised on every GPU
            return self._model(info.num_features, resolve_task(self.cfg.task, info).out_dim(info))

    def model_cost(self, info=None):
        """The `spgnn.cost.ModelCost` of the model given at construction."""
        if self._costs is None:
            from .cost import ModelCost

            self._costs = ModelCost.of(self._built(info), self.cfg.precompute == "on")
        return self._costs

    def _adjacencies(self, adjacency) -> list[str]:
        if adjacency is None and self._model is not None:
            from .layers.registry import adjacencies_of

            adjacency = adjacencies_of(self._built()) or None     # a model of dense layers only: the default
        if adjacency is None:
            adjacency = "gcn"
        names = [_registered(a) for a in ([adjacency] if isinstance(adjacency, str) or
                                          not hasattr(adjacency, "__iter__") else adjacency)]
        if not names:
            raise SpgnnError("DistGraph needs at least one adjacency to lay out: pass adjacency='gcn' (or another)")
        return list(dict.fromkeys(names))

    # -- the layout interface layers are written against -------------------------------------------------
    def layout(self, adjacency=None):
        """The algorithm object that multiplies by `adjacency` (default: the first)."""
        if adjacency is None:
            return self.algo
        name = _registered(adjacency)
        if name not in self.layouts:
            raise SpgnnError(f"adjacency {name!r} was not laid out: build the DistGraph with adjacency="
                             f"{[*self.layouts, name]!r}")
        return self.layouts[name]

    def spmm(self, h: torch.Tensor, adjacency="gcn") -> torch.Tensor:
        """Z = Â·H for this rank's rows (and columns), Â the `adjacency`; differentiable. Where `kept` (H is the
        graph's features `x`, or such a product, and `precompute` is on), the product is made at the first call and
        kept: later calls return the same tensor, with no work and no communication."""
        self._matrix(h, "spmm")
        if not self.kept(h, adjacency):
            return self.layout(adjacency).spmm(h)
        key = (get_adjacency(adjacency).name, id(h))
        if key not in self._kept:
            self._kept_x = (self.x, self.x._version)
            z = self.layout(adjacency).spmm(h)
            self._kept[key] = (h, z, z._version)          # h held: its id is not reused while the product is kept
        _, z, version = self._kept[key]
        if z._version != version:
            raise SpgnnError(f"the product of the features that DistGraph keeps (adjacency {key[0]!r}) was changed "
                             "in place: change a copy (g.spmm(x, ...).clone()), or keep nothing with "
                             "precompute='off' (--precompute off)")
        return z

    def kept(self, h: torch.Tensor, adjacency="gcn") -> bool:
        """Whether ``spmm(h, adjacency)`` returns a product made once and kept: with `precompute` on, for H this
        rank's block of the graph's features `x` (or a product of them kept: Â·(Â·X) too), which needs no gradient.
        A layer can then aggregate first at no cost after the first step (GraphSAGE and GCN on their first layer:
        (Â·X)·W instead of Â·(X·W), the product's forward and backward gone from every step). `prepare` turns it
        off for a model that drops out its input in training; `x` replaced or changed in place drops what was
        kept."""
        if not self.precompute or h.requires_grad:
            return False
        if self._kept and (self._kept_x[0] is not self.x or self._kept_x[1] != self.x._version):
            self._kept.clear()                  # x replaced or changed in place: what was kept is stale
        return h is self.x or any(h is z for _, z, _ in self._kept.values())

    def kept_bytes(self) -> int:
        """Bytes of the products of the features this rank keeps (`kept`)."""
        return sum(z.numel() * z.element_size() for _, z, _ in self._kept.values())

    def attend(self, v, s_src, s_dst, slope: float, dropout: float = 0.0, key: int = 0, adjacency="self-loops"):
        """Attention over the pattern of `adjacency` (`spgnn.spmm.DistSpMM.attend`); refused by layouts without it."""
        self.algo.require("attention", "attention")
        check_attend(v, s_src, s_dst, slope, dropout, len(self.node_ids))
        return self.layout(adjacency).attend(v, s_src, s_dst, slope, dropout, key)

    def linear(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        """H·W (+ b), W f_in×f_out replicated on every rank (H: any rows, as this rank holds its columns)."""
        self._matrix(h, "linear", rows=None)
        cols = self.columns(w.shape[0]) if isinstance(w, torch.Tensor) and w.dim() == 2 else None
        if cols is None or cols.stop - cols.start != h.shape[1]:
            held = "" if self.whole_rows or cols is None else \
                f" (this rank holds {h.shape[1]} of H's columns, and would take W's rows {cols.start}:{cols.stop})"
            raise SpgnnError(f"linear: W of shape {tuple(getattr(w, 'shape', ()))} needs H's columns as its rows"
                             f"{held}: give W (H's width)×(outputs), the whole of it on every rank")
        if b is not None and (not isinstance(b, torch.Tensor) or b.dim() > 2 or b.dim() and b.shape[-1] != w.shape[1]
                              or b.dim() == 2 and b.shape[0] not in (1, h.shape[0])):
            raise SpgnnError(f"linear: b, {_described(b)}, does not fit W of shape {tuple(w.shape)}: give b of W's "
                             f"{w.shape[1]} columns (a bias, the whole of it on every rank), or such a row for each "
                             "row of H")
        return self.algo.linear(h, w, b)

    def _matrix(self, h, what: str, rows: int | None = -1) -> None:
        """SpgnnError unless `h` is a matrix (a 2-D tensor) of `rows` rows (-1: this rank's, n_p; None: any)."""
        rows = len(self.node_ids) if rows == -1 else rows
        if not isinstance(h, torch.Tensor) or h.dim() != 2 or rows not in (None, h.shape[0]):
            got = f"shape {tuple(h.shape)}" if isinstance(h, torch.Tensor) else type(h).__name__
            held = "a matrix (a 2-D tensor)" if rows is None else f"this rank's rows of an n×f matrix, a tensor of " \
                f"{rows} rows"
            raise SpgnnError(f"{what} takes {held}, got {got}"
                             + ("" if isinstance(h, torch.Tensor) else " (torch.as_tensor makes one)"))

    def columns(self, f: int) -> slice:
        """The columns of an n×f matrix this rank holds."""
        return self.algo.columns(f)

    def _logits(self, logits: torch.Tensor, f: int, rows: bool = True) -> torch.Tensor:
        """`logits`, checked to be this rank's columns of an n×f matrix (on 2D/3D a wrong width would be cut into
        other blocks than the labels' and change the answer with the layout), and, where `rows`, of its rows n_p
        (which a mask selects)."""
        cols = self.columns(f)
        if not isinstance(logits, torch.Tensor):
            raise SpgnnError(f"logits must be a tensor, got {type(logits).__name__} (torch.as_tensor makes one)")
        if logits.dim() != 2 or logits.shape[1] != cols.stop - cols.start:
            raise SpgnnError(f"logits of shape {tuple(logits.shape)}: this rank holds columns {cols.start}:"
                             f"{cols.stop} of the {f} the task has (a model's last layer must give {f} outputs: "
                             "DistGraph.num_outputs)")
        if rows and logits.shape[0] != len(self.node_ids):
            raise SpgnnError(f"logits of shape {tuple(logits.shape)}: this rank holds {len(self.node_ids)} rows, and a "
                             "loss or a figure takes a row of logits for each (the mask argument selects the rows "
                             "counted: pass every row's logits)")
        return logits

    def cols(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's columns of a per-column vector (a bias)."""
        return self.algo.cols(t)

    def scatter(self, x) -> torch.Tensor:
        """This rank's block of an n×f input given as its rows (n_p×f)."""
        return self.algo.scatter(x)

    def layer(self, i: int):
        """Context in which the collectives count as layer i's in the ledger."""
        return self.algo.layer(i)

    @property
    def own_rows(self) -> torch.Tensor:
        """Which of this rank's rows it counts in a global per-row sum (`all_sum`; a boolean tensor over its rows):
        every row where the ranks hold disjoint rows; on 2D/3D, where the ranks of a grid row hold the same rows,
        the rows of one rank of each grid row (sum a mask of your own as ``(mask & g.own_rows).sum()``)."""
        return self.algo.own_rows(len(self.node_ids)).to(self.device)

    def dropout(self, h: torch.Tensor, p: float, key: int, width: int | None = None) -> torch.Tensor:
        """H with each entry zeroed with probability `p` and the others scaled by 1/(1 − p), the mask a hash of
        (`key`, the row's node id, the column's global index): the same entries at every P and on every layout, not
        per rank as torch's dropout draws them. Give a fresh `key` (an int) to each layer at each step; none in
        evaluation. `width`: H's global column count (on 2D/3D found by one small sum along the grid row when not
        given)."""
        self._matrix(h, "dropout")
        if not 0.0 <= p < 1.0:
            raise SpgnnError(f"dropout: p must lie in [0, 1), got {p}")
        try:
            key = operator.index(key)           # an int, numpy's, or an integer tensor of one element
        except TypeError:
            raise SpgnnError(f"dropout: key is an int, a fresh one for each layer and step (such as the epoch), got "
                             f"{key!r}") from None
        first = self.columns(self._widths([h], None if width is None else [width])[0]).start
        return hashing.dropout(h, self.node_ids, p, key, first)

    def require(self, need: str, what: str) -> None:
        """Refuse with one line when the layout does not offer `need` ("whole_rows", "attention") to `what`."""
        self.algo.require(need, what)

    def rows_group(self):
        """The ranks whose rows (as `label_rows` counts them) cover every row once: where global sums add up."""
        return self.algo.rows_group()

    def grad_group(self):
        """The ranks over which parameter gradients are summed."""
        return self.algo.grad_group()

    @property
    def whole_rows(self) -> bool:
        return self.algo.whole_rows

    @property
    def attention(self) -> bool:
        return self.algo.attention

    # -- row-wise operations -----------------------------------------------------------------------------
    def log_softmax(self, h: torch.Tensor) -> torch.Tensor:
        """Row-wise log-softmax over all columns (the column blocks' log-sum-exps combined on 2D/3D)."""
        self._matrix(h, "log_softmax", rows=None)
        return self.algo.log_softmax(h)

    def _mask(self, mask) -> torch.Tensor:
        if isinstance(mask, str):
            if mask not in self.masks:
                raise SpgnnError(f"unknown mask {mask!r}: choose one of {', '.join(self.masks)} or pass a boolean "
                                 "tensor over this rank's rows")
            return self.masks[mask]
        if not isinstance(mask, torch.Tensor):          # a numpy array or a list of bools: as a tensor
            try:
                mask = torch.as_tensor(mask)
            except (TypeError, ValueError, RuntimeError):
                pass
        tensor = isinstance(mask, torch.Tensor)
        if not tensor or mask.dtype != torch.bool or mask.shape != self.y.shape[:1]:
            got = f"{mask.dtype} {tuple(mask.shape)}" if tensor else type(mask).__name__
            raise SpgnnError(f"a mask is a split's name ({', '.join(self.masks)}) or a boolean tensor of shape "
                             f"{tuple(self.y.shape[:1])} (this rank's rows), got {got}")
        return mask.to(self.y.device)

    def _splits(self, masks) -> tuple:
        """Split names (one, or several) as the split-keyed figures take them: their keys are "<split>_<figure>"."""
        masks = (masks,) if isinstance(masks, str) else tuple(masks)
        if not all(isinstance(k, str) for k in masks):
            raise SpgnnError(f"the figures of a split take split names ({', '.join(self.masks)}), not masks; for a "
                             "boolean mask of your own, compute the figure from predictions(), own_rows and all_sum()")
        return masks

    def _classes(self, what: str) -> None:
        if self.info.targets:
            raise SpgnnError(f"{what} is of class labels; dataset {self.info.name!r} has {self.info.targets} binary "
                             "targets per node: use binary_cross_entropy and roc_auc (the binary/multilabel task)")

    def _count(self, mask, m) -> int:
        return self.counts[mask] if isinstance(mask, str) else int(self.all_sum([float(m.sum())])[0])

    def cross_entropy(self, logits: torch.Tensor, mask="train") -> torch.Tensor:
        """(1/|M|) Σ_{v∈M} −log softmax(logits_v)[y_v] over the global rows of `mask` (a split name or a boolean
        tensor over this rank's rows): its value the global loss on every rank, its gradient this rank's share."""
        self._classes("cross_entropy")
        logits = self._logits(logits, self.num_classes)
        mine = self._mask(mask) & self.algo.label_rows(self.y, self.num_classes)
        first = self.columns(self.num_classes).start
        # row-wise: where a rank holds whole rows, of the rows counted only (2D/3D reduce every row along the grid row)
        lsm = self.log_softmax(logits[mine]) if self.whole_rows else self.log_softmax(logits)[mine]
        local = F.nll_loss(lsm, self.y[mine] - first, reduction="sum") / max(self._count(mask, mine), 1)
        return self.globally(local)

    def globally(self, local: torch.Tensor) -> torch.Tensor:
        """A scalar whose value is Σ over `rows_group` of each rank's `local` and whose gradient is this rank's
        `local`'s: a global loss from per-rank partial sums (one small all-reduce). A `local` whose gradient
        reaches a parameter that no graph prepared (`prepare`) is refused: at P > 1 each rank would step on its own
        share of that gradient."""
        _loss_term(local, "globally", "this rank's partial sum")
        (total,) = self.all_sum([local.item()])
        return (local - local.detach()) + total     # the same value on every rank, whatever its own `local`

    def replicated(self, term: torch.Tensor) -> torch.Tensor:
        """A scalar that every rank computes whole and alike (a regulariser λ·‖W‖² of the replicated parameters), to
        add to a loss: its value `term`'s, its gradient term's / k on each of the k ranks `sync_gradients` sums over,
        so that the sum counts it once (added as it is, it would count k times, and the steps change with P)."""
        _loss_term(term, "replicated", "a term every rank computes alike")
        k = self.grad_group().size
        return term if k == 1 else term.detach() + (term - term.detach()) / k

    def targets(self) -> torch.Tensor:
        """This rank's columns of its rows' binary targets (n_p×|columns(t)|; 0, 1 or NaN where unknown): the
        labels' columns, or for class ids of two classes class 1 as the one target."""
        if not self.info.targets and self.num_classes != 2:
            raise SpgnnError(f"dataset {self.info.name!r} has {self.num_classes} classes, not binary targets (nor two "
                             "classes): its loss is cross_entropy (the multiclass task)")
        y = self.y if self.info.targets else self.y.to(torch.float32).unsqueeze(1)
        return y[:, self.columns(y.shape[1])]

    def binary_cross_entropy(self, logits: torch.Tensor, mask="train") -> torch.Tensor:
        """(1/|K|) Σ_{(v,k)∈K} BCE-with-logits(logits_vk, y_vk) over the known targets K of the global rows of
        `mask` (a split name or a boolean tensor over this rank's rows): its value the global loss on every rank,
        its gradient this rank's share (each entry counted by the rank that holds its column)."""
        y, m = self.targets(), self._mask(mask)
        y, out = y[m], self._logits(logits, self.info.targets or 1)[m]
        known = ~torch.isnan(y)
        count = sum(map(sum, target_counts(self.info, mask))) if isinstance(mask, str) else self._count(mask, known)
        local = F.binary_cross_entropy_with_logits(out[known], y[known], reduction="sum") / max(count, 1)
        return self.globally(local)

    def roc_auc(self, logits: torch.Tensor, masks=SPLITS) -> dict:
        """{"<mask>_rocauc": ROC-AUC} for each split in `masks`: per target over the split's known targets, exact
        over all ranks (`spgnn.metrics`, one distributed sort for every split and target), averaged over the targets
        with both classes in the split; NaN where none has."""
        from .metrics import roc_auc

        y, cols, t = self.targets(), self.columns(self.info.targets or 1), self.info.targets or 1
        logits, masks = self._logits(logits, t), self._splits(masks)
        scores, labels, which = [], [], []
        for i, k in enumerate(masks):
            m = self._mask(k)
            known = ~torch.isnan(y[m])
            ids = i * t + torch.arange(cols.start, cols.stop, device=y.device).expand_as(known)
            scores.append(logits[m][known])
            labels.append(y[m][known])
            which.append(ids[known])
        per = roc_auc(torch.cat(scores), torch.cat(labels), self.comm, self.rows_group(), torch.cat(which),
                      t * len(masks))
        out = {}
        for i, k in enumerate(masks):
            defined = [a for a in per[i * t:(i + 1) * t] if a == a]
            out[f"{k}_rocauc"] = sum(defined) / len(defined) if defined else float("nan")
        return out

    def evaluate(self, logits: torch.Tensor, masks=SPLITS) -> dict:
        """The task's figure on each split in `masks` (accuracy, or ROC-AUC), as `task.evaluate` gives it."""
        figures = self.task.evaluate(self, logits, self._splits(masks))
        if not isinstance(figures, dict):
            raise SpgnnError(f"task {self.task.name!r}'s evaluate returned {_described(figures)}: it returns a dict, "
                             f"{{'<split>_{self.task.metric}': a float}} for each split")
        return figures

    def loss(self, logits: torch.Tensor, mask="train") -> torch.Tensor:
        """The task's global mean loss over `mask` (cross-entropy, or BCE over the known targets)."""
        loss = self.task.loss(self, logits, mask)
        if not _scalar(loss):
            raise SpgnnError(f"task {self.task.name!r}'s loss returned {_described(loss)}: a loss is a one-element "
                             "tensor, the global mean (g.globally of this rank's partial sum)")
        detached = torch.is_grad_enabled() and logits.requires_grad and not loss.requires_grad
        values, ranks = None, [self.comm.rank] if detached else []
        if not self._loss_checked:      # once, outside the ledger: a loss of each rank's rows alone differs by rank
            self._loss_checked, gathered = True, self.comm.all_gather_object((float(loss.detach()), detached))
            values, ranks = [v for v, _ in gathered], [r for r, (_, d) in enumerate(gathered) if d]
        if ranks:
            e = SpgnnError(f"task {self.task.name!r}'s loss has no gradient on rank {', '.join(map(str, ranks))}, "
                           "though the logits have one: it was detached on its way (.detach(), float(...), "
                           "torch.tensor(value)), or is a constant there (a partial sum of no rows); make it of the "
                           "logits with g's operations (a sum over no rows is 0 with a gradient)")
            e.every_rank = values is None       # (the first time every rank raises it; later, this rank alone)
            raise e
        if values is not None and not np.allclose(values, values[0], rtol=1e-6, atol=0.0, equal_nan=True):
            raise SpgnnError(f"task {self.task.name!r}'s loss differs between the ranks ({min(values):.6g} to "
                             f"{max(values):.6g}): a loss of this rank's rows alone (F.cross_entropy(out[mask], "
                             "y[mask])) is not the global mean, and the steps would follow the sum of the ranks' "
                             "means; write it with g.cross_entropy, g.binary_cross_entropy or g.globally")
        return loss

    def predictions(self, logits: torch.Tensor) -> torch.Tensor:
        """The predicted class (the global column of the row's largest logit, the first on a tie) of each row."""
        return self.algo.argmax(self._logits(logits, self.num_classes, rows=False), self.num_classes)

    def accuracy(self, logits: torch.Tensor, masks=SPLITS) -> dict:
        """{"<mask>_acc": global share of correct predictions} for each split name in `masks`, in one sum; NaN for
        a split of no nodes (a graph without validation nodes), which has no share."""
        self._classes("accuracy")
        masks, pred = self._splits(masks), self.predictions(self._logits(logits, self.num_classes))
        mine = self.algo.label_rows(self.y, self.num_classes)
        correct = [float((pred[self._mask(k) & mine] == self.y[self._mask(k) & mine]).sum()) for k in masks]
        totals = self.all_sum(correct)
        return {f"{k}_acc": c / self.counts[k] if self.counts[k] else float("nan") for k, c in zip(masks, totals)}

    def all_sum(self, values) -> list[float]:
        """Σ over the ranks of `rows_group` of each value (float64)."""
        if isinstance(values, str) or not hasattr(values, "__iter__") or getattr(values, "ndim", 1) == 0:
            raise SpgnnError(f"all_sum takes a list of numbers, one sum each, got {_described(values)}: all_sum([x])")
        return self.comm.all_sum(list(values), self.rows_group())

    def _widths(self, hs, widths) -> list[int]:
        """The global column counts of the H_k of which this rank holds `hs` (`widths` checked against them)."""
        if widths is not None:
            widths = [int(w) for w in widths]
            held = [h.shape[1] for h in hs]
            if len(widths) != len(hs) or any(len(range(f)[self.columns(f)]) != c for f, c in zip(widths, held)):
                raise SpgnnError(f"widths {widths} do not fit the {len(hs)} matrices given, of which this rank holds "
                                 f"{held} columns: give each one's global column count (or none)")
            return widths
        if self.whole_rows:
            return [h.shape[1] for h in hs]
        return [int(w) for w in self.comm.all_sum([h.shape[1] for h in hs], self.algo.column_group())]

    def _whole(self, h: torch.Tensor, f: int) -> torch.Tensor:
        """All f columns of this rank's rows of a column-split matrix, gathered along the grid row."""
        from .spmm.summa import column_sizes

        C = self.grid.shape[1]
        return autograd_comm.all_gather(h.t(), self.comm, self.algo.column_group(), column_sizes(f, C)).t()

    def select(self, hs, start: int, stop: int, widths=None) -> torch.Tensor:
        """Columns start … stop−1 of [H_1 | H_2 | …] (global column indices), as this rank holds that n×(stop−start)
        matrix; `widths`: the f_k of the H_k (found by one small sum along the grid row on 2D/3D when not given)."""
        hs = [hs] if isinstance(hs, torch.Tensor) else list(hs)
        widths = self._widths(hs, widths)
        if not 0 <= start <= stop <= sum(widths):
            raise SpgnnError(f"columns {start}:{stop} lie outside the {sum(widths)} columns given")
        if self.whole_rows:
            return torch.cat(hs, 1)[:, start:stop]
        whole = torch.cat([self._whole(h, f) for h, f in zip(hs, widths)], 1)[:, start:stop]
        return whole[:, self.columns(stop - start)]

    def cat(self, hs, widths=None) -> torch.Tensor:
        """[H_1 | H_2 | …] as this rank holds it (``torch.cat`` of column blocks would interleave them on 2D/3D)."""
        hs = [hs] if isinstance(hs, torch.Tensor) else list(hs)
        widths = self._widths(hs, widths)
        return self.select(hs, 0, sum(widths), widths)

    def narrow(self, h: torch.Tensor, start: int, length: int, width: int | None = None) -> torch.Tensor:
        """Columns start … start+length−1 of H (`width` its global column count)."""
        return self.select([h], start, start + length, None if width is None else [width])

    @torch.no_grad()
    def gather(self, h: torch.Tensor, width: int | None = None):
        """The whole n×f matrix of which this rank holds `h` (its rows, its columns on 2D/3D), in original node order,
        as a numpy array on every rank (`width`: f, found by one small sum along the grid row on 2D/3D when not
        given). Every rank then holds n·f numbers: for a model's outputs (logits, embeddings) on graphs that allow
        it, such as ``g.gather(model(g, g.x))`` after training."""
        self._matrix(h, "gather")
        (f,) = self._widths([h], None if width is None else [width])
        mine = (self.node_ids.numpy(), self.columns(f), h.detach().cpu().numpy())
        out = np.empty((self.info.n, f), mine[2].dtype)
        for ids, cols, block in self.comm.all_gather_object(mine):
            out[ids, cols] = block
        return out

    # -- the model -----------------------------------------------------------------------------------------
    def prepare(self, model: torch.nn.Module, optimizer=None) -> torch.nn.Module:
        """`model` on this layout's device, checked once: its layers' needs are offered and their adjacencies laid
        out, and its parameters are equal on every rank (else one line naming the first that differs). From then on
        a step of any ``torch.optim.Optimizer`` whose gradients of the model were not summed by `sync_gradients` is
        refused with one line, and one of `optimizer` (if given) that holds a parameter of another module. A model
        that drops out its first layer's input in training (a `spgnn.layers.GNN`
        with dropout) keeps no products of the features (`precompute` off): its evaluations would keep them for no
        step's use, and its steps could not."""
        from .layers.registry import Layer, drops_features

        if not isinstance(model, torch.nn.Module):
            raise SpgnnError(f"prepare takes the model, a torch.nn.Module, got {_described(model)}")
        model = model.to(self.device)
        if wrong := next(((k, p.dtype) for k, p in model.named_parameters()
                          if p.is_floating_point() and p.dtype != self.x.dtype), None):
            raise SpgnnError(f"parameter {wrong[0]!r} of the model is {wrong[1]}, but the features are "
                             f"{self.x.dtype}: build the model in {self.x.dtype} (model.to({self.x.dtype})), or "
                             f"give the features the model's (g.x = g.x.to({wrong[1]}))")
        if drops_features(model):
            self.precompute = False
            self._kept.clear()
        for name, module in model.named_modules():
            if isinstance(module, Layer):
                for need in sorted(module.needs):
                    self.require(need, f"layer {name or type(module).__name__} ({type(module).__name__})")
                if module.adjacency is not None:
                    self.layout(module.adjacency)
            else:
                _guard(module, self._plain_refusal(f"module {name!r}" if name else "the model", module))
        digest = {k: hashlib.sha1(p.detach().cpu().numpy().tobytes()).hexdigest() for k, p in model.named_parameters()}
        every = self.comm.all_gather_object(digest)
        differ = next((k for k in digest if any(d.get(k) != digest[k] for d in every)), None)
        if differ is not None or any(d.keys() != digest.keys() for d in every):
            raise SpgnnError(f"parameter {differ!r} of the model differs between ranks: seed torch (torch.manual_seed) "
                             "before building the model, the same on every rank")
        me = weakref.ref(self)              # (a hook on the parameters keeps no graph alive)

        def accumulated(p):
            if (g := me()) is not None:
                g._accumulated(p)

        for name, p in model.named_parameters():
            self._prepared[id(p)] = name
            p._spgnn_prepared = True
            if p.requires_grad:                                 # a frozen parameter never has a gradient to sum
                p.register_post_accumulate_grad_hook(accumulated)
        if optimizer is not None:
            optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._check_owned(opt))
        return model

    def _plain_refusal(self, what: str, module: torch.nn.Module) -> str | None:
        """Why torch `module` (`what`) would compute what depends on the layout, or None: one of each row (a linear
        map, a layer norm, a softmax) where a rank holds part of each row (2D, 3D), one over nodes or drawn per rank
        (batch norm, dropout) where the rows are split."""
        kind = f"{what} (torch.nn.{type(module).__name__})"
        if isinstance(module, ROW_WISE):
            try:
                self.require("whole_rows", f"{kind}, which spgnn.Linear, g.linear and g.log_softmax replace on any "
                                           "layout,")
            except SpgnnError as e:
                return str(e)
        split = self.comm.world_size > 1
        if split and isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            return (f"{kind} normalizes by this rank's rows, and keeps its statistics per rank: use spgnn.BatchNorm, "
                    "which takes them over every node")
        if split and isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0:
            return (f"{kind} draws its masks per rank, so the run would change with P (and on 1.5d the replicas of a "
                    "block drift apart): use g.dropout, whose masks are the same on any layout")
        return None

    def _check_owned(self, optimizer) -> None:
        """SpgnnError where `optimizer` (the one given to `prepare`) holds a parameter of a module not prepared."""
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in self._prepared and p.grad is not None:
                    raise SpgnnError("the optimizer holds a parameter that is not part of the model given to "
                                     "DistGraph.prepare, so its gradient is never summed over the ranks: prepare the "
                                     "module that owns it")

    def _accumulated(self, p) -> None:
        """A backward added to p's gradient: pending a sum (marked on p, which `_refuse_unsummed` reads at any
        optimizer's step), and counted where it added to the very tensor `sync_gradients` summed."""
        p._spgnn_unsummed = self._prepared[id(p)]
        self._backward[id(p)] = (weakref.ref(p.grad), p.grad._version)
        summed = self._summed.get(id(p))
        if summed is not None and p.grad is summed[0]():
            self._added[id(p)] = self._added.get(id(p), 0) + 1

    def _additions(self, p) -> int | None:
        """How many backwards added to p's gradient since it was summed, where nothing else changed it (neither set
        to None nor zeroed: its version moved by those additions alone); None where something else did."""
        summed, added = self._summed.get(id(p)), self._added.get(id(p), 0)
        fine = summed is not None and p.grad is not None and p.grad is summed[0]() and \
            p.grad._version == summed[1] + added
        return added if fine else None

    def _changed_in_place(self, p) -> bool:
        """Whether p's gradient was changed in place since the last backward added to it (clipped: a clipping of this
        rank's share, which differs from the clipping of the sum); forgets that backward. Told by the version counter
        alone, which the same program moves alike on every rank (its values differ by rank: a verdict of them would
        let some ranks refuse while the others wait in the sum)."""
        last = self._backward.pop(id(p), None)
        grad = p.grad if last is not None and last[0]() is p.grad else None
        return grad is not None and grad._version != last[1]

    def sync_gradients(self, model: torch.nn.Module) -> None:
        """Sum the parameter gradients of `model` over the ranks holding disjoint rows (one all-reduce); a gradient
        the backward left missing becomes zero, on one rank as on several. Once a step, after its last backward: a
        model `prepare` saw is refused a second sum with no backward between, or of a gradient a backward added to
        after it was summed (each would count a gradient once a rank), or changed in place before it (clipped: a
        clipping of each rank's share, not of the gradient); change it after the sum."""
        trained = [p for p in model.parameters() if p.requires_grad and id(p) in self._prepared]
        twice = next(((p, k) for p in trained if (k := self._additions(p)) is not None), None)
        for p in trained:
            self._added.pop(id(p), None)
        if twice is not None:
            name = self._prepared[id(twice[0])]
            what = f"a backward added to the gradient of parameter {name!r} after it was summed" if twice[1] else \
                f"the gradient of parameter {name!r} was summed already and has not changed since"
            raise SpgnnError(f"sync_gradients: {what}, so summing it again would count it once a rank: call it once "
                             "a step, after its last backward, and zero the gradients (opt.zero_grad()) before the "
                             "next step's")
        if changed := [self._prepared[id(p)] for p in trained if self._changed_in_place(p)]:
            raise SpgnnError(f"sync_gradients: the gradient of parameter {changed[0]!r} was changed "
                             "in place after the backward, before its sum (clipped, rescaled, zeroed): at P > 1 that "
                             "changes this rank's share, not the gradient (a clipping would change the steps with P); "
                             "change it after g.sync_gradients(model)")
        all_reduce_gradients(model, self.comm, self.grad_group())
        for p in model.parameters():
            p._spgnn_unsummed = None
        self._summed |= {id(p): (weakref.ref(p.grad), p.grad._version) for p in trained}

    # -- checkpoints -----------------------------------------------------------------------------------
    def save_checkpoint(self, folder, model, optimizer, epoch: int, **extra) -> None:
        """Rank 0 writes `model`'s and `optimizer`'s state, the epoch, `extra` (plain containers) and the graph's and
        model's identity to folder/checkpoint.pt atomically; every rank returns once it is written. Weights are
        the same on every rank, so the checkpoint resumes under any P, algorithm or grid. A folder holding a
        checkpoint this graph neither wrote nor loaded is refused (another run's would be overwritten)."""
        from .train import checkpoint

        checkpoint.loadable(extra, "save_checkpoint's extra")
        state = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "optimizer_class": type(optimizer).__qualname__, "progress": {"extra": extra},
                 "identity": self._identity(model), "partition": {}, "config": {}}
        key = Path(folder).resolve()

        def write():
            if key not in self._checkpoints and (Path(folder) / checkpoint.FILE).exists():
                raise SpgnnError(f"{folder} holds a checkpoint that this run neither wrote nor loaded: save to "
                                 "another folder, or load_checkpoint it first to continue it")
            return checkpoint.save(checkpoint.writable(folder, resuming=True), state, self._checkpoints.get(key))

        self._checkpoints[key] = checkpoint.save_on_rank0(self.comm, write, self.cfg.timeout)

    def load_checkpoint(self, folder, model, optimizer) -> tuple[int, dict]:
        """Restore `model` and `optimizer` from folder/checkpoint.pt (of this graph, a model of the same parameter
        names and shapes and an optimizer of the same class, else one line); returns (the epoch saved, the `extra`
        saved)."""
        from .train import checkpoint

        state = agree(self.comm, lambda: checkpoint.load(folder, self._identity(model)))
        saved = state.get("optimizer_class")
        if saved is not None and saved != type(optimizer).__qualname__:
            raise SpgnnError(f"{folder} holds the state of a {saved} optimizer, not of {type(optimizer).__qualname__}: "
                             "resume with the optimizer it was saved with")
        try:                            # the optimizer first: a state that does not fit leaves the model as it was
            optimizer.load_state_dict(state["optimizer"])
        except (KeyError, ValueError) as e:
            raise SpgnnError(f"{folder}'s optimizer state does not fit {type(optimizer).__qualname__} "
                             f"({type(e).__name__}: {e}): resume with the optimizer, and parameter groups, it was "
                             "saved with") from None
        model.load_state_dict(state["model"])
        self._checkpoints[Path(folder).resolve()] = checkpoint.stamp(folder)
        return state["epoch"], state["progress"].get("extra", {})

    def _identity(self, model) -> dict:
        from .train import checkpoint

        mine = checkpoint.identity(self.cfg, self.info)
        return mine | {"model": checkpoint.model_shapes(model)}

    def __repr__(self) -> str:
        grid = "x".join(map(str, self.grid.shape))
        return (f"DistGraph({self.info.name}: n={self.n}, {self.cfg.algo} on grid {grid},"
                f" rank {self.comm.rank}, rows {len(self.node_ids)}, adjacency {list(self.layouts)})")


def all_reduce_gradients(model: torch.nn.Module, comm: Comm, group) -> None:
    """Sum the trained parameters' gradients over `group` in one flat all-reduce (their words, as the cost model
    counts them, `ModelCost.n_params`). A missing gradient counts as zero and is set to zero, in a group of one too,
    so that an optimizer steps the same parameters at every P; a frozen parameter (``requires_grad=False``) gets none
    and sends nothing."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if group.size == 1 or not params:
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    comm.all_reduce(flat, group)
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()
