"""Checkpoints: what a resumed run needs, written atomically by rank 0 and read by every rank.

``DIR/checkpoint.pt`` (``torch.save`` of plain containers and tensors, read back with ``weights_only=True``)::

    format      "spgnn-checkpoint/1"
    epoch       the last finished epoch e (the resumed run starts at e + 1)
    model       the model's state_dict (weights are the same on every rank, so one copy serves any P)
    optimizer   Adam's state_dict (torch.optim.Adam's layout)
    progress    the per-epoch records and the best-validation record so far, and the run's own counters
                (minibatch: the steps taken, which key the next steps' dropout masks)
    identity    the graph (name, n, nnz, hash of its structure), the model's kind and widths, and what else
                fixes the run: seed (split, weights, dropout masks), dropout, feature normalisation, task, split
                sizes, the way of training (full-batch, or the sampler and batch size; a link run's self-pairs)
    partition   method, seed and parts of the run that wrote it
    config      the run's TrainConfig
    digest      SHA-256 of all of the above (`digest`), checked when it is read: a file changed since is refused

A write goes to ``.checkpoint.pt.PID@HOST.TAG.tmp`` (two writes never share it) and is renamed over the
previous checkpoint, so a crash mid-write leaves the previous one intact; the other ranks wait, told that rank 0
is still writing (`save_on_rank0`), however long that outlasts --timeout. A run replaces only the checkpoint it
last wrote or resumed from (`stamp`): two runs given one folder do not overwrite each other's. Nothing depends on
P, the algorithm, the grid or the partition: a checkpoint resumes under another of each (to float rounding; under
the same ones, bit for bit).
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import socket
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from ..comm.agree import on_rank0
from ..errors import SpgnnError
from ..jsonfile import abandoned, replace_whole, unwritable
from ..jsonfile import stamp as file_stamp

FORMAT = "spgnn-checkpoint/1"
FILE = "checkpoint.pt"
ZIP = b"PK\x03\x04"          # how every file torch.save writes begins (a zip archive's first local header)
UNSAFE = re.compile(r"Unsupported global: GLOBAL (\S+)")      # torch's weights_only refusal, naming the object
MODEL_FIELDS = ("model", "layers", "hidden", "batch_norm")     # and the options the model's layer declares


def identity(cfg, info) -> dict:
    """What a checkpoint must agree with to resume: the graph and the model's kind and widths."""
    graph_hash = getattr(info, "graph_hash", "")
    if not graph_hash and hasattr(info, "adj"):
        from ..partition.partition import graph_hash as hash_of

        graph_hash = hash_of(info.adj)
    return {"graph": {"name": info.name, "n": int(info.n), "nnz": int(info.nnz), "hash": graph_hash},
            "model": {k: getattr(cfg, k) for k in model_fields(cfg)} | {"features": int(info.num_features),
                                                             "classes": int(info.num_classes)}}


def model_fields(cfg) -> tuple[str, ...]:
    """The config fields that make the model: `MODEL_FIELDS` and the options its layer declares."""
    from ..layers.registry import get_layer

    return MODEL_FIELDS + tuple(o.name for o in get_layer(cfg.model).options)


def writable(folder, resuming: bool = False) -> Path:
    """`folder`, made if missing, once a file can be written there and it holds no checkpoint to overwrite
    (unless `resuming` from it); else SpgnnError."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise SpgnnError(f"cannot write checkpoints to {folder}: it is a file; give --checkpoint a folder (made where "
                         "missing)")
    if (folder / FILE).exists() and not resuming:
        raise SpgnnError(f"{folder} holds a checkpoint already: continue it with --resume {folder}, or give "
                         "--checkpoint an empty folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        why = unwritable(folder)
    except OSError as e:
        why = e.strerror or str(e)
    if why:
        raise SpgnnError(f"cannot write checkpoints to {folder}: {why}; give --checkpoint a writable folder")
    return folder


def loadable(obj, what: str) -> None:
    """SpgnnError unless `obj` reads back as `load` reads a checkpoint (``weights_only``: plain numbers, strings,
    containers and tensors), so that nothing is saved that could not be resumed from."""
    buffer = io.BytesIO()
    try:
        torch.save(obj, buffer)         # (an object pickle cannot take: a lambda, a local class, an open file)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except (pickle.PicklingError, pickle.UnpicklingError, AttributeError, TypeError) as e:
        found = UNSAFE.search(str(e))
        raise SpgnnError(f"{what} holds what a checkpoint cannot read back ({found[1] if found else e}): keep plain "
                         "numbers, strings, lists, dicts and tensors (float(x) of a numpy number; a scheduler's "
                         "state_dict(), not the scheduler)") from None


def stamp(folder) -> tuple | None:
    """`spgnn.jsonfile.stamp` of folder's checkpoint file (None where it has none)."""
    return file_stamp(Path(folder) / FILE)


ANY = "any"     # `save`'s `last` where any file may be replaced


def save(folder, state: dict, last=ANY) -> tuple:
    """Write `state` (see the module docstring) as folder/checkpoint.pt, atomically; returns its `stamp`. `last`:
    the stamp of the checkpoint this run last wrote or resumed from there (None: none); a checkpoint there of
    another stamp is SpgnnError (another run writes checkpoints to the folder too: overwriting its checkpoint, or
    resuming from it, would mix the two)."""
    path = Path(folder) / FILE

    def unchanged():
        if last != ANY and stamp(folder) not in (None, last):
            raise SpgnnError(f"{path} has changed since this run {'wrote or resumed from it' if last else 'began'}: "
                             f"another run writes checkpoints to {folder} too, and neither may overwrite the other's; "
                             "give each run its own --checkpoint folder")

    state = {"format": FORMAT} | state | {"digest": digest(state)}
    try:        # (the folder may have become a file, or unreadable, since the run began: OSError anywhere here)
        unchanged()                             # before the write, and again just before its rename
        replace_whole(path, lambda tmp: torch_save(state, tmp), unchanged)
        return stamp(folder)
    except (OSError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise SpgnnError(f"cannot write the checkpoint {path} ({first[:200]}): the previous one, if any, is "
                         "unchanged; free space or give another folder") from None


def torch_save(obj, path) -> None:
    """torch.save(obj, path), where an OSError of a write (a full disk, a quota reached) is raised as itself: torch's
    writer takes it for a short write and says only 'unexpected pos N vs M'."""
    failed = []
    with open(path, "wb") as f:
        def write(b):
            try:
                return f.write(b)
            except OSError as e:
                failed.append(e)
                raise

        try:
            torch.save(obj, SimpleNamespace(write=write, flush=f.flush))
        except RuntimeError:
            if failed:
                raise failed[0] from None
            raise


def save_on_rank0(comm, write, timeout: float):
    """`write()` (a `save`) run by rank 0 alone while the others wait, told every timeout/4 seconds (at most 30) that
    it is still at it (`spgnn.comm.agree.on_rank0`): a write that outlasts --timeout (a large model, a slow disk)
    does not fail their collectives; its SpgnnError is every rank's."""
    return on_rank0(comm, write, beat_s=min(30.0, timeout / 4))


KEYS = {"epoch", "model", "optimizer", "progress", "identity"}
RUN_FIELDS = ("seed", "dropout", "feature_norm")    # (not the partition: no result depends on it)
ALWAYS = RUN_FIELDS + ("split",)    # in every checkpoint's "run"; what a run adds (`Run.training`) only where kept


def run_identity(cfg, info) -> dict:
    """What else a checkpoint must agree with to resume, as it fixes the run: the seed (split, weights' draws,
    dropout masks), dropout, feature normalisation, the split's sizes and, where known, the split itself
    (`spgnn.partition.share.split_hash`: a partitioned folder made with another seed has the same sizes)."""
    from ..partition.share import SPLITS, split_hash, split_sum

    masks = {s: getattr(info, f"{s}_mask") for s in SPLITS} if hasattr(info, "train_mask") else None
    counts = getattr(info, "counts", None) or {s: int(m.sum()) for s, m in masks.items()}
    split = getattr(info, "split_hash", "") or (masks and split_hash(split_sum(np.arange(info.n), masks)))
    return {k: getattr(cfg, k) for k in RUN_FIELDS} | {"split": {k: int(v) for k, v in counts.items()}} | \
        ({"split_hash": split} if split else {})


def _here() -> str:
    """" on rank r (host h)" under a launcher of several processes, else "" (no host to name)."""
    from ..comm import launch

    at = launch.detect()
    return f" on rank {at.rank} (host {socket.gethostname()})" if at.world_size > 1 else ""


def readable(folder) -> Path:
    """The checkpoint file in `folder`, once it is there to be read; else SpgnnError."""
    path = Path(folder) / FILE
    if Path(folder).is_file():
        raise SpgnnError(f"{folder} is a file: --resume takes the folder --checkpoint wrote ({Path(folder).parent})")
    if not Path(folder).is_dir():
        raise SpgnnError(f"{folder} does not exist{_here()}: --resume takes a folder written by --checkpoint (on "
                         "every host of the job, at the same path)")
    if not path.is_file():
        cut = sorted(abandoned(path))               # a write of a process gone, which renamed nothing
        raise SpgnnError(f"{folder} holds no checkpoint ({FILE})" + (
            f", only {cut[0].name}, one whose write was cut short: the run ended before its first checkpoint was "
            "complete; start it again" if cut else ": --resume takes a folder written by --checkpoint"))
    if not os.access(path, os.R_OK):
        raise SpgnnError(f"cannot read {path} (permission denied): make it readable to every rank")
    return path


def load(folder, mine: dict, epochs: int | None = None) -> dict:
    """The checkpoint in `folder`, checked against this run's `identity` (with its "run": `run_identity`) and
    (when given) its total `epochs`, at least the checkpoint's; SpgnnError naming the file and what differs when it
    is missing, unreadable, of another graph, model or run, or further than `epochs`."""
    path, state = _read(folder)
    for what in FIXES:
        _same(path, what, state["identity"][what], mine[what])
    _same_run(path, state, mine.get("run", {}))
    _beyond(path, state, epochs)
    return state


def _same_run(path, state: dict, mine: dict) -> None:
    """SpgnnError unless the checkpoint `state`'s run identity agrees with `mine` (a field it lacks counts only if
    every checkpoint holds it, `ALWAYS`)."""
    theirs = state["identity"].get("run", {})
    differ = ", ".join(f"{k} {theirs.get(k)!r} here {v!r}" for k, v in mine.items()
                       if (k in theirs or k in ALWAYS) and theirs.get(k) != v)
    if differ:
        raise SpgnnError(f"{path} is of another run ({differ}): {RESUME_SAME}")


RESUME_SAME = ("resume with the same --seed, --dropout, --feature-norm, --task, split and way of training (full-batch, "
               "or the same --sampler and --batch-size; a link run's --self-pairs) (a new --lr or --weight-decay, "
               "more --epochs, another P, --algo, grid or --partition are allowed)")
FIXES = {"graph": "resume on the data it was trained on",
         "model": "resume with the same --model, --layers, --hidden, --batch-norm and the model's own options (such "
                  "as --heads)"}


def check_early(folder, cfg, model: bool = True) -> None:
    """What a --resume of `folder` can be checked against before any work is spent: the file reads as a checkpoint,
    cfg.epochs reaches it, (`model`) cfg's model fields are its model's, and its seed, dropout and feature
    normalisation (and a --task named) are the run's; the graph and the split are checked once they are known
    (`load`)."""
    path, state = _read(folder)
    if model:
        theirs, fields = state["identity"]["model"], model_fields(cfg)
        _same(path, "model", {k: theirs.get(k) for k in fields}, {k: getattr(cfg, k) for k in fields})
    named = {"task": cfg.task} if cfg.task != "auto" else {}          # (auto's is known once the data is)
    _same_run(path, state, {k: getattr(cfg, k) for k in RUN_FIELDS} | named)
    _beyond(path, state, cfg.epochs)


def _read(folder) -> tuple[Path, dict]:
    """(the checkpoint file in `folder`, its state), the format checked."""
    path = readable(folder)
    with open(path, "rb") as f:
        head = f.read(len(ZIP))
    if head != ZIP:         # (torch would read it as a pickle, and tell the user to load it with weights_only=False)
        raise SpgnnError(f"{path} is {'empty' if not head else 'not a zip archive, as torch.save writes'}: not an "
                         "spgnn checkpoint (another program's file, or damaged); resume from another checkpoint or "
                         "start again")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, IndexError, KeyError, pickle.UnpicklingError,
            zipfile.BadZipFile) as e:
        if found := UNSAFE.search(str(e)):           # a whole file, of other objects
            raise SpgnnError(f"{path} is not an spgnn checkpoint of format {FORMAT}: it holds a {found[1]}, which no "
                             "spgnn checkpoint does (another program wrote it, or an older spgnn given such an "
                             "object); resume from another checkpoint or start again") from None
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise SpgnnError(f"cannot read {path} ({type(e).__name__}: {first}): the file is "
                         "truncated or corrupt; resume from another checkpoint or start again") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT or not KEYS <= state.keys():
        raise SpgnnError(f"{path} is not an spgnn checkpoint of format {FORMAT}: resume from another checkpoint or "
                         "start again")
    saved = state.pop("digest", None)           # (one written before checkpoints had it is taken as it is)
    if saved is not None and saved != digest({k: v for k, v in state.items() if k != "format"}):
        raise SpgnnError(f"{path} is damaged: its weights or state are not those written (their digest differs); "
                         "resume from another checkpoint or start again")
    return path, state


def digest(obj) -> str:
    """SHA-256 of `obj`'s tensors (dtype, shape, bytes) and other leaves (repr), in key order: what a checkpoint
    holds, checked when it is read (torch's file format checks nothing: one byte changed in a weight resumed)."""
    h = hashlib.sha256()

    def feed(x):
        if isinstance(x, dict):
            for k in sorted(x, key=repr):
                h.update(repr(k).encode())
                feed(x[k])
        elif isinstance(x, (list, tuple, set, frozenset)):
            h.update(b"[")
            for v in sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x:    # a set's order is not kept
                feed(v)
            h.update(b"]")
        elif isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy())     # its bytes, read in place
        else:
            h.update(repr(x).encode())

    feed(obj)
    return h.hexdigest()


def _same(path, what: str, theirs: dict, mine: dict) -> None:
    if theirs != mine:
        differ = ", ".join(f"{k} {theirs.get(k)!r} here {mine.get(k)!r}" for k in mine if theirs.get(k) != mine.get(k))
        raise SpgnnError(f"{path} is of another {what} ({differ}): {FIXES[what]}")


def _beyond(path, state: dict, epochs: int | None) -> None:
    """SpgnnError where the checkpoint has trained more than `epochs`; as many: the run only evaluates and reports
    (a run that died after its last checkpoint, in its final evaluation or report, is finished so)."""
    if epochs is not None and epochs < state["epoch"] + 1:
        raise SpgnnError(f"{path} has trained {state['epoch'] + 1} epochs already, more than --epochs {epochs}: give "
                         f"--epochs of at least {state['epoch'] + 1} (the total, not the epochs to add)")


def model_shapes(model) -> dict:
    """{name: shape} of `model`'s state, but the buffers that key dropout masks (`spgnn.layers.registry.DRAWS`,
    absent from older checkpoints, which load without them): what a checkpoint of it must match."""
    from ..layers.registry import DRAWS

    return {k: list(p.shape) for k, p in model.state_dict().items() if k.rpartition(".")[2] not in DRAWS}


def state_of(run, epoch: int, records: list, best: dict, mine: dict) -> dict:
    """A run's checkpoint after `epoch`, `mine` its `identity` (see the module docstring)."""
    parts = getattr(run, "parts", None)
    partition = {"parts": parts.nparts} | {k: parts.partition_info.get(k) for k in ("method", "params", "seed")} \
        if parts is not None else {}
    # its paths as strings: `load` (weights_only) reads back no pathlib.Path a program gave its TrainConfig
    config = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in run.cfg.as_dict().items()}
    return {"epoch": epoch, "model": run.model.state_dict(), "optimizer": run.opt.state_dict(),
            "progress": {"epochs": records, "best": best, "counters": run.counters()},
            "identity": mine,
            "partition": partition,
            "config": config}
