"""What an allocated claim charges its queue, and whether the queue tree admits it. Pure.

A device's charge, in the queues' units (`gpu` in GPUs, `gpumem` in GiB; control/resources.py):
a whole GPU or a MIG instance or a replica: its published `compute` / 100 GPUs and its
`memory`; a shared GPU (consumable capacity): what the allocation consumed; a MIG instance
also one `mig-<profile>`. A claim charges the sum of its `gpu.gpugov.io` devices.

Admission (`Ledger.admit`): the claim's queue and every ancestor stay within their `limit`
(a Queue's hard cap; `gpu`, `gpumem` and any `mig-<profile>` it names) counting what gpugov's
scheduler already charged them for pods (the Queue's `status.usage` less `status.draUsage`, the
claims it counted: `pod_usage`) plus the claims admitted here. A queue with no limit on a
resource does not cap it (its guarantee is a promise of the fair-share scheduler, which DRA
pods of kube-scheduler do not go through).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpugov.k8s.dra.slices import COMPUTE_FULL, DRIVER
from gpugov.k8s.quantity import parse_quantity
from gpugov.model.isolation import IsolationLevel

GOVERNED = ("gpu", "gpumem")
#: most results one allocation has (the apiserver's AllocationResultsMaxSize)
MAX_RESULTS = 32
#: `Queue.status.draUsage`: the part of `status.usage` that gpugov's scheduler counted from
#: DRA claims (k8s/scheduler/dra_claims.py); the governor counts claims itself
DRA_USAGE = "draUsage"


class ChargeError(ValueError):
    """The claim's allocation cannot be valued (names the field)."""


@dataclass(frozen=True, slots=True)
class Charge:
    gpu: Fraction = Fraction(0)
    gpumem: Fraction = Fraction(0)  # GiB
    #: counted resources: `mig-<profile>` -> instances
    counts: tuple[tuple[str, int], ...] = ()

    def __add__(self, other: Charge) -> Charge:
        counts = dict(self.counts)
        for k, n in other.counts:
            counts[k] = counts.get(k, 0) + n
        return Charge(self.gpu + other.gpu, self.gpumem + other.gpumem,
                      tuple(sorted(counts.items())))

    def get(self, resource: str) -> Fraction:
        if resource == "gpu":
            return self.gpu
        if resource == "gpumem":
            return self.gpumem
        return Fraction(dict(self.counts).get(resource, 0))

    def text(self) -> str:
        extra = "".join(f", {k} {n}" for k, n in self.counts)
        return f"gpu {float(self.gpu):g}, gpumem {float(self.gpumem):g} GiB{extra}"


def _q(where: str, value: Any) -> Fraction:
    try:
        q = parse_quantity(value)
    except ValueError as e:
        raise ChargeError(f"{where}: {e}") from None
    if q < 0:
        raise ChargeError(f"{where}: {value!r} is negative")
    return q


def device_index(slices: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(pool, device name) -> the published device, from the newest generation per pool."""
    newest: dict[str, int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == DRIVER:
            pool = spec.get("pool") or {}
            newest[pool.get("name")] = max(newest.get(pool.get("name"), 0),
                                           int(pool.get("generation") or 0))
    out = {}
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        if spec.get("driver") != DRIVER or int(pool.get("generation") or 0) != \
                newest.get(pool.get("name")):
            continue
        for d in spec.get("devices") or []:
            out[(pool.get("name"), d.get("name"))] = d
    return out


def claim_charge(claim: dict[str, Any], devices: Mapping[tuple[str, str], dict[str, Any]]
                 ) -> Charge:
    """What the claim's allocated gpugov devices charge; ChargeError names the field."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or []
    if len(results) > MAX_RESULTS:
        raise ChargeError(f"status.allocation.devices.results: {len(results)} results; "
                          f"allowed: at most {MAX_RESULTS}")
    total = Charge()
    for i, r in enumerate(results):
        if r.get("driver") != DRIVER:
            continue
        where = f"status.allocation.devices.results[{i}]"
        dev = devices.get((r.get("pool"), r.get("device")))
        if dev is None:
            raise ChargeError(f"{where}: device {r.get('pool')}/{r.get('device')} is not "
                              "in gpugov's published ResourceSlices")
        cap = dev.get("capacity") or {}
        consumed = r.get("consumedCapacity") or {}
        mem = consumed.get("memory", (cap.get("memory") or {}).get("value", "0"))
        compute = consumed.get("compute", (cap.get("compute") or {}).get("value",
                                                                          str(COMPUTE_FULL)))
        profile = ((dev.get("attributes") or {}).get("migProfile") or {}).get("string")
        total = total + Charge(_q(f"{where} compute", compute) / COMPUTE_FULL,
                               _q(f"{where} memory", mem) / (1 << 30),
                               ((f"mig-{profile}", 1),) if profile else ())
    return total


def claim_isolation(claim: dict[str, Any], devices: Mapping[tuple[str, str], dict[str, Any]]
                    ) -> tuple[IsolationLevel, str]:
    """The weakest isolation the claim's gpugov devices deliver, and the device that sets it:
    a whole GPU or a MIG instance hard; a slice of a shared GPU (capacity consumed below the
    whole card) or a time-slice replica soft (the enforcement library); an MPS client none."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    weakest, which = IsolationLevel.HARD, ""
    for r in (alloc.get("devices") or {}).get("results") or []:
        if r.get("driver") != DRIVER:
            continue
        dev = devices.get((r.get("pool"), r.get("device"))) or {}
        kind = ((dev.get("attributes") or {}).get("type") or {}).get("string", "gpu")
        level = IsolationLevel.HARD
        if kind == "mps":
            level = IsolationLevel.NONE
        elif kind == "timeslice":
            level = IsolationLevel.SOFT
        elif kind == "gpu" and r.get("consumedCapacity"):
            cap = dev.get("capacity") or {}
            for name, used in r["consumedCapacity"].items():
                whole = (cap.get(name) or {}).get("value")
                try:
                    if whole is None or parse_quantity(used) < parse_quantity(whole):
                        level = IsolationLevel.SOFT
                except ValueError:
                    level = IsolationLevel.SOFT
        if level < weakest or not which:
            weakest, which = min(weakest, level), f"{r.get('pool')}/{r.get('device')}"
    return weakest, which


def pod_usage(status: Mapping[str, Any]) -> dict[str, float]:
    """A Queue's `status.usage` less its `status.draUsage`: what gpugov's scheduler charged
    for pods. The one rule against double counting: the scheduler's usage includes the DRA
    claims it counted and says which part that is; the governor counts claims itself."""
    usage, dra = status.get("usage") or {}, status.get(DRA_USAGE) or {}
    if not isinstance(usage, Mapping):
        return {}
    if not isinstance(dra, Mapping):
        dra = {}
    out = {}
    for k, v in usage.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            d = dra.get(k, 0)
            d = d if isinstance(d, int | float) and not isinstance(d, bool) else 0
            out[k] = max(float(v) - float(d), 0.0)
    return out


@dataclass
class QueueNode:
    name: str
    parent: str | None
    limit: dict[str, float] | None
    usage: dict[str, float] = field(default_factory=dict)  # the scheduler's status.usage
    quota: dict[str, float] = field(default_factory=dict)  # the guarantee (reclaim)


@dataclass
class Ledger:
    """Claims admitted per leaf queue, over the Queue tree."""

    queues: dict[str, QueueNode]
    admitted: dict[str, tuple[str, Charge]] = field(default_factory=dict)  # claim uid ->

    def chain(self, leaf: str) -> list[QueueNode]:
        out, seen = [], set()
        name: str | None = leaf
        while name is not None and name not in seen and name in self.queues:
            seen.add(name)
            out.append(self.queues[name])
            name = self.queues[name].parent
        return out

    def used(self, queue: str) -> Charge:
        """gpugov's scheduler's usage plus the claims admitted in `queue`'s subtree."""
        node = self.queues[queue]
        total = Charge(Fraction(str(node.usage.get("gpu", 0))),
                       Fraction(str(node.usage.get("gpumem", 0))))
        for leaf, charge in self.admitted.values():
            if any(q.name == queue for q in self.chain(leaf)):
                total = total + charge
        return total

    def admit(self, uid: str, leaf: str, charge: Charge) -> str:
        """"" and the claim is counted, or why the queue tree refuses it."""
        if uid in self.admitted:
            return ""
        if leaf not in self.queues:
            return f"queue {leaf!r} does not exist"
        for q in self.chain(leaf):
            used = self.used(q.name)
            for r in sorted(set(GOVERNED) | {k for k in (q.limit or {})
                                              if k.startswith("mig-")}):
                cap = (q.limit or {}).get(r)
                if cap is not None and used.get(r) + charge.get(r) > Fraction(str(cap)):
                    return (f"queue {q.name}: {r} {float(used.get(r)):g} in use + "
                            f"{float(charge.get(r)):g} for this claim is over its limit "
                            f"{cap:g}")
        self.admitted[uid] = (leaf, charge)
        return ""
