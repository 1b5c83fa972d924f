"""Charts of run reports (``spgnn train --output``) and of partition comparisons (``spgnn partition --compare``).

`report_figure` draws, for one or more reports, each labelled by algorithm, partition and P:

* loss per epoch, overlaid;
* validation (dashed) and test (solid) accuracy per evaluated epoch, overlaid;
* bytes each rank sent, by phase and layer (stacked; "forward L0" is layer 0's forward products);
* each rank's bytes sent, measured beside the cost model's prediction (where the report has one);
* each rank's peak RSS beside the bytes of the graph it holds;
* the median epoch time per run.

`partition_figure` draws one bar chart per metric of ``spgnn partition --compare``. Both need matplotlib
(``pip install 'spgnn[plot]'``) and return the figure, whose axes carry exactly the numbers given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .errors import SpgnnError

MiB = 2**20
MARKERS = "osv^dxP*"
PARTITION_METRICS = {    # key: axis title
    "edge_cut_fraction": "edge cut (fraction of edges)", "comm_volume": "1d-halo volume (rows per SpMM)",
    "comm_volume_max_recv": "max rows a part receives", "replication_factor": "replication factor",
    "vertex_imbalance": "vertex imbalance", "nnz_imbalance": "nnz imbalance", "seconds": "partitioning time (s)",
}


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or SpgnnError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise SpgnnError("plots need matplotlib, which is not installed: pip install 'spgnn[plot]' "
                         "(or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


NUMBER, COUNT = (float, int, type(None)), (float, int)     # null: a NaN, which a report writes as null
TYPE_NAMES = {float: "a number", int: "an integer", str: "a string"}     # a schema's tuple by its first named
PER_RANK = {"rank": int, "sent_bytes": COUNT}
REPORT = {      # what `report_figure` reads; "key?" may be absent or null
    "config": {"algo": str, "partition": str}, "world_size": int, "task?": {"metric": str, "label": str},
    "epochs": [{"epoch": int, "loss": NUMBER}], "median_epoch_s?": NUMBER,
    "comm": {"per_rank": [PER_RANK | {"table?": [{"phase": str, "layer": (int, type(None)), "sent_bytes": COUNT}]}]},
    "memory": {"per_rank": [{"rank": int, "peak_rss_bytes": COUNT, "graph_bytes?": NUMBER}]},
    "predicted?": {"per_rank": [PER_RANK]}}


def mismatch(value, schema, where: str = "the report") -> str | None:
    """Where `value` (parsed JSON) departs from `schema` (`REPORT`'s form: a dict of keys, a list of one item's
    schema, or the types allowed), said in words; None where it does not."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return f"{where} is {json.dumps(value)[:40]}, not an object"
        for key, item in schema.items():
            name = key.rstrip("?")
            if key.endswith("?") and value.get(name) is None:
                continue
            if name not in value:
                return f"{where} lacks {name!r}"
            if found := mismatch(value[name], item, f"{where}.{name}" if where != "the report" else name):
                return found
        return None
    if isinstance(schema, list):
        if not isinstance(value, list):
            return f"{where} is {json.dumps(value)[:40]}, not a list"
        return next(filter(None, (mismatch(v, schema[0], f"{where}[{i}]") for i, v in enumerate(value))), None)
    if not isinstance(value, schema) or isinstance(value, bool):
        kinds = schema if isinstance(schema, tuple) else (schema,)
        return f"{where} is {json.dumps(value)[:40]}, not {TYPE_NAMES[next(t for t in kinds if t in TYPE_NAMES)]}"
    return None


def read_reports(paths: list[str]) -> list[dict]:
    """The JSON reports at `paths`; SpgnnError naming a file that is missing or is no spgnn train report, and
    what in it is not (each checked against `REPORT` before any is drawn)."""
    reports = []
    for p in paths:
        try:
            r = json.loads(Path(p).read_text())
        except (OSError, ValueError) as e:
            raise SpgnnError(f"cannot read report {p}: {e}") from None
        if isinstance(r, dict) and "rows" in r:
            raise SpgnnError(f"{p} is a table of spgnn cost or spgnn partition --json, not a report of spgnn train "
                             "--output (which spgnn plot draws)")
        if found := mismatch(r, REPORT):
            raise SpgnnError(f"{p} is not a report of spgnn train --output: {found}")
        reports.append(r)
    return reports


def label(report: dict) -> str:
    """"1d-halo · block · P=4"; a sampled run "minibatch sage · P=4" (its sampler, and no partition: it reads none)."""
    cfg = report["config"]
    how = f"minibatch {cfg['sampler']}" if cfg.get("sampler") else f"{cfg['algo']} · {cfg['partition']}"
    return f"{how} · P={report['world_size']}"


def labels(reports: list[dict]) -> list[str]:
    """"k: `label`" for the k-th report (the bar charts name its ranks "k·r0", "k·r1", …)."""
    return [f"{i + 1}: {label(r)}" for i, r in enumerate(reports)]


def phase_bytes(report: dict) -> list[dict[str, int]]:
    """Per rank: {"forward L0": bytes sent, "optimizer": ..., ...}, phase and layer from the ledger."""
    out = []
    for rank in report["comm"]["per_rank"]:
        rows: dict[str, int] = {}
        for row in rank.get("table") or []:
            key = row["phase"] + ("" if row["layer"] is None else f" L{row['layer']}")
            rows[key] = rows.get(key, 0) + row["sent_bytes"]
        out.append(rows)
    return out


def report_figure(reports: list[dict]):
    """The figure of `reports` (see the module docstring)."""
    plt = pyplot()
    names = labels(reports)
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    ax = axes[0, 0]
    for i, (name, r) in enumerate(zip(names, reports)):      # a marker per run: equal curves stay visible
        ax.plot([e["epoch"] for e in r["epochs"]], [e["loss"] for e in r["epochs"]], label=name,
                **markers(i, len(r["epochs"])))
    ax.set(title="training loss", xlabel="epoch", ylabel="loss")
    ax.legend(fontsize=7)

    ax = axes[0, 1]
    tasks = [r.get("task") or {"metric": "acc", "label": "accuracy"} for r in reports]     # reports before tasks: acc
    for i, (name, r, task) in enumerate(zip(names, reports, tasks)):
        m = task["metric"]
        evaluated = [e for e in r["epochs"] if f"test_{m}" in e]
        style = dict(color=f"C{i}") | markers(i, len(evaluated))
        ax.plot([e["epoch"] for e in evaluated], [e[f"test_{m}"] for e in evaluated], label=f"{name} test", **style)
        ax.plot([e["epoch"] for e in evaluated], [e[f"val_{m}"] for e in evaluated], ls="--", label=f"{name} val",
                **style)
    label = " / ".join(dict.fromkeys(t["label"] for t in tasks))
    ax.set(title=label, xlabel="epoch", ylabel=label)
    ax.legend(fontsize=7)

    ax = axes[0, 2]
    per_rank = [(name, rank, rows) for name, r in zip(names, reports) for rank, rows in enumerate(phase_bytes(r))]
    keys = sorted({k for _, _, rows in per_rank for k in rows})
    bottom = np.zeros(len(per_rank))
    for j, k in enumerate(keys):
        mib = np.array([rows.get(k, 0) for _, _, rows in per_rank]) / MiB
        ax.bar(range(len(per_rank)), mib, bottom=bottom, label=k, color=plt.get_cmap("tab20")(j % 20))
        bottom += mib
    set_ticks(ax, [tick(name, rank) for name, rank, _ in per_rank])
    ax.set(title="bytes sent by phase and layer", ylabel="MiB")
    if keys:                                   # (a report of no rank, or of nothing sent: no legend to draw)
        ax.legend(fontsize=6, ncol=2)

    pred = [{p["rank"]: p["sent_bytes"] for p in (r.get("predicted") or {}).get("per_rank", [])} for r in reports]
    sent = [(name, m["rank"], m["sent_bytes"], pr.get(m["rank"], np.nan))
            for name, r, pr in zip(names, reports, pred) for m in r["comm"]["per_rank"]]
    pairs(axes[1, 0], [tick(n, k) for n, k, _, _ in sent], {"measured": [s[2] / MiB for s in sent],
          "predicted": [s[3] / MiB for s in sent]}, "bytes sent per rank: measured and predicted", "MiB")
    mem = [(name, m) for name, r in zip(names, reports) for m in r["memory"]["per_rank"]]
    pairs(axes[1, 1], [tick(n, m["rank"]) for n, m in mem],
          {"peak RSS": [m["peak_rss_bytes"] / MiB for _, m in mem],
           "graph bytes held": [np.nan if m.get("graph_bytes") is None else m["graph_bytes"] / MiB
                                 for _, m in mem]}, "memory per rank", "MiB")
    epoch_ms = [1e3 * (r.get("median_epoch_s") or np.nan) for r in reports]
    pairs(axes[1, 2], [n.split(":")[0] for n in names], {"median epoch": epoch_ms}, "time per run", "ms")
    if any(ms > 0 for ms in epoch_ms):         # NaN for a run of no epochs: a log axis of nothing fails
        axes[1, 2].set_yscale("log")
    fig.tight_layout()
    return fig


def markers(i: int, points: int) -> dict:
    """Run i's marker, every tenth point, staggered between runs so that equal curves stay apart."""
    every = max(1, points // 10)
    return {"marker": MARKERS[i % len(MARKERS)], "markersize": 4, "markevery": (i % every, every)}


def tick(name: str, rank: int) -> str:
    """"2·r1": rank 1 of the second report."""
    return f"{name.split(':')[0]}·r{rank}"


def set_ticks(ax, ticks: list[str], most: int = 32) -> None:
    """Label the bars `ticks`; of many ranks, every k-th, so that labels stay readable at hundreds of ranks."""
    every = max(1, -(-len(ticks) // most))
    ax.set_xticks(range(0, len(ticks), every), ticks[::every], fontsize=7, rotation=90 if every > 1 else 0)


def pairs(ax, ticks: list[str], series: dict[str, list[float]], title: str, unit: str) -> None:
    """Bars of two series side by side at each tick (a NaN value draws no bar)."""
    xs = np.arange(len(ticks))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(xs + (i - 0.5) * 0.4, values, 0.4, label=name)
    set_ticks(ax, ticks)
    ax.set(title=title, ylabel=unit)
    ax.legend(fontsize=7)


def partition_figure(result: dict):
    """One bar per method for each metric in `PARTITION_METRICS` (`result`: ``spgnn partition --json``)."""
    plt = pyplot()
    rows = result["rows"]
    keys = [k for k in PARTITION_METRICS if any(r.get(k) is not None for r in rows)]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.6), squeeze=False)
    methods = [r["method"] for r in rows]
    for ax, k in zip(axes[0], keys):
        ax.bar(range(len(rows)), [r.get(k) or 0 for r in rows], color=[f"C{i}" for i in range(len(rows))])
        ax.set_xticks(range(len(rows)), methods, rotation=45, fontsize=8)
        ax.set_title(PARTITION_METRICS[k], fontsize=9)
    fig.suptitle(f"{result['graph']} (n={result['n']:,}, nnz={result['nnz']:,}), {rows[0]['nparts']} parts")
    fig.tight_layout()
    return fig


def target(path: str | Path) -> Path:
    """The file `save` writes for `path` (format from the suffix; without one, PNG at path.png); SpgnnError, before
    anything is drawn, where matplotlib is missing or writes no such format, or `path` names a folder (written as
    one, or one that exists: its path.png would land beside it, not in it)."""
    pyplot()                                     # (one line where matplotlib is missing)
    from matplotlib.backend_bases import FigureCanvasBase

    if str(path).endswith(("/", os.sep)) or Path(path).is_dir():
        raise SpgnnError(f"cannot write a plot to {path}: it is a folder; give a file in it, such as "
                         f"{Path(path) / 'runs.png'}")
    path = Path(path)
    path = path if path.suffix else path.with_suffix(".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise SpgnnError(f"cannot write a plot to {path}: matplotlib writes no {path.suffix} files; end it in one of "
                         f"{', '.join('.' + f for f in sorted(formats))}")
    return path


def save(fig, path: str | Path) -> Path:
    """Write `fig` as an image at `target` (`path`) and close it; returns the path written."""
    try:
        path = target(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    except (OSError, ValueError) as e:
        raise SpgnnError(f"cannot write the plot to {path}: {e}") from None
    finally:
        pyplot().close(fig)
    return path
