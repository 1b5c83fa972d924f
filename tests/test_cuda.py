"""On a GPU: every algorithm, model and sampler computes on CUDA what it computes on the CPU (outputs, input and
weight gradients, losses, and the bytes the ledger counts), at P = 1, 2, 4 and 8. The CPU runs are checked against
the single-process reference by the rest of the suite. Processes that share one GPU join over gloo, their CUDA
tensors moved through host memory (nccl refuses two processes on one GPU); with a GPU each, over nccl, the set-up's
CPU tensors moved to the GPU. Skipped where torch sees no GPU."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from spgnn import MinibatchTrainer
from spgnn.comm.launch import backend, run_local
from spgnn.comm.staged import Staged
from spgnn.config import TrainConfig
from spgnn.spmm import registry
from spgnn.train.fullbatch import Trainer
from tests.graphs import small_graph
from tests.reference_model import assert_close

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

GRAPH = small_graph(n=53, f=9, seed=5, directed=True)


def _cases(P):
    """(model, algo, replication) for each algorithm that runs at P: 2d on square P, 3d on cubes."""
    algos = [("1d", 0), ("1d-halo", 0), ("sar", 0)] + [("1.5d", 2)] * (P % 2 == 0) + [("2d", 0)] * (P in (1, 4)) \
        + [("3d", 0)] * (P in (1, 8))
    return [(m, a, c) for a, c in algos for m in ("gcn", "sage", "gat")
            if m != "gat" or a in registry.attention_algorithms()]


def _step(comm, device, model, algo, c):
    """One forward and backward, then three Adam steps, on `device`: what each rank computed and counted."""
    heads = {"heads": 2} if model == "gat" else {}
    cfg = TrainConfig(model=model, hidden=8, dropout=0.5, seed=3, algo=algo, replication=c, partition="random",
                      feature_norm="none", epochs=3, eval_every=0, device=device, **heads)
    t = Trainer(cfg, comm, graph=GRAPH)
    t.x.requires_grad_(True)
    _, logits = t.forward_backward(epoch=2)
    grads = {k: p.grad.cpu().numpy().copy() for k, p in t.model.named_parameters()}
    out = (logits.cpu().numpy(), t.x.grad.cpu().numpy(), grads)
    t.x.requires_grad_(False)
    comm.ledger.reset()
    losses = [e["loss"] for e in t.run(log=None)["epochs"]]
    return out, losses, {k: tuple(v[:4]) for k, v in comm.ledger.rows.items()}


def _both(comm):
    transport = comm.transport
    home = str(transport.home) if isinstance(transport, Staged) else None
    return home, [(case, _step(comm, "cpu", *case), _step(comm, "cuda", *case)) for case in _cases(comm.world_size)]


@pytest.mark.parametrize("P", [1, 2, 4, 8])
def test_every_algorithm_computes_on_cuda_what_it_computes_on_cpu(P):
    results = run_local(_both, P, device="cuda", timeout_s=600)
    for rank, (home, cases) in enumerate(results):
        if P > 1:           # nccl takes its tensors on the GPU; gloo, for processes sharing one, on the host
            assert home == ("cuda:" + str(rank % torch.cuda.device_count()) if backend("cuda", P) == "nccl"
                            else "cpu"), home
        for (model, algo, c), cpu, cuda in cases:
            what = f"{model} {algo} c={c} P={P} rank {rank}"
            (logits, dx, grads), losses, ledger = cpu
            (logits_g, dx_g, grads_g), losses_g, ledger_g = cuda
            assert_close(logits_g, logits, f"logits {what}", rtol=1e-4)
            assert_close(dx_g, dx, f"dX {what}", rtol=1e-4)
            for name in grads:
                assert_close(grads_g[name], grads[name], f"d{name} {what}", rtol=1e-4,
                             scale=max(np.abs(g).max() for g in grads.values()))
            assert losses_g == pytest.approx(losses, rel=1e-4), what
            assert ledger_g == ledger, what      # the same bytes and messages, whichever device moved them


def _sampled(comm, device, split):
    cfg = TrainConfig(dataset="cora", model="sage", epochs=2, hidden=32, eval_every=0, device=device)
    final = MinibatchTrainer(cfg, comm, "sage:10,5", batch_size=64, bulk=2, split_graph=split).run(log=None)["final"]
    return final["loss"], final["test_acc"]


@pytest.mark.parametrize("split", [False, True])      # a split graph's evaluation compared CUDA and CPU tensors
@pytest.mark.parametrize("P", [1, 2])
def test_sampled_minibatches_train_alike_on_cuda(P, split):
    cpu, cuda = (run_local(_sampled, P, device, split, device=device)[0] for device in ("cpu", "cuda"))
    assert cuda == pytest.approx(cpu, rel=1e-4, abs=1e-4)


def test_an_ogb_link_folder_trains_alike_on_cuda(tmp_path):
    """Its Hits@K took the CUDA scores' .numpy()."""
    from spgnn.comm.comm import Comm
    from spgnn.train.link import LinkTrainer
    from tests.test_ogbl import _cfg, write_folder

    folder = write_folder(tmp_path, "hits")
    cpu, cuda = (LinkTrainer(_cfg(folder, tmp_path / "cache", epochs=2, device=device), Comm(0, 1)).run(log=None)
                 ["final"] for device in ("cpu", "cuda"))
    assert cuda == pytest.approx(cpu, rel=1e-4, abs=1e-4)


def _train(tmp_path, device, *args):
    out = tmp_path / f"{device}.json"
    run = subprocess.run([sys.executable, "-m", "spgnn", "train", "--device", device, "--output", str(out), *args],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout, json.loads(out.read_text())


def test_command_line_on_cuda_with_processes_sharing_a_gpu(tmp_path):
    args = ("--nprocs", "2", "--model", "gat", "--algo", "1d-halo", "--epochs", "5", "--heads", "2")
    _, cpu = _train(tmp_path, "cpu", *args)
    out, cuda = _train(tmp_path, "cuda", *args)
    if torch.cuda.device_count() < 2:
        assert "2 processes share 1 GPU(s), CUDA tensors moved through host memory" in out
    assert "the cost model's rates are CPU rates" in out
    assert cuda["final"] == pytest.approx(cpu["final"], rel=1e-4)

    def counted(report):
        return [(r["rank"], r["sent_bytes"], r["recv_bytes"], r["messages"]) for r in report["comm"]["per_rank"]]

    assert counted(cuda) == counted(cpu) and counted(cpu)[0][2] > 0
    assert all(r["cuda_peak_allocated_bytes"] > 0 for r in cuda["memory"]["per_rank"])          # GPU memory too
    assert all("cuda_peak_allocated_bytes" not in r for r in cpu["memory"]["per_rank"])
