"""The local SpMM kernel alone at several widths: spgnn's against torch.sparse.mm, and against another build of
spgnn's kernels (--library), at P = 1.

    python benchmarks/bench_spmm.py [--datasets amazon-computers] [--data-dir DATA]
                                    [--widths 10,20,64,128,256,300,767] [--library OTHER.so] [--repeats 21]
                                    [--out results/bench_spmm.json]

Per dataset Â = D^-½(A+I)D^-½ in float32, its nodes in reverse Cuthill-McKee order (`bench_epoch.rcm`, as
``--node-order rcm`` orders a part's), and per width f a random H (n×f): Z = Â·H written into an output given, by
spgnn's kernel (`spgnn.sparse.kernels.spmm`, this build), by torch.sparse.mm on a CSR tensor, and with --library by
the same C function of another build of spgnn's library (the ``spgnn/_native*.so`` that ``pip install -e .`` made in
another checkout, e.g. of the code before a kernel change), each checked against torch's product first (float
tolerance) and then timed in interleaved rounds (`bench_epoch.time_interleaved`). Reported per width: the median
milliseconds, torch / spgnn and, with --library, the median of the rounds' paired ratios spgnn / other (below 1:
this build is faster). Prints a Markdown table, writes every raw time to --out (JSON) and a plot of ms against f
next to it.
"""

from __future__ import annotations

import ctypes
import functools
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import bench_epoch  # benchmarks/bench_epoch.py
import machine  # benchmarks/machine.py
import numpy as np
import torch

from spgnn import native
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import gcn_norm
from spgnn.jsonfile import write_json
from spgnn.sparse import kernels
from spgnn.sparse.csr import CSR


def library_spmm(path: str):
    """out = A·h by the SpMM of the spgnn library at `path` (its ``spmm_<index>_<value>`` C function, looked up
    once per index and value type, as `spgnn.native.function` does for this build's). OSError where `path` is not a
    shared library, AttributeError where it has no ``spmm_i32_f32`` (not spgnn's)."""
    lib = ctypes.CDLL(str(Path(path).resolve()))
    lib.spmm_i32_f32                                    # noqa: B018 (raises where it is not spgnn's library)

    @functools.cache
    def kernel(name: str):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [native.i64, native.i64, *[native.addr] * 5, native.i32], None
        return fn

    def spmm(a: CSR, h: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        kernel(f"spmm_{native.suffix(a.indices.dtype)}_{native.suffix(a.data.dtype)}")(
            a.shape[0], h.shape[1], *map(native.ptr, (a.indptr, a.indices, a.data, h, out)), 0)
        return out
    return spmm


def measure(a: CSR, f: int, args, other) -> dict:
    """One width's systems, checked against torch, then timed interleaved: {name: seconds per call}."""
    h = torch.randn(a.shape[1], f, generator=torch.Generator().manual_seed(f))
    out, a_torch = torch.empty(a.shape[0], f), a.to("cpu", torch.float32)
    systems = {"spgnn": lambda: kernels.spmm(a, h, out=out), "torch.sparse.mm": lambda: torch.sparse.mm(a_torch, h)}
    if other is not None:
        systems["other build"] = lambda: other(a, h, out)
    ref = torch.sparse.mm(a_torch, h)
    for name, fn in systems.items():
        z = fn()
        if not torch.allclose(z, ref, rtol=1e-4, atol=1e-5):
            raise SystemExit(f"bench_spmm: {name} at f = {f} differs from torch.sparse.mm by "
                             f"{float((z - ref).abs().max()):.3g}")
    return bench_epoch.time_interleaved(systems, args.warmup, args.repeats, args.budget_s)


def summarise(dataset: str, f: int, times: dict) -> dict:
    ms = {name: 1e3 * float(np.median(t)) for name, t in times.items()}
    row = {"dataset": dataset, "f": f, "ms": ms, "torch_over_spgnn": ms["torch.sparse.mm"] / ms["spgnn"],
           "raw_s": times}
    if "other build" in times:
        n = min(len(times["spgnn"]), len(times["other build"]))
        row["spgnn_over_other"] = float(np.median(np.array(times["spgnn"][:n]) / np.array(times["other build"][:n])))
    return row


def table(rows) -> str:
    other = "spgnn_over_other" in rows[0]
    head = "| dataset | f | spgnn ms | torch.sparse.mm ms | torch / spgnn |" + \
        (" other build ms | spgnn / other (paired) |" if other else "")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = f"| {r['dataset']} | {r['f']} | {r['ms']['spgnn']:.3f} | {r['ms']['torch.sparse.mm']:.3f} | " \
               f"{r['torch_over_spgnn']:.2f} |"
        lines.append(line + (f" {r['ms']['other build']:.3f} | {r['spgnn_over_other']:.3f} |" if other else ""))
    return "\n".join(lines)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        for name, style in (("spgnn", "o-"), ("torch.sparse.mm", "s--"), ("other build", "^:")):
            if name in mine[0]["ms"]:
                ax.plot([r["f"] for r in mine], [r["ms"][name] for r in mine], style, label=f"{dataset}: {name}")
    ax.set(xscale="log", yscale="log", xlabel="width f (columns of H)", ylabel="ms a product (median)",
           title="Z = Â·H at P = 1")
    ax.legend(fontsize=8)
    machine.save_figure(fig, path)


def main(argv=None) -> int:
    ap = machine.arguments(__doc__, "results/bench_spmm.json", data=True)
    ap.add_argument("--datasets", default="amazon-computers", help="comma-separated dataset specs")
    ap.add_argument("--widths", default="10,20,64,128,256,300,767", type=machine.ints(1),
                    help="comma-separated widths f of H")
    ap.add_argument("--library", default=None, help="another build's spgnn/_native*.so, timed beside this one")
    ap.add_argument("--repeats", type=machine.at_least(1), default=21, help="timed rounds (median reported)")
    ap.add_argument("--warmup", type=machine.at_least(0), default=2, help="untimed rounds first")
    ap.add_argument("--budget-s", type=machine.at_least(0.0, float, above=True), default=60.0,
                    help="seconds a width's rounds may take (at least 3)")
    args = ap.parse_args(argv)
    widths = args.widths
    if args.library and not Path(args.library).is_file():
        ap.error(f"--library {args.library}: no such file (another checkout's spgnn/_native*.so)")
    if not native.available():
        ap.error("spgnn's C kernels are not built: pip install -e . (needs a C compiler)")
    try:
        other = library_spmm(args.library) if args.library else None
    except (OSError, AttributeError) as e:
        ap.error(f"--library {args.library}: not a build of spgnn's kernels ({e})")
    out = Path(args.out)
    try:
        graphs = {s: load_dataset(s, args.data_dir) for s in args.datasets.split(",")}
    except SpgnnError as e:
        ap.error(str(e))
    kernels.set_backend("native")
    start, host = time.perf_counter(), machine.facts()
    rows = []
    for spec, g in graphs.items():
        a = bench_epoch.rcm(CSR.from_scipy(gcn_norm(g.adj))).astype(np.float32)
        rows += [summarise(spec, f, measure(a, f, args, other)) for f in widths]
    text = table(rows)
    print(text)
    png = out.with_suffix(".png")
    write_json(out, {
        "schema": "spgnn.bench_spmm/1", "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "options": vars(args), "machine": host,
        "wall_s": time.perf_counter() - start, "rows": rows, "text": text, "png": str(png)})
    print(f"wrote {out}", file=sys.stderr)
    machine.plot_after("bench_spmm", png, plot, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
