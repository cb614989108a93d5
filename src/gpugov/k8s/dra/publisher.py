"""Keep the `gpu.gpugov.io` ResourceSlices and DeviceClasses in the API (`gpugov dra publish`).

One controller for the cluster: it watches Nodes, reads each node's `gpugov.io/inventory`
(written by the node agent) and writes that node's pool with `slices.node_slices`. A slice
carries the digest of its content, so an unchanged inventory writes nothing and a changed one
bumps the pool's generation (the scheduler then ignores the older slices). A node whose
inventory is gone or unreadable loses its slices — nothing is offered that gpugov cannot
describe — and the reason is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

from gpugov.k8s.annotations import INVENTORY, AnnotationError, Inventory, decode_inventory
from gpugov.k8s.dra.slices import (
    ADMITTED,
    DRA_LABEL,
    DRIVER,
    REFUSED,
    Features,
    device_classes,
    node_slices,
)
from gpugov.k8s.scheduler.kube import Kube, WatchExpired, message

log = logging.getLogger(__name__)

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
DIGEST = "gpugov.io/dra-digest"


async def probe_features(kube: Kube, governed: bool = False, node: str | None = None
                         ) -> Features:
    """What the API server keeps of the alpha fields gpugov uses (a dry-run create: a
    disabled gate drops the field silently, so the answer shows whether it is on).

    `governed`: the operator wants kube-scheduler's allocations governed (binding
    conditions); RuntimeError naming the gate when the API server drops them. `node`: probe
    as that node's slice (what a node-scoped identity may write, `slice_policy.py`)."""
    where = node or "gpugov-feature-probe"
    probe = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": "gpugov-feature-probe"},
             "spec": {"driver": DRIVER, "nodeName": where,
                      "pool": {"name": where, "generation": 0, "resourceSliceCount": 1},
                      "devices": [{"name": "probe", "allowMultipleAllocations": True,
                                   "bindingConditions": [ADMITTED],
                                   "bindingFailureConditions": [REFUSED],
                                   "capacity": {"memory": {"value": "1Gi"}}}]}}
    status, doc = await kube.request("POST", SLICES, probe, query=[("dryRun", "All")])
    if status not in (200, 201):
        raise RuntimeError(f"probing the API server's DRA features: HTTP {status}: "
                           f"{message(doc)}")
    dev = ((doc.get("spec") or {}).get("devices") or [{}])[0]
    if governed and not dev.get("bindingConditions"):
        raise RuntimeError(
            "the API server drops ResourceSlice bindingConditions: turn on the feature gate "
            "DRADeviceBindingConditions (alpha in 1.34) on kube-apiserver and kube-scheduler "
            "to govern kube-scheduler's allocations, or run without --govern")
    return Features(consumable_capacity=bool(dev.get("allowMultipleAllocations")),
                    governed=governed)


def _digest(spec: dict[str, Any]) -> str:
    body = {k: v for k, v in spec.items() if k != "pool"}
    body["count"] = spec["pool"]["resourceSliceCount"]
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


class SlicePublisher:
    """Publishes every node's slices and the DeviceClasses."""

    def __init__(self, kube: Kube, features: Features) -> None:
        self.kube, self.features = kube, features
        #: node -> the reason its slices were withdrawn ("" = published)
        self.problems: dict[str, str] = {}

    async def ensure_classes(self) -> None:
        """Create or update gpugov's DeviceClasses (server-side apply, gpugov's field owner)."""
        for obj in device_classes(self.features):
            name = obj["metadata"]["name"]
            status, doc = await self.kube.request(
                "PATCH", f"{CLASSES}/{name}", obj,
                query=[("fieldManager", "gpugov-dra"), ("force", "true")],
                content_type="application/apply-patch+yaml")
            if status not in (200, 201):
                raise RuntimeError(f"DeviceClass {name}: HTTP {status}: {message(doc)}")

    async def _existing(self, node: str) -> list[dict[str, Any]]:
        status, doc = await self.kube.request("GET", SLICES, query=[
            ("fieldSelector", f"spec.nodeName={node},spec.driver={DRIVER}")])
        if status != 200:
            raise RuntimeError(f"listing ResourceSlices of {node}: HTTP {status}: "
                               f"{message(doc)}")
        return list(doc.get("items") or [])

    async def sync_node(self, node_obj: dict[str, Any], inv: Inventory | None = None) -> str:
        """Bring one node's slices in line with its inventory (`inv`, else the node's
        annotation); returns what was done."""
        meta = node_obj.get("metadata") or {}
        node = str(meta.get("name") or "")
        text = (meta.get("annotations") or {}).get(INVENTORY)
        existing = await self._existing(node)
        if (meta.get("labels") or {}).get(DRA_LABEL) != "true":
            why = (f"the node has no label {DRA_LABEL}=true (its GPUs are the device "
                   "plugin's; a GPU is served on one path only)")
            self.problems[node] = why
            return await self._withdraw(node, existing, why)
        if inv is None and text is None:
            self.problems.pop(node, None)
            return await self._withdraw(node, existing, "no inventory")
        if inv is None:
            try:
                inv = decode_inventory(text)
            except AnnotationError as e:
                self.problems[node] = str(e)
                log.warning("node %s: slices withdrawn: %s", node, e)
                return await self._withdraw(node, existing, str(e))
        self.problems.pop(node, None)
        gen = max((int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0)
                   for s in existing), default=0)
        want = node_slices(node, inv, self.features, gen)
        digests = [_digest(s["spec"]) for s in want]
        have = {s["metadata"]["name"]: s for s in existing}
        if len(have) == len(want) and all(
                (have.get(s["metadata"]["name"], {}).get("metadata", {}).get("annotations")
                 or {}).get(DIGEST) == d for s, d in zip(want, digests, strict=True)):
            return "unchanged"
        want = node_slices(node, inv, self.features, gen + 1)
        for obj, d in zip(want, digests, strict=True):
            name = obj["metadata"]["name"]
            obj["metadata"]["annotations"] = {DIGEST: d}
            if name in have:
                obj["metadata"]["resourceVersion"] = have[name]["metadata"]["resourceVersion"]
                status, doc = await self.kube.request("PUT", f"{SLICES}/{name}", obj)
            else:
                status, doc = await self.kube.request("POST", SLICES, obj)
            if status not in (200, 201):
                raise RuntimeError(f"ResourceSlice {name}: HTTP {status}: {message(doc)}")
        names = {o["metadata"]["name"] for o in want}
        for name in have:
            if name not in names:
                await self.kube.request("DELETE", f"{SLICES}/{name}")
        return "published"

    async def _withdraw(self, node: str, existing: list[dict[str, Any]], why: str) -> str:
        for s in existing:
            await self.kube.request("DELETE", f"{SLICES}/{s['metadata']['name']}")
        return f"withdrawn: {why}" if existing else f"none: {why}"

    async def remove_node(self, node: str) -> None:
        await self._withdraw(node, await self._existing(node), "node deleted")

    async def run(self, stop: asyncio.Event) -> None:
        """List+watch Nodes and gpugov's ResourceSlices until `stop`. A slice deleted by
        someone else is published again: the kubelet deletes every slice of its node when it
        starts (so that nothing is offered before the driver is back), and the driver must
        publish after that."""
        await self.ensure_classes()
        tasks = [asyncio.create_task(self._watch_nodes(stop)),
                 asyncio.create_task(self._watch_slices(stop))]
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_nodes(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                nodes, rv = await self.kube.list_all("/api/v1/nodes")
                for n in nodes:
                    await self._safe_sync(n)
                async for etype, obj in self.kube.watch("/api/v1/nodes", rv):
                    if etype == "DELETED":
                        await self.remove_node(obj["metadata"]["name"])
                    elif etype in ("ADDED", "MODIFIED"):
                        await self._safe_sync(obj)
            except WatchExpired:
                continue
            except (TimeoutError, RuntimeError, OSError) as e:
                log.warning("DRA publisher: %s; retrying", e)
                await asyncio.sleep(1.0)

    async def _watch_slices(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                _, rv = await self.kube.list_all(SLICES)
                async for etype, obj in self.kube.watch(SLICES, rv):
                    spec = obj.get("spec") or {}
                    if etype != "DELETED" or spec.get("driver") != DRIVER:
                        continue
                    node = spec.get("nodeName")
                    status, node_obj = await self.kube.request("GET", f"/api/v1/nodes/{node}")
                    if status == 200:
                        await self._safe_sync(node_obj)
            except WatchExpired:
                continue
            except (TimeoutError, RuntimeError, OSError) as e:
                log.warning("DRA publisher (slices): %s; retrying", e)
                await asyncio.sleep(1.0)

    async def run_node(self, node: str, stop: asyncio.Event, interval: float = 5.0,
                       inventory: Callable[[], Inventory] | None = None) -> None:
        """Publish one node's slices (what its kubelet plugin does) every `interval` seconds
        until `stop`: an unchanged inventory writes nothing, and slices the kubelet wiped at
        its start come back within one interval."""
        while not stop.is_set():
            status, obj = await self.kube.request("GET", f"/api/v1/nodes/{node}")
            if status == 200:
                await self._safe_sync(obj, inventory() if inventory is not None else None)
            else:
                log.warning("DRA publisher: node %s: HTTP %s: %s", node, status, message(obj))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    async def _safe_sync(self, node_obj: dict[str, Any], inv: Inventory | None = None
                         ) -> None:
        try:
            await self.sync_node(node_obj, inv)
        except (TimeoutError, RuntimeError, OSError, KeyError, ValueError) as e:
            log.warning("DRA publisher: node %s: %s",
                        (node_obj.get("metadata") or {}).get("name"), e)
