"""SAR (Mostafa, MLSys 2022): sequential aggregation and rematerialization over a 1D partition.

Rank i holds the in-edges of its rows split by source part j into shards A_ij, each over only the rows R_ij
of H_j it touches (1d-halo's layout, whose set-up this reuses). A product is a ring of P−1 rounds: in round r
rank i receives R_ij from j = (i−r) mod P, sends R_{i+r,i} to (i+r) mod P, adds A_ij·H_{R_ij} into the
accumulator and frees the rows. Nothing remote outlives its round, so what a rank keeps for the backward is
O(n_i) and falls as 1/P.

- Linear aggregation (Z = A·H): the backward computes A_ijᵀ·G_i (|R_ij|×f) locally and returns it to owner j
  in the reverse ring; nothing is re-fetched. Bytes per product equal 1d-halo's. A symmetric Â (GCN on an
  undirected graph) runs the forward ring on G instead (Âᵀ = Â), so no shard is ever transposed.
- Attention (`attend`): the forward keeps an online softmax (running row maximum m_i, sum l_i, accumulator),
  so the edges×heads scores of one shard exist at a time; only V_i, s_src, s_dst, out_i and L_i = m_i + log l_i
  are saved. The backward rematerializes shard by shard: re-fetch [V | s_src] rows R_ij, rebuild the shard's
  graph with α = exp(e − L_i) recomputed, back-propagate the surrogate Σ dO_i·Σ_j α_ij·m_ij·V_j − Σ D_i·Σ_j α_ij
  (D_i = dO_i·out_i supplies softmax's normalisation term, so per-shard gradients sum to the exact one),
  return the remote rows' gradients to their owners, free. Twice 1d-halo's forward bytes.

With ``--overlap on`` (the default) ``--prefetch`` k rounds are kept in flight ahead of the one being computed
(asynchronous all-to-alls), the local shard's product counting as round 0: rounds 1…k are in flight while
A_ii·H_i is computed. ``--overlap off`` completes each round's exchange before its product. Bytes and results do
not depend on either.
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm.comm import prefetched
from ..errors import SpgnnError
from ..sparse import attention, kernels
from ..sparse.csr import row_ids
from .halo import OneDHalo
from .registry import Option, register


def _peers(me: int, r: int, P: int, reverse: bool) -> tuple[int, int]:
    """(to, from) of ring round r for member `me`: forward sends to me+r and receives from me−r; the
    reverse ring the other way round."""
    return ((me - r) % P, (me + r) % P) if reverse else ((me + r) % P, (me - r) % P)


@register
class SAR(OneDHalo):
    """Sequential aggregation over the shards A_ij in a ring; rematerializing backward for attention."""

    name = "sar"
    summary = ("aggregates shard by shard in a ring and keeps nothing remote for the backward (memory per rank "
               "falls as 1/P)")
    options = OneDHalo.options + (Option("prefetch", int, 1, "sar: ring rounds in flight ahead of the one computed "
                                         "(with --overlap on; the local shard's product is round 0)",
                                         valid=lambda k: k >= 0, must="non-negative"),)

    def __init__(self, block, comm, grid, device="cpu", overlap="on", prefetch: int = 1):
        super().__init__(block, comm, grid, device, overlap)
        self.group, self.P = self.halo.group, self.halo.group.size
        self.depth = max(0, int(prefetch)) if self.overlap else 0
        self.recv_rows, self.send_rows = self.halo.recv_rows, self.halo.send_rows
        self._coo = {}
        self.send_offsets = np.concatenate([[0], np.cumsum(self.send_rows)])

    @classmethod
    def check_values(cls, values: dict) -> None:
        """Rounds in flight (--prefetch above 1) need --overlap on, without which none is."""
        if values.get("overlap", "on") == "off" and values.get("prefetch", 1) > 1:
            raise SpgnnError(f"--prefetch {values['prefetch']} keeps ring rounds in flight while one is computed, "
                             "which --overlap off never does: drop --prefetch, or keep --overlap on")

    @property
    def hides_comm(self) -> bool:
        """--prefetch 0 starts each ring round when it is consumed: nothing is in flight behind a product."""
        return self.overlap and self.depth > 0

    @property
    def me(self) -> int:
        """This rank's member index in the part group: its own shard's."""
        return self.halo.group.ranks.index(self.comm.rank)

    def _bounds(self, n_i):
        """(lo, hi): shard j is the columns lo[j]:hi[j] of [A_ii A_i,halo], the rows R_ij of part j (`me`: A_ii)."""
        halo = n_i + np.concatenate([[0], np.cumsum(self.halo.recv_rows)])
        lo, hi = halo[:-1].copy(), halo[1:].copy()
        lo[self.me], hi[self.me] = 0, n_i
        return lo, hi

    @classmethod
    def spmm_cost(cls, stats, shape, rank, f):
        """A ring of P−1 one-peer all-to-alls each way (bytes as 1d-halo's, P−1 calls)."""
        R, P = stats.halo, len(stats.halo)
        need, give = R[rank], R[:, rank]          # rows rank needs from each part / each part needs from rank

        def ring(send, recv, reverse):
            return [("all_to_all", "part", send[to] * f * 4, recv[frm] * f * 4, int(send[to] > 0))
                    for to, frm in (_peers(rank, r, P, reverse) for r in range(1, P))]

        forward = ring(give, need, False)
        return {"forward": forward, "backward": forward if stats.symmetric else ring(need, give, True)}

    attend_work = {"forward": (43, 107, 36, 9), "backward": (67, 172, 70, 28)}     # as 1d-halo's, found the same way
    attend_dropout_work = {"forward": (9, 38, 7, 1), "backward": (10, 52, 9, 0)}   # the mask drawn again backward
    attend_fresh = {"forward": (6, 1), "backward": (12, 2)}

    @classmethod
    def attend_memory(cls, stats, share, rank, heads, f, dropout=False):
        """Saved: only local rows, V, the output, s_src, s_dst and the row log-sum-exps (the backward makes the
        rest again, shard by shard). Working: X + 10·(E + V) (X, E, V as 1d-halo's), fitted the same way: the
        rematerialized shards' graphs and gradients."""
        x, e, v = cls.attend_sizes(stats, share, rank, heads, f)
        return {"saved": int(4 * share.rows * heads * (2 * f + 3)), "working": x + 10 * (e + v)}

    @classmethod
    def attend_cost(cls, stats, shape, rank, heads, f, dropout=False):
        """1d-halo's bytes in rings, and the backward's rematerialization: the forward ring of [V | s_src] again
        before the reverse ring of their gradients."""
        calls = super().attend_cost(stats, shape, rank, heads, f, dropout)
        return calls | {"backward": calls["forward"] + calls["backward"]}

    def _sent_to(self, j, device="cpu"):
        """Indices of the local rows owner j's shard A_ji touches (R_ji), on `device`."""
        return self.halo.send_idx_on(device)[self.send_offsets[j]:self.send_offsets[j + 1]]

    def _ring(self, payload, reverse=False):
        """Iterator over (j, rows received from j) for rounds r = 1…P−1; rounds 1…depth start now (in flight
        during the caller's work before the first round), then each round asked for starts round r + depth.

        Forward direction: receive R_ij from j = i−r and send payload(i+r) (rows R_{i+r,i}) to i+r.
        Reverse: send payload(i−r) (rows R_{i,i−r}) to i−r and receive rows R_{i+r,i} from i+r."""
        P, me = self.P, self.me

        def start(r):
            to, frm = _peers(me, r, P, reverse)

            def go():
                send = payload(to)
                send_rows, recv_rows = np.zeros(P, np.int64), np.zeros(P, np.int64)
                send_rows[to] = send.shape[0]
                recv_rows[frm] = (self.send_rows if reverse else self.recv_rows)[frm]
                return self.comm.all_to_all_v_async(send, send_rows, recv_rows, self.group, not self.overlap)
            return go

        return zip((_peers(me, r, P, reverse)[1] for r in range(1, P)), prefetched(map(start, range(1, P)), self.depth))

    # -- linear aggregation ----------------------------------------------------------------------------
    def _forward(self, h):
        ring = self._ring(lambda to: h[self._sent_to(to, h.device)])   # rounds 1…depth in flight during A_ii·H_i
        z = kernels.spmm(self.shards[self.me], h)
        for j, h_j in ring:
            kernels.spmm(self.shards[j], h_j, out=z, accumulate=True)
        return z

    def _backward(self, g):
        if self.symmetric:                     # Âᵀ·G = Â·G: the forward ring on G, no shard transposed
            return self._forward(g)
        ring = self._ring(lambda to: kernels.spmm(self.shards[to].T, g), reverse=True)
        dh = kernels.spmm(self.shards[self.me].T, g)
        for j, back in ring:
            dh.index_add_(0, self._sent_to(j, dh.device), back)
        return dh

    # -- attention -------------------------------------------------------------------------------------
    def attend(self, v, s_src, s_dst, slope, dropout=0.0, key=0):
        return _Attention.apply(v, s_src, s_dst, self, (slope, dropout, key))

    def _edges(self, j, heads, dropout, key, dtype, device):
        """Shard j's edges (rows, cols) as int64 tensors on `device` (cached per device) and its attention dropout
        mask there, of `dtype` (or None)."""
        cpu = torch.device("cpu")
        if (j, cpu) not in self._coo:
            a = self.shards[j]
            self._coo[j, cpu] = (torch.as_tensor(row_ids(a.indptr)), torch.as_tensor(a.indices, dtype=torch.int64))
        rows, cols = self._coo[j, cpu]
        mask = self._edge_mask(rows.numpy(), self.col_ids[self.lo[j]:self.hi[j]][cols.numpy()], heads, dropout, key,
                               dtype, device) if dropout > 0 else None
        if (j, device) not in self._coo:
            self._coo[j, device] = (rows.to(device), cols.to(device))
        return (*self._coo[j, device], mask)

    def _shards(self, x):
        """(j, [V | s_src] rows of shard j) for the local shard, then the ring's."""
        ring = self._ring(lambda to: x[self._sent_to(to, x.device)])   # in flight during the local shard
        yield self.me, x
        yield from ring

    @torch.no_grad()
    def _attend_forward(self, v, s_src, s_dst, slope, dropout, key):
        """(out n_i×H×F, L n_i×H) by an online softmax over the shards."""
        n_i, heads, f = v.shape
        m = s_dst.new_full((n_i, heads), float("-inf"))
        l, acc = s_dst.new_zeros((n_i, heads)), v.new_zeros((n_i, heads, f))
        for j, x_j in self._shards(torch.cat([v.reshape(n_i, -1), s_src], 1)):
            rows, cols, mask = self._edges(j, heads, dropout, key, v.dtype, v.device)
            e = attention.scores(rows, cols, x_j[:, -heads:], s_dst, slope)
            m_new = torch.maximum(m, attention.segment_max(e, rows, n_i))
            rescale = torch.exp(m - m_new).nan_to_num_(0.0)         # rows still without edges: −inf − −inf
            p = torch.exp(e - m_new[rows])
            l.mul_(rescale).add_(attention.segment_sum(p, rows, n_i))
            v_j = x_j[:, :-heads].view(-1, heads, f)
            acc.mul_(rescale.unsqueeze(-1)).add_(attention.weighted_sum(p if mask is None else p * mask,
                                                                        rows, cols, v_j, n_i))
            m = m_new
        out = acc / torch.where(l > 0, l, 1.0).unsqueeze(-1)
        return out, m + torch.log(l)

    def _attend_backward(self, v, s_src, s_dst, out, lse, d_out, slope, dropout, key):
        """(dV, ds_src, ds_dst) by rematerializing each shard's graph; remote-row gradients go home."""
        n_i, heads, f = v.shape
        d_norm = (d_out * out).sum(-1)                                # D_i = dO_i·out_i, n_i×H
        ds_dst = torch.zeros_like(s_dst)

        def shard_grad(j, x_j):
            rows, cols, mask = self._edges(j, heads, dropout, key, v.dtype, v.device)
            with torch.enable_grad():
                x_j, s_d = x_j.detach().requires_grad_(), s_dst.detach().requires_grad_()
                v_x, s_x = x_j.split([heads * f, heads], 1)      # one backward (a cat), not two zero-filled copies
                alpha = torch.exp(attention.scores(rows, cols, s_x, s_d, slope) - lse[rows])
                c = attention.weighted_sum(alpha if mask is None else alpha * mask, rows, cols,
                                           v_x.view(-1, heads, f), n_i)
                surrogate = (c * d_out).sum() - (attention.segment_sum(alpha, rows, n_i) * d_norm).sum()
                dx_j, ds_d = torch.autograd.grad(surrogate, (x_j, s_d))
            ds_dst.add_(ds_d)
            return dx_j

        shards = self._shards(torch.cat([v.reshape(n_i, -1), s_src], 1))
        dx = shard_grad(*next(shards))
        for j, back in self._ring(lambda to: shard_grad(*next(shards)), reverse=True):
            dx.index_add_(0, self._sent_to(j, dx.device), back)
        return dx[:, :-heads].reshape(n_i, heads, f), dx[:, -heads:], ds_dst


class _Attention(torch.autograd.Function):
    """Autograd glue for SAR attention: saves only local n_i-row tensors; backward in phase "backward"."""

    @staticmethod
    def forward(ctx, v, s_src, s_dst, op, args):
        out, lse = op._attend_forward(v, s_src, s_dst, *args)
        ctx.save_for_backward(v, s_src, s_dst, out, lse)
        ctx.op, ctx.args, ctx.layer = op, args, op.comm.layer
        return out

    @staticmethod
    def backward(ctx, d_out):
        with ctx.op.comm.phase("backward", ctx.layer):
            grads = ctx.op._attend_backward(*ctx.saved_tensors, d_out.contiguous(), *ctx.args)
        return (*grads, None, None)
