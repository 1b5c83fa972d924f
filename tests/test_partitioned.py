"""Partitioned datasets: the folder format, training from it (each rank reading its part only), the cache,
out-of-core partitioning, and the errors on bad folders."""

import json
import shutil

import numpy as np
import pytest

from spgnn import cli
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import read_edge_list
from spgnn.partition.metrics import partition_metrics
from spgnn.partition.ooc import partition_edge_folder
from spgnn.partition.partition import make_partition
from spgnn.partition.partitioned import InMemoryParts, PartitionedDataset, cache_root, write_parts
from spgnn.partition.share import SPLITS
from spgnn.plan import fit_parts
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph

GRAPHS = {"sym": small_graph(n=57, seed=2), "dir": small_graph(n=57, seed=3, directed=True)}
RUNS = [("gcn", "sym", "1d-halo", None, 0), ("sage", "dir", "sar", None, 0), ("gcn", "dir", "1.5d", None, 2),
        ("sage", "sym", "2d", "2x2", 0), ("gcn", "dir", "3d", "1x2x2", 0), ("gcn", "sym", "1d", None, 0)]


def _folder(tmp, gname, P, method="random"):
    path = tmp / f"{gname}-{method}-{P}"
    if not path.exists():
        g = GRAPHS[gname]
        write_parts(path, InMemoryParts(g, make_partition(method, g.adj, P, seed=1, node_order=TrainConfig.node_order)))
    return str(path)


def _config(model, algo, grid, c, dataset="cora"):
    return TrainConfig(dataset=dataset, model=model, algo=algo, grid=grid, replication=c, hidden=6, epochs=4,
                       eval_every=2, partition="random", seed=1, dropout=0.3)


def _run(comm, tmp):
    """Per run: (the loss curve and accuracies from the folder, the same in memory, the report's memory)."""
    out = []
    for model, gname, algo, grid, c in RUNS:
        P = comm.world_size
        B = {"1.5d": P // 2, "2d": 2, "3d": 2}.get(algo, P)
        comm.ledger.reset()
        disk = Trainer(_config(model, algo, grid, c, _folder(tmp, gname, B)), comm).run(log=None)
        memory = Trainer(_config(model, algo, grid, c), comm, graph=GRAPHS[gname]).run(log=None)
        out.append(([e["loss"] for e in disk["epochs"]], disk["final"], [e["loss"] for e in memory["epochs"]],
                    memory["final"], disk["memory"]["per_rank"], disk["comm"]["per_rank"], disk["predicted"]))
    return out


def test_training_from_a_folder_equals_training_in_memory(tmp_path):
    """Every algorithm on a folder: the loss curve equals the in-memory run's exactly, the ledger (set-up
    included) equals the prediction, and every rank reports the graph bytes it holds."""
    for g in GRAPHS:                  # written here, once, so that the ranks only read
        for B in (2, 4):
            _folder(tmp_path, g, B)
    for rank_runs in zip(*run_local(_run, 4, tmp_path, timeout_s=600)):
        for disk_curve, disk_final, mem_curve, mem_final, memory, comm, predicted in rank_runs:
            assert disk_curve == mem_curve and disk_final == mem_final
            assert all(r["graph_bytes"] > 0 and r["peak_rss_bytes"] > r["graph_bytes"] for r in memory)
            if predicted is not None:
                for m, p in zip(comm, predicted["per_rank"]):
                    assert (m["sent_bytes"], m["recv_bytes"], m["messages"]) == \
                        (p["sent_bytes"], p["recv_bytes"], p["messages"])


def test_folder_holds_each_part_and_reads_only_it(tmp_path):
    g = GRAPHS["dir"]
    part = make_partition("ldg", g.adj, 3, seed=0)
    path = write_parts(tmp_path / "d", InMemoryParts(g, part))
    meta = json.loads((path / "meta.json").read_text())
    assert meta["graph"]["n"] == g.n and meta["graph"]["nnz"] == g.nnz and meta["partition"]["nparts"] == 3
    assert meta["partition"]["metrics"] == partition_metrics(g.adj, part, g.train_mask)
    for p in (0, 2):
        (tmp_path / "d" / "part-00001").rename(tmp_path / "away")          # reading part p needs no other part
        s = PartitionedDataset(path).share(p)
        (tmp_path / "away").rename(tmp_path / "d" / "part-00001")
        ids = part.perm[part.offsets[p]:part.offsets[p + 1]]
        np.testing.assert_array_equal(s.node_ids, ids)
        np.testing.assert_array_equal(s.x, g.x[ids])
        want = g.adj[ids][:, part.perm]                                  # block row p, columns renumbered
        np.testing.assert_array_equal(s.adj.toarray(), want.toarray())
        for k in SPLITS:
            np.testing.assert_array_equal(s.masks[k], getattr(g, f"{k}_mask")[ids])


def test_cache_partitions_once_and_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("SPGNN_CACHE_DIR", str(tmp_path))
    cfg = TrainConfig(epochs=2, eval_every=0, partition="random")
    first = Trainer(cfg, Comm()).run(log=None)
    folders = list(cache_root().iterdir())
    assert len(folders) == 1
    stamp = (folders[0] / "meta.json").stat().st_mtime_ns
    again = Trainer(cfg, Comm()).run(log=None)
    assert (folders[0] / "meta.json").stat().st_mtime_ns == stamp
    assert [e["loss"] for e in first["epochs"]] == [e["loss"] for e in again["epochs"]]
    natural = Trainer(TrainConfig(epochs=2, eval_every=0, partition="random", node_order="natural"),
                      Comm()).run(log=None)
    assert len(list(cache_root().iterdir())) == 2                   # another order, another folder
    assert {PartitionedDataset(f).partition_info["node_order"] for f in cache_root().iterdir()} == {"rcm", "natural"}
    np.testing.assert_allclose([e["loss"] for e in natural["epochs"]], [e["loss"] for e in first["epochs"]], rtol=1e-5)


def test_a_cached_dataset_file_is_not_read_again(tmp_path, monkeypatch):
    """partition_to_cache finds the cache folder of a dataset file from its path, size and modification time
    without reading the graph (under a launcher, rank 0 no longer holds the whole graph for a cached partition);
    a changed file, other row blocks, another partitioner or --algo auto read it again."""
    import os

    from spgnn import plan
    from spgnn.graph.datasets import save_npz

    g = small_graph(n=300, f=6, seed=2)
    data = tmp_path / "g.npz"
    save_npz(g, data)
    cfg = TrainConfig(dataset=str(data), partition="random", algo="1d", cache_dir=str(tmp_path / "cache"))
    reads = []
    real_load = plan.load_dataset
    monkeypatch.setattr(plan, "load_dataset", lambda *a, **k: reads.append(a[0]) or real_load(*a, **k))
    first = plan.partition_to_cache(cfg, 2)
    assert plan.partition_to_cache(cfg, 2) == first and len(reads) == 1       # found, not read
    assert plan.partition_to_cache(TrainConfig(**{**cfg.as_dict(), "overlap": "off"}), 2) == first   # same blocks
    assert len(reads) == 1
    other = [plan.partition_to_cache(cfg, 4), plan.partition_to_cache(TrainConfig(**{**cfg.as_dict(),
                                                                                    "partition": "block"}), 2)]
    assert len(reads) == 3 and len({first, *other}) == 3
    assert plan.partition_to_cache(TrainConfig(**{**cfg.as_dict(), "algo": "auto"}), 2) and len(reads) == 4
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))                 # the file changed (in time only)
    assert plan.partition_to_cache(cfg, 2) == first and len(reads) == 5         # read again: the same graph
    shutil.rmtree(first)                                                         # the folder it recorded is gone
    assert plan.partition_to_cache(cfg, 2) == first and len(reads) == 6 and PartitionedDataset(first).nparts == 2


def test_a_relative_cache_folder_finds_a_dataset_file_from_its_first_run(tmp_path, monkeypatch):
    """A cache folder written anew came back resolved (the written folder's path), which did not lie under a
    relative --cache-dir (or one reached through a link): the first run recorded nothing, and the second read the
    graph again. A quoted '~/x' made a folder named ~, which the run then failed to find."""
    from spgnn import plan
    from spgnn.graph.datasets import save_npz

    monkeypatch.chdir(tmp_path)
    save_npz(small_graph(n=100, f=4, seed=2), tmp_path / "g.npz")
    (tmp_path / "linked").symlink_to(tmp_path / "caches", target_is_directory=True)
    (tmp_path / "caches").mkdir()
    reads = []
    real_load = plan.load_dataset
    monkeypatch.setattr(plan, "load_dataset", lambda *a, **k: reads.append(a[0]) or real_load(*a, **k))
    monkeypatch.setenv("HOME", str(tmp_path))
    for cache_dir in ("cache", str(tmp_path / "linked"), "~/under-home"):
        cfg = TrainConfig(dataset="g.npz", partition="random", algo="1d", cache_dir=cache_dir)
        first = plan.partition_to_cache(cfg, 2)
        assert plan.partition_to_cache(cfg, 2) == first and len(reads) == 1, cache_dir     # found, not read
        reads.clear()
    assert first.parent == tmp_path / "under-home" and not (tmp_path / "~").exists()    # (a folder named ~ was made)


def test_a_cached_planetoid_file_is_read_again_when_any_of_its_files_changes(tmp_path, monkeypatch):
    """A Planetoid file is read with its seven ind.NAME.* siblings: the cache finds its folder from the sizes and
    modification times of all eight (it looked at the named file alone, and served a changed graph's old
    partition)."""
    from spgnn import plan
    from tests.test_datasets import write_planetoid

    write_planetoid(tmp_path / "p", "tiny")
    cfg = TrainConfig(dataset=str(tmp_path / "p" / "ind.tiny.graph"), partition="random", algo="1d",
                      cache_dir=str(tmp_path / "cache"))
    reads = []
    real_load = plan.load_dataset
    monkeypatch.setattr(plan, "load_dataset", lambda *a, **k: reads.append(a[0]) or real_load(*a, **k))
    first = plan.partition_to_cache(cfg, 2)
    assert plan.partition_to_cache(cfg, 2) == first and len(reads) == 1       # found, not read
    index = tmp_path / "p" / "ind.tiny.test.index"
    index.write_text("\n".join(index.read_text().split()[::-1]) + "\n")     # other nodes get tx's rows
    changed = plan.partition_to_cache(cfg, 2)
    assert len(reads) == 2 and changed != first
    assert PartitionedDataset(changed).info.graph_hash == PartitionedDataset(first).info.graph_hash  # same edges


def test_a_cached_dataset_file_is_read_again_when_its_split_policy_changes(tmp_path, monkeypatch):
    """A dataset file without a split of its own gets `default_split`'s. Its cache folder was found from the file
    alone, so a file cached before the policy changed (graphs of classes of at most 50 nodes: 60/20/20 where 20/30
    per class left test empty) kept its old masks. The index carries the code that reads and splits it."""
    from spgnn import plan
    from spgnn.graph import build
    from spgnn.graph.datasets import save_npz

    data = tmp_path / "g.npz"
    save_npz(small_graph(n=80, f=4, seed=2), data)
    with np.load(data) as z:
        arrays = {k: z[k] for k in z.files if not k.endswith("_mask")}      # no split of its own
    with data.open("wb") as f:
        np.savez(f, **arrays)
    cfg = TrainConfig(dataset=str(data), partition="random", algo="1d", cache_dir=str(tmp_path / "cache"))
    first = plan.partition_to_cache(cfg, 2)
    assert plan.partition_to_cache(cfg, 2) == first

    def per_class_only(y, num_classes, seed):       # the policy before: 20/30 per class whatever the class sizes
        return build.per_class_split(y, num_classes, seed)

    monkeypatch.setattr(build, "default_split", per_class_only)
    later = plan.partition_to_cache(cfg, 2)
    assert later != first
    assert PartitionedDataset(later).info.counts["test"] == 0 < PartitionedDataset(first).info.counts["test"]


def test_parts_of_two_partitions_of_one_graph_do_not_mix(tmp_path):
    """A part folder copied in from another partition of the same graph (same sizes) was read: nodes twice, others
    missing. Each write tags its parts with an id of its own; a folder written before, with none, still reads."""
    g = GRAPHS["sym"]
    a, b = (write_parts(tmp_path / f"seed{s}", InMemoryParts(g, make_partition("random", g.adj, 2, seed=s)))
            for s in (0, 1))
    assert not np.array_equal(PartitionedDataset(a).share(1).node_ids, PartitionedDataset(b).share(1).node_ids)
    shutil.rmtree(a / "part-00001")
    shutil.copytree(b / "part-00001", a / "part-00001")
    assert PartitionedDataset(a).share(0).part == 0
    with pytest.raises(SpgnnError, match="part-00001 holds part 1 of another partition of this graph"):
        PartitionedDataset(a).share(1)
    meta = json.loads((b / "meta.json").read_text())
    del meta["partition"]["id"]
    (b / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SpgnnError, match="another partition"):             # an old meta.json, a new part
        PartitionedDataset(b).share(0)
    for p in range(2):
        tag = b / f"part-{p:05d}" / "part.json"
        tag.write_text(json.dumps({k: v for k, v in json.loads(tag.read_text()).items() if k != "partition_id"}))
    assert [PartitionedDataset(b).share(p).part for p in range(2)] == [0, 1]


def test_a_partitioned_folder_under_home_is_one(tmp_path, monkeypatch):
    """--dataset '~/parts' (quoted, so no shell expanded it) was not taken for a partitioned folder."""
    from spgnn.partition.partitioned import is_partitioned
    from spgnn.plan import given_folder

    monkeypatch.setenv("HOME", str(tmp_path))
    g = GRAPHS["sym"]
    write_parts(tmp_path / "parts", InMemoryParts(g, make_partition("block", g.adj, 1)))
    assert is_partitioned("~/parts") and given_folder(TrainConfig(dataset="~/parts")) == str(tmp_path / "parts")
    report = Trainer(TrainConfig(dataset="~/parts", epochs=1, eval_every=0), Comm()).run(log=None)
    assert report["partition"]["info"]["folder"] == str(tmp_path / "parts")


def test_out_of_core_opens_a_file_at_a_time(tmp_path, monkeypatch):
    """The bucket files were all open at once (one a part, one a stream block): 1000 parts or a small --chunk
    died of OSError under the common limit of 1024 open files. Now a few dozen free descriptors do; the stream
    blocks are capped, the parts unchanged; an OSError left is one SpgnnError line."""
    import os
    import resource

    from spgnn.partition import ooc

    rng, n = np.random.default_rng(5), 300
    src = tmp_path / "graph"
    src.mkdir()
    np.save(src / "edges.npy", np.stack([rng.integers(0, n, 1500), rng.integers(0, n, 1500)], 1))
    np.save(src / "features.npy", rng.standard_normal((n, 5)).astype(np.float32))
    np.save(src / "labels.npy", rng.integers(0, 3, n))
    counts = []

    class Counted(ooc.Buckets):
        def __init__(self, count, *args):
            counts.append(count)
            super().__init__(count, *args)

    monkeypatch.setattr(ooc, "Buckets", Counted)
    monkeypatch.setattr(ooc, "MAX_BLOCKS", 40)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 40, hard))
    try:
        many = partition_edge_folder(src, tmp_path / "many", 200, "block", chunk=101)
        streamed = partition_edge_folder(src, tmp_path / "streamed", 4, "fennel", seed=3, chunk=8)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert PartitionedDataset(many).nparts == 200 and counts[0] == 200 and counts[1:] == [38, 4]   # not 300 of 1
    g = read_edge_list(src, seed=3)
    mem = make_partition("fennel", g.adj, 4, seed=3)
    assert np.array_equal(np.sort(PartitionedDataset(streamed).share(2).node_ids), np.flatnonzero(mem.parts == 2))
    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(ooc, "_parts", lambda *a: pytest.fail("the edges were read before the output was checked"))
    with pytest.raises(SpgnnError, match="^--output .*a-file/out cannot be written (.*a-file is a file)"):
        partition_edge_folder(src, tmp_path / "a-file" / "out", 2, "block")
    np.save(src / "train_mask.npy", np.ones(n - 5, bool))      # refused before any pass over the edges
    with pytest.raises(SpgnnError, match=f"the train mask has shape \\({n - 5},\\), expected \\({n},\\)"):
        partition_edge_folder(src, tmp_path / "bad-mask", 4, "fennel")


def test_split_graph_refuses_a_folder_not_in_natural_order(tmp_path):
    """--split-graph needs a block partition whose renumbering is the identity: not one in rcm order."""
    from types import SimpleNamespace

    from spgnn.plan import split_parts

    g = GRAPHS["sym"]
    for order in ("rcm", "natural"):
        write_parts(tmp_path / order, InMemoryParts(g, make_partition("block", g.adj, 2, node_order=order)))
    assert split_parts(TrainConfig(dataset=str(tmp_path / "natural")), SimpleNamespace(world_size=2)).nparts == 2
    with pytest.raises(SpgnnError, match="in rcm order: partition with spgnn partition --method block --nparts 2 "
                                         "--node-order natural"):
        split_parts(TrainConfig(dataset=str(tmp_path / "rcm")), SimpleNamespace(world_size=2))


@pytest.mark.parametrize("method", ["block", "random", "ldg", "fennel"])
@pytest.mark.parametrize("edges", ["edges.npy", "edges.txt"])
def test_out_of_core_equals_in_memory(tmp_path, method, edges):
    """An edge-list folder partitioned out of core, 101 edges at a time, gives the same parts and files as
    the same folder loaded and partitioned in memory."""
    rng, n = np.random.default_rng(5), 300
    src = tmp_path / "graph"
    src.mkdir()
    e = np.stack([rng.integers(0, n, 1500), rng.integers(0, n, 1500)], 1)
    if edges == "edges.npy":
        np.save(src / edges, e)
    else:
        np.savetxt(src / edges, e, fmt="%d", header="src dst")
    np.save(src / "features.npy", rng.standard_normal((n, 5)).astype(np.float32))
    np.save(src / "labels.npy", rng.integers(0, 3, n))
    if (method, edges) == ("fennel", "edges.txt"):          # once through the command line (its main, here)
        assert cli.main(["partition", "--dataset", str(src), "--nparts", "4", "--method", method, "--seed", "3",
                         "--output", str(tmp_path / "ooc"), "--out-of-core", "--chunk", "101"]) == 0
        ooc = tmp_path / "ooc"
    else:
        ooc = partition_edge_folder(src, tmp_path / "ooc", 4, method, seed=3, chunk=101)
    g = read_edge_list(src, seed=3)
    mem = write_parts(tmp_path / "mem", InMemoryParts(g, make_partition(method, g.adj, 4, seed=3)))
    for p in range(4):
        a, b = (PartitionedDataset(d).share(p) for d in (ooc, mem))
        for k in ("indptr", "indices", "data", "degree", "x", "y", "node_ids"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    assert PartitionedDataset(ooc).meta["partition"]["metrics"] == PartitionedDataset(mem).meta["partition"]["metrics"]


def test_bad_folders_fail_with_one_line(tmp_path, capfd):
    """Each bad folder names the file and the fix; under --nprocs a bad part on one rank stops every rank
    with that one line (exit 2), not a hang or a traceback (the supervisor `cli.main` here, capfd holding its
    ranks' stderr too)."""
    ok = tmp_path / "ok"
    shutil.copytree(_folder(tmp_path, "sym", 2), ok)

    def broken(name, change):
        bad = tmp_path / name
        shutil.copytree(ok, bad)
        change(bad)
        return bad

    def truncate(f):
        f.write_bytes(f.read_bytes()[:-9])

    def swap_part(d):
        shutil.rmtree(d / "part-00001")
        shutil.copytree(_folder(tmp_path, "dir", 2) + "/part-00001", d / "part-00001")

    cases = [(broken("missing", lambda d: (d / "part-00001" / "x.npy").unlink()), 1, "x.npy"),
             (broken("truncated", lambda d: truncate(d / "part-00000" / "indices.npy")), 0, "indices.npy"),
             (broken("mixed", swap_part), 1, "another graph")]
    for folder, part, words in cases:
        with pytest.raises(SpgnnError, match=words):
            PartitionedDataset(folder).share(part)
    meta = json.loads((ok / "meta.json").read_text())
    version = broken("version", lambda d: (d / "meta.json").write_text(json.dumps(meta | {"format": "spgnn-p/0"})))
    with pytest.raises(SpgnnError, match="format"):
        PartitionedDataset(version)
    with pytest.raises(SpgnnError, match="holds 2 parts.*What fits 2 parts"):
        fit_parts(TrainConfig(algo="1d-halo"), 3, PartitionedDataset(ok))
    assert fit_parts(TrainConfig(algo="1.5d", replication=2), 4, PartitionedDataset(ok))[1] == (2, 2)
    capfd.readouterr()
    code = cli.main(["train", "--dataset", str(cases[0][0]), "--nprocs", "2", "--epochs", "1", "--quiet"])
    err = capfd.readouterr().err.strip()
    assert code == 2 and "x.npy" in err and len(err.splitlines()) == 1, err
    blocked = tmp_path / "a-file"                 # a folder below a file cannot be made, even by root
    blocked.write_text("")
    with pytest.raises(SpgnnError, match="not writable.*--cache-dir"):
        Trainer(TrainConfig(cache_dir=str(blocked / "cache"), epochs=1), Comm())


def test_a_part_beyond_the_folder_is_named_as_such(tmp_path):
    """share(B) said the folder was incomplete ('part-0000B is missing ... re-create it'), share(-1) looked for
    part--0001, and share(1.0) was a ValueError traceback."""
    ds = PartitionedDataset(_folder(tmp_path, "sym", 2))
    for part in (2, -1, 1.0):
        with pytest.raises(SpgnnError, match=rf"holds parts 0\.\.1, not part {part}$"):
            ds.share(part)
    assert ds.share(np.int64(1)).part == 1


def test_a_share_never_holds_more_than_its_part(tmp_path):
    """No rank's arrays grow with n beyond its part: each array of a share has n_p rows (or nnz_p entries)."""
    g = small_graph(n=400, seed=9)
    parts = InMemoryParts(g, make_partition("block", g.adj, 4))
    for p in range(4):
        s = parts.share(p)
        n_p = s.n_rows
        assert max(a.shape[0] for a in (s.degree, s.x, s.y, s.node_ids, *s.masks.values())) == n_p
        assert s.indices.size == g.adj[s.node_ids].nnz and s.indptr.size == n_p + 1
    with pytest.raises(SpgnnError, match="holds 4 parts"):
        Trainer(TrainConfig(dataset=str(write_parts(tmp_path / "four", parts)), algo="2d"), Comm())


def test_unit_diagonal_in_place_of_a_coo_round_trip():
    """Diagonal entries of a block row: missing ones inserted as one, present ones kept (PyG's
    add_remaining_self_loops), sorted; the same as the whole matrix's add_self_loops."""
    import scipy.sparse as sp

    from spgnn.partition.share import with_unit_diagonal

    rng = np.random.default_rng(0)
    for trial in range(12):
        m, n, first = 13, 50, int(rng.integers(0, 37))
        a = sp.random(m, n, density=0.2, format="lil", random_state=trial, dtype=np.float32)
        for r in range(0, m, 1 + trial % 3):
            a[r, first + r] = 5.0
        a = a.tocsr()
        want = a.tolil()
        want.setdiag(np.where(a.diagonal(k=first) != 0, a.diagonal(k=first), 1.0), k=first)
        got = with_unit_diagonal(a, first)
        assert got.has_sorted_indices and (got != want.tocsr()).nnz == 0, trial
        assert np.array_equal(got.diagonal(k=first)[::1 + trial % 3], np.full(len(range(0, m, 1 + trial % 3)), 5.0))
    from spgnn.graph.graph import add_self_loops

    whole = sp.random(40, 40, density=0.2, format="csr", random_state=1, dtype=np.float32)
    whole.setdiag(np.where(np.arange(40) % 3 == 0, 2.5, 0.0))
    whole.eliminate_zeros()
    rows = [with_unit_diagonal(whole[i:i + 10], i) for i in range(0, 40, 10)]
    assert (sp.vstack(rows).tocsr() != add_self_loops(whole)).nnz == 0
    assert np.array_equal(add_self_loops(whole).diagonal(), np.where(np.arange(40) % 3 == 0, 2.5, 1.0))


def test_a_folder_made_from_a_partition_file_records_the_seed_of_its_split(tmp_path, capsys):
    """The folder recorded the file's seed (0) as the one its random split was drawn with (--seed 5), so training on
    it with --seed 5 said that --seed does not change the split, and with --seed 0 said nothing."""
    from spgnn import cli

    rng, n, src = np.random.default_rng(5), 300, tmp_path / "graph"            # no split of its own
    src.mkdir()
    np.save(src / "edges.npy", np.stack([rng.integers(0, n, 1500), rng.integers(0, n, 1500)], 1))
    np.save(src / "features.npy", rng.standard_normal((n, 5)).astype(np.float32))
    np.save(src / "labels.npy", rng.integers(0, 3, n))
    quick = ["--epochs", "1", "--hidden", "4", "--eval-every", "0"]
    assert cli.main(["partition", "--dataset", str(src), "--nparts", "1", "--method", "random", "--output",
                     str(tmp_path / "p.npz")]) == 0
    assert cli.main(["partition", "--dataset", str(src), "--nparts", "1", "--method", str(tmp_path / "p.npz"),
                     "--seed", "5", "--output", str(tmp_path / "folder")]) == 0
    made = PartitionedDataset(tmp_path / "folder").partition_info
    assert (made["seed"], made["split_seed"]) == (0, 5)
    capsys.readouterr()
    for seed, said in (("5", False), ("0", True)):
        assert cli.main(["train", "--dataset", str(tmp_path / "folder"), "--seed", seed, *quick]) == 0
        out = "".join(capsys.readouterr())
        assert ("keeps its split" in out) == said and (not said or "the seed it was made with, 5)" in out), out
