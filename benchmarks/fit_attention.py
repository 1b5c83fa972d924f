"""Attention's work constants (`DistSpMM.attend_work`, `attend_dropout_work`) fitted to one attention timed alone
at P = 1, and its large results counted (`attend_fresh`).

    python benchmarks/fit_attention.py [--dataset amazon-computers] [--data-dir DATA] [--algos 1d-halo,sar]
                                       [--shapes 8x64,4x16,1x10] [--dropout 0.5] [--rounds 9] [--calibration FILE]
                                       [--out results/fit_attention.json]

One process set up as ``spgnn train`` sets up P = 1 (`spgnn.comm.launch.init`), one GAT `Trainer` per layout (for
its `DistGraph`), then for each head×feature shape a `GATConv` in training mode and random V (n×H×F), and in
--rounds interleaved rounds the layer's attention (`GATConv.attend`: the scores' terms and `DistGraph.attend`), its
forward and its backward each timed alone, without attention dropout and with --dropout. The torch operations each
direction dispatches are counted (a dispatch mode), with its new results of V's size and of X's, n×H×(F + 1) (of the
first shape: `attend_fresh`), and, as the time model charges attention (`spgnn.cost.attend_work`), per layout and
direction

    seconds = operations·op_s + (nnz·edge + nnz·H·head) / (elementwise_bytes_per_s·cores)
              + nnz·H·F·feature / (spmm_bytes_per_s·cores)

with the rates of --calibration (else the built-in ones) for one process, nnz the edges of the adjacency
(self-loops). The bytes an edge, an edge and head, and a feature gathered (edge, head, feature) are the non-negative
least squares solution over the shapes: without dropout `attend_work`; of what dropout adds, `attend_dropout_work`.
Prints the constants the layouts state beside the fitted ones and each shape's predicted / measured seconds with both;
writes every number to --out (JSON). The constants in `spgnn.spmm.halo` and `spgnn.spmm.sar` come from this command
with ``--rounds 15``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch
from scipy.optimize import nnls
from torch.utils._python_dispatch import TorchDispatchMode

from spgnn import cost, spmm
from spgnn.comm import launch
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.layers import GATConv
from spgnn.train.fullbatch import Trainer

WAYS = ("forward", "backward")
ATTENTION = [name for name, cls in spmm.ALGORITHMS.items() if cls.attention]     # the layouts with attention


class OpCounter(TorchDispatchMode):
    """Counts the torch operations dispatched, and their results of `sizes` elements (of each size)."""

    def __init__(self, sizes: tuple):
        super().__init__()
        self.n, self.sizes, self.results = 0, sizes, [0] * len(sizes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        out = func(*args, **(kwargs or {}))
        given = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, tuple | list) else (out,):      # new tensors, not views or in-place results
            if isinstance(t, torch.Tensor) and t.numel() in self.sizes and t.untyped_storage().data_ptr() not in given:
                self.results[self.sizes.index(t.numel())] += 1
        return out


def once(graph, layer, v, key: int = 0, count: bool = False) -> dict:
    """Seconds of `layer`'s attention of V (n×H×F), forward and backward; with `count`, (torch operations, results of
    V's size, results of X's, n×H×(F + 1)) instead."""
    v.grad = None
    n, heads, f = v.shape
    out, y, seed = {}, None, None
    for way in WAYS:
        counter = OpCounter((n * heads * f, n * heads * (f + 1))) if count else None
        t0 = time.perf_counter()
        if counter:
            counter.__enter__()
        if way == "forward":
            y = layer.attend(graph, v, key)
        else:
            y.backward(seed)
        if counter:
            counter.__exit__(None, None, None)
        out[way] = (counter.n, *counter.results) if counter else time.perf_counter() - t0
        seed = torch.ones_like(y)                          # the gradient arriving from above, made untimed
    return out


def fit(rows, rates, cores, seconds, ops) -> dict:
    """{way: (operations, edge, head, feature)} fitted to `rows` (one per shape: nnz, heads, f), whose seconds and
    operations of each direction `seconds(row, way)` and `ops(row, way)` give."""
    ew, gathered = rates.elementwise_bytes_per_s * cores, rates.spmm_bytes_per_s * cores
    a = np.array([[r["nnz"] / ew, r["nnz"] * r["heads"] / ew, r["nnz"] * r["heads"] * r["f"] / gathered] for r in rows])
    out = {}
    for way in WAYS:
        n_ops = max(ops(r, way) for r in rows)
        x, _ = nnls(a, np.array([seconds(r, way) - n_ops * rates.op_s for r in rows]))
        out[way] = (n_ops, *(int(round(c)) for c in x))
    return out


def predicted(cls, stats, shape, heads: int, f: int, dropout: bool, tables: dict, rates, cores) -> dict:
    """Each direction's seconds of an attention of `heads` heads of f on rank 0 as the time model charges it
    (`spgnn.cost.attend_work`, `spgnn.cost.compute_seconds`), for the constants `tables`."""
    work = cost.attend_work(cls, stats, shape, 0, cost.Attend(heads, f, "self-loops", dropout), tables)
    return {way: cost.compute_seconds(work[way], rates, cores) for way in WAYS}


def shapes_option(text: str) -> list[tuple[int, int]]:
    """--shapes: comma-separated HEADSxFEATURES, each a positive integer, as [(heads, features)]."""
    try:
        shapes = [tuple(int(k) for k in s.split("x")) for s in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise argparse.ArgumentTypeError(f"{text!r}: give HEADSxFEATURES items of positive integers, e.g. 8x64,1x10")
    return shapes


def main(argv=None) -> int:
    ap = machine.arguments(__doc__, "results/fit_attention.json", data=True, png=False)
    ap.add_argument("--dataset", default="amazon-computers", help="dataset spec")
    ap.add_argument("--algos", default="1d-halo,sar", type=machine.names(ATTENTION, "a layout with attention"),
                    help="comma-separated layouts with attention")
    ap.add_argument("--shapes", default="8x64,4x16,1x10", type=shapes_option, help="comma-separated HEADSxFEATURES")
    ap.add_argument("--dropout", type=float, default=0.5, help="attention dropout of the second case")
    ap.add_argument("--rounds", type=machine.at_least(1), default=9, help="interleaved rounds")
    ap.add_argument("--calibration", default=None, help="a `spgnn calibrate` file (else the built-in rates)")
    args = ap.parse_args(argv)
    machine.check_datasets(ap, [args.dataset], args.data_dir)
    machine.check_config(ap, dropout=args.dropout)
    try:
        all_rates = cost.load_rates(args.calibration)
    except (SpgnnError, OSError, ValueError, KeyError) as e:
        ap.error(f"--calibration {args.calibration}: not a calibration ({type(e).__name__}: {e})")
    comm = launch.init()
    start, host = time.perf_counter(), machine.facts()
    g = load_dataset(args.dataset, args.data_dir)
    rates, cores = all_rates.on(1), all_rates.cores_each(1)
    shapes = args.shapes
    result, lines, drop = {}, [], args.dropout
    cases = (0.0, drop)
    for algo in args.algos:
        t = Trainer(TrainConfig(dataset=g.name, model="gat", algo=algo, dropout=0.0), comm, graph=g)
        stats = t.costs[1]
        n, nnz = t.g.node_ids.shape[0], cost.local_share(type(t.algo), stats["self-loops"], t.grid.shape, 0).nnz
        rows = []
        for heads, f in shapes:
            layers = {d: GATConv(1, f, heads, dropout=d).train() for d in cases}
            v = torch.randn(n, heads, f, generator=torch.Generator().manual_seed(0)).requires_grad_()
            for d in cases:
                once(t.g, layers[d], v)                             # warm-up
            rows.append({"heads": heads, "f": f, "nnz": int(nnz), "layers": layers, "v": v,
                         "counts": {d: once(t.g, layers[d], v, count=True) for d in cases},
                         "runs": {d: {way: [] for way in WAYS} for d in cases}})
        for r in range(args.rounds):
            for row in rows if r % 2 == 0 else rows[::-1]:
                for d in cases if r % 2 == 0 else cases[::-1]:
                    for way, s in once(t.g, row["layers"][d], row["v"], r).items():
                        row["runs"][d][way].append(s)
        for row in rows:
            del row["layers"], row["v"]
            row["seconds"] = {d: {way: float(np.median(row["runs"][d][way])) for way in WAYS} for d in cases}
        fitted = {"attend_work": fit(rows, rates, cores, lambda r, w: r["seconds"][0.0][w],
                                     lambda r, w: r["counts"][0.0][w][0]),
                  "attend_dropout_work": fit(rows, rates, cores,
                                             lambda r, w: r["seconds"][drop][w] - r["seconds"][0.0][w],
                                             lambda r, w: r["counts"][drop][w][0] - r["counts"][0.0][w][0]),
                  "attend_fresh": {w: tuple(rows[0]["counts"][0.0][w][1:]) for w in WAYS}}     # the first shape's
        cls = type(t.algo)
        stated = {name: getattr(cls, name) for name in fitted}
        result[algo] = {"stated": stated, "fitted": fitted, "rows": rows}
        for name in fitted:
            lines += [f"{algo} {name}: stated {stated[name]}", f"{algo} {name}: fitted {fitted[name]}"]
        for row in rows:
            for case in cases:
                parts = {label: predicted(cls, stats, t.grid.shape, row["heads"], row["f"], case > 0, tables, rates,
                                          cores)
                         for label, tables in (("stated", stated), ("fitted", fitted))}
                lines.append(f"  {row['heads']}x{row['f']} dropout {case}: " + "; ".join(
                    f"{way} {1e3 * row['seconds'][case][way]:.2f} ms, predicted / measured stated "
                    f"{parts['stated'][way] / row['seconds'][case][way]:.2f}, fitted "
                    f"{parts['fitted'][way] / row['seconds'][case][way]:.2f}" for way in WAYS))
    text = "\n".join(lines)
    print(text, flush=True)
    out = Path(args.out)
    write_json(out, {
        "schema": "spgnn.fit_attention/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "options": vars(args), "machine": host,
        "wall_s": time.perf_counter() - start, "layouts": result, "text": text}, default=str)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
