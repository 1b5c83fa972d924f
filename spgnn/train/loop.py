"""The run loop full-batch and minibatch training share: the seeded model and Adam, the epochs with their
evaluations, the gradient sum over ranks, and the report (configuration, graph, per-epoch records, final and
best accuracies, and every rank's ledger summary, memory and seconds per stage, see `spgnn.progress`). A run asked
to stop by a signal stops at an epoch boundary all ranks agree on (`spgnn.train.interrupt`) and ends as a finished
run of the epochs it did, its report marked "interrupted".
"""

from __future__ import annotations

import math
import numbers
import time
from pathlib import Path

import numpy as np
import torch

from .. import progress
from ..comm import launch
from ..comm.agree import agree
from ..config import TrainConfig
from ..errors import SpgnnError, out_of_memory, say
from ..jsonfile import ANY, write_json
from ..jsonfile import stamp as file_stamp
from ..layers.stack import config_model
from ..memory import peak_rss_bytes, peak_rss_since_restart, restart_peak
from ..metrics import NotFinite
from ..tasks import get_task
from . import checkpoint, interrupt
from .optim import Adam


class Run:
    """One rank's share of a training run. A subclass sets `cfg`, `comm` and `info` (the graph's n, nnz,
    features, classes, name), calls `build_model`, and implements `epoch(e)` (returning the mean training
    loss) and `evaluate()` ({"train_<metric>", "val_<metric>", "test_<metric>"}, `metric` its task's: "acc" unless
    set); it adds its own figures to the report
    through `rank_report` (this rank's, gathered from all) and `run_report` (the run's)."""

    task = get_task("multiclass")       # what it learns (`spgnn.tasks`); a subclass sets its own
    setup_peak_rss = None               # peak RSS before the first epoch, set by `run`

    @property
    def metric(self) -> str:
        """The key of the task's figure in the records: "<split>_<metric>"."""
        return self.task.metric

    def build_model(self, num_features: int, num_classes: int) -> None:
        """The model cfg describes, its weights drawn from cfg.seed (so equal on every rank), and its Adam."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        self.model = config_model(cfg, num_features, num_classes).to(cfg.device)
        if not any(p.requires_grad for p in self.model.parameters()):
            raise SpgnnError(f"--model {cfg.model} has no parameters to train: its layers register none (as "
                             "torch.nn.Parameter)")
        self.opt = Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    given_dataset: str | None = None   # the dataset as the user named it, where cfg.dataset is a folder handed on

    def run(self, log=print, since="now") -> dict:
        """Train for cfg.epochs (from the checkpoint in cfg.resume, if given; writing one to cfg.checkpoint every
        cfg.checkpoint_every epochs and at the end, if given); returns the report (complete on rank 0, this
        rank's part elsewhere), written to cfg.output (JSON) by rank 0 if given, also when the run diverged or a
        checkpoint could not be written (then SpgnnError, once the report of the epochs done is written).
        `log` (rank 0) gets one line an epoch. Asked to stop by a signal (where the command handles them,
        `interrupt.handled`), the ranks stop after the same epoch, checkpoint it and evaluate as at the end; the
        report then holds ``"interrupted": {"signal": name, "epoch": the last epoch done}``. A report another run
        has written at cfg.output since this one began (`since`: rank 0's `jsonfile.stamp` of it then, "now" to
        take it here) is kept, and this run's goes to a temporary file its SpgnnError names."""
        interrupt.graceful()
        self.done, self.since = None, ANY
        if self.cfg.output and self.comm.rank == 0:          # (rank 0 writes the report)
            self.since = file_stamp(self.cfg.output) if since == "now" else since
        try:
            report, unsaved = self._train(log), None
        except Unsaved as u:
            report, unsaved = u.report, u
        except SpgnnError:
            raise
        except Exception as e:      # a collective failed (a peer died or stalled), memory ran out, this rank's own
            self.report_done(e)
            raise
        if self.cfg.output:                 # rank 0 writes; a failure is every rank's one line
            try:
                agree(self.comm, lambda: write_json(self.cfg.output, report, since=self.since), everyone=False)
            except SpgnnError as e:         # with why the run ended early, where it did: else only the report's line
                if why := ended_early(report):
                    raise SpgnnError(f"{why}; {e}") from None
                raise
        if unsaved is not None:
            raise SpgnnError(str(unsaved))
        return report

    done = None     # (records, best, [the last checkpoint's (folder, epoch) or None]) of the epochs done so far

    def report_done(self, error: BaseException) -> None:
        """Where the run failed once its epochs began (`error`: a collective's, as a peer died or stalled; running
        out of memory; this rank's own), rank 0's report of the epochs done, written to cfg.output from this rank's
        figures alone (no collective: the other ranks may be gone), with why the run stopped; the error is the
        caller's to raise."""
        if not (self.cfg.output and self.comm.rank == 0 and self.done):
            return
        records, best, (good,) = self.done
        first = (str(error).strip().splitlines() or [""])[0][:200]
        when = f"after epoch {records[-1]['epoch']}" if records else "in its first epoch"
        kept = f"; {Path(good[0]) / checkpoint.FILE} holds epoch {good[1]}: continue with --resume {good[0]}" \
            if good else "; it cannot be continued (no checkpoint written)"
        why = "it ran out of memory" if out_of_memory(error) else "another process probably exited or stalled" \
            if launch.communicating(error, self.comm.world_size) else "its own failure (see its traceback on stderr)"
        try:                                # (a failure here must not hide `error`, which the caller raises)
            report = self.report(records, None, best, everyone=[self.rank_report()])
            report |= {"stopped": f"rank {self.comm.rank} failed {when} ({type(error).__name__}: {first}); {why}"
                                  f"{kept}"} | ({"predicted": None} if "predicted" in report else {})
            write_json(self.cfg.output, report, since=self.since)
        except SpgnnError as e:
            say(str(e))
        except Exception as e:             # out of memory again, say: said, and the run's own error raised
            say(f"the report of the epochs done could not be made ({type(e).__name__}: {e})")

    def _train(self, log) -> dict:
        cfg, start, records, best = self.cfg, 0, [], None
        mine = checkpoint.identity(cfg, self.info) | {"run": checkpoint.run_identity(cfg, self.info) |
                                                      {"task": self.task.name} | self.training()} \
            if cfg.resume or cfg.checkpoint else None                                          # hashes the graph
        if cfg.resume:
            start, records, best = self.resume(mine)
        folder = cfg.checkpoint and agree(self.comm, lambda: checkpoint.writable(
            cfg.checkpoint, cfg.resume and Path(cfg.resume).resolve() == Path(cfg.checkpoint).resolve()))

        good = [(cfg.resume, start - 1)] if cfg.resume else [None]     # the last checkpoint: (folder, epoch)
        last = [folder and checkpoint.stamp(folder)]                   # (rank 0's) of the checkpoint there now
        self.setup_peak_rss = restart_peak()                            # the set-up's peak; training's from here
        self.done = (records, best, good)

        def save(epoch, records, best, stopping=False):     # `stopping`: the run stops after `epoch`
            self.done = (records, best, good)
            if folder and (stopping or (epoch + 1) % cfg.checkpoint_every == 0 or epoch == cfg.epochs - 1):
                state = checkpoint.state_of(self, epoch, records, best, mine) if self.comm.rank == 0 else None
                try:
                    last[0] = checkpoint.save_on_rank0(self.comm, lambda: checkpoint.save(folder, state, last[0]),
                                                       cfg.timeout)
                except SpgnnError as e:     # every rank's: the run stops, its report of the epochs done written (`run`)
                    raise Unsaved(epoch, records, best, str(e)) from None
                good[0] = (folder, epoch)

        self.first_epoch = start                 # what this process runs: its measurements are of these epochs
        stopped = None                           # {"signal", "epoch"} of a run asked to stop
        try:
            try:
                records, best = epoch_loop(self.epoch, self.evaluate, cfg, log if self.comm.rank == 0 else None,
                                           start, records, best, save, self.finite, self.metric,
                                           self.task.higher_is_better, lambda: interrupt.agreed(self.comm))
            except Stopped as s:
                records, best, stopped = s.epochs, s.best, {"signal": s.signal, "epoch": s.epoch}
                if good[0] != (folder, s.epoch):             # (unless its own checkpoint was due)
                    save(s.epoch, records, best, stopping=True)
            with progress.stage("evaluating", "(final)"):
                try:
                    final = self.evaluate()
                except NotFinite:
                    raise Diverged(stopped["epoch"] if stopped else cfg.epochs - 1,
                                   records[-1]["loss"] if records else math.nan, records, best,
                                   "the model's scores became NaN or infinite") from None
        except Ended as d:
            kept = "" if isinstance(d, Unsaved) else \
                f"; {Path(good[0][0]) / checkpoint.FILE} holds epoch {good[0][1]}, from before: resume from it " \
                "with a lower --lr (its weights may be on their way already: if it diverges again, start again)" \
                if good[0] else "; lower --lr, or scale the features down"
            report = self.report(d.epochs, None, d.best)        # its prediction is of the run it did not finish
            report |= {"stopped": f"{d}{kept}"} | ({"predicted": None} if "predicted" in report else {})
            if isinstance(d, Unsaved):
                d.report = report
                raise
            return report
        if not best and records:     # --eval-every 0, or no validation figure: the final evaluation is the best
            val, test = f"val_{self.metric}", f"test_{self.metric}"
            best = {"epoch": records[-1]["epoch"], val: final[val], test: final[test]}
        return self.report(records, final, best) | ({"interrupted": stopped} if stopped else {})

    def resume(self, mine: dict) -> tuple[int, list[dict], dict]:
        """The weights, Adam's state and the counters of the checkpoint in cfg.resume (checked against `mine`, the
        run's identity); returns (the first epoch to run, the records carried over, the best so far). The checkpoint's
        tensors go with the return: kept, they held the weights and Adam's moments twice through the run."""
        cfg = self.cfg
        state = agree(self.comm, lambda: checkpoint.load(cfg.resume, mine, cfg.epochs))
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as e:       # same flags, another layout of the weights: an earlier spgnn's model
            first = str(e).strip().splitlines()[-1].strip()[:200]
            raise SpgnnError(f"{cfg.resume}: its weights do not fit this version's --model {cfg.model} ({first}): "
                             "it was written by another version of spgnn; start the run again") from None
        self.opt.load_state_dict(state["optimizer"])
        self.opt.lr, self.opt.weight_decay = cfg.lr, cfg.weight_decay
        self.restore(state["progress"]["counters"])
        return state["epoch"] + 1, *on_schedule(state["progress"]["epochs"], cfg.eval_every, cfg.epochs, self.metric,
                                                 self.task.higher_is_better)

    def finite(self) -> bool:
        """Whether every weight and gradient is finite (the same on every rank: weights are replicated)."""
        return all(bool(torch.isfinite(p).all()) and (p.grad is None or bool(torch.isfinite(p.grad).all()))
                   for p in self.model.parameters())

    def training(self) -> dict:
        """How this run trains, as its checkpoint records it and a resumed run must agree."""
        return {"training": "full-batch"}

    def counters(self) -> dict:
        """The run's own counters a checkpoint keeps (ints)."""
        return {}

    def restore(self, counters: dict) -> None:
        """Set the counters `counters` from a checkpoint."""

    def rank_report(self) -> dict:
        """This rank's figures: {"comm": its ledger summary, "memory": its peak RSS (host memory), that of the
        set-up and that of training (from the first epoch on), and on a GPU the most the process allocated there};
        subclasses add to both."""
        gpu = {"cuda_peak_allocated_bytes": torch.cuda.max_memory_allocated()} \
            if self.cfg.device.startswith("cuda") else {}
        return {"comm": {"rank": self.comm.rank} | self.comm.ledger.summary(),
                "memory": {"rank": self.comm.rank, "peak_rss_bytes": peak_rss_bytes(),
                           "setup_peak_rss_bytes": self.setup_peak_rss,
                           "train_peak_rss_bytes": peak_rss_since_restart() if self.setup_peak_rss else None} | gpu,
                "stages": progress.seconds(), "threads": torch.get_num_threads()}

    def graph_report(self) -> dict:
        g = self.info
        return {"name": g.name, "n": g.n, "nnz": g.nnz, "features": g.num_features, "classes": g.num_classes}

    def run_report(self, everyone: list[dict], epochs: list[dict]) -> dict:
        """The report's entries particular to the kind of training (`everyone`: each rank's `rank_report`; `epochs`:
        the records of the epochs this process ran, those a resumed run carried over left out)."""
        return {}

    def config_report(self) -> dict:
        """The run's config as its report gives it: cfg's fields, the dataset as the user named it."""
        return self.cfg.as_dict() | ({"dataset": self.given_dataset} if self.given_dataset else {})

    first_epoch = 0                             # the first epoch this process ran (`run`: after a resume, not 0)

    def report(self, epochs: list[dict], final: dict | None, best: dict, everyone: list[dict] | None = None) -> dict:
        """The run's report: `epochs` all records (a resumed run's included), `final` the final evaluation (None
        where the run stopped before it); what was measured (seconds, bytes) is of the epochs this process ran, by
        the ranks `everyone` report (their `rank_report`s; None: every rank's, gathered)."""
        everyone = everyone or self.comm.all_gather_object(self.rank_report())
        ran = [e for e in epochs if e["epoch"] >= self.first_epoch]
        times = [e["time_s"] for e in ran]
        return {
            "config": self.config_report(),
            "task": {"name": self.task.name, "metric": self.metric, "label": self.task.metric_label,
                     "higher_is_better": self.task.higher_is_better},
            "world_size": self.comm.world_size,
            "transport": self.comm.transport.name,
            "graph": self.graph_report(),
            "epochs": epochs,
            "final": None if final is None else final | {"loss": epochs[-1]["loss"] if epochs else None},
            "best": best,
            "median_epoch_s": float(np.median(times)) if times else None,
            "comm": {"per_rank": [r["comm"] for r in everyone]},
            "memory": {"per_rank": [r["memory"] for r in everyone]},
            "threads": {"per_rank": [r["threads"] for r in everyone]},
            "stages": {"per_rank": [r["stages"] for r in everyone], "launcher": progress.launcher_seconds()},
        } | self.run_report(everyone, ran)


def ended_early(report: dict) -> str | None:
    """Why the run of `report` ended before its last epoch (a checkpoint not written, a divergence, a signal), or
    None where it ran them all."""
    if stop := report.get("interrupted"):
        return f"interrupted by {stop['signal']} after epoch {stop['epoch']}"
    return report.get("stopped")


RECORDED = ("epoch", "loss", "time_s")     # what every epoch's record holds; an evaluation adds its figures


def evaluates(epoch: int, eval_every: int, epochs: int) -> bool:
    """Whether a run of `epochs` evaluates after `epoch`: every `eval_every` epochs and at its last (none where
    `eval_every` is 0: the final evaluation only)."""
    return bool(eval_every) and (epoch % eval_every == 0 or epoch == epochs - 1)


def on_schedule(records: list[dict], eval_every: int, epochs: int, metric: str = "acc",
                higher: bool = True) -> tuple[list[dict], dict]:
    """A resumed run's records carried over, as the uninterrupted run of `epochs` would have them: evaluated only
    every `eval_every` epochs and at its last (a checkpoint's last epoch was evaluated as the end of its own run,
    which may be shorter), and the best of those by ``val_<metric>`` (`better`)."""
    kept, best = [], {}
    for r in records:
        r = r if evaluates(r["epoch"], eval_every, epochs) else {k: r[k] for k in RECORDED if k in r}
        best = better(r, best, metric, higher)
        kept.append(r)
    return kept, best


def better(record: dict, best: dict, metric: str, higher: bool = True) -> dict:
    """The best-validation record of `best` and `record` (its epoch and figures): `record` where its ``val_<metric>``
    is a number above the best's, or below it where lower is better (`higher` false: an error, a loss; the first
    of equals); a split with no figure (NaN: no validation nodes) never."""
    val, test = f"val_{metric}", f"test_{metric}"
    if val in record and math.isfinite(record[val]) and \
            (val not in best or (record[val] > best[val] if higher else record[val] < best[val])):
        return {"epoch": record["epoch"], val: record[val], test: record[test]}
    return best


def epoch_loop(step, evaluate, cfg: TrainConfig, log=None, start: int = 0, epochs=None, best=None,
               after=None, finite=lambda: True, metric: str = "acc", higher: bool = True,
               stop=lambda: None) -> tuple[list[dict], dict]:
    """Run `step(epoch)` (returning the loss) for epochs start … cfg.epochs − 1, `evaluate()` every
    cfg.eval_every epochs and at the last; returns the per-epoch records and the best-validation record (by
    ``val_<metric>``, highest or, where `higher` is false, lowest), those given (`epochs`, `best`: a resumed run's)
    continued. `log` gets one line an epoch, `after(epoch, records, best)` is called after each. Raises `Diverged`
    when the loss is not finite or `finite()` is false after a step, and `Stopped` after an epoch but the last where
    `stop()` (the same on every rank) names the signal that asked for it."""
    val, test = f"val_{metric}", f"test_{metric}"
    epochs, best = list(epochs or []), best or {}           # {} until an evaluation: a metric may be negative
    for epoch in range(start, cfg.epochs):
        t0 = time.perf_counter()
        loss = step(epoch)
        if not (math.isfinite(loss) and finite()):
            raise Diverged(epoch, loss, epochs, best)
        record = {"epoch": epoch, "loss": loss, "time_s": time.perf_counter() - t0}
        if evaluates(epoch, cfg.eval_every, cfg.epochs):
            try:
                figures = evaluate()
            except NotFinite:   # weights finite, yet so large that the scores overflow float32
                raise Diverged(epoch, loss, epochs, best, "the model's scores became NaN or infinite") from None
            if not {val, test} <= figures.keys():
                raise SpgnnError(f"the task's evaluate gave {', '.join(sorted(figures))}, not {val} and {test}: a "
                                 f"task names its figures <split>_<metric> (its metric: {metric!r})")
            if odd := next((k for k, v in figures.items() if not isinstance(v, numbers.Real)), None):
                raise SpgnnError(f"the task's evaluate gave {odd} = {figures[odd]!r}, not a number: a figure is a "
                                 "float (float(...) of a tensor), the same on every rank")
            record |= figures
            best = better(record, best, metric, higher)
        epochs.append(record)
        if log:
            log(format_epoch(record, metric))
        if after:
            after(epoch, epochs, best)
        if epoch < cfg.epochs - 1 and (signal := stop()):
            raise Stopped(signal, epoch, epochs, best)
    return epochs, best


def format_epoch(r: dict, metric: str = "acc") -> str:
    acc = "".join(f"  {s}{'' if metric == 'acc' else ' ' + metric} {r[k]:.4f}" for s in ("train", "val", "test")
                  if (k := f"{s}_{metric}") in r)
    return f"epoch {r['epoch']:4d}  loss {r['loss']:.4f}{acc}  time {r['time_s'] * 1e3:.1f} ms"


class Stopped(Exception):
    """The ranks agreed to stop after an epoch, asked by a signal (its name); holds the records up to it."""

    def __init__(self, signal: str, epoch: int, epochs: list[dict], best: dict):
        super().__init__(f"stopped by {signal} after epoch {epoch}")
        self.signal, self.epoch, self.epochs, self.best = signal, epoch, epochs, best


class Ended(Exception):
    """The run stopped before its end (`Diverged`, `Unsaved`): the line that says why, the records up to it."""

    def __init__(self, line: str, epochs: list[dict], best: dict):
        super().__init__(line)
        self.epochs, self.best = epochs, best


class Diverged(Ended):
    """The loss, a weight or a gradient became NaN or infinite at an epoch; holds the records before it."""

    def __init__(self, epoch: int, loss: float, epochs: list[dict], best: dict, what: str | None = None):
        what = what or (f"the training loss became {loss}" if not math.isfinite(loss) else "a weight or gradient "
                        "became NaN or infinite")
        super().__init__(f"{what} at epoch {epoch}; the run stopped there", epochs, best)


class Unsaved(Ended):
    """The checkpoint of an epoch could not be written (`why`); holds the records up to that epoch, then the run's
    `report` of them."""

    def __init__(self, epoch: int, epochs: list[dict], best: dict, why: str):
        super().__init__(f"{why}; the run stopped after epoch {epoch}", epochs, best)
        self.report = None
