"""The single-process reference equals PyTorch Geometric's GCNConv and SAGEConv on the same weights,
forward and backward, on symmetric and directed graphs."""

import numpy as np
import pytest
import torch

from spgnn.graph.adjacency import normalize
from spgnn.layers import GCNConv, SAGEConv
from spgnn.reference import SerialSpMM
from tests.graphs import small_graph
from tests.reference_model import assert_close

pyg = pytest.importorskip("torch_geometric.nn", reason="PyTorch Geometric is not installed (pip install .[test])")


def _edge_index(adj):
    coo = adj.tocoo()      # A[dst, src]
    return torch.as_tensor(np.vstack([coo.col, coo.row]), dtype=torch.int64)


def _pyg_twin(layer):
    if isinstance(layer, GCNConv):
        twin = pyg.GCNConv(*layer.weight.shape)
        twin.lin.weight.data = layer.weight.data.T.clone()
        twin.bias.data = layer.bias.data.clone()
    else:
        twin = pyg.SAGEConv(*layer.weight_neigh.shape, aggr="mean")
        twin.lin_l.weight.data = layer.weight_neigh.data.T.clone()
        twin.lin_l.bias.data = layer.bias.data.clone()
        twin.lin_r.weight.data = layer.weight_self.data.T.clone()
    return twin


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("cls", [GCNConv, SAGEConv])
@pytest.mark.parametrize("f_out", [3, 20])      # both multiplication orders of Â·H·W
def test_layer_equals_pyg(cls, directed, f_out):
    g = small_graph(n=70, f=11, directed=directed, seed=3)
    torch.manual_seed(0)
    layer = cls(g.num_features, f_out)
    layer.bias.data.uniform_(-1, 1)
    twin = _pyg_twin(layer)
    algo = SerialSpMM(normalize(g.adj, cls.adjacency))
    x1 = torch.as_tensor(g.x).clone().requires_grad_(True)
    x2 = torch.as_tensor(g.x).clone().requires_grad_(True)
    r = torch.randn(g.n, f_out)
    out, out_pyg = layer(algo, x1), twin(x2, _edge_index(g.adj))
    assert_close(out.detach().numpy(), out_pyg.detach().numpy(), "output")
    (out * r).sum().backward()
    (out_pyg * r).sum().backward()
    assert_close(x1.grad.numpy(), x2.grad.numpy(), "dX")
    ours = [p.grad for p in layer.parameters()]
    theirs = {GCNConv: lambda: [twin.lin.weight.grad.T, twin.bias.grad],
              SAGEConv: lambda: [twin.lin_l.weight.grad.T, twin.lin_l.bias.grad, twin.lin_r.weight.grad.T]}[cls]()
    for a, b in zip(ours, theirs):
        assert_close(a.numpy(), b.numpy(), "weight gradient")


def test_gcn_on_weighted_edges_and_self_loops_equals_pyg():
    """A + I set a node's own self-loop to weight one, where PyG's GCNConv (add_remaining_self_loops) keeps it: 12%
    apart on a weighted graph with weighted self-loops."""
    import scipy.sparse as sp

    g = small_graph(n=70, f=11, directed=True, seed=3)
    a = g.adj.tocoo()
    w = np.random.default_rng(1).uniform(0.5, 2.0, a.nnz).astype(np.float32)
    adj = sp.csr_matrix((w, (a.row, a.col)), shape=a.shape)
    adj.setdiag(np.where(np.arange(g.n) % 3 == 0, 2.5, 0.0))
    adj.eliminate_zeros()
    torch.manual_seed(0)
    layer = GCNConv(g.num_features, 5)
    twin = _pyg_twin(layer)
    coo = adj.tocoo()
    out = layer(SerialSpMM(normalize(adj, "gcn")), torch.as_tensor(g.x))
    theirs = twin(torch.as_tensor(g.x), _edge_index(adj), torch.as_tensor(coo.data))
    assert_close(out.detach().numpy(), theirs.detach().numpy(), "output")
