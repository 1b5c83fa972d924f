"""Bulk minibatch sampling written as sparse matrix products (Tripathy, Yelick, Buluç, MLSys 2024).

N is the layer's normalised n×n adjacency (``gcn_norm`` or ``mean_norm`` of A, A[dst, src] convention),
N_off its off-diagonal part (the pattern of A without self loops). k minibatches are sampled at once; the
frontier F_b of minibatch b starts as its seeds and grows by one hop per layer, output layer first.

    node-wise (GraphSAGE)  Q: |∪_b F_b|×n selects the distinct frontier vertices of the bulk, P = Q·N_off (a row
                           gather; each row is read by every minibatch whose frontier holds it); row F[r] of P,
                           normalised, is uniform over the in-neighbours of F[r]; min(fanout, deg) distinct ones are
                           drawn per (minibatch, F[r]) (the fanout smallest of per-entry uniform keys keyed by the
                           minibatch: a segmented top-k, a bounded heap per row).
    layer-wise (LADIES)    Q: k×n, row b the indicator of F_b; P = Q·(N_off∘N_off) = B·(R∘R) holds the squared column
                           norms of N_off[F_b, :], normalised to p_b; s vertices S_b drawn without replacement
                           (successive sampling, Efraimidis–Spirakis keys −log u / p); the layer's edges are
                           R = Q_F·N_off (Q_F: Σ_b|F_b|×n) masked to the columns S_b of each row's minibatch
                           (the mask applied by a sorted search rather than a third product, which would
                           materialise Σ_b |F_b|·s entries).

Both give each minibatch, per layer, a block B (|F_b| × |F_b ∪ new|): rows are the layer's output nodes,
columns its input nodes, the output nodes first (so GraphSAGE's root term and GCN's self loop see them).
Block values: the diagonal of N kept exactly; a sampled edge (i, j) weighted N_ij / π_j, π_j the inclusion
probability (constant within a row for node-wise; for LADIES the paper's min(1, s·p_j), 1 when s covers the
support: exact for s draws with replacement, while S_b is drawn without, whose inclusion probabilities are lower
for the likeliest columns, so those are weighted down against the rest, by up to about 18% on a small graph);
each row's off-diagonal part rescaled to N_off's row sum.
With fanout ≥ degree the block is exactly the rows F_b of N (mean for SAGE, D^-½(A+I)D^-½ for GCN).

Random keys come from a counter-based hash of (minibatch key, row vertex, column vertex), so a minibatch
is the same whichever bulk call, process or order draws it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .. import native
from ..errors import SpgnnError
from ..hashing import mix_key
from ..options import is_int
from ..sparse.csr import row_ids


@dataclass
class Minibatch:
    """One sampled minibatch: `nodes[l]` the global ids of layer l's input nodes (nodes[L] = the seeds, and
    each nodes[l+1] is a prefix of nodes[l]); `blocks[l]` the |nodes[l+1]|×|nodes[l]| CSR layer-l matrix."""

    key: int
    nodes: list
    blocks: list

    @property
    def seeds(self) -> np.ndarray:
        return self.nodes[-1]

    @property
    def inputs(self) -> np.ndarray:
        return self.nodes[0]


def _kernel(name: str, nargs: int, nints: int = 1):
    """The C kernel `name` of spgnn/csrc/sampling.c: nints int64, then nargs addresses."""
    return native.function(name, *[native.i64] * nints, *[native.addr] * nargs)


def _index(indices: np.ndarray) -> np.ndarray:
    """CSR column indices as the kernels take them: int32 or int64 as they are, other types as int64."""
    indices = np.ascontiguousarray(indices)
    return indices if indices.dtype in (np.int32, np.int64) else indices.astype(np.int64)


def uniform_keys(batch_keys: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """u ∈ (0, 1) per (batch key, row vertex, column vertex) triple: splitmix64 of the three, 53 bits."""
    keys, rows, cols = np.broadcast_arrays(np.asarray(batch_keys, np.uint64), np.asarray(rows, np.int64),
                                           np.asarray(cols, np.int64))
    keys, rows, cols = (np.ascontiguousarray(x) for x in (keys, rows, cols))
    out = np.empty(len(rows), np.float64)
    _kernel("uniform_keys", 4)(len(out), *map(native.ptr, (keys, rows, cols, out)))
    return out


def _row_counts(deg: np.ndarray, k) -> np.ndarray:
    """Output pointers of a segmented top-k: out_ptr[r+1] − out_ptr[r] = min(deg[r], k[r]) (k < 0 counts 0)."""
    return np.concatenate([[0], np.cumsum(np.minimum(deg, np.maximum(k, 0)), dtype=np.int64)])


def segmented_topk(indptr: np.ndarray, keys: np.ndarray, k) -> np.ndarray:
    """Positions (sorted) of the k (per row, or k[r]) smallest keys of each CSR row (all of a shorter row); of keys
    tied at the cut, those a bounded max-heap keeps (`spgnn/csrc/sampling.c`)."""
    indptr, keys = np.ascontiguousarray(indptr, np.int64), np.ascontiguousarray(keys, np.float64)
    if len(indptr) < 1 or len(keys) < indptr[-1]:
        raise ValueError(f"segmented_topk: {len(keys)} keys for a CSR pointer array ending at {indptr[-1:]}")
    deg = np.diff(indptr)
    if indptr[0] < 0 or (deg < 0).any():        # (the kernel would read and write past its arrays)
        raise ValueError("segmented_topk: a CSR pointer array starts at 0 or more and never decreases")
    out_ptr = _row_counts(deg, np.broadcast_to(np.asarray(k, np.int64), len(indptr) - 1))
    heap, pos = np.empty(out_ptr[-1], np.float64), np.empty(out_ptr[-1], np.int64)
    _kernel("segmented_topk", 5)(len(indptr) - 1, *map(native.ptr, (indptr, keys, out_ptr, heap, pos)))
    return pos


def _uniform_topk(p: sp.csr_matrix, at: np.ndarray, keys: np.ndarray, ids: np.ndarray, k: int):
    """Frontier position r reads row at[r] of p: (out_ptr, positions into p's entries, ascending per r) of its
    min(k, deg) entries with the smallest u(keys[r], ids[r], column)."""
    indptr, indices = np.ascontiguousarray(p.indptr, np.int64), _index(p.indices)
    at, ids = np.ascontiguousarray(at, np.int64), np.ascontiguousarray(ids, np.int64)
    keys = np.ascontiguousarray(keys, np.uint64)
    out_ptr = _row_counts(np.diff(indptr)[at], k)
    heap, pos = np.empty(out_ptr[-1], np.float64), np.empty(out_ptr[-1], np.int64)
    args = (indptr, indices, at, keys, ids, out_ptr, heap, pos)
    _kernel(f"uniform_topk_{native.suffix(indices.dtype)}", 8)(len(at), *map(native.ptr, args))
    return out_ptr, pos


def select_rows(a: sp.csr_matrix, ids: np.ndarray) -> sp.csr_matrix:
    """Q·A for the selection Q = `selection(ids, a.shape[0])` (len(ids)×a.shape[1]): the SpGEMM with one unit
    entry per row of Q is a row gather, done as one (parallel) copy; A's value type (indices gathered as int64,
    which scipy's constructor narrows to int32 where they fit)."""
    ids = np.ascontiguousarray(ids, np.int64)
    if len(ids) and ids.min() < 0:
        raise IndexError(f"select_rows: negative row id {ids.min()}")
    ptr = np.concatenate([[0], np.cumsum(np.diff(a.indptr)[ids], dtype=np.int64)])     # IndexError past the end
    indices, data = np.empty(ptr[-1], np.int64), np.empty(ptr[-1], a.data.dtype)
    src, values = _index(a.indices), np.ascontiguousarray(a.data)
    args = (np.ascontiguousarray(a.indptr, np.int64), src, values, ids, ptr, indices, data)
    _kernel(f"select_rows_{native.suffix(src.dtype)}", 7, 2)(len(ids), values.itemsize, *map(native.ptr, args))
    return sp.csr_matrix((data, indices, ptr), shape=(len(ids), a.shape[1]))


def selection(ids: np.ndarray, n: int, ptr: np.ndarray | None = None) -> sp.csr_matrix:
    """Q with Q[r, ids[r]] = 1 (len(ids)×n), or, given segment pointers `ptr`, the indicator rows
    Q[b, ids[ptr[b]:ptr[b+1]]] = 1 (len(ptr)−1 × n)."""
    if ptr is None:
        ptr = np.arange(len(ids) + 1)
    return sp.csr_matrix((np.ones(len(ids)), ids, ptr), shape=(len(ptr) - 1, n))


# `Sampler.block` keys each (minibatch, vertex) pair: over k minibatches of an n-node graph it looks them up in a
# table of all k·n keys where that is at most TABLE times the keys it has (E sampled edges and the frontier), else
# by sorting them (O(E log E), nothing of O(k·n): on a graph of 10⁸ nodes a table of 8 minibatches is 6 GiB).
# The two give the same blocks; on amazon-computers (8 minibatches of 256 seeds, fanouts 10, 5) the table took 11
# ms a call, the sort 25; on rmat:19 both about 75.
TABLE = 16


class Sampler:
    """Shared machinery: `sizes[l]` is hop l+1's fanout (node-wise) or vertex count (layer-wise), so
    sizes[0] feeds the model's last layer (PyG's ``num_neighbors`` order)."""

    kind = ""

    def __init__(self, norm_adj: sp.spmatrix, sizes, first: int = 0):
        """`norm_adj`: the normalised N (n×n), or rows first, first+1, … of it (a block row, m×n; then `diag`
        and `row_sum` hold those rows' only, `spgnn.sampling.distributed` completes them)."""
        sizes = list(sizes)
        if not sizes or any(int(s) != s or s <= 0 for s in sizes):
            raise SpgnnError(f"{self.kind} sampler: sizes per layer must be positive integers, got {sizes}")
        self.sizes = [int(s) for s in sizes]
        n_mat = sp.csr_matrix(norm_adj, dtype=np.float64)
        m, self.n = n_mat.shape
        at = (np.arange(m), first + np.arange(m))
        self.diag = n_mat.diagonal(k=first)[:m]                 # N[first + i, first + i]: none in an empty block
        off = sp.csr_matrix(n_mat - sp.csr_matrix((self.diag, at), shape=n_mat.shape))
        off.eliminate_zeros()
        off.sort_indices()
        self.off = off                                         # N_off
        self.row_sum = np.asarray(off.sum(axis=1)).ravel()     # Σ_j N_off[i, j]

    def sample(self, seeds: list, keys: list) -> list[Minibatch]:
        """Minibatches for seed arrays `seeds[b]` (global ids, distinct) drawn with integer keys `keys[b]`."""
        if len(seeds) != len(keys):
            raise SpgnnError(f"sample: {len(seeds)} seed sets but {len(keys)} keys")
        if bad := [k for k in keys if not is_int(k)]:
            raise SpgnnError(f"sample: key {bad[0]!r} is not an integer: each minibatch is drawn from an integer key")
        for b, s in enumerate(seeds):
            ids = np.asarray(s)
            if ids.ndim != 1:
                raise SpgnnError(f"sample: seed set {b} is an array of shape {ids.shape}: pass each minibatch's "
                                 "seeds as one flat array of node ids")
            if ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= self.n):
                raise SpgnnError(f"sample: seed set {b} holds {ids.dtype} ids outside [0, {self.n}): pass the global "
                                 "ids of the graph's nodes, as integers")
            if ids.size != np.unique(ids).size:
                raise SpgnnError(f"sample: seed set {b} names a node more than once: each minibatch's seeds are "
                                 "distinct (np.unique them)")
        ptr = np.concatenate([[0], np.cumsum([len(s) for s in seeds], dtype=np.int64)])
        front = np.concatenate([np.asarray(s, dtype=np.int64) for s in seeds]) if seeds else np.zeros(0, np.int64)
        nodes, ptrs, blocks = [front], [ptr], []
        for hop, size in enumerate(self.sizes):
            layer_keys = np.array([mix_key(k, hop) for k in keys], dtype=np.uint64)
            r, c, w = self.edges(front, ptr, size, layer_keys)
            front, ptr, block = self.block(front, ptr, r, c, w)
            nodes.append(front)
            ptrs.append(ptr)
            blocks.append(block)
        nodes, ptrs, blocks = nodes[::-1], ptrs[::-1], blocks[::-1]
        return [Minibatch(int(keys[b]), [v[p[b]:p[b + 1]] for v, p in zip(nodes, ptrs)],
                          [self._slice(blk, ptrs[l + 1], ptrs[l], b) for l, blk in enumerate(blocks)])
                for b in range(len(seeds))]

    def frontier_rows(self, front) -> sp.csr_matrix:
        """R = Q·N_off (len(front)×n, Q the selection of the frontier rows): the SpGEMM both samplers start
        from (`spgnn.sampling.distributed` fetches these rows from their owners instead)."""
        return select_rows(self.off, front)

    def edges(self, front, ptr, size, layer_keys):
        """The sampled edges (frontier position r, column vertex j, unscaled weight N_ij / π_j)."""
        raise NotImplementedError

    def block(self, front, ptr, r, c, w):
        """Next frontier (each F_b followed by its new vertices, sorted) and the block-diagonal matrix of all
        minibatches' blocks (Σ|F_b| × Σ|F'_b|), normalised as the module docstring says."""
        n, k, batch, sizes = self.n, len(ptr) - 1, row_ids(ptr), np.diff(ptr)
        fkeys, ekeys = batch * n + front, batch[r] * n + c             # (minibatch, vertex) keys
        table = k * n <= TABLE * (len(ekeys) + len(fkeys))     # a table over all k·n keys, else sort and search
        if table:
            mark = np.zeros(k * n, bool)
            mark[ekeys] = True
            mark[fkeys] = False
            new = np.flatnonzero(mark)                                 # sorted: grouped by minibatch
        else:
            new = np.setdiff1d(np.unique(ekeys), fkeys, assume_unique=True)
        nb, new_ptr = new // n, np.concatenate([[0], np.cumsum(np.bincount(new // n, minlength=k))])
        nptr = ptr + new_ptr
        fpos = nptr[batch] + np.arange(len(front)) - ptr[batch]        # F_b first, then its new vertices
        allkeys = np.empty(nptr[-1], np.int64)
        allkeys[fpos] = fkeys
        allkeys[nptr[nb] + sizes[nb] + np.arange(len(new)) - new_ptr[nb]] = new
        if table:                                                      # each edge's column: its key's place
            where = np.empty(k * n, np.int64)
            where[allkeys] = np.arange(len(allkeys))
            col = where[ekeys]
        else:
            order = np.argsort(allkeys)
            col = order[np.searchsorted(allkeys[order], ekeys)]
        scale = self.row_sum[front] / np.maximum(np.bincount(r, weights=w, minlength=len(front)), 1e-300)
        rows = np.concatenate([r, np.arange(len(front))])
        cols = np.concatenate([col, fpos])
        vals = np.concatenate([w * scale[r], self.diag[front]])
        mat = sp.csr_matrix((vals.astype(np.float32), (rows, cols)), shape=(len(front), len(allkeys)))
        mat.eliminate_zeros()
        return allkeys % n, nptr, mat

    @staticmethod
    def _slice(mat, rptr, cptr, b):
        return mat[rptr[b]:rptr[b + 1], cptr[b]:cptr[b + 1]]


class NodeSampler(Sampler):
    """GraphSAGE node-wise sampling: min(fanout, deg) distinct uniform in-neighbours per frontier vertex."""

    kind = "sage"

    def edges(self, front, ptr, size, layer_keys):
        rows, at = np.unique(front, return_inverse=True)        # a bulk's minibatches share frontier vertices:
        p = self.frontier_rows(rows)                            # P = Q·N_off over the distinct ones, row at[r] = F[r]'s
        # fused: keys u(minibatch, F[r], j) and the top-k of each row
        out_ptr, pos = _uniform_topk(p, at, layer_keys[row_ids(ptr)], front, size)
        return np.repeat(np.arange(len(front)), np.diff(out_ptr)), p.indices[pos], p.data[pos]


class LayerSampler(Sampler):
    """LADIES layer-wise sampling: s vertices per minibatch, drawn ∝ squared column norms of N_off[F_b, :]."""

    kind = "ladies"

    def probabilities(self, rmat, ptr) -> sp.csr_matrix:
        """p = row-normalised Q·(N_off∘N_off) = B·(R∘R), k×n (row b: squared column norms over F_b), from the
        frontier rows R = `frontier_rows` and B (k×|F|) the minibatch indicator."""
        p = sp.csr_matrix(selection(np.arange(rmat.shape[0]), rmat.shape[0], ptr) @ rmat.multiply(rmat).tocsr())
        sums = np.asarray(p.sum(axis=1)).ravel()
        p.data /= np.repeat(np.where(sums > 0, sums, 1.0), np.diff(p.indptr))
        return p

    def draw(self, p: sp.csr_matrix, size, layer_keys) -> np.ndarray:
        """Positions in p's entries of the s vertices drawn per row without replacement (successive sampling)."""
        b = row_ids(p.indptr)
        u = uniform_keys(layer_keys[b], np.zeros_like(b), p.indices)     # keyed by minibatch, not position
        return segmented_topk(p.indptr, -np.log(u) / p.data, size)

    def edges(self, front, ptr, size, layer_keys):
        rmat = self.frontier_rows(front)                        # R = Q_F·N_off
        p = self.probabilities(rmat, ptr)
        pick = self.draw(p, size, layer_keys)
        b = row_ids(p.indptr)
        chosen = b[pick] * self.n + p.indices[pick]            # keys (minibatch, vertex) of S_b, sorted
        order = np.argsort(chosen)
        chosen, pick = chosen[order], pick[order]
        r = row_ids(rmat.indptr)
        key = row_ids(ptr)[r] * self.n + rmat.indices
        at = np.minimum(np.searchsorted(chosen, key), max(len(chosen) - 1, 0))
        keep = chosen[at] == key if len(chosen) else np.zeros(len(key), bool)
        support = np.diff(p.indptr)[b[pick]]
        incl = np.where(support <= size, 1.0, np.minimum(1.0, size * p.data[pick]))   # π_j ≈ min(1, s·p_j)
        return r[keep], rmat.indices[keep], rmat.data[keep] / incl[at[keep]]


SAMPLERS = {"sage": NodeSampler, "ladies": LayerSampler}


def parse_sampler(spec: str) -> tuple[str, list[int]]:
    """'sage:15,10,5' → ('sage', [15, 10, 5]); SpgnnError for an unknown kind or sizes that are not
    positive integers."""
    kind, _, sizes = str(spec).partition(":")
    if kind not in SAMPLERS:
        raise SpgnnError(f"--sampler must be one of {', '.join(f'{k}:SIZES' for k in SAMPLERS)} "
                         f"(e.g. sage:15,10,5 or ladies:512,512), got {spec!r}")
    try:
        values = [int(s) for s in sizes.split(",")]
    except ValueError:
        raise SpgnnError(f"--sampler {spec!r}: sizes must be comma-separated integers, e.g. {kind}:15,10") from None
    if min(values) <= 0 or max(values) >= 2**31:
        raise SpgnnError(f"--sampler {spec!r}: every {'fanout' if kind == 'sage' else 'size'} must lie in [1, 2^31) "
                         "(one above a node's degree, or the nodes, takes them all)")
    return kind, values


def make_sampler(spec: str, norm_adj: sp.spmatrix) -> Sampler:
    """The `--sampler` spec's sampler over the normalised N, whole (n×n; a block row of it is
    `spgnn.sampling.distributed.make_distributed_sampler`'s)."""
    if norm_adj.shape[0] != norm_adj.shape[1]:
        raise SpgnnError(f"make_sampler takes N whole (n×n), got {norm_adj.shape[0]}×{norm_adj.shape[1]}: for a "
                         "block row use spgnn.sampling.distributed.make_distributed_sampler")
    kind, sizes = parse_sampler(spec)
    return SAMPLERS[kind](norm_adj, sizes)
