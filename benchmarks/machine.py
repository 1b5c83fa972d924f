"""What a benchmark's JSON records about where it ran: versions, CPU, threads, the commit, the load."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

from spgnn import __version__
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


def arguments(doc: str, out: str, data: bool = False) -> argparse.ArgumentParser:
    """A benchmark's parser: described by the first paragraph of `doc`, defaults shown in --help, with --out (the
    JSON, default `out`; the PNG goes next to it) and, with `data`, --data-dir (`data_option`)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default=out, help="JSON output (the PNG goes next to it)")
    if data:
        data_option(ap)
    return ap


def data_option(parser: argparse.ArgumentParser) -> None:
    """--data-dir: the folder holding the named datasets (amazon-computers, ...), one option for every benchmark."""
    parser.add_argument("--data-dir", default=None, help="folder holding the named datasets (default: "
                        "$SPGNN_DATA_DIR, then spgnn's search)")
