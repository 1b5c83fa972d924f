"""Tests of spgnn.graph.datasets: real-data statistics, agreement with PyG's Planetoid reader, the bundled Cora,
every file layout, the synthetic generators, splits, and a clear SpgnnError for each kind of bad input."""

from __future__ import annotations

import json
import os
import pickle
import re
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spgnn.errors import SpgnnError
from spgnn.graph import datasets
from spgnn.graph.build import default_split, per_class_split
from spgnn.graph.datasets import (
    BUNDLED_DIR,
    DATA_DIR_ENV,
    KNOWN_DATASETS,
    convert_planetoid,
    load_dataset,
    read_npz,
    read_planetoid,
    save_npz,
)
from spgnn.partition.ooc import EdgeFolder
from tests.graphs import DATA, needs_data


@pytest.fixture(autouse=True)
def hermetic(tmp_path, monkeypatch):
    """No $SPGNN_DATA_DIR, a fresh current directory and home: only what a test sets up is found."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")


def edge_set(g):
    """Edges src → dst of a Graph (A[dst, src] = 1)."""
    c = g.adj.tocoo()
    return set(zip(c.col.tolist(), c.row.tolist(), strict=True))


def assert_same_graph(a, b):
    assert a.n == b.n and a.num_classes == b.num_classes
    assert (a.adj != b.adj).nnz == 0
    assert a.x.dtype == b.x.dtype == np.float32 and np.array_equal(a.x.view(np.uint32), b.x.view(np.uint32))
    for attr in ("y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(a, attr), getattr(b, attr)), attr


def assert_simple_undirected(g):
    assert g.is_symmetric
    assert not g.adj.diagonal().any()
    assert np.all(g.adj.data == 1)
    assert not (g.train_mask & g.val_mask).any() and not (g.train_mask & g.test_mask).any()
    assert not (g.val_mask & g.test_mask).any()


# ---------------------------------------------------------------------------------------------- helpers

def write_planetoid(folder: Path, name: str, *, n_all=540, n_test=30, n_gap=3, f=16, c=3, n_lab=9, seed=0):
    """Tiny Planetoid files (Python pickles, protocol 2) with ``n_gap`` test ids missing from test.index, as
    in CiteSeer. Returns (features, labels) every node should get (zeros and label 0 for the gap ids)."""
    rng = np.random.default_rng(seed)
    n = n_all + n_test + n_gap
    feats = sp.random(n, f, density=0.3, format="csr", dtype=np.float32, random_state=seed)
    feats.data = rng.random(feats.nnz, dtype=np.float32)        # not just ones: tests bit-exact copies
    labels = rng.integers(0, c, n)
    onehot = np.eye(c, dtype=np.int32)[labels]
    ids = np.arange(n_all, n)
    gap = rng.choice(ids[1:-1], n_gap, replace=False)
    test_ids = rng.permutation(np.setdiff1d(ids, gap))
    graph = defaultdict(list)
    for u, v in rng.integers(0, n, (4 * n, 2)):
        graph[int(u)].append(int(v))
        graph[int(v)].append(int(u))
    parts = dict(x=feats[:n_lab], tx=feats[test_ids], allx=feats[:n_all], y=onehot[:n_lab],
                 ty=onehot[test_ids], ally=onehot[:n_all], graph=graph)
    folder.mkdir(parents=True, exist_ok=True)
    for part, obj in parts.items():
        with open(folder / f"ind.{name}.{part}", "wb") as fh:
            pickle.dump(obj, fh, protocol=2)
    (folder / f"ind.{name}.test.index").write_text("\n".join(map(str, test_ids)) + "\n")
    x = feats.toarray()
    x[gap] = 0
    labels[gap] = 0
    return x, labels


def write_edge_list(folder: Path, edges_text: str, x, y, *, ext="txt", meta=None, **masks):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"edges.{ext}").write_text(edges_text)
    np.save(folder / "features.npy", np.asarray(x))
    np.save(folder / "labels.npy", np.asarray(y))
    for key, m in masks.items():
        np.save(folder / f"{key}.npy", np.asarray(m))
    if meta is not None:
        (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def small_features(n=6, f=3, seed=0):
    return np.random.default_rng(seed).random((n, f), dtype=np.float32)


# ---------------------------------------------------------------------------------------------- bundled Cora

def test_bundled_cora_needs_no_files():
    g = load_dataset("cora")
    assert (g.name, g.n, g.nnz, g.num_features, g.num_classes) == ("cora", 2708, 10556, 1433, 7)
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (140, 500, 1000)
    assert np.flatnonzero(g.train_mask).tolist() == list(range(140))
    assert np.flatnonzero(g.val_mask).tolist() == list(range(140, 640))
    assert np.bincount(g.y).tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert set(np.unique(g.x)) == {0.0, 1.0}                    # binary bag of words, 49,216 ones
    assert int(g.x.sum()) == 49216
    assert_simple_undirected(g)
    assert (BUNDLED_DIR / "cora.npz").stat().st_size < 200_000


def test_bundled_cora_when_data_dir_lacks_it(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "empty"))
    assert load_dataset("Cora").n == 2708
    assert load_dataset("cora", data_dir=str(tmp_path)).n == 2708


@needs_data
def test_bundled_cora_equals_raw_files(tmp_path):
    raw = load_dataset("cora", data_dir=str(DATA))           # an explicit data dir reads the raw pickles
    assert_same_graph(load_dataset("cora"), raw)
    out = convert_planetoid(DATA / "planetoid", "cora", tmp_path / "cora.npz")
    with np.load(out) as fresh, np.load(BUNDLED_DIR / "cora.npz") as bundled:
        assert sorted(fresh.files) == sorted(bundled.files)
        for key in fresh.files:
            assert fresh[key].dtype == bundled[key].dtype and np.array_equal(fresh[key], bundled[key]), key


# ---------------------------------------------------------------------------------------------- Planetoid

@needs_data
@pytest.mark.parametrize("name, n, nnz, f, c, counts", [
    ("cora", 2708, 10556, 1433, 7, (140, 500, 1000)),
    ("citeseer", 3327, 9104, 3703, 6, (120, 500, 1000)),
])
def test_planetoid_matches_pyg(name, n, nnz, f, c, counts):
    planetoid = pytest.importorskip("torch_geometric.io.planetoid")
    g = load_dataset(name, data_dir=str(DATA))
    assert (g.n, g.nnz, g.num_features, g.num_classes) == (n, nnz, f, c)
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == counts
    assert_simple_undirected(g)
    ref = planetoid.read_planetoid_data(str(DATA / "planetoid"), name)
    assert edge_set(g) == set(map(tuple, ref.edge_index.numpy().T.tolist()))
    assert np.array_equal(g.x, ref.x.numpy())
    assert np.array_equal(g.y, ref.y.numpy())
    for m in ("train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(g, m), getattr(ref, m).numpy()), m


def test_planetoid_padding_of_missing_test_ids_matches_pyg(tmp_path):
    x, y = write_planetoid(tmp_path / "p", "citeseer")
    g = load_dataset(str(tmp_path / "p"))                      # name guessed from the file names
    assert g.name == "citeseer" and g.n == 573
    assert np.array_equal(g.x, x) and np.array_equal(g.y, y)
    assert g.train_mask.sum() == 9 and g.val_mask.sum() == 500 and g.test_mask.sum() == 30
    planetoid = pytest.importorskip("torch_geometric.io.planetoid")
    ref = planetoid.read_planetoid_data(str(tmp_path / "p"), "citeseer")
    assert np.array_equal(g.x, ref.x.numpy()) and np.array_equal(g.y, ref.y.numpy())
    assert edge_set(g) == set(map(tuple, ref.edge_index.numpy().T.tolist()))
    assert np.array_equal(g.test_mask, ref.test_mask.numpy())


def test_convert_planetoid_round_trips_bit_exactly(tmp_path):
    write_planetoid(tmp_path / "p", "tiny")
    g = read_planetoid(tmp_path / "p", "tiny")
    out = convert_planetoid(tmp_path / "p", "tiny", tmp_path / "tiny.npz")
    assert_same_graph(read_npz(out, name="tiny"), g)
    assert_same_graph(load_dataset(str(tmp_path / "p" / "ind.tiny.x")), g)    # any of its files works
    assert_same_graph(load_dataset(str(tmp_path / "p" / "ind.tiny.x") + ":0"), g)
    with pytest.raises(SpgnnError, match=r"ind\.tiny\.x has one fixed split .* so ':2' cannot pick another"):
        load_dataset(str(tmp_path / "p" / "ind.tiny.x") + ":2")        # (the split was ignored)


def test_planetoid_folder_with_two_datasets_asks_for_one(tmp_path):
    write_planetoid(tmp_path / "p", "aaa")
    write_planetoid(tmp_path / "p", "bbb")
    with pytest.raises(SpgnnError, match="several datasets.*aaa, bbb"):
        load_dataset(str(tmp_path / "p"))


def test_truncated_pickle_names_the_file(tmp_path):
    write_planetoid(tmp_path / "p", "tiny")
    bad = tmp_path / "p" / "ind.tiny.allx"
    bad.write_bytes(bad.read_bytes()[:200])
    with pytest.raises(SpgnnError, match=f"cannot read {bad}"):
        load_dataset(str(tmp_path / "p"))


def test_missing_planetoid_part_is_named(tmp_path):
    write_planetoid(tmp_path / "p", "tiny")
    (tmp_path / "p" / "ind.tiny.ty").unlink()
    with pytest.raises(SpgnnError, match="missing ind.tiny.ty"):
        load_dataset(str(tmp_path / "p"))


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_malicious_pickle_is_refused(tmp_path):
    write_planetoid(tmp_path / "p", "tiny")
    marker = tmp_path / "pwned"
    with open(tmp_path / "p" / "ind.tiny.graph", "wb") as fh:
        pickle.dump(_Evil(marker), fh, protocol=2)
    with pytest.raises(SpgnnError, match=r"ind\.tiny\.graph.*refusing to unpickle .*system"):
        load_dataset(str(tmp_path / "p"))
    assert not marker.exists()


def test_pickle_of_wrong_type_is_refused(tmp_path):
    write_planetoid(tmp_path / "p", "tiny")
    with open(tmp_path / "p" / "ind.tiny.graph", "wb") as fh:
        pickle.dump([1, 2, 3], fh, protocol=2)
    with pytest.raises(SpgnnError, match="expected a dict of neighbour lists"):
        load_dataset(str(tmp_path / "p"))


# ---------------------------------------------------------------------------------------------- npz datasets

@needs_data
@pytest.mark.parametrize("name, n, nnz, f, c", [
    ("amazon-computers", 13752, 491722, 767, 10),
    ("amazon-photo", 7650, 238162, 745, 8),
    ("coauthor-cs", 18333, 163788, 6805, 15),
])
def test_shchur_datasets(name, n, nnz, f, c):
    g = load_dataset(name, data_dir=str(DATA), seed=3)
    assert (g.n, g.nnz, g.num_features, g.num_classes) == (n, nnz, f, c)
    assert_simple_undirected(g)
    assert g.train_mask.sum() == 20 * c and g.val_mask.sum() == 30 * c and g.test_mask.sum() == n - 50 * c
    assert np.bincount(g.y[g.train_mask]).tolist() == [20] * c


@needs_data
def test_squirrel_fixed_splits():
    g0 = load_dataset("squirrel", data_dir=str(DATA))
    assert (g0.n, g0.nnz, g0.num_features, g0.num_classes) == (5201, 396706, 2089, 5)
    assert (g0.train_mask.sum(), g0.val_mask.sum(), g0.test_mask.sum()) == (2496, 1664, 1041)
    assert_simple_undirected(g0)
    g3 = load_dataset("squirrel:3", data_dir=str(DATA))
    with np.load(DATA / "heterophilous" / "squirrel.npz") as d:
        assert np.array_equal(g3.train_mask, d["train_masks"][3])
        assert np.array_equal(g0.test_mask, d["test_masks"][0])
    assert not np.array_equal(g0.train_mask, g3.train_mask)
    with pytest.raises(SpgnnError, match=r"'squirrel:10': K must be a split number 0\.\.9"):
        load_dataset("squirrel:10", data_dir=str(DATA))


@needs_data
def test_data_dir_from_env_and_default_list(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(DATA))
    assert load_dataset("citeseer").n == 3327
    monkeypatch.delenv(DATA_DIR_ENV)
    (tmp_path / "cwd" / "datasets").symlink_to(DATA)
    assert load_dataset("amazon-photo").n == 7650            # found through ./datasets


def write_shchur_npz(path: Path, n=5, directed_edges=((0, 1), (1, 2), (3, 3), (3, 4)), **extra):
    src, dst = np.array(directed_edges).T
    a = sp.csr_matrix((np.ones(src.size, np.float32), (src, dst)), shape=(n, n))
    attr = sp.csr_matrix(small_features(n))
    np.savez(path, adj_data=a.data, adj_indices=a.indices, adj_indptr=a.indptr, adj_shape=np.array(a.shape),
             attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
             attr_shape=np.array(attr.shape), labels=np.arange(n) % 2, **extra)
    return path


def test_shchur_npz_is_symmetrised_and_loop_free(tmp_path):
    g = load_dataset(str(write_shchur_npz(tmp_path / "g.npz")))
    assert g.name == "g" and g.n == 5 and g.num_classes == 2
    assert edge_set(g) == {(0, 1), (1, 0), (1, 2), (2, 1), (3, 4), (4, 3)}
    assert np.array_equal(g.x, small_features(5))
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [3, 1, 1]     # too small for 20/30


def test_zip_holding_an_npz(tmp_path):
    npz = write_shchur_npz(tmp_path / "g.npz")
    with zipfile.ZipFile(tmp_path / "g.zip", "w") as z:
        z.write(npz, "inner/g.npz")
    assert_same_graph(load_dataset(str(tmp_path / "g.zip")), load_dataset(str(npz)))
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as z:
        z.write(npz, "a.npz")
        z.write(npz, "b.npz")
    with pytest.raises(SpgnnError, match="one .npz"):
        load_dataset(str(tmp_path / "two.zip"))


def test_edge_npz_with_split_matrix(tmp_path):
    n = 8
    train = np.zeros((3, n), bool)
    train[np.arange(3), np.arange(3)] = True
    np.savez(tmp_path / "s.npz", edges=np.array([[0, 1], [2, 3], [6, 7]]), node_features=small_features(n),
             node_labels=np.arange(n) % 3, train_masks=train, val_masks=~train,
             test_masks=np.zeros((3, n), bool))
    g = load_dataset(str(tmp_path / "s.npz:2"))
    assert np.flatnonzero(g.train_mask).tolist() == [2] and g.val_mask.sum() == 7
    assert np.flatnonzero(load_dataset(str(tmp_path / "s.npz")).train_mask).tolist() == [0]
    assert edge_set(g) == {(0, 1), (1, 0), (2, 3), (3, 2), (6, 7), (7, 6)}
    with pytest.raises(SpgnnError, match="3 fixed splits"):
        load_dataset(str(tmp_path / "s.npz:5"))


def test_named_dataset_found_in_local_datasets_folder():
    folder = Path("datasets") / "heterophilous"
    folder.mkdir(parents=True)
    np.savez(folder / "squirrel.npz", edges=np.array([[0, 1]]), node_features=small_features(4),
             node_labels=np.array([0, 1, 0, 1]), train_masks=np.ones((2, 4), bool))
    g = load_dataset("squirrel:1")
    assert g.name == "squirrel" and g.n == 4 and g.train_mask.all()


def test_corrupt_npz(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"definitely not a zip archive")
    with pytest.raises(SpgnnError, match=f"cannot read {bad}"):
        load_dataset(str(bad))
    good = write_shchur_npz(tmp_path / "good.npz")
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good.read_bytes()[:-300])
    with pytest.raises(SpgnnError, match=f"cannot read {cut}"):
        load_dataset(str(cut))


def test_npz_with_missing_or_bad_arrays(tmp_path):
    np.savez(tmp_path / "nolabels.npz", edges=np.array([[0, 1]]), features=small_features(2))
    with pytest.raises(SpgnnError, match="no node labels"):
        load_dataset(str(tmp_path / "nolabels.npz"))
    np.savez(tmp_path / "nothing.npz", foo=np.zeros(3))
    with pytest.raises(SpgnnError, match="no graph found.*it holds foo"):
        load_dataset(str(tmp_path / "nothing.npz"))
    bad_ptr = write_shchur_npz(tmp_path / "ptr.npz")
    with np.load(bad_ptr) as d:
        arrays = dict(d)
    arrays["adj_indices"] = arrays["adj_indices"] + 3
    np.savez(bad_ptr, **arrays)
    with pytest.raises(SpgnnError, match=r"adj_indices must lie in \[0, 5\)"):
        load_dataset(str(bad_ptr))
    np.savez(tmp_path / "rows.npz", edges=np.array([[0, 1]]), features=small_features(3),
             labels=np.zeros(4, int))
    with pytest.raises(SpgnnError, match=r"'rows': features has 3 rows but labels has 4; both need one row per node"):
        load_dataset(str(tmp_path / "rows.npz"))


# ---------------------------------------------------------------------------------------------- edge lists

def test_edge_list_txt_with_comments_and_masks(tmp_path):
    folder = write_edge_list(tmp_path / "el", "# src dst\n0 1\n1\t2   # trailing comment\n\n2 2\n4 5\n",
                             small_features(), [0, 1, 0, 1, 0, 1],
                             train_mask=[1, 1, 0, 0, 0, 0], val_mask=[0, 0, 1, 0, 0, 0])
    g = load_dataset(str(folder))
    assert g.name == "el" and g.n == 6
    assert edge_set(g) == {(0, 1), (1, 0), (1, 2), (2, 1), (4, 5), (5, 4)}
    assert g.train_mask.tolist() == [True, True, False, False, False, False]
    assert g.test_mask.tolist() == [False, False, False, True, True, True]      # the rest


def test_edge_list_csv_directed(tmp_path):
    folder = write_edge_list(tmp_path / "el", "0,1\n1,2\n5,0\n", small_features(), [0, 1, 2, 0, 1, 2],
                             ext="csv", meta={"directed": True, "name": "tiny"})
    g = load_dataset(str(folder), seed=1)
    assert g.name == "tiny" and not g.is_symmetric
    assert edge_set(g) == {(0, 1), (1, 2), (5, 0)}
    assert g.adj[1, 0] == 1 and g.adj[0, 1] == 0                   # A[dst, src]


def test_edge_list_bad_inputs(tmp_path):
    x, y = small_features(), [0, 1, 0, 1, 0, 1]
    with pytest.raises(SpgnnError, match=r"edge endpoint ids must lie in \[0, 6\)"):
        load_dataset(str(write_edge_list(tmp_path / "a", "0 1\n2 6\n", x, y)))
    with pytest.raises(SpgnnError, match=r"b/features.npy has 6 rows but .*b/labels.npy has 5; both need one row"):
        load_dataset(str(write_edge_list(tmp_path / "b", "0 1\n", x, y[:5])))
    # fewer feature rows than labels, edges over the labels' nodes: the files disagree, the edges were blamed
    with pytest.raises(SpgnnError, match=r"b2/features.npy has 6 rows but .*b2/labels.npy has 8; both need one row"):
        load_dataset(str(write_edge_list(tmp_path / "b2", "0 1\n6 7\n", x, y + [0, 1])))
    x_nan = x.copy()
    x_nan[3, 1] = np.nan
    with pytest.raises(SpgnnError, match="NaN or infinite.*node 3"):
        load_dataset(str(write_edge_list(tmp_path / "c", "0 1\n", x_nan, y)))
    with pytest.raises(SpgnnError, match="cannot read .*edges.txt"):
        load_dataset(str(write_edge_list(tmp_path / "d", "0 1\n2 x\n", x, y)))
    with pytest.raises(SpgnnError, match="two columns"):
        load_dataset(str(write_edge_list(tmp_path / "e", "0 1 2\n", x, y)))
    with pytest.raises(SpgnnError, match="meta.json"):
        load_dataset(str(write_edge_list(tmp_path / "f", "0 1\n", x, y, meta={"directd": True})))
    with pytest.raises(SpgnnError, match="labels must be class ids >= 0"):
        load_dataset(str(write_edge_list(tmp_path / "g", "0 1\n", x, [0, -1, 0, 1, 0, 1])))
    folder = write_edge_list(tmp_path / "h", "0 1\n", x, y)
    (folder / "features.npy").unlink()
    with pytest.raises(SpgnnError, match="missing features.npy"):
        load_dataset(str(folder))
    (folder / "features.npy").write_bytes(b"garbage")
    with pytest.raises(SpgnnError, match="cannot read .*features.npy"):
        load_dataset(str(folder))


# ---------------------------------------------------------------------------------------------- lookup errors

def test_unknown_name_lists_the_choices():
    with pytest.raises(SpgnnError) as e:
        load_dataset("pubmedd")
    msg = str(e.value)
    assert "unknown dataset 'pubmedd'" in msg and "\n" not in msg
    for name in list(KNOWN_DATASETS) + ["rmat:SCALE[:EDGEFACTOR]", "sbm:N:K[:PIN:POUT[:F]]"]:
        assert name in msg


def test_missing_path_and_bad_named_args():
    with pytest.raises(SpgnnError, match="no such file or folder: nowhere/g.npz"):
        load_dataset("nowhere/g.npz")
    with pytest.raises(SpgnnError, match="takes no ':' argument"):
        load_dataset("cora:1")
    with pytest.raises(SpgnnError, match="empty dataset spec"):
        load_dataset("  ")


def test_missing_named_dataset_lists_searched_dirs(tmp_path):
    with pytest.raises(SpgnnError) as e:
        load_dataset("citeseer", data_dir=str(tmp_path))
    msg = str(e.value)
    assert str(tmp_path) in msg and "ind.citeseer.graph" in msg
    assert "--data-dir" in msg and DATA_DIR_ENV in msg
    with pytest.raises(SpgnnError) as e:
        load_dataset("amazon-computers")
    msg = str(e.value)
    assert str(tmp_path / "cwd" / "datasets") in msg
    assert str(tmp_path / "home" / ".cache" / "spgnn" / "datasets") in msg and "amazon-computers.zip" in msg


# ---------------------------------------------------------------------------------------------- splits

def test_a_graph_too_small_for_20_30_per_class_is_split_60_20_20(tmp_path):
    """50 nodes in 3 classes without masks were all put in train (20 a class): validation and test were empty and a
    run printed 'val nan test nan'. Where no class has more than 50 nodes, the split is 60/20/20 at random."""
    y = np.arange(50) % 3
    folder = write_edge_list(tmp_path / "nomasks", "0 1\n1 2\n", small_features(50), y)
    for g in (load_dataset(str(folder)), load_dataset("sbm:60:3")):
        sizes = [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)]
        assert sizes == [int(0.6 * g.n), int(0.2 * g.n), g.n - int(0.6 * g.n) - int(0.2 * g.n)], (g.name, sizes)
        assert (g.train_mask.astype(int) + g.val_mask + g.test_mask == 1).all()
    ooc = EdgeFolder(folder, chunk=10).masks(seed=0)                  # spgnn partition --out-of-core: the same split
    assert all(np.array_equal(ooc[s], getattr(load_dataset(str(folder)), f"{s}_mask")) for s in ooc)
    big = np.concatenate([np.zeros(51, int), np.ones(10, int)])      # one class of 51: the per-class split
    train, val, test = default_split(big, 2, seed=0)
    assert np.bincount(big[train]).tolist() == [20, 10] and np.bincount(big[test]).tolist() == [1]


def test_a_pyg_graph_without_masks_is_split_by_the_runs_seed():
    """A PyG Data without masks (PyG's Amazon and Coauthor have none) given as graph= was split by seed 0 whatever
    the run's seed, where a dataset file is split by it: every seed of a study trained on the same split."""
    from types import SimpleNamespace

    import torch

    from spgnn import DistGraph, TrainConfig
    from spgnn.graph.pyg import from_pyg
    from tests.graphs import small_graph

    g = small_graph(n=300, seed=4)
    a = g.adj.tocoo()
    data = SimpleNamespace(edge_index=torch.from_numpy(np.stack([a.col, a.row])), x=torch.from_numpy(g.x),
                           y=torch.from_numpy(g.y))
    for seed in (0, 3):
        held = DistGraph(None, TrainConfig(seed=seed), graph=data).parts.graph.train_mask
        np.testing.assert_array_equal(held, from_pyg(data, seed=seed).train_mask)
    assert not np.array_equal(from_pyg(data, seed=0).train_mask, from_pyg(data, seed=3).train_mask)


def test_per_class_split_counts_and_determinism():
    y = np.repeat(np.arange(4), [100, 60, 50, 25])
    y = y[np.random.default_rng(9).permutation(y.size)]
    train, val, test = per_class_split(y, 4, seed=5)
    assert np.bincount(y[train], minlength=4).tolist() == [20, 20, 20, 20]
    assert np.bincount(y[val], minlength=4).tolist() == [30, 30, 30, 5]     # small class: train first
    assert np.bincount(y[test], minlength=4).tolist() == [50, 10, 0, 0]
    assert (train.astype(int) + val + test == 1).all()
    again = per_class_split(y, 4, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again, strict=True))
    assert not np.array_equal(train, per_class_split(y, 4, seed=6)[0])
    with pytest.raises(SpgnnError, match="values in"):
        per_class_split(y, 3, seed=0)


# ---------------------------------------------------------------------------------------------- synthetic

def test_rmat_statistics_and_determinism():
    g = load_dataset("rmat:10", seed=1)
    assert g.n == 1024 and g.num_features == 128 and g.num_classes == 8 and g.name == "rmat:10:16"
    assert_simple_undirected(g)
    assert 8 * 1024 < g.nnz <= 2 * 16 * 1024
    assert np.bincount(g.y, minlength=8).min() > 0
    assert g.train_mask.sum() == 8 * 20
    deg = np.diff(g.adj.indptr)
    assert deg.max() > 20 * deg.mean()                          # R-MAT's skewed degrees
    assert_same_graph(g, load_dataset("rmat:10", seed=1))
    other = load_dataset("rmat:10", seed=2)
    assert (other.adj != g.adj).nnz > 0 and not np.array_equal(other.x, g.x)
    assert load_dataset("rmat:8:4").nnz <= 2 * 4 * 256


def test_rmat_scale_17():
    """A graph of 131,072 nodes is made in seconds (timed in benchmarks, not here: load can break a bound)."""
    g = load_dataset("rmat:17")
    assert g.n == 1 << 17 and g.nnz > 3_000_000


def test_sbm_statistics_and_determinism():
    g = load_dataset("sbm:2000:4")
    assert g.n == 2000 and g.num_classes == 4 and g.num_features == 64
    assert np.bincount(g.y).tolist() == [500] * 4
    assert_simple_undirected(g)
    assert 9 < g.nnz / g.n < 11                                  # mean degree 8 inside + 2 across
    c = g.adj.tocoo()
    assert 0.75 < np.mean(g.y[c.row] == g.y[c.col]) < 0.85
    assert_same_graph(g, load_dataset("sbm:2000:4"))
    assert (load_dataset("sbm:2000:4", seed=1).adj != g.adj).nnz > 0
    centroid = np.stack([g.x[g.y == k].mean(0) for k in range(4)])
    nearest = np.argmin(((g.x[:, None] - centroid) ** 2).sum(-1), 1)
    assert np.mean(nearest == g.y) > 0.4                         # the features alone are informative


def test_sbm_explicit_probabilities_and_features():
    g = load_dataset("sbm:300:3:0.1:0:8")
    c = g.adj.tocoo()
    assert g.num_features == 8 and np.all(g.y[c.row] == g.y[c.col])
    assert 0.6 * 0.1 * 99 < g.nnz / g.n < 1.4 * 0.1 * 99
    assert load_dataset("sbm:300:3:::5").num_features == 5
    assert load_dataset("sbm:200000:10").n == 200000             # O(edges), not O(N^2)


@pytest.mark.parametrize("spec, match", [
    ("rmat:0", "SCALE must be an integer in"),
    ("rmat:x", "SCALE must be an integer"),
    ("rmat:10:0", "EDGEFACTOR must be an integer"),
    ("rmat:10:16:3", "too many fields"),
    ("rmat", "SCALE is required"),
    ("sbm:0:2", "N must be an integer"),
    ("sbm:abc:2", "N must be an integer"),
    ("sbm:100", "N and K are required"),
    ("sbm:10:20", "1 <= K <= N"),
    ("sbm:100:2:1.5:0.1", "PIN must be a number in"),
    ("sbm:100:2:0.1:-1", "POUT must be a number in"),
    ("sbm:1000000:2:1:1", "too many"),
])
def test_bad_synthetic_specs(spec, match):
    with pytest.raises(SpgnnError, match=match):
        load_dataset(spec)


def test_save_npz_keeps_directed_graphs(tmp_path):
    g = load_dataset(str(write_edge_list(tmp_path / "el", "0 1\n1 2\n", small_features(), [0, 1, 0, 1, 0, 1],
                                         meta={"directed": True})))
    assert_same_graph(read_npz(save_npz(g, tmp_path / "d.npz")), g)


def test_a_spec_is_checked_without_reading_it(tmp_path, monkeypatch):
    """check_dataset refuses what load_dataset would refuse before reading (a benchmark checks every dataset it is
    given before its first run), and reads and generates nothing."""
    monkeypatch.setattr(datasets, "rmat", lambda *a, **k: pytest.fail("generated"))
    monkeypatch.setattr(datasets, "read_npz", lambda *a, **k: pytest.fail("read"))
    for good in ("cora", "rmat:6", "sbm:100:4", str(tmp_path)):
        datasets.check_dataset(good)
    for bad, said in (("nosuch", "unknown dataset 'nosuch'"), ("rmat:x", "SCALE must be an integer"),
                      ("cora:2", "takes no ':' argument"), (str(tmp_path / "none.npz"), "no such file or folder"),
                      ("", "empty dataset spec"), ("squirrel:10", "K must be a split number 0..9")):
        with pytest.raises(SpgnnError, match=re.escape(said)):
            datasets.check_dataset(bad)
    with pytest.raises(SpgnnError, match="dataset 'citeseer' not found"):
        datasets.check_dataset("citeseer", data_dir=str(tmp_path))


def test_a_partitioned_folder_is_said_to_be_one(tmp_path):
    """spgnn partition --dataset PARTS said the folder held neither an edge list nor Planetoid nor OGB files."""
    from spgnn.partition.ooc import partition_edge_folder
    from spgnn.partition.partition import make_partition, save_partition
    from spgnn.partition.partitioned import InMemoryParts, write_parts

    g = load_dataset(str(write_edge_list(tmp_path / "el", "0 1\n1 2\n", small_features(), [0, 1, 0, 1, 0, 1])))
    parts = write_parts(tmp_path / "parts", InMemoryParts(g, make_partition("block", g.adj, 2)))
    said = f"{parts} is a partitioned dataset folder already: train on it directly"
    with pytest.raises(SpgnnError, match=re.escape(said)):
        load_dataset(str(parts))
    with pytest.raises(SpgnnError, match=re.escape(said)):
        partition_edge_folder(parts, tmp_path / "again", 2, "block")
    # one of its parts, and a partition file, were 'found neither an edge list ...' and 'no graph found'
    with pytest.raises(SpgnnError, match=re.escape(f"is one part of the partitioned dataset folder {parts}: give")):
        load_dataset(str(parts / "part-00001"))
    save_partition(tmp_path / "p.npz", make_partition("block", g.adj, 2).parts, "block", {}, 0, g)
    with pytest.raises(SpgnnError, match=r"p\.npz is a partition file \(spgnn partition --output FILE\.npz\), not a "
                       r"graph: give it as --partition"):
        load_dataset(str(tmp_path / "p.npz"))
    with np.load(tmp_path / "p.npz") as z:       # one with a member more, which load_parts reads as a partition too
        np.savez(tmp_path / "q.npz", **z, note=np.array("mine"))
    with pytest.raises(SpgnnError, match=r"q\.npz is a partition file"):
        load_dataset(str(tmp_path / "q.npz"))


def test_source_files_are_all_a_dataset_file_is_read_from(tmp_path):
    """The partition cache knows a dataset file by the files its reader opens: a Planetoid file's eight."""
    write_planetoid(tmp_path / "p", "tiny")
    files = datasets.source_files(str(tmp_path / "p" / "ind.tiny.x"))
    assert sorted(f.name for f in files) == sorted(f.name for f in (tmp_path / "p").iterdir()) and len(files) == 8
    save_npz(load_dataset(str(tmp_path / "p")), tmp_path / "g.npz")
    assert datasets.source_files(tmp_path / "g.npz") == [tmp_path / "g.npz"]
    for other in ("cora", "rmat:6", str(tmp_path / "p"), str(tmp_path / "g.npz") + ":1"):
        assert datasets.source_files(other) is None, other


def test_planetoid_test_ids_beyond_the_rows_up_to_the_graphs_ids_are_read(tmp_path):
    """The bound on test.index that refuses a damaged id of 10^11 takes the graph's ids too, so a gap of unlisted
    test ids larger than the test set (as NELL's) is read, as PyG reads it."""
    write_planetoid(tmp_path / "p", "tiny", n_test=10, n_gap=25)
    assert load_dataset(str(tmp_path / "p")).n == 575


def test_damaged_or_unusual_files_are_one_line(tmp_path):
    """Each was a traceback, a hang or a silent misreading: a stray class id of 10^12 (numpy's MemoryError for 7 TiB
    of per-class counts), a test.index id of 10^11 (745 GiB), fractional CSR ids (1.5 read as 1), [S, N] masks in
    an edge-list folder (split 0 taken), an ogbn-mag folder ("found neither an edge list ..."), a pipe (a hang)."""
    write_edge_list(tmp_path / "label", "0 1\n1 2\n", small_features(3), np.array([0, 1, 10 ** 12]))
    with pytest.raises(SpgnnError, match="label/labels.npy: labels must be class ids 0..C-1, C at most 65536 .* found "
                                         "1000000000000"):                  # the file named, not the dataset
        load_dataset(str(tmp_path / "label"))
    write_edge_list(tmp_path / "nan", "0 1\n1 2\n", np.full((3, 2), np.nan, np.float32), np.array([0, 1, 0]))
    with pytest.raises(SpgnnError, match="nan/features.npy: features hold 6 NaN"):
        load_dataset(str(tmp_path / "nan"))
    write_planetoid(tmp_path / "p", "tiny")
    (tmp_path / "p" / "ind.tiny.test.index").write_text("\n".join(map(str, range(540, 569))) + "\n100000000000\n")
    with pytest.raises(SpgnnError, match="test.index's largest id 100000000000 lies beyond the 573 nodes"):
        load_dataset(str(tmp_path / "p"))
    a = sp.csr_matrix(np.ones((5, 5), np.float32))
    path = write_shchur_npz(tmp_path / "f.npz")
    np.savez(path, **dict(np.load(path)) | {"adj_indices": a.indices + 0.5, "adj_indptr": a.indptr,
                                              "adj_data": a.data})
    with pytest.raises(SpgnnError, match="adj_indices must be whole numbers"):
        load_dataset(str(path))
    write_edge_list(tmp_path / "masks", "0 1\n1 2\n", small_features(3), np.array([0, 1, 0]),
                    train_mask=np.ones((2, 3), bool))
    with pytest.raises(SpgnnError, match=r"train_mask.npy: a mask of an edge-list folder is \[N\], got shape"):
        load_dataset(str(tmp_path / "masks"))
    from spgnn import cli

    assert cli.main(["partition", "--dataset", str(tmp_path / "masks"), "--out-of-core", "--nparts", "2",
                     "--method", "block", "--output", str(tmp_path / "out")]) == 2    # out of core, as in memory
    mag = tmp_path / "ogbn_mag"
    (mag / "raw").mkdir(parents=True)
    (mag / "split" / "time" / "paper").mkdir(parents=True)
    (mag / "raw" / "triplet-type-list.csv.gz").write_bytes(b"")
    with pytest.raises(SpgnnError, match="is a heterogeneous OGB graph"):
        load_dataset(str(mag))
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(SpgnnError, match="not an .npz/.zip archive"):
        load_dataset(str(tmp_path / "pipe"))
