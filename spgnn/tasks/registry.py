"""Tasks: what a run learns and how it is judged, and their registry, by the name ``--task`` takes.

A task is a `Task` that declares

    metric          the key of its figure in the report and the epoch line: "<split>_<metric>" (``val_acc``,
                    ``test_rocauc``); the best epoch is the one with the best ``val_<metric>``
    metric_label    that figure's name for people (an axis label: "accuracy", "ROC-AUC")
    options         its `spgnn.Option`s: TrainConfig fields and ``spgnn train`` flags (``--decoder`` of link)
    node            whether it predicts a value per node (trained by the full-batch `spgnn.Trainer`); a task that
                    is not (link prediction) names its own trainer with `trainer`
    found(info)     whether it is the task the data describe (``--task auto`` takes the first that is)
    check_options(cfg)      one line for options it cannot train with together, before any work
    out_dim(info)   the width of the model's output
    loss(g, out, mask)      the global mean loss over `mask`'s rows, its gradient this rank's share
    evaluate(g, out)        {"<split>_<metric>": the global figure} for each split

It is registered with the ``@register_task`` decorator, or published by another package under the entry-point
group ``spgnn.tasks`` (``name = module:Class``), loaded when ``spgnn`` is imported.
"""

from __future__ import annotations

from .. import options as plugins
from ..errors import SpgnnError

TASKS: dict = {}
plugins.REGISTRIES.append(TASKS)
ENTRY_POINT_GROUP = "spgnn.tasks"
SPLITS = ("train", "val", "test")


class Task:
    """What a run learns and how it is judged (see the module docstring). Tasks hold no state: the methods are
    called on the class's one instance, `get_task(name)`."""

    name = ""
    summary = ""
    metric = "acc"
    metric_label = "accuracy"
    higher_is_better = True     # the best epoch: the highest val_<metric>; False for an error or a loss
    node = True
    options: tuple = ()

    @classmethod
    def found(cls, info) -> bool:
        """Whether the graph `info` describes (`spgnn.graph.graph.GraphInfo`-like: n, targets, num_classes) is
        this task's (for ``--task auto``)."""
        return False

    def check(self, info) -> None:
        """Raise SpgnnError (one line, naming what to do) when this task cannot be trained on `info`'s graph."""

    def check_options(self, cfg) -> None:
        """Raise SpgnnError (one line, naming what to do) for options of `cfg` (a `spgnn.TrainConfig`) this task cannot
        train with together: called by ``cfg.validate()``, before any data is read or any process started."""

    def out_dim(self, info) -> int:
        """The width of the model's output for `info`'s graph."""
        return info.num_classes

    def loss(self, g, out, mask="train"):
        """The global mean loss over the rows of `mask` (a split name or a boolean tensor over `g`'s rows): its
        value the same on every rank, its gradient this rank's share."""
        raise NotImplementedError

    def evaluate(self, g, out, splits=SPLITS) -> dict:
        """{"<split>_<metric>": the global figure} for each split in `splits`, the same on every rank."""
        raise NotImplementedError

    def trainer(self):
        """The `spgnn.train.loop.Run` subclass that trains this task full-batch: the node `Trainer` for a node task;
        a task of another kind (``node = False``) names its own."""
        if not self.node:
            raise SpgnnError(f"task {self.name!r} is not a node task (node = False): it must name the run that trains "
                             "it (override Task.trainer)")
        from ..train.fullbatch import Trainer

        return Trainer


def register_task(cls):
    """Class decorator: register task `cls` under ``cls.name`` (`spgnn.options.admit`: a name registered twice, or an
    option that disagrees with another task's, is an error)."""
    plugins.admit(TASKS, cls, "task", "--task", Task)
    if cls.name == "auto":
        raise SpgnnError("'auto' is not a task name: --task auto means the task the data describe")
    if cls.node and (missing := [m for m in ("loss", "evaluate") if getattr(cls, m) is getattr(Task, m)]):
        raise SpgnnError(f"task {cls.name!r} does not define {' and '.join(missing)} (a node task defines "
                         "loss(self, g, out, mask) and evaluate(self, g, out, splits))")
    TASKS[cls.name] = cls()
    return cls


def get_task(name: str) -> Task:
    """The task registered as `name`."""
    try:
        return TASKS[name]
    except KeyError:
        raise SpgnnError(f"unknown task {name!r}: choose auto, {', '.join(TASKS)}, or register a task with "
                         "spgnn.register_task") from None


def resolve(name: str, info) -> Task:
    """The task `name` names, or for "auto" the first registered task the data describe; checked against `info`."""
    if name == "auto":
        task = next((t for t in TASKS.values() if type(t).found(info)), None)
        if task is None:
            raise SpgnnError(f"no task fits dataset {info.name!r} by itself: choose one with --task "
                             f"({', '.join(TASKS)})")
    else:
        task = get_task(name)
    task.check(info)
    return task


def options() -> dict:
    """Every registered task's options by name (`spgnn.options.merged`)."""
    return plugins.merged(TASKS, "--task")


def declaring(name: str) -> list[str]:
    """The tasks that declare option `name`."""
    return plugins.declaring(TASKS, name)


def load_entry_points() -> None:
    """Register the tasks other packages publish under ``spgnn.tasks``."""
    plugins.load_entry_points(ENTRY_POINT_GROUP, TASKS, register_task, "task")
