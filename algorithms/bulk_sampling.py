"""Minibatch sampling written as sparse matrix products, many minibatches in one call, on spgnn's public API.

    python algorithms/bulk_sampling.py --nprocs 2
    mpirun -np 2 python algorithms/bulk_sampling.py

A minibatch's layer is a sparse product: a selection matrix Q of its frontier times the normalised adjacency
gives the frontier's rows, a keyed hash draws the kept entries (GraphSAGE: `fanout` per row; LADIES: `size`
columns for the layer, by importance), and the kept columns become the next frontier. Stacking the frontiers
of k minibatches makes one product of k× the rows: the bulk call. A minibatch depends only on its key, so the
bulk size changes speed, never the samples. The program samples k minibatches by hand, then trains a
GraphSAGE model on P processes with bulk sampling.
"""

import argparse
import time

import numpy as np

import spgnn
from spgnn.graph import load_dataset, normalize
from spgnn.sampling import make_sampler


def show_bulk(args) -> None:
    """k minibatches of 64 training nodes in one call and one at a time: the same blocks, and the time of each
    (after a first, untimed call)."""
    g = load_dataset(args.dataset)
    sampler = make_sampler(args.sampler, normalize(g.adj, "mean"))
    train = np.random.default_rng(0).permutation(np.flatnonzero(g.train_mask))
    seeds = [train[i * 64:(i + 1) * 64] for i in range(args.bulk)]
    sampler.sample(seeds, list(range(args.bulk)))                   # a first call: caches fill
    t0 = time.perf_counter()
    bulk = sampler.sample(seeds, list(range(args.bulk)))
    t1 = time.perf_counter()
    single = [sampler.sample([s], [k])[0] for k, s in enumerate(seeds)]
    t2 = time.perf_counter()
    same = all((a.blocks[i] != b.blocks[i]).nnz == 0 for a, b in zip(bulk, single) for i in range(len(a.blocks)))
    shapes = " ← ".join(f"{b.shape[0]}×{b.shape[1]}" for b in bulk[0].blocks[::-1])
    print(f"{args.sampler}: minibatch 0 blocks {shapes}; {args.bulk} minibatches in one call {1e3 * (t1 - t0):.1f} ms, "
          f"one by one {1e3 * (t2 - t1):.1f} ms; identical: {same}", flush=True)


def train(comm, args) -> dict:
    """Bulk sampling shown on rank 0, then GraphSAGE trained on every rank with bulk sampling."""
    if comm.rank == 0:
        show_bulk(args)
    cfg = spgnn.TrainConfig(dataset=args.dataset, model="sage", epochs=args.epochs, hidden=64, eval_every=0)
    report = spgnn.MinibatchTrainer(cfg, comm, args.sampler, batch_size=64, bulk=args.bulk).run(log=None)
    r = {"test_acc": report["final"]["test_acc"], "loss": report["final"]["loss"],
         "minibatches": report["sampling"]["minibatches"], "per_s": report["sampling"]["minibatches_per_s"]}
    if comm.rank == 0:
        print(f"trained: test acc {r['test_acc']:.4f}, final loss {r['loss']:.4f}, {r['minibatches']} minibatches "
              f"sampled at {r['per_s']:.0f}/s", flush=True)
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora")
    p.add_argument("--sampler", default="sage:10,5", help="sage:FANOUTS or ladies:SIZES")
    p.add_argument("--bulk", type=int, default=8, help="minibatches sampled in one call")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--nprocs", type=int, default=2, help="local processes (ignored under mpirun or torchrun)")
    args = p.parse_args()
    spgnn.run(train, args, nprocs=args.nprocs)


if __name__ == "__main__":
    main()
