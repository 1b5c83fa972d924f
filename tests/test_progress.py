"""Stages of a run: rank 0 says what each long stage does and how long it took (on stdout; stderr keeps only
errors), --quiet silences that, counted work shows a bar on a terminal and plain lines otherwise, and the report
holds every rank's seconds per stage and those of the --nprocs parent."""

import io
import json
import os
import re
import subprocess
import sys

import pytest

from spgnn import progress

SPGNN = [sys.executable, "-m", "spgnn", "train", "--epochs", "2", "--eval-every", "0"]


def train(tmp_path, *args):
    """`spgnn train ARGS` with an empty partition cache: (the finished process, the report)."""
    out = tmp_path / "r.json"
    res = subprocess.run(SPGNN + ["--output", str(out), *args], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, SPGNN_CACHE_DIR=str(tmp_path / "cache")))
    assert res.returncode == 0, res.stderr[-3000:]
    return res, json.loads(out.read_text())


def test_stage_lines_on_rank_0_and_seconds_of_every_rank(tmp_path):
    """--nprocs 2: the parent reads, partitions and writes the shares, then each process
    sets up and evaluates; each stage is said once, started and done, and every process's seconds are kept."""
    res, r = train(tmp_path, "--nprocs", "2", "--partition", "random")
    lines = res.stdout.splitlines()
    for name, what in (("reading", "cora"), ("partitioning", "into 2 parts by random"), ("writing shares", "2 parts"),
                       ("partition cache", "cora in 2 parts"),
                       ("setting up", ""), ("set-up exchanges", "(1d-halo: gcn)"), ("evaluating", "(final)")):
        started = [x for x in lines if x.startswith(f"spgnn: {name} ") and x.endswith(" ...")]
        done = [x for x in lines if x.startswith(f"spgnn: {name} done in ") and x.endswith(" s")]
        assert len(started) == len(done) == 1, (name, res.stdout)           # said once: by rank 0 only
        assert what in started[0]
        assert lines.index(started[0]) < lines.index(done[0])
    assert res.stderr.strip() == ""
    assert sum(x.startswith("epoch ") for x in lines) == 2
    stages = r["stages"]
    assert len(stages["per_rank"]) == 2
    for mine in stages["per_rank"]:                         # every rank sets up and evaluates; the parent did the rest
        assert set(mine) == {"setting up", "set-up exchanges", "evaluating"} and all(s > 0 for s in mine.values())
    assert set(stages["launcher"]) == {"reading", "partitioning", "writing shares", "partition cache"}
    launcher = stages["launcher"]
    assert launcher["partition cache"] >= launcher["partitioning"] + launcher["writing shares"]   # nested


def test_quiet_silences_stages_and_keeps_their_seconds(tmp_path):
    res, r = train(tmp_path, "--quiet", "--dataset", "rmat:8")
    assert "spgnn:" not in res.stdout and res.stderr.strip() == ""
    assert res.stdout.splitlines()[-1].startswith("final ")
    (mine,) = r["stages"]["per_rank"]               # one process: it generated, partitioned, set up, evaluated
    assert {"generating", "partitioning", "setting up", "evaluating"} <= set(mine)
    assert "reading" not in mine and r["stages"]["launcher"] == {}


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def shown(monkeypatch):
    monkeypatch.setattr(progress, "_shown", True)
    monkeypatch.setattr(progress, "_seconds", {})


def test_counted_work_shows_a_bar_on_a_terminal(shown, monkeypatch):
    out = Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(progress, "BAR_DELAY_S", 0.0)
    assert list(progress.each(range(3), "writing shares", "3 parts", total=3)) == [0, 1, 2]
    text = out.getvalue()
    assert "spgnn: writing shares 3 parts ...\n" in text
    assert re.search(r"\rspgnn: writing shares: +\d+%\|.*\| [0-3]/3 \[", text), text      # tqdm's bar
    assert text.rstrip().splitlines()[-1].startswith("spgnn: writing shares done in ")


def test_counted_work_gives_plain_lines_elsewhere(shown, monkeypatch, capsys):
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    with progress.stage("reading edges", "edges.txt") as s:
        s.advance(2)
        s.advance()
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["spgnn: reading edges edges.txt ...", "spgnn: reading edges 2 (0 s)",
                         "spgnn: reading edges 3 (0 s)"]
    assert lines[3].startswith("spgnn: reading edges done in ") and len(lines) == 4


def test_seconds_add_up_and_a_failed_stage_counts_without_a_done_line(shown, capsys):
    with progress.stage("partitioning"):
        pass
    with pytest.raises(ValueError), progress.stage("partitioning"):
        raise ValueError("bad")
    out = capsys.readouterr().out
    assert out.count("spgnn: partitioning ...") == 2 and out.count("spgnn: partitioning done in") == 1
    assert list(progress.seconds()) == ["partitioning"] and progress.seconds()["partitioning"] > 0


def test_hidden_unless_configured(monkeypatch, capsys):
    monkeypatch.setattr(progress, "_seconds", {})
    progress.configure(False)
    with progress.stage("reading", "cora") as s:
        s.advance()
    assert capsys.readouterr().out == "" and "reading" in progress.seconds()
