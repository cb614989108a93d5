"""The queue tree as arrays: one row per queue, one column per resource (internal units).

Built once from a validated config so the cycle never walks YAML objects. Caps are `inf`
when the config omits them. A parent that omits `quota` for a resource gets the sum of its
children's quotas (so "omitted means 0" never makes children's guarantees unreachable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpugov.control.resources import ResourceSet
from gpugov.control.schema import ControlConfig, QueueConfig
from gpugov.model.isolation import TrustTier

INF = float("inf")


def _vec(rs: ResourceSet, res: dict[str, float] | None, default: float) -> np.ndarray:
    out = np.full(len(rs), default, dtype=np.float64)
    for i, r in enumerate(rs.names):
        if res is not None and r in res:
            out[i] = res[r] * rs.scale[i]
    return out


@dataclass
class QueueTree:
    names: list[str]
    parent: np.ndarray  # int64[Q], -1 for top-level queues
    children: list[list[int]]
    is_leaf: np.ndarray  # bool[Q]
    quota: np.ndarray  # float[Q, R]
    limit: np.ndarray  # float[Q, R], inf = no cap
    borrowing: np.ndarray
    lending: np.ndarray
    weight: np.ndarray  # float[Q]
    priority: np.ndarray  # int64[Q]
    paths: list[list[int]]  # queue -> itself and its ancestors, leaf first
    tenants: dict[str, tuple[int, TrustTier]]  # namespace -> (leaf, trust)
    #: resources some queue sets a quota or cap for; the others are not governed at all
    governed: np.ndarray  # bool[R]
    #: the columns: `resources.RESOURCES`, then every MIG profile the config names
    resources: ResourceSet

    @property
    def cap(self) -> np.ndarray:
        """Hard cap on a queue's usage: min(limit, quota + borrowingLimit)."""
        return np.minimum(self.limit, self.quota + self.borrowing)

    @property
    def reserve(self) -> np.ndarray:
        """Part of the quota that is never lent: quota - lendingLimit (0 if no lending cap)."""
        return np.maximum(self.quota - self.lending, 0.0)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def top(self) -> list[int]:
        return [i for i in range(len(self)) if self.parent[i] < 0]

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"unknown queue {name!r}") from None

    def resolve(self, queue_or_namespace: str) -> tuple[int, TrustTier]:
        """A job's leaf queue and trust from a tenant namespace or a leaf queue name.

        A queue name gets the weakest trust among the tenants mapped to it (`internal` if
        none), so naming the queue instead of the namespace never loosens isolation.
        """
        if queue_or_namespace in self.tenants:
            return self.tenants[queue_or_namespace]
        if queue_or_namespace not in self.names:
            leaves = [n for n, leaf in zip(self.names, self.is_leaf, strict=True) if leaf]
            raise KeyError(f"{queue_or_namespace!r} is neither a tenant namespace nor a queue; "
                           f"allowed leaf queues: {', '.join(leaves)}")
        q = self.names.index(queue_or_namespace)
        if not self.is_leaf[q]:
            raise KeyError(f"queue {queue_or_namespace!r} has child queues; only leaf queues "
                           "take work")
        order = [TrustTier.TRUSTED, TrustTier.INTERNAL, TrustTier.UNTRUSTED]
        tiers = [t for leaf, t in self.tenants.values() if leaf == q]
        return q, max(tiers, key=order.index) if tiers else TrustTier.INTERNAL

    def lca_path(self, victim_leaf: int, other_leaf: int) -> list[int]:
        """The victim's queue and ancestors strictly below the common ancestor with other."""
        other = set(self.paths[other_leaf])
        return [a for a in self.paths[victim_leaf] if a not in other]


def build_tree(cfg: ControlConfig) -> QueueTree:
    qs: list[QueueConfig] = list(cfg.queues)
    names = [q.name for q in qs]
    idx = {n: i for i, n in enumerate(names)}
    parent = np.array([idx[q.parent] if q.parent else -1 for q in qs], dtype=np.int64)
    children: list[list[int]] = [[] for _ in qs]
    for i, p in enumerate(parent):
        if p >= 0:
            children[p].append(i)
    mentioned = {r for q in qs for m in (q.quota, q.limit, q.borrowing_limit, q.lending_limit)
                 for r in (m or {})}
    rs = ResourceSet.of(mentioned)
    quota = np.stack([_vec(rs, q.quota, 0.0) for q in qs])
    # parents that omit a resource's quota inherit their children's sum (deepest first)
    depth = [0] * len(qs)
    for i in range(len(qs)):
        p = parent[i]
        while p >= 0:
            depth[i] += 1
            p = parent[p]
    for i in sorted(range(len(qs)), key=lambda j: -depth[j]):
        if children[i]:
            for r, name in enumerate(rs.names):
                if name not in qs[i].quota:
                    quota[i, r] = quota[children[i], r].sum()
    paths = []
    for i in range(len(qs)):
        path, p = [i], parent[i]
        while p >= 0:
            path.append(int(p))
            p = parent[p]
        paths.append(path)
    tenants = {t.namespace: (idx[t.queue], t.trust) for t in cfg.tenants}
    governed = np.array([r in mentioned or (r == "gpu" and not mentioned) for r in rs.names])
    return QueueTree(
        names=names, parent=parent, children=children,
        is_leaf=np.array([not c for c in children], dtype=bool),
        quota=quota,
        limit=np.stack([_vec(rs, q.limit, INF) for q in qs]),
        borrowing=np.stack([_vec(rs, q.borrowing_limit, INF) for q in qs]),
        lending=np.stack([_vec(rs, q.lending_limit, INF) for q in qs]),
        weight=np.array([q.weight for q in qs], dtype=np.float64),
        priority=np.array([q.priority for q in qs], dtype=np.int64),
        paths=paths, tenants=tenants, governed=governed, resources=rs,
    )


def held_amounts(tree: QueueTree, usage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(held, children's held) per queue for leaf `usage` [Q, R]: a leaf holds max(usage,
    reserve), a parent max(reserve, what its children hold)."""
    held = tree.reserve.copy()
    child_held = np.zeros_like(held)
    for i in sorted(range(len(tree)), key=lambda j: -len(tree.paths[j])):
        kids = tree.children[i]
        if kids:
            child_held[i] = held[kids].sum(axis=0)
            held[i] = np.maximum(tree.reserve[i], child_held[i])
        else:
            held[i] = np.maximum(tree.reserve[i], usage[i])
    return held, child_held


def _amount(tree: QueueTree, r: int, v: float) -> str:
    return tree.resources.describe(tree.resources.names[r], v)


def reserve_problems(tree: QueueTree) -> list[str]:
    """Idle reserves (quota - lendingLimit) that a parent's cap cannot hold all at once.

    A queue holds at least the reserves under it; if that is above its cap, the children
    without a reserve could never be admitted anything, so the config is refused.
    """
    held, _ = held_amounts(tree, np.zeros_like(tree.quota))
    out = []
    for q in range(len(tree)):
        for r in np.flatnonzero(tree.governed):
            if tree.children[q] and held[q, r] > tree.cap[q, r] + 1e-6:
                out.append(f"queues: the children of {tree.names[q]!r} keep "
                           f"{_amount(tree, r, held[q, r])} of idle reserve (quota - "
                           f"lendingLimit), above its cap {_amount(tree, r, tree.cap[q, r])}; "
                           f"allowed: reserves that fit the parent's limit / quota + "
                           f"borrowingLimit")
    return out


def cluster_fit(tree: QueueTree, capacity: np.ndarray) -> tuple[list[str], list[str]]:
    """(errors, warnings) for this config on a cluster of `capacity` (internal units).

    Error: the top-level queues' idle reserves (never lent) exceed the cluster, so they
    cannot all be honoured. Warnings: a queue's quota above the whole cluster (it can never
    be reached), and top-level quotas that together exceed the cluster (not every queue can
    get its quota at the same time).
    """
    errors: list[str] = []
    warnings: list[str] = []
    top = tree.top
    held = held_amounts(tree, np.zeros_like(tree.quota))[0][top].sum(axis=0)
    for r in np.flatnonzero(tree.governed):
        if held[r] > capacity[r] + 1e-6:
            parts = ", ".join(f"{tree.names[q]} {_amount(tree, r, tree.reserve[q, r])}"
                              for q in range(len(tree)) if tree.reserve[q, r] > 0)
            errors.append(f"queues: the idle reserves (quota - lendingLimit) add up to "
                          f"{_amount(tree, r, held[r])} ({parts}), more than the cluster's "
                          f"{_amount(tree, r, capacity[r])}; allowed: reserves that fit the "
                          f"cluster together (raise lendingLimit)")
        for q in range(len(tree)):
            if tree.quota[q, r] > capacity[r] + 1e-6:
                warnings.append(f"queue {tree.names[q]}: quota "
                                f"{_amount(tree, r, tree.quota[q, r])} is above the whole "
                                f"cluster ({_amount(tree, r, capacity[r])}); it can never be "
                                f"reached")
        total = tree.quota[top, r].sum()
        if total > capacity[r] + 1e-6:
            warnings.append(f"queues: the top-level quotas add up to {_amount(tree, r, total)}, "
                            f"more than the cluster's {_amount(tree, r, capacity[r])}; not every "
                            f"queue can get its quota at the same time")
    return errors, warnings
