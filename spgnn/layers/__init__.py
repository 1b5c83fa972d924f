"""Layers that describe themselves (`registry`: `Layer`, `register_layer`, entry-point group ``spgnn.layers``), one
file each: GCN (`gcn`), GraphSAGE (`sage`), GAT (`gat`), GIN (`gin`), APPNP (`appnp`), GCNII (`gcnii`), the dense
`Linear` (`linear`); global batch normalisation (`norm`); the built-in model, a stack of them (`stack`)."""

from . import appnp, gat, gcn, gcnii, gin, sage  # noqa: F401  (built-ins register themselves as they are imported)
from .appnp import APPNP
from .gat import GATConv
from .gcn import GCNConv
from .gcnii import GCN2Conv
from .gin import GINConv
from .linear import Linear, spmm_width
from .norm import BatchNorm
from .registry import CHOSEN, LAYERS, AllReduce, Attend, Dense, Elementwise, Layer, Spmm, get_layer, register_layer
from .sage import SAGEConv
from .stack import GNN, build_model

__all__ = ["APPNP", "CHOSEN", "AllReduce", "Attend", "BatchNorm", "Dense", "Elementwise", "GATConv", "GCN2Conv",
           "GCNConv", "GINConv", "GNN", "LAYERS", "Layer", "Linear", "SAGEConv", "Spmm", "build_model", "get_layer",
           "register_layer", "spmm_width"]
