"""Node-scoped agents on the real apiserver (the NodeRestriction pattern): the node
ServiceAccount, holding the chart's cluster-wide `patch` on nodes and pods, with a token bound
to node A changes node A's GPU labels and inventory (the agent's own `publish`) and
`gpugov.io/allocated` on a pod bound to A (the device plugin's own claim); the apiserver's
ValidatingAdmissionPolicy (`node_scope_policies`) refuses it node B, a pod on node B, any other
pod annotation (`gpugov.io/allocation`), other labels and the spec of its own node; a token of
the same ServiceAccount that is not bound to a node changes nothing, and a token bound to a
pod on node A (what the DaemonSet pod mounts) is scoped to node A."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpugov.k8s import annotations as ann
from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.devcluster.rbac import (
    _token_kubeconfig,
    apply_component_rbac,
    node_token_kubeconfig,
)
from gpugov.k8s.node_policy import (
    NO_CLAIM,
    NODE_FIELDS,
    OTHER_NODE,
    OTHER_POD,
    POD_FIELDS,
    SCHEDULER_FIELDS,
    node_scope_policies,
    scheduler_node_policies,
)
from gpugov.k8s.scheduler.harness import gpu_node, gpu_pod
from gpugov.k8s.webhook.policy import apply_policies, delete_policies
from gpugov.model.devices import DeviceMode
from gpugov.node.agent import AgentConfig, NodeAgent
from gpugov.node.deviceplugin.pods import ApiPodSource
from gpugov.node.nvml.discovery import NodeGpus
from gpugov.node.nvml.source import SharingPolicy

MERGE = "application/merge-patch+json"


class _Source:
    """What `NodeAgent.publish` reads of NVML: no GPUs discovered, one inventory device."""

    node = NodeGpus(())
    sharing = SharingPolicy()

    def inventory(self) -> ann.Inventory:
        return ann.Inventory((ann.InventoryDevice(0, "GPU-0", "A100-SXM4-80GB", 81920,
                                                  DeviceMode.EXCLUSIVE),))


async def _denied(coro) -> str:
    """The apiserver's refusal message (the test fails if the write is allowed)."""
    try:
        await coro
    except ApiException as exc:
        assert exc.status == 403, (exc.status, exc.body)
        return json.loads(exc.body)["message"]
    raise AssertionError("the write was allowed")


def test_node_agent_changes_only_its_own_node_and_pods(k8s_control_plane, tmp_path) -> None:
    cluster = k8s_control_plane
    tag = f"ns{free_port() % 10000}"
    system = f"gpugov-{tag}"  # the node ServiceAccount's namespace: the policy names it
    node_a, node_b = f"{tag}-a", f"{tag}-b"
    policies = node_scope_policies(system, name=f"gpugov-node-scope-{tag}")

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        await apply_policies(cluster.kubeconfig, policies)
        await cluster.acreate_nodes([gpu_node(node_a, 4), gpu_node(node_b, 4)])
        ns = await cluster.unique_namespace("nodescope")
        async with cluster.api() as api:
            core = client.CoreV1Api(api)
            for name, node in (("on-a", node_a), ("on-b", node_b)):
                pod = gpu_pod(name, ns, "gpugov")
                pod["spec"]["nodeName"] = node
                await core.create_namespaced_pod(ns, pod)
        kc_a = await node_token_kubeconfig(cluster.kubeconfig, node_a, system,
                                           tmp_path / "node-a")
        kc_any = await apply_component_rbac(cluster.kubeconfig, "node", system,
                                            tmp_path / "node-unbound")
        # what the DaemonSet pod on node A mounts: a token bound to that pod (the apiserver
        # adds the pod's node to it)
        async with cluster.api() as api:
            agent_pod = await client.CoreV1Api(api).create_namespaced_pod(system, {
                "metadata": {"name": "agent"},
                "spec": {"nodeName": node_a, "serviceAccountName": "gpugov-node",
                         "containers": [{"name": "agent", "image": "gpugov"}]}})
            kc_pod = await _token_kubeconfig(api, "gpugov-node", system, tmp_path / "node-pod",
                                             600, {"kind": "Pod", "apiVersion": "v1",
                                                   "name": "agent",
                                                   "uid": agent_pod.metadata.uid})
        # the policy is enforced by the apiserver a moment after it is created
        for i in range(100):
            try:
                async with cluster.api(kc_a) as api:
                    await client.CoreV1Api(api).patch_node(
                        node_b, {"metadata": {"annotations": {"gpugov-test/probe": f"p{i}"}}},
                        _content_type=MERGE)
                await asyncio.sleep(0.2)
            except ApiException:
                break
        else:
            raise AssertionError("the node-scope policy never took effect")
        # the pods' policy is a second object, loaded on its own: wait for it too (under a
        # loaded apiserver it took effect after the nodes' one)
        for i in range(100):
            try:
                async with cluster.api(kc_a) as api:
                    await client.CoreV1Api(api).patch_namespaced_pod(
                        "on-b", ns, {"metadata": {"annotations": {ann.ALLOCATED: f"p{i}"}}},
                        _content_type=MERGE)
                await asyncio.sleep(0.2)
            except ApiException:
                break
        else:
            raise AssertionError("the node-scope policy for pods never took effect")
        # the apiserver type-checks each policy against its resource's schema: no warnings
        async with cluster.api() as api:
            reg = client.AdmissionregistrationV1Api(api)
            for obj in policies[::2]:
                for _ in range(100):
                    v = await reg.read_validating_admission_policy(obj["metadata"]["name"])
                    if v.status is not None and v.status.type_checking is not None:
                        break
                    await asyncio.sleep(0.2)
                seen[f"type check {obj['metadata']['name']}"] = \
                    v.status.type_checking.expression_warnings if v.status else "no status"
        try:
            async with cluster.api(kc_a) as api:
                core = client.CoreV1Api(api)
                # allowed: its own node's GPU labels and inventory, through the agent itself
                agent = NodeAgent(api, _Source(), AgentConfig(node_a))  # type: ignore[arg-type]
                await agent.publish()
                # allowed: gpugov.io/allocated on a pod bound to it, through the device plugin
                pods = ApiPodSource(api)
                rv = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                      for node in (node_a, node_b) for p in await pods.list_pods(node)}
                seen["claim on-a"] = await pods.patch_annotations(
                    ns, "on-a", rv["on-a"],
                    {ann.ALLOCATED: ann.encode_allocated(["GPU-0"], "2026-01-01T00:00:00Z")})
                seen["node b"] = await _denied(core.patch_node(
                    node_b, {"metadata": {"annotations": {ann.INVENTORY: "{}"}}},
                    _content_type=MERGE))
                seen["pod on b"] = await _denied(pods.patch_annotations(
                    ns, "on-b", rv["on-b"], {ann.ALLOCATED: "x"}))
                seen["allocation on a"] = await _denied(core.patch_namespaced_pod(
                    "on-a", ns, {"metadata": {"annotations": {ann.ALLOCATION: "{}"}}},
                    _content_type=MERGE))
                seen["label on pod a"] = await _denied(core.patch_namespaced_pod(
                    "on-a", ns, {"metadata": {"labels": {"gpugov.io/managed": "no"}}},
                    _content_type=MERGE))
                seen["other label on a"] = await _denied(core.patch_node(
                    node_a, {"metadata": {"labels": {"team": "mine"}}}, _content_type=MERGE))
                seen["taint on a"] = await _denied(core.patch_node(
                    node_a, {"spec": {"unschedulable": True}}, _content_type=MERGE))
            async with cluster.api(kc_pod) as api:
                core = client.CoreV1Api(api)
                await core.patch_node(node_a, {"metadata": {"annotations": {
                    ann.UNSCHEDULABLE_GPUS: "1"}}}, _content_type=MERGE)
                seen["pod token node b"] = await _denied(core.patch_node(
                    node_b, {"metadata": {"annotations": {ann.UNSCHEDULABLE_GPUS: "1"}}},
                    _content_type=MERGE))
            async with cluster.api(kc_any) as api:
                core = client.CoreV1Api(api)
                seen["unbound token"] = await _denied(core.patch_node(
                    node_a, {"metadata": {"annotations": {ann.INVENTORY: "{}"}}},
                    _content_type=MERGE))
                seen["unbound token pod"] = await _denied(core.patch_namespaced_pod(
                    "on-a", ns, {"metadata": {"annotations": {ann.ALLOCATED: "y"}}},
                    _content_type=MERGE))
            async with cluster.api() as api:
                core = client.CoreV1Api(api)
                a = await core.read_node(node_a)
                seen["a labels"] = a.metadata.labels
                seen["a inventory"] = a.metadata.annotations.get(ann.INVENTORY)
                seen["a unschedulable"] = a.metadata.annotations.get(ann.UNSCHEDULABLE_GPUS)
                seen["b inventory"] = (await core.read_node(node_b)).metadata.annotations.get(
                    ann.INVENTORY)
                seen["on-a"] = (await core.read_namespaced_pod("on-a", ns)).metadata.annotations
        finally:
            await delete_policies(cluster.kubeconfig, policies)
            async with cluster.api() as api:
                for n in (node_a, node_b):
                    await client.CoreV1Api(api).delete_node(n)
        return seen

    seen = asyncio.run(main())
    assert [v for k, v in seen.items() if k.startswith("type check")] == [None, None]
    assert seen["claim on-a"] is True
    assert ann.ALLOCATED in seen["on-a"] and ann.ALLOCATION not in seen["on-a"]
    assert seen["a labels"]["nvidia.com/gpu.present"] == "false"
    assert "nvidia.com/gpu.product" not in seen["a labels"]  # a stale GFD label it removed
    assert "team" not in seen["a labels"]
    assert '"uuid":"GPU-0"' in seen["a inventory"].replace(" ", "")
    assert seen["b inventory"] != "{}"
    assert OTHER_NODE in seen["node b"]
    assert seen["a unschedulable"] == "1" and OTHER_NODE in seen["pod token node b"]
    assert OTHER_POD in seen["pod on b"]
    assert POD_FIELDS in seen["allocation on a"] and POD_FIELDS in seen["label on pod a"]
    assert NODE_FIELDS in seen["other label on a"] and NODE_FIELDS in seen["taint on a"]
    assert NO_CLAIM in seen["unbound token"] and NO_CLAIM in seen["unbound token pod"]


def test_scheduler_changes_only_the_mig_requests_annotation_of_a_node(k8s_control_plane,
                                                                      tmp_path) -> None:
    """gpugov's scheduler holds cluster-wide `patch` on nodes (on-demand MIG requests); the
    apiserver's `<name>-scheduler-nodes` policy lets it change `gpugov.io/mig-requests` and
    nothing else: not the inventory the node agent publishes, not labels, not the spec."""
    cluster = k8s_control_plane
    tag = f"sc{free_port() % 10000}"
    system = f"gpugov-{tag}"
    node = f"{tag}-a"
    policies = scheduler_node_policies(system, name=f"gpugov-node-scope-{tag}")

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        await apply_policies(cluster.kubeconfig, policies)
        await cluster.acreate_nodes([gpu_node(node, 4)])
        kc = await apply_component_rbac(cluster.kubeconfig, "scheduler", system,
                                        tmp_path / "scheduler")
        try:
            async with cluster.api(kc) as api:
                core = client.CoreV1Api(api)
                for i in range(100):  # the policy is enforced a moment after it is created
                    try:
                        await core.patch_node(node, {"metadata": {"labels": {"probe": f"p{i}"}}},
                                              _content_type=MERGE)
                        await asyncio.sleep(0.2)
                    except ApiException:
                        break
                else:
                    raise AssertionError("the scheduler node policy never took effect")
                await core.patch_node(node, {"metadata": {"annotations": {
                    ann.MIG_REQUESTS: '{"v":1,"requests":[]}'}}}, _content_type=MERGE)
                seen["inventory"] = await _denied(core.patch_node(
                    node, {"metadata": {"annotations": {ann.INVENTORY: "{}"}}},
                    _content_type=MERGE))
                seen["label"] = await _denied(core.patch_node(
                    node, {"metadata": {"labels": {"nvidia.com/gpu.product": "H100"}}},
                    _content_type=MERGE))
                seen["spec"] = await _denied(core.patch_node(
                    node, {"spec": {"unschedulable": True}}, _content_type=MERGE))
            async with cluster.api() as api:
                n = await client.CoreV1Api(api).read_node(node)
                seen["annotations"] = n.metadata.annotations
                seen["unschedulable"] = n.spec.unschedulable
        finally:
            await delete_policies(cluster.kubeconfig, policies)
            async with cluster.api() as api:
                await client.CoreV1Api(api).delete_node(node)
        return seen

    seen = asyncio.run(main())
    assert seen["annotations"][ann.MIG_REQUESTS] == '{"v":1,"requests":[]}'
    assert seen["annotations"].get(ann.INVENTORY) != "{}"
    assert not seen["unschedulable"]
    for what in ("inventory", "label", "spec"):
        assert SCHEDULER_FIELDS in seen[what], what
