"""Which Tenant (and so which queue and trust tier) a namespace belongs to.

A Tenant that lists the namespace in `spec.namespaces` wins over selector Tenants; among
selector Tenants the most specific selector (most terms) wins, so `namespaceSelector: {}` is a
catch-all. Two Tenants that claim a namespace equally are ambiguous: the pod is refused with
both names rather than guessed. A Tenant whose queue does not exist (or is not a leaf) is
refused too. `spec.schedulers` lists the schedulers (besides gpugov's) the Tenant's GPU pods
may name; an admin writes it (tenants cannot edit Tenants). `spec.timeSlicing.oversubscribe:
true` opts the Tenant's time-slice replicas in to memory oversubscription (not capped, as the
NVIDIA plugin's time-slicing; isolation none): only a `trusted` Tenant may (its floor is none),
any other Tenant saying so is refused with the field named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpugov.model.isolation import TrustTier


class TenancyError(ValueError):
    """The namespace maps to no usable Tenant; the message says what to fix."""


#: most scheduler names a Tenant may list (the CRD schema allows no more)
MAX_SCHEDULERS = 16


@dataclass(frozen=True)
class Resolution:
    tenant: str
    queue: str
    trust: TrustTier
    #: other schedulers the Tenant's GPU pods may name (`spec.schedulers`)
    schedulers: tuple[str, ...] = ()
    #: time-slice replicas are not capped at their memory (`spec.timeSlicing.oversubscribe`)
    oversubscribe: bool = False
    #: `spec.guardrails` as written (the webhook's pod checks and placement read it through
    #: `gpugov.k8s.tenants.guardrails.parse`)
    guardrails: Mapping[str, Any] | None = None
    #: `spec.dra` as written: DRA mode (the webhook turns GPU resources into claims,
    #: `dra_translate.py`); None = the device plugin's extended resources
    dra: Mapping[str, Any] | None = None


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels AND matchExpressions)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _terms(selector: Mapping[str, Any]) -> int:
    return len(selector.get("matchLabels") or {}) + len(selector.get("matchExpressions") or [])


def resolve(namespace: str, ns_labels: Mapping[str, str], tenants: list[dict[str, Any]],
            queues: Mapping[str, str | None]) -> Resolution:
    """The Tenant for `namespace`; TenancyError when none, ambiguous, or its queue is missing
    or not a leaf. `queues` maps each Queue name to its parent (None for a root)."""
    scored: list[tuple[int, str, dict[str, Any]]] = []
    for t in tenants:
        spec = t.get("spec") or {}
        name = (t.get("metadata") or {}).get("name", "?")
        if namespace in (spec.get("namespaces") or []):
            scored.append((1_000_000, name, spec))
        elif isinstance(spec.get("namespaceSelector"), dict):
            sel = spec["namespaceSelector"]
            if selector_matches(sel, ns_labels):
                scored.append((_terms(sel), name, spec))
    if not scored:
        raise TenancyError(
            f"namespace {namespace!r} belongs to no gpugov Tenant; create a Tenant with "
            f"spec.namespaces: [{namespace}] (or a catch-all with namespaceSelector: {{}})")
    best = max(s for s, _, _ in scored)
    top = sorted((n, spec) for s, n, spec in scored if s == best)
    if len(top) > 1:
        raise TenancyError(
            f"namespace {namespace!r} is claimed by several Tenants "
            f"({', '.join(n for n, _ in top)}); make exactly one Tenant name it")
    name, spec = top[0]
    queue = spec.get("queue", "")
    if queue not in queues:
        raise TenancyError(f"Tenant {name!r} sends namespace {namespace!r} to queue {queue!r}, "
                           f"which does not exist; create Queue {queue!r} or fix the Tenant")
    children = sorted(q for q, parent in queues.items() if parent == queue)
    if children:
        raise TenancyError(f"Tenant {name!r} sends namespace {namespace!r} to queue {queue!r}, "
                           f"which has child queues ({', '.join(children)}); only leaf queues "
                           "take work: point the Tenant at a leaf")
    try:
        trust = TrustTier(spec.get("trust", TrustTier.INTERNAL.value))
    except ValueError:
        raise TenancyError(f"Tenant {name!r} has trust {spec.get('trust')!r}; allowed: "
                           f"{', '.join(t.value for t in TrustTier)}") from None
    schedulers = spec.get("schedulers") or []
    if not isinstance(schedulers, list):
        schedulers = []
    names = tuple(s for s in schedulers[:MAX_SCHEDULERS] if isinstance(s, str) and s)
    guard = spec.get("guardrails")
    dra = spec.get("dra")
    return Resolution(name, queue, trust, names, _oversubscribe(name, spec, trust),
                      guard if isinstance(guard, Mapping) else None,
                      dra if isinstance(dra, Mapping) else None)


def _oversubscribe(name: str, spec: Mapping[str, Any], trust: TrustTier) -> bool:
    """`spec.timeSlicing.oversubscribe`: a boolean, and only on a trusted Tenant (an
    uncapped replica delivers no isolation, below the floor of any other tier)."""
    ts = spec.get("timeSlicing")
    if ts is None:
        return False
    value = ts.get("oversubscribe", False) if isinstance(ts, Mapping) else ts
    if not isinstance(value, bool):
        raise TenancyError(f"Tenant {name!r}: spec.timeSlicing.oversubscribe is "
                           f"{str(value)[:64]!r}; allowed: true or false")
    if value and trust is not TrustTier.TRUSTED:
        raise TenancyError(
            f"Tenant {name!r}: spec.timeSlicing.oversubscribe is true but its trust is "
            f"{trust.value}: an oversubscribed (uncapped) time-slice replica delivers no "
            "isolation, below that tier's floor; set trust: trusted or remove the field")
    return value
