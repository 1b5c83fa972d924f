"""OGB link-property-prediction folders (ogbl-collab, ogbl-citation2, ogbl-ppa, ...) as OGB publishes them.

A folder (the unzipped download, or ``ogbl_NAME`` under the ``ogb`` package's root) holds

* ``raw/`` CSVs: ``edge.csv.gz`` (lines ``src,dst``: the training edges, the graph messages pass over),
  ``num-node-list.csv.gz``, ``num-edge-list.csv.gz``, ``node-feat.csv.gz`` (one row of floats a node); other files
  (``edge_weight``, ``edge_year``, ``node_year``) are not read;
* ``split/<TYPE>/{train,valid,test}.pt``, each a ``torch.save``'d dict of arrays, of one of two kinds:

      hits (collab, ppa, ddi)   {"edge": [E, 2], ...}, valid and test also {"edge_neg": [E', 2]}: the negatives
                                every positive of the split is ranked against
      mrr (citation2)           {"source_node": [E], "target_node": [E]}, valid and test also
                                {"target_node_neg": [E, M]}: row i the M negative targets of source_node[i]

``PATH:TYPE`` picks a split type when there are several. The .pt files are unpickled admitting numpy arrays alone
(`spgnn.graph.build.torch_saved`; OGB writes numpy arrays, in torch's zip or its older format), or, when they hold
tensors, by ``torch.load(weights_only=True)``: no code in them runs. The graph is symmetrised and its self-loops
dropped, as every spgnn graph; every training edge must be one of its edges. The figure OGB judges a split by is
Hits@K for the first kind (K = 100 for ogbl-ppa, 20 for ogbl-ddi, else 50, ogbl-collab's; ROC-AUC for
ogbl-vessel) and MRR for the second (`spgnn.metrics.hits_at_k`, `spgnn.metrics.mrr`). The dataset is known by its
folder's name, or, in a folder renamed, by a split type only one dataset has (ppa's ``throughput``, ddi's
``target``, vessel's ``spatial``).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import SpgnnError
from .build import assemble, reading, torch_saved
from .graph import Graph
from .ogb import _counts, _csv, _file, _name, refuse_heterogeneous

SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}
HITS_K = {"ogbl-ppa": 100, "ppassoc": 100, "ogbl-ddi": 20, "ddi": 20}     # OGB's master.csv; every other: 50
ROCAUC = {"ogbl-vessel", "vessel"}          # edge_neg folders OGB judges by ROC-AUC (its master.csv), not Hits@K
BY_SPLIT = {"throughput": "ogbl-ppa", "target": "ogbl-ddi", "spatial": "ogbl-vessel"}   # split types one dataset has


def is_ogbl(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is laid out as an OGB link-property-prediction dataset (``split/TYPE/train.pt``)."""
    return any(Path(folder).glob("split/*/train.pt"))


def ogbl_folder(spec) -> tuple[Path, str | None] | None:
    """(folder, split type or None) when dataset `spec` names an OGB link folder (``PATH`` or ``PATH:TYPE``)."""
    if not isinstance(spec, str):
        return None
    base, sep, kind = spec.rpartition(":")
    for path, k in ((Path(spec).expanduser(), None), (Path(base).expanduser(), kind) if sep and kind else (None, 0)):
        if path is not None and path.is_dir() and is_ogbl(path):
            return path, k
    return None


def read_pt(path: Path) -> dict:
    """The dict of arrays ``torch.save`` wrote to `path` (zip or legacy format), its values numpy arrays (see the
    module docstring: nothing in the file runs). Tensors of a zip file are memory-mapped: what is never indexed is
    never read."""
    if not path.is_file():
        raise SpgnnError(f"cannot read {path}: no such file")
    try:
        obj = torch_saved(path)
    except SpgnnError as e:
        if not isinstance(e.__cause__, pickle.UnpicklingError):
            raise
        import torch

        try:
            obj = torch.load(path, map_location="cpu", weights_only=True,      # tensors: torch's own safe loader
                             mmap=zipfile.is_zipfile(path))
        except Exception:
            raise e from None
    if not isinstance(obj, dict):
        raise SpgnnError(f"cannot read {path}: expected a dict of arrays, found {type(obj).__name__}")
    return {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v) for k, v in obj.items()}


def split_folder(folder: Path, kind: str | None) -> Path:
    """``split/<kind>``, or the only split type when `kind` is None."""
    kinds = sorted(p.name for p in (folder / "split").iterdir() if (p / "train.pt").is_file())
    if kind is None and len(kinds) != 1:
        raise SpgnnError(f"{folder / 'split'} holds {len(kinds)} split types ({', '.join(kinds)}): pick one with "
                         f"{folder}:TYPE")
    kind = kinds[0] if kind is None else kind
    if kind not in kinds:
        raise SpgnnError(f"{folder / 'split'} has no split type {kind!r} (with train.pt); it has {', '.join(kinds)}")
    return folder / "split" / kind


def num_nodes(folder: Path) -> int:
    """n, as ``raw/num-node-list`` says."""
    raw = folder / "raw"
    missing = [f"{s}.csv.gz" for s in ("edge", "num-node-list", "num-edge-list") if _file(raw, s) is None]
    if missing:
        raise SpgnnError(f"{raw}: missing {', '.join(missing)} (an OGB link folder's raw/ holds edge, num-node-list, "
                         f"num-edge-list and node-feat .csv.gz files)")
    return _counts(*(_csv(_file(raw, s), np.int64) for s in ("num-node-list", "num-edge-list")), folder)[0]


def _ids(a: np.ndarray, n: int, path: Path, what: str) -> np.ndarray:
    """`a` as int64 node ids, checked to lie in [0, n)."""
    if a.dtype.kind not in "iu":
        raise SpgnnError(f"{path}: {what} must be integer node ids, got {a.dtype}")
    a = a.astype(np.int64, copy=False)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise SpgnnError(f"{path}: {what} holds node ids {a.min()}..{a.max()}, but the graph has {n} nodes "
                         f"(raw/num-node-list): the split is of another graph")
    return a


def _positives(d: dict, path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(sources, targets) of a split file's positive edges, of either kind."""
    if "edge" in d:
        e = d["edge"]
        if e.ndim != 2 or e.shape[1] != 2:
            raise SpgnnError(f"{path}: 'edge' has shape {e.shape}, expected (E, 2)")
        e = _ids(e, n, path, "'edge'")
        return e[:, 0], e[:, 1]
    if {"source_node", "target_node"} <= d.keys():
        s, t = d["source_node"], d["target_node"]
        if s.ndim != 1 or s.shape != t.shape:
            raise SpgnnError(f"{path}: 'source_node' and 'target_node' have shapes {s.shape} and {t.shape}, "
                             f"expected (E,) both")
        return _ids(s, n, path, "'source_node'"), _ids(t, n, path, "'target_node'")
    if "head" in d or "relation" in d:
        raise SpgnnError(f"{path} is a knowledge-graph split (head, relation, tail: ogbl-wikikg2, ogbl-biokg); "
                         f"spgnn's link task predicts edges of one kind")
    raise SpgnnError(f"{path}: no positive edges: expected 'edge' [E, 2] or 'source_node' and 'target_node' [E] "
                     f"(found {', '.join(sorted(d)) or 'nothing'})")


@dataclass
class HeldOut:
    """The validation and test pairs of an OGB split, in original ids: for each split ("val", "test") of `pairs` the
    positives' src and dst [E] and the negatives: [E', 2] pairs all ranked against every positive (``hits``, K =
    `k`), or [E, k] targets, row e those of positive e, sharing its source (``mrr``; memory-mapped from the file
    `files[split]`, its rows read and checked as `share` selects them)."""

    name: str
    kind: str
    n: int
    metric: str
    k: int
    pairs: dict
    files: dict

    @property
    def label(self) -> str:
        """The figure's key: "hits@K", "mrr" or "rocauc"."""
        return f"hits@{self.k}" if self.metric == "hits" else self.metric

    def share(self, split: str, keep=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, negatives' src, negatives' dst) of `split`'s pairs whose source `keep` (original ids → bool
        mask; None: all) admits, in the order the file lists them: a rank's share of the pairs to score."""
        src, dst, neg = self.pairs[split]
        if self.metric == "mrr":
            rows = np.flatnonzero(keep(src)) if keep else np.arange(src.size)
            t = _ids(np.asarray(neg[rows]), self.n, self.files[split], "'target_node_neg'")
            return src[rows], dst[rows], np.repeat(src[rows], self.k), t.ravel()
        mine, theirs = (keep(src), keep(neg[:, 0])) if keep else (slice(None), slice(None))
        return src[mine], dst[mine], neg[theirs, 0], neg[theirs, 1]


def _negatives(d: dict, path: Path, n: int, src: np.ndarray) -> tuple[str, int, np.ndarray]:
    """(metric, k, negatives) of a valid/test file whose positives start at `src`: [E', 2] pairs (checked), or
    [E, k] targets (as the file holds them; `HeldOut.share` checks the rows it reads)."""
    if "edge_neg" in d:
        e = d["edge_neg"]
        if e.ndim != 2 or e.shape[1] != 2:
            raise SpgnnError(f"{path}: 'edge_neg' has shape {e.shape}, expected (E', 2): one negative pair a row")
        return "hits", 0, _ids(e, n, path, "'edge_neg'")
    if "target_node_neg" in d:
        t = d["target_node_neg"]
        if t.ndim != 2 or t.shape[0] != src.size or t.shape[1] < 1:
            raise SpgnnError(f"{path}: 'target_node_neg' has shape {t.shape}, expected ({src.size}, M): a row of "
                             f"negative targets for each source_node")
        if t.dtype.kind not in "iu":
            raise SpgnnError(f"{path}: 'target_node_neg' must be integer node ids, got {t.dtype}")
        return "mrr", t.shape[1], t
    raise SpgnnError(f"{path}: no negatives: expected 'edge_neg' [E', 2] or 'target_node_neg' [E, M] (found "
                     f"{', '.join(sorted(d))})")


def read_held_out(folder: str | os.PathLike, kind: str | None = None) -> HeldOut:
    """The validation and test pairs of OGB link folder `folder` (split type `kind`), checked (one SpgnnError)."""
    folder = Path(folder)
    where, n, pairs, files, kinds = split_folder(folder, kind), num_nodes(folder), {}, {}, set()
    for split in ("val", "test"):
        path = where / f"{SPLIT_FILES[split]}.pt"
        d = read_pt(path)
        src, dst = _positives(d, path, n)
        metric, k, neg = _negatives(d, path, n, src)
        kinds.add((metric, k))
        pairs[split], files[split] = (src, dst, neg), path
    if len(kinds) != 1:
        raise SpgnnError(f"{where}: valid.pt and test.pt hold negatives of different kinds ({sorted(kinds)})")
    name = _name(folder)
    judged = name if name in HITS_K or name in ROCAUC else BY_SPLIT.get(where.name, name)   # a folder renamed
    metric, k = kinds.pop()
    metric = "rocauc" if judged in ROCAUC else metric       # its positives against the file's negatives
    return HeldOut(name, where.name, n, metric, k or HITS_K.get(judged, 50), pairs, files)


FINGERPRINT = "ogbl:text:"      # `fingerprint`'s kind; "ogbl:HEX" (written before) hashed the gzip'd bytes


def fingerprint(folder: str | os.PathLike) -> str:
    """A digest of OGB link folder `folder`'s graph: the text of its raw node-count and edge files, decompressed a
    block at a time, so that the same CSVs gzip'd again (a gzip header holds a time and a name) or unzipped
    (``edge.csv``) give the same digest."""
    raw, digest = Path(folder) / "raw", hashlib.sha256()
    for path in (_file(raw, "num-node-list"), _file(raw, "edge")):
        with reading(path), (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            while block := f.read(1 << 24):
                digest.update(block)
    return FINGERPRINT + digest.hexdigest()


def read_ogbl(folder: str | os.PathLike, split: str | None = None) -> Graph:
    """The graph of OGB link folder `folder`: its training edges, symmetrised, with the node features; each edge of
    the split's train.pt checked to be one of them. Labels are 0 (a link folder has none)."""
    folder = Path(folder)
    refuse_heterogeneous(folder, "ogbl-biokg")
    raw, n = folder / "raw", num_nodes(folder)
    if (feat := _file(raw, "node-feat")) is None:
        raise SpgnnError(f"{raw}: no node-feat.csv.gz (as ogbl-ddi): spgnn's encoders need node features")
    _, e = _counts(*(_csv(_file(raw, s), np.int64) for s in ("num-node-list", "num-edge-list")), folder)
    edges = _csv(_file(raw, "edge"), np.int64, 2)
    if edges.shape != (e, 2):
        raise SpgnnError(f"{_file(raw, 'edge')}: the edge list has shape {edges.shape}, expected ({e}, 2) as "
                         f"num-edge-list says")
    x = _csv(feat, np.float32, 2)
    if x.shape[0] != n:
        raise SpgnnError(f"{feat}: node features have {x.shape[0]} rows, expected {n} as num-node-list says")
    g = assemble(_name(folder), _ids(edges[:, 0], n, raw, "edge.csv.gz"), _ids(edges[:, 1], n, raw, "edge.csv.gz"),
                 x, np.zeros(n, np.int64))
    train = split_folder(folder, split) / "train.pt"
    src, dst = _positives(read_pt(train), train, n)
    a = g.adj.tocsr()
    a.sort_indices()
    keys, want = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.indptr)) * n + a.indices, src * n + dst
    found = keys[np.minimum(np.searchsorted(keys, want), max(keys.size - 1, 0))] == want if keys.size else \
        np.zeros(want.size, bool)
    missing = np.flatnonzero(~found & (src != dst))
    if missing.size:
        i = missing[0]
        raise SpgnnError(f"{train}: {missing.size} of its {src.size} training edges are not edges of the graph in "
                         f"raw/ (the first: {src[i]} -> {dst[i]}): OGB's graph holds every training edge; use the "
                         f"split published with this graph")
    g.source = fingerprint(folder)
    return g
