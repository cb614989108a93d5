"""Hierarchical fair share, recomputed every cycle, per resource (docs/control-plane.md).

At each parent (the root's amount is the cluster capacity), for every resource alone:
1. each child's demand is capped: D = min(demand, limit, quota + borrowingLimit);
2. deserved: g = min(quota, D); if the deserved amounts exceed the parent's amount they are
   scaled down in proportion;
3. unused reserves (quota - lendingLimit not used by the child) are withheld: they are
   never lent, so they are not surplus;
4. surplus goes to priority buckets, highest first; inside a bucket by weighted
   water-filling (each round gives `left * w / sum(w)`, capped by what the child still
   wants); weight 0 gets no surplus;
5. a child's fair share is the amount its own children divide.
With usage history, weights inside a bucket become max(0, w + k (w - u)) (w and u
normalised over the bucket), so recent heavy users get less surplus. Amounts are real
numbers: nothing is floored to whole GPUs.
"""

from __future__ import annotations

import numpy as np

from gpugov.control.tree import QueueTree

EPS = 1e-9


def _water_fill(amount: float, want: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Split `amount` in proportion to `weight`, never giving anyone more than it wants."""
    give = np.zeros_like(want)
    active = (want > EPS) & (weight > 0)
    left = amount
    while left > EPS and active.any():
        share = left * weight / weight[active].sum()
        share[~active] = 0.0
        room = want - give
        capped = active & (share >= room - EPS)
        if not capped.any():
            give += share
            break
        give[capped] = want[capped]
        left -= room[capped].sum()
        active &= ~capped
    return give


def _history_weights(weight: np.ndarray, used: np.ndarray | None, k: float) -> np.ndarray:
    if used is None or weight.sum() <= 0 or used.sum() <= 0:
        return weight
    w = weight / weight.sum()
    u = used / used.sum()
    return np.maximum(0.0, w + k * (w - u)) * (weight > 0)


def divide(amount: float, kids: list[int], tree: QueueTree, demand: np.ndarray, r: int,
           history: np.ndarray | None, k: float) -> np.ndarray:
    """Fair shares of `kids` (one resource `r`) out of the parent's `amount`."""
    want = np.minimum(demand[kids, r], tree.cap[kids, r])
    quota = tree.quota[kids, r]
    deserved = np.minimum(quota, want)
    total = deserved.sum()
    if total > amount + EPS:
        deserved = deserved * (amount / total) if total > 0 else deserved
    held = np.maximum(deserved, np.minimum(tree.reserve[kids, r], quota))
    surplus = max(0.0, amount - held.sum())
    fair = deserved.copy()
    prio = tree.priority[kids]
    for p in sorted(set(prio.tolist()), reverse=True):
        if surplus <= EPS:
            break
        bucket = prio == p
        weight = tree.weight[kids] * bucket
        hist = None if history is None else history[kids, r] * bucket
        weight = _history_weights(weight, hist, k)
        give = _water_fill(surplus, np.where(bucket, want - fair, 0.0), weight)
        fair += give
        surplus -= give.sum()
    return fair


def fair_shares(tree: QueueTree, demand: np.ndarray, capacity: np.ndarray,
                history: np.ndarray | None = None, k: float = 1.0,
                columns: np.ndarray | None = None) -> np.ndarray:
    """Fair share [Q, R] of every queue given subtree demand [Q, R] and cluster capacity [R].

    `history` (optional, [Q, R]) is decayed recent usage; only its proportions matter.
    `columns`: the resources to divide (default all); the others get a fair share of 0.
    """
    fair = np.zeros_like(demand, dtype=np.float64)
    for r in range(demand.shape[1]) if columns is None else columns:
        stack = [(float(capacity[r]), tree.top)]
        while stack:
            amount, kids = stack.pop()
            if not kids:
                continue
            shares = divide(amount, kids, tree, demand, r, history, k)
            fair[kids, r] = shares
            stack.extend((float(s), tree.children[q]) for q, s in zip(kids, shares, strict=True))
    return fair


def dominant_ratio(usage: np.ndarray, fair: np.ndarray) -> float:
    """max over resources of usage / fair share: 0/0 counts 0, x/0 (x > 0) counts inf."""
    best = 0.0
    for u, f in zip(usage.tolist(), fair.tolist(), strict=True):
        if u <= EPS:
            continue
        if f <= EPS:
            return float("inf")
        best = max(best, u / f)
    return best


def jain(values: np.ndarray) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0 or not (x * x).sum():
        return 1.0
    return float(x.sum() ** 2 / (len(x) * (x * x).sum()))
