"""The adjacencies a layer aggregates with: how A (A[i, j] ≠ 0 for each edge j → i) is normalised, as objects.

    gcn         Â = D^-½ (A + I) D^-½,  d_i = Σ_j (A + I)[i, j]     (GCNConv, APPNP, GCN2Conv; A + I adds a
                self-loop of weight one where a node has none, one it has keeps its weight, as PyG's)
    mean        D⁻¹ A,  d_i = Σ_j A[i, j]                          (SAGEConv, mean over in-neighbours)
    self-loops  A + I as gcn takes it                              (GATConv's attention pattern)
    sum         A as it is                                         (GINConv, sum over in-neighbours)

An `Adjacency` says how to normalise the whole matrix (`of`, the single-process reference) and a rank's block
row of it (`block_row`), whether it needs the degrees of remote columns (fetched from their owners through the
block row's halo at set-up), whether it keeps a symmetric A symmetric, and how it changes the block statistics
the cost model reads (`block_nnz`). A new one is registered with `register_adjacency` and named by a layer's
``adjacency`` attribute.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from ..options import defined_at
from ..sparse.csr import with_unit_diagonal
from . import graph as graphs

ADJACENCIES: dict = {}


class Adjacency:
    """A normalisation of A. Subclasses set `name` and implement `of` and `block_row`."""

    name = ""
    remote_degrees = False      # block_row needs d_j of columns held by other ranks (through the halo)
    symmetric = False           # True: a symmetric A stays symmetric (no blocks of Âᵀ to ship); claim it only where
                                # it holds (the default is always right: the backward ships Âᵀ's blocks)
    unit_diagonal = False       # the diagonal becomes one: a block row gains the self-loops it lacks

    def of(self, adj: sp.spmatrix) -> sp.csr_matrix:
        """The normalised n×n matrix of the whole A (float32 CSR)."""
        raise NotImplementedError

    def block_row(self, share, halo=None) -> sp.csr_matrix:
        """The normalised block row of `share` (a `spgnn.partition.share.Share`: its raw rows ``adj``, first row
        ``rows.start``, GCN degrees ``degree``), float32 with sorted indices; remote degrees through `halo`."""
        raise NotImplementedError

    def block_nnz(self, block_nnz: np.ndarray, sizes, diagonal) -> np.ndarray:
        """The nonzeros of each block (i, j) of the normalised A from the raw A's (`diagonal[p]`: self-loops of
        A in part p, `sizes[p]` its rows)."""
        block_nnz = np.array(block_nnz, dtype=np.int64)
        if self.unit_diagonal:
            block_nnz[np.diag_indices_from(block_nnz)] += np.asarray(sizes) - np.asarray(diagonal)
        return block_nnz

    def __repr__(self) -> str:
        return f"Adjacency({self.name!r})"


def register_adjacency(adjacency):
    """Register an `Adjacency` under its name (a name a class defined elsewhere holds is an error; the same
    definition run again, a notebook cell, replaces it): an instance, or a subclass (as a class decorator, like
    `register_layer`: an instance of it is registered and the class returned)."""
    if isinstance(adjacency, type) and issubclass(adjacency, Adjacency):
        register_adjacency(adjacency())
        return adjacency
    if not isinstance(adjacency, Adjacency):
        raise SpgnnError(f"register_adjacency takes an spgnn.Adjacency (a subclass or an instance of one), got "
                         f"{adjacency!r}")
    if not adjacency.name:
        raise SpgnnError(f"adjacency {adjacency!r} has no name: set the class attribute `name`")
    held = ADJACENCIES.get(adjacency.name)
    if held is not None and defined_at(type(held)) != defined_at(type(adjacency)):
        raise SpgnnError(f"adjacency {adjacency.name!r} is registered already ({held!r}): choose another name")
    ADJACENCIES[adjacency.name] = adjacency
    return adjacency


def get_adjacency(name) -> Adjacency:
    """The registered adjacency `name` (an `Adjacency` is returned as it is)."""
    if isinstance(name, Adjacency):
        return name
    try:
        return ADJACENCIES[name]
    except (KeyError, TypeError):
        raise SpgnnError(f"unknown adjacency {name!r}: choose one of {', '.join(ADJACENCIES)} or register one "
                         "with spgnn.register_adjacency") from None


def normalize(adj: sp.spmatrix, name) -> sp.csr_matrix:
    """A normalised by the adjacency `name`."""
    return get_adjacency(name).of(adj)


class GCN(Adjacency):
    name, remote_degrees, unit_diagonal, symmetric = "gcn", True, True, True

    def of(self, adj):
        return graphs.gcn_norm(adj)

    def block_row(self, share, halo=None):
        a = with_unit_diagonal(share.adj, share.rows.start)
        dinv = graphs.gcn_dinv(share.degree)
        remote = graphs.gcn_dinv(halo.fetch(share.degree)) if halo is not None and halo.group.size > 1 else \
            np.zeros(0, np.float32)
        col = np.concatenate([dinv, remote])[halo.local_columns(a.indices) if halo is not None else
                                             a.indices - share.rows.start]
        row = np.repeat(dinv, np.diff(a.indptr))
        return sp.csr_matrix((row * a.data * col, a.indices, a.indptr), shape=a.shape)


class Mean(Adjacency):
    name = "mean"

    def of(self, adj):
        return graphs.mean_norm(adj)

    def block_row(self, share, halo=None):
        a = share.adj
        return sp.csr_matrix(sp.diags(graphs.mean_dinv(np.asarray(a.sum(axis=1)).ravel())) @ a, dtype=np.float32)


class SelfLoops(Adjacency):
    name, unit_diagonal, symmetric = "self-loops", True, True

    def of(self, adj):
        return graphs.add_self_loops(adj)

    def block_row(self, share, halo=None):
        return with_unit_diagonal(share.adj, share.rows.start)


class Sum(Adjacency):
    name, symmetric = "sum", True

    def of(self, adj):
        a = sp.csr_matrix(adj, dtype=np.float32, copy=True)
        a.sort_indices()
        return a

    def block_row(self, share, halo=None):
        a = sp.csr_matrix(share.adj, dtype=np.float32, copy=True)
        a.sort_indices()
        return a


for _cls in (GCN, Mean, SelfLoops, Sum):
    register_adjacency(_cls())
