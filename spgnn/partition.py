"""Vertex partitions: a part vector ``parts`` (n,) with ids in [0, P), and the renumbering it induces.

Internal ids are renumbered by part so that part p owns the contiguous rows offsets[p]:offsets[p+1];
``perm[new] = old`` and ``inv[old] = new``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from .errors import SpgnnError

PARTITIONERS = {}


def register(name: str):
    """Decorator: register ``fn(adj, P, seed) -> parts`` as partitioner `name`."""

    def wrap(fn):
        PARTITIONERS[name] = fn
        return fn

    return wrap


@register("block")
def block(adj, P: int, seed: int = 0) -> np.ndarray:
    """Contiguous id ranges of sizes differing by at most one."""
    n = adj.shape[0]
    return np.repeat(np.arange(P), [len(c) for c in np.array_split(np.arange(n), P)])


@register("random")
def random(adj, P: int, seed: int = 0) -> np.ndarray:
    """A seeded random assignment with part sizes differing by at most one."""
    parts = block(adj, P)
    return np.random.default_rng(seed).permutation(parts)


def check_parts(parts, n: int, P: int) -> np.ndarray:
    """`parts` as int64 after checking length n, ids in [0, P) and that no part is empty."""
    parts = np.asarray(parts)
    if parts.ndim != 1 or parts.shape[0] != n:
        raise SpgnnError(f"partition vector has length {parts.size} but the graph has {n} nodes")
    if parts.size and not np.issubdtype(parts.dtype, np.integer):
        raise SpgnnError(f"partition vector must hold integer part ids, got dtype {parts.dtype}")
    parts = parts.astype(np.int64)
    if n and (parts.min() < 0 or parts.max() >= P):
        raise SpgnnError(f"partition vector holds part ids {parts.min()}..{parts.max()}, "
                         f"but P = {P} parts need ids in [0, {P})")
    counts = np.bincount(parts, minlength=P)
    if (counts == 0).any():
        raise SpgnnError(f"part {int(np.flatnonzero(counts == 0)[0])} of {P} is empty: every process "
                         f"needs at least one node (use fewer processes or another partition)")
    return parts


def load_parts(path) -> np.ndarray:
    """A part vector from a .npy file or a text file with one part id a line."""
    path = Path(path)
    try:
        return np.load(path, allow_pickle=False) if path.suffix == ".npy" else np.loadtxt(path, dtype=np.int64)
    except (OSError, ValueError) as e:
        raise SpgnnError(f"cannot read partition file {path}: {e}") from None


def make_parts(method, adj, P: int, seed: int = 0) -> np.ndarray:
    """Part vector from a registered method name, a file path, or an array; always checked."""
    n = adj.shape[0]
    if P > n:
        raise SpgnnError(f"{P} processes but the graph has only {n} nodes: use at most {n} processes")
    if isinstance(method, str) and method in PARTITIONERS:
        parts = PARTITIONERS[method](adj, P, seed)
    elif isinstance(method, (str, Path)):
        if not Path(method).exists():
            raise SpgnnError(f"unknown partition {str(method)!r}: use one of {', '.join(PARTITIONERS)} "
                             f"or the path of a .npy/.txt part vector")
        parts = load_parts(method)
    else:
        parts = method
    return check_parts(parts, n, P)


@dataclass(frozen=True)
class Partition:
    """A checked part vector with its renumbering: part p owns new ids offsets[p]:offsets[p+1]."""

    parts: np.ndarray
    P: int

    @cached_property
    def perm(self) -> np.ndarray:
        """perm[new] = old id (stable: old order kept inside each part)."""
        return np.argsort(self.parts, kind="stable")

    @cached_property
    def inv(self) -> np.ndarray:
        inv = np.empty_like(self.perm)
        inv[self.perm] = np.arange(self.perm.size)
        return inv

    @cached_property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(np.bincount(self.parts, minlength=self.P))])

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def renumber(self, adj):
        """A with rows and columns in the new order: A'[new_i, new_j] = A[perm[new_i], perm[new_j]]."""
        p = self.perm
        return adj[p][:, p].tocsr()
