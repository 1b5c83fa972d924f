"""Sampling throughput: minibatches per second of spgnn's bulk samplers (spgnn.sampling) at bulk k = 1, 8, 32,
against PyTorch Geometric's NeighborLoader in the same run (same graph, seed sets, batch size and fanouts) when it
can run: it needs pyg-lib or torch-sparse (`pip install 'spgnn[sparse]'`); without them the baseline is skipped
and the table and JSON say why.

One process, CPU. Seeds: one fixed stream of seed sets (batch_size distinct uniformly random nodes each;
throughput does not depend on labels) shared by every system. Per (graph, sampler, k): a warm-up call on the
stream's first seed sets, then calls of k minibatches over the timed seed sets (the same ones for every k and
system, after the largest k's warm-up sets) until `--budget-s` seconds or `--minibatches` minibatches have passed;
minibatches/s = minibatches / seconds spent inside the calls, mean input nodes over every timed minibatch.
NeighborLoader (node-wise only; PyG has no LADIES) iterates the same timed seed sets in order, one minibatch a
step, no features attached (spgnn's sampler gathers none either).

    python benchmarks/bench_sampling.py [--datasets amazon-computers,rmat:17] [--samplers 'sage:15,10;ladies:512,512']
                                        [--batch-size 1024] [--bulks 1,8,32] [--out results/bench_sampling.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch

from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import mean_norm
from spgnn.jsonfile import write_json
from spgnn.sampling.sampler import make_sampler, parse_sampler


def seed_sets(n: int, batch_size: int, count: int, seed: int) -> list[np.ndarray]:
    """`count` seed sets of batch_size distinct uniformly random nodes (the stream every system samples)."""
    rng = np.random.default_rng(seed)
    return [rng.choice(n, batch_size, replace=False) for _ in range(count)]


def spgnn_rate(sampler, seeds: list, bulk: int, minibatches: int, budget_s: float, warm: int) -> dict:
    """Minibatches/s of `sampler` in calls of `bulk` minibatches: a call on seeds[:bulk] warms up, then the stream
    from seeds[warm] on (the same for every bulk, warm ≥ bulk) is timed (at least one call); the mean input
    nodes are over every timed minibatch."""
    sampler.sample(seeds[:bulk], list(range(bulk)))
    done, spent, inputs, stream = 0, 0.0, [], seeds[warm:]
    while True:
        chunk = [stream[(done + i) % len(stream)] for i in range(bulk)]
        t0 = time.perf_counter()
        mbs = sampler.sample(chunk, list(range(warm + done, warm + done + bulk)))
        spent += time.perf_counter() - t0
        done += len(mbs)
        inputs += [len(mb.inputs) for mb in mbs]
        if done >= minibatches or spent >= budget_s:
            break
    return {"minibatches": done, "seconds": spent, "per_s": done / spent, "mean_input_nodes": float(np.mean(inputs))}


def neighbor_loader_missing() -> str | None:
    """Why PyG's NeighborLoader cannot sample here (None: it can)."""
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        return "torch_geometric is not installed"
    for backend in ("pyg_lib", "torch_sparse"):
        try:
            __import__(backend)
            return None
        except ImportError:
            pass
    return "NeighborLoader needs pyg-lib or torch-sparse (pip install 'spgnn[sparse]'); neither is installed"


def pyg_rate(g, fanouts, seeds: list, minibatches: int, budget_s: float, warm: int) -> dict:
    """NeighborLoader over the same graph (edge_index = [src, dst] of A[dst, src]) and the same seed sets, in
    order: seeds[warm − 1] warms up, the stream from seeds[warm] on is timed; {"error": ...} if it fails."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    try:
        coo = g.adj.tocoo()
        data = Data(edge_index=torch.as_tensor(np.vstack([coo.col, coo.row]), dtype=torch.int64), num_nodes=g.n)
        loader = NeighborLoader(data, num_neighbors=list(fanouts), batch_size=len(seeds[0]),
                                input_nodes=torch.as_tensor(np.concatenate(seeds[warm - 1:])), shuffle=False)
        it = iter(loader)
        next(it)                                                                   # warm-up
        done, t0, inputs = 0, time.perf_counter(), []
        for batch in it:
            done += 1
            inputs.append(batch.num_nodes)
            if done >= minibatches or time.perf_counter() - t0 > budget_s:
                break
        spent = time.perf_counter() - t0
        return {"minibatches": done, "seconds": spent, "per_s": done / spent,
                "mean_input_nodes": float(np.mean(inputs))}
    except Exception as e:     # the benchmark reports why the baseline did not run
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default="amazon-computers,rmat:17")
    machine.data_option(p)
    p.add_argument("--samplers", default="sage:15,10;ladies:512,512", help="';'-separated --sampler specs")
    p.add_argument("--batch-size", type=machine.at_least(1), default=1024)
    p.add_argument("--bulks", default="1,8,32", type=machine.ints(1))
    p.add_argument("--minibatches", type=machine.at_least(1), default=96,
                   help="minibatches timed per configuration (at most)")
    p.add_argument("--budget-s", type=machine.at_least(0.0, float, above=True), default=20.0,
                   help="seconds per configuration (at least one call)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/bench_sampling.json", type=machine.output)
    args = p.parse_args(argv)
    args.datasets = machine.check_datasets(p, args.datasets.split(","), args.data_dir)
    args.samplers = args.samplers.split(";")
    for spec in args.samplers:
        try:
            parse_sampler(spec)
        except SpgnnError as e:
            p.error(str(e))
    graphs = {name: load_dataset(name, args.data_dir, seed=args.seed) for name in args.datasets}
    for name, g in graphs.items():                      # before any graph is measured, not after the first ones
        if args.batch_size > g.n:
            p.error(f"--batch-size {args.batch_size} exceeds the {g.n} nodes of {name}")
    bulks = args.bulks
    missing = neighbor_loader_missing()
    if missing:
        print(f"PyG NeighborLoader baseline skipped: {missing}", flush=True)
    rows = []
    for name, g in graphs.items():
        norm = mean_norm(g.adj)
        seeds = seed_sets(g.n, args.batch_size, max(bulks) + args.minibatches, args.seed)
        for spec in args.samplers:
            sampler = make_sampler(spec, norm)
            row = {"graph": name, "n": g.n, "nnz": g.nnz, "sampler": spec}
            if spec.startswith("sage:"):
                r = {"skipped": missing} if missing else pyg_rate(g, sampler.sizes, seeds, args.minibatches,
                                                                 args.budget_s, max(bulks))
                rows.append(row | {"system": "pyg NeighborLoader", "bulk": 1} | r)
                print(f"{name:18} {spec:16} pyg NeighborLoader: {rate_text(r)}", flush=True)
            for bulk in bulks:
                r = spgnn_rate(sampler, seeds, bulk, args.minibatches, args.budget_s, max(bulks))
                rows.append(row | {"system": "spgnn", "bulk": bulk} | r)
                print(f"{name:18} {spec:16} spgnn bulk {bulk:3d}: {rate_text(r)}", flush=True)
    print(f"\nbatch size {args.batch_size}, one process\n")
    print("| graph | sampler | system | bulk | minibatches/s | mean input nodes | × spgnn bulk 1 | × NeighborLoader |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        same = [b for b in rows if (b["graph"], b["sampler"]) == (r["graph"], r["sampler"]) and "per_s" in b]
        base = next((b["per_s"] for b in same if b["system"] == "spgnn" and b["bulk"] == 1), None)
        pyg = next((b["per_s"] for b in same if b["system"] != "spgnn"), None)
        ratio = lambda ref, r=r: f"{r['per_s'] / ref:.2f}" if "per_s" in r and ref else ""      # noqa: E731
        inputs = f"{r['mean_input_nodes']:.0f}" if "mean_input_nodes" in r else ""
        print(f"| {r['graph']} | {r['sampler']} | {r['system']} | {r['bulk']} | {rate_text(r)} | {inputs} | "
              f"{ratio(base)} | {ratio(pyg) if r['system'] == 'spgnn' else ''} |")
    out = Path(args.out)
    write_json(out, {"argv": sys.argv, "rows": rows, "batch_size": args.batch_size,
                               "neighbor_loader": missing or "ran",
                               "machine": machine.facts()})
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def rate_text(r: dict) -> str:
    if "per_s" in r:
        return f"{r['per_s']:.2f}"
    return "skipped: " + r["skipped"] if "skipped" in r else "failed: " + r["error"][:80]


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["graph"], r["sampler"]) for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4))
    for graph, spec in keys:
        pts = [(r["bulk"], r["per_s"]) for r in rows if (r["graph"], r["sampler"]) == (graph, spec)
               and r["system"] == "spgnn"]
        line, = ax.plot(*zip(*pts), marker="o", label=f"{graph} {spec}")
        pyg = [r["per_s"] for r in rows if (r["graph"], r["sampler"]) == (graph, spec)
               and r["system"] != "spgnn" and "per_s" in r]
        if pyg:
            ax.axhline(pyg[0], color=line.get_color(), ls="--", lw=1, label=f"{graph} {spec} PyG NeighborLoader")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bulk k (minibatches per sampling call)")
    ax.set_ylabel("minibatches / s")
    ax.legend(fontsize=7)
    machine.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
