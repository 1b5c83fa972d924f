"""Collective bandwidth and 1d-halo epoch time on the torch.distributed (gloo) and mpi4py transports, one run.

    python benchmarks/bench_collectives.py [--procs 2,4] [--sizes 4K,16K,64K,256K,1M,4M,16M,64M]
                                           [--ops broadcast,all_reduce,all_to_all,all_gather,reduce_scatter]
                                           [--repeats 5] [--epoch-dataset rmat:17] [--epochs 10]
                                           [--out results/bench_collectives.json]

1. collectives: for each P, one ``mpirun -np P`` job holds both transports (a `Comm` on each, the same
   ranks) and times every collective at every message size, alternating the transports (torch, mpi,
   torch, mpi, …) so machine noise falls on both alike. The timing is `spgnn.comm.calibrate.measure`'s (the
   same as ``spgnn calibrate``): per call the slowest rank's seconds, median over the repetitions. The
   message size s is the bytes each rank passes in (see spgnn/comm/calibrate.py); bandwidth = s / seconds,
   payload GB/s per rank (10⁹ bytes).
2. epoch: ``mpirun -np 2 spgnn train --algo 1d-halo --model gcn --dataset rmat:17 --transport T`` for each
   transport, alternating, --epoch-rounds times; the report's ``median_epoch_s``, median over rounds.

Prints Markdown tables and the targets (mpi ≥ 4× torch at 64 MB; mpi epoch ≥ 2× faster); writes every
point to --out (JSON) and a bandwidth plot next to it (PNG). Run it on an otherwise idle machine: it
warns when the CPUs were busy before starting.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn.comm import calibrate
from spgnn.errors import SpgnnError
from spgnn.jsonfile import write_json

ROOT = Path(__file__).resolve().parents[1]
TRANSPORTS = ("torch", "mpi")
TARGETS = {"bandwidth_64M": 4.0, "epoch": 2.0}


# ------------------------------------------------------------------------------- worker (under mpirun)

def worker(args) -> None:
    """Time every (op, size) on both transports in this mpirun job; rank 0 writes the points as JSON."""
    from spgnn.comm import launch
    from spgnn.comm.comm import Comm
    from spgnn.comm.mpi import MPITransport

    base = launch.init(transport="torch", timeout_s=1800)
    comms = {"torch": base, "mpi": Comm(base.rank, base.world_size, MPITransport())}
    points = []
    for op in calibrate.parse_ops(args.ops):
        for size in calibrate.parse_sizes(args.sizes):
            for name in TRANSPORTS:
                p = calibrate.measure(comms[name], op, size, args.repeats, budget_s=args.budget_s)
                points.append(p | {"op": op, "transport": name, "P": base.world_size,
                                   "gb_per_s": p["size_bytes"] / p["seconds"] / 1e9})
            if base.rank == 0:
                print(f"  P={base.world_size} {op:>14} {fmt_size(size):>5}: " + "  ".join(
                    f"{q['transport']} {q['gb_per_s']:.3f} GB/s" for q in points[-2:]), file=sys.stderr, flush=True)
    if base.rank == 0:
        Path(args.worker).write_text(json.dumps(points))
    launch.shutdown()


# ------------------------------------------------------------------------------- driver

def mpirun(P: int) -> list[str]:
    """mpirun for P ranks; --oversubscribe only when P exceeds the cores (it makes idle ranks yield the CPU,
    which costs a scheduler time slice per wait whenever other work is runnable)."""
    return ["mpirun", "--allow-run-as-root", "-np", str(P)] + (["--oversubscribe"] if P > os.cpu_count() else [])


def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=ROOT, text=True, stdout=subprocess.PIPE, timeout=timeout)
    if res.returncode:
        raise SystemExit(f"bench_collectives: failed ({res.returncode}): {shlex.join(cmd)}")
    return res


def bench_bandwidth(args) -> list[dict]:
    points = []
    for P in args.procs:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "points.json"
            run(mpirun(P) + [sys.executable, __file__, "--worker", str(out), "--sizes", args.sizes,
                          "--ops", args.ops, "--repeats", str(args.repeats), "--budget-s", str(args.budget_s)],
                timeout=args.timeout)
            points += json.loads(out.read_text())
    return points


def bench_epoch(args) -> dict:
    """Median epoch seconds of 1d-halo GCN training at P = 2 per transport (alternating runs)."""
    runs = {name: [] for name in TRANSPORTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.epoch_rounds):
            for name in TRANSPORTS:
                out = Path(tmp) / f"{name}{r}.json"
                cmd = mpirun(2) + [sys.executable, "-m", "spgnn", "train", "--algo", "1d-halo",
                                "--model", "gcn", "--dataset", args.epoch_dataset, "--hidden", str(args.hidden),
                                "--epochs", str(args.epochs), "--eval-every", "0", "--quiet", "--transport", name,
                                "--output", str(out)]
                run(cmd, timeout=args.timeout)
                report = json.loads(out.read_text())
                assert report["transport"] == name, report["transport"]
                runs[name].append({"median_epoch_s": report["median_epoch_s"],
                                   "epoch_s": [e["time_s"] for e in report["epochs"]],
                                   "comm_seconds_per_rank": [c["seconds"] for c in report["comm"]["per_rank"]],
                                   "sent_bytes_per_rank": [c["sent_bytes"] for c in report["comm"]["per_rank"]],
                                   "final_loss": report["final"]["loss"], "command": shlex.join(cmd)})
                print(f"  epoch {name}: {report['median_epoch_s']:.4f} s", file=sys.stderr, flush=True)
    median = {name: float(np.median([x["median_epoch_s"] for x in v])) for name, v in runs.items()}
    return {"dataset": args.epoch_dataset, "P": 2, "algo": "1d-halo", "model": "gcn", "hidden": args.hidden,
            "epochs": args.epochs, "runs": runs, "median_epoch_s": median,
            "speedup": median["torch"] / median["mpi"]}


# ------------------------------------------------------------------------------- report

def fmt_size(b: int) -> str:
    for unit, k in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k}{unit}"
    return str(b)


def bandwidth_table(points: list[dict]) -> str:
    """One row per (P, op, size): GB/s on each transport and their ratio."""
    by = {(p["P"], p["op"], p["size_bytes"], p["transport"]): p for p in points}
    lines = ["| P | collective | size | torch GB/s | mpi GB/s | mpi / torch |", "|---|---|---|---|---|---|"]
    for P, op, size in sorted({k[:3] for k in by}, key=lambda k: (k[0], calibrate.OPS.index(k[1]), k[2])):
        t, m = by[P, op, size, "torch"]["gb_per_s"], by[P, op, size, "mpi"]["gb_per_s"]
        lines.append(f"| {P} | {op} | {fmt_size(size)} | {t:.3f} | {m:.3f} | {m / t:.1f}× |")
    return "\n".join(lines)


def summary(points: list[dict], epoch: dict | None) -> tuple[str, list[str]]:
    """The largest size's GB/s per P and collective, and the target lines."""
    big = max(p["size_bytes"] for p in points)
    rows, targets = {}, []
    for p in points:
        if p["size_bytes"] == big:
            rows.setdefault((p["P"], p["transport"]), {})[p["op"]] = p["gb_per_s"]
    ops = [op for op in calibrate.OPS if any(op in r for r in rows.values())]
    lines = [f"| P | transport | {' | '.join(ops)} |", "|---|---|" + "---|" * len(ops)]
    for (P, name), r in sorted(rows.items()):
        lines.append(f"| {P} | {name} | " + " | ".join(f"{r[op]:.3f}" for op in ops) + " |")
    for (P, name), r in sorted(rows.items()):
        if name == "mpi":
            ratios = {op: r[op] / rows[P, "torch"][op] for op in ops}
            ok = all(v >= TARGETS["bandwidth_64M"] for v in ratios.values())
            targets.append(f"P={P}, {fmt_size(big)}: mpi/torch " + ", ".join(f"{op} {v:.1f}×" for op, v in
                                                                             ratios.items())
                           + f" (target ≥ {TARGETS['bandwidth_64M']:.0f}×: {'met' if ok else 'NOT met'})")
    if epoch:
        s = epoch["speedup"]
        targets.append(f"epoch, {epoch['algo']} {epoch['model']} on {epoch['dataset']}, P=2, hidden "
                       f"{epoch['hidden']}: torch {epoch['median_epoch_s']['torch']:.4f} s, mpi "
                       f"{epoch['median_epoch_s']['mpi']:.4f} s, {s:.2f}× (target ≥ {TARGETS['epoch']:.0f}×: "
                       f"{'met' if s >= TARGETS['epoch'] else 'NOT met'})")
    return "\n".join(lines), targets


def plot(points: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed: no plot (pip install 'spgnn[plot]')"
    ops = [op for op in calibrate.OPS if any(p["op"] == op for p in points)]
    fig, axes = plt.subplots(1, len(ops), figsize=(4 * len(ops), 3.6), sharey=True, squeeze=False)
    for ax, op in zip(axes[0], ops):
        for P, style in zip(sorted({p["P"] for p in points}), ("-", "--", ":", "-.")):
            for name, color in (("torch", "tab:blue"), ("mpi", "tab:orange")):
                pts = sorted((p["size_bytes"], p["gb_per_s"]) for p in points
                             if p["op"] == op and p["P"] == P and p["transport"] == name)
                ax.plot(*zip(*pts), style, color=color, marker="o", ms=3, label=f"{name} P={P}")
        ax.set(xscale="log", yscale="log", title=op, xlabel="message bytes per rank")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("payload GB/s per rank")
    axes[0][-1].legend(fontsize=8)
    machine.save_figure(fig, path)
    return f"plot written to {path}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", default="2,4", type=machine.ints(1), help="process counts P")
    p.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M", help="message bytes per rank")
    p.add_argument("--ops", default=",".join(calibrate.OPS), help="collectives")
    p.add_argument("--repeats", type=machine.at_least(1), default=5, help="timed calls per point (median)")
    p.add_argument("--budget-s", type=machine.at_least(0.0, float, above=True), default=4.0,
                   help="seconds per point after which 3 calls are enough")
    p.add_argument("--epoch-dataset", default="rmat:17", help="dataset of the epoch comparison")
    p.add_argument("--hidden", type=int, default=128, help="hidden width of the epoch comparison")
    p.add_argument("--epochs", type=machine.at_least(1), default=10, help="epochs per training run")
    p.add_argument("--epoch-rounds", type=machine.at_least(0), default=2, help="training runs per transport (0: skip)")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed to each mpirun job")
    p.add_argument("--out", default="results/bench_collectives.json", type=machine.output,
                   help="JSON path; the PNG goes next to it")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    machine.check_config(p, hidden=args.hidden, timeout=args.timeout)
    if args.epoch_rounds and not args.worker:
        machine.check_datasets(p, [args.epoch_dataset])
    try:                                                     # fail before starting anything
        calibrate.parse_sizes(args.sizes), calibrate.parse_ops(args.ops)
    except SpgnnError as e:
        p.error(str(e))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    from bench_epoch import cpu_busy_fraction

    busy = cpu_busy_fraction()
    if busy is not None and busy > 0.2:
        print(f"bench_collectives: warning: the CPUs were {busy:.0%} busy with other work just before starting",
              file=sys.stderr)
    started, t0 = datetime.now(UTC).isoformat(timespec="seconds"), time.perf_counter()
    points = bench_bandwidth(args)
    epoch = bench_epoch(args) if args.epoch_rounds > 0 else None
    table, targets = summary(points, epoch)
    print(f"Payload GB/s per rank at {fmt_size(max(p['size_bytes'] for p in points))}:\n\n{table}\n")
    print(f"All points:\n\n{bandwidth_table(points)}\n")
    print("Targets:\n" + "\n".join(targets))
    out = Path(args.out)
    write_json(out, {"command": shlex.join([sys.executable, *sys.argv]), "started_utc": started,
                               "wall_s": time.perf_counter() - t0, "options": vars(args), "cpu_busy_before": busy,
                               "targets": targets, "bandwidth": points, "epoch": epoch})
    print(f"\nJSON written to {out}\n{plot(points, out.with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
