"""A node-classification graph and the adjacency normalisations the layers use.

Convention: ``adj`` is the n×n CSR matrix A with A[i, j] ≠ 0 for every edge j → i, so that Z = A·H
aggregates over in-neighbours (PyTorch Geometric's ``edge_index = [src, dst]`` is ``A[dst, src]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from . import validate as v
from .validate import SPLITS, check_features, check_labels, check_masks, check_targets, whole_ids


@dataclass
class Graph:
    """A graph with features ``x`` (n×f float32), labels ``y`` and boolean split masks. Labels are class ids (n,
    int64; ``num_classes`` C) or t binary targets (n×t float32: 0, 1, or NaN where unknown; ``num_classes`` = t)."""

    adj: sp.csr_matrix
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    name: str = "graph"
    num_classes: int = field(default=0)
    source: str = ""            # a digest of the files it was read from, where a later reader must match them

    def __post_init__(self):
        self.adj = adjacency_matrix(self.adj, self.name)
        self.adj.sum_duplicates()
        self.adj.eliminate_zeros()      # an edge of weight 0 is none (attention, which reads the pattern, too)
        self.adj.sort_indices()
        self.x, self.y = v.host_array(self.x), v.host_array(self.y)      # (a torch tensor of bfloat16: float32)
        if self.x.dtype != np.float32:      # checked before the cast (which fails or overflows to inf)
            check_features(self.x, f"dataset {self.name!r}")
        self.x = np.ascontiguousarray(self.x, dtype=np.float32)
        self.y = v.class_labels(self.y, self.name)       # checked before the cast (1.5 → 1, NaN → -2^63)
        for s in SPLITS:
            setattr(self, f"{s}_mask", v.mask_array(getattr(self, f"{s}_mask"), f"dataset {self.name!r}", s))
        if self.y.ndim == 2:
            if self.num_classes not in (0, self.y.shape[1]):
                raise SpgnnError(f"dataset {self.name!r}: num_classes {self.num_classes} but y holds "
                                 f"{self.y.shape[1]} binary targets a node (num_classes is t then: give 0 or "
                                 f"{self.y.shape[1]})")
            self.num_classes = self.y.shape[1]
        elif not self.num_classes:
            self.num_classes = int(self.y.max()) + 1 if self.y.size else 0
        self.validate()

    @property
    def n(self) -> int:
        return self.adj.shape[0]

    @property
    def nnz(self) -> int:
        return self.adj.nnz

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    @property
    def targets(self) -> int:
        """The number of binary targets (0 for class labels)."""
        return self.y.shape[1] if self.y.ndim == 2 else 0

    @property
    def is_symmetric(self) -> bool:
        return is_symmetric(self.adj)

    def validate(self) -> None:
        """Raise SpgnnError when the parts of the graph disagree or hold values no model can use (shapes here,
        values by `spgnn.graph.validate`)."""
        n = self.adj.shape[0]
        where = f"dataset {self.name!r}"
        if self.adj.ndim != 2 or self.adj.shape[1] != n:
            raise SpgnnError(f"{where}: adjacency must be square, got shape {self.adj.shape}")
        if n == 0:
            raise SpgnnError(f"{where}: the graph has no nodes")
        if self.x.ndim != 2:
            raise SpgnnError(f"{where}: features must be a 2-D array (nodes x features), got shape {self.x.shape}")
        if self.x.shape[0] != n:
            raise SpgnnError(f"{where}: features have {self.x.shape[0]} rows but the graph has {n} nodes")
        if self.y.shape[:1] != (n,) or self.y.ndim > 2:
            raise SpgnnError(f"{where}: labels have shape {self.y.shape} but the graph has {n} nodes")
        for m in ("train_mask", "val_mask", "test_mask"):
            if getattr(self, m).shape != (n,):
                raise SpgnnError(f"{where}: {m} has shape {getattr(self, m).shape}, expected ({n},)")
        values = np.asarray(self.adj.data)
        if values.dtype.kind not in "biuf":
            raise SpgnnError(f"{where}: the adjacency's values must be real numbers, got {values.dtype}")
        if values.size and not (np.isfinite(values).all() and values.min() >= 0):
            bad = int((~np.isfinite(values) | (values < 0)).sum())
            raise SpgnnError(f"{where}: {bad} edge values of the adjacency are NaN, infinite or negative; a "
                             "normalised adjacency needs finite, non-negative edge weights")
        rows = np.flatnonzero(np.diff(self.adj.indptr))          # with an edge: reduceat sums their runs
        degree = np.add.reduceat(values, self.adj.indptr[rows], dtype=np.float64) if rows.size else values
        over = rows[degree > np.finfo(np.float32).max]
        if over.size:
            raise SpgnnError(f"{where}: the weighted in-degree (the sum of a node's edge weights) of {over.size} nodes "
                             f"exceeds float32's 3.4e38 (first at node {int(over[0])}), in which normalisation "
                             "computes: scale the edge weights down")
        check_features(self.x, where)
        if self.targets:
            check_targets(self.y, where)
        else:
            check_labels(self.y, self.num_classes, where)
        check_masks({s: getattr(self, f"{s}_mask") for s in SPLITS}, where)


def adjacency_matrix(adj, name: str = "graph") -> sp.csr_matrix:
    """`adj` as a scipy CSR matrix: a torch tensor read on the host (a sparse one of any layout through its COO
    entries, never made dense), anything else as scipy reads it; SpgnnError for what it cannot read."""
    import torch

    if isinstance(adj, torch.Tensor) and adj.layout != torch.strided:
        coo = adj.detach().cpu().to_sparse_coo().coalesce()
        if coo.ndim != 2:
            raise SpgnnError(f"dataset {name!r}: adjacency must be an n×n matrix, got a sparse tensor of shape "
                             f"{tuple(coo.shape)}")
        (rows, cols), values = coo.indices().numpy(), v.host_array(coo.values())
        return sp.csr_matrix((values, (rows, cols)), shape=tuple(coo.shape))
    try:
        return sp.csr_matrix(v.host_array(adj) if isinstance(adj, torch.Tensor) else adj)
    except (ValueError, TypeError):
        raise SpgnnError(f"dataset {name!r}: adjacency must be an n×n matrix (scipy sparse, a dense array or a torch "
                         f"tensor), got {type(adj).__name__}") from None


def edges_to_adj(src, dst, n: int, *, symmetric: bool = False, name: str = "graph",
                 weights=None) -> sp.csr_matrix:
    """Binary CSR A (n×n) with A[dst, src] = 1 for each edge, duplicates merged; or, given `weights` (one a
    directed edge), A[dst, src] = the sum of its edges' weights (as message passing sums duplicate edges). Checks
    that ids lie in [0, n) and weights are finite."""
    src = whole_ids(src, f"dataset {name!r}", "edge sources").ravel()
    dst = whole_ids(dst, f"dataset {name!r}", "edge targets").ravel()
    if src.shape != dst.shape:
        raise SpgnnError(f"dataset {name!r}: edge list has {src.size} sources but {dst.size} targets")
    if src.size:
        v.check_edge_ids(int(min(src.min(), dst.min())), int(max(src.max(), dst.max())), n, f"dataset {name!r}")
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float32).ravel()
        if weights.shape != src.shape or not np.isfinite(weights).all():
            raise SpgnnError(f"dataset {name!r}: edge weights must be {src.size} finite numbers, one an edge, got "
                             f"{weights.size} with {np.count_nonzero(~np.isfinite(weights))} not finite")
        if symmetric:
            raise SpgnnError(f"dataset {name!r}: weighted edges are not symmetrised (whose weight would the reverse "
                             "take?): give both directions with their weights")
    index = np.int32 if n <= np.iinfo(np.int32).max else np.int64    # scipy's, which would copy int64 ids
    src, dst = src.astype(index, copy=False), dst.astype(index, copy=False)
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    a = sp.csr_matrix((np.ones(src.size, np.float32) if weights is None else weights, (dst, src)), shape=(n, n))
    a.sum_duplicates()
    if weights is None:
        a.data[:] = 1.0
    return a


def is_symmetric(adj: sp.spmatrix) -> bool:
    diff = (adj != adj.T)
    return diff.nnz == 0


def symmetrize(adj: sp.spmatrix) -> sp.csr_matrix:
    """A ∪ Aᵀ as a binary matrix."""
    a = sp.csr_matrix(adj + adj.T)
    a.data[:] = 1.0
    return a


def add_self_loops(adj: sp.spmatrix) -> sp.csr_matrix:
    """A with a self-loop of weight one added where a node has none; one it has keeps its weight (PyG's
    ``add_remaining_self_loops``, as its GCNConv and GATConv add them)."""
    a = sp.csr_matrix(adj, dtype=np.float32, copy=True)
    a.eliminate_zeros()
    missing = (a.diagonal() == 0).astype(np.float32)
    return sp.csr_matrix(a + sp.diags(missing, format="csr"))


def gcn_norm(adj: sp.spmatrix) -> sp.csr_matrix:
    """Â = D^-½ (A + I) D^-½ with d_i the in-degree of i in A + I (as PyG's GCNConv, also for directed A)."""
    a = add_self_loops(adj)
    dinv = gcn_dinv(np.asarray(a.sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(dinv) @ a @ sp.diags(dinv), dtype=np.float32)


def gcn_dinv(deg: np.ndarray) -> np.ndarray:
    """d^-½ (0 where d = 0), float32: GCN's scaling of rows and columns."""
    deg = np.asarray(deg, dtype=np.float32)
    return np.where(deg > 0, deg ** -0.5, 0.0).astype(np.float32)


def mean_dinv(deg: np.ndarray) -> np.ndarray:
    """1/d (0 where d = 0), float32: the mean aggregation's row scaling."""
    deg = np.asarray(deg, dtype=np.float32)
    return np.where(deg > 0, 1.0 / np.maximum(deg, 1e-30), 0.0).astype(np.float32)


def mean_norm(adj: sp.spmatrix) -> sp.csr_matrix:
    """D^-1 A: row i averages over the in-neighbours of i (rows without in-edges stay zero)."""
    a = sp.csr_matrix(adj, dtype=np.float32)
    return sp.csr_matrix(sp.diags(mean_dinv(np.asarray(a.sum(axis=1)).ravel())) @ a, dtype=np.float32)



ROWS = 1 << 16      # rows of features whose absolute values `row_normalize` holds at once


def row_normalize(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Each feature row divided by its L1 norm Σ_j |x_ij| (its sum where no value is negative, as for bags of words;
    rows of zeros left as they are); `out=x` in place. By the sum alone, a row of signed values that nearly cancel
    grew without bound (Gaussian features reached |x| ≈ 1800)."""
    s = np.empty((x.shape[0], 1), dtype=x.dtype if x.dtype.kind == "f" else np.float64)    # (bool, int8: no sum)
    for i in range(0, x.shape[0], ROWS):                  # |x| a block of rows at a time, not a copy of x
        s[i:i + ROWS, 0] = np.abs(x[i:i + ROWS]).sum(axis=1)
    return np.divide(x, np.where(s == 0, 1, s), out=out)


def normalized_features(x: np.ndarray, norm: str, where: str, out: np.ndarray | None = None) -> np.ndarray:
    """X as ``--feature-norm`` `norm` makes it: "row" each row divided by its L1 norm (`row_normalize`; `out=x` in
    place), after `validate.check_row_norm` (SpgnnError naming `where` for what that would erase); "none" X itself."""
    if norm != "row":
        return x
    v.check_row_norm(x, where)
    return row_normalize(x, out=out)
