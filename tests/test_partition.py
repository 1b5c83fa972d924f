"""Partitioners, saved partitions, plugins and partition metrics, in one process: every partitioner gives
a valid, seeded vector for P = 1…8; METIS beats random on community structure; the metrics equal a
brute-force count; bad input is a clear SpgnnError."""

import importlib.util
import json
import math
import re
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from spgnn import cli, plan, spmm
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.datasets import load_dataset
from spgnn.partition import streaming
from spgnn.partition.metrics import edge_cut, partition_metrics
from spgnn.partition.partition import (
    PARTITIONERS,
    Partition,
    available,
    get_partitioner,
    make_partition,
    make_parts,
    partitioner_params,
    save_partition,
    undirected,
)
from tests.graphs import small_graph
from tests.packages import installed

NEEDS = {"metis": "pymetis", "kahip": "kahip", "kaminpar": "kaminpar"}
BUILT_IN = ["block", "random", "ldg", "fennel", "metis", "kahip", "kaminpar"]
GRAPHS = {"sym": small_graph(n=60, seed=1), "dir": small_graph(n=60, seed=2, directed=True)}


def needs(method):
    module = NEEDS.get(method)
    missing = module is not None and importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"{module} not installed (pip install 'spgnn[{method}]')")


METHODS = [pytest.param(m, marks=needs(m)) for m in BUILT_IN]


@pytest.mark.parametrize("method", METHODS)
def test_valid_and_seeded(method):
    for g in GRAPHS.values():
        for P in range(1, 9):
            parts = PARTITIONERS[method](g.adj, P, 5)
            assert len(parts) == g.n, (method, P)
            assert np.bincount(parts, minlength=P).min() >= 1 and 0 <= min(parts) and max(parts) < P, (method, P)
            np.testing.assert_array_equal(make_parts(method, g.adj, P, seed=5), parts, err_msg=f"{method} P={P}")


def test_no_empty_part_when_n_equals_P():
    g = small_graph(n=8, seed=3)
    for method in available():
        if method in BUILT_IN and importlib.util.find_spec(NEEDS.get(method, "numpy")):
            assert sorted(make_parts(method, g.adj, 8)) == list(range(8)), method


@pytest.mark.parametrize("method", [pytest.param(m, marks=needs(m)) for m in ("metis", "kahip", "kaminpar")])
def test_multilevel_cuts_fewer_edges_than_random(method):
    g = load_dataset("sbm:2000:8")
    for P in (2, 4, 8):
        ours, rand = (edge_cut(g.adj, make_parts(m, g.adj, P)) for m in (method, "random"))
        assert ours < 0.5 * rand, (method, P, ours, rand)


@pytest.mark.parametrize("method", [pytest.param(m, marks=needs(m)) for m in ("metis", "kahip", "kaminpar")])
def test_every_seed_draws_its_own_partition(method):
    """Seeds 0 and 1 gave METIS the same partition (its generator takes 0 as 1); a seed is the same partition
    again."""
    g = load_dataset("sbm:2000:8")
    parts = [make_parts(method, g.adj, 4, seed) for seed in (0, 1, 2)]
    assert not np.array_equal(parts[0], parts[1]) and not np.array_equal(parts[1], parts[2])
    assert np.array_equal(make_parts(method, g.adj, 4, 1), parts[1])


@pytest.mark.parametrize("method", [pytest.param(m, marks=needs(m)) for m in ("metis", "kahip", "kaminpar")])
def test_every_seed_of_the_command_line_reaches_the_library(method):
    """--seed takes [0, 2^63), but KaHIP and KaMinPar took a 32-bit int and METIS seed + 1 in an int64: a seed of
    2^31 or more (2^63 − 1 for METIS) was a traceback. The libraries take it modulo 2^31 − 1."""
    adj = GRAPHS["sym"].adj
    for seed in (2**31, 2**63 - 1):
        np.testing.assert_array_equal(make_parts(method, adj, 3, seed), make_parts(method, adj, 3, seed % (2**31 - 1)))


@needs("metis")
def test_metis_balances_vertices_and_nnz():
    """Both constraints hold, also on a skewed R-MAT graph (where balancing vertices alone leaves nnz 2-5×
    off)."""
    for spec in ("sbm:2000:8", "rmat:12"):
        g = load_dataset(spec)
        for P in (2, 8):
            m = partition_metrics(g.adj, make_partition("metis", g.adj, P))
            assert m["vertex_imbalance"] < 1.05 and m["nnz_imbalance"] < 1.05, (spec, P, m)


def test_missing_package_is_a_clear_error(monkeypatch):
    for module, method in (("pymetis", "metis"), ("kahip", "kahip"), ("kaminpar", "kaminpar")):
        monkeypatch.setitem(sys.modules, module, None)           # import fails as if not installed
        with pytest.raises(SpgnnError, match=rf"needs the {module} package: pip install 'spgnn\[{method}\]'"):
            make_parts(method, GRAPHS["sym"].adj, 2)


def test_streaming_cuts_fewer_edges_than_random():
    g = load_dataset("sbm:2000:8")
    rand = edge_cut(g.adj, make_parts("random", g.adj, 4))
    for method in ("ldg", "fennel"):
        assert edge_cut(g.adj, make_parts(method, g.adj, 4)) < 0.8 * rand, method


@pytest.mark.parametrize("method", ["ldg", "fennel"])
def test_stream_places_each_vertex_by_its_score(method):
    """`streaming.stream` against the module docstring's rule evaluated in Python, vertex by vertex: the part with
    room of the highest score, ties to the smaller part, then the lower id."""
    s = sp.csr_matrix(undirected(load_dataset("sbm:600:6").adj))
    n, P = s.shape[0], 5
    order = np.random.default_rng(1).permutation(n)
    kind, capacity, alpha, gamma = streaming.settings(method, n, P, s.nnz)
    parts, sizes = np.full(n, -1, np.int64), np.zeros(P, np.int64)
    streaming.stream(s.indptr, s.indices, order, order, parts, sizes, capacity, kind, alpha, gamma)
    want, count = np.full(n, -1), [0] * P
    for v in order:
        placed = want[s.indices[s.indptr[v]:s.indptr[v + 1]]]
        neigh = np.bincount(placed[placed >= 0], minlength=P).astype(float)
        scores = [(neigh[p] * (1.0 - count[p] / capacity) if method == "ldg"
                   else neigh[p] - alpha * gamma * count[p] ** (gamma - 1.0), -count[p], -p)
                  for p in range(P) if count[p] < capacity]
        best = -max(scores)[2]
        want[v], count[best] = best, count[best] + 1
    np.testing.assert_array_equal(parts, want)
    np.testing.assert_array_equal(sizes, count)


# ---------------------------------------------------------------------------------------------- metrics


def brute_force(adj, parts, P, train):
    """The metrics of spgnn.partition.metrics, counted one nonzero at a time."""
    a = sp.coo_matrix(adj)
    cut, off_diagonal, need = 0, 0, [set() for _ in range(P)]
    for u, v in zip(a.row.tolist(), a.col.tolist()):
        off_diagonal += u != v
        if parts[u] != parts[v]:
            cut += 1
            need[parts[u]].add(v)
    recv = [len(s) for s in need]
    send = [0] * P
    for s in need:
        for v in s:
            send[parts[v]] += 1
    vertices, nnz, trains = [0] * P, [0] * P, [0] * P
    for u in range(adj.shape[0]):
        vertices[parts[u]] += 1
        trains[parts[u]] += int(train[u])
    for u in a.row.tolist():
        nnz[parts[u]] += 1

    def imb(w):
        return max(w) / (sum(w) / P) if sum(w) else 1.0
    n = adj.shape[0]
    return {"edge_cut": cut, "edge_cut_fraction": cut / off_diagonal, "comm_volume": sum(recv),
            "comm_volume_max_recv": max(recv), "comm_volume_max_send": max(send),
            "replication_factor": (n + sum(recv)) / n, "vertex_imbalance": imb(vertices),
            "nnz_imbalance": imb(nnz), "train_imbalance": imb(trains)}


@pytest.mark.parametrize("gname", GRAPHS)
def test_metrics_equal_brute_force(gname):
    g = GRAPHS[gname]
    adj = g.adj + sp.identity(g.n, format="csr")          # a diagonal, which never counts as cut
    for P in (1, 2, 3, 5):
        for seed in range(3):
            parts = make_parts("random", g.adj, P, seed) if seed else np.arange(g.n) * P // g.n
            got = partition_metrics(adj, Partition(parts, P), g.train_mask)
            for key, want in brute_force(adj, parts, P, g.train_mask).items():
                assert got[key] == pytest.approx(want, rel=1e-12), (gname, P, seed, key)


def test_metrics_take_the_part_vector_make_parts_returns_and_check_it():
    """partition_metrics(adj, make_parts(...)) was an AttributeError traceback, and a Partition of another graph
    (or ids beyond its P) went unchecked."""
    g = GRAPHS["sym"]
    parts = make_parts("random", g.adj, 3, seed=1)
    assert partition_metrics(g.adj, parts, g.train_mask) == partition_metrics(g.adj, Partition(parts, 3), g.train_mask)
    # a Graph for its A, as save_partition takes it (an AttributeError, 'Graph' object has no attribute 'shape')
    assert partition_metrics(g, parts) == partition_metrics(g.adj, parts)
    np.testing.assert_array_equal(make_parts("random", g, 3, seed=1), parts)
    np.testing.assert_array_equal(make_partition("random", g, 3, seed=1).parts, parts)
    for bad, message in ((parts[1:], "has length 59 but the graph has 60 nodes"),
                         (Partition(parts, 2), r"holds part ids 0\.\.2, but the layout's 2 parts")):
        with pytest.raises(SpgnnError, match=message):
            partition_metrics(g.adj, bad)


def test_partition_info_has_cost():
    part = make_partition("fennel", GRAPHS["sym"].adj, 3, seed=2, gamma=1.2)
    assert part.info["method"] == "fennel" and part.info["params"] == {"gamma": 1.2, "nu": 1.1}
    assert part.info["seed"] == 2 and part.info["seconds"] > 0
    assert part.info["peak_rss_growth_bytes"] is None or part.info["peak_rss_growth_bytes"] >= 0


# ---------------------------------------------------------------------------------------------- ids, files


def test_to_original_undoes_renumbering():
    g = GRAPHS["dir"]
    part = Partition(make_parts("random", g.adj, 3, seed=4), 3)
    x = np.random.default_rng(0).standard_normal((g.n, 2))
    renumbered = x[part.perm]                                   # what rank p holds: its block of rows
    blocks = [renumbered[part.offsets[p]:part.offsets[p + 1]] for p in range(3)]
    np.testing.assert_array_equal(part.to_original(blocks), x)
    np.testing.assert_array_equal(part.to_original(renumbered), x)
    a = part.renumber(g.adj)
    np.testing.assert_array_equal(part.to_original(a @ renumbered), g.adj @ x)
    with pytest.raises(SpgnnError, match="rows given"):
        part.to_original(blocks[:2])


def test_saved_partition_round_trip(tmp_path):
    g = GRAPHS["sym"]
    part = make_partition("ldg", g.adj, 4, seed=3)
    path = save_partition(tmp_path / "p.parts", part.parts, "ldg", part.info["params"], 3, g)
    assert path.name == "p.parts"
    loaded = make_partition(str(path), g.adj, 4)             # read by content, whatever the suffix
    assert loaded.info["method"] == "ldg" and loaded.info["seed"] == 3 and loaded.info["file"] == str(path)
    np.testing.assert_array_equal(loaded.parts, part.parts)
    np.save(tmp_path / "v.npy", part.parts)
    np.savetxt(tmp_path / "v.txt", part.parts, fmt="%d")
    for f in ("v.npy", "v.txt"):
        np.testing.assert_array_equal(make_parts(str(tmp_path / f), g.adj, 4), part.parts)


def test_saved_partition_records_provenance(tmp_path):
    g = GRAPHS["sym"]
    save_partition(tmp_path / "p.npz", make_parts("random", g.adj, 2, 9), "random", {}, 9, g)
    with np.load(tmp_path / "p.npz") as z:
        meta = json.loads(str(z["meta"]))
    assert meta["method"] == "random" and meta["seed"] == 9 and meta["nparts"] == 2 and meta["n"] == g.n
    assert {"numpy", "scipy", "spgnn", "python"} <= set(meta["versions"]) and len(meta["graph_hash"]) == 64


def test_a_dataset_given_as_a_partition_file_is_said_to_be_none(tmp_path):
    """A dataset's .npz given as --partition read "cannot read partition file g.npz: 'parts is not a file in the
    archive'"."""
    from spgnn.graph.datasets import save_npz

    save_npz(GRAPHS["sym"], tmp_path / "g.npz")
    with pytest.raises(SpgnnError, match=r"g\.npz is no saved partition \(it holds adj_indices, .*: a dataset\?\)"):
        make_parts(str(tmp_path / "g.npz"), GRAPHS["sym"].adj, 2)


def test_an_empty_partition_file_is_one_line(tmp_path):
    """An empty text file printed numpy's 'UserWarning: loadtxt: input contained no data' (two lines of source)
    above the error line."""
    import warnings

    (tmp_path / "empty.txt").write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SpgnnError, match="^partition vector has length 0 but the graph has 60 nodes$"):
            make_parts(str(tmp_path / "empty.txt"), GRAPHS["sym"].adj, 2)


@pytest.mark.parametrize("seed", [-1, 1.5, "3", 2**64])
def test_a_seed_or_a_part_count_that_is_no_number_is_one_line(seed):
    """make_partition(..., seed=-1) (or 1.5, "3") was a numpy ValueError or TypeError traceback from random, ldg
    and fennel, and taken by metis, kahip and kaminpar; 2^64 was taken by some. P = 2.5 or "2" were tracebacks
    too, 2.0 'partition vector must hold integer part ids'."""
    for method in ("random", "fennel", "block"):
        with pytest.raises(SpgnnError, match=r"seed is a whole number in \[0, 2\^63\), as --seed, got"):
            make_partition(method, GRAPHS["sym"].adj, 2, seed=seed)
    for P in (2.5, "2", 2.0):
        with pytest.raises(SpgnnError, match=r"number of parts must be a whole number of at least 1, got"):
            make_parts("metis" if importlib.util.find_spec("pymetis") else "fennel", GRAPHS["sym"].adj, P)


def test_save_partition_checks_the_vector_against_its_graph(tmp_path):
    """save_partition wrote any vector under the graph's hash: of another length, of floats (1.5 saved as 1), or
    with part 0 empty (a 3-way partition no run could use); an unwritable path was an OSError traceback."""
    g = GRAPHS["sym"]
    for bad, message in ((np.arange(59) % 2, "has length 59 but the graph has 60 nodes"),
                         (np.arange(60) % 2 * 1.5, "must hold integer part ids"),
                         (np.arange(60) % 2 + 1, "part 0 of 3 is empty")):
        with pytest.raises(SpgnnError, match=message):
            save_partition(tmp_path / "p.npz", bad, "mine", {}, 0, g)
        assert not (tmp_path / "p.npz").exists()
    with pytest.raises(SpgnnError, match=r"^cannot write the partition to .*: Is a directory; give a writable file"):
        save_partition(tmp_path, np.arange(60) % 2, "mine", {}, 0, g)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("parts,message", [
    (np.zeros(59, int), "length 59 but the graph has 60"),
    (np.arange(60) % 4, r"ids 0\.\.3, but the layout's 3 parts \(its row blocks: .*\) need ids in \[0, 3\)"),
    (np.arange(60) % 3 - 1, r"ids -1\.\.1"),
    (np.arange(60) % 2, "part 2 of 3 is empty"),
    (np.linspace(0, 2, 60), "integer part ids"),
    (np.zeros((60, 1), int), r"shape \(60, 1\), but it is one part id a node: give a vector of 60"),    # said
    (np.c_[np.arange(60), np.arange(60) % 3], r"shape \(60, 2\)"),            # 'length 60 but the graph has 60'
])
def test_bad_vectors(parts, message):
    with pytest.raises(SpgnnError, match=message):
        make_parts(parts, GRAPHS["sym"].adj, 3)


def test_bad_methods_and_files(tmp_path):
    g, other = GRAPHS["sym"], GRAPHS["dir"]
    with pytest.raises(SpgnnError, match="unknown partition 'nope': use one of block, random"):
        make_parts("nope", g.adj, 2)
    with pytest.raises(SpgnnError, match="only 60 nodes"):
        make_parts("block", g.adj, 61)
    with pytest.raises(SpgnnError, match="unknown partitioner parameter.*gama.*takes gamma, nu"):
        make_parts("fennel", g.adj, 2, gama=2)
    path = save_partition(tmp_path / "p.npz", make_parts("block", g.adj, 2), "block", {}, 0, g)
    with pytest.raises(SpgnnError, match="was made for another graph .*recompute it"):
        make_parts(str(path), other.adj, 2)
    with pytest.raises(SpgnnError, match="holds a 2-way partition but 3 parts"):
        make_parts(str(path), g.adj, 3)
    (tmp_path / "bad.txt").write_text("0\n1\nx\n")
    with pytest.raises(SpgnnError, match="cannot read partition file"):
        make_parts(str(tmp_path / "bad.txt"), g.adj, 2)
    np.save(tmp_path / "short.npy", np.zeros(10, int))
    with pytest.raises(SpgnnError, match="length 10 but the graph has 60"):
        make_parts(str(tmp_path / "short.npy"), g.adj, 2)


# ---------------------------------------------------------------------------------------------- plugins


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """An installed package `halves_plugin` publishing partitioner `halves` through the entry point group."""
    installed(tmp_path, "halves_plugin", "import numpy as np\n\ndef halves(adj, P, seed=0, *, shift=0):\n"
              "    return (np.arange(adj.shape[0]) * P // adj.shape[0] + shift) % P\n",
              "spgnn.partitioners", "halves = halves_plugin:halves")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "halves"
    PARTITIONERS.pop("halves", None)


def test_entry_point_plugin_works_like_a_built_in(plugin, tmp_path, capsys):
    assert "halves" in available() and "halves" not in PARTITIONERS     # listed, loaded only when used
    np.testing.assert_array_equal(make_parts("halves", GRAPHS["sym"].adj, 3, shift=1)[[0, 59]], [1, 0])
    assert get_partitioner("halves") is PARTITIONERS["halves"]
    out = tmp_path / "report.json"
    assert cli.main(["train", "--partition", "halves", "--epochs", "1", "--quiet", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["partition"]["info"]["method"] == "halves" and report["partition"]["metrics"]["nparts"] == 1
    assert cli.main(["partition", "--nparts", "3", "--compare", "halves,block"]) == 0
    table = capsys.readouterr().out
    assert "| halves | 3 |" in table and "| block | 3 |" in table


def test_cli_partition_saves_and_train_uses_it(tmp_path, capsys):
    """A saved partition is listed, checked against --nparts, and trained with on 2 processes: the report's cut
    is the saved one's and the loss curve is the single-process one."""
    out = tmp_path / "cora4.npz"
    assert cli.main(["partition", "--nparts", "2", "--method", "fennel", "--param", "gamma=1.3", "--seed", "4",
                     "--output", str(out), "--json", str(tmp_path / "m.json")]) == 0
    assert "saved" in capsys.readouterr().out
    rows = json.loads((tmp_path / "m.json").read_text())["rows"]
    assert rows[0]["params"] == {"gamma": 1.3, "nu": 1.1} and rows[0]["comm_volume"] > 0
    assert cli.main(["partition", "--nparts", "2", "--method", str(out)]) == 0
    assert f"| {out} | 2 |" in capsys.readouterr().out
    assert cli.main(["partition", "--nparts", "3", "--method", str(out)]) == 2
    assert "2-way partition but 3 parts" in capsys.readouterr().err
    assert cli.main(["partition", "--nparts", "2", "--compare", "block,ldg", "--output", str(out)]) == 2
    # spgnn cost and --algo auto compare the layouts of as many row blocks as the file has parts; they partitioned
    # into every other count with the file ("holds a 2-way partition but 1 parts"), and cost into 1 part first
    assert cli.main(["cost", "--dataset", "cora", "--partition", str(out), "--nprocs", "2,4"]) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["2"], ["4"])]
    assert {r[1] for r in table} == {"1d", "1d-halo", "sar", "1.5d", "2d"} and ["4", "2d", "2x2"] == table[-1][:3]
    picked = plan.plan(TrainConfig(algo="auto", partition=str(out)), 4)
    assert spmm.get(picked.cfg.algo).num_parts(picked.shape) == 2 and picked.partition.info["file"] == str(out)
    for empty in (",", "block,,ldg", ""):       # read as partition file '.': "Is a directory"
        assert cli.main(["partition", "--nparts", "2", "--compare", empty]) == 2
        assert "names no method between commas" in capsys.readouterr().err
    train = ["train", "--epochs", "3", "--quiet", "--eval-every", "0", "--output"]
    assert cli.main(train + [str(tmp_path / "file.json"), "--partition", str(out), "--nprocs", "2"]) == 0
    assert cli.main(train + [str(tmp_path / "one.json")]) == 0
    report, one = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("file", "one"))
    used = report["partition"]
    assert used["info"]["params"] == {"gamma": 1.3, "nu": 1.1} and used["info"]["seed"] == 4, used["info"]
    for key in ("edge_cut", "comm_volume", "nnz_imbalance"):                # the saved vector's cut, not block's
        assert used["metrics"][key] == rows[0][key], key
    np.testing.assert_allclose([e["loss"] for e in report["epochs"]], [e["loss"] for e in one["epochs"]], rtol=1e-5)
    # a bare part vector under --nprocs: the processes were handed the cache folder made from it, and refused the
    # file as "not that partition of this graph" (its folder did not record which file it was made from)
    np.save(tmp_path / "bare.npy", np.arange(report["graph"]["n"]) % 2)
    assert cli.main(train + [str(tmp_path / "bare.json"), "--partition", str(tmp_path / "bare.npy"),
                             "--nprocs", "2"]) == 0, capsys.readouterr().err
    bare = json.loads((tmp_path / "bare.json").read_text())
    np.testing.assert_allclose([e["loss"] for e in bare["epochs"]], [e["loss"] for e in one["epochs"]], rtol=1e-5)


# ---------------------------------------------------------------------------------------------- node order


def _shuffled_path(n: int, seed: int):
    """A path 0-1-…-(n-1), its nodes relabelled at random: (adjacency, label of path node k)."""
    label = np.random.default_rng(seed).permutation(n)
    a = sp.coo_matrix((np.ones(n - 1), (label[:-1], label[1:])), shape=(n, n))
    return sp.csr_matrix(a + a.T), label


@pytest.mark.parametrize("P", [1, 3])
def test_rcm_order_keeps_each_parts_nodes_and_brings_neighbours_together(P):
    """rcm reorders the nodes inside each part only (the same parts, offsets and nodes in each) and gives each
    part's diagonal block of a relabelled path bandwidth 1, where ascending ids leave it wide."""
    adj, label = _shuffled_path(300, seed=P)
    parts = np.zeros(300, np.int64)
    parts[label] = np.arange(300) * P // 300          # part p: a stretch of the path
    natural, rcm = (make_partition(parts, adj, P, node_order=o) for o in ("natural", "rcm"))
    assert rcm.info["node_order"] == "rcm" and natural.info["node_order"] == "natural"
    np.testing.assert_array_equal(rcm.offsets, natural.offsets)
    assert sorted(rcm.perm) == list(range(300))

    def bandwidth(part, p):
        lo, hi = part.offsets[p], part.offsets[p + 1]
        block = part.renumber(adj)[lo:hi, lo:hi].tocoo()
        return np.abs(block.row - block.col).max()
    for p in range(P):
        lo, hi = rcm.offsets[p], rcm.offsets[p + 1]
        assert set(rcm.perm[lo:hi]) == set(natural.perm[lo:hi])
        assert bandwidth(rcm, p) == 1 < bandwidth(natural, p)
    np.testing.assert_array_equal(rcm.inv[rcm.perm], np.arange(300))


def _train_in_order(comm, order, algo):
    from spgnn.config import TrainConfig
    from spgnn.train.fullbatch import Trainer

    cfg = TrainConfig(dataset="cora", model="gcn", algo=algo, hidden=8, epochs=3, partition="random", seed=2,
                      node_order=order, dropout=0.3)
    comm.ledger.reset()
    out = Trainer(cfg, comm, graph=GRAPHS["dir"]).run(log=None)
    return [e["loss"] for e in out["epochs"]], out["final"], out["comm"]["per_rank"]


@pytest.mark.parametrize("algo", ["1d-halo", "2d"])
def test_node_order_changes_no_result_and_no_byte(algo):
    """Training on a partition in rcm order equals training in natural order (float tolerance), every rank
    sending and receiving the same bytes, on a row layout (1d-halo) and a grid (2d)."""
    from spgnn.comm.launch import run_local

    nat, rcm = (run_local(_train_in_order, 4, order, algo, timeout_s=300)[0] for order in ("natural", "rcm"))
    np.testing.assert_allclose(rcm[0], nat[0], rtol=1e-5)
    assert rcm[1] == pytest.approx(nat[1], rel=1e-5)
    assert [(r["sent_bytes"], r["recv_bytes"]) for r in rcm[2]] == \
        [(r["sent_bytes"], r["recv_bytes"]) for r in nat[2]]


def test_bad_node_order_is_a_clear_error():
    with pytest.raises(SpgnnError, match="--node-order must be rcm or natural"):
        make_partition("block", GRAPHS["sym"].adj, 2, node_order="metis")
    from spgnn.config import TrainConfig
    with pytest.raises(SpgnnError, match="--node-order must be rcm or natural"):
        TrainConfig(node_order="random").validate()


def test_cli_node_order_reaches_the_folder_and_the_report(tmp_path):
    """--node-order of spgnn partition --output DIR is recorded in the folder, and spgnn train's in its report; a
    bad one is a one-line error of argparse."""
    from spgnn.partition.partitioned import PartitionedDataset

    for order in ("natural", "rcm"):
        assert cli.main(["partition", "--nparts", "2", "--method", "block", "--node-order", order, "--quiet",
                         "--output", str(tmp_path / order)]) == 0
        assert PartitionedDataset(tmp_path / order).partition_info["node_order"] == order
    out = tmp_path / "report.json"
    assert cli.main(["train", "--epochs", "1", "--quiet", "--eval-every", "0", "--node-order", "natural",
                     "--output", str(out)]) == 0
    assert json.loads(out.read_text())["partition"]["info"]["node_order"] == "natural"
    with pytest.raises(SystemExit):
        cli.main(["train", "--node-order", "metis"])


def test_partitioner_parameters_take_their_defaults_types():
    """--param values reached the partitioner as parsed: balance_edges=False as the string 'False' (true), gamma=abc
    as a TypeError, ufactor=-5 as METIS's opaque status; a plug-in's parameter without `*` was unknown."""
    metis, fennel = (get_partitioner(m) for m in ("metis", "fennel"))
    assert partitioner_params(metis, balance_edges="False", ufactor=40.0) == {"balance_edges": False, "ufactor": 40}
    assert partitioner_params(fennel, gamma=2) == {"gamma": 2.0, "nu": 1.1}
    for fn, given, needle in ((metis, {"balance_edges": "maybe"}, "balance_edges takes true or false"),
                              (metis, {"ufactor": 2.5}, "ufactor takes a whole number"),
                              (fennel, {"gamma": "abc"}, "gamma takes a number"),
                              (fennel, {"gamma": None}, "gamma takes a number")):
        with pytest.raises(SpgnnError, match=f"^partitioner parameter {needle} \\(default "):
            partitioner_params(fn, **given)
    adj = GRAPHS["sym"].adj
    for method, params, needle in (("fennel", {"gamma": 1}, "fennel's gamma must be a number above 1"),
                                   ("metis", {"ufactor": -5}, "metis's ufactor must be a whole number in"),
                                   ("kahip", {"imbalance": -1}, "kahip's imbalance must be a non-negative"),
                                   ("kaminpar", {"imbalance": float("nan")}, "kaminpar's imbalance must be")):
        if method in NEEDS and importlib.util.find_spec(NEEDS[method]) is None:
            continue
        with pytest.raises(SpgnnError, match=f"^{needle}"):
            make_parts(method, adj, 2, **params)

    def flipped(adj, P, seed=0, flip=False):              # positional-or-keyword, as the docs' signature reads
        parts = np.arange(adj.shape[0]) * P // adj.shape[0]
        return P - 1 - parts if flip else parts

    assert partitioner_params(flipped, flip="true") == {"flip": True}
    PARTITIONERS["flipped"] = flipped
    try:
        assert make_parts("flipped", adj, 2, flip="true")[0] == 1
    finally:
        PARTITIONERS.pop("flipped")


def test_the_cache_knows_a_partitioner_by_its_code(tmp_path):
    """The partition cache was keyed by a partitioner's name: after a user changed their registered function (or
    upgraded a plug-in or a library), the old function's partition was trained on."""
    from spgnn.partition.partitioned import _source_entry, cache_folder

    g = GRAPHS["sym"]

    def halves(adj, P, seed=0):
        return np.arange(adj.shape[0]) * P // adj.shape[0]

    def scattered(adj, P, seed=0):
        return np.random.default_rng(seed).permutation(np.arange(adj.shape[0]) % P)

    source = tmp_path / "graph.npz"
    source.write_bytes(b"a dataset file")
    folders = []
    try:
        for fn in (halves, scattered, halves):
            PARTITIONERS["mine"] = fn
            folders.append((cache_folder(tmp_path, g, "mine", {}, 0, 2),
                            _source_entry(source, {"partition": "mine", "seed": 0}, tmp_path)))
    finally:
        PARTITIONERS.pop("mine")
    (folder, entry), (other_folder, other_entry), again = folders
    assert folder != other_folder and entry != other_entry and (folder, entry) == again


def test_the_cache_knows_the_helpers_a_partitioner_calls_from_its_file(tmp_path):
    """Only the partitioner's own source was hashed: a change to the helper it calls served the old partition."""
    import importlib.util

    from spgnn.partition.partition import fingerprint

    prints = []
    for body in ("return np.arange(n) % P", "return np.arange(n) * P // n", "return np.arange(n) % P"):
        path = tmp_path / "mine.py"
        path.write_text(f"import numpy as np\n\ndef assign(n, P):\n    {body}\n\n"
                        "def mine(adj, P, seed=0):\n    return assign(adj.shape[0], P)\n")
        spec = importlib.util.spec_from_file_location("mine", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        prints.append(fingerprint(module.mine))
    assert prints[0] != prints[1] and prints[0] == prints[2]


def test_warm_up_pays_the_node_orders_first_use_too():
    """spgnn partition --compare charged rcm's import (csgraph, scipy.linalg) to the first method's time and memory."""
    import subprocess

    code = ("import sys; from spgnn.partition.metrics import warm_up\n"        # one fresh process: natural, then rcm
            "for order in ('natural', 'rcm'):\n"
            "    warm_up('block', 2, order)\n"
            "    print('scipy.sparse.csgraph' in sys.modules)")
    seen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert seen == ["False", "True"]


def test_warm_up_is_a_small_ring_whatever_the_part_count():
    """The warm-up partitioned a 16·P-node ring: --nparts 99999 --compare metis,kahip,kaminpar on cora spent 3
    minutes on rings before its line '99999 processes but the graph has only 2708 nodes'."""
    from spgnn.partition.metrics import WARM_PARTS, warm_up

    calls = []
    PARTITIONERS["counted"] = lambda adj, P, seed=0: calls.append((adj.shape[0], P)) or np.arange(adj.shape[0]) % P
    try:
        for P in (3, 99999):
            warm_up("counted", P, "rcm")
    finally:
        PARTITIONERS.pop("counted")
    assert calls == [(48, 3), (16 * WARM_PARTS, WARM_PARTS)]


def test_a_partitioner_is_registered_as_layers_and_algorithms_are():
    """@spgnn.register("block") replaced spgnn's block (which --split-graph relies on) without a word; a class, or
    a partitioner returning None, failed later with 'partition vector has length 1 but the graph has n nodes'."""
    import spgnn

    with pytest.raises(SpgnnError, match=r"^partitioner 'block' is registered already \(by spgnn.partition"):
        spgnn.register("block")(lambda adj, P, seed: None)
    with pytest.raises(SpgnnError, match="register a function"):
        spgnn.register("a-class")(dict)
    with pytest.raises(SpgnnError, match="a partitioner's name is a non-empty string"):
        spgnn.register(lambda adj, P, seed: None)

    def nothing(adj, P, seed):
        return None

    try:
        spgnn.register("nothing")(nothing)
        spgnn.register("nothing")(nothing)                     # the same function again: fine
        with pytest.raises(SpgnnError, match=r"^partitioner 'nothing' returned NoneType \(\), not the part of each"):
            make_partition("nothing", small_graph(n=20).adj, 2)
    finally:
        PARTITIONERS.pop("nothing", None)


def test_a_partitioner_that_changes_the_graph_it_is_given_changes_no_graph():
    """A plug-in that weighs A its own way in place (adj.data[:] = 5) changed the caller's graph, trained on next,
    and the partitioned folder the cache wrote under the unchanged graph's key."""
    g = small_graph(n=40)
    before = g.adj.copy()

    def reweighs(adj, P, seed=0):
        adj.data[:] = 5.0
        return np.arange(adj.shape[0]) * P // adj.shape[0]

    PARTITIONERS["reweighs"] = reweighs
    try:
        parts = make_parts("reweighs", g.adj, 2)
    finally:
        PARTITIONERS.pop("reweighs")
    assert (g.adj != before).nnz == 0
    np.testing.assert_array_equal(parts, np.arange(40) // 20)


def test_a_partitioner_that_fails_or_takes_other_arguments_is_one_line(capsys):
    """A plug-in of another signature, or one that raised, was a traceback; one that failed on the 32-node ring
    `spgnn partition` warms it up on was reported against the ring ("the graph has 32 nodes"); parameters at the
    edge of their range (fennel's ν = ∞ and γ = 10⁶, metis's ufactor = 10²⁰) overflowed inside the partitioner."""
    g = small_graph(n=40)

    def two(adj, P):
        return np.zeros(adj.shape[0], np.int64)

    def raises(adj, P, seed):
        raise ValueError("boom")

    def long(adj, P, seed):
        return np.zeros(adj.shape[0] + 1, np.int64)

    def greedy(adj, P, seed):              # out of memory stays what it is: the command's own line says so
        raise RuntimeError("std::bad_alloc: cannot allocate memory")

    try:
        for name, fn in (("two", two), ("raises", raises), ("long", long), ("greedy", greedy)):
            PARTITIONERS[name] = fn
        with pytest.raises(RuntimeError, match="cannot allocate memory"):
            make_partition("greedy", g.adj, 2)
        with pytest.raises(SpgnnError, match=r"^partitioner 'two' does not take \(adj, P, seed, \*\*params\) \(too "):
            make_partition("two", g.adj, 2)
        with pytest.raises(SpgnnError, match="^partitioner 'raises' failed on a graph of 40 nodes into 2 parts: "
                                             "ValueError: boom$"):
            make_partition("raises", g.adj, 2)
        assert cli.main(["partition", "--dataset", "cora", "--nparts", "2", "--method", "long"]) == 2
        assert capsys.readouterr().err.strip() == \
            "spgnn: error: partition vector has length 2709 but the graph has 2708 nodes"
    finally:
        for name in ("two", "raises", "long", "greedy"):
            PARTITIONERS.pop(name, None)
    for method, params, needle in (("fennel", {"nu": math.inf}, "fennel's nu must be a number of at least 1"),
                                   ("fennel", {"gamma": 1e6}, "fennel's gamma 1000000.0 makes its balance weight"),
                                   ("metis", {"ufactor": 10**20}, "metis's ufactor must be a whole number in")):
        with pytest.raises(SpgnnError, match=f"^{re.escape(needle)}"):
            make_partition(method, g.adj, 4, **params)


def test_every_method_compared_and_the_part_count_are_checked_before_any_work(monkeypatch, capsys):
    """--compare metis,typo partitioned with metis before it found 'typo' unknown; --nparts 0 was refused only
    once the dataset was read."""
    monkeypatch.setattr(cli, "load_dataset", lambda *a, **k: pytest.fail("the dataset was read"))
    for argv, line in ((["--compare", "block,typo"], "unknown partition 'typo': use one of block, "),
                       (["--compare", "block," + "x" * 300], f"unknown partition '{'x' * 300}': use one of "),
                       (["--method", "block", "--nparts", "0"], "--nparts must be at least 1, got 0")):
        assert cli.main(["partition", "--dataset", "cora", "--nparts", "2", *argv]) == 2
        assert capsys.readouterr().err.startswith(f"spgnn: error: {line}")
