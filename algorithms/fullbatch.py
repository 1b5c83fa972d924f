"""Full-batch GNN training on a process grid, written only against spgnn's public API.

    python algorithms/fullbatch.py --nprocs 4 --algo 1d-halo     # local processes
    mpirun -np 4 python algorithms/fullbatch.py --algo 1d        # or any launcher spgnn understands

Each rank loads the graph, keeps the rows its part owns, and trains; every layer's Â·H is the chosen
distributed SpMM. The script prints the accuracy and the bytes each rank sent.
"""

import argparse

import spgnn
from spgnn import launch


def train(comm, cfg: spgnn.TrainConfig) -> dict:
    report = spgnn.Trainer(cfg, comm).run(log=print if comm.rank == 0 else None)
    return {"final": report["final"], "sent": [r["sent_bytes"] for r in report["comm"]["per_rank"]]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora")
    p.add_argument("--model", default="gcn", choices=["gcn", "sage"])
    p.add_argument("--algo", default="1d-halo", choices=sorted(spgnn.ALGORITHMS))
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--nprocs", type=int, default=2)
    args = p.parse_args()
    cfg = spgnn.TrainConfig(dataset=args.dataset, model=args.model, algo=args.algo, epochs=args.epochs,
                            eval_every=10)
    if launch.detect().kind == "single":
        result = launch.run_local(train, args.nprocs, cfg, timeout_s=3600)[0]
    else:
        comm = launch.init()
        result = train(comm, cfg)
        launch.shutdown()
        if comm.rank:
            return
    print(f"test accuracy {result['final']['test_acc']:.4f}; bytes sent per rank: {result['sent']}")


if __name__ == "__main__":
    main()
