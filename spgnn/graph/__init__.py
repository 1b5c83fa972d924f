"""The graph: `Graph` (the sparse adjacency A with features, labels and splits), the normalisations of A the
layers use (`adjacency`) and the datasets it is read from (`load_dataset`)."""

from .adjacency import ADJACENCIES, Adjacency, get_adjacency, normalize, register_adjacency
from .datasets import load_dataset
from .graph import Graph

__all__ = ["ADJACENCIES", "Adjacency", "Graph", "get_adjacency", "load_dataset", "normalize", "register_adjacency"]
