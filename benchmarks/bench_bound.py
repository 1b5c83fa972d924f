"""The training step at P = 1 against its bound: its dense products alone plus its SpMMs at memory bandwidth.

    python benchmarks/bench_bound.py [--dataset amazon-computers] [--data-dir DATA] \
                                     [--algos sar,1d-halo,sar:natural,1d-halo:natural] \
                                     [--model sage] [--layers 3] [--hidden 256] [--rounds 15] \
                                     [--out results/bench_bound.json]

One process set up as ``spgnn train`` sets up P = 1 (`spgnn.comm.launch.init`: every core's threads, freed memory
kept), one `Trainer` per algorithm (dropout 0, Adam lr 0.01; ``ALGO:ORDER`` sets its --node-order, rcm when not
given, and ``ALGO:FIELD=VALUE`` any other `TrainConfig` field, e.g. ``sar:precompute=off``). One step of each is
recorded first: every dense product it runs (``aten.mm``, ``aten.addmm``, oneDNN's ``mkldnn._linear_pointwise``:
shapes, strides) by a dispatch mode, with the transposed copies of their operands that oneDNN's weight gradient
needs (`spgnn.dense.transposed`; inside ``_linear_pointwise`` before they were spgnn's own), and every SpMM
(`spgnn.sparse.kernels.spmm`: nnz, index and value bytes, rows read, rows written, width). Then, in each of
--rounds interleaved rounds:

    step      one `Trainer.step` (forward + backward + Adam) of each algorithm
    dense     the recorded dense products replayed alone, on tensors of the same shapes and strides
    spmm      the recorded SpMMs replayed alone (the same sparse blocks, dense operands of the same shapes)
    stream    a STREAM-like copy (b = a: 2 words a element) and triad (a = b + s·c: 3 words) over 2²⁴ floats

The bound of a step is dense + Σ SpMM bytes / bandwidth, SpMM bytes = nnz·(index + value) + (rows read + rows
written)·width·4, the bandwidth the larger of copy and triad that round. Reported: medians over the rounds of
step ms, dense ms, SpMM ms measured and at bandwidth, bound ms, step / bound (target: step / bound ≤ 1.15) and step /
(dense + SpMMs measured): what the rest of the step (elementwise work, the optimizer, autograd) adds.

Prints a Markdown table, writes every raw number to --out (JSON) and a PNG next to it.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spgnn import dense as dense_products
from spgnn.comm import launch
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.sparse import kernels
from spgnn.train.fullbatch import Trainer

DENSE = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.mkldnn._linear_pointwise.default}


class DenseRecorder(TorchDispatchMode):
    """Records (op, [(shape, stride) of each tensor argument]) of every dense product dispatched."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in DENSE:
            self.ops.append((func, [(tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else a for a in args]))
        return func(*args, **(kwargs or {}))


def spmm_bytes(a, h) -> int:
    """nnz·(index + value) + (rows read + rows written)·width·4 of Z = A·H."""
    return a.nnz * (a.indices.itemsize + a.data.itemsize) + (a.shape[1] + a.shape[0]) * h.shape[1] * 4


def record_step(trainer) -> tuple[list, list, list]:
    """(dense products and their operands' transposed copies, SpMM bytes of each call, SpMM replays) of one
    training step."""
    spmms, calls, real, transposed = [], [], kernels.spmm, dense_products.transposed
    copies = []

    def counted(a, h, *args, **kw):
        spmms.append(spmm_bytes(a, h))
        operand = torch.randn(h.shape, dtype=h.dtype)
        calls.append(lambda: real(a, operand))
        return real(a, h, *args, **kw)

    def copied(x):
        copies.append((transposed, [(tuple(x.shape), x.stride())]))
        return transposed(x)

    kernels.spmm, dense_products.transposed = counted, copied
    try:
        with DenseRecorder() as rec:
            trainer.step(0)
    finally:
        kernels.spmm, dense_products.transposed = real, transposed
    return rec.ops + copies, spmms, calls


def replay(ops) -> list:
    """The recorded dense products on random tensors of the same shapes and strides: a list of closures."""
    calls = []
    for func, args in ops:
        tensors = [torch.empty_strided(*a).normal_() if isinstance(a, tuple) else a for a in args]
        calls.append(lambda func=func, tensors=tensors: func(*tensors))
    return calls


def spec(algo: str) -> dict:
    """The `TrainConfig` fields of an --algos item: ALGO, then ``:rcm`` or ``:natural`` (its --node-order) and
    ``:FIELD=VALUE`` items (``sar:natural:precompute=off``), each VALUE of its field's type (`typed`)."""
    name, *items = algo.split(":")
    out = {"algo": name, "node_order": "rcm"}
    for item in items:
        key, eq, value = item.partition("=")
        out |= {key: typed(key, value)} if eq else {"node_order": item}
    return out


def typed(field: str, text: str):
    """`text` as the `TrainConfig` field `field` takes it (``prefetch=2``: 2), as ``spgnn train`` parses its flag: by
    the option's type; on/off for a bool; a name it does not know, or an optional string, as given. ValueError where
    `text` is not of that type."""
    from spgnn.config import FIELDS, plugin_options

    kinds = {name: kind for name, kind, _ in FIELDS} | {name: o.type for name, o in plugin_options().items()}
    kind = kinds.get(field, str)
    if kind is bool:
        if text not in ("on", "off"):
            raise ValueError(f"{field}={text}: give on or off")
        return text == "on"
    if not callable(kind):                                  # str | None
        return text
    try:
        return kind(text)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{field}={text}: not {getattr(kind, '__name__', 'a valid value')} ({e})") from None


def config(dataset: str, algo: str, args) -> TrainConfig:
    """The step's config: --model, --layers, --hidden, dropout 0, Adam lr 0.01, weight decay 0, each overridden by
    the --algos item's fields (``sar:hidden=64``)."""
    return TrainConfig(**{"dataset": dataset, "model": args.model, "layers": args.layers, "hidden": args.hidden,
                          "dropout": 0.0, "lr": 0.01, "weight_decay": 0.0} | spec(algo))


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def run_all(calls) -> None:
    for f in calls:
        f()


def stream(n: int = 1 << 24) -> tuple[float, float]:
    """(copy, triad) bandwidth in bytes/s, best of three each."""
    a, b, c = torch.rand(n), torch.rand(n), torch.rand(n)
    copy = min(timed(lambda: b.copy_(a)) for _ in range(3))
    triad = min(timed(lambda: torch.add(b, c, alpha=3.0, out=a)) for _ in range(3))
    return 2 * 4 * n / copy, 3 * 4 * n / triad


def measure(g, args, comm) -> dict:
    """Per round: each algorithm's step, its dense products alone, the stream bandwidths."""
    trainers, dense, spmm, sparse = {}, {}, {}, {}
    for algo in args.algos:
        trainers[algo] = t = Trainer(config(g.name, algo, args), comm, graph=g)
        t.step(0)
        ops, spmm[algo], sparse[algo] = record_step(t)
        dense[algo] = replay(ops)
        run_all(dense[algo])
        run_all(sparse[algo])
    rec = {algo: {"step_s": [], "dense_s": [], "spmm_s": []} for algo in args.algos} | {"copy_Bps": [], "triad_Bps": []}
    for r in range(args.rounds):
        for algo in args.algos if r % 2 == 0 else args.algos[::-1]:
            rec[algo]["step_s"].append(timed(trainers[algo].step, r + 1))
            rec[algo]["dense_s"].append(timed(run_all, dense[algo]))
            rec[algo]["spmm_s"].append(timed(run_all, sparse[algo]))
        copy, triad = stream()
        rec["copy_Bps"].append(copy)
        rec["triad_Bps"].append(triad)
    return rec | {"spmm_bytes": spmm, "dense_ops": {a: len(d) for a, d in dense.items()}}


def summarise(rec, algo) -> dict:
    bw = np.maximum(rec["copy_Bps"], rec["triad_Bps"])
    step, dense, measured = (np.array(rec[algo][k]) for k in ("step_s", "dense_s", "spmm_s"))
    spmm = sum(rec["spmm_bytes"][algo]) / bw
    bound = dense + spmm
    return {"algo": algo, "step_ms": 1e3 * np.median(step), "dense_ms": 1e3 * np.median(dense),
            "spmm_ms": 1e3 * np.median(measured), "spmm_bw_ms": 1e3 * np.median(spmm),
            "bound_ms": 1e3 * np.median(bound),
            "step_over_bound": float(np.median(step / bound)), "step_over_dense": float(np.median(step / dense)),
            "step_over_products": float(np.median(step / (dense + measured))),
            "spmm_calls": len(rec["spmm_bytes"][algo]), "spmm_mb": sum(rec["spmm_bytes"][algo]) / 1e6,
            "dense_ops": rec["dense_ops"][algo]}


def table(rows, rec) -> str:
    head = "| algo | step ms | dense ms | SpMM ms | SpMM ms at bandwidth | bound ms | step / bound | step / products |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    lines += [f"| {r['algo']} | {r['step_ms']:.1f} | {r['dense_ms']:.1f} | {r['spmm_ms']:.1f} | {r['spmm_bw_ms']:.2f} "
              f"| {r['bound_ms']:.1f} | {r['step_over_bound']:.3f} | {r['step_over_products']:.3f} |" for r in rows]
    lines += ["", f"Bandwidth (median of rounds): copy {np.median(rec['copy_Bps']) / 1e9:.1f} GB/s, triad "
              f"{np.median(rec['triad_Bps']) / 1e9:.1f} GB/s.",
              "A step: " + "; ".join(f"{r['algo']} {r['spmm_calls']} SpMMs ({r['spmm_mb']:.1f} MB), {r['dense_ops']} "
                                     "dense products" for r in rows) + "."]
    return "\n".join(lines)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(x - 0.27, [r["step_ms"] for r in rows], 0.27, color="tab:blue", label="training step")
    ax.bar(x, [r["dense_ms"] for r in rows], 0.27, color="tab:orange", label="dense products alone")
    ax.bar(x + 0.27, [r["dense_ms"] for r in rows], 0.27, color="tab:orange")
    for dx, key, color, label in ((0, "spmm_ms", "tab:green", "SpMMs measured alone"),
                                  (0.27, "spmm_bw_ms", "tab:red", "SpMMs at memory bandwidth (bound)")):
        ax.bar(x + dx, [r[key] for r in rows], 0.27, bottom=[r["dense_ms"] for r in rows], color=color, label=label)
    ax.set_xticks(x, [f"{r['algo']}\nstep/bound {r['step_over_bound']:.2f}" for r in rows])
    ax.set(ylabel="ms (median)", title="P = 1 training step against its bound")
    ax.legend(loc="lower center")
    machine.save_figure(fig, path)


def main(argv=None) -> int:
    ap = machine.arguments(__doc__, "results/bench_bound.json", data=True)
    ap.add_argument("--dataset", default="amazon-computers", help="dataset spec")
    ap.add_argument("--algos", default="sar,1d-halo,sar:natural,1d-halo:natural",
                    help="comma-separated algorithms, each ALGO, then :NODE_ORDER (rcm or natural; default rcm) and "
                    ":FIELD=VALUE items of the config (e.g. sar:precompute=off)")
    ap.add_argument("--model", default="sage", help="--model of the step")
    ap.add_argument("--layers", type=int, default=3, help="layers of the model")
    ap.add_argument("--hidden", type=int, default=256, help="hidden width")
    ap.add_argument("--rounds", type=machine.at_least(1), default=15, help="interleaved rounds")
    args = ap.parse_args(argv)
    args.algos = args.algos.split(",")
    machine.check_datasets(ap, [args.dataset], args.data_dir)
    for algo in args.algos:                                 # bad input: one line before any work
        try:
            config(args.dataset, algo, args).validate()
        except (SpgnnError, TypeError, ValueError) as e:
            ap.error(f"--algos {algo}: {e}")
    comm = launch.init()
    start, host = time.perf_counter(), machine.facts()
    rec = measure(load_dataset(args.dataset, args.data_dir), args, comm)
    rows = [summarise(rec, algo) for algo in args.algos]
    text = table(rows, rec)
    print(text)
    out = Path(args.out)
    png = out.with_suffix(".png")
    write_json(out, {
        "schema": "spgnn.bench_bound/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "options": vars(args), "machine": host,
        "load_average_end": os.getloadavg(), "wall_s": time.perf_counter() - start, "rows": rows, "raw": rec,
        "text": text, "png": str(png)}, default=str)
    print(f"wrote {out}", file=sys.stderr)
    machine.plot_after("bench_bound", png, plot, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
