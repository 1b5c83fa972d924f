"""Distributed SpMM algorithms, by the name ``--algo`` takes."""

from ..errors import SpgnnError
from .base import DistSpMM
from .oned import OneDHalo
from .onefive import OneD, OneFiveD
from .sar import SAR
from .summa import SUMMA, SUMMA2D

ALGORITHMS = {cls.name: cls for cls in (OneD, OneDHalo, OneFiveD, SUMMA2D, SUMMA, SAR)}


def get(name: str) -> type[DistSpMM]:
    """The algorithm class registered as `name`."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise SpgnnError(f"unknown algorithm {name!r}: choose one of {', '.join(ALGORITHMS)}") from None


def attention_algorithms() -> list[str]:
    """The algorithms that implement `DistSpMM.attend` (and so run GAT)."""
    return [name for name, cls in ALGORITHMS.items() if cls.attend is not DistSpMM.attend]


__all__ = ["ALGORITHMS", "DistSpMM", "attention_algorithms", "get"]
