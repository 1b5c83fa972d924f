"""A transport that moves tensors its backend cannot take to a device it can, and the results back.

nccl moves CUDA tensors only, while the set-up's exchanges (counts, ids, degrees) and the metrics' sums are CPU
tensors; gloo and MPI move CPU tensors, while a job on one GPU shared by several processes (nccl refuses two
processes on one GPU) trains on CUDA tensors. `Staged(inner, home)` gives every tensor to `inner` on `home`:
a tensor already there is passed as it is (no copy), another is copied there, and an output is copied back into
the caller's tensor when the collective is done (at the handle's ``wait()`` for the ``_async`` ones). The ledger
counts the caller's tensors, so bytes are the same whichever device moved them.
"""

from __future__ import annotations

import torch


class Staged:
    """`inner` (a transport) fed with tensors on device `home`."""

    def __init__(self, inner, home: torch.device | str, note: str = ""):
        self.inner, self.home, self.note = inner, torch.device(home), note
        self.name = inner.name

    def _there(self, t: torch.Tensor) -> torch.Tensor:
        """`t`, or a copy of it on `home`."""
        return t if t.device == self.home else t.to(self.home)

    def _space(self, out: torch.Tensor) -> torch.Tensor:
        """`out`, or an uninitialised tensor like it on `home` to receive into."""
        return out if out.device == self.home else torch.empty(out.shape, dtype=out.dtype, device=self.home)

    def _run(self, op: str, out: torch.Tensor, staged: torch.Tensor, *args) -> _Back:
        """``inner.<op>(staged, *args)``; `staged` is copied back into the caller's `out` when it is done."""
        return _Back(getattr(self.inner, op)(staged, *args), out, staged)

    def new_group(self, ranks):
        return self.inner.new_group(ranks)

    def all_gather_object(self, obj, group):
        return self.inner.all_gather_object(obj, group)

    def broadcast(self, t, src, group):
        self._run("broadcast", t, self._there(t), src, group).wait()

    def broadcast_async(self, t, src, group):
        return self._run("broadcast_async", t, self._there(t), src, group)

    def all_to_all_v(self, out, inp, out_splits, in_splits, group):
        self._run("all_to_all_v", out, self._space(out), self._there(inp), out_splits, in_splits, group).wait()

    def all_to_all_v_async(self, out, inp, out_splits, in_splits, group):
        return self._run("all_to_all_v_async", out, self._space(out), self._there(inp), out_splits, in_splits, group)

    def all_reduce(self, t, group):
        self._run("all_reduce", t, self._there(t), group).wait()

    def all_reduce_async(self, t, group):
        return self._run("all_reduce_async", t, self._there(t), group)

    def reduce_scatter(self, out, inp, group):
        self._run("reduce_scatter", out, self._space(out), self._there(inp), group).wait()


class _Back:
    """A collective in flight on a staged tensor (`work`: the inner transport's handle, None for a blocking call):
    ``wait()`` finishes it and copies the staged result into the caller's `out` (unless they are one tensor)."""

    def __init__(self, work, out: torch.Tensor, staged: torch.Tensor):
        self.work, self.out, self.staged = work, out, staged

    def wait(self):
        if self.work is not None:
            self.work.wait()
        if self.staged is not self.out:
            self.out.copy_(self.staged)
