"""The compute and memory side of the cost model: what each rank multiplies, derived from the operations the layers
declare, checked against hand-computed values; the graph bytes a rank holds predicted exactly and the activations
autograd keeps within a stated tolerance; the calibration file; --memory-per-rank; what spgnn cost prints."""

import dataclasses
import json
import math

import pytest

from spgnn import cli, cost, plan, spmm
from spgnn.comm.calibrate import SCHEMA, measure_compute
from spgnn.comm.comm import Comm, ring_words
from spgnn.config import TrainConfig
from spgnn.graph.adjacency import normalize
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.worlds import errors, run_worlds

GRAPHS = {"sym": small_graph(n=60, f=7, seed=11), "dir": small_graph(n=60, f=7, seed=12, directed=True)}
LAYOUTS = [("1d", 0, None), ("1d-halo", 0, None), ("sar", 0, None), ("1.5d", 2, None), ("2d", 0, "2x2"),
           ("3d", 0, "1x2x2")]
SAVED_TOLERANCE = 0.20      # SAGE's two dense products of one input are counted twice


def _layout(algo, c, grid, model="gcn", gname="sym", P=4):
    cfg = TrainConfig(model=model, algo=algo, replication=c, grid=grid, hidden=16, layers=3, partition="random",
                      feature_norm="none")
    p = plan.plan(cfg, P, GRAPHS[gname])
    mc = plan.model_cost(p.cfg, p.graph)
    return p, spmm.get(algo), mc, {a: plan.block_stats(p.graph, p.partition, a) for a in mc.adjacencies}


@pytest.mark.parametrize("algo,c,grid", LAYOUTS)
def test_compute_work_from_the_declared_ops(algo, c, grid):
    """Over all ranks, each SpMM multiplies every nonzero of Â by every column once (4·f·nnz bytes, plus the rows
    of each rank's product, read and written again by each block product after the first), the dense products cost
    2·n·f_in·f_out flops and each input's one-pass dropout 8·n·f bytes (c times over in 1.5d, whose replicas repeat
    them); 1d-halo's rank p multiplies exactly its block row, counted here from Â itself."""
    p, cls, mc, stats = _layout(algo, c, grid)
    g, P = p.graph, 4
    a = p.partition.renumber(normalize(g.adj, "gcn"))
    work = [cost.compute_work(cls, stats, p.shape, r, mc) for r in range(P)]
    shares = [cost.local_share(cls, stats["gcn"], p.shape, r) for r in range(P)]
    spmms = [op for ops in mc.layers for op in ops if isinstance(op, cost.Spmm)]
    dense = [op for ops in mc.layers for op in ops if isinstance(op, cost.Dense)]
    classes = mc.classes
    assert [op.width for op in spmms] == [7, 16, min(16, classes)]
    assert [(d.f_in, d.f_out) for d in dense] == [(7, 16), (16, 16), (16, classes)]
    # each block product after a rank's first reads and writes its output rows (kernels.spmm(accumulate=True))
    out_rows = sum(4 * s.width(op.width) * s.out_rows * (2 * s.passes - 1) for s in shares for op in spmms)
    both = [{k: w["forward"][k] + w["forward"][f"spmm_ordered_{k[5:]}"] for k in ("spmm_nnz", "spmm_bytes")}
            for w in work]                          # the own block in rcm order (``--node-order rcm``) and the rest
    assert sum(w["spmm_bytes"] for w in both) == 4 * a.nnz * sum(op.width for op in spmms) + out_rows
    assert stats["gcn"].ordered and p.partition.info["node_order"] == "rcm"
    if algo in ("1d", "sar", "1d-halo"):                # the non-empty blocks of block row r (own and remote: halo)
        cuts = p.partition.offsets
        for r in range(P):
            row = a[cuts[r]:cuts[r + 1]]
            blocks = [row[:, cuts[j]:cuts[j + 1]].nnz > 0 for j in range(P)]
            want = 1 + any(b for j, b in enumerate(blocks) if j != r) if algo == "1d-halo" else sum(blocks)
            assert shares[r].passes == want
    replicas = c or 1
    assert sum(w["forward"]["flops"] for w in work) == replicas * sum(2 * g.n * d.f_in * d.f_out for d in dense)
    # backward: dW everywhere, dX past layer 0; the first SpMM (Â·X, X needs no gradient) has no backward
    assert sum(w["backward"]["flops"] for w in work) == replicas * 2 * g.n * (7 * 16 + 2 * 16 * 16 + 2 * 16 * classes)
    # every layer's input dropout in one pass; the hidden inputs' again in the backward (dH = dY ⊙ mask), none in eval
    assert sum(w["forward"]["dropout_bytes"] for w in work) == replicas * 8 * g.n * (7 + 16 + 16)
    assert sum(w["backward"]["dropout_bytes"] for w in work) == replicas * 8 * g.n * (16 + 16)
    assert sum(w["eval"]["dropout_bytes"] for w in work) == 0
    if algo == "1d-halo":
        for r in range(P):
            rows = slice(*p.partition.offsets[r:r + 2])
            block = a[rows]
            assert shares[r].nnz == block.nnz and shares[r].overlap_nnz == shares[r].ordered_nnz == block[:, rows].nnz
            assert both[r]["spmm_bytes"] == sum(4 * op.width * (block.nnz + 3 * block.shape[0])
                                                for op in spmms)       # own block, then the halo's
            assert work[r]["forward"]["spmm_ordered_bytes"] == sum(4 * op.width * block[:, rows].nnz for op in spmms)
            assert work[r]["forward"]["flops"] == sum(2 * block.shape[0] * d.f_in * d.f_out for d in dense)
            assert both[r]["spmm_nnz"] == len(spmms) * block.nnz
            assert work[r]["forward"]["spmm_ordered_nnz"] == len(spmms) * block[:, rows].nnz
            assert work[r]["forward"]["dense_bytes"] == sum(4 * block.shape[0] * (d.f_in + d.f_out) for d in dense)
            # backward: dW = Hᵀ·G and dX = G·Wᵀ past layer 0, each reading and writing what the forward did
            assert work[r]["backward"]["dense_bytes"] == work[r]["forward"]["dense_bytes"] * 2 - 4 * block.shape[0] * (
                dense[0].f_in + dense[0].f_out)


def test_dropout_is_charged_only_where_the_model_drops_out():
    """A layer's input dropout is charged where the model drops it out (`GNN.dropout` > 0 and the layer's
    `dropout_before`): every layer of GCN at 0.5, none at 0, and APPNP's propagation (no `dropout_before`) never."""
    for model, p_drop, want in (("gcn", 0.5, (True, True, True)), ("gcn", 0.0, (False, False, False)),
                                ("appnp", 0.5, None)):
        cfg = TrainConfig(model=model, algo="1d", hidden=16, layers=3, dropout=p_drop, feature_norm="none")
        mc = cost.ModelCost.of_config(cfg, 7, 3)
        if want is None:                                 # APPNP: its MLP's inputs dropped, its propagation's not
            want = tuple(any(isinstance(op, cost.Dense) for op in ops) for ops in mc.layers)
            assert True in want and False in want
        assert mc.dropped == want
        p = plan.plan(cfg, 2, GRAPHS["sym"])
        stats = {a: plan.block_stats(p.graph, p.partition, a) for a in mc.adjacencies}
        charged = cost.compute_work(spmm.get("1d"), stats, p.shape, 0, mc)["forward"]["dropout_bytes"]
        assert (charged > 0) == any(want)


def test_the_own_block_in_rcm_order_at_its_own_rates():
    """Under ``--node-order rcm`` a rank's own block is multiplied at the calibration's rcm-order rates, the rest at
    the others; in natural order, or with a calibration that has no rcm-order rates (made before them), all of it at
    the others. The statistics say which order the parts are in."""
    p, cls, mc, stats = _layout("1d-halo", 0, None)
    natural_cfg = TrainConfig(model="gcn", algo="1d-halo", hidden=16, layers=3, partition="random",
                              feature_norm="none", node_order="natural")
    q = plan.plan(natural_cfg, 4, GRAPHS["sym"])
    natural = {a: plan.block_stats(q.graph, q.partition, a) for a in mc.adjacencies}
    assert stats["gcn"].ordered and not natural["gcn"].ordered
    assert all(cost.compute_work(cls, natural, q.shape, r, mc)["forward"]["spmm_ordered_nnz"] == 0 for r in range(4))
    flat = dataclasses.replace(cost.DEFAULT_RATES, spmm_ordered_nnz_s=None, spmm_ordered_bytes_per_s=None)
    fast = dataclasses.replace(flat, spmm_ordered_nnz_s=flat.spmm_nnz_s / 2,
                               spmm_ordered_bytes_per_s=flat.spmm_bytes_per_s * 2)
    for r in range(4):
        w = cost.compute_work(cls, stats, p.shape, r, mc)["forward"]
        o = w["spmm_ordered_nnz"] * flat.spmm_nnz_s + w["spmm_ordered_bytes"] / flat.spmm_bytes_per_s
        assert o > 0
        assert cost.compute_seconds(w, fast, 1) == pytest.approx(cost.compute_seconds(w, flat, 1) - o / 2)
    assert flat.spmm_s(10, 400, ordered=True) == flat.spmm_s(10, 400)


def test_attention_is_planned_only_where_a_layout_states_its_cost(capsys):
    """GAT declares its attention (`spgnn.Attend`): its model is planned on 1d-halo and sar, which state
    `attend_cost`, not on 2d (no attention) nor on a layout with attention that states only `spmm_cost` (GCN still
    is); `spgnn cost --model gat` by statistics compares 1d-halo and sar alone, each with seconds and memory, and
    takes the layer's --heads (fewer heads: fewer seconds and bytes)."""
    gat = cost.ModelCost.of_config(TrainConfig(model="gat", heads=2), 5, 3)
    gcn = cost.ModelCost.of_config(TrainConfig(model="gcn"), 5, 3)

    class Unstated(spmm.get("1d-halo")):                # attention, but no attend_cost of its own
        attend_cost = classmethod(spmm.DistSpMM.attend_cost.__func__)

    assert gat.attends and not gcn.attends
    assert gat.modelled_on(spmm.get("1d-halo")) and gat.modelled_on(spmm.get("sar"))
    assert not gat.modelled_on(spmm.get("2d")) and gcn.modelled_on(spmm.get("2d"))
    assert not gat.modelled_on(Unstated) and gcn.modelled_on(Unstated)
    table = {}
    for heads in ("8", "2"):                            # the layer's own options: --heads
        assert cli.main(["cost", "--nodes", "100000", "--nnz", "2000000", "--nprocs", "4", "--model", "gat",
                         "--heads", heads]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("4 ")]
        assert sorted(r[1] for r in rows) == ["1d-halo", "sar"]
        table[heads] = {r[1]: (float(r[4]), float(r[5])) for r in rows}     # s/epoch, GiB/rank
    for algo in ("1d-halo", "sar"):
        assert all(a > b > 0 for a, b in zip(table["8"][algo], table["2"][algo])), table


def test_attention_dropout_is_charged_in_training_only():
    """With attention dropout an attention also costs its layout's `attend_dropout_work` (the mask), in the training
    forward and backward, not in evaluation; without it, nothing more."""
    n, heads = 1000, 4
    stats = {"self-loops": cost.BlockStats.expected(n, 16 * n, 1)}
    for algo in ("1d-halo", "sar"):
        cls = spmm.get(algo)
        nnz = cost.local_share(cls, stats["self-loops"], (1,), 0).nnz
        work = {}
        for dropout in (False, True):
            mc = cost.ModelCost(((cost.Attend(heads, 16, "self-loops", dropout),),), classes=8, n_params=0,
                                dropped=(False,))
            work[dropout] = cost.compute_work(cls, stats, (1,), 0, mc)
        for phase in ("forward", "backward"):
            ops, edge, head, feature = cls.attend_dropout_work[phase]
            more = {k: work[True][phase][k] - work[False][phase][k] for k in work[True][phase]}
            assert more["ops"] == ops and more["elementwise_bytes"] == nnz * (edge + head * heads), (algo, phase)
            assert more["spmm_bytes"] == feature * nnz * heads * 16, (algo, phase)
        assert work[True]["eval"] == work[False]["eval"] and any(cls.attend_dropout_work["forward"][1:])


def test_attentions_large_results_are_charged_their_first_touch():
    """An attention's results of V's and X's size (the layout's `attend_fresh`) of 32 MiB or more are mapped anew at
    every step: their bytes are charged at the first-touch rate, forward (and in evaluation) and backward; smaller
    ones are not."""
    from spgnn.memory import LARGE_BYTES

    op = cost.Attend(8, 64, "self-loops")
    for algo in ("1d-halo", "sar"):
        cls = spmm.get(algo)
        for n, large in ((20000, True), (1000, False)):
            stats = {"self-loops": cost.BlockStats.expected(n, 16 * n, 1)}
            share = cost.local_share(cls, stats["self-loops"], (1,), 0)
            x, _, v = cls.attend_sizes(stats["self-loops"], share, 0, op.heads, op.width)
            assert (min(x, v) >= LARGE_BYTES) == large and (max(x, v) < LARGE_BYTES) != large
            work = cost.attend_work(cls, stats, (1,), 0, op)
            for phase, way in (("forward", "forward"), ("eval", "forward"), ("backward", "backward")):
                n_v, n_x = cls.attend_fresh[way]
                assert work[phase]["fresh_bytes"] == (n_v * v + n_x * x if large else 0), (algo, n, phase)
            assert all(cls.attend_fresh[way][0] > 0 for way in ("forward", "backward"))


def test_a_frozen_parameter_is_held_not_trained():
    """A frozen parameter (``requires_grad=False``) is out of the modelled gradient all-reduce and Adam's work, and
    is held at 4 bytes a word, not the 16 of a trained one (weights, gradient, two moments)."""
    from spgnn.layers.stack import config_model

    model = config_model(TrainConfig(model="gcn", hidden=8), 5, 3)
    whole = cost.ModelCost.of(model)
    w = next(model.parameters())
    w.requires_grad_(False)
    part = cost.ModelCost.of(model)
    assert (part.n_params, part.frozen) == (whole.n_params - w.numel(), w.numel()) and whole.frozen == 0
    cls, stats = spmm.get("1d-halo"), {"gcn": cost.BlockStats.expected(100, 400, 2)}
    for mc in (whole, part):
        ledger = cost.epoch_ledger(cls, stats, (2,), 0, mc, evals=0, setup=False)
        assert ledger.total("sent_bytes", phase="optimizer") == 4 * ring_words(mc.n_params, 2, 0)
        assert cost.memory_bytes(cls, stats, (2,), 0, mc)["params"] == 16 * mc.n_params + 4 * mc.frozen
    assert cost.compute_work(cls, stats, (2,), 0, part)["optimizer"]["elementwise_bytes"] < \
        cost.compute_work(cls, stats, (2,), 0, whole)["optimizer"]["elementwise_bytes"]


def test_planning_sees_the_node_order_it_plans_for(capsys):
    """``--algo auto`` and ``spgnn cost`` judge the layouts in the node order the run will use: the statistics of a
    graph in memory are of its partition in cfg's order, those of a graph known by n and nnz say the order they are
    asked for. Only the own block's compute changes with it, not bytes nor communication seconds: at P = 1 all of
    the step's SpMMs; at P = 16 at most that, for an own block multiplied while the halo is in flight is hidden
    whatever its speed."""
    g = GRAPHS["sym"]
    for order in ("rcm", "natural"):
        stats = plan.graph_stats(TrainConfig(partition="random", node_order=order), g)(spmm.get("1d-halo"), (4,),
                                                                                        ["gcn"])
        assert stats["gcn"].ordered == (order == "rcm")
    model = cost.ModelCost.of_config(TrainConfig(hidden=128, layers=2), 128, 128)
    fast = dataclasses.replace(cost.DEFAULT_RATES, spmm_ordered_nnz_s=cost.DEFAULT_RATES.spmm_nnz_s / 4,
                               spmm_ordered_bytes_per_s=cost.DEFAULT_RATES.spmm_bytes_per_s * 4)
    rows = {o: cost.plan_table(2_449_029, 123_718_280, [1, 16], model, rates=fast, ordered=o) for o in (True, False)}
    assert len(rows[True]) == len(rows[False]) > 2
    for a, b in zip(rows[True], rows[False]):
        assert (a["algo"], a["shape"], a["recv_bytes_per_rank"], a["comm_seconds"]) == \
               (b["algo"], b["shape"], b["recv_bytes_per_rank"], b["comm_seconds"])
        assert a["epoch_s"] < b["epoch_s"] if a["P"] == 1 else a["epoch_s"] <= b["epoch_s"] * (1 + 1e-12)   # rounding
    best = {}
    for order in ("rcm", "natural"):
        argv = ["cost", "--nodes", "2449029", "--nnz", "123718280", "--nprocs", "1", "--node-order", order]
        assert cli.main(argv) == 0
        best[order] = float(capsys.readouterr().out.splitlines()[-1].split(": ")[1].split(" s ")[0])
    assert best["rcm"] < best["natural"]     # the default calibration's rcm-order rates are the faster


def _held(comm):
    out = []
    for gname, model in (("sym", "gcn"), ("dir", "gcn"), ("dir", "sage"), ("dir", "gat")):
        for algo, c, grid in LAYOUTS:
            if (model == "sage" and (grid or algo == "1d")) or (gname, model) == ("dir", "gcn") and not grid:
                continue                # the directed row layouts' Âᵀ blocks and halo plans: by SAGE's two products
            if model == "gat" and not spmm.get(algo).attention:
                continue
            cfg = TrainConfig(model=model, algo=algo, replication=c, grid=grid, hidden=16, layers=3,
                              partition="random", feature_norm="none")
            t = Trainer(cfg, comm, graph=GRAPHS[gname])
            t.step(0)
            out.append(((gname, model, algo, c, cfg.grid), t.graph_bytes(), t.meter.peak_bytes))
    return out


def test_memory_model_against_what_a_rank_holds():
    """After a training step, every rank's `graph_bytes` (its blocks of Â and Âᵀ, halo plans, packed copies, node
    data) equals the prediction to the byte, for every layout at P = 4 (1.5d c = 2, 2d 2x2, 3d 1x2x2), symmetric
    and directed (GraphSAGE on the row layouts, GCN on the grids, GAT on those with attention), in one launch; what
    autograd kept (`SavedTensorMeter`'s peak) is within SAVED_TOLERANCE of `saved_bytes`."""
    worlds = run_worlds(_held, (4,))
    for P, ranks in worlds.items():
        assert not errors(ranks), errors(ranks)
        for k, ((gname, model, algo, c, grid), _, _) in enumerate(ranks[0]):
            cfg = TrainConfig(model=model, algo=algo, replication=c, grid=grid, hidden=16, layers=3,
                              partition="random", feature_norm="none")
            p = plan.plan(cfg, P, GRAPHS[gname])
            mc = plan.model_cost(p.cfg, p.graph)
            stats = {a: plan.block_stats(p.graph, p.partition, a) for a in mc.adjacencies}
            for r in range(P):
                _, held, saved = ranks[r][k]
                what = f"{algo} c={c} {grid} {model} {gname} P={P} rank {r}"
                assert cost.graph_bytes(spmm.get(algo), stats, p.shape, r, mc) == held, what
                predicted = cost.saved_bytes(spmm.get(algo), stats, p.shape, r, mc)
                assert abs(predicted / saved - 1) <= SAVED_TOLERANCE, (what, predicted, saved)
                total = cost.memory_bytes(spmm.get(algo), stats, p.shape, r, mc)
                assert total["total"] == sum(v for k_, v in total.items() if k_ != "total")


def test_calibration_file_round_trips(tmp_path):
    """A file of this schema gives back its α-β and its compute rates; a schema-1 file (α-β only) is still read, with
    the default rates and its own world size; a schema-3 file, made before the rcm-order SpMM rates, charges every
    nonzero at its own SpMM rates (not the defaults' rcm-order ones); a schema-4 file, made before the sync wait was
    measured, has the default one; a schema-5 file, made before the rates of a process alone, has none (its own
    rates hold for a process alone too); a file without the weight gradient's packing rate has the default one."""
    compute = measure_compute(Comm(), repeats=1, scale=10, degree=4, f=16)
    assert set(compute) == {f.name for f in dataclasses.fields(cost.Rates)} - {"cores", "comm_ranks", "step_wait_s",
                                                                              "threads"}   # (the run's)
    alone = compute["alone"]
    assert set(alone) == set(compute) - {"alone", "runtime_bytes", "sync_wait_s", "fresh_bytes_per_s"}
    assert all(v >= 0 for v in alone.values()) and alone["spmm_bytes_per_s"] > 0
    compute = {k: v for k, v in compute.items() if k != "alone"}
    assert all(v >= 0 for v in compute.values()) and compute["spmm_bytes_per_s"] > 0
    coll = {"all_reduce": {"alpha_s": 4e-4, "beta_s_per_byte": 1e-9, "messages": 2}}
    new = {"schema": SCHEMA, "world_size": 2, "cores": 2, "compute": compute | {"alone": alone}, "collectives": coll}
    old = {"schema": "spgnn.calibration/1", "world_size": 4, "collectives": coll}
    for name, data in (("new", new), ("old", old)):
        (tmp_path / name).write_text(json.dumps(data))
    assert SCHEMA == "spgnn.calibration/6"
    (tmp_path / "5").write_text(json.dumps(new | {"schema": "spgnn.calibration/5", "compute": compute}))
    five = cost.load_rates(tmp_path / "5")
    assert five.alone is None and five.on(1) == five          # not the defaults' rates of a process alone
    four = {k: v for k, v in compute.items() if k != "sync_wait_s"}
    (tmp_path / "4").write_text(json.dumps(new | {"schema": "spgnn.calibration/4", "compute": four}))
    assert cost.load_rates(tmp_path / "4").sync_wait_s == cost.DEFAULT_RATES.sync_wait_s
    unpacked = {k: v for k, v in compute.items() if k != "pack_bytes_per_s"}     # made before packing was timed
    (tmp_path / "6").write_text(json.dumps(new | {"compute": unpacked}))
    assert cost.load_rates(tmp_path / "6").pack_bytes_per_s == cost.DEFAULT_RATES.pack_bytes_per_s
    before = {k: v for k, v in four.items() if not k.startswith("spmm_ordered")}
    (tmp_path / "3").write_text(json.dumps(new | {"schema": "spgnn.calibration/3", "compute": before}))
    three = cost.load_rates(tmp_path / "3")
    assert three.spmm_ordered_nnz_s is None and three.spmm_s(10, 400, ordered=True) == three.spmm_s(10, 400)
    rates = cost.load_rates(tmp_path / "new")
    assert {k: getattr(rates, k) for k in compute} == compute and rates.comm_ranks == 2
    assert rates.on(2) == rates and rates.on(1) == rates.alone and rates.alone.alone is None
    assert {k: getattr(rates.on(1), k) for k in alone} == alone and rates.alone.comm_ranks == 2
    live = cost.with_measured(rates, {"op_s": 1.0})         # figures without "alone" keep the rates of a process alone
    assert live.op_s == 1.0 and live.alone == rates.alone
    assert cost.load_rates(tmp_path / "old") == cost.replace(cost.DEFAULT_RATES, comm_ranks=4)
    for name in ("new", "old"):
        # the collectives a file did not measure (calibrate --ops) keep the built-in figures
        assert cost.load_calibration(tmp_path / name) == cost.DEFAULT_ALPHA_BETA | {"all_reduce": (2e-4, 1e-9)}
    # a broadcast's β fitted to the bytes a member receives (schemas 1 and 2) becomes β·g/(2(g−1)) a charged byte
    bcast = {"broadcast": {"alpha_s": 1e-4, "beta_s_per_byte": 3e-9, "messages": 1}}
    for schema, g, beta in (("spgnn.calibration/2", 4, 2e-9), ("spgnn.calibration/2", 2, 3e-9), (SCHEMA, 4, 3e-9)):
        (tmp_path / "b").write_text(json.dumps({"schema": schema, "world_size": g, "collectives": bcast}))
        assert cost.load_calibration(tmp_path / "b")["broadcast"] == pytest.approx((1e-4, beta)), (schema, g)


def test_a_broadcast_costs_every_member_its_scatter_and_all_gather():
    """A broadcast of b bytes in a group of g costs each member, the root too, the transfer time of 2·(g−1)/g·b:
    one b at g = 2 (as calibrated), so a 1d stage rotation (each of the g members the root once) 2·(g−1)·b."""
    b, ab = 1000, {"broadcast": (0.0, 1e-9)}
    for g in (2, 4, 8):
        root, receiver, rotation = cost.Ledger(), cost.Ledger(), cost.Ledger()
        root.record(("forward", 0, "broadcast", "block"), b * (g - 1), 0, g - 1, 0.0, g)
        receiver.record(("forward", 0, "broadcast", "block"), 0, b, 0, 0.0, g)
        for k in range(g):
            rotation.record(("forward", 0, "broadcast", "block"), b * (g - 1) * (k == 0), b * (k > 0), 0, 0.0, g)
        assert cost.seconds(root, ab) == cost.seconds(receiver, ab) == pytest.approx(2 * (g - 1) / g * b * 1e-9)
        assert cost.seconds(rotation, ab) == pytest.approx(2 * (g - 1) * b * 1e-9)
    assert cost.charged_bytes("broadcast", 0, b, 2) == cost.charged_bytes("broadcast", b, 0, 2) == b
    assert cost.charged_bytes("all_to_all", 3, 5, 4) == 5


def test_ranks_sharing_cores_slow_compute_and_transfers():
    rates = cost.replace(cost.DEFAULT_RATES, cores=2, comm_ranks=2)
    assert [rates.cores_each(P) for P in (1, 2, 4, 8)] == [2, 1, 0.5, 0.25]
    wait = rates.step_wait_s
    assert wait > 0 and rates.wait_s(8) == wait and rates.wait_s(2) == 0
    assert rates.alpha_beta({"broadcast": (1.0, 2.0)}, 8) == {"broadcast": (4.0, 8.0)}
    assert rates.alpha_beta({"broadcast": (1.0, 2.0)}, 2) == {"broadcast": (1.0, 2.0)}
    crowded = cost.replace(rates, comm_ranks=4)         # calibrated with ranks beyond the cores: the wait is in α
    assert crowded.alpha_beta({"broadcast": (1.0, 2.0)}, 8) == {"broadcast": (2.0, 4.0)} and crowded.wait_s(8) == 0
    # an all-to-all to 7 peers waits once a call (its messages are in flight at once), an all-reduce every step
    led = cost.Ledger()
    led.record(("forward", 0, "all_to_all", "world"), 7e3, 7e3, 7, 0.0)
    led.record(("forward", 0, "all_reduce", "world"), 1e3, 1e3, 14, 0.0)
    ab = {"all_to_all": (1e-4, 0.0), "all_reduce": (1e-4, 0.0)}
    assert cost.seconds(led, ab, wait_s=wait) == pytest.approx(7e-4 + wait + 6e-4 + 6 * wait)
    # with a core each, every call waits for its peers to come from their computation: once a call, whatever its rounds
    assert cost.seconds(led, ab, sync_s=1e-3) == pytest.approx(7e-4 + 6e-4 + 2e-3)
    assert rates.sync_s(2, 2) == rates.sync_s(2, 64) == rates.sync_wait_s > 0          # 2 a machine, any P > 1
    assert rates.sync_s(1, 1) == rates.sync_s(4, 4) == 0                                # alone; beyond the cores
    # a ledger's seconds as the model charges them on a grid: 8 ranks on the 2 cores scale α-β and wait each round;
    # with a core each (2 on the machine, or 8 on machines of their own) a rank waits once a call, at its α-β
    assert cost.comm_seconds(led, (8,), ab, rates) == pytest.approx(cost.seconds(led, rates.alpha_beta(ab, 8),
                                                                                 wait_s=wait))
    each = cost.seconds(led, ab, sync_s=rates.sync_wait_s)
    assert cost.comm_seconds(led, (2,), ab, rates) == cost.comm_seconds(led, (8,), ab, rates, 1) == pytest.approx(each)


def test_each_collective_call_waits_for_its_peers_where_each_has_a_core():
    """A rank's predicted phase grows by `sync_wait_s` for each collective call of its ledger in that phase where
    each process on the machine has a core (here 2 of the 4 ranks on each 2-core machine), and not at all where 4
    share the 2 cores (there `step_wait_s` covers it)."""
    p, cls, mc, stats = _layout("1d-halo", 0, None)
    led = cost.epoch_ledger(cls, stats, p.shape, 0, mc, setup=False)
    for local, charged in ((2, True), (4, False)):
        t = {w: cost.phase_seconds(cls, stats, p.shape, 0, mc, None, cost.replace(cost.DEFAULT_RATES, sync_wait_s=w),
                                   False, local) for w in (0.0, 1e-3)}
        for ph in cost.PHASES:
            calls = sum(row[0] for (phase, *_), row in led.rows.items() if phase == ph)
            assert calls > 0 or ph == "optimizer" and mc.n_params == 0
            assert t[1e-3][ph]["seconds"] - t[0.0][ph]["seconds"] == pytest.approx(1e-3 * calls * charged)


def test_a_process_alone_on_its_machine_computes_at_its_own_rates():
    """A rank that is the only process on its machine computes at the calibration's `alone` rates (`Rates.on`);
    ranks sharing a machine at the shared ones, and a calibration without them at the shared ones everywhere."""
    p, cls, mc, stats = _layout("1d-halo", 0, None)
    shared = cost.replace(cost.DEFAULT_RATES, alone=None)
    fast = cost.replace(shared, alone=cost.replace(shared, flops_per_s=2 * shared.flops_per_s, op_s=shared.op_s / 2))
    assert fast.on(1).flops_per_s == 2 * shared.flops_per_s and fast.on(2) == fast and shared.on(1) == shared
    for local in (1, 2, 4):
        t = {r: cost.phase_seconds(cls, stats, p.shape, 0, mc, None, r, False, local)["forward"]["compute_s"]
             for r in (shared, fast)}
        assert t[fast] < t[shared] if local == 1 else t[fast] == t[shared]


def test_a_rank_given_fewer_threads_than_its_share_is_predicted_with_them(monkeypatch):
    """OMP_NUM_THREADS below a rank's share of the cores lowers its threads (`spgnn.comm.launch.share_cores`); the
    prediction of a run charged the share whatever it ran with. The report says the threads each rank ran with."""
    p, cls, mc, stats = _layout("1d-halo", 0, None)
    rates = cost.replace(cost.DEFAULT_RATES, cores=2, alone=None)
    assert [cost.replace(rates, threads=1).cores_each(P) for P in (1, 2, 4)] == [1, 1, 0.5]
    assert cost.implausible(cost.replace(rates, threads=0)) == "threads 0"
    work = cost.compute_work(cls, stats, p.shape, 0, mc)["forward"]
    for threads, cores in ((None, 2), (2, 2), (1, 1)):
        t = cost.phase_seconds(cls, stats, p.shape, 0, mc, None, cost.replace(rates, threads=threads), False, 1)
        assert t["forward"]["compute_s"] == pytest.approx(cost.compute_seconds(work, rates, cores))
    ran = {}
    for threads in (1, 2):
        monkeypatch.setattr("torch.get_num_threads", lambda threads=threads: threads)   # as the run computed
        report = Trainer(TrainConfig(epochs=1, eval_every=0), Comm(0, 1)).run(log=None)
        ran[threads] = report["predicted"]["epoch_s"]
        assert report["threads"] == {"per_rank": [threads]}
    assert ran[1] > ran[2]


def test_memory_per_rank_drops_layouts_and_refuses_when_none_fits(tmp_path, capsys):
    """spgnn cost marks the layouts over --memory-per-rank and --algo auto leaves them out; with no layout under
    it both refuse in one line."""
    g = GRAPHS["sym"]
    _, table = plan.choose(TrainConfig(algo="auto", hidden=64, partition="random"), g, 4)
    need = sorted({r["memory_bytes"] for r in table})
    assert len(need) > 1
    limit = (need[0] + need[1]) // 2
    cfg, table = plan.choose(TrainConfig(algo="auto", hidden=64, partition="random", memory_per_rank=f"{limit}B"),
                             g, 4)
    kept = [r for r in table if "dropped" not in r]
    assert kept and all(r["memory_bytes"] <= limit for r in kept)
    assert all(r["memory_bytes"] > limit for r in table if "dropped" in r) and len(kept) < len(table)
    assert cfg.algo == min(kept, key=lambda r: r["seconds"])["algo"]
    with pytest.raises(cost.SpgnnError, match="--memory-per-rank"):
        plan.choose(TrainConfig(algo="auto", hidden=64, memory_per_rank="1K"), g, 4)
    argv = ["cost", "--dataset", "cora", "--nprocs", "2,4"]
    assert cli.main(argv + ["--memory-per-rank", "1K"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("spgnn: error: --memory-per-rank") and "no layout fits" in err[-1]
    assert cli.main(argv + ["--memory-per-rank", "lots"]) == 2
    assert "--memory-per-rank takes one size with its unit" in capsys.readouterr().err
    assert cli.main(argv + ["--memory-per-rank", "1GiB"]) == 0      # GiB, as spgnn cost prints memory
    capsys.readouterr()
    assert [cost.memory_limit(t) for t in ("1.5GB", "0.25g", "2T")] == [3 << 29, 1 << 28, 2 << 40]   # were "bad"
    for bare in ("4", ""):                              # bytes, surely not meant; nothing: both were taken
        assert cli.main(argv + ["--memory-per-rank", bare]) == 2
        assert "--memory-per-rank" in capsys.readouterr().err


def test_memory_per_rank_refuses_a_named_algo_that_does_not_fit(capsys):
    """A named --algo whose predicted peak memory exceeds --memory-per-rank is refused in one line before training
    (a graph in memory, and from the command line); under the limit it plans as before."""
    g = GRAPHS["sym"]
    cfg = TrainConfig(algo="2d", grid="2x2", hidden=16, partition="random")
    need = max(cost.memory_bytes(cost.spmm.get("2d"), {"gcn": plan.block_stats(g, p.partition, "gcn")}, p.shape, r,
                                 plan.model_cost(p.cfg, g))["total"] for p in [plan.plan(cfg, 4, g)] for r in range(4))
    assert plan.plan(cost.replace(cfg, memory_per_rank=f"{need}B"), 4, g).cfg.algo == "2d"
    with pytest.raises(cost.SpgnnError, match=r"--memory-per-rank .*--algo 2d on grid 2x2 needs"):
        plan.plan(cost.replace(cfg, memory_per_rank=f"{need - 1}B"), 4, g)
    for algo, says in (("1d-halo", "--algo 1d-halo on grid 1 needs"), ("auto", "no layout fits")):
        argv = ["train", "--dataset", "cora", "--algo", algo, "--epochs", "1", "--memory-per-rank", "1K"]
        assert cli.main(argv) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(err) == 1 and err[0].startswith("spgnn: error: --memory-per-rank") and says in err[0], err


def test_cost_prints_seconds_and_memory(tmp_path, capsys):
    """spgnn cost (exact and by statistics) prints each layout's epoch seconds beside its communication and its
    memory per rank, and a line per P for the best; the epoch includes compute, the memory the runtime."""
    out = tmp_path / "cost.json"
    assert cli.main(["cost", "--dataset", "cora", "--nprocs", "2", "--output", str(out)]) == 0
    assert cli.main(["cost", "--nodes", "111059956", "--nnz", "3231371744", "--nprocs", "64"]) == 0
    text = capsys.readouterr().out
    assert "s/epoch" in text and "GiB/rank" in text
    assert "cora at P = 2:" in text and "the graph at P = 64:" in text and "GiB per rank" in text
    rows = json.loads(out.read_text())["rows"]
    assert all(r["epoch_s"] > r["comm_seconds"] == r["seconds"] and r["memory_bytes"] > cost.DEFAULT_RATES.runtime_bytes
               for r in rows)
    marked = next(line.split()[1] for line in text.splitlines() if line.endswith("<- best"))     # cora's, P = 2
    assert marked == min(rows, key=lambda r: cost.preference(r["epoch_s"], r["recv_bytes_per_rank"]))["algo"]


def test_overlap_hides_at_most_the_exchange():
    """With --overlap on, a phase takes comm + compute − hidden, hidden no more than either part, and no more than
    C/P of it where P = 4 ranks share C = 2 cores; of the exchange only its latencies and waits, not its bytes' β
    (the transport's copies are the cores' work): with α and the waits zero, nothing is hidden."""
    p, cls, mc, stats = _layout("1d-halo", 0, None, P=4)
    on = cost.phase_seconds(cls, stats, p.shape, 0, mc, overlap=True)
    off = cost.phase_seconds(cls, stats, p.shape, 0, mc, overlap=False)
    assert cost.DEFAULT_RATES.cores == 2
    bytes_only = cost.phase_seconds(cls, stats, p.shape, 0, mc, {op: (0.0, b) for op, (_, b) in
                                                                 cost.DEFAULT_ALPHA_BETA.items()},
                                    dataclasses.replace(cost.DEFAULT_RATES, step_wait_s=0.0), overlap=True)
    for ph in ("forward", "backward", "eval"):
        assert 0 < on[ph]["hidden_s"] <= min(on[ph]["comm_s"], on[ph]["compute_s"]) / 2
        assert off[ph]["hidden_s"] == 0
        assert on[ph]["seconds"] == pytest.approx(off[ph]["seconds"] - on[ph]["hidden_s"])
        assert bytes_only[ph]["comm_s"] > 0 and bytes_only[ph]["hidden_s"] == 0


def test_fresh_bytes_are_the_results_of_blocks_mapped_anew():
    """The first touch of fresh memory is charged for each result of LARGE_BYTES or more, and only for those: at
    P = 1 with 2^17 rows of width 64 (exactly 32 MiB), forward: layer 0's product and the elementwise result after
    it, its SpMM, layer 1's dropped input (no mask is made apart; the features' dropout is kept); backward: the
    gradients of layer 0's result and SpMM, of layer 1's dropped input, and layer 1's dX. Half the rows a rank
    (P = 2): none. Layers whose bias and activation work in place: no elementwise result."""
    from spgnn.memory import LARGE_BYTES

    n, block = LARGE_BYTES // 4 // 64, LARGE_BYTES
    mc = cost.ModelCost(((cost.Dense(128, 64), cost.Spmm(64, "gcn", True)),
                         (cost.Dense(64, 8), cost.Spmm(8, "gcn", True))), classes=8, n_params=128 * 64 + 64 * 8,
                        dropped=(True, True))
    cls = spmm.get("1d-halo")
    work = cost.compute_work(cls, {"gcn": cost.BlockStats.expected(n, 16 * n, 1)}, (1,), 0, mc)
    assert work["forward"]["fresh_bytes"] == 4 * block and work["backward"]["fresh_bytes"] == 4 * block
    assert work["eval"]["fresh_bytes"] == 3 * block and work["optimizer"]["fresh_bytes"] == 0
    rates = dataclasses.replace(cost.DEFAULT_RATES, fresh_bytes_per_s=1e9)
    assert cost.compute_seconds(work["forward"], rates, 1) - cost.compute_seconds(
        work["forward"], dataclasses.replace(rates, fresh_bytes_per_s=math.inf), 1) == pytest.approx(4 * block / 1e9)
    halves = [cost.compute_work(cls, {"gcn": cost.BlockStats.expected(n, 16 * n, 2)}, (2,), r, mc) for r in (0, 1)]
    assert all(w[ph]["fresh_bytes"] == 0 for w in halves for ph in cost.PHASES)
    # where layer 0's bias and activation work in place (`ModelCost.in_place`), no result follows its product
    own = cost.compute_work(cls, {"gcn": cost.BlockStats.expected(n, 16 * n, 1)}, (1,), 0,
                            dataclasses.replace(mc, in_place=(True, True)))
    assert own["forward"]["fresh_bytes"] == 3 * block and own["eval"]["fresh_bytes"] == 2 * block
    assert own["backward"]["fresh_bytes"] == 4 * block


def test_a_gcn_or_sage_stack_changes_its_results_in_place():
    """GCN and SAGE layers return results of their own (`Layer.fresh_output`), so a stack applies their ReLU in place
    where no batch norm follows them (the last layer, which no norm follows, too), and the cost model knows it; GIN's
    as before."""
    from spgnn.config import TrainConfig

    def in_place(**kw):
        return cost.ModelCost.of_config(TrainConfig(hidden=16, layers=3, **kw), 20, 4).in_place

    assert in_place(model="gcn") == in_place(model="sage") == (True, True, True)
    assert in_place(model="gin") == (False, False, False)
    assert in_place(model="gcn", batch_norm=True) == (False, False, True)


def test_the_blocked_weight_gradients_copies_and_packing_are_charged():
    """The backward of a product whose weight gradient goes by blocks through oneDNN (`spgnn.dense.blocked`: W of
    WIDE entries or more, not narrow) also reads and writes the transposed copies of the narrower operand's blocks,
    8·rows·min(f_in, f_out) bytes, and oneDNN's packing of the wider one, 8·rows·max(f_in, f_out) bytes at its own
    rate; a smaller W and a narrow one (f_out < NARROW) copy and pack nothing."""
    from spgnn.dense import NARROW, WIDE

    n = 1000
    wide, small, narrow = cost.Dense(767, 64), cost.Dense(16, 16), cost.Dense(767, NARROW - 1)
    assert 767 * 64 >= WIDE > 16 * 16 and 767 * (NARROW - 1) >= WIDE
    stats = {"gcn": cost.BlockStats.expected(n, 16 * n, 1)}
    cls = spmm.get("1d-halo")
    for layers, copies, pack in ((((wide,), (small,)), 8 * n * 64, 8 * n * 767), (((small,), (narrow,)), 0, 0)):
        mc = cost.ModelCost(layers, classes=8, n_params=0, dropped=(False, False))
        work = cost.compute_work(cls, stats, (1,), 0, mc)
        dense = [d for ops in layers for d in ops]
        plain = sum(4 * n * (d.f_in + d.f_out) * (2 if layer else 1) for layer, d in enumerate(dense))
        assert work["backward"]["dense_bytes"] == plain + copies
        assert work["backward"]["pack_bytes"] == pack and work["forward"]["pack_bytes"] == 0
        rates = cost.DEFAULT_RATES
        slower = dataclasses.replace(rates, pack_bytes_per_s=rates.pack_bytes_per_s / 2)
        gained = cost.compute_seconds(work["backward"], slower, 1) - cost.compute_seconds(work["backward"], rates, 1)
        assert gained == pytest.approx(pack / rates.pack_bytes_per_s)


def test_a_column_split_products_partial_sum_is_the_working_memory():
    """In 2d on 2x2 the forward's H·W holds a full-width partial sum, its contiguous copy for the reduce-scatter
    and the column block it returns; in a row layout the working memory stays one gradient of the widest
    activation (column-split widths halve it)."""
    for algo, grid in (("2d", "2x2"), ("1d-halo", None)):
        p, cls, mc, stats = _layout(algo, 0, grid)
        for r in range(4):
            s = cost.local_share(cls, stats["gcn"], p.shape, r)
            working = cost.memory_bytes(cls, stats, p.shape, r, mc)["working"]
            widest = 4 * s.rows * s.width(16)
            assert working == (4 * s.rows * (2 * 16 + s.width(16)) if grid else widest) and working >= widest
            assert (s.C, s.width(16)) == ((2, 8) if grid else (1, 16))
