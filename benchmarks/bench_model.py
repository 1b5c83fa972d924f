"""The cost model's epoch seconds and peak memory against measured runs, on this machine.

    python benchmarks/bench_model.py [--datasets amazon-computers,rmat:17] [--procs 1,2,4,8] [--epochs 9] [--warmup 3]
                                     [--model gcn] [--hidden 64] [--dropout 0.5] [--precompute on]
                                     [--calibration FILE[,FILE...]] [--rates file]
                                     [--memory GRAPHS] [--out results/bench_model.json]

First a calibration on this machine (``spgnn calibrate --nprocs 2``, messages up to 16 MiB, as a layer's exchanges
are), unless --calibration is given (several files: the first makes the tables, and the same steps are scored against
each of the others too; "default" names the model's built-in rates and α-β). Then per dataset and P one launch of P
processes trains a 2-layer GCN (--model another: GAT on the layouts with attention; --hidden, --dropout,
--precompute) with every algorithm on its default grid (each layout once: at P = 1 every algorithm runs the same
local product, so 1d-halo only), built one after another, then
--warmup untimed rounds and --epochs timed steps each, interleaved (1d, 1d-halo, …, 1d, 1d-halo, …) so that the load
of a shared machine falls on
all alike (the first rounds after the builds are the slowest: at P = 8, 1.5d's first three steps took 1.2-2.7× its
later ones); the median step of each beside the model's prediction, from the calibration's compute rates and α-β
(``--rates live``: compute rates those processes measure first, `measure_compute`, under the load of the moment; its
short kernels run at a whole core's speed even where P processes share fewer cores, so the time sharing it should
show is lost). --memory GRAPHS (comma-separated): per graph one ``spgnn train`` process group per layout (1d-halo,
sar, 2d at P = 1, 2, 4, one epoch), peak RSS per rank (the set-up's and training's beside it) against the predicted
memory. Targets: every predicted epoch within 25% of the measured median, the predicted fastest layout (``--algo
auto``'s rule) within 10% of the fastest measured, peak memory within 15%. Prints Markdown tables; writes the JSON to
--out and a plot of predicted against measured next to it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn import cost, spmm
from spgnn.comm.launch import run_local
from spgnn.errors import SpgnnError
from spgnn.jsonfile import write_json
from spgnn.layers import LAYERS

TIME_TARGET, AUTO_TARGET, MEMORY_TARGET = 0.25, 0.10, 0.15
MEMORY_ALGOS = ("1d-halo", "sar", "2d")


def calibration_file(name: str) -> str | None:
    """The file a --calibration entry names; None for "default" (the model's built-in rates and α-β)."""
    return None if name == "default" else name


def offers(algo: str, model: str) -> bool:
    """Whether the layout of `algo` offers what the layers of `model` need (GAT: attention)."""
    return all(getattr(spmm.get(algo), need) for need in LAYERS[model].needs)


def layouts(P: int, algos, model: str = "gcn") -> list[dict]:
    """The options of each algorithm in `algos` whose layout offers what `model` needs, on its default grid at P,
    each layout once (1d-halo alone at P = 1)."""
    if P == 1:
        return [{"algo": "1d-halo"}]
    out, seen = [], set()
    for option in cost.candidates(P):
        key = (option["algo"], spmm.get(option["algo"]).grid_for(P, **option))
        if option["algo"] in algos and offers(option["algo"], model) and key not in seen:
            seen.add(key)
            out.append(option)
    return out


def _timed(comm, dataset, options, args) -> list[dict]:
    """On each rank: the compute rates (the calibration's, or with ``--rates live`` measured in these processes),
    every layout of `options` built and warmed up by args.warmup rounds, then args.epochs steps of each interleaved; on
    rank 0 each layout's step seconds and the model's epoch (`cost.epoch_seconds`: those rates, the calibration
    file's α-β)."""
    from spgnn.comm.calibrate import measure_compute
    from spgnn.config import TrainConfig
    from spgnn.train.fullbatch import Trainer

    files = args.files
    live = measure_compute(comm, repeats=3, scale=16) if args.rates == "live" else {}
    rates = [cost.with_measured(cost.load_rates(f), live) for f in files]
    trainers = [Trainer(TrainConfig(dataset=dataset, data_dir=args.data_dir, model=args.model, hidden=args.hidden,
                                    epochs=args.epochs,
                                    dropout=args.dropout, precompute=args.precompute, eval_every=0,
                                    partition="metis" if args.metis else "random",
                                    calibration=files[0], **o), comm) for o in options]
    times = [[] for _ in trainers]
    for epoch in range(args.warmup + args.epochs):  # the first args.warmup rounds, untimed, after every layout is built
        for t, mine in zip(trainers, times):
            comm.all_sum([0.0])                      # start together
            t0 = time.perf_counter()
            t.step(epoch)
            if epoch >= args.warmup:
                mine.append(time.perf_counter() - t0)
    if comm.rank:
        return []
    ab = [cost.load_calibration(f) if f else None for f in files]
    return [{"grid": list(t.grid.shape), "epochs_s": s, "rates": asdict(rates[0]),
             "predicted": [cost.epoch_seconds(type(t.algo), t.costs[1], t.grid.shape, t.costs[0], a, r,
                                              t.cfg.overlap == "on", ranks_per_node=comm.world_size)
                           for a, r in zip(ab, rates)],
             "recv_bytes_per_rank": cost.predict_layout(type(t.algo), t.costs[1], t.grid.shape, t.costs[0], ab[0],
                                                        rates[0], t.cfg.overlap == "on")["recv_bytes_per_rank"]}
            for t, s in zip(trainers, times)]


def timed(dataset, P, args) -> list[dict]:
    """The measured and predicted step seconds of every layout at P, from one launch."""
    options = layouts(P, args.algos, args.model)
    rows = []
    for o, r in zip(options, run_local(_timed, P, dataset, options, args, timeout_s=600)[0]):
        p = r["predicted"][0]
        measured = float(np.median(r["epochs_s"]))
        rows.append({"dataset": dataset, "P": P, "algo": o["algo"], "shape": "x".join(map(str, r["grid"])),
                     "measured_s": measured, "predicted_s": p["epoch_s"], "time_ratio": p["epoch_s"] / measured,
                     "epochs_s": r["epochs_s"], "phases": p["phases"], "rates": r["rates"],
                     "recv_bytes_per_rank": r["recv_bytes_per_rank"],
                     "predicted_by": [q["epoch_s"] for q in r["predicted"]]})
    return rows


def _mib(b) -> float | None:
    return b / 2**20 if b is not None else None


def _most(mib: list) -> str:
    """The largest of `mib`, or "–" where a rank's is unknown (None)."""
    return "–" if None in mib else f"{max(mib):.0f}"


def memory(dataset, P, algo, args, folder) -> dict:
    """One ``spgnn train`` run of one epoch: peak RSS per rank against the predicted memory."""
    out = Path(folder) / "run.json"
    subprocess.run([sys.executable, "-m", "spgnn", "train", "--dataset", dataset, "--nprocs", str(P), "--algo", algo,
                    "--model", args.model, "--epochs", "1", "--eval-every", "0", "--hidden", str(args.hidden),
                    "--dropout", str(args.dropout), "--precompute", args.precompute, "--partition",
                    "metis" if args.metis else "random", "--quiet", "--output", str(out),
                    *(["--calibration", args.files[0]] if args.files[0] else []),
                    *(["--data-dir", args.data_dir] if args.data_dir else [])], check=True,
                   stdout=subprocess.DEVNULL)
    r = json.loads(out.read_text())
    measured, predicted = r["memory"]["per_rank"], r["predicted"]["memory_per_rank"]
    rss = max(m["peak_rss_bytes"] for m in measured)
    mem = max(m["total"] for m in predicted)
    return {"dataset": dataset, "P": P, "algo": algo, "shape": "x".join(map(str, r["grid"]["shape"])),
            "rss_mb": rss / 2**20, "predicted_mb": mem / 2**20, "memory_ratio": mem / rss,
            "setup_mb": [_mib(m["setup_peak_rss_bytes"]) for m in measured],
            "train_mb": [_mib(m["train_peak_rss_bytes"]) for m in measured],    # None where /proc cannot reset
            "memory_parts": predicted}


def auto_rows(rows, k: int = 0) -> list[dict]:
    """Per dataset and P > 1: the algorithm predicted fastest by calibration `k` (`--algo auto`'s rule,
    `cost.preference`), the one measured fastest, and their measured ratio."""
    out = []
    for key in sorted({(r["dataset"], r["P"]) for r in rows if r["P"] > 1}):
        group = [r for r in rows if (r["dataset"], r["P"]) == key]
        pick = min(group, key=lambda r: cost.preference(r["predicted_by"][k], r["recv_bytes_per_rank"]))
        best = min(group, key=lambda r: r["measured_s"])
        out.append({"dataset": key[0], "P": key[1], "pick": pick["algo"], "fastest": best["algo"],
                    "ratio": pick["measured_s"] / best["measured_s"]})
    return out


def score(rows, k: int) -> str:
    """The targets met by calibration `k`'s predictions: epochs within `TIME_TARGET` of the measured median,
    their median |predicted / measured − 1|, `auto_rows` within `AUTO_TARGET`."""
    ratios = [r["predicted_by"][k] / r["measured_s"] for r in rows]
    autos = auto_rows(rows, k)
    return (f"epoch within {TIME_TARGET:.0%}: {sum(abs(x - 1) <= TIME_TARGET for x in ratios)}/{len(ratios)}; "
            f"median |ratio − 1| {np.median(np.abs(np.subtract(ratios, 1))) if rows else float('nan'):.2f}; auto "
            f"within {AUTO_TARGET:.0%}: {sum(a['ratio'] <= 1 + AUTO_TARGET for a in autos)}/{len(autos)}")


def plot(rows, mems, path) -> None:
    """Predicted against measured: each timed layout's epoch seconds (`rows`) and each --memory run's peak MiB a rank
    (`mems`), a panel for each that has any, the ratios 1 and the targets' bounds drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(rows, "measured_s", "predicted_s", TIME_TARGET, "s / epoch (median)", "epoch seconds"),
              (mems, "rss_mb", "predicted_mb", MEMORY_TARGET, "peak MiB a rank", "peak memory")]
    panels = [p for p in panels if p[0]]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 5), squeeze=False)
    for ax, (points, measured, predicted, target, unit, title) in zip(axes[0], panels):
        for dataset in dict.fromkeys(r["dataset"] for r in points):
            mine = [r for r in points if r["dataset"] == dataset]
            ax.scatter([r[measured] for r in mine], [r[predicted] for r in mine], label=dataset)
        lo = min(min(r[measured], r[predicted]) for r in points) / 1.5
        hi = max(max(r[measured], r[predicted]) for r in points) * 1.5
        for k, style in ((1, "-"), (1 + target, ":"), (1 - target, ":")):
            ax.plot([lo, hi], [k * lo, k * hi], "k" + style, lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=f"measured {unit}", ylabel=f"predicted {unit}",
               title=f"cost model: {title}")
        ax.legend()
    machine.save_figure(fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="amazon-computers,rmat:17")
    p.add_argument("--procs", default="1,2,4,8", type=machine.ints(1))
    p.add_argument("--algos", default=",".join(spmm.ALGORITHMS), type=machine.names(spmm.ALGORITHMS, "an algorithm"))
    p.add_argument("--epochs", type=int, default=9, help="timed steps of each layout (after --warmup untimed rounds)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds of every layout before the timed ones "
                   "(the first steps after the builds run slower than the later ones)")
    p.add_argument("--model", default="gcn", choices=sorted(LAYERS), help="the model trained (2 layers)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.5, help="the model's dropout (at 0 the features' products are "
                   "made once a run and kept: --precompute on)")
    p.add_argument("--precompute", default="on", choices=["on", "off"], help="the run's --precompute")
    p.add_argument("--metis", action="store_true", help="partition by METIS instead of at random")
    machine.data_option(p)
    p.add_argument("--calibration", default=None, help="spgnn calibrate --output files, comma-separated, or "
                   "'default' for the built-in rates (default: one made first)")
    p.add_argument("--rates", default="file", choices=["file", "live"],
                   help="compute rates: the calibration's (file), or measured in each launch's processes first (live)")
    p.add_argument("--memory", default="", help="check peak memory on these graphs (e.g. rmat:20) at P = 1, 2, 4")
    p.add_argument("--memory-only", action="store_true", help="skip the timed runs")
    p.add_argument("--out", default="results/bench_model.json", type=machine.output)
    args = p.parse_args(argv)
    if args.epochs < 1 or args.warmup < 0:
        p.error("--epochs must be >= 1 and --warmup >= 0")
    if args.memory_only and not args.memory:
        p.error("--memory-only skips the timed runs and leaves nothing to run: give --memory GRAPHS too")
    machine.check_config(p, hidden=args.hidden, dropout=args.dropout)
    args.datasets = machine.check_datasets(p, args.datasets.split(","), args.data_dir) if not args.memory_only else []
    if args.memory:
        machine.check_datasets(p, args.memory.split(","), args.data_dir)
    for f in (f for f in (args.calibration or "").split(",") if f and f != "default"):
        if not Path(f).is_file():
            p.error(f"--calibration {f}: no such file")
        try:                                            # read as the model reads it, before any launch
            cost.load_calibration(f), cost.load_rates(f)
        except SpgnnError as e:
            p.error(str(e))
    out = Path(args.out)
    if args.calibration is None:
        args.calibration = str(out.with_name(out.stem + "-calibration.json"))
        subprocess.run([sys.executable, "-m", "spgnn", "calibrate", "--nprocs", "2", "--sizes", "4K,64K,1M,4M,16M",
                        "--repeats", "3", "--budget", "3", "--output", args.calibration], check=True,
                       stdout=subprocess.DEVNULL)
    names = args.calibration.split(",")
    args.files = [calibration_file(f) for f in names]        # the paths (None: the built-in rates)
    rows = []
    for dataset in args.datasets:
        for P in args.procs:
            rows += timed(dataset, P, args)
            for r in rows[-len(layouts(P, args.algos, args.model)):]:
                print(f"{dataset} P={P} {r['algo']} {r['shape']}: measured {r['measured_s']:.4f} s, predicted "
                      f"{r['predicted_s']:.4f} s ({r['time_ratio']:.2f})", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        mems = [memory(graph, P, algo, args, folder) for graph in filter(None, args.memory.split(","))
                for P in (1, 2, 4) for algo in (MEMORY_ALGOS if P > 1 else MEMORY_ALGOS[:1])
                if offers(algo, args.model)]
    autos = auto_rows(rows)
    if rows:
        print("\n| dataset | P | algo | grid | measured s | predicted s | ratio |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dataset']} | {r['P']} | {r['algo']} | {r['shape']} | {r['measured_s']:.4f} | "
              f"{r['predicted_s']:.4f} | {r['time_ratio']:.2f} |")
    if mems:
        print("\n| dataset | P | algo | grid | set-up peak MiB | training peak MiB | peak MiB | predicted MiB | ratio |"
              "\n|---|---|---|---|---|---|---|---|---|")
    for r in mems:
        print(f"| {r['dataset']} | {r['P']} | {r['algo']} | {r['shape']} | {_most(r['setup_mb'])} | "
              f"{_most(r['train_mb'])} | {r['rss_mb']:.0f} | {r['predicted_mb']:.0f} | {r['memory_ratio']:.2f} |")
    if autos:
        print("\n| dataset | P | predicted fastest | measured fastest | measured ratio |\n|---|---|---|---|---|")
    for a in autos:
        print(f"| {a['dataset']} | {a['P']} | {a['pick']} | {a['fastest']} | {a['ratio']:.2f} |")
    mem_ok = [abs(r["memory_ratio"] - 1) <= MEMORY_TARGET for r in mems]
    said = [score(rows, 0)] if rows else []             # (no "0/0; median nan" of runs not made)
    if mems or not rows:
        said.append(f"memory within {MEMORY_TARGET:.0%}: {sum(mem_ok)}/{len(mem_ok)}")
    print("\n" + "; ".join(said))
    for k, f in enumerate(names[1:] if rows else [], 1):
        print(f"the same steps against {f}: {score(rows, k)}")
    first = args.files[0]
    write_json(out, {"argv": sys.argv, "warmup": args.warmup, "epochs": args.epochs,
                               "calibration": json.loads(Path(first).read_text()) if first else None,
                               "runs": rows, "memory": mems, "auto": autos,
                               "scores": {f: score(rows, k) for k, f in enumerate(names) if rows}})
    if rows or mems:
        plot(rows, mems, out.with_suffix(".png"))
    print(f"wrote {out}" + (f" and {out.with_suffix('.png')}" if rows or mems else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
