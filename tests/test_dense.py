"""`spgnn.dense.matmul`: H·W + C and its gradients equal torch's own, in either orientation of the weight
gradient and in either backend (oneDNN, torch's own); `spgnn.dense.matmuls`: several products of one H, the same."""

import pytest
import torch

from spgnn import dense
from spgnn.dense import NARROW, ROWS, SMALL, matmul, matmuls, weight_grad
from spgnn.errors import SpgnnError

ONEDNN = pytest.mark.skipif(not dense._ONEDNN, reason="this torch build has no oneDNN")


@pytest.fixture(params=["onednn", "torch"])
def backend(request, monkeypatch):
    if request.param == "onednn" and not dense._ONEDNN:
        pytest.skip("this torch build has no oneDNN")
    monkeypatch.setattr(dense, "_backend", request.param)
    return request.param


@pytest.mark.parametrize("f_out", [1, NARROW - 1, NARROW, 40])
@pytest.mark.parametrize("addend", [None, "bias", "matrix"])
@pytest.mark.parametrize("h_grad", [True, False])
def test_product_and_gradients_equal_torch(f_out, addend, h_grad, backend):
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
    under SMALL multiply-adds of NARROW outputs or more is torch's own too (its node is torch's MmBackward); a
    narrow one is `_Product`'s."""
    h, w = torch.randn(8, 4), torch.randn(4, 2, requires_grad=True)
    with torch.no_grad():
        assert matmul(h, w).grad_fn is None
    assert matmul(h, w.detach()).grad_fn is None
    assert type(matmul(h, w).grad_fn).__name__ == "_ProductBackward"
    wide = torch.randn(NARROW + 4, NARROW, requires_grad=True)
    assert type(matmul(torch.randn(8, NARROW + 4), wide).grad_fn).__name__ == "MmBackward0"


@pytest.mark.parametrize("f_in, f_out", [(300, 256), (256, 300)])
@pytest.mark.parametrize("addend", [None, "bias", "matrix"])
def test_large_products_equal_float64_in_either_backend(f_in, f_out, addend, backend):
    """Products past SMALL (oneDNN's), a weight gradient summed over blocks of ROWS rows and a remainder (as
    (dYᵀ·H)ᵀ and as Hᵀ·dY: the narrower operand first), and H a strided column block: Y and every gradient equal the
    float64 product to float32 rounding."""
    gen = torch.Generator().manual_seed(7)
    n = 2 * ROWS + 100
    assert n * f_in * f_out >= SMALL and f_in * f_out >= dense.WIDE
    wide = torch.randn(n, f_in + 40, generator=gen)
    h = wide[:, 20:20 + f_in].requires_grad_()                     # rows strided by f_in + 40
    w = torch.randn(f_in, f_out, generator=gen, requires_grad=True)
    c = None if addend is None else torch.randn(*((f_out,) if addend == "bias" else (n, f_out)), generator=gen,
                                                requires_grad=True)
    dy = torch.randn(n, f_out, generator=gen)
    leaves = [t for t in (h, w, c) if t is not None]
    y = matmul(h, w, c)
    with torch.no_grad():
        assert torch.equal(dense.product(h, w, c), y)
    exact = [t.detach().double().requires_grad_() for t in leaves]
    y64 = exact[0] @ exact[1] + (exact[2] if c is not None else 0)
    torch.testing.assert_close(y.double(), y64, rtol=1e-5, atol=1e-4)
    for a, b in zip(torch.autograd.grad(y, leaves, dy), torch.autograd.grad(y64, exact, dy.double())):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("n, f_in, widths", [(300, 24, (NARROW - 1, 40)), (2 * ROWS + 100, 300, (256, 200))])
@pytest.mark.parametrize("h_grad", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_products_of_one_h_and_their_gradients_equal_float64(n, f_in, widths, h_grad, bias, backend):
    """matmuls(H, (W_1, W_2)[, b]): each H·W_k (+ b, the last) a contiguous tensor equal to the float64 product, and
    dH, dW_1, dW_2 (one backward over [W_1 | W_2]: small and narrow, or past SMALL with blocked weight gradients) and
    db equal float64's."""
    gen = torch.Generator().manual_seed(n + widths[0])
    h = torch.randn(n, f_in, generator=gen, requires_grad=h_grad)
    ws = [torch.randn(f_in, f, generator=gen, requires_grad=True) for f in widths]
    b = torch.randn(widths[-1], generator=gen, requires_grad=True) if bias else None
    dys = [torch.randn(n, f, generator=gen) for f in widths]
    leaves = ([h] if h_grad else []) + ws + ([b] if bias else [])
    ys = matmuls(h, ws, b)
    exact = {id(t): t.detach().double().requires_grad_() for t in leaves}
    h64, (w1, w2) = exact.get(id(h), h.double()), (exact[id(w)] for w in ws)
    ys64 = [h64 @ w1, h64 @ w2 + exact[id(b)] if bias else h64 @ w2]
    for y, y64 in zip(ys, ys64):
        assert y.is_contiguous()
        torch.testing.assert_close(y.double(), y64, rtol=1e-5, atol=1e-4)
    mine = torch.autograd.grad(ys, leaves, dys)
    theirs = torch.autograd.grad(ys64, [exact[id(t)] for t in leaves], [d.double() for d in dys])
    for a, b64 in zip(mine, theirs):
        torch.testing.assert_close(a.double(), b64, rtol=1e-5, atol=1e-3)


def test_an_unused_product_of_one_h_has_a_zero_gradient(backend):
    """Only H·W_1 reaches the loss: dW_2 = 0 and dH = dY_1·W_1ᵀ."""
    h = torch.randn(2000, 64, requires_grad=True)
    w1, w2 = torch.randn(64, 48, requires_grad=True), torch.randn(64, 32, requires_grad=True)
    dy = torch.randn(2000, 48)
    dh, dw1, dw2 = torch.autograd.grad(matmuls(h, (w1, w2))[0], (h, w1, w2), dy, materialize_grads=True)
    assert torch.count_nonzero(dw2) == 0
    torch.testing.assert_close(dh, dy @ w1.detach().t())
    torch.testing.assert_close(dw1, h.detach().t() @ dy)


@ONEDNN
def test_the_backend_decides_whose_products_they_are(monkeypatch):
    """With oneDNN, a float32 CPU product of SMALL multiply-adds or more is `_Product`'s (its op oneDNN's), a smaller
    one or a float64 one torch's own; with "torch", every one is torch's own."""
    h, w = torch.randn(1024, 64), torch.randn(64, 16, requires_grad=True)
    assert 1024 * 64 * 16 == SMALL
    for name, node in (("onednn", "_ProductBackward"), ("torch", "MmBackward0")):
        monkeypatch.setattr(dense, "_backend", name)
        assert type(matmul(h, w).grad_fn).__name__ == node
        assert dense.onednn(h, w) == (name == "onednn")
        assert not dense.onednn(h[:-1], w) and not dense.onednn(h.double(), w.double())
        assert type(matmul(h[:-1], w).grad_fn).__name__ == "MmBackward0"


def test_backend_selection(monkeypatch):
    with pytest.raises(SpgnnError, match="unknown dense backend 'mkl'; choose one of onednn, torch"):
        dense.set_backend("mkl")
    monkeypatch.setattr(dense, "_backend", None)
    monkeypatch.setenv("SPGNN_DENSE_BACKEND", "torch")
    assert dense.get_backend() == "torch"
    monkeypatch.setattr(dense, "_backend", None)
    monkeypatch.delenv("SPGNN_DENSE_BACKEND")
    assert dense.get_backend() == "onednn"


def test_the_cli_refuses_an_unknown_backend_before_any_work(monkeypatch, capsys):
    """A bad $SPGNN_DENSE_BACKEND is the error, not the dataset that was never looked for."""
    from spgnn.cli import main

    monkeypatch.setattr(dense, "_backend", None)
    monkeypatch.setenv("SPGNN_DENSE_BACKEND", "mkl")
    assert main(["train", "--dataset", "no-such-graph", "--epochs", "1"]) == 2
    assert capsys.readouterr().err.strip() == "spgnn: error: unknown dense backend 'mkl'; choose one of onednn, torch"


@pytest.mark.parametrize("rows, cols", [(ROWS, 256), (1464, 767), (17, 33), (3, 1), (0, 5), (5, 0)])
def test_a_transposed_block_equals_torchs_copy(rows, cols):
    """`dense.transposed` (the C kernel for float32 row blocks) gives Xᵀ contiguous, bit for bit, for a block of rows
    of a wider matrix (rows ld apart, starting past its first column), small and empty ones too; float64 and a
    strided X take torch's copy, the same."""
    gen = torch.Generator().manual_seed(rows + cols)
    whole = torch.randn(rows + 9, cols + 4, generator=gen)
    for x in (whole[3:3 + rows, 1:1 + cols], whole.double()[:rows, :cols], whole[:rows, :cols].t()):
        out = dense.transposed(x)
        assert out.is_contiguous() and out.dtype == x.dtype and torch.equal(out, x.t())


@pytest.mark.parametrize("shapes", [((30, 7), [(6, 4)], None), ((30, 7), [(7, 4), (6, 4)], None),
                                    ((30, 7), [(7, 4)], (3,)), ((30, 7), [(7, 4)], (29, 4)), ((30,), [(30, 4)], None)])
def test_a_product_of_shapes_that_do_not_fit_is_refused_by_name(shapes, backend):
    """oneDNN reported it as 'could not create a primitive descriptor', naming neither operand."""
    h, ws, c = shapes
    args = [torch.randn(*h), [torch.randn(*w) for w in ws], None if c is None else torch.randn(*c)]
    with pytest.raises(SpgnnError, match=r"^H·W \+ C is not defined for H \("):
        matmul(args[0], args[1][0], args[2]) if len(ws) == 1 else matmuls(*args)


@pytest.mark.parametrize("shape", [(1, 4), (), (30, 1), (4,), (30, 4)])
def test_an_addend_that_broadcasts_is_taken_with_its_gradient(shape, backend):
    """check_shapes refused a 1×f bias and a scalar, which torch's own product broadcast."""
    h, w = torch.randn(30, 7, requires_grad=True), torch.randn(7, 4, requires_grad=True)
    c = torch.randn(shape).requires_grad_()
    y = matmul(h, w, c)
    torch.testing.assert_close(y, h @ w + c)
    y.sum().backward()
    assert c.grad.shape == c.shape and torch.allclose(c.grad.sum(), torch.tensor(120.0))


def test_transposed_copies_are_float32_on_the_cpu_whatever_the_defaults():
    """transposed allocated with torch's default dtype: under set_default_dtype(float64) the float32 kernel wrote
    into a float64 buffer (a wrong result); under a CUDA default device the C kernel would get a GPU pointer."""
    x = torch.randn(300, 70)
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        out = dense.transposed(x)
    finally:
        torch.set_default_dtype(before)
    assert out.dtype == torch.float32 and torch.equal(out, x.t())


def test_a_product_with_a_bias_imports_nothing_more():
    """check_shapes called torch.broadcast_shapes, whose first call imports torch.fx's symbolic shapes: 31 MiB more
    in every process running GraphSAGE, APPNP or GCNII (their memory predicted 16-20% low) and 1.6 s."""
    import subprocess
    import sys

    code = ("import sys, torch; from spgnn.dense import matmul\n"
            "h, w, b = torch.randn(64, 8, requires_grad=True), torch.randn(8, 4), torch.randn(4)\n"
            "matmul(h, w, b).sum().backward()\n"
            "print('torch.fx.experimental.symbolic_shapes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]


def test_onednn_is_handed_weights_of_dense_strides_only(backend):
    """oneDNN reorders a second operand V (of X·Vᵀ) whose rows lie apart by its reference code, 100-1000× slower: a
    column block of W in the forward (22 s against 0.02 at 8292×300 by 300×256), and of H in the weight gradient. Every
    V it is handed is contiguous, or its transpose is; the products still equal float64's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Operands(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.mkldnn._linear_pointwise.default:
                seen.append(args[1].is_contiguous() or args[1].t().is_contiguous())
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(3)
    n = ROWS + 50
    h = torch.randn(n, 340, generator=gen)[:, 20:320].requires_grad_()      # a column block: rows 340 apart
    w = torch.randn(300, 296, generator=gen)[:, :256].requires_grad_()       # and of W
    with Operands():
        y = matmul(h, w)
        dh, dw = torch.autograd.grad(y, (h, w), torch.ones_like(y))
    assert seen == ([True] * len(seen)) and (len(seen) >= 3) == (backend == "onednn"), seen
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = h64 @ w64
    for a, b in zip((y, dh, dw), (y64, *torch.autograd.grad(y64, (h64, w64), torch.ones_like(y64)))):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-3)
