"""Test data: where the real datasets are ($SPGNN_DATA_DIR, else ./datasets), and small graphs with the
awkward cases (isolated nodes, nodes without in-edges, a hub), symmetric or directed."""

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spgnn.graph.graph import Graph, edges_to_adj

DATA = Path(os.environ.get("SPGNN_DATA_DIR") or "datasets").resolve()
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"real datasets not found in {DATA}: set "
                                "$SPGNN_DATA_DIR to the folder holding them")


def small_graph(n=60, f=12, classes=4, directed=False, seed=0, avg_degree=4) -> Graph:
    rng = np.random.default_rng(seed)
    m = n * avg_degree // 2
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    hub = 1
    src = np.concatenate([src, np.full(n // 3, hub)])
    dst = np.concatenate([dst, rng.integers(0, n, n // 3)])
    keep = (src != dst) & (src != n - 1) & (dst != n - 1)      # node n-1 isolated
    if directed:
        keep &= dst != n - 2                                      # node n-2 has no in-edges
    adj = edges_to_adj(src[keep], dst[keep], n, symmetric=not directed)
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = rng.integers(0, classes, n)
    y[:classes] = np.arange(classes)
    split = rng.permutation(n)
    masks = [np.isin(np.arange(n), split[a:b]) for a, b in ((0, n // 2), (n // 2, 3 * n // 4), (3 * n // 4, n))]
    return Graph(sp.csr_matrix(adj), x, y, *masks, name=f"small{'-directed' if directed else ''}",
                 num_classes=classes)
