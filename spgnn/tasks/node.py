"""Node tasks: one class per node (``multiclass``: cross-entropy, accuracy)."""

from __future__ import annotations

from .registry import SPLITS, Task, register_task


@register_task
class Multiclass(Task):
    """One of C classes per node (labels of shape [n]): the mean cross-entropy, judged by accuracy."""

    name = "multiclass"
    summary = "one class per node: cross-entropy, accuracy"

    @classmethod
    def found(cls, info) -> bool:
        return getattr(info, "targets", 0) == 0

    def loss(self, g, out, mask="train"):
        return g.cross_entropy(out, mask)

    def evaluate(self, g, out, splits=SPLITS) -> dict:
        return g.accuracy(out, splits)
