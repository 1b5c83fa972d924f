"""A sparse all-to-all on gloo: a ring round (one peer each way, as `--algo sar` makes P − 1 of an SpMM) sent point
to point, by torch's all_to_all_single, and by spgnn's `Comm`, in one run.

    python benchmarks/bench_ring.py [--procs 2,4,8] [--rows 16,4096] [--width 64] [--repeats 60]
                                    [--out results/bench_ring.json]

Per P, one `run_local` of P gloo processes; per message size (--rows rows of --width float32 columns), the P − 1
rounds of a ring (round r: rank p sends to p + r and receives from p − r) are timed back to back, after a barrier,
--repeats times, each way in turn (the order rotating): point to point (``dist.batch_isend_irecv``: one send to the
member with rows for it, one receive from the member with rows for this rank), ``dist.all_to_all_single`` with the
same splits (every member met, even those with nothing to exchange), and ``Comm.all_to_all_v`` (whichever of the
two `spgnn.comm.comm.TorchTransport` takes, plus the ledger's bookkeeping). Reported per (P, rows): the median over
repetitions of rank 0's seconds a round, each way, and all_to_all_single's over point to point's. Prints a
Markdown table, writes every number to --out (JSON) and a PNG next to it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import machine  # benchmarks/machine.py
import numpy as np
import torch
import torch.distributed as dist

from spgnn.comm.launch import run_local
from spgnn.jsonfile import write_json

WAYS = ("point_to_point", "all_to_all_single", "spgnn")


def _rounds(comm, rows: int, width: int, repeats: int) -> dict:
    """{way: [seconds a round of each repetition]} on this rank."""
    P, me = comm.world_size, comm.rank
    x, out = None, {way: [] for way in WAYS}
    send = torch.randn(rows, width)
    for rep in range(repeats):
        for way in WAYS[rep % 3:] + WAYS[:rep % 3]:
            dist.barrier()
            t0 = time.perf_counter()
            for r in range(1, P):
                to, frm = (me + r) % P, (me - r) % P
                send_rows, recv_rows = [0] * P, [0] * P
                send_rows[to], recv_rows[frm] = rows, rows
                if way == "spgnn":
                    x = comm.all_to_all_v(send, send_rows, recv_rows)
                    continue
                x = send.new_empty(rows, width)
                if way == "all_to_all_single":
                    dist.all_to_all_single(x, send, recv_rows, send_rows)
                else:
                    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, to),
                                                        dist.P2POp(dist.irecv, x, frm)]):
                        work.wait()
            out[way].append((time.perf_counter() - t0) / (P - 1))
    assert x.shape == (rows, width)
    return out


def plot(rows: list, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for size in sorted({r["rows"] for r in rows}):
        sel = [r for r in rows if r["rows"] == size]
        for way, style in zip(WAYS, ("-o", "--s", ":^")):
            ax.plot([r["P"] for r in sel], [r[f"{way}_ms"] for r in sel], style, label=f"{way}, {size} rows")
    ax.set(xlabel="P (gloo processes)", ylabel="ms a ring round", yscale="log", title="one peer each way")
    ax.legend(fontsize=8)
    machine.save_figure(fig, path)


def main(argv=None) -> None:
    ap = machine.arguments(__doc__, "results/bench_ring.json")
    ap.add_argument("--procs", default="2,4,8", type=machine.ints(2),
                    help="comma-separated process counts P (a ring needs at least 2)")
    ap.add_argument("--rows", default="16,4096", type=machine.ints(1), help="comma-separated rows a message")
    ap.add_argument("--width", type=machine.at_least(1), default=64, help="float32 columns a row")
    ap.add_argument("--repeats", type=machine.at_least(1), default=60, help="timed rings each way")
    args = ap.parse_args(argv)
    out = Path(args.out)
    host, rows = machine.facts(), []
    for P in args.procs:
        for size in args.rows:
            got = run_local(_rounds, P, size, args.width, args.repeats, timeout_s=600)[0]
            med = {way: float(np.median(got[way])) * 1e3 for way in WAYS}
            rows.append({"P": P, "rows": size, "bytes": 4 * size * args.width,
                         **{f"{way}_ms": med[way] for way in WAYS},
                         "ratio": med["all_to_all_single"] / med["point_to_point"], "raw_s": got})
    print("| P | rows | ms a round: point to point | all_to_all_single | spgnn | all_to_all_single / point to point |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['P']} | {r['rows']} | {r['point_to_point_ms']:.3f} | {r['all_to_all_single_ms']:.3f} | "
              f"{r['spgnn_ms']:.3f} | {r['ratio']:.2f} |")
    write_json(out, {"schema": "spgnn.bench_ring/1", "created": datetime.now(UTC).isoformat(),
                               "options": vars(args), "machine": host, "rows": rows})
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
