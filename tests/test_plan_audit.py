"""An audit of planning: the partition cache's writes and damaged entries, and bad planning options refused before
the graph is read (`spgnn.plan.partition_to_cache`, `spgnn.partition.partitioned.cached`, `TrainConfig.validate`)."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from spgnn import plan
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import save_npz
from spgnn.partition import partitioned
from spgnn.partition.partition import make_partition, save_partition
from tests.graphs import small_graph


def _cache(g, root, B=2):
    """The cache folder of `g` in B random parts under `root`, and the call that makes it."""
    folder = partitioned.cache_folder(root, g, "random", {}, 0, B)
    return folder, lambda: partitioned.cached(g, lambda: make_partition("random", g.adj, B), "random", {}, 0, B, root)


def test_a_writer_leaves_another_writers_temporary_folder_alone(tmp_path):
    """Two writers of one cache entry whose pids agree (two hosts of a shared cache, or a restarted container's
    rank 0 and the temporary folder its killed predecessor left): each writes a temporary folder of its own. It was
    named by the pid alone, so the second failed ('File exists ... choose a writable folder') and deleted the first's
    folder as it wrote."""
    g = small_graph(n=40)
    folder, make = _cache(g, tmp_path)
    other = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    (other / "part-00000").mkdir(parents=True)
    (other / "part-00000" / "x.npy").write_bytes(b"the other writer's")
    assert make() == folder and partitioned.PartitionedDataset(folder).nparts == 2
    assert (other / "part-00000" / "x.npy").read_bytes() == b"the other writer's"


def test_a_dead_writers_temporary_folder_is_removed_a_running_ones_kept(tmp_path):
    """A rank 0 killed while it wrote a cache entry (SIGKILL, out of memory) left its temporary folder, a dataset's
    size, for ever; the next writer of that entry removes it, and leaves alone one whose writer runs or ran on another
    host."""
    g = small_graph(n=40)
    folder, make = _cache(g, tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    here = socket.gethostname()
    left = {f".{folder.name}.{pid}@{host}.0a1b2c3d.tmp": gone for pid, host, gone in
            ((dead, here, True), (os.getpid(), here, False), (dead, "another.host", False))}
    for name in left:
        (folder.parent / name / "part-00000").mkdir(parents=True)
    assert make() == folder and partitioned.PartitionedDataset(folder).nparts == 2
    assert {name: not (folder.parent / name).exists() for name in left} == left


def test_a_damaged_cache_folder_is_named_with_its_remedy(tmp_path):
    """A cache folder without its meta.json (a copy cut short, a file deleted) is said to be the cache's, damaged,
    to be deleted; it was refused as '--output ... exists and is not a partitioned dataset folder ... name a new or
    empty folder', an option the run was never given and a remedy it cannot follow. Refused before partitioning."""
    g = small_graph(n=40)
    folder, make = _cache(g, tmp_path)
    make()
    (folder / "meta.json").unlink()
    with pytest.raises(SpgnnError, match="partition cache folder .* is damaged.*delete it") as e:
        partitioned.cached(g, lambda: pytest.fail("partitioned a damaged entry"), "random", {}, 0, 2, tmp_path)
    assert "--output" not in str(e.value)


def test_a_memory_per_rank_without_its_unit_is_refused_by_validate():
    """`--memory-per-rank 4` (no unit) is refused when the config is validated, before any process starts: it was
    refused only when the plan read it, after the --nprocs parent had read the graph, partitioned it and written the
    partition to the cache (2.4 s for coauthor-cs; hours for ogbn-papers100M)."""
    with pytest.raises(SpgnnError, match="--memory-per-rank takes one size with its unit"):
        TrainConfig(algo="1d", memory_per_rank="4").validate()
    assert TrainConfig(algo="1d", memory_per_rank="4G").validate().memory_per_rank == "4G"


@pytest.fixture
def reads(monkeypatch):
    """The datasets `plan.partition_to_cache` reads, recorded."""
    seen, real = [], plan.load_dataset
    monkeypatch.setattr(plan, "load_dataset", lambda *a, **k: seen.append(a[0]) or real(*a, **k))
    return seen


def test_a_partition_that_cannot_apply_is_refused_before_the_graph_is_read(tmp_path, reads):
    """An unknown --partition, and a partition file whose part count is not the row blocks of the layout named
    (or of any --algo auto compares), are refused before the dataset is read: they were refused by the
    partitioner, after the whole graph had been read (on ogbn-papers100M, its tens of GB). A file that fits is
    partitioned as before."""
    g = small_graph(n=80)
    data, part_file = tmp_path / "g.npz", tmp_path / "p4.npz"
    save_npz(g, data)
    save_partition(part_file, np.arange(g.n) % 4, "mine", {}, 0, g)
    cfg = TrainConfig(dataset=str(data), algo="1d", partition=str(part_file), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(SpgnnError, match="holds 4 parts but --algo 1d on grid 2x1 needs 2 row blocks"):
        plan.partition_to_cache(cfg, 2)
    with pytest.raises(SpgnnError, match="holds 4 parts, but no layout --algo auto compares on 3 processes"):
        plan.partition_to_cache(TrainConfig(**{**cfg.as_dict(), "algo": "auto"}), 3)
    with pytest.raises(SpgnnError, match="unknown partition 'metiss'"):
        plan.partition_to_cache(TrainConfig(**{**cfg.as_dict(), "partition": "metiss"}), 2)
    assert reads == []
    folder = plan.partition_to_cache(cfg, 4)
    assert reads == [str(data)] and partitioned.PartitionedDataset(folder).nparts == 4


def test_an_unknown_partition_is_named_so_where_auto_and_spgnn_cost_read_it():
    """--algo auto and spgnn cost --dataset ask how many parts a --partition given already has (`fixed_parts`): a
    name of no partitioner nor file was read as a partition file ('cannot read partition file metiss: [Errno 2]'),
    where training says 'unknown partition' and lists the partitioners."""
    with pytest.raises(SpgnnError, match="unknown partition 'metiss': use one of block, random"):
        plan.choose(TrainConfig(algo="auto", partition="metiss"), small_graph(n=40), 2)


@pytest.mark.parametrize("seed", ["-1", str(2**63)])
def test_spgnn_partition_refuses_a_seed_no_generator_takes(capsys, seed):
    """`spgnn partition --seed -1` was a traceback from the partitioner's generator (or the split's): the seed is
    refused as spgnn train refuses it, in one line, before the graph is read."""
    from spgnn import cli

    assert cli.main(["partition", "--dataset", "no-such-graph", "--nparts", "2", "--method", "random",
                     "--seed", seed]) == 2
    assert capsys.readouterr().err.strip() == f"spgnn: error: --seed must lie in [0, 2^63), got {seed}"


def test_spgnn_cost_of_a_partitioned_folder_refuses_another_partition_or_order(tmp_path, capsys):
    """`spgnn cost --dataset FOLDER --partition metis` printed the folder's own (random) partition's table as if it
    were metis's; spgnn train refuses the same options, and now through the same check (`check_folder_options`): a
    --partition or --node-order other than the folder's is one line; its own (its partitioner, or the file of its
    partition), or none, gives the table. A misspelled --partition is named before the graph is read."""
    from spgnn import cli

    folder = str(tmp_path / "cora4")
    assert cli.main(["partition", "--dataset", "cora", "--nparts", "4", "--method", "random", "--node-order", "rcm",
                     "--output", folder, "--quiet"]) == 0
    capsys.readouterr()
    own, other = str(tmp_path / "own.npz"), str(tmp_path / "other.npz")    # its partition, and another
    for path, seed in ((own, "0"), (other, "1")):
        assert cli.main(["partition", "--dataset", "cora", "--nparts", "4", "--method", "random", "--seed", seed,
                         "--output", path, "--quiet"]) == 0
    for extra, said in ((["--partition", "metis"], "(by random): --partition metis does not apply"),
                        (["--node-order", "natural"], "(in rcm node order): --node-order natural does not apply"),
                        (["--partition", other], f"(by random, seed 0, 4 parts): --partition {other} is not that")):
        assert cli.main(["cost", "--dataset", folder, "--nprocs", "4"] + extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"spgnn: error: {folder} is partitioned already {said}"), err
    for extra in (["--partition", "random", "--node-order", "rcm"], ["--partition", own], []):
        assert cli.main(["cost", "--dataset", folder, "--nprocs", "4"] + extra) == 0
    capsys.readouterr()
    assert cli.main(["cost", "--dataset", "no-such-graph", "--nprocs", "2", "--partition", "metiss"]) == 2
    assert capsys.readouterr().err.startswith("spgnn: error: unknown partition 'metiss'")
