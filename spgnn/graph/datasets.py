"""Datasets: named real graphs, synthetic generators and user files, each returned as a validated Graph.

``load_dataset(spec)`` understands

* a known name (``KNOWN_DATASETS``): ``cora`` (bundled, needs no files), ``citeseer``, ``amazon-computers``,
  ``amazon-photo``, ``coauthor-cs``, ``squirrel`` or ``squirrel:K`` (fixed split K of 10);
* ``rmat:SCALE[:EDGEFACTOR]`` and ``sbm:N:K[:PIN:POUT[:F]]`` (synthetic, seeded; see ``rmat`` and ``sbm``);
* a path: an OGB node-property-prediction folder (``raw/`` or ``processed/`` and ``split/``, as ogbn-arxiv,
  -products and -papers100M are published; ``PATH:TYPE`` picks a split; see `spgnn.graph.ogb`), an OGB
  link-property-prediction folder (``split/TYPE/train.pt``, as ogbl-collab and -citation2; see
  `spgnn.graph.ogbl`), a folder of Planetoid files ``ind.NAME.{x,tx,allx,y,ty,ally,graph,test.index}`` (or one of those
  files), an ``.npz`` (CSR ``adj_*``/``attr_*`` arrays as in Shchur et al.'s benchmark, or ``edges`` [E, 2] +
  ``node_features`` + ``node_labels`` + ``train_masks`` [S, N] as in Platonov et al.'s), a ``.zip`` holding
  one such ``.npz``, or an edge-list folder (see ``read_edge_list``); ``PATH:K`` picks fixed split K.

Every graph is symmetrised unless its format says it is directed, and self-loops are dropped (the layers
add them back). Splits: the data's own where it has one, otherwise ``per_class_split`` (20 train and 30
validation nodes per class, the rest test, as in Shchur et al. 2018), seeded by ``seed``; where that would leave
test empty (no class of more than 50 nodes), a seeded random 60/20/20 split (`default_split`).
"""

from __future__ import annotations

import difflib
import io
import itertools
import json
import os
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from ..progress import stage
from . import validate
from .build import assemble, class_labels, from_arrays, reading, simple_adjacency, split_masks, unpickle
from .graph import Graph, add_self_loops, mean_norm
from .ogb import is_ogb, read_ogb
from .ogbl import is_ogbl, read_ogbl
from .validate import edge_pairs, whole_ids

KNOWN_DATASETS = {
    "cora": "Cora citations: 2,708 nodes, 1,433 features, 7 classes, Planetoid split (bundled)",
    "citeseer": "CiteSeer citations: 3,327 nodes, 3,703 features, 6 classes, Planetoid split",
    "amazon-computers": "Amazon Computers co-purchases: 13,752 nodes, 767 features, 10 classes, random split",
    "amazon-photo": "Amazon Photo co-purchases: 7,650 nodes, 745 features, 8 classes, random split",
    "coauthor-cs": "Coauthor CS co-authorships: 18,333 nodes, 6,805 features, 15 classes, random split",
    "squirrel": "Wikipedia Squirrel (heterophilous): 5,201 nodes, 2,089 features, 5 classes, "
                "10 fixed splits (squirrel:K picks split K, default 0)",
}
SYNTHETIC_SPECS = {
    "rmat:SCALE[:EDGEFACTOR]": "Graph500 R-MAT graph, 2^SCALE nodes, EDGEFACTOR*2^SCALE edge draws "
                               "(default EDGEFACTOR 16)",
    "sbm:N:K[:PIN:POUT[:F]]": "stochastic block model, N nodes in K classes, edge probabilities PIN inside "
                              "and POUT across classes (default: mean degree 8 + 2), F features (default 64)",
}
SQUIRREL_SPLITS = 10          # the fixed splits the squirrel file holds (squirrel:K picks one)
DATA_DIR_ENV = "SPGNN_DATA_DIR"
DEFAULT_DATA_DIRS = ("./datasets", "~/.cache/spgnn/datasets")
BUNDLED_DIR = Path(__file__).resolve().parent / "data"

# Where a named dataset's file may lie inside a data directory, first match wins.
_LOCATIONS = {
    "cora": ("planetoid/ind.cora.graph", "ind.cora.graph"),
    "citeseer": ("planetoid/ind.citeseer.graph", "ind.citeseer.graph"),
    "amazon-computers": ("amazon/amazon-computers.zip", "amazon-computers.zip",
                         "amazon/amazon_electronics_computers.npz", "amazon_electronics_computers.npz"),
    "amazon-photo": ("amazon/amazon-photo.zip", "amazon-photo.zip",
                     "amazon/amazon_electronics_photo.npz", "amazon_electronics_photo.npz"),
    "coauthor-cs": ("coauthor/coauthor-cs.zip", "coauthor-cs.zip", "coauthor/ms_academic_cs.npz",
                    "ms_academic_cs.npz"),
    "squirrel": ("heterophilous/squirrel.npz", "squirrel.npz"),
}
_PLANETOID_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_MAX_EDGES = 1 << 32          # synthetic graphs larger than this are refused (memory), not attempted


# ----------------------------------------------------------------------------------------------------------
# entry point and lookup

def load_dataset(spec: str, data_dir: str | None = None, seed: int = 0) -> Graph:
    """The graph named by ``spec`` (see the module docstring); ``seed`` drives random splits and
    generators; ``data_dir`` is where named datasets are looked for (see ``search_dirs``). ``cora`` comes
    from the bundled copy unless ``data_dir`` or $SPGNN_DATA_DIR holds its raw Planetoid files. A stage
    (`spgnn.progress`): "generating" for rmat:/sbm: specs, else "reading"."""
    synthetic = isinstance(spec, str) and spec.strip().partition(":")[0].lower() in ("rmat", "sbm")
    with stage("generating" if synthetic else "reading", str(spec)):
        return _load(spec, data_dir, seed)


def check_dataset(spec: str, data_dir: str | None = None) -> None:
    """SpgnnError where `load_dataset` would refuse `spec` before reading a graph: an empty spec, a named dataset
    not found (or with a bad ':' argument), a synthetic spec's numbers, a path that is not there. Nothing is read
    or generated (what a file holds is checked when it is read)."""
    _load(spec, data_dir, 0, read=False)


def _load(spec, data_dir, seed: int, read: bool = True) -> Graph | None:
    """`load_dataset`'s work; with `read` False only its checks of `spec` (None)."""
    if not isinstance(spec, str) or not spec.strip():
        raise SpgnnError(f"empty dataset spec; {_spec_help()}")
    spec = spec.strip()
    head, _, arg = spec.partition(":")
    key = head.lower()
    if key in KNOWN_DATASETS:
        return _load_named(key, arg, data_dir, seed, read)
    if key in ("rmat", "sbm") and not Path(spec).exists():
        return _load_synthetic(key, arg, spec, seed, read)
    before, sep, tail = spec.rpartition(":")
    path, base = Path(spec).expanduser(), Path(before).expanduser()
    if path.exists():
        return load_path(path, seed=seed) if read else None
    if sep and tail.isdigit() and (base.is_file() or base.is_dir() and not (is_ogb(base) or is_ogbl(base))):
        # a file's fixed split k; a folder of one split refuses it, saying why
        return load_path(base, seed=seed, split=int(tail)) if read else None
    if sep and tail and is_ogbl(base):
        return read_ogbl(base, split=tail) if read else None
    if sep and tail and is_ogb(base):
        return read_ogb(base, split=tail) if read else None
    if os.sep in spec or "/" in spec or path.suffix.lower() in (".npz", ".zip", ".txt", ".csv"):
        raise SpgnnError(f"no such file or folder: {spec} (for a dataset path give an existing {PATH_KINDS})")
    if key.startswith(("ogbn", "ogbl")):          # a name OGB's loaders take: spgnn reads the folder they make
        raise SpgnnError(f"unknown dataset {spec!r}: spgnn downloads no OGB dataset; give the folder OGB publishes "
                         f"it as, --dataset PATH/{head.replace('-', '_')}/ (docs/data.md, OGB folders)")
    near = difflib.get_close_matches(key, [*KNOWN_DATASETS, "rmat", "sbm"], n=1, cutoff=0.6)
    raise SpgnnError(f"unknown dataset {spec!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                     + f"; {_spec_help()}")


PATH_KINDS = "Planetoid folder, .npz/.zip file, edge-list folder, OGB folder or partitioned folder"   # --dataset PATH


def _spec_help() -> str:
    return f"known names: {', '.join(KNOWN_DATASETS)}; synthetic: {', '.join(SYNTHETIC_SPECS)}; or the path of a " \
        f"{PATH_KINDS}"


def search_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The folders searched for named datasets: ``data_dir``, else $SPGNN_DATA_DIR (os.pathsep-separated),
    else ``DEFAULT_DATA_DIRS`` (relative ones taken from the current directory)."""
    if data_dir is not None and str(data_dir):
        dirs = [str(data_dir)]
    elif os.environ.get(DATA_DIR_ENV):
        dirs = [d for d in os.environ[DATA_DIR_ENV].split(os.pathsep) if d]
    else:
        dirs = list(DEFAULT_DATA_DIRS)
    return [Path(d).expanduser().resolve() for d in dirs]


def find_dataset(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of the file holding the named dataset, or SpgnnError saying where it was looked for."""
    dirs = search_dirs(data_dir)
    for d in dirs:
        for rel in _LOCATIONS[name]:
            if (d / rel).is_file():
                return d / rel
    raise SpgnnError(f"dataset {name!r} not found: looked for {' or '.join(_LOCATIONS[name])} in "
                     f"{', '.join(str(d) + ('' if d.is_dir() else ' (missing)') for d in dirs)}; "
                     f"point at the folder holding it with --data-dir DIR or {DATA_DIR_ENV}=DIR")


def _load_named(name: str, arg: str, data_dir, seed: int, read: bool = True) -> Graph | None:
    split = None
    if arg:
        if name != "squirrel":
            raise SpgnnError(f"dataset {name!r} takes no ':' argument (only squirrel:K picks a fixed split)")
        if not (arg.isdigit() and int(arg) < SQUIRREL_SPLITS):
            raise SpgnnError(f"bad split in 'squirrel:{arg}': K must be a split number 0..{SQUIRREL_SPLITS - 1}")
        split = int(arg)
    explicit = (data_dir is not None and str(data_dir)) or os.environ.get(DATA_DIR_ENV)
    if not read:
        if name != "cora":                      # cora is bundled
            find_dataset(name, data_dir)
        return None
    if name == "cora" and not explicit:
        return read_npz(BUNDLED_DIR / "cora.npz", name="cora", seed=seed)
    try:
        path = find_dataset(name, data_dir)
    except SpgnnError:
        if name == "cora":          # the bundled copy equals the raw files (tests check it)
            return read_npz(BUNDLED_DIR / "cora.npz", name="cora", seed=seed)
        raise
    if path.name.startswith("ind."):
        return read_planetoid(path.parent, name)
    return read_npz(path, name=name, split=split, seed=seed)


def load_path(path: str | os.PathLike, seed: int = 0, split: int | None = None) -> Graph:
    """Graph from a file or folder: OGB folder, Planetoid folder or file, .npz, .zip holding an .npz, edge-list
    folder. Its errors name `path`."""
    path = Path(path)
    try:
        return _read_path(path, seed, split)
    except SpgnnError as e:
        raise e if str(path) in str(e) else SpgnnError(f"{path}: {e}") from None


def source_files(spec: str | os.PathLike) -> list[Path] | None:
    """The files `load_dataset(spec)` reads when `spec` names a dataset file: a Planetoid file's eight
    ``ind.NAME.*`` files (the graph is read from all of them), an archive alone; None for any other spec (a name,
    a synthetic graph, a folder, a split ``PATH:K``), whose files are not known without reading it."""
    spec = str(spec).strip() if isinstance(spec, (str, os.PathLike)) else ""
    if not spec or spec.partition(":")[0].lower() in KNOWN_DATASETS:
        return None
    path = Path(spec).expanduser()
    if not path.is_file():
        return None
    prefix = _planetoid_prefix(path.name)
    return [path.parent / f"ind.{prefix}.{part}" for part in _PLANETOID_PARTS] if prefix else [path]


def check_not_partitioned(path: Path) -> None:
    """SpgnnError when `path` is a partitioned dataset folder (`spgnn partition --output` wrote it), or a part folder
    of one, which no reader of whole graphs reads: the folder is trained on as it is."""
    from ..partition.partitioned import is_partitioned

    if is_partitioned(path):
        raise SpgnnError(f"{path} is a partitioned dataset folder already: train on it directly (spgnn train "
                         f"--dataset {path}), or partition anew from the dataset it was made from")
    if path.name.startswith("part-") and is_partitioned(path.parent):
        raise SpgnnError(f"{path} is one part of the partitioned dataset folder {path.parent}: give the folder (spgnn "
                         f"train --dataset {path.parent}), of which each process reads its own part")


def _read_path(path: Path, seed: int, split: int | None) -> Graph:
    if split not in (None, 0) and (path.is_dir() or _planetoid_prefix(path.name)):
        raise SpgnnError(f"{path} has one fixed split (or a random one by --seed), so ':{split}' cannot pick "
                         "another: drop it (an OGB folder's other splits are FOLDER:TYPE)")
    if path.is_dir():
        check_not_partitioned(path)
        if is_ogbl(path):
            return read_ogbl(path)
        if is_ogb(path):
            return read_ogb(path)
        if any((path / f).is_file() for f in ("edges.npy", "edges.txt", "edges.csv")):
            return read_edge_list(path, seed=seed)
        names = sorted({p for f in path.iterdir() if (p := _planetoid_prefix(f.name))})
        if len(names) == 1:
            return read_planetoid(path, names[0])
        if names:
            raise SpgnnError(f"{path} holds Planetoid files of several datasets ({', '.join(names)}): give "
                             f"one of its files instead, e.g. {path / f'ind.{names[0]}.graph'}")
        raise SpgnnError(f"{path}: found neither an edge list (edges.txt or edges.csv), Planetoid files "
                         f"(ind.NAME.x, ...) nor an OGB dataset (raw/ or processed/ beside split/) in this folder; "
                         f"for a named dataset kept under it, give the name and --data-dir {path}")
    prefix = _planetoid_prefix(path.name)
    if prefix:
        return read_planetoid(path.parent, prefix)
    if path.suffix.lower() in (".npz", ".zip") or (path.is_file() and zipfile.is_zipfile(path)):   # (a pipe: no)
        return read_npz(path, split=split, seed=seed)
    raise SpgnnError(f"cannot read {path}: not an .npz/.zip archive nor a Planetoid file (ind.NAME.PART); "
                     f"for an edge list give the folder holding edges.txt or edges.csv")


# ----------------------------------------------------------------------------------------------------------
# Planetoid

def _planetoid_prefix(filename: str) -> str | None:
    """``cora`` for ``ind.cora.x`` etc., None for any other file name."""
    if filename.startswith("ind."):
        for part in _PLANETOID_PARTS:
            if filename.endswith("." + part) and len(filename) > len("ind.") + len(part) + 1:
                return filename[len("ind."):-len(part) - 1]
    return None


def _matrix(obj, path: Path, dtype) -> sp.csr_matrix:
    """A pickled 2-D ndarray or sparse matrix as checked CSR."""
    with reading(path):
        if not (sp.issparse(obj) or (isinstance(obj, np.ndarray) and obj.ndim == 2)):
            raise SpgnnError(f"cannot read {path}: expected a 2-D matrix, found {type(obj).__name__}")
        m = sp.csr_matrix(obj, dtype=dtype)
        m.check_format(full_check=True)
        return m


def _edges_from_dict(graph, path: Path):
    """src, dst arrays of a pickled {node: [neighbours]} dict."""
    with reading(path):
        if not isinstance(graph, Mapping):
            raise SpgnnError(f"cannot read {path}: expected a dict of neighbour lists, found "
                             f"{type(graph).__name__}")
        lists = [list(v) for v in graph.values()]
        src = np.repeat(np.fromiter(graph.keys(), np.int64, len(graph)), [len(v) for v in lists])
        dst = np.fromiter(itertools.chain.from_iterable(lists), np.int64, src.size)
        return src, dst


def read_planetoid(folder: str | os.PathLike, name: str) -> Graph:
    """Planetoid ``ind.<name>.*`` files as PyG's ``read_planetoid_data`` reads them: node ``test.index[j]``
    takes row j of tx/ty, test ids missing from the index range (CiteSeer) get zero features and label 0;
    train = ids 0..len(y)-1, val = the next 500, test = test.index."""
    folder = Path(folder)
    files = {part: folder / f"ind.{name}.{part}" for part in _PLANETOID_PARTS}
    missing = [p.name for p in files.values() if not p.is_file()]
    if missing:
        raise SpgnnError(f"cannot read Planetoid dataset {name!r} in {folder}: missing {', '.join(missing)}")
    obj = {part: unpickle(p) for part, p in files.items() if part != "test.index"}
    with reading(files["test.index"]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        test_index = np.loadtxt(files["test.index"], dtype=np.int64, ndmin=1)
    x, tx, allx = (_matrix(obj[p], files[p], np.float32) for p in ("x", "tx", "allx"))
    y, ty, ally = (_matrix(obj[p], files[p], np.float32) for p in ("y", "ty", "ally"))
    src, dst = _edges_from_dict(obj["graph"], files["graph"])

    def need(ok, what):
        if not ok:
            raise SpgnnError(f"Planetoid dataset {name!r} in {folder} is inconsistent: {what}; the files are "
                             f"corrupt or come from different datasets")
    n_all, n_test = allx.shape[0], tx.shape[0]
    need(ally.shape[0] == n_all, f"allx has {n_all} rows but ally has {ally.shape[0]}")
    need(ty.shape[0] == n_test == test_index.size, f"tx, ty and test.index have {n_test}, {ty.shape[0]} and "
                                                   f"{test_index.size} rows")
    need(x.shape[1] == tx.shape[1] == allx.shape[1], "x, tx and allx differ in feature count")
    need(y.shape[1] == ty.shape[1] == ally.shape[1], "y, ty and ally differ in class count")
    need(test_index.size > 0 and test_index.min() >= n_all and np.unique(test_index).size == test_index.size,
         f"test.index must list distinct ids >= {n_all} (the number of allx rows)")
    n = int(test_index.max()) + 1
    known = max(n_all + n_test, int(max(src.max(), dst.max())) + 1 if src.size else 0)   # rows, or the graph's ids
    need(n <= known, f"test.index's largest id {n - 1} lies beyond the {known} nodes the rows of allx and tx and the "
                     "graph's ids describe")
    need(y.shape[0] + 500 <= n, f"{n} nodes leave no room for {y.shape[0]} train + 500 validation nodes")
    # row r of [allx; tx; 0] that holds node v's features (and labels)
    row = np.full(n, n_all + n_test, np.int64)
    row[:n_all] = np.arange(n_all)
    row[test_index] = n_all + np.arange(n_test)
    zero = sp.csr_matrix((1, allx.shape[1]), dtype=np.float32)
    feats = sp.vstack([allx, tx, zero], format="csr")[row].toarray()
    onehot = sp.vstack([ally, ty, sp.csr_matrix((1, ally.shape[1]), dtype=np.float32)], format="csr")[row]
    labels = np.asarray(onehot.argmax(axis=1)).ravel()
    train, val, test = (np.zeros(n, bool) for _ in range(3))
    train[:y.shape[0]] = True
    val[y.shape[0]:y.shape[0] + 500] = True
    test[test_index] = True
    return assemble(name, src, dst, feats, labels, masks=(train, val, test), num_classes=ally.shape[1])


# ----------------------------------------------------------------------------------------------------------
# .npz / .zip

def _open_npz(path: Path):
    """The NpzFile of ``path``, or of the single .npz member of a zip archive ``path``."""
    with reading(path):
        raw = path.read_bytes()
        names = zipfile.ZipFile(io.BytesIO(raw)).namelist()
        if not any(n.endswith(".npy") for n in names):
            inner = [n for n in names if n.endswith(".npz")]
            if len(inner) != 1:
                raise SpgnnError(f"cannot read {path}: expected an .npz or a zip holding one .npz, found "
                                 f"members {names[:5]}")
            raw = zipfile.ZipFile(io.BytesIO(raw)).read(inner[0])
        return np.load(io.BytesIO(raw), allow_pickle=False)


def _csr(npz, prefix: str, path: Path) -> sp.csr_matrix:
    """CSR matrix from arrays ``<prefix>_indices/_indptr/_shape`` and optional ``_data`` (default ones)."""
    indices = whole_ids(npz[prefix + "_indices"], str(path), f"{prefix}_indices")   # (1.5 was read as 1)
    indptr = whole_ids(npz[prefix + "_indptr"], str(path), f"{prefix}_indptr")
    shape = tuple(int(s) for s in whole_ids(npz[prefix + "_shape"], str(path), f"{prefix}_shape").ravel())
    data = npz[prefix + "_data"] if prefix + "_data" in npz.files else np.ones(indices.size, np.float32)
    problem = None
    if len(shape) != 2 or min(shape) < 0:
        problem = f"{prefix}_shape must hold two sizes, got {shape}"
    elif indptr.ndim != 1 or indptr.size != shape[0] + 1 or indptr[0] != 0 or (np.diff(indptr) < 0).any():
        problem = f"{prefix}_indptr must rise from 0 with {shape[0] + 1} entries"
    elif indices.ndim != 1 or np.shape(data) != indices.shape or indptr[-1] != indices.size:
        problem = f"{prefix}_indices/_data must both have {indptr[-1]} entries"
    elif indices.size and (indices.min() < 0 or indices.max() >= shape[1]):
        problem = f"{prefix}_indices must lie in [0, {shape[1]}), found {indices.min()}..{indices.max()}"
    if problem:
        raise SpgnnError(f"cannot read {path}: {problem}")
    return sp.csr_matrix((np.asarray(data, np.float32), indices, indptr), shape=shape)


def _first(keys, *candidates):
    return next((k for k in candidates if k in keys), None)


def _scalar(a, path, key: str, what: str, least=None):
    """The one value of .npz entry `key`; SpgnnError where it holds more or fewer, or (`least`) one below it (2.5
    classes were read as 2, an array of them was a traceback)."""
    a = np.asarray(a)
    if a.size != 1 or (least is not None and a.item() < least):
        raise SpgnnError(f"cannot read {path}: {key} must be {what}, got {a.tolist()!r}")
    return a.item()


def read_npz(path: str | os.PathLike, name: str | None = None, split: int | None = None,
             seed: int = 0) -> Graph:
    """Graph from an ``.npz`` (or a ``.zip`` holding one). Layouts, by array name:

    * edges: CSR ``adj_indices, adj_indptr, adj_shape`` [, ``adj_data``] (row → column is src → dst), or
      ``edges`` [E, 2] of src, dst pairs, or ``edge_index`` [2, E];
    * features: CSR ``attr_*``, or dense ``attr_matrix`` / ``features`` / ``node_features`` / ``x`` [N, F];
    * labels: ``labels`` / ``node_labels`` / ``y`` [N];
    * optional masks ``train_mask(s)``, ``val_mask(s)``, ``test_mask(s)``: [N] or [S, N] for S fixed splits;
    * optional scalars ``directed`` (bool, default False) and ``num_classes``.
    """
    path = Path(path)
    name = name or path.stem
    npz = _open_npz(path)
    keys = set(npz.files)
    with reading(path), npz:      # bad contents (a corrupt member, a string shape) raise SpgnnError too
        if {"adj_indices", "adj_indptr", "adj_shape"} <= keys:
            adj = _csr(npz, "adj", path).tocoo()
            keep = adj.data != 0
            if (adj.data[keep] != 1).any():         # read as 1 each, silently: a weighted graph trained unweighted
                raise SpgnnError(f"cannot read {path}: its adj_data holds edge weights (values other than 0 and 1), "
                                 "which a .npz dataset does not carry: give the weighted graph as a spgnn.Graph (its "
                                 "adj) or a PyG Data (edge_weight), or make adj_data ones to train it unweighted")
            src, dst, n = adj.row[keep], adj.col[keep], adj.shape[0]
            if adj.shape[0] != adj.shape[1]:
                raise SpgnnError(f"cannot read {path}: adjacency must be square, got shape {adj.shape}")
        elif "edges" in keys or "edge_index" in keys:
            key = "edges" if "edges" in keys else "edge_index"
            (src, dst), n = edge_pairs(npz[key], f"{path} ({key})"), None
        elif {"parts", "meta"} <= keys:         # what save_partition writes (as load_parts knows one)
            raise SpgnnError(f"{path} is a partition file (spgnn partition --output FILE.npz), not a graph: give it "
                             f"as --partition {path}, and as --dataset the graph it was made from")
        else:
            raise SpgnnError(f"cannot read {path}: no graph found: expected adj_indices/adj_indptr/adj_shape "
                             f"or edges [E, 2]; it holds {', '.join(sorted(keys))}")
        if {"attr_indices", "attr_indptr", "attr_shape"} <= keys:
            x = _csr(npz, "attr", path).toarray()
        elif (k := _first(keys, "attr_matrix", "features", "node_features", "x")):
            x = np.asarray(npz[k])
        else:
            raise SpgnnError(f"cannot read {path}: no node features found (attr_* CSR arrays, attr_matrix, "
                             f"features or node_features)")
        k = _first(keys, "labels", "node_labels", "y")
        if k is None:
            raise SpgnnError(f"cannot read {path}: no node labels found (labels or node_labels)")
        y = npz[k]
        found = {s: (npz[k] if (k := _first(keys, f"{s}_mask", f"{s}_masks")) else None)
                 for s in ("train", "val", "test")}
        directed = bool(_scalar(npz["directed"], path, "directed", "a bool")) if "directed" in keys else False
        num_classes = int(_scalar(whole_ids(npz["num_classes"], str(path), "num_classes"), path, "num_classes",
                                  "a whole number of at least 1", 1)) if "num_classes" in keys else None
    masks = split_masks(found, str(path), split)
    if n is not None and x.ndim == 2 and x.shape[0] != n:
        raise SpgnnError(f"dataset {name!r}: features have {x.shape[0]} rows but the adjacency has {n} nodes")
    return assemble(name, src, dst, x, y, directed=directed, masks=masks, seed=seed, num_classes=num_classes)


def save_npz(graph: Graph, out_path: str | os.PathLike) -> Path:
    """Write ``graph`` compactly in ``read_npz``'s CSR layout (features as CSR float32, bit-exact); SpgnnError for a
    graph with edge weights or self-loops, which that layout does not carry (read back, the graph would differ)."""
    if (graph.adj.data != 1).any() or graph.adj.diagonal().any():
        raise SpgnnError(f"save_npz writes binary graphs without self-loops, and {graph.name!r} has edge weights or "
                         "self-loops, which it would lose: keep the graph as it is (a spgnn.Graph, a PyG Data)")
    def small(a):
        a = np.asarray(a)
        return a.astype(np.min_scalar_type(int(a.max()) if a.size else 0))
    at = sp.csr_matrix(graph.adj.T)            # rows = sources, as Shchur et al.'s files
    at.sort_indices()
    attr = sp.csr_matrix(graph.x)
    attr.sort_indices()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = dict(adj_indices=small(at.indices), adj_indptr=small(at.indptr), adj_shape=np.array(at.shape),
                  attr_data=attr.data.astype(np.float32), attr_indices=small(attr.indices),
                  attr_indptr=small(attr.indptr), attr_shape=np.array(attr.shape), labels=small(graph.y),
                  num_classes=np.array(graph.num_classes), train_mask=graph.train_mask,
                  val_mask=graph.val_mask, test_mask=graph.test_mask)
    if not graph.is_symmetric:
        arrays["directed"] = np.array(True)
    with out.open("wb") as f:
        np.savez_compressed(f, **arrays)
    return out


def convert_planetoid(raw_dir: str | os.PathLike, name: str, out_path: str | os.PathLike) -> Path:
    """Convert Planetoid raw files ``<raw_dir>/ind.<name>.*`` to a compact .npz (how spgnn/data/cora.npz is
    made: ``convert_planetoid('planetoid/', 'cora', 'spgnn/graph/data/cora.npz')``)."""
    return save_npz(read_planetoid(raw_dir, name), out_path)


# ----------------------------------------------------------------------------------------------------------
# edge-list folders

def _read_npy(path: Path) -> np.ndarray:
    with reading(path):
        return np.load(path, allow_pickle=False)


def edge_delimiter(path: Path) -> str | None:
    """The column separator of an edge-list text file: a comma if its first data line has one, else whitespace."""
    with path.open() as f:
        first = next((s for s in (ln.split("#")[0].strip() for ln in f) if s), "")
    return "," if "," in first else None


def read_edge_text(path: Path, source=None, delimiter: str | None = None, max_rows: int | None = None,
                   first: int = 0) -> np.ndarray:
    """[e, 2] int64 of two integer columns separated by whitespace or commas ('#' starts a comment): the whole
    edge-list file `path`, or the next `max_rows` lines of `source` (the file open, read in chunks, `first` edge
    lines read before, which a bad line's row counts; the end: e = 0)."""
    layout = "expected two columns, integer node ids 'src dst' or 'src,dst' a line ('#' starts a comment)"
    weights = "an edge list holds no header and no weights (give weights through a spgnn.Graph or a PyG Data's " \
        "edge_weight)"
    with reading(path):
        delimiter = delimiter if source is not None else edge_delimiter(path)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")    # "input contained no data": an edgeless graph, the file's end
                e = np.loadtxt(path if source is None else source, np.int64, comments="#", delimiter=delimiter,
                               max_rows=max_rows, ndmin=2)
        except ValueError as err:       # a header, a weight column, a float id, a ragged line: numpy's words
            reason = str(err).strip().splitlines()[0].split("; use `usecols`")[0].rstrip(".")
            reason = re.sub(r"at row (\d+)", lambda m: f"at row {int(m[1]) + first}", reason)    # of the file
            raise SpgnnError(f"cannot read {path}: {layout}: {reason}; {weights}") from None
    if e.size == 0:
        return np.zeros((0, 2), np.int64)
    if e.shape[1] != 2:
        raise SpgnnError(f"cannot read {path}: {layout}, found {e.shape[1]} columns; {weights}")
    return e


def edge_list_meta(folder: Path) -> dict:
    """An edge-list folder's optional ``meta.json``, checked: {"directed": bool, "name": str}, both optional."""
    if not (folder / "meta.json").is_file():
        return {}
    with reading(folder / "meta.json"):
        meta = json.loads((folder / "meta.json").read_text())
    if not isinstance(meta, dict) or set(meta) - {"directed", "name"} \
            or not isinstance(meta.get("directed", False), bool):
        raise SpgnnError(f"cannot read {folder / 'meta.json'}: expected an object with optional keys "
                         f'"directed" (true/false) and "name", got {str(meta)[:100]}')
    return meta


def folder_labels(folder: Path, y, name: str) -> np.ndarray:
    """An edge-list folder's labels.npy as `class_labels` keeps them, every class held by a node; an error names the
    file, which is what to mend."""
    try:
        y = class_labels(y, name)
    except SpgnnError as e:
        raise SpgnnError(f"{folder / 'labels.npy'}: {str(e).removeprefix(f'dataset {name!r}: ')}") from None
    if y.ndim == 1:
        validate.check_labels(y, int(y.max()) + 1 if y.size else 0, str(folder / "labels.npy"))
    return y


def folder_masks(folder: Path) -> tuple | None:
    """An edge-list folder's (train, val, test) masks from its ``*_mask.npy`` files (`split_masks`), None without
    them; each is [N]: several fixed splits ([S, N]) go in a folder each."""
    found = {s: (_read_npy(folder / f"{s}_mask.npy") if (folder / f"{s}_mask.npy").is_file() else None)
             for s in ("train", "val", "test")}
    if several := next((s for s, m in found.items() if m is not None and m.ndim != 1), None):
        raise SpgnnError(f"{folder / f'{several}_mask.npy'}: a mask of an edge-list folder is [N], got shape "
                         f"{found[several].shape}; for several fixed splits, make one folder a split")
    return split_masks(found, str(folder), None)


def read_edge_list(folder: str | os.PathLike, seed: int = 0) -> Graph:
    """Graph from a folder holding ``edges.npy`` ([E, 2], or [2, E] as PyG's edge_index), ``edges.txt`` or
    ``edges.csv`` (lines ``src dst`` or ``src,dst``, node ids 0..N-1, ``#`` comments), ``features.npy``
    [N, F], ``labels.npy`` [N], optional boolean ``train_mask.npy``/``val_mask.npy``/``test_mask.npy`` [N]
    (without them: `default_split`; without val: none; without test: all the rest) and optional
    ``meta.json`` {"directed": bool, "name": str}."""
    folder = Path(folder)
    edge_file = next((folder / f for f in ("edges.npy", "edges.txt", "edges.csv") if (folder / f).is_file()), None)
    if edge_file is None:
        raise SpgnnError(f"{folder}: no edges.npy, edges.txt or edges.csv in this folder")
    meta = edge_list_meta(folder)
    for f in ("features.npy", "labels.npy"):
        if not (folder / f).is_file():
            raise SpgnnError(f"{folder}: missing {f} (an edge-list folder needs features.npy [N, F] and "
                             f"labels.npy [N])")
    src, dst = edge_pairs(_read_npy(edge_file), str(edge_file)) if edge_file.suffix == ".npy" else \
        read_edge_text(edge_file).T
    name = str(meta.get("name") or folder.name)
    x, y = _read_npy(folder / "features.npy"), folder_labels(folder, _read_npy(folder / "labels.npy"), name)
    validate.check_features(x, str(folder / "features.npy"))        # (named here: Graph checks them as the dataset)
    return assemble(name, src, dst, x, y, directed=meta.get("directed", False), masks=folder_masks(folder),
                    seed=seed, files=(f"{folder / 'features.npy'}", f"{folder / 'labels.npy'}"))


# ----------------------------------------------------------------------------------------------------------
# synthetic graphs

def _parse_numbers(spec: str, fields: list[str], kinds: list[tuple[str, type, float, float]]):
    """Numbers of a synthetic spec; empty or absent trailing fields are None."""
    syntax = next(s for s in SYNTHETIC_SPECS if s.startswith(spec.split(":")[0].lower()))
    if len(fields) > len(kinds):
        raise SpgnnError(f"bad synthetic spec {spec!r}: too many fields; syntax {syntax}")
    out = []
    for i, (what, kind, lo, hi) in enumerate(kinds):
        text = fields[i].strip() if i < len(fields) else ""
        if not text:
            out.append(None)
            continue
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not (lo <= v <= hi):
            what = f"{what} must be {'an integer' if kind is int else 'a number'} in [{lo:g}, {hi:g}]"
            raise SpgnnError(f"bad synthetic spec {spec!r}: {what}, got {text!r}; syntax {syntax}")
        out.append(v)
    return out


def _load_synthetic(kind: str, arg: str, spec: str, seed: int, read: bool = True) -> Graph | None:
    fields = arg.split(":")
    if kind == "rmat":
        scale, ef = _parse_numbers(spec, fields, [("SCALE", int, 1, 26), ("EDGEFACTOR", int, 1, 1024)])
        if scale is None:
            raise SpgnnError(f"bad synthetic spec {spec!r}: SCALE is required; "
                             f"syntax rmat:SCALE[:EDGEFACTOR]")
        ef = 16 if ef is None else ef
        rmat_check(scale, ef)                   # (what rmat checks, before it is asked to generate)
        return rmat(scale, ef, seed=seed) if read else None
    n, k, p_in, p_out, f = _parse_numbers(spec, fields, [("N", int, 2, 1 << 26), ("K", int, 1, 1 << 20),
                                                         ("PIN", float, 0, 1), ("POUT", float, 0, 1),
                                                         ("F", int, 1, 65536)])
    if n is None or k is None:
        raise SpgnnError(f"bad synthetic spec {spec!r}: N and K are required; syntax sbm:N:K[:PIN:POUT[:F]]")
    f = 64 if f is None else f
    sbm_check(n, k, p_in, p_out, f)
    return sbm(n, k, p_in, p_out, num_features=f, seed=seed) if read else None


def rmat(scale: int, edge_factor: int = 16, seed: int = 0, num_features: int = 128,
         num_classes: int = 8) -> Graph:
    """Graph500 R-MAT graph: n = 2^scale nodes, edge_factor·n draws with quadrant probabilities
    a, b, c, d = 0.57, 0.19, 0.19, 0.05, node ids randomly permuted, symmetrised, self-loops and duplicates
    removed. Features: ``num_features`` N(0, 1) float32 columns. Labels: argmax over ``num_classes`` of a
    random projection XW averaged over each node's closed neighbourhood (one mean-aggregation layer can
    fit it exactly; features alone only partly; classes no node falls in, at small scales, are dropped). Split:
    `default_split`."""
    rmat_check(scale, edge_factor)
    rng = np.random.default_rng(seed)
    n = 1 << scale
    src, dst = rmat_edges(scale, edge_factor, rng)
    name = f"rmat:{scale}:{edge_factor}"
    adj = simple_adjacency(src, dst, n, directed=False, name=name)
    del src, dst                          # (the draws, 16 bytes each, are not held beside x)
    x = rng.standard_normal((n, num_features), dtype=np.float32)
    h = x @ rng.standard_normal((num_features, num_classes), dtype=np.float32)
    y = np.asarray(mean_norm(add_self_loops(adj)) @ h).argmax(axis=1)
    used, y = np.unique(y, return_inverse=True)       # classes no node fell in (small SCALE) are dropped
    return from_arrays(name, adj, x, y, None, seed, used.size)


def rmat_check(scale: int, edge_factor: int) -> None:
    """SpgnnError unless 1 ≤ SCALE ≤ 40, EDGEFACTOR ≥ 1 and EDGEFACTOR·2^SCALE ≤ `_MAX_EDGES` (`rmat`'s parameters)."""
    if not (1 <= scale <= 40 and edge_factor >= 1 and edge_factor << scale <= _MAX_EDGES):
        raise SpgnnError(f"rmat: need SCALE >= 1 and EDGEFACTOR >= 1 with EDGEFACTOR*2^SCALE <= "
                         f"{_MAX_EDGES}, got SCALE={scale}, EDGEFACTOR={edge_factor}")


def rmat_edges(scale: int, edge_factor: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """edge_factor·2^scale R-MAT draws (source, target), quadrant probabilities a, b, c, d = 0.57, 0.19, 0.19, 0.05,
    node ids randomly permuted (duplicates and self-loops kept)."""
    n, m = 1 << scale, edge_factor << scale
    a, ab, abc = np.float32(0.57), np.float32(0.76), np.float32(0.95)
    src, dst = np.zeros(m, np.int64), np.zeros(m, np.int64)
    for level in range(scale):
        r = rng.random(m, dtype=np.float32)
        src |= (r >= ab).astype(np.int64) << level                       # quadrants c, d: lower half
        dst |= (((r >= a) & (r < ab)) | (r >= abc)).astype(np.int64) << level   # quadrants b, d: right half
    perm = rng.permutation(n)
    return perm[src], perm[dst]


def _bernoulli_positions(rng, total: int, p: float) -> np.ndarray:
    """Sorted positions in [0, total) each kept independently with probability p, in O(kept) time
    (geometric gaps between successes)."""
    if total <= 0 or p <= 0:
        return np.zeros(0, np.int64)
    if p >= 1:
        return np.arange(total, dtype=np.int64)
    chunks, last = [], -1
    mu = total * p
    size = int(mu + 6 * np.sqrt(mu) + 16)
    while True:
        pos = last + np.cumsum(rng.geometric(p, size=size))
        if pos[-1] >= total:
            chunks.append(pos[pos < total])
            return np.concatenate(chunks)
        chunks.append(pos)
        last = int(pos[-1])
        size = int((total - last) * p + 6 * np.sqrt((total - last) * p) + 16)


def _unrank_pairs(t: np.ndarray):
    """Pair (i, j), j < i, of index t in the order (1,0), (2,0), (2,1), (3,0), ...: t = i(i-1)/2 + j."""
    i = np.floor((1 + np.sqrt(1 + 8 * t.astype(np.float64))) / 2).astype(np.int64)
    i -= (i * (i - 1) // 2 > t)
    i += ((i + 1) * i // 2 <= t)
    return i, t - i * (i - 1) // 2


def sbm_check(n: int, k: int, p_in: float | None, p_out: float | None, num_features: int) -> tuple[float, float]:
    """(PIN, POUT), defaults filled in (mean degree 8 inside a class of s = N/K nodes, 2 across), of `sbm`'s
    parameters; SpgnnError unless 2 ≤ N, 1 ≤ K ≤ N, F ≥ 1, both are probabilities and the expected edges
    N·(PIN·(s−1) + POUT·(N−s))/2 number at most `_MAX_EDGES`/2."""
    if not (2 <= n and 1 <= k <= n and num_features >= 1):
        raise SpgnnError(f"sbm: need N >= 2, 1 <= K <= N and F >= 1, got N={n}, K={k}, F={num_features}")
    s = n / k
    p_in = min(1.0, 8 / max(s - 1, 1)) if p_in is None else float(p_in)
    p_out = (min(1.0, 2 / (n - s)) if k > 1 else 0.0) if p_out is None else float(p_out)
    if not (0 <= p_in <= 1 and 0 <= p_out <= 1):
        raise SpgnnError(f"sbm: PIN and POUT are probabilities in [0, 1], got {p_in}, {p_out}")
    expected = n * (p_in * (s - 1) + p_out * (n - s)) / 2
    if expected > _MAX_EDGES / 2:
        raise SpgnnError(f"sbm: about {expected:.3g} edges expected, too many to hold; lower PIN/POUT")
    return p_in, p_out


def sbm(n: int, k: int, p_in: float | None = None, p_out: float | None = None, num_features: int = 64,
        seed: int = 0) -> Graph:
    """Stochastic block model: n nodes in k near-equal classes (random ids), each pair joined with probability
    p_in inside a class and p_out across (defaults: mean degree 8 inside + 2 across), undirected, sampled
    in O(edges). Features: class mean (N(0, 0.25²) per dimension, one per class) + N(0, 1) noise,
    ``num_features`` columns. Split: `default_split`.

    Spec ``sbm:N:K[:PIN:POUT[:F]]``; an empty field takes its default, e.g. ``sbm:10000:5:::32``."""
    p_in, p_out = sbm_check(n, k, p_in, p_out, num_features)
    sizes = np.full(k, n // k, np.int64)
    sizes[:n % k] += 1
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    src, dst = [], []
    for r in range(k):
        o, size, rest = int(offsets[r]), int(sizes[r]), int(offsets[r + 1])
        i, j = _unrank_pairs(_bernoulli_positions(rng, size * (size - 1) // 2, p_in))
        src += [o + i]
        dst += [o + j]
        t = _bernoulli_positions(rng, size * (n - rest), p_out)         # block r × all later blocks
        src += [o + t // max(n - rest, 1)]
        dst += [rest + t % max(n - rest, 1)]
    perm = rng.permutation(n)
    name = f"sbm:{n}:{k}:{p_in:g}:{p_out:g}:{num_features}"
    adj = simple_adjacency(perm[np.concatenate(src)], perm[np.concatenate(dst)], n, directed=False, name=name)
    y = np.empty(n, np.int64)
    y[perm] = np.repeat(np.arange(k), sizes)
    means = rng.normal(0.0, 0.25, (k, num_features)).astype(np.float32)
    x = means[y] + rng.standard_normal((n, num_features), dtype=np.float32)
    return from_arrays(name, adj, x, y, None, seed, k)
