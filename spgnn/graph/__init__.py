"""The graph: `Graph` (the sparse adjacency A with features, labels and splits, and the normalisations of A
the layers use) and the datasets it is read from (`load_dataset`)."""

from .datasets import load_dataset
from .graph import NORMALIZATIONS, Graph

__all__ = ["Graph", "NORMALIZATIONS", "load_dataset"]
