"""The registry of distributed SpMM algorithms, by the name ``--algo`` takes.

An algorithm is a `spgnn.spmm.DistSpMM` subclass registered with the ``@register`` decorator, or published by
another package under the entry-point group ``spgnn.algorithms`` (``name = module:Class``; every such entry
point is loaded when ``spgnn.spmm`` is imported, so that its options reach `TrainConfig` and the command line).
It declares its `Option`s (each a ``spgnn train --flag`` and a TrainConfig field) and, for ``--algo auto``, the
option values it can run with on P processes (`candidates`).
"""

from __future__ import annotations

import warnings
from importlib import metadata

from ..errors import SpgnnError
from ..options import Option  # noqa: F401  (algorithms declare theirs with it)

ALGORITHMS: dict = {}
ENTRY_POINT_GROUP = "spgnn.algorithms"


def register(cls):
    """Class decorator: register algorithm `cls` under ``cls.name``."""
    if not cls.name:
        raise SpgnnError(f"algorithm {cls.__qualname__} has no name: set the class attribute `name`")
    ALGORITHMS[cls.name] = cls
    return cls


def get(name: str):
    """The algorithm class registered as `name`."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise SpgnnError(f"unknown algorithm {name!r}: choose one of {', '.join(ALGORITHMS)}") from None


def attention_algorithms() -> list[str]:
    """The algorithms that run attention (GAT)."""
    return [name for name, cls in ALGORITHMS.items() if cls.attention]


def options() -> dict[str, Option]:
    """Every registered algorithm's options by name, in registration order. Algorithms may share an option
    (a subclass inherits its parent's); declarations of one name must agree on type and default."""
    out = {}
    for cls in ALGORITHMS.values():
        for o in cls.options:
            first = out.setdefault(o.name, o)
            if (first.type, first.default) != (o.type, o.default):
                raise SpgnnError(f"option {o.flag} of --algo {cls.name} disagrees with another algorithm's: "
                                 f"{o.type.__name__} = {o.default!r} against {first.type.__name__} = {first.default!r}")
    return out


def declaring(name: str) -> list[str]:
    """The algorithms that declare option `name`."""
    return [a for a, cls in ALGORITHMS.items() if any(o.name == name for o in cls.options)]


def load_entry_points() -> None:
    """Register the algorithms other packages publish under ``spgnn.algorithms`` (a broken one is skipped
    with a warning that names it, so that it cannot stop the built-in ones)."""
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in ALGORITHMS:
            continue
        try:
            cls = ep.load()
            if getattr(cls, "name", None) != ep.name:
                raise SpgnnError(f"it loads {cls!r}, whose name is not {ep.name!r}")
            register(cls)
        except Exception as e:  # a third-party plugin: say which and carry on
            warnings.warn(f"spgnn: algorithm {ep.name!r} (entry point {ep.value}) was not loaded: "
                          f"{type(e).__name__}: {e}", stacklevel=2)
