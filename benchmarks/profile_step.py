"""Where a training step's time goes: the operators of P = 1 steps, by torch.profiler, for each algorithm.

    python benchmarks/profile_step.py [--dataset amazon-computers] [--data-dir DATA] [--algos sar,1d-halo] \
                                      [--model sage] [--layers 3] [--hidden 256] [--device cpu|cuda] \
                                      [--steps 5] [--top 15] [--out results/profile_step.json]

One process set up as ``spgnn train`` sets up P = 1, one `Trainer` per algorithm (dropout 0), each warmed up by
two steps, then --steps steps of each recorded by torch.profiler (CPU, and CUDA on a GPU). Per algorithm and
operator: calls a step, self CPU ms a step and, on a GPU, self device ms a step; the step's wall time (median,
the device synchronised). Operators whose calls differ between the algorithms are the place to look when one
algorithm is slower than another doing the same arithmetic (at P = 1 every algorithm multiplies the same
matrices).

Prints a Markdown table per algorithm (the --top operators by self time, device time first on a GPU), writes
every operator to --out (JSON) and a bar chart of the top ones next to it (PNG).
"""

from __future__ import annotations

import shlex
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import torch
from torch.profiler import ProfilerActivity, profile

from spgnn.comm import launch
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.train.fullbatch import Trainer


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(trainer: Trainer, device: str, steps: int) -> tuple[list[dict], float]:
    """(operators, median step seconds) of `steps` profiled steps after two unrecorded ones."""
    for epoch in range(2):
        trainer.step(epoch)
    _sync(device)
    activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * device.startswith("cuda")
    seconds = []
    with profile(activities=activities) as prof:
        for epoch in range(steps):
            start = time.perf_counter()
            trainer.step(epoch)
            _sync(device)
            seconds.append(time.perf_counter() - start)
    ops = [{"op": e.key, "calls": e.count / steps, "self_cpu_ms": e.self_cpu_time_total / 1e3 / steps,
            "self_device_ms": getattr(e, "self_device_time_total", 0.0) / 1e3 / steps}
           for e in prof.key_averages()]
    return ops, statistics.median(seconds)


def ranked(ops: list[dict], top: int, device: str) -> tuple[str, list[dict]]:
    """(the time ranked by: device time on a GPU, else CPU time; the `top` operators by it)."""
    key = "self_device_ms" if device.startswith("cuda") else "self_cpu_ms"
    return key, sorted(ops, key=lambda o: -o[key])[:top]


def table(algo: str, ops: list[dict], step_s: float, top: int, device: str) -> str:
    key, rows = ranked(ops, top, device)
    gpu = key == "self_device_ms"
    lines = [f"{algo}: step {step_s * 1e3:.2f} ms (median), self CPU {sum(o['self_cpu_ms'] for o in ops):.2f} ms"
             + (f", self device {sum(o['self_device_ms'] for o in ops):.2f} ms" if gpu else ""), "",
             "| operator | calls a step | self CPU ms |" + " self device ms |" * gpu, "|---|---|---|" + "---|" * gpu]
    lines += [f"| {o['op'][:60]} | {o['calls']:g} | {o['self_cpu_ms']:.3f} |"
              + f" {o['self_device_ms']:.3f} |" * gpu for o in rows]
    return "\n".join(lines)


def plot(results: dict, top: int, device: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 0.3 * top + 1.5), squeeze=False)
    for ax, (algo, r) in zip(axes[0], results.items()):
        key, rows = ranked(r["ops"], top, device)
        rows = rows[::-1]
        ax.barh([o["op"][:40] for o in rows], [o[key] for o in rows])
        ax.set(title=f"{algo}: step {r['step_s'] * 1e3:.1f} ms", xlabel=f"{key.replace('_', ' ')} a step")
        ax.tick_params(axis="y", labelsize=7)
    machine.save_figure(fig, path)


def main(argv=None) -> int:
    ap = machine.arguments(__doc__, "results/profile_step.json", data=True)
    ap.add_argument("--dataset", default="amazon-computers", help="dataset spec")
    ap.add_argument("--algos", default="sar,1d-halo", help="comma-separated algorithms (each runs at P = 1)")
    ap.add_argument("--model", default="sage", help="--model of the step")
    ap.add_argument("--layers", type=int, default=3, help="layers of the model")
    ap.add_argument("--hidden", type=int, default=256, help="hidden width")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps of each algorithm")
    ap.add_argument("--top", type=int, default=15, help="operators shown per algorithm")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.top < 1:
        ap.error("--steps and --top must be >= 1")
    out = Path(args.out)
    try:                                                # bad input: one line before any work
        launch.check_device(args.device)
        g = load_dataset(args.dataset, args.data_dir)
        configs = {algo: TrainConfig(dataset=g.name, model=args.model, layers=args.layers, hidden=args.hidden,
                                     dropout=0.0, algo=algo, epochs=1, eval_every=0, device=args.device)
                   for algo in args.algos.split(",")}
        for cfg in configs.values():
            cfg.validate()
    except SpgnnError as e:
        ap.error(str(e))
    comm = launch.init(args.device)
    results = {}
    for algo, cfg in configs.items():
        ops, step_s = measure(Trainer(cfg, comm, graph=g), args.device, args.steps)
        results[algo] = {"step_s": step_s, "ops": ops}
        print(table(algo, ops, step_s, args.top, args.device) + "\n", flush=True)
    png = out.with_suffix(".png")
    write_json(out, {
        "schema": "spgnn.profile_step/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "options": vars(args), "machine": machine.facts(),
        "results": results, "png": str(png)})
    print(f"wrote {out}", file=sys.stderr)
    machine.plot_after("profile_step", png, plot, results, args.top, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
