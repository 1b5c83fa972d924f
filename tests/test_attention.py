"""The single-process GAT reference equals PyTorch Geometric's GATConv on the same weights (concatenated and
averaged heads, symmetric and directed graphs); batch norm with one rank equals torch's; GAT on an algorithm
without attention fails with a message naming the ones that have it."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.distgraph import DistGraph
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import add_self_loops, row_normalize
from spgnn.layers import GATConv
from spgnn.layers.norm import BatchNorm
from spgnn.reference import SerialSpMM
from tests.graphs import small_graph
from tests.reference_model import assert_close

pyg = pytest.importorskip("torch_geometric.nn", reason="PyTorch Geometric is not installed (pip install .[test])")


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("heads,concat", [(3, True), (2, False), (1, False)])
def test_gat_equals_pyg(heads, concat, directed):
    g = small_graph(n=70, f=11, directed=directed, seed=3)
    torch.manual_seed(0)
    layer = GATConv(g.num_features, 5, heads, concat)
    layer.bias.data.uniform_(-1, 1)
    twin = pyg.GATConv(g.num_features, 5, heads=heads, concat=concat, add_self_loops=True)
    twin.lin.weight.data = layer.weight.data.T.clone()
    twin.att_src.data = layer.att_src.data.view(1, heads, 5).clone()
    twin.att_dst.data = layer.att_dst.data.view(1, heads, 5).clone()
    twin.bias.data = layer.bias.data.clone()
    algo = SerialSpMM(add_self_loops(g.adj))
    x1 = torch.as_tensor(g.x).clone().requires_grad_(True)
    x2 = torch.as_tensor(g.x).clone().requires_grad_(True)
    coo = g.adj.tocoo()
    out, out_pyg = layer(algo, x1), twin(x2, torch.as_tensor(np.vstack([coo.col, coo.row]), dtype=torch.int64))
    assert_close(out.detach().numpy(), out_pyg.detach().numpy(), "output")
    r = torch.randn(out.shape)
    (out * r).sum().backward()
    (out_pyg * r).sum().backward()
    assert_close(x1.grad.numpy(), x2.grad.numpy(), "dX")
    theirs = [twin.lin.weight.grad.T, twin.att_src.grad.view(heads, 5), twin.att_dst.grad.view(heads, 5),
              twin.bias.grad]
    for name, a, b in zip(("W", "a_src", "a_dst", "b"), (layer.weight.grad, layer.att_src.grad,
                                                         layer.att_dst.grad, layer.bias.grad), theirs):
        assert_close(a.numpy(), b.numpy(), f"d{name}")


def test_batch_norm_equals_torch():
    algo = SerialSpMM(small_graph(n=10).adj)
    bn, ref = BatchNorm(6), torch.nn.BatchNorm1d(6)
    for m in (bn, ref):
        m.weight.data = torch.linspace(0.5, 2, 6)
        m.bias.data = torch.linspace(-1, 1, 6)
    x = torch.randn(40, 6) * 3 + 1
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y1, y2 = bn(algo, x1), ref(x2)
    assert_close(y1.detach().numpy(), y2.detach().numpy(), "train output")
    r = torch.randn(40, 6)
    (y1 * r).sum().backward()
    (y2 * r).sum().backward()
    assert_close(x1.grad.numpy(), x2.grad.numpy(), "dX")
    assert_close(bn.weight.grad.numpy(), ref.weight.grad.numpy(), "dγ")
    bn.eval(), ref.eval()
    assert_close(bn(algo, x).detach().numpy(), ref(x).detach().numpy(), "eval output (running statistics)")


def test_gat_needs_an_attention_algorithm():
    with pytest.raises(SpgnnError, match="1d-halo or sar"):
        TrainConfig(model="gat", algo="1d").validate()


def test_attention_masks_rows_without_edges():
    from spgnn.sparse import attention

    rows, cols = torch.tensor([0, 0, 2]), torch.tensor([1, 2, 2])
    v, s = torch.randn(3, 2, 4), torch.randn(3, 2)
    out = attention.attend(rows, cols, v, s, s, 0.2)
    assert torch.equal(out[1], torch.zeros(2, 4)) and torch.allclose(out[2], v[2])
    w = F.softmax(F.leaky_relu(s[[1, 2]] + s[0], 0.2), 0)
    assert torch.allclose(out[0], (w.unsqueeze(-1) * v[[1, 2]]).sum(0))


@pytest.mark.parametrize("n, nnz, heads, f", [(300, 900, 2, 8), (20000, 60000, 4, 64)])
def test_weighted_sum_backward_takes_a_strided_gradient(n, nnz, heads, f):
    """The C kernels' weighted sum gets the gradients of the gather-and-add it replaces when the gradient arriving
    from above is a strided view (here out's transpose), which the backward copies contiguous for the kernel."""
    from spgnn.sparse import attention

    g = torch.Generator().manual_seed(0)
    rows, cols = torch.randint(0, n, (nnz,), generator=g), torch.randint(0, n, (nnz,), generator=g)
    p = torch.rand(nnz, heads, generator=g, requires_grad=True)
    v = torch.randn(n, heads, f, generator=g, requires_grad=True)
    w = torch.randn(f, heads, n, generator=g)
    by = {}
    for name, out in (("kernel", lambda: attention.weighted_sum(p, rows, cols, v, n)),
                      ("gather", lambda: attention.segment_sum(p.unsqueeze(-1) * attention.gather(v, cols), rows, n))):
        by[name] = torch.autograd.grad((out().transpose(0, 2) * w).sum(), (p, v))
    for what, got, ref in zip(("dp", "dV"), by["kernel"], by["gather"]):
        assert_close(got.numpy(), ref.numpy(), f"{what} n={n}", rtol=1e-5)


@pytest.mark.parametrize("order", ["by row", "any"])
def test_weighted_sum_is_the_same_on_any_number_of_threads(order):
    """Each row of out and of dV is summed by one thread over its edges in their order, so the C kernels give the
    same bits on 1, 2 or 3 threads (3 on fewer cores: runs owned unevenly), with edges sorted by row or in any order
    and one row holding a third of them."""
    from spgnn.sparse import attention

    n, nnz, heads, f = 5000, 60000, 4, 16
    g = torch.Generator().manual_seed(3)
    rows, cols = torch.randint(0, n, (nnz,), generator=g), torch.randint(0, n, (nnz,), generator=g)
    rows[: nnz // 3], cols[nnz // 3: 2 * nnz // 3] = 7, 11            # a heavy row of out and of dV
    if order == "by row":
        rows = rows.sort().values
    p = torch.rand(nnz, heads, generator=g, requires_grad=True)
    v = torch.randn(n, heads, f, generator=g, requires_grad=True)
    w = torch.randn(n, heads, f, generator=g)
    threads, by = torch.get_num_threads(), []
    try:
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            out = attention.weighted_sum(p, rows, cols, v, n)
            by.append((out.detach(), *torch.autograd.grad((out * w).sum(), (p, v))))
    finally:
        torch.set_num_threads(threads)
    for t, got in zip((2, 3), by[1:]):
        for what, a, b in zip(("out", "dp", "dV"), by[0], got):
            assert torch.equal(a, b), f"{what} on {t} threads differs from 1 thread ({order})"
    ref = attention.segment_sum(p.detach().unsqueeze(-1) * attention.gather(v.detach(), cols), rows, n)
    assert_close(by[0][0].numpy(), ref.numpy(), "out", rtol=1e-5)


def _gat_over(comm, adjacency):
    g = DistGraph(comm, dataset="cora", algo="1d-halo", adjacency=["self-loops", "mean"])
    torch.manual_seed(0)
    layer = GATConv(g.num_features, 4, heads=2)
    layer.adjacency = adjacency
    return g.node_ids.numpy(), layer(g, g.x).detach().numpy()


def test_gat_attends_over_its_own_adjacency():
    """A GATConv whose adjacency is not the default attends over that pattern (it attended over A + I whatever its
    adjacency said), at P = 2 as the single-process reference does."""
    cora = load_dataset("cora")
    x = torch.as_tensor(row_normalize(cora.x))
    torch.manual_seed(0)
    layer = GATConv(cora.num_features, 4, heads=2)
    for adjacency in ("mean", "self-loops"):
        layer.adjacency = adjacency
        ref = layer(SerialSpMM(cora.adj, raw=True), x).detach().numpy()
        for ids, out in run_local(_gat_over, 2, adjacency):
            assert_close(out, ref[ids], f"GAT over {adjacency}")
    layer.adjacency = "mean"
    assert not np.allclose(layer(SerialSpMM(cora.adj, raw=True), x).detach().numpy(), ref)


@pytest.mark.parametrize("slope, scale", [(-0.5, 1.0), (1.7, 1.0), (0.2, 1e4)])
def test_gat_equals_pyg_at_any_slope_and_scores_of_any_size(slope, scale):
    """PyG's GATConv at another negative_slope, and with scores of ±10⁴ (exp of which overflows float32 unless the
    softmax is shifted by each row's maximum), on a directed graph with a node whose only in-edge is its self-loop
    and an isolated one."""
    g = small_graph(n=50, f=6, directed=True, seed=4)
    torch.manual_seed(1)
    layer = GATConv(g.num_features, 3, 2, negative_slope=slope)
    twin = pyg.GATConv(g.num_features, 3, heads=2, negative_slope=slope, add_self_loops=True)
    with torch.no_grad():
        layer.att_src.mul_(scale), layer.att_dst.mul_(scale)
    twin.lin.weight.data = layer.weight.data.T.clone()
    twin.att_src.data, twin.att_dst.data = (a.data.view(1, 2, 3).clone() for a in (layer.att_src, layer.att_dst))
    coo = g.adj.tocoo()
    x = torch.as_tensor(g.x)
    out = layer(SerialSpMM(add_self_loops(g.adj)), x).detach()
    ref = twin(x, torch.as_tensor(np.vstack([coo.col, coo.row]), dtype=torch.int64)).detach()
    assert out.isfinite().all() and g.adj[g.n - 2].nnz == 0       # node n-2's only in-edge: its self-loop
    assert_close(out.numpy(), ref.numpy(), f"slope {slope}, scores ×{scale}")


@pytest.mark.parametrize("dropout", [False, True])
def test_attention_gradient_is_autograds_in_float64(dropout):
    """torch.autograd.gradcheck of attend (the C kernels' weighted sum and its adjoint, the softmax over each row's
    edges) in float64: a row of three edges, one with none, one with only its self-loop, one with one edge."""
    from spgnn.sparse import attention

    rows, cols = torch.tensor([0, 0, 0, 2, 3, 4, 4, 5, 6, 6]), torch.tensor([1, 2, 5, 2, 0, 4, 6, 3, 0, 6])
    g = torch.Generator().manual_seed(0)
    v, s_src, s_dst = (torch.randn(7, *shape, generator=g, dtype=torch.float64, requires_grad=True)
                       for shape in ((2, 3), (2,), (2,)))
    mask = (torch.rand(10, 2, generator=g) > 0.3).double() / 0.7 if dropout else None
    assert torch.autograd.gradcheck(lambda *xs: attention.attend(rows, cols, *xs, -0.3, mask), (v, s_src, s_dst))


def test_bad_attention_input_is_one_line():
    """A negative slope of NaN or ∞ made every output NaN; a heads of 2.5, an f_out of 0 or a slope given as a string
    were a TypeError or a ZeroDivisionError from inside torch; attend on a DistGraph took a V of two dimensions, of
    other rows or scores of other heads to a torch traceback, and a dropout below 0 or NaN as none."""
    for kwargs in (dict(negative_slope=float("nan")), dict(negative_slope=float("inf")), dict(negative_slope="0.2"),
                   dict(heads=2.5), dict(heads=True), dict(f_out=0), dict(dropout=float("nan"))):
        with pytest.raises(SpgnnError, match="^GATConv: heads must be at least 1, as must f_in and f_out"):
            GATConv(**(dict(f_in=4, f_out=3) | kwargs))
    g = DistGraph(dataset="cora", algo="1d-halo", adjacency=["self-loops"])
    n = g.x.shape[0]
    v, s = torch.randn(n, 2, 3), torch.randn(n, 2)
    for args, said in (((v.flatten(1), s, s, 0.2), r"got shapes \(2708, 6\), \(2708, 2\), \(2708, 2\)"),
                       ((v, torch.randn(n, 3), s, 0.2), r"got shapes \(2708, 2, 3\), \(2708, 3\)"),
                       ((v[:5], s[:5], s[:5], 0.2), r"^attend takes V of this rank's 2708 rows"),
                       ((v, s, s, float("nan")), r"^attend: slope must be a finite number and dropout in \[0, 1\), got "
                                                 r"nan and 0.0"),
                       ((v, s, s, 0.2, -0.5), r"got 0.2 and -0.5")):
        with pytest.raises(SpgnnError, match=said):
            g.attend(*args)
    assert g.attend(v, s, s, 0.2).shape == v.shape
