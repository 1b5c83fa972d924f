"""What a partitioner buys: quality metrics, partitioning cost, and the bytes, seconds and accuracy of training.

    python benchmarks/bench_partition.py [--datasets amazon-computers,coauthor-cs,rmat:15] [--nparts 2,4,8]
                                         [--methods all] [--epochs 10] [--data-dir DATA]
                                         [--out results/bench_partition.json]

For each graph, P and partitioner (every registered one whose package is installed), in the parent process:
the partition (after a warm-up call on a small ring, so imports and JIT compilation are left out), its
seconds and peak RSS growth, and the metrics of ``spgnn.partition.metrics``. Then one ``run_local`` job of P
processes per (graph, P) trains a 2-layer GCN (hidden 64, dropout 0.5, ``1d-halo``) for --epochs epochs
under each partition in turn, and reports the SpMM bytes all ranks sent per epoch (forward + backward
phases, read from ``comm.ledger``), the median epoch time (rank 0, the first epoch left out) and the final
test accuracy. Bytes per epoch divided by the partition's comm_volume (column ``B/row``) is the same for
every partitioner of one graph: the bytes are exactly volume·4·Σ(SpMM widths, forward and backward).

coauthor-cs keeps 6,805 dense features (500 MB a copy, several copies per process), so it runs at
P ≤ --coauthor-max-nparts (default 4). Prints Markdown tables; writes the JSON and a PNG next to it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.partition.metrics import COLUMNS, metrics_table, partition_metrics, warm_up
from spgnn.partition.partition import available, make_partition, versions
from spgnn.train.fullbatch import Trainer

TRAIN = {"model": "gcn", "algo": "1d-halo", "layers": 2, "hidden": 64, "dropout": 0.5, "lr": 0.01,
         "eval_every": 0, "seed": 0}
TABLE = COLUMNS | {"MB/epoch": ("spmm_mb_per_epoch", "{:.2f}"), "B/row": ("bytes_per_volume_row", "{:.0f}"),
                   "epoch ms": ("epoch_ms", "{:.1f}"), "test acc": ("test_acc", "{:.4f}")}


def train_all(comm, dataset: str, data_dir: str | None, parts: dict, epochs: int) -> dict:
    """On each rank: train under every partition in `parts`; per method this rank's SpMM bytes sent, its
    epoch times and the final accuracies."""
    g = load_dataset(dataset, data_dir, seed=TRAIN["seed"])
    out = {}
    for method, p in parts.items():
        trainer = Trainer(TrainConfig(dataset=dataset, data_dir=data_dir, epochs=epochs, **TRAIN), comm,
                          graph=g, parts=p)
        comm.ledger.reset()
        report = trainer.run(log=None)
        spmm_bytes = sum(comm.ledger.total("sent_bytes", phase=ph) for ph in ("forward", "backward"))
        out[method] = {"spmm_bytes": spmm_bytes, "epoch_s": [e["time_s"] for e in report["epochs"]],
                       "final": report["final"]}
        del trainer
    return out


def bench_graph(dataset: str, nparts: list[int], methods: list[str], args) -> list[dict]:
    g = load_dataset(dataset, args.data_dir, seed=TRAIN["seed"])
    print(f"\n## {g.name}: n = {g.n:,}, nnz = {g.nnz:,}, {g.num_features} features", flush=True)
    rows = []
    for P in nparts:
        parts, block = {}, []
        for method in methods:
            warm_up(method, P)
            part = make_partition(method, g.adj, P, seed=TRAIN["seed"])
            parts[method] = part.parts
            block.append({"dataset": g.name, "method": method} | partition_metrics(g.adj, part, g.train_mask)
                         | {k: part.info[k] for k in ("params", "seconds", "peak_rss_growth_bytes")})
        t0 = time.perf_counter()
        measured = run_local(train_all, P, dataset, args.data_dir, parts, args.epochs, timeout_s=1800)
        for row in block:
            per_rank = [m[row["method"]] for m in measured]
            spmm_bytes = sum(r["spmm_bytes"] for r in per_rank) / args.epochs
            row |= {"spmm_bytes_per_epoch": spmm_bytes, "spmm_mb_per_epoch": spmm_bytes / 2**20,
                    "bytes_per_volume_row": spmm_bytes / row["comm_volume"] if row["comm_volume"] else None,
                    "epoch_s": per_rank[0]["epoch_s"],
                    "epoch_ms": 1e3 * float(np.median(per_rank[0]["epoch_s"][1:] or per_rank[0]["epoch_s"])),
                    "test_acc": per_rank[0]["final"]["test_acc"], "final": per_rank[0]["final"]}
        print(f"\nP = {P} (training runs: {time.perf_counter() - t0:.0f} s)\n\n{metrics_table(block, TABLE)}",
              flush=True)
        rows += block
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    panels = [("spmm_mb_per_epoch", "SpMM MB per epoch (all ranks)"), ("epoch_ms", "epoch ms (rank 0)"),
              ("seconds", "partitioning s")]
    fig, axes = plt.subplots(len(panels), len(datasets), figsize=(4.5 * len(datasets), 3.2 * len(panels)),
                             squeeze=False)
    for c, d in enumerate(datasets):
        mine = [r for r in rows if r["dataset"] == d]
        for r_, (key, label) in enumerate(panels):
            ax = axes[r_][c]
            for method in dict.fromkeys(r["method"] for r in mine):
                pts = [(r["nparts"], r[key]) for r in mine if r["method"] == method and r.get(key)]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=method)
            ax.set_yscale("log")
            ax.set_xlabel("P")
            ax.set_xticks(sorted({r["nparts"] for r in mine}))
            ax.set_title(f"{d}: {label}", fontsize=9)
    axes[0][0].legend(fontsize=7)
    machine.save_figure(fig, path)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="amazon-computers,coauthor-cs,rmat:15")
    p.add_argument("--nparts", default="2,4,8", type=machine.ints(1))
    p.add_argument("--methods", default="all", help="comma-separated partitioners, or all installed ones")
    p.add_argument("--epochs", type=machine.at_least(1), default=10,
                   help="training epochs per run (the first is not timed)")
    p.add_argument("--coauthor-max-nparts", type=machine.at_least(1), default=4,
                   help="largest P for coauthor-cs (memory)")
    machine.data_option(p)
    p.add_argument("--out", default="results/bench_partition.json", type=machine.output)
    args = p.parse_args(argv)
    args.datasets = machine.check_datasets(p, args.datasets.split(","), args.data_dir)
    if args.methods == "all":
        args.methods = installed_methods()
        return args
    args.methods = args.methods.split(",")
    for m in args.methods:                                  # registered, and its package installed
        try:
            if m not in available():
                raise SpgnnError(f"unknown partitioner {m!r}: choose from {', '.join(available())}, or all")
            warm_up(m, 2)
        except SpgnnError as e:
            p.error(f"--methods: {e}")
    return args


def installed_methods() -> list[str]:
    """Every registered partitioner that runs here (one whose package is missing is left out)."""
    ok = []
    for m in available():
        try:
            warm_up(m, 2)
            ok.append(m)
        except SpgnnError as e:
            print(f"skipping {m}: {e}", file=sys.stderr)
    return ok


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    for dataset in args.datasets:
        cap = args.coauthor_max_nparts if dataset.startswith("coauthor") else max(args.nparts)
        rows += bench_graph(dataset, [P for P in args.nparts if P <= cap], args.methods, args)
    out = Path(args.out)
    result = {"command": "python " + shlex.join(sys.argv), "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "seconds": time.perf_counter() - t0, "train": TRAIN | {"epochs": args.epochs},
              "machine": machine.facts() | versions(), "rows": rows}
    write_json(out, result, default=str)
    plot(rows, out.with_suffix(".png"))
    print(f"\nwrote {out} and {out.with_suffix('.png')} in {result['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
