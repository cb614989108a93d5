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
    """ResourceClaims through the API (resource.k8s.io/v1)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)

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
