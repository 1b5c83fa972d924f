"""Sparse blocks sent between the members of a group (`exchange_blocks`) and what that costs each member
(`exchange_cost`): how layouts ship blocks of A (and of Aᵀ) at set-up."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from .comm import Comm, Group


def exchange_blocks(comm: Comm, group: Group, send: dict, recv_shape) -> dict:
    """Sparse blocks between group members: `send[j]` (scipy sparse) goes to member j; returns {i: CSR block
    from member i} for every member (i's own `send[i]` kept local; an empty block where i sent none), shaped
    `recv_shape(i)`. Two all-to-alls: the nonzero counts (int64), then (row, column, value bits) as int32
    triples, 12 bytes a nonzero, values unchanged. A group of one moves nothing."""
    g, me = group.size, group.ranks.index(comm.rank)
    coo = {j: sp.coo_matrix(m) for j, m in send.items()}
    counts = np.array([coo[j].nnz if j in coo and j != me else 0 for j in range(g)], np.int64)
    if g > 1:
        recv = comm.all_to_all_v(torch.from_numpy(counts), [1] * g, [1] * g, group).numpy()
        parts = [np.stack([coo[j].row, coo[j].col, coo[j].data.astype(np.float32).view(np.int32)], 1)
                 for j in range(g) if counts[j]]
        buf = np.concatenate(parts).astype(np.int32) if parts else np.zeros((0, 3), np.int32)
        got = comm.all_to_all_v(torch.from_numpy(buf), counts, recv, group).numpy()
    out, start = {}, 0
    for i in range(g):
        if i == me:
            out[i] = sp.csr_matrix(coo[i] if i in coo else recv_shape(i), dtype=np.float32)
            continue
        t = got[start:start + recv[i]]
        start += recv[i]
        out[i] = sp.csr_matrix((t[:, 2].copy().view(np.float32), (t[:, 0], t[:, 1])), shape=recv_shape(i))
    return out


def exchange_cost(group: str, g: int, me: int, sent: np.ndarray, recv: np.ndarray) -> list:
    """`exchange_blocks`'s calls given the nonzeros `sent[j]` to and `recv[j]` from each member j."""
    if g == 1:
        return []
    others = np.arange(g) != me
    return [("all_to_all", group, (g - 1) * 8, (g - 1) * 8, g - 1),
            ("all_to_all", group, 12 * sent[others].sum(), 12 * recv[others].sum(), np.count_nonzero(sent[others]))]
