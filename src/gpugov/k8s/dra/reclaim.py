"""Reclaim for DRA pods on kube-scheduler's path (pure): kube-scheduler does not preempt pods
for devices, so the governor does, the way gpugov's control plane reclaims
(control/preemption.py): a pending pod whose claim found no device, in a queue still under
its guarantee, may evict a lower-priority pod holding gpugov devices in a queue over its
guarantee.

Decided per round, at most one victim per preemptor (a whole-GPU claim needs one device; a
larger one asks again next round), lowest priority first, then the newest. The eviction
goes through the Eviction API, so PodDisruptionBudgets hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpugov.k8s.dra.ledger import Charge, Ledger
from gpugov.k8s.dra.slices import COMPUTE_FULL
from gpugov.k8s.quantity import parse_quantity


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod that holds admitted gpugov devices."""

    namespace: str
    name: str
    uid: str
    queue: str
    priority: int
    created: str


@dataclass(frozen=True, slots=True)
class Waiter:
    """A pending pod whose gpugov claim is unallocated after kube-scheduler tried."""

    namespace: str
    name: str
    queue: str
    priority: int
    demand: Charge


def claim_demand(claim: dict[str, Any], classes: set[str]) -> Charge | None:
    """What an unallocated claim will take, from its spec: `count` GPUs of a gpugov class, or
    its requested `compute` share; None when it asks for no gpugov device."""
    total = Charge()
    found = False
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        ex = r.get("exactly") or {}
        if ex.get("deviceClassName") not in classes:
            continue
        found = True
        count = ex.get("count") or 1
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 1024:
            return None
        compute = ((ex.get("capacity") or {}).get("requests") or {}).get("compute")
        try:
            share = Fraction(1) if compute is None else \
                min(Fraction(1), parse_quantity(compute) / COMPUTE_FULL)
        except ValueError:
            return None
        total = total + Charge(share * count, Fraction(0))
    return total if found else None


def under_guarantee(ledger: Ledger, queue: str, demand: Charge) -> bool:
    """The queue's use plus `demand` stays within its guarantee (`quota`) for `gpu`."""
    node = ledger.queues.get(queue)
    if node is None:
        return False
    quota = Fraction(str((node.quota or {}).get("gpu", 0)))
    return ledger.used(queue).gpu + demand.gpu <= quota


def over_guarantee(ledger: Ledger, queue: str) -> bool:
    node = ledger.queues.get(queue)
    if node is None:
        return False
    return ledger.used(queue).gpu > Fraction(str((node.quota or {}).get("gpu", 0)))


def victims(waiters: list[Waiter], holders: list[Holder], ledger: Ledger
            ) -> list[tuple[Waiter, Holder]]:
    """(preemptor, victim) pairs, highest-priority waiter first; each holder taken once."""
    out: list[tuple[Waiter, Holder]] = []
    taken: set[str] = set()
    for w in sorted(waiters, key=lambda w: (-w.priority, w.namespace, w.name)):
        if not under_guarantee(ledger, w.queue, w.demand):
            continue
        pool = [h for h in holders if h.uid not in taken and h.priority < w.priority
                and h.queue != w.queue and over_guarantee(ledger, h.queue)]
        if not pool:
            continue
        pick = sorted(pool, key=lambda h: (h.priority, _neg(h.created), h.name))[0]
        taken.add(pick.uid)
        out.append((w, pick))
    return out


def _neg(stamp: str) -> tuple[int, ...]:
    """Sort key: newest first (RFC 3339 stamps compare as text)."""
    return tuple(-ord(c) for c in stamp)
