"""Local kernels: CSR container, spmm against scipy on every backend, dropout masks."""

import importlib.util
import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spgnn.errors import SpgnnError
from spgnn.hashing import dropout, dropout_mask, mix_key
from spgnn.sparse import attention, kernels, segment
from spgnn.sparse.csr import CSR
from spgnn.sparse.kernels import spmm

HAVE_TORCH_SPARSE = importlib.util.find_spec("torch_sparse") is not None
BACKENDS = ["native", "torch", pytest.param("torch-sparse", marks=pytest.mark.skipif(
    not HAVE_TORCH_SPARSE, reason="torch_sparse is not installed (pip install torch-sparse: a source build)"))]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}
TORCH = {np.float32: torch.float32, np.float64: torch.float64}


@pytest.fixture(params=BACKENDS)
def backend(request):
    old = kernels.get_backend()
    kernels.set_backend(request.param)
    yield request.param
    kernels.set_backend(old)


def random_csr(m, k, density, dtype, seed=0):
    """A random m×k scipy CSR with ~1/5 of its rows empty and column indices unsorted within rows."""
    rng = np.random.default_rng(seed)
    a = sp.random(m, k, density=density, format="coo", random_state=rng, dtype=np.float64)
    keep = rng.random(m) > 0.2
    row, col, val = a.row[keep[a.row]], a.col[keep[a.row]], a.data[keep[a.row]]
    order = np.lexsort((rng.random(row.size), row))  # by row, random order within a row
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=m))])
    return sp.csr_matrix((val[order].astype(dtype), col[order], indptr), shape=(m, k))


SHAPES = [  # m, k, density, f
    (60, 50, 0.1, 16),
    (40, 70, 0.6, 33),  # long rows: the 8-nonzeros-per-pass loop and its tail
    (30, 20, 0.2, 1),
    (50, 60, 0.4, 10),  # AVX-512: one masked vector
    (50, 60, 0.4, 256),  # one whole tile of 16 vectors
    (40, 70, 0.6, 300),  # a tile and a masked remainder
    (300, 200, 0.05, 40),  # blocks of rows (AVX-512: 64 a block) on each thread; 2 vectors and a masked one
    (150, 90, 0.2, 530),  # blocks of rows, two whole tiles and a masked remainder
    (30, 20, 0.2, 0),
    (8, 9, 0.0, 4),  # nnz = 0
    (0, 5, 0.0, 3),  # m = 0
    (5, 0, 0.0, 3),  # k = 0
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,density,f", SHAPES)
def test_spmm_matches_scipy(backend, dtype, m, k, density, f):
    a = random_csr(m, k, density, dtype)
    assert m == 0 or k == 0 or density == 0 or a.has_sorted_indices == 0
    h = torch.randn(k, f, dtype=TORCH[dtype])
    z = spmm(CSR.from_scipy(a, dtype), h)
    assert z.shape == (m, f) and z.dtype == h.dtype
    np.testing.assert_allclose(z.numpy(), a @ h.numpy(), **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spmm_out_accumulate_noncontiguous(backend, dtype):
    a1, a2 = random_csr(150, 40, 0.2, dtype, seed=1), random_csr(150, 30, 0.2, dtype, seed=2)
    h1 = torch.randn(12, 40, dtype=TORCH[dtype]).t()  # non-contiguous inputs
    h2 = torch.randn(30, 24, dtype=TORCH[dtype])[:, ::2]
    ref = a1 @ h1.numpy() + a2 @ h2.numpy()
    for out in (torch.full((150, 12), 7.0, dtype=TORCH[dtype]), torch.zeros((12, 150), dtype=TORCH[dtype]).t()):
        assert spmm(CSR.from_scipy(a1, dtype), h1, out=out) is out
        assert spmm(CSR.from_scipy(a2, dtype), h2, out=out, accumulate=True) is out
        np.testing.assert_allclose(out.numpy(), ref, **TOL[dtype])


def test_spmm_of_an_empty_block_into_out(backend):
    """A block without nonzeros (a part with no halo; P = 1's remote shard) makes zeros, adds nothing to `out` when
    accumulating and zeroes it otherwise, on every backend, with no autograd history."""
    empty = CSR.from_scipy(sp.csr_matrix((6, 4), dtype=np.float32))
    h = torch.randn(4, 5, requires_grad=True)
    z = spmm(empty, h)
    assert z.shape == (6, 5) and not z.any() and z.grad_fn is None
    out = torch.full((6, 5), 7.0)
    assert spmm(empty, h, out=out, accumulate=True) is out and (out == 7).all()
    assert spmm(empty, h, out=out) is out and not out.any()


def test_spmm_data_dtype_follows_h_and_no_autograd():
    a = random_csr(20, 15, 0.3, np.float64)
    csr = CSR.from_scipy(a, np.float32)
    h = torch.randn(15, 4, dtype=torch.float64, requires_grad=True)
    z = spmm(csr, h)
    assert z.dtype == torch.float64 and z.grad_fn is None and not z.requires_grad
    np.testing.assert_allclose(z.numpy(), a.astype(np.float32).astype(np.float64) @ h.detach().numpy(), 1e-12)


def test_spmm_rejects_bad_shapes():
    csr = CSR.from_scipy(random_csr(5, 4, 0.5, np.float32))
    with pytest.raises(ValueError):
        spmm(csr, torch.randn(5, 3))
    with pytest.raises(ValueError):
        spmm(csr, torch.randn(4, 3), out=torch.empty(5, 2))


def test_csr_basics_and_transpose():
    a = random_csr(30, 45, 0.2, np.float64)
    csr = CSR.from_scipy(a, np.float64)
    assert csr.nnz == a.nnz and csr.shape == (30, 45) and csr.indices.dtype == np.int32
    assert csr.nbytes == csr.indptr.nbytes + csr.indices.nbytes + csr.data.nbytes
    assert (csr.to_scipy() != a).nnz == 0
    t = csr.transpose()
    assert t.shape == (45, 30) and t is csr.transpose()
    assert (t.to_scipy() != a.T).nnz == 0 and (t.transpose().to_scipy() != a).nnz == 0
    c32 = csr.astype(np.float32)
    assert c32.data.dtype == np.float32 and c32 is csr.astype("float32") and csr.astype(np.float64) is csr
    dense = csr.to("cpu").to_dense().numpy()
    np.testing.assert_array_equal(dense, a.toarray())
    empty = CSR.from_scipy(sp.csr_matrix((0, 3)))
    assert empty.transpose().shape == (3, 0) and empty.nnz == 0


def test_csr_validates():
    with pytest.raises(ValueError):
        CSR(np.array([0, 1, 2]), np.array([0, 5]), np.ones(2), (2, 3))  # column out of range
    with pytest.raises(ValueError):
        CSR(np.array([0, 2, 1]), np.array([0, 1]), np.ones(2), (2, 3))  # decreasing indptr
    with pytest.raises(ValueError):
        CSR(np.array([0, 1]), np.array([0]), np.ones(1), (2, 3))  # indptr too short


def test_backend_selection(monkeypatch):
    old = kernels.get_backend()
    try:
        with pytest.raises(SpgnnError):
            kernels.set_backend("cusparse")
        if not HAVE_TORCH_SPARSE:
            with pytest.raises(SpgnnError, match="torch_sparse"):
                kernels.set_backend("torch-sparse")
        monkeypatch.setenv("SPGNN_SPMM_BACKEND", "torch")
        monkeypatch.setattr(kernels, "_backend", None)
        assert kernels.get_backend() == "torch"
    finally:
        kernels.set_backend(old)


# ----------------------------------------------------------------------------------------- dropout


@pytest.mark.parametrize("impl", ["native", "torch"])
def test_dropout_mask_is_partition_independent(impl, monkeypatch):
    monkeypatch.setattr(kernels, "_backend", impl)
    rng = np.random.default_rng(0)
    ids = rng.choice(10**9, size=300, replace=False).astype(np.int64)
    key = mix_key(42, 3, 1)
    full = dropout_mask(ids, 64, 0.3, key)
    perm = rng.permutation(ids.size)
    np.testing.assert_array_equal(dropout_mask(ids[perm], 64, 0.3, key).numpy(), full.numpy()[perm])
    np.testing.assert_array_equal(dropout_mask(ids[7:8], 64, 0.3, key).numpy(), full.numpy()[7:8])
    assert full.dtype == torch.float32 and full.shape == (300, 64)


def test_dropout_mask_statistics_and_keys():
    p, ids = 0.3, np.arange(400, dtype=np.int64)
    mask = dropout_mask(ids, 100, p, mix_key(1, 0, 0)).numpy()
    assert set(np.unique(mask)) == {0.0, np.float32(1 / (1 - p))}
    n, zeros = mask.size, (mask == 0).sum()
    assert abs(zeros - n * p) < 6 * math.sqrt(n * p * (1 - p))
    assert abs(mask.mean() - 1.0) < 0.05
    other = dropout_mask(ids, 100, p, mix_key(1, 1, 0)).numpy()
    assert 0.3 < (other != mask).mean() < 0.5  # independent masks differ in 2p(1-p) = 42% of entries
    assert np.array_equal(dropout_mask(ids, 100, 0.0, 5).numpy(), np.ones((400, 100), np.float32))
    assert dropout_mask(np.zeros(0, np.int64), 7, 0.5, 1).shape == (0, 7)


@pytest.mark.parametrize("cols", [1, 4, 15, 16, 37])
def test_dropout_mask_native_equals_torch(cols, monkeypatch):
    """The C kernel's mask is the torch formula's, bit for bit: rows of 16 columns or more by the loop over a row's
    columns, narrower ones (attention's heads) by blocks of rows, the last block partial, on threads past 40,000
    entries."""
    ids = np.concatenate([np.arange(50), [2**62, -1, -(2**63)], np.arange(10**9, 10**9 + 3000)]).astype(np.int64)
    for key, first in ((0, 0), (12345, 3), (-5, 0), (2**64 - 1, 0), (np.uint64(7), 11), (mix_key(9, 9, 9), 0)):
        monkeypatch.setattr(kernels, "_backend", "native")
        a = dropout_mask(ids, cols, 0.5, key, first)
        monkeypatch.setattr(kernels, "_backend", "torch")
        b = dropout_mask(torch.from_numpy(ids), cols, 0.5, key, first)
        assert torch.equal(a, b), (cols, key, first)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan")])
def test_dropout_mask_rejects_bad_p(p):
    with pytest.raises(ValueError):
        dropout_mask(np.arange(3), 4, p, 0)
    with pytest.raises(ValueError):
        dropout(torch.ones(3, 4), np.arange(3), p, 0)


@pytest.mark.parametrize("impl", ["native", "torch"])
def test_dropout_equals_the_mask_to_the_bit(impl, monkeypatch):
    """An input that needs no gradient is dropped in one pass (native: no mask made), one that does too, its mask
    made again in the backward: both H ⊙ mask bit for bit (the sign of a dropped negative entry too), dH = dY ⊙ mask,
    and autograd keeps no tensor for it."""
    monkeypatch.setattr(kernels, "_backend", impl)
    rng = np.random.default_rng(1)
    ids = rng.choice(10**9, size=200, replace=False).astype(np.int64)
    for width in (29, 5):                            # a row's columns in one loop; narrow rows by blocks of rows
        _dropout_is_the_mask(rng, ids, width)
    h = torch.from_numpy(rng.standard_normal((200, 29)).astype(np.float32))
    assert dropout(h[:0], ids[:0], 0.5, 1).shape == (0, 29)
    with pytest.raises(ValueError, match="node ids for"):
        dropout(h, ids[:3], 0.5, 1)


def _dropout_is_the_mask(rng, ids, width):
    h = torch.from_numpy(rng.standard_normal((len(ids), width)).astype(np.float32))
    for p, key, first in ((0.5, mix_key(3, 1, 0), 0), (0.1, 2**64 - 1, 7), (0.0, 5, 0)):
        mask = dropout_mask(ids, width, p, key, first)
        want = h * mask
        got = dropout(h, ids, p, key, first)
        assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want)), (p, key)
        x, saved = h.clone().requires_grad_(), []
        with torch.autograd.graph.saved_tensors_hooks(lambda t, kept=saved: kept.append(t) or t, lambda t: t):
            y = dropout(x, ids, p, key, first)
        dy = torch.from_numpy(rng.standard_normal(h.shape).astype(np.float32))
        y.backward(dy)
        assert torch.equal(y.detach(), want) and torch.equal(x.grad, dy * mask), (p, key, width)
        assert saved == [], (p, key, width)


def test_dropout_under_the_profiler():
    """A key of 2⁶³ or more (half of all keys) passes torch's profiler recording the arguments' shapes and values,
    with the same values and gradient as without it."""
    ids, key = np.arange(50, dtype=np.int64), 2**64 - 3
    h = torch.randn(50, 8, requires_grad=True)
    want = dropout(h, ids, 0.5, key)
    with torch.profiler.profile(record_shapes=True):
        got = dropout(h, ids, 0.5, key)
        (grad,) = torch.autograd.grad(got.sum(), h)
    assert torch.equal(got, want) and torch.equal(grad, dropout_mask(ids, 8, 0.5, key))


def test_mix_key():
    keys = {mix_key(s, e, layer) for s in range(3) for e in range(3) for layer in range(3)}
    assert len(keys) == 27 and all(0 <= k < 2**64 for k in keys)
    assert mix_key(1, 2, 3) == mix_key(1, 2, 3) != mix_key(3, 2, 1)


def test_inputs_the_kernels_would_misread_are_refused():
    """Column indices out of range or fractional were cast first (2³² became 0, 1.7 became 1); astype to another
    than float32/float64 gave float32 (int32 values truncated); row_slice took any bounds; out aliasing H was read
    while written (0.3 off); segment sums over fewer row indices than rows, and attention weights of another head
    count, were summed silently."""
    for indices in ([2**32], [1.7]):
        with pytest.raises(ValueError, match=r"^CSR: column indices must be integers in \[0, 2\)"):
            CSR([0, 1], indices, [1.0], (1, 2))
    a = CSR([0, 1, 2], [0, 1], [1.0, 1.0], (2, 2))
    for bad in (lambda: a.astype(np.int32), lambda: a.row_slice(-1, 1), lambda: a.row_slice(2, 1)):
        with pytest.raises(ValueError, match="^CSR "):
            bad()
    h = torch.ones(2, 3)
    with pytest.raises(ValueError, match="^spmm: out shares its memory with H"):
        kernels.spmm(a, h, out=h)
    with pytest.raises(ValueError, match="^segment_sum: 2 row indices for 5 rows of x$"):
        segment.segment_sum(torch.ones(5, 2), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match=r"^weighted_sum: p \(2, 1\) must be nnz×H = \(2, 3\)"):
        attention.weighted_sum(torch.ones(2, 1), [0, 1], [0, 1], torch.ones(2, 3, 4), 2)
