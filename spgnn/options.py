"""`Option`: a setting that a plug-in (an algorithm or a layer) brings to `TrainConfig` and the command line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import SpgnnError


@dataclass(frozen=True)
class Option:
    """An option of an algorithm or a layer: the TrainConfig field `name` and the flag ``--name`` (underscores as
    dashes), parsed by `type`, `default` when not given. `shapes`: it chooses the grid shape (`DistSpMM.grid_shape`
    receives it), else the constructor receives it. `valid(value)` says whether a value is usable, `must`
    what usable means (for the error); values in `inert` mean "off" and are accepted by every algorithm."""

    name: str
    type: type
    default: object
    help: str
    shapes: bool = False
    valid: Callable = lambda value: True
    must: str = ""
    inert: tuple = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value) -> None:
        """SpgnnError naming the flag when `value` is not usable."""
        if value != self.default and not self.valid(value):
            raise SpgnnError(f"{self.flag} must be {self.must}, got {value!r}")
