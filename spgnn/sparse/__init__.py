"""Local sparse kernels: the `CSR` container (`csr`), Z = A·H on one process (`kernels`) and attention over a
sparse pattern (`attention`)."""
