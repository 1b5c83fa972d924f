"""Out-of-core partitioning: an edge-list folder (or an OGB folder, streamed into one first by
`spgnn.graph.ogb.to_edge_folder`) to a partitioned dataset without holding the graph.

The folder holds ``edges.npy`` ([E, 2] integers) or ``edges.txt``/``edges.csv`` (``src dst`` lines, ``#``
comments), ``features.npy`` [N, F], ``labels.npy`` [N], optional ``{train,val,test}_mask.npy`` and
``meta.json`` ({"directed": bool, "name": str}), as `spgnn.graph.datasets.read_edge_list` reads it; the graph is
the same (symmetrised unless directed, duplicates merged, self-loops dropped). Edges are read `chunk` at a
time and spilled into one bucket file per part (and, for the streaming partitioners, per block of the
stream order); features are read a stretch of rows at a time through a memory map whose pages are released
after each stretch. What stays in memory is O(n) vectors (parts, the renumbering, labels, masks), one chunk,
one bucket and the part being written.

- block, random: parts from n and the seed alone;
- ldg, fennel: the vertices stream in the seeded order of `spgnn.partition.streaming`; the bucket of a
  stream block holds the undirected pattern's rows of its vertices, so each vertex sees exactly the
  neighbours the in-memory partitioner gives it, and the parts are the same.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import shutil
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from ..graph import validate
from ..graph.build import default_split
from ..graph.datasets import (
    check_not_partitioned,
    edge_delimiter,
    edge_list_meta,
    folder_labels,
    folder_masks,
    read_edge_text,
)
from ..graph.ogb import is_ogb, to_edge_folder
from ..progress import each
from . import streaming
from .partition import block, fill_empty, get_partitioner, partitioner_params
from .partitioned import check_output, write
from .share import SPLITS, GraphInfo, Share, gcn_degree

METHODS = ("block", "random", "ldg", "fennel")
MAX_BLOCKS = 1024       # stream blocks at most (a small --chunk makes larger ones): files in the temporary folder


class EdgeFolder:
    """An edge-list folder read lazily: n, the edge chunks, features by rows, labels and masks."""

    def __init__(self, folder, chunk: int):
        self.folder, self.chunk = Path(folder), int(chunk)
        if self.chunk < 1:
            raise SpgnnError(f"--chunk must be at least 1, got {chunk}")
        f = self.folder
        check_not_partitioned(f)
        self.edge_file = next((f / e for e in ("edges.npy", "edges.txt", "edges.csv") if (f / e).is_file()), None)
        if self.edge_file is None:
            raise SpgnnError(f"{f}: no edges.npy, edges.txt or edges.csv in this folder")
        meta = edge_list_meta(f)
        self.directed, self.name = meta.get("directed", False), str(meta.get("name") or f.name)
        self.x = self._npy("features.npy", mmap=True)
        if self.x.ndim != 2:
            raise SpgnnError(f"{f / 'features.npy'}: expected [N, F] features, got shape {self.x.shape}")
        self.n = self.x.shape[0]
        self.y = folder_labels(f, self._npy("labels.npy"), self.name)     # class ids, or n×t binary targets
        if self.y.shape[0] != self.n:
            raise SpgnnError(f"dataset {self.name!r}: {f / 'features.npy'} has {self.n} rows but {f / 'labels.npy'} "
                             f"has {self.y.shape[0]}; both need one row per node")     # (as `assemble` says it)
        self.targets = self.y.shape[1] if self.y.ndim == 2 else 0
        self.num_classes = self.targets or (int(self.y.max()) + 1 if self.y.size else 0)
        validate.check_features(self.x[:0], str(f / "features.npy"))        # numbers, one column at least

    def _npy(self, name, mmap=False):
        try:
            return np.load(self.folder / name, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SpgnnError(f"cannot read {self.folder / name}: {e}") from None

    def masks(self, seed: int) -> dict:
        """The split masks as `spgnn.graph.datasets.read_edge_list` makes them (the folder's, or `default_split`)."""
        masks = dict(zip(SPLITS, folder_masks(self.folder) or default_split(self.y, self.num_classes, seed)))
        for key, m in masks.items():
            if np.shape(m) != (self.n,):
                raise SpgnnError(f"{self.folder}: the {key} mask has shape {np.shape(m)}, expected ({self.n},): one "
                                 "entry per node")
        validate.check_masks(masks, str(self.folder))
        return masks

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Feature rows `ids` (sorted), read a stretch of the file's rows at a time (about `chunk`/16 rows: as
        many bytes as a chunk of edges at 128 features), each stretch's pages released after it. Bad values stop
        it at the first stretch holding any, so the counts said are a lower bound for the file."""
        out = np.empty((len(ids), self.x.shape[1]), np.float32)
        stretch = max(1, self.chunk // 16)
        bounds = np.searchsorted(ids, np.arange(0, self.n + stretch, stretch))
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                stretch = np.asarray(self.x[ids[a:b]])
                try:
                    validate.check_features(stretch, str(self.folder / "features.npy"), ids[a:b])
                except SpgnnError as e:
                    raise SpgnnError(f"{e} (counted in nodes {ids[a]}..{ids[b - 1]} alone, the stretch read when "
                                     "found: the file may hold more)") from None
                out[a:b] = stretch
                release(self.x)
        return out

    def edges(self):
        """Yield [e, 2] int64 chunks (src, dst), ids checked."""
        if self.edge_file.suffix == ".npy":
            e = validate.edge_rows(self._npy(self.edge_file.name, mmap=True), str(self.edge_file))

            def read(i):
                c = validate.whole_ids(np.array(e[i:i + self.chunk]), str(self.edge_file), "edge endpoint ids")
                release(e)
                return c

            chunks = (read(i) for i in range(0, len(e), self.chunk))
        else:
            chunks = self._text_chunks()
        lo = None                                    # the smallest id so far: a list counted from 1 is said to be
        for c in chunks:
            if c.size:
                lo = int(c.min()) if lo is None else min(lo, int(c.min()))
                validate.check_edge_ids(lo, int(c.max()), self.n, str(self.edge_file))
            yield c

    def _text_chunks(self):
        delimiter = edge_delimiter(self.edge_file)
        with self.edge_file.open() as f:
            read = 0
            while (c := read_edge_text(self.edge_file, f, delimiter, self.chunk, read)).size:
                read += len(c)
                yield c

    def chunks(self) -> int | None:
        """How many chunks `edges` yields (None for a text file, whose lines are not counted ahead)."""
        return -(-len(self._npy(self.edge_file.name, mmap=True)) // self.chunk) if self.edge_file.suffix == ".npy" \
            else None

    def entries(self, why: str, digest=None):
        """Yield (rows, cols) chunks of A's nonzeros A[dst, src] (and A[src, dst] unless directed), self-loops
        dropped; duplicates are merged later. A stage "reading edges" (`why`: what the pass is for). `digest` (a
        hashlib object) is fed the (src, dst) pairs in the file's order: the same whatever the chunk."""
        for c in each(self.edges(), "reading edges", f"{self.edge_file.name} ({why})", self.chunks()):
            if digest is not None:
                digest.update(np.ascontiguousarray(c, np.int64).tobytes())
            src, dst = c[:, 0], c[:, 1]
            keep = src != dst
            src, dst = src[keep], dst[keep]
            yield (dst, src) if self.directed else (np.concatenate([dst, src]), np.concatenate([src, dst]))


def trim() -> None:
    """Hand the C heap's free memory back to the OS (glibc's malloc_trim): the chunks and buckets are tens
    of MB each, and glibc keeps freed ones of that size in the heap, which would grow the process by
    several chunks' worth."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def release(a: np.ndarray) -> None:
    """Drop the resident pages of a read-only memory map (clean file pages: read again when touched), so that
    reading a file through it never holds more than the stretch just read."""
    mm = getattr(a, "_mmap", None)
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED)


class Buckets:
    """Append-only files of entries (row, col) packed as row·2³² + col (int64), one file per bucket, in a
    folder of their own inside `where` (`close` deletes it). A file is open only while `add` appends to it:
    thousands of buckets (parts) take one file descriptor, not one each (a limit of 1024 open files is common)."""

    def __init__(self, count: int, where: Path, n: int):
        self.n, self.folder = n, Path(tempfile.mkdtemp(prefix="buckets-", dir=where))
        self.paths = [self.folder / f"bucket-{b}.bin" for b in range(count)]

    def add(self, bucket: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> None:
        """Append each entry (rows[k], cols[k]) to the file of bucket[k]."""
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(len(self.paths) + 1))
        key = (rows[order] << 32) | cols[order]
        for b in np.flatnonzero(np.diff(bounds)):
            with open(self.paths[b], "ab") as f:
                key[bounds[b]:bounds[b + 1]].tofile(f)

    def read(self, b: int, rows_of: np.ndarray) -> sp.csr_matrix:
        """Bucket b as an m×n CSR pattern (duplicates merged, columns sorted) whose row i is vertex rows_of[i]
        (`rows_of` sorted, m of them); built from the sorted keys: a few bytes a nonzero beyond the result."""
        key = np.fromfile(self.paths[b], np.int64) if self.paths[b].is_file() else np.empty(0, np.int64)
        key.sort()
        key = key[np.concatenate([[True], key[1:] != key[:-1]])] if key.size else key
        m = len(rows_of)
        rows = np.searchsorted(rows_of, key >> 32)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))])
        del rows
        cols = (key & 0xFFFFFFFF).astype(np.int32)
        return sp.csr_matrix((np.ones(key.size, np.float32), cols, indptr), shape=(m, self.n))

    def close(self) -> None:
        """Delete the files (their disk space is free for the next pass's)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _parts(src: EdgeFolder, P: int, method: str, seed: int, tmp: Path, params: dict) -> np.ndarray:
    """The part of every vertex, by `method`."""
    n = src.n
    if method == "block":
        return block(np.empty((n, 0)), P)
    if method == "random":
        return np.random.default_rng(seed).permutation(block(np.empty((n, 0)), P))
    order = np.random.default_rng(seed).permutation(n)
    position = np.empty(n, np.int64)
    position[order] = np.arange(n)
    per_block = max(1, src.chunk // 8, -(-n // MAX_BLOCKS))
    blocks = -(-n // per_block)
    buckets = Buckets(blocks, tmp, n)
    for rows, cols in src.entries("stream order"):     # the undirected pattern: each entry both ways
        r, c = np.concatenate([rows, cols]), np.concatenate([cols, rows])
        buckets.add(position[r] // per_block, r, c)
        trim()
    blocks_of = [np.sort(order[b * per_block:(b + 1) * per_block]) for b in range(blocks)]
    undirected_nnz = sum(buckets.read(b, blocks_of[b]).nnz for b in range(blocks))
    kind, capacity, alpha, gamma = streaming.settings(method, n, P, undirected_nnz, **params)
    parts, sizes = np.full(n, -1, np.int64), np.zeros(P, np.int64)
    for b in each(range(blocks), "partitioning", f"by {method} into {P} parts, streaming", blocks):
        verts = order[b * per_block:(b + 1) * per_block]
        a = buckets.read(b, blocks_of[b])
        streaming.stream(a.indptr.astype(np.int64), a.indices.astype(np.int64), verts,
                         np.searchsorted(blocks_of[b], verts), parts, sizes, capacity, kind, alpha, gamma)
        trim()
    buckets.close()
    return fill_empty(parts, P)


def partition_edge_folder(folder, output, P: int, method: str, seed: int = 0, chunk: int = 1 << 22,
                          **params) -> Path:
    """Partition the edge-list `folder` into P parts by `method` (block, random, ldg, fennel) and write the
    partitioned dataset `output`, reading `chunk` edges at a time."""
    if method not in METHODS:
        raise SpgnnError(f"--out-of-core partitions with {', '.join(METHODS)}, not {method!r}")
    check_output(output, folder)                                        # before any work, as the command line does
    params = partitioner_params(get_partitioner(method), **params)     # the in-memory partitioner's, checked alike
    base, sep, split = str(folder).rpartition(":")
    ogb, split = (base, split) if sep and split and not Path(folder).exists() and is_ogb(base) else (folder, None)
    if is_ogb(ogb):             # FOLDER or FOLDER:TYPE, streamed to an edge-list folder beside the output first
        Path(output).resolve().parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="spgnn-ogb-", dir=Path(output).resolve().parent) as tmp:
            return partition_edge_folder(to_edge_folder(ogb, tmp, split, chunk), output, P, method, seed, chunk,
                                         **params)
    src = EdgeFolder(folder, chunk)
    if src.n >= 2**31:
        raise SpgnnError(f"{folder}: {src.n} nodes; out-of-core partitioning handles fewer than 2^31")
    if not 1 <= P <= src.n:
        raise SpgnnError(f"--nparts must lie in [1, {src.n}] (the nodes of {src.name}), got {P}")
    where = Path(output).resolve().parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="spgnn-ooc-", dir=where) as tmp:
            return _write(src, output, P, method, seed, params, Path(tmp))
    except OSError as e:            # the input read, the temporary bucket files, the output written
        temporary = str(e.filename or "").startswith(str(where / "spgnn-ooc-"))
        raise SpgnnError(f"cannot partition {folder} out of core: {e}" + (
            f" (its temporary files go beside --output, in {where})" if temporary else "")) from None


def _write(src: EdgeFolder, output, P: int, method: str, seed: int, params: dict, tmp: Path) -> Path:
    """`partition_edge_folder`'s work, its temporary files in `tmp`: the parts, the bucket of each part's block row,
    the partitioned dataset written from them."""
    masks = src.masks(seed)                 # O(n), checked before any pass over the edges
    parts = _parts(src, P, method, seed, tmp, params)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(parts, minlength=P))])
    perm = np.argsort(parts, kind="stable")
    inv = np.empty(src.n, np.int64)
    inv[perm] = np.arange(src.n)
    buckets, digest = Buckets(P, tmp, src.n), hashlib.sha256(str(src.n).encode())
    for rows, cols in src.entries("bucketing by part", digest):
        r = inv[rows]
        buckets.add(np.searchsorted(offsets, r, side="right") - 1, r, inv[cols])
        trim()
    info = GraphInfo(src.name, src.n, 0, src.x.shape[1], src.num_classes, not src.directed,
                     {s: int(m.sum()) for s, m in masks.items()}, offsets, "edges:" + digest.hexdigest(),
                     src.targets, validate.label_counts(src.y, masks, src.num_classes))

    def shares():
        for p in range(P):
            trim()
            first, m = int(offsets[p]), int(offsets[p + 1] - offsets[p])
            a = buckets.read(p, np.arange(first, first + m))
            ids = perm[first:first + m]
            yield Share(info, p, a.indptr.astype(np.int64), a.indices.astype(np.int32), a.data,
                        gcn_degree(a, first), src.rows(ids), src.y[ids],
                        {s: masks[s][ids] for s in SPLITS}, ids.astype(np.int64))

    path = write(output, info, shares(), {"method": method, "params": params, "seed": seed})
    buckets.close()
    return path
