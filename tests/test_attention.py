"""The single-process GAT reference equals PyTorch Geometric's GATConv on the same weights (concatenated and
averaged heads, symmetric and directed graphs); batch norm with one rank equals torch's; GAT on an algorithm
without attention fails with a message naming the ones that have it."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.graph import add_self_loops
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
