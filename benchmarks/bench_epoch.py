"""spgnn against PyTorch Geometric and torch's sparse kernels, at P = 1 on CPU, in one run.

    python benchmarks/bench_epoch.py [--datasets amazon-computers,rmat:17] [--data-dir DATA]
                                     [--repeats 10] [--out results/bench_epoch.json]

Per dataset, each group of systems is warmed up, then timed interleaved (A, B, C, A, B, C, …) so machine
noise falls on all of them alike; medians are reported:

1. epoch: one full-batch training step (forward + backward + Adam) of a 2-layer GCN, hidden 128, dropout 0.5,
   lr 0.01: spgnn's ``Trainer.step`` (``Comm(0, 1)``, algo "1d-halo"; nodes in its default rcm order, and in the
   dataset's own order as PyG takes it) versus PyG ``GCNConv`` on an ``edge_index`` (default: Â recomputed every
   call; the baseline) and with ``cached=True``.
2. spmm: Z = Â·H (Â = D^-½(A+I)D^-½, f = 128, float32): ``spgnn.sparse.kernels.spmm`` versus ``torch.sparse.mm`` on a
   CSR tensor (the baseline) versus ``torch_sparse.matmul`` (if installed), spgnn's on Â with its nodes in reverse
   Cuthill-McKee order (as ``--node-order rcm`` orders a part's; the other rows: the dataset's order) versus the
   memory-bandwidth bound (nnz·f·4 bytes of H rows read + n·f·4 written) / (copy bandwidth of a 512 MB tensor,
   timed just before).
3. spmm-transposed: the backward product Âᵀ·G with spgnn's cached ``CSR.transpose()`` versus torch's
   autograd backward through ``torch.sparse.mm`` (the baseline), plus what rebuilding the transpose costs.

Prints Markdown tables; writes every raw timing to --out (JSON) and a bar chart next to it (PNG).
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch
import torch.nn.functional as F

from spgnn.comm.comm import Comm
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import Graph, gcn_norm, row_normalize
from spgnn.jsonfile import write_json
from spgnn.partition.order import part_order
from spgnn.partition.partition import Partition
from spgnn.sparse import kernels
from spgnn.sparse.csr import CSR
from spgnn.train.fullbatch import Trainer

HIDDEN, F_SPMM, COPY_BYTES = 128, 128, 512 * 2**20
MIN_REPEATS = 3
TARGETS = {"epoch": 5.0, "spmm": 2.0}     # required speed-up of spgnn over the section's baseline


# --------------------------------------------------------------------------------------------- timing


def time_interleaved(systems: dict[str, Callable[[], object]], warmup: int, repeats: int,
                     budget_s: float) -> dict[str, list[float]]:
    """Seconds per call of each system: `warmup` untimed rounds, then up to `repeats` rounds calling the
    systems in turn (A, B, …, A, B, …); stops early once `budget_s` has passed and MIN_REPEATS are done."""
    for _ in range(warmup):
        for fn in systems.values():
            fn()
    gc.collect()
    times = {name: [] for name in systems}
    start = time.perf_counter()
    for r in range(repeats):
        for name, fn in systems.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        if r + 1 >= MIN_REPEATS and time.perf_counter() - start > budget_s:
            break
    return times


def row(times_s: list[float] | None, note: str = "", ms: float | None = None) -> dict:
    """One system's result: raw seconds and median ms (or a derived `ms`, or nothing: not run)."""
    if times_s is not None:
        ms = 1e3 * float(np.median(times_s))
    return {"times_s": times_s, "median_ms": ms, "note": note}


def section(rows: dict[str, dict], baseline: str, spgnn: str, times: dict[str, list[float]]) -> dict:
    """A group's rows with speed-up = baseline ms / system ms (> 1: faster than the baseline)."""
    base = rows[baseline]["median_ms"]
    for r in rows.values():
        r["speedup_vs_baseline"] = base / r["median_ms"] if r["median_ms"] else None
    return {"baseline": baseline, "spgnn": spgnn, "repeats_done": min(len(t) for t in times.values()),
            "systems": rows}


# ------------------------------------------------------------------------------------- the systems


class PygGCN(torch.nn.Module):
    """PyG's 2-layer GCN: dropout → GCNConv → ReLU → dropout → GCNConv (the structure of spgnn's GNN)."""

    def __init__(self, f_in: int, hidden: int, classes: int, dropout: float, cached: bool):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv1 = GCNConv(f_in, hidden, cached=cached)
        self.conv2 = GCNConv(hidden, classes, cached=cached)
        self.dropout = dropout

    def forward(self, x, edge_index):
        h = F.dropout(x, self.dropout, self.training)
        h = torch.relu(self.conv1(h, edge_index))
        h = F.dropout(h, self.dropout, self.training)
        return self.conv2(h, edge_index)


def pyg_step_fn(g: Graph, cfg: TrainConfig, cached: bool, losses: list) -> Callable[[], float]:
    """One PyG training step on g, set up like spgnn's Trainer (features, widths, dropout, Adam, loss)."""
    torch.manual_seed(cfg.seed)
    x = torch.from_numpy(row_normalize(g.x) if cfg.feature_norm == "row" else g.x)
    coo = g.adj.tocoo()                          # A[dst, src] → PyG's [src, dst]
    edge_index = torch.from_numpy(np.stack([coo.col, coo.row]).astype(np.int64))
    y, train = torch.from_numpy(g.y), torch.from_numpy(g.train_mask)
    model = PygGCN(g.num_features, cfg.hidden, g.num_classes, cfg.dropout, cached)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def step() -> float:
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, edge_index)[train], y[train])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        return losses[-1]

    return step


def bench_epoch(g: Graph, args) -> dict:
    cfg = TrainConfig(dataset=g.name, model="gcn", algo="1d-halo", layers=2, hidden=HIDDEN, dropout=0.5,
                      lr=0.01, feature_norm=args.feature_norm, seed=0)
    trainer = Trainer(cfg, Comm(0, 1), graph=g)
    natural = Trainer(replace(cfg, node_order="natural"), Comm(0, 1), graph=g)
    losses = {"spgnn": [], "spgnn-natural": [], "pyg": [], "pyg-cached": []}
    epoch, epoch_natural = iter(range(10**9)), iter(range(10**9))
    names = {"spgnn": f"spgnn Trainer.step (1d-halo, P=1, nodes in {cfg.node_order} order)",
             "spgnn-natural": "spgnn Trainer.step (1d-halo, P=1, nodes in natural order, as PyG's)",
             "pyg": "PyG GCNConv, edge_index (Â recomputed per call)",
             "pyg-cached": "PyG GCNConv, edge_index, cached=True"}
    systems = {names["spgnn"]: lambda: losses["spgnn"].append(trainer.step(next(epoch))),
               names["spgnn-natural"]: lambda: losses["spgnn-natural"].append(natural.step(next(epoch_natural))),
               names["pyg"]: pyg_step_fn(g, cfg, False, losses["pyg"]),
               names["pyg-cached"]: pyg_step_fn(g, cfg, True, losses["pyg-cached"])}
    times = time_interleaved(systems, args.warmup, args.repeats, args.budget_s)
    rows = {name: row(times[name]) for name in systems}
    out = section(rows, names["pyg"], names["spgnn"], times)
    out["losses"] = losses
    out["config"] = {"model": "gcn", "layers": 2, "hidden": cfg.hidden, "dropout": cfg.dropout, "lr": cfg.lr,
                     "weight_decay": cfg.weight_decay, "feature_norm": cfg.feature_norm}
    return out


def copy_seconds(args) -> list[float]:
    """Seconds per copy of a COPY_BYTES float32 tensor, timed on its own (interleaved with the SpMMs it would
    flush their operands from cache)."""
    src = torch.ones(COPY_BYTES // 4)                         # pages touched before timing
    dst = torch.zeros_like(src)
    return time_interleaved({"copy": lambda: dst.copy_(src)}, args.warmup, args.repeats, args.budget_s)["copy"]


def rcm(a: CSR) -> CSR:
    """A (n×n) with its nodes in reverse Cuthill-McKee order, as ``--node-order rcm`` orders a part's."""
    m, one = a.to_scipy(), Partition(np.zeros(a.shape[0], np.int64), 1)
    return CSR.from_scipy(Partition(one.parts, 1, order=part_order("rcm", m, one)).renumber(m))


def bench_spmm(a_hat: CSR, args) -> tuple[dict, dict, dict]:
    """Sections 2 and 3, and the accuracy checks (max |difference| against torch)."""
    n, nnz = a_hat.shape[0], a_hat.nnz
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(n, F_SPMM, generator=gen)
    g = torch.randn(n, F_SPMM, generator=gen)
    a_torch = a_hat.to("cpu", torch.float32)                  # built (and cached) before timing
    try:
        import torch_sparse  # noqa: F401

        has_torch_sparse = True
    except ImportError:
        has_torch_sparse = False

    a_rcm = rcm(a_hat)
    forward = {"spgnn.sparse.kernels.spmm (" + kernels.get_backend() + ")": lambda: kernels.spmm(a_hat, h),
               "torch.sparse.mm (CSR tensor)": lambda: torch.sparse.mm(a_torch, h),
               "spgnn.sparse.kernels.spmm, nodes in rcm order": lambda: kernels.spmm(a_rcm, h)}
    if has_torch_sparse:
        ts = a_hat._torch_sparse(torch.device("cpu"), torch.float32)
        forward["torch_sparse.matmul"] = lambda: torch_sparse.matmul(ts, h)
    copy_times = copy_seconds(args)
    times = time_interleaved(forward, args.warmup, args.repeats, args.budget_s)
    copy_s = float(np.median(copy_times))
    bandwidth = 2 * COPY_BYTES / copy_s                      # bytes read + written per second
    bound_bytes = (nnz + n) * F_SPMM * 4
    rows = {name: row(t) for name, t in times.items()}
    if not has_torch_sparse:
        rows["torch_sparse.matmul"] = row(None, "not installed")
    rows["memory-bandwidth bound"] = row(None, f"{bound_bytes / 1e9:.2f} GB at {bandwidth / 1e9:.1f} GB/s copy",
                                         ms=1e3 * bound_bytes / bandwidth)
    spgnn_fwd = next(iter(forward))
    fwd = section(rows, "torch.sparse.mm (CSR tensor)", spgnn_fwd, times)
    fwd["copy_bandwidth"] = {"bytes_read_plus_written": 2 * COPY_BYTES, "times_s": copy_times,
                             "median_s": copy_s, "gb_per_s": bandwidth / 1e9}

    h_leaf = h.clone().requires_grad_()
    z = torch.sparse.mm(a_torch, h_leaf)                      # graph kept: only the backward is timed

    def torch_backward():
        h_leaf.grad = None
        z.backward(g, retain_graph=True)

    transposed = {"spgnn.sparse.kernels.spmm(A.transpose(), G), transpose cached": lambda: kernels.spmm(a_hat.T, g),
                  "torch autograd backward of torch.sparse.mm": torch_backward,
                  "CSR.transpose() rebuilt (cost caching saves per call)":
                      lambda: CSR(a_hat.indptr, a_hat.indices, a_hat.data, a_hat.shape,
                                          check=False).transpose()}
    times_t = time_interleaved(transposed, args.warmup, args.repeats, args.budget_s)
    bwd = section({name: row(t) for name, t in times_t.items()},
                  "torch autograd backward of torch.sparse.mm", next(iter(transposed)), times_t)
    bwd["transpose_object_reused"] = a_hat.T is a_hat.T

    checks = {"spmm_max_abs_diff_vs_torch": float((kernels.spmm(a_hat, h) - torch.sparse.mm(a_torch, h))
                                                  .abs().max()),
              "spmm_T_max_abs_diff_vs_torch_grad": float((kernels.spmm(a_hat.T, g) - h_leaf.grad).abs().max())}
    return fwd, bwd, checks


# --------------------------------------------------------------------------------------------- report


def graph_stats(g: Graph, a_hat: CSR) -> dict:
    deg = np.diff(g.adj.indptr)
    return {"name": g.name, "n": g.n, "nnz_A": g.nnz, "nnz_A_hat": a_hat.nnz, "features": g.num_features,
            "classes": g.num_classes, "train_nodes": int(g.train_mask.sum()), "symmetric": bool(g.is_symmetric),
            "mean_degree": float(deg.mean()), "max_degree": int(deg.max())}


def cpu_busy_fraction(interval_s: float = 0.5) -> float | None:
    """Fraction of all CPU time not idle over `interval_s` while this process sleeps (None off Linux)."""
    def idle_total():
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return ticks[3] + ticks[4], sum(ticks)               # idle + iowait, all

    try:
        idle0, total0 = idle_total()
        time.sleep(interval_s)
        idle1, total1 = idle_total()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


SECTIONS = {"epoch": ("epoch", "training step, forward + backward + Adam (2-layer GCN, hidden 128)"),
            "spmm": ("SpMM Â·H", "Z = Â·H, f = 128, float32"),
            "spmm_transposed": ("SpMM Âᵀ·G", "the backward product Âᵀ·G, f = 128, float32")}


def fmt_ms(ms: float) -> str:
    return f"{ms:,.1f}" if ms >= 10 else f"{ms:.2f}"


def markdown(name: str, result: dict) -> str:
    s = result["graph"]
    lines = [f"### {name}: n = {s['n']:,}, nnz(Â) = {s['nnz_A_hat']:,}, {s['features']} features", "",
             *(f"- {short}: {long} ({result[key]['repeats_done']} timed rounds)"
               for key, (short, long) in SECTIONS.items()), "",
             "| measurement | system | ms (median) | speed-up vs baseline | note |", "|---|---|---:|---:|---|"]
    for key, (short, _) in SECTIONS.items():
        sec = result[key]
        for system, r in sec["systems"].items():
            ms = "—" if r["median_ms"] is None else fmt_ms(r["median_ms"])
            ratio = "—" if r.get("speedup_vs_baseline") is None else f"{r['speedup_vs_baseline']:.2f}×"
            note = "; ".join(filter(None, ["baseline" if system == sec["baseline"] else "", r["note"]]))
            lines.append(f"| {short} | {system} | {ms} | {ratio} | {note} |")
    return "\n".join(lines)


def target_lines(results: dict) -> list[str]:
    lines = []
    for name, result in results.items():
        for key, need in TARGETS.items():
            sec = result[key]
            got = sec["systems"][sec["spgnn"]]["speedup_vs_baseline"]
            verdict = "met" if got >= need else f"MISSED by {need / got:.2f}×"
            lines.append(f"- {name}, {key}: spgnn {got:.2f}× faster than {sec['baseline']} "
                         f"(target ≥ {need:g}×): {verdict}")
    return lines


def bar_chart(results: dict, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart written"
    fig, axes = plt.subplots(len(results), len(SECTIONS), squeeze=False,
                             figsize=(6.5 * len(SECTIONS), 0.9 + 2.6 * len(results)))
    for i, (name, result) in enumerate(results.items()):
        for j, (key, (title, _)) in enumerate(SECTIONS.items()):
            sec, ax = result[key], axes[i][j]
            items = [(s, r["median_ms"]) for s, r in sec["systems"].items() if r["median_ms"] is not None]
            colors = ["tab:green" if s == sec["spgnn"] else "tab:gray" if s == sec["baseline"] else "tab:blue"
                      for s, _ in items]
            ax.barh([textwrap.fill(s, 30) for s, _ in items][::-1], [ms for _, ms in items][::-1], color=colors[::-1])
            for k, (_, ms) in enumerate(items[::-1]):
                ax.text(ms, k, " " + fmt_ms(ms), va="center", fontsize=7)
            ax.set_title(f"{name}: {title}", fontsize=8)
            ax.set_xlabel("ms (median)", fontsize=7)
            ax.tick_params(labelsize=6)
            ax.set_xlim(0, 1.25 * max(ms for _, ms in items))
    machine.save_figure(fig, path)
    return f"chart written to {path}"


# ----------------------------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="amazon-computers,rmat:17", help="comma-separated dataset specs")
    machine.data_option(p)
    p.add_argument("--repeats", type=machine.at_least(1), default=10, help="timed rounds per group (median reported)")
    p.add_argument("--warmup", type=machine.at_least(0), default=2, help="untimed rounds first (caches fill)")
    p.add_argument("--budget-s", type=machine.at_least(0.0, float, above=True), default=120.0,
                   help=f"stop a group's timed rounds after this many seconds (at least {MIN_REPEATS} rounds)")
    p.add_argument("--feature-norm", choices=("row", "none"), default="row",
                   help="features as given to both spgnn and PyG (spgnn's default: row)")
    p.add_argument("--threads", type=machine.at_least(1), default=None,
                   help="threads for torch and spgnn's kernels (default: as started, torch's own default)")
    p.add_argument("--out", default="results/bench_epoch.json", type=machine.output,
                   help="JSON path; the PNG goes next to it")
    args = p.parse_args(argv)
    args.datasets = machine.check_datasets(p, [s.strip() for s in args.datasets.split(",") if s.strip()],
                                           args.data_dir)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    graphs = {}
    for spec in args.datasets:                                        # load all first: fail before any timing
        try:
            graphs[spec] = load_dataset(spec, args.data_dir)
        except SpgnnError as e:
            print(f"bench_epoch: {e}", file=sys.stderr)
            return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)       # spgnn's kernels run on torch's threads
    load_before, busy_before = os.getloadavg(), cpu_busy_fraction()
    if busy_before is not None and busy_before > 0.2:
        print(f"bench_epoch: warning: the CPUs were {busy_before:.0%} busy with other work just before starting; "
              f"competing processes slow multi-threaded kernels unevenly", file=sys.stderr)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    results = {}
    for spec, g in graphs.items():
        a_hat = CSR.from_scipy(gcn_norm(g.adj))
        print(f"[{time.perf_counter() - t_start:6.1f} s] {spec}: training steps …", file=sys.stderr, flush=True)
        result = {"graph": graph_stats(g, a_hat), "epoch": bench_epoch(g, args)}
        print(f"[{time.perf_counter() - t_start:6.1f} s] {spec}: SpMM kernels …", file=sys.stderr, flush=True)
        result["spmm"], result["spmm_transposed"], result["checks"] = bench_spmm(a_hat, args)
        results[spec] = result
        print(markdown(spec, result) + "\n", flush=True)
    targets = target_lines(results)
    print("Targets:\n" + "\n".join(targets))
    out = Path(args.out)
    host = machine.facts() | {"loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                                 "cpu_busy_fraction_before": busy_before}
    report = {"command": shlex.join([sys.executable, *sys.argv]), "argv": sys.argv, "started_utc": started,
              "wall_s": time.perf_counter() - t_start, "options": vars(args), "machine": host,
              "targets": targets, "datasets": results}
    write_json(out, report)
    print(f"\nJSON written to {out}")
    print(bar_chart(results, out.with_suffix(".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
