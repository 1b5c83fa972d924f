"""Multilevel graph partitioners from optional packages: METIS (pymetis), KaHIP (kahip), KaMinPar (kaminpar).

Each minimises the edge cut of the undirected pattern A + Aᵀ (no self-loops) under balance constraints;
each is registered always and says which package to install when it is missing.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import os
import tempfile

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from .partition import fill_empty, register, undirected


def _require(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SpgnnError(f"partitioner {extra!r} needs the {module} package: pip install 'spgnn[{extra}]' "
                         f"(or {module})") from None


SEEDS = 2**31 - 1       # the libraries take a 32-bit int seed (METIS seed + 1)


def library_seed(seed: int) -> int:
    """`seed` (any of --seed's [0, 2^63)) as the C libraries take it: seed mod (2^31 − 1), so that METIS's seed + 1
    fits a 32-bit int too; a seed below that is itself."""
    return int(seed) % SEEDS


@register("metis")
def metis(adj, P: int, seed: int = 0, *, balance_edges: bool = True, ufactor: int = 30) -> np.ndarray:
    """METIS k-way (METIS_PartGraphKway): minimum edge cut subject to each part's vertex count and
    (``balance_edges``) its block row's nnz, counting the self-loop GCN adds, staying within
    1 + ufactor/1000 of the mean: vertex weights (1, nnz(A[v, :]) + 1), a two-constraint partition."""
    if not 1 <= ufactor < 2**31:
        raise SpgnnError(f"metis's ufactor must be a whole number in [1, 2^31) (parts within 1 + ufactor/1000 of the "
                         f"mean), got {ufactor}")
    _require("pymetis", "metis")
    s = undirected(adj)
    n = s.shape[0]
    if P == 1:
        return np.zeros(n, np.int64)
    w = np.ones((n, 2 if balance_edges else 1), np.int64)
    if balance_edges:
        w[:, 1] += np.diff(sp.csr_matrix(adj).indptr)
    # METIS seeds its generator as srand does, 0 as 1: seed + 1 keeps seeds 0 and 1 apart (seed 0's parts as before)
    options = {"seed": library_seed(seed) + 1, "ufactor": int(ufactor), "numbering": 0}
    return fill_empty(_metis_kway(s, w, P, options), P)


def _metis_kway(s, w, P: int, options: dict) -> np.ndarray:
    """METIS_PartGraphKway on pattern `s` with the ncon = w.shape[1] vertex weights `w`, called through
    ctypes on the METIS that pymetis's extension carries: pymetis.part_graph passes ncon = 1 whatever the
    weights, so it cannot balance two quantities at once."""
    import pymetis
    import pymetis._internal as ext

    idx = {32: np.int32, 64: np.int64}[ext._idx_type_width()]
    lib = ctypes.CDLL(ext.__file__)

    def arr(a):
        return np.ascontiguousarray(a, dtype=idx)

    def ptr(a):
        return a.ctypes.data_as(ctypes.POINTER(np.ctypeslib.as_ctypes_type(idx)))

    opts = arr(np.zeros(40, idx))                                           # METIS_NOPTIONS
    lib.METIS_SetDefaultOptions(ptr(opts))
    for key, value in options.items():
        opts[pymetis._options_get_index(key)] = value
    n, ncon = w.shape
    scalars = [arr([n]), arr([ncon]), arr([P]), arr([0])]                 # nvtxs, ncon, nparts, objval
    xadj, adjncy, vwgt, part = arr(s.indptr), arr(s.indices), arr(w), arr(np.zeros(n, idx))
    status = lib.METIS_PartGraphKway(ptr(scalars[0]), ptr(scalars[1]), ptr(xadj), ptr(adjncy), ptr(vwgt), None,
                                     None, ptr(scalars[2]), None, None, ptr(opts), ptr(scalars[3]), ptr(part))
    if status != 1:                                                           # METIS_OK
        raise SpgnnError(f"METIS_PartGraphKway failed with status {status} (input, memory or other error)")
    return part.astype(np.int64)


_KAHIP_MODES = ("fast", "eco", "strong", "fastsocial", "ecosocial", "strongsocial")


def _check_imbalance(name: str, imbalance: float) -> None:
    if not 0 <= imbalance < math.inf:
        raise SpgnnError(f"{name}'s imbalance must be a non-negative number (parts within (1 + imbalance)·⌈n/P⌉), "
                         f"got {imbalance}")


@register("kahip")
def kahip(adj, P: int, seed: int = 0, *, imbalance: float = 0.03, mode: str = "fast") -> np.ndarray:
    """KaHIP's kaffpa: minimum edge cut with part sizes within (1 + imbalance)·⌈n/P⌉."""
    _check_imbalance("kahip", imbalance)
    if mode not in _KAHIP_MODES:
        raise SpgnnError(f"kahip mode must be one of {', '.join(_KAHIP_MODES)}, got {mode!r}")
    kahip_ = _require("kahip", "kahip")
    s = undirected(adj)
    n, nnz = s.shape[0], s.nnz
    _, parts = kahip_.kaffpa(np.ones(n, np.int64), s.indptr.astype(np.int64), np.ones(nnz, np.int64),
                             s.indices.astype(np.int64), P, float(imbalance), True, library_seed(seed),
                             _KAHIP_MODES.index(mode))
    return fill_empty(parts, P)


@register("kaminpar")
def kaminpar(adj, P: int, seed: int = 0, *, imbalance: float = 0.03, preset: str = "default") -> np.ndarray:
    """KaMinPar (one thread, context `preset`): minimum edge cut with part sizes within
    (1 + imbalance)·⌈n/P⌉. Its Python binding reads graphs from files only, so the graph goes through
    a temporary binary ParHIP file."""
    _check_imbalance("kaminpar", imbalance)
    km = _require("kaminpar", "kaminpar")
    if preset not in km.context_names():
        raise SpgnnError(f"kaminpar preset must be one of {', '.join(km.context_names())}, got {preset!r}")
    s = undirected(adj)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "graph.parhip")
        _write_parhip(path, s)
        graph = km.load_graph(path, km.GraphFileFormat.PARHIP)
    km.reseed(library_seed(seed))
    parts = km.KaMinPar(1, km.context_by_name(preset)).compute_partition(graph, P, float(imbalance))
    return fill_empty(parts, P)


def _write_parhip(path: str, s) -> None:
    """ParHIP binary graph: uint64 header (version 3 = unweighted, n, nnz), the n+1 byte offsets of the
    adjacency lists from the start of the file, then the neighbour ids."""
    n = s.shape[0]
    start = 8 * (3 + n + 1)
    with open(path, "wb") as f:
        f.write(np.array([3, n, s.nnz], np.uint64).tobytes())
        f.write((start + 8 * s.indptr.astype(np.uint64)).astype(np.uint64).tobytes())
        f.write(s.indices.astype(np.uint64).tobytes())
