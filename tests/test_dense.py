"""`spgnn.dense.matmul`: H·W + C and its gradients equal torch's own, in either orientation of the weight
gradient."""

import pytest
import torch

from spgnn.dense import NARROW, matmul, weight_grad


@pytest.mark.parametrize("f_out", [1, NARROW - 1, NARROW, 40])
@pytest.mark.parametrize("addend", [None, "bias", "matrix"])
@pytest.mark.parametrize("h_grad", [True, False])
def test_product_and_gradients_equal_torch(f_out, addend, h_grad):
    gen = torch.Generator().manual_seed(f_out)
    n, f_in = 300, 24
    h = torch.randn(n, f_in, generator=gen, requires_grad=h_grad)
    w = torch.randn(f_in, f_out, generator=gen, requires_grad=True)
    c = None if addend is None else torch.randn(*((f_out,) if addend == "bias" else (n, f_out)), generator=gen,
                                                requires_grad=True)
    dy = torch.randn(n, f_out, generator=gen)
    leaves = [t for t in (h, w, c) if t is not None and t.requires_grad]
    mine = matmul(h, w, c)
    theirs = h @ w if c is None else h @ w + c
    torch.testing.assert_close(mine, theirs)
    for a, b in zip(torch.autograd.grad(mine, leaves, dy), torch.autograd.grad(theirs, leaves, dy)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b)


def test_narrow_weight_gradient_takes_the_other_orientation():
    """Below NARROW columns of G, Hᵀ·G is computed as (Gᵀ·H)ᵀ (a transposed result); at NARROW, as Hᵀ·G."""
    h = torch.randn(500, 64)
    for f_out, transposed in ((NARROW - 1, True), (NARROW, False)):
        g = torch.randn(500, f_out)
        dw = weight_grad(h, g)
        assert dw.shape == (64, f_out) and dw.is_contiguous() != transposed
        torch.testing.assert_close(dw, h.t() @ g)


def test_only_a_narrow_product_needing_gradients_is_its_own():
    """Under no_grad, or with no operand needing a gradient, the product is torch's own (no autograd node); a product
    of NARROW outputs or more is torch's own too (its node is torch's MmBackward); a narrow one is `_Product`'s."""
    h, w = torch.randn(8, 4), torch.randn(4, 2, requires_grad=True)
    with torch.no_grad():
        assert matmul(h, w).grad_fn is None
    assert matmul(h, w.detach()).grad_fn is None
    assert type(matmul(h, w).grad_fn).__name__ == "_ProductBackward"
    wide = torch.randn(NARROW + 4, NARROW, requires_grad=True)
    assert type(matmul(torch.randn(8, NARROW + 4), wide).grad_fn).__name__ == "MmBackward0"
