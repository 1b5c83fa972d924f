"""OGB node-property-prediction folders (ogbn-arxiv, ogbn-products, ogbn-papers100M, ...) as OGB publishes them.

A folder (the unzipped download, or ``ogbn_NAME`` under the ``ogb`` package's root) holds one graph in one of
three forms, read in this order:

* ``raw/`` CSVs (ogbn-arxiv, ogbn-products): ``edge.csv.gz`` (lines ``src,dst``), ``num-node-list.csv.gz``,
  ``num-edge-list.csv.gz``, ``node-feat.csv.gz`` (one row of floats a node), ``node-label.csv.gz``;
* ``raw/`` binary (ogbn-papers100M): ``data.npz`` (``edge_index`` [2, E], ``num_nodes_list``,
  ``num_edges_list``, ``node_feat`` [N, F]) and ``node-label.npz`` (``node_label`` [N, 1]);
* ``processed/data_processed``, the ``ogb`` package's cache (``torch.save`` of {"graph": the dict above,
  "labels": [N, 1]}), unpickled admitting numpy arrays and nothing else (no code runs from the file);

and the official split ``split/<TYPE>/{train,valid,test}.csv.gz`` (node ids, one a line; ``PATH:TYPE`` picks
one when there are several). Files may also be uncompressed ``.csv``. Labels may be missing (NaN, as in
ogbn-papers100M) for nodes outside the split: those nodes take label 0 and are in no mask. Several label columns
(ogbn-proteins' 112) are binary targets, kept as they are (`spgnn.tasks`: ``multilabel``). A folder without node
features but with ``edge-feat`` (ogbn-proteins) gets as its node's features the mean of its edges' (`edge_mean`).
As every spgnn graph, the edges are symmetrised (OGB's GNN baselines do the same) and self-loops dropped.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from ..errors import SpgnnError
from .build import assemble, reading, torch_saved
from .graph import Graph

SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def _file(folder: Path, stem: str) -> Path | None:
    """``stem.csv.gz`` or ``stem.csv`` in ``folder``, whichever exists."""
    return next((p for p in (folder / f"{stem}.csv.gz", folder / f"{stem}.csv") if p.is_file()), None)


HETEROGENEOUS = ("triplet-type-list.csv.gz", "edge_index_dict.npz")   # raw/ files of a heterogeneous graph (mag)


def heterogeneous(folder: Path) -> bool:
    """Whether OGB `folder` holds a heterogeneous graph (its raw/ has a file of `HETEROGENEOUS`)."""
    return any((folder / "raw" / f).is_file() for f in HETEROGENEOUS)


def refuse_heterogeneous(folder: Path, like: str) -> None:
    """SpgnnError where OGB `folder` holds a heterogeneous graph (as dataset `like`), which spgnn does not train."""
    if heterogeneous(folder):
        raise SpgnnError(f"{folder} is a heterogeneous OGB graph (as {like}); spgnn trains homogeneous graphs")


def is_ogb(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is laid out as an OGB node-property-prediction dataset (a ``split/`` folder beside
    ``raw/`` or ``processed/``)."""
    folder, raw = Path(folder), Path(folder) / "raw"
    return (folder / "split").is_dir() and (
        _file(raw, "edge") is not None or (raw / "data.npz").is_file()
        or (folder / "processed" / "data_processed").is_file()
        or heterogeneous(folder))                                   # (read to be refused as such)


def _csv(path: Path, dtype, ndmin: int = 1) -> np.ndarray:
    """A headerless comma-separated numeric file (gzip'd or not)."""
    with reading(path):
        return np.loadtxt(path, dtype=dtype, delimiter=",", ndmin=ndmin)


def _form(folder: Path) -> str:
    """"csv", "binary" or "processed": the form OGB `folder` is in, once the files that form needs are there;
    SpgnnError for a heterogeneous folder, missing files or no graph at all."""
    raw = folder / "raw"
    refuse_heterogeneous(folder, "ogbn-mag")
    if _file(raw, "edge") is not None:
        missing = [f"{s}.csv.gz" for s in ("num-node-list", "num-edge-list", "node-label") if _file(raw, s) is None]
        if missing:
            raise SpgnnError(f"{raw}: missing {', '.join(missing)} (an OGB raw folder holds edge, num-node-list, "
                             f"num-edge-list, node-feat and node-label .csv.gz files)")
        return "csv"
    if (raw / "data.npz").is_file():
        if not (raw / "node-label.npz").is_file():
            raise SpgnnError(f"{raw}: missing node-label.npz (the labels of a binary OGB dataset)")
        return "binary"
    if (folder / "processed" / "data_processed").is_file():
        return "processed"
    raise SpgnnError(f"{folder}: no OGB graph found (raw/edge.csv.gz, raw/data.npz or processed/data_processed)")


def _counts(nodes, edges, folder: Path) -> tuple[int, int]:
    """(n, E) of the one graph num-node-list and num-edge-list describe; SpgnnError when they list several."""
    nodes, edges = np.asarray(nodes).ravel(), np.asarray(edges).ravel()
    if nodes.size != 1 or edges.size != 1:
        raise SpgnnError(f"{folder} holds {nodes.size} graphs: a node-property-prediction dataset holds one "
                         f"(graph-property datasets, ogbg-*, are not for node classification)")
    return int(nodes[0]), int(edges[0])


def _name(folder: Path) -> str:
    """ogbn_arxiv → ogbn-arxiv."""
    return folder.name.replace("_", "-")


def _raw_csv(raw: Path) -> dict:
    feat, edge_feat = _file(raw, "node-feat"), _file(raw, "edge-feat")
    return {"edge_feat": None if edge_feat is None else _csv(edge_feat, np.float32, 2),
            "edge_index": _csv(_file(raw, "edge"), np.int64, 2).T,
            "num_nodes_list": _csv(_file(raw, "num-node-list"), np.int64),
            "num_edges_list": _csv(_file(raw, "num-edge-list"), np.int64),
            "node_feat": None if feat is None else _csv(feat, np.float32, 2),
            "labels": _csv(_file(raw, "node-label"), np.float64)}


def _raw_binary(raw: Path) -> dict:
    with reading(raw / "data.npz"), np.load(raw / "data.npz", allow_pickle=False) as npz:
        missing = {"edge_index", "num_nodes_list", "num_edges_list"} - set(npz.files)
        if missing:
            raise SpgnnError(f"cannot read {raw / 'data.npz'}: missing arrays {', '.join(sorted(missing))}")
        out = {k: npz[k] for k in ("edge_index", "num_nodes_list", "num_edges_list")}
        out |= {k: npz[k] if k in npz.files else None for k in ("node_feat", "edge_feat")}
    labels = raw / "node-label.npz"
    with reading(labels), np.load(labels, allow_pickle=False) as npz:
        if "node_label" not in npz.files:
            raise SpgnnError(f"cannot read {labels}: no array 'node_label' (found {', '.join(npz.files)})")
        out["labels"] = npz["node_label"]
    return out


def _processed(path: Path) -> dict:
    obj = torch_saved(path)                 # (the zip format, or an older torch's)
    with reading(path):
        graph, labels = obj["graph"], obj["labels"]
        graph = graph[0] if isinstance(graph, list) else graph
        return {"edge_index": graph["edge_index"], "num_nodes_list": np.array([graph["num_nodes"]]),
                "num_edges_list": np.array([graph["edge_index"].shape[1]]), "node_feat": graph.get("node_feat"),
                "edge_feat": graph.get("edge_feat"), "labels": labels}


def _split(folder: Path, split: str | None, n: int) -> dict:
    """Boolean train/val/test masks from ``split/<TYPE>/``."""
    kinds = sorted(p.name for p in (folder / "split").iterdir() if p.is_dir())
    if split is None and len(kinds) != 1:
        raise SpgnnError(f"{folder / 'split'} holds {len(kinds)} splits ({', '.join(kinds) or 'none'}); "
                         + (f"pick one with {folder}:NAME" if kinds else "an OGB split folder split/TYPE/ "
                            "with train, valid and test .csv.gz files is needed"))
    kind = split if split is not None else kinds[0]
    if kind not in kinds:
        raise SpgnnError(f"{folder / 'split'} has no split {kind!r}; it has {', '.join(kinds)}")
    masks = {}
    for key, stem in SPLIT_FILES.items():
        path = _file(folder / "split" / kind, stem)
        if path is None:
            raise SpgnnError(f"{folder / 'split' / kind}: missing {stem}.csv.gz (node ids of the {key} set)")
        ids = _csv(path, np.int64)
        if ids.ndim != 1:
            raise SpgnnError(f"{path}: expected one node id a line, found {ids.shape[1]} columns")
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise SpgnnError(f"{path}: node ids must lie in [0, {n}), found {ids.min()}..{ids.max()}")
        masks[key] = np.zeros(n, bool)
        masks[key][ids] = True
    return masks


def _labels(raw_labels, masks: dict, where: Path) -> np.ndarray:
    """Class ids, a node without a label (NaN) outside the split and given 0; or, for t > 1 label columns
    (ogbn-proteins' 112), t binary targets as they are (float32, NaN unknown)."""
    y = np.asarray(raw_labels)
    n = len(masks["train"])
    if y.ndim not in (1, 2) or len(y) != n:
        raise SpgnnError(f"{where}: the node labels (node-label) have shape {y.shape}, expected {n} rows as "
                         f"num-node-list says")
    if y.ndim == 2 and y.shape[1] > 1:
        return y.astype(np.float32)
    y = y.reshape(-1).astype(np.float64)
    missing = ~np.isfinite(y)
    in_split = masks["train"] | masks["val"] | masks["test"]
    if (missing & in_split).any():
        raise SpgnnError(f"{where}: node {int(np.flatnonzero(missing & in_split)[0])} is in the split but has no "
                         f"label")
    y[missing] = 0
    return y


def edge_mean(edge_index: np.ndarray, edge_feat: np.ndarray, n: int, where: Path) -> np.ndarray:
    """Node features where a folder has none (ogbn-proteins): the mean of the features of the edges incident to the
    node, each edge counted at both ends (OGB's own examples build them so: ``adj_t.mean(dim=1)`` over the
    symmetrised edges); 0 for an isolated node."""
    if edge_feat.ndim != 2 or len(edge_feat) != edge_index.shape[1]:
        raise SpgnnError(f"{where}: edge features have shape {edge_feat.shape}, expected ({edge_index.shape[1]}, F) "
                         "as the edge list says")
    ends = np.concatenate([edge_index[0], edge_index[1]])
    total = np.zeros((n, edge_feat.shape[1]), np.float64)
    np.add.at(total, ends, np.concatenate([edge_feat, edge_feat]))
    degree = np.bincount(ends, minlength=n)
    return (total / np.maximum(degree, 1)[:, None]).astype(np.float32)


def read_ogb(folder: str | os.PathLike, split: str | None = None) -> Graph:
    """The graph of an OGB node-property-prediction folder with its official split (see the module docstring)."""
    folder = Path(folder)
    read = {"csv": lambda: _raw_csv(folder / "raw"), "binary": lambda: _raw_binary(folder / "raw"),
            "processed": lambda: _processed(folder / "processed" / "data_processed")}
    data = read[_form(folder)]()
    n, e = _counts(data["num_nodes_list"], data["num_edges_list"], folder)
    edge_index = np.asarray(data["edge_index"])
    if edge_index.ndim != 2 or edge_index.shape[0] != 2 or edge_index.shape[1] != e:
        raise SpgnnError(f"{folder}: the edge list has shape {edge_index.shape}, expected (2, {e}) as "
                         f"num-edge-list says")
    x = data["node_feat"]
    if x is None and data.get("edge_feat") is not None:
        x = edge_mean(edge_index, np.asarray(data["edge_feat"], np.float32), n, folder)
    if x is None:
        raise SpgnnError(f"{folder}: the graph has no node features (node-feat) nor edge features to build them "
                         f"from; spgnn's models need them")
    if np.ndim(x) != 2 or len(x) != n:
        raise SpgnnError(f"{folder}: node features have shape {np.shape(x)}, expected ({n}, F) as num-node-list "
                         f"says")
    masks = _split(folder, split, n)
    y = _labels(data["labels"], masks, folder)
    return assemble(_name(folder), edge_index[0], edge_index[1], np.asarray(x, np.float32), y,
                    masks=(masks["train"], masks["val"], masks["test"]))


# ----------------------------------------------------------------------------------------------------------
# streaming to an edge-list folder (for spgnn partition --out-of-core)

def _csv_blocks(path: Path, dtype, chunk: int):
    """Successive blocks of at most `chunk` rows of a headerless CSV (gzip'd or not), as 2-D arrays."""
    with reading(path), (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:
        while lines := list(itertools.islice(f, chunk)):
            yield np.loadtxt(lines, dtype=dtype, delimiter=",", ndmin=2)


def _npy_blocks(npz: Path, name: str, items: int, rows: bool):
    """(shape, successive flat blocks) of array `name` in `npz`, read through its (compressed) zip member without
    loading the array: blocks of `items` rows when `rows`, else of `items` elements."""
    with reading(npz), zipfile.ZipFile(npz) as z, z.open(f"{name}.npy") as f:
        version = np.lib.format.read_magic(f)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = header(f)
        if fortran:
            raise SpgnnError(f"cannot stream {npz}:{name}: stored in Fortran order")
        step = items * (int(np.prod(shape[1:])) if rows else 1) * dtype.itemsize
        while data := f.read(step):
            yield shape, np.frombuffer(data, dtype)


def _fill(target: np.ndarray, at: int, block: np.ndarray, where: Path) -> int:
    """target[at:at + len(block)] = block; the next row. SpgnnError if the file holds more rows than announced, or
    rows of another width than the first's (or than an edge's two ids)."""
    if block.ndim != 2 or block.shape[1] != target.shape[1]:
        raise SpgnnError(f"{where}: rows of {block.shape[1] if block.ndim == 2 else 1} columns, expected "
                         f"{target.shape[1]}")
    if at + len(block) > len(target):
        raise SpgnnError(f"{where}: more than the {len(target)} rows num-node-list / num-edge-list announce")
    target[at:at + len(block)] = block
    return at + len(block)


def to_edge_folder(folder: str | os.PathLike, out: str | os.PathLike, split: str | None = None,
                   chunk: int = 1 << 20) -> Path:
    """Write OGB `folder` as an edge-list folder `out` (edges.npy [E, 2], features.npy, labels.npy, the split's
    masks, meta.json), `chunk` rows at a time, so that no more than O(n) of it is held: the form
    ``spgnn partition --out-of-core`` reads. Raw CSV and binary folders only (the ogb cache is one pickle)."""
    from .ogbl import is_ogbl

    folder, out = Path(folder), Path(out)
    if is_ogbl(folder):      # (its labels, which _form asks for, are none: a link folder has no node-label file)
        raise SpgnnError(f"{folder} is an OGB link folder (split/TYPE/train.pt), which is partitioned in memory, not "
                         "out of core: drop --out-of-core")
    raw, form = folder / "raw", _form(folder)
    if form == "processed":
        raise SpgnnError(f"{folder}: out-of-core reading needs OGB's raw files (raw/edge.csv.gz or raw/data.npz), "
                         f"not the ogb package's processed/ cache")
    if form == "csv":
        features = _file(raw, "node-feat") is not None
    else:
        with reading(raw / "data.npz"), zipfile.ZipFile(raw / "data.npz") as z:
            features = "node_feat.npy" in z.namelist()
    if not features:        # before any edge is streamed
        raise SpgnnError(f"{folder}: no node features (node-feat); out of core, spgnn does not build them from the "
                         "edge features as it does in memory (ogbn-proteins): partition this folder in memory")
    out.mkdir(parents=True, exist_ok=True)
    if form == "csv":
        n, e = _counts(*(_csv(_file(raw, s), np.int64) for s in ("num-node-list", "num-edge-list")), folder)
        edges = np.lib.format.open_memmap(out / "edges.npy", "w+", np.int64, (e, 2))
        at = 0
        for block in _csv_blocks(_file(raw, "edge"), np.int64, chunk):
            at = _fill(edges, at, block, _file(raw, "edge"))
        edges_done, feats, rows, feat = at == e, None, 0, _file(raw, "node-feat")
        for block in _csv_blocks(feat, np.float32, chunk) if feat is not None else ():
            if feats is None:
                feats = np.lib.format.open_memmap(out / "features.npy", "w+", np.float32, (n, block.shape[1]))
            rows = _fill(feats, rows, block, feat)
        labels = _csv(_file(raw, "node-label"), np.float64)
    else:
        with reading(raw / "data.npz"), np.load(raw / "data.npz", allow_pickle=False) as npz:
            n, e = _counts(npz["num_nodes_list"], npz["num_edges_list"], folder)    # only these are decompressed
        at, edges, feats = 0, None, None
        for shape, flat in _npy_blocks(raw / "data.npz", "edge_index", chunk, rows=False):
            if edges is None:
                if tuple(shape) != (2, e):
                    raise SpgnnError(f"{folder}: the edge list has shape {shape}, expected (2, {e}) as "
                                     f"num-edge-list says")
                edges = np.lib.format.open_memmap(out / "edges.npy", "w+", np.int64, (e, 2))
            while len(flat):                 # the flat array is src[0..e) then dst[0..e)
                col, start = divmod(at, e)
                if col > 1:
                    raise SpgnnError(f"{raw / 'data.npz'}: edge_index holds more than its 2 × {e} ids")
                take = min(len(flat), e - start)
                edges[start:start + take, col] = flat[:take]
                flat, at = flat[take:], at + take
        edges_done, rows = edges is not None and at == 2 * len(edges), 0
        for shape, flat in _npy_blocks(raw / "data.npz", "node_feat", chunk, rows=True):
            if feats is None:
                feats = np.lib.format.open_memmap(out / "features.npy", "w+", np.float32, shape)
            rows = _fill(feats, rows, flat.reshape(-1, shape[1]), raw / "data.npz")
        with reading(raw / "node-label.npz"), np.load(raw / "node-label.npz", allow_pickle=False) as npz:
            labels = npz["node_label"]
    if not edges_done or feats is None or rows != n:
        raise SpgnnError(f"{folder}: the edges or node features are missing or fewer than num-node-list and "
                         f"num-edge-list announce ({n} nodes)")
    masks = _split(folder, split, n)
    y = _labels(labels, masks, folder)
    np.save(out / "labels.npy", y if y.ndim == 2 else y.astype(np.int64))
    for key, m in masks.items():
        np.save(out / f"{key}_mask.npy", m)
    (out / "meta.json").write_text(json.dumps({"name": _name(folder), "directed": False}))
    edges.flush()
    feats.flush()
    return out
