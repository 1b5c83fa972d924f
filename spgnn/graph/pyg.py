"""PyTorch Geometric's ``Data`` to a Graph and back.

PyG's ``edge_index = [src, dst]`` is spgnn's A[dst, src] = 1, so a graph keeps its direction both ways: an
undirected ``Data`` (both directions listed, as PyG's datasets store them) gives a symmetric A. A self-loop is
kept and a duplicate edge counted (A[dst, src] its number of copies), as PyG's layers see them: GraphSAGE's mean
and GIN's sum take the node itself and every copy. PyG keeps several fixed splits as masks of shape [N, S];
``split`` picks one column.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import SpgnnError
from .build import assemble, split_masks
from .graph import Graph
from .validate import host_array


def _numpy(value, what: str) -> np.ndarray:
    if value is None:
        raise SpgnnError(f"the PyG Data has no {what}; spgnn's node classification needs data.{what}")
    return host_array(value)        # a sparse x: dense; a bfloat16 one: float32


def from_pyg(data, name: str = "pyg", split: int = 0, symmetric: bool = False, seed: int = 0) -> Graph:
    """The Graph of a PyG ``Data`` with ``edge_index``, ``x``, ``y`` and optional ``train_mask``, ``val_mask``,
    ``test_mask`` ([N] or [N, S] for S fixed splits, ``split`` choosing one; without them, `default_split` of
    ``seed``); masks of one split, or none, refuse a ``split`` other than 0. A holds each edge once,
    duplicates summed and self-loops kept, as PyG's layers see them: a weight of 1 each, or ``edge_weight`` ([E], as
    PyG's GCNConv takes it; GraphSAGE and GIN weigh their mean and sum by it, where PyG's SAGEConv and GINConv
    ignore it). GAT attends each distinct edge once, where PyG's GATConv attends every copy. ``symmetric``: add
    every edge's reverse, into a binary A without self-loops (as every dataset's loader makes it; refused with
    ``edge_weight``: give both directions). ``edge_attr`` (edge features) is not read."""
    edge_index = _numpy(getattr(data, "edge_index", None), "edge_index")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise SpgnnError(f"the PyG Data's edge_index has shape {edge_index.shape}, expected [2, E]")
    x, y = _numpy(getattr(data, "x", None), "x"), _numpy(getattr(data, "y", None), "y")    # [N], [N, 1] or [N, t]
    num_nodes = getattr(data, "num_nodes", None)
    if num_nodes is not None and num_nodes != len(x):
        raise SpgnnError(f"the PyG Data has {num_nodes} nodes but x has {len(x)} rows")
    found = {k: getattr(data, f"{k}_mask", None) for k in ("train", "val", "test")}
    found = {k: None if m is None else _numpy(m, f"{k}_mask").T for k, m in found.items()}   # PyG's [N, S]: [S, N]
    masks = split_masks(found, "the PyG Data", split or None)
    weights = getattr(data, "edge_weight", None)
    weights = np.ones(edge_index.shape[1], np.float32) if weights is None and not symmetric else \
        None if weights is None else _numpy(weights, "edge_weight")
    return assemble(name, edge_index[0], edge_index[1], x, y, directed=not symmetric, masks=masks, seed=seed,
                    weights=weights)


def to_pyg(graph: Graph):
    """``torch_geometric.data.Data(x, edge_index, y, train_mask, val_mask, test_mask)`` of ``graph``, and
    ``edge_weight`` where A is not binary; edges in the order of A's CSR (by target, then source)."""
    if not isinstance(graph, Graph):
        raise SpgnnError(f"spgnn.to_pyg takes a spgnn Graph (as load_dataset or from_pyg gives it), got "
                         f"{type(graph).__name__}")
    try:
        from torch_geometric.data import Data
    except ImportError as e:
        raise SpgnnError("spgnn.to_pyg needs PyTorch Geometric: pip install torch-geometric") from e
    a = graph.adj.tocoo()
    edge_index = torch.from_numpy(np.stack([a.col, a.row]).astype(np.int64))
    t = torch.from_numpy
    weights = {} if (a.data == 1).all() else {"edge_weight": t(a.data.astype(np.float32))}
    return Data(x=t(graph.x), edge_index=edge_index, y=t(graph.y), train_mask=t(graph.train_mask),
                val_mask=t(graph.val_mask), test_mask=t(graph.test_mask), num_nodes=graph.n, **weights)


def as_graph(graph, seed: int = 0) -> Graph:
    """``graph`` itself when it is a Graph, its conversion when it is a PyG ``Data`` (without masks: the
    `default_split` of ``seed``, the run's, as a dataset file's); else SpgnnError."""
    if graph is None or isinstance(graph, Graph):
        return graph
    if hasattr(graph, "edge_index"):
        return from_pyg(graph, seed=seed)
    raise SpgnnError(f"a graph must be a spgnn Graph or a PyTorch Geometric Data, got {type(graph).__name__}")


def given_graph(graph, cfg) -> Graph | None:
    """`as_graph` of the graph in memory a run is given (a PyG ``Data`` split by cfg.seed); SpgnnError where
    cfg.dataset, set too, names another graph."""
    graph = as_graph(graph, cfg.seed)
    if graph is not None and cfg.dataset not in (type(cfg).dataset, graph.name):
        raise SpgnnError(f"the graph in memory ({graph.name}) and dataset={cfg.dataset!r} both name the graph to "
                         "train on: give one of them")
    return graph
