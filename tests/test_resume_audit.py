"""What a user whose runs are interrupted sees: a run that ends early says why, also when its report cannot be
written; a checkpoint or report that cannot be written says what went wrong."""

import errno
import json
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spgnn import cli
from spgnn.comm.comm import Comm
from spgnn.config import TrainConfig
from spgnn.errors import SpgnnError
from spgnn.train import checkpoint, loop
from spgnn.train.fullbatch import Trainer

UNWRITABLE = "cannot write r.json (Read-only file system): it is unchanged, and what was to go there is in /tmp/r.json"


@pytest.mark.parametrize("how, said", [("unsaved", "no room; the run stopped after epoch 1"),
                                       ("diverged", "the training loss became nan at epoch 1; the run stopped "
                                                   "there; lower --lr, or scale the features down")])
def test_a_run_that_ends_early_says_why_when_its_report_cannot_be_written(how, said, tmp_path, monkeypatch, capsys):
    """A folder made read-only mid-run (a full disk alike) failed the checkpoint, and then the report: the one line
    said only that the report went to a temporary file, not that the run had stopped after epoch 29 of 3000. The
    line says both."""
    def unwritable(*args, **kwargs):
        raise SpgnnError(UNWRITABLE)

    def full(*args):
        raise SpgnnError("no room")

    monkeypatch.setattr(loop, "write_json", unwritable)
    monkeypatch.setattr(checkpoint, "save", full)
    args = {"unsaved": ["--checkpoint", str(tmp_path / "ck"), "--checkpoint-every", "2"], "diverged": ["--lr", "1e30"]}
    code = cli.main(["train", "--epochs", "4", "--hidden", "8", "--output", str(tmp_path / "r.json"), "--quiet",
                     *args[how]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"spgnn: error: {said}; {UNWRITABLE}"]


@pytest.mark.parametrize("error, why", [(torch.distributed.DistError("Connection reset by peer"),      # at P = 1
                                         "its own failure (see its traceback on stderr)"),
                                        (MemoryError(), "it ran out of memory"),
                                        (RuntimeError("a bug"), "its own failure (see its traceback on stderr)"),
                                        (KeyError("a bug"), "its own failure (see its traceback on stderr)")])
def test_a_run_that_fails_mid_epochs_keeps_its_report(error, why, tmp_path, monkeypatch):
    """A rank killed (kill -9, the node lost) or stalled past --timeout mid-run failed the others' next collective:
    the job ended with no report, the figures of every epoch done lost. Rank 0 writes its report of the epochs done
    (its own figures), saying why the run stopped (another process only where a collective among several failed)
    and which checkpoint to continue from."""
    from spgnn.comm import launch

    assert launch.communicating(torch.distributed.DistError("reset"), 2)
    assert not launch.communicating(torch.distributed.DistError("reset"), 1)
    step = Trainer.epoch

    def failing(self, epoch):
        if epoch == 3:
            raise error
        return step(self, epoch)

    monkeypatch.setattr(Trainer, "epoch", failing)
    output, folder = tmp_path / "r.json", tmp_path / "ck"
    with pytest.raises(type(error)):
        Trainer(TrainConfig(hidden=8, epochs=6, checkpoint=str(folder), checkpoint_every=2, output=str(output)),
                Comm(0, 1)).run(log=None)
    report = json.loads(output.read_text())
    assert [e["epoch"] for e in report["epochs"]] == [0, 1, 2] and report["final"] is None
    assert report["stopped"].startswith(f"rank 0 failed after epoch 2 ({type(error).__name__}") and why in \
        report["stopped"] and report["stopped"].endswith(f"{folder / checkpoint.FILE} holds epoch 1: continue with "
                                                         f"--resume {folder}")
    # a report that cannot be made (memory gone again, say) is said, and the run's own error is what is raised
    monkeypatch.setattr(Trainer, "rank_report", lambda self: 1 / 0)
    with pytest.raises(type(error)):
        Trainer(TrainConfig(hidden=8, epochs=6, output=str(tmp_path / "s.json")), Comm(0, 1)).run(log=None)
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("kind, data", [("empty", b""), ("pickle", pickle.dumps({"epoch": 3})),
                                        ("JSON", b'{"epoch": 3}'), ("bytes", bytes(range(256)) * 4)])
def test_a_file_torch_did_not_write_is_not_a_checkpoint(kind, data, tmp_path, capsys):
    """--resume of a folder whose checkpoint.pt torch.save did not write (a pickle, JSON, an empty or random file)
    said torch's 'Weights only load failed ... Re-running torch.load with weights_only set to False' (advice to
    run what the file holds), after a warning of torch's about pickle protocols, then 'truncated or corrupt'."""
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / checkpoint.FILE).write_bytes(data)
    code = cli.main(["train", "--epochs", "4", "--resume", str(tmp_path / "ck"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    what = "empty" if kind == "empty" else "not a zip archive, as torch.save writes"
    assert code == 2 and err == [f"spgnn: error: {tmp_path / 'ck' / checkpoint.FILE} is {what}: not an spgnn "
                                 "checkpoint (another program's file, or damaged); resume from another checkpoint or "
                                 "start again"]


def test_a_write_the_disk_refuses_is_said_as_such(tmp_path):
    """A checkpoint folder that filled up mid-run said 'cannot write the checkpoint ... ([enforce fail at
    inline_container.cc:672] . unexpected pos 97280 vs 97172)': torch's writer names no cause. The write's OSError is
    said (here a file size limit's, as a full disk's or a quota's would be), and nothing is left in the folder."""
    fsize = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # (else the write past the limit kills the process)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, fsize[1]))
    try:
        with pytest.raises(SpgnnError, match=rf"^cannot write the checkpoint {tmp_path / checkpoint.FILE} \(\[Errno "
                                             rf"{errno.EFBIG}\] {os.strerror(errno.EFBIG)}\): the previous one"):
            checkpoint.save(tmp_path, {"w": torch.zeros(100_000)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, fsize)
        signal.signal(signal.SIGXFSZ, ignored)
    assert list(tmp_path.iterdir()) == []


def test_a_resume_folder_without_a_whole_checkpoint_says_what_it_holds(tmp_path, monkeypatch):
    """A run killed while it wrote its first checkpoint left only the temporary of that write: --resume of its folder
    said 'holds no checkpoint: --resume takes a folder written by --checkpoint', which it was; a folder that does not
    exist said it held no checkpoint. Each now says what it is; a --checkpoint that is a file said 'File exists'."""
    folder = tmp_path / "ck"
    with pytest.raises(SpgnnError, match=rf"^{folder} does not exist: --resume takes a folder written by "
                                         r"--checkpoint \(on every host of the job, at the same path\)$"):
        checkpoint.readable(folder)
    monkeypatch.setenv("RANK", "1")                     # a rank of a job: where it looked (every rank reads it)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SpgnnError, match=rf"^{folder} does not exist on rank 1 \(host {socket.gethostname()}\): "):
        checkpoint.readable(folder)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    folder.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    cut = folder / f".{checkpoint.FILE}.{gone.stdout.strip()}@{socket.gethostname()}.0123abcd.tmp"
    cut.write_bytes(b"PK\x03\x04")
    with pytest.raises(SpgnnError, match=rf"^{folder} holds no checkpoint \({checkpoint.FILE}\), only {cut.name}, one "
                                         "whose write was cut short: the run ended before its first checkpoint was "
                                         "complete; start it again$"):
        checkpoint.readable(folder)
    with pytest.raises(SpgnnError, match=rf"^cannot write checkpoints to {cut}: it is a file; give --checkpoint a "
                                         r"folder \(made where missing\)$"):
        checkpoint.writable(cut)


def test_a_report_another_run_wrote_since_this_one_began_is_kept(tmp_path, monkeypatch):
    """Two runs given one --output (a job array's tasks, say) each replaced the other's report: the run that ended
    first lost its report without a word, where their checkpoints in one folder are refused. A report there when
    the run began is replaced; one written since by another run is kept, and this run's goes to a temporary file
    the line names."""
    output = tmp_path / "r.json"
    output.write_text("{}")                                     # an earlier run's: replaced
    Trainer(TrainConfig(hidden=8, epochs=2, output=str(output)), Comm(0, 1)).run(log=None)
    assert json.loads(output.read_text())["epochs"]
    step = Trainer.epoch

    def another_run_ends(self, epoch):
        if epoch == 1:
            output.write_text('{"another": "run"}')
        return step(self, epoch)

    monkeypatch.setattr(Trainer, "epoch", another_run_ends)
    with pytest.raises(SpgnnError, match=r"^cannot write .*r\.json \(another run has written it since this one began: "
                                         r"give each run its own --output\): it is unchanged, and what was to go "
                                         r"there is in (\S+)$") as e:
        Trainer(TrainConfig(hidden=8, epochs=2, output=str(output)), Comm(0, 1)).run(log=None)
    kept = Path(str(e.value).rpartition(" ")[2])
    assert json.loads(output.read_text()) == {"another": "run"} and len(json.loads(kept.read_text())["epochs"]) == 2
    kept.unlink()
    # one removed while the run trained is no other run's: written (it was refused as 'another run has written it')
    monkeypatch.setattr(Trainer, "epoch", lambda self, epoch: output.unlink(missing_ok=True) or step(self, epoch))
    Trainer(TrainConfig(hidden=8, epochs=2, output=str(output)), Comm(0, 1)).run(log=None)
    assert len(json.loads(output.read_text())["epochs"]) == 2


def test_the_command_line_notes_the_report_before_the_set_up(tmp_path, monkeypatch, capsys):
    """The stamp was taken when the epochs began, after the set-up (reading and partitioning: hours on a large
    graph): a report another run wrote meanwhile was replaced without a word."""
    output = tmp_path / "r.json"
    build = Trainer.__init__

    def another_run_ends(self, *args, **kwargs):
        output.write_text('{"another": "run"}')
        build(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "__init__", another_run_ends)
    assert cli.main(["train", "--epochs", "1", "--hidden", "8", "--quiet", "--output", str(output)]) == 2
    assert json.loads(output.read_text()) == {"another": "run"}
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "another run has written it since this one began" in line
    Path(line.rpartition(" ")[2]).unlink()
