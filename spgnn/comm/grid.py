"""The process grid: P = ∏ shape processes with named dimensions, each dimension a communication group; grid
shapes as text ("4x2" ↔ (4, 2)) and the divisors they are made of.

A thin layer over ``torch.distributed.device_mesh``: ``grid.group("row")`` is the `Group` of the ranks that
share this rank's coordinates in every other dimension, ``grid.coord`` this rank's coordinates.
"""

from __future__ import annotations

import math

import numpy as np
import torch.distributed as dist

from ..errors import SpgnnError
from .comm import Comm, Group


def divisors(m: int) -> list[int]:
    """The divisors of m, ascending."""
    return [d for d in range(1, m + 1) if m % d == 0]


def parse_grid(text: str) -> tuple[int, ...]:
    """"4x2" → (4, 2); raises SpgnnError for anything but positive integers joined by x."""
    try:
        shape = tuple(int(s) for s in text.lower().split("x"))
    except ValueError:
        shape = ()
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
        rank's coordinates in the other dimensions, ordered row-major over the named ones)."""
        shape, names = tuple(int(s) for s in shape), tuple(names)
        if len(shape) != len(names):
            raise SpgnnError(f"grid shape {shape} and dimension names {names} differ in length")
        if min(shape) < 1 or math.prod(shape) != comm.world_size:
            raise SpgnnError(f"grid {format_grid(shape)} has {math.prod(shape)} processes but the job "
                             f"has {comm.world_size}: choose a shape whose product is {comm.world_size}")
        self.comm, self.shape, self.names = comm, shape, names
        planes = planes or {}
        if comm.world_size == 1:
            self.coord = (0,) * len(shape)
            self._groups = {name: Group(name, (0,), None) for name in (*names, *planes)}
            return
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cuda" if device.startswith("cuda") else "cpu", shape, mesh_dim_names=names)
        self.coord = tuple(mesh.get_coordinate())
        self._groups = {}
        for name in names:
            pg = mesh.get_group(name)
            self._groups[name] = Group(name, tuple(dist.get_process_group_ranks(pg)), pg)
        ranks = np.arange(comm.world_size).reshape(shape)
        for name, dims in planes.items():
            axes = [names.index(d) for d in dims]
            for members in np.moveaxis(ranks, axes, list(range(len(shape) - len(axes), len(shape)))).reshape(
                    -1, math.prod(shape[a] for a in axes)):
                pg = dist.new_group(members.tolist())          # every rank creates every group, in one order
                if comm.rank in members:
                    self._groups[name] = Group(name, tuple(members.tolist()), pg)

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
