"""Link prediction (``--task link``): the edges of a graph split into train/val/test, negatives drawn by hash,
the message-passing graph without the held-out edges, and what scoring the edges moves (`predict_edges`).

A rank holds the block row of A of its part (A[i, j] ≠ 0 for each edge j → i, rows and columns in the partition's
new ids) and the original ids of every node (`node_order`, O(n)). The edges it scores are those of its own rows:

    candidates      the entries (u, v) of its block row, u ≠ v; of a symmetric A only those with orig(u) < orig(v),
                    so that an undirected edge is one pair, scored once
    split           t = U(seed, min, max) of the pair's original ids (`spgnn.hashing.hash_uniform_array`): test when
                    t < test, validation when t < test + val, else training. The two entries of an undirected
                    edge get one split, whichever rank holds them, so the union is the same at every P
    message passing the block row without the validation and test pairs (both directions), normalised as the
                    encoder's layers normalise A (`TrainEdges`, an adjacency of its own)
    self pairs      with ``--self-pairs on``, each node's pair (u, u) trains as a positive too: the target is A + I,
                    as in GAE's reconstruction loss (Kipf & Welling, 2016), which lifts each embedding's norm
    negatives       for a positive (u, v), (u, w) with w = ⌊U(key, orig u, orig v)·n⌋, key = (seed, epoch, try);
                    redrawn (4 tries at most) while w = u or A[u, w] ≠ 0, which is checked in u's own block row.
                    Training draws one a positive every epoch; evaluation one a positive, once (epoch −1)
    given pairs     of an OGB link folder (`spgnn.graph.ogbl`, `HeldOut`): the graph is the training edges, so
                    every candidate trains (no hash holds any out: val = test = 0); the folder's validation and
                    test positives and negatives are scored by the rank that holds their source's row

Scoring: s(u, v) = z_u·z_v (``dot``) or an MLP on z_u ⊙ z_v (``mlp``), z the encoder's output (width
``--embedding``, else ``--hidden``).
The row z_v of a remote endpoint comes from its owner through a `Halo` over the columns the edges touch (phase
``edges``: the halo's set-up, the rows forward, their gradients back); on 2D/3D layouts, which split z by columns,
the partial dot products of a grid row are summed along it (an all-reduce, forward and backward). The training
loss is the mean binary cross-entropy over the training positives and as many negatives; the figures are the
ROC-AUC and the average precision of each split's positives against its negatives.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..comm.comm import Ledger, ring_words
from ..comm.halo import Halo, owner
from ..errors import SpgnnError
from ..graph import ogbl
from ..graph.adjacency import ADJACENCIES, Adjacency, get_adjacency, register_adjacency
from ..hashing import hash_uniform_array, mix_key
from ..layers.registry import get_layer
from ..options import Option
from ..partition.share import gcn_degree
from ..sparse.csr import row_ids
from ..spmm import registry as spmm
from .registry import SPLITS, Task, register_task

TAG = 0x11E4            # the hash domain of link prediction's draws (split, negatives)
TRIES = 4               # draws of a negative before the last is kept
DECODERS = ("dot", "mlp")
@dataclass(frozen=True)
class EdgeSplit:
    """The fractions of the edges held out for validation and test, and the seed of the split and negatives."""

    val: float = 0.05
    test: float = 0.1
    seed: int = 0

    def check(self) -> EdgeSplit:
        if not (0 < self.val < 1 and 0 < self.test < 1 and self.val + self.test < 1):
            raise SpgnnError(f"--val-edges and --test-edges must be fractions above 0 whose sum is below 1 (every "
                             f"split needs edges to judge), got {self.val} and {self.test}")
        return self

    def code(self, a, b) -> np.ndarray:
        """0 (train), 1 (val) or 2 (test) for the pairs of original ids (a, b), a < b."""
        t = hash_uniform_array(mix_key(self.seed, TAG), a, b)
        return np.where(t < self.test, 2, np.where(t < self.test + self.val, 1, 0)).astype(np.int8)

    def identity(self) -> str:
        return f"val {self.val} test {self.test} seed {self.seed}"


def node_order(parts) -> np.ndarray:
    """perm[new id] = original id for every node (int64, O(n)): from the partition in memory, or read from each
    part's ``node_ids.npy`` of a partitioned folder (no communication)."""
    if hasattr(parts, "partition"):
        return np.asarray(parts.partition.perm, np.int64)
    return np.concatenate([np.load(Path(parts.path) / f"part-{p:05d}" / "node_ids.npy")
                           for p in range(parts.nparts)]).astype(np.int64)


def inverse(perm: np.ndarray) -> np.ndarray:
    """inv[original id] = new id."""
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    return inv


def _entries(share, perm: np.ndarray, split: EdgeSplit) -> tuple:
    """(row, column, original u, original v, split code) of each entry of `share`'s block row."""
    rows, cols = row_ids(share.adj.indptr).astype(np.int64), share.adj.indices.astype(np.int64)
    ou, ov = np.asarray(share.node_ids, np.int64)[rows], perm[cols]
    return rows, cols, ou, ov, split.code(np.minimum(ou, ov), np.maximum(ou, ov))


def message_passing(share, perm: np.ndarray, split: EdgeSplit):
    """`share` without the held-out entries of `split` (its degrees recomputed): the graph the encoder runs on."""
    a, (_, _, ou, ov, code) = share.adj, _entries(share, perm, split)
    keep = (code == 0) | (ou == ov)
    indptr = np.concatenate([[0], np.cumsum(keep)])[a.indptr]
    kept = sp.csr_matrix((a.data[keep], a.indices[keep], indptr.astype(np.int64)), shape=a.shape)
    return replace(share, indptr=kept.indptr, indices=kept.indices, data=kept.data,
                   degree=gcn_degree(kept, share.rows.start))


class LinkShare:
    """The edges of one rank's rows (see the module docstring): candidates `src` (local rows), `dst` (new ids),
    `code` (0 train, 1 val, 2 test), and the blocks `held` (src, dst, label, code) of the pairs of `given` (an OGB
    folder's `HeldOut`) whose source it holds; `self_pairs`: whether each row's pair with itself trains as a
    positive. It keeps of `share` its part, rows and their original ids, not its block row."""

    def __init__(self, share, perm: np.ndarray, split: EdgeSplit, given=None, self_pairs: bool = False):
        self.perm, self.split, self.n, self.first = perm, split, share.info.n, share.rows.start
        self.part, self.n_rows, self.node_ids = share.part, share.n_rows, np.asarray(share.node_ids, np.int64)
        self.offsets, self.self_pairs = share.info.offsets, self_pairs
        rows, cols, ou, ov, code = _entries(share, perm, split)
        cand = ou < ov if share.info.symmetric else ou != ov
        self.src, self.dst, self.code = rows[cand], cols[cand], code[cand]
        self.keys = rows * self.n + cols            # sorted: CSR rows in order, columns sorted in each
        self.held = [] if given is None else self.mine(given)

    def mine(self, given) -> list:
        """Per held-out split of `given`, its positives then its negatives whose source is one of this rank's rows:
        (src local rows, dst new ids, label 1/0, split code), in the order `given` lists them."""
        def here(a):
            u = self.inv[a] - self.first
            return (u >= 0) & (u < self.n_rows)

        blocks = []
        for split in given.pairs:
            src, dst, nsrc, ndst = given.share(split, here)
            for label, a, b in ((1, src, dst), (0, nsrc, ndst)):
                blocks.append((self.inv[a] - self.first, self.inv[b], label, SPLITS.index(split)))
        return blocks

    def positives(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(src local rows, dst new ids) of the split's positive pairs."""
        mine = self.code == SPLITS.index(split)
        return self.src[mine], self.dst[mine]

    def negatives(self, src: np.ndarray, dst: np.ndarray, epoch: int) -> np.ndarray:
        """The new id of the negative w drawn for each positive (src, dst) at `epoch` (−1: evaluation's)."""
        ou, ov = self.node_ids[src], self.perm[dst]
        w, todo = np.empty(src.size, np.int64), np.arange(src.size)
        for t in range(TRIES):
            drawn = np.minimum((hash_uniform_array(mix_key(self.split.seed, TAG, epoch, t), ou[todo], ov[todo])
                                * self.n).astype(np.int64), self.n - 1)
            w[todo] = self.inv[drawn]
            todo = todo[(drawn == ou[todo]) | self.is_edge(src[todo], w[todo])]
            if not todo.size:
                break
        return w

    @cached_property
    def inv(self) -> np.ndarray:
        """inv[original id] = new id (O(n); to find a negative's row)."""
        return inverse(self.perm)

    def is_edge(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Whether A[src, dst] ≠ 0 (src local rows, dst new ids), looked up in the block row."""
        key = src * self.n + dst
        if not self.keys.size:
            return np.zeros(key.size, bool)
        return self.keys[np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)] == key

    def counted(self) -> list[int]:
        """Positive pairs of each split held here."""
        return [int(np.count_nonzero(self.code == k)) + sum(s.size for s, _, y, c in self.held if y and c == k)
                for k in range(len(SPLITS))]

    def training(self, epoch: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The pairs scored at training `epoch`: (src, dst) of the positives then their negatives, and how many
        positives (the self pairs last, when trained)."""
        src, dst = self.positives("train")
        if self.self_pairs:
            rows = np.arange(self.n_rows, dtype=np.int64)
            src, dst = np.concatenate([src, rows]), np.concatenate([dst, rows + self.first])
        return np.concatenate([src, src]), np.concatenate([dst, self.negatives(src, dst, epoch)]), src.size

    def evaluation(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The pairs every evaluation scores: (src, dst, label 1/0, split code), the candidates and one negative
        each (epoch −1), then the `held` blocks."""
        src, dst = self.src, self.dst
        blocks = [(src, dst, 1, self.code), (src, self.negatives(src, dst, -1), 0, self.code)] + self.held
        return (np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks]),
                np.concatenate([np.full(b[0].size, b[2], np.float32) for b in blocks]),
                np.concatenate([np.broadcast_to(np.int8(b[3]), b[0].shape) for b in blocks]))


class TrainEdges(Adjacency):
    """Adjacency `base` of the message-passing graph: A without the held-out pairs of `split`, which the block
    row drops (`message_passing`) before `base` normalises it. Registered per split and node order
    (`train_edges`)."""

    def __init__(self, base: Adjacency, split: EdgeSplit, perm: np.ndarray, name: str):
        self.base, self.split, self.perm, self.name = base, split, perm, name
        self.remote_degrees, self.symmetric, self.unit_diagonal = base.remote_degrees, base.symmetric, \
            base.unit_diagonal

    def of(self, adj):
        a = sp.coo_matrix(adj)
        code = self.split.code(np.minimum(a.row, a.col), np.maximum(a.row, a.col))
        keep = (code == 0) | (a.row == a.col)
        return self.base.of(sp.csr_matrix((a.data[keep], (a.row[keep], a.col[keep])), shape=a.shape))

    def block_row(self, share, halo=None):
        return self.base.block_row(message_passing(share, self.perm, self.split), halo)

    def block_nnz(self, block_nnz, sizes, diagonal):
        return self.base.block_nnz(block_nnz, sizes, diagonal)


def train_edges(base, split: EdgeSplit, perm: np.ndarray) -> str:
    """The name of `TrainEdges` of adjacency `base` under `split` and node order `perm` (registered once)."""
    base = get_adjacency(base)
    digest = hashlib.sha1(perm.tobytes() + split.identity().encode()).hexdigest()[:12]
    name = f"{base.name}@train-edges-{digest}"
    if name not in ADJACENCIES:
        register_adjacency(TrainEdges(base, split, perm, name))
    return name


# -- what scoring the edges moves --------------------------------------------------------------------------
def halo_rows(dsts: list, offsets: np.ndarray) -> np.ndarray:
    """R[p, q]: the distinct rows of part q ≠ p that part p's scored pairs (destinations `dsts[p]`) touch."""
    B = len(offsets) - 1
    R = np.zeros((B, B), np.int64)
    for p, dst in enumerate(dsts):
        R[p] = np.bincount(owner(np.unique(dst), offsets), minlength=B)
        R[p, p] = 0
    return R


def predict_edges(parts, cls, shape: tuple, split: EdgeSplit, width: int, epochs: int, evals: int,
                  start: int = 0, given=None, self_pairs: bool = False) -> list[Ledger]:
    """The phase ``edges`` of each rank's ledger for `epochs` training epochs (from `start`) and `evals`
    evaluations on `cls`'s layout of grid `shape` (an OGB folder's pairs `given`, if any; `self_pairs` as the
    run's ``--self-pairs``), embeddings `width` wide: the pair counts' sum, per epoch a `Halo` over the pairs'
    destinations (set-up, rows, their gradients back), the loss's sum, and on 2D/3D the partial dot products'
    all-reduce forward and backward; per evaluation the rows (the evaluation halo set up once) and the all-reduce.
    Computed from every part's share (one process; for tests and small graphs)."""
    perm = node_order(parts)
    shares = [LinkShare(parts.share(p), perm, split, given, self_pairs) for p in range(parts.nparts)]
    offsets = shares[0].offsets
    train = [[s.training(e) for s in shares] for e in range(start, start + epochs)]
    evaluation = [s.evaluation() for s in shares]
    R_train = [halo_rows([t[1] for t in epoch], offsets) for epoch in train]
    R_eval = halo_rows([e[1] for e in evaluation], offsets)
    ledgers = []
    for rank in range(math.prod(shape)):
        coord = tuple(int(x) for x in np.unravel_index(rank, shape))
        part, (g, me) = cls.part_of(shape, coord), cls.member(shape, cls.rows_group_name, rank)
        C, j = (1, 0) if cls.whole_rows else (shape[1], coord[1])
        row = 4 * len(range(width)[column_block(width, C, j)])
        calls = reduce_call(len(SPLITS), 8, cls.rows_group_name, g, me)
        for R, epoch in zip(R_train, train):
            calls += fetch_calls(R, part, cls.parts_group, row, setup=True, backward=True)
            if C > 1:
                calls += 2 * reduce_call(epoch[part][0].size, 4, "row", C, j)
            calls += reduce_call(1, 8, cls.rows_group_name, g, me)
        for k in range(evals):
            calls += fetch_calls(R_eval, part, cls.parts_group, row, setup=k == 0, backward=False)
            if C > 1:
                calls += reduce_call(evaluation[part][0].size, 4, "row", C, j)
        ledger = Ledger()
        for op, group, sent, recv, messages in calls:
            ledger.record(("edges", None, op, group), sent, recv, messages, 0.0)
        ledgers.append(ledger)
    return ledgers


def reduce_call(words: int, itemsize: int, group: str, size: int, at: int) -> list:
    """One all-reduce of `words` words over a group of `size` (`spgnn.comm.comm.Comm.all_reduce`)."""
    b = ring_words(words, size, at) * itemsize
    return [("all_reduce", group, b, b, 2 * (size - 1))]


def fetch_calls(R: np.ndarray, part: int, group: str, row_bytes: int, setup: bool, backward: bool) -> list:
    """Part `part`'s calls to bring the rows R[part] names (`row_bytes` each) from their owners: the halo's
    set-up (when `setup`), the rows, and their gradients returned (when `backward`). None on one part."""
    if len(R) == 1:
        return []
    need, give = R[part], R[:, part]
    calls = (Halo.cost(R, part, group) if setup else []) + Halo.gather_cost(R, part, group, row_bytes)
    return calls + ([("all_to_all", group, need.sum() * row_bytes, give.sum() * row_bytes, np.count_nonzero(need))]
                    if backward else [])


def column_block(f: int, C: int, j: int) -> slice:
    """The columns of an f-wide matrix grid column j of C holds on 2D/3D (`spgnn.spmm.summa`'s split)."""
    from ..spmm.summa import column_slice

    return column_slice(f, C, j)


@register_task
class Link(Task):
    """Whether an edge joins two nodes: node embeddings from the encoder, a score per pair, binary cross-entropy,
    judged by ROC-AUC (and average precision), or on an OGB link folder by OGB's Hits@K or MRR. Trained by
    `spgnn.train.link.LinkTrainer`."""

    name = "link"
    summary = "link prediction: edges split train/val/test, dot or MLP decoder, ROC-AUC"
    metric, metric_label, node = "rocauc", "ROC-AUC", False
    options = (Option("decoder", str, "dot", "--task link: an edge's score from its ends' embeddings, z_u·z_v (dot) "
                      "or an MLP on z_u ⊙ z_v (mlp)", valid=lambda v: v in DECODERS, must=" or ".join(DECODERS)),
               Option("val_edges", float, 0.05, "--task link: the fraction of the edges held out for validation",
                      valid=lambda v: 0 < v < 1, must="a fraction in (0, 1)"),
               Option("test_edges", float, 0.1, "--task link: the fraction of the edges held out for test",
                      valid=lambda v: 0 < v < 1, must="a fraction in (0, 1)"),
               Option("self_pairs", str, "off", "--task link: on: each node's pair with itself trains as a positive "
                      "too, the target A + I of GAE's reconstruction loss", valid=lambda v: v in ("on", "off"),
                      must="on or off"),
               Option("embedding", int, 0, "--task link: the width of the node embeddings, the encoder's output "
                      "(0: --hidden)", valid=lambda v: v >= 0, must="a width >= 1, or 0 for --hidden"),
               Option("ogb_split", str, "", "--task link: the OGB link folder (FOLDER[:TYPE]) whose split the run "
                      "trains and is judged by, when --dataset is a partitioned folder of its graph (default: "
                      "--dataset, when it is one)", valid=lambda v: ogbl.ogbl_folder(v) is not None,
                      must="an OGB link folder (raw/ and split/TYPE/train.pt), FOLDER or FOLDER:TYPE"))

    def out_dim(self, info) -> int:         # the encoder's output is the embedding (its width is cfg's)
        raise SpgnnError("--task link's output width is the embedding's: LinkTrainer builds its encoder")

    def check_options(self, cfg) -> None:
        """Before any work: on an OGB link folder (``--ogb-split``, else ``--dataset``) no fractions, whose split is
        the folder's; else fractions that leave every split some edges, and an encoder without attention (it would
        run over the held-out edges too); ``--decoder mlp`` only on a layout of whole rows."""
        folder = ogbl.ogbl_folder(cfg.ogb_split or cfg.dataset)
        if folder and (given := [o.flag for o in self.options if o.name in ("val_edges", "test_edges")
                                 and getattr(cfg, o.name) != o.default]):
            raise SpgnnError(f"{' and '.join(given)}: {folder[0]} is an OGB link folder, whose split is its own: "
                             f"drop {'them' if len(given) > 1 else 'it'}")
        if not folder:
            EdgeSplit(cfg.val_edges, cfg.test_edges, cfg.seed).check()
            if "attention" in get_layer(cfg.model).needs:
                raise SpgnnError(f"--task link cannot train --model {cfg.model}: its attention runs over the whole "
                                 "graph, the held-out edges included; choose gcn, sage, gin, appnp or gcnii")
        if cfg.decoder == "mlp" and cfg.algo != "auto":
            spmm.get(cfg.algo).require("whole_rows", "--decoder mlp")

    def check(self, info) -> None:
        if info.nnz < 2 * len(SPLITS):
            raise SpgnnError(f"--task link splits the edges of {info.name!r} into train, val and test, but it has only "
                             f"{info.nnz} entries: use a graph with more edges")

    def trainer(self):
        from ..train.link import LinkTrainer

        return LinkTrainer
