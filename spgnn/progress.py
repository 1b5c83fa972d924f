"""Stages of a run: what a long step is doing and how long it took (reading, generating, partitioning, writing
shares, setting up, evaluating, compiling kernels).

``with stage("partitioning", "rmat:18 into 2 parts by metis") as s:`` says ``spgnn: partitioning rmat:18 ...``
on stdout when it starts and ``spgnn: partitioning done in 3.21 s`` when it ends, and adds the seconds to this
process's tally (`seconds`, which the run report gathers from every rank; stages may nest, and an outer one's
seconds include the inner ones'). Work counted by ``s.advance()`` (of ``total`` units, when known) shows a tqdm
bar once it has run `BAR_DELAY_S` seconds when stdout is a terminal, and otherwise a plain line at most every
`LINE_EVERY_S` seconds. Lines are shown only where `configure` turned them on (the command line does so on rank 0
unless ``--quiet``); the seconds are tallied either way. Lines go to stdout, beside the epoch lines: stderr
is kept for the one ``spgnn: error:`` line of bad input.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from contextlib import contextmanager

BAR_DELAY_S = 2.0         # a bar appears only for work that has taken longer than this
LINE_EVERY_S = 10.0       # without a terminal: one line of progress at most this often
LAUNCHER_ENV = "SPGNN_LAUNCHER_STAGES"   # the --nprocs parent's stage seconds, handed to the processes it starts

_shown = False
_seconds: dict[str, float] = {}


def configure(shown: bool) -> None:
    """Show stage lines and bars in this process (rank 0 of a command line run without --quiet) or not."""
    global _shown
    _shown = bool(shown)


class Tolerant:
    """Standard output that falls silent, rather than ending the run, once its reader is gone (``spgnn train … |
    head -1``: EPIPE), it is closed (``>&-``: EBADF, or no stream at all) or its disk is full (ENOSPC). What it
    could not take is dropped; the run goes on, writes its report and exits as it would have. Any other error is
    raised as ever."""

    GONE = (errno.EPIPE, errno.EBADF, errno.ENOSPC)

    def __init__(self, stream):
        self.stream = stream if stream is not None else open(os.devnull, "w")

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except (OSError, ValueError) as e:
            return self._gone(e, len(text))

    def flush(self) -> None:
        try:
            self.stream.flush()
        except (OSError, ValueError) as e:
            self._gone(e, 0)

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def _gone(self, e: Exception, n: int) -> int:
        closed = isinstance(e, ValueError) and not isinstance(e, UnicodeError) and getattr(self.stream, "closed", False)
        if not closed and getattr(e, "errno", None) not in self.GONE:
            raise e
        try:        # the interpreter's own flush at exit then finds a file that takes what it still holds
            if self.stream.fileno() == 1:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.close(null)
        except (OSError, ValueError):
            pass
        self.stream = open(os.devnull, "w")
        return n


def tolerate_stdout() -> None:
    """Make sys.stdout `Tolerant` (once), and write what its encoding cannot take (α, ×, ≤ on an ASCII or Latin-1
    terminal) as backslash escapes, as stderr does, rather than raise UnicodeEncodeError."""
    if not isinstance(sys.stdout, Tolerant):
        try:
            sys.stdout.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):     # not a TextIOWrapper (a test's capture), or closed
            pass
        sys.stdout = Tolerant(sys.stdout)


def seconds() -> dict[str, float]:
    """{stage: seconds} this process has spent in each stage so far (a stage run twice counts twice)."""
    return dict(_seconds)


def launcher_seconds() -> dict[str, float]:
    """The stage seconds of the --nprocs parent that started this process ({} when none did, or when the variable
    holds no such figures: it only adds them to the report)."""
    try:
        stages = json.loads(os.environ.get(LAUNCHER_ENV) or "{}")
    except ValueError:
        return {}
    ok = isinstance(stages, dict) and all(isinstance(v, int | float) for v in stages.values())
    return stages if ok else {}


@contextmanager
def handed_on():
    """Inside the block, processes started from this one find its stage seconds (`launcher_seconds`)."""
    saved = os.environ.get(LAUNCHER_ENV)
    os.environ[LAUNCHER_ENV] = json.dumps(seconds())
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(LAUNCHER_ENV, None)
        else:
            os.environ[LAUNCHER_ENV] = saved


def say(line: str) -> None:
    """``spgnn: line`` on stdout in one write, when lines are shown."""
    if _shown:
        sys.stdout.write(f"spgnn: {line}\n")
        sys.stdout.flush()


class Stage:
    """A stage under way: `advance(k)` records k more units of its work (of `total`, when known)."""

    def __init__(self, name: str, total: int | None):
        self.name, self.total, self.done, self.bar = name, total, 0, None
        self.t0 = self.last_line = time.perf_counter()

    def advance(self, k: int = 1) -> None:
        self.done += k
        if not _shown:
            return
        now = time.perf_counter()
        if self.bar is None and sys.stdout.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=self.done - k, desc=f"spgnn: {self.name}", file=sys.stdout,
                            delay=max(0.0, BAR_DELAY_S - (now - self.t0)), leave=False, dynamic_ncols=True)
        if self.bar is not None:
            self.bar.update(k)
        elif now - self.last_line >= LINE_EVERY_S:
            self.last_line = now
            say(f"{self.name} {self.done}{f'/{self.total}' if self.total else ''} ({now - self.t0:.0f} s)")

    def close(self) -> float:
        if self.bar is not None:
            self.bar.close()
        return time.perf_counter() - self.t0


@contextmanager
def stage(name: str, what: str = "", total: int | None = None):
    """Stage `name` (the key of its seconds) doing `what`, with `total` units of work when known."""
    say(" ".join(filter(None, (name, what, "..."))))
    s = Stage(name, total)
    try:
        yield s
    finally:
        dt = s.close()
        _seconds[name] = _seconds.get(name, 0.0) + dt
    say(f"{name} done in {dt:.2f} s")


def each(items, name: str, what: str = "", total: int | None = None):
    """The items of `items`, one at a time, as stage `name` with one unit of progress each."""
    with stage(name, what, total) as s:
        for item in items:
            yield item
            s.advance()


__all__ = ["configure", "each", "handed_on", "launcher_seconds", "say", "seconds", "stage"]
