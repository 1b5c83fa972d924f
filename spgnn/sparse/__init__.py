"""Local sparse kernels: the `CSR` container (`csr`), Z = A·H on one process (`kernels`), rows by index and sums by
index over an edge list (`segment`: `gather`, `segment_sum`, `segment_max`) and attention over a sparse pattern
(`attention`)."""

from .csr import CSR
from .kernels import spmm
from .segment import gather, segment_max, segment_sum

__all__ = ["CSR", "gather", "segment_max", "segment_sum", "spmm"]
