"""Create, replace, delete and list the kinds the tenant controller owns, by one table.

`same(desired, actual)` decides drift: the desired fields must be in the object as written
(quantities compared by value, `500m` == `0.5`; fields the apiserver defaults and the
desired object leaves out are ignored unless they hold something), and nothing may be
added to what gpugov wrote (an extra quota key, an extra ingress rule is drift).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from gpugov.k8s.quantity import parse_quantity

#: the top-level fields the controller owns per kind (everything else is the apiserver's)
CONTENT = {"ResourceQuota": ("spec",), "LimitRange": ("spec",), "NetworkPolicy": ("spec",),
           "RoleBinding": ("subjects", "roleRef"), "ClusterRole": ("rules",),
           "ClusterRoleBinding": ("subjects", "roleRef")}
KINDS = tuple(CONTENT)


@dataclass(frozen=True)
class Ops:
    list: Callable[..., Awaitable[Any]]
    create: Callable[..., Awaitable[Any]]
    replace: Callable[..., Awaitable[Any]]
    delete: Callable[..., Awaitable[Any]]
    read: Callable[..., Awaitable[Any]]
    namespaced: bool = True


def ops(api: client.ApiClient, kind: str) -> Ops:
    core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    table = {
        "ResourceQuota": Ops(core.list_resource_quota_for_all_namespaces,
                             core.create_namespaced_resource_quota,
                             core.replace_namespaced_resource_quota,
                             core.delete_namespaced_resource_quota,
                             core.read_namespaced_resource_quota),
        "LimitRange": Ops(core.list_limit_range_for_all_namespaces,
                          core.create_namespaced_limit_range,
                          core.replace_namespaced_limit_range,
                          core.delete_namespaced_limit_range,
                          core.read_namespaced_limit_range),
        "NetworkPolicy": Ops(net.list_network_policy_for_all_namespaces,
                             net.create_namespaced_network_policy,
                             net.replace_namespaced_network_policy,
                             net.delete_namespaced_network_policy,
                             net.read_namespaced_network_policy),
        "RoleBinding": Ops(rbac.list_role_binding_for_all_namespaces,
                           rbac.create_namespaced_role_binding,
                           rbac.replace_namespaced_role_binding,
                           rbac.delete_namespaced_role_binding,
                           rbac.read_namespaced_role_binding),
        "ClusterRole": Ops(rbac.list_cluster_role, rbac.create_cluster_role,
                           rbac.replace_cluster_role, rbac.delete_cluster_role,
                           rbac.read_cluster_role, False),
        "ClusterRoleBinding": Ops(rbac.list_cluster_role_binding,
                                  rbac.create_cluster_role_binding,
                                  rbac.replace_cluster_role_binding,
                                  rbac.delete_cluster_role_binding,
                                  rbac.read_cluster_role_binding, False),
    }
    return table[kind]


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj["kind"], meta.get("namespace") or "", meta["name"])


def _scalar_same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    if isinstance(a, str | int | float) and isinstance(b, str | int | float):
        if str(a) == str(b):
            return True
        try:
            return parse_quantity(str(a)) == parse_quantity(str(b))
        except ValueError:
            return False
    return False


def same(desired: Any, actual: Any) -> bool:
    """Whether `actual` (as read back) holds exactly what `desired` says."""
    if isinstance(desired, dict):
        if not isinstance(actual, dict):
            return False
        for k, v in desired.items():
            if k not in actual or not same(v, actual[k]):
                return False
        return all(not v for k, v in actual.items() if k not in desired)
    if isinstance(desired, list):
        return isinstance(actual, list) and len(desired) == len(actual) and \
            all(same(d, a) for d, a in zip(desired, actual, strict=True))
    return _scalar_same(desired, actual)


def content_same(desired: dict[str, Any], actual: dict[str, Any]) -> bool:
    return all(same(desired.get(f), actual.get(f)) for f in CONTENT[desired["kind"]])
