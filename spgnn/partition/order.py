"""The order of the nodes inside each part: which of a part's nodes gets which of its rows.

A part's order changes no result (a permutation of the rows of every block, undone by `Partition.to_original`)
and no byte sent (the same nodes in each halo), only where in memory a node's row lies. An SpMM Z = A·H
gathers the rows H_j of each row's nonzeros, so an order that places neighbours near each other makes those
gathers hit cache:

    natural   ascending original ids
    rcm       reverse Cuthill-McKee of the part's diagonal block A_pp: a breadth-first order from a node of
              low degree, reversed, which keeps each row's nonzeros near the diagonal (the block's bandwidth
              small)

rcm is computed per part, on A_pp alone (nnz_p + n_p work and memory), so it needs no more than a rank's share.
Measured on a 2-core machine (docs/benchmarks.md, "Node order"): the row-parallel SpMM 1.17-1.25× faster on
amazon-computers and rmat:17, a training step 2-5%.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError

ORDERS = ("rcm", "natural")


def check_order(name: str) -> str:
    """`name` if it is one of `ORDERS`, else SpgnnError."""
    if name not in ORDERS:
        raise SpgnnError(f"--node-order must be {' or '.join(ORDERS)}, got {name!r}")
    return name


def diagonal_block(adj, ids: np.ndarray, place: np.ndarray) -> sp.csr_matrix:
    """A[ids][:, ids] (m×m CSR) for the ascending node ids of one part; `place` (n,) holds each one's index in
    `ids` and -1 for every other node."""
    if ids.size == adj.shape[0]:                                      # the one part: A itself
        return adj
    rows = adj[ids]
    cols = place[rows.indices]
    keep = cols >= 0
    indptr = np.concatenate([[0], np.cumsum(keep)])[rows.indptr]
    return sp.csr_matrix((rows.data[keep], cols[keep], indptr), shape=(ids.size,) * 2)


def part_order(name: str, adj, natural) -> np.ndarray | None:
    """order (n,) int64: order[v] = v's place among its part's nodes, for the `Partition` `natural` (its
    parts in ascending ids); None for natural. rcm follows each row's nonzeros (A_pp's pattern as it is: for a
    directed graph its out-edges, not A + Aᵀ, which would double the nonzeros held)."""
    if check_order(name) == "natural":
        return None
    # imported here: csgraph (and the scipy.linalg it brings) is ~10 MB a natural-order process need not hold
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    adj, off = sp.csr_matrix(adj), natural.offsets
    order = np.empty(adj.shape[0], np.int64)
    place = np.full(adj.shape[0], -1, np.int32 if adj.shape[0] < 2**31 else np.int64)
    for p in range(natural.P):
        ids = natural.perm[off[p]:off[p + 1]]
        place[ids] = np.arange(ids.size)
        rcm = reverse_cuthill_mckee(diagonal_block(adj, ids, place), symmetric_mode=True)
        order[ids[rcm]] = np.arange(ids.size)
        place[ids] = -1
    return order
