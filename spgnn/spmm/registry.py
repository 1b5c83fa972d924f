"""The registry of distributed SpMM algorithms, by the name ``--algo`` takes.

An algorithm is a `spgnn.spmm.DistSpMM` subclass registered with the ``@register`` decorator, or published by
another package under the entry-point group ``spgnn.algorithms`` (``name = module:Class``; every such entry
point is loaded when ``spgnn`` is imported, so that its options reach `TrainConfig` and the command line).
It declares its `Option`s (each a ``spgnn train --flag`` and a TrainConfig field) and, for ``--algo auto``, the
option values it can run with on P processes (`candidates`).
"""

from __future__ import annotations

from .. import options as plugins
from ..errors import SpgnnError
from ..options import Option

ALGORITHMS: dict = {}
plugins.REGISTRIES.append(ALGORITHMS)
ENTRY_POINT_GROUP = "spgnn.algorithms"


def register(cls):
    """Class decorator: register algorithm `cls` under ``cls.name`` (`spgnn.options.admit`: a name registered twice,
    or an option that disagrees with another algorithm's, is an error)."""
    from .base import DistSpMM  # here: base imports this module

    plugins.admit(ALGORITHMS, cls, "algorithm", "--algo", DistSpMM)

    needs = {"_forward": "Z = A·H on its local blocks", "_backward": "Aᵀ·G"}
    needs |= {"attend": "the attention its `attention = True` promises"} if cls.attention else {}
    if missing := [m for m in needs if getattr(cls, m) is getattr(DistSpMM, m)]:
        raise SpgnnError(f"algorithm {cls.name!r} does not define {' and '.join(missing)} "
                         f"({'; '.join(needs[m] for m in missing)})")
    ALGORITHMS[cls.name] = cls
    return cls


def get(name: str):
    """The algorithm class registered as `name`."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise SpgnnError(f"unknown algorithm {name!r}: choose one of {', '.join(ALGORITHMS)}") from None


def attention_algorithms() -> list[str]:
    """The algorithms that run attention (GAT)."""
    return [name for name, cls in ALGORITHMS.items() if cls.attention]


def options() -> dict[str, Option]:
    """Every registered algorithm's options by name (`spgnn.options.merged`)."""
    return plugins.merged(ALGORITHMS, "--algo")


def declaring(name: str) -> list[str]:
    """The algorithms that declare option `name`."""
    return plugins.declaring(ALGORITHMS, name)


def load_entry_points() -> None:
    """Register the algorithms other packages publish under ``spgnn.algorithms``."""
    plugins.load_entry_points(ENTRY_POINT_GROUP, ALGORITHMS, register, "algorithm")
