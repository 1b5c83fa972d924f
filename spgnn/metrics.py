"""Ranking metrics computed exactly over ranks that each hold some of the scores: ROC-AUC and average precision,
per target, equal to scikit-learn's ``roc_auc_score`` and ``average_precision_score`` on all the scores together.

Both depend on the global order of the scores, which no rank holds. A sample sort gives it with no rank holding
more than about its share: the key of a score is (target, score) packed into one order-preserving int64; every
rank sends a few evenly spaced keys of its sorted share to all (an all-gather of G·k keys), the G−1 quantiles of
those are the splitters, and one all-to-all sends each (key, label) to the rank whose key range holds it. Equal keys
go to the same rank, so ties stay together. Each rank then sorts its range and learns, from one all-gather of
per-target positive and negative counts, how many of each lie on lower ranks. With the distinct scores
s_1 < s_2 < … of one target, p_g and n_g the positives and negatives at s_g, P and N their totals:

    ROC-AUC = Σ_g p_g·(Σ_{h<g} n_h + n_g/2) / (P·N)                 (ties count one half)
    AP      = Σ_g (p_g/P) · TP_g / (TP_g + FP_g),  TP_g = Σ_{h≥g} p_h, FP_g = Σ_{h≥g} n_h

(the step-wise area of scikit-learn's precision-recall curve), and the per-rank partial sums add up over the
group. A target with one class only has neither: NaN. The exchanges count in the ledger of the current phase.

OGB's link figures, also over the union of the ranks' scores (`hits_at_k`, `mrr`):

    Hits@K = |{positives p : s_p > t_K}| / P,   t_K the K-th highest negative score (1 if fewer than K negatives)
    MRR    = (1/P) Σ_p 1 / r_p,   r_p = 1 + (|{n of p : s_n > s_p}| + |{n of p : s_n ≥ s_p}|) / 2

(OGB's evaluator: ties count half). t_K is the K-th highest of the ranks' own K highest negatives (an all-gather of
K scores a rank); r_p is computed where p's negatives are scored (the rank of p's source); sums then add up.
"""

from __future__ import annotations

import numpy as np
import torch

SAMPLES = 64        # keys each rank contributes per member of the group to choose the splitters


class NotFinite(ValueError):
    """Scores that are NaN or infinite (as float32), which no ranking orders: a diverged model's."""



def roc_auc(scores, labels, comm=None, group=None, targets=None, num_targets: int = 1) -> list[float]:
    """ROC-AUC of each target over the union of the ranks' scores (see the module docstring); `scores` (float,
    ranked as float32: scores equal there tie), `labels` (0/1) and `targets` (the target of each score in [0,
    num_targets), default 0) are 1-D of equal length on each rank."""
    return ranking(scores, labels, comm, group, targets, num_targets)["rocauc"]


def average_precision(scores, labels, comm=None, group=None, targets=None, num_targets: int = 1) -> list[float]:
    """Average precision of each target over the union of the ranks' scores (as `roc_auc` takes them)."""
    return ranking(scores, labels, comm, group, targets, num_targets)["ap"]


def ranking(scores, labels, comm=None, group=None, targets=None, num_targets: int = 1) -> dict:
    """{"rocauc": [per target], "ap": [per target]} from one sort of the union of the ranks' scores."""
    if any(np.ndim(_numpy(a)) > 1 for a in (scores, labels, targets) if a is not None):
        raise ValueError("scores, labels and targets are 1-D, an entry a scored pair: for n×t scores of t targets "
                         "pass scores.ravel(), labels.ravel() and targets = the column of each (np.tile(np.arange(t), "
                         "n)), with num_targets = t")
    s = _numpy(scores).astype(np.float32, copy=False).ravel()
    lab, t = _numpy(labels).ravel(), np.zeros(len(s), np.int64) if targets is None else _numpy(targets).ravel()
    if not (len(s) == len(lab) == len(t)):
        raise ValueError(f"scores, labels and targets differ in length: {len(s)}, {len(lab)}, {len(t)}")
    _finite(s, comm=comm, group=group)
    if not np.isin(lab, (0, 1)).all():
        raise ValueError(f"labels must be 0 or 1 (or bool), got the values {np.unique(lab)[:6].tolist()}")
    if len(t) and not (np.array_equal(t, t.astype(np.int64)) and 0 <= t.min() and t.max() < num_targets):
        raise ValueError(f"targets must be whole numbers in [0, {num_targets}) (num_targets {num_targets})")
    lab, t = lab.astype(np.int64), t.astype(np.int64)
    key = (t << 32) | _ordered(s)
    group = group or comm.world if comm is not None else None
    single = group is None or group.size == 1
    key, lab = (key, lab) if single else _sorted_exchange(comm, group, key, lab)
    order = np.argsort(key, kind="stable")
    key, lab = key[order], lab[order]
    distinct, first = np.unique(key, return_index=True)
    pos = np.add.reduceat(lab, first) if len(key) else np.zeros(0, np.int64)
    neg = np.diff(np.append(first, len(key))) - pos
    tg = distinct >> 32
    counts = np.stack([np.bincount(tg, pos, num_targets), np.bincount(tg, neg, num_targets)])      # 2 × T
    if single:
        below, totals = np.zeros_like(counts), counts
    else:
        every = np.stack(comm.all_gather_object(counts, group))                   # G × 2 × T, ranks in key order
        me = group.ranks.index(comm.rank)
        below, totals = every[:me].sum(0), every.sum(0)
    # within each target, the positives and negatives before each distinct key (this rank's range and below)
    start = np.searchsorted(tg, np.arange(num_targets))
    before_pos, before_neg = np.cumsum(pos) - pos, np.cumsum(neg) - neg          # over all targets here
    cum_pos = before_pos - _at(before_pos, start, tg) + below[0][tg]
    cum_neg = before_neg - _at(before_neg, start, tg) + below[1][tg]
    P, N = totals[0].astype(np.float64), totals[1].astype(np.float64)
    auc = np.bincount(tg, pos * (cum_neg + 0.5 * neg), num_targets)
    tp, fp = P[tg] - cum_pos, N[tg] - cum_neg
    ap = np.bincount(tg, np.divide(pos * tp, tp + fp, out=np.zeros(len(tp)), where=tp + fp > 0), num_targets)
    if not single:
        auc, ap = np.split(np.asarray(comm.all_sum([*auc, *ap], group)), 2)
    both = (P > 0) & (N > 0)
    return {"rocauc": np.where(both, auc / np.maximum(P * N, 1), np.nan).tolist(),
            "ap": np.where(both, ap / np.maximum(P, 1), np.nan).tolist()}


def hits_at_k(pos, neg, k: int, comm=None, group=None) -> float:
    """OGB's Hits@K (see the module docstring) of the union of the ranks' positive scores `pos` [E] against the
    union of their negative scores `neg` [E']."""
    pos, neg = (a.ravel() for a in _finite(pos, neg, comm=comm, group=group))
    many = comm is not None and (group or comm.world).size > 1
    top = np.full(k, -np.inf, np.float32)              # this rank's K highest negatives, −∞ where it has fewer
    mine = np.sort(neg)[-k:]
    top[k - mine.size:] = mine
    if many:
        top = comm.all_gather_v(torch.from_numpy(top), [k] * (group or comm.world).size, group).numpy()
    kth = np.sort(top)[-k]
    negatives, above, positives = [neg.size, np.count_nonzero(pos > kth), pos.size]
    if many:
        negatives, above, positives = comm.all_sum([negatives, above, positives], group)
    if negatives < k:          # OGB's evaluator checks this first: 1 even with no positives
        return 1.0
    return above / positives if positives else float("nan")


def mrr(pos, neg, comm=None, group=None) -> float:
    """OGB's MRR (see the module docstring) of the union of the ranks' positive scores `pos` [E], row i of `neg`
    [E, M] the scores of positive i's negatives."""
    pos, neg = _finite(pos, neg, comm=comm, group=group)
    pos = pos.reshape(-1, 1)
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(f"mrr: neg must be [E, M], a row of negatives for each of the {pos.shape[0]} positives; "
                         f"got shape {neg.shape}")
    rank = 1 + 0.5 * ((neg > pos).sum(1) + (neg >= pos).sum(1))
    sums = [float(np.sum(1 / rank)), pos.size]
    if comm is not None and (group or comm.world).size > 1:
        sums = comm.all_sum(sums, group)
    return sums[0] / sums[1] if sums[1] else float("nan")


def _finite(*scores, comm=None, group=None) -> tuple:
    """Each of `scores` as float32 (the precision they are ranked at), checked finite on every rank of `group` in
    one sum (a NaN compares false with all): NotFinite on all of them where one has such a score, so that none is
    left waiting in the ranking's exchanges."""
    out = tuple(_numpy(a).astype(np.float32, copy=False) for a in scores)
    bad = float(not all(np.isfinite(a).all() for a in out))
    if comm is not None and (group or comm.world).size > 1:
        bad = comm.all_sum([bad], group)[0]
    if bad:
        raise NotFinite("scores must be finite (as float32, the precision they are ranked at) to be ranked")
    return out


def _sorted_exchange(comm, group, key, lab):
    """This rank's range of the union of the group's (key, label) pairs after a sample sort: every key in it is
    greater than every key on a lower member, and equal keys share a member."""
    G = group.size
    mine = np.sort(key)
    picks = mine[np.linspace(0, len(mine) - 1, min(len(mine), SAMPLES * G)).astype(np.int64)] if len(mine) else mine
    sample = np.sort(np.concatenate(comm.all_gather_object(picks, group)))
    splitters = sample[(np.arange(1, G) * len(sample)) // G] if len(sample) else np.zeros(G - 1, np.int64)
    dest = np.searchsorted(splitters, key, side="right")         # member j holds keys in (split_{j-1}, split_j]
    order = np.argsort(dest, kind="stable")
    send = torch.from_numpy(np.stack([key[order], lab[order]], 1))
    send_rows = np.bincount(dest, minlength=G)
    recv_rows = [int(r[group.ranks.index(comm.rank)]) for r in comm.all_gather_object(send_rows, group)]
    got = comm.all_to_all_v(send, send_rows.tolist(), recv_rows, group).numpy()
    return got[:, 0], got[:, 1]


def _ordered(s: np.ndarray) -> np.ndarray:
    """float32 → int64 in [0, 2³²) with the same order (−0.0 equal to 0.0)."""
    bits = (s + np.float32(0.0)).view(np.uint32).astype(np.int64)
    return np.where(bits >> 31, 0xFFFFFFFF - bits, bits | (1 << 31))


def _at(values: np.ndarray, start: np.ndarray, tg: np.ndarray) -> np.ndarray:
    """values[start[t]] for each entry's target t (0 where the target has no entries here)."""
    padded = np.append(values, 0)
    return padded[np.minimum(start, len(values))][tg]


def _numpy(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
