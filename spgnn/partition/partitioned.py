"""Partitioned datasets: a graph split into B parts, one folder a part, so that a rank reads only its share.

Layout (plain .npy files, memory-mappable; reading one part touches no other part's files):

    DIR/meta.json           format, graph (name, n, nnz, features, classes, symmetric, hash, split counts),
                            partition (id, B, method, parameters, seed, rows per part, metrics), library versions
    DIR/block_stats.npz     halo[i, j] = |R_ij|, block_nnz[i, j], diagonal[p] (self-loops) of the raw A: the
                            cost model's block statistics, B×B
    DIR/part-00000/         part.json (part, graph hash, partition id), indptr.npy, indices.npy, data.npy (the block row
                            of A: n_p×n CSR, columns in the partitioned ids, int32 below 2^31 nodes),
                            degree.npy (GCN's d of its rows), x.npy, y.npy, train_mask.npy, val_mask.npy,
                            test_mask.npy, node_ids.npy (original ids)

`InMemoryParts` offers the same interface over a `Graph` held in memory; `write` writes either (or any
stream of shares, as the out-of-core partitioner makes) to disk. `cached` partitions a named dataset once
into a cache folder keyed by graph hash, method, parameters, seed and B; `source_folder` finds that folder again
from the dataset file as it lies on disk, without reading the graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from ..comm.halo import owner
from ..cost import BlockStats
from ..errors import SpgnnError
from ..graph.datasets import source_files
from ..graph.validate import check_features, check_labels, check_masks, check_targets
from ..jsonfile import abandoned, replace_whole, temporary, unwritable
from ..progress import each
from ..sparse.csr import row_ids
from .partition import versions
from .share import SPLITS, GraphInfo, Share, graph_info, index_dtype, split_hash, split_sum

FORMAT = "spgnn-partitioned/1"
CACHE_ENV = "SPGNN_CACHE_DIR"
REMAKE = ("re-create it with spgnn partition --output (a folder of the partition cache: delete it, and the next run "
          "makes it again)")
ARRAYS = {"indptr": np.int64, "indices": (np.int32, np.int64), "data": np.float32, "degree": np.float32,
          "x": np.float32, "y": (np.int64, np.float32), "node_ids": np.int64, **{f"{s}_mask": np.bool_ for s in SPLITS}}


class Tally:
    """Block statistics summed from shares one at a time: `halo` and `block_nnz` (B×B), the self-loops
    (`diagonal`) and training nodes (`train`) of each part, and the graph's `split_sum`."""

    def __init__(self, B: int):
        self.halo, self.block_nnz = np.zeros((B, B), np.int64), np.zeros((B, B), np.int64)
        self.diagonal, self.train = np.zeros(B, np.int64), np.zeros(B, np.int64)
        self.split = 0

    def add(self, share: Share) -> None:
        """Row p of the statistics from part p's raw block row."""
        off, B, p = share.info.offsets, len(share.info.offsets) - 1, share.part
        self.halo[p] = np.bincount(owner(np.unique(share.indices), off), minlength=B)
        self.halo[p, p] = 0
        self.block_nnz[p] = np.bincount(owner(share.indices, off), minlength=B)
        rows = row_ids(share.indptr) + off[p]
        self.diagonal[p], self.train[p] = np.count_nonzero(share.indices == rows), share.masks["train"].sum()
        self.split += split_sum(share.node_ids, share.masks)

    def stats(self, sizes, symmetric: bool, norm: str, ordered: bool = False) -> BlockStats:
        return BlockStats.of_raw(sizes, self.halo, self.block_nnz, self.diagonal, symmetric, norm, ordered)

    def metrics(self, sizes) -> dict:
        from .metrics import block_metrics

        return block_metrics(sizes, self.halo, self.block_nnz, self.diagonal, self.train)


class InMemoryParts:
    """A `Graph` in memory under a `Partition`, offering the interface of `PartitionedDataset`."""

    def __init__(self, graph, partition, info: dict | None = None):
        self.graph, self.partition, self.nparts = graph, partition, partition.P
        self.info = graph_info(graph, partition)
        order = "natural" if partition.order is None else "given"          # make_partition's info names it
        self.partition_info = {"method": "array", "params": {}, "seed": 0, "node_order": order} | (
            info or partition.info)
        self._tally = None

    def share(self, part: int) -> Share:
        return Share.of(self.graph, self.partition, part, self.info)

    def tally(self) -> Tally:
        if self._tally is None:
            self._tally = Tally(self.nparts)
            for p in range(self.nparts):
                self._tally.add(self.share(p))
        return self._tally

    def stats(self, norm: str) -> BlockStats:
        """Block statistics of A normalised by `norm` ("gcn", "mean", "self-loops")."""
        return self.tally().stats(np.diff(self.info.offsets), self.info.symmetric, norm,
                                  self.partition_info["node_order"] == "rcm")

    def metrics(self) -> dict:
        return self.tally().metrics(np.diff(self.info.offsets))


class PartitionedDataset:
    """A partitioned dataset folder (see the module docstring); `share(p)` reads part p's files only."""

    def __init__(self, path):
        self.path = Path(path).expanduser()
        meta_file = self.path / "meta.json"
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as e:
            raise SpgnnError(f"cannot read {meta_file}: {e}; {REMAKE}") \
                from None
        if meta.get("format") != FORMAT:
            raise SpgnnError(f"{meta_file} is of format {meta.get('format')!r}, this spgnn reads {FORMAT!r}: "
                             f"{REMAKE}")
        self.meta, self._block_stats = meta, None
        try:
            g, p = meta["graph"], meta["partition"]
            self.nparts = int(p["nparts"])
            self.info = GraphInfo(g["name"], int(g["n"]), int(g["nnz"]), int(g["num_features"]),
                                  int(g["num_classes"]), bool(g["symmetric"]), dict(g["counts"]),
                                  np.asarray(p["offsets"], np.int64), g["graph_hash"], int(g.get("targets", 0)),
                                  dict(g.get("label_counts", {})), g.get("split_hash", ""), g.get("source", ""))
            self.partition_info = {k: p[k] for k in ("method", "params", "seed")} | {
                "node_order": p.get("node_order", "natural"), "folder": str(self.path)} | {
                k: p[k] for k in ("file_sha256", "split_seed") if k in p}    # a partition file's; the split's seed
        except KeyError as e:
            raise SpgnnError(f"{meta_file} lacks the key {e.args[0]!r}: {REMAKE}") from None
        except (TypeError, ValueError) as e:
            raise SpgnnError(f"{meta_file} holds a value of the wrong type ({e}): {REMAKE}") from None
        off = self.info.offsets
        if off.shape != (self.nparts + 1,) or off[0] != 0 or off[-1] != self.info.n or (np.diff(off) < 0).any():
            raise SpgnnError(f"{meta_file}: the part offsets {off.tolist()[:8]} do not split {self.info.n} nodes "
                             f"into {self.nparts} parts: {REMAKE}")

    def _file(self, part: int, name: str) -> Path:
        return self.path / f"part-{part:05d}" / name

    def share(self, part: int) -> Share:
        """Part `part` (0 ≤ part < B) from its folder, checked against meta.json."""
        if not isinstance(part, (int, np.integer)) or not 0 <= part < self.nparts:
            raise SpgnnError(f"{self.path} holds parts 0..{self.nparts - 1}, not part {part!r}")
        folder = self.path / f"part-{part:05d}"
        if not folder.is_dir():
            raise SpgnnError(f"{folder} is missing: the partitioned dataset is incomplete; {REMAKE}")
        try:
            tag = json.loads((folder / "part.json").read_text())
        except (OSError, ValueError) as e:
            raise SpgnnError(f"cannot read {folder / 'part.json'}: {e}; {REMAKE}") from None
        if tag.get("graph_hash") != self.info.graph_hash or tag.get("part") != part:
            raise SpgnnError(f"{folder} holds part {tag.get('part')} of another graph than "
                             f"{self.path / 'meta.json'} describes: {REMAKE}")
        if tag.get("partition_id") != self.meta["partition"].get("id"):     # both None in a folder written before ids
            raise SpgnnError(f"{folder} holds part {part} of another partition of this graph than "
                             f"{self.path / 'meta.json'} describes (written by another spgnn partition run): the "
                             f"parts of two partitions do not mix; {REMAKE}")
        arrays = {}
        for name, dtype in ARRAYS.items():
            f = folder / f"{name}.npy"
            try:
                a = np.load(f, allow_pickle=False)
            except (OSError, ValueError, EOFError) as e:
                raise SpgnnError(f"cannot read {f}: {e} (missing or truncated); {REMAKE}") from None
            allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,))]
            if a.dtype not in allowed:
                raise SpgnnError(f"{f} holds {a.dtype}, expected {' or '.join(map(str, allowed))}: {REMAKE}")
            arrays[name] = a
        n_p = int(self.info.offsets[part + 1] - self.info.offsets[part])
        nnz = int(arrays["indptr"][-1]) if arrays["indptr"].size else -1
        expect = {"indptr": (n_p + 1,), "indices": (nnz,), "data": (nnz,), "degree": (n_p,),
                  "x": (n_p, self.info.num_features), "y": (n_p, self.info.targets)[:1 + bool(self.info.targets)],
                  "node_ids": (n_p,),
                  **{f"{s}_mask": (n_p,) for s in SPLITS}}
        for name, shape in expect.items():
            if arrays[name].shape != shape:
                raise SpgnnError(f"{folder / (name + '.npy')} has shape {arrays[name].shape}, expected {shape} "
                                 f"(part {part} has {n_p} rows): {REMAKE}")
        check_share_values(arrays, folder, self.info)
        return Share(self.info, part, arrays["indptr"], arrays["indices"], arrays["data"], arrays["degree"],
                     arrays["x"], arrays["y"], {s: arrays[f"{s}_mask"] for s in SPLITS}, arrays["node_ids"])

    def block_stats(self) -> tuple:
        """(halo, block_nnz, diagonal) of block_stats.npz, read once and checked: B×B, B×B and B counts ≥ 0;
        else SpgnnError (`spgnn.plan` opens a folder through this on every rank, so all stop alike)."""
        if self._block_stats is None:
            f, B = self.path / "block_stats.npz", self.nparts
            try:
                with np.load(f, allow_pickle=False) as s:
                    arrays = s["halo"], s["block_nnz"], s["diagonal"]
            except (OSError, ValueError, KeyError, EOFError) as e:
                raise SpgnnError(f"cannot read {f}: {e}; {REMAKE}") from None
            for name, a, shape in zip(("halo", "block_nnz", "diagonal"), arrays, ((B, B), (B, B), (B,))):
                if a.shape != shape or a.dtype.kind not in "iu" or (a < 0).any():
                    raise SpgnnError(f"{f}: {name} is a {a.dtype} array of shape {a.shape}, expected counts of "
                                     f"shape {shape} ({B} parts): the folder is damaged; {REMAKE}")
            self._block_stats = arrays
        return self._block_stats

    def stats(self, norm: str) -> BlockStats:
        """Block statistics of A normalised by `norm` ("gcn", "mean", "self-loops")."""
        return BlockStats.of_raw(np.diff(self.info.offsets), *self.block_stats(), self.info.symmetric, norm,
                                 self.partition_info["node_order"] == "rcm")

    def metrics(self) -> dict | None:
        return self.meta["partition"].get("metrics")


def check_share_values(arrays: dict, folder: Path, info: GraphInfo) -> None:
    """A part's arrays (of the right shapes and dtypes) against meta.json: CSR row pointers from 0 and rising,
    column and node ids in 0..n−1, finite entries, degrees ≥ 1, labels in 0..C−1, finite features, no node in
    two splits; else SpgnnError naming the file."""
    def fail(name, what):
        raise SpgnnError(f"{folder / (name + '.npy')} {what}: the folder is damaged; {REMAKE}")

    ids = arrays["node_ids"]
    if arrays["y"].dtype != (np.float32 if info.targets else np.int64):
        fail("y", f"holds {arrays['y'].dtype} labels where meta.json says "
             + (f"{info.targets} binary targets (float32)" if info.targets else "class ids (int64)"))
    if arrays["indptr"][0] != 0 or (np.diff(arrays["indptr"]) < 0).any():
        fail("indptr", "does not rise from 0 (not CSR row pointers)")
    for name in ("indices", "node_ids"):
        bad = (arrays[name] < 0) | (arrays[name] >= info.n)
        if bad.any():
            fail(name, f"holds {int(bad.sum())} ids outside 0..{info.n - 1} (first {int(arrays[name][bad][0])})")
    if not np.isfinite(arrays["data"]).all():
        fail("data", "holds NaN or infinite entries")
    if not (arrays["degree"] >= 1).all():    # also false for NaN
        fail("degree", "holds degrees below 1 or NaN (d counts the self-loop)")
    check_features(arrays["x"], str(folder / "x.npy"), ids)
    if info.targets:
        check_targets(arrays["y"], str(folder / "y.npy"), ids=ids)
    else:
        check_labels(arrays["y"], info.num_classes, str(folder / "y.npy"), every_class=False, ids=ids)
    check_masks({s: arrays[f"{s}_mask"] for s in SPLITS}, f"{folder}/*_mask.npy", need_train=False, ids=ids)


def is_partitioned(path) -> bool:
    """Whether `path` (~ expanded) is a partitioned dataset folder (holds a meta.json of ours)."""
    try:
        meta = Path(path).expanduser() / "meta.json"
        return meta.is_file() and '"spgnn-partitioned/' in meta.read_text()
    except (OSError, TypeError, ValueError):
        return False


def check_output(path, source=None) -> Path:
    """`path` resolved, or SpgnnError unless a partitioned folder may be written there, replacing what is there:
    nothing, an empty folder, or a partitioned folder, but never the current folder or one above it, nor the
    dataset `source` it is made from (their files would be deleted)."""
    path = Path(path).resolve()
    here = Path.cwd().resolve()
    if path == here or path in here.parents:
        raise SpgnnError(f"--output {path} holds the current folder: name a new folder for the partitioned dataset")
    if source is not None and Path(source).exists() and path == Path(source).resolve():
        raise SpgnnError(f"--output {path} is the dataset it is made from: name a new folder")
    if path.exists() and not is_partitioned(path) and (not path.is_dir() or any(path.iterdir())):
        raise SpgnnError(f"--output {path} exists and is not a partitioned dataset folder, which is all a partitioned "
                         "dataset replaces: name a new or empty folder")
    above = next(p for p in path.parents if p.exists())         # where its folders would be made
    if not above.is_dir():
        raise SpgnnError(f"--output {path} cannot be written ({above} is a file): name a folder in a writable place")
    if why := unwritable(above):
        raise SpgnnError(f"--output {path} cannot be written ({why}): name a folder in a writable place")
    return path


def write(path, info: GraphInfo, shares, partition: dict, overwrite: bool = True) -> Path:
    """Write a partitioned dataset: `shares` yields the B shares in part order (each may be dropped once
    written), `partition` {method, params, seed}. The block statistics, nnz and the partition metrics are
    summed from the shares. Written into a temporary folder and renamed, so a folder at `path` is complete.
    A folder already at `path` (`check_output`) is replaced (`overwrite`), or else kept, ours dropped: so runs
    filling the same cache folder at once each end with the one complete folder."""
    path = check_output(path)
    ident = uuid.uuid4().hex            # this write's: a part folder copied in from another partition differs
    for old in abandoned(path):         # the folders of writers killed mid-write on this host, each a dataset's size
        shutil.rmtree(old, ignore_errors=True)
    tmp = temporary(path)
    tally, sizes = Tally(len(info.offsets) - 1), np.diff(info.offsets)
    try:
        tmp.mkdir(parents=True, exist_ok=False)
        for share in each(shares, "writing shares", f"{len(sizes)} parts to {path}", total=len(sizes)):
            folder = tmp / f"part-{share.part:05d}"
            folder.mkdir()
            for name, dtype in ARRAYS.items():
                a = share.masks[name[:-5]] if name.endswith("_mask") else getattr(share, name)
                kind = index_dtype(info.n) if name == "indices" else (np.float32 if info.targets else np.int64) \
                    if name == "y" else dtype
                np.save(folder / f"{name}.npy", np.ascontiguousarray(a, dtype=kind))
            (folder / "part.json").write_text(json.dumps({"part": share.part, "graph_hash": info.graph_hash,
                                                          "partition_id": ident}))
            tally.add(share)
        np.savez(tmp / "block_stats.npz", halo=tally.halo, block_nnz=tally.block_nnz, diagonal=tally.diagonal)
        g = info.as_dict() | {"nnz": int(tally.block_nnz.sum()), "split_hash": split_hash(tally.split)}
        meta = {"format": FORMAT,
                "graph": {k: g[k] for k in ("name", "n", "nnz", "num_features", "num_classes", "symmetric",
                                            "counts", "graph_hash", "targets", "label_counts", "split_hash",
                                            "source")},
                "partition": {"id": ident, "nparts": len(sizes), "method": str(partition.get("method")),
                              "params": partition.get("params", {}), "seed": partition.get("seed", 0),
                              "node_order": partition.get("node_order", "natural"),
                              "rows": sizes.tolist(), "offsets": g["offsets"], "metrics": tally.metrics(sizes)}
                             | {k: partition[k] for k in ("file_sha256", "split_seed") if k in partition},
                "versions": versions()}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
        if overwrite and path.exists():
            shutil.rmtree(path)
        try:
            os.replace(tmp, path)           # fails when another writer's folder is there
        except OSError:
            if overwrite or not is_partitioned(path):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SpgnnError(f"cannot write the partitioned dataset {path}: {e}; choose a writable folder") from None
    except BaseException:               # a share that failed its checks, an interrupt: no half-written folder left
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def write_parts(path, parts: InMemoryParts, overwrite: bool = True) -> Path:
    """Write an in-memory partitioned graph (`InMemoryParts`) to `path` (see `write` for `overwrite`)."""
    return write(path, parts.info, (parts.share(p) for p in range(parts.nparts)), parts.partition_info, overwrite)


# ----------------------------------------------------------------------------------------------------------
# the cache of partitioned datasets

def cache_root(cache_dir=None) -> Path:
    """--cache-dir, else $SPGNN_CACHE_DIR, else ~/.cache/spgnn/partitions; absolute, ~ expanded (a quoted '~/x' made
    a folder named ~ here, which the run then could not find), links kept."""
    root = cache_dir or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "spgnn" / "partitions"
    return Path(root).expanduser().absolute()


def cache_folder(root, graph, method, params: dict, seed: int, nparts: int) -> Path:
    """The cache folder of `graph` partitioned by `method` (a name, a file or an array) into `nparts` parts; a named
    partitioner's folder is another once its code or the versions it runs on change (`fingerprint`)."""
    from .partition import file_sha256, fingerprint, get_partitioner, graph_hash

    made_by = fingerprint(fn) if isinstance(method, str) and (fn := get_partitioner(method)) is not None else None
    if isinstance(method, (str, Path)) and Path(method).is_file():
        method = f"file:{file_sha256(method)}:recorded"     # (its folder records that digest, for `fit_parts`)
    elif not isinstance(method, str):
        method = "array:" + hashlib.sha256(np.ascontiguousarray(method, np.int64).tobytes()).hexdigest()
    key = json.dumps([FORMAT, graph_hash(graph.adj), hashlib.sha256(graph.x.tobytes()).hexdigest(),
                      hashlib.sha256(graph.y.tobytes() + np.stack([getattr(graph, f"{s}_mask") for s in SPLITS])
                                     .tobytes()).hexdigest(), method, made_by, params, seed, nparts], default=str)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{graph.name}-{method[:20]}-{nparts}")
    return Path(root) / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _file_stat(path) -> list | None:
    """[resolved path, size, modification time in ns] of a regular file, else None."""
    try:
        path = Path(path).expanduser().resolve()
        st = path.stat()
    except (OSError, TypeError, ValueError):
        return None
    return [str(path), st.st_size, st.st_mtime_ns] if path.is_file() else None


def _source_entry(dataset, options: dict, cache_dir=None) -> Path | None:
    """The index file of the cache that maps a dataset file as it lies on disk (path, size, modification time of
    each file its reader opens: all eight of a Planetoid file's), the code that reads it into a graph and draws its
    split where it has none (`fingerprint` of `load_dataset`'s and `default_split`'s files: a new split policy is a
    new entry) and the `options` that choose its partition (method, its file's or its code's `fingerprint`, seed,
    B, ...) to its cache folder; None where the dataset is not given as a file (a named, generated or folder
    dataset is read to find its folder)."""
    from ..graph import build, datasets
    from .partition import fingerprint, get_partitioner

    source = [_file_stat(f) for f in source_files(dataset) or [None]]
    if None in source:
        return None
    name = options.get("partition")
    fn = get_partitioner(name) if isinstance(name, str) else None
    method = _file_stat(name) if fn is None else fingerprint(fn)       # its file's, or its code's and versions'
    reader = [fingerprint(datasets.load_dataset), fingerprint(build.default_split)]
    key = json.dumps([FORMAT, source, reader, options, method], sort_keys=True, default=str)
    return cache_root(cache_dir) / "sources" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def source_folder(dataset, options: dict, cache_dir=None) -> Path | None:
    """The complete cache folder `remember_source` recorded for this dataset file, unchanged since (same size and
    modification time), and these options; None when there is none. A file rewritten with its old modification
    time is not noticed."""
    entry = _source_entry(dataset, options, cache_dir)
    try:
        folder = entry.parent.parent / json.loads(entry.read_text())["folder"]
    except (AttributeError, OSError, ValueError, KeyError, TypeError):
        return None
    return folder if is_partitioned(folder) else None


def remember_source(dataset, options: dict, folder, cache_dir=None) -> None:
    """Record that the dataset file `dataset` with `options` has its cache folder `folder` (`source_folder`);
    written atomically, and skipped where the cache cannot be written."""
    entry = _source_entry(dataset, options, cache_dir)
    if entry is None or Path(folder).parent != entry.parent.parent:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        replace_whole(entry, lambda tmp: tmp.write_text(json.dumps({"folder": Path(folder).name})))
    except OSError:
        pass


def cached(graph, partition_fn, method, params: dict, seed: int, nparts: int, cache_dir=None) -> Path:
    """The cache folder of `graph` partitioned into `nparts` parts, written first (by `partition_fn()`, which
    returns the `Partition`) unless a complete one is there; under the cache root as given either way (a relative
    or linked root is not resolved), so that `remember_source` finds it there."""
    folder = cache_folder(cache_root(cache_dir), graph, method, params, seed, nparts)
    if is_partitioned(folder):
        return folder
    if folder.exists() or folder.is_symlink():      # a write renames a whole folder in: this one was damaged since
        raise SpgnnError(f"the partition cache folder {folder} is damaged (no meta.json of a partitioned dataset: a "
                         "copy cut short, a file deleted): delete it, and the next run makes it again")
    root = folder.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpgnnError(f"the partition cache folder {root} is not writable ({e.strerror}): set --cache-dir or "
                         f"${CACHE_ENV} to a writable folder") from None
    if why := unwritable(root):
        raise SpgnnError(f"the partition cache folder {root} is not writable ({why}): set --cache-dir or "
                         f"${CACHE_ENV} to a writable folder")
    partition = partition_fn()
    write_parts(folder, InMemoryParts(graph, partition, partition.info | {"split_seed": seed}), overwrite=False)
    return folder
