"""Which queue and trust tier a namespace's pods are charged to: the Tenants decide, never a pod.

The rules are the webhook's (`gpugov.k8s.webhook.tenancy.resolve`, pure, imported): a Tenant
that lists the namespace wins over selector Tenants, the most specific selector wins among
those, two equal claims are ambiguous. Selectors read the namespace's labels, which the
scheduler watches. A pod's `gpugov.io/queue`, `gpugov.io/tenant` and `gpugov.io/trust-tier`
annotations are the webhook's explanation for humans: a tenant can PATCH them after
creation, so nothing here reads them (DESIGN.md, "Trust flows one way").

Whether the Tenant's queue exists and is a leaf is not decided here: the scheduler checks
that against its quota tree every cycle, with the reason on the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpugov.k8s.webhook.tenancy import TenancyError, resolve, selector_matches
from gpugov.model.isolation import TrustTier


@dataclass(frozen=True, slots=True)
class Owner:
    """What a namespace's pods are charged to; `queue` None = none, `why` says why."""

    queue: str | None
    trust: TrustTier
    tenant: str = ""
    why: str = ""
    #: the Tenant's time-slice replicas oversubscribe memory (`spec.timeSlicing`)
    oversubscribe: bool = False


@dataclass
class Tenancy:
    """Tenant objects and namespace labels -> `Owner` per namespace (cached)."""

    tenants: list[dict[str, Any]] = field(default_factory=list)
    #: namespace -> labels; None = labels are not watched (every namespace has none)
    labels: dict[str, dict[str, str]] | None = None
    _cache: dict[str, Owner] = field(default_factory=dict)

    def of(self, namespace: str) -> Owner:
        got = self._cache.get(namespace)
        if got is None:
            try:
                got = self._resolve(namespace)
            except Exception as e:  # noqa: BLE001 - a Tenant of a shape nobody expected
                got = Owner(None, TrustTier.UNTRUSTED, why=f"Tenants cannot be read: {e}")
            self._cache[namespace] = got
        return got

    def _resolve(self, namespace: str) -> Owner:
        if self.labels is not None and namespace not in self.labels and self._selectors():
            return Owner(None, TrustTier.UNTRUSTED, why=(
                f"namespace {namespace} has not been seen yet (its labels decide its Tenant)"))
        labels = (self.labels or {}).get(namespace, {})
        # every Tenant's queue as an existing leaf: queue existence is the quota tree's call
        leaves: dict[str, str | None] = {}
        for t in self.tenants:
            q = (t.get("spec") or {}).get("queue") if isinstance(t, Mapping) else None
            if isinstance(q, str):
                leaves[q] = None
        try:
            res = resolve(namespace, labels, self.tenants, leaves)
        except TenancyError as e:
            # claimed by none: the default tier (as before Tenants); ambiguous: the strictest
            claimed = any(self._claims(t, namespace, labels) for t in self.tenants)
            return Owner(None, TrustTier.UNTRUSTED if claimed else TrustTier.INTERNAL,
                         why=str(e))
        return Owner(res.queue or None, res.trust, res.tenant,
                     "" if res.queue else f"Tenant {res.tenant} names no queue",
                     res.oversubscribe)

    @staticmethod
    def _claims(t: Any, namespace: str, labels: Mapping[str, str]) -> bool:
        spec = (t.get("spec") or {}) if isinstance(t, Mapping) else {}
        sel = spec.get("namespaceSelector")
        return namespace in (spec.get("namespaces") or []) or (
            isinstance(sel, Mapping) and selector_matches(sel, labels))

    def _selectors(self) -> bool:
        return any(isinstance(t, Mapping) and isinstance(t.get("spec"), Mapping)
                   and isinstance(t["spec"].get("namespaceSelector"), Mapping)
                   for t in self.tenants)

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> bool:
        """A namespace was seen (labels None: deleted). True when its owner may change."""
        if self.labels is None:
            self.labels = {}
        new = {str(k): str(v) for k, v in (labels or {}).items()}
        if labels is None:
            changed = self.labels.pop(name, None) is not None
        else:
            changed = self.labels.get(name) != new
            self.labels[name] = new
        if not changed:
            return False
        before = self._cache.pop(name, None)
        return before is None or before != self.of(name)

    def set_tenants(self, tenants: list[dict[str, Any]]) -> None:
        self.tenants = list(tenants)
        self._cache.clear()
