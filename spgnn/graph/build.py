"""From arrays to a validated Graph: the adjacency of an edge list, class labels, split masks (given, or
per-class random), `reading`, which turns any failure while reading a file into one SpgnnError line, and
`unpickle`, which reads a pickle that can hold arrays and nothing else."""

from __future__ import annotations

import codecs
import pickle
import warnings
import zipfile
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError
from .graph import Graph, edges_to_adj
from .validate import class_labels, mask_array


@contextmanager
def reading(path):
    """Turn any low-level failure while reading ``path`` into SpgnnError('cannot read <path>: <reason>')."""
    try:
        yield
    except (SpgnnError, MemoryError):       # (out of memory is the machine's, not the file's)
        raise
    except Exception as e:  # numpy, zipfile, zlib, pickle and OS errors all mean: this file is unusable
        reason = (str(e).strip().splitlines() or [""])[0][:200]
        raise SpgnnError(f"cannot read {path}: {type(e).__name__}: {reason}".rstrip(": ")) from e


_np_reconstruct = np.empty(0).__reduce__()[0]
_PICKLE_ALLOWED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _np_reconstruct,
    **{(m, "csr_matrix"): sp.csr_matrix for m in ("scipy.sparse", "scipy.sparse.csr", "scipy.sparse._csr")},
    **{(m, "lil_matrix"): sp.lil_matrix for m in ("scipy.sparse", "scipy.sparse.lil", "scipy.sparse._lil")},
    ("collections", "defaultdict"): defaultdict,
    ("_codecs", "encode"): codecs.encode,      # how Python 3 writes bytes into protocol-2 pickles
    **{(m, t.__name__): t for m in ("builtins", "__builtin__") for t in (list, dict, set, tuple, int, float)},
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler admitting only the numpy / scipy.sparse / collections classes dataset files use (Planetoid's
    pickles, the ogb package's cache)."""

    def find_class(self, module, name):
        if (module, name) not in _PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}: dataset files hold only "
                                         f"numpy/scipy arrays and dicts (the file may be malicious)")
        return _PICKLE_ALLOWED[(module, name)]


def unpickle(path: Path, member: str | None = None):
    """The object pickled in ``path`` (or in its zip member ending in ``member``, as ``torch.save`` writes
    ``data.pkl``), admitting only `RestrictedUnpickler`'s classes."""
    with reading(path), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if member is None:
            with path.open("rb") as f:
                return RestrictedUnpickler(f, encoding="latin1").load()
        with zipfile.ZipFile(path) as z:
            name = next((m for m in z.namelist() if m.endswith(member)), None)
            if name is None:
                raise SpgnnError(f"cannot read {path}: no {member} inside (not a file torch.save wrote)")
            with z.open(name) as f:
                return RestrictedUnpickler(f, encoding="latin1").load()


LEGACY_MAGIC = 0x1950A86A20F9469CFC6C      # the first pickle of torch.save's format before the zip one


def torch_saved(path: Path):
    """The object ``torch.save`` wrote to `path`, in its zip format (``data.pkl`` inside) or the one before torch
    1.6 (four pickles: the magic number, the protocol, the system's description, the object), admitting only
    `RestrictedUnpickler`'s classes."""
    if zipfile.is_zipfile(path):
        return unpickle(path, member="data.pkl")
    with reading(path), path.open("rb") as f:
        magic = RestrictedUnpickler(f).load()
        if not (type(magic) is int and magic == LEGACY_MAGIC):
            raise SpgnnError(f"cannot read {path}: not a file torch.save wrote")
        RestrictedUnpickler(f).load(), RestrictedUnpickler(f).load()
        return RestrictedUnpickler(f, encoding="latin1").load()


TRAIN_PER_CLASS, VAL_PER_CLASS = 20, 30        # `per_class_split`'s, as in Shchur et al. 2018


def per_class_split(y, num_classes: int, seed: int, train_per_class: int = TRAIN_PER_CLASS,
                    val_per_class: int = VAL_PER_CLASS):
    """Boolean (train, val, test) masks: per class, ``train_per_class`` random nodes train, the next
    ``val_per_class`` validation, the rest test. A class with fewer nodes fills train first, then val."""
    y = np.asarray(y)
    if y.ndim != 1 or (y.size and (y.min() < 0 or y.max() >= num_classes)):
        raise SpgnnError(f"per_class_split: labels must be a vector with values in [0, {num_classes})")
    if min(train_per_class, val_per_class) < 0:
        raise SpgnnError("per_class_split: train_per_class and val_per_class must be >= 0")
    n = y.size
    perm = np.random.default_rng(seed).permutation(n)
    order = perm[np.argsort(y[perm], kind="stable")]          # nodes grouped by class, random inside
    counts = np.bincount(y, minlength=num_classes)
    rank = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    train, val = np.zeros(n, bool), np.zeros(n, bool)
    train[order[rank < train_per_class]] = True
    val[order[(rank >= train_per_class) & (rank < train_per_class + val_per_class)]] = True
    return train, val, ~(train | val)


def simple_adjacency(src, dst, n: int, *, directed: bool, name: str) -> sp.csr_matrix:
    """Binary CSR A[dst, src] = 1 (symmetrised unless ``directed``), ids checked, self-loops dropped."""
    a = edges_to_adj(src, dst, n, symmetric=not directed, name=name)
    if a.diagonal().any():
        a.setdiag(0)
        a.eliminate_zeros()
    return a


def random_split(n: int, seed: int, fractions=(0.6, 0.2)) -> tuple:
    """Boolean (train, val, test) masks: a seeded random 60/20/20 split of the n nodes."""
    perm = np.random.default_rng(seed).permutation(n)
    cut = np.cumsum((np.asarray(fractions) * n).astype(np.int64))
    masks = [np.zeros(n, bool) for _ in range(3)]
    for m, ids in zip(masks, np.split(perm, cut)):
        m[ids] = True
    return tuple(masks)


def default_split(y, num_classes: int, seed: int) -> tuple:
    """(train, val, test) of a graph without a split of its own: `per_class_split` where a class has more nodes than
    the 20 + 30 it takes for training and validation; else (it would leave test, or validation and test, empty),
    and for binary targets, the seeded 60/20/20 `random_split`."""
    if y.ndim == 1 and np.bincount(y, minlength=num_classes).max(initial=0) > TRAIN_PER_CLASS + VAL_PER_CLASS:
        return per_class_split(y, num_classes, seed)
    return random_split(len(y), seed)


def from_arrays(name: str, adj, x, y, masks, seed: int, num_classes: int | None = None) -> Graph:
    """Graph from its parts; ``masks`` None means `default_split`."""
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise SpgnnError(f"dataset {name!r}: features must be numbers, got a {x.dtype} array")
    y = class_labels(y, name)
    if y.ndim == 2:
        num_classes = y.shape[1]
    num_classes = int(num_classes or (y.max() + 1 if y.size else 0))
    if masks is None:
        masks = default_split(y, num_classes, seed)
    return Graph(adj, x, y, *masks, name=name, num_classes=num_classes)


def assemble(name: str, src, dst, x, y, *, directed: bool = False, masks=None, seed: int = 0,
              num_classes: int | None = None, weights=None, files=("features", "labels")) -> Graph:
    """Graph from an edge list src → dst over the rows of ``x``: binary, self-loops dropped (`simple_adjacency`);
    or, with ``weights`` (directed only), each edge's weight, duplicates summed and self-loops kept (`edges_to_adj`).
    ``files``: what errors call ``x`` and ``y`` (their files, where known)."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise SpgnnError(f"dataset {name!r}: features must be a 2-D array (nodes x features), "
                         f"got shape {x.shape}")
    if np.ndim(y) and x.shape[0] != np.shape(y)[0]:     # before the edges, whose ids are checked against x's rows
        raise SpgnnError(f"dataset {name!r}: {files[0]} has {x.shape[0]} rows but {files[1]} has "
                         f"{np.shape(y)[0]}; both need one row per node")
    adj = simple_adjacency(src, dst, x.shape[0], directed=directed, name=name) if weights is None else \
        edges_to_adj(src, dst, x.shape[0], symmetric=not directed, name=name, weights=weights)
    return from_arrays(name, adj, x, y, masks, seed, num_classes)


def split_masks(found: dict, n_splits_where: str, split: int | None):
    """(train, val, test) from optional mask arrays (each 1-D, or [S, N] for S fixed splits, a 1-D one then the same
    in every split); None if absent. A missing val mask means none, a missing test mask means every node not in
    train or val."""
    if all(m is None for m in found.values()):
        if split is not None:
            raise SpgnnError(f"{n_splits_where} has no fixed splits, so ':{split}' cannot pick one; drop it "
                             f"(random per-class splits are chosen with --seed)")
        return None
    if found["train"] is None:
        raise SpgnnError(f"{n_splits_where}: validation/test masks given without a training mask")
    several = any(np.ndim(m) == 2 for m in found.values() if m is not None)     # a 1-D mask then serves every split
    out = {}
    for key, m in found.items():
        if m is None:
            continue
        m = mask_array(m, n_splits_where, key)
        if m.ndim == 2:
            k = 0 if split is None else split
            if not 0 <= k < m.shape[0]:
                raise SpgnnError(f"{n_splits_where} has {m.shape[0]} fixed splits (0..{m.shape[0] - 1}), "
                                 f"asked for split {k}")
            m = m[k]
        elif split is not None and split != 0 and not several:
            raise SpgnnError(f"{n_splits_where} has one fixed split, asked for split {split}")
        out[key] = m
    train = out["train"]
    for key, m in out.items():
        if m.shape != train.shape:
            raise SpgnnError(f"{n_splits_where}: the {key} mask has {m.size} entries but the train mask {train.size}; "
                             "every mask has one entry per node")
    val = out.get("val", np.zeros_like(train))
    return train, val, out.get("test", ~(train | val))
