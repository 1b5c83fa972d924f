"""Link prediction's quality against GAE (Kipf & Welling, 2016): a 2-layer GCN encoder and the dot-product decoder
on Cora with 85/5/10 edge splits, full-batch BCE over the training positives and as many negatives, each node's
pair with itself a positive too (GAE's target is A + I; --self-pairs off leaves them out), lr 0.01, no dropout, no
weight decay, the features as given, one process, CPU (spgnn.train.link.LinkTrainer). GAE reports a
test ROC-AUC of 91.0 (AP 92.0). The figures are those of the last epoch, as GAE reports them; a table, a JSON and
a plot of the validation and test ROC-AUC per epoch, each seed a line.

    python benchmarks/bench_link.py [--hidden 32] [--embedding 16] [--feature-norm none] [--init auto] [--epochs 200]
        [--seeds 0,1,2] [--decoder dot] [--self-pairs on] [--out results/bench_link.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn.comm.comm import Comm
from spgnn.config import TrainConfig
from spgnn.jsonfile import write_json
from spgnn.train.link import LinkTrainer

GAE = {"test_rocauc": 0.910, "test_ap": 0.920}


def run(seed: int, args) -> list[dict]:
    """The per-epoch records ({"epoch", "loss", "<split>_rocauc", "<split>_ap"}) of one seed."""
    cfg = TrainConfig(dataset="cora", task="link", model="gcn", layers=2, hidden=args.hidden,
                      embedding=args.embedding, dropout=0.0, weight_decay=0.0, lr=args.lr, epochs=args.epochs,
                      seed=seed, feature_norm=args.feature_norm, init=args.init, cache_dir=args.cache_dir,
                      decoder=args.decoder, self_pairs=args.self_pairs, val_edges=0.05, test_edges=0.10)
    t = LinkTrainer(cfg, Comm(0, 1))
    return [{"epoch": e, "loss": t.epoch(e)} | t.evaluate() for e in range(args.epochs)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=32, help="the first layer's width (GAE's: 32)")
    p.add_argument("--embedding", type=int, default=16, help="the embedding's width (GAE's: 16)")
    p.add_argument("--feature-norm", default="none", choices=["none", "row"])
    p.add_argument("--init", default="auto")
    p.add_argument("--epochs", type=machine.at_least(1), default=200)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seeds", default="0,1,2", type=machine.ints(0))
    p.add_argument("--decoder", default="dot", choices=["dot", "mlp"])
    p.add_argument("--self-pairs", default="on", choices=["on", "off"], help="train (u, u) as positives (GAE's A + I)")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--out", default="results/bench_link.json", type=machine.output)
    args = p.parse_args(argv)
    if len(set(args.seeds)) < len(args.seeds):
        p.error(f"--seeds {','.join(map(str, args.seeds))}: a seed given twice (each seed is one run)")
    machine.check_config(p, task="link", model="gcn", hidden=args.hidden, embedding=args.embedding, lr=args.lr,
                         init=args.init, decoder=args.decoder, self_pairs=args.self_pairs,
                         feature_norm=args.feature_norm)
    runs = {seed: run(seed, args) for seed in args.seeds}
    final = {seed: r[-1] for seed, r in runs.items()}
    print(f"{'seed':>6} {'val ROC-AUC':>12} {'test ROC-AUC':>13} {'test AP':>8}")
    for seed, f in final.items():
        print(f"{seed:>6} {100 * f['val_rocauc']:12.2f} {100 * f['test_rocauc']:13.2f} {100 * f['test_ap']:8.2f}")
    mean = {k: float(np.mean([f[k] for f in final.values()])) for k in ("val_rocauc", "test_rocauc", "test_ap")}
    std = {k: float(np.std([f[k] for f in final.values()])) for k in mean}
    print(f"{'mean':>6} {100 * mean['val_rocauc']:12.2f} {100 * mean['test_rocauc']:13.2f} "
          f"{100 * mean['test_ap']:8.2f}   (GAE: test ROC-AUC {100 * GAE['test_rocauc']:.1f}, "
          f"AP {100 * GAE['test_ap']:.1f}; {100 * (mean['test_rocauc'] - GAE['test_rocauc']):+.2f} points)")
    out = Path(args.out)
    write_json(out, {"machine": machine.facts(), "argv": sys.argv[1:], "args": vars(args), "gae": GAE,
                               "mean": mean, "std": std, "final": final, "runs": runs})
    print(f"wrote {out}", file=sys.stderr)
    machine.plot_after("bench_link", out.with_suffix(".png"), plot, runs, args)
    return 0


def plot(runs: dict, args, path: Path) -> None:
    """Each seed's validation and test ROC-AUC per epoch, GAE's test figure a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for seed, r in runs.items():
        ax.plot([e["epoch"] for e in r], [e["test_rocauc"] for e in r], label=f"seed {seed} test")
        ax.plot([e["epoch"] for e in r], [e["val_rocauc"] for e in r], ls="--", label=f"seed {seed} val")
    ax.axhline(GAE["test_rocauc"], color="k", lw=0.8, label="GAE (test)")
    ax.set(title=f"GCN + {args.decoder} on Cora, widths {args.hidden}, {args.embedding}", xlabel="epoch",
           ylabel="ROC-AUC", ylim=(0.5, 1.0))
    ax.legend(fontsize=7)
    machine.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
