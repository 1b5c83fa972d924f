"""GNN layers written once against the distributed-SpMM interface: GCN, GraphSAGE and GAT (`conv`) and
batch normalisation with global statistics (`norm`)."""

from .conv import GNN, LAYERS, GATConv, GCNConv, SAGEConv, spmm_width

__all__ = ["GATConv", "GCNConv", "GNN", "LAYERS", "SAGEConv", "spmm_width"]
