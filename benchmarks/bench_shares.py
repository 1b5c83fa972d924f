"""Memory per rank when each rank holds only its share: peak RSS and graph bytes against P.

    python benchmarks/bench_shares.py [--dataset rmat:20] [--P 1,2,4] [--algos 1d-halo,sar,1.5d,2d]
                                      [--epochs 2] [--out results/bench_shares.json]

The dataset is partitioned once per number of row blocks into a partitioned folder (in this process, the
only one that holds the whole graph), then for each algorithm and P a fresh set of P local processes
(``run_local``) trains GCN (2 layers, hidden 32) from the folder, each rank reading its part only. Per rank
it records the peak RSS over the whole run (loading and set-up included), the graph bytes it holds (blocks of
A, halo plans, feature rows, labels, masks, ids) and the saved-for-backward peak; beside them its share (the
bytes of its part's files) plus its halo (|R_p| rows of the features, f·4 bytes each). Prints a table, the
ratios the targets name (largest peak RSS at the largest P over P = 1; graph bytes over share + halo), and
writes JSON and a plot next to it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn import spmm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.partition.partition import make_partition
from spgnn.partition.partitioned import InMemoryParts, write_parts
from spgnn.train.fullbatch import Trainer

MODEL = {"model": "gcn", "layers": 2, "hidden": 32}


def _measure(comm, cfg: TrainConfig) -> dict:
    report = Trainer(cfg, comm).run(log=None)
    return {"memory": report["memory"]["per_rank"], "epoch_s": report["median_epoch_s"],
            "grid": report["grid"]["shape"]}


def _share_and_halo(folder: Path, part: int, f: int) -> int:
    """Bytes of part `part`'s files plus its halo rows of the features."""
    files = sum(p.stat().st_size for p in (folder / f"part-{part:05d}").glob("*.npy"))
    return files + int(np.load(folder / "block_stats.npz")["halo"][part].sum()) * f * 4


def run(args) -> list[dict]:
    g = load_dataset(args.dataset, seed=0)
    n, nnz, f = g.n, g.nnz, g.num_features
    root = Path(args.out).parent / "shares"
    folders = {}
    rows = []
    for P in args.P:
        for algo in args.algos:
            cls = spmm.get(algo)
            shape = cls.grid_for(P)
            B = cls.num_parts(shape)
            if B not in folders:
                folders[B] = root / f"{args.dataset.replace(':', '-')}-random-{B}"
                if not (folders[B] / "meta.json").is_file():
                    t0 = time.perf_counter()
                    write_parts(folders[B], InMemoryParts(g, make_partition("random", g.adj, B, seed=0)))
                    print(f"partitioned into {B} parts in {time.perf_counter() - t0:.0f} s", flush=True)
            cfg = TrainConfig(dataset=str(folders[B]), algo=algo, epochs=args.epochs, eval_every=0,
                              partition="random", **MODEL)
            t0 = time.perf_counter()
            r = run_local(_measure, P, cfg, timeout_s=3600)[0]
            parts = [cls.part_of(shape, tuple(int(x) for x in np.unravel_index(rank, shape))) for rank in range(P)]
            mem = r["memory"]
            rows.append({"algo": algo, "P": P, "grid": "x".join(map(str, shape)), "parts": B,
                         "peak_rss_bytes": [m["peak_rss_bytes"] for m in mem],
                         "graph_bytes": [m["graph_bytes"] for m in mem],
                         "saved_bytes": [m["saved_for_backward_bytes"] for m in mem],
                         "share_plus_halo_bytes": [_share_and_halo(folders[B], p, f) for p in parts],
                         "epoch_s": r["epoch_s"], "wall_s": time.perf_counter() - t0})
            x = rows[-1]
            print(f"{algo:8s} P={P} grid {x['grid']:6s} peak RSS {max(x['peak_rss_bytes']) / 2**20:7.0f} MiB  graph "
                  f"{max(x['graph_bytes']) / 2**20:7.1f} MiB  share+halo {max(x['share_plus_halo_bytes']) / 2**20:7.1f}"
                  f" MiB  epoch {x['epoch_s']:.2f} s", flush=True)
    del g
    return rows, {"n": n, "nnz": nnz, "features": f}


def table(rows: list[dict]) -> tuple[str, dict]:
    base = {r["algo"]: max(r["peak_rss_bytes"]) for r in rows if r["P"] == 1}
    lines = ["| algo | P | grid | peak RSS MiB/rank (max) | × P=1 | graph MiB/rank (max) | graph / (share + halo) "
             "(max) | saved MiB/rank (max) | epoch s |", "|---|---|---|---|---|---|---|---|---|"]
    targets = {}
    for r in rows:
        rss, ratio = max(r["peak_rss_bytes"]), max(np.divide(r["graph_bytes"], r["share_plus_halo_bytes"]))
        rel = rss / base[r["algo"]] if r["algo"] in base else None     # None: P = 1 not run
        targets[f"{r['algo']}/P={r['P']}"] = {"peak_rss_over_P1": rel, "graph_over_share_plus_halo": float(ratio)}
        lines.append(f"| {r['algo']} | {r['P']} | {r['grid']} | {rss / 2**20:.0f} | "
                     f"{'–' if rel is None else f'{rel:.2f}'} | "
                     f"{max(r['graph_bytes']) / 2**20:.1f} | {ratio:.2f} | {max(r['saved_bytes']) / 2**20:.1f} | "
                     f"{r['epoch_s']:.2f} |")
    return "\n".join(lines), targets


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for algo in dict.fromkeys(r["algo"] for r in rows):
        pts = [(r["P"], max(r["peak_rss_bytes"]) / 2**20, max(r["graph_bytes"]) / 2**20) for r in rows
               if r["algo"] == algo]
        Ps, rss, graph = zip(*pts)
        axes[0].plot(Ps, rss, marker="o", label=algo)
        axes[1].plot(Ps, graph, marker="o", label=algo)
    for ax, what in zip(axes, ("peak RSS, MiB/rank (max)", "graph bytes, MiB/rank (max)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("P")
        ax.set_ylabel(what)
        ax.legend(fontsize=7)
    machine.save_figure(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="rmat:20")
    p.add_argument("--P", default="1,2,4", type=machine.ints(1))
    p.add_argument("--algos", default="1d-halo,sar,1.5d,2d", type=machine.names(spmm.ALGORITHMS, "an algorithm"))
    p.add_argument("--epochs", type=machine.at_least(1), default=2)
    p.add_argument("--out", default="results/bench_shares.json", type=machine.output)
    args = p.parse_args(argv)
    machine.check_datasets(p, [args.dataset])
    t0 = time.perf_counter()
    rows, graph = run(args)
    text, targets = table(rows)
    out = Path(args.out)
    write_json(out, {"args": vars(args), "graph": graph, "model": MODEL, "rows": rows, "targets": targets,
                               "machine": machine.facts(), "wall_s": time.perf_counter() - t0})
    plot(rows, out.with_suffix(".png"))
    print(text)
    print(f"\nwrote {out} and {out.with_suffix('.png')} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
