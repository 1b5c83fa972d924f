"""Initial parameters as the peer libraries draw them, so that a spgnn layer starts where the same layer of
PyTorch Geometric or DGL starts.

======  ============================================  ====================================================
layer   PyG (``torch_geometric.nn``)                  DGL (``dgl.nn.pytorch``)
======  ============================================  ====================================================
GCN     W Glorot-uniform, b = 0                       W Xavier-uniform, b = 0 (GraphConv)
SAGE    W_n, W_s, b as torch's Linear: U(±1/√f_in)    W_s, W_n Xavier-uniform with gain √2, b U(±1/√f_in)
GAT     W, a_src, a_dst Glorot-uniform, b = 0         W, a_src, a_dst Xavier-normal with gain √2, b = 0
======  ============================================  ====================================================

Each function draws in its library's layout (a Linear's weight is f_out×f_in; spgnn's is its transpose) and
order, so that from one torch seed it gives the values of that library's ``reset_parameters()``. A layer's
`default_init` (`spgnn.layers.CHOSEN`) is the scheme ``--init auto`` takes: the one that reached a fixed test
accuracy sooner (``benchmarks/bench_init.py``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

SCHEMES = ("pyg", "dgl")
RELU_GAIN = math.sqrt(2.0)        # torch.nn.init.calculate_gain("relu"), DGL's gain


def glorot(*shape: int) -> torch.Tensor:
    """PyG's ``glorot``: U(±√(6 / (fan_in + fan_out))) with the fans the last two dimensions."""
    bound = math.sqrt(6.0 / (shape[-2] + shape[-1]))
    return torch.empty(*shape).uniform_(-bound, bound)


def xavier(*shape: int, gain: float = 1.0, normal: bool = False) -> torch.Tensor:
    """torch's ``xavier_uniform_``/``xavier_normal_`` (DGL's), fans as torch counts them: for (1, H, C),
    fan_in = H·C and fan_out = C."""
    t = torch.empty(*shape)
    return nn.init.xavier_normal_(t, gain) if normal else nn.init.xavier_uniform_(t, gain)


def kaiming_uniform(*shape: int, fan_in: int) -> torch.Tensor:
    """PyG's ``kaiming_uniform`` with a = √5 (torch's Linear default): U(±√(6 / ((1 + a²)·fan_in))) ≈ U(±1/√fan_in)."""
    bound = math.sqrt(6 / ((1 + math.sqrt(5) ** 2) * fan_in))
    return torch.empty(*shape).uniform_(-bound, bound)


def fan_in_uniform(*shape: int, fan_in: int) -> torch.Tensor:
    """U(±1/√fan_in): the bias of torch's and PyG's Linear."""
    bound = 1.0 / math.sqrt(fan_in)
    return torch.empty(*shape).uniform_(-bound, bound)


def gcn(f_in: int, f_out: int, scheme: str) -> dict:
    """{"weight": f_in×f_out, "bias"} of GCNConv (PyG) or GraphConv (DGL, whose weight is f_in×f_out already)."""
    w = glorot(f_out, f_in).T if scheme == "pyg" else xavier(f_in, f_out)
    return {"weight": w, "bias": torch.zeros(f_out)}


def sage(f_in: int, f_out: int, scheme: str) -> dict:
    """{"weight_neigh", "bias", "weight_self"} of SAGEConv (mean): PyG's lin_l (weight, bias) then lin_r;
    DGL's fc_self then fc_neigh."""
    if scheme == "pyg":
        w_n, b = kaiming_uniform(f_out, f_in, fan_in=f_in), fan_in_uniform(f_out, fan_in=f_in)
        w_s = kaiming_uniform(f_out, f_in, fan_in=f_in)
    else:
        w_s, w_n = xavier(f_out, f_in, gain=RELU_GAIN), xavier(f_out, f_in, gain=RELU_GAIN)
        b = fan_in_uniform(f_out, fan_in=f_in)
    return {"weight_neigh": w_n.T, "bias": b, "weight_self": w_s.T}


def gat(f_in: int, f_out: int, heads: int, bias: int, scheme: str) -> dict:
    """{"weight": f_in×(H·f_out), "att_src", "att_dst": H×f_out, "bias"} of GATConv; the attention vectors are
    drawn as both libraries hold them, (1, H, f_out)."""
    if scheme == "pyg":
        w, a_src, a_dst = glorot(heads * f_out, f_in), glorot(1, heads, f_out), glorot(1, heads, f_out)
    else:
        w, a_src, a_dst = (xavier(*shape, gain=RELU_GAIN, normal=True)
                           for shape in ((heads * f_out, f_in), (1, heads, f_out), (1, heads, f_out)))
    return {"weight": w.T, "att_src": a_src[0], "att_dst": a_dst[0], "bias": torch.zeros(bias)}
