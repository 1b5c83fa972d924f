"""The ``spgnn`` command line: ``spgnn train ...`` (other tools add subcommands here)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import launch, spmm
from .errors import SpgnnError
from .layers import LAYERS
from .partition import PARTITIONERS
from .trainer import TrainConfig, Trainer, load_and_partition


def _train_parser(sub) -> argparse.ArgumentParser:
    d = TrainConfig()
    p = sub.add_parser("train", help="full-batch GNN training on a process grid",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Train a GNN full-batch with every layer a distributed sparse-dense product. "
                                   "Launch with --nprocs N, mpirun -np N, torchrun --nproc-per-node N, "
                                   "or as a single process.")
    a = p.add_argument
    a("--dataset", default=d.dataset, help="a known name (cora, citeseer, amazon-computers, amazon-photo, "
      "coauthor-cs, squirrel), rmat:SCALE[:EDGEFACTOR], sbm:..., or a path to a dataset file or folder")
    a("--data-dir", default=d.data_dir, help="where named datasets are looked up (else $SPGNN_DATA_DIR, "
      "./datasets, ../shared/datasets, ~/.cache/spgnn/datasets); cora is bundled")
    a("--model", default=d.model, choices=sorted(LAYERS), help="layer type")
    a("--algo", default=d.algo, choices=sorted(spmm.ALGORITHMS), help="distributed SpMM algorithm: 1d "
      "broadcasts whole blocks of H (CAGNET), 1d-halo exchanges only the rows each block touches")
    a("--partition", default=d.partition, help=f"vertex partition: {', '.join(PARTITIONERS)}, or a path to "
      "a .npy/.txt part vector (one part id per node)")
    a("--layers", type=int, default=d.layers, help="number of GNN layers")
    a("--hidden", type=int, default=d.hidden, help="hidden width")
    a("--dropout", type=float, default=d.dropout, help="dropout probability before each layer")
    a("--lr", type=float, default=d.lr, help="Adam learning rate")
    a("--weight-decay", type=float, default=d.weight_decay, help="Adam weight decay (L2)")
    a("--epochs", type=int, default=d.epochs, help="training epochs")
    a("--seed", type=int, default=d.seed, help="seed for weights, dropout, random partitions and splits")
    a("--feature-norm", default=d.feature_norm, choices=["row", "none"], help="row-normalise features")
    a("--eval-every", type=int, default=d.eval_every, help="evaluate every k epochs (0: only at the end)")
    a("--device", default=d.device, help="cpu (gloo) or cuda (nccl)")
    a("--timeout", type=float, default=d.timeout, help="seconds before a stalled collective fails "
      "(a rank that died cannot leave the others waiting)")
    a("--nprocs", type=int, default=None, help="start this many local processes (not needed under mpirun "
      "or torchrun, which give the process count)")
    a("--output", default=d.output, help="write the JSON run report here (rank 0)")
    a("--quiet", action="store_true", help="no per-epoch lines")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spgnn", description="Distributed full-batch GNN training "
                                     "written as sparse-dense matrix products over a process grid.")
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    return parser


def train(args, argv) -> int:
    cfg = TrainConfig(**{k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__})
    cfg.validate()
    launched = launch.detect()
    if args.nprocs is not None:
        if args.nprocs < 1:
            raise SpgnnError(f"--nprocs must be at least 1, got {args.nprocs}")
        if launched.kind == "single" and args.nprocs > 1:
            load_and_partition(cfg, args.nprocs)     # bad input: one message, before any process starts
            return launch.spawn(argv, args.nprocs)
        if launched.kind != "single" and args.nprocs != launched.world_size:
            raise SpgnnError(f"--nprocs {args.nprocs} disagrees with the {launched.world_size} processes "
                             f"{launched.kind} started: drop --nprocs")
    comm = launch.init(cfg.device, cfg.timeout)
    trainer = Trainer(cfg, comm)
    if comm.rank == 0 and not args.quiet:
        g = trainer.graph
        print(f"spgnn: {cfg.model} on {g.name} (n={g.n}, nnz={g.nnz}), {cfg.algo} on {comm.world_size} "
              f"process(es), launcher {launched.kind}", flush=True)
    report = trainer.run(log=None if args.quiet else lambda line: print(line, flush=True))
    if comm.rank == 0:
        f = report["final"]
        print(f"final  train {f['train_acc']:.4f}  val {f['val_acc']:.4f}  test {f['test_acc']:.4f}  "
              f"median epoch {report['median_epoch_s'] or 0:.4f} s", flush=True)
        if cfg.output:
            Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
            Path(cfg.output).write_text(json.dumps(report, indent=1))
    launch.shutdown()      # only after success: on an error the process exits and its peers see it
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    rank = launch.detect().rank if argv else 0
    try:
        return train(args, argv)
    except SpgnnError as e:
        if rank == 0:  # input errors are the same on every rank: say it once
            print(f"spgnn: error: {e}", file=sys.stderr, flush=True)
        return 2
    except RuntimeError as e:  # a collective failed: a peer died or timed out
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"spgnn: error: rank {rank}: communication failed ({first}); another process probably "
              f"exited or stalled, see its output", file=sys.stderr, flush=True)
        return 1
