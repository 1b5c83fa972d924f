"""Each layer starts from the parameters its peer library draws: from one torch seed, spgnn's ``--init pyg``
equals PyTorch Geometric's ``reset_parameters()`` bit for bit, and ``--init dgl`` equals DGL's (its
``reset_parameters`` calls, written out here from DGL's source, as DGL does not install beside this torch);
``--init auto`` takes `CHOSEN` per layer kind."""

import math

import pytest
import torch
from torch import nn

from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.layers import CHOSEN, GATConv, GCNConv, SAGEConv, build_model

pyg = pytest.importorskip("torch_geometric.nn", reason="PyTorch Geometric is not installed (pip install .[test])")
F_IN, F_OUT, HEADS = 23, 9, 4


def seeded(make, seed=7):
    torch.manual_seed(seed)
    return make()


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.detach(), b.detach())


def test_pyg_scheme_equals_pyg_reset_parameters():
    gcn, sage, gat = pyg.GCNConv(F_IN, F_OUT), pyg.SAGEConv(F_IN, F_OUT), pyg.GATConv(F_IN, F_OUT, HEADS)
    for layer in (gcn, sage, gat):
        seeded(layer.reset_parameters)
    ours = seeded(lambda: GCNConv(F_IN, F_OUT, init="pyg"))
    assert same(ours.weight, gcn.lin.weight.T) and same(ours.bias, gcn.bias)
    ours = seeded(lambda: SAGEConv(F_IN, F_OUT, init="pyg"))
    assert same(ours.weight_neigh, sage.lin_l.weight.T) and same(ours.bias, sage.lin_l.bias)
    assert same(ours.weight_self, sage.lin_r.weight.T)
    ours = seeded(lambda: GATConv(F_IN, F_OUT, HEADS, init="pyg"))
    assert same(ours.weight, gat.lin.weight.T) and same(ours.bias, gat.bias)
    assert same(ours.att_src, gat.att_src[0]) and same(ours.att_dst, gat.att_dst[0])


def dgl_reset(kind):
    """The tensors DGL's reset_parameters() draws (dgl/nn/pytorch/conv/{graphconv,sageconv,gatconv}.py)."""
    gain = nn.init.calculate_gain("relu")
    if kind == "gcn":                           # GraphConv: weight (in, out), xavier_uniform_; bias zeros_
        return {"weight": nn.init.xavier_uniform_(torch.empty(F_IN, F_OUT))}
    if kind == "sage":                          # fc_self, then fc_neigh; fc_self's bias keeps nn.Linear's draw
        w_self = nn.init.xavier_uniform_(torch.empty(F_OUT, F_IN), gain=gain)
        return {"weight_self": w_self.T, "weight_neigh": nn.init.xavier_uniform_(torch.empty(F_OUT, F_IN), gain=gain).T}
    fc = nn.init.xavier_normal_(torch.empty(HEADS * F_OUT, F_IN), gain=gain)   # GATConv: fc, attn_l, attn_r
    attn_l = nn.init.xavier_normal_(torch.empty(1, HEADS, F_OUT), gain=gain)
    attn_r = nn.init.xavier_normal_(torch.empty(1, HEADS, F_OUT), gain=gain)
    return {"weight": fc.T, "att_src": attn_l[0], "att_dst": attn_r[0]}


@pytest.mark.parametrize("kind,cls", [("gcn", GCNConv), ("sage", SAGEConv), ("gat", GATConv)])
def test_dgl_scheme_equals_dgl_reset_parameters(kind, cls):
    ours = seeded(lambda: cls(F_IN, F_OUT, HEADS, init="dgl") if cls is GATConv else cls(F_IN, F_OUT, init="dgl"))
    for name, value in seeded(lambda: dgl_reset(kind)).items():
        assert same(getattr(ours, name), value), name
    if kind == "sage":      # nn.Linear's bias: U(±1/√f_in)
        assert 0 < ours.bias.abs().max() <= 1 / math.sqrt(F_IN)
    else:
        assert not ours.bias.any()


def test_auto_takes_the_chosen_scheme_per_layer():
    def model(kind, init="auto"):
        torch.manual_seed(7)
        return build_model(kind, F_IN, 3, 8, layers=2, heads=2, init=init)

    for kind in ("gcn", "sage", "gat"):
        auto, chosen = model(kind), model(kind, CHOSEN[kind])
        other = model(kind, {"pyg": "dgl", "dgl": "pyg"}[CHOSEN[kind]])
        for (name, a), b in zip(auto.named_parameters(), chosen.parameters(), strict=True):
            assert same(a, b), name
        assert not all(same(a, c) for a, c in zip(auto.parameters(), other.parameters()))
    with pytest.raises(SpgnnError, match="--init must be auto, pyg or dgl, got 'keras'"):
        TrainConfig(init="keras").validate()
    with pytest.raises(SpgnnError, match="--init must be auto, pyg or dgl"):
        GCNConv(3, 2, init="keras")
