"""The ``spgnn`` command line: ``spgnn train ...``, ``spgnn calibrate ...``, ``spgnn partition ...`` (other
tools add subcommands here)."""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import shlex
import signal
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from . import dense, jsonfile, progress, spmm
from .comm import calibrate as calibration
from .comm import launch
from .comm.agree import agree, on_rank0
from .config import TrainConfig, plugin_options
from .errors import SpgnnError, out_of_memory, say
from .graph import validate
from .graph.datasets import load_dataset
from .graph.ogbl import ogbl_folder
from .jsonfile import write_json
from .layers.init import SCHEMES
from .layers.registry import CHOSEN, LAYERS
from .layers.registry import options as layer_options
from .partition import partitioned
from .partition.metrics import metrics_table, partition_metrics, warm_up
from .partition.order import ORDERS
from .partition.partition import available, check_method, make_partition, save_partition
from .plan import (
    cached_partition,
    check_folder_options,
    check_split_folder,
    fit_parts,
    graph_stats,
    model_cost,
    partition_to_cache,
    parts_stats,
)
from .tasks import TASKS, get_task
from .train import checkpoint, interrupt
from .train.fullbatch import Trainer

CHUNK = 1 << 22             # spgnn partition --out-of-core's --chunk
FILE_SUFFIXES = (".npy", ".json", ".txt", ".csv", ".png", ".pdf", ".svg", ".pt")   # not a partitioned folder's name


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends an option's default to its help unless the help already says it ("(default ...", "(the default)")."""

    def _get_help_string(self, action):
        said = re.search(r"\((the )?default\b", action.help or "")
        return action.help if said else super()._get_help_string(action)


def _subparser(sub, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """A subcommand's parser, defaults shown in its --help."""
    return sub.add_parser(name, help=help, description=description, formatter_class=_DefaultsFormatter)


def _check_files(output=None, calibration=None, checkpoint_dir=None, resume=None, dataset=None,
                 early=lambda: None, what: str = "the report") -> None:
    """What a run writes or reads later (its report, α-β figures, checkpoints), checked before any work, so
    that no run is lost at its end to a path that was bad from the start, nor an input overwritten by its output;
    what it reads first, then `early()` (what else its inputs must be), then whether it can write (which makes
    the folders of --output and --checkpoint). `what`: what --output holds."""
    if output:
        inputs = [calibration, dataset] + [Path(f) / checkpoint.FILE for f in (checkpoint_dir, resume) if f]
        _not_an_input(output, "--output", what, inputs)
    if calibration:
        from .cost import load_calibration, load_rates

        load_calibration(calibration)
        load_rates(calibration)
    if resume:
        checkpoint.readable(resume)
    early()
    if output:
        _writable_file(output, "--output", what)       # (its inputs checked above)
    if checkpoint_dir:
        checkpoint.writable(checkpoint_dir, bool(resume) and Path(resume).resolve() == Path(checkpoint_dir).resolve())


def _not_an_input(path, flag: str, what: str, inputs) -> None:
    """SpgnnError where file `path` (`flag`'s, where `what` goes) is one of the `inputs`."""
    if same := next((f for f in inputs if f and Path(path).resolve() == Path(f).resolve()), None):
        raise SpgnnError(f"{flag} {path} is {same}, which the run reads: writing {what} there would replace it; "
                         f"give {flag} another path")


def _writable_file(path, flag: str, what: str, inputs=()) -> None:
    """SpgnnError unless file `path` (`flag`'s, where `what` goes) can be written, and is none of the `inputs`."""
    _not_an_input(path, flag, what, inputs)
    if str(path).endswith(("/", os.sep)):           # Path() drops the slash: a file named as the folder was written
        raise SpgnnError(f"{flag} {path} names a folder (it ends in /): give {flag} the path of a file for {what}")
    out = Path(path)
    existed = out.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.open("a").close()
        if not existed:
            out.unlink(missing_ok=True)     # (another rank checking it at once may have removed it)
    except OSError as e:
        raise SpgnnError(f"cannot write {what} to {path}: {e.strerror or e}; give {flag} a writable file "
                         "path") from None


def _train_parser(sub) -> argparse.ArgumentParser:
    d = TrainConfig()
    p = _subparser(sub, "train", "full-batch GNN training on a process grid",
                   "Train a GNN full-batch with every layer a distributed sparse-dense product. "
                   "Launch with --nprocs N, mpirun -np N, torchrun --nproc-per-node N, or as a single process.")
    a = p.add_argument
    a("--dataset", default=d.dataset, help="a known name (cora, citeseer, amazon-computers, amazon-photo, "
      "coauthor-cs, squirrel), rmat:SCALE[:EDGEFACTOR], sbm:..., a path to a dataset file or folder (an OGB "
      "node-property folder such as ogbn_arxiv/, PATH:TYPE for another of its splits; Planetoid files; .npz; an "
      "edge list), or a partitioned dataset folder (spgnn partition --output DIR), of which each process reads "
      "its part only")
    a("--given-dataset", default=None, help=argparse.SUPPRESS)    # the --nprocs parent's --dataset, for the report
    a("--data-dir", default=d.data_dir, help="where named datasets are looked up (else $SPGNN_DATA_DIR, "
      "./datasets, ~/.cache/spgnn/datasets); cora is bundled")
    a("--cache-dir", default=d.cache_dir, help="where a dataset that is not a partitioned folder is partitioned to "
      "once and reused (else $SPGNN_CACHE_DIR, else ~/.cache/spgnn/partitions)")
    a("--task", default=d.task, choices=["auto", *TASKS], help="what to learn: "
      + "; ".join(f"{name}: {t.summary}" for name, t in TASKS.items()) + "; auto: the node task the labels describe")
    a("--model", default=d.model, choices=sorted(LAYERS), help="the model: its layer kind ("
      + "; ".join(f"{name}: {cls.summary}" for name, cls in LAYERS.items()) + ")")
    a("--algo", default=d.algo, choices=sorted(spmm.ALGORITHMS) + ["auto"], help="distributed SpMM algorithm: "
      + ", ".join(f"{name} {cls.summary}" for name, cls in spmm.ALGORITHMS.items()) + "; auto picks the algorithm "
      "and grid with the lowest predicted epoch time, compute and communication (see spgnn cost)")
    for o in plugin_options().values():
        a(o.flag, type=o.type, default=o.default, help=o.help)
    a("--partition", default=d.partition, help=f"vertex partition: {', '.join(available())}, or a path to "
      "a partition saved by spgnn partition (.npz) or a .npy/.txt part vector (one part id per node)")
    _node_order_option(p, d.node_order)
    a("--layers", type=int, default=d.layers, help="number of GNN layers")
    a("--batch-norm", action="store_true", help="global batch normalization after each hidden layer")
    a("--init", default=d.init, choices=["auto", *SCHEMES], help="initial parameters as PyTorch Geometric (pyg) or "
      "DGL (dgl) draws them for the layer; auto: per layer kind, the one that reaches a given test accuracy sooner ("
      + ", ".join(f"{k}: {v}" for k, v in CHOSEN.items()) + ")")
    a("--hidden", type=int, default=d.hidden, help="hidden width")
    a("--dropout", type=float, default=d.dropout, help="dropout probability before each layer")
    a("--lr", type=float, default=d.lr, help="Adam learning rate")
    a("--weight-decay", type=float, default=d.weight_decay, help="Adam weight decay (L2)")
    a("--epochs", type=int, default=d.epochs, help="training epochs")
    a("--seed", type=int, default=d.seed, help="seed for weights, dropout, random partitions and splits")
    a("--feature-norm", default=d.feature_norm, choices=["row", "none"], help="row: divide each feature row by its "
      "L1 norm (its sum where no value is negative: for bags of words what PyG's NormalizeFeatures makes); none: "
      "keep them as given")
    a("--precompute", default=d.precompute, choices=["on", "off"], help="on: where training does not drop out the "
      "features (--dropout 0), make their sparse products once a run and keep them (GraphSAGE, GCN and GIN then "
      "aggregate the features first, and no step multiplies or exchanges them again; one block of features more a "
      "rank); off: every step makes them")
    a("--eval-every", type=int, default=d.eval_every, help="evaluate every k epochs (0: only at the end)")
    a("--sampler", default=None, help="train on sampled minibatches instead (spgnn/sampling/; data-parallel, "
      "graph replicated on every rank unless --split-graph): sage:FANOUTS node-wise (e.g. sage:15,10,5, hop 1 "
      "first) or ladies:SIZES layer-wise (e.g. ladies:512,512); one layer per size (a --layers other than "
      "the default must match)")
    a("--batch-size", type=int, default=None, help="--sampler: seed nodes per minibatch on each rank (default 1024, "
      "or the training set if smaller; a larger value given explicitly is an error)")
    a("--bulk", type=int, default=1, help="--sampler: minibatches each rank samples in one bulk call")
    graph = p.add_mutually_exclusive_group()
    graph.add_argument("--split-graph", action="store_true", help="--sampler: split the adjacency and features "
                       "1.5D (P/c row blocks, each on c = --replication processes) and fetch the rows each step "
                       "needs from their owners by all-to-all")
    graph.add_argument("--replicate-graph", action="store_true", help="--sampler: every process holds the "
                       "whole graph and features (the default)")
    _launch_options(p, d)
    a("--calibration", default=d.calibration, help="α-β figures from spgnn calibrate --output, for the "
      "predicted seconds in the report and for --algo auto (default: gloo figures measured on 2 cores)")
    a("--memory-per-rank", default=d.memory_per_rank, help="--algo auto: leave out the layouts whose predicted "
      "peak memory per rank exceeds this (e.g. 4GB; see spgnn cost); a named --algo: refuse before training if its "
      "prediction exceeds it")
    _overlap_option(p)
    a("--output", default=d.output, help="write the JSON run report here (rank 0)")
    a("--checkpoint", default=d.checkpoint, help="write a checkpoint to this folder (rank 0; weights, Adam's state, "
      "the epoch, the config, the graph's and partition's identity, the report so far) every --checkpoint-every "
      "epochs and at the end, atomically; on several nodes a folder every rank can read")
    a("--checkpoint-every", type=int, default=d.checkpoint_every, help="epochs between checkpoints")
    a("--resume", default=d.resume, help="continue the run checkpointed in this folder (to --epochs in all), under "
      "any number of processes, algorithm or grid; give the same folder to --checkpoint to keep it current")
    a("--quiet", action="store_true", help="no per-epoch lines, stage lines or progress bars")
    return p


def _overlap_option(p) -> None:
    p.add_argument("--allow-overlap", action="store_true", help="accept split masks that share nodes (a node "
                   "in both train and test, say), which are refused otherwise")


def _launch_options(p, d: TrainConfig) -> None:
    a = p.add_argument
    a("--device", default=d.device, help="cpu (gloo) or cuda (nccl)")
    a("--transport", default=d.transport, choices=launch.TRANSPORTS, help="what moves the data: torch "
      "(torch.distributed), mpi (mpi4py, for mpirun jobs on CPU), auto (mpi under mpirun on CPU, else torch)")
    a("--timeout", type=float, default=d.timeout, help="seconds before a stalled collective fails "
      "(a rank that died cannot leave the others waiting)")
    a("--nprocs", type=int, default=None, help="start this many local processes (not needed under mpirun "
      "or torchrun, which give the process count)")


def _calibrate_parser(sub) -> argparse.ArgumentParser:
    p = _subparser(sub, "calibrate", "measure α and β of each collective on the transport in force",
                   "Time each collective at several message sizes and fit seconds = α + β·bytes "
                   "(bytes as the ledger counts them). Launch like train.")
    a = p.add_argument
    a("--sizes", default=calibration.DEFAULT_SIZES, help="message sizes per rank (K, M, G: powers of 1024)")
    a("--ops", default=",".join(calibration.OPS), help="collectives to measure")
    a("--repeats", type=int, default=5, help="timed calls per size")
    a("--budget", type=float, default=10.0, help="seconds per size after which at least 3 calls are enough")
    _launch_options(p, TrainConfig())
    a("--output", default=None, help="write the JSON fits here (rank 0; schema in spgnn/comm/calibrate.py)")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spgnn", description="Distributed full-batch GNN training "
                                     "written as sparse-dense matrix products over a process grid.")
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    _calibrate_parser(sub)
    _partition_parser(sub)
    _cost_parser(sub)
    _plot_parser(sub)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """`argv` parsed; a mistake in the line said by the parser that can name it: an option before the command
    (``spgnn --nprocs 4 train``), which argparse took the option's value for the command at, and words the command
    does not take, which argparse said under spgnn's usage, not the command's (an option misspelt: the nearest
    named)."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    k = next((k for k, a in enumerate(argv) if a in commands), 0)
    if k and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        line = shlex.join(["spgnn", argv[k], *argv[:k], *argv[k + 1:]])
        parser.error(f"options go after the command: {line} (spgnn {argv[k]} --help lists them)")
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = commands[args.command]
        flags = [f for a in command._actions for f in a.option_strings if f.startswith("--")]
        near = next((m for e in extra if e.startswith("--")
                     for m in difflib.get_close_matches(e.split("=")[0], flags, n=1)), None)
        command.error(f"unrecognized arguments: {' '.join(extra)} ({f'did you mean {near}? ' if near else ''}"
                      f"spgnn {args.command} --help lists its options)")
    return args


def _published(cfg, picked: str = "") -> None:
    """SpgnnError naming a plug-in cfg chooses that this program registered but the --nprocs processes (``python -m
    spgnn``, which load spgnn's own and the published ones) would not have: neither spgnn's nor under its group
    (`picked`: what the message says of an --algo that --algo auto chose)."""
    from importlib import metadata

    from .layers import registry as layers
    from .partition import partition
    from .spmm import registry as algorithms
    from .tasks import registry as tasks

    for flag, name, registry, group in (("--model", cfg.model, LAYERS, layers.ENTRY_POINT_GROUP),
                                        ("--algo", cfg.algo, algorithms.ALGORITHMS, algorithms.ENTRY_POINT_GROUP),
                                        ("--task", cfg.task, TASKS, tasks.ENTRY_POINT_GROUP),
                                        ("--partition", cfg.partition, partition.PARTITIONERS,
                                         partition.ENTRY_POINT_GROUP)):
        module = getattr(registry.get(name), "__module__", None) or "spgnn"
        if module.split(".")[0] != "spgnn" and name not in {ep.name for ep in metadata.entry_points(group=group)}:
            raise SpgnnError(f"{flag} {name}{picked if flag == '--algo' else ''} is registered by this program "
                             f"({module}), which the --nprocs processes "
                             f"(python -m spgnn) do not run: publish it under the entry-point group {group}, or "
                             "launch this program under mpirun or torchrun")


def _join(args, argv, device: str, timeout: float, transport: str, check=lambda: None):
    """This process's `Comm` in the job (mpirun, torchrun or a single process), or, for --nprocs N from a
    plain shell, the exit code of N local copies of this command (after `check` has vetted the input; it may
    return the command line the copies run instead)."""
    launched = launch.detect()
    launch.check_device(device)
    launch.resolve_transport(transport, launched, device)
    if args.nprocs is not None:
        if args.nprocs < 1:
            raise SpgnnError(f"--nprocs must be at least 1, got {args.nprocs}")
        if launched.kind == "single" and args.nprocs > 1:
            argv = check() or argv      # bad input: one message, before any process starts
            with progress.handed_on():
                return launch.spawn(argv, args.nprocs, stop_s=timeout)
        if launched.kind != "single" and args.nprocs != launched.world_size:
            # variables a launcher (or a program that started MPI: Open MPI 4 alone, say) left to this command
            names = {"mpirun": launch.MPI_RANK_VARS, "env": ("RANK", "WORLD_SIZE")}
            left = [k for k in names.get(launched.kind, ()) if k in os.environ]
            by = "torchrun" if launched.kind == "env" else launched.kind
            raise SpgnnError(f"--nprocs {args.nprocs} disagrees with the {launched.world_size} processes {by} "
                             "started: drop --nprocs" + (f"; outside {by}, unset what it left in the environment: "
                                                         f"{', '.join(left)}" if left else ""))
    return launch.init(device, timeout, transport)


def train(args, argv) -> int:
    known = {*TrainConfig.__dataclass_fields__, *plugin_options()} - {"options"}
    cfg = TrainConfig(**{k: v for k, v in vars(args).items() if k in known})
    cfg.validate()
    if args.checkpoint_every != TrainConfig.checkpoint_every and not args.checkpoint:
        raise SpgnnError("--checkpoint-every goes with --checkpoint DIR (where checkpoints are written): add it, or "
                         "drop --checkpoint-every")
    if args.sampler is None and (given := [flag for flag, value in (("--batch-size", args.batch_size is not None),
                                                                ("--bulk", args.bulk != 1),
                                                                ("--split-graph", args.split_graph),
                                                                ("--replicate-graph", args.replicate_graph)) if value]):
        raise SpgnnError(f"{' and '.join(given)} go{'es' if len(given) == 1 else ''} with --sampler (minibatch "
                         "training): add --sampler, or drop them to train full-batch")
    if args.sampler is not None:        # what minibatch training refuses (--calibration, say), before any file is read
        from .train.minibatch import sampler_config
        sampler_config(cfg, args.sampler, args.bulk, args.nprocs, args.split_graph)
    def files():                        # a resume's epochs, and a full-batch model's fields (a sampler sets the layers)
        _check_files(cfg.output, cfg.calibration, cfg.checkpoint, cfg.resume, cfg.dataset,
                     lambda: cfg.resume and checkpoint.check_early(cfg.resume, cfg, model=args.sampler is None))

    if launch.detect().kind == "single":     # the files rank 0 writes or reads, before any work, said once
        files()
    sampled = (args.sampler, args.batch_size, args.bulk) if args.sampler is not None else None
    if sampled:
        from .train.minibatch import MinibatchTrainer
    def check():
        _published(cfg)
        return _check_sampled(cfg, sampled, args.nprocs, args.split_graph, argv) if sampled \
            else _partition_once(cfg, args.nprocs, argv)
    comm = _join(args, argv, cfg.device, cfg.timeout, cfg.transport, check)
    if isinstance(comm, int):
        return comm
    _same_flags(comm, args)
    if launch.detect().kind != "single":     # launched: rank 0 checks them once every rank has joined, so that no
        on_rank0(comm, files)                 # rank waits out --timeout for a rank 0 that stopped at a bad path
    if cfg.resume:                      # every rank reads the checkpoint: one that another host cannot see is one line
        agree(comm, lambda: checkpoint.readable(cfg.resume))
    since = jsonfile.stamp(cfg.output) if cfg.output and comm.rank == 0 else None    # before the set-up's minutes
    with progress.stage("setting up", "(reading this process's share, set-up exchanges)"):
        full = Trainer if cfg.task == "auto" else get_task(cfg.task).trainer()
        trainer = MinibatchTrainer(cfg, comm, *sampled, split_graph=args.split_graph) if sampled else full(cfg, comm)
    if comm.rank == 0 and not args.quiet:
        g = trainer.info
        how = f"sampler {args.sampler}" if sampled else trainer.cfg.algo + (" (--algo auto's pick)" if cfg.algo ==
                                                                             "auto" else "")
        print(f"spgnn: {cfg.model} on {g.name} (n={g.n}, nnz={g.nnz}), {how} on {comm.world_size} "
              f"process(es), launcher {launch.detect().kind}, transport {comm.transport.name}"
              + (f" ({note})" if (note := getattr(comm.transport, "note", "")) else ""), flush=True)
        if cfg.device.startswith("cuda"):
            print("spgnn: the cost model's rates are CPU rates: on a GPU the report's predicted seconds and memory, "
                  "and --algo auto's pick, describe a CPU run", flush=True)
    trainer.given_dataset = args.given_dataset     # the --nprocs parent handed its processes a partitioned folder
    report = trainer.run(log=None if args.quiet else lambda line: print(line, flush=True), since=since)   # --output
    if "stopped" in report:                 # diverged: the report so far is written, the line says where
        if comm.rank == 0:
            say(report["stopped"])
        launch.shutdown()
        return 1
    if comm.rank == 0:
        f, m = report["final"], report["task"]["metric"]
        figures = "".join(f"  {s} {f[k]:.4f}" for s in ("train", "val", "test") if (k := f"{s}_{m}") in f)
        median = report["median_epoch_s"]
        print(f"final {report['task']['label']}{figures}  median epoch "
              f"{'n/a (no epochs ran)' if median is None else f'{median:.4f} s'}", flush=True)
        if "interrupted" in report:
            _interrupted(report["interrupted"], cfg)
    launch.shutdown()      # only after success: on an error the process exits and its peers see it
    return 128 + signal.Signals[report["interrupted"]["signal"]] if "interrupted" in report else 0


def _interrupted(stop: dict, cfg: TrainConfig) -> None:
    """The line of a run a signal stopped after epoch stop["epoch"]: what it wrote, and how to continue it."""
    done = stop["epoch"] + 1
    kept = [f"report written to {cfg.output}" if cfg.output else "no report written (no --output)",
            f"continue with the same command and --resume {cfg.checkpoint}" if cfg.checkpoint else
            "it cannot be continued (no --checkpoint)"]
    sys.stderr.write(f"spgnn: interrupted by {stop['signal']} after epoch {stop['epoch']} ({done} of {cfg.epochs} "
                     f"epochs done): {'; '.join(kept)}\n")
    sys.stderr.flush()


# options naming files, which may lie at other paths on other hosts (rank 0 alone writes the outputs), and the log's
PER_HOST = frozenset({"dataset", "given_dataset", "data_dir", "cache_dir", "partition", "ogb_split", "calibration",
                      "resume", "checkpoint", "output", "quiet"})


def _same_flags(comm, args) -> None:
    """SpgnnError, the same on every rank, naming the first option (but those in `PER_HOST`) the processes of a job
    were given different values of (ranks started by hand, or an MPMD mpirun): each would train by its own (other
    learning rates, say, and a result that is no one's), or wait out --timeout for a peer that left the loop an
    epoch earlier."""
    every = comm.all_gather_object({k: repr(v) for k, v in vars(args).items() if k not in PER_HOST})
    for k in sorted(set().union(*every)):
        differ = next((r for r, theirs in enumerate(every) if theirs.get(k) != every[0].get(k)), None)
        if differ is not None:
            flag = "--" + k.replace("_", "-")
            raise SpgnnError(f"the processes of this job were given different {flag}: {every[0].get(k)} on rank 0, "
                             f"{every[differ].get(k)} on rank {differ}: start every process with the same options")


def _partition_once(cfg: TrainConfig, P: int, argv: list[str]) -> list[str]:
    """For --nprocs: partition the dataset here, once, into the cache (unless it is a partitioned folder),
    check that the run fits it, and return the command line that has the processes read its parts."""
    folder = cfg.dataset if partitioned.is_partitioned(cfg.dataset) else str(partition_to_cache(cfg, P))
    _published(fit_parts(cfg, P, partitioned.PartitionedDataset(folder))[0], " (--algo auto's pick)")
    ogb = ["--ogb-split", cfg.dataset] if cfg.task == "link" and not cfg.ogb_split and ogbl_folder(cfg.dataset) else []
    return argv + ["--dataset", folder, "--given-dataset", cfg.dataset] + ogb


def _check_sampled(cfg: TrainConfig, sampled: tuple, P: int, split_graph: bool, argv: list[str]):
    """For --nprocs with --sampler: check the options here; a split graph is also partitioned here, once, into
    the cache (a block partition into P/c parts), and the processes read its parts."""
    from .train.minibatch import check_options

    cfg, g, _ = check_options(cfg, *sampled, nprocs=P, split_graph=split_graph)
    if split_graph and partitioned.is_partitioned(cfg.dataset):       # one that does not fit: before any process
        check_split_folder(partitioned.PartitionedDataset(cfg.dataset), P // (cfg.replication or 1))
    if not split_graph or partitioned.is_partitioned(cfg.dataset):
        return None
    folder = cached_partition(cfg, g, "block", P // (cfg.replication or 1), "natural")
    return argv + ["--dataset", str(folder), "--given-dataset", cfg.dataset]


def calibrate(args, argv) -> int:
    sizes, ops = calibration.parse_sizes(args.sizes), calibration.parse_ops(args.ops)
    if len(set(sizes)) < 2:
        raise SpgnnError(f"--sizes {args.sizes}: give at least two distinct message sizes, to fit both α and β "
                         "(one size fits α = 0 and any β)")
    if args.repeats < 1:
        raise SpgnnError(f"--repeats must be at least 1, got {args.repeats}")
    TrainConfig(device=args.device, transport=args.transport, timeout=args.timeout).validate()     # as train's
    if not 0 < args.budget < math.inf:
        raise SpgnnError(f"--budget must be a positive number of seconds, got {args.budget}")
    launched = launch.detect()
    P = (args.nprocs or 1) if launched.kind == "single" else launched.world_size
    if not args.device.startswith("cuda"):      # (a GPU's buffers are not the host's)
        calibration.check_memory(args.sizes, sizes, P, ops,
                                 P if launched.kind == "single" else launched.local_world_size)
    _check_files(args.output, what="the fits")
    comm = _join(args, argv, args.device, args.timeout, args.transport)
    if isinstance(comm, int):
        return comm
    result = calibration.calibrate(comm, sizes, ops, args.repeats, args.device, args.budget)
    if comm.rank == 0:
        print(calibration.format_table(result), flush=True)
        for line in result["warnings"]:
            print(f"spgnn calibrate: warning: {line}", file=sys.stderr, flush=True)
        if args.output:
            write_json(args.output, result)
    launch.shutdown()
    return 0


def _partition_parser(sub) -> argparse.ArgumentParser:
    p = _subparser(sub, "partition", "partition a graph, print the partition's quality, save it",
                   "Compute a P-way vertex partition and print its edge cut, 1d-halo communication volume, "
                   "replication factor, imbalances, time and memory (see spgnn/partition/metrics.py); "
                   "--compare does so for several methods.")
    a = p.add_argument
    a("--dataset", default=TrainConfig.dataset, help="as for spgnn train")
    a("--data-dir", default=None, help="as for spgnn train")
    a("--nparts", type=int, required=True, help="number of parts P (the processes of a 1D run)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--method", help=f"one of {', '.join(available())}, or a saved partition file")
    how.add_argument("--compare", help="comma-separated methods to tabulate side by side")
    a("--seed", type=int, default=0, help="seed of the partitioner (and of the dataset's split)")
    a("--param", action="append", default=[], metavar="KEY=VALUE", help="a parameter of --method, e.g. "
      "gamma=1.5 for fennel or mode=eco for kahip (values read as JSON, else as text); repeatable")
    a("--output", default=None, help="a folder: write the partitioned dataset there (each part's block row of A, "
      "features, labels, masks, ids and degrees as .npy, for spgnn train --dataset DIR); a file ending in .npz: "
      "save the part vector with method, parameters, seed, versions and a hash of the graph, for spgnn train "
      "--partition FILE")
    a("--out-of-core", action="store_true", help="--dataset is an edge-list folder (edges.txt or edges.npy, "
      "features.npy, labels.npy): read it in chunks and write the partitioned folder --output without holding "
      "the graph (methods block, random, ldg, fennel)")
    a("--chunk", type=int, default=CHUNK, help="--out-of-core: edges (and feature rows) read at a time")
    _node_order_option(p, None)
    a("--json", default=None, help="write the metrics here as JSON")
    a("--quiet", action="store_true", help="no stage lines or progress bars")
    a("--plot", default=None, help="draw the metrics as bar charts to this image file (.png; needs matplotlib)")
    _overlap_option(p)
    return p


def _node_order_option(p, default: str | None) -> None:
    """--node-order; without a `default` it is absent from the arguments when not given (`partition` resolves it:
    rcm, --out-of-core natural)."""
    p.add_argument("--node-order", default=default or argparse.SUPPRESS, choices=ORDERS,
                   help="the order of the nodes inside each part: rcm (reverse Cuthill-McKee of the part's diagonal "
                   "block: neighbours near in memory, faster SpMMs) or natural (ascending ids); results and bytes sent "
                   "are the same" + ("" if default else f" (default: {TrainConfig.node_order}; --out-of-core: natural "
                                     "only)"))


def _param(text: str) -> tuple[str, object]:
    key, eq, value = text.partition("=")
    if not (eq and key):
        raise SpgnnError(f"--param takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def partition(args, argv) -> int:
    methods = [m.strip() for m in args.compare.split(",")] if args.compare is not None else [args.method]
    if not all(methods):
        raise SpgnnError(f"--compare {args.compare!r} names no method between commas: give methods such as "
                         f"{','.join(available()[:3])}")
    for method in methods:                  # each, before the first is partitioned
        check_method(method)
    if args.nparts < 1:
        raise SpgnnError(f"--nparts must be at least 1, got {args.nparts}")
    if not 0 <= args.seed < 2**63:                      # as spgnn train's (the partitioners' generators take these)
        raise SpgnnError(f"--seed must lie in [0, 2^63), got {args.seed}")
    params = dict(_param(t) for t in args.param)
    if args.compare and (params or args.output):
        raise SpgnnError("--param and --output go with --method (one partition), not with --compare")
    if args.chunk != CHUNK and not args.out_of_core:
        raise SpgnnError("--chunk sets how much --out-of-core reads at a time: add --out-of-core, or drop --chunk")
    if args.output and Path(args.output).suffix.lower() in FILE_SUFFIXES:     # a file's name, not a folder's
        raise SpgnnError(f"--output {args.output}: a partition is saved as an .npz (the part vector and how it was "
                         "made) or written as a partitioned folder (a path without a suffix); the metrics go to "
                         "--json FILE, their charts to --plot FILE")
    folder = args.output and not args.output.endswith(".npz")
    if folder:
        partitioned.check_output(args.output, args.dataset)      # before any work: what it would replace
    args.node_order = getattr(args, "node_order", None)      # None: not given
    if args.output and not folder and args.node_order:
        raise SpgnnError("--node-order orders the nodes of a partitioned folder; an .npz keeps the part vector only "
                         "(give --node-order to spgnn train --partition FILE instead)")
    if args.out_of_core and args.node_order == "rcm":
        raise SpgnnError("--node-order rcm orders each part by its diagonal block, which --out-of-core never holds: "
                         "its parts keep the natural order (drop --node-order, or partition in memory)")
    args.node_order = args.node_order or TrainConfig.node_order
    if args.plot:                                        # a format matplotlib writes, before partitioning
        from . import plot
        args.plot = plot.target(args.plot)
    for flag, path, what in (("--json", args.json, "the metrics"), ("--plot", args.plot, "the chart"),
                             ("--output", None if folder else args.output, "the partition")):
        if path:
            _writable_file(path, flag, what, [args.dataset])
    if args.out_of_core:
        from .partition.ooc import partition_edge_folder

        if not folder:
            raise SpgnnError("--out-of-core writes a partitioned dataset folder: give --output DIR")
        if tables := [flag for flag, value in (("--json", args.json), ("--plot", args.plot)) if value]:
            raise SpgnnError(f"{' and '.join(tables)}: --out-of-core writes the partitioned folder without holding the "
                             "graph, so it measures no partition metrics; drop them, or partition in memory")
        path = partition_edge_folder(args.dataset, args.output, args.nparts, methods[0], args.seed, args.chunk,
                                     **params)
        print(f"wrote {path}: train with spgnn train --dataset {path} on {args.nparts} processes", flush=True)
        return 0
    g = load_dataset(args.dataset, args.data_dir, seed=args.seed)
    rows = []
    for method in methods:
        warm_up(method, args.nparts, args.node_order)
        part = make_partition(method, g.adj, args.nparts, args.seed, args.node_order, **params)
        rows.append(partition_metrics(g.adj, part, g.train_mask) | part.info | {"method": method})
    print(f"spgnn: {g.name} (n={g.n}, nnz={g.nnz}), {args.nparts} parts, seed {args.seed}", flush=True)
    print(metrics_table(rows), flush=True)
    if folder:
        path = partitioned.write_parts(args.output, partitioned.InMemoryParts(g, part, part.info | {
            "split_seed": args.seed}))                  # (a partition file's seed is the file's, not the split's)
        print(f"wrote {path}: train with spgnn train --dataset {path} on {args.nparts} processes (1d, 1d-halo, "
              "sar), or on any grid with that many row blocks", flush=True)
    elif args.output:
        info = part.info
        path = save_partition(args.output, part.parts, info.get("method", methods[0]), info.get("params", {}),
                              info.get("seed", args.seed), g)
        print(f"saved {path}: use it with spgnn train --dataset {args.dataset} --partition {path} "
              f"on {args.nparts} processes", flush=True)
    result = {"graph": g.name, "n": g.n, "nnz": g.nnz, "rows": rows}
    if args.json:
        write_json(args.json, result, default=str)
    if args.plot:
        from . import plot
        print(f"wrote {plot.save(plot.partition_figure(result), args.plot)}", flush=True)
    return 0


def _plot_parser(sub) -> argparse.ArgumentParser:
    p = _subparser(sub, "plot", "chart run reports", "Draw the reports of spgnn train --output side by side: loss "
                   "and accuracy curves, bytes per phase and layer per rank, measured beside predicted bytes, peak "
                   "RSS and graph bytes per rank, epoch time (see spgnn/plot.py; needs matplotlib).")
    p.add_argument("reports", nargs="+", metavar="REPORT.json", help="reports of spgnn train --output")
    p.add_argument("--output", required=True, help="the image file to write (.png, or .pdf/.svg)")
    return p


def plot_command(args, argv) -> int:
    from . import plot
    output = plot.target(args.output)                    # before any work: its format, and that it can be written
    _writable_file(output, "--output", "the plot", args.reports)
    reports = plot.read_reports(args.reports)
    try:
        figure = plot.report_figure(reports)
    except (KeyError, TypeError, IndexError, AttributeError) as e:   # a report some field of which is gone or null
        raise SpgnnError(f"a report given is not whole ({type(e).__name__}: {e}): plot reports as spgnn train "
                         "--output writes them") from None
    print(f"wrote {plot.save(figure, output)}", flush=True)
    return 0


STATISTICS_WIDTH, COST_PARTITION = 128, "random"     # spgnn cost's --features and --classes, its --partition


def _cost_parser(sub) -> argparse.ArgumentParser:
    p = _subparser(sub, "cost", "predict epoch seconds and memory with the cost model, without running",
                   "Bytes per rank, seconds (communication and compute) and peak memory per rank of one training "
                   "epoch for every modelled algorithm and grid, for "
                   "a graph given by statistics (planning at cluster scale: P can be thousands) or by --dataset "
                   "(exact block statistics of its partition).")
    a = p.add_argument
    a("--nodes", type=float, help="n, the number of nodes (with --nnz, instead of --dataset)")
    a("--nnz", type=float, help="nonzeros of the adjacency: directed edge entries, both directions counted")
    a("--dataset", help="a dataset spgnn train accepts: exact statistics of its partition (modest P)")
    a("--data-dir", default=None, help="where named datasets are looked up")
    a("--partition", default=COST_PARTITION, help="partition for --dataset")
    _node_order_option(p, TrainConfig.node_order)
    a("--nprocs", default="4,16,64,256,1024,4096", help="comma-separated process counts")
    a("--features", type=int, default=STATISTICS_WIDTH, help="input feature width (--nodes mode)")
    a("--hidden", type=int, default=128, help="hidden width")
    a("--classes", type=int, default=STATISTICS_WIDTH, help="output classes (--nodes mode)")
    a("--layers", type=int, default=3, help="GNN layers")
    a("--model", default="gcn", choices=sorted(LAYERS), help="the model (its layers must declare their costs)")
    for o in layer_options().values():                  # the layers' own options: GAT's heads, APPNP's steps, …
        a(o.flag, type=o.type, default=o.default, help=o.help)
    a("--dropout", type=float, default=TrainConfig.dropout, help="dropout probability before each layer (at 0, "
      "--precompute on keeps the features' products: none of the first layer's product is in a step)")
    a("--precompute", default=TrainConfig.precompute, choices=["on", "off"], help="as spgnn train's")
    a("--calibration", default=None, help="α-β and compute figures from spgnn calibrate --output (default: this "
      "project's 2-core machine); with --dataset all P processes share one such machine, with --nodes one a core")
    a("--memory-per-rank", default=None, help="leave out the layouts whose predicted peak memory per rank exceeds "
      "this (e.g. 4GB)")
    a("--output", default=None, help="write the table as JSON here")
    a("--quiet", action="store_true", help="no stage lines or progress bars")
    return p


COST_MAX_P = 8192           # spgnn cost's model keeps P×P statistics of the blocks: 0.5 GiB each at this P
# What spgnn cost models (docs/cost-model.md#limits): a graph of up to 2^40 nodes and 2^48 nonzeros, a model of up to
# 128 layers (GCNII's deepest is 64; planning takes about 3 s a layer for the default --nprocs on 2 cores) and 1024
# products a step, of widths up to 2^24 (planning's time and memory; its byte counts are exact Python integers)
COST_MAX = {"--nodes": (2**40, "graphs of at most 2^40 nodes (about 1.1e12)"),
            "--nnz": (2**48, "graphs of at most 2^48 nonzeros (about 2.8e14)"),
            "--layers": (128, "at most 128 layers"), "width": (2**24, "widths of at most 2^24 (16777216)"),
            "products": (1024, "at most 1024 products a step")}


def _cost_bound(flag: str, value, kind: str | None = None) -> None:
    """SpgnnError where `flag`'s `value` exceeds what spgnn cost models (`COST_MAX[kind or flag]`)."""
    most, what = COST_MAX[kind or flag]
    if value > most:
        shown = f"{value:g}" if isinstance(value, float) else value
        raise SpgnnError(f"{flag} {shown}: spgnn cost models {what}: give {flag} {most} or less")


def _cost_products(model):
    """`model` (a `ModelCost`), or SpgnnError where it makes more products a step than spgnn cost models (APPNP's
    --steps, say), before any planning."""
    most, what = COST_MAX["products"]
    if (products := sum(map(len, model.layers))) > most:
        raise SpgnnError(f"the model makes {products} products a step: spgnn cost models {what} (fewer --layers, or "
                         "--steps)")
    return model


def _process_counts(text: str) -> list[int]:
    """--nprocs of spgnn cost: comma-separated positive integers, each once, at most `COST_MAX_P`."""
    try:
        Ps = list(dict.fromkeys(int(x) for x in text.split(",")))
    except ValueError:
        Ps = []
    if not Ps or min(Ps) < 1:
        raise SpgnnError(f"--nprocs takes comma-separated process counts >= 1, e.g. 4,16,64; got {text!r}")
    if max(Ps) > COST_MAX_P:
        raise SpgnnError(f"--nprocs {max(Ps)}: spgnn cost models up to {COST_MAX_P} processes (it keeps P×P block "
                         "statistics)")
    return Ps


def cost_command(args, argv) -> int:
    from . import cost

    Ps = _process_counts(args.nprocs)
    for flag, value in (("--layers", args.layers), ("--hidden", args.hidden), ("--features", args.features),
                        ("--classes", args.classes), ("--heads", getattr(args, "heads", 1))):
        if value < 1:
            raise SpgnnError(f"{flag} must be at least 1, got {value}")
        _cost_bound(flag, value, None if flag == "--layers" else "width")
    model_options = {"model": args.model, "hidden": args.hidden, "layers": args.layers, "dropout": args.dropout,
                     "precompute": args.precompute} | {name: getattr(args, name) for name in layer_options()}
    TrainConfig(**model_options).validate()
    _check_files(args.output, args.calibration, dataset=args.dataset, what="the table")
    ab = cost.load_calibration(args.calibration) if args.calibration else None
    rates, limit = cost.load_rates(args.calibration), cost.memory_limit(args.memory_per_rank)
    statistics = [flag for flag, value in (("--nodes", args.nodes), ("--nnz", args.nnz),
                                           ("--features", args.features != STATISTICS_WIDTH),
                                           ("--classes", args.classes != STATISTICS_WIDTH)) if value]
    by_dataset = [flag for flag, value in (("--data-dir", args.data_dir),
                                           ("--partition", args.partition != COST_PARTITION)) if value]
    if args.dataset and statistics:
        raise SpgnnError(f"{' and '.join(statistics)} describe a graph by statistics, --dataset by its own: give one "
                         "or the other")
    if not args.dataset and by_dataset:
        raise SpgnnError(f"{' and '.join(by_dataset)} go{'es' if len(by_dataset) == 1 else ''} with --dataset, not "
                         "with --nodes and --nnz")
    if args.dataset:
        cfg = TrainConfig(dataset=args.dataset, data_dir=args.data_dir, partition=args.partition,
                          node_order=args.node_order, **model_options)
        check_method(args.partition)                    # before the graph is read
        if partitioned.is_partitioned(args.dataset):       # its own parts: the layouts of as many row blocks
            parts = partitioned.PartitionedDataset(args.dataset)
            given = cfg if args.partition != COST_PARTITION else replace(cfg, partition=TrainConfig.partition)
            check_folder_options(given, parts)          # (spgnn cost's default --partition is no choice made)
            model, stats_of = model_cost(cfg, parts.info), parts_stats(parts)
        else:
            graph = load_dataset(cfg.dataset, cfg.data_dir, seed=cfg.seed)
            model, stats_of = model_cost(cfg, graph), graph_stats(cfg, graph)
        _cost_products(model)
        rows = cost.compare(Ps, model, lambda cls, shape: stats_of(cls, shape, model.adjacencies), ab, rates, limit,
                            strict=False)
    elif args.nodes is not None and args.nnz is not None:
        n, nnz = args.nodes, args.nnz
        if not (1 <= n < math.inf and n == int(n) and 0 <= nnz <= n ** 2 and nnz == int(nnz)):
            raise SpgnnError(f"--nodes {n:g} --nnz {nnz:g}: n must be a whole number of at least 1 and nnz between 0 "
                             "and n², a whole number too")
        _cost_bound("--nodes", n)
        _cost_bound("--nnz", nnz)
        model = _cost_products(cost.ModelCost.of_config(TrainConfig(**model_options), args.features, args.classes))
        rows = cost.plan_table(int(args.nodes), int(args.nnz), Ps, model, ab, rates=rates, memory_per_rank=limit,
                               ordered=args.node_order == "rcm", strict=False)
    else:
        raise SpgnnError("spgnn cost needs --dataset, or --nodes and --nnz")
    best = {P: min((r for r in rows if r["P"] == P and "dropped" not in r), default=None,      # auto's pick
                   key=lambda r: cost.preference(r["epoch_s"], r["recv_bytes_per_rank"])) for P in Ps}
    cost.under_memory(rows, limit, f"on {args.nprocs} processes")     # none fits at any P: one line, as auto says
    print(f"spgnn cost: {'each P on one machine' if args.dataset else f'{rates.cores} ranks a machine, a core each,'} "
          f"like the calibrated one ({rates.cores} cores; --calibration)", flush=True)
    print(f"{'P':>6} {'algo':>8} {'c / grid':>9} {'MB in/rank/epoch':>17} {'comm s/epoch':>13} {'s/epoch':>9} "
          f"{'GiB/rank':>8}")
    shaping = [o for o in spmm.options().values() if o.shapes]
    for r in rows:
        mark = "  <- best" if best[r["P"]] is r else "  (does not fit --memory-per-rank)" if "dropped" in r else ""
        shape = " ".join(str(r[o.name]) for o in shaping if r[o.name] != o.default)
        print(f"{r['P']:>6} {r['algo']:>8} {shape:>9} {r['recv_bytes_per_rank'] / 1e6:>17.2f} "
              f"{r['comm_seconds']:>13.4f} {r['epoch_s']:>9.4f} {r['memory_bytes'] / 2**30:>8.2f}{mark}")
    for P in Ps:
        r, least = best[P], min((row["memory_bytes"] for row in rows if row["P"] == P), default=None)
        print(f"{args.dataset or 'the graph'} at P = {P}: " + (
            f"{r['epoch_s']:.4f} s an epoch, {r['memory_bytes'] / 2**30:.2f} GiB per rank (--algo {r['algo']}"
            + "".join(f" {o.flag} {r[o.name]}" for o in shaping if r[o.name] != o.default) + ")"
            if r else f"no layout runs ({cost.NO_LAYOUT})" if least is None else
            f"no layout fits --memory-per-rank (the least needs {least / 2**30:.2f} GiB a rank)"))
    if args.output:
        write_json(args.output, {"rows": rows, "argv": argv})
    return 0


COMMANDS = {"train": train, "calibrate": calibrate, "partition": partition, "cost": cost_command,
            "plot": plot_command}
OUT_OF_MEMORY = {       # what to do when a command runs out of memory
    "train": "use more processes, a smaller model, or spgnn cost --memory-per-rank to find a layout that fits",
    "calibrate": "give smaller --sizes (each rank holds its message of the largest size, and an all-gather P of them)",
    "partition": "partition on a machine with more memory, or an edge-list folder with --out-of-core (methods block, "
                 "random, ldg, fennel), which never holds the graph",
    "cost": "give smaller widths (--hidden, --features), plan a large --dataset by its statistics (--nodes, --nnz), or "
            "give fewer or smaller --nprocs (spgnn cost keeps P×P block statistics)",
    "plot": "chart fewer reports at once"}


PATHS = ("dataset", "data_dir", "cache_dir", "partition", "calibration", "resume", "checkpoint", "output", "json",
         "plot", "ogb_split")       # the options of the commands that name a file or folder
EMPTY_IS_NONE = frozenset({"ogb_split"})        # of them, those whose default is the empty path


def _paths(args) -> None:
    """The options of `args` naming a file or folder with a leading ``~`` expanded (``--output=~/r.json``, which the
    shell leaves as it is); SpgnnError where one was given an empty path (``--resume "$CKPT"``, CKPT unset), which a
    command would take for none: a resume from scratch, no report, the default cache; or ``-``, which would name a
    file ``-`` in the working folder."""
    empty = [n for n in PATHS if n not in EMPTY_IS_NONE and getattr(args, n, None) == ""]
    if flag := next((f"--{n.replace('_', '-')}" for n in empty), None):
        raise SpgnnError(f"{flag} was given an empty path (an unset shell variable?): give it a path, or leave {flag} "
                         "out")
    if flag := next((f"--{n.replace('_', '-')}" for n in PATHS if getattr(args, n, None) == "-"), None):
        raise SpgnnError(f"{flag} -: spgnn reads and writes files by name, not standard input or output; give {flag} a "
                         "file or folder name")
    for n in PATHS:
        if isinstance(value := getattr(args, n, None), str) and value.startswith("~"):
            setattr(args, n, os.path.expanduser(value))


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` (else this program's command line, the process ending with it); returns the exit
    status. SIGINT and SIGTERM are handled meanwhile (`spgnn.train.interrupt`)."""
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    progress.tolerate_stdout()                          # before --help, which prints α and ×
    args = parse(argv)
    try:
        _paths(args)
        rank = launch.detect().rank if argv else 0
    except SpgnnError as e:
        say(str(e))
        return 2
    progress.configure(rank == 0 and not getattr(args, "quiet", False))
    try:
        with interrupt.handled(say=rank == 0, keep=program):
            try:
                return _command(args, argv, rank)
            except interrupt.Interrupted as e:     # one that came while a failure was said and its job ended: said, too
                return e.code
    except interrupt.Interrupted as e:         # passed on by the --nprocs supervisor while this rank started
        if rank == 0:
            say(str(e))
        return e.code


def _command(args, argv, rank: int) -> int:
    """The command `args` on this process (rank `rank`); its failures as one line (the exit status returned)."""
    try:
        dense.get_backend()                             # $SPGNN_DENSE_BACKEND checked before any work
        with validate.allow_overlap(getattr(args, "allow_overlap", False)):
            return COMMANDS[args.command](args, argv)
    except SpgnnError as e:
        # input errors are the same on every rank: said once; a rank's own (it could not join the job): by each,
        # unless the --nprocs parent starts the job again (`launch.spawn`)
        again = isinstance(e, launch.JoinError) and e.quick and os.environ.get("SPGNN_JOIN_AGAIN")
        if (rank == 0 or getattr(e, "every_rank", False)) and not again:
            say(str(e))
        launch.leave()
        return launch.JOIN_FAILED if again else 2
    except (RuntimeError, MemoryError) as e:       # (numpy's allocation failure is a MemoryError)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if out_of_memory(e):
            remedy = OUT_OF_MEMORY.get(args.command, "use a machine with more memory")
            say(f"rank {rank}: out of memory ({first[:200]}): {remedy}")
        elif launch.communicating(e, launch.detect().world_size):   # a collective failed: a peer died or stalled
            say(f"rank {rank}: communication failed ({first}); another process probably exited or stalled, see "
                   "its output")
        else:                   # this rank's own failure: where it happened
            traceback.print_exc()
        launch.abort(1)
        launch.leave()
        return 1
    except KeyboardInterrupt as e:      # a signal stopped it at once: outside the epochs, or asked twice
        code = e.code if isinstance(e, interrupt.Interrupted) else 130
        if rank == 0:
            say(str(e) or "interrupted")
        launch.abort(code)
        launch.leave()
        return code
    except Exception:  # anything else failed on this rank: say where; under mpirun end the job, not hang it
        traceback.print_exc()
        launch.abort(1)
        return 1
