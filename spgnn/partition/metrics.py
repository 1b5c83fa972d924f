"""Partition quality: what a part vector costs before any training runs.

A is n×n with A[i, j] ≠ 0 for each edge j → i, p(v) the part of node v, P parts; block row i holds the
rows of the nodes in part i.

- ``edge_cut`` = |{(u, v): A_uv ≠ 0, p(u) ≠ p(v)}|, the nonzeros whose row and column lie in different parts
  (for a symmetric A twice the number of undirected edges cut); ``edge_cut_fraction`` = edge_cut / nnz of
  A off its diagonal.
- halo: R_ij = {v : p(v) = j, A_uv ≠ 0 for some u in part i}, i ≠ j, the rows of H that part i needs from
  part j. ``1d-halo`` (and SAR) move exactly these rows: per SpMM of width f, part i receives
  Σ_j |R_ij|·f words in the forward and sends them back in the backward.
  ``comm_volume`` = Σ_i Σ_{j≠i} |R_ij| (rows per SpMM, all parts), ``comm_volume_max_recv`` = max_i Σ_j |R_ij|,
  ``comm_volume_max_send`` = max_j Σ_i |R_ij|.
- ``replication_factor`` = (n + comm_volume) / n: the mean number of parts holding a copy of a node's row of
  H during an SpMM (its owner plus each part whose block row touches it).
- imbalance of a node weight w: max_p W_p / mean_p W_p with W_p = Σ_{v in p} w_v (1 is perfect), for
  vertices (w = 1), edges (w = nnz of row v of A: the nnz of block row p) and training nodes (the mask).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from .order import part_order
from .partition import Partition, adjacency, check_parts, check_vector, get_partitioner, make_parts


def halo_rows(adj, parts: np.ndarray, P: int) -> np.ndarray:
    """The P×P matrix of |R_ij| (zero diagonal): distinct rows of part j that block row i touches."""
    a = sp.csr_matrix(adj)
    n = a.shape[0]
    row_part = np.repeat(parts, np.diff(a.indptr))
    remote = row_part != parts[a.indices]
    needed = np.unique(row_part[remote] * n + a.indices[remote])        # distinct (part i, column v)
    return np.bincount(needed // n * P + parts[needed % n], minlength=P * P).reshape(P, P)


def block_nnz(adj, parts: np.ndarray, P: int) -> np.ndarray:
    """The P×P matrix of the nonzeros of each block (i, j): rows in part i, columns in part j."""
    coo = sp.coo_matrix(adj)
    return np.bincount(parts[coo.row] * P + parts[coo.col], minlength=P * P).reshape(P, P)


def edge_cut(adj, parts: np.ndarray) -> int:
    """Nonzeros A_uv with p(u) ≠ p(v)."""
    a = sp.csr_matrix(adj)
    return int(np.count_nonzero(np.repeat(parts, np.diff(a.indptr)) != parts[a.indices]))


def imbalance(w) -> float:
    """max_p W_p / mean_p W_p of per-part totals W (1.0 when all are zero)."""
    w = np.asarray(w, dtype=np.float64)
    return float(w.max() / w.mean()) if w.mean() > 0 else 1.0


def partition_metrics(adj, partition: Partition | np.ndarray, train_mask=None) -> dict:
    """Every metric of the module docstring for `partition` of graph `adj` (A, n×n, or a Graph): a `Partition` or a
    part vector (n,) of P = its largest id + 1 parts (as `make_parts` returns), checked against A (what the
    partitioner cost is in a Partition's ``info``: ``seconds``, ``peak_rss_growth_bytes``)."""
    a = sp.csr_matrix(adjacency(adj))
    parts, P = (check_parts(partition.parts, a.shape[0], partition.P), partition.P) \
        if isinstance(partition, Partition) else check_vector(partition, a.shape[0])
    diagonal = np.bincount(parts[np.flatnonzero(a.diagonal())], minlength=P)
    train = np.bincount(parts, weights=train_mask, minlength=P) if train_mask is not None else None
    return block_metrics(np.bincount(parts, minlength=P), halo_rows(a, parts, P), block_nnz(a, parts, P), diagonal,
                         train)


def block_metrics(sizes, halo, block_nnz, diagonal, train=None) -> dict:
    """The metrics from block statistics alone (so that parts written separately can be summed up): rows
    per part, |R_ij|, the nonzeros of each block (i, j), each part's self-loops and training nodes."""
    sizes, halo, block_nnz = np.asarray(sizes), np.asarray(halo), np.asarray(block_nnz)
    n, nnz, volume = int(sizes.sum()), int(block_nnz.sum()), int(halo.sum())
    off_diagonal = nnz - int(np.sum(diagonal))
    cut = nnz - int(np.trace(block_nnz))

    return {
        "nparts": len(sizes), "n": n, "nnz": nnz,
        "edge_cut": cut, "edge_cut_fraction": cut / off_diagonal if off_diagonal else 0.0,
        "comm_volume": volume, "comm_volume_max_recv": int(halo.sum(axis=1).max()),
        "comm_volume_max_send": int(halo.sum(axis=0).max()), "replication_factor": (n + volume) / n,
        "vertex_imbalance": imbalance(sizes), "nnz_imbalance": imbalance(block_nnz.sum(axis=1)),
        "train_imbalance": imbalance(train) if train is not None else None,
    }


WARM_PARTS = 8      # first-use costs do not grow with P; a 16·P-node ring did (3 minutes at P = 10^5)


def warm_up(method, P: int, node_order: str = "natural") -> None:
    """Run partitioner `method`, and `node_order`, once on a 16·min(P, `WARM_PARTS`)-node ring into as many parts,
    so that the time and memory measured of a partition leave out first-use costs (imports, JIT compilation; rcm's
    import was charged to the first method compared). Paths and arrays need none. A partitioner that fails on the
    ring is left to fail, or not, on the graph itself, which its error names."""
    if P >= 1 and isinstance(method, str) and get_partitioner(method) is not None:
        P = min(P, WARM_PARTS)
        n = 16 * P
        ring = sp.csr_matrix((np.ones(2 * n), (np.arange(2 * n) % n, np.r_[np.arange(1, n + 1) % n,
                                                                            np.arange(-1, n - 1) % n])))
        try:
            part_order(node_order, ring, Partition(make_parts(method, ring, P), P))
        except SpgnnError:
            pass


COLUMNS = {   # header: (key, format)
    "method": ("method", "{}"), "P": ("nparts", "{}"), "cut %": ("edge_cut_fraction", "{:.1%}"),
    "volume (rows/SpMM)": ("comm_volume", "{:,}"), "max recv": ("comm_volume_max_recv", "{:,}"),
    "replication": ("replication_factor", "{:.3f}"), "vertex imb": ("vertex_imbalance", "{:.3f}"),
    "nnz imb": ("nnz_imbalance", "{:.3f}"), "train imb": ("train_imbalance", "{:.3f}"),
    "time s": ("seconds", "{:.3f}"), "peak MB": ("peak_rss_growth_bytes", "{:.1f}"),
}


def metrics_table(rows: list[dict], columns: dict = COLUMNS) -> str:
    """A Markdown table of metric dicts (one per row; absent values shown as –)."""
    def cell(row, key, fmt):
        v = row.get(key)
        if v is None:
            return "–"
        return fmt.format(v / 2**20 if key.endswith("bytes") else v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r, *spec) for spec in columns.values()) + " |" for r in rows]
    return "\n".join(lines)
