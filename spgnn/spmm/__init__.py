"""Distributed SpMM algorithms, by the name ``--algo`` takes."""

from ..errors import SpgnnError
from .base import DistSpMM
from .oned import OneD, OneDHalo

ALGORITHMS = {cls.name: cls for cls in (OneD, OneDHalo)}


def get(name: str) -> type[DistSpMM]:
    """The algorithm class registered as `name`."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise SpgnnError(f"unknown algorithm {name!r}: choose one of {', '.join(ALGORITHMS)}") from None


__all__ = ["ALGORITHMS", "DistSpMM", "get"]
