"""`spec.guardrails` of a Tenant, with the defaults of its trust tier.

Defaults (docs/tenancy.md): untrusted tenants get Pod Security `restricted`, a pods quota of
200 and container request defaults; internal tenants `baseline` and the request defaults;
trusted tenants get Pod Security as declared (`privileged` when unset) and no defaults.
Every tier but trusted is network-isolated (default deny between tenants). A Tenant may raise
its own fence (e.g. an internal tenant at `restricted`) but never lower it below its tier's
floor: that is refused with the field, the value and what is allowed (`GuardrailError`).
Sizes are bounded before use: the spec is written by an admin, but one bad Tenant must fail
alone and clearly, never crash the controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpugov.k8s.quantity import parse_quantity
from gpugov.model.isolation import TrustTier

#: Pod Security Standards levels, weakest first
PSA_LEVELS = ("privileged", "baseline", "restricted")
#: the weakest level each tier may declare, and its default
PSA_FLOOR = {TrustTier.UNTRUSTED: "restricted", TrustTier.INTERNAL: "baseline",
             TrustTier.TRUSTED: "privileged"}
#: quota every untrusted namespace gets unless the Tenant says otherwise
DEFAULT_QUOTA = {TrustTier.UNTRUSTED: {"pods": "200"}, TrustTier.INTERNAL: {},
                 TrustTier.TRUSTED: {}}
#: container request defaults (a LimitRange) per tier
DEFAULT_REQUESTS = {TrustTier.UNTRUSTED: {"cpu": "100m", "memory": "128Mi"},
                    TrustTier.INTERNAL: {"cpu": "100m", "memory": "128Mi"},
                    TrustTier.TRUSTED: {}}
RBAC_ROLES = {"admins": "admin", "editors": "edit", "viewers": "view"}
SUBJECT_KINDS = ("User", "Group", "ServiceAccount")
MAX_ITEMS = 64
MAX_TEXT = 253


class GuardrailError(ValueError):
    """The Tenant's guardrails cannot be applied; the message names field and value."""


@dataclass(frozen=True)
class Subject:
    kind: str
    name: str
    namespace: str = ""

    def as_rbac(self) -> dict[str, str]:
        if self.kind == "ServiceAccount":
            return {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}
        return {"kind": self.kind, "name": self.name, "apiGroup": "rbac.authorization.k8s.io"}


@dataclass(frozen=True)
class Guardrails:
    pod_security: str
    quota: dict[str, str]
    default_requests: dict[str, str]
    default_limits: dict[str, str]
    isolate: bool
    extra_ingress: list[dict[str, Any]]
    extra_egress: list[dict[str, Any]]
    rbac: dict[str, tuple[Subject, ...]]
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    #: the webhook's pod checks (/dev/nvidia* hostPath, device env, privileged)
    pod_checks: bool = True


def _map(where: str, value: Any, quantities: bool = True) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_ITEMS:
        raise GuardrailError(f"{where}: expected a map of at most {MAX_ITEMS} entries")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k or len(k) > MAX_TEXT:
            raise GuardrailError(f"{where}: key {str(k)[:64]!r} is not a resource/label name")
        text = str(v)
        if quantities:
            try:
                parse_quantity(text)
            except ValueError:
                raise GuardrailError(f"{where}.{k}: {text[:64]!r} is not a Kubernetes "
                                     "quantity (e.g. 4, 500m, 16Gi)") from None
        elif len(text) > 63:
            raise GuardrailError(f"{where}.{k}: value longer than 63 characters")
        out[k] = text
    return out


def _list(where: str, value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_ITEMS or \
            not all(isinstance(x, Mapping) for x in value):
        raise GuardrailError(f"{where}: expected a list of at most {MAX_ITEMS} objects")
    return [dict(x) for x in value]


def _subjects(where: str, value: Any) -> tuple[Subject, ...]:
    out = []
    for i, s in enumerate(_list(where, value)):
        kind, name, ns = s.get("kind"), s.get("name"), s.get("namespace", "")
        if kind not in SUBJECT_KINDS:
            raise GuardrailError(f"{where}[{i}].kind: {str(kind)[:64]!r}; allowed: "
                                 f"{', '.join(SUBJECT_KINDS)}")
        if not isinstance(name, str) or not name or len(name) > MAX_TEXT:
            raise GuardrailError(f"{where}[{i}].name: a non-empty name is required")
        if kind == "ServiceAccount" and (not isinstance(ns, str) or not ns):
            raise GuardrailError(f"{where}[{i}].namespace: a ServiceAccount subject names "
                                 "its namespace")
        out.append(Subject(kind, name, ns if kind == "ServiceAccount" else ""))
    return tuple(out)


def parse(name: str, spec: Mapping[str, Any], trust: TrustTier) -> Guardrails:
    """The Tenant's guardrails, its tier's defaults filled in; GuardrailError names the field
    when a value is malformed or below the tier's floor."""
    g = spec.get("guardrails") or {}
    if not isinstance(g, Mapping):
        raise GuardrailError(f"Tenant {name}: spec.guardrails must be an object")
    where = f"Tenant {name}: spec.guardrails"
    psa = g.get("podSecurity") or {}
    level = (psa.get("level") if isinstance(psa, Mapping) else None) or PSA_FLOOR[trust]
    if level not in PSA_LEVELS:
        raise GuardrailError(f"{where}.podSecurity.level: {str(level)[:64]!r}; allowed: "
                             f"{', '.join(PSA_LEVELS)}")
    floor = PSA_FLOOR[trust]
    if PSA_LEVELS.index(level) < PSA_LEVELS.index(floor):
        raise GuardrailError(
            f"{where}.podSecurity.level: {level!r} is below the floor of a {trust.value} "
            f"tenant ({floor!r}: a privileged pod or hostPath bypasses the enforcement "
            f"library); allowed: {', '.join(PSA_LEVELS[PSA_LEVELS.index(floor):])}, or raise "
            "the Tenant's trust")
    quota_spec = g.get("quota") or {}
    if not isinstance(quota_spec, Mapping):
        raise GuardrailError(f"{where}.quota must be an object")
    quota = {**DEFAULT_QUOTA[trust], **_map(f"{where}.quota.hard", quota_spec.get("hard"))}
    lr = g.get("limitRange") or {}
    if not isinstance(lr, Mapping):
        raise GuardrailError(f"{where}.limitRange must be an object")
    requests = {**DEFAULT_REQUESTS[trust],
                **_map(f"{where}.limitRange.defaultRequest", lr.get("defaultRequest"))}
    limits = _map(f"{where}.limitRange.default", lr.get("default"))
    net = g.get("networkPolicy") or {}
    if not isinstance(net, Mapping):
        raise GuardrailError(f"{where}.networkPolicy must be an object")
    isolate = net.get("isolate", trust is not TrustTier.TRUSTED)
    if not isinstance(isolate, bool):
        raise GuardrailError(f"{where}.networkPolicy.isolate: expected true or false")
    if not isolate and trust is TrustTier.UNTRUSTED:
        raise GuardrailError(f"{where}.networkPolicy.isolate: false is below the floor of an "
                             "untrusted tenant (its pods could reach every other tenant's); "
                             "allowed: true")
    rbac_spec = g.get("rbac") or {}
    if not isinstance(rbac_spec, Mapping):
        raise GuardrailError(f"{where}.rbac must be an object")
    unknown = sorted(set(rbac_spec) - set(RBAC_ROLES))
    if unknown:
        raise GuardrailError(f"{where}.rbac: unknown keys {unknown}; allowed: "
                             f"{', '.join(RBAC_ROLES)}")
    rbac = {k: _subjects(f"{where}.rbac.{k}", rbac_spec.get(k)) for k in RBAC_ROLES}
    place = g.get("placement") or {}
    if not isinstance(place, Mapping):
        raise GuardrailError(f"{where}.placement must be an object")
    checks = g.get("podChecks", True)
    if not isinstance(checks, bool):
        raise GuardrailError(f"{where}.podChecks: expected true or false")
    if not checks and trust is not TrustTier.TRUSTED:
        raise GuardrailError(f"{where}.podChecks: false is allowed only for a trusted tenant")
    return Guardrails(
        pod_security=level, quota=quota, default_requests=requests, default_limits=limits,
        isolate=isolate,
        extra_ingress=_list(f"{where}.networkPolicy.ingress", net.get("ingress")),
        extra_egress=_list(f"{where}.networkPolicy.egress", net.get("egress")),
        rbac=rbac,
        node_selector=_map(f"{where}.placement.nodeSelector", place.get("nodeSelector"),
                           quantities=False),
        tolerations=_list(f"{where}.placement.tolerations", place.get("tolerations")),
        pod_checks=checks)
