"""Link prediction (--task link): the split and the negatives are the same at every P; the loss curve and the
figures are those of one process at P = 2 and 4 on 1d-halo, 2d and sar; the gradient of the embeddings equals
plain PyTorch's on the whole graph; the ledger's phase edges equals `predict_edges` on every rank; bad input is
one line."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, roc_auc_score

import spgnn
from spgnn import cost, spmm
from spgnn.cli import main
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.graph.adjacency import get_adjacency, normalize
from spgnn.graph.datasets import load_dataset
from spgnn.graph.graph import row_normalize
from spgnn.hashing import hash_uniform_array, mix_key
from spgnn.partition.partition import make_partition
from spgnn.partition.partitioned import InMemoryParts, PartitionedDataset
from spgnn.sampling.sampler import uniform_keys
from spgnn.tasks.link import TAG, EdgeSplit, LinkShare, message_passing, node_order, predict_edges, train_edges
from spgnn.train.link import LinkTrainer

EPOCHS = 3
LAYOUTS = {2: [("1d-halo", None), ("2d", "1x2"), ("sar", None)], 4: [("1d-halo", None), ("2d", "2x2"), ("sar", None)]}


def _cfg(cache, algo="1d-halo", grid=None, **kw):
    return TrainConfig(dataset="cora", algo=algo, grid=grid, hidden=8, dropout=0.0, cache_dir=str(cache),
                       **{"task": "link", **kw})


def test_hash_uniform_array_is_hash_uniform():
    """The samplers' C keys (`uniform_keys`) are `hash_uniform_array`'s bit for bit, on ids up to 2⁶² and keys with
    the top bit set, and both are the values the hash gave before (pinned)."""
    a, b = np.array([0, 5, 2707, 123456789]), np.array([1, 9, 3, 2**40])
    key = mix_key(7, TAG)
    pinned = [0.32732394230498124, 0.769849731590418, 0.8657115942714517, 0.9558605857002884]
    np.testing.assert_array_equal(hash_uniform_array(key, a, b), pinned)
    np.testing.assert_array_equal(uniform_keys(np.full(4, key, np.uint64), a, b), pinned)
    rng = np.random.default_rng(0)
    for k in (key, 0, 2**63, 2**64 - 1, int(rng.integers(2**63, 2**64, dtype=np.uint64))):
        rows = np.concatenate([rng.integers(0, 2**62, 1000), rng.integers(0, 1000, 1000), [0, 2**63 - 1]])
        cols = np.concatenate([rng.integers(0, 2**62, 1000), rng.integers(0, 1000, 1000), [2**63 - 2, 0]])
        got = uniform_keys(np.full(len(rows), k, np.uint64), rows, cols)
        np.testing.assert_array_equal(got.view(np.uint64), hash_uniform_array(k, rows, cols).view(np.uint64))
        assert 0 < got.min() and got.max() < 1


def _pairs(parts, split, epoch):
    """Every part's (orig u, orig v, split code), training negatives (orig u, orig w) and kept entries, as sets."""
    perm, pos, neg, kept = node_order(parts), set(), set(), set()
    for p in range(parts.nparts):
        share = parts.share(p)
        e = LinkShare(share, perm, split)
        ou = e.node_ids
        pos |= set(zip(ou[e.src], perm[e.dst], e.code))
        src, dst, k = e.training(epoch)
        neg |= set(zip(ou[src[k:]], perm[dst[k:]]))
        mp = message_passing(share, perm, split).adj.tocoo()
        kept |= set(zip(ou[mp.row], perm[mp.col]))
    return pos, neg, kept


def test_the_split_and_the_negatives_are_the_same_at_every_p():
    g, split = load_dataset("cora"), EdgeSplit(0.05, 0.1, seed=3)
    one = _pairs(InMemoryParts(g, make_partition("block", g.adj, 1)), split, 2)
    three = _pairs(InMemoryParts(g, make_partition("random", g.adj, 3, seed=1)), split, 2)
    assert one == three
    pos, neg, kept = one
    assert len(pos) == g.nnz // 2                                 # each undirected edge once
    codes = np.array([c for *_, c in pos])
    assert abs((codes == 1).mean() - 0.05) < 0.015 and abs((codes == 2).mean() - 0.1) < 0.02
    held = {(u, v) for u, v, c in pos if c}
    assert not any((u, v) in kept or (v, u) in kept for u, v in held)     # held out in both directions
    assert len(kept) == g.nnz - 2 * len(held)
    a = g.adj.tolil()
    assert all(u != w and a[u, w] == 0 for u, w in neg)           # negatives are no edges of the graph
    assert len(neg) == (codes == 0).sum()
    whole = get_adjacency(train_edges("sum", split, np.arange(g.n))).of(g.adj).tocoo()     # of the whole graph
    assert set(zip(whole.row, whole.col)) == kept


def _run(comm, layouts, cache, epochs=EPOCHS, keep=False, options=None):
    """Per layout (with the link `options` of a dict, if given): the losses, the figures, the gradient of the loss
    by z one more epoch on (node ids, columns, block), the ledger's phase edges, and the folder and grid to predict
    it from (and the trainer, if `keep`)."""
    out = {}
    for algo, grid in layouts:
        comm.ledger.reset()
        t = LinkTrainer(_cfg(cache, algo, grid, **(options or {})), comm)
        losses, figures = [], []
        for e in range(epochs):
            losses.append(t.epoch(e))
            figures.append(t.evaluate())
        t.opt.zero_grad()
        loss, z = t.forward(epochs)
        z.retain_grad()
        loss.backward()
        edges = {(r["op"], r["group"]): [r[k] for k in ("calls", "sent_bytes", "recv_bytes", "messages")]
                 for r in comm.ledger.table() if r["phase"] == "edges"}
        out[algo] = {"losses": losses + [loss.item()], "figures": figures, "edges": edges,
                     "grad": (t.g.node_ids.numpy(), t.g.columns(8), z.grad.numpy()), "folder": str(t.parts.path),
                     "shape": t.g.grid.shape} | ({"trainer": t} if keep else {})
    return out


def _whole(ranks, algo, n=2708, width=8) -> np.ndarray:
    out = np.full((n, width), np.nan, np.float32)
    for r in ranks:
        ids, cols, block = r[algo]["grad"]
        out[ids, cols] = block
    return out


def _plain_pytorch(t: LinkTrainer, epoch: int):
    """The loss and its gradient by z at `epoch` in plain PyTorch on the whole graph: A without the held-out pairs
    normalised as GCN does, the trainer's weights and pairs (one process: new id i is node_ids[i])."""
    g = load_dataset("cora")
    a = g.adj.tocoo()
    code = t.split.code(np.minimum(a.row, a.col), np.maximum(a.row, a.col))
    keep = code == 0
    a = normalize(sp.csr_matrix((a.data[keep], (a.row[keep], a.col[keep])), shape=a.shape), "gcn").tocoo()
    a = torch.sparse_coo_tensor(np.vstack([a.row, a.col]), a.data, a.shape, check_invariants=True).coalesce()
    h = torch.as_tensor(row_normalize(g.x))
    for i, layer in enumerate(t.model.encoder.layers):
        h = torch.sparse.mm(a, h @ layer.weight.detach()) + layer.bias.detach()
        h = torch.relu(h) if i == 0 else h
    z = h.requires_grad_()
    src, dst, pos = t.edges.training(epoch)
    ids = t.g.node_ids.numpy()
    s = (z[ids[src]] * z[ids[dst]]).sum(1)
    loss = F.binary_cross_entropy_with_logits(s, torch.cat([torch.ones(pos), torch.zeros(src.size - pos)]))
    loss.backward()
    return loss.item(), z.grad.numpy()


def test_one_loss_curve_at_every_p_and_the_ledger_predicted(tmp_path):
    one = _run(Comm(0, 1), [("1d-halo", None)], tmp_path, keep=True)["1d-halo"]
    plain_loss, plain_grad = _plain_pytorch(one["trainer"], EPOCHS)
    assert one["losses"][-1] == pytest.approx(plain_loss, rel=1e-5)
    np.testing.assert_allclose(_whole([{"1d-halo": one}], "1d-halo"), plain_grad, rtol=1e-4, atol=1e-9)
    for P, layouts in LAYOUTS.items():
        ranks = run_local(_run, P, layouts, tmp_path, timeout_s=600)
        for algo, _ in layouts:
            mine = ranks[0][algo]
            np.testing.assert_allclose(mine["losses"], one["losses"], rtol=2e-5, err_msg=f"{algo} at P = {P}")
            for f, f1 in zip(mine["figures"], one["figures"]):
                assert f.keys() == f1.keys() == {f"{s}_{m}" for s in ("train", "val", "test") for m in ("rocauc", "ap")}
                np.testing.assert_allclose([f[k] for k in f1], list(f1.values()), rtol=1e-4, err_msg=algo)
            np.testing.assert_allclose(_whole(ranks, algo), plain_grad, rtol=1e-3, atol=1e-8, err_msg=algo)
            predicted = predict_edges(PartitionedDataset(mine["folder"]), spmm.get(algo), mine["shape"],
                                      EdgeSplit(seed=0), 8, EPOCHS + 1, EPOCHS)
            for r in range(P):
                assert ranks[r][algo]["edges"] == {(row["op"], row["group"]): [row[k] for k in (
                    "calls", "sent_bytes", "recv_bytes", "messages")] for row in predicted[r].table()}, (algo, P, r)
            assert any(sent for _, sent, _, _ in mine["edges"].values())


def test_self_pairs_train_a_plus_i(tmp_path):
    """--self-pairs on: each node's pair with itself is one more training positive, with a negative of its own;
    the loss and its gradient by z are plain PyTorch's, and 2d at P = 2 trains as one process does, its phase
    edges as `predict_edges` says."""
    on = {"self_pairs": "on"}
    one = _run(Comm(0, 1), [("1d-halo", None)], tmp_path, EPOCHS, True, on)["1d-halo"]
    t = one["trainer"]
    src, dst, pos = t.edges.training(0)
    edges = t.edges.positives("train")[0].size
    assert pos == t.positives == edges + 2708 and src.size == 2 * pos
    np.testing.assert_array_equal(src[edges:pos], np.arange(2708))
    np.testing.assert_array_equal(dst[edges:pos], np.arange(2708))
    assert not np.any(src[pos:] == dst[pos:])
    plain_loss, plain_grad = _plain_pytorch(t, EPOCHS)
    assert one["losses"][-1] == pytest.approx(plain_loss, rel=1e-5)
    np.testing.assert_allclose(_whole([{"1d-halo": one}], "1d-halo"), plain_grad, rtol=1e-4, atol=1e-9)
    ranks = run_local(_run, 2, [("2d", "1x2")], tmp_path, EPOCHS, False, on, timeout_s=600)
    mine = ranks[0]["2d"]
    np.testing.assert_allclose(mine["losses"], one["losses"], rtol=2e-5)
    np.testing.assert_allclose(_whole(ranks, "2d"), plain_grad, rtol=1e-3, atol=1e-8)
    predicted = predict_edges(PartitionedDataset(mine["folder"]), spmm.get("2d"), mine["shape"], EdgeSplit(seed=0),
                              8, EPOCHS + 1, EPOCHS, self_pairs=True)
    for r in range(2):
        assert ranks[r]["2d"]["edges"] == {(row["op"], row["group"]): [row[k] for k in (
            "calls", "sent_bytes", "recv_bytes", "messages")] for row in predicted[r].table()}, r


def test_figures_are_scikit_learns(tmp_path):
    t = LinkTrainer(_cfg(tmp_path), Comm(0, 1))
    t.epoch(0)
    figures = t.evaluate()
    with torch.no_grad():
        z = t.embeddings()
        src, dst, label, code = t.edges.evaluation()
        s = (z[src] * z[dst]).sum(1).numpy()
    for k, split in enumerate(("train", "val", "test")):
        m = code == k
        assert figures[f"{split}_rocauc"] == pytest.approx(roc_auc_score(label[m], s[m]), rel=1e-9)
        assert figures[f"{split}_ap"] == pytest.approx(average_precision_score(label[m], s[m]), rel=1e-9)


def test_mlp_decoder_learns(tmp_path):
    t = LinkTrainer(_cfg(tmp_path, lr=0.01, decoder="mlp"), Comm(0, 1))
    losses = [t.epoch(e) for e in range(20)]
    assert losses[-1] < losses[0]
    assert t.evaluate()["val_rocauc"] > 0.6


def _tiny(n=3):
    """A path on n nodes: 2(n − 1) entries of A."""
    a = sp.diags([np.ones(n - 1), np.ones(n - 1)], [-1, 1], shape=(n, n), format="csr")
    return spgnn.Graph(a, np.eye(n, dtype=np.float32), np.zeros(n), np.ones(n, bool), np.zeros(n, bool),
                       np.zeros(n, bool), name="tiny")


@pytest.mark.parametrize("what, kwargs, message", [
    ("fractions", {"val_edges": 0.5, "test_edges": 0.5}, "--val-edges and --test-edges must be fractions above 0"),
    ("decoder", {"decoder": "bilinear"}, "--decoder must be dot or mlp, got 'bilinear'"),
    ("self pairs", {"self_pairs": "yes"}, "--self-pairs must be on or off, got 'yes'"),
    ("decoder of a node task", {"decoder": "mlp", "task": "multiclass"}, "--decoder applies to --task link, not "
                                                                        "multiclass"),
    ("two edges", {"graph": 3}, "--task link splits the edges of 'tiny' into train, val and test, but it has only "
                                "4 entries"),
    ("few edges", {"graph": 5}, "--task link: the test split of 'tiny' holds no edge"),
    ("no training edges", {"graph": 5, "val_edges": 0.45, "test_edges": 0.5},   # (it said: raise them)
     "--task link: the train split of 'tiny' holds no edge .* so nothing trains: lower --val-edges and --test-edges"),
    ("attention", {"model": "gat"}, "--task link cannot train --model gat: its attention runs over the whole graph"),
    ("mlp on 2d", {"decoder": "mlp", "algo": "2d"}, "--decoder mlp needs whole rows, which --algo 2d does not"),
])
def test_bad_input_is_one_line(tmp_path, what, kwargs, message):
    kwargs = dict(kwargs)
    graph = _tiny(kwargs.pop("graph")) if "graph" in kwargs else None
    with pytest.raises(SpgnnError, match="^" + message.replace("(", r"\(")):
        LinkTrainer(_cfg(tmp_path, **kwargs).validate(), Comm(0, 1), graph=graph)


@pytest.mark.parametrize("options, message", [
    ({"val_edges": 0.6, "test_edges": 0.5}, "--val-edges and --test-edges must be fractions above 0 whose sum"),
    ({"decoder": "mlp", "algo": "2d"}, "--decoder mlp needs whole rows, which --algo 2d does not offer"),
    ({"model": "gat"}, "--task link cannot train --model gat: its attention runs over the whole graph"),
])
def test_options_that_cannot_train_together_are_refused_before_any_work(tmp_path, capfd, options, message):
    """They were refused by the processes --nprocs started, after the dataset was partitioned into the cache (and,
    for the decoder, the layout set up): now by TrainConfig.validate (`Link.check_options`), before either."""
    cache = tmp_path / "cache"
    flags = [x for k, v in options.items() for x in ("--" + k.replace("_", "-"), str(v))]
    assert main(["train", "--task", "link", "--nprocs", "2", "--epochs", "1", "--cache-dir", str(cache), "--quiet",
                 *flags]) == 2
    err = capfd.readouterr().err
    assert err.startswith(f"spgnn: error: {message}") and err.count("\n") == 1, err
    assert not cache.exists()
    with pytest.raises(SpgnnError, match="^" + message):
        _cfg(cache, **options).validate()


def test_report_and_resume(tmp_path):
    """Four epochs in one run equal two, checkpointed, then two resumed; the records name the link figures."""
    whole = LinkTrainer(_cfg(tmp_path, epochs=4), Comm(0, 1)).run(log=None)
    LinkTrainer(_cfg(tmp_path, epochs=2, checkpoint=str(tmp_path / "ck"), checkpoint_every=1), Comm(0, 1)).run(log=None)
    resumed = LinkTrainer(_cfg(tmp_path, epochs=4, resume=str(tmp_path / "ck")), Comm(0, 1)).run(log=None)
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in whole["epochs"]]
    assert whole["task"] == {"name": "link", "metric": "rocauc", "label": "ROC-AUC", "higher_is_better": True}
    assert {"val_rocauc", "test_ap"} <= whole["final"].keys() and "val_rocauc" in whole["best"]
    assert sum(whole["graph"]["edges"].values()) == load_dataset("cora").nnz // 2
    with pytest.raises(SpgnnError, match="the checkpoint is of --decoder dot, this run's is mlp"):
        LinkTrainer(_cfg(tmp_path, epochs=4, resume=str(tmp_path / "ck"), decoder="mlp"), Comm(0, 1)).run(log=None)
    for change, said in (({"self_pairs": "on"}, "self_pairs 'off' here 'on'"),
                         ({"embedding": 4}, "embedding 8 here 4")):
        with pytest.raises(SpgnnError, match=f"is of another run \\({said}\\)"):    # another objective; a torch error
            LinkTrainer(_cfg(tmp_path, epochs=4, resume=str(tmp_path / "ck"), **change), Comm(0, 1)).run(log=None)


def test_auto_weighs_the_encoder(monkeypatch):
    """--algo auto ranks the layouts by the encoder's costs (its output the embedding, not the graph's classes); for
    --decoder mlp, which needs whole rows, only layouts that hold them (it compared 2D and 3D too: where one was the
    fastest, as 3d is at scale, the run was refused once the dataset was partitioned)."""
    seen, layouts = [], ("1d", "1.5d", "1d-halo", "sar", "2d", "3d")

    def recorded(cfg, P, stats_of, model, *args, **kwargs):
        seen.append((model.classes, [a for a in layouts if model.modelled_on(spmm.get(a))]))
        raise SpgnnError("stop here")

    monkeypatch.setattr(cost, "choose", recorded)
    for decoder in ("dot", "mlp"):
        with pytest.raises(SpgnnError, match="stop here"):
            LinkTrainer(TrainConfig(dataset="cora", task="link", algo="auto", hidden=16, embedding=24,
                                    decoder=decoder), Comm(0, 1))
    assert seen == [(24, list(layouts)), (24, ["1d", "1.5d", "1d-halo", "sar"])]


def test_edge_bytes_count_what_the_pairs_keep(tmp_path):
    """LinkShare kept the rank's whole share (its block row, labels, masks: 37 MiB on amazon-computers at P = 2)
    and a byte a nonzero beside it, and edge_bytes counted neither, nor the evaluation's pairs. Now every array it
    keeps is counted, and the evaluation's pairs once made."""
    t = LinkTrainer(_cfg(tmp_path, epochs=1), Comm(0, 1))
    t.epoch(0)
    held = [a for a in vars(t.edges).values() if isinstance(a, np.ndarray)]      # inv too, made by the negatives
    assert t.edges_bytes() == sum(a.nbytes for a in held) and not hasattr(t.edges, "share")
    t.evaluate()
    src, dst, label, code, _ = t._eval
    assert t.edges_bytes() == sum(a.nbytes for a in held) + src.nbytes + dst.nbytes + label.numel() * 4 + code.numel()
