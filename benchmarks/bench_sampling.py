"""Sampling throughput: minibatches per second of spgnn's bulk samplers (spgnn/sampling.py) at bulk k = 1, 8, 32,
against PyTorch Geometric's NeighborLoader (same graph, batch size, fanouts) when it can run (it needs pyg-lib or
torch-sparse; the JSON says why when it cannot).

One process, CPU. Seeds: uniformly random nodes (throughput does not depend on labels), batch_size per minibatch.
Per (graph, sampler, k): a warm-up call, then calls of k minibatches until `--budget-s` seconds or `--minibatches`
minibatches have passed; minibatches/s = minibatches / seconds spent inside the calls.

    python benchmarks/bench_sampling.py [--datasets amazon-computers,rmat:17] [--samplers sage:15,10,ladies:512,512]
                                        [--batch-size 1024] [--bulks 1,8,32] [--out results/bench_sampling.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from spgnn.datasets import load_dataset
from spgnn.graph import mean_norm
from spgnn.sampling import make_sampler


def spgnn_rate(sampler, n: int, batch_size: int, bulk: int, minibatches: int, budget_s: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    draw = lambda: [rng.choice(n, batch_size, replace=False) for _ in range(bulk)]      # noqa: E731
    sampler.sample(draw(), list(range(bulk)))                                            # warm-up
    done, spent, key = 0, 0.0, bulk
    while done < minibatches and spent < budget_s:
        seeds = draw()
        t0 = time.perf_counter()
        mbs = sampler.sample(seeds, list(range(key, key + bulk)))
        spent += time.perf_counter() - t0
        done, key = done + len(mbs), key + bulk
    inputs = float(np.mean([len(mb.inputs) for mb in mbs]))
    return {"minibatches": done, "seconds": spent, "per_s": done / spent, "mean_input_nodes": inputs}


def pyg_rate(g, fanouts, batch_size: int, minibatches: int, budget_s: float, seed: int) -> dict:
    """NeighborLoader over the same graph (edge_index = [src, dst] of A[dst, src]); {"error": ...} if it cannot run."""
    try:
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader

        coo = g.adj.tocoo()
        data = Data(edge_index=torch.as_tensor(np.vstack([coo.col, coo.row]), dtype=torch.int64), num_nodes=g.n)
        seeds = torch.as_tensor(np.random.default_rng(seed).choice(g.n, min(g.n, batch_size * minibatches)))
        loader = NeighborLoader(data, num_neighbors=list(fanouts), batch_size=batch_size, input_nodes=seeds)
        it = iter(loader)
        next(it)
        done, t0 = 0, time.perf_counter()
        for _ in it:
            done += 1
            if done >= minibatches or time.perf_counter() - t0 > budget_s:
                break
        spent = time.perf_counter() - t0
        return {"minibatches": done, "seconds": spent, "per_s": done / spent}
    except Exception as e:     # the benchmark reports why the baseline did not run
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default="amazon-computers,rmat:17")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--samplers", default="sage:15,10;ladies:512,512", help="';'-separated --sampler specs")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--bulks", default="1,8,32")
    p.add_argument("--minibatches", type=int, default=64, help="minibatches timed per configuration (at most)")
    p.add_argument("--budget-s", type=float, default=20.0, help="seconds per configuration (at least one call)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/bench_sampling.json")
    args = p.parse_args(argv)
    bulks = [int(b) for b in args.bulks.split(",")]
    rows = []
    for name in args.datasets.split(","):
        g = load_dataset(name, args.data_dir, seed=args.seed)
        norm = mean_norm(g.adj)
        for spec in args.samplers.split(";"):
            sampler = make_sampler(spec, norm)
            for bulk in bulks:
                r = spgnn_rate(sampler, g.n, args.batch_size, bulk, args.minibatches, args.budget_s, args.seed)
                rows.append({"graph": name, "n": g.n, "nnz": g.nnz, "sampler": spec, "system": "spgnn", "bulk": bulk}
                            | r)
                print(f"{name:18} {spec:16} spgnn bulk {bulk:3d}: {r['per_s']:8.2f} minibatches/s", flush=True)
            if spec.startswith("sage:"):
                r = pyg_rate(g, sampler.sizes, args.batch_size, args.minibatches, args.budget_s, args.seed)
                rows.append({"graph": name, "n": g.n, "nnz": g.nnz, "sampler": spec, "system": "pyg NeighborLoader",
                             "bulk": 1} | r)
                print(f"{name:18} {spec:16} pyg NeighborLoader: {r.get('per_s', r.get('error'))}", flush=True)
    print("\n| graph | sampler | system | bulk | minibatches/s | × bulk 1 |\n|---|---|---|---|---|---|")
    for r in rows:
        base = next((b["per_s"] for b in rows if b["graph"] == r["graph"] and b["sampler"] == r["sampler"]
                     and b["system"] == "spgnn" and b["bulk"] == 1), None)
        rate = f"{r['per_s']:.2f}" if "per_s" in r else "n/a (" + r["error"][:60] + ")"
        ratio = f"{r['per_s'] / base:.2f}" if "per_s" in r and base else ""
        print(f"| {r['graph']} | {r['sampler']} | {r['system']} | {r['bulk']} | {rate} | {ratio} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"argv": sys.argv, "rows": rows, "batch_size": args.batch_size,
                               "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                           "numpy": np.__version__, "cpus": torch.get_num_threads()}}, indent=1))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["graph"], r["sampler"]) for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4))
    for graph, spec in keys:
        pts = [(r["bulk"], r["per_s"]) for r in rows if (r["graph"], r["sampler"]) == (graph, spec)
               and r["system"] == "spgnn"]
        ax.plot(*zip(*pts), marker="o", label=f"{graph} {spec}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bulk k (minibatches per sampling call)")
    ax.set_ylabel("minibatches / s")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
