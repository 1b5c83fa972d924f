"""A package as pip would have installed it (a module and its dist-info), for the tests of entry-point plug-ins."""

from pathlib import Path


def installed(root: Path, module: str, source: str, group: str, entries: str) -> Path:
    """`module`.py holding `source` in folder `root`, with a dist-info publishing `entries` ("name = module:attr"
    lines) under the entry-point group `group`; returns `root`, to put on the path."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entries}\n")
    return root
