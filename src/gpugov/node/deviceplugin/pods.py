"""How the plugin reads the pods of its node and claims one: the only API-server traffic.

`PodSource` is injected so the plugin can be tested without an API server. Pods are plain
Kubernetes JSON dicts (`metadata`, `spec`, `status`) in both implementations:

- `ApiPodSource`: kubernetes_asyncio; lists pods with the field selector `spec.nodeName=<node>`
  and claims with a PATCH that carries `metadata.resourceVersion`, so the API server refuses it
  with 409 Conflict when the pod changed since it was read (optimistic concurrency, no lock).
- `MemoryPodSource`: the same contract in memory (resourceVersion bumps, 409 on a stale one).
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any, Protocol

Pod = dict[str, Any]


class PodSource(Protocol):
    async def list_pods(self, node: str) -> list[Pod]:
        """Non-terminated and terminated pods bound to `node`."""
        ...

    async def patch_annotations(self, namespace: str, name: str, resource_version: str,
                                annotations: dict[str, str]) -> bool:
        """Set annotations if the pod still has `resource_version`; False on a conflict.

        Raises LookupError when the pod is gone.
        """
        ...


class MemoryPodSource:
    """Pods kept in memory with the API server's resourceVersion rule; for tests and demos."""

    def __init__(self, list_delay_s: float = 0.0) -> None:
        self._pods: dict[tuple[str, str], Pod] = {}
        self._rv = 0
        self.list_delay_s = list_delay_s  # lets concurrent claims interleave in tests
        self.conflicts = 0  # how many conditional patches were refused

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def put(self, pod: Pod) -> Pod:
        """Create or replace a pod (as the scheduler/binder would); returns the stored copy."""
        pod = copy.deepcopy(pod)
        md = pod.setdefault("metadata", {})
        md.setdefault("namespace", "default")
        md.setdefault("annotations", {})
        md.setdefault("uid", f"uid-{md['namespace']}-{md['name']}")
        md.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        md["resourceVersion"] = self._next_rv()
        self._pods[(md["namespace"], md["name"])] = pod
        return copy.deepcopy(pod)

    def get(self, namespace: str, name: str) -> Pod:
        return copy.deepcopy(self._pods[(namespace, name)])

    def delete(self, namespace: str, name: str) -> None:
        del self._pods[(namespace, name)]

    async def list_pods(self, node: str) -> list[Pod]:
        snapshot = [copy.deepcopy(p) for p in self._pods.values()
                    if p.get("spec", {}).get("nodeName") == node]
        if self.list_delay_s:
            await asyncio.sleep(self.list_delay_s)
        return snapshot

    async def patch_annotations(self, namespace: str, name: str, resource_version: str,
                                annotations: dict[str, str]) -> bool:
        await asyncio.sleep(0)
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise LookupError(f"pod {namespace}/{name} not found")
        if pod["metadata"]["resourceVersion"] != resource_version:
            self.conflicts += 1
            return False
        pod["metadata"].setdefault("annotations", {}).update(annotations)
        pod["metadata"]["resourceVersion"] = self._next_rv()
        return True


class ApiPodSource:
    """Pods from the API server through kubernetes_asyncio (`api_client` is an ApiClient)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes_asyncio import client

        self._core = client.CoreV1Api(api_client)

    async def list_pods(self, node: str) -> list[Pod]:
        resp = await self._core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False)
        body = json.loads(await resp.read())
        return list(body.get("items") or [])

    async def patch_annotations(self, namespace: str, name: str, resource_version: str,
                                annotations: dict[str, str]) -> bool:
        from kubernetes_asyncio.client.exceptions import ApiException

        body = {"metadata": {"resourceVersion": resource_version, "annotations": annotations}}
        try:
            await self._core.patch_namespaced_pod(name, namespace, body,
                                                  _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status == 404:
                raise LookupError(f"pod {namespace}/{name} not found") from None
            raise
        return True
