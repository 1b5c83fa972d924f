"""What a benchmark's JSON records about where it ran: versions, CPU, threads, the commit, the load."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

from spgnn import __version__
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import check_dataset
from spgnn.sparse import kernels


def facts() -> dict:
    """The machine and software of this run (a package that is not installed is None)."""
    def installed(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    cpuinfo = Path("/proc/cpuinfo")
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if cpuinfo.exists() else ""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "numpy": np.__version__, "scipy": installed("scipy"),
            "torch_geometric": installed("torch-geometric"), "matplotlib": installed("matplotlib"),
            "spgnn": __version__, "spmm_backend": kernels.get_backend(), "git_commit": commit,
            "load_average": os.getloadavg()}


def save_figure(fig, path) -> None:
    """Lay `fig` out, write it to `path` (PNG, 120 dpi) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_after(script: str, path, draw, *args) -> None:
    """`draw(*args, path)`, called once the report is written, and "wrote PATH" on stderr: a plot that fails (no
    matplotlib, a full disk) is one warning line instead, not a lost run."""
    try:
        draw(*args, path)
    except Exception as e:
        print(f"{script}: warning: no plot at {path} ({type(e).__name__}: {e})", file=sys.stderr)
    else:
        print(f"wrote {path}", file=sys.stderr)


def arguments(doc: str, out: str, data: bool = False, png: bool = True) -> argparse.ArgumentParser:
    """A benchmark's parser: described by the first paragraph of `doc`, defaults shown in --help, with --out (the
    JSON, default `out`; with `png`, the PNG goes next to it) and, with `data`, --data-dir (`data_option`)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    if png:
        ap.add_argument("--out", default=out, type=output, help="JSON output (the PNG goes next to it)")
    else:
        ap.add_argument("--out", default=out, type=writable, help="JSON output")
    if data:
        data_option(ap)
    return ap


def data_option(parser: argparse.ArgumentParser) -> None:
    """--data-dir: the folder holding the named datasets (amazon-computers, ...), one option for every benchmark."""
    parser.add_argument("--data-dir", default=None, help="folder holding the named datasets (default: "
                        "$SPGNN_DATA_DIR, then spgnn's search)")


# ------------------------------------------------------------------------------ checks before any work
# Bad input is refused in one line ("usage: ... error: ...") by argparse, before anything is measured.


def check_config(ap: argparse.ArgumentParser, **fields) -> None:
    """`ap.error` unless the `TrainConfig` fields a benchmark passes on (--hidden, --dropout, --lr, ...) make a
    config `spgnn train` would run: its validation's one line, before any work (a bad --hidden failed in the
    training runs, after the measurements before them)."""
    from spgnn.config import TrainConfig
    from spgnn.errors import SpgnnError

    try:
        TrainConfig(**fields).validate()
    except (SpgnnError, TypeError, ValueError) as e:
        ap.error(str(e))


def at_least(lo, kind=int, above: bool = False):
    """An argparse type: a `kind` number >= `lo` (> `lo` with `above`)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") \
                from None
        if not (value > lo if above else value >= lo):          # NaN fails too
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {lo}, got {text}")
        return value
    return parse


def ints(lo: int):
    """An argparse type: comma-separated integers, each >= `lo`, as a list."""
    one = at_least(lo)
    return lambda text: [one(item) for item in text.split(",")]


def names(choices, what: str):
    """An argparse type: comma-separated names, each one of `choices` (`what`: "an algorithm"), as a list."""
    def parse(text: str):
        for name in text.split(","):
            if name not in choices:
                raise argparse.ArgumentTypeError(f"{name!r} is not {what}: choose from {', '.join(choices)}")
        return text.split(",")
    return parse


def output(path: str) -> str:
    """An argparse type for --out: `path`, once its folder is made and a file can be written there and at the PNG
    beside it (a run must not lose what it measured to an unwritable path at the end); not a .png itself, which
    the plot beside it would overwrite."""
    if Path(path).suffix.lower() == ".png":
        raise argparse.ArgumentTypeError(f"{path} names the plot written beside the JSON report (--out REPORT.json "
                                         "writes REPORT.png too): give the report's path")
    return writable(path, Path(path).with_suffix(".png"))


def writable(path: str, *beside: Path) -> str:
    """An argparse type for an output file: `path`, once its folder is made and a file can be written there (and at
    the paths `beside` it)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot make the folder of {path}: {e.strerror}") from None
    for f in (p, *beside) if p.name else (p,):
        if f.is_dir():
            raise argparse.ArgumentTypeError(f"cannot write {f}: a folder")
        if f.exists() and not f.is_file():      # /dev/null, a pipe: written to, never probed (a pipe would block)
            continue
        try:                                    # tried, not os.access: root passes that even where nothing can be made
            existed = f.exists()
            with open(f, "a"):                  # appends nothing: a file already there is kept as it is
                pass
            if not existed:
                f.unlink()
        except OSError as e:
            raise argparse.ArgumentTypeError(f"cannot write {f}: {e.strerror or e}") from None
    return path


def check_datasets(ap: argparse.ArgumentParser, specs: list[str], data_dir=None) -> list[str]:
    """`specs`, each checked as `load_dataset` would check it before reading (`spgnn.graph.datasets.check_dataset`:
    nothing read or generated); `ap.error` at the first bad one, or at none given."""
    if not specs:
        ap.error("no dataset given")
    for spec in specs:
        try:
            check_dataset(spec, data_dir)
        except SpgnnError as e:
            ap.error(str(e))
    return specs
