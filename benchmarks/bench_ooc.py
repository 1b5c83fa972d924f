"""Out-of-core partitioning: peak memory against the size of the graph it partitions.

    python benchmarks/bench_ooc.py [--dataset rmat:19] [--nparts 8] [--methods block,random,ldg,fennel]
                                   [--chunk 262144] [--out results/bench_ooc.json]

Writes the dataset once as an edge-list folder (edges.npy with each undirected edge once, features.npy,
labels.npy), then partitions it with ``spgnn partition --out-of-core`` into a partitioned folder, each method
in a fresh process, and records the process's peak RSS growth over its start (`spgnn.memory.rss_growth`)
beside the bytes of the folder it read. Prints a table, writes JSON and a bar chart next to it. A method whose
process fails is one line (that process's own last error line) and the others are still measured and written; the
exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import scipy.sparse as sp

from spgnn.jsonfile import write_json
from spgnn.partition.ooc import METHODS

MEASURE = """
import json, sys, time
from spgnn.memory import rss_growth
from spgnn.partition.ooc import partition_edge_folder
src, out, P, method, chunk = sys.argv[1:]
t0 = time.perf_counter()
with rss_growth() as mem:
    partition_edge_folder(src, out, int(P), method, seed=0, chunk=int(chunk))
print(json.dumps({"peak_rss_growth_bytes": mem["bytes"], "seconds": time.perf_counter() - t0}))
"""


def edge_folder(dataset: str, root: Path) -> Path:
    """The dataset as an edge-list folder (written once)."""
    from spgnn.graph.datasets import load_dataset

    src = root / dataset.replace(":", "-")
    if not (src / "labels.npy").is_file():
        src.mkdir(parents=True, exist_ok=True)
        g = load_dataset(dataset)
        a = sp.triu(g.adj, 1).tocoo()
        np.save(src / "edges.npy", np.stack([a.col, a.row], 1).astype(np.int64))
        np.save(src / "features.npy", g.x)
        np.save(src / "labels.npy", g.y)
    return src


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="rmat:19")
    p.add_argument("--nparts", type=machine.at_least(1), default=8)
    p.add_argument("--methods", default=",".join(METHODS), type=machine.names(METHODS, "an out-of-core partitioner"))
    p.add_argument("--chunk", type=machine.at_least(1), default=1 << 18)
    p.add_argument("--out", default="results/bench_ooc.json", type=machine.output)
    args = p.parse_args(argv)
    machine.check_datasets(p, [args.dataset])
    out = Path(args.out)
    src = edge_folder(args.dataset, out.parent / "edge-folders")
    size = sum(f.stat().st_size for f in src.iterdir())
    rows, failed = [], {}
    for method in args.methods:
        dest = out.parent / "ooc-parts" / f"{src.name}-{method}-{args.nparts}"
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", MEASURE, str(src), str(dest), str(args.nparts), method,
                              str(args.chunk)], capture_output=True, text=True)
        if res.returncode != 0:                 # the child's own last line; the other methods still measured
            failed[method] = (res.stderr.strip() or f"exit status {res.returncode}").splitlines()[-1]
            print(f"bench_ooc: {method} failed: {failed[method]}", file=sys.stderr)
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        meta = json.loads((dest / "meta.json").read_text())
        largest = max(sum(f.stat().st_size for f in d.glob("*.npy")) for d in dest.glob("part-*"))
        rows.append({"method": method, "graph_bytes": size, "largest_part_bytes": largest,
                     "nnz_imbalance": meta["partition"]["metrics"]["nnz_imbalance"], **r,
                     "wall_s": time.perf_counter() - t0})
    lines = ["| method | graph MB | peak RSS growth MB | × graph | largest part MB | nnz imbalance | seconds |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['graph_bytes'] / 1e6:.0f} | {r['peak_rss_growth_bytes'] / 1e6:.0f} | "
                     f"{r['peak_rss_growth_bytes'] / r['graph_bytes']:.2f} | {r['largest_part_bytes'] / 1e6:.0f} | "
                     f"{r['nnz_imbalance']:.2f} | {r['seconds']:.1f} |")
    if rows:
        write_json(out, {"args": vars(args), "rows": rows, "failed": failed, "machine": machine.facts()})
        print("\n".join(lines))
        print(f"\nwrote {out}", file=sys.stderr)
        machine.plot_after("bench_ooc", out.with_suffix(".png"), plot, rows, size)
    return 1 if failed else 0


def plot(rows: list[dict], size: int, path: Path) -> None:
    """Each method's peak RSS growth beside the graph's bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar([r["method"] for r in rows], [r["peak_rss_growth_bytes"] / 1e6 for r in rows], label="peak RSS growth")
    ax.axhline(size / 1e6, color="k", linestyle="--", label="graph (edges + features)")
    ax.set_ylabel("MB")
    ax.legend(fontsize=7)
    machine.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
