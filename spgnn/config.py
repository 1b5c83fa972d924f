"""`TrainConfig`: everything that defines a training run (the ``spgnn train`` options), and its validation.

Its fields are the ones below plus the `spgnn.Option`s of every registered algorithm (``--replication`` of 1.5d,
``--grid`` of 2d and 3d, ``--prefetch`` of sar, and those of plugins), every registered layer (``--heads`` of
GAT, ``--steps`` and ``--alpha`` of APPNP, …) and every registered task (``--decoder`` of link, …). Those are
read from the registries when a config is made or read,
not when this module is imported, so a plug-in registered later (by ``@register`` in a user's script) brings its
options all the same: ``TrainConfig(algo="mine", my_option=3).my_option``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import options as plugins
from . import spmm, tasks
from .comm.launch import TRANSPORTS, check_device
from .errors import SpgnnError
from .layers import registry as layers
from .layers.init import SCHEMES
from .partition.order import ORDERS
from .tasks import TASKS

FIELDS = [          # (name, type, default), in the order of ``spgnn train --help``
    ("dataset", str, "cora"),
    ("data_dir", str | None, None),
    ("cache_dir", str | None, None),
    ("task", str, "auto"),
    ("model", str, "gcn"),
    ("algo", str, "1d-halo"),
    ("partition", str, "block"),
    ("node_order", str, "rcm"),
    ("layers", int, 2),
    ("hidden", int, 16),
    ("dropout", float, 0.5),
    ("lr", float, 0.01),
    ("weight_decay", float, 5e-4),
    ("epochs", int, 200),
    ("seed", int, 0),
    ("batch_norm", bool, False),
    ("init", str, "auto"),
    ("device", str, "cpu"),
    ("feature_norm", str, "row"),
    ("precompute", str, "on"),
    ("eval_every", int, 1),
    ("timeout", float, 300.0),
    ("transport", str, "auto"),
    ("calibration", str | None, None),
    ("memory_per_rank", str | None, None),
    ("output", str | None, None),
    ("checkpoint", str | None, None),
    ("checkpoint_every", int, 10),
    ("resume", str | None, None),
]

FLOAT32_MAX = 3.4028234663852886e38     # a step size or decay above it overflows the float32 update
LR_MAX = FLOAT32_MAX * (1 - 0.9)        # Adam's first step, lr / (1 − β₁) with β₁ = 0.9, is a float32 too
MAX_TIMEOUT_S = 30 * 24 * 3600.0        # 30 days: torch's rendezvous deadline overflows far beyond it


def timeout_fits(seconds) -> bool:
    """Whether `seconds` is a collective's timeout: a number in [1, `MAX_TIMEOUT_S`]."""
    return not isinstance(seconds, bool) and isinstance(seconds, int | float) and 1 <= seconds <= MAX_TIMEOUT_S


def timeout_rule(name: str, seconds) -> str:
    """The refusal of timeout `seconds` given as `name`."""
    return (f"{name} must be a number of seconds of at least 1 and at most {MAX_TIMEOUT_S:.0f} (how long a rank waits "
            f"for the others before the job ends), got {seconds!r}")


def plugin_options() -> dict:
    """Every registered algorithm's, layer's and task's `Option` by name."""
    return spmm.options() | layers.options() | tasks.options()


class _Config:
    """The methods of `TrainConfig` (a dataclass of `FIELDS` and `options`, made below)."""

    def __init__(self, **values):
        for name, _, default in FIELDS:
            object.__setattr__(self, name, values.pop(name, default))
        options = dict(values.pop("options", None) or {})
        if values:
            plugin = plugin_options()
            unknown = [k for k in values if k not in plugin]
            if unknown:
                raise SpgnnError(f"unknown option {unknown[0]!r}: TrainConfig takes {', '.join(FIELD_NAMES)} and the "
                                 f"options of registered algorithms and layers ({', '.join(plugin)})")
            options |= values
        object.__setattr__(self, "options", options)

    def __getattr__(self, name):
        if name.startswith("__") or name == "options":
            raise AttributeError(name)
        option = plugin_options().get(name)
        if option is None:
            raise AttributeError(f"TrainConfig has no option {name!r}")
        return self.options.get(name, option.default)

    def __setattr__(self, name, value):
        if name in FIELD_NAMES:
            object.__setattr__(self, name, value)
        elif name in plugin_options():
            self.options[name] = value
        else:
            raise AttributeError(f"TrainConfig has no option {name!r}")

    def __eq__(self, other):
        return isinstance(other, TrainConfig) and self.as_dict() == other.as_dict()

    def __repr__(self):
        return "TrainConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def __reduce__(self):
        return (_rebuild, (self.as_dict(),))

    def as_dict(self) -> dict:
        """Every field and every registered plug-in option, flat (as the report and checkpoints keep them)."""
        out = {name: getattr(self, name) for name in FIELD_NAMES}
        return out | {name: getattr(self, name) for name in plugin_options()} | self.options

    def validate(self) -> TrainConfig:
        """Raise SpgnnError for option values no run can use (before any process starts); returns self."""
        return validate(self)


def _rebuild(values: dict) -> TrainConfig:
    fixed = {k: v for k, v in values.items() if k in FIELD_NAMES}
    return TrainConfig(**fixed, options={k: v for k, v in values.items() if k not in FIELD_NAMES})


FIELD_NAMES = tuple(name for name, _, _ in FIELDS)
CLI_ONLY = ("nprocs", "sampler", "batch_size", "bulk", "split_graph", "replicate_graph", "quiet", "allow_overlap",
            "given_dataset", "help")                    # spgnn train's flags that are no TrainConfig field
plugins.RESERVED.update(FIELD_NAMES, CLI_ONLY, ("options",),
                        (n for n in vars(_Config) if not n.startswith("_")))      # and its methods: cfg.validate
TrainConfig = dataclass(init=False, eq=False, repr=False)(type("TrainConfig", (_Config,), {
    "__annotations__": {name: kind for name, kind, _ in FIELDS} | {"options": dict},
    **{name: default for name, _, default in FIELDS}, "options": field(default_factory=dict),
    "__doc__": "Everything that defines a training run: the ``spgnn train`` options, every registered algorithm's "
               "and layer's included (`spgnn.Option`s: kept in `options`, read and set as attributes)."}))
TrainConfig.__module__ = __name__        # pickled by reference (to spawned ranks) from here


def validate(self):
    """Raise SpgnnError for option values no run can use (before any process starts); returns self."""
    model = layers.get_layer(self.model)
    checks = [
        (self.layers >= 1, f"--layers must be at least 1, got {self.layers}"),
        (self.hidden >= 1, f"--hidden must be at least 1, got {self.hidden}"),
        (0.0 <= self.dropout < 1.0, f"--dropout must lie in [0, 1), got {self.dropout}"),
        (0 < self.lr < LR_MAX, f"--lr must be a positive number (below 3.4e37: Adam's first step, 10·lr, is a "
         f"float32), got {self.lr}"),
        (0 <= self.weight_decay < FLOAT32_MAX, f"--weight-decay must be a non-negative number (below float32's "
         f"3.4e38), got {self.weight_decay}"),
        (0 <= self.seed < 2**63, f"--seed must lie in [0, 2^63), got {self.seed}"),
        (self.epochs >= 0, f"--epochs must be non-negative, got {self.epochs}"),
        (self.eval_every >= 0, f"--eval-every must be non-negative, got {self.eval_every}"),
        (self.init in ("auto", *SCHEMES), f"--init must be auto, {' or '.join(SCHEMES)}, got {self.init!r}"),
        (self.feature_norm in ("row", "none"), f"--feature-norm must be row or none, got {self.feature_norm!r}"),
        (self.precompute in ("on", "off"), f"--precompute must be on or off, got {self.precompute!r}"),
        (self.node_order in ORDERS, f"--node-order must be {' or '.join(ORDERS)}, got {self.node_order!r}"),
        (timeout_fits(self.timeout), timeout_rule("--timeout", self.timeout)),
        (self.checkpoint_every >= 1, f"--checkpoint-every must be at least 1, got {self.checkpoint_every}"),
        (self.task in ("auto", *TASKS), f"--task must be auto or {', '.join(TASKS)}, got {self.task!r}"),
        (self.transport in TRANSPORTS, f"--transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}"),
    ]
    for ok, message in checks:
        if not ok:
            raise SpgnnError(message)
    check_device(self.device)
    from .cost import memory_limit  # (here: cost imports this module, through spgnn.comm)

    memory_limit(self.memory_per_rank)      # a size with its unit: before the graph is read and partitioned
    for option in spmm.options().values():
        option.check(getattr(self, option.name))
    for option in model.options:
        option.check(getattr(self, option.name))
    stray = [o for name, o in layers.options().items() if name not in {x.name for x in model.options}
             and name not in spmm.options() and getattr(self, name) != o.default]
    if stray:
        raise SpgnnError(f"{stray[0].flag} applies to --model {' and '.join(layers.declaring(stray[0].name))}, not "
                         f"{self.model}")
    task = tasks.TASKS.get(self.task)
    for option in tasks.options().values():
        value = getattr(self, option.name)
        if value != option.default and (task is None or option not in task.options):
            takes = " and ".join(tasks.declaring(option.name))
            raise SpgnnError(f"{option.flag} applies to --task {takes}, not {self.task}" + (
                f" (the task the data describe, not {takes}: give --task {takes}, or drop {option.flag})"
                if self.task == "auto" else ""))
        option.check(value)
    shaped = [o.flag for o in spmm.options().values() if o.is_set(getattr(self, o.name))       # what auto picks,
              and (o.shapes or set(spmm.declaring(o.name)) != set(spmm.ALGORITHMS))]         # or not all take
    if self.algo == "auto" and shaped:
        raise SpgnnError(f"{' and '.join(shaped)} with --algo auto: auto chooses the algorithm and its grid; name an "
                         f"--algo to fix {'them' if len(shaped) > 1 else 'it'}, or drop {' and '.join(shaped)}")
    if self.algo != "auto":
        cls = spmm.get(self.algo)
        cls.check_values({o.name: getattr(self, o.name) for o in cls.options})
        needs = sorted(model.needs) + (["whole_rows"] if self.batch_norm else [])
        for need in needs:
            cls.require(need, "--batch-norm" if need == "whole_rows" and self.batch_norm and
                        "whole_rows" not in model.needs else f"--model {self.model}")
    if self.batch_norm and self.layers == 1:    # a one-layer model may have no hidden layer (gcnii's has two)
        from .layers.stack import config_model

        with torch.random.fork_rng(devices=[]):
            config_model(self, 8, 8)                # SpgnnError where no batch norm would follow any layer
    if task is not None:
        task.check_options(self)        # options the task cannot train with together
    return self
