"""The chart's RBAC against the real apiserver, with real ServiceAccount tokens: each component
may do what it needs and nothing else (no Secrets, no deletes, its own Lease only)."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import install_crds
from gpugov.observe.cluster import read_cluster, read_queues

NS = "gpugov-rbac"


async def _status(coro) -> int:
    try:
        await coro
        return 200
    except ApiException as exc:
        return exc.status


def test_components_get_least_privilege(k8s_control_plane):
    cluster = k8s_control_plane
    asyncio.run(install_crds(cluster.kubeconfig))

    async def run() -> dict[str, int]:
        seen: dict[str, int] = {}
        async with api_client(await cluster.component_kubeconfig("scheduler", NS)) as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            coord = client.CoordinationV1Api(api)
            seen["sched list secrets"] = await _status(core.list_secret_for_all_namespaces())
            seen["sched read secret"] = await _status(core.read_namespaced_secret("x", NS))
            seen["sched list pods"] = await _status(core.list_pod_for_all_namespaces())
            seen["sched list nodes"] = await _status(core.list_node())
            seen["sched delete pod"] = await _status(core.delete_namespaced_pod("x", NS))
            seen["sched list queues"] = await _status(
                custom.list_cluster_custom_object("gpugov.io", "v1alpha1", "queues"))
            seen["sched create lease here"] = await _status(coord.create_namespaced_lease(
                NS, {"metadata": {"name": "gpugov-scheduler"}, "spec": {}}))
            seen["sched list leases here"] = await _status(coord.list_namespaced_lease(NS))
            seen["sched get lease elsewhere"] = await _status(
                coord.read_namespaced_lease("gpugov-scheduler", "kube-system"))
            seen["sched create clusterrole"] = await _status(
                client.RbacAuthorizationV1Api(api).create_cluster_role(
                    {"metadata": {"name": "escalate"}, "rules": []}))
        async with api_client(await cluster.component_kubeconfig("webhook", NS)) as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            seen["webhook list tenants"] = await _status(
                custom.list_cluster_custom_object("gpugov.io", "v1alpha1", "tenants"))
            seen["webhook read namespace"] = await _status(core.read_namespace("default"))
            seen["webhook list pods"] = await _status(core.list_pod_for_all_namespaces())
        async with api_client(await cluster.component_kubeconfig("node", NS)) as api:
            core = client.CoreV1Api(api)
            seen["node list pods"] = await _status(core.list_pod_for_all_namespaces())
            seen["node list secrets"] = await _status(core.list_secret_for_all_namespaces())
            seen["node delete node"] = await _status(core.delete_node("x"))
        async with api_client(await cluster.component_kubeconfig("reconciler", NS)) as api:
            core = client.CoreV1Api(api)
            # what `gpugov reconcile` reads, through its own code, under its own rules
            pods, nodes = await read_cluster(api)
            seen["reconciler reads its views"] = 200 if await read_queues(api) is not None \
                and isinstance(pods, list) and isinstance(nodes, list) else 0
            seen["reconciler list secrets"] = await _status(core.list_secret_for_all_namespaces())
            seen["reconciler patch pod"] = await _status(
                core.patch_namespaced_pod("x", NS, {"metadata": {"labels": {"a": "b"}}}))
        return seen

    assert asyncio.run(run()) == {
        "sched list secrets": 403, "sched read secret": 403, "sched list pods": 200,
        "sched list nodes": 200, "sched delete pod": 403, "sched list queues": 200,
        "sched create lease here": 200, "sched list leases here": 403,
        "sched get lease elsewhere": 403, "sched create clusterrole": 403,
        "webhook list tenants": 200, "webhook read namespace": 200, "webhook list pods": 403,
        "node list pods": 200, "node list secrets": 403, "node delete node": 403,
        "reconciler reads its views": 200, "reconciler list secrets": 403,
        "reconciler patch pod": 403,
    }
