"""Time to a fixed test accuracy from each peer library's initialisation, and against PyTorch Geometric.

    python benchmarks/bench_init.py [--dataset amazon-computers] [--data-dir DATA] [--models sage,gat,gcn]
        [--seeds 0,1,2] [--epochs 120] [--out results/bench_init.json]

Per model and seed, on one process, full-batch, the same split (the dataset's seeded per-class split), the same
hyper-parameters (Adam lr 0.01, weight decay 5e-4, dropout 0.5, row-normalised features), three runs go in
lockstep (epoch e of each before epoch e+1 of any, so that machine noise hits them alike):

* spgnn with ``--init pyg`` (PyTorch Geometric's initial parameters for the layer),
* spgnn with ``--init dgl`` (DGL's),
* PyG's own layers (GCNConv, SAGEConv, GATConv with PyG's initialisation; torch.optim.Adam).

A run's clock is its training time only (forward, backward, optimizer step; evaluation excluded). Its time to
target is the training seconds up to the first epoch whose test accuracy, averaged over the last ``--window``
epochs (it jumps by points from epoch to epoch with 20 training nodes a class), reaches the model's target
(``--targets``). Table 1 compares the two initialisations (``spgnn.layers.init.CHOSEN`` is set from it), table 2
spgnn with its chosen one against PyG. JSON to --out, test accuracy against seconds to the PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch
import torch.nn.functional as F
from bench_time_to_accuracy import curve, lockstep, reach

from spgnn.comm.comm import Comm
from spgnn.config import TrainConfig
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import row_normalize
from spgnn.graph.pyg import to_pyg
from spgnn.jsonfile import write_json
from spgnn.layers import CHOSEN
from spgnn.train.fullbatch import Trainer

SHAPES = {"gcn": dict(layers=2, hidden=128), "sage": dict(layers=3, hidden=256), "gat": dict(layers=2, hidden=8)}
RUN_KEYS = ("model", "seed", "system", "test_acc", "smoothed_test_acc", "train_s", "ms_per_epoch")  # a report's run


class PygRun:
    """PyG's layers in spgnn's structure (dropout before each layer; ReLU, or ELU for GAT, between), with
    `step(epoch)` and `evaluate()` as spgnn's Trainer has them."""

    def __init__(self, g, cfg: TrainConfig):
        from torch_geometric import nn as pyg

        torch.manual_seed(cfg.seed)
        data = to_pyg(g)
        self.x, self.edge_index, self.y = torch.from_numpy(row_normalize(g.x)), data.edge_index, data.y
        self.masks = {"train": data.train_mask, "val": data.val_mask, "test": data.test_mask}
        widths = [g.num_features] + [cfg.hidden] * (cfg.layers - 1) + [g.num_classes]
        if cfg.model == "gat":
            h = cfg.heads * cfg.hidden
            convs = [pyg.GATConv(g.num_features, cfg.hidden, cfg.heads, dropout=cfg.dropout)] + \
                [pyg.GATConv(h, cfg.hidden, cfg.heads, dropout=cfg.dropout) for _ in range(cfg.layers - 2)] + \
                [pyg.GATConv(h, g.num_classes, cfg.out_heads, concat=False, dropout=cfg.dropout)]
        else:
            cls = pyg.GCNConv if cfg.model == "gcn" else pyg.SAGEConv
            convs = [cls(a, b) for a, b in zip(widths[:-1], widths[1:])]
        self.convs, self.dropout = torch.nn.ModuleList(convs), cfg.dropout
        self.act = F.elu if cfg.model == "gat" else torch.relu
        self.opt = torch.optim.Adam(self.convs.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def forward(self):
        h = self.x
        for i, conv in enumerate(self.convs):
            h = conv(F.dropout(h, self.dropout, self.convs.training), self.edge_index)
            h = self.act(h) if i < len(self.convs) - 1 else h
        return h

    def step(self, epoch: int) -> float:
        self.convs.train()
        self.opt.zero_grad()
        m = self.masks["train"]
        loss = F.cross_entropy(self.forward()[m], self.y[m])
        loss.backward()
        self.opt.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self) -> dict:
        self.convs.eval()
        pred = self.forward().argmax(1)
        return {f"{k}_acc": float((pred[m] == self.y[m]).float().mean()) for k, m in self.masks.items()}


def median(values):
    """The median, None (never) counting as infinite; None when the median is."""
    m = float(np.median([np.inf if v is None else v for v in values]))
    return None if np.isinf(m) else m


def fmt(x, unit=""):
    return "never" if x is None else f"{x:.2f}{unit}"


def tables(runs: list[dict], models: list[str], targets: dict, args) -> None:
    """Table 1 (the two initialisations) and table 2 (spgnn against PyG), times to each model's target."""
    for r in runs:
        r["target"] = targets[r["model"]]
        r["epochs_to_target"], r["time_to_target_s"] = reach(r, r["target"])
    print(f"\n{args.dataset}, one process, full-batch, seeds {','.join(map(str, args.seeds))}, targets {targets}; "
          f"medians over seeds, a seed that never reached the target in {args.epochs} epochs counting as infinite "
          "('never')\n")
    print("Table 1: spgnn from each library's initialisation\n\n| model | target | init | epochs to target | "
          "s to target | test acc at the end | chosen |\n|---|---|---|---|---|---|---|")
    summary = {}
    for model in models:
        for s in ("pyg", "dgl"):
            mine = [r for r in runs if r["model"] == model and r["system"] == f"spgnn --init {s}"]
            summary[model, s] = median([r["time_to_target_s"] for r in mine])
            print(f"| {model} | {targets[model]:.2f} | {s} | {fmt(median([r['epochs_to_target'] for r in mine]))} | "
                  f"{fmt(summary[model, s])} | {np.median([r['test_acc'][-1] for r in mine]):.4f} | "
                  f"{'yes' if CHOSEN[model] == s else ''} |")
    print("\nTable 2: time to target, spgnn (its chosen initialisation) against PyG\n\n| model | spgnn s | PyG s | "
          "PyG / spgnn | spgnn ms/epoch | PyG ms/epoch |\n|---|---|---|---|---|---|")
    for model in models:
        ours = [r for r in runs if r["model"] == model and r["system"] == f"spgnn --init {CHOSEN[model]}"]
        theirs = [r for r in runs if r["model"] == model and r["system"] == "PyG"]
        a, b = median([r["time_to_target_s"] for r in ours]), median([r["time_to_target_s"] for r in theirs])
        print(f"| {model} | {fmt(a)} | {fmt(b)} | {fmt(b / a if a and b else None, '×')} | "
              f"{np.median([r['ms_per_epoch'] for r in ours]):.1f} | "
              f"{np.median([r['ms_per_epoch'] for r in theirs]):.1f} |")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=None, help="dataset spec (default: amazon-computers)")
    machine.data_option(p)
    p.add_argument("--models", default="sage,gat,gcn", type=machine.names(SHAPES, "a model"))
    p.add_argument("--targets", default="gcn:0.6,sage:0.75,gat:0.6", type=targets_option,
                   help="test accuracy to reach, per model")
    p.add_argument("--window", type=machine.at_least(1), default=None,
                   help="epochs in the trailing mean of the test accuracy (default: 5)")
    p.add_argument("--epochs", type=machine.at_least(1), default=120)
    p.add_argument("--seeds", default="0,1,2", type=machine.ints(0))
    p.add_argument("--threads", type=machine.at_least(1), default=None,
                   help="threads (torch and spgnn's kernels; default: all cores)")
    p.add_argument("--out", default="results/bench_init.json", type=machine.output)
    p.add_argument("--tables-from", default=None, metavar="JSON", help="tabulate the runs of an earlier --out at "
                   "--targets instead of running (its dataset and --window)")
    args = p.parse_args(argv)
    if args.tables_from:
        given = [o for o, v in (("--dataset", args.dataset), ("--window", args.window)) if v is not None]
        if given:
            p.error(f"--tables-from tabulates an earlier run as it was made: {' and '.join(given)} cannot change it")
        try:
            earlier = json.loads(Path(args.tables_from).read_text())
            args.dataset, args.runs = earlier["dataset"], earlier["runs"]
            for r in args.runs:                             # what tables() reads of each run
                missing = [k for k in RUN_KEYS if k not in r]
                if missing or r["model"] not in SHAPES:
                    raise KeyError(f"a run without {', '.join(missing)}" if missing else f"model {r['model']!r}")
            args.seeds, args.epochs = sorted({r["seed"] for r in args.runs}), len(args.runs[0]["test_acc"])
            args.models = list(dict.fromkeys(r["model"] for r in args.runs))
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            p.error(f"--tables-from {args.tables_from}: not a bench_init report ({type(e).__name__}: {e})")
    else:
        args.dataset, args.window = args.dataset or "amazon-computers", args.window or 5
        machine.check_datasets(p, [args.dataset], args.data_dir)
    missing = [m for m in args.models if m not in args.targets]
    if missing:
        p.error(f"--targets: no target for {', '.join(missing)} (give MODEL:ACCURACY for each model run)")
    return args


def targets_option(text: str) -> dict:
    """--targets: MODEL:ACCURACY items, comma-separated, as {model: accuracy}."""
    try:
        targets = {k: float(v) for k, v in (t.split(":") for t in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give MODEL:ACCURACY items, e.g. gcn:0.6,sage:0.75") from None
    bad = [f"{k}:{v}" for k, v in targets.items() if not 0 <= v <= 1]         # NaN fails too
    if bad:
        raise argparse.ArgumentTypeError(f"{bad[0]}: an accuracy lies in [0, 1]")
    return targets


def main(argv=None) -> int:
    args = parse_args(argv)
    targets = args.targets
    if args.tables_from:
        tables(args.runs, args.models, targets, args)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    models, seeds = args.models, args.seeds
    runs = []
    for model in models:
        for seed in seeds:
            g = load_dataset(args.dataset, args.data_dir, seed=seed)
            cfg = TrainConfig(model=model, seed=seed, epochs=args.epochs, eval_every=1, **SHAPES[model])
            systems = {f"spgnn --init {s}": Trainer(replace(cfg, init=s), Comm(0, 1), graph=g)
                       for s in ("pyg", "dgl")}
            systems["PyG"] = PygRun(g, cfg)
            t0 = time.perf_counter()
            curves = [curve(rec, args.window) for rec in lockstep(list(systems.values()), args.epochs)]
            for name, c in zip(systems, curves):
                runs.append({"model": model, "seed": seed, "system": name} | c)
                epochs, seconds = reach(c, targets[model])
                print(f"{model} seed {seed} {name:16}: {c['ms_per_epoch']:7.1f} ms/epoch, target "
                      f"{targets[model]:.2f} after {epochs} epochs, {fmt(seconds, ' s')}, last test acc "
                      f"{c['test_acc'][-1]:.4f}", flush=True)
            print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    tables(runs, models, targets, args)
    out = Path(args.out)
    write_json(out, {"argv": sys.argv, "dataset": args.dataset, "window": args.window, "shapes": SHAPES,
                               "targets": targets, "chosen": dict(CHOSEN), "runs": runs,
                               "machine": machine.facts()})
    print(f"\nwrote {out}")
    machine.plot_after("bench_init", out.with_suffix(".png"), plot, runs, models)
    return 0


def plot(runs, models, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    colours = {"spgnn --init pyg": "tab:blue", "spgnn --init dgl": "tab:orange", "PyG": "tab:gray"}
    for ax, model in zip(axes[0], models):
        for r in (r for r in runs if r["model"] == model):
            ax.plot(r["train_s"], r["smoothed_test_acc"], color=colours[r["system"]], lw=1,
                    label=r["system"] if r["seed"] == runs[0]["seed"] else None)
        ax.axhline(next(r["target"] for r in runs if r["model"] == model), color="k", ls=":", lw=1)
        ax.set_title(model)
        ax.set_xlabel("training seconds (evaluation excluded)")
        ax.set_ylabel("test accuracy (trailing mean)")
        ax.legend(fontsize=7)
    machine.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
