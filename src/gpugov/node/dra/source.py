"""The DRA plugin's two inputs from the API: ResourceClaims (read when the kubelet prepares
one) and the node's inventory (the node agent's `gpugov.io/inventory`, or a static file)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpugov.k8s.annotations import INVENTORY, AnnotationError, Inventory, decode_inventory

log = logging.getLogger(__name__)


class KubeClaimSource:
    """ResourceClaims through the API (resource.k8s.io/v1), and what the QoS class of a
    claim's pods needs: their priority class and gpugov's PriorityPolicy of that name."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.sched = client.SchedulingV1Api(api)

    async def preemptible(self, claim: dict[str, Any]) -> bool | None:
        """True when any pod the claim is reserved for has a preemptible priority class (as
        gpugov's scheduler reads it: `translate.priority_classes`), False when all are
        non-preemptible, None when it cannot be read (logged; counts as preemptible)."""
        from gpugov.k8s.scheduler.translate import priority_classes
        from gpugov.node.dra.prepare import reserved_pods

        ns = str((claim.get("metadata") or {}).get("namespace") or "")
        pods = reserved_pods(claim)
        if not pods:
            return None
        out = False
        try:
            for name, uid in pods:
                listed = await self.core.list_namespaced_pod(
                    ns, field_selector=f"metadata.name={name}")
                pod = next((x for x in listed.items if x.metadata.uid == uid), None)
                cls = pod.spec.priority_class_name if pod is not None else None
                if not cls:
                    return True  # no class: Kubernetes' priority 0, best-effort
                pc = await self.sched.read_priority_class(cls)
                try:
                    policy = [await self.custom.get_cluster_custom_object(
                        "gpugov.io", "v1alpha1", "prioritypolicies", cls)]
                except ApiException as e:
                    if e.status != 404:
                        raise
                    policy = []
                classes, problems = priority_classes(
                    [{"metadata": {"name": cls}, "value": pc.value}], policy)
                if problems:
                    log.warning("claim %s/%s: %s", ns, claim["metadata"].get("name"), problems)
                    return None
                out = out or classes[0].preemptible
        except ApiException as e:
            log.warning("claim %s/%s: the pods' priority class cannot be read (HTTP %s): its "
                        "QoS class is best-effort", ns, claim["metadata"].get("name"), e.status)
            return None
        return out

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise


class NodeInventory:
    """The node's inventory, refreshed from its annotation every `interval` seconds; the last
    readable one is kept while the annotation is missing or unreadable (logged)."""

    def __init__(self, api: client.ApiClient, node: str, interval: float = 10.0) -> None:
        self.core, self.node, self.interval = client.CoreV1Api(api), node, interval
        self.current = Inventory(())
        self._task: asyncio.Task | None = None

    def __call__(self) -> Inventory:
        return self.current

    async def refresh(self) -> None:
        node = await self.core.read_node(self.node)
        text = (node.metadata.annotations or {}).get(INVENTORY)
        try:
            self.current = decode_inventory(text)
        except AnnotationError as e:
            log.warning("node %s: keeping the last inventory: %s", self.node, e)

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            with contextlib.suppress(Exception):
                await self.refresh()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def static_inventory(path: Path) -> Inventory:
    """An inventory file in the annotation's format (tests and demos)."""
    return decode_inventory(path.read_text())
