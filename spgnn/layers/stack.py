"""`GNN`: the model ``--model NAME`` builds, a stack of layers with dropout before each and an activation
between them, and `build_model`, which builds it from the layer registry.

Dropout masks are a hash of (seed, epoch, layer, global node id, column), so the training curve does not
depend on the number of processes or the partition.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import SpgnnError
from ..hashing import dropout, mix_key
from ..memory import release_kept
from .norm import BatchNorm, NoNorm
from .registry import KeepsDraws, adjacencies_of, get_layer
from .registry import options as layer_options

IN_PLACE = {torch.relu: torch.relu_, F.relu: torch.relu_}     # activations with an in-place form


def in_place(layer, last: bool = False, norm: bool = False) -> bool:
    """Whether a stack changes `layer`'s result in place after its products, so that a large result is not followed
    by another as large, new to the allocator (a block of 32 MiB or more is mapped anew and page-faulted at every
    step: rmat:17's 2-layer GCN step at P = 1 went from 104-120 to 96-104 ms): the layer's output is its own
    (`Layer.fresh_output`), no batch norm (`norm`) follows it, and its activation, none after the `last` layer, has
    an in-place form."""
    return (getattr(layer, "fresh_output", False) and not norm
            and (last or layer.activation is None or layer.activation in IN_PLACE))


class GNN(KeepsDraws, nn.Module):
    """Layers `layers` (`spgnn.layers.Layer`s) in order: dropout (probability `dropout`) before each that takes it
    (`Layer.dropout_before`), the layer's `activation` after each but the last, global batch norm after each
    hidden layer (one an activation follows) when `batch_norm`. Layer i runs in ledger layer i; a layer with
    `initial` gets the first layer's output as h0, one that is `keyed` a hash key for its own random draws.

    A batch norm subtracts the column means, so the bias a layer before it adds last (`Layer.shift`) changes no
    output: its gradient is 0, and is taken as exactly 0. (Computed, it is rounding noise of about 1e-7 that
    depends on P, which Adam scales up to full steps: the running means, and so the evaluation, then differed
    with P.)"""

    def __init__(self, layers: list, dropout: float = 0.5, seed: int = 0, batch_norm: bool = False, name: str = ""):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        hidden = [layer for layer in layers[:-1] if layer.activation is not None]     # a batch norm follows these
        if batch_norm and not hidden:
            kinds = ", ".join(type(layer).__name__ for layer in layers)
            raise SpgnnError(f"batch norm follows each hidden layer (one an activation follows), and none of the "
                             f"{name or 'model'}'s layers ({kinds}) is one: give it more layers (--layers 2), or no "
                             "batch norm")
        self.norms = nn.ModuleList(BatchNorm(layer.f_out) if layer in hidden else NoNorm() for layer in layers[:-1]) \
            if batch_norm else None
        for layer in hidden if batch_norm else ():
            bias = getattr(layer, layer.shift, None) if getattr(layer, "shift", None) else None
            if bias is not None and bias.requires_grad:
                bias.register_hook(torch.zeros_like)
        self.dropout, self.seed, self.name = dropout, seed, name
        # training forwards made without an epoch, the key of the next one's masks: a buffer (as BatchNorm1d's
        # num_batches_tracked), so that a checkpoint keeps it and a resumed run's masks continue
        self.register_buffer("forwards", torch.zeros((), dtype=torch.int64))

    def train(self, mode: bool = True):
        """nn.Module's train(mode); leaving training releases the dropout's kept blocks (`spgnn.memory.empty`)."""
        if not mode:
            release_kept()
        return super().train(mode)

    @property
    def adjacencies(self) -> list[str]:
        """The adjacencies its layers aggregate with, in order of first use."""
        return adjacencies_of(self)

    def forward(self, g, h, node_ids=None, epoch: int | None = None):
        """Logits of the rows `g` gives this rank; `node_ids` (default ``g.node_ids``) their original ids, for the
        dropout masks, drawn from (seed, `epoch`, layer): the same on every rank and layout. Without an `epoch`, a
        training forward takes the count of those made so far (a fresh mask each time, not epoch 0's again).
        Minibatch (`spgnn.train.minibatch`): `g` and `node_ids` are per-layer lists (layer i's block, its input
        nodes)."""
        if epoch is None and self.training:
            epoch = int(self.forwards)
            self.forwards += 1
        epoch = epoch or 0
        n = len(self.layers)
        gs = g if isinstance(g, list) else [g] * n
        ids = node_ids if isinstance(node_ids, list) else [g.node_ids if node_ids is None else node_ids] * n
        h0 = None
        for i, layer in enumerate(self.layers):
            g = gs[i]
            if self.training and self.dropout > 0 and layer.dropout_before:
                h = dropout(h, ids[i], self.dropout, mix_key(self.seed, epoch, i), g.columns(layer.f_in).start)
            extra = ({"key": mix_key(self.seed, epoch, i, 1)} if layer.keyed else {}) | \
                ({"h0": h0} if layer.initial else {})
            with g.layer(i):
                h = layer(g, h, **extra)
                if i < n - 1:
                    h = h if self.norms is None else self.norms[i](g, h)
                    if layer.activation is not None:
                        own = in_place(layer, norm=self.norms is not None)
                        h = IN_PLACE[layer.activation](h) if own else layer.activation(h)
            if i == 0:
                h0 = h
        return h


def build_model(name: str, f_in: int, classes: int, hidden: int = 16, layers: int = 2, dropout: float = 0.5,
                seed: int = 0, batch_norm: bool = False, init: str = "auto", **options) -> GNN:
    """The `GNN` of ``--model name``: the registered layer's `stack` of `layers` layers from f_in features to
    `classes` logits through `hidden` (its own options, e.g. GAT's heads, from `options`, each checked; another
    registered layer's ignored, a name no layer declares refused), weights drawn from torch's current seed."""
    cls = get_layer(name)
    if not (min(f_in, classes, hidden, layers) >= 1 and 0 <= dropout < 1):
        raise SpgnnError(f"build_model: f_in, classes, hidden and layers must be at least 1 and dropout in [0, 1), "
                         f"got {f_in}, {classes}, {hidden}, {layers} and {dropout}")
    unknown = sorted(set(options) - set(layer_options()))
    if unknown:
        raise SpgnnError(f"build_model: no registered layer takes {', '.join(unknown)}; --model {name} takes "
                         f"{', '.join(o.name for o in cls.options) or 'no options'}")
    own = {o.name: options.get(o.name, o.default) for o in cls.options}
    for o in cls.options:
        o.check(own[o.name])
    return GNN(cls.stack(f_in, hidden, classes, layers, init=init, dropout=dropout, **own), dropout, seed,
               batch_norm, name)


def config_model(cfg, f_in: int, classes: int) -> GNN:
    """`build_model` for a `TrainConfig` (``--model``, ``--hidden``, ``--layers``, ``--dropout``, ``--seed``,
    ``--batch-norm``, ``--init`` and the layer's own options)."""
    cls = get_layer(cfg.model)
    return build_model(cfg.model, f_in, classes, cfg.hidden, cfg.layers, cfg.dropout, cfg.seed, cfg.batch_norm,
                       cfg.init, **{o.name: getattr(cfg, o.name) for o in cls.options})
