"""What a user who follows the documentation word for word runs into (the docs audit): the mistakes made copying
its commands are one line naming the fix, and what the pages promise is what the program does."""

import re
import shlex
from pathlib import Path

import pytest

from spgnn import SpgnnError, TrainConfig, cli
from spgnn.plan import check_given_parts

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _refused(argv: list[str], capsys) -> str:
    """The last line `spgnn argv` says on stderr as argparse refuses it (exit status 2)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_option_before_the_command_is_told_to_go_after_it(capsys):
    """``spgnn --nprocs 4 train`` said "invalid choice: '4'" (argparse took the option's value for the command)."""
    assert _refused(["--nprocs", "4", "train", "--algo", "2d"], capsys) == \
        "spgnn: error: options go after the command: spgnn train --nprocs 4 --algo 2d (spgnn train --help lists them)"


def test_words_a_command_does_not_take_are_said_under_its_name(capsys):
    """``spgnn cost --nprocs 2 4 8`` (a list written with spaces) was refused under spgnn's usage, not cost's."""
    assert _refused(["cost", "--dataset", "cora", "--nprocs", "2", "4", "8"], capsys) == \
        "spgnn cost: error: unrecognized arguments: 4 8 (spgnn cost --help lists its options)"


def test_cost_on_a_partition_file_of_other_parts_names_the_file(tmp_path, capsys):
    """``spgnn cost --dataset cora --partition parts.npz`` at a P with no layout of the file's row blocks said the
    reasons of a graph too small and of a partitioned folder, neither of them the user's."""
    parts = str(tmp_path / "parts.npz")
    assert cli.main(["partition", "--dataset", "cora", "--nparts", "2", "--method", "block", "--output", parts,
                     "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["cost", "--dataset", "cora", "--partition", parts, "--nprocs", "3", "--quiet"]) == 2
    assert "or a --partition file, other row blocks than its parts" in capsys.readouterr().err


def test_launching_names_every_option_that_may_differ_between_ranks():
    """docs/launching.md listed the path options a job's processes may be given differently without --ogb-split,
    which the ranks' comparison (`cli.PER_HOST`) leaves out too."""
    text = " ".join((DOCS / "launching.md").read_text().split())
    listed = re.search(r"Options naming files and folders \((.*?)\) may differ", text).group(1)
    flags = {f[2:].replace("-", "_") for f in re.findall(r"`(--[\w-]+)`", listed)}
    assert flags == cli.PER_HOST - {"given_dataset", "quiet"}


@pytest.mark.parametrize("argv", [["train", "--epochs", "1"], ["cost", "--dataset", "cora", "--nprocs", "2"]])
def test_an_output_ending_in_a_slash_is_refused(argv, tmp_path, capsys, monkeypatch):
    """``--output out/`` wrote the report to a file named out (Path drops the slash), not into a folder."""
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, "--output", "out/", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().startswith("spgnn: error: --output out/ names a folder (it ends in /): ")
    assert not (tmp_path / "out").exists()


def test_partition_output_named_as_a_file_is_refused(tmp_path, capsys, monkeypatch):
    """``spgnn partition --output metrics.json`` wrote a partitioned folder named metrics.json (the docs: --output DIR
    or FILE.npz; the metrics go to --json)."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["partition", "--nparts", "2", "--method", "block", "--output", "metrics.json", "--quiet"]) == 2
    assert "the metrics go to --json FILE" in capsys.readouterr().err
    assert not (tmp_path / "metrics.json").exists()


def test_partition_anew_is_a_command_that_runs(tmp_path, capsys):
    """A partition file of other parts than the layout's said 'partition anew with spgnn partition --nparts 3 --output
    FILE.npz': copied, argparse refused it (no --method), and without --dataset it partitioned cora, not the run's
    graph. The command said names the run's dataset and the file's method, parameters and seed."""
    parts = str(tmp_path / "parts.npz")
    assert cli.main(["partition", "--dataset", "sbm:60:3", "--nparts", "2", "--method", "fennel", "--param",
                     "gamma=1.5", "--seed", "4", "--output", parts, "--quiet"]) == 0
    with pytest.raises(SpgnnError) as e:
        check_given_parts(TrainConfig(dataset="sbm:60:3", partition=parts), 3)
    said = re.search(r"partition anew with (spgnn partition .*?), or run", str(e.value)).group(1)
    assert said == "spgnn partition --dataset sbm:60:3 --nparts 3 --method fennel --param gamma=1.5 --param " \
                   "nu=1.1 --seed 4 --output FILE.npz"
    again = str(tmp_path / "again.npz")                 # it runs as said, and makes the partition the layout needs
    assert cli.main([*shlex.split(said)[1:-1], again, "--quiet"]) == 0
    check_given_parts(TrainConfig(dataset="sbm:60:3", partition=again), 3)
    # a run given a --data-dir: the command carries it
    with pytest.raises(SpgnnError) as e:
        check_given_parts(TrainConfig(dataset="sbm:60:3", data_dir=str(tmp_path), partition=parts), 3)
    assert f"spgnn partition --dataset sbm:60:3 --data-dir {tmp_path} --nparts 3" in str(e.value)


def test_edge_ids_counted_from_one_are_said_to_be(tmp_path):
    """getting-started.md's edge list has ids 0…n−1; one numbered 1…n was refused with 'ids must lie in [0, n), found
    1..n' and no fix (data.md: each line names the fix), in memory and out of core alike."""
    import numpy as np

    from spgnn.graph.datasets import load_dataset
    from spgnn.graph.validate import check_edge_ids

    n = 4
    np.savetxt(tmp_path / "edges.txt", np.array([[1, 2], [2, 3], [3, 4]]), fmt="%d")
    np.save(tmp_path / "features.npy", np.ones((n, 2), np.float32))
    np.save(tmp_path / "labels.npy", np.array([0, 1, 0, 1]))
    with pytest.raises(SpgnnError, match=r"found 1\.\.4: these count from 1: subtract 1 from every id$"):
        load_dataset(str(tmp_path))
    with pytest.raises(SpgnnError, match=r"found 0\.\.9: number the nodes 0\.\.n-1, as the rows of the features"):
        check_edge_ids(0, 9, n, "edges.txt")
    # out of core, a chunk at a time (the chunk holding id n said "found 3..4: number the nodes 0..n-1"), and a list
    # counted from 1 whose node 1 has no edge
    from spgnn.partition.ooc import partition_edge_folder

    with pytest.raises(SpgnnError, match=r"found 1\.\.4: these count from 1: subtract 1 from every id$"):
        partition_edge_folder(tmp_path, tmp_path / "parts", 2, "block", chunk=1)
    np.savetxt(tmp_path / "edges.txt", np.array([[2, 3], [3, 4]]), fmt="%d")
    with pytest.raises(SpgnnError, match=r"found 2\.\.4: these count from 1: subtract 1 from every id$"):
        load_dataset(str(tmp_path))


def test_an_lr_whose_first_adam_step_overflows_is_refused(capsys):
    """--lr 1e38 (below float32's largest, which was the bound) ended in a RuntimeError traceback inside Adam, whose
    first step is lr / (1 − β₁) = 10·lr: the bound is 3.4e37, said before any work."""
    assert cli.main(["train", "--lr", "1e38", "--epochs", "1", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("spgnn: error: --lr must be a positive number (below 3.4e37")
    TrainConfig(lr=3.4e37).validate()


def test_a_replication_not_dividing_p_names_those_that_do(capsys):
    """--replication 3 on 4 processes said it must divide 4, not which do."""
    assert cli.main(["train", "--algo", "1.5d", "--replication", "3", "--nprocs", "4", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().endswith("processes 4: give one of 1, 2, 4, or 0 for the divisor nearest √P")
    assert cli.main(["train", "--sampler", "sage:5", "--split-graph", "--replication", "3", "--nprocs", "4"]) == 2
    assert capsys.readouterr().err.strip().endswith("each on c processes): give one of 1, 2, 4")


def test_a_misspelt_option_is_told_the_nearest(capsys):
    """``spgnn train --partiton metis`` said only 'unrecognized arguments'."""
    assert _refused(["train", "--data_dir", "x"], capsys) == "spgnn train: error: unrecognized arguments: --data_dir " \
        "x (did you mean --data-dir? spgnn train --help lists its options)"


def test_the_guides_cite_nothing_outside_the_repository():
    """The guides spoke of 'the issue's target' and 'the study the issue cites', an issue no reader of the
    repository has (docs/benchmarks.md, the measurements' log, is left as it was written)."""
    pages = [p for p in sorted(DOCS.rglob("*.md")) if p.name != "benchmarks.md"] + [DOCS.parent / "README.md"]
    assert [p.name for p in pages if re.search(r"\bthe issue\b|\bissue's\b", p.read_text(), re.I)] == []


def test_an_ogb_name_is_told_to_give_the_folder():
    """``--dataset ogbn-arxiv`` (README: OGB's layouts read) listed the known names and paths without OGB folders."""
    from spgnn.graph.datasets import load_dataset

    with pytest.raises(SpgnnError, match=r"spgnn downloads no OGB dataset; .* --dataset PATH/ogbn_arxiv/ "):
        load_dataset("ogbn-arxiv")
    with pytest.raises(SpgnnError, match=r"--dataset PATH/ogbn_papers100M/ "):        # OGB's own case, not lowered
        load_dataset("ogbn-papers100M")
    with pytest.raises(SpgnnError, match=r"OGB folder or partitioned folder$"):
        load_dataset("pubmed")


def test_sampler_refuses_calibration_before_reading_it(capsys):
    """minibatch.md: --calibration is refused with --sampler. A file not there was said to be unreadable first, so
    the user who made one was then told to drop it."""
    assert cli.main(["train", "--sampler", "sage:5", "--calibration", "missing.json", "--quiet"]) == 2
    assert "--calibration applies to full-batch training, not --sampler" in capsys.readouterr().err
