"""Files written whole (`replace_whole`), and reports as such files: valid JSON (no NaN tokens), whatever numbers
numpy computed."""

from __future__ import annotations

import glob
import json
import math
import os
import socket
import stat
import tempfile
import uuid
from pathlib import Path

import numpy as np

from .errors import SpgnnError


def json_safe(obj):
    """`obj` with every NaN or infinite float (which JSON cannot hold) replaced by None, numpy's scalars and
    arrays as Python's numbers and lists, and paths as strings (so that a figure computed in numpy, or a
    `pathlib.Path` given to a config, never loses a run its report)."""
    if isinstance(obj, np.generic | np.ndarray):
        obj = obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def temporary(path: Path) -> Path:
    """A new name beside `path` for a version of it being written: ``.NAME.PID@HOST.TAG.tmp``, the writer's pid and
    host (a pid alone repeats across the hosts sharing a filesystem, and after a restart) and a random tag (two
    writes of one process)."""
    return path.with_name(f".{path.name}.{os.getpid()}@{socket.gethostname()}.{uuid.uuid4().hex[:8]}.tmp")


def abandoned(path: Path) -> list[Path]:
    """The `temporary` files of `path` left by writers that are gone: written on this host by a process no longer
    running (and the ``.NAME.PID.tmp`` and ``NAME.PID.tmp`` of earlier versions, which were written on this host).
    Another host's, and a running writer's, are left where they are: nothing here can tell whether that writer still
    writes."""
    host, found, name = socket.gethostname(), [], glob.escape(path.name)
    for tmp in [*path.parent.glob(f".{name}.*.tmp"), *path.parent.glob(f"{name}.*.tmp")]:
        writer = tmp.name.removeprefix(".")[len(path.name) + 1:-len(".tmp")]      # PID@HOST.TAG, or PID
        pid, _, rest = writer.partition("@")
        if (rest.rpartition(".")[0] if rest else host) == host and pid.isdigit() and not _running(int(pid)):
            found.append(tmp)
    return found


def _running(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:             # it exists, and is another user's
        return True
    return True


def unwritable(folder: Path) -> str | None:
    """Why a file cannot be made in the existing `folder` (tried, not judged: root passes every access check), or
    None."""
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        return e.strerror or str(e)
    return None


def replace_whole(path: Path, write, check=None) -> None:
    """`write(tmp)` to a `temporary` file beside `path`, then that file flushed to the disk and renamed over `path`,
    keeping the mode of a file already there: it is replaced whole or not at all, also by a crash of the machine.
    `check()`, where given, runs just before the rename (an error it raises replaces nothing). The temporary file is
    removed where a step fails, and the error raised again. Those of `path`'s writers killed mid-write
    (`abandoned`) are removed first: a report's, a checkpoint's of many GB."""
    for old in abandoned(path):
        old.unlink(missing_ok=True)
    tmp = temporary(path)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())        # the bytes on the disk before the name points at them
        if check is not None:
            check()
        if path.exists():
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def stamp(path) -> tuple | None:
    """(device, inode, modification time, size) of the file at `path`, None where there is none: the same until the
    file is replaced or changed."""
    try:
        st = Path(path).stat()
    except OSError:                 # none, or none this process may see: the write says which
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


ANY = "any"     # `write_json`'s `since` where any file there may be replaced


def write_json(path, obj, default=None, since=ANY) -> Path:
    """`obj` as indented, valid JSON (no NaN tokens: `json_safe`) at `path`, its folder made if missing (`default`
    as json.dumps takes it); returns where it was written. Atomic: a file already at `path` is replaced whole or
    not at all. Where `path` cannot be written (a full disk, a folder made read-only since the run began) or, given
    `since` (its `stamp` when the run began), another run has written a file there since (one removed since may be
    written), the JSON goes to a new file in the temporary folder and SpgnnError names both, so that a run never
    loses its report, nor another's."""
    text = json.dumps(json_safe(obj), indent=1, default=default, allow_nan=False)
    path = Path(path)
    real = path.resolve()                           # a link's target is written, not replaced by a file
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        if since != ANY and (real.is_file() or not real.exists()) and stamp(real) not in (None, since):
            why = "another run has written it since this one began: give each run its own --output"
        elif real.exists() and not real.is_file():    # /dev/null, a pipe: written to, never replaced
            real.write_text(text)
            return path
        else:
            replace_whole(real, lambda tmp: tmp.write_text(text))
            return path
    except OSError as e:
        why = e.strerror or str(e)
    fd, kept = tempfile.mkstemp(prefix=f"{path.stem}-", suffix=path.suffix or ".json")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    raise SpgnnError(f"cannot write {path} ({why}): it is unchanged, and what was to go there is in {kept}")
