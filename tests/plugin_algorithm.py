"""The README's worked example of a new algorithm, one file: 1D by all-gather. Registered on import."""

from spgnn import CSR, DistSpMM, local_spmm, register_algorithm


@register_algorithm
class AllGather1D(DistSpMM):
    """Z_i = A_i·[H_0; …; H_{P−1}] after an all-gather of H; dH_i = (Σ_j A_jᵀ·G_j)_i by a reduce-scatter."""

    name = "1d-allgather"
    summary = "all-gathers H, then multiplies its block row"

    def __init__(self, block, comm, grid, device="cpu"):
        super().__init__(block, comm, grid, device)
        self.a, self.group = CSR.from_scipy(block.a), grid.group("part")

    def _forward(self, h):
        return local_spmm(self.a, self.comm.all_gather_v(h, self.sizes, self.group))

    def _backward(self, g):
        return self.comm.reduce_scatter(local_spmm(self.a.T, g), self.group, self.sizes)

    @classmethod
    def spmm_cost(cls, stats, shape, rank, f):
        P, mine = shape[0], int(stats.sizes[rank]) * f * 4
        others = int(stats.sizes.sum()) * f * 4 - mine
        return {"forward": [("all_gather", "part", mine * (P - 1), others, P - 1 if mine else 0)],
                "backward": [("reduce_scatter", "part", others, mine * (P - 1), P - 1)]}
