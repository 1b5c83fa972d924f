"""Bulk samplers (spgnn.sampling.sampler), the 1.5D split graph (spgnn.sampling.distributed) and minibatch training
(spgnn.train.minibatch): sampled edges exist, node-wise draws are min(fanout, deg) distinct uniform neighbours, LADIES
draws follow the squared column norms, a minibatch depends only on its key (bulk grouping, P = 1, 2, 4, graph
replicated or split with c = 1, 2), fetched features are the true rows and their bytes are what the requests
imply, bad input is refused, GraphSAGE learns Cora."""

import json
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy import stats

from spgnn.comm import launch
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.graph import edges_to_adj, gcn_norm, mean_norm
from spgnn.hashing import mix_key
from spgnn.sampling.distributed import FeatureFetcher, RowBlocks, make_distributed_sampler
from spgnn.sampling.sampler import (
    LayerSampler,
    NodeSampler,
    make_sampler,
    parse_sampler,
    segmented_topk,
    select_rows,
)
from spgnn.train.minibatch import MinibatchTrainer, check_options, epoch_batches
from tests.graphs import small_graph

GRAPHS = {"sym": small_graph(n=80, seed=1), "dir": small_graph(n=80, seed=2, directed=True)}
SPECS = ["sage:4,3", "sage:1", "sage:100,100", "ladies:10,10", "ladies:1000"]


def star(leaves: int) -> sp.csr_matrix:
    """Node 0 with in-edges from nodes 1..leaves (and the reverse edges)."""
    return edges_to_adj(np.arange(1, leaves + 1), np.zeros(leaves, int), leaves + 1, symmetric=True)


def seeds_of(g, k=5, b=6, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.choice(g.n, b, replace=False) for _ in range(k)]


def digest(mb):
    return ([v.tolist() for v in mb.nodes],
            [(b.indptr.tolist(), b.indices.tolist(), np.round(b.data, 6).tolist()) for b in mb.blocks])


@pytest.mark.parametrize("gname", GRAPHS)
@pytest.mark.parametrize("norm", [mean_norm, gcn_norm])
@pytest.mark.parametrize("spec", SPECS)
def test_blocks_are_subgraphs(gname, norm, spec):
    """Block entries are graph edges (or N's self loops); outputs lead inputs; full fanout gives N's rows."""
    g = GRAPHS[gname]
    n_mat = norm(g.adj)
    for mb in make_sampler(spec, n_mat).sample(seeds_of(g), [11, 12, 13, 14, 15]):
        assert len(mb.blocks) == len(parse_sampler(spec)[1])
        for l, block in enumerate(mb.blocks):
            out, inp = mb.nodes[l + 1], mb.nodes[l]
            assert block.shape == (len(out), len(inp))
            np.testing.assert_array_equal(inp[:len(out)], out)
            assert len(np.unique(inp)) == len(inp)
            coo = block.tocoo()
            gi, gj = out[coo.row], inp[coo.col]
            off = gi != gj
            assert np.all(np.asarray(g.adj[gi[off], gj[off]]).ravel() != 0), "a sampled edge is not in the graph"
            np.testing.assert_allclose(coo.data[~off], n_mat.diagonal()[gi[~off]], rtol=1e-6)
            if spec in ("sage:100,100", "ladies:1000"):            # everything drawn: exactly N's rows
                np.testing.assert_allclose(block.toarray(), n_mat[out][:, inp].toarray(), rtol=1e-5, atol=1e-7)
                assert np.isclose(n_mat[out].sum(), block.sum(), rtol=1e-5)


@pytest.mark.parametrize("gname", GRAPHS)
def test_node_wise_counts(gname):
    """Each frontier vertex gets min(fanout, deg) distinct in-neighbours, mean-normalised."""
    g = GRAPHS[gname]
    deg = np.diff(g.adj.indptr)
    for mb in NodeSampler(mean_norm(g.adj), [3, 2]).sample(seeds_of(g), list(range(5))):
        for l, fanout in zip((1, 0), (3, 2)):
            block, out = mb.blocks[l], mb.nodes[l + 1]
            np.testing.assert_array_equal(np.diff(block.indptr), np.minimum(fanout, deg[out]))
            rows = np.asarray(block.sum(axis=1)).ravel()
            np.testing.assert_allclose(rows, (deg[out] > 0).astype(float), rtol=1e-6)


def test_node_wise_uniform():
    """Chi-square over 4000 draws (fixed keys): each of 30 neighbours is equally likely."""
    draws, fanout, leaves = 4000, 5, 30
    mbs = NodeSampler(mean_norm(star(leaves)), [fanout]).sample([np.array([0])] * draws, list(range(draws)))
    counts = np.bincount(np.concatenate([mb.nodes[0][1:] for mb in mbs]), minlength=leaves + 1)[1:]
    assert counts.sum() == draws * fanout
    assert stats.chisquare(counts).pvalue > 1e-3


def ladies_setup():
    g = GRAPHS["dir"]
    n_mat = gcn_norm(g.adj)
    front = np.array([1, 3, 5, 8, 13, 21])
    s = LayerSampler(n_mat, [1])
    expected = np.asarray(s.off[front].multiply(s.off[front]).sum(axis=0)).ravel()
    return s, front, expected / expected.sum()


def test_ladies_probabilities_are_column_norms():
    s, front, p_ref = ladies_setup()
    p = s.probabilities(s.frontier_rows(front), np.array([0, len(front)]))
    np.testing.assert_allclose(p.toarray()[0], p_ref, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("size", [1, 2])
def test_ladies_inclusion(size):
    """Inclusion frequencies over T draws: s = 1 ∝ the squared column norms (chi-square); s = 2 against the
    exact successive-sampling inclusion π_j = p_j + Σ_{i≠j} p_i p_j / (1 − p_i) (every |z| < 5)."""
    s, front, p = ladies_setup()
    T = 4000
    fronts = np.tile(front, T)
    ptr = np.arange(T + 1) * len(front)
    keys = np.array([k * 7919 + 1 for k in range(T)], dtype=np.uint64)
    prob = s.probabilities(s.frontier_rows(fronts), ptr)
    pick = s.draw(prob, size, keys)
    counts = np.bincount(prob.indices[pick], minlength=s.n)
    assert np.all(np.bincount(np.repeat(np.arange(T), np.diff(prob.indptr))[pick]) == size)
    assert counts[p == 0].sum() == 0
    support = p > 0
    if size == 1:
        assert stats.chisquare(counts[support], T * p[support]).pvalue > 1e-3
    else:
        q = p[support]
        pi = q + q * ((q / (1 - q)).sum() - q / (1 - q))
        z = (counts[support] - T * pi) / np.sqrt(T * pi * (1 - pi))
        assert np.abs(z).max() < 5, z


def heap_k_smallest(u, k):
    """Sorted positions of the k smallest u[t] by a bounded max-heap (the first k heapified; a later u replaces the
    root when strictly smaller), step by step: which of several keys tied at the cut are kept."""
    hv, hi = list(u[:k]), list(range(k))

    def sift_down(s):
        while 2 * s + 1 < k:
            m = 2 * s + 1
            if m + 1 < k and hv[m + 1] > hv[m]:
                m += 1
            if hv[m] <= hv[s]:
                return
            hv[s], hv[m], hi[s], hi[m] = hv[m], hv[s], hi[m], hi[s]
            s = m

    for s in range(k // 2 - 1, -1, -1):
        sift_down(s)
    for t in range(k, len(u)):
        if u[t] < hv[0]:
            hv[0], hi[0] = u[t], t
            sift_down(0)
    return sorted(hi)


@pytest.mark.parametrize("indptr", [[0, 500000, 3], [-2, 1, 3]])
def test_segmented_topk_refuses_a_pointer_array_that_decreases(indptr):
    """A decreasing (or negative) CSR pointer gave the kernel negative row lengths: it wrote past its arrays (a
    segfault at [0, 500000, 3])."""
    with pytest.raises(ValueError, match="starts at 0 or more and never decreases"):
        segmented_topk(np.array(indptr), np.random.default_rng(0).random(500000), 10**6)


@pytest.mark.parametrize("distinct", [2, 5, 1000, 10**9])
@pytest.mark.parametrize("per_row", [False, True])
def test_segmented_topk_is_the_k_smallest_per_row(distinct, per_row):
    """Against np.argsort per row, on keys with many ties (few distinct values): min(k, deg) positions per row,
    ascending, holding the k smallest keys and every key below the cut; with no tie at the cut, argsort's positions;
    with one, the bounded heap's."""
    rng = np.random.default_rng(distinct)
    m = 400
    indptr = np.concatenate([[0], np.cumsum(rng.integers(0, 60, m))])
    keys = rng.integers(0, distinct, indptr[-1]) / 7.0
    k = rng.integers(1, 25, m) if per_row else np.full(m, 6)
    got = segmented_topk(indptr, keys, k if per_row else 6)
    row = np.searchsorted(indptr, got, side="right") - 1
    np.testing.assert_array_equal(np.bincount(row, minlength=m), np.minimum(k, np.diff(indptr)))
    ties = 0
    for r in range(m):
        a, u = indptr[r], keys[indptr[r]:indptr[r + 1]]
        mine, order = got[row == r] - a, np.argsort(u, kind="stable")
        assert np.all(np.diff(mine) > 0)
        np.testing.assert_array_equal(np.sort(u[mine]), u[order[:k[r]]])
        if k[r] < len(u) and u[order[k[r] - 1]] == u[order[k[r]]]:
            ties += 1
            assert np.all(np.isin(np.flatnonzero(u < u[order[k[r] - 1]]), mine))
            np.testing.assert_array_equal(mine, heap_k_smallest(u, k[r]))
        else:
            np.testing.assert_array_equal(mine, np.sort(order[:k[r]]))
    if distinct <= 5:
        assert ties, "no tie at the cut: the heap's tie rule went untested"


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, bool])
def test_select_rows_is_scipy_row_indexing(index, dtype):
    """select_rows(A, ids) is scipy's A[ids] (repeated ids and empty rows included), in A's value type."""
    rng = np.random.default_rng(3)
    dense = rng.integers(1, 100, (200, 150)) * (rng.random((200, 150)) < 0.05)
    dense[::7] = 0
    a = sp.csr_matrix(dense.astype(dtype))
    a.indices, a.indptr = a.indices.astype(index), a.indptr.astype(index)
    for ids in (rng.integers(0, 200, 500), np.arange(200)[::-1], np.zeros(0, np.int64)):
        got, want = select_rows(a, ids), a[ids]
        assert got.shape == want.shape and got.dtype == a.dtype
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)


@pytest.mark.parametrize("spec", ["sage:4,3", "ladies:10,10"])
def test_deterministic_and_independent_of_bulk(spec):
    g = GRAPHS["sym"]
    s = make_sampler(spec, gcn_norm(g.adj))
    seeds = seeds_of(g)
    a = [digest(mb) for mb in s.sample(seeds, [5, 6, 7, 8, 9])]
    assert a == [digest(mb) for mb in s.sample(seeds, [5, 6, 7, 8, 9])]
    assert a[2] == digest(s.sample([seeds[2]], [7])[0])
    assert a[1:3] == [digest(mb) for mb in s.sample(seeds[1:3], [6, 7])]
    assert a != [digest(mb) for mb in s.sample(seeds, [1, 6, 7, 8, 9])]


@pytest.mark.parametrize("spec", SPECS)
def test_keys_by_table_or_by_sort_give_the_same_blocks(spec, monkeypatch):
    """Block's (minibatch, vertex) keys were looked up in a table of all k·n keys: O(k·n) scratch a hop, GiBs on a
    graph of 10⁸ nodes. Where the table is larger than TABLE times the keys they are sorted instead: the same blocks."""
    from spgnn.sampling import sampler

    g = GRAPHS["dir"]
    s = make_sampler(spec, mean_norm(g.adj))
    seeds, keys = seeds_of(g, k=7, b=5), [3, 1, 4, 1, 5, 9, 2]
    monkeypatch.setattr(sampler, "TABLE", 10 ** 9)
    table = [digest(mb) for mb in s.sample(seeds, keys)]
    monkeypatch.setattr(sampler, "TABLE", 0)
    assert [digest(mb) for mb in s.sample(seeds, keys)] == table


SPEC_PAIR = ("sage:4,3", "ladies:20,20")


def owners(ids, n: int, blocks: int) -> np.ndarray:
    """Block of each vertex when n rows are cut into `blocks` blocks at ⌊i·n/blocks⌋."""
    return np.searchsorted([i * n // blocks for i in range(blocks + 1)], ids, side="right") - 1


def fetch_bytes(wants: list, n: int, c: int, row_bytes: int) -> np.ndarray:
    """(sent, recv) bytes per rank of one feature fetch, rank r wanting the ids wants[r], as the requests imply:
    8 bytes per count to each other member of the replica column {r' ≡ r mod c}, 8 per distinct id wanted from
    another member, `row_bytes` per row going back; a rank's own block is not communicated."""
    P = len(wants)
    g = P // c
    remote = [[np.unique(w)[owners(np.unique(w), n, g) == i] for i in range(g)] for w in wants]
    out = np.zeros((P, 2), np.int64)
    for r in range(P):
        me, col = r // c, [q for q in range(P) if q % c == r % c and q != r]
        mine_out = sum(len(remote[r][i]) for i in range(g) if i != me)     # ids r asks of others
        asked_in = sum(len(remote[q][me]) for q in col)                     # ids others ask of r
        out[r] = (8 * (g - 1) + 8 * mine_out + row_bytes * asked_in, 8 * (g - 1) + 8 * asked_in + row_bytes * mine_out)
    return out


def _drawn(comm, bulk, split=False, c=1):
    """Per sampler spec: the minibatches this rank draws in epoch 0, its weights after 2 epochs, the ledger's
    (sent, recv) bytes in phase "features", the bytes of a feature row and the final accuracies."""
    g = small_graph(n=200, seed=3, avg_degree=6)
    out = []
    for spec in SPEC_PAIR:
        comm.ledger.reset()
        t = MinibatchTrainer(TrainConfig(model="sage", seed=4, epochs=2, eval_every=0, replication=c), comm, spec, 9,
                             bulk, graph=g, split_graph=split)
        drawn = {mb.key: digest(mb) for _, mb in t.schedule(0) if mb is not None}
        final = t.run(log=None)["final"]
        moved = [comm.ledger.total(f, phase="features") for f in ("sent_bytes", "recv_bytes")]
        out.append((drawn, [p.detach().numpy().copy() for p in t.model.parameters()], moved,
                    t.x.element_size() * t.x.shape[1], final))
    return out


def data_parallel_reference(g, spec, P, epochs=2, batch_size=9, seed=4):
    """Weights and final accuracies of data-parallel training on P ranks, computed on one process: the epoch's
    minibatches j = 0, 1, … in order, step t summing the gradients of minibatches tP … tP+P−1 (each loss sum over
    the seeds of the step), then Adam; written here, apart from the trainer's schedule and all-reduce."""
    import torch.nn.functional as F

    from spgnn.spmm.local import LocalSpMM
    t = MinibatchTrainer(TrainConfig(model="sage", seed=seed, epochs=epochs, eval_every=0), Comm(0, 1), spec,
                         batch_size, graph=g)
    done = 0                    # steps taken: they key the dropout masks
    for e in range(epochs):
        batches = epoch_batches(np.flatnonzero(g.train_mask), batch_size, seed, e)
        mbs = t.sampler.sample(batches, [mix_key(seed, e, j) for j in range(len(batches))])
        for step in range(0, len(batches), P):
            t.model.train()
            t.opt.zero_grad(set_to_none=False)
            total = sum(len(b) for b in batches[step:step + P])
            for mb in mbs[step:step + P]:
                logits = t.model([LocalSpMM(b, t.comm) for b in mb.blocks], t.x[torch.as_tensor(mb.inputs)],
                                 [torch.as_tensor(v) for v in mb.nodes[:-1]], done)
                y = torch.as_tensor(g.y[mb.seeds])
                (F.nll_loss(torch.log_softmax(logits, 1), y, reduction="sum") / total).backward()
            t.opt.step()
            done += 1
    return [p.detach().numpy().copy() for p in t.model.parameters()], t.evaluate()


def test_distributed_sampling_matches_single_process():
    """P = 1, 2 ranks together draw exactly the minibatches one process draws in a single bulk call, and
    data-parallel training leaves every rank with the weights and accuracies of `data_parallel_reference`,
    whether the graph is replicated or split
    (P = 2, c = 1: rows and features fetched from their owners); the feature bytes are those the inputs imply."""
    g = small_graph(n=200, seed=3, avg_degree=6)
    batches = [epoch_batches(np.flatnonzero(g.train_mask), 9, 4, e) for e in (0, 1)]
    keys = [[mix_key(4, e, j) for j in range(len(batches[e]))] for e in (0, 1)]
    weights, finals = {}, {}
    for P, bulk, split in ((1, 3, False), (2, 2, False), (2, 1, True)):
        results = run_local(_drawn, P, bulk, split)
        for i, spec in enumerate(SPEC_PAIR):
            sampler = make_sampler(spec, mean_norm(g.adj))
            epochs = [sampler.sample(batches[e], keys[e]) for e in (0, 1)]
            expected = {mb.key: digest(mb) for mb in epochs[0]}
            got = {}
            for res in results:
                assert not set(got) & set(res[i][0])
                got |= res[i][0]
            assert got == expected, f"{spec} P={P}"
            for res in results[1:]:
                for a, b in zip(res[i][1], results[0][i][1]):
                    np.testing.assert_array_equal(a, b)
            if (spec, P) not in weights:
                weights[spec, P], finals[spec, P] = data_parallel_reference(g, spec, P)
            for a, b in zip(results[0][i][1], weights[spec, P], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{spec} P={P} split={split}")
            for res in results:
                assert {k: v for k, v in res[i][4].items() if k != "loss"} == finals[spec, P], f"{spec} P={P}"
            if split:                                                  # step t: rank r trains minibatch t·P + r
                want = [[mbs[j].inputs if j < len(mbs) else [] for j in range(t * P, t * P + P)]
                        for mbs in epochs for t in range(-(-len(mbs) // P))]
                expected_bytes = sum(fetch_bytes(w, g.n, 1, results[0][i][3]) for w in want)
                assert [res[i][2] for res in results] == expected_bytes.tolist(), spec
            else:
                assert all(res[i][2] == [0, 0] for res in results)


def test_bad_input():
    g = GRAPHS["sym"]
    for spec, what in [("sage:0,3", r"fanout must lie in \[1,"), ("ladies:-1", r"size must lie in \[1,"),
                       ("gat:3", "must be one of"), ("sage", "integers"), ("sage:a", "integers"),
                       ("", "must be one of"),
                       (f"sage:{2**70},5", r"lie in \[1, 2\^31\)"), (f"ladies:5,{2**31}", r"lie in \[1, 2\^31\)")]:
        with pytest.raises(SpgnnError, match=what):
            parse_sampler(spec)
    with pytest.raises(SpgnnError, match="positive"):
        NodeSampler(mean_norm(g.adj), [3, 0])
    for seeds, what in (([1, 1, 2], "names a node more than once"), ([0, g.n], "holds int64 ids outside"),
                        ([-1], "holds int64 ids outside"), ([0.0, 1.0], "holds float64 ids outside")):  # sampled before
        with pytest.raises(SpgnnError, match=f"^sample: seed set 1 {what}"):
            NodeSampler(mean_norm(g.adj), [3]).sample([np.array([0]), np.array(seeds)], [0, 1])
    for seeds, keys, what in (([np.array([[0, 1]])], [0], r"seed set 0 is an array of shape \(1, 2\)"),
                              ([np.array(3)], [0], r"seed set 0 is an array of shape \(\)"),
                              ([np.array([0])], [1.2], "key 1.2 is not an integer"),     # drew key 1's minibatch
                              ([np.array([0])], [None], "key None is not an integer")):
        with pytest.raises(SpgnnError, match=f"^sample: {what}"):
            NodeSampler(mean_norm(g.adj), [3]).sample(seeds, keys)
    with pytest.raises(SpgnnError, match=r"sizes per layer must be positive integers, got \[3, 2.5\]"):
        NodeSampler(mean_norm(g.adj), [3, 2.5])                  # cut to 2 before
    with pytest.raises(SpgnnError, match=r"sizes per layer must be positive integers, got \[\]"):
        NodeSampler(mean_norm(g.adj), np.array([], int))        # "truth value of an array is ambiguous" before
    empty = NodeSampler(mean_norm(g.adj)[:0], [3], first=g.n)   # a rank's empty block row: scipy's dtype error
    assert empty.diag.shape == empty.row_sum.shape == (0,)
    with pytest.raises(SpgnnError, match="^make_sampler takes N whole"):
        make_sampler("sage:3", mean_norm(g.adj)[5:9])            # a block row taken as rows 0, 1, …
    with pytest.raises(SpgnnError, match="^make_distributed_sampler: replication 2 but the layout given has c = 1"):
        make_distributed_sampler("sage:3", mean_norm(g.adj), Comm(0, 1), 2, RowBlocks(g.n, Comm(0, 1), 1))
    cfg = TrainConfig(model="sage")
    train = int(g.train_mask.sum())
    with pytest.raises(SpgnnError, match="--batch-size"):
        check_options(cfg, "sage:3", train + 1, 1, g)
    with pytest.raises(SpgnnError, match="--bulk"):
        check_options(cfg, "sage:3", 4, 0, g)
    with pytest.raises(SpgnnError, match="run on sampled blocks \\(gcn, sage\\)"):
        check_options(TrainConfig(model="gat", algo="1d-halo"), "sage:3", 4, 1, g)
    with pytest.raises(SpgnnError, match="--replication 3 must divide the number of processes 4"):
        check_options(TrainConfig(model="sage", replication=3), "sage:3", 4, 1, g, nprocs=4, split_graph=True)
    with pytest.raises(SpgnnError, match="needs --split-graph"):
        check_options(TrainConfig(model="sage", replication=2), "sage:3", 4, 1, g)
    with pytest.raises(SpgnnError, match="--replication 2 must be a positive divisor of the number of processes 1"):
        RowBlocks(g.n, Comm(0, 1), 2)
    for bounds in ([0, g.n, g.n], [0, g.n - 1], [1, g.n], [0, g.n + 1]):      # failed later inside torch, or never
        with pytest.raises(SpgnnError, match=f"^row bounds .* must be P/c \\+ 1 = 2 non-decreasing offsets from 0 to "
                                             f"n = {g.n}"):
            RowBlocks(g.n, Comm(0, 1), 1, bounds)
    assert check_options(cfg, "sage:3", None, 1, g)[2] == min(1024, train)     # the default clips to |train|
    for options, flags in (({"algo": "2d"}, "--algo applies"), ({"algo": "auto", "partition": "random"},
                           "--algo and --partition apply"), ({"node_order": "natural"}, "--node-order applies"),
                           ({"precompute": "off"}, "--precompute applies"), ({"grid": "2x1"}, "--grid applies"),
                           ({"prefetch": 2}, "--prefetch applies"), ({"memory_per_rank": "1GB"}, "--memory-per-rank")):
        with pytest.raises(SpgnnError, match=f"^{flags}.* to full-batch training, not --sampler"):
            check_options(TrainConfig(model="sage", **options), "sage:3", 4, 1, g)
    with pytest.raises(SpgnnError, match="^--batch-norm with --sampler trains on one process only: on 2 each"):
        check_options(TrainConfig(model="sage", batch_norm=True), "sage:3,3", 4, 1, g, nprocs=2)
    assert check_options(TrainConfig(model="sage", batch_norm=True), "sage:3,3", 4, 1, g, nprocs=1)[0].batch_norm
    with pytest.raises(SpgnnError, match="^batch norm follows each hidden layer .* none of the sage's layers"):
        check_options(TrainConfig(model="sage", batch_norm=True), "sage:3", 4, 1, g, nprocs=1)   # one hop: no norm


def test_isolated_and_no_in_edges():
    """Seeds without in-neighbours get empty rows (GCN: only the self loop)."""
    g = GRAPHS["dir"]
    for norm in (mean_norm, gcn_norm):
        for spec in ("sage:3", "ladies:5"):
            mb = make_sampler(spec, norm(g.adj)).sample([np.array([g.n - 1, g.n - 2])], [1])[0]
            np.testing.assert_allclose(mb.blocks[0].toarray(), norm(g.adj)[[g.n - 1, g.n - 2]][:, mb.nodes[0]]
                                       .toarray(), atol=1e-7)


@pytest.mark.parametrize("spec", ["sage:10,5", "ladies:256,256"])
def test_minibatch_sage_learns_cora(spec):
    cfg = TrainConfig(model="sage", epochs=8, eval_every=0, hidden=16, seed=0)
    report = MinibatchTrainer(cfg, Comm(0, 1), spec, 32, bulk=4).run(log=None)
    assert report["epochs"][-1]["loss"] < report["epochs"][0]["loss"] - 0.2
    assert report["final"]["test_acc"] > 0.6           # chance: 0.32 (the largest class)
    phases = {row["phase"] for row in report["comm"]["per_rank"][0]["table"]}
    assert {"sampling", "features"} <= phases


def test_cli(tmp_path, capsys):
    from spgnn.cli import main

    assert main(["train", "--sampler", "foo:1"]) == 2
    assert "--sampler must be one of" in capsys.readouterr().err
    assert main(["train", "--sampler", "sage:5", "--batch-size", "500"]) == 2
    assert main(["train", "--sampler", "sage:5", "--split-graph", "--replication", "3", "--nprocs", "2"]) == 2
    assert "--replication 3 must divide the number of processes 2" in capsys.readouterr().err
    assert main(["train", "--sampler", "sage:5", "--algo", "3d", "--partition", "random", "--nprocs", "2"]) == 2
    assert capsys.readouterr().err == ("spgnn: error: --algo and --partition apply to full-batch training, not "
                                       "--sampler (minibatches are sampled from the whole graph, or its row blocks "
                                       "with --split-graph): drop them\n")
    with pytest.raises(SystemExit):
        main(["train", "--sampler", "sage:5", "--split-graph", "--replicate-graph"])
    out = tmp_path / "r.json"
    assert main(["train", "--sampler", "sage:5,5", "--batch-size", "40", "--bulk", "2", "--epochs", "2", "--quiet",
                 "--model", "gcn", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["config"]["sampler"] == "sage:5,5" and report["config"]["layers"] == 2
    assert report["sampling"]["minibatches"] == 2 * 4


def split_case():
    """The graph, 12 minibatches of 16 seeds, features X and two feature requests per rank r (with repeats)."""
    g = small_graph(n=200, seed=3, avg_degree=6)
    x = torch.as_tensor(np.random.default_rng(7).standard_normal((g.n, 5)), dtype=torch.float32)
    wants = lambda r: [np.random.default_rng([r, k]).integers(0, g.n, 30 + 10 * r) for k in (0, 1)]  # noqa: E731
    return g, epoch_batches(np.arange(g.n), 16, 5, 0)[:12], x, wants


def _split(comm, replications):
    """Per c: this rank's share (j ≡ rank mod P) of the 12 minibatches in two bulk calls, N_off's rows fetched
    from the owners in its replica column, the bytes moved for them, then its two feature fetches and their
    (sent, recv) bytes."""
    g, batches, x, wants = split_case()
    out = {}
    for c in replications:
        comm.ledger.reset()
        layout = RowBlocks(g.n, comm, c)
        drawn = []
        for spec in SPEC_PAIR:
            sampler = make_distributed_sampler(spec, mean_norm(g.adj), comm, layout=layout)
            mine = list(range(comm.rank, len(batches), comm.world_size))
            for chunk in (mine[:2], mine[2:]):                  # two bulk calls
                drawn += [(spec, mb.key, digest(mb)) for mb in sampler.sample([batches[j] for j in chunk], chunk)]
        fetched = [FeatureFetcher(x, layout)(w).numpy() for w in wants(comm.rank)]
        out[c] = (drawn, comm.ledger.total("recv_bytes", phase="sampling"), fetched,
                  [comm.ledger.total(f, phase="features") for f in ("sent_bytes", "recv_bytes")])
    return out


@pytest.mark.parametrize("P", [1, 2, 4])
def test_split_graph_sampling_and_features(P):
    """Graph and features split 1.5D over P ranks, c = 1, 2 (P/c row blocks × c replicas): the same minibatches
    as one process; features fetched are X's rows; the feature bytes are exactly what the requests imply; rows
    cross ranks whenever there is more than one block."""
    g, batches, x, wants = split_case()
    expected = {(spec, mb.key): digest(mb) for spec in SPEC_PAIR
                for mb in make_sampler(spec, mean_norm(g.adj)).sample(batches, list(range(12)))}
    cs = [c for c in (1, 2) if P % c == 0]
    results = [_split(Comm(0, 1), cs)] if P == 1 else run_local(_split, P, cs)
    for c in cs:
        got = {(spec, key): d for res in results for spec, key, d in res[c][0]}
        assert got == expected, f"P={P} c={c}"
        assert all((moved > 0) == (P > c) for moved in (res[c][1] for res in results)), f"P={P} c={c}"
        for r, res in enumerate(results):
            for w, f in zip(wants(r), res[c][2]):
                np.testing.assert_array_equal(f, x[w].numpy())
        expected_bytes = sum(fetch_bytes([wants(r)[k] for r in range(P)], g.n, c, 4 * x.shape[1]) for k in (0, 1))
        assert [res[c][3] for res in results] == expected_bytes.tolist(), f"P={P} c={c}"


def test_block_product_and_its_gradient():
    """LocalSpMM: Z = B·H and ∂H = Bᵀ·G equal the dense products (B rectangular, as a sampled block is)."""
    from spgnn.spmm.local import LocalSpMM

    b = sp.random(7, 11, 0.3, format="csr", random_state=1, dtype=np.float32)
    h = torch.randn(11, 5, requires_grad=True)
    g = torch.randn(7, 5)
    LocalSpMM(b, Comm(0, 1)).spmm(h).backward(g)
    dense = torch.as_tensor(b.toarray())
    np.testing.assert_allclose(LocalSpMM(b, Comm(0, 1)).spmm(h).detach(), (dense @ h).detach(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h.grad, dense.T @ g, rtol=1e-5, atol=1e-6)


def test_a_partitioned_folder_trains_split_and_is_refused_replicated(tmp_path, capsys, monkeypatch):
    """--split-graph --nprocs on a partitioned folder loaded the folder as a dataset ('found neither an edge
    list ...'), as did a replicated graph; now the split graph trains as from the dataset, and the replicated one
    says what to do."""
    from spgnn.cli import main

    folder = tmp_path / "cora2"
    assert main(["partition", "--dataset", "cora", "--nparts", "2", "--method", "block", "--node-order", "natural",
                 "--output", str(folder), "--quiet"]) == 0
    run = ["train", "--sampler", "sage:5,5", "--model", "sage", "--batch-size", "32", "--epochs", "2", "--nprocs",
           "2", "--quiet"]
    losses = []
    for dataset in ("cora", str(folder)):
        out = tmp_path / f"{len(losses)}.json"
        assert main([*run, "--dataset", dataset, "--split-graph", "--output", str(out)]) == 0
        report = json.loads(out.read_text())
        assert report["config"]["dataset"] == dataset             # not the cache folder the processes read
        losses.append([e["loss"] for e in report["epochs"]])
    assert losses[0] == losses[1]
    # the report's graph bytes a rank (they were missing): split, each rank holds about its half of replicated's
    assert main([*run, "--dataset", "cora", "--output", str(tmp_path / "replicated.json")]) == 0
    held = {name: [r["graph_bytes"] for r in json.loads((tmp_path / f"{name}.json").read_text())["memory"]["per_rank"]]
            for name in ("0", "replicated")}
    assert all(0 < split < 0.75 * whole for split, whole in zip(held["0"], held["replicated"])), held
    capsys.readouterr()
    assert main([*run, "--dataset", str(folder)]) == 2
    assert "is a partitioned folder: a replicated graph (--sampler without --split-graph)" in capsys.readouterr().err
    # a folder --split-graph cannot read (2 parts for P/c = 1) is refused before any process starts
    monkeypatch.setattr(launch, "spawn", lambda *a, **k: pytest.fail("processes started"))
    assert main([*run, "--dataset", str(folder), "--split-graph", "--replication", "2"]) == 2
    assert "--split-graph reads a block partition into P/c = 1 parts in natural node order, but" in \
        capsys.readouterr().err


def test_bad_trainer_options(capsys):
    """A batch size or bulk that is not an integer (a TypeError deep in the epoch, or True taken as 1), a graph
    without training nodes ('--batch-size must lie in [1, 0] ..., got 0' with no --batch-size given) and a --layers
    other than the sampler's sizes (silently replaced) are one line each, before any work."""
    from spgnn.cli import main

    g = GRAPHS["sym"]
    cfg, train = TrainConfig(model="sage"), int(g.train_mask.sum())
    for batch in (2.5, "8", True):
        with pytest.raises(SpgnnError, match=rf"^--batch-size must be an integer in \[1, {train}\] .*got {batch!r}"):
            check_options(cfg, "sage:3", batch, 1, g)
    for bulk in (2.5, "2", False):
        with pytest.raises(SpgnnError, match=rf"^--bulk must be an integer of at least 1, got {bulk!r}$"):
            check_options(cfg, "sage:3", 4, bulk, g)
    assert check_options(cfg, "sage:3", np.int64(4), np.int32(2), g)[2] == 4
    with pytest.raises(SpgnnError, match=rf"^--batch-size must be an integer in \[1, {train}\] .*got {train + 1}$"):
        check_options(cfg, "sage:3", np.int64(train + 1), 1, g)
    empty = small_graph(n=80, seed=1)
    empty.train_mask[:] = False
    with pytest.raises(SpgnnError, match="^small has no training nodes: minibatches are drawn from them"):
        MinibatchTrainer(cfg, Comm(0, 1), "sage:3", None, graph=empty)
    with pytest.raises(SpgnnError, match="^--layers 3 but --sampler sage:3,3 samples 2 hops: the sampler sets the "
                                         "layers, one per size; give 3 sizes, or drop --layers$"):
        check_options(TrainConfig(model="sage", layers=3), "sage:3,3", 4, 1, g)
    for layers in (TrainConfig.layers, 3):                     # the default, or as many as the sizes
        assert check_options(TrainConfig(model="sage", layers=layers), "ladies:5,5,5", 4, 1, g)[0].layers == 3
    capsys.readouterr()
    assert main(["train", "--sampler", "sage:5,5", "--layers", "3", "--nprocs", "2"]) == 2
    assert capsys.readouterr().err.startswith("spgnn: error: --layers 3 but --sampler sage:5,5 samples 2 hops")


@pytest.mark.parametrize("split_graph", [False, True])
def test_a_graph_in_memory_and_another_dataset_are_refused(split_graph, tmp_path):
    """MinibatchTrainer given graph= and a dataset naming another graph trained the graph in memory while its report
    named the dataset (spgnn.Trainer and LinkTrainer refuse the pair); its own name, or the default, trains."""
    g = small_graph(n=80, seed=1)
    cfg = TrainConfig(model="sage", epochs=1, cache_dir=str(tmp_path))
    with pytest.raises(SpgnnError, match=r"^the graph in memory \(small\) and dataset='citeseer' both name the graph "
                                         r"to train on: give one of them$"):
        MinibatchTrainer(replace(cfg, dataset="citeseer"), Comm(0, 1), "sage:3", graph=g, split_graph=split_graph)
    for dataset in (TrainConfig.dataset, "small"):
        report = MinibatchTrainer(replace(cfg, dataset=dataset), Comm(0, 1), "sage:3", graph=g,
                                  split_graph=split_graph).run(log=None)
        assert report["graph"]["name"] == "small"
