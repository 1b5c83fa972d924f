"""Tasks (`registry`: `Task`, `register_task`, entry-point group ``spgnn.tasks``): node tasks (`node`) and link
prediction (`link`)."""

from . import link, node  # noqa: F401  (built-ins register themselves as they are imported)
from .registry import SPLITS, TASKS, Task, declaring, get_task, options, register_task, resolve

__all__ = ["SPLITS", "TASKS", "Task", "declaring", "get_task", "options", "register_task", "resolve"]
