"""Files written whole: a report replaces the file before it whole or not at all, keeps its mode and a link, and a
report that cannot go where it was asked goes to a temporary file that the error names."""

import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spgnn.errors import SpgnnError
from spgnn.jsonfile import abandoned, replace_whole, temporary, write_json


def test_a_report_is_valid_json_and_replaces_the_file_before_it(tmp_path):
    out = tmp_path / "report.json"
    out.write_text("old")
    os.chmod(out, 0o640)
    write_json(out, {"loss": math.nan, "acc": np.float32(0.5), "curve": np.arange(3)})
    assert json.loads(out.read_text()) == {"loss": None, "acc": 0.5, "curve": [0, 1, 2]}
    assert oct(out.stat().st_mode & 0o777) == oct(0o640) and os.listdir(tmp_path) == ["report.json"]


def test_a_link_is_kept_and_its_target_written(tmp_path):
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target)
    write_json(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}


def test_a_failed_write_leaves_the_file_before_it_and_no_temporary_file(tmp_path):
    out = tmp_path / "checkpoint.pt"
    out.write_text("previous")

    def half(tmp: Path):
        tmp.write_text("half of it")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_whole(out, half)
    assert out.read_text() == "previous" and os.listdir(tmp_path) == ["checkpoint.pt"]


def test_no_two_writes_share_a_temporary_file(tmp_path, monkeypatch):
    """Named by the pid alone, the temporary files of two writers of one pid on two hosts sharing the folder (or
    before and after a restart) were one file: one's rename moved the other's half-written bytes into place."""
    out = tmp_path / "checkpoint.pt"
    names = set()
    for host in ("node-a", "node-b", "node-b"):
        monkeypatch.setattr(socket, "gethostname", lambda host=host: host)
        names.add(temporary(out))
        replace_whole(out, lambda tmp: names.add(tmp) or tmp.write_text("x"))
    assert len(names) == 6 and all(t.parent == tmp_path and t.name.startswith(".checkpoint.pt.") for t in names)


def test_only_this_hosts_dead_writers_leave_abandoned_files(tmp_path):
    """A temporary file is abandoned where its writer ran on this host and runs no more; another host's, and a
    running writer's, may still be written. (The ``checkpoint.pt.PID.tmp`` of earlier versions was left for ever; a
    report's, by any version.)"""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    here, out = socket.gethostname(), tmp_path / "checkpoint.pt"
    files = {name: tmp_path / name for name in (
        f".checkpoint.pt.{dead}@{here}.0a1b2c3d.tmp",           # gone: abandoned
        f".checkpoint.pt.{dead}.tmp",                           # as named before, on this host: abandoned
        f"checkpoint.pt.{dead}.tmp",                            # and before that: abandoned
        f".checkpoint.pt.{os.getpid()}@{here}.0a1b2c3d.tmp",    # still running
        f".checkpoint.pt.{dead}@another.host.0a1b2c3d.tmp",     # another host's: unknown
        f".checkpoint.ptx.{dead}@{here}.0a1b2c3d.tmp",          # another file's
    )}
    for f in files.values():
        f.write_text("")
    assert sorted(abandoned(out)) == sorted(list(files.values())[:3])
    write_json(out, {"epochs": []})         # any file written whole (a report, as here) removes them, and only them
    assert sorted(tmp_path.iterdir()) == sorted([out, *list(files.values())[3:]])


def test_a_report_that_cannot_be_written_goes_to_a_temporary_file_the_error_names(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SpgnnError, match=r"^cannot write .*file/report\.json \(.*\): it is unchanged, and what was "
                                         r"to go there is in (\S+)$") as e:
        write_json(tmp_path / "file" / "report.json", {"epochs": [1, 2]})
    kept = Path(re.search(r"is in (\S+)$", str(e.value))[1])
    try:
        assert json.loads(kept.read_text()) == {"epochs": [1, 2]}
    finally:
        kept.unlink()
