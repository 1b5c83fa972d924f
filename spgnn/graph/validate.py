"""The one check of a node-classification graph's arrays, run on every path before any training: the loaders (named
datasets, files, edge lists, OGB folders, PyG ``Data``) through `Graph.validate`, the out-of-core partitioner
chunk by chunk, and every rank's share of a partitioned folder through `spgnn.partition.partitioned`. Each
failure is one SpgnnError naming where (`where`: a file, or the dataset), how many entries are wrong, the first
of them, and what to do.

* edges: [E, 2] (a pair a row) or [2, E] (PyG's ``edge_index``), whole-number ids (`edge_pairs`);
* features: N×F numbers, F ≥ 1, all finite (`check_features`);
* labels: class ids in 0..C−1, every class with a node (`check_labels`), or binary targets: 0, 1 or NaN
  (unknown) (`check_targets`), with the positives and negatives of each target in each split (`label_counts`);
  what a file or a caller gave, read as one or the other without casting (`class_labels`);
* masks: boolean or 0/1 (`mask_array`), a training node at least, no node in two of train/val/test unless overlap
  is allowed (`check_masks`; ``spgnn train --allow-overlap`` or `allow_overlap`).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ..errors import SpgnnError

SPLITS = ("train", "val", "test")
_overlap_allowed = False


@contextmanager
def allow_overlap(allowed: bool = True):
    """Within the block, masks may share nodes (a node in train and test, say): for those who mean it."""
    global _overlap_allowed
    before, _overlap_allowed = _overlap_allowed, bool(allowed)
    try:
        yield
    finally:
        _overlap_allowed = before


def host_array(value) -> np.ndarray:
    """`value` as a numpy array: a torch tensor detached, on the host and dense, a float type numpy lacks (bfloat16,
    float8) widened to float32, which holds each of its values exactly; anything else through ``np.asarray``."""
    import torch

    if not isinstance(value, torch.Tensor):
        return np.asarray(value)
    value = value.detach().cpu()
    value = value if value.layout == torch.strided else value.to_dense()
    if value.is_floating_point() and value.dtype not in (torch.float16, torch.float32, torch.float64):
        value = value.float()
    return value.numpy()


def _first(bad: np.ndarray, ids=None) -> int:
    """The first True position of `bad`, as a node id (`ids[i]`, the original ids of a share's rows)."""
    i = int(np.flatnonzero(bad)[0])
    return i if ids is None else int(ids[i])


def whole_ids(a, where: str, what: str = "node ids") -> np.ndarray:
    """`a` as int64 when it holds integers (or floats of whole values); else SpgnnError."""
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return a.astype(np.int64, copy=False)
    if a.dtype.kind != "f":
        raise SpgnnError(f"{where}: {what} must be integers, got a {a.dtype} array; save them as int64")
    bad = ~(np.isfinite(a) & (a == np.round(a)))
    if bad.any():
        i = _first(bad.ravel())
        at = tuple(int(k) for k in np.unravel_index(i, a.shape)) if a.ndim > 1 else i     # (a 0-d one: 0)
        raise SpgnnError(f"{where}: {what} must be whole numbers, {int(bad.sum())} are not (first at {at}: "
                         f"{a.reshape(-1)[i].item()}); save them as int64")
    return a.astype(np.int64)


def edge_rows(e, where: str) -> np.ndarray:
    """An edge array in either layout, [E, 2] (one edge a row) or [2, E] (PyG's ``edge_index``), as [E, 2] (a
    view: memory maps stay unread); a 2×2 array, which reads both ways, is refused, as is any other shape."""
    layouts = "[E, 2] (one 'src dst' pair a row) or [2, E] (PyG's edge_index)"
    if e.ndim != 2 or 2 not in e.shape:
        raise SpgnnError(f"{where}: edges must be a 2-D array {layouts}, got shape {e.shape}"
                         + ("; an odd count cannot be pairs" if e.ndim == 1 and e.size % 2 else "")
                         + "; save it as np.save(path, np.stack([src, dst], axis=1))")
    if e.shape == (2, 2):
        raise SpgnnError(f"{where}: a 2×2 edge array reads both as [E, 2] and as [2, E]; the layout expected "
                         f"is [E, 2] (one 'src dst' pair a row): write the two edges to edges.txt instead")
    return e if e.shape[1] == 2 else e.T


def edge_pairs(e, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst), int64, of an edge array [E, 2] or [2, E] (`edge_rows`) of whole-number ids."""
    e = whole_ids(edge_rows(np.asarray(e), where), where, "edge endpoint ids")
    return e[:, 0], e[:, 1]


def check_edge_ids(lo: int, hi: int, n: int, where: str) -> None:
    """SpgnnError unless the edges' smallest and largest ids, lo and hi, lie in [0, n), n the nodes (the rows of the
    features and labels); ids of at least 1 that reach n are said to count from 1."""
    if lo < 0 or hi >= n:
        fix = "these count from 1: subtract 1 from every id" if lo >= 1 and hi == n else \
            "number the nodes 0..n-1, as the rows of the features and labels"
        raise SpgnnError(f"{where}: edge endpoint ids must lie in [0, {n}) (n = number of nodes), found {lo}..{hi}: "
                         f"{fix}")


def check_features(x, where: str, ids=None) -> None:
    """N×F numbers with F ≥ 1, every one finite (`ids`: the node ids of the rows, if not 0..N−1)."""
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise SpgnnError(f"{where}: features must be numbers, got a {x.dtype} array")
    if x.ndim != 2:
        raise SpgnnError(f"{where}: features must be a 2-D array (nodes x features), got shape {x.shape}")
    if x.shape[1] == 0:
        raise SpgnnError(f"{where}: features have 0 columns; a model needs one at least (for a graph without "
                         f"features give a column of ones, np.ones((N, 1)))")
    if x.dtype.kind == "f":
        bad = ~np.isfinite(x)
        if bad.any():
            rows = bad.any(axis=1)
            raise SpgnnError(f"{where}: features hold {int(bad.sum())} NaN or infinite values in "
                             f"{int(rows.sum())} rows (first at node {_first(rows, ids)}); clean or impute them first")
        limit = np.finfo(np.float32).max            # of the float32 training computes in
        if x.dtype.itemsize > 4 and x.size and (x.max() > limit or x.min() < -limit):
            over = np.abs(x) > limit
            rows = over.any(axis=1)
            raise SpgnnError(f"{where}: {int(over.sum())} feature values lie beyond float32's range (|x| > "
                             f"3.4e38, first at node {_first(rows, ids)}); spgnn computes in float32: scale them")


def check_row_norm(x, where: str) -> None:
    """``--feature-norm row`` divides each feature row by its L1 norm: of one column, every nonzero value becomes its
    sign, ±1. SpgnnError where that erases values (a column of other values than -1, 0 and 1, which it keeps)."""
    if x.shape[1] == 1 and x.size and not np.isin(x, (-1, 0, 1)).all():
        raise SpgnnError(f"{where}: the features have one column, which --feature-norm row (each row divided by its "
                         "L1 norm) makes ±1 wherever it is not 0: pass --feature-norm none (feature_norm='none') to "
                         "keep its values")


def check_labels(y, num_classes: int, where: str, every_class: bool = True, ids=None) -> None:
    """Class ids in 0..num_classes−1 and (`every_class`) each class held by a node at least."""
    y = np.asarray(y)
    bad = (y < 0) | (y >= num_classes)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SpgnnError(f"{where}: {int(bad.sum())} labels lie outside 0..{num_classes - 1} (first at node "
                         f"{_first(bad, ids)}: {int(y[i])}); labels must be class ids 0..C-1")
    if every_class:
        empty = np.flatnonzero(np.bincount(y, minlength=num_classes) == 0)
        if empty.size:
            raise SpgnnError(f"{where}: {empty.size} of the {num_classes} classes have no node (first: class "
                             f"{int(empty[0])}); labels must number the classes 0..C-1 without gaps: renumber "
                             f"them, e.g. y = np.unique(y, return_inverse=True)[1]")


def check_targets(y, where: str, ids=None) -> None:
    """Binary targets (n×t): every entry 0, 1 or NaN (unknown)."""
    bad = ~(np.isnan(y) | (y == 0) | (y == 1))
    if bad.any():
        row, col = (int(v[0]) for v in np.nonzero(bad))
        raise SpgnnError(f"{where}: {int(bad.sum())} binary targets are not 0, 1 or NaN (first at node "
                         f"{_first(bad.any(1), ids)}, target {col}: {y[row, col]}); multi-label targets must be 0/1, "
                         f"NaN where unknown")


MAX_CLASSES = 1 << 16      # class ids beyond both this and the node count are refused as stray


def class_labels(y, name: str) -> np.ndarray:
    """Labels as spgnn keeps them: class ids (int64 [n]; a [n, 1] column is one too), or, for a [n, t] array with
    t > 1 or a [n, 1] column holding NaN, t binary targets (float32, 0/1, NaN where a node's target is unknown, as
    OGB writes them)."""
    y = np.asarray(y)
    if y.ndim == 2 and y.dtype.kind in "biuf" and (y.shape[1] > 1 or np.isnan(y.astype(np.float32)).any()):
        targets = y.astype(np.float32, copy=False)
        check_targets(targets, f"dataset {name!r}")
        return targets
    y = y.reshape(-1) if y.ndim == 2 else y
    if y.ndim != 1 or y.dtype.kind not in "biuf":
        raise SpgnnError(f"dataset {name!r}: labels must be a vector of class ids or an n×t array of binary "
                         f"targets, got {y.dtype} array of shape {y.shape}")
    bad = ~(np.isfinite(y) & (y == np.round(y))) if y.dtype.kind == "f" else None
    if bad is not None and bad.any():
        raise SpgnnError(f"dataset {name!r}: labels must be whole numbers (class ids 0..C-1), {int(bad.sum())} are "
                         f"not (first at node {_first(bad)}: {y[_first(bad)]})")
    most = max(y.size, MAX_CLASSES)         # (a stray id would size every per-class count: 7 TiB for 10^12)
    if y.size and y.max() >= most:
        top = y.max() if y.dtype.kind in "biu" else f"{y.max():.6g}"
        raise SpgnnError(f"dataset {name!r}: labels must be class ids 0..C-1, C at most {most} (the larger of the "
                         f"node count and {MAX_CLASSES}), found {top}")
    y = y.astype(np.int64, copy=False)
    if y.size and y.min() < 0:
        bad = y < 0
        raise SpgnnError(f"dataset {name!r}: labels must be class ids >= 0, found {y.min()} ({int(bad.sum())} nodes, "
                         f"first at node {_first(bad)}); a node without a label: give it any class id and leave it "
                         "out of the train, val and test masks")
    return y


def mask_array(m, where: str, key: str) -> np.ndarray:
    """Split mask `key` as booleans: given as booleans or 0/1 integers; else SpgnnError (a float mask, or a list of
    node ids, is not cast)."""
    m = np.asarray(m)
    if m.dtype != bool and not (m.dtype.kind in "iu" and np.isin(m, (0, 1)).all()):
        raise SpgnnError(f"{where}: the {key} mask must be boolean (or 0/1), got {m.dtype}"
                         + (" holding other values (node ids? make it a boolean [N] mask)" if m.dtype.kind in "iu"
                            else ""))
    return m.astype(bool, copy=False)


def label_counts(y, masks: dict, num_classes: int) -> dict:
    """{split: counts} of the labels in each split: for class ids the nodes of each class ([C]), for binary targets
    the negatives and positives of each target ([t][2]); plain lists, for meta.json."""
    out = {}
    for s, m in masks.items():
        if y.ndim == 2:
            rows = y[m]
            out[s] = np.stack([(rows == 0).sum(0), (rows == 1).sum(0)], 1).tolist()
        else:
            out[s] = np.bincount(y[m], minlength=num_classes).tolist()
    return out


def check_masks(masks: dict, where: str, need_train: bool = True, ids=None) -> None:
    """{"train", "val", "test"} boolean masks: a training node at least (`need_train`), and no node in two of
    them unless `allow_overlap` is in force."""
    if need_train and not masks["train"].any():
        raise SpgnnError(f"{where}: the training mask selects no node")
    if _overlap_allowed:
        return
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1:]:
            both = masks[a] & masks[b]
            if both.any():
                raise SpgnnError(f"{where}: {int(both.sum())} nodes are in both the {a} and the {b} mask (first "
                                 f"at node {_first(both, ids)}); a node belongs to one split: fix the masks, or pass "
                                 f"--allow-overlap (in a program: with spgnn.graph.validate.allow_overlap()) if you "
                                 "mean it")
