"""One-pass streaming partitioners: vertices arrive in a seeded random order and each is placed at once,
seeing only the parts of its already placed neighbours (in A + Aᵀ).

For vertex v, with N_i = |N(v) ∩ S_i| its neighbours already in part i and |S_i| the part's size, v goes
to the part with room (|S_i| < C) that maximises

    LDG     (Stanton & Kliot, KDD 2012)        N_i · (1 − |S_i| / C),                 C = ⌈n/P⌉
    Fennel  (Tsourakakis et al., WSDM 2014)    N_i − α·γ·|S_i|^(γ−1),   α = m·P^(γ−1) / n^γ,  C = ⌈ν·n/P⌉

(m undirected edges; ties go to the smaller part, then the lower id).
"""

from __future__ import annotations

import math

import numpy as np

from .. import native
from ..errors import SpgnnError
from .partition import fill_empty, register, undirected

_LDG, _FENNEL = 0, 1


def stream(indptr, indices, verts, rows, parts, sizes, capacity, kind, alpha, gamma) -> None:
    """Place vertices verts[0], verts[1], … in turn (neighbours of verts[t]: indices[indptr[rows[t]]:…]),
    updating `parts` (int64, −1: not yet placed) and `sizes` (int64, P) in place (`spgnn/csrc/streaming.c`)."""
    for name, x in (("parts", parts), ("sizes", sizes)):
        if not (isinstance(x, np.ndarray) and x.dtype == np.int64 and x.flags.c_contiguous and x.flags.writeable):
            raise ValueError(f"stream: {name} must be a writeable contiguous int64 array, updated in place")
    indptr, indices, verts, rows = (np.ascontiguousarray(x, np.int64) for x in (indptr, indices, verts, rows))
    if len(verts) != len(rows):
        raise ValueError(f"stream: {len(verts)} vertices but {len(rows)} rows")
    a, i64, f64 = native.addr, native.i64, native.f64
    fn = native.function("stream_partition", i64, a, a, a, a, a, a, i64, i64, i64, f64, f64, a)
    neigh = np.empty(len(sizes), np.float64)
    fn(len(verts), *map(native.ptr, (indptr, indices, verts, rows, parts, sizes)), len(sizes), int(capacity),
       int(kind), float(alpha), float(gamma), native.ptr(neigh))


def settings(method: str, n: int, P: int, undirected_nnz: int, gamma: float = 1.5, nu: float = 1.1):
    """(kind, capacity, α, γ) of `method` ("ldg" or "fennel") for n vertices and the undirected pattern's
    nonzeros (both directions counted)."""
    if method == "ldg":
        return _LDG, math.ceil(n / P), 0.0, 0.0
    if not 1 < gamma < math.inf:
        raise SpgnnError(f"fennel's gamma must be a number above 1 (the balance term α·γ·|S_i|^(γ−1) grows with a "
                         f"part's size only then), got {gamma}")
    if not 1 <= nu < math.inf:
        raise SpgnnError(f"fennel's nu must be a number of at least 1 (a part's capacity ⌈ν·n/P⌉ must hold n/P "
                         f"nodes), got {nu}")
    try:
        alpha = (undirected_nnz / 2) * P ** (gamma - 1) / n ** gamma
    except OverflowError:
        raise SpgnnError(f"fennel's gamma {gamma} makes its balance weight α = m·P^(γ−1)/n^γ overflow: choose a "
                         "smaller gamma (Fennel's is 1.5)") from None
    return _FENNEL, min(n, max(math.ceil(nu * n / P), math.ceil(n / P))), alpha, gamma


def _run(s, P, seed, method, **params) -> np.ndarray:
    """Stream the vertices of the undirected pattern `s` in a seeded random order."""
    n = s.shape[0]
    order = np.random.default_rng(seed).permutation(n)
    parts, sizes = np.full(n, -1, np.int64), np.zeros(P, np.int64)
    kind, capacity, alpha, gamma = settings(method, n, P, s.nnz, **params)
    stream(s.indptr.astype(np.int64), s.indices.astype(np.int64), order, order, parts, sizes, capacity, kind,
           alpha, gamma)
    return fill_empty(parts, P)


@register("ldg")
def ldg(adj, P: int, seed: int = 0) -> np.ndarray:
    """Linear deterministic greedy: N_i·(1 − |S_i|/C), C = ⌈n/P⌉ (see the module docstring)."""
    return _run(undirected(adj), P, seed, "ldg")


@register("fennel")
def fennel(adj, P: int, seed: int = 0, *, gamma: float = 1.5, nu: float = 1.1) -> np.ndarray:
    """Fennel: N_i − α·γ·|S_i|^(γ−1), α = m·P^(γ−1)/n^γ, capacity ⌈ν·n/P⌉ (see the module docstring)."""
    return _run(undirected(adj), P, seed, "fennel", gamma=gamma, nu=nu)
