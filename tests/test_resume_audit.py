"""What a user whose runs are interrupted sees: a run that ends early says why, also when its report cannot be
written; a checkpoint or report that cannot be written says what went wrong."""

import pytest

from spgnn import cli
from spgnn.errors import SpgnnError
from spgnn.train import checkpoint, loop

UNWRITABLE = "cannot write r.json (Read-only file system): it is unchanged, and what was to go there is in /tmp/r.json"


@pytest.mark.parametrize("how, said", [("unsaved", "no room; the run stopped after epoch 1"),
                                       ("diverged", "the training loss became nan at epoch 1; the run stopped "
                                                   "there; lower --lr, or scale the features down")])
def test_a_run_that_ends_early_says_why_when_its_report_cannot_be_written(how, said, tmp_path, monkeypatch, capsys):
    """A folder made read-only mid-run (a full disk alike) failed the checkpoint, and then the report: the one line
    said only that the report went to a temporary file, not that the run had stopped after epoch 29 of 3000. The
    line says both."""
    def unwritable(*args):
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
