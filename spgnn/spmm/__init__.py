"""Distributed SpMM algorithms, by the name ``--algo`` takes: the interface (`DistSpMM`), the registry
(`register`, entry-point group ``spgnn.algorithms``) and the built-in algorithms, which register themselves:
``1d`` and ``1.5d`` (`oned`), ``1d-halo`` (`halo`), ``2d`` and ``3d`` (`summa`), ``sar`` (`sar`)."""

from . import halo, oned, sar, summa  # noqa: F401  (built-ins register themselves as they are imported)
from .base import Block, DistSpMM, RowLayout
from .registry import ALGORITHMS, Option, attention_algorithms, declaring, get, options, register

__all__ = ["ALGORITHMS", "Block", "DistSpMM", "Option", "RowLayout", "attention_algorithms", "declaring", "get",
           "options", "register"]
