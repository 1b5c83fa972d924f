"""Bad input that a way into spgnn accepted, altered or crashed on: a Graph built directly (labels cast, masks cast),
an OGB folder's labels of the wrong length and a split file of two columns, synthetic specs `check_dataset` passed
that the generator refused, an unknown name with its near miss; and the adjacency of an edge list built without
scipy's copies of int64 ids."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from spgnn import Graph
from spgnn.errors import SpgnnError
from spgnn.graph import datasets
from spgnn.graph.datasets import load_dataset
from tests.test_interop import N, write_ogb

n = 4
PATH = sp.csr_matrix(np.eye(n, k=1, dtype=np.float32) + np.eye(n, k=-1, dtype=np.float32))
MASKS = [np.arange(n) < 2, np.arange(n) == 2, np.arange(n) == 3]


def graph(y=(0, 1, 0, 1), masks=MASKS, adj=PATH) -> Graph:
    return Graph(adj, np.ones((n, 2), np.float32), np.asarray(y), *masks)


@pytest.mark.parametrize("y, said", [
    ([0, 1.5, 0, 1], r"labels must be whole numbers \(class ids 0..C-1\), 1 are not \(first at node 1: 1.5\)"),
    ([0, np.nan, 0, 1], r"1 are not \(first at node 1: nan\)"),
    (["a", "b", "a", "b"], "labels must be a vector of class ids"),
    ([0, 1, 0, 10**12], "C at most 65536"),                           # (was a 7 TiB bincount)
])
def test_a_graph_s_labels_are_checked_before_the_cast(y, said):
    """Graph(y=[0, 1.5, ...]) trained class 1 where 1.5 was given (0.9 became class 0)."""
    with pytest.raises(SpgnnError, match=said):
        graph(y)


def test_a_graph_s_label_column_is_class_ids_as_every_loader_reads_it():
    """A [n, 1] column without NaN made a Graph of one binary target, where from_pyg and the files read class ids."""
    g = graph(np.array([[0], [1], [2], [1]]))
    assert g.targets == 0 and g.num_classes == 3 and g.y.tolist() == [0, 1, 2, 1]
    assert graph(np.array([[0.0], [np.nan], [1.0], [1.0]])).targets == 1            # NaN: unknown, a binary target


@pytest.mark.parametrize("train", [np.array([2, 1, 0, 0]), np.array([0.5, 1, 0, 0]), np.array([np.nan, 1, 0, 0])])
def test_a_graph_s_masks_are_not_cast_to_bool(train):
    """A mask of 0.5 or NaN or 2 (node ids?) was cast to True: a node trained that was not meant to."""
    with pytest.raises(SpgnnError, match="the train mask must be boolean"):
        graph(masks=[train, *MASKS[1:]])
    assert graph(masks=[np.array([1, 1, 0, 0]), *MASKS[1:]]).train_mask.tolist() == [True, True, False, False]


def test_a_complex_adjacency_is_refused():
    with pytest.raises(SpgnnError, match="adjacency's values must be real numbers, got complex64"):
        graph(adj=sp.csr_matrix(PATH, dtype=np.complex64))


@pytest.mark.parametrize("rows", [N - 2, N + 2])
@pytest.mark.parametrize("form", ["csv", "binary"])
def test_ogb_labels_of_another_length_are_one_line(tmp_path, form, rows):
    """A node-label file of N ± 2 rows raised numpy's 'operands could not be broadcast'."""
    folder = write_ogb(tmp_path / "ogbn_t", form)
    y = np.arange(rows) % 4
    if form == "csv":
        np.savetxt(folder / "raw" / "node-label.csv.gz", y, fmt="%d")
    else:
        np.savez(folder / "raw" / "node-label.npz", node_label=y.reshape(-1, 1))
    with pytest.raises(SpgnnError, match=rf"node labels \(node-label\) have shape \({rows},.*expected {N} rows"):
        load_dataset(str(folder))


def test_an_ogb_split_file_of_two_columns_is_refused(tmp_path):
    """Its [k, 2] ids were read as a 2-D index: the test mask took both columns' nodes."""
    folder = write_ogb(tmp_path / "ogbn_t", "csv")
    np.savetxt(folder / "split" / "time" / "test.csv.gz", [[1, 2], [3, 4]], fmt="%d", delimiter=",")
    with pytest.raises(SpgnnError, match=r"test.csv.gz: expected one node id a line, found 2 columns"):
        load_dataset(str(folder))


@pytest.mark.parametrize("spec, said", [
    ("sbm:10:11", "1 <= K <= N"),
    ("rmat:26:1024", "EDGEFACTOR*2^SCALE <= 4294967296"),
    ("sbm:60000000:2:1:1", "edges expected, too many to hold"),
])
def test_synthetic_specs_the_generator_refuses_are_refused_unread(spec, said, monkeypatch):
    """check_dataset (each benchmark's check before its first run) passed them; the generator refused them later."""
    monkeypatch.setattr(datasets, "rmat", lambda *a, **k: pytest.fail("generated"))
    monkeypatch.setattr(datasets, "sbm", lambda *a, **k: pytest.fail("generated"))
    with pytest.raises(SpgnnError, match=re.escape(said)):
        datasets.check_dataset(spec)


@pytest.mark.parametrize("spec, near", [("coraa", "cora"), ("amazon_computers", "amazon-computers"),
                                        ("squirel", "squirrel"), ("rmta", "rmat")])
def test_an_unknown_name_suggests_its_near_miss(spec, near):
    with pytest.raises(SpgnnError, match=re.escape(f"unknown dataset {spec!r} (did you mean {near!r}?)")):
        datasets.check_dataset(spec)
    with pytest.raises(SpgnnError, match=r"unknown dataset 'zzzzzz'; known names"):
        datasets.check_dataset("zzzzzz")


def test_an_edge_list_s_adjacency_is_built_without_int64_copies(monkeypatch):
    """edges_to_adj concatenated int64 ids and scipy copied them to int32 again: for rmat:20 the adjacency's build
    peaked 1.15 GB over the 0.27 GB of draws, now 0.9. The ids reach scipy as the int32 it keeps."""
    from spgnn.graph import graph as graph_module

    seen = []
    real = sp.csr_matrix

    def csr(arg, *a, **k):
        if isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], tuple):
            seen.append({ids.dtype for ids in arg[1]})
        return real(arg, *a, **k)

    monkeypatch.setattr(graph_module.sp, "csr_matrix", csr)
    a = graph_module.edges_to_adj(np.array([0, 1, 1]), np.array([1, 2, 2]), 3, symmetric=True)
    assert seen == [{np.dtype(np.int32)}]
    assert a.toarray().tolist() == [[0, 1, 0], [1, 0, 1], [0, 1, 0]]


@pytest.mark.parametrize("key, value, said", [
    ("num_classes", 2.5, r"num_classes must be whole numbers"),
    ("num_classes", [2, 3], r"num_classes must be a whole number of at least 1, got \[2, 3\]"),
    ("num_classes", 0, r"num_classes must be a whole number of at least 1, got 0"),
    ("directed", [True, False], r"directed must be a bool, got \[True, False\]")])
def test_an_npz_s_scalars_are_one_value_each(tmp_path, key, value, said):
    """num_classes = 2.5 was read as 2 classes; an array of them, or of directed, was a TypeError or ValueError."""
    n = 6
    np.savez(tmp_path / "g.npz", edges=np.array([[0, 1], [2, 3], [4, 5]]), node_features=np.ones((n, 2), np.float32),
             node_labels=np.arange(n) % 2, **{key: np.array(value)})
    with pytest.raises(SpgnnError, match=f"^cannot read .*g.npz: {said}" if "whole numbers" not in said else said):
        load_dataset(str(tmp_path / "g.npz"))
