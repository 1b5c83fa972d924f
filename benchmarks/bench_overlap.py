"""Communication hidden behind computation: epoch time with ``--overlap on`` against ``off``, in one run.

    python benchmarks/bench_overlap.py [--datasets amazon-computers,rmat:17] [--procs 2,4] \
                                       [--algos 1d-halo,sar,1.5d,2d,3d] [--repeats 5] [--hidden 128] \
                                       [--prefetch 1[,2,…]] [--models gcn,gat] [--out results/bench_overlap.json]

Per dataset and P, one `run_local` of P gloo processes; on each rank, per model of --models and algorithm (its
default grid; GAT only on the algorithms with attention), two Trainers (2 layers, hidden --hidden, block
partition), overlap off and on, are built, warmed up by one step,
then timed interleaved (off, on, on, off, …: the order alternates so that neither always goes first) for
--repeats training steps each. Per step and rank: the step's seconds, the seconds the ledger records for the
step's communication (for a non-blocking exchange, the time spent starting it and waiting for it: what is left
exposed), and the peak RSS during the step (the kernel's high-water mark, reset just before the step).
``--prefetch 1,2`` adds, for sar, a Trainer with overlap on at prefetch 2, in the same interleaved rounds.

Reported per (dataset, P, algorithm), medians over the steps of the slowest rank's value: epoch ms off and on and
their ratio, communication seconds off (all of it exposed) and on (exposed only), the share hidden
(comm_off − exposed_comm_on) / comm_off, and peak RSS per rank (largest rank) off and on with their ratio. The
rank processes run with ``MALLOC_MMAP_THRESHOLD_=65536`` so that freed tensors leave the RSS and the peak
during a step is that step's own (both Trainers of the algorithm, the graph and the model are resident in both).

Prints a Markdown table, writes every raw number to --out (JSON) and a PNG next to it.
"""

from __future__ import annotations

import gc
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np

from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.layers import LAYERS, get_layer
from spgnn.memory import _status_bytes
from spgnn.spmm import ALGORITHMS
from spgnn.spmm import get as get_algorithm
from spgnn.train.fullbatch import Trainer


def variants(algo: str, prefetch: list[int]) -> dict:
    """{label: (overlap, prefetch)}: "off" and "on" (sar: at the first --prefetch value), and for sar "on p=k"
    for each further value k."""
    out = {"off": ("off", prefetch[0]), "on": ("on", prefetch[0])}
    return out | ({f"on p={k}": ("on", k) for k in prefetch[1:]} if algo == "sar" else {})


def config(g, model: str, algo: str, overlap: str, prefetch: int, hidden: int) -> TrainConfig:
    return TrainConfig(dataset=g.name, model=model, algo=algo, overlap=overlap, hidden=hidden, layers=2,
                       partition="block", prefetch=prefetch if algo == "sar" else 1)


def cases(args) -> list[tuple[str, str]]:
    """(model, algorithm) pairs measured: every algorithm for GCN and the like, those with attention for GAT."""
    return [(m, a) for m in args.models for a in args.algos
            if "attention" not in get_layer(m).needs or get_algorithm(a).attention]


def reset_peak_rss() -> None:
    """Reset this process's RSS high-water mark (Linux), so that VmHWM is the peak from now on."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(comm, g, args) -> dict:
    """On one rank: per algorithm, per variant (overlap setting), the seconds, exposed communication seconds and
    peak RSS of --repeats steps, timed interleaved."""
    out = {}
    for model, algo in cases(args):
        labels = variants(algo, args.prefetch)
        trainers = {ov: Trainer(config(g, model, algo, *v, args.hidden), comm, graph=g) for ov, v in labels.items()}
        for t in trainers.values():
            t.step(0)
        rec = {ov: {"epoch_s": [], "comm_s": [], "peak_rss_bytes": []} for ov in labels}
        for r in range(args.repeats):
            for ov in list(labels) if r % 2 == 0 else list(labels)[::-1]:
                gc.collect()
                comm.ledger.reset()
                reset_peak_rss()
                t0 = time.perf_counter()
                trainers[ov].step(r + 1)
                rec[ov]["epoch_s"].append(time.perf_counter() - t0)
                rec[ov]["peak_rss_bytes"].append(_status_bytes("VmHWM"))
                rec[ov]["comm_s"].append(comm.ledger.total("seconds"))
        out[f"{model} {algo}"] = rec | {"grid": list(trainers["on"].grid.shape)}
        del trainers
        gc.collect()
    return out


def summarise(dataset: str, P: int, case: str, ranks: list[dict], on: str, prefetch: list[int]) -> dict:
    """Variant `on` against "off": medians over the steps of the slowest rank's seconds and the largest rank's
    peak RSS, and the ratios."""
    def median(ov, key):
        return float(np.median(np.max(np.array([r[case][ov][key] for r in ranks]), axis=0)))

    algo = case.split()[1]
    name = case + (f" p={variants(algo, prefetch)[on][1]}" if algo == "sar" else "")
    s = {"dataset": dataset, "P": P, "algo": name, "grid": ranks[0][case]["grid"]}
    for ov, key in (("off", "off"), (on, "on")):
        s[f"epoch_ms_{key}"] = 1e3 * median(ov, "epoch_s")
        s[f"comm_s_{key}"] = median(ov, "comm_s")
        s[f"peak_rss_mib_{key}"] = median(ov, "peak_rss_bytes") / 2**20
    s["speedup"] = s["epoch_ms_off"] / s["epoch_ms_on"]
    s["hidden_share"] = (s["comm_s_off"] - s["comm_s_on"]) / s["comm_s_off"] if s["comm_s_off"] else 0.0
    s["rss_ratio"] = s["peak_rss_mib_on"] / s["peak_rss_mib_off"]
    s["raw"] = [{"off": r[case]["off"], "on": r[case][on]} for r in ranks]
    return s


def table(rows: list[dict]) -> str:
    head = ("| dataset | P | model algo (grid) | epoch ms off | epoch ms on | off/on | comm s off | "
            "exposed comm s on | hidden | peak RSS MiB off | on | on/off |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['P']} | {r['algo']} ({'x'.join(map(str, r['grid']))}) | "
                     f"{r['epoch_ms_off']:.1f} | {r['epoch_ms_on']:.1f} | {r['speedup']:.3f} | {r['comm_s_off']:.4f} | "
                     f"{r['comm_s_on']:.4f} | {100 * r['hidden_share']:.0f}% | {r['peak_rss_mib_off']:.1f} | "
                     f"{r['peak_rss_mib_on']:.1f} | {r['rss_ratio']:.3f} |")
    ratios = [r["speedup"] for r in rows]
    lines += ["", f"Over the {len(rows)} cases: off/on geometric mean {np.exp(np.mean(np.log(ratios))):.3f} (min "
              f"{min(ratios):.3f}, max {max(ratios):.3f}); median share hidden "
              f"{100 * np.median([r['hidden_share'] for r in rows]):.0f}%; largest peak RSS on/off "
              f"{max(r['rss_ratio'] for r in rows):.3f}."]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['dataset']}\nP={r['P']} {r['algo']}" for r in rows]
    x = np.arange(len(rows))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8, 0.7 * len(rows)), 8), sharex=True)
    ax1.bar(x - 0.2, [r["epoch_ms_off"] for r in rows], 0.4, label="overlap off")
    ax1.bar(x + 0.2, [r["epoch_ms_on"] for r in rows], 0.4, label="overlap on")
    ax1.set(ylabel="epoch ms (median, slowest rank)", title="training step, overlap off vs on")
    ax1.legend()
    ax2.bar(x, [100 * r["hidden_share"] for r in rows], 0.6, color="tab:green")
    ax2.axhline(0, color="black", lw=0.5)
    ax2.set(ylabel="communication seconds hidden (%)")
    ax2.set_xticks(x, labels, rotation=90, fontsize=7)
    machine.save_figure(fig, path)


def main(argv=None) -> int:
    ap = machine.arguments(__doc__, "results/bench_overlap.json", data=True)
    ap.add_argument("--datasets", default="amazon-computers,rmat:17", help="comma-separated dataset specs")
    ap.add_argument("--procs", default="2,4", type=machine.ints(1), help="comma-separated process counts P")
    ap.add_argument("--algos", default="1d-halo,sar,1.5d,2d,3d", type=machine.names(ALGORITHMS, "an algorithm"),
                    help="comma-separated algorithms")
    ap.add_argument("--repeats", type=machine.at_least(1), default=5,
                    help="timed steps per (algorithm, overlap setting)")
    ap.add_argument("--models", default="gcn", type=machine.names(LAYERS, "a model"),
                    help="comma-separated models (gat: on the algorithms with attention)")
    ap.add_argument("--hidden", type=machine.at_least(1), default=128, help="hidden width of the 2-layer models")
    ap.add_argument("--prefetch", default="1", type=machine.ints(1), help="sar: ring rounds in flight with overlap "
                    "on; a comma-separated list adds a variant per further value, timed in the same interleaved rounds")
    ap.add_argument("--timeout", type=machine.at_least(0.0, float, above=True), default=900.0,
                    help="seconds one run_local may take")
    args = ap.parse_args(argv)
    args.datasets = machine.check_datasets(ap, args.datasets.split(","), args.data_dir)
    if not cases(args):
        ap.error(f"nothing to measure: none of --algos {','.join(args.algos)} has what --models "
                 f"{','.join(args.models)} need{'s' if len(args.models) == 1 else ''} (gat: attention)")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"          # inherited by the rank processes
    start, host = time.perf_counter(), machine.facts()
    rows = []
    for spec in args.datasets:
        g = load_dataset(spec, args.data_dir)
        for P in args.procs:
            ranks = run_local(measure, P, g, args, timeout_s=args.timeout)
            rows += [summarise(spec, P, f"{m} {a}", ranks, on, args.prefetch) for m, a in cases(args)
                     for on in variants(a, args.prefetch) if on != "off"]
            print(f"[{time.perf_counter() - start:6.0f} s] {spec} P={P} done", file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    out = Path(args.out)
    png = out.with_suffix(".png")
    write_json(out, {
        "schema": "spgnn.bench_overlap/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "options": vars(args), "machine": host,
        "load_average_end": os.getloadavg(), "wall_s": time.perf_counter() - start, "rows": rows, "text": text,
        "png": str(png)}, default=str)
    print(f"wrote {out}", file=sys.stderr)
    machine.plot_after("bench_overlap", png, plot, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
