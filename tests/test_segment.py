"""Sums and maxima by index (`spgnn.sparse.segment`): the C kernels against torch's index_add_, scatter_reduce_ and
index_select's backward, bit for bit, on any number of threads."""

import pytest
import torch

from spgnn.sparse import segment


def by_torch(x, rows, n):
    """(index_add_, scatter_reduce_ amax) of x by rows: what the kernels replace."""
    total = x.new_zeros((n, *x.shape[1:])).index_add_(0, rows, x)
    index = rows.view(-1, *[1] * (x.dim() - 1)).expand_as(x)
    return total, x.new_full(total.shape, float("-inf")).scatter_reduce_(0, index, x, "amax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(), (8,), (3, 5)])
@pytest.mark.parametrize("order", ["by row", "any"])
def test_segment_sum_and_max_are_torchs_on_any_number_of_threads(dtype, shape, order):
    """Each row is summed by one thread over its edges in their order: torch's serial sums on 1, 2 or 3 threads,
    with edges sorted or not, a row holding a third of them and rows with none (−inf maxima, zero sums)."""
    n, nnz = 4000, 90000
    g = torch.Generator().manual_seed(1)
    rows = torch.randint(0, n - 10, (nnz,), generator=g)             # the last 10 rows have no edges
    rows[: nnz // 3] = 5
    if order == "by row":
        rows = rows.sort().values
    x = torch.randn(nnz, *shape, generator=g, dtype=dtype)
    total, largest = by_torch(x, rows, n)
    threads = torch.get_num_threads()
    try:
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            assert torch.equal(segment.segment_sum(x, rows, n), total), f"sums on {t} threads"
            assert torch.equal(segment.segment_max(x, rows, n), largest), f"maxima on {t} threads"
    finally:
        torch.set_num_threads(threads)
    assert torch.isinf(largest[-10:]).all() and not total[-10:].any()


def test_gather_backward_is_index_selects():
    """gather's backward (a sum by index) is index_select's, bit for bit, and segment_sum's backward a gather."""
    g = torch.Generator().manual_seed(2)
    n, nnz = 3000, 70000
    index = torch.randint(0, n, (nnz,), generator=g)
    x = torch.randn(n, 4, generator=g, requires_grad=True)
    dy = torch.randn(nnz, 4, generator=g)
    (mine,) = torch.autograd.grad((segment.gather(x, index) * dy).sum(), x)
    (ref,) = torch.autograd.grad((x.index_select(0, index) * dy).sum(), x)
    assert torch.equal(mine, ref)
    e = torch.randn(nnz, 4, generator=g, requires_grad=True)
    dout = torch.randn(n, 4, generator=g)
    (mine,) = torch.autograd.grad((segment.segment_sum(e, index, n) * dout).sum(), e)
    assert torch.equal(mine, dout[index])


def test_a_nan_is_the_maximum_as_in_torch():
    x = torch.tensor([[1.0, float("nan")], [2.0, 3.0], [float("nan"), 0.0]])
    rows = torch.tensor([0, 0, 1])
    got, (_, ref) = segment.segment_max(x, rows, 3), by_torch(x, rows, 3)
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.nan_to_num(), ref.nan_to_num())
    assert got[0, 1].isnan() and got[1, 0].isnan() and got[0, 0] == 2.0
