"""Words each rank moves per epoch, measured against the cost model, and the model at cluster scale.

    python benchmarks/bench_comm.py [--out results/bench_comm.json] [--max-procs 8] [--epochs 3]

1. Measured: a 2-layer GCN (hidden 128; R-MAT graphs have 128 features) on a sparse R-MAT graph (edge factor 16)
   and a dense one (edge factor 512), algorithms `ALGOS` (1d, 1d-halo, 1.5d with c = 2 where 2 divides P, 2d and
   3d on their default grids) at P = 1…--max-procs local gloo processes, every algorithm of one P in one
   `run_local`. Per rank: the ledger of one epoch after setup (one `Trainer.step` + one `evaluate`; the ledger is
   reset after the Trainer is built) beside `plan.predict(cfg, graph, P, setup=False)`, which must equal it row
   by row (calls, bytes, messages); and the median over --epochs further epochs of the slowest rank's epoch time.
2. Extrapolated: `cost.plan_table` (one training step, f = hidden = 128, 3 layers, float32, the published class
   counts) for graphs with the published sizes of ogbn-products and ogbn-papers100M, P = 64…4096, every
   configuration `cost.candidates` lists (what `--algo auto` compares); the best per P overall and among
   CAGNET's own algorithms (1d, 1.5d, 2d, 3d), where each one's words go (H blocks, A blocks, partial sums,
   the column-split dense products), each one's seconds split into α (latencies: `cost.latency_steps`) and β
   (bytes), the pick with every α × ALPHA_SCALE (α is loopback gloo here; picks at scale move with it), and
   the mean degree above which 1.5D overtakes 2D/3D.

Words = bytes / 4. Prints Markdown tables and an interpretation on stdout, writes everything to --out (JSON)
and a PNG next to it. Exits 1 (after writing) if any measured ledger differs from its prediction.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch

from spgnn import cost, plan, spmm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.jsonfile import write_json
from spgnn.layers.registry import Dense, Spmm
from spgnn.train.fullbatch import Trainer

HIDDEN, LAYERS, WORD = 128, 2, 4
# (algorithm, replication) measured at every P where it has a shape; grids are the algorithm's default (grid None).
ALGOS = (("1d", 0), ("1d-halo", 0), ("1.5d", 2), ("2d", 0), ("3d", 0))
CAGNET = ("1d", "1.5d", "2d", "3d")                 # CAGNET's own algorithms (SC20 has no halo exchange)
# Where the words go: (collective, group) → term, for every modelled algorithm; the rest is gradients and loss.
TERMS = {("broadcast", "block"): "H", ("all_to_all", "part"): "H", ("broadcast", "column"): "H",
         ("broadcast", "row"): "A blocks", ("all_reduce", "replica"): "partial sums", ("reduce_scatter", "fiber"):
         "partial sums", ("reduce_scatter", "row"): "H·W, softmax", ("all_gather", "row"): "H·W, softmax"}
TERM_NAMES = ("H", "A blocks", "partial sums", "H·W, softmax", "gradients, loss")
KEY = ("phase", "layer", "op", "group")
ROW = ("calls", "sent_bytes", "recv_bytes", "messages")
# Published sizes; nnz = 2 × edges (symmetrised, duplicates ignored); classes as published.
OGB = {"ogbn-products": (2_449_029, 2 * 61_859_140, 47),
       "ogbn-papers100M": (111_059_956, 2 * 1_615_685_872, 172)}
PLAN_PS, PLAN_F, PLAN_LAYERS = (64, 256, 1024, 4096), 128, 3
DEGREES = tuple(2**k for k in range(4, 14))          # mean degrees searched for the 1.5D-over-2D/3D crossover
# α is loopback gloo on this machine; the picks at scale are also given with every α scaled by this (a fast
# interconnect's latency), β unchanged.
ALPHA_SCALE = 0.1
SCALED_ALPHA_BETA = {op: (a * ALPHA_SCALE, b) for op, (a, b) in cost.DEFAULT_ALPHA_BETA.items()}


def timed(fn, *args, **kwargs):
    """(fn(*args, **kwargs), seconds it took)."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def shape_of(algo: str, c: int, P: int) -> tuple | None:
    """The algorithm's default grid for P processes with replication c, or None where it has none."""
    try:
        return tuple(spmm.get(algo).grid_for(P, replication=c))
    except SpgnnError:
        return None


def algorithms(P: int) -> list[tuple[str, int]]:
    return [(algo, c) for algo, c in ALGOS if shape_of(algo, c, P)]


def label(algo: str, shape) -> str:
    """"1.5d c=2", "2d 4x2", "3d 2x2x2", or the algorithm's name where it has one shape per P."""
    shape, dims = tuple(int(x) for x in shape), getattr(spmm.get(algo), "dims", 0)
    if dims:
        return f"{algo} {'x'.join(map(str, shape[:dims]))}"
    return f"1.5d c={shape[1]}" if algo == "1.5d" else algo


def terms(rows: dict) -> dict:
    """Words received by term ({TERM_NAMES: words}) from ledger rows keyed (phase, layer, op, group)."""
    out = dict.fromkeys(TERM_NAMES, 0.0)
    for (_, _, op, group), v in rows.items():
        out[TERMS.get((op, group), "gradients, loss")] += v[2] / WORD
    return out


def train_config(g, algo: str, c: int) -> TrainConfig:
    return TrainConfig(dataset=g.name, algo=algo, replication=c, grid=None, hidden=HIDDEN, layers=LAYERS)


def _epoch(trainer: Trainer, epoch: int) -> None:
    trainer.step(epoch)
    trainer.evaluate()


def measure(comm, graphs: dict, epochs: int, threads: int) -> dict:
    """On one rank: for each graph and algorithm, the ledger rows of the first epoch after setup, the
    seconds of `epochs` more and the ledger rows of all of them; `threads` > 0 overrides the threads
    `launch.share_cores` set (torch's, which spgnn's kernels use too)."""
    if threads > 0:
        torch.set_num_threads(threads)
    out = {}
    for kind, g in graphs.items():
        for algo, c in algorithms(comm.world_size):
            trainer = Trainer(train_config(g, algo, c), comm, graph=g)
            comm.ledger.reset()
            _, first_s = timed(_epoch, trainer, 0)
            rows = {k: tuple(v) for k, v in comm.ledger.rows.items()}
            seconds = [timed(_epoch, trainer, e)[1] for e in range(1, epochs + 1)]
            out[kind, algo] = {"rows": rows, "all_rows": {k: tuple(v) for k, v in comm.ledger.rows.items()},
                               "first_epoch_s": first_s, "epoch_s": seconds}
    return out


# ------------------------------------------------------------------------------------------ comparison


def table(rows: dict) -> list[dict]:
    return [dict(zip(KEY, k)) | dict(zip(ROW, v[:4])) for k, v in sorted(rows.items(), key=lambda kv: str(kv[0]))]


def by_phase(rows: dict, i: int) -> dict:
    out = defaultdict(int)
    for k, v in rows.items():
        out[k[0]] += v[i]
    return dict(out)


def mismatches(measured: dict, predicted: dict) -> list[dict]:
    """Ledger rows (calls, sent, received, messages) that differ, one record per key."""
    out = []
    for k in sorted(set(measured) | set(predicted), key=str):
        m, p = measured.get(k), predicted.get(k)
        m, p = (None if m is None else list(m[:4])), (None if p is None else list(p[:4]))
        if m != p:
            kind = "predicted, not measured" if m is None else "measured, not predicted" if p is None else "differs"
            out.append(dict(zip(KEY, k)) | {"kind": kind, "measured": m, "predicted": p})
    return out


def steady(res: dict) -> bool:
    """Whether every epoch recorded what the first did (counts only)."""
    k = len(res["epoch_s"]) + 1
    first, every = res["rows"], res["all_rows"]
    return set(first) == set(every) and all(tuple(k * x for x in first[key][:4]) == every[key][:4] for key in first)


def compare(kind: str, g, P: int, algo: str, c: int, ranks: list[dict]) -> dict:
    cfg = train_config(g, algo, c)
    predicted = plan.predict(cfg, g, P, setup=False)
    per_rank, bad = [], []
    for r, (res, pred) in enumerate(zip(ranks, predicted)):
        prow = {k: tuple(v) for k, v in pred.rows.items()}
        diff = mismatches(res["rows"], prow)
        bad += [{"rank": r} | d for d in diff]
        per_rank.append({
            "rank": r,
            "recv_bytes": by_phase(res["rows"], 2), "sent_bytes": by_phase(res["rows"], 1),
            "predicted_recv_bytes": by_phase(prow, 2), "predicted_sent_bytes": by_phase(prow, 1),
            "recv_words": sum(v[2] for v in res["rows"].values()) / WORD,
            "sent_words": sum(v[1] for v in res["rows"].values()) / WORD,
            "predicted_recv_words": pred.total("recv_bytes") / WORD,
            "predicted_sent_words": pred.total("sent_bytes") / WORD,
            "messages": sum(v[3] for v in res["rows"].values()), "predicted_messages": pred.total("messages"),
            "comm_s": (sum(v[4] for v in res["all_rows"].values()) - sum(v[4] for v in res["rows"].values()))
            / max(len(res["epoch_s"]), 1), "predicted_comm_s": cost.seconds(pred), "steady": steady(res),
            "first_epoch_s": res["first_epoch_s"], "epoch_s": res["epoch_s"],
            "rows": table(res["rows"]), "predicted_rows": table(prow)})
    slowest = [max(col) for col in zip(*(r["epoch_s"] for r in per_rank))]

    def top(field):
        return max(r[field] for r in per_rank)

    shape = shape_of(algo, c, P)
    busiest = max((res["rows"] for res in ranks), key=lambda rows: sum(v[2] for v in rows.values()))
    return {"graph": kind, "spec": g.name, "P": P, "algo": algo, "replication": max(c, 1),
            "shape": list(shape), "label": label(algo, shape),
            "terms_busiest": terms(busiest),
            "exact": not bad, "mismatches": bad, "steady": all(r["steady"] for r in per_rank),
            "max_recv_words": top("recv_words"), "max_recv_words_predicted": top("predicted_recv_words"),
            "mean_recv_words": float(np.mean([r["recv_words"] for r in per_rank])),
            "max_sent_words": top("sent_words"), "max_sent_words_predicted": top("predicted_sent_words"),
            "slowest_rank_epoch_s": slowest, "median_epoch_s": float(np.median(slowest)) if slowest else None,
            "max_comm_s": top("comm_s"), "max_predicted_comm_s": top("predicted_comm_s"), "per_rank": per_rank}


def loud(rec: dict) -> list[str]:
    """One line per mismatching ledger key (ranks grouped; numbers of the first such rank)."""
    keys = defaultdict(list)
    for m in rec["mismatches"]:
        keys[tuple(m[k] for k in KEY) + (m["kind"],)].append(m)
    unsteady = [] if rec["steady"] else [f"!!! UNSTEADY {rec['spec']} P={rec['P']} {rec['label']}: later epochs "
                                         "recorded other counts than the first"]
    return unsteady + [f"!!! MISMATCH {rec['spec']} P={rec['P']} {rec['label']}: {k[4]} phase={k[0]} layer={k[1]} "
                       f"op={k[2]} group={k[3]} ranks={[m['rank'] for m in ms]}; rank {ms[0]['rank']} (calls, sent, "
                       f"recv, messages) measured={ms[0]['measured']} predicted={ms[0]['predicted']}"
                       for k, ms in keys.items()]


def verdict(records: list[dict]) -> list[str]:
    """The check: every run's ledger equal to the prediction (else a table of what differs), and every epoch
    recording what the first did."""
    bad = [r for r in records if not r["exact"]]
    if not bad:
        text = [f"All {len(records)} (graph, P, algo) runs: measured ledger == predicted, every rank and row.", ""]
    else:
        summary = defaultdict(lambda: [0, set(), set(), None])
        for r in bad:
            for m in r["mismatches"]:
                s = summary[(m["phase"], m["layer"], m["op"], m["kind"])]
                s[0] += 1
                s[1].add(r["algo"])
                s[2].add(r["P"])
                s[3] = s[3] or f"{r['spec']} P={r['P']} {r['label']} rank {m['rank']}: measured {m['measured']} " \
                                f"predicted {m['predicted']}"
        text = [f"## !!! MISMATCH: {len(bad)} of {len(records)} (graph, P, algo) runs differ from the prediction",
                "", "| phase | layer | op | kind | rank-rows | algorithms | P | "
                "example (calls, sent, recv, messages) |", "|---|---|---|---|---|---|---|---|"]
        text += [f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {s[0]} | {', '.join(sorted(s[1]))} | "
                 f"{','.join(map(str, sorted(s[2])))} | {s[3]} |" for k, s in summary.items()]
        text += ["", "Every ledger row not listed above (every rank, phase, layer and op of every run) matched "
                 "the prediction exactly.", ""]
    unsteady = [f"{r['spec']} P={r['P']} {r['label']}" for r in records if not r["steady"]]
    text += [f"!!! UNSTEADY: later epochs recorded other counts than the first in {', '.join(unsteady)}." if unsteady
             else "Every later epoch recorded exactly the counts of the first (all runs, all ranks).", ""]
    return text


# ----------------------------------------------------------------------------------------- extrapolation


def split(led, alpha_beta=None) -> dict:
    """A ledger's predicted seconds split into latency (α·latency_steps, also by "op group") and bandwidth
    (β·charged_bytes), with its latencies and its broadcast calls."""
    ab = alpha_beta or cost.DEFAULT_ALPHA_BETA
    steps = {k: cost.latency_steps(k[2], row[0], row[3]) for k, row in led.rows.items()}
    by = defaultdict(lambda: [0, 0.0])                  # "op group" → [latencies, α seconds]
    for k, v in steps.items():
        by[f"{k[2]} {k[3]}"][0] += v
        by[f"{k[2]} {k[3]}"][1] += ab[k[2]][0] * v
    return {"alpha_s": sum(ab[k[2]][0] * v for k, v in steps.items()), "alpha_by": dict(by),
            "beta_s": sum(ab[op][1] * cost.charged_bytes(op, row[1], row[2], led.sizes.get(group))
                          for (_, _, op, group), row in led.rows.items()),
            "latencies": sum(steps.values()),
            "broadcast_calls": sum(row[0] for (_, _, op, _), row in led.rows.items() if op == "broadcast")}


def detail(n: int, nnz: int, model, row: dict, ranks: int = 8) -> dict:
    """For one plan row, over the first `ranks` ranks (as `plan_table` looks): words by term on the busiest
    rank (most bytes received), and the slowest rank's seconds split into α and β terms."""
    cls = spmm.get(row["algo"])
    shape = tuple(int(x) for x in row["shape"].split("x"))
    stats = dict.fromkeys(model.adjacencies, cost.BlockStats.expected(n, nnz, cls.num_parts(shape)))
    leds = [cost.epoch_ledger(cls, stats, shape, r, model, evals=0, setup=False) for r in range(min(row["P"], ranks))]
    busiest = max(leds, key=lambda led: led.total("recv_bytes"))
    return {"terms": terms(busiest.rows), **split(max(leds, key=cost.seconds))}


def fastest(rows: list[dict], algos=None, key="seconds") -> dict:
    """The row of least `key` among `algos` (all if None); a tie within 0.1% goes to the first listed (sar moves
    1d-halo's bytes, less 0.02% that its P − 1 calls each truncate from the fractional expected rows)."""
    rows = [r for r in rows if algos is None or r["algo"] in algos]
    least = min(r[key] for r in rows)
    return next(r for r in rows if r[key] <= least * (1 + 1e-3))


def by_algo(rows: list[dict]) -> dict:
    """{algo: its fastest row}, algorithms in the order `cost.candidates` lists them."""
    return {a: fastest(rows, (a,)) for a in dict.fromkeys(r["algo"] for r in rows)}


def crossover(n: int, model) -> dict:
    """{P: the smallest mean degree in DEGREES at which the fastest 1.5D beats the fastest 2D and 3D (None if
    none does)} for a graph of n nodes."""
    out = {}
    for P in PLAN_PS[:3]:
        out[P] = None
        for d in DEGREES:
            best = by_algo(cost.plan_table(n, n * d, [P], model))
            if best["1.5d"]["seconds"] < min(best["2d"]["seconds"], best["3d"]["seconds"]):
                out[P] = d
                break
    return out


def extrapolate() -> dict:
    """Per OGB graph: the plan rows, each algorithm's fastest row per P (with its terms and α/β split), the
    picks per P, the overall pick with α scaled by ALPHA_SCALE, and the 1.5D crossover degrees."""
    out = {}
    for name, (n, nnz, classes) in OGB.items():
        model = cost.ModelCost.of_config(TrainConfig(hidden=HIDDEN, layers=PLAN_LAYERS), PLAN_F, classes)
        rows = cost.plan_table(n, nnz, PLAN_PS, model)
        scaled = cost.plan_table(n, nnz, PLAN_PS, model, alpha_beta=SCALED_ALPHA_BETA)
        for r in rows + scaled:
            r |= {"label": label(r["algo"], r["shape"].split("x")),
                  "recv_words_per_rank": r["recv_bytes_per_rank"] / WORD}
        per_p, picks = {}, {}
        for P in PLAN_PS:
            at = [r for r in rows if r["P"] == P]
            per_p[P] = by_algo(at)
            for r in per_p[P].values():
                r |= detail(n, nnz, model, r)
            fewest = min(r["recv_words_per_rank"] for r in at)
            picks[P] = {"overall": fastest(at)["label"], "cagnet": fastest(at, CAGNET)["label"],
                        "fewest_words": fastest(at, key="recv_words_per_rank")["label"],
                        "fewest_words_tied": [r["label"] for r in at
                                              if r["recv_words_per_rank"] <= fewest * (1 + 1e-3)],
                        "overall_scaled_alpha": fastest([r for r in scaled if r["P"] == P])["label"]}
        ops = [op for layer in model.layers for op in layer]
        out[name] = {"n": n, "nnz": nnz, "classes": classes,
                     "widths": [model.features] + [op.f_out for op in ops if isinstance(op, Dense)],
                     "spmm_widths": [op.width for op in ops if isinstance(op, Spmm)], "n_params": model.n_params,
                     "rows": rows,
                     "rows_scaled_alpha": scaled, "fastest_per_algo": per_p, "picks": picks,
                     "crossover_degree": crossover(n, model)}
    return out


# ---------------------------------------------------------------------------------------------- output


def fmt_w(w: float) -> str:
    return "0" if w == 0 else f"{w:.3g}"


def measured_table(records: list[dict], kind: str) -> str:
    recs = [r for r in records if r["graph"] == kind]
    lines = [f"### Measured vs predicted, {recs[0]['spec']} ({kind}), words per rank per epoch (max over ranks)", "",
             "| P | algo (grid) | recv measured | recv predicted | sent measured | sent predicted | exact | "
             "median epoch ms | comm ms measured | comm ms model |", "|---|---|---|---|---|---|---|---|---|---|"]
    # comm ms measured: mean over the timed epochs of the slowest rank's time inside collectives (waits included);
    # "–" where no epoch was timed (--epochs 0)
    for r in recs:
        exact = "yes" if r["exact"] else f"**NO** ({len(r['mismatches'])} rows)"
        timed_ms = ("–", "–") if r["median_epoch_s"] is None else \
            (f"{r['median_epoch_s'] * 1e3:.0f}", f"{r['max_comm_s'] * 1e3:.0f}")
        lines.append(f"| {r['P']} | {r['label']} | {fmt_w(r['max_recv_words'])} | "
                     f"{fmt_w(r['max_recv_words_predicted'])} | {fmt_w(r['max_sent_words'])} | "
                     f"{fmt_w(r['max_sent_words_predicted'])} | {exact} | {' | '.join(timed_ms)} | "
                     f"{r['max_predicted_comm_s'] * 1e3:.1f} |")
    return "\n".join(lines)


def terms_table(title: str, entries: list[tuple[str, str, dict]]) -> str:
    """entries: (where, configuration, terms) → one row each, words and the share of the total."""
    lines = [title, "", f"| where | configuration | {' | '.join(TERM_NAMES)} | total |",
             "|---" * (len(TERM_NAMES) + 3) + "|"]
    for where, name, t in entries:
        total = sum(t[k] for k in TERM_NAMES)

        def cell(k, t=t, total=total):
            return f"{fmt_w(t[k])} {t[k] / total:.0%}" if t[k] else "0"

        lines.append(f"| {where} | {name} | {' | '.join(cell(k) for k in TERM_NAMES)} | {fmt_w(total)} |")
    return "\n".join(lines)


def plan_markdown(name: str, ex: dict) -> str:
    algos = list(ex["fastest_per_algo"][PLAN_PS[0]])
    lines = [f"### Model at scale: {name} (n = {ex['n']:,}, nnz = {ex['nnz']:,}), 3-layer GCN, f = 128, one "
             "training step: each algorithm's fastest grid, words received per rank · predicted seconds", "",
             f"| P | {' | '.join(algos)} | best | best of CAGNET's | fewest words | best, α × {ALPHA_SCALE:g} |",
             "|---" * (len(algos) + 5) + "|"]
    for P in PLAN_PS:
        per = ex["fastest_per_algo"][P]

        def cell(r):
            grid = r["label"][len(r["algo"]) + 1:]
            return f"{grid + ': ' if grid else ''}{fmt_w(r['recv_words_per_rank'])} · {r['seconds']:.3g} s"

        pk = ex["picks"][P]
        lines.append(f"| {P} | {' | '.join(cell(per[a]) for a in algos)} | {pk['overall']} | {pk['cagnet']} | "
                     f"{pk['fewest_words']} | {pk['overall_scaled_alpha']} |")
    return "\n".join(lines)


def plan_terms(ex: dict) -> str:
    entries = [(f"{name} P={P}", r["label"], r["terms"]) for name, e in ex.items() for P in PLAN_PS
               for a, r in e["fastest_per_algo"][P].items() if a in ("1d-halo", "1.5d", "2d", "3d")]
    return terms_table("### Where the words go at scale (busiest rank, one step, each algorithm's fastest grid)",
                       entries)


def get(records, kind, P, algo):
    return next((r for r in records if r["graph"] == kind and r["P"] == P and r["algo"] == algo), None)


def share(t: dict, k: str) -> float:
    return t[k] / max(sum(t[x] for x in TERM_NAMES), 1e-300)


def pick_row(e: dict, P: int, lbl: str | None = None) -> dict:
    """The fastest row of the algorithm whose configuration `lbl` (default: the overall pick at P) is."""
    lbl = lbl or e["picks"][P]["overall"]
    algo = next(r["algo"] for r in e["rows"] if r["P"] == P and r["label"] == lbl)
    return e["fastest_per_algo"][P][algo]


def seconds_split(r: dict, top: int = 2) -> str:
    """"1.01 s: α 0.864 s for 16831 latencies (all_reduce world 16380: 0.819 s, …), β 0.145 s"."""
    big = sorted(r["alpha_by"].items(), key=lambda kv: -kv[1][1])[:top]
    return (f"{r['seconds']:.3g} s: α {r['alpha_s']:.3g} s for {r['latencies']} latencies ("
            + ", ".join(f"{k} {n}: {a:.3g} s" for k, (n, a) in big) + f"), β {r['beta_s']:.3g} s")


def interpret(records: list[dict], graphs: dict, ex: dict, threads: int) -> list[str]:
    """The findings in words, every number taken from the figures above."""
    out = ["## What the figures show", ""]
    Ps = sorted({r["P"] for r in records})
    P = max((p for p in Ps if len({r["algo"] for r in records if r["P"] == p}) == len(ALGOS)), default=Ps[-1])
    found = {}
    for kind, g in graphs.items():
        out.append(f"- **{kind}** {g.name}: n = {g.n:,}, nnz = {g.nnz:,} (mean degree {g.nnz / g.n:.0f}; "
                   f"a row of H is f = {HIDDEN} words, a nonzero of A travels as 2 words, int32 index + float32).")
        if P == 1:
            continue
        at = sorted((r for r in records if r["graph"] == kind and r["P"] == P), key=lambda r: r["max_recv_words"])
        d1 = get(records, kind, P, "1d")
        cag = [r for r in at if r["algo"] in CAGNET]
        found[kind] = cag[0]
        summa = "; ".join(f"{r['label']}: A blocks {share(r['terms_busiest'], 'A blocks'):.0%}, H "
                          f"{share(r['terms_busiest'], 'H'):.0%}, H·W and softmax "
                          f"{share(r['terms_busiest'], 'H·W, softmax'):.0%}" for r in at if r["algo"] in ("2d", "3d"))
        out += [f"  At P = {P}, words received per rank (max over ranks), fewest first: "
                + ", ".join(f"{r['label']} {fmt_w(r['max_recv_words'])}" for r in at)
                + f". Fewest among CAGNET's: {cag[0]['label']} ({cag[0]['max_recv_words'] / d1['max_recv_words']:.2f}× "
                f"1d). 1d-halo receives {get(records, kind, P, '1d-halo')['max_recv_words'] / d1['max_recv_words']:.2f}"
                f"× 1d's words (the share of remote H rows a block row touches). Busiest rank's words, 2D/3D: {summa}."]
        if at[0]["median_epoch_s"] is not None:             # epochs were timed (--epochs > 0)
            fast = min(at, key=lambda r: r["median_epoch_s"])
            out.append(f"  Fastest median epoch at P = {P}: {fast['label']} ({fast['median_epoch_s'] * 1e3:.0f} ms; "
                       + ", ".join(f"{r['label']} {r['median_epoch_s'] * 1e3:.0f} ms" for r in at if r is not fast)
                       + ").")
    out += [f"- Epoch times: P processes with {threads or 'cores/P'} thread(s) each on a shared 2-core machine over "
            "loopback gloo: they show overheads and scheduling, not what the bytes would cost on a network. The "
            "words are exact and machine-independent: they are the result.", ""]

    out += ["## Against CAGNET", "",
            "CAGNET (SC20) finds 1.5D best on dense graphs at moderate P, 2D and 3D best on sparse graphs and at "
            "large P. spgnn adds the sparsity-aware 1d-halo (not in SC20) and moves sparse blocks as int32 "
            "indices + float32 values (2 words a nonzero) plus int32 row pointers, or as COO (3 words a nonzero) "
            "where a block has fewer nonzeros than rows."]
    if {"sparse", "dense"} <= set(found):
        dense, sparse = found["dense"], found["sparse"]
        ok = dense["algo"] == "1.5d" and sparse["algo"] in ("2d", "3d")
        out.append(f"- Measured at P = {P}: fewest words among CAGNET's algorithms on the dense graph "
                   f"{dense['label']}, on the sparse one {sparse['label']}: "
                   + ("CAGNET's finding, reproduced. On the dense graph a nonzero's 2 words times the mean degree "
                      "exceed the f words of an H row, so the A-block broadcasts of 2D/3D cost more than the H they "
                      "save." if ok else "not CAGNET's ranking; the terms above show which broadcast dominates.")
                   + "".join(f" {r['label']} has C = 1: it broadcasts no A blocks and is 1.5D with the team's "
                             "all-reduce replaced by a reduce-scatter." for r in (dense, sparse)
                             if r["algo"] == "3d" and r["shape"][1] == 1))
    for name, e in ex.items():
        pk, cross = e["picks"], e["crossover_degree"]
        d = e["nnz"] / e["n"]
        first = e["fastest_per_algo"][PLAN_PS[0]]
        big, prev = e["fastest_per_algo"][PLAN_PS[-1]], e["fastest_per_algo"][PLAN_PS[-2]]
        o, t3, halo = first["1.5d"], first["3d"], big["1d-halo"]

        def fall(a, big=big, prev=prev):
            return prev[a]["recv_words_per_rank"] / big[a]["recv_words_per_rank"]

        out.append(
            f"- {name} (mean degree {d:.0f}), model: best by seconds "
            + "; ".join(f"P = {P}: {pk[P]['overall']}" for P in PLAN_PS) + ". Among CAGNET's: "
            + "; ".join(f"P = {P}: {pk[P]['cagnet']}" for P in PLAN_PS) + ". Fewest words: "
            + "; ".join(f"P = {P}: {' = '.join(pk[P]['fewest_words_tied'])}" for P in PLAN_PS) + ".")
        why = [f"  At P = {PLAN_PS[0]} {t3['label']} receives {fmt_w(t3['recv_words_per_rank'])} words against "
               f"{o['label']}'s {fmt_w(o['recv_words_per_rank'])}: 3D's H share is n·f/(C·L) per SpMM "
               f"({fmt_w(t3['terms']['H'])} words) against 1.5D's n·f/c ({fmt_w(o['terms']['H'])}), and at mean "
               f"degree {d:.0f} its A blocks cost only {fmt_w(t3['terms']['A blocks'])} "
               f"({share(t3['terms'], 'A blocks'):.0%} of its words)."]
        if cross[PLAN_PS[0]]:
            why.append(f"1.5D beats 2D and 3D only from mean degree ≈ {cross[PLAN_PS[0]]} at P = {PLAN_PS[0]}, "
                       + ", ".join(f"{cross[P] or f'> {DEGREES[-1]}'} at P = {P}" for P in PLAN_PS[1:3])
                       + " (same n, searched over powers of 2): CAGNET's dense regime is denser than this graph.")
        why.append(f"At P = {PLAN_PS[-1]}, 1d-halo receives {fmt_w(halo['recv_words_per_rank'])} words against "
                   f"{big['3d']['label']}'s {fmt_w(big['3d']['recv_words_per_rank'])}: with uniformly random "
                   "columns a block row touches about nnz/P remote rows, so the halo falls like 1/P (÷"
                   f"{fall('1d-halo'):.2f} from P = {PLAN_PS[-2]}), faster than 3D's H blocks, n·f/(C·L) ≈ "
                   f"n·f/P^⅔ (3D's words ÷{fall('3d'):.2f}; A blocks {share(big['3d']['terms'], 'A blocks'):.0%} "
                   f"and H {share(big['3d']['terms'], 'H'):.0%} of them).")
        Pb = PLAN_PS[-1]
        pick = pick_row(e, Pb)
        fewest = [pick_row(e, Pb, lbl) for lbl in pk[Pb]["fewest_words_tied"]]
        tie = ("" if len(fewest) == 1 else "; a tie within 0.1%" + (
            ": sar moves 1d-halo's bytes in a ring of P − 1 one-peer calls"
            if {"1d-halo", "sar"} <= {r["algo"] for r in fewest} else ""))
        why.append(f"The pick there, {pick['label']}, takes {seconds_split(pick)}.")
        if all(r["label"] != pick["label"] for r in fewest):
            f0 = fewest[0]
            why.append(f"{' and '.join(r['label'] for r in fewest)} receive the fewest words "
                       f"({fmt_w(f0['recv_words_per_rank'])} against {fmt_w(pick['recv_words_per_rank'])}{tie}) "
                       f"but take {seconds_split(f0)}: bytes are not what they pay for.")
        else:
            why.append(f"It receives the fewest words ({fmt_w(pick['recv_words_per_rank'])}{tie}): its bytes saved "
                       "outweigh its latencies.")
        for a in ("3d", "1.5d"):
            if a != pick["algo"] and all(r["algo"] != a for r in fewest):
                why.append(f"{big[a]['label']} takes {seconds_split(big[a])}.")
        changed = [P for P in PLAN_PS if pk[P]["overall_scaled_alpha"] != pk[P]["overall"]]
        why.append(f"With every α × {ALPHA_SCALE:g} (a fast interconnect; β unchanged) the picks are "
                   + "; ".join(f"P = {P}: {pk[P]['overall_scaled_alpha']}" for P in PLAN_PS)
                   + (f" — a different pick at P = {', '.join(map(str, changed))}." if changed
                      else " — the same picks."))
        out.append("  " + " ".join(why))
    ab = cost.DEFAULT_ALPHA_BETA
    out += ["- The statistics-only model assumes uniformly random columns (a random partition), the worst case "
            "for the halo; a METIS partition touches far fewer remote rows. α is this machine's loopback gloo "
            "figure (" + ", ".join(f"{op} {a * 1e6:.0f} µs" for op, (a, _) in ab.items()) + " a latency step; "
            "`cost.latency_steps`: an all-to-all pays one a peer it sends to, an all-reduce 2⌈log₂ g⌉, an "
            "all-gather or reduce-scatter ⌈log₂ g⌉, a broadcast one), β its loopback bandwidth, not a cluster "
            "network's: at thousands of ranks the latencies can decide the picks, so they may move with α (the "
            "α-scaled picks show whether they do); the seconds rank configurations, they do not forecast.", ""]
    return out


def plot(records: list[dict], graphs: dict, ex: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algos = [a for a, _ in ALGOS]                   # sar moves 1d-halo's words (in P − 1 rounds)
    colours = {a: f"C{i}" for i, a in enumerate(algos)}
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    for ax, (kind, g) in zip(axes, graphs.items()):
        for algo, _ in ALGOS:
            rs = [r for r in records if r["graph"] == kind and r["algo"] == algo]
            Ps = [r["P"] for r in rs]
            ax.plot(Ps, [r["max_recv_words_predicted"] for r in rs], "-", color=colours[algo],
                    label=f"{algo}{' c=2' if algo == '1.5d' else ''} predicted")
            ax.plot(Ps, [r["max_recv_words"] for r in rs], "o", color=colours[algo], mfc="none", ms=8,
                    label=f"{algo} measured")
            bad = [r for r in rs if not r["exact"]]
            ax.plot([r["P"] for r in bad], [r["max_recv_words"] for r in bad], "x", color="black", ms=9)
        ax.set_xticks(sorted({r["P"] for r in records}))
        ax.set(title=f"{kind}: {g.name} (n={g.n:,}, nnz={g.nnz:,})", xlabel="P (local gloo processes; 2d, 3d: "
               "default grid)", ylabel="words received per rank per epoch (max)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2, title="x: measured ≠ predicted", title_fontsize=7)
    ax = axes[2]
    for (name, e), style in zip(ex.items(), ("-", "--")):
        for algo in algos:
            ax.plot(PLAN_PS, [e["fastest_per_algo"][P][algo]["recv_words_per_rank"] for P in PLAN_PS], style,
                    marker=".", color=colours[algo], label=f"{name} {algo}")
    ax.set(xscale="log", yscale="log", xticks=PLAN_PS, xticklabels=[str(P) for P in PLAN_PS],
           title="model, f = 128, 3-layer GCN: fastest grid of each algorithm",
           xlabel="P", ylabel="words received per rank per step")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, ncol=2)
    machine.save_figure(fig, path)


def main(argv=None) -> int:
    ap = machine.arguments(__doc__, "results/bench_comm.json")
    ap.add_argument("--max-procs", type=machine.at_least(1), default=8, help="measure at P = 1 … this")
    ap.add_argument("--epochs", type=machine.at_least(0), default=3, help="timed epochs after the measured one (0: "
                    "words only, no epoch times)")
    ap.add_argument("--sparse", default="rmat:14", help="sparse graph (rmat, edge factor 16)")
    ap.add_argument("--dense", default="rmat:11:512", help="dense graph (rmat, edge factor >= 128)")
    ap.add_argument("--threads", type=machine.at_least(0), default=1,
                    help="threads per process (0: spgnn's default, cores / P)")
    ap.add_argument("--timeout", type=machine.at_least(0.0, float, above=True), default=600.0,
                    help="seconds one run_local may take")
    args = ap.parse_args(argv)
    machine.check_datasets(ap, [args.sparse, args.dense])
    t_start, facts = time.perf_counter(), machine.facts()
    graphs = {"sparse": load_dataset(args.sparse), "dense": load_dataset(args.dense)}
    records, wall = [], {}
    for P in range(1, args.max_procs + 1):
        results, wall[P] = timed(run_local, measure, P, graphs, args.epochs, args.threads, timeout_s=args.timeout)
        for kind, g in graphs.items():
            for algo, c in algorithms(P):
                rec = compare(kind, g, P, algo, c, [res[kind, algo] for res in results])
                records.append(rec)
                for line in loud(rec):
                    print(line, file=sys.stderr, flush=True)
        print(f"[{time.perf_counter() - t_start:6.1f} s] P = {P} done ({wall[P]:.1f} s)", file=sys.stderr, flush=True)
    ex = extrapolate()
    bad = [r for r in records if not (r["exact"] and r["steady"])]

    text = ["# bench_comm: words per rank, measured and predicted", "",
            f"GCN, {LAYERS} layers, hidden {HIDDEN}, partition block, float32; epoch = one step + one evaluation, "
            f"after setup; words = bytes/4; P = 1…{args.max_procs} local gloo processes.", ""]
    text += [measured_table(records, kind) + "\n" for kind in graphs]
    text += [terms_table(f"### Where the words go, measured at P = {args.max_procs} (busiest rank, one epoch)",
                         [(f"{r['graph']} {r['spec']}", r["label"], r["terms_busiest"]) for r in records
                          if r["P"] == args.max_procs]) + "\n"]
    text += [plan_markdown(name, e) + "\n" for name, e in ex.items()]
    text += [plan_terms(ex) + "\n"]
    text += verdict(records)
    text += interpret(records, graphs, ex, args.threads)
    total = time.perf_counter() - t_start
    text.append(f"Wall time {total:.0f} s.")
    print("\n".join(text))

    out = Path(args.out)
    png = out.with_suffix(".png")
    write_json(out, {
        "schema": "spgnn.bench_comm/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "options": vars(args), "machine": facts,
        "load_average_end": os.getloadavg(), "wall_s": total, "run_local_wall_s": wall,
        "model": {"layers": LAYERS, "hidden": HIDDEN, "partition": "block", "alpha_beta": cost.DEFAULT_ALPHA_BETA,
                  "alpha_scale": ALPHA_SCALE, "alpha_beta_scaled": SCALED_ALPHA_BETA},
        "graphs": {k: {"spec": g.name, "n": g.n, "nnz": g.nnz, "features": g.num_features,
                       "classes": g.num_classes} for k, g in graphs.items()},
        "all_exact": all(r["exact"] for r in records), "all_steady": all(r["steady"] for r in records),
        "measured": records, "extrapolation": ex, "text": "\n".join(text), "png": str(png),
    }, default=str)
    print(f"\nwrote {out}", file=sys.stderr)
    machine.plot_after("bench_comm", png, plot, records, graphs, ex)
    if bad:
        print(f"!!! {len(bad)} runs: measured != predicted or unsteady (see the MISMATCH table and {out})",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
