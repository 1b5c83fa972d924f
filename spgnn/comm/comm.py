"""The one communication layer: every collective goes through `Comm`, which moves the data with a
pluggable transport and writes what it moved into a `Ledger`.

Byte accounting is logical and exact (independent of how the transport routes data): for a tensor of
b bytes in a group of g ranks, this rank records

    broadcast       root: sent b·(g−1), 0 received;  others: received b
    all_to_all_v    sent Σ_{j≠me} |send_j|, received Σ_{j≠me} |recv_j|
    all_gather_v    sent |mine|·(g−1), received Σ_{j≠me} |block_j|
    reduce_scatter  sent Σ_{j≠me} |chunk_j|, received (g−1)·|chunk_me|
    all_reduce      reduce-scatter + all-gather of the chunks np.array_split gives: sent = received
                    = (numel − c_me + (g−1)·c_me) · itemsize

Messages count the point-to-point sends those formulas imply (non-empty ones for all_to_all_v).

A non-blocking call (`broadcast_async`, `all_to_all_v_async`) records the same bytes, in the phase current at
its start, when its handle is waited for; its seconds are those spent starting it and waiting for it: the
communication time left exposed, not the time it was in flight behind computation. `prefetched` runs a
sequence of such calls a given number ahead of the one being consumed.
"""

from __future__ import annotations

import datetime
import time
from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

FIELDS = ("calls", "sent_bytes", "recv_bytes", "messages", "seconds")
KEYS = ("phase", "layer", "op", "group")                                      # a ledger row's key
OPS = ("broadcast", "all_reduce", "all_to_all", "all_gather", "reduce_scatter")  # the collectives it records


@dataclass(frozen=True)
class Group:
    """A set of ranks that communicate together: `ranks` in group order, `pg` the torch process group."""

    name: str
    ranks: tuple
    pg: object = None

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass
class Ledger:
    """Totals per (phase, layer, op, group): calls, sent_bytes, recv_bytes, messages, seconds; and `sizes`, the
    members of each group named (what a broadcast's transfer time depends on: `spgnn.cost.charged_bytes`)."""

    rows: dict = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0, 0, 0.0]))
    sizes: dict = field(default_factory=dict, compare=False)

    def record(self, key, sent, recv, messages, seconds, size: int | None = None):
        if size is not None:
            self.sizes[key[3]] = int(size)
        row = self.rows[key]
        row[0] += 1
        row[1] += int(sent)
        row[2] += int(recv)
        row[3] += int(messages)
        row[4] += seconds

    def reset(self):
        self.rows.clear()

    def total(self, field_name: str = "sent_bytes", **match) -> float:
        """Sum of one field over the rows whose phase/layer/op/group equal the given values (ValueError for a field,
        key or op the ledger does not have: a misspelt one would sum nothing)."""
        if field_name not in FIELDS or set(match) - set(KEYS) or match.get("op", OPS[0]) not in OPS:
            raise ValueError(f"ledger total of {field_name!r} where {match}: fields are {', '.join(FIELDS)}; keys "
                             f"{', '.join(KEYS)}; ops {', '.join(OPS)}")
        i = FIELDS.index(field_name)
        return sum(row[i] for key, row in self.rows.items() if _matches(key, match))

    def summary(self, table: bool = True, seconds: float | None = None) -> dict:
        """Totals of bytes sent and received, messages and seconds (`seconds` if given: a model's), and the
        `table` (unless `table` is False)."""
        out = {k: self.total(k) for k in ("sent_bytes", "recv_bytes", "messages")}
        out["seconds"] = self.total("seconds") if seconds is None else seconds
        return out | ({"table": self.table()} if table else {})

    def table(self) -> list[dict]:
        """The ledger as a list of JSON-ready records."""
        return [dict(zip(KEYS, key)) | dict(zip(FIELDS, row))
                for key, row in sorted(self.rows.items(), key=lambda kv: tuple(map(str, kv[0])))]


def _matches(key, match) -> bool:
    return all(key[KEYS.index(k)] == v for k, v in match.items())


# torch.distributed's reduce-scatter of one tensor: reduce_scatter_single from torch 2.13, which warns that the
# older name reduce_scatter_tensor (all that torch 2.4-2.12 have) is deprecated
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class TorchTransport:
    """Moves tensors with torch.distributed (gloo on CPU, nccl on GPU); the collectives of the groups it makes fail
    after `timeout_s` seconds (None: torch's default for a group, 30 minutes), as the world's do."""

    name = "torch"

    def __init__(self, timeout_s: float | None = None):
        self.timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)

    def new_group(self, ranks):
        """A process group of global `ranks` (ascending); collective: every rank of the job calls it."""
        return dist.new_group(list(ranks), timeout=self.timeout)

    def broadcast(self, t, src, group):
        dist.broadcast(t, src=src, group=group.pg)

    def broadcast_async(self, t, src, group):
        """Start the broadcast; returns a handle whose wait() blocks until `t` is filled."""
        return dist.broadcast(t, src=src, group=group.pg, async_op=True)

    def all_to_all_v(self, out, inp, out_splits, in_splits, group):
        self.all_to_all_v_async(out, inp, out_splits, in_splits, group).wait()

    def all_to_all_v_async(self, out, inp, out_splits, in_splits, group):
        """Start the exchange; returns a handle whose wait() blocks until `out` is filled. On gloo in a group of
        more than two it is a send to each member with rows for it and a receive from each with rows for this rank,
        no more: gloo's all_to_all_single meets every member, even those with nothing to exchange, so that a ring
        round (one peer each way, as `--algo sar` makes P − 1 of) took 1.6 ms at P = 4 and 3.1 at P = 8 for 16 rows,
        against 1.0 and 1.6 sent point to point (`benchmarks/bench_ring.py`, 2 cores). Between two members (the
        two ways alike) and on nccl, all_to_all_single."""
        if group.size <= 2 or dist.get_backend(group.pg) != "gloo":
            return dist.all_to_all_single(out, inp, out_splits, in_splits, group=group.pg, async_op=True)
        me, ops = group.ranks.index(dist.get_rank()), []
        recv_at, send_at = np.cumsum([0, *out_splits]), np.cumsum([0, *in_splits])
        for j, peer in enumerate(group.ranks):
            got, sent = out[recv_at[j]:recv_at[j + 1]], inp[send_at[j]:send_at[j + 1]]
            if j == me:
                got.copy_(sent)
                continue
            if len(sent):
                ops.append(dist.P2POp(dist.isend, sent, peer, group.pg))
            if len(got):
                ops.append(dist.P2POp(dist.irecv, got, peer, group.pg))
        return _Works(dist.batch_isend_irecv(ops) if ops else [])

    def all_reduce(self, t, group):
        dist.all_reduce(t, group=group.pg)

    def all_reduce_async(self, t, group):
        """Start the sum in place; returns a handle whose wait() blocks until `t` holds it."""
        return dist.all_reduce(t, group=group.pg, async_op=True)

    def reduce_scatter(self, out, inp, group):
        _reduce_scatter(out, inp, group=group.pg)

    def all_gather_object(self, obj, group):
        out = [None] * group.size
        dist.all_gather_object(out, obj, group=group.pg)
        return out


class _Works:
    """Point-to-point works in flight, finished together by ``wait()``."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()


class Comm:
    """Collectives over `Group`s that record bytes, messages and seconds per phase in `ledger`."""

    def __init__(self, rank: int = 0, world_size: int = 1, transport=None):
        self.rank = rank
        self.world_size = world_size
        self.transport = transport or TorchTransport()
        self.ledger = Ledger()
        self.world = Group("world", tuple(range(world_size)), None)
        self._phase, self._layer = "setup", None
        self._made = {}                 # ranks → the transport's group for them

    def group(self, name: str, ranks) -> Group:
        """The `Group` `name` of global `ranks` (ascending). Collective: every rank makes every group, in one
        order. Groups of the same ranks share one transport group, made at the first: each gloo group holds its
        own sockets and a thread that wakes 100 times a second, which ranks sharing cores pay for (the world's is
        the default group, one rank's needs none)."""
        ranks = tuple(int(r) for r in ranks)
        if not ranks or list(ranks) != sorted(set(ranks)) or ranks[0] < 0 or ranks[-1] >= self.world_size:
            raise ValueError(f"group {name!r}: ranks {ranks} must be distinct, ascending and in [0, "
                             f"{self.world_size})")
        if ranks not in self._made:
            alone_or_all = len(ranks) in (1, self.world_size)
            self._made[ranks] = None if alone_or_all else self.transport.new_group(ranks)
        return Group(name, ranks, self._made[ranks])

    # -- phases ---------------------------------------------------------------------------------------
    @property
    def layer(self):
        return self._layer

    @property
    def phase_name(self) -> str:
        return self._phase

    @contextmanager
    def phase(self, name: str, layer=None):
        """Attribute the collectives inside the block to phase `name` (and `layer`, if given)."""
        saved = self._phase, self._layer
        self._phase, self._layer = name, layer
        try:
            yield
        finally:
            self._phase, self._layer = saved

    def at_layer(self, layer):
        """Attribute the collectives inside the block to `layer` of the current phase."""
        return self.phase(self._phase, layer)

    def _record(self, op, group, sent, recv, messages, t0, where=None):
        key = (*(where or (self._phase, self._layer)), op, group.name)
        self.ledger.record(key, sent, recv, messages, time.perf_counter() - t0, group.size)

    # -- collectives ----------------------------------------------------------------------------------
    def broadcast(self, t: torch.Tensor, src: int, group: Group | None = None) -> torch.Tensor:
        """Broadcast `t` in place from global rank `src` to every rank of `group`."""
        return self.broadcast_async(t, src, group, blocking=True).wait()

    def broadcast_async(self, t: torch.Tensor, src: int, group: Group | None = None, blocking: bool = False):
        """`broadcast` started now and finished by the returned handle's ``wait()``, which returns `t` and records
        the bytes (in the phase current at the start); meanwhile the transport may overlap it with computation
        (`blocking`, or a transport without ``broadcast_async``: done at once). `t` must be contiguous."""
        group = group or self.world
        if src not in group.ranks:
            raise ValueError(f"broadcast: the source rank {src} is not a member of group {group.name!r} "
                             f"{group.ranks}")

        def begin(start):
            if group.size > 1 and start is not None:
                return start(t, src, group), t
            if group.size > 1:
                self.transport.broadcast(t, src, group)
            return None, t

        def record(t0, where):
            b, root = t.numel() * t.element_size(), self.rank == src
            self._record("broadcast", group, b * (group.size - 1) if root else 0, 0 if root else b,
                         group.size - 1 if root else 0, t0, where)

        return self._in_flight("broadcast", blocking, begin, record)

    def _in_flight(self, op: str, blocking: bool, begin, record) -> Pending:
        """The frame the non-blocking collectives share: ``begin(start)`` starts one with the transport's
        ``<op>_async`` (None when `blocking` or the transport has none: then `begin` finishes it at once) and
        returns (the transport's work to wait for, or None; the result); the handle's ``wait()`` waits for the
        work, calls ``record(t0, where)`` (the seconds since t0 are the start's and the wait's; `where`: the phase
        and layer current at the start) and returns the result."""
        t0, where = time.perf_counter(), (self._phase, self._layer)
        work, out = begin(None if blocking else getattr(self.transport, f"{op}_async", None))
        started = time.perf_counter() - t0

        def wait():
            t1 = time.perf_counter()
            if work is not None:
                work.wait()
            record(t1 - started, where)
            return out

        return Pending(wait)

    def all_to_all_v(self, send: torch.Tensor, send_rows, recv_rows, group: Group | None = None):
        """Rows send[Σ_{k<j} send_rows_k : …] go to group member j; returns the Σ recv_rows received rows,
        ordered by source member. `send_rows`, `recv_rows`: row counts per member."""
        return self.all_to_all_v_async(send, send_rows, recv_rows, group, blocking=True).wait()

    def all_to_all_v_async(self, send: torch.Tensor, send_rows, recv_rows, group: Group | None = None,
                           blocking: bool = False):
        """`all_to_all_v` started now and finished by the returned handle's ``wait()``, which returns the
        received rows and records the same bytes (in the phase current at the start); the transport may
        overlap the exchange with computation meanwhile (`blocking`, or a transport without
        ``all_to_all_v_async``: done at once)."""
        group, send = group or self.world, send.contiguous()    # kept alive until the wait
        send_rows, recv_rows = _counts(group, "all_to_all_v send_rows", send_rows), \
            _counts(group, "all_to_all_v recv_rows", recv_rows)
        me = group.ranks.index(self.rank)
        if sum(send_rows) != send.shape[0] or send_rows[me] != recv_rows[me]:
            raise ValueError(f"all_to_all_v: send_rows {send_rows} must cover the {send.shape[0]} rows sent, and "
                             f"keep as many for this member ({send_rows[me]}) as recv_rows expects ({recv_rows[me]})")

        def begin(start):
            if group.size > 1 and start is not None:
                out = send.new_empty((int(sum(recv_rows)), *send.shape[1:]))
                return start(out, send, list(map(int, recv_rows)), list(map(int, send_rows)), group), out
            return None, self._exchange(send, send_rows, recv_rows, group)

        return self._in_flight("all_to_all_v", blocking, begin, lambda t0, where: self._record_all_to_all(
            group, send, send_rows, recv_rows, t0, where))

    def _record_all_to_all(self, group, send, send_rows, recv_rows, t0, where=None):
        me, rb = group.ranks.index(self.rank), _row_bytes(send)
        others = [j for j in range(group.size) if j != me]
        self._record("all_to_all", group, sum(int(send_rows[j]) for j in others) * rb,
                     sum(int(recv_rows[j]) for j in others) * rb,
                     sum(int(send_rows[j]) > 0 for j in others), t0, where)

    def all_gather_v(self, mine: torch.Tensor, rows, group: Group | None = None) -> torch.Tensor:
        """Concatenation over group members of their row blocks; `rows[j]` is member j's row count."""
        group = group or self.world
        rows, me = _counts(group, "all_gather_v rows", rows), group.ranks.index(self.rank)
        if rows[me] != mine.shape[0]:
            raise ValueError(f"all_gather_v: this member gives {mine.shape[0]} rows, rows says {rows[me]}")
        t0 = time.perf_counter()
        send = mine.unsqueeze(0).expand(group.size, *mine.shape).reshape(-1, *mine.shape[1:])
        out = self._exchange(send, [mine.shape[0]] * group.size, rows, group)
        rb = _row_bytes(mine)
        self._record("all_gather", group, mine.shape[0] * rb * (group.size - 1),
                     sum(r for j, r in enumerate(rows) if j != me) * rb,
                     (group.size - 1) if mine.shape[0] else 0, t0)
        return out

    def _exchange(self, send, send_rows, recv_rows, group):
        out = send.new_empty((int(sum(recv_rows)), *send.shape[1:]))
        if group.size > 1:
            self.transport.all_to_all_v(out, send.contiguous(), list(map(int, recv_rows)),
                                        list(map(int, send_rows)), group)
        else:
            out.copy_(send)
        return out

    def all_reduce(self, t: torch.Tensor, group: Group | None = None) -> torch.Tensor:
        """Sum `t` in place over `group`."""
        return self.all_reduce_async(t, group, blocking=True).wait()

    def all_reduce_async(self, t: torch.Tensor, group: Group | None = None, blocking: bool = False):
        """`all_reduce` started now and finished by the returned handle's ``wait()``, which returns `t` and records
        the bytes (in the phase current at the start); meanwhile the transport may overlap it with computation
        (`blocking`, or a transport without ``all_reduce_async``: done at once). `t` must be contiguous."""
        group = group or self.world
        g = group.size

        def begin(start):
            if g > 1 and start is not None:
                return start(t, group), t
            if g > 1:
                self.transport.all_reduce(t, group)
            return None, t

        def record(t0, where):
            b = ring_words(t.numel(), g, group.ranks.index(self.rank)) * t.element_size()
            self._record("all_reduce", group, b, b, 2 * (g - 1), t0, where)

        return self._in_flight("all_reduce", blocking, begin, record)

    def reduce_scatter(self, inp: torch.Tensor, group: Group | None = None, rows=None) -> torch.Tensor:
        """Sum over `group` of `inp`, split along dim 0 into chunks of `rows[j]` rows (default: g equal
        chunks); member j returns chunk j of the sum. Unequal chunks go by one all-to-all and a local sum."""
        group = group or self.world
        g, me = group.size, group.ranks.index(self.rank)
        if rows is None:
            if inp.shape[0] % g:
                raise ValueError(f"reduce_scatter needs dim 0 ({inp.shape[0]}) divisible by the group size {g}")
            rows = [inp.shape[0] // g] * g
        rows = _counts(group, "reduce_scatter rows", rows)
        if sum(rows) != inp.shape[0]:
            raise ValueError(f"reduce_scatter: chunks of {rows} rows do not cover dim 0 ({inp.shape[0]})")
        t0 = time.perf_counter()
        if g == 1:
            out = inp.clone()
        elif len(set(rows)) == 1:
            out = inp.new_empty((rows[me], *inp.shape[1:]))
            self.transport.reduce_scatter(out, inp.contiguous(), group)
        else:
            out = self._exchange(inp, rows, [rows[me]] * g, group).view(g, rows[me], *inp.shape[1:]).sum(0)
        rb = _row_bytes(inp)
        self._record("reduce_scatter", group, (sum(rows) - rows[me]) * rb, (g - 1) * rows[me] * rb, g - 1, t0)
        return out

    def all_gather_object(self, obj, group: Group | None = None) -> list:
        """Python objects from every member (pickled; bytes are not counted: bookkeeping only)."""
        group = group or self.world
        if group.size == 1:
            return [obj]
        return self.transport.all_gather_object(obj, group)

    def all_sum(self, values, group: Group | None = None) -> list:
        """Sums of a few Python numbers over `group`, as float64 (one small all-reduce)."""
        t = torch.tensor(list(values), dtype=torch.float64)
        return self.all_reduce(t, group).tolist()


class Pending:
    """A communication in flight: ``wait()`` finishes it and returns its result (`done`: one already finished)."""

    __slots__ = ("wait",)

    def __init__(self, wait):
        self.wait = wait

    @classmethod
    def done(cls, value) -> Pending:
        return cls(lambda: value)


def prefetched(starts, depth: int):
    """Iterator over the results of `starts` (callables, each starting a communication and returning its
    `Pending`), in order, each waited for when asked for, with `depth` later ones already started: the first
    `depth` start now, at the call, so that they are in flight during whatever the caller computes before
    asking for the first result; then asking for result r starts r + depth. depth 0: each starts when asked."""
    starts = iter(starts)
    pending = deque(s() for _, s in zip(range(depth), starts))

    def results():
        for s in starts:
            pending.append(s())
            yield pending.popleft().wait()
        while pending:
            yield pending.popleft().wait()

    return results()


def _counts(group: Group, what: str, counts) -> list[int]:
    """`counts`, one per member of `group`, as ints; ValueError naming `what` when there are not as many."""
    counts = [int(c) for c in counts]
    if len(counts) != group.size:
        raise ValueError(f"{what}: {len(counts)} counts for the {group.size} members of group {group.name!r}")
    return counts


def _row_bytes(t: torch.Tensor) -> int:
    return t.element_size() * int(np.prod(t.shape[1:], dtype=np.int64))


def ring_words(numel: int, g: int, me: int) -> int:
    """Words member `me` sends (and receives) in a ring all-reduce of `numel` words over g members: a
    reduce-scatter and an all-gather of the chunks np.array_split makes, numel − c + (g−1)·c, c its chunk."""
    if g == 1:
        return 0
    c = numel // g + (me < numel % g)
    return numel - c + (g - 1) * c
