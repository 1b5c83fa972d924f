"""Checkpoint and resume: a run stopped and resumed from its checkpoint continues bit for bit as the
uninterrupted run (every algorithm, full-batch and minibatch); a checkpoint resumes under another algorithm or
P to float rounding; bad checkpoints and folders fail with one line and change nothing."""

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import spgnn
import spgnn.spmm as algorithms
from spgnn import DistGraph, build_model, cli
from spgnn.comm.comm import Comm
from spgnn.comm.launch import run_local
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.train import checkpoint
from spgnn.train.fullbatch import Trainer
from spgnn.train.minibatch import MinibatchTrainer
from spgnn.train.optim import Adam

EPOCHS, STOP = 6, 3
BASE = dict(dataset="cora", hidden=8, epochs=EPOCHS, eval_every=2, checkpoint_every=STOP, dropout=0.5)


def _train(comm, folder, cfg, minibatch=False):
    """The report's losses and accuracies, and the final weights."""
    if minibatch:
        run = MinibatchTrainer(TrainConfig(**cfg), comm, "sage:5,5", batch_size=32, bulk=2)
    else:
        run = Trainer(TrainConfig(**cfg), comm)
    report = run.run(log=None)
    return {"losses": [e["loss"] for e in report["epochs"]],
            "acc": [(e.get("val_acc"), e.get("test_acc")) for e in report["epochs"]],
            "final": report["final"], "weights": {k: v.clone() for k, v in run.model.state_dict().items()}}


def _stop_and_resume(comm, root, cfg, minibatch=False):
    """(uninterrupted, stopped after STOP epochs then resumed) runs of cfg."""
    root = Path(root)
    whole = _train(comm, root / "whole", cfg | {"checkpoint": str(root / "whole")}, minibatch)
    _train(comm, root / "part", cfg | {"epochs": STOP, "checkpoint": str(root / "part")}, minibatch)
    if comm.rank == 0:                           # the checkpoint at STOP, kept (the resume below updates "part")
        shutil.copytree(root / "part", root / "at-stop")
    resumed = _train(comm, root / "part", cfg | {"resume": str(root / "part"), "checkpoint": str(root / "part")},
                     minibatch)
    return whole, resumed


def _every_algorithm(comm, root):
    out = {}
    for name in algorithms.ALGORITHMS:
        cfg = BASE | {"algo": name, "model": "sage" if name in ("1.5d", "3d") else "gcn"}
        out[name] = _stop_and_resume(comm, Path(root) / name, cfg)
    out["minibatch"] = _stop_and_resume(comm, Path(root) / "minibatch", BASE | {"model": "sage"}, minibatch=True)
    # another algorithm resumes 1d-halo's checkpoint (at STOP) of the same model
    other = BASE | {"algo": "2d", "resume": str(Path(root) / "1d-halo" / "at-stop")}
    out["other-algo"] = _train(comm, None, other)
    return out


def _same(a, b):
    assert a["losses"] == b["losses"] and a["acc"] == b["acc"] and a["final"] == b["final"]
    for k in a["weights"]:
        assert torch.equal(a["weights"][k], b["weights"][k]), k


def test_resumed_runs_equal_uninterrupted_ones_bit_for_bit(tmp_path):
    ranks = run_local(_every_algorithm, 2, str(tmp_path))
    for mine in ranks:
        for name in [*algorithms.ALGORITHMS, "minibatch"]:
            whole, resumed = mine[name]
            _same(whole, resumed)
        whole = mine["1d-halo"][0]
        other = mine["other-algo"]
        np.testing.assert_allclose(other["losses"], whole["losses"], rtol=1e-5)
        for k, w in whole["weights"].items():
            np.testing.assert_allclose(other["weights"][k].numpy(), w.numpy(), rtol=1e-4, atol=1e-6)
    # and on one process (another P), 1d-halo's P = 2 checkpoint continues to the same weights
    single = _train(Comm(0, 1), None, BASE | {"resume": str(tmp_path / "1d-halo" / "at-stop")})
    np.testing.assert_allclose(single["losses"], ranks[0]["1d-halo"][0]["losses"], rtol=1e-5)
    for k, w in ranks[0]["1d-halo"][0]["weights"].items():
        np.testing.assert_allclose(single["weights"][k].numpy(), w.numpy(), rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A checkpoint of cora, GCN hidden 8, after 2 epochs."""
    folder = tmp_path_factory.mktemp("ckpt")
    Trainer(TrainConfig(**BASE | {"epochs": 2, "checkpoint": str(folder)}), Comm(0, 1)).run(log=None)
    return folder


def _resume(folder, **changes):
    return Trainer(TrainConfig(**BASE | {"resume": str(folder)} | changes), Comm(0, 1)).run(log=None)


def test_bad_checkpoints_fail_with_what_differs(written, tmp_path):
    with pytest.raises(SpgnnError, match="holds no checkpoint"):
        _resume(tmp_path)
    with pytest.raises(SpgnnError, match="checkpoint.pt is a file: --resume takes the folder --checkpoint wrote"):
        _resume(written / "checkpoint.pt")                  # was "holds no checkpoint (checkpoint.pt)"
    with pytest.raises(SpgnnError, match="another model.*hidden 8 here 16"):
        _resume(written, hidden=16)
    with pytest.raises(SpgnnError, match="another graph"):
        _resume(written, dataset="sbm:300:4")
    raw = (written / "checkpoint.pt").read_bytes()
    for name, data, said in (("truncated", raw[:len(raw) // 2], "truncated or corrupt"),
                             ("corrupt", b"not a checkpoint" * 10, "not a zip archive")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "checkpoint.pt").write_bytes(data)
        with pytest.raises(SpgnnError, match=said):
            _resume(tmp_path / name)
    state = torch.load(written / "checkpoint.pt", weights_only=True)
    del state["identity"]
    (tmp_path / "keyless").mkdir()
    torch.save(state, tmp_path / "keyless" / "checkpoint.pt")
    with pytest.raises(SpgnnError, match="is not an spgnn checkpoint"):
        _resume(tmp_path / "keyless")
    (tmp_path / "other").mkdir()                    # a whole file of another program's: was "truncated or corrupt"
    torch.save({"config": Path("cfg.yaml")}, tmp_path / "other" / "checkpoint.pt")
    with pytest.raises(SpgnnError, match=r"is not an spgnn checkpoint of format spgnn-checkpoint/1: it holds a "
                                         r"pathlib\.\w*Path, which no spgnn checkpoint does"):
        _resume(tmp_path / "other")


def test_bad_folders_fail_and_overwrite_nothing(written, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    with pytest.raises(SpgnnError, match="cannot write checkpoints"):
        Trainer(TrainConfig(**BASE | {"checkpoint": str(tmp_path / "file" / "sub")}), Comm(0, 1)).run(log=None)
    before = (written / "checkpoint.pt").read_bytes()
    with pytest.raises(SpgnnError, match="holds a checkpoint already"):
        Trainer(TrainConfig(**BASE | {"checkpoint": str(written)}), Comm(0, 1)).run(log=None)
    code = cli.main(["train", "--epochs", "3", "--hidden", "16", "--resume", str(written), "--checkpoint",
                     str(written), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "another model" in err[0]
    assert (written / "checkpoint.pt").read_bytes() == before


def _unsaved(comm, folder, output, how):
    """A run whose first checkpoint (after epoch STOP − 1) cannot be written: its folder is removed just before
    (`how` "removed"), or replaced by a file ("a file")."""
    save = checkpoint.save

    def removed_first(f, state, last):
        shutil.rmtree(folder, ignore_errors=True)
        if how == "a file":
            folder.write_text("not a folder")
        return save(f, state, last)

    checkpoint.save = removed_first             # (rank 0 writes; in this rank's process alone)
    return Trainer(TrainConfig(**BASE | {"checkpoint": str(folder), "output": str(output)}), comm).run(log=None)


@pytest.mark.parametrize("how", ["removed", "a file"])
def test_a_checkpoint_that_cannot_be_written_stops_the_run_with_its_report(how, tmp_path, monkeypatch, capsys):
    """A checkpoint that could not be written mid-run (its folder removed or made a file, a full disk) ended the run
    with one line (a traceback where the folder became a file) and no report: the epochs it had trained were lost
    with it. The run stops after that epoch, every rank alike, its report of the epochs done written, as a diverged
    run's is, then fails in that one line."""
    folder, output = tmp_path / "ck", tmp_path / "r.json"
    with pytest.raises(SpgnnError, match=rf"^rank \d: cannot write the checkpoint .*; the run stopped after epoch "
                                         rf"{STOP - 1}$") as e:
        run_local(_unsaved, 2, folder, output, how)
    report = json.loads(output.read_text())
    assert [e["epoch"] for e in report["epochs"]] == list(range(STOP)) and report["final"] is None
    assert str(e.value).endswith(report["stopped"]) and not folder.is_dir()

    def full(*args):
        raise SpgnnError("no room")

    monkeypatch.setattr(checkpoint, "save", full)               # and one line, exit status 2, on the command line
    code = cli.main(["train", "--epochs", "4", "--hidden", "16", "--checkpoint", str(tmp_path / "ck2"),
                     "--checkpoint-every", "2", "--output", str(output), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["spgnn: error: no room; the run stopped after epoch 1"]
    assert len(json.loads(output.read_text())["epochs"]) == 2


@pytest.mark.parametrize("command, flag, value", [
    *((c, f, v) for v in ("", "-") for c, f in (("train", "--resume"), ("train", "--checkpoint"), ("train", "--output"),
                                                ("train", "--cache-dir"), ("cost", "--calibration"),
                                                ("partition", "--output"), ("plot", "--output"))),
    ("train", "--ogb-split", "-")])            # (--ogb-split's empty path is its default: no split)
def test_an_empty_path_or_a_dash_is_refused(command, flag, value, tmp_path, capsys, monkeypatch):
    """``--resume "$CKPT"`` with CKPT unset gave an empty path, which the run took for none: it trained from epoch 0
    (and wrote no checkpoint or report) as if all were well; ``spgnn partition --output ''`` saved nothing,
    ``--cache-dir ''`` used the default cache, ``spgnn plot --output ''`` called the empty path a folder. ``--output
    -``, for standard output as other tools take it, wrote a file named ``-``."""
    monkeypatch.chdir(tmp_path)
    args = {"train": ["--epochs", "2", "--hidden", "16", "--quiet"], "cost": ["--nprocs", "2"],
            "partition": ["--nparts", "2", "--method", "random"], "plot": [str(tmp_path)]}[command]
    code = cli.main([command, *args, flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    said = {"": f"{flag} was given an empty path (an unset shell variable?): give it a path, or leave {flag} out",
            "-": f"{flag} -: spgnn reads and writes files by name, not standard input or output; give {flag} a file "
                 "or folder name"}[value]
    assert code == 2 and err == [f"spgnn: error: {said}"]
    assert list(tmp_path.iterdir()) == []


def test_paths_given_to_the_config_are_written_as_strings(tmp_path):
    """A program that gave its TrainConfig pathlib.Path's (output, checkpoint) lost its report to a TypeError once
    the run was over, and its checkpoint, which held the Paths, could not be resumed ("truncated or corrupt")."""
    folder, output = tmp_path / "ck", tmp_path / "r.json"
    Trainer(TrainConfig(**BASE | {"checkpoint": folder, "output": output}), Comm(0, 1)).run(log=None)
    assert json.loads(output.read_text())["config"]["checkpoint"] == str(folder)
    resumed = Trainer(TrainConfig(**BASE | {"epochs": EPOCHS + 1, "resume": folder}), Comm(0, 1)).run(log=None)
    assert [e["epoch"] for e in resumed["epochs"]] == list(range(EPOCHS + 1))


def test_resume_runs_only_the_remaining_epochs(written, tmp_path):
    """From a checkpoint after epoch 1, only epochs 2.. run (counted), and they start from the checkpoint's
    weights: zeroed there, the first resumed loss is ln C (uniform logits), which no rerun from epoch 0 gives."""
    state = torch.load(written / "checkpoint.pt", weights_only=True)
    state["model"] = {k: torch.zeros_like(v) if v.is_floating_point() else v for k, v in state["model"].items()}
    (tmp_path / "zero").mkdir()
    torch.save(state, tmp_path / "zero" / "checkpoint.pt")
    with pytest.raises(SpgnnError, match="is damaged: its weights or state are not those written"):
        checkpoint.load(tmp_path / "zero", {})               # changed behind spgnn's back (a byte flipped, say)
    checkpoint.save(tmp_path / "zero", {k: v for k, v in state.items() if k not in ("format", "digest")})
    run = Trainer(TrainConfig(**BASE | {"resume": str(tmp_path / "zero")}), Comm(0, 1))
    ran, step = [], run.epoch
    run.epoch = lambda e: ran.append(e) or step(e)
    report = run.run(log=None)
    assert ran == list(range(2, EPOCHS))
    losses = [e["loss"] for e in report["epochs"]]
    assert losses[:2] == [e["loss"] for e in state["progress"]["epochs"]]        # carried over, not recomputed
    assert losses[2] == pytest.approx(np.log(run.info.num_classes), rel=1e-6)
    assert abs(_train(Comm(0, 1), None, BASE)["losses"][2] - losses[2]) > 1e-3


@pytest.mark.parametrize("change, needle", [
    ({"seed": 1}, "another run (seed 0 here 1)"),
    ({"dropout": 0.1}, "another run (dropout 0.5 here 0.1)"),
    ({"feature_norm": "none"}, "another run (feature_norm 'row' here 'none')"),
    ({"epochs": 1}, "has trained 2 epochs already, more than --epochs 1: give --epochs of at least 2"),
])
def test_resume_refuses_what_would_change_the_run(written, change, needle):
    with pytest.raises(SpgnnError, match=re.escape(needle)):
        _resume(written, **change)


def test_weights_of_another_layout_of_the_model_are_one_line(tmp_path):
    """APPNP with --batch-norm lost the norm of its logits: its checkpoints from before hold norms.1.*, which
    load_state_dict refused with a page of RuntimeError."""
    cfg = BASE | {"model": "appnp", "batch_norm": True, "epochs": 2, "checkpoint": str(tmp_path / "ck")}
    Trainer(TrainConfig(**cfg), Comm(0, 1)).run(log=None)
    state = torch.load(tmp_path / "ck" / "checkpoint.pt", weights_only=True)
    state["model"] |= {"norms.1.weight": torch.ones(7), "norms.1.bias": torch.zeros(7)}
    checkpoint.save(tmp_path / "ck", {k: v for k, v in state.items() if k not in ("format", "digest")})
    with pytest.raises(SpgnnError, match="ck: its weights do not fit this version's --model appnp .*norms.1.weight"):
        Trainer(TrainConfig(**cfg | {"epochs": 3, "checkpoint": None, "resume": str(tmp_path / "ck")}),
                Comm(0, 1)).run(log=None)


def test_resume_under_another_partition_and_to_as_many_epochs(written, tmp_path):
    """No result depends on the partition, yet a resume under another one was refused, so a checkpoint of a run on a
    partition file resumed on no other P; and a run that died after its last checkpoint, in its final evaluation
    or report, could not be finished: --epochs as many as it trained "left none to run"."""
    from spgnn.cli import main

    np.save(tmp_path / "parts.npy", np.arange(2708) % 2)
    run = ["train", "--dataset", "cora", "--hidden", "8", "--eval-every", "2", "--quiet"]
    assert main(run + ["--epochs", "2", "--nprocs", "2", "--partition", str(tmp_path / "parts.npy"), "--checkpoint",
                       str(tmp_path / "ck")]) == 0
    assert main(run + ["--epochs", "3", "--resume", str(tmp_path / "ck"), "--output", str(tmp_path / "r.json")]) == 0
    assert main(run + ["--epochs", "3", "--output", str(tmp_path / "whole.json")]) == 0
    other, whole = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("r", "whole"))
    np.testing.assert_allclose([e["loss"] for e in other["epochs"]], [e["loss"] for e in whole["epochs"]], rtol=1e-5)
    finished = _resume(written, epochs=2)                                   # none ran: evaluated and reported
    whole = Trainer(TrainConfig(**BASE | {"epochs": 2}), Comm(0, 1)).run(log=None)
    assert [{k: v for k, v in e.items() if k != "time_s"} for e in finished["epochs"]] == \
        [{k: v for k, v in e.items() if k != "time_s"} for e in whole["epochs"]]
    assert (finished["best"], finished["final"]) == (whole["best"], whole["final"])


def test_resume_refuses_another_way_of_training(written, tmp_path):
    """A full-batch checkpoint resumed with a sampler (a KeyError at its counters), and a sampled run's with another
    sampler, batch size or full-batch (accepted and mixed), are one line each; bulk does not change the samples."""
    sampled = tmp_path / "sampled"
    MinibatchTrainer(TrainConfig(**BASE | {"model": "sage", "epochs": 2, "checkpoint": str(sampled)}), Comm(0, 1),
                     "sage:5,5", batch_size=32, bulk=2).run(log=None)
    for folder, model, sampler, batch, said in (
            (written, "gcn", "sage:5,5", 32, "training 'full-batch' here 'sampler sage:5,5, batch size 32'"),
            (sampled, "sage", "sage:5,10", 32, "here 'sampler sage:5,10, batch size 32'"),
            (sampled, "sage", "sage:5,5", 16, "here 'sampler sage:5,5, batch size 16'")):
        with pytest.raises(SpgnnError, match=re.escape(said)):
            MinibatchTrainer(TrainConfig(**BASE | {"model": model, "resume": str(folder)}), Comm(0, 1), sampler,
                             batch_size=batch).run(log=None)
    with pytest.raises(SpgnnError, match=re.escape("training 'sampler sage:5,5, batch size 32' here 'full-batch'")):
        _resume(sampled, model="sage")
    resumed = MinibatchTrainer(TrainConfig(**BASE | {"model": "sage", "resume": str(sampled)}), Comm(0, 1),
                               "sage:5,5", batch_size=32, bulk=4).run(log=None)
    assert len(resumed["epochs"]) == EPOCHS


def test_extra_state_that_cannot_be_read_back_is_refused_at_save(tmp_path):
    """save_checkpoint's extra with a numpy number was written, then refused as "truncated or corrupt" at load."""
    g = DistGraph(dataset="cora")
    model = build_model("gcn", g.num_features, g.num_classes)
    opt = Adam(model.parameters())
    with pytest.raises(SpgnnError, match=r"^save_checkpoint's extra holds what a checkpoint cannot read back \(numpy"):
        g.save_checkpoint(tmp_path / "ck", model, opt, 3, best=np.float64(0.5))
    with pytest.raises(SpgnnError, match=r"^save_checkpoint's extra holds .*lambda.*: keep plain numbers"):
        g.save_checkpoint(tmp_path / "ck", model, opt, 3, decay=lambda e: 0.9 ** e)     # pickle's traceback, before
    assert not (tmp_path / "ck" / "checkpoint.pt").exists()
    g.save_checkpoint(tmp_path / "ck", model, opt, 3, best=0.5)
    assert g.load_checkpoint(tmp_path / "ck", model, opt) == (3, {"best": 0.5})


def test_resume_allows_a_new_lr_and_more_epochs(written):
    report = _resume(written, lr=0.002, epochs=EPOCHS + 1)
    assert len(report["epochs"]) == EPOCHS + 1 and report["config"]["lr"] == 0.002
    ran = report["epochs"][2:]                  # the seconds are of the epochs this process ran
    assert report["median_epoch_s"] == pytest.approx(float(np.median([e["time_s"] for e in ran])))


def _resumed_bytes(comm, folder):
    Trainer(TrainConfig(**BASE | {"epochs": 2, "checkpoint": folder}), comm).run(log=None)
    comm.ledger.reset()
    report = Trainer(TrainConfig(**BASE | {"epochs": 3, "resume": folder}), comm).run(log=None)
    return report["comm"]["per_rank"], report["predicted"] and report["predicted"]["per_rank"]


def test_a_resumed_run_predicts_the_bytes_it_sends(tmp_path):
    """The bytes a resumed run measures (its own epochs) equal the model's prediction for those epochs; it predicted
    the whole run's before (1.3 MB against 0.5 MB on cora at P = 2)."""
    measured, predicted = run_local(_resumed_bytes, 2, str(tmp_path / "ck"))[0]
    assert [r["sent_bytes"] for r in measured] == [r["sent_bytes"] for r in predicted] and measured[0]["sent_bytes"]


WRITER = """
import sys, torch
from spgnn.train import checkpoint
checkpoint.save(sys.argv[1], {"epoch": 0, "model": {"w": torch.ones(3)}})
print("saved", flush=True)
sys.stdin.readline()
checkpoint.save(sys.argv[1], {"epoch": 1, "model": {"w": torch.zeros(1 << 27)}})   # 512 MiB: long enough
"""


def test_writer_killed_mid_save_keeps_the_previous_checkpoint(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "saved"
        writer.stdin.write("\n")
        writer.stdin.flush()
        while not (tmps := [t for t in tmp_path.glob(f".{checkpoint.FILE}.{writer.pid}@*") if t.stat().st_size]):
            assert writer.poll() is None, "the writer ended before it was killed"
        tmp, = tmps
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    finally:
        writer.kill()
    assert tmp.stat().st_size < 1 << 29                                  # killed mid-write
    state = torch.load(tmp_path / checkpoint.FILE, weights_only=True)
    assert state["epoch"] == 0 and torch.equal(state["model"]["w"], torch.ones(3))
    checkpoint.save(tmp_path, {k: v for k, v in state.items() if k not in ("format", "digest")})
    assert not tmp.exists()                                               # the dead writer's file, removed


def test_a_resumed_run_keeps_only_the_evaluations_of_its_schedule(tmp_path):
    """A checkpoint's last epoch is evaluated as the end of its run; resumed to more epochs, that evaluation stayed
    in the records and could be the best, though the uninterrupted run never made it."""
    cfg = BASE | {"eval_every": 4, "lr": 0.5}
    whole = Trainer(TrainConfig(**cfg), Comm(0, 1)).run(log=None)
    Trainer(TrainConfig(**cfg | {"epochs": 3, "checkpoint": str(tmp_path)}), Comm(0, 1)).run(log=None)
    resumed = Trainer(TrainConfig(**cfg | {"resume": str(tmp_path)}), Comm(0, 1)).run(log=None)
    assert [sorted(e) for e in resumed["epochs"]] == [sorted(e) for e in whole["epochs"]]
    assert [e.get("val_acc") for e in resumed["epochs"]] == [e.get("val_acc") for e in whole["epochs"]]
    assert resumed["best"] == whole["best"]


def test_a_resume_that_cannot_run_is_refused_before_any_work(written, capsys, tmp_path):
    """--resume with --epochs the checkpoint has passed, or another --hidden, was found after the processes had
    started, partitioned and set up; and after the folders of --output and --checkpoint were made."""
    from spgnn.cli import main

    base = ["train", "--dataset", "cora", "--nprocs", "2", "--resume", str(written), "--output",
            str(tmp_path / "out" / "r.json"), "--checkpoint", str(tmp_path / "new" / "deep")]
    for extra, needle in ((["--epochs", "1", "--hidden", "8"], "has trained 2 epochs already, more than --epochs 1"),
                          (["--epochs", "9", "--hidden", "16"], "is of another model (hidden 8 here 16)"),
                          (["--epochs", "9", "--hidden", "8", "--seed", "3"], "is of another run (seed 0 here 3)")):
        capsys.readouterr()
        assert main(base + extra) == 2
        out, err = capsys.readouterr()
        assert needle in err and "partitioning" not in out and "setting up" not in out, (out, err)
        assert not {"out", "new"} & {p.name for p in tmp_path.iterdir()}


def test_a_split_of_the_same_sizes_is_another_run(tmp_path):
    """The run identity kept the split's sizes only: a checkpoint resumed on a partitioned folder whose split was
    drawn with another seed (sizes per class alike) trained on, from epoch K, another split."""
    from dataclasses import replace as replaced

    from spgnn.graph.datasets import load_dataset
    from spgnn.partition.partition import make_partition
    from spgnn.partition.partitioned import InMemoryParts, write_parts

    g = load_dataset("cora")
    swap = np.flatnonzero(g.train_mask)[:3], np.flatnonzero(g.val_mask)[:3]    # same sizes, other nodes
    train, val = g.train_mask.copy(), g.val_mask.copy()
    train[swap[0]], val[swap[0]], train[swap[1]], val[swap[1]] = False, True, True, False
    other = replaced(g, train_mask=train, val_mask=val)
    for graph, name in ((g, "same"), (other, "other")):
        write_parts(tmp_path / name, InMemoryParts(graph, make_partition("block", graph.adj, 1)))
    cfg = dict(hidden=8, epochs=4, eval_every=0)
    Trainer(TrainConfig(**cfg | {"epochs": 2, "checkpoint": str(tmp_path / "ck")}), Comm(0, 1), graph=g).run(log=None)
    resumed = Trainer(TrainConfig(**cfg | {"dataset": str(tmp_path / "same"), "resume": str(tmp_path / "ck")}),
                      Comm(0, 1)).run(log=None)
    assert len(resumed["epochs"]) == 4
    with pytest.raises(SpgnnError, match="is of another run \\(split_hash '[0-9a-f]{16}' here '[0-9a-f]{16}'\\)"):
        Trainer(TrainConfig(**cfg | {"dataset": str(tmp_path / "other"), "resume": str(tmp_path / "ck")}),
                Comm(0, 1)).run(log=None)


def test_a_set_in_a_checkpoints_extra_reads_back_whole(tmp_path):
    """The digest hashed a set by its repr, whose order changes from one process (or load) to the next: the
    checkpoint was then 'damaged' at every read."""
    state = {"epoch": 0, "model": {}, "optimizer": {}, "progress": {"extra": {"seen": {"b", "a", "c", 3}}},
             "identity": {}}
    checkpoint.save(tmp_path, state)
    loaded = torch.load(tmp_path / checkpoint.FILE, weights_only=True)
    assert loaded["digest"] == checkpoint.digest(state | {"progress": {"extra": {"seen": {3, "c", "a", "b"}}}})
    assert checkpoint._read(tmp_path)[1]["progress"]["extra"]["seen"] == {"a", "b", "c", 3}


def test_a_checkpoint_without_the_dropout_counts_loads():
    """States saved before GNN and GATConv kept their dropout counts (buffers ``forwards``, ``salt``) still load,
    in plain load_state_dict too, those counts left as they are; any other key missing or unexpected is refused
    as before."""
    model = spgnn.build_model("gat", 5, 3, hidden=4, dropout=0.5)
    model.forwards += 7
    old = {k: v for k, v in model.state_dict().items() if k.rpartition(".")[2] not in ("forwards", "salt")}
    assert len(old) < len(model.state_dict())
    fresh = spgnn.build_model("gat", 5, 3, hidden=4, dropout=0.5)
    fresh.load_state_dict(old)
    assert fresh.forwards == 0 and all(torch.equal(v, fresh.state_dict()[k]) for k, v in old.items())
    fresh.load_state_dict(model.state_dict())
    assert fresh.forwards == 7
    with pytest.raises(RuntimeError, match="Unexpected key"):
        fresh.load_state_dict(old | {"stray": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="Missing key"):
        fresh.load_state_dict({k: v for k, v in old.items() if k != "layers.0.weight"})


def _slow_saves(comm, folder):
    """A run and a program of one's own checkpointing at P = 2, rank 0's writes lasting twice the collectives'
    timeout (2 s)."""
    import time

    real = checkpoint.save
    if comm.rank == 0:
        checkpoint.save = lambda *a: time.sleep(4) or real(*a)
    cfg = TrainConfig(**BASE | {"epochs": 1, "timeout": 2.0})
    report = Trainer(replace_cfg(cfg, checkpoint=f"{folder}/run"), comm).run(log=None)
    g = DistGraph(comm, cfg)
    model = build_model("gcn", g.num_features, g.num_classes)
    g.save_checkpoint(f"{folder}/own", model, Adam(model.parameters()), 0)
    return len(report["epochs"]), comm.all_gather_object(comm.rank)


def replace_cfg(cfg, **changes):
    from dataclasses import replace

    return replace(cfg, **changes)


def test_a_long_checkpoint_write_outlasts_the_timeout(tmp_path):
    """Rank 0 wrote while the others waited in a collective: a write longer than --timeout (a large model, a slow
    disk) failed them ("Timed out waiting 1000ms"; hidden 3072 on cora at P = 2, --timeout 1), and so the run."""
    assert run_local(_slow_saves, 2, str(tmp_path), timeout_s=2.0, deadline_s=120.0) == [(1, [0, 1])] * 2
    assert {p.parent.name for p in tmp_path.glob(f"*/{checkpoint.FILE}")} == {"run", "own"}


@pytest.mark.parametrize("at", [0, 1])
def test_a_folder_another_run_writes_to_is_not_overwritten(tmp_path, at):
    """Two runs given one empty --checkpoint folder both passed its check and then replaced each other's checkpoints
    in turn, both ending well: a resume took whichever wrote last (another --lr, say) as its own. The other run's
    checkpoint appears before this run's first (`at` 0) or after it (1)."""
    other = {"epoch": 7, "model": {"w": torch.ones(2)}, "optimizer": {}, "progress": {}, "identity": {}}
    run = Trainer(TrainConfig(**BASE | {"epochs": 3, "checkpoint_every": 1, "checkpoint": str(tmp_path)}), Comm(0, 1))
    step = run.epoch

    def epoch(e):
        if e == at:
            checkpoint.save(tmp_path, other)
        return step(e)

    run.epoch = epoch
    with pytest.raises(SpgnnError, match=f"checkpoint.pt has changed since this run {'began' if at == 0 else 'wrote'}"
                                         ".*another run writes checkpoints to .* too"):
        run.run(log=None)
    assert torch.load(tmp_path / checkpoint.FILE, weights_only=True)["epoch"] == 7
    g = DistGraph(dataset="cora")                   # and a program of one's own
    model = build_model("gcn", g.num_features, g.num_classes)
    opt = Adam(model.parameters())
    g.save_checkpoint(tmp_path / "own", model, opt, 0)
    checkpoint.save(tmp_path / "own", other)
    with pytest.raises(SpgnnError, match="has changed since this run wrote or resumed from it"):
        g.save_checkpoint(tmp_path / "own", model, opt, 1)
    (tmp_path / "own" / checkpoint.FILE).unlink()                   # (removed: nothing to overwrite)
    g.save_checkpoint(tmp_path / "own", model, opt, 1)
    assert g.load_checkpoint(tmp_path / "own", model, opt)[0] == 1


def test_a_checkpoint_another_run_puts_in_place_during_the_write_is_kept(tmp_path, monkeypatch):
    """The stamp was checked only before the write: another run's checkpoint renamed into the folder while this
    one's was written (a large model) was then replaced, both runs ending well. It is checked again just before the
    rename; nothing of this write is left."""
    other = {"epoch": 7, "model": {"w": torch.ones(2)}, "optimizer": {}, "progress": {}, "identity": {}}
    mine = other | {"epoch": 1}
    real = torch.save

    def slow(state, tmp):           # the other run's write lands while this one writes
        if state["epoch"] == 1:
            monkeypatch.setattr(checkpoint.torch, "save", real)
            checkpoint.save(tmp_path, other)
        real(state, tmp)

    monkeypatch.setattr(checkpoint.torch, "save", slow)
    with pytest.raises(SpgnnError, match="has changed since this run began"):
        checkpoint.save(tmp_path, mine, None)
    assert torch.load(tmp_path / checkpoint.FILE, weights_only=True)["epoch"] == 7
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint.FILE]


def test_a_checkpoint_of_another_task_is_one_line_before_any_work(tmp_path, capsys):
    """A multiclass checkpoint resumed with --task binary was refused after the set-up, as 'written by another
    version of spgnn; start the run again' (its output layer's width differs)."""
    from spgnn.cli import main

    run = ["train", "--dataset", "sbm:300:2", "--hidden", "8", "--quiet"]
    assert main(run + ["--epochs", "2", "--checkpoint", str(tmp_path / "ck")]) == 0
    capsys.readouterr()
    assert main(run + ["--epochs", "3", "--task", "binary", "--resume", str(tmp_path / "ck")]) == 2
    assert "is of another run (task 'multiclass' here 'binary')" in capsys.readouterr().err
    Trainer(TrainConfig(dataset="sbm:300:2", hidden=8, epochs=3, task="binary", checkpoint=str(tmp_path / "b")),
            Comm(0, 1)).run(log=None)
    with pytest.raises(SpgnnError, match=re.escape("is of another run (task 'binary' here 'multiclass')")):
        Trainer(TrainConfig(dataset="sbm:300:2", hidden=8, epochs=4, resume=str(tmp_path / "b")),
                Comm(0, 1)).run(log=None)


def test_a_resumed_run_keeps_no_copy_of_the_checkpoint(written, monkeypatch):
    """The checkpoint read at resume stayed referenced through the run: its weights and Adam's moments were held
    twice (a resumed GCN of hidden 8192 on cora peaked 113 MiB above the uninterrupted run)."""
    import gc
    import weakref

    loaded, load = [], checkpoint.load

    def kept(*args, **kwargs):
        state = load(*args, **kwargs)
        moments = [t for s in state["optimizer"]["state"].values() for t in s.values() if torch.is_tensor(t)]
        loaded.extend(weakref.ref(t) for t in [*state["model"].values(), *moments])
        return state

    monkeypatch.setattr(checkpoint, "load", kept)
    run = Trainer(TrainConfig(**BASE | {"resume": str(written)}), Comm(0, 1))
    alive, step = [], run.epoch

    def epoch(e):
        gc.collect()
        alive.append(sum(r() is not None for r in loaded))
        return step(e)

    run.epoch = epoch
    run.run(log=None)
    assert len(loaded) > len(run.model.state_dict()) and alive == [0] * (EPOCHS - 2)
