"""Layers that describe themselves, and their registry, by the name ``--model`` takes.

A layer is a `Layer` (an ``nn.Module`` whose ``forward(g, h, ...)`` computes on the rows and columns that the
layout `g` gives this rank: a `spgnn.DistGraph`, a sampled block, or the single-process reference) that declares

    adjacency       the `spgnn.graph.adjacency.Adjacency` it aggregates with (a name), or None
    needs           what it needs of the layout: "whole_rows" (not the column blocks of 2D/3D), "attention"
    sampled         whether it runs on sampled minibatch blocks
    draw            its initial parameters as PyG ("pyg") and DGL ("dgl") draw them; `default_init` for "auto"
    costs(grad_in)  what one application moves and multiplies: its sparse products (`Spmm`), dense products
                    (`Dense`), attention (`Attend`) and global sums (`AllReduce`), for the cost model; None when
                    undeclared (then the cost model refuses it). A layer that multiplies in another order when the
                    products of its input are kept (`DistGraph.kept`: the input is the graph's features) takes
                    ``costs(grad_in, features=True)`` for that case
    options         its `spgnn.Option`s: TrainConfig fields and ``spgnn train`` flags
    activation      what a stack applies after it but the last (ReLU; None: nothing); with ``fresh_output`` (its
                    forward returns a tensor of its own that no backward keeps) a ReLU is applied in place
    saves_input     its backward keeps its input H beyond what its dense products take (GIN's (1 + ε)·H, for ε's
                    gradient Σ dZ ⊙ H): the cost model counts it among what autograd keeps
    stack(...)      the layers of the model ``--model NAME`` builds (default: L layers of this kind)

It is registered with the ``@register_layer`` decorator, or published by another package under the entry-point
group ``spgnn.layers`` (``name = module:Class``), loaded when ``spgnn`` is imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from .. import options as plugins
from ..errors import SpgnnError
from ..graph.adjacency import get_adjacency
from .init import SCHEMES

LAYERS: dict = {}
plugins.REGISTRIES.append(LAYERS)
ENTRY_POINT_GROUP = "spgnn.layers"


DRAWS = ("forwards", "salt")    # buffers that key dropout masks (GNN's, GATConv's), absent from older state_dicts


class KeepsDraws:
    """Mixin of a module with `DRAWS` buffers (`spgnn.GNN`, `spgnn.GATConv`): a state saved before it kept them
    loads, those keeping their values (a resumed run then draws from its own count), in plain ``load_state_dict``
    too."""

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        missing_keys[:] = [k for k in missing_keys if k not in {prefix + d for d in DRAWS}]


@dataclass(frozen=True)
class Spmm:
    """One sparse product Z = Â·H of `width` columns over adjacency `adjacency`; `backward`: its input needs a
    gradient, so the backward runs dH = Âᵀ·dZ; `once`: a product of the graph's constant features, made once a run
    and kept (`spgnn.DistGraph.spmm`; the cost model marks these, `spgnn.cost.ModelCost.of`)."""

    width: int
    adjacency: str
    backward: bool
    once: bool = False


@dataclass(frozen=True)
class Dense:
    """One dense product H·W with W f_in×f_out (its backward always runs: W needs a gradient); `grad_in`: H is made
    from the layer's parameters (GIN's (1 + ε)·H + Â·H, its MLP's hidden layer), so dH = dY·Wᵀ runs even where the
    layer's input needs no gradient, and H is a tensor of its own, not the features or their kept products."""

    f_in: int
    f_out: int
    grad_in: bool = False


@dataclass(frozen=True)
class Attend:
    """Attention over the pattern of `adjacency` (`spgnn.DistGraph.attend`) with `heads` heads of `width` features:
    scores, the softmax over each row's in-edges and the weighted sum of V's rows (n×heads×width). It moves rows of
    [V | s_src] (heads·(width + 1) columns), as the layout's `attend_cost` says; its backward always runs (V = H·W
    needs a gradient). `dropout`: attention dropout in training, whose mask a layout draws from the edges' original
    ids, fetched once a run."""

    heads: int
    width: int
    adjacency: str
    dropout: bool = False


@dataclass(frozen=True)
class Elementwise:
    """A layer's elementwise passes over n×`width` tensors beyond its products' bias and activation, which the cost
    model charges as streamed bytes (at a dense product's operands' rate) and, for each tensor written, its first
    touch where it is mapped anew: `reads` and `writes` tensors read and written in the forward (and in
    evaluation), `backward_reads` and `backward_writes` in the backward. GIN's (1 + ε)·H + Â·H reads 3 and writes 2
    (a scale, a sum); its backward reads 3 and writes 1 for ε's gradient Σ dZ ⊙ H, and where H needs a gradient
    reads 3 and writes 2 more for (1 + ε)·dZ added to Âᵀ·dZ."""

    width: int
    reads: int
    writes: int
    backward_reads: int = 0
    backward_writes: int = 0


@dataclass(frozen=True)
class AllReduce:
    """One all-reduce of `words` words of `itemsize` bytes over the rows group (a global sum); `backward`: its
    adjoint all-reduce runs too; `train_only`: not run in evaluation."""

    words: int
    itemsize: int = 4
    backward: bool = True
    train_only: bool = True


class Layer(nn.Module):
    """A GNN layer written against the layout interface (see the module docstring). Subclasses call
    ``super().__init__(f_in, f_out)`` and set their parameters with `initialise`."""

    name = ""
    summary = ""
    adjacency: str | None = None
    needs: frozenset = frozenset()
    sampled = False
    options: tuple = ()
    default_init = "pyg"
    activation = staticmethod(torch.relu)   # what a stack applies after this layer (unless it is the last)
    fresh_output = False                    # forward returns a tensor of its own that no backward keeps, so a stack
                                            # may apply the activation to it in place (`spgnn.layers.stack.in_place`)
    dropout_before = True                   # a stack's dropout applies to this layer's input
    saves_input = False                     # its backward keeps its input beyond what its dense products take
    keyed = False                           # forward takes key= (a hash key for its own random draws)
    initial = False                         # forward takes h0= (the stack's first layer's output)
    shift: str | None = None                # the parameter forward adds to every output row last (a bias), which
                                            # a batch norm after the layer cancels (`spgnn.layers.stack.GNN`)

    def __init__(self, f_in: int, f_out: int):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out

    @staticmethod
    def draw(scheme: str, *shape) -> dict:
        """{parameter name: initial value} as the peer library `scheme` draws them for this layer."""
        return {}

    def initialise(self, init: str, *shape) -> None:
        """Set the parameters `draw` gives for `init` ("pyg", "dgl", or "auto": `default_init`), in the order the
        layer registers them."""
        scheme = type(self).default_init if init == "auto" else init
        if scheme not in SCHEMES:
            raise SpgnnError(f"--init must be auto, {' or '.join(SCHEMES)}, got {init!r}")
        for name, value in self.draw(scheme, *shape).items():
            setattr(self, name, nn.Parameter(value.contiguous()))

    def costs(self, grad_in: bool) -> list | None:
        """The operations one application runs, in order (`Spmm`, `Dense`, `Attend`, `AllReduce`); `grad_in`: its
        input needs a gradient. None: not declared. A layer whose forward asks `g.kept` declares a keyword
        ``features`` too: what it runs when its input is the graph's features, whose sparse products are kept."""
        return None

    @classmethod
    def stack(cls, f_in: int, hidden: int, classes: int, layers: int, init: str = "auto", dropout: float = 0.0,
              **options) -> list:
        """The layers of ``--model NAME``: `layers` of this kind, f_in → hidden → … → classes, each given the
        layer's own `options` (`dropout`: the model's, for layers that drop inside, e.g. attention)."""
        takes = inspect.signature(cls).parameters
        if missing := [k for k in ("init", *options) if k not in takes
                       and not any(p.kind is p.VAR_KEYWORD for p in takes.values())]:
            raise SpgnnError(f"--model {cls.name} builds {cls.__name__}(f_in, f_out, init=…{', …' if options else ''}"
                             f") (Layer.stack), but its __init__ takes no {', '.join(map(repr, missing))}: take it "
                             f"(init='auto', passed to self.initialise), or define the classmethod stack")
        widths = [f_in] + [hidden] * (layers - 1) + [classes]
        return [cls(a, b, init=init, **options) for a, b in zip(widths[:-1], widths[1:])]


def layers_of(model: nn.Module) -> list:
    """The `Layer`s of `model` in the order it applies them: a stack's ``layers`` (an ``nn.ModuleList``, as
    `spgnn.layers.GNN` holds them), else its `Layer` modules in the order they were registered."""
    if isinstance(getattr(model, "layers", None), nn.ModuleList):
        return list(model.layers)
    return [m for m in model.modules() if isinstance(m, Layer)]


def dropped_inputs(model: nn.Module, layers: list) -> tuple[bool, ...]:
    """Per layer of `layers` (`layers_of(model)`), whether training drops out its input: the ``dropout`` of the
    stack holding them (`model`, or its first module with ``layers``, as a link model's `spgnn.layers.GNN` encoder)
    before each layer that takes it (`Layer.dropout_before`); none for a module of one's own."""
    stack = next((m for m in model.modules() if isinstance(getattr(m, "layers", None), nn.ModuleList)), model)
    rate = getattr(stack, "dropout", 0.0)
    return tuple(isinstance(rate, float | int) and rate > 0 and layer.dropout_before for layer in layers)


def drops_features(model: nn.Module) -> bool:
    """Whether training drops out the input of the first of the `Layer`s of `model` (`dropped_inputs`): then that
    layer is not given the graph's features as they are."""
    layers = layers_of(model)
    return bool(layers) and dropped_inputs(model, layers)[0]


def adjacencies_of(model: nn.Module) -> list[str]:
    """The adjacencies the `Layer`s of `model` aggregate with, in the order they were registered, each once."""
    return list(dict.fromkeys(m.adjacency for m in model.modules() if isinstance(m, Layer) and m.adjacency))


def register_layer(cls):
    """Class decorator: register layer `cls` under ``cls.name``. An error: a name registered twice or an option that
    disagrees with another layer's (`spgnn.options.admit`), an adjacency or a need no layout knows, no forward."""
    plugins.admit(LAYERS, cls, "layer", "--model", Layer)
    if cls.adjacency is not None:
        get_adjacency(cls.adjacency)
    if isinstance(cls.needs, str):
        raise SpgnnError(f"layer {cls.name!r}: needs is a set of needs (frozenset({{{cls.needs!r}}})), not a string")
    unknown = set(cls.needs) - NEEDS
    if unknown:
        raise SpgnnError(f"layer {cls.name!r} needs {sorted(unknown)}, which no layout offers: needs are "
                         f"{', '.join(sorted(NEEDS))}")
    if cls.forward is Layer.forward:
        raise SpgnnError(f"layer {cls.name!r} does not define forward(g, h) (H' of this rank's block H on the layout "
                         "g gives)")
    LAYERS[cls.name] = cls
    return cls


NEEDS = frozenset({"whole_rows", "attention"})


def get_layer(name: str):
    """The layer class registered as `name`."""
    try:
        return LAYERS[name]
    except KeyError:
        raise SpgnnError(f"unknown model {name!r}: choose one of {', '.join(LAYERS)} or register a layer with "
                         "spgnn.register_layer") from None


def options() -> dict:
    """Every registered layer's options by name (`spgnn.options.merged`)."""
    return plugins.merged(LAYERS, "--model")


def declaring(name: str) -> list[str]:
    """The layers that declare option `name`."""
    return plugins.declaring(LAYERS, name)


class _Chosen(Mapping):
    """{layer name: the init scheme "auto" takes for it}, read from the registry."""

    def __getitem__(self, name):
        return get_layer(name).default_init

    def __iter__(self):
        return iter(LAYERS)

    def __len__(self):
        return len(LAYERS)


CHOSEN = _Chosen()


def load_entry_points() -> None:
    """Register the layers other packages publish under ``spgnn.layers``."""
    plugins.load_entry_points(ENTRY_POINT_GROUP, LAYERS, register_layer, "layer")
