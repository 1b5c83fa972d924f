"""Node tasks: one class per node (``multiclass``: cross-entropy, accuracy), one binary target per node (``binary``)
and t binary targets per node (``multilabel``), both trained with BCE-with-logits over the known targets and judged
by ROC-AUC, averaged over the targets that have both classes in the split (OGB's rule for ogbn-proteins)."""

from __future__ import annotations

from ..errors import SpgnnError
from .registry import SPLITS, Task, register_task


@register_task
class Multiclass(Task):
    """One of C classes per node (labels of shape [n]): the mean cross-entropy, judged by accuracy."""

    name = "multiclass"
    summary = "one class per node: cross-entropy, accuracy"

    @classmethod
    def found(cls, info) -> bool:
        return info.targets == 0

    def check(self, info) -> None:
        unlabelled(info)
        if info.targets:
            raise SpgnnError(f"dataset {info.name!r} has {info.targets} binary targets per node, not classes: use "
                             f"--task {'binary' if info.targets == 1 else 'multilabel'}")
        if info.num_classes < 2:
            raise SpgnnError(f"dataset {info.name!r} has one class: every prediction is that class (loss 0, accuracy "
                             "1), so there is nothing to learn; a node task needs two classes at least")

    def loss(self, g, out, mask="train"):
        return g.cross_entropy(out, mask)

    def evaluate(self, g, out, splits=SPLITS) -> dict:
        return g.accuracy(out, splits)


class Targets(Task):
    """Binary targets per node: BCE-with-logits over the known entries, judged by ROC-AUC (the shared part of
    `Binary` and `Multilabel`)."""

    metric = "rocauc"
    metric_label = "ROC-AUC"

    def out_dim(self, info) -> int:
        return info.targets or 1

    def check(self, info) -> None:
        if not info.label_counts:
            raise SpgnnError(f"dataset {info.name!r} does not say how many positives and negatives each split holds "
                             "(a partitioned folder made before tasks): re-create it with spgnn partition --output")
        for split in SPLITS:
            counts = target_counts(info, split)
            if not any(neg and pos for neg, pos in counts):
                which = f"target 0 has {counts[0][1]} positives and {counts[0][0]} negatives" if len(counts) == 1 \
                    else f"none of its {len(counts)} targets has both positives and negatives"
                raise SpgnnError(f"dataset {info.name!r}: ROC-AUC is undefined on the {split} split ({which}): choose "
                                 "another split (its masks, or, where the dataset has none, another --seed)")

    def loss(self, g, out, mask="train"):
        return g.binary_cross_entropy(out, mask)

    def evaluate(self, g, out, splits=SPLITS) -> dict:
        return g.roc_auc(out, splits)


def unlabelled(info, fix: str = "train it with --task link") -> None:
    """SpgnnError (ending in `fix`) for the graph of an OGB link folder (its `source`, `spgnn.graph.ogbl.fingerprint`,
    says so): its labels are zeros that no node task can learn from (one class, its accuracy 1)."""
    if getattr(info, "source", "").startswith("ogbl:"):
        raise SpgnnError(f"dataset {info.name!r} is an OGB link-prediction graph, whose nodes have no labels: {fix}")


def target_counts(info, split: str) -> list:
    """[[negatives, positives] per target] of `split` (for two classes: class 0 the negatives)."""
    counts = info.label_counts[split]
    return counts if info.targets else [counts]


@register_task
class Binary(Targets):
    """One binary target per node (labels [n, 1] of 0/1/NaN, or class ids of two classes, class 1 positive)."""

    name = "binary"
    summary = "one binary target per node (or two classes): BCE, ROC-AUC"

    @classmethod
    def found(cls, info) -> bool:
        return info.targets == 1

    def check(self, info) -> None:
        unlabelled(info)
        if info.targets > 1 or (not info.targets and info.num_classes != 2):
            what = f"{info.targets} binary targets" if info.targets else f"{info.num_classes} classes"
            raise SpgnnError(f"--task binary needs one binary target or two classes; dataset {info.name!r} has "
                             f"{what}: use --task {'multilabel' if info.targets else 'multiclass'}")
        super().check(info)


@register_task
class Multilabel(Targets):
    """t binary targets per node (labels [n, t] of 0/1/NaN, as OGB's ogbn-proteins)."""

    name = "multilabel"
    summary = "t binary targets per node: BCE over the known ones, ROC-AUC averaged over targets"

    @classmethod
    def found(cls, info) -> bool:
        return info.targets > 1

    def check(self, info) -> None:
        unlabelled(info)
        if not info.targets:
            raise SpgnnError(f"--task multilabel needs n×t binary targets; dataset {info.name!r} has class ids "
                             f"({info.num_classes} classes): use --task multiclass"
                             + (", or binary" if info.num_classes == 2 else ""))
        super().check(info)
