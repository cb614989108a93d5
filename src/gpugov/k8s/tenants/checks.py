"""Tenants that must not be accepted: refused at admission, with the field and what to do.

- namespaces one Tenant lists that another Tenant also lists (the fences would fight);
- a system namespace (kube-system, kube-public, kube-node-lease, gpugov's own) listed, or
  matched by a non-empty namespaceSelector: fencing it (Pod Security, default-deny) would
  break the cluster. The catch-all `namespaceSelector: {}` stays allowed: it never applies to
  system namespaces (nor to namespaces another Tenant claims more specifically);
- guardrails that are malformed or below the trust tier's floor (`guardrails.parse`);
- `spec.dra.models` naming a model gpugov does not know (every DRA pod of the Tenant would
  be refused for it; the schema bounds the list, not the names).

What only the cluster knows (RBAC subjects that do not exist, a quota below current use) is
checked by the controller, which then leaves that fence as it was and says why in the
Tenant's status: never half applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpugov.k8s import identities
from gpugov.k8s.tenants.guardrails import GuardrailError, parse
from gpugov.k8s.webhook.tenancy import selector_matches
from gpugov.model.isolation import TrustTier

SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def system_namespaces(system_namespace: str = identities.SYSTEM_NAMESPACE) -> tuple[str, ...]:
    return (*SYSTEM_NAMESPACES, system_namespace)


def is_catch_all(spec: Mapping[str, Any]) -> bool:
    sel = spec.get("namespaceSelector")
    return isinstance(sel, Mapping) and not sel.get("matchLabels") and \
        not sel.get("matchExpressions")


def tenant_problems(obj: Mapping[str, Any], others: list[Mapping[str, Any]],
                    protected: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Why the Tenant `obj` is refused (empty: accept). `others`: the other Tenants;
    `protected`: system namespace -> its labels."""
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "?")
    problems = []
    listed = [n for n in spec.get("namespaces") or [] if isinstance(n, str)]
    for ns in listed:
        if ns in protected:
            problems.append(f"Tenant {name}: spec.namespaces lists {ns!r}, a system namespace; "
                            "its fences (Pod Security, default-deny) would break the cluster: "
                            "remove it")
    sel = spec.get("namespaceSelector")
    if isinstance(sel, Mapping) and not is_catch_all(spec):
        hit = sorted(ns for ns, labels in protected.items() if selector_matches(sel, labels))
        if hit:
            problems.append(f"Tenant {name}: spec.namespaceSelector matches system "
                            f"namespace(s) {', '.join(hit)}; narrow it (e.g. a label only "
                            "tenant namespaces carry)")
    for other in others:
        oname = (other.get("metadata") or {}).get("name")
        if oname == name:
            continue
        theirs = set((other.get("spec") or {}).get("namespaces") or [])
        both = sorted(theirs.intersection(listed))
        if both:
            problems.append(f"Tenant {name}: spec.namespaces {', '.join(both[:10])} already "
                            f"belong to Tenant {oname}; a namespace has one Tenant: remove "
                            "it from one of them")
    problems += _dra_problems(str(name), spec)
    try:
        trust = TrustTier(spec.get("trust", TrustTier.INTERNAL.value))
    except ValueError:
        return problems  # the CRD schema names the allowed values
    try:
        parse(str(name), spec, trust)
    except GuardrailError as exc:
        problems.append(str(exc))
    return problems


def _dra_problems(name: str, spec: Mapping[str, Any]) -> list[str]:
    """Unknown names in `spec.dra.models` (the CRD schema bounds their count and length)."""
    dra = spec.get("dra")
    models = dra.get("models") if isinstance(dra, Mapping) else None
    if not isinstance(models, list):
        return []
    from gpugov.model.catalog import CATALOG

    unknown = sorted({m for m in models[:64] if isinstance(m, str) and m not in CATALOG})
    if not unknown:
        return []
    shown = ", ".join(repr(m[:64]) for m in unknown[:4])
    return [f"Tenant {name}: spec.dra.models names {shown}, which gpugov's GPU catalog does "
            f"not know (every DRA pod of this Tenant would be refused); known: "
            f"{', '.join(CATALOG)}"]
