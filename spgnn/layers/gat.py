"""GAT (Veličković et al.): H' = ‖_k Σ_{j→i} α^k_ij·W^k·h_j + b (or the mean over heads k), over A + I,
α^k_ij = softmax_j LeakyReLU(a^k_src·W^k h_j + a^k_dst·W^k h_i) (PyG's GATConv with add_self_loops=True)."""

from __future__ import annotations

import hashlib
import math
import numbers

import torch
import torch.nn.functional as F

from ..errors import SpgnnError
from ..hashing import mix_key
from ..options import Option, is_int
from . import init as inits
from .registry import Attend, Dense, KeepsDraws, Layer, register_layer


@register_layer
class GATConv(KeepsDraws, Layer):
    """W is f_in×(H·f_out) (PyG's ``lin.weight`` transposed), a_src and a_dst are H×f_out; heads concatenated
    (H·f_out columns) or averaged (f_out); attention dropout `dropout`, drawn from the hash key the stack gives (in
    a model of one's own, without a key: from a digest of the layer's initial W and the count of its training
    forwards, the same on every rank, whose weights `DistGraph.prepare` checks are equal; both are buffers, in
    its ``state_dict``, so that a resumed run draws the masks the uninterrupted one would have)."""

    name, summary, adjacency = "gat", "graph attention (Veličković et al.)", "self-loops"
    shift = "bias"
    needs, default_init, keyed = frozenset({"attention"}), "dgl", True
    activation = staticmethod(F.elu)
    options = (Option("heads", int, 8, "gat: attention heads of each hidden layer (concatenated)",
                      valid=lambda v: v >= 1, must="at least 1"),
               Option("out_heads", int, 1, "gat: attention heads of the last layer (averaged)",
                      valid=lambda v: v >= 1, must="at least 1"))
    draw = staticmethod(lambda scheme, f_in, f_out, heads, bias: inits.gat(f_in, f_out, heads, bias, scheme))

    def __init__(self, f_in: int, f_out: int, heads: int = 1, concat: bool = True, dropout: float = 0.0,
                 negative_slope: float = 0.2, init: str = "auto"):
        counts, reals = (f_in, f_out, heads), (dropout, negative_slope)
        if not (all(is_int(k) and k >= 1 for k in counts)
                and all(isinstance(r, numbers.Real) and math.isfinite(r) for r in reals) and 0 <= dropout < 1):
            raise SpgnnError(f"GATConv: heads must be at least 1, as must f_in and f_out (integers all), dropout in "
                             f"[0, 1) and negative_slope a finite number, got heads {heads!r}, f_in {f_in!r}, f_out "
                             f"{f_out!r}, dropout {dropout!r}, negative_slope {negative_slope!r}")
        super().__init__(f_in, heads * f_out if concat else f_out)
        self.heads, self.channels, self.concat = heads, f_out, concat
        self.dropout, self.negative_slope = dropout, negative_slope
        self.initialise(init, f_in, f_out, heads, self.f_out)
        salt = 0 if self.weight.is_meta else int.from_bytes(   # (meta: a plan's model, which never runs)
            hashlib.sha256(self.weight.detach().cpu().numpy().tobytes()).digest()[:8], "little", signed=True)
        self.register_buffer("salt", torch.tensor(salt))                # in state_dict, as the count: see above
        self.register_buffer("forwards", torch.zeros((), dtype=torch.int64))

    def forward(self, g, h, key: int | None = None):
        if key is None and self.training and self.dropout > 0:   # a fresh mask each training forward
            key = mix_key(int(self.salt), int(self.forwards), 2)
            self.forwards += 1
        out = self.attend(g, g.linear(h, self.weight).view(-1, self.heads, self.channels), key or 0)
        return (out.flatten(1) if self.concat else out.mean(1)) + self.bias

    def attend(self, g, v, key: int = 0):
        """The layer's `Attend`: out (n×H×f_out) of V (n×H×f_out) by `g.attend`, with the scores' terms
        s_src = Σ_f V·a_src and s_dst = Σ_f V·a_dst (n×H), attention dropout in training, over the pattern of the
        layer's `adjacency`."""
        return g.attend(v, (v * self.att_src).sum(-1), (v * self.att_dst).sum(-1), self.negative_slope,
                        self.dropout if self.training else 0.0, key, self.adjacency)

    def costs(self, grad_in):
        return [Dense(self.f_in, self.heads * self.channels),
                Attend(self.heads, self.channels, self.adjacency, self.dropout > 0)]

    @classmethod
    def stack(cls, f_in, hidden, classes, layers, init="auto", heads=8, out_heads=1, dropout=0.0, **options):
        """Hidden layers concatenate `heads` heads of `hidden` features, the last averages `out_heads`;
        attention dropout `dropout`."""
        widths = [f_in] + [hidden * heads] * (layers - 1)
        return [cls(a, hidden, heads, True, dropout, init=init) for a in widths[:-1]] + \
            [cls(widths[-1], classes, out_heads, False, dropout, init=init)]
