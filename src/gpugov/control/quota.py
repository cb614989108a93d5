"""The quota ledger: what each queue uses, and whether one more job is allowed.

A queue *holds* max(its usage, its unlent reserve), where a parent's usage is the sum of what
its children hold. Admitting demand `d` into a leaf is allowed when, along the leaf's path,
every queue still holds at most its cap (min(limit, quota + borrowingLimit)) and the
top-level queues together hold at most the cluster capacity. Reserves (quota -
lendingLimit) thereby stay free for their owner even when idle. Non-preemptible work must
additionally fit inside the guaranteed quota of every queue on its path, so reclaim can
always give a queue its quota back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpugov.control.resources import MIG_PREFIX, scale, unit
from gpugov.control.tree import QueueTree, held_amounts

EPS = 1e-6


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    """Why a demand is not admissible: `kind` is "cap", "capacity" or "in-quota".

    `would_hold` is the amount the rule compares (for "cap" and "capacity": usage plus the
    demand plus idle reserves that are never lent); `using` is usage plus the demand alone,
    so the sentence can say how much of the held amount is reserve.
    """

    kind: str
    queue: str
    resource: str
    would_hold: float
    allowed: float
    using: float | None = None

    def describe(self) -> str:
        k = scale(self.resource)
        unit_ = unit(self.resource)
        if self.resource.startswith(MIG_PREFIX):
            unit_ = f"{self.resource} instances"
        elif self.resource == "gpumem":
            unit_ = "GiB of GPU memory (gpumem)"
        held, cap = self.would_hold / k, self.allowed / k
        using = held if self.using is None else self.using / k
        split = ""
        if held - using > 1e-9:
            split = (f" ({using:g} in use or asked for + {held - using:g} idle reserve "
                     f"that is never lent)")
        if self.kind == "capacity":
            return (f"cluster {self.resource} is held by the queues: {held:g} {unit_} would "
                    f"be held{split}, the cluster has {cap:g}")
        if self.kind == "in-quota":
            return (f"non-preemptible work may only use guaranteed quota: queue {self.queue} "
                    f"would use {held:g} of quota {cap:g} {unit_}")
        return f"queue {self.queue} would hold {held:g} {unit_}{split}, above its cap {cap:g}"


class Ledger:
    """Usage per queue (subtree sums) and the held amounts used by admission checks."""

    def __init__(self, tree: QueueTree, capacity: np.ndarray) -> None:
        self.tree = tree
        self.capacity = np.asarray(capacity, dtype=np.float64)
        q, r = len(tree), len(tree.resources)
        self.usage = np.zeros((q, r))
        self.pinned = np.zeros((q, r))  # usage by non-preemptible jobs
        self.reserve = tree.reserve.copy()
        self.cap = tree.cap.copy()
        self.held, self.child_held = held_amounts(tree, self.usage)
        self.top_held = self.held[tree.top].sum(axis=0)

    def _walk(self, leaf: int, demand: np.ndarray
              ) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
        """New held amounts along the path if `demand` were added (no mutation)."""
        path = self.tree.paths[leaf]
        out = []
        new = np.maximum(self.reserve[leaf], self.usage[leaf] + demand)
        delta = new - self.held[leaf]
        out.append((leaf, new))
        for a in path[1:]:
            new = np.maximum(self.reserve[a], self.child_held[a] + delta)
            delta = new - self.held[a]
            out.append((a, new))
        return out, self.top_held + delta

    def check(self, leaf: int, demand: np.ndarray, pinned: bool) -> QuotaVerdict | None:
        """None if `demand` may be admitted into `leaf`, else the first violated rule."""
        need = (demand > 0) & self.tree.governed
        steps, top = self._walk(leaf, demand)
        for a, new in steps:
            bad = need & (new > self.cap[a] + EPS)
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                return QuotaVerdict("cap", self.tree.names[a], self.tree.resources.names[r],
                                    float(new[r]), float(self.cap[a, r]),
                                    float(self.usage[a, r] + demand[r]))
        if pinned:
            for a in self.tree.paths[leaf]:
                bad = need & (self.pinned[a] + demand > self.tree.quota[a] + EPS)
                if bad.any():
                    r = int(np.flatnonzero(bad)[0])
                    return QuotaVerdict("in-quota", self.tree.names[a],
                                        self.tree.resources.names[r],
                                        float(self.pinned[a, r] + demand[r]),
                                        float(self.tree.quota[a, r]))
        bad = need & (top > self.capacity + EPS)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            using = self.usage[self.tree.top, r].sum() + demand[r]
            return QuotaVerdict("capacity", "", self.tree.resources.names[r], float(top[r]),
                                float(self.capacity[r]), float(using))
        return None

    def add(self, leaf: int, demand: np.ndarray, pinned: bool, sign: float = 1.0) -> None:
        """Charge (sign=1) or refund (sign=-1) `demand` to `leaf` and its ancestors."""
        d = demand * sign
        steps, top = self._walk(leaf, d)
        for a in self.tree.paths[leaf]:
            self.usage[a] += d
            if pinned:
                self.pinned[a] += d
        # apply held updates after child sums (order matters: use old held for deltas)
        for i, (a, new) in enumerate(steps):
            if i + 1 < len(steps):
                parent = steps[i + 1][0]
                self.child_held[parent] += new - self.held[a]
            self.held[a] = new
        self.top_held = top

    def remove(self, leaf: int, demand: np.ndarray, pinned: bool) -> None:
        self.add(leaf, demand, pinned, -1.0)
