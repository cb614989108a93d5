"""The DRA kubelet plugin's reading of a claim's QoS class, through its own code
(`KubeClaimSource.preemptible`) under the chart's node ServiceAccount on the real apiserver:
the pods' priority class and gpugov's PriorityPolicy of that name, as gpugov's scheduler reads
them. A pod of a non-preemptible class is Guaranteed; no class, a class without a policy, or
one preemptible pod among several is best-effort."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import install_crds
from gpugov.node.dra.source import KubeClaimSource


def _claim(ns: str, *pods: tuple[str, str]) -> dict:
    return {"metadata": {"namespace": ns, "name": "c"},
            "status": {"reservedFor": [{"resource": "pods", "name": n, "uid": u}
                                       for n, u in pods]}}


def test_the_plugin_reads_the_pods_class_under_the_node_identity(k8s_control_plane) -> None:
    cluster = k8s_control_plane
    asyncio.run(install_crds(cluster.kubeconfig))

    async def run() -> dict[str, bool | None]:
        ns = await cluster.unique_namespace("dra-qos")
        async with cluster.api() as api:
            sched, custom = client.SchedulingV1Api(api), client.CustomObjectsApi(api)
            core = client.CoreV1Api(api)
            for name, policy in (("dra-guaranteed", False), ("dra-plain", None)):
                try:
                    await sched.create_priority_class({"metadata": {"name": name},
                                                       "value": 100})
                    if policy is not None:
                        await custom.create_cluster_custom_object(
                            "gpugov.io", "v1alpha1", "prioritypolicies", {
                                "apiVersion": "gpugov.io/v1alpha1", "kind": "PriorityPolicy",
                                "metadata": {"name": name}, "spec": {"preemptible": policy}})
                except ApiException as e:
                    if e.status != 409:
                        raise
            uids = {}
            for pod, cls in (("serve", "dra-guaranteed"), ("plain", "dra-plain"),
                             ("none", None)):
                spec = {"containers": [{"name": "c", "image": "x"}],
                        "schedulerName": "nobody"}
                if cls:
                    spec["priorityClassName"] = cls
                made = await core.create_namespaced_pod(ns, {"metadata": {"name": pod},
                                                              "spec": spec})
                uids[pod] = made.metadata.uid
        async with api_client(await cluster.component_kubeconfig("node")) as api:
            src = KubeClaimSource(api)
            return {
                "guaranteed": await src.preemptible(_claim(ns, ("serve", uids["serve"]))),
                "no policy": await src.preemptible(_claim(ns, ("plain", uids["plain"]))),
                "no class": await src.preemptible(_claim(ns, ("none", uids["none"]))),
                "one of two": await src.preemptible(_claim(ns, ("serve", uids["serve"]),
                                                           ("none", uids["none"]))),
                "not reserved": await src.preemptible(_claim(ns)),
            }

    assert asyncio.run(run()) == {"guaranteed": False, "no policy": True, "no class": True,
                                  "one of two": True, "not reserved": None}
