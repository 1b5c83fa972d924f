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
        return t if t.device == self.home else t.to(self.home)

    def _start(self, op: str, outs: tuple, *args):
        """Run ``inner.<op>(*args)`` on staged tensors; `outs` are the (caller's, staged) pairs to copy back."""
        work = getattr(self.inner, op)(*args)
        return _Back(work, [(t, s) for t, s in outs if s is not t])

    def new_group(self, ranks):
        return self.inner.new_group(ranks)

    def all_gather_object(self, obj, group):
        return self.inner.all_gather_object(obj, group)

    def broadcast(self, t, src, group):
        self.broadcast_async(t, src, group, op="broadcast").wait()

    def broadcast_async(self, t, src, group, op="broadcast_async"):
        s = self._there(t)
        return self._start(op, ((t, s),), s, src, group)

    def all_to_all_v(self, out, inp, out_splits, in_splits, group):
        self.all_to_all_v_async(out, inp, out_splits, in_splits, group, op="all_to_all_v").wait()

    def all_to_all_v_async(self, out, inp, out_splits, in_splits, group, op="all_to_all_v_async"):
        o = out if out.device == self.home else torch.empty(out.shape, dtype=out.dtype, device=self.home)
        return self._start(op, ((out, o),), o, self._there(inp), out_splits, in_splits, group)

    def all_reduce(self, t, group):
        self.all_reduce_async(t, group, op="all_reduce").wait()

    def all_reduce_async(self, t, group, op="all_reduce_async"):
        s = self._there(t)
        return self._start(op, ((t, s),), s, group)

    def reduce_scatter(self, out, inp, group):
        o = out if out.device == self.home else torch.empty(out.shape, dtype=out.dtype, device=self.home)
        self._start("reduce_scatter", ((out, o),), o, self._there(inp), group).wait()


class _Back:
    """A collective in flight on staged tensors (`work`: the inner transport's handle, None for a blocking call):
    ``wait()`` finishes it and copies each staged output back into the caller's tensor."""

    def __init__(self, work, copies):
        self.work, self.copies = work, copies

    def wait(self):
        if self.work is not None:
            self.work.wait()
        for t, s in self.copies:
            t.copy_(s)
