"""Your own model on any layout: a GCN with residual connections and jumping knowledge, written as an ordinary
nn.Module and trained with an ordinary loop and torch.optim.Adam on spgnn's public API.

    python algorithms/your_model.py --nprocs 4 --algo 2d
    mpirun -np 4 python algorithms/your_model.py --algo sar
    torchrun --nproc-per-node 4 algorithms/your_model.py --algo 1.5d
"""

import argparse
import os

import numpy
import torch

import spgnn


class JKResGCN(torch.nn.Module):
    """h_1 = ReLU(Â·X·W_1), h_l = ReLU(Â·h_{l−1}·W_l) + h_{l−1}; logits = [h_1 | … | h_L]·W_out (jumping knowledge)."""

    def __init__(self, f_in, hidden, classes, layers=3):
        super().__init__()
        widths = [f_in] + [hidden] * layers
        self.convs = torch.nn.ModuleList(spgnn.GCNConv(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.out = spgnn.Linear(layers * hidden, classes)

    def forward(self, g, x):
        hs, h = [], x
        for i, conv in enumerate(self.convs):
            z = torch.relu(conv(g, h))
            h = z + h if i else z
            hs.append(h)
        return self.out(g, g.cat(hs))          # not torch.cat: on 2D/3D a rank holds a block of the columns


def main(comm, args):
    g = spgnn.DistGraph(comm, dataset=args.dataset, algo=args.algo, grid=args.grid, adjacency="gcn")
    torch.manual_seed(0)                       # the same weights on every rank (prepare checks)
    model = JKResGCN(g.num_features, args.hidden, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    model = g.prepare(model, opt)
    losses = []
    for _ in range(args.epochs):
        model.train()
        opt.zero_grad()
        loss = g.cross_entropy(model(g, g.x), "train")     # the global mean over the training nodes
        loss.backward()
        g.sync_gradients(model)                             # summed over the ranks that hold disjoint rows
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(g, g.x)
        acc = g.accuracy(logits)
    if args.predictions:                       # every node's logits, n×classes in original order (on every rank)
        everything = g.gather(logits)
        if comm.rank == 0:
            numpy.save(args.predictions, everything)
    if comm.rank == 0:
        print(f"{args.algo} on {comm.world_size} processes: loss {losses[-1]:.4f}, test accuracy {acc['test_acc']:.4f}")
    return losses, acc


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora")
    p.add_argument("--algo", default="1d-halo", choices=sorted(spgnn.ALGORITHMS))
    p.add_argument("--grid", default=None, help="2d: RxC, 3d: RxCxL (default: the most square or cubic)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--predictions", default=None, help="save every node's logits here (.npy, n×classes)")
    p.add_argument("--nprocs", type=int, default=1, help="local processes (not needed under mpirun or torchrun)")
    args = p.parse_args()
    if args.predictions:                       # checked now, not after training (numpy.save adds .npy)
        args.predictions += "" if args.predictions.endswith(".npy") else ".npy"
        try:
            existed = os.path.exists(args.predictions)
            open(args.predictions, "ab").close()
            if not existed:
                os.remove(args.predictions)
        except OSError as e:
            p.error(f"cannot write --predictions {args.predictions}: {e.strerror}")
    spgnn.run(main, args, nprocs=args.nprocs)
