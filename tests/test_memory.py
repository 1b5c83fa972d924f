"""A rank holds its share of the graph and its halo, not the graph: on rmat:14 with 128 features (n = 16,384; the
features outweigh the adjacency), the graph bytes each rank reports (`Trainer.graph_bytes`: its blocks of A, halo
plans, feature rows, labels, masks, ids) are at most 10% above its share at P = 1, 2, 4, for every algorithm.

Its share, from the whole graph's bytes at P = 1 (A's and the node data's): node data · c/P + A · w/P, where c is
1.5d's replication (its c replicas of a block row hold the same H rows; A's columns are split among them) and w = 2
for 2d and 3d on grids with more than one column (each A block they broadcast is kept with its packed wire copy)."""

import mmap
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch

import spgnn.spmm as algorithms
from spgnn.config import TrainConfig
from spgnn.graph.datasets import load_dataset
from spgnn.layers.stack import build_model
from spgnn.memory import peak_rss_bytes, peak_rss_since_restart, restart_peak
from spgnn.train.fullbatch import Trainer
from tests.worlds import errors, run_worlds

GRAPH = load_dataset("rmat:14")
PROCS = (1, 2, 4)


def _graph_bytes(comm) -> dict:
    """{algo: (graph bytes, of which the layout's blocks of A and plans, grid shape)} on this rank."""
    out = {}
    for algo in algorithms.ALGORITHMS:
        t = Trainer(TrainConfig(algo=algo, epochs=0, partition="random", feature_norm="none"), comm, graph=GRAPH)
        out[algo] = (t.graph_bytes(), t.algo.graph_bytes(), tuple(t.algo.grid.shape))
    return out


_RESULTS = {}


def results(P: int) -> list:
    if not _RESULTS:
        _RESULTS.update(run_worlds(_graph_bytes, PROCS))
    return _RESULTS[P]


def test_the_data_dominates():
    a = GRAPH.adj
    assert GRAPH.n == 2**14 and GRAPH.x.nbytes > a.data.nbytes + a.indices.nbytes + a.indptr.nbytes


@pytest.mark.parametrize("algo", sorted(algorithms.ALGORITHMS))
def test_a_rank_holds_its_share(algo):
    total, a_bytes, _ = results(1)[0]["1d"]
    node = total - a_bytes
    for P in PROCS:
        per_rank = results(P)
        assert not errors(per_rank), f"P={P}: {errors(per_rank)[0]}"
        shape = per_rank[0][algo][2]
        c = shape[1] if algo == "1.5d" else 1
        w = 2 if algo in ("2d", "3d") and shape[1] > 1 else 1
        share = (node * c + a_bytes * w) / P
        worst = max(r[algo][0] for r in per_rank)
        assert worst <= 1.10 * share, f"{algo} on {shape} (P={P}): a rank holds {worst} bytes, its share {share:.0f}"


def _mapped(nbytes: int) -> mmap.mmap:
    """nbytes of anonymous memory, touched: resident until closed, whatever the C allocator keeps."""
    m = mmap.mmap(-1, nbytes)
    view = np.frombuffer(m, np.uint8)
    view.fill(1)
    del view
    return m


def test_restart_peak_measures_what_follows():
    """`restart_peak` returns the peak so far and forgets it: a freed 256 MiB block no longer counts in
    `peak_rss_since_restart`, a 128 MiB one made after it does, and `peak_rss_bytes` still sees the first."""
    MiB = 2**20
    _mapped(256 * MiB).close()
    before = restart_peak()
    start = peak_rss_since_restart()
    if start is None:
        pytest.skip("the kernel's high-water mark cannot be reset here (no /proc/self/clear_refs)")
    assert start < before - 192 * MiB
    after = _mapped(128 * MiB)
    assert peak_rss_since_restart() >= start + 120 * MiB and peak_rss_bytes() >= before
    after.close()


KEEP_FREED = """
import sys, torch
from spgnn.memory import keep_freed_memory, rss_bytes
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
before = rss_bytes()
blocks = [torch.ones(20 * 2**20 // 4) for _ in range(3)]        # 60 MiB in three blocks, then freed
del blocks
print(applied, rss_bytes() - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_memory_keeps_what_is_freed():
    """Three 20 MiB tensors made and freed in a fresh process: by default each has its own mapping, handed back on
    free (RSS falls back); with `keep_freed_memory` they come from the heap and stay for the next allocations."""
    def kept(mode):
        out = subprocess.run([sys.executable, "-c", KEEP_FREED, mode], capture_output=True, text=True, check=True)
        applied, grown = out.stdout.split()
        return applied, int(grown) / 2**20

    applied, mib = kept("keep")
    assert applied == "True" and mib > 50, mib
    applied, mib = kept("default")
    assert applied == "None" and mib < 10, mib


def test_empty_hands_a_large_block_out_again_only_once_it_is_free():
    """`spgnn.memory.empty`: a block of LARGE_BYTES or more is reused for the next request of its size once no
    tensor (or view) refers to it, never while one does; a request of another size lets the free blocks go;
    `release_kept` forgets them all."""
    from spgnn import memory

    memory.release_kept()
    shape = (memory.LARGE_BYTES // 4 // 64 + 1, 64)
    a = memory.empty(shape).fill_(7.0)
    ptr, view = a.data_ptr(), a[1:]
    del a
    b = memory.empty(shape)                             # a's block is still viewed: a new one
    assert b.data_ptr() != ptr
    del view
    c = memory.empty(shape)                             # now free: handed out again, as it was left
    assert c.data_ptr() == ptr and c[-1, -1] == 7.0 and c.shape == shape and c.dtype == torch.float32
    other = memory.empty((shape[0], 65))                # another size: its own block (the others are held)
    assert other.data_ptr() not in (ptr, b.data_ptr()) and len(memory._KEPT) == 3
    del b, c, other
    memory.empty((shape[0], 66))                        # a new size again: the three free blocks go
    assert len(memory._KEPT) == 1
    memory.release_kept()
    assert memory._KEPT == []
    memory.empty(shape)
    model = build_model("gcn", 4, 2)
    model.train()
    assert len(memory._KEPT) == 1
    model.eval()                                        # leaving training releases them
    assert memory._KEPT == []


def test_dropout_of_features_reuses_its_block_and_keeps_its_values():
    """The features' one-pass dropout writes into `empty`'s kept block from the second step on; the values are the
    mask's (`dropout_mask`) either way, and a result still held is never overwritten."""
    from spgnn.hashing import dropout, dropout_mask
    from spgnn.memory import LARGE_BYTES, release_kept

    release_kept()
    n, f = LARGE_BYTES // 4 // 32 + 1, 32
    h, ids = torch.rand(n, f), np.arange(n)
    first = dropout(h, ids, 0.5, 1)
    held = first.clone()
    second = dropout(h, ids, 0.5, 2)                    # the first is held: a block of its own
    assert second.data_ptr() != first.data_ptr() and torch.equal(first, held)
    ptr = first.data_ptr()
    del first
    third = dropout(h, ids, 0.5, 3)
    assert third.data_ptr() == ptr
    assert torch.equal(third, h * dropout_mask(ids, f, 0.5, 3))
    assert torch.equal(second, h * dropout_mask(ids, f, 0.5, 2))
    release_kept()


def test_a_training_process_imports_no_more_of_scipy_than_it_uses():
    """Every rank holds what it imports: scipy.optimize (calibration's fit) and scipy.sparse.csgraph (the rcm
    order) are about 25 MB of modules, so the training entry point leaves them to the functions that use them."""
    code = "import sys, spgnn.cli; print([m for m in ('scipy.optimize', 'scipy.sparse.csgraph') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
