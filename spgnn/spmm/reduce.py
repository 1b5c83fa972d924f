"""Partial sums reduced piece by piece while the last product computes them (3D's fibre reduce-scatter).

Each of the g members of a group holds a partial Z (m×f) of the same rows; row piece k (`pieces[k]` rows, in
order) belongs to member k. `reduce_pieces` computes the last stage's product piece by piece and starts piece k's
exchange as soon as its rows are done, one all-to-all in which every member sends piece k to member k only, so
that piece k is in flight while piece k+1 is computed; member k sums the g copies in member order (the same sum
with ``--overlap off``, where each exchange completes before the next piece). Per member: it sends
(m − pieces[me])·f words in g − 1 messages and receives (g − 1)·pieces[me]·f: a reduce-scatter's bytes.
"""

from __future__ import annotations

import numpy as np
import torch


def _bounds(pieces) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(pieces)]).astype(np.int64)


def reduce_pieces(comm, group, z: torch.Tensor, pieces, compute, blocking: bool) -> torch.Tensor:
    """This member's piece of Σ_group Z (pieces[me]×f). `compute(lo, hi)` adds the last stage's product into
    z[lo:hi] before that piece's exchange starts (`blocking`: each exchange completes at once)."""
    g, me, bounds = group.size, group.ranks.index(comm.rank), _bounds(pieces)
    pending = []
    for k in range(g):
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        compute(lo, hi)
        send = np.zeros(g, np.int64)
        send[k] = hi - lo
        recv = np.full(g, pieces[me] if k == me else 0, np.int64)
        pending.append(comm.all_to_all_v_async(z[lo:hi], send, recv, group, blocking))
    got = [p.wait() for p in pending][me]
    return got.view(g, int(pieces[me]), *z.shape[1:]).sum(0)


def reduce_cost(group: str, pieces, me: int, row_bytes: int) -> list:
    """`reduce_pieces`' calls for member `me`, in `spgnn.cost` form: one all-to-all a piece."""
    return [("all_to_all", group, pieces[k] * row_bytes if k != me else 0,
             (len(pieces) - 1) * pieces[me] * row_bytes if k == me else 0, int(k != me and pieces[k] > 0))
            for k in range(len(pieces))]
