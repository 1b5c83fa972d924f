"""Memory per rank against P: bytes autograd holds for the backward and peak RSS, for sar, 1d-halo and 1d.

    python benchmarks/bench_memory.py [--datasets amazon-computers,rmat:14] [--data-dir DATA]
                                      [--P 1,2,4] [--epochs 3] [--out results/bench_memory.json]

For every dataset × model (GCN, GraphSAGE-mean: 2 layers, hidden 64; GAT: 8 heads × 8 hidden, 1 output
head) × algorithm × P, one fresh set of P local processes (``run_local``) trains --epochs epochs (dropout
0.5, random partition) and reports, per rank, the peak of ``SavedTensorMeter`` (saved-for-backward bytes)
and the peak resident set size, plus the median epoch time. 1d has no attention, so GAT runs on sar and
1d-halo only. Prints a Markdown table and the halo/sar ratio of saved bytes per dataset, model and P;
writes everything to --out (JSON) and a plot next to it (PNG). Default runtime on 2 cores: about 10 min.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.jsonfile import write_json
from spgnn.train.fullbatch import Trainer

MODELS = {"gcn": {"hidden": 64}, "sage": {"hidden": 64}, "gat": {"hidden": 8, "heads": 8}}
ALGOS = ("sar", "1d-halo", "1d")


def _measure(comm, cfg: TrainConfig) -> dict:
    report = Trainer(cfg, comm).run(log=None)
    mem = report["memory"]["per_rank"]
    return {"saved_bytes": [m["saved_for_backward_bytes"] for m in mem],
            "peak_rss_bytes": [m["peak_rss_bytes"] for m in mem], "epoch_s": report["median_epoch_s"],
            "n": report["graph"]["n"], "nnz": report["graph"]["nnz"]}


def run(args) -> list[dict]:
    rows = []
    for dataset in args.datasets:
        for model, opts in MODELS.items():
            for algo in ALGOS:
                if model == "gat" and algo == "1d":
                    continue
                for P in args.P:
                    cfg = TrainConfig(dataset=dataset, data_dir=args.data_dir, model=model, algo=algo,
                                      partition="random", epochs=args.epochs, eval_every=0, **opts)
                    t0 = time.perf_counter()
                    r = run_local(_measure, P, cfg, timeout_s=600)[0]
                    rows.append({"dataset": dataset, "model": model, "algo": algo, "P": P, **r,
                                 "wall_s": time.perf_counter() - t0})
                    print(f"{dataset:18s} {model:5s} {algo:8s} P={P}  saved {max(r['saved_bytes']) / 2**20:8.1f} "
                          f"MiB  rss {max(r['peak_rss_bytes']) / 2**20:7.0f} MiB  epoch {r['epoch_s']:.3f} s",
                          flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| dataset | model | algo | P | saved MiB/rank (max) | × P=1 | peak RSS MiB/rank (max) | epoch s |",
             "|---|---|---|---|---|---|---|---|"]
    base = {(r["dataset"], r["model"], r["algo"]): max(r["saved_bytes"]) for r in rows if r["P"] == 1}
    for r in rows:
        saved = max(r["saved_bytes"])
        ref = base.get((r["dataset"], r["model"], r["algo"]))
        lines.append(f"| {r['dataset']} | {r['model']} | {r['algo']} | {r['P']} | {saved / 2**20:.2f} | "
                     f"{saved / ref if ref else float('nan'):.3f} | {max(r['peak_rss_bytes']) / 2**20:.0f} | "
                     f"{r['epoch_s']:.3f} |")
    return "\n".join(lines)


def ratios(rows: list[dict]) -> dict:
    """Saved bytes per rank of 1d-halo over sar, per dataset, model and P."""
    by = {(r["dataset"], r["model"], r["algo"], r["P"]): max(r["saved_bytes"]) for r in rows}
    return {f"{d}/{m}/P={P}": by[d, m, "1d-halo", P] / by[d, m, "sar", P]
            for (d, m, a, P) in by if a == "sar" and (d, m, "1d-halo", P) in by}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets, models = sorted({r["dataset"] for r in rows}), list(MODELS)
    fig, axes = plt.subplots(len(datasets), len(models), figsize=(4 * len(models), 3.2 * len(datasets)),
                             squeeze=False)
    for i, d in enumerate(datasets):
        for k, m in enumerate(models):
            ax = axes[i][k]
            for algo in ALGOS:
                pts = [(r["P"], max(r["saved_bytes"]) / 2**20) for r in rows
                       if (r["dataset"], r["model"], r["algo"]) == (d, m, algo)]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=algo)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{d} {m}", fontsize=9)
            ax.set_xlabel("P")
            ax.set_ylabel("saved for backward, MiB/rank")
            ax.legend(fontsize=7)
    machine.save_figure(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="amazon-computers,rmat:14")
    machine.data_option(p)
    p.add_argument("--P", default="1,2,4", type=machine.ints(1))
    p.add_argument("--epochs", type=machine.at_least(1), default=3)
    p.add_argument("--out", default="results/bench_memory.json", type=machine.output)
    args = p.parse_args(argv)
    args.datasets = machine.check_datasets(p, args.datasets.split(","), args.data_dir)
    t0 = time.perf_counter()
    rows = run(args)
    out = Path(args.out)
    result = {"args": vars(args), "rows": rows, "halo_over_sar": ratios(rows),
              "wall_s": time.perf_counter() - t0}
    write_json(out, result)
    print(table(rows))
    print("\nsaved bytes per rank, 1d-halo / sar:")
    for k, v in result["halo_over_sar"].items():
        print(f"  {k}: {v:.2f}")
    print(f"\nwrote {out} ({result['wall_s']:.0f} s)")
    machine.plot_after("bench_memory", out.with_suffix(".png"), plot, rows)
    return result


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
