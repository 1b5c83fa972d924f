"""What the registries of plug-ins (algorithms, layers, tasks) share: `Option`, a setting a plug-in brings to
`TrainConfig` and the command line; admitting a class to a registry (`admit`); the options of a registry
(`merged`, `declaring`); and loading the plug-ins other packages publish under an entry-point group
(`load_entry_points`)."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from .errors import SpgnnError


@dataclass(frozen=True)
class Option:
    """An option of an algorithm or a layer: the TrainConfig field `name` and the flag ``--name`` (underscores as
    dashes), parsed by `type`, `default` when not given. `shapes`: it chooses the grid shape (`DistSpMM.grid_shape`
    receives it), else the constructor receives it. `valid(value)` says whether a value is usable, `must`
    what usable means (for the error); values in `inert` mean "off" and are accepted by every algorithm."""

    name: str
    type: type
    default: object
    help: str
    shapes: bool = False
    valid: Callable = lambda value: True
    must: str = ""
    inert: tuple = ()

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise SpgnnError(f"option {self.name!r}: a name is a Python identifier (a TrainConfig field; --my-depth is "
                             "the flag of my_depth)")
        if self.type is bool:
            raise SpgnnError(f"option {self.name!r}: type bool would read --{self.name.replace('_', '-')} False as "
                             "true; take str with the values 'on' and 'off', as spgnn's own switches do")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def is_set(self, value) -> bool:
        """Whether `value` asks for something: neither the default nor an inert ("off") value."""
        return value != self.default and value not in self.inert

    def check(self, value) -> None:
        """SpgnnError naming the flag when `value` is not usable."""
        if value != self.default and not self.valid(value):
            raise SpgnnError(f"{self.flag} must be {self.must}, got {value!r}")


RESERVED: set = set()       # the names TrainConfig and spgnn train hold themselves (`spgnn.config` adds them)
REGISTRIES: list = []       # every registry of plug-ins: their options share TrainConfig and the command line


def is_int(v) -> bool:
    """Whether v is an integer (Python's, numpy's: a `numbers.Integral`), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def defined_at(obj) -> tuple[str, str]:
    """(module, qualified name) of a class or function: where it was defined, which tells the same definition run
    again (a notebook cell run twice: a new object) from another of the same name."""
    return getattr(obj, "__module__", "?") or "?", getattr(obj, "__qualname__", repr(obj))


def admit(registry: dict, cls, what: str, flag: str, base: type) -> None:
    """SpgnnError unless plug-in class `cls` may join `registry` under ``cls.name``: it is a subclass of `base` (as
    a decorator of a class: an instance, or another class, failed at its first use), it has a name, no class defined
    elsewhere holds that name (the same definition run again, a notebook cell, replaces it), its options are a
    tuple of `Option`s whose names are not spgnn's own (`RESERVED`) nor another kind of plug-in's, and they agree
    with those of its kind (`merged`); so that a clash is reported where the plug-in is registered, not when a
    command line is parsed (or never). `what` names the kind ("layer")."""
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise SpgnnError(f"{what} {cls!r} is not a subclass of spgnn.{base.__name__}: register a subclass of it, "
                         "with the decorator above its class statement")
    if not cls.name:
        raise SpgnnError(f"{what} {cls.__qualname__} has no name: set the class attribute `name`")
    held = registry.get(cls.name)
    held = held if held is None or isinstance(held, type) else type(held)     # a registry of instances (tasks)
    if held is not None and defined_at(held) != defined_at(cls):
        raise SpgnnError(f"{what} {cls.name!r} is registered already (by {'.'.join(defined_at(held))}): choose "
                         "another name")
    options = cls.options
    if not isinstance(options, (tuple, list)) or not all(isinstance(o, Option) for o in options):
        raise SpgnnError(f"{what} {cls.name!r}: `options` must be a tuple of spgnn.Option, got {options!r}")
    theirs = {o.name for r in REGISTRIES if r is not registry for c in r.values() for o in c.options}
    for o in options:
        if o.name in RESERVED or o.name in theirs:
            whose = "spgnn" if o.name in RESERVED else "another kind of plug-in"
            raise SpgnnError(f"option {o.flag} of {flag} {cls.name} is {whose}'s own: choose another name")
    merged({**registry, cls.name: cls}, flag)


def merged(registry: dict, flag: str) -> dict[str, Option]:
    """Every option the classes of `registry` declare, by name, in registration order. Classes may share an option
    (a subclass inherits its parent's); declarations of one name must agree on type and default (`flag`: the
    command-line flag naming a class, for the error)."""
    out = {}
    for cls in registry.values():
        for o in cls.options:
            first = out.setdefault(o.name, o)
            if (first.type, first.default) != (o.type, o.default):
                raise SpgnnError(f"option {o.flag} of {flag} {cls.name} disagrees with another's: "
                                 f"{o.type.__name__} = {o.default!r} against {first.type.__name__} = {first.default!r}")
    return out


def declaring(registry: dict, name: str) -> list[str]:
    """The names of the classes of `registry` that declare option `name`."""
    return [k for k, cls in registry.items() if any(o.name == name for o in cls.options)]


def load_entry_points(group: str, registry: dict, register, what: str) -> None:
    """Register with `register` the classes other packages publish under the entry-point `group` (``name =
    module:Class``, the class's `name` equal to the entry's); a broken one, or one under a name of spgnn's own
    (``sar``, say), is skipped with a warning that names it, so that it cannot stop the built-in ones."""
    for ep in metadata.entry_points(group=group):
        if ep.name in registry:         # loaded before (or imported, registering itself), or spgnn's own name
            held = registry[ep.name] if isinstance(registry[ep.name], type) else type(registry[ep.name])
            if held.__module__.split(".")[0] == "spgnn" and not ep.value.startswith("spgnn"):
                warnings.warn(f"spgnn: {what} {ep.name!r} (entry point {ep.value}) was not loaded: the name is "
                              f"spgnn's own ({held.__module__}.{held.__qualname__})", stacklevel=3)
            continue
        try:
            cls = ep.load()
            if getattr(cls, "name", None) != ep.name:
                raise SpgnnError(f"it loads {cls!r}, whose name is not {ep.name!r}")
            register(cls)
        except Exception as e:  # a third-party plugin: say which and carry on
            warnings.warn(f"spgnn: {what} {ep.name!r} (entry point {ep.value}) was not loaded: "
                          f"{type(e).__name__}: {e}", stacklevel=3)
