"""The process grid: P = ∏ shape processes with named dimensions, each dimension a communication group; grid
shapes as text ("4x2" ↔ (4, 2)) and the divisors they are made of.

Ranks lie on the grid in row-major order: ``grid.coord`` is this rank's coordinates, ``grid.group("row")`` the
`Group` of the ranks that share them in every other dimension (made by `Comm.group`, which gives groups of the same
ranks one process group).
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..errors import SpgnnError
from .comm import Comm, Group


def divisors(m: int) -> list[int]:
    """The divisors of m, ascending."""
    return [d for d in range(1, m + 1) if m % d == 0]


def parse_grid(text: str) -> tuple[int, ...]:
    """"4x2" → (4, 2); raises SpgnnError for anything but positive integers joined by x (ASCII digits only: int()
    also reads "1_0", " 2", "+2" and other scripts' digits)."""
    text = str(text)
    shape = tuple(int(s) for s in text.lower().split("x")) if re.fullmatch(r"[0-9]+([xX][0-9]+)*", text) else ()
    if not shape or min(shape) < 1:
        raise SpgnnError(f"--grid must be positive integers joined by x (as 4x2 or 2x2x2), got {text!r}")
    return shape


def format_grid(shape) -> str:
    """(4, 2) → "4x2"."""
    return "x".join(map(str, shape))


class ProcessGrid:
    """P processes arranged as ``shape`` (d0 × d1 × …) with dimension names ``names``."""

    def __init__(self, comm: Comm, shape: tuple, names: tuple, device: str = "cpu", planes: dict | None = None):
        """`planes`: {name: dimension names} for groups spanning several dimensions (the ranks sharing this
        rank's coordinates in the other dimensions, ordered row-major over the named ones). Collective: every rank
        makes the same grids in the same order. `device` is kept for callers that name it: the groups move data
        as the job's transport does (gloo or nccl, as the job was started; MPI)."""
        shape, names = tuple(int(s) for s in shape), tuple(names)
        if len(shape) != len(names):
            raise SpgnnError(f"grid shape {shape} and dimension names {names} differ in length")
        every = [*names, *(planes or {})]
        if len(set(every)) != len(every) or "world" in every:
            raise SpgnnError(f"grid dimension and plane names {every} must be distinct and not 'world' (each names "
                             "one group of this rank)")
        unknown = [d for dims in (planes or {}).values() for d in dims if d not in names]
        if unknown:
            raise SpgnnError(f"grid planes span dimensions {unknown} the grid does not have ({names})")
        if min(shape) < 1 or math.prod(shape) != comm.world_size:
            raise SpgnnError(f"grid {format_grid(shape)} has {math.prod(shape)} processes but the job "
                             f"has {comm.world_size}: choose a shape whose product is {comm.world_size}")
        self.comm, self.shape, self.names = comm, shape, names
        ranks = np.arange(comm.world_size).reshape(shape)
        self.coord = tuple(int(x) for x in np.unravel_index(comm.rank, shape))
        self._groups = {}
        for name, dims in [*((n, (n,)) for n in names), *(planes or {}).items()]:
            axes = [names.index(d) for d in dims]
            for members in np.moveaxis(ranks, axes, list(range(len(shape) - len(axes), len(shape)))).reshape(
                    -1, math.prod(shape[a] for a in axes)):
                group = comm.group(name, members.tolist())      # every rank makes every group, in one order
                if comm.rank in group.ranks:
                    self._groups[name] = group

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def group(self, name: str) -> Group:
        """The group along dimension `name` that contains this rank."""
        if name == "world":
            return self.comm.world
        return self._groups[name]

    def __repr__(self):
        return f"ProcessGrid({format_grid(self.shape)}, names={self.names}, coord={self.coord})"
