"""A rank's share of the graph: the block row of A of one vertex part and that part's node data.

Under a partition into B parts (`spgnn.partition.Partition`), part p owns the new ids offsets[p]:offsets[p+1].
Its share is

    indptr, indices, data   A[offsets[p]:offsets[p+1], :], n_p×n CSR, columns in the new ids, sorted (int32
                            indices below 2^31 columns, int64 beyond: `index_dtype`)
    degree                  d_i = Σ_j (A + I)[i, j] for its rows: what GCN's normalisation needs of a column's owner
    x, y, masks, node_ids   its rows of the features (n_p×f), labels (n_p, or n_p×t targets), split masks and
                            their original ids

and a few O(B) or scalar facts of the whole graph (`GraphInfo`). Nothing in it grows with n or nnz beyond
the part. `Share.of` slices one from an in-memory `Graph`; `spgnn.partition.partitioned` reads one from disk; both give
the same arrays. `normalized` turns the block row into the block row of Â (GCN, mean or self-loops), fetching
the degrees of remote columns from their owners when GCN needs them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from ..graph import graph as graphs
from ..graph.validate import label_counts
from ..hashing import fmix64
from ..sparse.csr import with_unit_diagonal

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class GraphInfo:
    """What every rank knows of the whole graph: sizes, the part offsets and the split counts."""

    name: str
    n: int
    nnz: int
    num_features: int
    num_classes: int
    symmetric: bool
    counts: dict                 # {"train": |T|, "val": ..., "test": ...}
    offsets: np.ndarray = field(compare=False)
    graph_hash: str = ""
    targets: int = 0             # binary targets per node (labels n×t), 0 for class ids
    label_counts: dict = field(default_factory=dict, compare=False)   # `spgnn.graph.validate.label_counts`
    split_hash: str = field(default="", compare=False)   # `split_hash` of the graph ("" where a folder lacks it)
    source: str = field(default="", compare=False)       # `spgnn.graph.Graph.source` of the graph it was made from

    def as_dict(self) -> dict:
        d = asdict(self)
        d["offsets"] = [int(v) for v in self.offsets]
        return d


@dataclass
class Share:
    """Part `part` of the graph (see the module docstring)."""

    info: GraphInfo
    part: int
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    degree: np.ndarray
    x: np.ndarray
    y: np.ndarray
    masks: dict
    node_ids: np.ndarray

    @property
    def rows(self) -> slice:
        """The new ids of this part's rows."""
        off = self.info.offsets
        return slice(int(off[self.part]), int(off[self.part + 1]))

    @property
    def n_rows(self) -> int:
        return self.indptr.size - 1

    @property
    def adj(self) -> sp.csr_matrix:
        """The block row of A (n_p×n)."""
        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.n_rows, self.info.n))

    @classmethod
    def of(cls, graph: graphs.Graph, partition, part: int, info: GraphInfo | None = None) -> Share:
        """Part `part` of an in-memory graph under `partition`."""
        if not 0 <= part < partition.P:
            raise SpgnnError(f"part {part} of a partition into {partition.P} parts: it must lie in [0, {partition.P})")
        ids = partition.perm[partition.offsets[part]:partition.offsets[part + 1]]
        a = block_row(graph.adj, partition, part)
        return cls(info or graph_info(graph, partition), part, a.indptr.astype(np.int64),
                   a.indices.astype(index_dtype(graph.n)), a.data.astype(np.float32),
                   gcn_degree(a, int(partition.offsets[part])), graph.x[ids], graph.y[ids],
                   {s: getattr(graph, f"{s}_mask")[ids] for s in SPLITS}, ids.astype(np.int64))

    def drop_features(self) -> None:
        """Free the features (once a layout has taken what it keeps of them)."""
        self.x = None

    def normalized(self, adjacency, halo=None) -> sp.csr_matrix:
        """The block row of Â for `adjacency` (an `spgnn.graph.adjacency.Adjacency` or its name), float32,
        sorted; the degrees of remote columns, where it needs them, from their owners through `halo`."""
        from ..graph.adjacency import get_adjacency

        adjacency = get_adjacency(adjacency)
        if halo is None and adjacency.remote_degrees and self.n_rows != self.info.n:
            raise SpgnnError(f"the {adjacency.name} block row of part {self.part} needs its remote columns' degrees: "
                             "pass the share's Halo (spgnn.comm.halo.Halo)")
        return adjacency.block_row(self, halo)


def split_sum(node_ids, masks: dict) -> int:
    """Σ over the nodes of splitmix64(8·id + the node's splits as bits), mod 2⁶⁴: summed over disjoint sets of nodes
    (parts, shares) it is the whole graph's, whatever the partition and order."""
    bits = sum(np.asarray(masks[s], np.uint64) << np.uint64(i) for i, s in enumerate(SPLITS))
    with np.errstate(over="ignore"):
        return int(fmix64(np.asarray(node_ids, np.int64).astype(np.uint64) * np.uint64(8) + bits).sum(dtype=np.uint64))


def split_hash(total: int) -> str:
    """The text of a graph's `split_sum`, as GraphInfo and a checkpoint's identity keep it."""
    return f"{total % 2**64:016x}"


def graph_info(graph: graphs.Graph, partition) -> GraphInfo:
    """The `GraphInfo` of an in-memory graph under `partition`."""
    from .partition import graph_hash

    masks = {s: getattr(graph, f"{s}_mask") for s in SPLITS}
    return GraphInfo(graph.name, graph.n, graph.nnz, graph.num_features, graph.num_classes,
                     bool(graph.is_symmetric), {s: int(m.sum()) for s, m in masks.items()},
                     np.asarray(partition.offsets, np.int64), graph_hash(graph.adj), graph.targets,
                     label_counts(graph.y, masks, graph.num_classes),
                     split_hash(split_sum(np.arange(graph.n), masks)), graph.source)


def index_dtype(n: int):
    """The dtype of column ids of an n-column matrix: int32 while they fit."""
    return np.int32 if n < 2**31 else np.int64


def block_row(adj, partition, part: int) -> sp.csr_matrix:
    """A'[offsets[p]:offsets[p+1], :] of the renumbered A' (A'[new_i, new_j] = A[perm[new_i], perm[new_j]])
    without forming A': the part's rows of A with their columns renumbered, sorted within each row."""
    rows = partition.perm[partition.offsets[part]:partition.offsets[part + 1]]
    a = sp.csr_matrix(adj)[rows]
    a = sp.csr_matrix((a.data.astype(np.float32), partition.inv[a.indices], a.indptr), shape=a.shape)
    a.sort_indices()
    return a


def gcn_degree(a: sp.csr_matrix, first: int) -> np.ndarray:
    """d_i = Σ_j (A + I)[i, j] of block row `a`: GCN's degree (float32, as `spgnn.graph.graph.gcn_norm` sums it)."""
    return np.asarray(with_unit_diagonal(a, first).sum(axis=1), dtype=np.float32).ravel()
