"""The objects a Tenant's guardrails put in each of its namespaces.

Every object is named `gpugov-…`, labelled `gpugov.io/tenant=<tenant>` (the controller
finds and repairs them by that label) and owned by nothing else: an edit is restored, a
deletion recreated, an object the Tenant no longer wants removed. The namespace itself gets
the Pod Security Admission labels (`pod-security.kubernetes.io/enforce|audit|warn`) and
`gpugov.io/tenant`, which the NetworkPolicies select: a tenant cannot write either (namespaces
are cluster objects; `admin`/`edit` do not grant them).
"""

from __future__ import annotations

from typing import Any

from gpugov.k8s.tenants.guardrails import RBAC_ROLES, Guardrails

TENANT_LABEL = "gpugov.io/tenant"
PSA_PREFIX = "pod-security.kubernetes.io/"
PSA_MODES = ("enforce", "audit", "warn")
#: the ClusterRole (one per Tenant) that lets its subjects read their own Queue
QUEUE_READER = "gpugov-tenant-{tenant}-queue"
#: fence names, as the status conditions report them
FENCES = ("PodSecurity", "ResourceQuota", "LimitRange", "NetworkPolicy", "RBAC")


def namespace_labels(tenant: str, g: Guardrails) -> dict[str, str]:
    """The labels the controller keeps on every namespace of the Tenant."""
    labels = {TENANT_LABEL: tenant}
    for mode in PSA_MODES:
        labels[f"{PSA_PREFIX}{mode}"] = g.pod_security
    return labels


def _meta(name: str, namespace: str, tenant: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {TENANT_LABEL: tenant}}


def namespace_objects(tenant: str, namespace: str, g: Guardrails
                      ) -> list[tuple[str, dict[str, Any]]]:
    """(fence, object) for every namespaced object the Tenant wants in `namespace`."""
    out: list[tuple[str, dict[str, Any]]] = []
    if g.quota:
        out.append(("ResourceQuota", {"apiVersion": "v1", "kind": "ResourceQuota",
                                      "metadata": _meta("gpugov-tenant", namespace, tenant),
                                      "spec": {"hard": dict(g.quota)}}))
    if g.default_requests or g.default_limits:
        item: dict[str, Any] = {"type": "Container"}
        if g.default_requests:
            item["defaultRequest"] = dict(g.default_requests)
        if g.default_limits:
            item["default"] = dict(g.default_limits)
        out.append(("LimitRange", {"apiVersion": "v1", "kind": "LimitRange",
                                   "metadata": _meta("gpugov-tenant", namespace, tenant),
                                   "spec": {"limits": [item]}}))
    if g.isolate:
        same = [{"namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant}}}]
        out.append(("NetworkPolicy", {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta("gpugov-default-deny", namespace, tenant),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}))
        out.append(("NetworkPolicy", {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta("gpugov-allow-tenant", namespace, tenant),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": same}], "egress": [{"to": same}]}}))
        out.append(("NetworkPolicy", {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta("gpugov-allow-dns", namespace, tenant),
            "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{
                "to": [{"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}}))
    if g.extra_ingress or g.extra_egress:
        types = ([*(["Ingress"] if g.extra_ingress else []),
                  *(["Egress"] if g.extra_egress else [])])
        spec: dict[str, Any] = {"podSelector": {}, "policyTypes": types}
        if g.extra_ingress:
            spec["ingress"] = [dict(r) for r in g.extra_ingress]
        if g.extra_egress:
            spec["egress"] = [dict(r) for r in g.extra_egress]
        out.append(("NetworkPolicy", {"apiVersion": "networking.k8s.io/v1",
                                      "kind": "NetworkPolicy",
                                      "metadata": _meta("gpugov-extra", namespace, tenant),
                                      "spec": spec}))
    for key, role in RBAC_ROLES.items():
        subjects = g.rbac.get(key) or ()
        if subjects:
            out.append(("RBAC", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": _meta(f"gpugov-tenant-{role}", namespace, tenant),
                "subjects": [s.as_rbac() for s in subjects],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role}}))
    return out


def cluster_objects(tenant: str, queue: str, g: Guardrails
                    ) -> list[tuple[str, dict[str, Any]]]:
    """The Tenant's one cluster-scoped grant: its subjects may read their own Queue (get,
    status included), nothing else on cluster objects."""
    subjects = [s.as_rbac() for key in RBAC_ROLES for s in g.rbac.get(key) or ()]
    if not subjects:
        return []
    name = QUEUE_READER.format(tenant=tenant)
    meta = {"name": name, "labels": {TENANT_LABEL: tenant}}
    unique = [dict(t) for t in {tuple(sorted(s.items())) for s in subjects}]
    unique.sort(key=lambda s: (s["kind"], s["name"], s.get("namespace", "")))
    return [("RBAC", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": meta, "rules": [{
                          "apiGroups": ["gpugov.io"], "resources": ["queues", "queues/status"],
                          "resourceNames": [queue], "verbs": ["get"]}]}),
            ("RBAC", {"apiVersion": "rbac.authorization.k8s.io/v1",
                      "kind": "ClusterRoleBinding", "metadata": dict(meta),
                      "subjects": unique,
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": name}})]
