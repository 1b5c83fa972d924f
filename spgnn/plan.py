"""What a run on P processes will be, decided before any layer is built: ``--algo auto`` resolved by the cost
model, the grid shape, and the partition into as many parts as the grid has row blocks (in memory, from a
partitioned dataset folder, or written once to the cache); and the cost model's prediction of a run.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from . import cost, progress, spmm
from .comm import launch
from .comm.agree import agree, on_rank0
from .comm.comm import Comm
from .comm.grid import format_grid
from .config import TrainConfig
from .errors import SpgnnError
from .graph.adjacency import get_adjacency, normalize
from .graph.datasets import load_dataset
from .graph.graph import Graph
from .partition import partitioned
from .partition.partition import file_sha256, fixed_parts, get_partitioner, make_partition, saved_meta
from .progress import stage


@dataclass
class Plan:
    """What a run on P processes will be: the graph, the config with ``--algo auto`` resolved (and the
    candidates it compared), the checked partition into as many parts as the grid has block rows, and
    the grid shape."""

    graph: Graph
    cfg: TrainConfig
    partition: object
    shape: tuple
    compared: list | None = None


def _calibration(cfg: TrainConfig):
    return cost.load_calibration(cfg.calibration) if cfg.calibration else None


def grid_text(cls, shape) -> str:
    """The grid `shape` of `cls` as ``--grid`` gives it: 2d's R×C×1 (SUMMA's of one fiber) as RxC."""
    return format_grid(shape[:getattr(cls, "dims", len(shape))])


def _shape(cls, P: int, cfg: TrainConfig, n: int) -> tuple:
    """The grid shape of `cls` on P processes under cfg's options, checked against a graph of n nodes."""
    return _fits(cls, cls.grid_for(P, **{o: getattr(cfg, o) for o in spmm.options()}), n)


def _fits(cls, shape: tuple, n: int) -> tuple:
    """`shape`, when its row blocks are no more than the graph's n nodes; else SpgnnError."""
    if cls.num_parts(shape) > n:
        raise SpgnnError(f"--algo {cls.name} on grid {grid_text(cls, shape)} splits the graph into "
                         f"{cls.num_parts(shape)} row blocks but it has only {n} nodes: use fewer processes")
    return shape


def block_stats(g: Graph, partition, norm) -> cost.BlockStats:
    """The exact block statistics of g's adjacency normalised by the adjacency `norm`, renumbered by `partition`
    (symmetric where the layouts treat it so: g's A is and `norm` keeps it so)."""
    return cost.BlockStats.of(partition.renumber(normalize(g.adj, norm)), partition,
                              g.is_symmetric and get_adjacency(norm).symmetric)


def model_cost(cfg: TrainConfig, info, costs_of=None) -> cost.ModelCost:
    """The model's `cost.ModelCost` on a graph `info` (a Graph or GraphInfo): `costs_of(info)`, or the built-in
    model cfg describes."""
    return costs_of(info) if costs_of is not None else cost.ModelCost.of_config(cfg, info.num_features,
                                                                             info.num_classes)


def graph_stats(cfg: TrainConfig, g: Graph):
    """`cost.choose`'s statistics for graph `g` in memory: cfg's partition into the layout's row blocks, in cfg's
    node order (each count of blocks partitioned and each normalisation measured once, however many layouts share
    it); None for a layout of more row blocks than nodes, or than a partition given already has (not compared)."""
    stats, partitions, given = {}, {}, fixed_parts(cfg.partition)

    def stats_of(cls, shape, adjacencies):
        B = cls.num_parts(shape)
        if B > g.n or given not in (None, B):
            return None
        if B not in partitions:
            partitions[B] = make_partition(cfg.partition, g.adj, B, cfg.seed, cfg.node_order)
        for a in adjacencies:
            if (B, a) not in stats:
                stats[B, a] = block_stats(g, partitions[B], a)
        return {a: stats[B, a] for a in adjacencies}
    return stats_of


def choose(cfg: TrainConfig, g: Graph, P: int, alpha_beta=None, costs_of=None,
           ranks_per_node: int | None = None) -> tuple[TrainConfig, list[dict]]:
    """`cost.choose` for graph `g` in memory: (cfg with the predicted fastest algorithm and grid, the table)."""
    given, runs = fixed_parts(cfg.partition), f"it compares that runs --model {cfg.model}"
    hint = f": the partition given holds {given} parts, and no layout {runs} has {given} row blocks; run on {given} " \
        f"processes, or name an --algo whose grid has {given} row blocks" if given else \
        f": the graph has {g.n} nodes, fewer than the row blocks of every layout {runs}; use at most {g.n} " \
        "processes, or name an --algo and its grid"
    return cost.choose(cfg, P, graph_stats(cfg, g), model_cost(cfg, g, costs_of), alpha_beta, hint, ranks_per_node)


def check_memory(cfg: TrainConfig, P: int, shape, stats_of, info, costs_of=None) -> None:
    """With ``--memory-per-rank`` and a named ``--algo`` (auto leaves out what does not fit itself): SpgnnError
    when the predicted peak memory of a rank of that layout (`cost.memory_bytes`, the largest over the P ranks)
    exceeds it. `stats_of(cls, shape, adjacencies)` as `cost.choose` takes it."""
    limit = cost.memory_limit(cfg.memory_per_rank)
    if limit is None or cfg.algo == "auto":
        return
    cls = spmm.get(cfg.algo)
    what = f"--algo {cfg.algo} on grid {grid_text(cls, shape)}"
    try:
        model = model_cost(cfg, info, costs_of)
    except cost.Undeclared:
        model = None
    if model is None or not model.modelled_on(cls):
        raise SpgnnError(f"--memory-per-rank: the cost model cannot predict the memory of {what} (an algorithm or "
                         "layers that declare no cost): drop --memory-per-rank")
    stats = stats_of(cls, shape, model.adjacencies)
    rates, overlap = cost.load_rates(cfg.calibration), getattr(cfg, "overlap", "on") == "on" and cost._overlaps(cls)
    need = max(cost.memory_bytes(cls, stats, shape, r, model, rates, overlap)["total"] for r in range(P))
    if need > limit:
        raise SpgnnError(f"--memory-per-rank {cost.size_text(limit)}: {what} needs {cost.size_text(need)} a rank "
                         f"(predicted; spgnn cost shows each layout's): use more processes, a layout that needs less "
                         "(--algo auto picks the fastest that fits) or allow more memory")


def resolve(cfg: TrainConfig, P: int, g, costs_of=None, ranks_per_node: int | None = None) -> tuple[TrainConfig,
                                                                                                    tuple, list | None]:
    """(cfg with --algo auto resolved, the grid shape, what auto compared) for graph `g` on P processes,
    `ranks_per_node` of them on a machine (default all)."""
    compared = None
    if cfg.algo == "auto":
        cfg, compared = choose(cfg, g, P, _calibration(cfg), costs_of, ranks_per_node)
    return cfg, _shape(spmm.get(cfg.algo), P, cfg, g.n), compared


def plan(cfg: TrainConfig, P: int, graph=None, parts=None, costs_of=None, ranks_per_node: int | None = None) -> Plan:
    """The run's `Plan` for a graph held in memory (`parts` overrides cfg.partition), `ranks_per_node` of the P
    processes on a machine (default all). Raises SpgnnError for bad data, options or partitions, before any
    communication."""
    g = graph if graph is not None else load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
    cfg, shape, compared = resolve(cfg, P, g, costs_of, ranks_per_node)
    partition = make_partition(cfg.partition if parts is None else parts, g.adj,
                               spmm.get(cfg.algo).num_parts(shape), cfg.seed, cfg.node_order)
    check_memory(cfg, P, shape, lambda cls, shape, adjacencies: {a: block_stats(g, partition, a) for a in adjacencies},
                 g, costs_of)
    return Plan(g, cfg, partition, shape, compared)


def predict(cfg: TrainConfig, graph, P: int, epochs: int = 1, evals: int = 1, setup: bool = True) -> list:
    """One predicted ledger per rank for `cfg` trained on `graph` with P processes."""
    p = plan(cfg, P, graph)
    cls = spmm.get(p.cfg.algo)
    model = model_cost(p.cfg, p.graph)
    stats = {a: block_stats(p.graph, p.partition, a) for a in model.adjacencies}
    return [cost.epoch_ledger(cls, stats, p.shape, r, model, epochs, evals, setup) for r in range(P)]


def partition_to_cache(cfg: TrainConfig, P: int, costs_of=None, ranks_per_node: int | None = None) -> Path:
    """Load cfg.dataset, resolve --algo auto (`ranks_per_node` of the P processes on a machine, default all),
    partition it into the algorithm's row blocks and write it to the cache (`spgnn.partition.partitioned.cached`;
    reused when there); returns the folder. The one place a process
    holds the whole graph, and not even there when cfg.dataset is a file whose partition for these options the cache
    holds already (`partitioned.source_folder`: found from the file's path, size and modification time)."""
    options = _source_options(cfg, P)
    found = options and partitioned.source_folder(cfg.dataset, options, cfg.cache_dir)
    if found:
        return found
    check_given_parts(cfg, P)
    g = load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
    resolved, shape, _ = resolve(cfg, P, g, costs_of, ranks_per_node)
    folder = cached_partition(resolved, g, resolved.partition, spmm.get(resolved.algo).num_parts(shape))
    if options:
        partitioned.remember_source(cfg.dataset, options, folder, cfg.cache_dir)
    return folder


def check_given_parts(cfg: TrainConfig, P: int) -> None:
    """SpgnnError, before the graph is read, for a cfg.partition that names no partitioner nor file, or is a
    partition given already (a file) of K parts where the layout named (--algo auto: each it compares) has other
    row blocks on P processes."""
    K = fixed_parts(cfg.partition)
    if K is None:
        return
    fix = f"or run a layout of {K} row blocks (1d, 1d-halo or sar on {K} processes)"
    made = saved_meta(cfg.partition) if isinstance(cfg.partition, (str, Path)) else {}
    if cfg.algo == "auto":
        if K not in (spmm.get(o["algo"]).num_parts(spmm.get(o["algo"]).grid_for(P, **o)) for o in cost.candidates(P)):
            raise SpgnnError(f"--partition {cfg.partition} holds {K} parts, but no layout --algo auto compares on {P} "
                             f"processes has {K} row blocks: partition anew with "
                             f"{anew(cfg.dataset, 'B', made, 'FILE.npz', cfg.data_dir)} for a layout of B row blocks, "
                             f"{fix}")
        return
    cls = spmm.get(cfg.algo)
    shape = cls.grid_for(P, **{o: getattr(cfg, o) for o in spmm.options()})
    if (B := cls.num_parts(shape)) != K:
        raise SpgnnError(f"--partition {cfg.partition} holds {K} parts but --algo {cfg.algo} on grid "
                         f"{grid_text(cls, shape)} needs {B} row blocks: partition anew with "
                         f"{anew(cfg.dataset, B, made, 'FILE.npz', cfg.data_dir)}, {fix}")


def anew(dataset, B, made: dict, output: str, data_dir: str | None = None) -> str:
    """The ``spgnn partition`` command that partitions `dataset` (looked up in `data_dir`, where given) into B parts
    as `made` records a partition (its method, params and seed; METHOD where the method is no partitioner's name) and
    writes `output`."""
    method = made.get("method")
    method = method if isinstance(method, str) and get_partitioner(method) is not None else "METHOD"
    params = [a for k, v in (made.get("params") or {}).items() for a in ("--param", f"{k}={json.dumps(v)}")]
    seed = ["--seed", str(made["seed"])] if made.get("seed") else []
    where = ["--data-dir", str(data_dir)] if data_dir else []
    return shlex.join(["spgnn", "partition", "--dataset", str(dataset), *where, "--nparts", str(B), "--method", method,
                       *params, *seed, "--output", output])


def _source_options(cfg: TrainConfig, P: int) -> dict | None:
    """What chooses a dataset's cached partition besides the dataset: the layout's row blocks (algorithm, P, grid
    options), the partitioner, seed and node order; None for --algo auto, which weighs the graph to choose."""
    if cfg.algo == "auto":
        return None
    return {"algo": cfg.algo, "P": P, "grid": {o: getattr(cfg, o) for o, opt in spmm.options().items() if opt.shapes},
            "partition": cfg.partition, "seed": cfg.seed, "node_order": cfg.node_order}


def cached_partition(cfg: TrainConfig, g, method, B: int, node_order: str | None = None) -> Path:
    """The cache folder of graph `g` partitioned by `method` into B parts, in `node_order` inside each (else
    cfg's), written unless there; a stage."""
    with stage("partition cache", f"{g.name} in {B} parts by {method}"):
        order = node_order or cfg.node_order
        return partitioned.cached(g, lambda: make_partition(method, g.adj, B, cfg.seed, order), method,
                                  {"node_order": order}, cfg.seed, B, cfg.cache_dir)


def given_folder(cfg: TrainConfig) -> str | None:
    """cfg.dataset (~ expanded) when it is a partitioned dataset folder, else None."""
    path = Path(str(cfg.dataset)).expanduser()
    return str(path) if partitioned.is_partitioned(path) else None


def split_parts(cfg: TrainConfig, comm: Comm, graph=None):
    """The parts of a graph split for sampled training (`--split-graph`): a block partition into P/c parts, so
    that the renumbering is the identity and a node keeps its id; of `graph` in memory, of a partitioned
    folder, or of cfg.dataset through the cache (rank 0 partitions)."""
    B = comm.world_size // (cfg.replication or 1)
    if graph is not None:
        return partitioned.InMemoryParts(graph, make_partition("block", graph.adj, B))
    folder = given_folder(cfg) or on_rank0(
        comm, lambda: str(cached_partition(cfg, load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed), "block", B,
                                                     "natural")), beat_s=min(30.0, cfg.timeout / 4))
    return check_split_folder(partitioned.PartitionedDataset(folder), B)


def check_split_folder(ds, B: int):
    """Partitioned dataset `ds`, where it is what `--split-graph` reads: a block partition into P/c = B parts in
    natural node order; else SpgnnError saying how to make one."""
    if ds.nparts != B or ds.partition_info["method"] != "block" or ds.partition_info["node_order"] != "natural":
        raise SpgnnError(f"--split-graph reads a block partition into P/c = {B} parts in natural node order, but "
                         f"{ds.path} holds {ds.nparts} parts by {ds.partition_info['method']} in "
                         f"{ds.partition_info['node_order']} order: partition with spgnn partition --method block "
                         f"--nparts {B} --node-order natural --output DIR")
    return ds


def parts_stats(parts):
    """`cost.choose`'s statistics for a partitioned dataset: its own, for the layouts whose row blocks are its
    parts (None for the others)."""
    return lambda cls, shape, adjacencies: {a: parts.stats(a) for a in adjacencies} \
        if cls.num_parts(shape) == parts.nparts else None


def check_folder_options(cfg: TrainConfig, parts, given: bool = True) -> None:
    """SpgnnError where cfg's --partition or --node-order is not what the partitioned dataset `parts` holds: another
    partitioner, a partition file that is not its partition of this graph (nor the file it was made from; checked
    where the folder was `given`, not made by the cache from cfg), another node order (the defaults pass)."""
    K, where, made = parts.nparts, getattr(parts, "path", "the dataset"), parts.partition_info
    method, order = made.get("method"), made.get("node_order")
    named = get_partitioner(cfg.partition) is not None       # else a partition file
    if cfg.partition not in (TrainConfig.partition, method) and named:
        raise SpgnnError(f"{where} is partitioned already (by {method}): --partition {cfg.partition} does not apply "
                         "to it; drop --partition or partition anew with spgnn partition --output")
    if not named and given:                                 # is the file the folder's partition (or its source)?
        meta = saved_meta(cfg.partition)
        if (not meta or [meta.get(k) for k in ("method", "params", "seed", "nparts", "graph_hash")] !=
                [method, made.get("params", {}), made.get("seed", 0), K, parts.info.graph_hash]) and \
                made.get("file_sha256") != file_sha256(cfg.partition):
            raise SpgnnError(f"{where} is partitioned already (by {method}, seed {made.get('seed', 0)}, {K} parts): "
                             f"--partition {cfg.partition} is not that partition of this graph and does not apply "
                             "to it; drop --partition or partition anew with spgnn partition --output")
    if cfg.node_order not in (TrainConfig.node_order, order):
        raise SpgnnError(f"{where} is partitioned already (in {order} node order): --node-order {cfg.node_order} "
                         "does not apply to it; drop --node-order or partition anew with spgnn partition --output")


def fit_parts(cfg: TrainConfig, P: int, parts, costs_of=None, ranks_per_node: int | None = None) -> tuple[
        TrainConfig, tuple, list | None]:
    """(cfg with --algo auto resolved among the options whose row blocks are the parts, grid shape, what auto
    compared) for a partitioned dataset on P processes, `ranks_per_node` of them on a machine (default all);
    SpgnnError saying what fits when nothing does."""
    compared, K, where = None, parts.nparts, getattr(parts, "path", "the dataset")
    made = parts.partition_info
    method, order = made.get("method"), made.get("node_order")
    folder = given_folder(cfg) is not None                  # given partitioned (else the cache made it from cfg)
    check_folder_options(cfg, parts, folder)
    if folder:      # the run's config says what the folder holds (a default kept, e.g. --partition block, did not run)
        cfg = replace(cfg, node_order=order, **({"partition": method} if get_partitioner(method) is not None else {}))
    if cfg.algo == "auto":
        model = model_cost(cfg, parts.info, costs_of)
        cfg, compared = cost.choose(cfg, P, parts_stats(parts), model, _calibration(cfg),
                                    f": {where} holds {K} parts, so name an --algo or "
                                    f"run on {K} processes", ranks_per_node)
    cls = spmm.get(cfg.algo)
    shape = _shape(cls, P, cfg, parts.info.n)
    if cls.num_parts(shape) != K:
        raise SpgnnError(f"{where} holds {K} parts but --algo {cfg.algo} on grid "
                         f"{grid_text(cls, shape)} needs {cls.num_parts(shape)} row blocks. What fits {K} parts: "
                         f"1d, 1d-halo or sar on {K} processes; 1.5d --replication c on {K}·c processes; 2d --grid "
                         f"{K}xC; 3d --grid RxCxL with R·L = {K}. Or partition anew: "
                         f"{anew('DATASET', cls.num_parts(shape), made, 'DIR')}, DATASET the one it was made from")
    check_memory(cfg, P, shape, parts_stats(parts), parts.info, costs_of)
    return cfg, shape, compared


def _open_folder(folder: str, rank: int):
    """The `PartitionedDataset` at `folder` (rank 0 chose it), its block statistics checked, or one line saying
    that this rank cannot read it."""
    if not partitioned.is_partitioned(folder):
        raise SpgnnError(f"rank {rank} cannot read the partitioned folder {folder} that rank 0 uses: on several hosts "
                         "the partition cache (--cache-dir or $SPGNN_CACHE_DIR) or a partitioned --dataset must be a "
                         "folder every host can read, or copied to the same path on every host")
    ds = partitioned.PartitionedDataset(folder)
    ds.block_stats()
    return ds


def machine_ranks(comm: Comm) -> int:
    """The most processes of `comm`'s job on one machine (`launch.peers`, gathered: the same on every rank), as many
    as --algo auto puts on each machine of its prediction (with all P on one, it weighed the layouts for ranks
    time-sharing its cores, and could pick what the run's machines run slower)."""
    return max(Counter(machine for machine, _ in launch.peers(comm)).values())


def open_parts(cfg: TrainConfig, comm: Comm, graph=None, parts=None, costs_of=None):
    """(cfg resolved, the parts: `InMemoryParts` of `graph` or a `PartitionedDataset`, grid shape, what auto
    compared). A dataset that is no partitioned folder is partitioned by rank 0 into the cache while the
    others wait (`partition_to_cache`), then every rank opens the folder."""
    P = comm.world_size
    per_node = machine_ranks(comm) if cfg.algo == "auto" else None      # (every rank, or none: the flags are one)
    if graph is not None:
        p = plan(cfg, P, graph, parts, costs_of, per_node)
        return p.cfg, partitioned.InMemoryParts(graph, p.partition), p.shape, p.compared
    if parts is not None:
        raise SpgnnError("a partition (parts) goes with a graph in memory; a dataset on disk is partitioned by "
                         "cfg.partition")
    folder = on_rank0(comm, lambda: given_folder(cfg) or str(partition_to_cache(cfg, P, costs_of, per_node)),
                      beat_s=min(30.0, cfg.timeout / 4))
    ds = agree(comm, lambda: _open_folder(folder, comm.rank))
    cfg, shape, compared = fit_parts(cfg, P, ds, costs_of, per_node)
    drawn = ds.partition_info.get("split_seed", ds.partition_info.get("seed", 0))     # (older folders: the seed)
    if cfg.seed != drawn and given_folder(cfg):                                     # (a cache folder has cfg's seed)
        progress.say(f"{folder} keeps its split (the dataset's own, or, where it has none, the random one of the "
                     f"seed it was made with, {drawn}): --seed {cfg.seed} seeds the weights and dropout only")
    return cfg, ds, shape, compared
