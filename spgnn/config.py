"""`TrainConfig`: everything that defines a training run (the ``spgnn train`` options), and its validation.

Its fields are the ones below plus every registered algorithm's `spgnn.spmm.Option` (``--replication`` of
1.5d, ``--grid`` of 2d and 3d, ``--prefetch`` of sar, and those of plugins), so that an algorithm brings its
own options to the config, the command line and ``--algo auto``.
"""

from __future__ import annotations

from dataclasses import make_dataclass

from . import spmm
from .comm.launch import TRANSPORTS
from .errors import SpgnnError
from .layers import LAYERS
from .layers.init import SCHEMES

FIELDS = [          # (name, type, default), in the order of ``spgnn train --help``
    ("dataset", str, "cora"),
    ("data_dir", str | None, None),
    ("cache_dir", str | None, None),
    ("model", str, "gcn"),
    ("algo", str, "1d-halo"),
    ("partition", str, "block"),
    ("layers", int, 2),
    ("hidden", int, 16),
    ("dropout", float, 0.5),
    ("lr", float, 0.01),
    ("weight_decay", float, 5e-4),
    ("epochs", int, 200),
    ("seed", int, 0),
    ("heads", int, 8),
    ("out_heads", int, 1),
    ("batch_norm", bool, False),
    ("init", str, "auto"),
    ("device", str, "cpu"),
    ("feature_norm", str, "row"),
    ("eval_every", int, 1),
    ("timeout", float, 300.0),
    ("transport", str, "auto"),
    ("calibration", str | None, None),
    ("output", str | None, None),
    ("checkpoint", str | None, None),
    ("checkpoint_every", int, 10),
    ("resume", str | None, None),
]


def validate(self):
    """Raise SpgnnError for option values no run can use (before any process starts); returns self."""
    checks = [
        (self.model in LAYERS, f"--model must be one of {', '.join(LAYERS)}, got {self.model!r}"),
        (self.layers >= 1, f"--layers must be at least 1, got {self.layers}"),
        (min(self.heads, self.out_heads) >= 1, f"--heads and --out-heads must be at least 1, got "
                                               f"{self.heads} and {self.out_heads}"),
        (self.hidden >= 1, f"--hidden must be at least 1, got {self.hidden}"),
        (0.0 <= self.dropout < 1.0, f"--dropout must lie in [0, 1), got {self.dropout}"),
        (self.lr > 0, f"--lr must be positive, got {self.lr}"),
        (self.weight_decay >= 0, f"--weight-decay must be non-negative, got {self.weight_decay}"),
        (self.epochs >= 0, f"--epochs must be non-negative, got {self.epochs}"),
        (self.eval_every >= 0, f"--eval-every must be non-negative, got {self.eval_every}"),
        (self.init in ("auto", *SCHEMES), f"--init must be auto, {' or '.join(SCHEMES)}, got {self.init!r}"),
        (self.feature_norm in ("row", "none"), f"--feature-norm must be row or none, got {self.feature_norm!r}"),
        (self.timeout > 0, f"--timeout must be positive, got {self.timeout}"),
        (self.checkpoint_every >= 1, f"--checkpoint-every must be at least 1, got {self.checkpoint_every}"),
        (self.device == "cpu" or self.device.startswith("cuda"),
         f"--device must be cpu or cuda[:N], got {self.device!r}"),
        (self.transport in TRANSPORTS, f"--transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}"),
    ]
    for ok, message in checks:
        if not ok:
            raise SpgnnError(message)
    for option in spmm.options().values():
        option.check(getattr(self, option.name))
    if self.algo != "auto" and self.batch_norm and not spmm.get(self.algo).whole_rows:
        raise SpgnnError(f"--batch-norm needs whole rows, which --algo {self.algo} splits by columns: use another "
                         "--algo")
    if self.model == "gat" and self.algo not in spmm.attention_algorithms():
        raise SpgnnError(f"--model gat needs attention, which --algo {self.algo} does not support: use "
                         f"--algo {' or '.join(spmm.attention_algorithms())}")
    return self


def _fields() -> list[tuple]:
    """The fields above, then each algorithm option's (name, type, default)."""
    return FIELDS + [(o.name, o.type if o.default is not None else o.type | None, o.default)
                     for o in spmm.options().values()]


TrainConfig = make_dataclass("TrainConfig", _fields(), namespace={
    "validate": validate,
    "__doc__": "Everything that defines a training run: the ``spgnn train`` options, every registered algorithm's "
               "included (`spgnn.spmm.Option`)."})
TrainConfig.__module__ = __name__        # pickled by reference (to spawned ranks) from here
