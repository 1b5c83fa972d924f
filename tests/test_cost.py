"""The cost model predicts every byte, message and call each rank records in a training step and an
evaluation, for every algorithm and grid, P = 1…4, symmetric and directed graphs, GCN and GraphSAGE."""

import json
from dataclasses import replace

import numpy as np
import pytest

from spgnn import cli, cost, plan, spmm
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.graph.datasets import load_dataset
from spgnn.partition.partition import Partition, make_parts
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph

GRAPHS = {"sym": small_graph(n=50, f=7, seed=11), "dir": small_graph(n=50, f=7, seed=12, directed=True)}


def _configs(P):
    # hidden 16 > 7 features: GCN's first product is Â·X, which has no backward; SAGE's is Â·(X·W)
    for gname, model, hidden in (("sym", "gcn", 16), ("dir", "sage", 6)):
        for algo, c in (("1d", 0), ("1d-halo", 0), ("sar", 0), ("1.5d", 1), ("1.5d", 2)):
            if P % max(c, 1) == 0:
                yield gname, TrainConfig(model=model, algo=algo, replication=c, hidden=hidden, layers=3,
                                         partition="random", feature_norm="none")


def _measure(comm):
    out = []
    for gname, cfg in _configs(comm.world_size):
        comm.ledger.reset()
        t = Trainer(cfg, comm, graph=GRAPHS[gname])
        t.step(0)
        t.evaluate()
        out.append(({k: tuple(v[:4]) for k, v in t.comm.ledger.rows.items()}, dict(t.comm.ledger.sizes)))
    return out


@pytest.mark.parametrize("P", [2, 3, 4])
def test_predicted_ledger_equals_measured(P):
    measured = run_local(_measure, P)
    for k, (gname, cfg) in enumerate(_configs(P)):
        predicted = plan.predict(cfg, GRAPHS[gname], P)
        for rank in range(P):
            want = {key: tuple(v[:4]) for key, v in predicted[rank].rows.items()}
            rows, sizes = measured[rank][k]
            assert rows == want, f"{cfg.algo} c={cfg.replication} {cfg.model} {gname} rank {rank}"
            # the group sizes a broadcast's charge is computed with are those of the groups the run used
            assert predicted[rank].sizes and {g: sizes[g] for g in predicted[rank].sizes} == predicted[rank].sizes


def test_expected_statistics_match_a_random_graph():
    """The statistics-only model (n, nnz) is close to the exact halo of a uniformly random graph."""
    from spgnn.graph.datasets import load_dataset

    g = load_dataset("sbm:4000:1")          # one block: uniformly random edges
    P = 8
    part = Partition(make_parts("random", g.adj, P, seed=0), P)
    exact = cost.BlockStats.of(part.renumber(g.adj), part).halo.sum()
    expected = cost.BlockStats.expected(g.n, g.nnz, P).halo.sum()
    assert abs(expected - exact) / exact < 0.05, (expected, exact)


def test_auto_picks_the_lowest_predicted_time(tmp_path):
    """--algo auto compares every modelled algorithm and grid, and its choice follows the α-β figures:
    with all-to-all made expensive it leaves 1d-halo."""
    g = small_graph(n=64, f=4, avg_degree=40, seed=2)
    cfg, table = plan.choose(TrainConfig(algo="auto", hidden=64, partition="random"), g, 4)
    assert [{k: r[k] for k in ("algo", "replication", "grid")} for r in table] == cost.candidates(4)
    assert {"algo": "2d", "replication": 0, "grid": "2x2"} in cost.candidates(4)
    best = min(table, key=lambda r: r["seconds"])
    assert (cfg.algo, cfg.replication, cfg.grid) == (best["algo"], best["replication"], best["grid"])
    slow_a2a = dict(cost.DEFAULT_ALPHA_BETA, all_to_all=(1.0, 1e-3))
    assert plan.choose(cfg, g, 4, slow_a2a)[0].algo != "1d-halo"


def test_auto_breaks_a_tie_by_the_bytes_received(monkeypatch):
    """With free communication (no α, β, nor waits), layouts that compute alike are predicted equally fast; --algo
    auto then takes the one whose ranks receive the fewest bytes, not the first by name."""
    g = small_graph(n=256, f=8, avg_degree=6, seed=3)
    free = {op: (0.0, 0.0) for op in cost.DEFAULT_ALPHA_BETA}
    monkeypatch.setattr(cost, "DEFAULT_RATES", cost.replace(cost.DEFAULT_RATES, sync_wait_s=0.0))
    cfg, table = plan.choose(TrainConfig(algo="auto", hidden=16, partition="random"), g, 2, free)
    fastest = min(r["seconds"] for r in table)
    tied = [r for r in table if cost.preference(r["seconds"], 0)[0] == cost.preference(fastest, 0)[0]]
    assert len({r["recv_bytes_per_rank"] for r in tied}) > 1, tied      # a tie the bytes decide
    least = min(tied, key=lambda r: r["recv_bytes_per_rank"])
    assert min(tied, key=lambda r: r["algo"])["algo"] != least["algo"]  # not what the name would pick
    assert cfg.algo == least["algo"]


def test_planning_reproduces_the_expected_crossover():
    """At cluster scale (ogbn-products' size by statistics, f = 128): on a dense graph at moderate P the
    model prefers replication (1.5D) or a 3D grid, which cut H's broadcast; on the sparse graph 3D is the
    fastest at P = 1024 (CAGNET's finding); the sparsity-aware halo exchange receives the fewest bytes at
    P = 4096 but pays a latency for each of its P − 1 peers; 1D broadcast moves n·f a product."""
    model = cost.ModelCost.of_config(TrainConfig(hidden=128, layers=2), 128, 128)
    dense = cost.plan_table(100_000, 50_000_000, [64], model)
    sparse = cost.plan_table(2_449_029, 123_718_280, [1024, 4096], model)

    def best(rows, algos=None, P=None, key="seconds"):
        return min((r for r in rows if (algos is None or r["algo"] in algos) and P in (None, r["P"])),
                   key=lambda r: r[key])

    assert best(dense)["algo"] in ("1.5d", "3d")
    assert best(dense, ["1d", "1d-halo", "1.5d"])["algo"] == "1.5d"
    assert best(sparse, P=1024)["algo"] == "3d"
    assert best(sparse, P=4096, key="recv_bytes_per_rank")["algo"] in ("1d-halo", "sar")
    halo = best(sparse, ["1d-halo"], P=4096)
    assert halo["seconds"] > best(sparse, P=4096)["seconds"]
    oned = next(r for r in sparse if r["algo"] == "1d" and r["P"] == 4096)
    assert oned["recv_bytes_per_rank"] > 0.9 * 2_449_029 * 128 * 4 * 3     # ≈ n·f words a SpMM; Â·X has no backward


def test_train_with_algo_auto(tmp_path):
    """``spgnn train --algo auto`` on 4 processes runs the candidate its report predicts fastest (with a calibration
    whose all-to-alls are dear, not the default 1d-halo) and trains the single-process loss curve."""
    train = ["train", "--dataset", "sbm:500:4", "--hidden", "64", "--epochs", "2", "--eval-every", "0", "--quiet"]
    dear = {op: {"alpha_s": 1.0 if op == "all_to_all" else 1e-4, "beta_s_per_byte": 1e-9, "messages": 1}
            for op in cost.DEFAULT_ALPHA_BETA}
    (tmp_path / "dear.json").write_text(json.dumps({"schema": "spgnn.calibration/1", "world_size": 2,
                                                    "collectives": dear}))
    assert cli.main(train + ["--algo", "auto", "--nprocs", "4", "--calibration", str(tmp_path / "dear.json"),
                             "--output", str(tmp_path / "auto.json")]) == 0
    assert cli.main(train + ["--output", str(tmp_path / "one.json")]) == 0
    auto, one = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("auto", "one"))
    best = min(auto["predicted"]["auto_compared"], key=lambda r: r["seconds"])
    assert auto["config"]["algo"] == best["algo"] != "1d-halo", auto["predicted"]["auto_compared"]
    assert (auto["config"]["grid"], auto["config"]["replication"]) == (best["grid"], best["replication"])
    assert np.prod(auto["grid"]["shape"]) == 4
    np.testing.assert_allclose([e["loss"] for e in auto["epochs"]], [e["loss"] for e in one["epochs"]], rtol=1e-5)


def test_a_group_of_one_costs_no_time():
    """At P = 1 every collective is a group of one, which Comm answers in place; the model charged them α, waits and
    syncs (1d-halo predicted 42% slower than sar over the same zero messages, and --algo auto picked sar)."""
    model = cost.ModelCost.of_config(TrainConfig(model="gcn", layers=2, hidden=16), 1433, 7)
    rows = cost.plan_table(2708, 10556, [1, 2], model)
    assert {r["comm_seconds"] for r in rows if r["P"] == 1} == {0.0}
    assert all(r["comm_seconds"] > 0 for r in rows if r["P"] == 2)


def test_layouts_that_cannot_be_are_left_out_not_fatal(capsys):
    """A layout of more row blocks than nodes aborted --algo auto and spgnn cost (naming an algorithm nobody asked
    for); a P at which nothing fits --memory-per-rank discarded spgnn cost's whole table."""
    picked = plan.plan(TrainConfig(dataset="rmat:3", algo="auto"), 16)
    assert picked.cfg.algo != "1d" and picked.cfg.algo in {"1.5d", "2d", "3d"}
    assert cli.main(["cost", "--nodes", "1000000", "--nnz", "20000000", "--nprocs", "4,16", "--memory-per-rank",
                     "1G"]) == 0
    out = capsys.readouterr().out
    assert "the graph at P = 4: no layout fits --memory-per-rank (the least needs" in out
    assert "the graph at P = 16: " in out and "<- best" in out
    flags = out.split("the graph at P = 16: ")[1].split(" GiB per rank (")[1].split(")")[0].split()
    assert flags[0] == "--algo" and len(flags) > 2         # the summary's layout as the flags train takes (its grid)
    args = cli.build_parser().parse_args(["train", *flags])
    TrainConfig(algo=args.algo, grid=args.grid, replication=args.replication).validate()


def test_cost_of_a_partitioned_folder_is_of_its_parts(tmp_path, capsys):
    """spgnn cost --dataset DIR (a dataset spgnn train accepts) loaded the folder as a dataset: 'found neither an
    edge list ...'. Its layouts are those of as many row blocks as it has parts."""
    folder = tmp_path / "cora2"
    assert cli.main(["partition", "--dataset", "cora", "--nparts", "2", "--method", "block", "--output", str(folder),
                     "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["cost", "--dataset", str(folder), "--nprocs", "2,4"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert {r[1] for r in rows if r[0] == "2"} <= {"1d", "1d-halo", "sar"}         # 2 row blocks: its 2 parts
    assert {r[1] for r in rows if r[0] == "4"} <= {"1.5d", "2d", "3d"} and f"{folder} at P = 4: " in out
    # a P at which no layout has its row blocks is said in its line, where it ended the whole command; every P, one line
    assert cli.main(["cost", "--dataset", str(folder), "--nprocs", "2,3"]) == 0
    out = capsys.readouterr().out
    assert f"{folder} at P = 2: " in out and f"{folder} at P = 3: no layout runs (each needs more row blocks" in out
    assert cli.main(["cost", "--dataset", str(folder), "--nprocs", "3,5"]) == 2
    assert capsys.readouterr().err.strip() == f"spgnn: error: no layout runs on 3, 5 processes with these data: " \
        f"{cost.NO_LAYOUT}"


def test_statistics_count_the_diagonal_an_adjacency_adds(monkeypatch):
    """By statistics, GCN's Â = D^-½(A + I)D^-½ was modelled with A's nonzeros only (10,556 on cora against 13,264
    exactly); GraphSAGE's mean D⁻¹A adds none."""
    seen, expected = [], cost.BlockStats.expected.__func__

    def spy(cls, n, nnz, P, *args, **kwargs):
        seen.append(nnz)
        return expected(cls, n, nnz, P, *args, **kwargs)

    monkeypatch.setattr(cost.BlockStats, "expected", classmethod(spy))
    for model, nnz in (("gcn", 10556 + 2708), ("sage", 10556)):
        seen.clear()
        cost.plan_table(2708, 10556, [2], cost.ModelCost.of_config(TrainConfig(model=model), 1433, 7))
        assert set(seen) == {nnz}, model


def test_gin_keeps_its_input_and_makes_its_products_inputs():
    """GIN's (1 + ε)·H keeps H for ε's gradient beside its MLP's input Z = Â·H + (1 + ε)·H, which ε makes: autograd
    kept both (47.7 MiB on citeseer at P = 2 against 24.1 predicted), so --memory-per-rank admitted layouts that do
    not fit. On cora at P = 1, with and without dropout, `saved_bytes` is within 20% of `SavedTensorMeter`'s peak
    (docs/cost-model.md), the features are held, not saved again, while Z is; the working set holds two tensors
    of the features' width; and layer 0's backward makes the input gradient of both its dense products."""
    graph = load_dataset("cora")
    for dropout in (0.5, 0.0):
        t = Trainer(TrainConfig(model="gin", dataset="cora", dropout=dropout), Comm(), graph=graph)
        t.step(0)
        model, stats = t.costs
        cls, shape = type(t.algo), t.grid.shape
        predicted = cost.saved_bytes(cls, stats, shape, 0, model)
        assert abs(predicted / t.meter.peak_bytes - 1) <= 0.20, (dropout, predicted, t.meter.peak_bytes)
        memory, features = cost.memory_bytes(cls, stats, shape, 0, model), 4 * graph.n * graph.num_features
        assert memory["saved"] == predicted - (0 if dropout else features) and memory["working"] >= 2 * features
    work = cost.compute_work(cls, stats, shape, 0, model)["backward"]
    dense = [op for ops in model.layers for op in ops if isinstance(op, cost.Dense)]
    assert work["flops"] == 2 * 2 * graph.n * sum(op.f_in * op.f_out for op in dense)
    # its elementwise passes (1 + ε)·H + Â·H, declared: 3 tensors read and 2 written forward; 3 and 1 backward for
    # ε, 3 and 2 more for dH past layer 0
    passes = [op for ops in model.layers for op in ops if isinstance(op, cost.Elementwise)]
    assert [(op.reads, op.writes, op.backward_reads, op.backward_writes) for op in passes] == [(3, 2, 3, 1),
                                                                                              (3, 2, 6, 3)]
    without = replace(model, layers=tuple(tuple(op for op in ops if not isinstance(op, cost.Elementwise))
                                          for ops in model.layers))
    with_, less = (cost.compute_work(cls, stats, shape, 0, m) for m in (model, without))
    added = {ph: with_[ph]["dense_bytes"] - less[ph]["dense_bytes"] for ph in ("forward", "backward")}
    assert added == {"forward": 4 * graph.n * sum(5 * op.width for op in passes),
                     "backward": 4 * graph.n * sum((op.backward_reads + op.backward_writes) * op.width
                                                   for op in passes)}


def test_statistics_keep_the_adjacency_s_asymmetry(monkeypatch):
    """By statistics every Â was taken as symmetric, so GraphSAGE's mean D⁻¹A (not symmetric) was planned without
    the blocks of Âᵀ that 1d, 1.5d, 2d and 3d keep: its graph memory 1.27-1.38× under. The graph's A is symmetric
    (both directions counted), Â is as its adjacency keeps it."""
    seen = {}
    layout_bytes = cost.layout_bytes

    def spy(cls, stats, *args, **kwargs):
        seen.setdefault(cls.name, set()).add(stats.symmetric)
        return layout_bytes(cls, stats, *args, **kwargs)

    monkeypatch.setattr(cost, "layout_bytes", spy)
    for model, symmetric in (("gcn", True), ("sage", False)):
        seen.clear()
        cost.plan_table(10_000, 100_000, [8], cost.ModelCost.of_config(TrainConfig(model=model), 64, 8))
        assert {"1d", "1.5d", "2d", "3d"} <= seen.keys() and set().union(*seen.values()) == {symmetric}, (model, seen)
    stats = {"mean": cost.BlockStats.expected(10_000, 100_000, 4, symmetric=False)}
    model = cost.ModelCost.of_config(TrainConfig(model="sage"), 64, 8)
    oned = cost.spmm.get("1d")
    assert cost.memory_bytes(oned, stats, (4, 1), 0, model)["graph"] > \
        cost.memory_bytes(oned, {"mean": replace(stats["mean"], symmetric=True)}, (4, 1), 0, model)["graph"]


@pytest.mark.parametrize("options", [dict(model="gcn"), dict(model="sage", batch_norm=True), dict(model="gat"),
                                     dict(model="gat", heads=3, dropout=0.0, batch_norm=True), dict(model="gin"),
                                     dict(model="appnp", steps=3), dict(model="gcnii", layers=4, batch_norm=True),
                                     dict(model="gcn", precompute="off", dropout=0.0, layers=1)])
def test_a_model_s_costs_are_those_of_its_built_weights(options):
    """`ModelCost.of_config` builds the model without its weights' storage (spgnn cost made a 6.6 GB model to plan a
    run, and ran out of memory at --hidden 100000000000): its declared costs and parameter counts are those of the
    model built on the CPU."""
    from spgnn.layers.stack import config_model

    cfg = TrainConfig(**({"hidden": 16, "layers": 3} | options))
    assert cost.ModelCost.of_config(cfg, 24, 5) == cost.ModelCost.of(config_model(cfg, 24, 5), cfg.precompute == "on")


def test_a_plan_of_any_width_allocates_no_weights(capsys):
    """--hidden and --features of 2²⁰ are a model of 4 TiB of weights: spgnn cost ran out of memory building it (and
    advised spgnn cost --memory-per-rank); now it is planned, its parameters counted."""
    assert cli.main(["cost", "--nodes", "100000", "--nnz", "1000000", "--nprocs", "4", "--features", str(2**20),
                     "--hidden", str(2**20), "--layers", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    gib = float(out.split("the graph at P = 4: ")[1].split(" GiB per rank")[0].split(", ")[1])
    assert gib > 16 * (2**40 + 2**20 * 128) / 2**30        # its weights with their gradients and Adam's moments


@pytest.mark.parametrize("flags, said", [
    (["--nodes", "1e30", "--nnz", "1e31"], "--nodes 1e+30: spgnn cost models graphs of at most 2^40 nodes"),
    (["--nodes", "1e18", "--nnz", "1e19"], "--nodes 1e+18: spgnn cost models graphs of at most 2^40 nodes"),
    (["--nodes", "1e12", "--nnz", "1e15"], "--nnz 1e+15: spgnn cost models graphs of at most 2^48 nonzeros"),
    (["--nodes", "1000", "--nnz", "10.7"], "--nodes 1000 --nnz 10.7: n must be a whole number of at least 1 and nnz "
                                           "between 0 and n², a whole number too"),
    (["--nodes", "1000", "--nnz", "10000", "--layers", "100000"], "--layers 100000: spgnn cost models at most 128 "
                                                                   "layers"),
    (["--nodes", "1000", "--nnz", "10000", "--hidden", "100000000000"], "--hidden 100000000000: spgnn cost models "
                                                                          "widths of at most 2^24"),
    (["--nodes", "1000", "--nnz", "10000", "--model", "gat", "--heads", "100000000"], "--heads 100000000: spgnn cost "
                                                                                       "models widths of at most 2^24"),
    (["--nodes", "1000", "--nnz", "10000", "--model", "appnp", "--steps", "100000"], "the model makes 100003 products "
                                                                                      "a step: spgnn cost models at "
                                                                                      "most 1024"),
])
def test_a_graph_or_model_beyond_the_model_s_range_is_one_line(flags, said, capsys):
    """--nodes 1e30 was an OverflowError, 1e18 meaningless figures, --nnz 10.7 taken as 10, --layers 100000 and
    APPNP's --steps 100000 never finished, --hidden 100000000000 an out-of-memory message, GAT's --heads 10^8 a
    traceback."""
    assert cli.main(["cost", "--nprocs", "64", "--quiet", *flags]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"spgnn: error: {said}"), line


def test_a_layer_that_reads_its_weights_is_costed_on_the_cpu(monkeypatch):
    """A layer reading its weights' values as it is costed (float(), .item(), .numpy() fail on torch's meta device)
    made spgnn cost and --algo auto a traceback: it is costed on the CPU, to the same figures."""
    from spgnn.layers.gcn import GCNConv

    cfg = TrainConfig(model="gcn", hidden=16, layers=2)
    before = cost.ModelCost.of_config(cfg, 30, 4)
    costs = GCNConv.costs

    def reading(self, *args, **kwargs):
        float(self.weight.detach().sum())
        return costs(self, *args, **kwargs)

    monkeypatch.setattr(GCNConv, "costs", reading)
    assert cost.ModelCost.of_config(cfg, 30, 4) == before


def test_messages_name_the_grid_as_given():
    """2d's grid is R×C×1 inside (SUMMA's, of one fiber): messages said "--algo 2d on grid 2x2x1" of --grid 2x2."""
    with pytest.raises(cli.SpgnnError, match=r"^--memory-per-rank 1 KiB: --algo 2d on grid 2x2 needs [0-9.]+ MiB a "
                                             r"rank"):             # (1K was said as 9.54e-07 GiB)
        plan.plan(TrainConfig(algo="2d", grid="2x2", memory_per_rank="1K"), 4, small_graph(n=40))
    assert [cost.size_text(b) for b in (1000, 1024, 1536 * 2**20, 1000 * 2**20, 1023.9 * 2**30, 2**42)] == \
        ["1000 B", "1 KiB", "1.5 GiB", "1000 MiB", "1024 GiB", "4 TiB"]
    with pytest.raises(cli.SpgnnError, match=r"--algo 3d on grid 2x1x2 needs"):
        plan.plan(TrainConfig(algo="3d", grid="2x1x2", memory_per_rank="1K"), 4, small_graph(n=40))


def test_the_docs_statistics_commands_count_an_ogb_graphs_edges_both_ways(monkeypatch):
    """`spgnn cost --nnz` counts both directions of an undirected graph's edges: a command of the docs for a graph
    of an OGB dataset's published n gives its nnz as bench_comm's plans do (ogbn-papers100M's command once gave its
    1.6e9 edges once, half the graph)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    from bench_comm import OGB
    nnz_of = {n: nnz for n, nnz, _ in OGB.values()}
    given = [(int(n), int(nnz)) for doc in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
             for n, nnz in re.findall(r"spgnn cost --nodes (\d+) --nnz (\d+)", doc.read_text())]
    assert {n for n, _ in given} >= set(nnz_of), given
    assert all(nnz == nnz_of[n] for n, nnz in given if n in nnz_of), given


class _Machines:
    """A stand-in for the Comm of rank 0 of a job whose processes lie on `machines` (one entry a rank): what
    `launch.peers` gathers."""

    def __init__(self, machines):
        self.rank, self.world_size, self.machines = 0, len(machines), machines

    def all_gather_object(self, obj, group=None):
        return [((host, 0), (0,)) for host in self.machines]


def test_auto_weighs_the_layouts_on_the_machines_of_the_run():
    """--algo auto times each layout with as many ranks a machine as the job has (`plan.machine_ranks`): cora at
    P = 16 on 8 machines of 2 ranks. It took all 16 for one machine, time-sharing its 2 cores, and picked 1.5d, which
    the model itself puts at 1.6x 1d-halo's epoch on the run's machines."""
    g = load_dataset("cora", None)
    cfg = TrainConfig(dataset="cora", algo="auto", partition="random")
    comm = _Machines([f"node{i // 2}" for i in range(16)])
    assert plan.machine_ranks(comm) == 2
    chosen, _, shape, compared = plan.open_parts(cfg, comm, graph=g)
    model, stats_of = plan.model_cost(cfg, g), plan.graph_stats(cfg, g)
    epoch = {}
    for option in cost.candidates(16):
        cls = spmm.get(option["algo"])
        layout = cls.grid_for(16, **option)
        if (stats := stats_of(cls, layout, model.adjacencies)) is not None:
            row = cost.predict_layout(cls, stats, layout, model, None, cost.DEFAULT_RATES, cost._overlaps(cls),
                                      ranks_per_node=2)
            epoch[option["algo"], layout] = row["epoch_s"], row["recv_bytes_per_rank"]
    assert (chosen.algo, tuple(shape)) == min(epoch, key=lambda k: cost.preference(*epoch[k]))
    assert sorted(r["epoch_s"] for r in compared) == sorted(e for e, _ in epoch.values())
