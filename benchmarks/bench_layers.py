"""Every built-in layer against PyTorch Geometric's layer of the same name, at P = 1 on CPU, in one run.

    python benchmarks/bench_layers.py [--dataset amazon-computers] [--data-dir DATA] [--epochs 50]
        [--models gcn,sage,gat,gin,appnp,gcnii] [--pyg-cached] [--quick]
        [--output results/bench_layers.json] [--plot results/bench_layers.png]

Per layer kind, spgnn's model of ``spgnn train --model NAME`` (`Trainer`, ``Comm(0, 1)``, algo "1d-halo") and its
PyG twin, built from PyG's layer of the same name with spgnn's initial weights copied into it (spgnn holds a
weight f_in×f_out, PyG's Linear f_out×f_in):

    gcn    GCNConv                           sage   SAGEConv(aggr="mean")
    gat    GATConv (heads concatenated, last layer's averaged; ELU between)
    gin    GINConv(Linear → ReLU → Linear, train_eps=True)
    appnp  Linear → ReLU → Linear → APPNP(K, alpha)
    gcnii  Linear → ReLU → GCN2Conv × L (ReLU after each, x_0 the first Linear's output) → Linear

Both get the same row-normalised features, split, dropout (default 0: then both compute the same function and
train alike; with dropout > 0 the masks differ), Adam (lr 0.01, weight decay 5e-4) and full-batch cross-entropy,
and train for --epochs epochs, one epoch of spgnn then one of PyG, alternately (`bench_epoch.time_interleaved`),
so that machine noise falls on both alike. Reported: median seconds per epoch (forward + backward + Adam step;
evaluation excluded), PyG / spgnn (> 1: spgnn faster), the test accuracy of each after the last epoch and their
difference in points, and the largest difference of the initial logits (a check that the weights were copied).
Targets: spgnn no slower than PyG for any layer, test accuracy within 1 point. ``--pyg-cached``: PyG's GCNConv,
APPNP and GCN2Conv cache their normalised adjacency (``cached=True``) instead of recomputing it every call.

Output: a Markdown table and the targets on stdout, every epoch time, loss and accuracy with the command and the
machine to --output (JSON), bars of s/epoch and test accuracy to --plot (PNG).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch
import torch.nn.functional as F
from bench_epoch import cpu_busy_fraction, time_interleaved
from bench_init import PygRun

from spgnn.comm.comm import Comm
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import row_normalize
from spgnn.graph.pyg import to_pyg
from spgnn.jsonfile import write_json
from spgnn.layers import APPNP, GATConv, GCN2Conv, GCNConv, GINConv, Linear, SAGEConv
from spgnn.train.fullbatch import Trainer

MODELS = ("gcn", "sage", "gat", "gin", "appnp", "gcnii")
SHAPES = {"gcn": dict(layers=2, hidden=64), "sage": dict(layers=2, hidden=64), "gin": dict(layers=2, hidden=64),
          "gat": dict(layers=2, hidden=16, heads=4, out_heads=1),
          "appnp": dict(layers=2, hidden=64, steps=10, alpha=0.1),
          "gcnii": dict(layers=8, hidden=64, alpha=0.1, theta=0.5)}
ACC_POINTS = 1.0          # target: |spgnn − PyG| test accuracy within this many points


# ------------------------------------------------------------------------------------- the PyG twin


def pyg_layer(layer, cfg: TrainConfig, cached: bool, depth: int) -> torch.nn.Module:
    """PyG's layer of the same kind as spgnn's `layer`, holding `layer`'s parameters (copies); `depth`: the
    layer's 1-based index among the model's GCN2Conv layers."""
    from torch_geometric import nn as pyg

    t = lambda p: p.detach().T       # noqa: E731  (spgnn f_in×f_out → torch Linear's f_out×f_in)
    if isinstance(layer, GCNConv):
        m = pyg.GCNConv(layer.f_in, layer.f_out, cached=cached)
        pairs = [(m.lin.weight, t(layer.weight)), (m.bias, layer.bias)]
    elif isinstance(layer, SAGEConv):
        m = pyg.SAGEConv(layer.f_in, layer.f_out, aggr="mean")
        pairs = [(m.lin_l.weight, t(layer.weight_neigh)), (m.lin_l.bias, layer.bias),
                 (m.lin_r.weight, t(layer.weight_self))]
    elif isinstance(layer, GATConv):
        m = pyg.GATConv(layer.f_in, layer.channels, layer.heads, concat=layer.concat,
                        negative_slope=layer.negative_slope, dropout=cfg.dropout)
        pairs = [(m.lin.weight, t(layer.weight)), (m.att_src, layer.att_src[None]), (m.att_dst, layer.att_dst[None]),
                 (m.bias, layer.bias)]
    elif isinstance(layer, GINConv):
        mlp = torch.nn.Sequential(torch.nn.Linear(layer.f_in, layer.f_out), torch.nn.ReLU(),
                                  torch.nn.Linear(layer.f_out, layer.f_out))
        m = pyg.GINConv(mlp, train_eps=True)
        pairs = [(mlp[0].weight, t(layer.weight1)), (mlp[0].bias, layer.bias1), (mlp[2].weight, t(layer.weight2)),
                 (mlp[2].bias, layer.bias2), (m.eps, layer.eps)]
    elif isinstance(layer, APPNP):
        m, pairs = pyg.APPNP(layer.steps, layer.alpha, cached=cached), []
    elif isinstance(layer, GCN2Conv):
        m = pyg.GCN2Conv(layer.f_in, layer.alpha, cfg.theta, depth, shared_weights=True, cached=cached)
        if not math.isclose(m.beta, layer.beta):
            raise SpgnnError(f"GCN2Conv {depth}: PyG's beta {m.beta} differs from spgnn's {layer.beta}")
        pairs = [(m.weight1, layer.weight)]              # both multiply x @ W: no transpose
    elif isinstance(layer, Linear):
        m = torch.nn.Linear(layer.f_in, layer.f_out, bias=layer.bias is not None)
        pairs = [(m.weight, t(layer.weight))] + ([(m.bias, layer.bias)] if layer.bias is not None else [])
    else:
        raise SpgnnError(f"bench_layers has no PyG twin for {type(layer).__name__}")
    with torch.no_grad():
        for mine, theirs in pairs:
            mine.copy_(theirs)
    if sum(p.numel() for p in m.parameters()) != sum(p.numel() for p in layer.parameters()):
        raise SpgnnError(f"the PyG twin of {type(layer).__name__} has other parameters than spgnn's")
    return m


class PygTwin(PygRun):
    """spgnn's model rebuilt from PyG's layers with its weights, in its structure (dropout before each layer that
    takes it, each layer's activation after all but the last, x_0 the first layer's output); `step` and
    `evaluate` are `bench_init.PygRun`'s."""

    def __init__(self, g, cfg: TrainConfig, model, cached: bool):
        data = to_pyg(g)
        self.x, self.edge_index, self.y = torch.from_numpy(row_normalize(g.x)), data.edge_index, data.y
        self.masks = {"train": data.train_mask, "val": data.val_mask, "test": data.test_mask}
        depths = np.cumsum([isinstance(layer, GCN2Conv) for layer in model.layers])
        self.convs = torch.nn.ModuleList(pyg_layer(layer, cfg, cached, int(d))
                                         for layer, d in zip(model.layers, depths))
        self.layers, self.dropout = list(model.layers), cfg.dropout
        self.opt = torch.optim.Adam(self.convs.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def forward(self):
        h, h0, n = self.x, None, len(self.convs)
        for i, (conv, layer) in enumerate(zip(self.convs, self.layers)):
            if self.dropout > 0 and layer.dropout_before:
                h = F.dropout(h, self.dropout, self.convs.training)
            if isinstance(conv, torch.nn.Linear):
                h = conv(h)
            else:
                h = conv(h, h0, self.edge_index) if layer.initial else conv(h, self.edge_index)
            if i < n - 1 and layer.activation is not None:
                h = layer.activation(h)
            if i == 0:
                h0 = h
        return h


# ------------------------------------------------------------------------------------------- one layer


def bench_model(g, name: str, args) -> dict:
    """spgnn's and PyG's `name` model trained side by side from the same weights for args.epochs epochs."""
    cfg = TrainConfig(dataset=g.name, model=name, algo="1d-halo", dropout=args.dropout, lr=args.lr,
                      weight_decay=args.weight_decay, epochs=args.epochs, seed=args.seed, **SHAPES[name])
    trainer = Trainer(cfg, Comm(0, 1), graph=g)
    twin = PygTwin(g, cfg, trainer.model, args.pyg_cached)
    with torch.no_grad():                                    # the same function at the start?
        trainer.model.eval()
        twin.convs.eval()
        start_diff = float((trainer.logits() - twin.forward()[trainer.node_ids]).abs().max())
    losses = {"spgnn": [], "pyg": []}
    epochs = {"spgnn": iter(range(args.epochs)), "pyg": iter(range(args.epochs))}
    systems = {"spgnn": lambda: losses["spgnn"].append(trainer.step(next(epochs["spgnn"]))),
               "pyg": lambda: losses["pyg"].append(twin.step(next(epochs["pyg"])))}
    times = time_interleaved(systems, 0, args.epochs, math.inf)
    acc = {"spgnn": trainer.evaluate(), "pyg": twin.evaluate()}
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"model": name, "shape": SHAPES[name], "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "initial_logits_max_abs_diff": start_diff, "times_s": times, "median_s": med,
            "pyg_over_spgnn": med["pyg"] / med["spgnn"], "accuracy": acc, "losses": losses,
            "test_acc_diff_points": 100 * (acc["spgnn"]["test_acc"] - acc["pyg"]["test_acc"])}


# --------------------------------------------------------------------------------------------- report


def table(rows: list[dict]) -> str:
    lines = ["| layer | spgnn s/epoch | PyG s/epoch | PyG / spgnn | spgnn test acc | PyG test acc | Δ points | "
             "initial max abs Δ logit |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['median_s']['spgnn']:.4f} | {r['median_s']['pyg']:.4f} | "
                     f"{r['pyg_over_spgnn']:.2f}× | {r['accuracy']['spgnn']['test_acc']:.4f} | "
                     f"{r['accuracy']['pyg']['test_acc']:.4f} | {round(r['test_acc_diff_points'], 2) + 0.0:+.2f} | "
                     f"{r['initial_logits_max_abs_diff']:.1e} |")
    return "\n".join(lines)


def target_lines(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        ratio, d = r["pyg_over_spgnn"], round(r["test_acc_diff_points"], 2) + 0.0
        speed = "met" if ratio >= 1 else f"MISSED: spgnn {1 / ratio:.2f}× slower than PyG"
        acc = "met" if abs(d) <= ACC_POINTS else f"MISSED by {abs(d) - ACC_POINTS:.2f} points"
        lines.append(f"- {r['model']}: spgnn no slower than PyG ({r['median_s']['spgnn']:.4f} s against "
                     f"{r['median_s']['pyg']:.4f} s): {speed}; test accuracy within {ACC_POINTS:g} point "
                     f"({d:+.2f}): {acc}")
    return lines


def plot(rows: list[dict], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, x, w = [r["model"] for r in rows], np.arange(len(rows)), 0.38
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((ax_t, lambda r, s: r["median_s"][s], "s/epoch (median)"),
                           (ax_a, lambda r, s: r["accuracy"][s]["test_acc"], "test accuracy after the last epoch")):
        for k, (system, colour, legend) in enumerate((("spgnn", "tab:green", "spgnn"), ("pyg", "tab:gray", "PyG"))):
            values = [key(r, system) for r in rows]
            bars = ax.bar(x + (k - 0.5) * w, values, w, color=colour, label=legend)
            ax.bar_label(bars, [f"{v:.3f}" for v in values], fontsize=6)
        ax.set_xticks(x, names)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    ax_t.set_title("epoch time (lower is better)", fontsize=9)
    ax_a.set_title("test accuracy, same initial weights", fontsize=9)
    ax_a.set_ylim(0, 1)
    fig.suptitle(title, fontsize=9)
    machine.save_figure(fig, path)


# ----------------------------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default=None, help="dataset spec (default: amazon-computers; cora with --quick)")
    machine.data_option(p)
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated layer kinds")
    p.add_argument("--epochs", type=machine.at_least(1), default=None,
                   help="training epochs of each model, all timed (default: 50; 5 with --quick)")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="dropout of both (default 0: > 0 draws different masks in spgnn and PyG)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0, help="the split's and spgnn's initial weights' seed")
    p.add_argument("--pyg-cached", action="store_true",
                   help="PyG's GCNConv, APPNP and GCN2Conv with cached=True (normalisation computed once)")
    p.add_argument("--threads", type=machine.at_least(1), default=None,
                   help="threads (torch and spgnn's kernels; default: as started)")
    p.add_argument("--quick", action="store_true", help="smoke run: cora, 5 epochs (unless --dataset, --epochs say "
                   "otherwise)")
    p.add_argument("--output", default="results/bench_layers.json", type=machine.writable, help="JSON path")
    p.add_argument("--plot", default="results/bench_layers.png", type=machine.writable, help="PNG path")
    args = p.parse_args(argv)
    if Path(args.plot).suffix.lower() != ".png":
        p.error(f"--plot {args.plot}: give a .png path (the plot is a PNG)")
    if Path(args.plot).resolve() == Path(args.output).resolve():
        p.error(f"--plot {args.plot} is --output too: the plot would overwrite the report")
    if args.dataset is None:                            # --quick fills in what was not given
        args.dataset = "cora" if args.quick else "amazon-computers"
    if args.epochs is None:
        args.epochs = 5 if args.quick else 50
    machine.check_datasets(p, [args.dataset], args.data_dir)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in SHAPES]
    if unknown:
        p.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    machine.check_config(p, dropout=args.dropout, lr=args.lr, weight_decay=args.weight_decay)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        g = load_dataset(args.dataset, args.data_dir, seed=args.seed)
    except SpgnnError as e:
        print(f"bench_layers: {e}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)       # spgnn's kernels run on torch's threads
    busy = cpu_busy_fraction()
    if busy is not None and busy > 0.2:
        print(f"bench_layers: warning: the CPUs were {busy:.0%} busy with other work just before starting; the "
              f"interleaving spreads that noise over spgnn and PyG alike", file=sys.stderr)
    started, load_before, t_start = datetime.now(UTC).isoformat(timespec="seconds"), os.getloadavg(), \
        time.perf_counter()
    rows = []
    for name in args.models:
        print(f"[{time.perf_counter() - t_start:6.1f} s] {name} …", file=sys.stderr, flush=True)
        rows.append(r := bench_model(g, name, args))
        print(f"           {name}: spgnn {r['median_s']['spgnn']:.4f} s/epoch, PyG {r['median_s']['pyg']:.4f}, test "
              f"acc {r['accuracy']['spgnn']['test_acc']:.4f} / {r['accuracy']['pyg']['test_acc']:.4f}",
              file=sys.stderr, flush=True)
    title = (f"{g.name}: n = {g.n:,}, nnz(A) = {g.nnz:,}, {g.num_features} features; P = 1, {args.epochs} epochs, "
             f"dropout {args.dropout:g}, PyG {'cached' if args.pyg_cached else 'uncached'}")
    print(f"\n### {title}\n\n{table(rows)}\n\nTargets:\n" + "\n".join(target_lines(rows)))
    out = Path(args.output)
    host = machine.facts() | {"loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                         "cpu_busy_fraction_before": busy}
    report = {"command": shlex.join([sys.executable, *sys.argv]), "argv": sys.argv, "started_utc": started,
              "wall_s": time.perf_counter() - t_start, "options": vars(args), "machine": host,
              "graph": {"name": g.name, "n": g.n, "nnz_A": g.nnz, "features": g.num_features,
                        "classes": g.num_classes, "train_nodes": int(g.train_mask.sum())},
              "targets": target_lines(rows), "layers": rows}
    write_json(out, report)
    print(f"\nJSON written to {out}")
    machine.plot_after("bench_layers", Path(args.plot), plot, rows, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
