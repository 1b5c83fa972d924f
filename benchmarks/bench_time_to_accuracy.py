"""Time to a fixed test accuracy: sampled minibatch training (spgnn.train.minibatch) against full-batch training
(spgnn.Trainer), the same GraphSAGE model (layers, hidden width, dropout, Adam), one process, CPU.

The runs of a seed go in lockstep (epoch e of every run before epoch e+1 of any), so that load changes on a
shared machine hit them alike. Every run evaluates after every epoch; the clock is the training time only (the
sum of the epochs' `time_s`: sampling, feature gather, forward, backward, optimizer step; full-graph evaluation
excluded for both). Test
accuracy jumps by a few points from epoch to epoch on a 200-node training set, so curves are smoothed: acc_t is
the mean test accuracy of epochs t−`--window`+1 … t. The plateau of a run is its mean test accuracy over the last
`--window`·4 epochs; the target is the full-batch plateau minus `--margin` points, and a run's time to target
is its training seconds up to the first epoch whose smoothed accuracy reaches it.

    python benchmarks/bench_time_to_accuracy.py [--dataset amazon-computers] [--data-dir DATA]
        [--sampler sage:15,10] [--batch-sizes 200,50] [--bulk 8] [--hidden 128] [--epochs 200] [--seeds 0,1]
        [--out results/bench_time_to_accuracy.json]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn.comm.comm import Comm
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.sampling.sampler import parse_sampler
from spgnn.train.fullbatch import Trainer
from spgnn.train.minibatch import MinibatchTrainer


def lockstep(trainers: list, epochs: int) -> list[list[dict]]:
    """Per trainer, its epoch records ({"time_s": training seconds, accuracies}), epoch e of every trainer run
    before epoch e+1 of any; `step(e)` is the full-batch Trainer's epoch, `epoch(e)` the minibatch one's."""
    records = [[] for _ in trainers]
    for e in range(epochs):
        for t, rec in zip(trainers, records):
            t0 = time.perf_counter()
            (t.epoch if isinstance(t, MinibatchTrainer) else t.step)(e)
            rec.append({"time_s": time.perf_counter() - t0} | t.evaluate())
    return records


def curve(eps: list[dict], window: int) -> dict:
    """Cumulative training seconds, test/val accuracy and smoothed test accuracy (trailing mean of `window`)
    after each epoch, the plateau (mean test accuracy of the last 4·window epochs), the best-validation epoch."""
    acc = np.array([e["test_acc"] for e in eps])
    c, t = np.concatenate([[0.0], np.cumsum(acc)]), np.arange(1, len(acc) + 1)
    smooth = (c[t] - c[np.maximum(t - window, 0)]) / np.minimum(t, window)
    times = [e["time_s"] for e in eps]
    return {"train_s": np.cumsum(times).tolist(), "test_acc": acc.tolist(), "smoothed_test_acc": smooth.tolist(),
            "val_acc": [e["val_acc"] for e in eps], "best": max(eps, key=lambda e: e["val_acc"]),
            "plateau": float(acc[-4 * window:].mean()), "ms_per_epoch": 1e3 * float(np.median(times))}


def reach(run: dict, target: float) -> tuple:
    """(epochs, training seconds) until the smoothed test accuracy first reaches `target` ((None, None): never)."""
    hit = np.flatnonzero(np.asarray(run["smoothed_test_acc"]) >= target)
    return (int(hit[0]) + 1, run["train_s"][hit[0]]) if len(hit) else (None, None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="amazon-computers")
    machine.data_option(p)
    p.add_argument("--sampler", default="sage:15,10", help="minibatch runs' --sampler (its length sets the layers)")
    p.add_argument("--batch-sizes", default="200,50", type=machine.ints(1), help="one minibatch run per batch size")
    p.add_argument("--bulk", type=machine.at_least(1), default=8)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--epochs", type=machine.at_least(1), default=200)
    p.add_argument("--margin", type=float, default=1.0, help="target = full-batch plateau minus this many points")
    p.add_argument("--window", type=machine.at_least(1), default=5,
                   help="epochs in the trailing mean of the test accuracy")
    p.add_argument("--seeds", default="0", type=machine.ints(0))
    p.add_argument("--out", default="results/bench_time_to_accuracy.json", type=machine.output)
    args = p.parse_args(argv)
    machine.check_datasets(p, [args.dataset], args.data_dir)
    machine.check_config(p, hidden=args.hidden, dropout=args.dropout, lr=args.lr)
    if not math.isfinite(args.margin):
        p.error(f"--margin must be a number of points, got {args.margin}")
    try:
        layers = len(parse_sampler(args.sampler)[1])
    except SpgnnError as e:
        p.error(str(e))
    runs = []
    for seed in args.seeds:
        g = load_dataset(args.dataset, args.data_dir, seed=seed)
        cfg = TrainConfig(dataset=args.dataset, data_dir=args.data_dir, model="sage", layers=layers,
                          hidden=args.hidden, dropout=args.dropout, lr=args.lr, epochs=args.epochs, seed=seed,
                          eval_every=1)
        sizes = args.batch_sizes
        try:                        # e.g. a batch larger than the training set: one line, before the first epoch
            trainers = [Trainer(cfg, Comm(0, 1), graph=g)] + \
                [MinibatchTrainer(cfg, Comm(0, 1), args.sampler, b, args.bulk, graph=g) for b in sizes]
        except SpgnnError as e:
            p.error(str(e))
        curves = [curve(rec, args.window) for rec in lockstep(trainers, args.epochs)]
        target = curves[0]["plateau"] - args.margin / 100
        for b, c in zip([None] + sizes, curves):
            r = {"seed": seed, "system": f"minibatch {args.sampler}" if b else "full-batch", "batch_size": b,
                 "target": target} | c
            runs.append(r)
            r["epochs_to_target"], r["time_to_target_s"] = reach(r, target)
            print(f"seed {seed} {r['system']:22} batch {r['batch_size']}: plateau {r['plateau']:.4f}, "
                  f"target {target:.4f} after {r['epochs_to_target']} epochs, {r['time_to_target_s']} s, "
                  f"{r['ms_per_epoch']:.1f} ms/epoch (median)", flush=True)
    print(f"\n{args.dataset}, GraphSAGE {layers} layers hidden {args.hidden}, one process; target = full-batch "
          f"plateau − {args.margin} point(s); accuracies smoothed over {args.window} epochs\n")
    print("| seed | system | batch | ms/epoch (median) | plateau test acc | best-val test acc | epochs to target | "
          "s to target | full-batch s / this |\n|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        base = next(f["time_to_target_s"] for f in runs if f["seed"] == r["seed"] and f["system"] == "full-batch")
        t = r["time_to_target_s"]
        ratio = f"{base / t:.2f}×" if t and base else ("never reached" if t is None else "")
        print(f"| {r['seed']} | {r['system']} | {r['batch_size'] or 'all'} | {r['ms_per_epoch']:.1f}"
              f" | {r['plateau']:.4f} | {r['best']['test_acc']:.4f} | {r['epochs_to_target'] or '–'} | "
              f"{'–' if t is None else f'{t:.2f}'} | {ratio} |")
    out = Path(args.out)
    write_json(out, {"argv": sys.argv, "dataset": args.dataset, "hidden": args.hidden, "layers": layers,
                               "runs": runs, "machine": machine.facts()})
    plot(runs, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def plot(runs, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        ax.plot(r["train_s"], r["smoothed_test_acc"],
                label=f"{r['system']} batch {r['batch_size'] or 'all'} (seed {r['seed']})")
    for target in sorted({r["target"] for r in runs}):
        ax.axhline(target, color="gray", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel("test accuracy (trailing mean)")
    ax.legend(fontsize=7)
    machine.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
