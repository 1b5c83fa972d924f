"""Training: the run loop both kinds share (`loop`), full-batch training on a process grid (`fullbatch`),
sampled minibatch training (`minibatch`), checkpoints (`checkpoint`) and Adam (`optim`)."""

from .fullbatch import Trainer
from .minibatch import MinibatchTrainer

__all__ = ["MinibatchTrainer", "Trainer"]
