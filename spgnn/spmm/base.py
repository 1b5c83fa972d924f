"""The distributed-SpMM interface every parallel algorithm implements.

An algorithm owns a data layout (which rows and columns of the n×n sparse A and of an n×f dense H each
rank holds), the forward Z = A·H and the backward dL/dH = Aᵀ·dL/dZ, and the dense operations whose
distributed form depends on the layout (H·W, row-wise log-softmax, the weight-gradient group). Layers are
written once against this interface.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..comm import autograd as autograd_comm
from ..comm.comm import Comm, Group
from ..comm.grid import ProcessGrid
from ..comm.halo import Halo
from ..dense import matmul
from ..errors import SpgnnError
from ..graph.adjacency import get_adjacency
from ..partition.partition import Partition
from ..sparse import attention
from . import registry


def check_attend(v, s_src, s_dst, slope, dropout, rows: int) -> None:
    """SpgnnError unless `DistSpMM.attend`'s inputs are V (rows×H×F), s_src and s_dst (rows×H), a finite slope and
    dropout in [0, 1)."""
    if not (isinstance(v, torch.Tensor) and v.dim() == 3 and v.shape[0] == rows
            and all(isinstance(s, torch.Tensor) and s.shape == v.shape[:2] for s in (s_src, s_dst))):
        got = ", ".join(str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__
                        for t in (v, s_src, s_dst))
        raise SpgnnError(f"attend takes V of this rank's {rows} rows×heads×features and s_src, s_dst of rows×heads, "
                         f"got shapes {got}")
    if not all(isinstance(x, numbers.Real) and math.isfinite(x) for x in (slope, dropout)) or not 0 <= dropout < 1:
        raise SpgnnError(f"attend: slope must be a finite number and dropout in [0, 1), got {slope!r} and {dropout!r}")


@dataclass
class Block:
    """A rank's block row of the normalised A: `a` (n_p×n scipy CSR, columns in the partitioned ids), the part
    offsets (B+1), its part, the original ids of its rows, whether the whole normalised A is symmetric, and
    the `Halo` of its block row in the algorithm's `parts_group` (None unless built)."""

    a: object
    offsets: np.ndarray
    part: int
    node_ids: np.ndarray
    symmetric: bool
    halo: Halo | None = None
    adjacency: str | None = None

    @property
    def n(self) -> int:
        return self.a.shape[1]

    @classmethod
    def of(cls, share, adjacency, halo: Halo | None) -> Block:
        """The block row of `share` normalised by `adjacency` (an `Adjacency` or its name; remote degrees
        through `halo`)."""
        adjacency = get_adjacency(adjacency)
        return cls(share.normalized(adjacency, halo), share.info.offsets, share.part, share.node_ids,
                   share.info.symmetric and adjacency.symmetric, halo, adjacency.name)


class RowLayout:
    """The layout hooks of a rank holding whole rows of H (every column): the defaults of every algorithm
    but 2D/3D, which split the columns too (`spgnn.spmm.summa`). Needs `comm` and `device`."""

    device = "cpu"
    whole_rows = True           # each rank holds whole rows of H (False: split by columns too)
    attention = False           # implements `attend` (runs GAT)
    adjacency = None            # the name of the adjacency its sparse product multiplies by (None: as given)

    @classmethod
    def require(cls, need: str, what: str) -> None:
        """SpgnnError unless this layout offers `need` ("whole_rows", "attention"), which `what` needs (on the
        class, before any set-up, or on a built layout)."""
        if not getattr(cls, need):
            offer = [n for n, c in registry.ALGORITHMS.items() if getattr(c, need)]
            raise SpgnnError(f"{what} needs {need.replace('_', ' ')}, which --algo {cls.name} does not offer: "
                             f"use --algo {' or '.join(offer)}")

    def check_adjacency(self, adjacency) -> None:
        """SpgnnError unless `adjacency` (a name, an `Adjacency` or None) is the one this layout multiplies by."""
        if adjacency is not None and self.adjacency is not None and get_adjacency(adjacency).name != self.adjacency:
            raise SpgnnError(f"this layout multiplies by adjacency {self.adjacency!r}, not "
                             f"{get_adjacency(adjacency).name!r}: build it with that adjacency too")

    def scatter(self, x) -> torch.Tensor:
        """This rank's block of an n×f dense input given as its part's rows x (n_p×f, numpy or tensor): the
        columns it holds (`columns`), contiguous, on its device."""
        x = torch.as_tensor(x)
        return x[:, self.columns(x.shape[1])].contiguous().to(self.device)

    def layer(self, i: int):
        """Context in which the collectives are layer i's in the ledger (the phase unchanged)."""
        return self.comm.at_layer(i)

    def linear(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        """H·W (+ b) with W (f_in×f_out) replicated: this rank's rows of the product."""
        return matmul(h, w, b)

    def kept(self, h: torch.Tensor, adjacency=None) -> bool:
        """Whether ``spmm(h, adjacency)`` returns a product made once and kept (`spgnn.DistGraph.kept`): never on a
        bare layout, which keeps nothing."""
        return False

    def columns(self, f: int) -> slice:
        """The columns of an n×f dense matrix that this rank holds."""
        return slice(0, f)

    def column_group(self):
        """The ranks that hold the other column blocks of this rank's rows (None: it holds whole rows)."""
        return None

    def cols(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's columns of a per-column vector (a bias): t[..., columns(len)]."""
        return t[..., self.columns(t.shape[-1])]

    def label_rows(self, y: torch.Tensor, f: int) -> torch.Tensor:
        """Which local rows' label (a column of f) this rank holds: the rows whose loss and accuracy it counts."""
        return torch.ones_like(y, dtype=torch.bool)

    def own_rows(self, n: int) -> torch.Tensor:
        """Which of its n rows this rank counts in a sum over `rows_group` of per-row figures: all of them where the
        group's members hold disjoint rows."""
        return torch.ones(n, dtype=torch.bool)

    def argmax(self, h: torch.Tensor, f: int) -> torch.Tensor:
        """The (global) column of each local row's largest entry among f, the first on a tie."""
        return h.argmax(dim=1)


class DistSpMM(RowLayout):
    """Z = A·H over a process grid. Subclasses implement `_forward` and `_backward` (both on local
    blocks, without autograd) and may override the layout hooks."""

    name = ""
    summary = ""                # what it does, in a phrase (``spgnn train --help``)
    options: tuple = ()         # its `Option`s: TrainConfig fields and ``spgnn train`` flags
    grid_names: tuple = ("part",)

    @classmethod
    def grid_shape(cls, P: int, **shape_options) -> tuple:
        """The grid shape this algorithm runs on for P processes, given the values of its options that choose
        the shape (`Option.shapes`; a default means the algorithm's default shape). Raises SpgnnError for
        values it cannot honour."""
        return (P,)

    @classmethod
    def check_values(cls, values: dict) -> None:
        """SpgnnError for values of its options (by name; absent ones at their defaults) that no run can honour
        together, e.g. one that only acts with another switched off; each is valid alone (`Option.valid`)."""

    @classmethod
    def grid_for(cls, P: int, **values) -> tuple:
        """`grid_shape` for P processes from option values of any algorithm (a config's): another algorithm's
        option set to a value other than its default or an inert one is an error that names who takes it, and so
        are values of its own that `check_values` refuses."""
        cls.check_values(values)
        mine = {o.name for o in cls.options}
        for o in registry.options().values():
            v = values.get(o.name, o.default)
            if o.name not in mine and o.is_set(v):
                raise SpgnnError(f"{o.flag} applies to --algo {' and '.join(registry.declaring(o.name))}, "
                                 f"not {cls.name}")
        return cls.grid_shape(P, **{o.name: values.get(o.name, o.default) for o in cls.options if o.shapes})

    @classmethod
    def candidates(cls, P: int) -> list[dict]:
        """The values of its shape options that ``--algo auto`` compares on P processes (each a dict)."""
        return [{}]

    @classmethod
    def constructor_options(cls, values) -> dict:
        """The constructor's keyword options (those not choosing the shape) from a config or a dict."""
        get = values.get if isinstance(values, dict) else lambda k, d: getattr(values, k, d)
        return {o.name: get(o.name, o.default) for o in cls.options if not o.shapes}

    @classmethod
    def num_parts(cls, shape: tuple) -> int:
        """How many vertex parts (row blocks of H) a grid of `shape` splits the graph into."""
        return shape[0]

    @classmethod
    def part_of(cls, shape: tuple, coord: tuple) -> int:
        """The vertex part whose rows the rank at `coord` holds."""
        return coord[0]

    parts_group = "part"        # the group whose member q holds part q: halo and degree exchanges
    uses_halo = False           # whether the layout is built on the `Halo` of its block row

    @classmethod
    def planes(cls) -> dict:
        """Groups spanning several grid dimensions that the grid must build ({name: dimension names})."""
        return {}

    def __init__(self, block: Block, comm: Comm, grid: ProcessGrid, device: str = "cpu"):
        """`block`: this rank's block row of the normalised A (part ``part_of(grid.shape, grid.coord)``)."""
        self.comm, self.grid, self.device = comm, grid, device
        self.n, self.offsets, self.part = block.n, block.offsets, block.part
        self.sizes = np.diff(self.offsets)
        self.rows = slice(int(self.offsets[self.part]), int(self.offsets[self.part + 1]))
        self.node_ids, self.adjacency = block.node_ids, block.adjacency

    @classmethod
    def from_share(cls, share, norm, comm: Comm, grid: ProcessGrid, device: str = "cpu", **options):
        """The algorithm from this rank's `spgnn.partition.share.Share` (part ``part_of(grid.shape, grid.coord)``)
        with A normalised by `norm` (an `Adjacency` or its name): the `Halo` (when the layout or the adjacency's
        remote degrees need it), the normalised block row, then the layout's own set-up, all in phase "setup"."""
        with comm.phase("setup"):
            halo = Halo(share.indices, share.info.offsets, share.part, comm, grid.group(cls.parts_group)) \
                if cls.uses_halo or get_adjacency(norm).remote_degrees else None
            return cls._built(cls(Block.of(share, norm, halo), comm, grid, device, **options))

    @classmethod
    def from_matrix(cls, adj, partition: Partition, comm: Comm, grid: ProcessGrid, device: str = "cpu", **options):
        """The algorithm on a global n×n matrix `adj` given whole (already normalised, original ids): each rank
        slices its block row, then sets up by communication as from a share (for tests and small graphs)."""
        from ..graph.graph import is_symmetric
        from ..partition.share import block_row

        part = cls.part_of(grid.shape, grid.coord)
        a = block_row(adj, partition, part)
        halo = Halo(a.indices, partition.offsets, part, comm, grid.group(cls.parts_group)) if cls.uses_halo else None
        ids = partition.perm[partition.offsets[part]:partition.offsets[part + 1]]
        return cls._built(cls(Block(a, partition.offsets, part, ids, is_symmetric(adj), halo), comm, grid, device,
                              **options))

    @classmethod
    def _built(cls, algo):
        """`algo`, checked to have run `DistSpMM.__init__` (a plug-in's __init__ without it failed at its first
        product, on an attribute missing)."""
        if "offsets" not in vars(algo):
            raise SpgnnError(f"algorithm {cls.name!r}: its __init__ does not call super().__init__(block, comm, grid, "
                             "device) before its own set-up")
        return algo

    @property
    def hides_comm(self) -> bool:
        """Whether its exchanges run behind its products (``--overlap on``): what the time model subtracts."""
        return getattr(self, "overlap", False)

    def graph_bytes(self) -> int:
        """Bytes of the graph this layout keeps (blocks of A, halo plans, wire buffers)."""
        return 0

    # -- layout ---------------------------------------------------------------------------------------
    def rows_group(self) -> Group:
        """The group over which per-rank partial sums add up to global ones (the loss, the correct counts):
        its members' rows cover every row exactly once, each row counted where `label_rows` says."""
        return self.grid.group(self.rows_group_name)

    def grad_group(self) -> Group:
        """Ranks over which parameter gradients are summed."""
        return self.rows_group()

    # -- cost -----------------------------------------------------------------------------------------
    rows_group_name = "world"

    @classmethod
    def spmm_cost(cls, stats, shape: tuple, rank: int, f: int) -> dict:
        """What `rank` moves for one SpMM of width f (float32), exactly as its ledger records it:
        {"forward" | "backward": [(op, group name, sent bytes, received bytes, messages), …]},
        one tuple a collective call. `stats` gives the partition's block statistics (`spgnn.cost.BlockStats`)."""
        raise NotImplementedError(f"{cls.name} has no cost model")

    @classmethod
    def attend_cost(cls, stats, shape: tuple, rank: int, heads: int, f: int, dropout: bool = False) -> dict:
        """What `rank` moves for one attention (`attend`, `heads` heads of f features), in `spmm_cost`'s form, and
        under "setup" what it moves once a run for attention `dropout` (the edges' original ids)."""
        raise NotImplementedError(f"{cls.name} has no cost model for attention")

    attend_work: dict = {}      # attention's compute, its scores' terms included: {"forward" | "backward":
                                # (operations, bytes an edge, an edge and head, a feature gathered)}, as
                                # `spgnn.cost.attend_work` charges them
    attend_dropout_work: dict = {}  # what attention dropout adds in training, in the same form
    attend_fresh: dict = {}     # attention's results the size of V and of X (`attend_sizes`) a direction,
                                # {"forward" | "backward": (V's, X's)}: each of 32 MiB or more a fresh mapping

    @staticmethod
    def attend_sizes(stats, share, rank: int, heads: int, f: int) -> tuple[int, int, int]:
        """Bytes (X, E, V) of one attention on `rank` (`share`: its `spgnn.cost.LocalShare`): [V | s_src] of the
        rows it gathers, an edges×heads tensor, V (n_r×heads×f)."""
        return 4 * share.rows * heads * (f + 1), 4 * share.nnz * heads, 4 * share.rows * heads * f

    @classmethod
    def attend_memory(cls, stats, share, rank: int, heads: int, f: int, dropout: bool = False) -> dict:
        """What one attention holds on `rank` (`share`: its `spgnn.cost.LocalShare`): {"saved": bytes autograd
        keeps for the backward, its V among them (which the products giving the scores keep too), "working": the
        most its forward and backward hold beyond that at once}."""
        raise NotImplementedError(f"{cls.name} has no memory model for attention")

    @classmethod
    def setup_cost(cls, stats, shape: tuple, rank: int) -> list:
        """What `rank` moves to build its layout from its block row (beyond the `Halo` set-up and GCN's
        degrees, which `spgnn.cost` adds), in `spmm_cost`'s call form."""
        return []

    @classmethod
    def dense_cost(cls, stats, shape: tuple, rank: int, op: str, f_in: int, f_out: int = 0) -> dict:
        """What `rank` moves for one dense operation of the layout, in `spmm_cost`'s form
        ({"forward" | "backward": [...]}): op "linear" (H·W, W f_in×f_out), "log_softmax" and "argmax"
        (row-wise over f_in columns). Row layouts move nothing."""
        return {"forward": [], "backward": []}

    @classmethod
    def has_cost_model(cls, attention: bool = False) -> bool:
        """Whether this algorithm states its `spmm_cost` (a subclass with another schedule resets it to
        ``DistSpMM.spmm_cost``), and with `attention` its `attend_cost` too."""
        return cls.spmm_cost.__func__ is not DistSpMM.spmm_cost.__func__ and \
            (not attention or cls.attend_cost.__func__ is not DistSpMM.attend_cost.__func__)

    @classmethod
    def member(cls, shape: tuple, group: str, rank: int) -> tuple[int, int]:
        """(size, position of `rank`) of the group `group` in a grid of `shape` (row-major ranks)."""
        if group == "world":
            return int(np.prod(shape)), rank
        d = cls.grid_names.index(group)
        return shape[d], int(np.unravel_index(rank, shape)[d])

    # -- products -------------------------------------------------------------------------------------
    def spmm(self, h: torch.Tensor, adjacency=None) -> torch.Tensor:
        """Z = A·H for the local rows; differentiable (backward dH = Aᵀ·dZ). `adjacency`: the one the caller
        means (checked against the layout's)."""
        self.check_adjacency(adjacency)
        return autograd_comm.linear_map(h, self.comm, self._shaped("_forward"), self._shaped("_backward"))

    def _shaped(self, name: str):
        """Method `name` (`_forward` or `_backward`), checked to return a tensor of its input's shape and dtype (this
        rank's block of Z = A·H has H's, and dH has dZ's): a plug-in's slip is named where it happens."""
        product = getattr(self, name)

        def checked(x: torch.Tensor) -> torch.Tensor:
            y = product(x)
            if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype:
                got = f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor) else type(y).__name__
                raise SpgnnError(f"--algo {self.name}: {name} returned {got} for an input of "
                                 f"{tuple(x.shape)} {x.dtype}; it must return this rank's block of the product, "
                                 "of its input's shape and dtype")
            return y
        return checked

    def log_softmax(self, h: torch.Tensor) -> torch.Tensor:
        """Row-wise log-softmax over the class columns."""
        return F.log_softmax(h, dim=1)

    # -- attention (GAT) --------------------------------------------------------------------------------
    def attend(self, v: torch.Tensor, s_src: torch.Tensor, s_dst: torch.Tensor, slope: float,
               dropout: float = 0.0, key: int = 0) -> torch.Tensor:
        """out_i = Σ_{j→i} softmax_j(LeakyReLU(s_src[j] + s_dst[i]))·V_j over the in-edges of A's pattern
        (`spgnn.sparse.attention`), for the local rows: v (n_i×H×F), s_src and s_dst (n_i×H) → n_i×H×F;
        differentiable in all three. `dropout`, `key`: attention dropout drawn by `attention.edge_mask`."""
        raise SpgnnError(f"--algo {self.name} does not support attention (GAT): use "
                         f"{' or '.join(registry.attention_algorithms())}")

    def _edge_mask(self, rows, col_ids, heads: int, p: float, key: int, dtype, device="cpu"):
        """Attention dropout mask of local-row edges rows ← col_ids (original node ids of the columns)."""
        return attention.edge_mask(self.node_ids[rows], col_ids, self.n, heads, p, key, dtype, device)

    def _forward(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _backward(self, g: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
