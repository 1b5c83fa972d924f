"""Local sparse kernels: the `CSR` container (`csr`), Z = A·H on one process (`kernels`) and attention over a
sparse pattern (`attention`); and `gather`, rows of a dense matrix by index."""

import torch


def gather(x: torch.Tensor, index) -> torch.Tensor:
    """x[index] along the first dimension by ``index_select``, whose backward sums in a fixed order (the backward
    of ``x[index]`` on CPU adds with atomics, so repeated runs differ in the last bits)."""
    return x.index_select(0, torch.as_tensor(index, device=x.device))
