"""spgnn plot and spgnn partition --plot: every panel is drawn from the numbers it is given, the image is
written, and a missing matplotlib or a file that is no report gives one clear line."""

import json
import sys

import numpy as np
import pytest

from spgnn.cli import main
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph

pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install .[plot])")
from spgnn import plot  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _report(comm, algo):
    cfg = TrainConfig(algo=algo, hidden=8, epochs=4, eval_every=2, partition="random")
    return Trainer(cfg, comm, graph=small_graph(n=80, seed=2)).run(log=None)


@pytest.fixture(scope="module")
def reports():
    return [run_local(_report, 2, algo)[0] for algo in ("1d-halo", "2d")]


def axis(fig, title):
    return next(ax for ax in fig.axes if ax.get_title() == title)


def heights(ax, label):
    """Bar heights of the series `label` (NaN where no bar was drawn)."""
    container = next(c for c in ax.containers if c.get_label() == label)
    return np.array([b.get_height() for b in container])


def test_report_figure_carries_every_number(reports):
    fig = plot.report_figure(reports)
    names = plot.labels(reports)
    assert names == ["1: 1d-halo · random · P=2", "2: 2d · random · P=2"]
    lines = {ln.get_label(): ln for ln in axis(fig, "training loss").lines}
    acc = {ln.get_label(): ln for ln in axis(fig, "accuracy").lines}
    for name, r in zip(names, reports):
        assert np.allclose(lines[name].get_ydata(), [e["loss"] for e in r["epochs"]])
        evaluated = [e for e in r["epochs"] if "test_acc" in e]
        assert [e["epoch"] for e in evaluated] == [0, 2, 3]
        assert np.allclose(acc[f"{name} test"].get_ydata(), [e["test_acc"] for e in evaluated])
        assert np.allclose(acc[f"{name} val"].get_ydata(), [e["val_acc"] for e in evaluated])
    ranks = [m for r in reports for m in r["comm"]["per_rank"]]
    MiB = 2**20
    stacked = axis(fig, "bytes sent by phase and layer")
    totals = sum(np.array([b.get_height() for b in c]) for c in stacked.containers)
    assert np.allclose(totals, [m["sent_bytes"] / MiB for m in ranks])
    forward0 = [sum(t["sent_bytes"] for t in m["table"] if t["phase"] == "forward" and t["layer"] == 0)
                for m in ranks]
    assert np.allclose(heights(stacked, "forward L0"), np.array(forward0) / MiB) and min(forward0) > 0
    sent = axis(fig, "bytes sent per rank: measured and predicted")
    assert np.allclose(heights(sent, "measured"), [m["sent_bytes"] / MiB for m in ranks])
    predicted = [p["sent_bytes"] / MiB for r in reports for p in r["predicted"]["per_rank"]]
    assert np.allclose(heights(sent, "predicted"), predicted)
    memory = [m for r in reports for m in r["memory"]["per_rank"]]
    mem = axis(fig, "memory per rank")
    assert np.allclose(heights(mem, "peak RSS"), [m["peak_rss_bytes"] / MiB for m in memory])
    assert np.allclose(heights(mem, "graph bytes held"), [m["graph_bytes"] / MiB for m in memory])
    assert [t.get_text() for t in mem.get_xticklabels()] == ["1·r0", "1·r1", "2·r0", "2·r1"]
    times = axis(fig, "time per run")
    assert np.allclose(heights(times, "median epoch"), [1e3 * r["median_epoch_s"] for r in reports])


def test_a_sampled_run_is_named_by_its_sampler_without_a_partition(reports):
    """A minibatch report's label named the partition of its config ("minibatch sage · block · P=4"), which a sampled
    run never reads: two minibatch runs looked like runs on two partitions."""
    sampled = reports[0] | {"config": reports[0]["config"] | {"sampler": "sage", "partition": "metis"}}
    assert plot.label(sampled) == "minibatch sage · P=2"
    assert plot.label(reports[1]) == "2d · random · P=2"


def test_plot_command_writes_the_image(tmp_path, reports, capsys):
    paths = []
    for i, r in enumerate(reports):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(r))
    out = tmp_path / "figs" / "runs.png"
    assert main(["plot", *map(str, paths), "--output", str(out)]) == 0
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 20_000
    capsys.readouterr()
    assert main(["plot", *map(str, paths), "--output", str(tmp_path / "figs" / "bare")]) == 0     # no suffix: PNG
    assert capsys.readouterr().out.strip().endswith(str(tmp_path / "figs" / "bare.png"))        # the path written
    assert (tmp_path / "figs" / "bare.png").read_bytes().startswith(PNG)
    (tmp_path / "bad.json").write_text('{"epochs": []}')
    assert main(["plot", str(tmp_path / "bad.json"), "--output", str(out)]) == 2
    assert "is not a report of spgnn train --output" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "absent.json"), "--output", str(out)]) == 2
    assert "cannot read report" in capsys.readouterr().err
    for field in ("config", "comm", "memory"):            # a field gone null: a KeyError or TypeError traceback
        (tmp_path / "part.json").write_text(json.dumps(reports[0] | {field: None}))
        assert main(["plot", str(tmp_path / "part.json"), "--output", str(out)]) == 2
        assert f"part.json is not a report of spgnn train --output: {field} is null, not an object" in \
            capsys.readouterr().err


def _damaged(report, where, value):
    """`report` (a copy) with the field at the path `where` (keys and indices) set to `value`, or removed (None)."""
    report = json.loads(json.dumps(report))
    *path, last = where
    node = report
    for k in path:
        node = node[k]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return report


@pytest.mark.parametrize("where, value, said", [
    (("epochs", 1, "loss"), "x", 'epochs[1].loss is "x", not a number'),
    (("comm", "per_rank", 1, "table", 0, "sent_bytes"), "x", 'comm.per_rank[1].table[0].sent_bytes is "x", not a'),
    (("memory", "per_rank", 0, "peak_rss_bytes"), None, "memory.per_rank[0] lacks 'peak_rss_bytes'"),
    (("median_epoch_s",), [1], "median_epoch_s is [1], not a number"),
    (("predicted", "per_rank"), {}, "predicted.per_rank is {}, not a list"),
    (("config", "algo"), None, "config lacks 'algo'"),
])
def test_a_damaged_report_is_named_before_any_drawing(tmp_path, reports, capsys, monkeypatch, where, value, said):
    """A field of another type (a string for a number, a list for an object), or gone, was a traceback from inside
    matplotlib or numpy (a ValueError the command did not catch), or a line naming neither file nor field after
    the figure was drawn; now the file and the field, before anything is drawn."""
    monkeypatch.setattr(plot, "report_figure", lambda reports: pytest.fail("drew a figure of a damaged report"))
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(reports[0]))
    bad.write_text(json.dumps(_damaged(reports[0], where, value)))
    assert main(["plot", str(good), str(bad), "--output", str(tmp_path / "x.png")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"spgnn: error: {bad} is not a report of spgnn train --output: {said}"), line


def test_a_table_of_spgnn_cost_is_not_a_run(tmp_path, capsys):
    table = tmp_path / "cost.json"
    assert main(["cost", "--nodes", "1000", "--nnz", "8000", "--nprocs", "2", "--quiet", "--output", str(table)]) == 0
    capsys.readouterr()
    assert main(["plot", str(table), "--output", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err.strip() == f"spgnn: error: {table} is a table of spgnn cost or spgnn partition " \
        "--json, not a report of spgnn train --output (which spgnn plot draws)"


def test_an_output_that_cannot_be_written_is_said_before_any_work(tmp_path, reports, capsys, monkeypatch):
    """An --output under a file was a FileExistsError traceback, and one matplotlib writes no format of (or in
    spgnn partition --plot, after every method had partitioned) a line after the figure was drawn."""
    monkeypatch.setattr(plot, "read_reports", lambda paths: pytest.fail("read the reports"))
    a_file = tmp_path / "a.json"
    a_file.write_text(json.dumps(reports[0]))
    for output, said in ((a_file / "x.png", f"cannot write the plot to {a_file / 'x.png'}: "),
                         (tmp_path / "x.json", f"cannot write a plot to {tmp_path / 'x.json'}: matplotlib writes no "
                          ".json files; end it in one of "),
                         (tmp_path / "x.foo", "matplotlib writes no .foo files"),
                         # a folder: it wrote the plot beside it, as folder.png (spgnn cost and calibrate refuse it)
                         (tmp_path, f"cannot write a plot to {tmp_path}: it is a folder; give a file in it"),
                         (f"{tmp_path / 'new'}/", "it is a folder; give a file in it")):
        assert main(["plot", str(a_file), "--output", str(output)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert said in line, line
    assert not tmp_path.with_suffix(".png").exists() and not (tmp_path / "new.png").exists()
    import spgnn.cli

    monkeypatch.setattr(spgnn.cli, "make_partition", lambda *a, **k: pytest.fail("partitioned"))
    for output, said in ((tmp_path / "p.foo", "matplotlib writes no .foo files"), (tmp_path, "it is a folder")):
        assert main(["partition", "--nparts", "2", "--compare", "block,random", "--plot", str(output)]) == 2
        assert said in capsys.readouterr().err


def test_a_report_of_no_ranks_draws_empty_bars(reports):
    """set_ticks of no ticks was a range() of step 0: a ValueError traceback."""
    empty = _damaged(_damaged(reports[0], ("comm", "per_rank"), []), ("memory", "per_rank"), [])
    fig = plot.report_figure([empty])
    assert heights(axis(fig, "memory per rank"), "peak RSS").size == 0


def test_partition_compare_plot(tmp_path):
    out, js = tmp_path / "parts.png", tmp_path / "parts.json"
    assert main(["partition", "--nparts", "3", "--compare", "block,random,ldg", "--plot", str(out),
                 "--json", str(js)]) == 0
    assert out.read_bytes().startswith(PNG)
    result = json.loads(js.read_text())
    fig = plot.partition_figure(result)
    for key, title in plot.PARTITION_METRICS.items():
        ax = axis(fig, title)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["block", "random", "ldg"]
        assert np.allclose([b.get_height() for b in ax.containers[0]], [r[key] for r in result["rows"]]), key


def test_missing_matplotlib_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SpgnnError, match=r"plots need matplotlib.*pip install 'spgnn\[plot\]'"):
        plot.pyplot()


def test_a_run_of_no_epochs_is_drawn_and_said(tmp_path, capsys):
    """spgnn train --epochs 0 printed 'median epoch 0.0000 s' and its report made spgnn plot fail in matplotlib
    (a log axis of no positive value)."""
    report = tmp_path / "e0.json"
    assert main(["train", "--epochs", "0", "--hidden", "4", "--quiet", "--output", str(report)]) == 0
    assert capsys.readouterr().out.strip().endswith("median epoch n/a (no epochs ran)")
    assert main(["plot", str(report), "--output", str(tmp_path / "e0.png")]) == 0
    assert (tmp_path / "e0.png").read_bytes().startswith(PNG)
