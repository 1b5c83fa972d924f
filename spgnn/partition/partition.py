"""Vertex partitions: a part vector ``parts`` (n,) with ids in [0, P), where it comes from, and the
renumbering it induces.

A partitioner is a function ``fn(adj, P, seed, **params) -> parts`` registered with ``@register("name")``
(built-ins: here and in ``streaming`` and ``external``) or published by another package
under the entry-point group ``spgnn.partitioners`` (loaded on first lookup of its name). Internal ids are
renumbered by part so that part p owns the contiguous rows offsets[p]:offsets[p+1], inside a part in ascending
old ids or a locality order (`spgnn.partition.order`); ``perm[new] = old`` and ``inv[old] = new``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import platform
import time
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import SpgnnError, out_of_memory
from ..memory import rss_growth
from ..options import defined_at
from ..progress import stage
from .order import check_order, part_order

PARTITIONERS = {}
ENTRY_POINT_GROUP = "spgnn.partitioners"
FILE_FORMAT = "spgnn-partition/1"
_LIBRARIES = ("numpy", "scipy", "pymetis", "kahip", "kaminpar")


def register(name: str):
    """Decorator: register ``fn(adj, P, seed, **params) -> parts`` as partitioner `name`. A name another function
    holds (spgnn's ``block``, say, which ``--split-graph`` relies on) is refused; the same function defined again (a
    notebook cell run twice) replaces it."""
    if not isinstance(name, str) or not name.strip():
        raise SpgnnError(f"spgnn.register(name): a partitioner's name is a non-empty string, got {name!r} (write "
                         "@spgnn.register(\"mine\") above the function)")

    def wrap(fn):
        if not callable(fn) or isinstance(fn, type):
            raise SpgnnError(f"partitioner {name!r}: register a function fn(adj, P, seed, **params) -> parts, got "
                             f"{fn!r}")
        held = PARTITIONERS.get(name)
        if held is not None and defined_at(held) != defined_at(fn):
            raise SpgnnError(f"partitioner {name!r} is registered already (by {'.'.join(defined_at(held))}): choose "
                             "another name")
        PARTITIONERS[name] = fn
        return fn

    return wrap


def _entry_points() -> dict:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


_taken_checked = False


def _warn_taken() -> None:
    """Once a process: warn of each partitioner another package publishes under a name of spgnn's own (``block``,
    say), which is never loaded."""
    global _taken_checked
    if not _taken_checked:
        _taken_checked = True
        for name, ep in _entry_points().items():
            module, qualname = defined_at(PARTITIONERS.get(name))
            if module.split(".")[0] == "spgnn" and not ep.value.startswith("spgnn"):
                warnings.warn(f"spgnn: partitioner {name!r} (entry point {ep.value}) was not loaded: the name is "
                              f"spgnn's own ({module}.{qualname})", stacklevel=3)


def get_partitioner(name: str):
    """The partitioner registered as `name`, loading an entry point of that name on first use; None if
    there is none."""
    _warn_taken()
    if name not in PARTITIONERS and (ep := _entry_points().get(name)) is not None:
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin: say which one
            raise SpgnnError(f"partitioner {name!r} (entry point {ep.value}) failed to load: "
                             f"{type(e).__name__}: {e}") from e
        if name not in PARTITIONERS:        # a plain function, not a module that registered itself
            if not callable(obj):
                raise SpgnnError(f"entry point {name} = {ep.value} is not a function (adj, P, seed) -> parts")
            PARTITIONERS[name] = obj
    return PARTITIONERS.get(name)


def fingerprint(fn) -> str:
    """A digest of partitioner `fn`'s module, name and source, the whole of the file that defines it (so that a
    helper it calls from that file counts too; its bytecode where there is no source), and of the versions
    (`versions`) it may run on: what a cached partition by `fn` was made with. A helper in another module of one's
    own does not count: give such a partitioner another name, or another cache folder, when that helper changes."""
    for read in (lambda: Path(inspect.getsourcefile(fn)).read_text(), lambda: inspect.getsource(fn)):
        try:
            code = read()           # its file; else its own source (a notebook's cell)
            break
        except (OSError, TypeError):
            continue
    else:
        code = repr(getattr(fn, "__code__", None) and (fn.__code__.co_code, fn.__code__.co_consts))
    key = json.dumps([getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn)), code, versions()])
    return hashlib.sha256(key.encode()).hexdigest()


def available() -> list[str]:
    """Names of the registered partitioners and of those other packages publish (not loaded)."""
    return list(PARTITIONERS) + sorted(set(_entry_points()) - set(PARTITIONERS))


def partitioner_params(fn, **overrides) -> dict:
    """The parameters of partitioner `fn` (adj, P, seed, then parameters with defaults, keyword-only or not), its
    defaults updated by `overrides` (as saved), each override converted to its default's type (`_as_type`; a
    ``**kwargs`` partitioner takes any others as given)."""
    params = list(inspect.signature(fn).parameters.values())
    defaults = {p.name: p.default for p in params[3:] if p.default is not p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = set(overrides) - set(defaults)
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in params):
        raise SpgnnError(f"unknown partitioner parameter(s) {', '.join(sorted(unknown))}: this partitioner "
                         f"takes {', '.join(defaults) or 'none'}")
    return defaults | {k: _as_type(k, v, defaults[k]) if k in defaults else v for k, v in overrides.items()}


_TRUTH = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def _as_type(name: str, value, default):
    """`value` as the type of `default` (bool, int, float or str; another default's type takes it as given):
    "false" is False, 2.0 is 2, "abc" for a number is an SpgnnError naming parameter `name`."""
    kind = type(default)
    try:
        if kind is bool:
            return value if isinstance(value, bool) else _TRUTH[str(value).strip().lower()]
        if kind is int and not isinstance(value, bool):
            number = float(value)
            if number == int(number):
                return int(number)
        elif kind is float and not isinstance(value, bool):
            return float(value)
        elif kind is str:
            return str(value)
        elif kind not in (int, float):
            return value
    except (KeyError, TypeError, ValueError, OverflowError):
        pass
    what = {bool: "true or false", int: "a whole number", float: "a number"}[kind]
    raise SpgnnError(f"partitioner parameter {name} takes {what} (default {default!r}), got {value!r}")


# ----------------------------------------------------------------------------------------------------------
# built-in simple partitioners and helpers for the others


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


def undirected(adj) -> sp.csr_matrix:
    """The pattern of A + Aᵀ without its diagonal (0/1 entries, sorted indices): the graph that graph
    partitioners see, since a row is needed across parts whichever direction its edge points."""
    a = sp.csr_matrix(adj, copy=True)
    a.data = np.ones_like(a.data, dtype=np.int8)
    s = (a + a.T).tocoo()
    off = s.row != s.col
    s = sp.csr_matrix((np.ones(int(off.sum()), np.int8), (s.row[off], s.col[off])), shape=a.shape)
    s.sort_indices()
    return s


def fill_empty(parts: np.ndarray, P: int) -> np.ndarray:
    """`parts` with each empty part given one vertex from the then largest part (its last vertex), so
    that a heuristic never leaves a process without rows when n ≥ P."""
    parts = np.asarray(parts, dtype=np.int64).copy()
    counts = np.bincount(parts, minlength=P)
    for p in np.flatnonzero(counts == 0):
        if parts.size <= p:
            break
        big = int(np.argmax(counts))
        v = np.flatnonzero(parts == big)[-1]
        parts[v], counts[big], counts[p] = p, counts[big] - 1, 1
    return parts


# ----------------------------------------------------------------------------------------------------------
# checking, files


def check_parts(parts, n: int, P: int) -> np.ndarray:
    """`parts` as int64 after checking length n, ids in [0, P) and that no part is empty."""
    parts = np.asarray(parts)
    if parts.ndim != 1:                 # an (n, 1) array, a text file of two columns (node, part)
        raise SpgnnError(f"partition vector has shape {parts.shape}, but it is one part id a node: give a vector of "
                         f"{n} (a text file: one id a line)")
    if parts.shape[0] != n:
        raise SpgnnError(f"partition vector has length {parts.size} but the graph has {n} nodes")
    if parts.size and not np.issubdtype(parts.dtype, np.integer):
        raise SpgnnError(f"partition vector must hold integer part ids, got dtype {parts.dtype}")
    parts = parts.astype(np.int64)
    if n and (parts.min() < 0 or parts.max() >= P):
        raise SpgnnError(f"partition vector holds part ids {parts.min()}..{parts.max()}, but the layout's {P} parts "
                         f"(its row blocks: the processes of a 1D layout, fewer on a grid) need ids in [0, {P})")
    counts = np.bincount(parts, minlength=P)
    if (counts == 0).any():
        raise SpgnnError(f"part {int(np.flatnonzero(counts == 0)[0])} of {P} is empty: every process "
                         f"needs at least one node (use fewer processes or another partition)")
    return parts


def graph_hash(adj) -> str:
    """SHA-256 of the sparsity pattern: shape, indptr and indices of the canonical CSR (values ignored)."""
    a = sp.csr_matrix(adj)
    if not a.has_canonical_format:
        a = a.copy()
        a.sum_duplicates()
    h = hashlib.sha256()
    for arr in (np.asarray(a.shape), a.indptr, a.indices):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    return h.hexdigest()


def check_vector(parts, n: int) -> tuple[np.ndarray, int]:
    """(`parts`, checked by `check_parts` as a partition of n nodes into its largest id + 1 parts, as `make_parts`
    returns it; that number of parts P)."""
    parts = np.asarray(parts)
    P = int(parts.max(initial=0)) + 1 if parts.ndim == 1 and np.issubdtype(parts.dtype, np.integer) else 1
    return check_parts(parts, n, P), P


def versions() -> dict:
    """Versions of Python, of spgnn (its own, also when run from a source tree that pip never installed) and of
    the installed libraries a partition can depend on."""
    from .. import __version__

    out = {"python": platform.python_version(), "spgnn": __version__}
    for lib in _LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    return out


def save_partition(path, parts, method: str, params: dict, seed: int, graph) -> Path:
    """Write `parts` (n,), checked against `graph` (a Graph or its adjacency) as a partition into its largest id + 1
    parts, to an .npz with its provenance: method, params, seed, library versions, and the size and pattern hash of
    the graph, so it is never applied to another graph."""
    adj = adjacency(graph)
    parts, nparts = check_vector(parts, adj.shape[0])
    meta = {"format": FILE_FORMAT, "method": str(method), "params": params, "seed": int(seed),
            "nparts": nparts, "graph": getattr(graph, "name", "graph"),
            "n": int(adj.shape[0]), "nnz": int(adj.nnz), "graph_hash": graph_hash(adj), "versions": versions()}
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:     # a file object: numpy would otherwise append .npz to other suffixes
            np.savez_compressed(f, parts=parts.astype(np.int32), meta=np.array(json.dumps(meta, default=str)))
    except OSError as e:
        raise SpgnnError(f"cannot write the partition to {path}: {e.strerror or e}; give a writable file "
                         "path") from None
    return path


def _form(path: Path) -> str:
    """A partition file's form, told apart by its first bytes: "npz" (`save_partition`'s zip), "npy" or "text"."""
    with path.open("rb") as f:
        magic = f.read(6)
    return "npz" if magic.startswith(b"PK") else "npy" if magic == b"\x93NUMPY" else "text"


def _saved(path: Path, parts: bool = True) -> tuple[np.ndarray | None, dict]:
    """(parts, or None when not `parts`, and meta) of a `save_partition` file; SpgnnError for another zip (a
    dataset's .npz given as a partition)."""
    with np.load(path, allow_pickle=False) as z:
        if not {"parts", "meta"} <= set(z.files):
            raise SpgnnError(f"{path} is no saved partition (it holds {', '.join(sorted(z.files)[:6]) or 'nothing'}, "
                             "not parts and meta: a dataset?): give a file spgnn partition --output FILE.npz wrote, "
                             "or a .npy or text part vector")
        return z["parts"] if parts else None, json.loads(str(z["meta"]))


def load_parts(path, adj=None, P: int | None = None) -> tuple[np.ndarray, dict]:
    """(parts, meta) from a file `save_partition` wrote (checked against graph `adj` and `P` when given), a
    .npy array, or a text file with one part id a line (meta empty for the last two); told apart by content."""
    path = Path(path)
    try:
        form = _form(path)
        if form == "npz":
            parts, meta = _saved(path)
        elif form == "npy":
            parts, meta = np.load(path, allow_pickle=False), {}
        else:
            with warnings.catch_warnings():     # an empty file: its length is the error, not numpy's warning
                warnings.simplefilter("ignore")
                parts, meta = np.loadtxt(path, dtype=np.int64, ndmin=1), {}
    except (OSError, ValueError, KeyError) as e:
        raise SpgnnError(f"cannot read partition file {path}: {e}") from None
    if meta and adj is not None and meta.get("graph_hash") != graph_hash(adj):
        raise SpgnnError(f"partition file {path} was made for another graph ({meta.get('graph')}: "
                         f"n={meta.get('n')}, nnz={meta.get('nnz')}) than this one (n={adj.shape[0]}, "
                         f"nnz={adj.nnz}; the edge structures differ): recompute it with spgnn partition")
    if meta and P is not None and meta.get("nparts") != P:
        raise SpgnnError(f"partition file {path} holds a {meta.get('nparts')}-way partition but {P} parts "
                         f"(processes) were asked for")
    return parts, meta


def file_sha256(path) -> str:
    """SHA-256 of a partition file's bytes: what a partition made from the file records of it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def saved_meta(path) -> dict:
    """What a `save_partition` file records of its partition (its meta only is read: method, params, seed, nparts,
    graph_hash, ...); {} for a bare part vector (.npy or text). SpgnnError when there is no such file."""
    path = Path(path)
    if not path.is_file():
        raise SpgnnError(f"no such partition file: {path}")
    try:
        return _saved(path, parts=False)[1] if _form(path) == "npz" else {}
    except (OSError, ValueError, KeyError) as e:
        raise SpgnnError(f"cannot read partition file {path}: {e}") from None


# ----------------------------------------------------------------------------------------------------------
# making partitions


def adjacency(graph):
    """A of `graph`, a `Graph`, or `graph` itself where it is A (n×n) already."""
    return getattr(graph, "adj", graph)


def make_parts(method, adj, P: int, seed: int = 0, **params) -> np.ndarray:
    """Part vector of graph `adj` (A, or a Graph) from a partitioner name, a file path, or an array; always
    checked."""
    return _make(method, adjacency(adj), P, seed, params)[0]


def check_method(method) -> None:
    """SpgnnError unless `method` names a partitioner or an existing saved partition file."""
    try:
        saved = Path(method).is_file()
    except (OSError, ValueError):       # a name too long for a path, a NUL in it
        saved = False
    if (not isinstance(method, str) or get_partitioner(method) is None) and not saved:
        raise SpgnnError(f"unknown partition {str(method)!r}: use one of {', '.join(available())} "
                         f"or the path of a saved .npz, .npy or text part vector")


def make_partition(method, adj, P: int, seed: int = 0, node_order: str = "natural", **params) -> Partition:
    """The checked Partition of graph `adj` (A, or a Graph), its nodes inside each part in `node_order`
    (`spgnn.partition.order`), with `info`: method, params, seed (or the file's), node_order, the seconds the
    partitioner and the order took and their peak memory (``peak_rss_growth_bytes``, see ``memory.rss_growth``)."""
    check_order(node_order)
    adj = adjacency(adj)
    with rss_growth() as mem, stage("partitioning", f"into {P} parts by {method}" if isinstance(method, (str, Path))
                                     else f"into {P} parts"):
        t0 = time.perf_counter()
        parts, info = _make(method, adj, P, seed, params)
        order = part_order(node_order, adj, Partition(parts, P))
        seconds = time.perf_counter() - t0
    return Partition(parts, P, info | {"node_order": node_order, "seconds": seconds,
                                       "peak_rss_growth_bytes": mem.get("bytes")}, order)


def fixed_parts(method) -> int | None:
    """How many parts a partition given already has (a `Partition`, an array, a saved partition file: its
    nparts, else its largest id + 1); None for a partitioner, which makes any number."""
    if isinstance(method, Partition):
        return method.P
    if isinstance(method, (str, Path)):
        if isinstance(method, str) and get_partitioner(method) is not None:
            return None
        check_method(method)            # a name of neither: "unknown partition", not "cannot read partition file"
        parts, meta = load_parts(method)
        return int(meta["nparts"]) if "nparts" in meta else int(np.max(parts)) + 1 if np.size(parts) else None
    return int(np.max(method)) + 1 if np.size(method) else None


def _make(method, adj, P: int, seed: int, params: dict) -> tuple[np.ndarray, dict]:
    n = adj.shape[0]
    if not isinstance(P, (int, np.integer)) or P < 1:
        raise SpgnnError(f"the number of parts must be a whole number of at least 1, got {P!r}")
    if P > n:
        raise SpgnnError(f"{P} processes but the graph has only {n} nodes: use at most {n} processes")
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:      # as --seed
        raise SpgnnError(f"a partition's seed is a whole number in [0, 2^63), as --seed, got {seed!r}")
    if isinstance(method, Partition):           # one made before (make_partition): its parts and provenance
        if params:
            raise SpgnnError(f"partitioner parameter(s) {', '.join(sorted(params))} go with a partitioner, not with "
                             "a Partition made already: drop them")
        if method.P != P:
            raise SpgnnError(f"a Partition into {method.P} parts, but {P} parts (processes) were asked for")
        return check_parts(method.parts, n, P), {k: method.info[k] for k in ("method", "params", "seed")
                                                  if k in method.info}
    fn = get_partitioner(method) if isinstance(method, str) else None
    saved = fn is None and isinstance(method, (str, Path))
    if saved:
        check_method(method)
    if fn is None and params:
        raise SpgnnError(f"partitioner parameter(s) {', '.join(sorted(params))} go with a partitioner, not with "
                         f"{f'the saved partition {str(method)!r}' if saved else 'a part array'}: drop them")
    if fn is not None:
        params = partitioner_params(fn, **params)
        parts, info = _called(method, fn, adj, P, seed, params), {"method": method, "params": params, "seed": seed}
        if np.ndim(parts) != 1:
            raise SpgnnError(f"partitioner {method!r} returned {type(parts).__name__} {np.shape(parts)}, not the part "
                             f"of each of the {n} nodes (an integer array of {n})")
    elif saved:
        parts, meta = load_parts(method, adj, P)
        info = {k: meta[k] for k in ("method", "params", "seed") if k in meta} | {"file": str(method),
                                                                                 "file_sha256": file_sha256(method)}
    else:
        parts, info = method, {"method": "array"}
    return check_parts(parts, n, P), info


def _called(name: str, fn, adj, P: int, seed: int, params: dict):
    """fn(adj, P, seed, **params); for a plug-in (not spgnn's own, whose failures are tracebacks to fix), SpgnnError
    naming partitioner `name` where it does not take those arguments or fails, but for running out of memory, and a
    copy of A, which it may change (``adj.data[:] = 1`` in place changed the graph trained on)."""
    if (getattr(fn, "__module__", None) or "").startswith("spgnn."):
        return fn(adj, P, seed, **params)
    try:
        inspect.signature(fn).bind(adj, P, seed, **params)
    except TypeError as e:
        raise SpgnnError(f"partitioner {name!r} does not take (adj, P, seed, **params) ({e}): a partitioner is "
                         "fn(adj, P, seed, **params) -> parts") from None
    except ValueError:                  # no signature to read (a builtin): called as it is
        pass
    try:
        return fn(adj.copy(), P, seed, **params)
    except Exception as e:
        if isinstance(e, SpgnnError) or out_of_memory(e):
            raise
        raise SpgnnError(f"partitioner {name!r} failed on a graph of {adj.shape[0]} nodes into {P} parts: "
                         f"{type(e).__name__}: {e}") from e


@dataclass(frozen=True)
class Partition:
    """A checked part vector with its renumbering: part p owns new ids offsets[p]:offsets[p+1], in ascending
    old ids or, given `order` (order[v] = v's place among its part's nodes; `spgnn.partition.order`), in that
    order; `info` says how it was made (see ``make_partition``)."""

    parts: np.ndarray
    P: int
    info: dict = field(default_factory=dict, compare=False, repr=False)
    order: np.ndarray | None = field(default=None, compare=False, repr=False)

    @cached_property
    def perm(self) -> np.ndarray:
        """perm[new] = old id: by part, then by `order` (or old id)."""
        if self.order is None:
            return np.argsort(self.parts, kind="stable")
        return np.lexsort((self.order, self.parts))

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

    def to_original(self, rows) -> np.ndarray:
        """Per-node rows given in the new order (one array, or the list of per-part blocks in part order)
        back in original ids: out[perm[new]] = rows[new]."""
        rows = np.concatenate(rows) if isinstance(rows, (list, tuple)) else np.asarray(rows)
        if rows.shape[0] != self.perm.size:
            raise SpgnnError(f"{rows.shape[0]} rows given but the partition covers {self.perm.size} nodes")
        out = np.empty_like(rows)
        out[self.perm] = rows
        return out
