"""The cost model's epoch seconds and peak memory against measured runs, on this machine.

    python benchmarks/bench_model.py [--datasets amazon-computers,rmat:17] [--procs 1,2,4,8] [--epochs 4]
                                     [--hidden 64] [--calibration FILE] [--memory rmat:20]
                                     [--out results/bench_model.json]

First a calibration on this machine (``spgnn calibrate --nprocs 2``, unless --calibration is given), then for each
dataset, P and algorithm (default grids; at P = 1 every algorithm runs the same local product, so once) one
``spgnn train`` run (a 2-layer GCN, --hidden, --epochs steps, no evaluation until the end) whose report holds the
measured median epoch seconds and peak RSS per rank beside the model's prediction. Targets: every predicted
epoch within 25% of the measured median, the predicted fastest algorithm (``--algo auto``'s rule, among the
default grids run here) within 10% of the fastest measured, peak memory within 15% at P = 1, 2, 4 (and on
--memory, a larger graph, 1d-halo at P = 1, 2, 4, one epoch). Prints Markdown tables; writes the JSON to --out
and a plot of predicted against measured next to it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ALGOS = ("1d", "1d-halo", "sar", "1.5d", "2d", "3d")
TIME_TARGET, AUTO_TARGET, MEMORY_TARGET = 0.25, 0.10, 0.15


def spgnn(*args) -> None:
    subprocess.run([sys.executable, "-m", "spgnn", *args], check=True, stdout=subprocess.DEVNULL)


def run(dataset, P, algo, args, folder) -> dict:
    """One training run's measured and predicted figures."""
    out = Path(folder) / "run.json"
    spgnn("train", "--dataset", dataset, "--nprocs", str(P), "--algo", algo, "--epochs", str(args.epochs),
          "--eval-every", "0", "--hidden", str(args.hidden), "--partition", "metis" if args.metis else "random",
          "--calibration", args.calibration, "--quiet", "--output", str(out),
          *(["--data-dir", args.data_dir] if args.data_dir else []))
    r = json.loads(out.read_text())
    p = r["predicted"]
    rss = [m["peak_rss_bytes"] for m in r["memory"]["per_rank"]]
    mem = [m["total"] for m in p["memory_per_rank"]]
    return {"dataset": dataset, "P": P, "algo": algo, "shape": "x".join(map(str, r["grid"]["shape"])),
            "measured_s": r["median_epoch_s"], "predicted_s": p["epoch_s"],
            "time_ratio": p["epoch_s"] / r["median_epoch_s"], "epochs_s": [e["time_s"] for e in r["epochs"]],
            "phases": p["phases"], "measured_comm_s_rank0": p["measured_comm_s_rank0"],
            "rss_mb": max(rss) / 2**20, "predicted_mb": max(mem) / 2**20, "memory_ratio": max(mem) / max(rss),
            "memory_parts_rank0": p["memory_per_rank"][0]}


def auto_rows(rows) -> list[dict]:
    """Per dataset and P > 1: the algorithm predicted fastest, the one measured fastest, and their measured ratio."""
    out = []
    for key in sorted({(r["dataset"], r["P"]) for r in rows if r["P"] > 1}):
        group = [r for r in rows if (r["dataset"], r["P"]) == key]
        pick, best = min(group, key=lambda r: r["predicted_s"]), min(group, key=lambda r: r["measured_s"])
        out.append({"dataset": key[0], "P": key[1], "pick": pick["algo"], "fastest": best["algo"],
                    "ratio": pick["measured_s"] / best["measured_s"]})
    return out


def plot(rows, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        ax.scatter([r["measured_s"] for r in mine], [r["predicted_s"] for r in mine], label=dataset)
    lo = min(min(r["measured_s"], r["predicted_s"]) for r in rows) / 1.5
    hi = max(max(r["measured_s"], r["predicted_s"]) for r in rows) * 1.5
    for k, style in ((1, "-"), (1 + TIME_TARGET, ":"), (1 - TIME_TARGET, ":")):
        ax.plot([lo, hi], [k * lo, k * hi], "k" + style, lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured s / epoch (median)", ylabel="predicted s / epoch",
           title="cost model: epoch seconds")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="amazon-computers,rmat:17")
    p.add_argument("--procs", default="1,2,4,8")
    p.add_argument("--algos", default=",".join(ALGOS))
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--metis", action="store_true", help="partition by METIS instead of at random")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--calibration", default=None, help="a spgnn calibrate --output file (default: made first)")
    p.add_argument("--memory", default="", help="also check memory on this graph (e.g. rmat:20) at P = 1, 2, 4")
    p.add_argument("--out", default="results/bench_model.json")
    args = p.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.calibration is None:
        args.calibration = str(out.with_name(out.stem + "-calibration.json"))
        spgnn("calibrate", "--nprocs", "2", "--sizes", "4K,64K,1M,4M", "--repeats", "3", "--budget", "3",
              "--output", args.calibration)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for dataset in args.datasets.split(","):
            for P in map(int, args.procs.split(",")):
                for algo in args.algos.split(",") if P > 1 else ["1d-halo"]:
                    rows.append(run(dataset, P, algo, args, folder))
                    r = rows[-1]
                    print(f"{dataset} P={P} {algo} {r['shape']}: measured {r['measured_s']:.4f} s, predicted "
                          f"{r['predicted_s']:.4f} s ({r['time_ratio']:.2f}); peak {r['rss_mb']:.0f} MiB, predicted "
                          f"{r['predicted_mb']:.0f} ({r['memory_ratio']:.2f})", flush=True)
        memory = [run(args.memory, P, "1d-halo", argparse.Namespace(**{**vars(args), "epochs": 1}), folder)
                  for P in (1, 2, 4)] if args.memory else []
    autos = auto_rows(rows)
    print("\n| dataset | P | algo | grid | measured s | predicted s | ratio | peak MiB | predicted MiB | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows + memory:
        print(f"| {r['dataset']} | {r['P']} | {r['algo']} | {r['shape']} | {r['measured_s']:.4f} | "
              f"{r['predicted_s']:.4f} | {r['time_ratio']:.2f} | {r['rss_mb']:.0f} | {r['predicted_mb']:.0f} | "
              f"{r['memory_ratio']:.2f} |")
    print("\n| dataset | P | predicted fastest | measured fastest | measured ratio |\n|---|---|---|---|---|")
    for a in autos:
        print(f"| {a['dataset']} | {a['P']} | {a['pick']} | {a['fastest']} | {a['ratio']:.2f} |")
    time_ok = [abs(r["time_ratio"] - 1) <= TIME_TARGET for r in rows]
    mem_ok = [abs(r["memory_ratio"] - 1) <= MEMORY_TARGET for r in rows + memory if r["P"] <= 4]
    auto_ok = [a["ratio"] <= 1 + AUTO_TARGET for a in autos]
    print(f"\nepoch within {TIME_TARGET:.0%}: {sum(time_ok)}/{len(time_ok)}; median |ratio − 1| "
          f"{np.median([abs(r['time_ratio'] - 1) for r in rows]):.2f}; auto within {AUTO_TARGET:.0%}: "
          f"{sum(auto_ok)}/{len(auto_ok)}; memory within {MEMORY_TARGET:.0%} (P ≤ 4): {sum(mem_ok)}/{len(mem_ok)}")
    out.write_text(json.dumps({"argv": sys.argv, "calibration": json.loads(Path(args.calibration).read_text()),
                               "runs": rows, "memory": memory, "auto": autos}, indent=1))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
