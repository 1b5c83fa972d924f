"""The halo of a block row: the rows of other parts that it touches, and the exchanges that bring them.

In a group whose member q holds part q (rows offsets[q]:offsets[q+1]), a rank holding block row p needs
R_pq = {columns of its block row in part q}, q ≠ p. Set-up (two all-to-alls, phase of the caller): the
counts |R_pq| (int64, one a member), then the ids of R_pq to their owners, who keep which of their local rows
to send. After that `gather` brings those rows of any per-node array (H, degrees, original ids) in one
all-to-all and `scatter_add` returns per-halo-row values to their owners and adds them in (its adjoint);
`gather_async` and `scatter_async` start those exchanges and leave them in flight until waited for.
"""

from __future__ import annotations

import numpy as np
import torch

from .comm import Comm, Group, Pending


def owner(cols: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The part of each (new) column id."""
    return np.searchsorted(offsets, cols, side="right") - 1


class Halo:
    """Block row `part`'s remote columns (`remote`, sorted) and the exchange plan in `group`."""

    def __init__(self, indices: np.ndarray, offsets: np.ndarray, part: int, comm: Comm, group: Group):
        self.comm, self.group, self.offsets, self.part = comm, group, offsets, part
        self.first, self.n_rows = int(offsets[part]), int(offsets[part + 1] - offsets[part])
        cols = np.unique(indices)
        self.remote = cols[owner(cols, offsets) != part]            # sorted, hence grouped by owner
        B = len(offsets) - 1
        self.recv_rows = np.bincount(owner(self.remote, offsets), minlength=B)      # |R_pq| for each owner q
        self._on = {}
        if group.size == 1:
            self.send_rows, self.send_idx = np.zeros(B, np.int64), torch.zeros(0, dtype=torch.int64)
            return
        counts = torch.as_tensor(self.recv_rows, dtype=torch.int64)
        self.send_rows = comm.all_to_all_v(counts, [1] * B, [1] * B, group).numpy()
        wanted = torch.as_tensor(self.remote - offsets[owner(self.remote, offsets)], dtype=torch.int64)
        self.send_idx = comm.all_to_all_v(wanted, self.recv_rows, self.send_rows, group)

    def send_idx_on(self, device) -> torch.Tensor:
        """`send_idx` on `device` (copied there once)."""
        device = torch.device(device)
        if device.type == "cpu":
            return self.send_idx
        if device not in self._on:
            self._on[device] = self.send_idx.to(device)
        return self._on[device]

    @property
    def size(self) -> int:
        """|R_p| = Σ_q |R_pq|."""
        return int(self.remote.size)

    @property
    def nbytes(self) -> int:
        """Bytes of the plan: the remote ids and the local rows to send."""
        return self.remote.nbytes + self.send_idx.numel() * self.send_idx.element_size()

    def local_columns(self, cols: np.ndarray) -> np.ndarray:
        """Column ids of the block row in the local numbering [own rows | halo rows in `remote` order]."""
        cols = np.asarray(cols)
        own = (cols >= self.first) & (cols < self.first + self.n_rows)
        return np.where(own, cols - self.first, self.n_rows + np.searchsorted(self.remote, cols))

    def gather(self, h: torch.Tensor) -> torch.Tensor:
        """The halo rows (|R_p|×…) of a per-node tensor whose local rows are `h`."""
        return self.gather_async(h, blocking=True).wait()

    def gather_async(self, h: torch.Tensor, blocking: bool = False) -> Pending:
        """`gather` started now (done at once if `blocking`): the handle's ``wait()`` returns the halo rows."""
        rows = h[self.send_idx_on(h.device)]
        return self.comm.all_to_all_v_async(rows, self.send_rows, self.recv_rows, self.group, blocking)

    def scatter_add(self, halo_rows: torch.Tensor, into: torch.Tensor) -> torch.Tensor:
        """`into` (local rows) plus, at each owner, the values of its rows among `halo_rows`: gather's adjoint."""
        return into.index_add_(0, self.send_idx_on(into.device), self.scatter_async(halo_rows, blocking=True).wait())

    def scatter_async(self, halo_rows: torch.Tensor, blocking: bool = False) -> Pending:
        """The exchange of `scatter_add` started now (done at once if `blocking`): the handle's ``wait()`` returns
        the rows that others return to this owner, to be added in at its local rows `send_idx`."""
        return self.comm.all_to_all_v_async(halo_rows, self.recv_rows, self.send_rows, self.group, blocking)

    def fetch(self, values: np.ndarray) -> np.ndarray:
        """`gather` for a numpy per-node vector (degrees, original ids)."""
        return self.gather(torch.from_numpy(np.ascontiguousarray(values))).numpy()

    @staticmethod
    def cost(halo: np.ndarray, part: int, group: str) -> list:
        """The set-up's calls for block row `part` given R (`halo[p, q]` = |R_pq|), in `spgnn.cost` form."""
        B, word = len(halo), 8
        if B == 1:
            return []
        need, give = halo[part], halo[:, part]
        return [("all_to_all", group, (B - 1) * word, (B - 1) * word, B - 1),
                ("all_to_all", group, need.sum() * word, give.sum() * word, np.count_nonzero(need))]

    @staticmethod
    def gather_cost(halo: np.ndarray, part: int, group: str, row_bytes: int) -> list:
        """The calls of one `gather` of `row_bytes`-byte rows (the owner sends what others need of it)."""
        if len(halo) == 1:
            return []
        need, give = halo[part], halo[:, part]
        return [("all_to_all", group, give.sum() * row_bytes, need.sum() * row_bytes, np.count_nonzero(give))]
