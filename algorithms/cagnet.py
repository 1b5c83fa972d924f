"""CAGNET's full-batch GCN with 1D, 1.5D, 2D and 3D distributed SpMM, written on spgnn's public API.

    python algorithms/cagnet.py --nprocs 4          # the four algorithms, one after another, on 4 local processes
    mpirun -np 8 python algorithms/cagnet.py        # or under any launcher spgnn understands

The same 2-layer GCN is trained with each algorithm (1.5D with c = 2, 2D and 3D on their default grids, as
square or cubic as P allows). The training curve does not depend on the algorithm, so the losses and
accuracies agree; what differs is the bytes each rank receives, which the cost model predicts exactly. That is
CAGNET's comparison: 1.5D wins on dense graphs, 2D/3D on sparse ones as P grows.
"""

import argparse

import spgnn

ALGORITHMS = {"1d": {}, "1.5d": {"replication": 2}, "2d": {}, "3d": {}}


def compare(comm, args) -> list[dict]:
    rows = []
    for algo, options in ALGORITHMS.items():
        if comm.world_size % options.get("replication", 1):
            continue
        comm.ledger.reset()
        cfg = spgnn.TrainConfig(dataset=args.dataset, algo=algo, epochs=args.epochs, hidden=args.hidden,
                                eval_every=0, **options)
        report = spgnn.Trainer(cfg, comm).run(log=None)
        recv = [r["recv_bytes"] for r in report["comm"]["per_rank"]]
        predicted = report["predicted"]                 # on rank 0
        rows.append({"algo": algo, "grid": "x".join(map(str, report["grid"]["shape"])),
                     "test_acc": report["final"]["test_acc"], "loss": report["final"]["loss"],
                     "recv_bytes": max(recv),
                     "exact": predicted and recv == [r["recv_bytes"] for r in predicted["per_rank"]]})
    if comm.rank == 0:
        show(rows)
    return rows


def show(rows) -> None:
    print(f"{'algo':>5} {'grid':>7} {'test acc':>9} {'final loss':>11} {'MB recv/rank (max)':>19} {'= model':>8}")
    for r in rows:
        print(f"{r['algo']:>5} {r['grid']:>7} {r['test_acc']:>9.4f} {r['loss']:>11.6f} {r['recv_bytes'] / 1e6:>19.3f} "
              f"{'yes' if r['exact'] else 'NO':>8}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora")
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--nprocs", type=int, default=4, help="local processes (ignored under mpirun or torchrun)")
    args = p.parse_args()
    spgnn.run(compare, args, nprocs=args.nprocs)


if __name__ == "__main__":
    main()
